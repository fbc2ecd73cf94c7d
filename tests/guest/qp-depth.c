/* Usage: qp-depth <device> <gid index>. Exit status: number of failed checks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#include "qp-loop.h"

static int failures;

static void check(const char *type, const char *what, int ok, const char *detail)
{
	printf("%s %-3s %-56s %s\n", ok ? "ok  " : "FAIL", type, what, detail ? detail : "");
	failures += !ok;
}

static struct ibv_qp *create(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type type,
			     uint32_t send_wr, uint32_t recv_wr, struct ibv_qp_cap *granted)
{
	struct ibv_qp_init_attr attr = { .send_cq = cq, .recv_cq = cq, .qp_type = type,
		.cap = { .max_send_wr = send_wr, .max_recv_wr = recv_wr, .max_send_sge = 1,
			 .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &attr);
	*granted = attr.cap;
	return qp;
}

static void one_type(struct ibv_context *ctx, enum ibv_qp_type type, const char *name, int gid_index)
{
	char detail[96];
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, gid_index, &gid)) {
		check(name, "query GID", 0, strerror(errno));
		return;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = pd && buf ? ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!pd || !cq || !mr) {
		check(name, "PD, CQ and MR", 0, strerror(errno));
		return;
	}
	struct ibv_qp_cap cap;
	struct ibv_qp *snd = create(pd, cq, type, 4, 0, &cap);
	snprintf(detail, sizeof(detail), "%s; send %u recv %u", snd ? "created" : strerror(errno),
		 cap.max_send_wr, cap.max_recv_wr);
	check(name, "create send-only QP (max_recv_wr 0)", snd && cap.max_recv_wr == 0 && cap.max_send_wr >= 4, detail);
	struct ibv_qp *rcv = create(pd, cq, type, 0, 4, &cap);
	snprintf(detail, sizeof(detail), "%s; send %u recv %u", rcv ? "created" : strerror(errno),
		 cap.max_send_wr, cap.max_recv_wr);
	check(name, "create receive-only QP (max_send_wr 0)", rcv && cap.max_send_wr == 0 && cap.max_recv_wr >= 4, detail);
	if (!snd || !rcv)
		goto out;

	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	int err = ibv_query_qp(snd, &qa, IBV_QP_CAP, &qi);
	check(name, "query send-only QP: max_recv_wr 0", !err && qi.cap.max_recv_wr == 0, err ? strerror(err) : NULL);
	err = ibv_query_qp(rcv, &qa, IBV_QP_CAP, &qi);
	check(name, "query receive-only QP: max_send_wr 0", !err && qi.cap.max_send_wr == 0, err ? strerror(err) : NULL);

	err = to_rts(snd, type, rcv->qp_num, &gid, gid_index) || to_rts(rcv, type, snd->qp_num, &gid, gid_index);
	check(name, "both QPs to RTS", !err, err ? strerror(errno) : NULL);
	if (err)
		goto out;

	struct ibv_sge send_sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_sge recv_sge = { .addr = (uintptr_t)buf + 2048, .length = 2048, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &recv_sge, .num_sge = 1 }, *bad_rwr;
	struct ibv_send_wr swr = { .wr_id = 1, .sg_list = &send_sge, .num_sge = 1,
		.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad_swr;
	struct ibv_ah *ah = NULL;
	if (type == IBV_QPT_UD) {
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
			.grh = { .dgid = gid, .sgid_index = gid_index, .hop_limit = 1 } };
		ah = ibv_create_ah(pd, &aa);
		check(name, "create AH to GID", ah != NULL, ah ? NULL : strerror(errno));
		if (!ah)
			goto out;
		swr.wr.ud.ah = ah;
		swr.wr.ud.remote_qpn = rcv->qp_num;
		swr.wr.ud.remote_qkey = QP_LOOP_QKEY;
	}
	err = ibv_post_recv(snd, &rwr, &bad_rwr);
	check(name, "post_recv to the send-only QP: ENOMEM", err == ENOMEM, strerror(err));
	err = ibv_post_send(rcv, &swr, &bad_swr);
	check(name, "post_send from the receive-only QP: ENOMEM", err == ENOMEM, strerror(err));
	err = ibv_post_recv(rcv, &rwr, &bad_rwr);
	check(name, "post_recv to the receive-only QP", !err, strerror(err));
	err = ibv_post_send(snd, &swr, &bad_swr);
	check(name, "post_send from the send-only QP", !err, strerror(err));

	/* Both completions within 10 s. */
	int got_send = 0, got_recv = 0, bad = 0;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n > 0) {
			if (wc.status != IBV_WC_SUCCESS) {
				printf("     completion wr_id %lu: %s\n", (unsigned long)wc.wr_id,
				       ibv_wc_status_str(wc.status));
				bad++;
			}
			got_send += wc.wr_id == 1;
			got_recv += wc.wr_id == 2;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((!got_send || !got_recv) && !bad && t.tv_sec - t0.tv_sec < 10);
	snprintf(detail, sizeof(detail), "send %d recv %d errors %d", got_send, got_recv, bad);
	check(name, "SEND send-only -> receive-only completes", got_send == 1 && got_recv == 1 && !bad, detail);
	if (ah)
		ibv_destroy_ah(ah);
out:
	if (snd)
		ibv_destroy_qp(snd);
	if (rcv)
		ibv_destroy_qp(rcv);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	free(buf);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s DEVICE GID_INDEX\n", argv[0]);
		return 2;
	}
	struct ibv_context *ctx = open_device_named(argv[1]);
	if (!ctx) {
		fprintf(stderr, "cannot open %s\n", argv[1]);
		return 100;
	}
	int gid_index = atoi(argv[2]);
	one_type(ctx, IBV_QPT_RC, "RC", gid_index);
	one_type(ctx, IBV_QPT_UC, "UC", gid_index);
	one_type(ctx, IBV_QPT_UD, "UD", gid_index);
	ibv_close_device(ctx);
	printf("%s: %d failed\n", argv[1], failures);
	return failures;
}
