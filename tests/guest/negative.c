/* Raw uverbs negative tests for rox.ko. The driver udata layouts come from rox-uapi.h, which
 * rox-uapi-header generates from uapi/src/udata.rs (the one definition, in Rust). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_ioctl_verbs.h>

#include "rox-uapi.h" /* the driver udata structs, generated from uapi/src/udata.rs */

enum { PAGE = 4096, CQE_SIZE = ROX_CQE_SIZE, SQ_WQE_SIZE = ROX_SQ_WQE_SIZE, RQ_WQE_SIZE = ROX_RQ_WQE_SIZE };
enum { QPS_RESET = 0, QPS_INIT = 1, QPS_RTS = 3, QPT_RC = 2 };
enum { QP_STATE = 1 << 0, QP_ACCESS_FLAGS = 1 << 3, QP_PKEY_INDEX = 1 << 4, QP_PORT = 1 << 5 };
enum { SRQ_MAX_WR = 1 << 0, SRQ_LIMIT = 1 << 1 }; /* enum ib_srq_attr_mask */

static int fd, failures, checks;

/* One legacy write() command: header, core request, driver request; response buffer given
 * through the request's `response` field. Returns 0 or errno. */
static int cmd(uint32_t op, void *req, size_t req_len, const void *drv, size_t drv_len,
	       size_t resp_len)
{
	char buf[1024];
	struct ib_uverbs_cmd_hdr hdr = {
		.command = op,
		.in_words = (sizeof(hdr) + req_len + drv_len) / 4,
		.out_words = resp_len / 4,
	};
	memcpy(buf, &hdr, sizeof(hdr));
	memcpy(buf + sizeof(hdr), req, req_len);
	if (drv_len)
		memcpy(buf + sizeof(hdr) + req_len, drv, drv_len);
	return write(fd, buf, sizeof(hdr) + req_len + drv_len) < 0 ? errno : 0;
}

static void expect(const char *what, int got, int want)
{
	checks++;
	if (got == want) {
		printf("ok   %-58s %s\n", what, want ? strerror(want) : "success");
	} else {
		printf("FAIL %-58s got %s, want %s\n", what, got ? strerror(got) : "success",
		       want ? strerror(want) : "success");
		failures++;
	}
}

static void *ring(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) { perror("mmap"); exit(2); }
	memset(p, 0, bytes);
	return p;
}

/* An address with nothing mapped behind it. */
static uint64_t unmapped(void)
{
	void *p = ring(PAGE);
	munmap(p, PAGE);
	return (uintptr_t)p;
}

struct cq_resp { struct ib_uverbs_create_cq_resp core; struct rox_create_cq_resp drv; };
static int create_cq(uint32_t cqe, uint32_t vector, const void *drv, size_t drv_len, uint32_t *handle)
{
	struct cq_resp resp = {0};
	struct ib_uverbs_create_cq c = { .response = (uintptr_t)&resp, .cqe = cqe,
		.comp_vector = vector, .comp_channel = -1 };
	int err = cmd(IB_USER_VERBS_CMD_CREATE_CQ, &c, sizeof(c), drv, drv_len, sizeof(resp));
	if (!err && handle) *handle = resp.core.cq_handle;
	return err;
}

struct qp_resp { struct ib_uverbs_create_qp_resp core; struct rox_create_qp_resp drv; };
static struct qp_resp last_qp; /* the response of the last create_qp */
static int create_qp_wrs(uint32_t pd, uint32_t cq, uint32_t send_wr, uint32_t recv_wr,
			 uint32_t send_sge, const struct rox_create_qp_req *drv, uint32_t *handle)
{
	memset(&last_qp, 0, sizeof(last_qp));
	struct ib_uverbs_create_qp c = { .response = (uintptr_t)&last_qp, .pd_handle = pd,
		.send_cq_handle = cq, .recv_cq_handle = cq, .max_send_wr = send_wr,
		.max_recv_wr = recv_wr, .max_send_sge = send_sge, .max_recv_sge = 1, .qp_type = QPT_RC };
	int err = cmd(IB_USER_VERBS_CMD_CREATE_QP, &c, sizeof(c), drv, sizeof(*drv), sizeof(last_qp));
	if (!err && handle) *handle = last_qp.core.qp_handle;
	return err;
}
static int create_qp(uint32_t pd, uint32_t cq, uint32_t send_wr, uint32_t send_sge,
		     const struct rox_create_qp_req *drv, uint32_t *handle)
{
	return create_qp_wrs(pd, cq, send_wr, 16, send_sge, drv, handle);
}

static int modify_qp(uint32_t qp, uint32_t mask, uint8_t state, uint8_t port, uint16_t pkey)
{
	struct ib_uverbs_modify_qp m = { .qp_handle = qp, .attr_mask = mask, .qp_state = state,
		.port_num = port, .pkey_index = pkey };
	return cmd(IB_USER_VERBS_CMD_MODIFY_QP, &m, sizeof(m), NULL, 0, 0);
}

/* RESET -> INIT asking for the given QP access flags. */
static int modify_qp_access(uint32_t qp, uint32_t mask, uint32_t access)
{
	struct ib_uverbs_modify_qp m = { .qp_handle = qp, .attr_mask = mask, .qp_state = QPS_INIT,
		.port_num = 1, .qp_access_flags = access };
	return cmd(IB_USER_VERBS_CMD_MODIFY_QP, &m, sizeof(m), NULL, 0, 0);
}

/* Address handles: rox.ko hands back the destination MAC ib_core resolved (librox puts it in
 * UD WQEs). A multicast GID maps to its multicast MAC; rox_0's own GID (`gid_arg`) resolves to
 * its netdev's MAC (`mac_arg`). */
static void check_ah(uint32_t pd, const char *gid_arg, const char *mac_arg)
{
	struct { struct ib_uverbs_create_ah_resp core; struct rox_create_ah_resp drv; } ah_resp;
	struct ib_uverbs_create_ah ca = { .response = (uintptr_t)&ah_resp, .pd_handle = pd,
		.attr = { .is_global = 1, .port_num = 1, .grh = { .sgid_index = 0, .hop_limit = 64 } } };
	static const uint8_t mcast_gid[16] = { [10] = 0xff, [11] = 0xff, 224, 0, 0, 1 };
	static const uint8_t mcast_mac[6] = { 0x01, 0x00, 0x5e, 0x00, 0x00, 0x01 };
	memcpy(ca.attr.grh.dgid, mcast_gid, 16);
	expect("create_ah: no room for the driver response",
	       cmd(IB_USER_VERBS_CMD_CREATE_AH, &ca, sizeof(ca), NULL, 0, sizeof(ah_resp.core)), EINVAL);
	memset(&ah_resp, 0xa5, sizeof(ah_resp));
	expect("create_ah 224.0.0.1", cmd(IB_USER_VERBS_CMD_CREATE_AH, &ca, sizeof(ca), NULL, 0, sizeof(ah_resp)), 0);
	expect("create_ah 224.0.0.1: dmac 01:00:5e:00:00:01, hop limit 64",
	       memcmp(ah_resp.drv.dmac, mcast_mac, 6) || ah_resp.drv.hop_limit != 64 || ah_resp.drv.reserved ? EINVAL : 0, 0);
	uint8_t own_gid[16], own_mac[6];
	for (int i = 0; i < 16; i++) sscanf(gid_arg + 2 * i + i / 2, "%2hhx", &own_gid[i]);
	sscanf(mac_arg, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &own_mac[0], &own_mac[1], &own_mac[2],
	       &own_mac[3], &own_mac[4], &own_mac[5]);
	memcpy(ca.attr.grh.dgid, own_gid, 16);
	memset(&ah_resp, 0xa5, sizeof(ah_resp));
	expect("create_ah to rox_0's own GID 0", cmd(IB_USER_VERBS_CMD_CREATE_AH, &ca, sizeof(ca), NULL, 0, sizeof(ah_resp)), 0);
	printf("     dmac %02x:%02x:%02x:%02x:%02x:%02x (netdev %s)\n", ah_resp.drv.dmac[0], ah_resp.drv.dmac[1],
	       ah_resp.drv.dmac[2], ah_resp.drv.dmac[3], ah_resp.drv.dmac[4], ah_resp.drv.dmac[5], mac_arg);
	expect("create_ah to rox_0's own GID: dmac is its netdev's MAC",
	       memcmp(ah_resp.drv.dmac, own_mac, 6) ? EINVAL : 0, 0);
}

/* Memory regions in PD `pd`: bad input refused, on-demand rules. */
static void check_mr(uint32_t pd)
{
	struct ib_uverbs_reg_mr_resp mr_resp;
	struct ib_uverbs_reg_mr rm = { .response = (uintptr_t)&mr_resp, .start = unmapped(),
		.length = PAGE, .hca_va = 0x10000, .pd_handle = pd, .access_flags = IB_UVERBS_ACCESS_LOCAL_WRITE };
	expect("reg_mr over unmapped memory", cmd(IB_USER_VERBS_CMD_REG_MR, &rm, sizeof(rm), NULL, 0, sizeof(mr_resp)), EFAULT);
	rm.start = (uintptr_t)ring(4 * PAGE);
	rm.access_flags = IB_UVERBS_ACCESS_REMOTE_WRITE;
	expect("reg_mr: remote write without local write", cmd(IB_USER_VERBS_CMD_REG_MR, &rm, sizeof(rm), NULL, 0, sizeof(mr_resp)), EINVAL);
	rm.access_flags = IB_UVERBS_ACCESS_LOCAL_WRITE | IB_UVERBS_ACCESS_ZERO_BASED;
	expect("reg_mr: access flag the device lacks (zero based)", cmd(IB_USER_VERBS_CMD_REG_MR, &rm, sizeof(rm), NULL, 0, sizeof(mr_resp)), EOPNOTSUPP);
	rm.access_flags = IB_UVERBS_ACCESS_LOCAL_WRITE | IB_UVERBS_ACCESS_FLUSH_PERSISTENT;
	expect("reg_mr: FLUSH_PERSISTENT (no persistent memory)", cmd(IB_USER_VERBS_CMD_REG_MR, &rm, sizeof(rm), NULL, 0, sizeof(mr_resp)), EOPNOTSUPP);
	rm.access_flags = IB_UVERBS_ACCESS_LOCAL_WRITE;
	rm.pd_handle = 0xdead;
	expect("reg_mr: bad PD handle", cmd(IB_USER_VERBS_CMD_REG_MR, &rm, sizeof(rm), NULL, 0, sizeof(mr_resp)), ENOENT);
	rm.pd_handle = pd;
	expect("reg_mr 4 pages", cmd(IB_USER_VERBS_CMD_REG_MR, &rm, sizeof(rm), NULL, 0, sizeof(mr_resp)), 0);
	/* On-demand paging: nothing is pinned at registration, so unmapped memory registers (an
	 * access would fail at fault time); no implicit regions; no huge pages. */
	struct ib_uverbs_reg_mr odp = rm;
	odp.access_flags = IB_UVERBS_ACCESS_LOCAL_WRITE | IB_UVERBS_ACCESS_ON_DEMAND;
	odp.start = unmapped();
	odp.hca_va = odp.start;
	expect("reg_mr on demand over unmapped memory (left for close)", cmd(IB_USER_VERBS_CMD_REG_MR, &odp, sizeof(odp), NULL, 0, sizeof(mr_resp)), 0);
	odp.start = 0;
	odp.hca_va = 0;
	odp.length = UINT64_MAX;
	expect("reg_mr: implicit on-demand region", cmd(IB_USER_VERBS_CMD_REG_MR, &odp, sizeof(odp), NULL, 0, sizeof(mr_resp)), EINVAL);
	odp = rm;
	odp.access_flags = IB_UVERBS_ACCESS_LOCAL_WRITE | IB_UVERBS_ACCESS_ON_DEMAND | IB_UVERBS_ACCESS_HUGETLB;
	expect("reg_mr: on demand with huge pages", cmd(IB_USER_VERBS_CMD_REG_MR, &odp, sizeof(odp), NULL, 0, sizeof(mr_resp)), EOPNOTSUPP);
}

/* Memory windows in PD `pd`: bad input refused, a stale handle. */
static void check_mw(uint32_t pd)
{
	uint64_t junk = 0x5a5a5a5a;
	struct ib_uverbs_alloc_mw_resp mw_resp;
	struct ib_uverbs_alloc_mw am = { .response = (uintptr_t)&mw_resp, .pd_handle = pd, .mw_type = 3 };
	expect("alloc_mw: type 3", cmd(IB_USER_VERBS_CMD_ALLOC_MW, &am, sizeof(am), NULL, 0, sizeof(mw_resp)), EINVAL);
	am.mw_type = 2;
	expect("alloc_mw: unexpected non-zero driver input", cmd(IB_USER_VERBS_CMD_ALLOC_MW, &am, sizeof(am), &junk, sizeof(junk), sizeof(mw_resp)), EOPNOTSUPP);
	am.pd_handle = 0xdead;
	expect("alloc_mw: bad PD handle", cmd(IB_USER_VERBS_CMD_ALLOC_MW, &am, sizeof(am), NULL, 0, sizeof(mw_resp)), ENOENT);
	am.pd_handle = pd;
	expect("alloc_mw type 2", cmd(IB_USER_VERBS_CMD_ALLOC_MW, &am, sizeof(am), NULL, 0, sizeof(mw_resp)), 0);
	struct ib_uverbs_dealloc_mw dm = { .mw_handle = mw_resp.mw_handle };
	expect("dealloc_mw", cmd(IB_USER_VERBS_CMD_DEALLOC_MW, &dm, sizeof(dm), NULL, 0, 0), 0);
	expect("dealloc_mw again (stale handle)", cmd(IB_USER_VERBS_CMD_DEALLOC_MW, &dm, sizeof(dm), NULL, 0, 0), ENOENT);
	am.mw_type = 1;
	expect("alloc_mw type 1 (left for close)", cmd(IB_USER_VERBS_CMD_ALLOC_MW, &am, sizeof(am), NULL, 0, sizeof(mw_resp)), 0);
}

/* Completion queues: bad creation and resize input refused; returns a CQ of 128 CQEs. */
static uint32_t check_cq(void)
{
	void *cq_ring = ring(64 * CQE_SIZE < PAGE ? PAGE : 64 * CQE_SIZE);
	struct rox_create_cq_req cq_req = { .buf_addr = (uintptr_t)cq_ring, .log_depth = 6 };
	uint32_t cq;
	expect("create_cq: driver request too short", create_cq(64, 0, &cq_req, 8, NULL), EINVAL);
	cq_req.log_depth = 0;
	expect("create_cq: ring depth below the minimum", create_cq(1, 0, &cq_req, sizeof(cq_req), NULL), EINVAL);
	cq_req.log_depth = 30;
	expect("create_cq: ring depth above the maximum", create_cq(64, 0, &cq_req, sizeof(cq_req), NULL), EINVAL);
	cq_req.log_depth = 6;
	expect("create_cq: more CQEs than the ring holds", create_cq(65, 0, &cq_req, sizeof(cq_req), NULL), EINVAL);
	expect("create_cq: zero CQEs", create_cq(0, 0, &cq_req, sizeof(cq_req), NULL), EINVAL);
	expect("create_cq: completion vector out of range", create_cq(64, 99, &cq_req, sizeof(cq_req), NULL), EINVAL);
	cq_req.buf_addr = (uintptr_t)cq_ring + 8;
	expect("create_cq: unaligned ring", create_cq(64, 0, &cq_req, sizeof(cq_req), NULL), EINVAL);
	cq_req.buf_addr = unmapped();
	expect("create_cq: ring in unmapped memory", create_cq(64, 0, &cq_req, sizeof(cq_req), NULL), EFAULT);
	cq_req.buf_addr = (uintptr_t)cq_ring;
	expect("create_cq 64", create_cq(64, 0, &cq_req, sizeof(cq_req), &cq), 0);
	struct ib_uverbs_resize_cq_resp rc_resp = {0};
	struct ib_uverbs_resize_cq rc = { .response = (uintptr_t)&rc_resp, .cq_handle = cq, .cqe = 128 };
	struct rox_resize_cq_req rc_req = { .buf_addr = (uintptr_t)ring(128 * CQE_SIZE), .log_depth = 7 };
	expect("resize_cq: no new ring in udata", cmd(IB_USER_VERBS_CMD_RESIZE_CQ, &rc, sizeof(rc), NULL, 0, sizeof(rc_resp)), EINVAL);
	rc_req.log_depth = 30;
	expect("resize_cq: ring depth above the maximum", cmd(IB_USER_VERBS_CMD_RESIZE_CQ, &rc, sizeof(rc), &rc_req, sizeof(rc_req), sizeof(rc_resp)), EINVAL);
	rc_req.log_depth = 7; rc.cqe = 129;
	expect("resize_cq: more CQEs than the ring holds", cmd(IB_USER_VERBS_CMD_RESIZE_CQ, &rc, sizeof(rc), &rc_req, sizeof(rc_req), sizeof(rc_resp)), EINVAL);
	rc.cqe = 0;
	expect("resize_cq: zero CQEs", cmd(IB_USER_VERBS_CMD_RESIZE_CQ, &rc, sizeof(rc), &rc_req, sizeof(rc_req), sizeof(rc_resp)), EINVAL);
	rc.cqe = 128;
	rc_req.buf_addr = unmapped();
	expect("resize_cq: ring in unmapped memory", cmd(IB_USER_VERBS_CMD_RESIZE_CQ, &rc, sizeof(rc), &rc_req, sizeof(rc_req), sizeof(rc_resp)), EFAULT);
	rc_req.buf_addr = (uintptr_t)ring(128 * CQE_SIZE) + 8;
	expect("resize_cq: unaligned ring", cmd(IB_USER_VERBS_CMD_RESIZE_CQ, &rc, sizeof(rc), &rc_req, sizeof(rc_req), sizeof(rc_resp)), EINVAL);
	rc.cq_handle = 0xdead;
	expect("resize_cq: bad CQ handle", cmd(IB_USER_VERBS_CMD_RESIZE_CQ, &rc, sizeof(rc), &rc_req, sizeof(rc_req), sizeof(rc_resp)), ENOENT);
	rc.cq_handle = cq;
	rc_req.buf_addr = (uintptr_t)ring(128 * CQE_SIZE);
	expect("resize_cq 64 -> 128", cmd(IB_USER_VERBS_CMD_RESIZE_CQ, &rc, sizeof(rc), &rc_req, sizeof(rc_req), sizeof(rc_resp)), 0);
	expect("resize_cq reports 128 CQEs", rc_resp.cqe == 128 ? 0 : EINVAL, 0);
	return cq;
}

/* Queue pairs on `cq`: bad creation and modify input refused; returns an RC QP in INIT. */
static uint32_t check_qp(uint32_t pd, uint32_t cq)
{
	struct rox_create_qp_req qp_req = { .sq_buf_addr = (uintptr_t)ring(16 * SQ_WQE_SIZE),
		.rq_buf_addr = (uintptr_t)ring(16 * RQ_WQE_SIZE), .log_sq_depth = 4, .log_rq_depth = 4 };
	uint32_t qp;
	/* Receive-only and send-only QPs (0 WRs on one queue, as the verbs allow): created with
	 * the smallest ring, and 0 granted for that queue. Left for close. */
	expect("create_qp receive-only (0 send WRs)", create_qp(pd, cq, 0, 1, &qp_req, NULL), 0);
	expect("create_qp receive-only: 0 send WRs granted", last_qp.core.max_send_wr == 0 && last_qp.core.max_recv_wr == 16 ? 0 : EINVAL, 0);
	qp_req.sq_buf_addr = (uintptr_t)ring(16 * SQ_WQE_SIZE);
	qp_req.rq_buf_addr = (uintptr_t)ring(16 * RQ_WQE_SIZE);
	expect("create_qp send-only (0 receive WRs)", create_qp_wrs(pd, cq, 16, 0, 1, &qp_req, NULL), 0);
	expect("create_qp send-only: 0 receive WRs granted", last_qp.core.max_recv_wr == 0 && last_qp.core.max_send_wr == 16 ? 0 : EINVAL, 0);
	qp_req.sq_buf_addr = (uintptr_t)ring(16 * SQ_WQE_SIZE);
	qp_req.rq_buf_addr = (uintptr_t)ring(16 * RQ_WQE_SIZE);
	qp_req.log_rq_depth = 0;
	expect("create_qp send-only without a receive ring", create_qp_wrs(pd, cq, 16, 0, 1, &qp_req, NULL), EINVAL);
	qp_req.log_rq_depth = 4;
	expect("create_qp: more WRs than the ring holds", create_qp(pd, cq, 17, 1, &qp_req, NULL), EINVAL);
	expect("create_qp: too many send SGEs", create_qp(pd, cq, 16, 100, &qp_req, NULL), EINVAL);
	qp_req.log_sq_depth = 20;
	expect("create_qp: ring depth above the maximum", create_qp(pd, cq, 16, 1, &qp_req, NULL), EINVAL);
	qp_req.log_sq_depth = 4;
	expect("create_qp: bad CQ handle", create_qp(pd, 0xdead, 16, 1, &qp_req, NULL), ENOENT);
	qp_req.rq_buf_addr = unmapped();
	expect("create_qp: receive ring in unmapped memory", create_qp(pd, cq, 16, 1, &qp_req, NULL), EFAULT);
	qp_req.rq_buf_addr = (uintptr_t)ring(16 * RQ_WQE_SIZE);
	expect("create_qp RC", create_qp(pd, cq, 16, 1, &qp_req, &qp), 0);
	expect("modify_qp: RESET -> RTS", modify_qp(qp, QP_STATE, QPS_RTS, 0, 0), EINVAL);
	expect("modify_qp: RESET -> INIT without required attributes", modify_qp(qp, QP_STATE, QPS_INIT, 0, 0), EINVAL);
	uint32_t init_mask = QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS;
	expect("modify_qp: port 2", modify_qp(qp, init_mask, QPS_INIT, 2, 0), EINVAL);
	expect("modify_qp: pkey index 1", modify_qp(qp, init_mask, QPS_INIT, 1, 1), EINVAL);
	expect("modify_qp: bad QP handle", modify_qp(0xdead, init_mask, QPS_INIT, 1, 0), ENOENT);
	expect("modify_qp: access flag the device lacks (ZERO_BASED)",
		modify_qp_access(qp, init_mask, IB_UVERBS_ACCESS_REMOTE_WRITE | IB_UVERBS_ACCESS_ZERO_BASED), EOPNOTSUPP);
	expect("modify_qp: undefined access flag", modify_qp_access(qp, init_mask, 1u << 30), EINVAL);
	expect("modify_qp RESET -> INIT", modify_qp(qp, init_mask, QPS_INIT, 1, 0), 0);
	expect("modify_qp: INIT -> RTS", modify_qp(qp, QP_STATE, QPS_RTS, 0, 0), EINVAL);
	return qp;
}

/* Shared receive queues: bad creation and resize input refused, a resize that works. */
static void check_srq(uint32_t pd)
{
	struct { struct ib_uverbs_create_srq_resp core; struct rox_create_srq_resp drv; } srq_resp;
	struct rox_create_srq_req srq_req = { .buf_addr = (uintptr_t)ring(16 * RQ_WQE_SIZE), .log_depth = 4 };
	struct ib_uverbs_create_srq cs = { .response = (uintptr_t)&srq_resp, .pd_handle = pd,
		.max_wr = 0, .max_sge = 1 };
	expect("create_srq: zero WRs", cmd(IB_USER_VERBS_CMD_CREATE_SRQ, &cs, sizeof(cs), &srq_req, sizeof(srq_req), sizeof(srq_resp)), EINVAL);
	cs.max_wr = 16; cs.srq_limit = 17;
	expect("create_srq: limit above max_wr", cmd(IB_USER_VERBS_CMD_CREATE_SRQ, &cs, sizeof(cs), &srq_req, sizeof(srq_req), sizeof(srq_resp)), EINVAL);
	cs.srq_limit = 0;
	expect("create_srq 16", cmd(IB_USER_VERBS_CMD_CREATE_SRQ, &cs, sizeof(cs), &srq_req, sizeof(srq_req), sizeof(srq_resp)), 0);
	uint32_t srq = srq_resp.core.srq_handle;
	struct ib_uverbs_modify_srq ms = { .srq_handle = srq, .attr_mask = SRQ_MAX_WR, .max_wr = 32 };
	struct rox_modify_srq_req rs = { .buf_addr = (uintptr_t)ring(32 * RQ_WQE_SIZE), .log_depth = 5 };
	expect("modify_srq resize: no new ring in udata", cmd(IB_USER_VERBS_CMD_MODIFY_SRQ, &ms, sizeof(ms), NULL, 0, 0), EINVAL);
	rs.log_depth = 30;
	expect("modify_srq resize: ring depth above the maximum", cmd(IB_USER_VERBS_CMD_MODIFY_SRQ, &ms, sizeof(ms), &rs, sizeof(rs), 0), EINVAL);
	rs.log_depth = 5; ms.max_wr = 33;
	expect("modify_srq resize: more WRs than the ring holds", cmd(IB_USER_VERBS_CMD_MODIFY_SRQ, &ms, sizeof(ms), &rs, sizeof(rs), 0), EINVAL);
	ms.max_wr = 32; ms.attr_mask = SRQ_MAX_WR | SRQ_LIMIT; ms.srq_limit = 33;
	expect("modify_srq resize: limit above the new depth", cmd(IB_USER_VERBS_CMD_MODIFY_SRQ, &ms, sizeof(ms), &rs, sizeof(rs), 0), EINVAL);
	ms.attr_mask = SRQ_MAX_WR; ms.srq_limit = 0;
	rs.buf_addr = unmapped();
	expect("modify_srq resize: ring in unmapped memory", cmd(IB_USER_VERBS_CMD_MODIFY_SRQ, &ms, sizeof(ms), &rs, sizeof(rs), 0), EFAULT);
	rs.buf_addr = (uintptr_t)ring(32 * RQ_WQE_SIZE) + 64;
	expect("modify_srq resize: unaligned ring", cmd(IB_USER_VERBS_CMD_MODIFY_SRQ, &ms, sizeof(ms), &rs, sizeof(rs), 0), EINVAL);
	ms.attr_mask = 1u << 7;
	expect("modify_srq: unknown attribute", cmd(IB_USER_VERBS_CMD_MODIFY_SRQ, &ms, sizeof(ms), NULL, 0, 0), EINVAL);
	ms.attr_mask = SRQ_MAX_WR;
	rs.buf_addr = (uintptr_t)ring(32 * RQ_WQE_SIZE);
	expect("modify_srq resize 16 -> 32", cmd(IB_USER_VERBS_CMD_MODIFY_SRQ, &ms, sizeof(ms), &rs, sizeof(rs), 0), 0);
	struct ib_uverbs_query_srq_resp qs_resp = {0};
	struct ib_uverbs_query_srq qs = { .response = (uintptr_t)&qs_resp, .srq_handle = srq };
	expect("query_srq", cmd(IB_USER_VERBS_CMD_QUERY_SRQ, &qs, sizeof(qs), NULL, 0, sizeof(qs_resp)), 0);
	expect("query_srq after resize: max_wr is 32", qs_resp.max_wr == 32 ? 0 : EINVAL, 0);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s /dev/infiniband/uverbsN OWN_GID OWN_MAC\n", argv[0]);
		return 2;
	}
	fd = open(argv[1], O_RDWR);
	if (fd < 0) { perror(argv[1]); return 2; }

	/* --- ucontext */
	struct { struct ib_uverbs_get_context_resp core; struct rox_alloc_ucontext_resp drv; } ctx = {0};
	struct ib_uverbs_get_context gc = { .response = (uintptr_t)&ctx };
	uint64_t junk = 0x5a5a5a5a;
	expect("get_context: driver response buffer too small",
	       cmd(IB_USER_VERBS_CMD_GET_CONTEXT, &gc, sizeof(gc), NULL, 0, sizeof(ctx.core) + 8), EINVAL);
	expect("get_context: unexpected non-zero driver input",
	       cmd(IB_USER_VERBS_CMD_GET_CONTEXT, &gc, sizeof(gc), &junk, sizeof(junk), sizeof(ctx)), EOPNOTSUPP);
	expect("get_context", cmd(IB_USER_VERBS_CMD_GET_CONTEXT, &gc, sizeof(gc), NULL, 0, sizeof(ctx)), 0);

	/* --- PD */
	struct ib_uverbs_alloc_pd_resp pd_resp;
	struct ib_uverbs_alloc_pd ap = { .response = (uintptr_t)&pd_resp };
	expect("alloc_pd", cmd(IB_USER_VERBS_CMD_ALLOC_PD, &ap, sizeof(ap), NULL, 0, sizeof(pd_resp)), 0);
	uint32_t pd = pd_resp.pd_handle;

	check_ah(pd, argv[2], argv[3]);
	check_mr(pd);
	check_mw(pd);
	uint32_t cq = check_cq();
	uint32_t qp = check_qp(pd, cq);
	check_srq(pd);

	/* --- destroy */
	struct ib_uverbs_destroy_qp_resp dq_resp;
	struct ib_uverbs_destroy_qp dq = { .response = (uintptr_t)&dq_resp, .qp_handle = qp };
	expect("destroy_qp", cmd(IB_USER_VERBS_CMD_DESTROY_QP, &dq, sizeof(dq), NULL, 0, sizeof(dq_resp)), 0);
	expect("destroy_qp again (stale handle)", cmd(IB_USER_VERBS_CMD_DESTROY_QP, &dq, sizeof(dq), NULL, 0, sizeof(dq_resp)), ENOENT);

	/* The AHs, CQ, SRQ, MR, PD and ucontext go with the file. */
	close(fd);
	printf("%d checks, %d failed\n", checks, failures);
	return failures != 0;
}
