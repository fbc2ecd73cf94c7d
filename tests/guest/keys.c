/* Memory keys cannot be guessed (tests/guest/t-provider-keys.sh builds and runs this).
 * Usage: keys <device> <gid index>. Exit status: number of failed checks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#include "qp-loop.h"

enum { NR_MRS = 32, KEY_INDEX_SHIFT = 8 /* rox_uapi::ids::Key::INDEX_SHIFT */, KEY_PART_VALUES = 256 };
static int failures;

static uint8_t key_part(uint32_t key)
{
	return key & (KEY_PART_VALUES - 1);
}

static void check(const char *what, int ok, const char *detail)
{
	printf("%s %-58s %s\n", ok ? "ok  " : "FAIL", what, detail ? detail : "");
	failures += !ok;
}

static int write_with(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *src, struct ibv_mr *dst, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src->addr, .length = 64, .lkey = src->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED, .wr = { .rdma = { .remote_addr = (uintptr_t)dst->addr,
		.rkey = rkey } } }, *bad;
	int err = ibv_post_send(qp, &wr, &bad);
	return err ? -err : wait_wc(cq);
}

int main(int argc, char **argv)
{
	char detail[160];
	int gid_index;

	if (argc != 3) {
		fprintf(stderr, "usage: %s DEVICE GID_INDEX\n", argv[0]);
		return 2;
	}
	gid_index = atoi(argv[2]);
	union ibv_gid gid;
	struct ibv_context *ctx = open_device_gid(argv[1], gid_index, &gid);
	if (!ctx)
		return 100;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(NR_MRS + 2, 4096);
	struct ibv_mr *mrs[NR_MRS];
	int same_index = 0, distinct = 0, most_steps = 0;
	int seen[KEY_PART_VALUES] = { 0 }, steps[KEY_PART_VALUES] = { 0 };
	for (int i = 0; i < NR_MRS; i++) {
		mrs[i] = ibv_reg_mr(pd, buf + i * 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		if (!mrs[i]) {
			check("register MRs", 0, strerror(errno));
			return 100;
		}
		for (int j = 0; j < i; j++)
			same_index += mrs[j]->rkey >> KEY_INDEX_SHIFT == mrs[i]->rkey >> KEY_INDEX_SHIFT;
		/* The key part (low byte) on its own: consecutive indices already differ by 256. */
		distinct += !seen[key_part(mrs[i]->rkey)]++;
		if (i) {
			int step = ++steps[(uint8_t)(key_part(mrs[i]->rkey) - key_part(mrs[i - 1]->rkey))];
			most_steps = step > most_steps ? step : most_steps;
		}
	}
	printf("     rkeys: %#x %#x %#x %#x %#x %#x %#x %#x ...\n", mrs[0]->rkey, mrs[1]->rkey,
	       mrs[2]->rkey, mrs[3]->rkey, mrs[4]->rkey, mrs[5]->rkey, mrs[6]->rkey, mrs[7]->rkey);
	snprintf(detail, sizeof(detail), "%d of %d", same_index, NR_MRS);
	check("each MR has its own key index", same_index == 0, detail);
	/* 32 random bytes: about 30 distinct values; a constant key part gives 1. */
	snprintf(detail, sizeof(detail), "%d distinct in %d keys", distinct, NR_MRS);
	check("key parts take many values (at least 16)", distinct >= 16, detail);
	/* A constant gives 31 steps of 0, a counter 31 of +1; for random bytes any one step
	 * between neighbours recurs 5 or more times with odds near 1e-5. */
	snprintf(detail, sizeof(detail), "most frequent step %d times in %d", most_steps, NR_MRS - 1);
	check("key parts follow no fixed step (at most 4 alike)", most_steps <= 4, detail);

	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *a = ibv_create_qp(pd, &qa), *b = ibv_create_qp(pd, &qa);
	struct ibv_qp *a2 = ibv_create_qp(pd, &qa), *b2 = ibv_create_qp(pd, &qa);
	if (!cq || !a || !b || !a2 || !b2 || to_rts(a, IBV_QPT_RC, b->qp_num, &gid, gid_index) ||
	    to_rts(b, IBV_QPT_RC, a->qp_num, &gid, gid_index) ||
	    to_rts(a2, IBV_QPT_RC, b2->qp_num, &gid, gid_index) ||
	    to_rts(b2, IBV_QPT_RC, a2->qp_num, &gid, gid_index)) {
		check("two connected RC QP pairs", 0, strerror(errno));
		return 100;
	}
	struct ibv_mr *src = mrs[0], *dst = mrs[1];
	memset(src->addr, 0x5a, 64);
	int st = write_with(a, cq, src, dst, dst->rkey);
	snprintf(detail, sizeof(detail), "%s", st >= 0 ? ibv_wc_status_str(st) : "no completion");
	check("RDMA WRITE with the MR's rkey", st == IBV_WC_SUCCESS && ((char *)dst->addr)[0] == 0x5a, detail);

	dst = mrs[2];
	uint32_t stale = (dst->rkey & ~0xffu) | ((dst->rkey + 1) & 0xff);
	st = write_with(a2, cq, src, dst, stale);
	snprintf(detail, sizeof(detail), "rkey %#x instead of %#x: %s", stale, dst->rkey,
		 st >= 0 ? ibv_wc_status_str(st) : "no completion");
	check("RDMA WRITE, right index, other key part: REM_ACCESS_ERR",
	      st == IBV_WC_REM_ACCESS_ERR && ((char *)dst->addr)[0] == 0, detail);

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_qp(a2);
	ibv_destroy_qp(b2);
	ibv_destroy_cq(cq);
	for (int i = 0; i < NR_MRS; i++)
		ibv_dereg_mr(mrs[i]);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("%s: %d failed\n", argv[1], failures);
	return failures;
}
