/* Shared by the guest tests' small libibverbs programs (t-provider-*.sh compile them with
 * -I tests/guest): bring a QP of one device to RTS towards a QP of the same device (loopback
 * over GID `gid_index`, whose value is `gid`). Returns 0 or -1 (errno set by ibv_modify_qp). */
#ifndef ROX_QP_LOOP_H
#define ROX_QP_LOOP_H
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

/* The Q_Key of the UD QPs these programs make. */
#define QP_LOOP_QKEY 0x11111111

/* One completion within 10 s: its status, or -1. */
static inline int wait_wc(struct ibv_cq *cq)
{
	struct timespec t0, t;
	struct ibv_wc wc;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (ibv_poll_cq(cq, 1, &wc) > 0)
			return wc.status;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (t.tv_sec - t0.tv_sec < 10);
	return -1;
}

static inline int to_rts(struct ibv_qp *qp, enum ibv_qp_type type, uint32_t dest_qpn,
		  const union ibv_gid *gid, int gid_index)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1 };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (type == IBV_QPT_UD) {
		a.qkey = QP_LOOP_QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
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
		if (type == IBV_QPT_RC) {
			a.max_dest_rd_atomic = 1;
			a.min_rnr_timer = 12;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
	}
	if (ibv_modify_qp(qp, &a, mask))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (type == IBV_QPT_RC) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return ibv_modify_qp(qp, &a, mask);
}
#endif
