// SPDX-License-Identifier: GPL-2.0
/*
 * Checks of device attributes, inline SEND and SEND_WITH_IMM, and fast registration with the
 * peer's RDMA WRITE/READ/atomics, LOCAL_INV, SEND_WITH_INV and ib_inc_rkey.
 */
#include "rox_kverbs_test.h"

void check_attrs(struct side *a)
{
	struct ib_device_attr *at = &a->dev->attrs;

	CHECK(at->device_cap_flags & IB_DEVICE_MEM_MGT_EXTENSIONS,
	      "attrs: IB_DEVICE_MEM_MGT_EXTENSIONS advertised");
	CHECK(at->max_fast_reg_page_list_len >= NPAGES,
	      "attrs: max_fast_reg_page_list_len %u", at->max_fast_reg_page_list_len);
	CHECK(at->max_send_sge > 1 && at->max_recv_sge > 1, "attrs: max_send_sge %d max_recv_sge %d",
	      at->max_send_sge, at->max_recv_sge);
	CHECK(a->dev->num_comp_vectors > 1, "attrs: %d completion vectors",
	      a->dev->num_comp_vectors);
	CHECK(at->max_srq > 0 && at->atomic_cap != IB_ATOMIC_NONE, "attrs: max_srq %d atomic_cap %d",
	      at->max_srq, at->atomic_cap);
}

void check_send_inline(struct side *a, struct side *b)
{
	static const char msg[] = "inline from the kernel's own memory";
	struct pair p;
	struct buf rb = {};
	struct ib_send_wr wr = {};
	struct ib_sge sge;
	struct ib_wc wc;
	char *src;
	int ret;

	if (pair_up(&p, a, b, NULL, NULL)) {
		CHECK(0, "send: RC pair rox_0<->%s connects", peer);
		return;
	}
	CHECK(p.qa->qp_type == IB_QPT_RC, "send: RC pair rox_0 qpn %u <-> %s qpn %u connected",
	      p.qa->qp_num, peer, p.qb->qp_num);
	src = kmalloc(64, GFP_KERNEL);
	if (!src) {
		SETUP_FAILED("send: 64-byte source buffer");
		goto out;
	}
	if (buf_alloc(&rb, b->dev))
		goto out;
	memcpy(src, msg, sizeof(msg));
	post_recv(p.qb, 1, data_dma(&rb), PAGE_SIZE, b->pd->local_dma_lkey);
	post_recv(p.qb, 2, data_dma(&rb) + 64, PAGE_SIZE, b->pd->local_dma_lkey);
	sge.addr = (u64)(uintptr_t)src;
	sge.length = sizeof(msg);
	sge.lkey = 0;
	wr.wr_id = 10;
	wr.opcode = IB_WR_SEND;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IB_SEND_INLINE;
	ret = post_send(p.qa, &wr);
	CHECK(!ret && !wait_wr(a->cq, 10, NULL), "send: inline SEND of %zu bytes posted and completed",
	      sizeof(msg));
	/* The source may change right after the post: the bytes were copied into the WQE. */
	memset(src, 0, 64);
	ret = wait_wr(b->cq, 1, &wc);
	buf_sync_cpu(&rb);
	CHECK(!ret && wc.byte_len == sizeof(msg) && !memcmp(data_of(&rb), msg, sizeof(msg)) &&
		      wc.opcode == IB_WC_RECV && wc.qp == p.qb,
	      "send: received %u bytes, equal to the inline source", wc.byte_len);
	/* SEND_WITH_IMM */
	memcpy(src, msg, sizeof(msg));
	wr.wr_id = 11;
	wr.opcode = IB_WR_SEND_WITH_IMM;
	wr.ex.imm_data = cpu_to_be32(0x12345678);
	wr.send_flags = 0;
	sge.length = 16;
	/* Not inline: from a DMA-mapped buffer of a's, through a's local DMA lkey. */
	{
		struct buf sb = {};

		if (!buf_alloc(&sb, a->dev)) {
			sge.addr = data_dma(&sb);
			sge.lkey = a->pd->local_dma_lkey;
			ret = post_send(p.qa, &wr);
			ret = ret ? ret : wait_wr(a->cq, 11, NULL);
			ret = ret ? ret : wait_wr(b->cq, 2, &wc);
			CHECK(!ret && (wc.wc_flags & IB_WC_WITH_IMM) &&
				      wc.ex.imm_data == cpu_to_be32(0x12345678) && wc.byte_len == 16,
			      "send: SEND_WITH_IMM delivers imm 0x%x", be32_to_cpu(wc.ex.imm_data));
			buf_free(&sb);
		}
	}
	/* Inline larger than the QP's limit is refused at post time. */
	{
		const struct ib_send_wr *bad;
		struct ib_sge big = { .addr = (u64)(uintptr_t)src, .length = 4096 };
		struct ib_send_wr w = { .wr_id = 12, .opcode = IB_WR_SEND, .sg_list = &big,
					.num_sge = 1, .send_flags = IB_SEND_INLINE | IB_SEND_SIGNALED };
		char *huge = kmalloc(4096, GFP_KERNEL);

		if (huge) {
			big.addr = (u64)(uintptr_t)huge;
			ret = ib_post_send(p.qa, &w, &bad);
			CHECK(ret == -EINVAL && bad == &w,
			      "send: inline of 4096 bytes (over max_inline_data) -> %d", ret);
			kfree(huge);
		}
	}
out:
	kfree(src);
	buf_free(&rb);
	pair_down(&p, a, b);
}

/* Inline RDMA WRITE from a kernel virtual address into `mr` (registered over `tb`) through
 * `rkey`, then WRITE_WITH_IMM, whose immediate b's receive (into `rb`) reports. */
static void check_inline_and_imm(struct pair *p, struct side *a, struct side *b, struct ib_mr *mr,
				 u32 rkey, struct buf *tb, struct buf *lb, struct buf *rb)
{
	struct ib_wc wc;
	int ret;
	static const char pat[] = "inline RDMA WRITE through a fast-registered rkey";
	struct ib_sge sge = { .addr = (u64)(uintptr_t)pat, .length = sizeof(pat) };
	struct ib_rdma_wr w = {
		.wr = { .wr_id = 24, .opcode = IB_WR_RDMA_WRITE, .sg_list = &sge,
			.num_sge = 1, .send_flags = IB_SEND_INLINE },
		.remote_addr = mr->iova + 200, .rkey = rkey,
	};

	ret = post_send(p->qa, &w.wr);
	ret = ret ? ret : wait_wr(a->cq, 24, &wc);
	buf_sync_cpu(tb);
	CHECK(!ret && !memcmp(data_of(tb) + 200, pat, sizeof(pat)),
	      "fastreg: inline RDMA WRITE of %zu bytes lands (status %d)", sizeof(pat), ret);
	post_recv(p->qb, 25, data_dma(rb), PAGE_SIZE, b->pd->local_dma_lkey);
	sge.addr = data_dma(lb);
	sge.lkey = a->pd->local_dma_lkey;
	sge.length = 32;
	w.wr.wr_id = 26;
	w.wr.opcode = IB_WR_RDMA_WRITE_WITH_IMM;
	w.wr.send_flags = 0;
	w.wr.ex.imm_data = cpu_to_be32(0xabcd);
	ret = post_send(p->qa, &w.wr);
	ret = ret ? ret : wait_wr(a->cq, 26, NULL);
	ret = ret ? ret : wait_wr(b->cq, 25, &wc);
	CHECK(!ret && wc.opcode == IB_WC_RECV_RDMA_WITH_IMM && (wc.wc_flags & IB_WC_WITH_IMM) &&
		      wc.ex.imm_data == cpu_to_be32(0xabcd),
	      "fastreg: RDMA WRITE_WITH_IMM completes IB_WC_RECV_RDMA_WITH_IMM imm 0x%x (status %d)",
	      be32_to_cpu(wc.ex.imm_data), ret);
}

/* FETCH_AND_ADD and CMP_AND_SWP through `rkey` on `mr` (registered over `tb`) at offset 64
 * (8-byte aligned), their results into `lb`. */
static void check_atomics(struct pair *p, struct side *a, struct ib_mr *mr, u32 rkey,
			  struct buf *tb, struct buf *lb)
{
	struct ib_sge sge = { .addr = data_dma(lb), .length = 8, .lkey = a->pd->local_dma_lkey };
	struct ib_atomic_wr aw = {
		.wr = { .wr_id = 22, .opcode = IB_WR_ATOMIC_FETCH_AND_ADD, .sg_list = &sge,
			.num_sge = 1 },
		.remote_addr = mr->iova + 64, .rkey = rkey, .compare_add = 5,
	};
	u64 *res = (u64 *)data_of(lb), *target = (u64 *)(data_of(tb) + 64);
	struct ib_wc wc;
	int ret;

	*target = 100;
	buf_sync_dev(tb);
	ret = post_send(p->qa, &aw.wr);
	ret = ret ? ret : wait_wr(a->cq, 22, &wc);
	buf_sync_cpu(lb);
	buf_sync_cpu(tb);
	CHECK(!ret && wc.opcode == IB_WC_FETCH_ADD && *res == 100 && *target == 105,
	      "atomic: FETCH_AND_ADD returned %llu, memory now %llu", *res, *target);
	aw.wr.wr_id = 23;
	aw.wr.opcode = IB_WR_ATOMIC_CMP_AND_SWP;
	aw.compare_add = 105;
	aw.swap = 7;
	ret = post_send(p->qa, &aw.wr);
	ret = ret ? ret : wait_wr(a->cq, 23, &wc);
	buf_sync_cpu(lb);
	buf_sync_cpu(tb);
	CHECK(!ret && wc.opcode == IB_WC_COMP_SWAP && *res == 105 && *target == 7,
	      "atomic: CMP_AND_SWP returned %llu, memory now %llu", *res, *target);
}

/* On a fresh pair: re-registration of `mr` over `tb` with the next key variant after
 * `old_rkey`, a WRITE through it, then LOCAL_INV, after which a WRITE writes nothing (`rb`
 * keeps what `tb` held). */
static void check_reregister_then_local_inv(struct side *a, struct side *b, struct ib_mr *mr,
					    u32 old_rkey, struct buf *tb, struct buf *lb,
					    struct buf *rb)
{
	struct pair p;
	struct ib_wc wc;
	u32 rkey;
	int ret;

	if (pair_up(&p, a, b, NULL, NULL)) {
		CHECK(0, "fastreg: second RC pair connects");
		return;
	}
	ret = fast_reg(p.qb, b->cq, mr, tb, NPAGES, RW_ACCESS);
	rkey = mr->rkey;
	CHECK(ret == 0 && rkey == ib_inc_rkey(old_rkey),
	      "fastreg: re-registration with ib_inc_rkey %#x -> %#x (status %d)", old_rkey, rkey,
	      ret);
	ret = rdma_op(p.qa, IB_WR_RDMA_WRITE, 40, data_dma(lb), 64, a->pd->local_dma_lkey,
		      mr->iova, rkey);
	ret = ret ? ret : wait_wr(a->cq, 40, &wc);
	buf_sync_cpu(tb);
	CHECK(!ret && !memchr_inv(data_of(tb), 0x3c, 64), "fastreg: WRITE through the new rkey lands");
	ret = local_inv(p.qb, b->cq, rkey, &wc);
	CHECK(ret == 0 && wc.opcode == IB_WC_LOCAL_INV, "local_inv: LOCAL_INV of %#x completes (status %d)",
	      rkey, ret);
	memcpy(data_of(rb), data_of(tb), NPAGES * PAGE_SIZE);
	memset(data_of(lb), 0x77, PAGE_SIZE);
	buf_sync_dev(lb);
	ret = rdma_op(p.qa, IB_WR_RDMA_WRITE, 41, data_dma(lb), 64, a->pd->local_dma_lkey,
		      mr->iova, rkey);
	ret = ret ? ret : wait_wr(a->cq, 41, &wc);
	buf_sync_cpu(tb);
	CHECK(ret == IB_WC_REM_ACCESS_ERR && !memcmp(data_of(rb), data_of(tb), NPAGES * PAGE_SIZE) &&
		      guards_ok(tb),
	      "local_inv: WRITE through the invalidated rkey -> status %d, nothing written", ret);
	pair_down(&p, a, b);
}

/* Fast registration on b, then a's WRITE/READ/atomics through the new rkey, LOCAL_INV,
 * SEND_WITH_INV, re-registration with ib_inc_rkey. */
void check_fast_reg(struct side *a, struct side *b)
{
	struct pair p;
	struct buf tb = {}, lb = {}, rb = {};
	struct ib_mr *mr;
	struct ib_wc wc;
	u32 old_rkey, rkey;
	int ret, i;

	if (pair_up(&p, a, b, NULL, NULL)) {
		CHECK(0, "fastreg: RC pair connects");
		return;
	}
	mr = ib_alloc_mr(b->pd, IB_MR_TYPE_MEM_REG, NPAGES);
	CHECK(!IS_ERR(mr), "fastreg: ib_alloc_mr(MEM_REG, %d) -> %ld", NPAGES,
	      IS_ERR(mr) ? PTR_ERR(mr) : 0);
	if (IS_ERR(mr))
		goto out_pair;
	if (buf_alloc(&tb, b->dev) || buf_alloc(&lb, a->dev) || buf_alloc(&rb, b->dev))
		goto out;
	old_rkey = mr->rkey;
	ret = fast_reg(p.qb, b->cq, mr, &tb, NPAGES, RW_ACCESS);
	CHECK(ret == 0 && mr->rkey == ib_inc_rkey(old_rkey) && mr->length == NPAGES * PAGE_SIZE,
	      "fastreg: REG_MR of %d pages completes IB_WC_REG_MR, rkey %#x -> %#x, iova %#llx",
	      NPAGES, old_rkey, mr->rkey, mr->iova);
	if (ret)
		goto out;
	rkey = mr->rkey;
	for (i = 0; i < NPAGES * PAGE_SIZE; i++)
		data_of(&lb)[i] = (u8)(i * 7 + 3);
	buf_sync_dev(&lb);
	ret = rdma_op(p.qa, IB_WR_RDMA_WRITE, 20, data_dma(&lb), NPAGES * PAGE_SIZE,
		      a->pd->local_dma_lkey, mr->iova, rkey);
	ret = ret ? ret : wait_wr(a->cq, 20, &wc);
	buf_sync_cpu(&tb);
	CHECK(!ret && !memcmp(data_of(&tb), data_of(&lb), NPAGES * PAGE_SIZE) && guards_ok(&tb),
	      "fastreg: peer RDMA WRITE of %lu bytes through rkey %#x landed, guards intact",
	      NPAGES * PAGE_SIZE, rkey);
	memset(data_of(&lb), 0, NPAGES * PAGE_SIZE);
	buf_sync_dev(&lb);
	ret = rdma_op(p.qa, IB_WR_RDMA_READ, 21, data_dma(&lb), NPAGES * PAGE_SIZE,
		      a->pd->local_dma_lkey, mr->iova, rkey);
	ret = ret ? ret : wait_wr(a->cq, 21, &wc);
	buf_sync_cpu(&lb);
	CHECK(!ret && wc.opcode == IB_WC_RDMA_READ &&
		      !memcmp(data_of(&tb), data_of(&lb), NPAGES * PAGE_SIZE),
	      "fastreg: peer RDMA READ through rkey %#x returns the data", rkey);

	/* Inline RDMA WRITE from a kernel virtual address, then WRITE_WITH_IMM. */
	check_inline_and_imm(&p, a, b, mr, rkey, &tb, &lb, &rb);

	/* Atomics on the registered memory (offset 64, 8-byte aligned). */
	check_atomics(&p, a, mr, rkey, &tb, &lb);

	/* SEND_WITH_INV of the rkey: the receive reports it, the key is gone. */
	post_recv(p.qb, 30, data_dma(&rb), PAGE_SIZE, b->pd->local_dma_lkey);
	{
		struct ib_sge sge = { .addr = data_dma(&lb), .length = 8,
				      .lkey = a->pd->local_dma_lkey };
		struct ib_send_wr wr = { .wr_id = 31, .opcode = IB_WR_SEND_WITH_INV,
					 .sg_list = &sge, .num_sge = 1 };

		wr.ex.invalidate_rkey = rkey;
		ret = post_send(p.qa, &wr);
		ret = ret ? ret : wait_wr(a->cq, 31, NULL);
		ret = ret ? ret : wait_wr(b->cq, 30, &wc);
		CHECK(!ret && (wc.wc_flags & IB_WC_WITH_INVALIDATE) && wc.ex.invalidate_rkey == rkey,
		      "send_with_inv: receive has IB_WC_WITH_INVALIDATE, rkey %#x (status %d)",
		      wc.ex.invalidate_rkey, ret);
	}
	memset(data_of(&lb), 0x3c, NPAGES * PAGE_SIZE);
	buf_sync_dev(&lb);
	buf_sync_cpu(&tb);
	memcpy(data_of(&rb), data_of(&tb), NPAGES * PAGE_SIZE); /* remember the contents */
	ret = rdma_op(p.qa, IB_WR_RDMA_WRITE, 32, data_dma(&lb), 64, a->pd->local_dma_lkey,
		      mr->iova, rkey);
	ret = ret ? ret : wait_wr(a->cq, 32, &wc);
	buf_sync_cpu(&tb);
	CHECK(ret == IB_WC_REM_ACCESS_ERR && !memcmp(data_of(&rb), data_of(&tb), NPAGES * PAGE_SIZE) &&
		      guards_ok(&tb),
	      "send_with_inv: WRITE through the invalidated rkey -> status %d (REM_ACCESS_ERR %d), nothing written",
	      ret, IB_WC_REM_ACCESS_ERR);
	pair_down(&p, a, b);

	/* Re-registration with the next key variant, then LOCAL_INV. */
	check_reregister_then_local_inv(a, b, mr, rkey, &tb, &lb, &rb);
	goto out_mr;
out:
	pair_down(&p, a, b);
out_mr:
	buf_free(&tb);
	buf_free(&lb);
	buf_free(&rb);
	if (!IS_ERR(mr))
		ib_dereg_mr(mr);
	return;
out_pair:
	pair_down(&p, a, b);
}
