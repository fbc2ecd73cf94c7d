/* Known RoCE traffic for the counter checks (tests/guest/t-driver-counters.sh builds and runs
 * this): one RC QP pair of one device, connected to each other over GID <gid index>
 * (same-device loopback, so every packet is both sent and received by the device).
 * Usage: counters <device> <gid index> <write|read|atomic|badkey> <count> <size>
 *   write/read: <count> RDMA WRITEs / READs of <size> bytes, one at a time;
 *   atomic:     <count> fetch-and-adds (size ignored);
 *   badkey:     <count> WRITEs of <size> bytes, each on a fresh QP pair with an rkey of the
 *               right index and another key part: each must fail with REM_ACCESS_ERR.
 * Exit status 0 when every operation completed as expected. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#include "qp-loop.h"

/* The QPs keep qp-loop.h's ACK timeout (4.096 us * 2^14, 67 ms, timed by the device on the
 * host): a retransmission would add packets and show in local_ack_timeout_err. */
enum { BUF_SIZE = 1 << 16 };

struct pair {
	struct ibv_qp *req, *resp;
};

static int connect_pair(struct ibv_pd *pd, struct ibv_cq *cq, const union ibv_gid *gid,
			int gid_index, struct pair *p)
{
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_attr a = { .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		IBV_ACCESS_REMOTE_ATOMIC };
	p->req = ibv_create_qp(pd, &qa);
	p->resp = ibv_create_qp(pd, &qa);
	if (!p->req || !p->resp || to_rts(p->req, IBV_QPT_RC, p->resp->qp_num, gid, gid_index) ||
	    to_rts(p->resp, IBV_QPT_RC, p->req->qp_num, gid, gid_index))
		return -1;
	/* qp-loop.h grants remote writes only; RTS to RTS may change the access flags. */
	if (ibv_modify_qp(p->req, &a, IBV_QP_ACCESS_FLAGS) ||
	    ibv_modify_qp(p->resp, &a, IBV_QP_ACCESS_FLAGS))
		return -1;
	return 0;
}

static void destroy_pair(struct pair *p)
{
	ibv_destroy_qp(p->req);
	ibv_destroy_qp(p->resp);
}

static int post_one(struct ibv_qp *qp, enum ibv_wr_opcode opcode, struct ibv_mr *local,
		    uint32_t size, struct ibv_mr *remote, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local->addr, .length = size, .lkey = local->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = opcode,
		.send_flags = IBV_SEND_SIGNALED }, *bad;
	if (opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		sge.length = 8;
		wr.wr.atomic.remote_addr = (uintptr_t)remote->addr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 1;
	} else {
		wr.wr.rdma.remote_addr = (uintptr_t)remote->addr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(qp, &wr, &bad);
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: %s <device> <gid index> <write|read|atomic|badkey> <count> <size>\n", argv[0]);
		return 2;
	}
	const char *op = argv[3];
	int gid_index = atoi(argv[2]), count = atoi(argv[4]);
	uint32_t size = strtoul(argv[5], NULL, 0);
	if (size > BUF_SIZE || count < 1) {
		fprintf(stderr, "size at most %d, count at least 1\n", BUF_SIZE);
		return 2;
	}
	union ibv_gid gid;
	struct ibv_context *ctx = open_device_gid(argv[1], gid_index, &gid);
	if (!ctx)
		return 1;
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	void *src_buf = aligned_alloc(4096, BUF_SIZE), *dst_buf = aligned_alloc(4096, BUF_SIZE);
	struct ibv_mr *src = cq ? ibv_reg_mr(pd, src_buf, BUF_SIZE, access) : NULL;
	struct ibv_mr *dst = src ? ibv_reg_mr(pd, dst_buf, BUF_SIZE, access) : NULL;
	struct pair p;
	if (!dst || connect_pair(pd, cq, &gid, gid_index, &p)) {
		fprintf(stderr, "setup failed: %s\n", strerror(errno));
		return 1;
	}
	enum ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
	int expect = IBV_WC_SUCCESS, bad_key = !strcmp(op, "badkey");
	if (!strcmp(op, "read"))
		opcode = IBV_WR_RDMA_READ;
	else if (!strcmp(op, "atomic"))
		opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	else if (bad_key)
		expect = IBV_WC_REM_ACCESS_ERR;
	else if (strcmp(op, "write")) {
		fprintf(stderr, "unknown operation %s\n", op);
		return 2;
	}
	/* Right index, other key part: a key the device must refuse. */
	uint32_t rkey = bad_key ? (dst->rkey & ~0xffu) | ((dst->rkey + 1) & 0xff) : dst->rkey;
	for (int i = 0; i < count; i++) {
		if (bad_key && i > 0) {
			/* The failed WRITE left both QPs in the error state: a fresh pair. */
			destroy_pair(&p);
			if (connect_pair(pd, cq, &gid, gid_index, &p)) {
				fprintf(stderr, "reconnect failed: %s\n", strerror(errno));
				return 1;
			}
		}
		int err = post_one(p.req, opcode, src, size, dst, rkey);
		int st = err ? -1 : wait_wc(cq);
		if (st != expect) {
			fprintf(stderr, "%s %d of %d: %s (expected %s)\n", op, i + 1, count,
				err ? strerror(err) : st < 0 ? "no completion" : ibv_wc_status_str(st),
				ibv_wc_status_str(expect));
			return 1;
		}
	}
	destroy_pair(&p);
	ibv_dereg_mr(src);
	ibv_dereg_mr(dst);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("%s: %d x %s of %u bytes as expected\n", argv[1], count, op, size);
	return 0;
}
