// SPDX-License-Identifier: GPL-2.0
/* Checks of bad input (issue 11): error completions, guard pages intact. */
#include "rox_kverbs_test.h"

/*
 * Whether a 64-byte RDMA WRITE of `fill` bytes from `lb` on a's QP `qp` through `mr`'s key
 * completed and landed at the start of `tb`'s data.
 */
static bool write_lands(struct ib_qp *qp, struct side *a, struct buf *lb, struct ib_mr *mr,
			struct buf *tb, u64 wr_id, u8 fill)
{
	struct ib_wc wc;
	int ret;

	memset(data_of(lb), fill, 64);
	buf_sync_dev(lb);
	ret = rdma_op(qp, IB_WR_RDMA_WRITE, wr_id, data_dma(lb), 64, a->pd->local_dma_lkey,
		      mr->iova, mr->rkey);
	ret = ret ? ret : wait_wr(a->cq, wr_id, &wc);
	buf_sync_cpu(tb);
	return !ret && !memchr_inv(data_of(tb), fill, 64);
}

/*
 * SEND_WITH_INV from a to b naming an unknown rkey and `foreign_rkey` (another PD's): the
 * sender gets an error completion and so does b's receive (into `snap`), each on a fresh pair.
 */
static void check_send_with_bad_inv(struct side *a, struct side *b, struct buf *lb,
				    struct buf *snap, u32 foreign_rkey)
{
	u32 keys[2] = { 0x00fffe00 | 0x42, foreign_rkey };
	const char *what[2] = { "an unknown", "another PD's" };
	struct pair p;
	struct ib_wc wc;
	int ret, k;

	for (k = 0; k < 2; k++) {
		struct ib_sge sge = { .addr = data_dma(lb), .length = 8,
				      .lkey = a->pd->local_dma_lkey };
		struct ib_send_wr wr = { .wr_id = 60 + k, .opcode = IB_WR_SEND_WITH_INV,
					 .sg_list = &sge, .num_sge = 1 };
		int rret;

		if (pair_up(&p, a, b, NULL, NULL)) {
			SETUP_FAILED("bad: RC pair for SEND_WITH_INV %d", k);
			break;
		}
		post_recv(p.qb, 70 + k, data_dma(snap), PAGE_SIZE, b->pd->local_dma_lkey);
		wr.ex.invalidate_rkey = keys[k];
		ret = post_send(p.qa, &wr);
		ret = ret ? ret : wait_wr(a->cq, 60 + k, &wc);
		rret = wait_wr(b->cq, 70 + k, NULL);
		CHECK(ret > 0 && rret != 0,
		      "bad: SEND_WITH_INV of %s rkey %#x -> sender status %d, receiver status %d",
		      what[k], keys[k], ret, rret);
		pair_down(&p, a, b);
	}
}

/* The bad input of issue 11. */
void check_bad_input(struct side *a, struct side *b)
{
	struct pair p, p2;
	struct buf tb = {}, tb2 = {}, lb = {}, snap = {};
	struct ib_mr *mr = NULL, *mr2 = NULL;
	struct ib_pd *pd2;
	struct scatterlist sg;
	struct ib_wc wc;
	int ret, n;

	pd2 = ib_alloc_pd(b->dev, 0);
	if (IS_ERR(pd2)) {
		SETUP_FAILED("bad: second PD: %ld", PTR_ERR(pd2));
		return;
	}
	if (buf_alloc(&tb, b->dev) || buf_alloc(&tb2, b->dev) || buf_alloc(&lb, a->dev) ||
	    buf_alloc(&snap, b->dev))
		goto out;

	/* A page list beyond the MR's capacity: ib_map_mr_sg maps only what fits. */
	mr = ib_alloc_mr(b->pd, IB_MR_TYPE_MEM_REG, 2);
	if (IS_ERR(mr)) {
		CHECK(0, "bad: ib_alloc_mr(2)");
		mr = NULL;
		goto out;
	}
	sg_init_table(&sg, 1);
	sg_dma_address(&sg) = data_dma(&tb);
	sg_dma_len(&sg) = NPAGES * PAGE_SIZE;
	n = ib_map_mr_sg(mr, &sg, 1, NULL, PAGE_SIZE);
	CHECK(n < 1 || mr->length <= 2 * PAGE_SIZE,
	      "bad: ib_map_mr_sg of %d pages into a 2-page MR maps %llu bytes (returns %d)", NPAGES,
	      mr->length, n);
	CHECK(IS_ERR(ib_alloc_mr(b->pd, IB_MR_TYPE_MEM_REG,
				 b->dev->attrs.max_fast_reg_page_list_len + 1)),
	      "bad: ib_alloc_mr beyond max_fast_reg_page_list_len refused");

	/* A REG_MR whose pages do not cover its length: error completion, key stays invalid. */
	if (pair_up(&p, a, b, NULL, NULL)) {
		SETUP_FAILED("bad: RC pair for the short REG_MR");
		goto out;
	}
	sg_dma_len(&sg) = 2 * PAGE_SIZE;
	n = ib_map_mr_sg(mr, &sg, 1, NULL, PAGE_SIZE);
	mr->length = NPAGES * PAGE_SIZE; /* claims more than the 2 pages mapped */
	ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey));
	{
		struct ib_reg_wr wr = { .wr = { .wr_id = 50, .opcode = IB_WR_REG_MR },
					.mr = mr, .key = mr->rkey, .access = RW_ACCESS };

		ret = post_send(p.qb, &wr.wr);
		ret = ret ? ret : wait_wr(b->cq, 50, &wc);
		CHECK(ret > 0, "bad: REG_MR with a page list shorter than its length -> status %d (MW_BIND_ERR %d)",
		      ret, IB_WC_MW_BIND_ERR);
	}
	memcpy(data_of(&snap), data_of(&tb), NPAGES * PAGE_SIZE);
	ret = rdma_op(p.qa, IB_WR_RDMA_WRITE, 51, data_dma(&lb), 64, a->pd->local_dma_lkey,
		      mr->iova, mr->rkey);
	ret = ret ? ret : wait_wr(a->cq, 51, &wc);
	buf_sync_cpu(&tb);
	CHECK(ret > 0 && !memcmp(data_of(&snap), data_of(&tb), NPAGES * PAGE_SIZE) && guards_ok(&tb),
	      "bad: WRITE through the refused registration's key -> status %d, nothing written", ret);
	pair_down(&p, a, b);

	/* Another PD's key: mr2 in pd2 (b), registered through a QP of pd2. */
	mr2 = ib_alloc_mr(pd2, IB_MR_TYPE_MEM_REG, NPAGES);
	if (IS_ERR(mr2)) {
		SETUP_FAILED("bad: ib_alloc_mr in the second PD: %ld", PTR_ERR(mr2));
		mr2 = NULL;
		goto out;
	}
	if (pair_up(&p2, a, b, pd2, NULL)) {
		SETUP_FAILED("bad: RC pair in the second PD");
		goto out;
	}
	ret = fast_reg(p2.qb, b->cq, mr2, &tb2, NPAGES, RW_ACCESS);
	CHECK(ret == 0, "bad: fast registration in a second PD (status %d)", ret);
	if (pair_up(&p, a, b, NULL, NULL)) {
		SETUP_FAILED("bad: RC pair for LOCAL_INV of another PD's key");
		pair_down(&p2, a, b);
		goto out;
	}
	ret = local_inv(p.qb, b->cq, mr2->rkey, &wc);
	CHECK(ret > 0, "bad: LOCAL_INV of another PD's key %#x -> status %d", mr2->rkey, ret);
	pair_down(&p, a, b);
	/* mr2 must still be valid: a WRITE through it lands. */
	CHECK(write_lands(p2.qa, a, &lb, mr2, &tb2, 52, 0x5a),
	      "bad: the other PD's key still works after the refused LOCAL_INV");

	/* SEND_WITH_INV of an unknown rkey and of a foreign one (pd2's, to a pd QP). */
	check_send_with_bad_inv(a, b, &lb, &snap, mr2->rkey);
	CHECK(write_lands(p2.qa, a, &lb, mr2, &tb2, 53, 0x6b) && guards_ok(&tb2),
	      "bad: the foreign key survived the SEND_WITH_INV, guards intact");
	pair_down(&p2, a, b);
out:
	if (mr)
		ib_dereg_mr(mr);
	if (mr2)
		ib_dereg_mr(mr2);
	buf_free(&tb);
	buf_free(&tb2);
	buf_free(&lb);
	buf_free(&snap);
	ib_dealloc_pd(pd2);
}
