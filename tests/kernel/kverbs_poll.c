// SPDX-License-Identifier: GPL-2.0
/* Checks of CQ poll contexts with ib_drain_qp, and of a QP reset with completions unpolled. */
#include "rox_kverbs_test.h"

/* A CQ per poll context, completions counted through ib_cqe callbacks, then ib_drain_qp. */
void check_poll_ctx(struct side *a, struct side *b, enum ib_poll_context ctx,
		    const char *name, int vector)
{
	const int n = 8;
	struct cq_pair p;
	struct ctx_counter sends = {}, recvs = {};
	struct buf rb = {}, tx = {};
	int i, ret;
	bool finished;

	ret = cq_pair_cqs(&p, a, b, ctx, vector);
	CHECK(!ret, "cq %s: CQs on completion vector %d", name, vector);
	if (ret)
		goto out;
	if (cq_pair_connect(&p, a, b) || buf_alloc(&rb, b->dev) || buf_alloc(&tx, a->dev)) {
		CHECK(0, "cq %s: RC pair", name);
		goto out;
	}
	sends.cqe.done = count_done;
	recvs.cqe.done = count_done;
	init_completion(&sends.done);
	init_completion(&recvs.done);
	sends.want = n;
	/* n receives consumed, 2 more flushed by the drain. */
	recvs.want = n + 2;
	ret = post_recvs(p.qb, n + 2, &recvs.cqe, 0, data_dma(&rb), b->pd->local_dma_lkey);
	ret = post_sends(p.qa, n, &sends.cqe, 0, data_dma(&tx), a->pd->local_dma_lkey) ?: ret;
	if (ctx == IB_POLL_DIRECT) {
		unsigned long end = jiffies + msecs_to_jiffies(TIMEOUT_MS);

		while ((atomic_read(&sends.ok) < n || atomic_read(&recvs.ok) < n) &&
		       time_before(jiffies, end)) {
			ib_process_cq_direct(p.ca, -1);
			ib_process_cq_direct(p.cb, -1);
			usleep_range(100, 200);
		}
		finished = atomic_read(&sends.ok) == n && atomic_read(&recvs.ok) == n;
	} else {
		finished = wait_for_completion_timeout(&sends.done, msecs_to_jiffies(TIMEOUT_MS));
		for (i = 0; i < 250 && atomic_read(&recvs.ok) < n; i++)
			msleep(20);
		finished = finished && atomic_read(&recvs.ok) == n;
	}
	CHECK(!ret && finished && !atomic_read(&sends.other),
	      "cq %s: %d SENDs and %d receives completed through ib_core's polling", name,
	      atomic_read(&sends.ok), atomic_read(&recvs.ok));
	ib_drain_qp(p.qa);
	ib_drain_qp(p.qb);
	if (ctx == IB_POLL_DIRECT)
		ib_process_cq_direct(p.cb, -1);
	CHECK(atomic_read(&recvs.flushed) == 2 && !atomic_read(&recvs.other),
	      "cq %s: ib_drain_qp returned, the 2 receives left were flushed (%d)", name,
	      atomic_read(&recvs.flushed));
out:
	cq_pair_down(&p);
	buf_free(&rb);
	buf_free(&tx);
}

/*
 * Review L2: a kernel QP reset while completions of its earlier SENDs sit unpolled in its CQ,
 * then connected again: the poll returns only the new SENDs' completions. Its queue restarts
 * at index 0, so a stale CQE (wr_id 100..102, WQE index 0..2) would have come first and
 * retired the new WQEs 0 and 1 before the device did them; rox.ko takes a reset QP's CQEs out
 * of its CQs.
 */
void check_reset_reuse(struct side *a, struct side *b)
{
	struct pair p;
	struct buf tx = {}, rb = {};
	struct ib_qp_attr reset = { .qp_state = IB_QPS_RESET };
	struct ib_wc wc[8];
	u64 got[8];
	int i, n = 0, ret = 0;
	unsigned long end;

	if (pair_up(&p, a, b, NULL, NULL)) {
		SETUP_FAILED("reset reuse: RC pair");
		return;
	}
	if (buf_alloc(&tx, a->dev) || buf_alloc(&rb, b->dev)) {
		SETUP_FAILED("reset reuse: buffers");
		goto out;
	}
	ret |= post_recvs(p.qb, 5, NULL, 0, data_dma(&rb), b->pd->local_dma_lkey);
	ret |= post_sends(p.qa, 3, NULL, 100, data_dma(&tx), a->pd->local_dma_lkey);
	/* The 3 arrived (their receives completed); the sender's CQEs follow the ACKs. */
	for (i = 0; i < 3; i++)
		ret |= wait_wr(b->cq, i, NULL);
	msleep(300);
	/* Both ends start again (PSN 0); the reset drops the 2 receives left at b. */
	ret |= ib_modify_qp(p.qa, &reset, IB_QP_STATE);
	ret |= ib_modify_qp(p.qb, &reset, IB_QP_STATE);
	drain_cq(b->cq);
	ret |= connect_qp(p.qa, a, b, p.qb->qp_num);
	ret |= connect_qp(p.qb, b, a, p.qa->qp_num);
	ret |= post_recvs(p.qb, 2, NULL, 10, data_dma(&rb), b->pd->local_dma_lkey);
	ret |= post_sends(p.qa, 2, NULL, 200, data_dma(&tx), a->pd->local_dma_lkey);
	/* Everything a's CQ returns within 1 s (the new SENDs take milliseconds). */
	end = jiffies + msecs_to_jiffies(1000);
	while (time_before(jiffies, end) && n < ARRAY_SIZE(got)) {
		int k = ib_poll_cq(a->cq, ARRAY_SIZE(wc), wc);

		for (i = 0; i < k && n < ARRAY_SIZE(got); i++)
			got[n++] = wc[i].status == IB_WC_SUCCESS ? wc[i].wr_id : 0;
		usleep_range(1000, 2000);
	}
	CHECK(!ret && n == 2 && got[0] == 200 && got[1] == 201,
	      "reset reuse: after a reset with 3 completions unpolled, a's CQ returns only the "
	      "2 new SENDs (%d completions, first wr_id %llu)",
	      n, n ? got[0] : 0ULL);
out:
	pair_down(&p, a, b);
	buf_free(&tx);
	buf_free(&rb);
}
