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
	struct cq_pair p;
	struct ctx_counter wrs = {};
	struct buf rb = {}, tx = {};
	unsigned long start;
	int ret;
	bool finished;

	if (cq_pair_cqs(&p, a, b, IB_POLL_SOFTIRQ, 0)) {
		SETUP_FAILED("hang: CQs");
		goto out;
	}
	if (cq_pair_connect(&p, a, b) || buf_alloc(&rb, a->dev) || buf_alloc(&tx, a->dev)) {
		SETUP_FAILED("hang: RC pair");
		goto out;
	}
	wrs.cqe.done = count_done;
	init_completion(&wrs.done);
	wrs.want = nrecv + nsend;
	ret = post_recvs(p.qa, nrecv, &wrs.cqe, 0, data_dma(&rb), a->pd->local_dma_lkey);
	ret = post_sends(p.qa, nsend, &wrs.cqe, 0, data_dma(&tx), a->pd->local_dma_lkey) ?: ret;
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
	cq_pair_down(&p);
	buf_free(&rb);
	buf_free(&tx);
}
