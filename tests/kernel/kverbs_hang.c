// SPDX-License-Identifier: GPL-2.0
/* The hung-device check (hang=1, tests/guest/t-z-driver-hung-device.sh). */
#include "rox_kverbs_test.h"

/*
 * The hung-device check (hang=1): 8 receives and 4 SENDs in flight on an RC QP of rox_0 (the
 * peer has no receives: the SENDs meet RNR NAKs, retried for ever), then "hang: ready"; the
 * runner makes rox_0's device hang (rox-nic --die-on ...,fatal=hang: it reports a fatal
 * error, keeps answering registers and never completes the reset). rox.ko must give up on
 * the reset after its 2 s deadline and complete all 12 with IB_WC_WR_FLUSH_ERR through
 * ib_core's softirq poller, within HANG_WAIT_MS.
 */
#define HANG_WAIT_MS 60000

void check_hung_device(struct side *a, struct side *b)
{
	const int nrecv = 8, nsend = 4;
	struct ib_cq *ca, *cb;
	struct ib_qp *qa = NULL, *qb = NULL;
	struct side sa = *a, sb2 = *b;
	struct ctx_counter wrs = {};
	struct buf rb = {}, tx = {};
	unsigned long start;
	int i, ret = 0;
	bool finished;

	ca = ib_alloc_cq(a->dev, NULL, 64, 0, IB_POLL_SOFTIRQ);
	cb = ib_alloc_cq(b->dev, NULL, 64, 0, IB_POLL_SOFTIRQ);
	if (IS_ERR(ca) || IS_ERR(cb)) {
		SETUP_FAILED("hang: CQs");
		goto out;
	}
	sa.cq = ca;
	sb2.cq = cb;
	qa = create_qp(&sa, NULL, IB_QPT_RC, DEPTH, DEPTH, NULL, ca);
	qb = create_qp(&sb2, NULL, IB_QPT_RC, DEPTH, DEPTH, NULL, cb);
	if (IS_ERR(qa) || IS_ERR(qb) || connect_qp(qa, a, b, qb->qp_num) ||
	    connect_qp(qb, b, a, qa->qp_num) || buf_alloc(&rb, a->dev) || buf_alloc(&tx, a->dev)) {
		SETUP_FAILED("hang: RC pair");
		goto out;
	}
	wrs.cqe.done = count_done;
	init_completion(&wrs.done);
	wrs.want = nrecv + nsend;
	for (i = 0; i < nrecv; i++) {
		struct ib_sge sge = { .addr = data_dma(&rb) + i * 128, .length = 128,
				      .lkey = a->pd->local_dma_lkey };
		struct ib_recv_wr wr = { .wr_cqe = &wrs.cqe, .sg_list = &sge, .num_sge = 1 };
		const struct ib_recv_wr *bad;

		ret |= ib_post_recv(qa, &wr, &bad);
	}
	for (i = 0; i < nsend; i++) {
		struct ib_sge sge = { .addr = data_dma(&tx), .length = 64,
				      .lkey = a->pd->local_dma_lkey };
		struct ib_send_wr wr = { .wr_cqe = &wrs.cqe, .opcode = IB_WR_SEND,
					 .sg_list = &sge, .num_sge = 1,
					 .send_flags = IB_SEND_SIGNALED };
		const struct ib_send_wr *bad;

		ret |= ib_post_send(qa, &wr, &bad);
	}
	CHECK(!ret, "hang: %d receives and %d SENDs posted on rox_0", nrecv, nsend);
	/* Still in flight a moment later: the device is alive and nothing can complete. */
	msleep(200);
	CHECK(!atomic_read(&wrs.ok) && !atomic_read(&wrs.flushed) && !atomic_read(&wrs.other),
	      "hang: nothing completed before the device hangs");
	pr_info(PFX "hang: ready, %d work requests in flight\n", nrecv + nsend);
	start = jiffies;
	finished = wait_for_completion_timeout(&wrs.done, msecs_to_jiffies(HANG_WAIT_MS));
	pr_info(PFX "hang: %d flushed, %d successful, %d other after %u ms\n",
		atomic_read(&wrs.flushed), atomic_read(&wrs.ok), atomic_read(&wrs.other),
		jiffies_to_msecs(jiffies - start));
	CHECK(finished && atomic_read(&wrs.flushed) == nrecv + nsend,
	      "hang: all %d work requests completed with IB_WC_WR_FLUSH_ERR", nrecv + nsend);
out:
	if (!IS_ERR_OR_NULL(qa))
		ib_destroy_qp(qa);
	if (!IS_ERR_OR_NULL(qb))
		ib_destroy_qp(qb);
	buf_free(&rb);
	buf_free(&tx);
	if (!IS_ERR_OR_NULL(ca))
		ib_free_cq(ca);
	if (!IS_ERR_OR_NULL(cb))
		ib_free_cq(cb);
}
