/* Shared by the guest tests' small libibverbs programs (t-provider-*.sh, t-driver-*.sh compile
 * them; the header is found next to them): open a device by name (and read a GID), bring a QP of one device to
 * RTR or RTS towards a QP of the same device (loopback over GID `gid_index`, whose value is
 * `gid`), wait for a completion. The QP steps return 0 or -1 (errno set by ibv_modify_qp). */
#ifndef ROX_QP_LOOP_H
#define ROX_QP_LOOP_H
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

/* The Q_Key of the UD QPs these programs make. */
#define QP_LOOP_QKEY 0x11111111

/* A context of the device named `name`; NULL (errno set) when there is none or it fails. */
static inline struct ibv_context *open_device_named(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	return ctx;
}

/* A context of the device named `name`, with its port 1's GID `gid_index` in `gid`; NULL, said
 * on stderr, when there is no such device, it fails to open or the GID cannot be read. */
static inline struct ibv_context *open_device_gid(const char *name, int gid_index, union ibv_gid *gid)
{
	struct ibv_context *ctx = open_device_named(name);
	if (!ctx || ibv_query_gid(ctx, 1, gid_index, gid)) {
		fprintf(stderr, "cannot open %s / query GID %d\n", name, gid_index);
		if (ctx)
			ibv_close_device(ctx);
		return NULL;
	}
	return ctx;
}

/* The next completion of `cq` within 10 s: 0 with it in `wc`, or -1 when none came. */
static inline int next_wc(struct ibv_cq *cq, struct ibv_wc *wc)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (ibv_poll_cq(cq, 1, wc) > 0)
			return 0;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (t.tv_sec - t0.tv_sec < 10);
	return -1;
}

/* One completion within 10 s: its status, or -1. */
static inline int wait_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	return next_wc(cq, &wc) ? -1 : (int)wc.status;
}

/* Whether a QP of `type` responds to requests: RC and an XRC target (XRC_RECV). */
static inline int qp_loop_responds(enum ibv_qp_type type)
{
	return type == IBV_QPT_RC || type == IBV_QPT_XRC_RECV;
}

/* INIT, then RTR towards `dest_qpn`: all a receiving QP needs (an XRC target's one use). UD
 * takes the Q_Key; others grant remote writes, but an XRC initiator, which is not asked for
 * any (ib_core requires the access flags all the same). */
static inline int to_rtr(struct ibv_qp *qp, enum ibv_qp_type type, uint32_t dest_qpn,
			 const union ibv_gid *gid, int gid_index)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1 };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (type == IBV_QPT_UD) {
		a.qkey = QP_LOOP_QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = type == IBV_QPT_XRC_SEND ? 0 : IBV_ACCESS_REMOTE_WRITE;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	if (ibv_modify_qp(qp, &a, mask))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	mask = IBV_QP_STATE;
	if (type != IBV_QPT_UD) {
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = dest_qpn;
		a.rq_psn = 0;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = *gid;
		a.ah_attr.grh.sgid_index = gid_index;
		a.ah_attr.grh.hop_limit = 1;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (qp_loop_responds(type)) {
			a.max_dest_rd_atomic = 1;
			a.min_rnr_timer = 12;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
	}
	return ibv_modify_qp(qp, &a, mask);
}

/* RTR as `to_rtr`, then RTS; an RC QP or XRC initiator retries 7 times (RNR too) after an ACK
 * timeout of 4.096 us * 2^14. */
static inline int to_rts(struct ibv_qp *qp, enum ibv_qp_type type, uint32_t dest_qpn,
			 const union ibv_gid *gid, int gid_index)
{
	if (to_rtr(qp, type, dest_qpn, gid, gid_index))
		return -1;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .sq_psn = 0 };
	int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return ibv_modify_qp(qp, &a, mask);
}
#endif
