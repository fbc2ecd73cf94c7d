// SPDX-License-Identifier: GPL-2.0
/*
 * A kernel RC QP's SQ doorbells while its port's flight is full (rox.ko's `SlotStore::sq`,
 * docs/driver.md): more single-packet SENDs than the port's flight, in several doorbells,
 * before the first poll.
 *
 * The receiving QP waits in INIT (it drops every packet), so the first doorbell's SENDs fill
 * rox_0's flight (rox-nic's PORT_INFLIGHT_LIMIT, 256 packets) and nothing frees it: the device
 * parks the rest, goes idle and says so on the doorbell page (`DbPage::rc_sq_no_wake`). The
 * later doorbells then find it idle with its flight full, and rox.ko must not wake it for them
 * (none of their WQEs could be sent before the ACK or retransmission timer that wakes it
 * anyway): the device's doorbell wakes (hw_counters `wakes_trapped` + `wakes_posted`, as
 * `rdma statistic` reads them) must not move across them. Then the receiver comes up (RTR,
 * RTS) and the retransmission timer must carry every WR through: each completion, in order,
 * and every byte, within a bounded wait (a lost wake fails it there, naming what was missing).
 */
#include "rox_kverbs_test.h"

/* rox-nic's PORT_INFLIGHT_LIMIT (qemu/rox-nic/src/device/datapath/sched.rs). */
#define FLIGHT_PACKETS 256
/* The first doorbell: fills the flight and parks the rest. */
#define FLIGHT_FIRST (FLIGHT_PACKETS + 64)
/* Each later doorbell's WRs, and how many such doorbells ring while the flight is full. */
#define FLIGHT_BATCH 64
#define FLIGHT_LATER 4
#define FLIGHT_WRS (FLIGHT_FIRST + FLIGHT_LATER * FLIGHT_BATCH)
/* Bytes per SEND: one packet each at any MTU. */
#define FLIGHT_MSG 16
/* Longer than the device stays awake after its last work: with posted wakes it idles after its
 * spin and naps (rox-nic spin.rs: 10 us, naps of at most 500 us), with trapped wakes (make
 * test's guest-debug stage, ROX_POSTED_WAKE=off) only after `idle_after`, 20 ms (rox-nic
 * DEFAULT_IDLE_AFTER). A doorbell after this pause finds it idle unless a timer woke it
 * meanwhile; the window, ~6 pauses, stays well inside the sender's first retransmission. */
#define FLIGHT_IDLE_MS 30
/* The sender's local ACK timeout, 537 ms: with no round trip measured yet its first
 * retransmission comes this long after the first SEND, after the ~180 ms the receiver is held
 * in INIT (so no timer wakes the device among the doorbells either), and its 7 retries (3.8 s
 * without an ACK) outlast that hold on a host that delays the guest far longer. */
#define FLIGHT_ACK_TIMEOUT 17
/* Every completion within this (a lost wake fails here). */
#define FLIGHT_TIMEOUT_MS 10000

static_assert(FLIGHT_WRS * FLIGHT_MSG <= NPAGES * PAGE_SIZE);

/* The device's doorbell wakes of `dev` so far, or -errno if its hw_counters cannot be read. */
static s64 doorbell_wakes(struct ib_device *dev)
{
	struct rdma_hw_stats *stats;
	s64 wakes = 0;
	int i, n, found = 0;

	if (!dev->ops.alloc_hw_port_stats || !dev->ops.get_hw_stats)
		return -EOPNOTSUPP;
	stats = dev->ops.alloc_hw_port_stats(dev, 1);
	if (!stats)
		return -ENOMEM;
	n = dev->ops.get_hw_stats(dev, stats, 1, stats->num_counters);
	for (i = 0; n > 0 && i < stats->num_counters; i++) {
		if (!strcmp(stats->descs[i].name, "wakes_trapped") ||
		    !strcmp(stats->descs[i].name, "wakes_posted")) {
			wakes += stats->value[i];
			found++;
		}
	}
	rdma_free_hw_stats_struct(stats);
	if (n < 0)
		return n;
	return found == 2 ? wakes : -ENOENT;
}

/* WRs first .. first + n - 1 as one chain (one doorbell): signalled SENDs of message i from
 * `src`; 0 or the post's error. */
static int post_chain(struct ib_qp *qp, struct buf *src, int first, int n)
{
	struct ib_send_wr *wrs = kcalloc(n, sizeof(*wrs), GFP_KERNEL);
	struct ib_sge *sges = kcalloc(n, sizeof(*sges), GFP_KERNEL);
	const struct ib_send_wr *bad;
	int i, ret = -ENOMEM;

	if (wrs && sges) {
		for (i = 0; i < n; i++) {
			sges[i].addr = data_dma(src) + (first + i) * FLIGHT_MSG;
			sges[i].length = FLIGHT_MSG;
			sges[i].lkey = qp->pd->local_dma_lkey;
			wrs[i].wr_id = first + i;
			wrs[i].opcode = IB_WR_SEND;
			wrs[i].send_flags = IB_SEND_SIGNALED;
			wrs[i].sg_list = &sges[i];
			wrs[i].num_sge = 1;
			wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
		}
		ret = ib_post_send(qp, wrs, &bad);
	}
	kfree(wrs);
	kfree(sges);
	return ret;
}

/*
 * Polls `cq` until `want` completions or the deadline: each must be a success of `opcode`
 * with wr_id 0, 1, ... in order (and `byte_len` bytes when that is not 0). Returns how many
 * came in order; *wrong counts those that did not match.
 */
static int poll_in_order(struct ib_cq *cq, int want, enum ib_wc_opcode opcode, u32 byte_len,
			 unsigned long deadline, int *wrong)
{
	struct ib_wc wc[16];
	int got = 0;

	*wrong = 0;
	while (got + *wrong < want && time_before(jiffies, deadline)) {
		int i, n = ib_poll_cq(cq, ARRAY_SIZE(wc), wc);

		if (n < 0)
			return got;
		if (n == 0)
			usleep_range(100, 200);
		for (i = 0; i < n; i++) {
			bool ok = wc[i].status == IB_WC_SUCCESS && wc[i].opcode == opcode &&
				  wc[i].wr_id == got && (!byte_len || wc[i].byte_len == byte_len);

			if (ok)
				got++;
			else if ((*wrong)++ == 0)
				pr_info(PFX "flight: completion %d: wr_id %llu status %d opcode %d len %u\n",
					got, wc[i].wr_id, wc[i].status, wc[i].opcode, wc[i].byte_len);
		}
	}
	return got;
}

/* The doorbells after the first, each after a pause that lets the device idle; 0 or -errno. */
static int ring_while_full(struct ib_qp *qa, struct buf *sb)
{
	int k, ret = 0;

	for (k = 0; k < FLIGHT_LATER && !ret; k++) {
		ret = post_chain(qa, sb, FLIGHT_FIRST + k * FLIGHT_BATCH, FLIGHT_BATCH);
		msleep(FLIGHT_IDLE_MS);
	}
	return ret;
}

/* The flight's checks on the connected-but-for-the-receiver QPs qa -> qb. */
static void flight_checks(struct side *a, struct side *b, struct ib_qp *qa, struct ib_qp *qb,
			  struct buf *sb, struct buf *rb)
{
	unsigned long deadline, window;
	s64 before, after;
	int sends, recvs, wrong_sends, wrong_recvs, ret;

	window = jiffies;
	ret = post_chain(qa, sb, 0, FLIGHT_FIRST);
	if (ret) {
		SETUP_FAILED("flight: first chain of %d SENDs: %d", FLIGHT_FIRST, ret);
		return;
	}
	msleep(FLIGHT_IDLE_MS);
	before = doorbell_wakes(a->dev);
	/* The counters' admin query woke the device: let it idle again. */
	msleep(FLIGHT_IDLE_MS);
	ret = ring_while_full(qa, sb);
	after = doorbell_wakes(a->dev);
	window = jiffies - window;
	/* A window far longer than the sender's retries (7 x 537 ms) means a stalled guest: the
	 * QP then failed and its page asks for wakes, which is no lost wake of rox.ko's. */
	CHECK(!ret && before >= 0 && after == before,
	      "flight: %d doorbells of %d RC SENDs while rox_0's flight (%d packets) is full: %lld wakes (want 0; post %d, counters %lld/%lld, window %u ms)",
	      FLIGHT_LATER, FLIGHT_BATCH, FLIGHT_PACKETS, after - before, ret, before, after,
	      jiffies_to_msecs(window));

	ret = qp_rtr_rts(qb, b, a, qa->qp_num, ACK_TIMEOUT);
	if (ret) {
		SETUP_FAILED("flight: receiver on %s to RTR/RTS: %d", peer, ret);
		return;
	}
	deadline = jiffies + msecs_to_jiffies(FLIGHT_TIMEOUT_MS);
	sends = poll_in_order(qa->send_cq, FLIGHT_WRS, IB_WC_SEND, 0, deadline, &wrong_sends);
	recvs = poll_in_order(qb->recv_cq, FLIGHT_WRS, IB_WC_RECV, FLIGHT_MSG, deadline,
			      &wrong_recvs);
	CHECK(sends == FLIGHT_WRS && !wrong_sends,
	      "flight: %d of %d SENDs completed in order within %d ms (%d wrong)", sends,
	      FLIGHT_WRS, FLIGHT_TIMEOUT_MS, wrong_sends);
	CHECK(recvs == FLIGHT_WRS && !wrong_recvs,
	      "flight: %d of %d receives on %s completed in order with %d bytes (%d wrong)", recvs,
	      FLIGHT_WRS, peer, FLIGHT_MSG, wrong_recvs);
	buf_sync_cpu(rb);
	CHECK(!memcmp(data_of(rb), data_of(sb), FLIGHT_WRS * FLIGHT_MSG) && guards_ok(rb),
	      "flight: the %d bytes received equal those sent, guards intact",
	      FLIGHT_WRS * FLIGHT_MSG);
}

void check_full_flight(struct side *a, struct side *b)
{
	struct ib_cq *ca, *cb;
	struct ib_qp *qa = NULL, *qb = NULL;
	struct buf sb = {}, rb = {};
	int i, ret = 0;

	ca = ib_alloc_cq(a->dev, NULL, FLIGHT_WRS, 0, IB_POLL_DIRECT);
	cb = ib_alloc_cq(b->dev, NULL, FLIGHT_WRS, 0, IB_POLL_DIRECT);
	if (IS_ERR(ca) || IS_ERR(cb)) {
		SETUP_FAILED("flight: CQs of %d entries", FLIGHT_WRS);
		goto out;
	}
	qa = create_qp(a, NULL, IB_QPT_RC, FLIGHT_WRS, 1, NULL, ca);
	qb = create_qp(b, NULL, IB_QPT_RC, 1, FLIGHT_WRS, NULL, cb);
	if (IS_ERR(qa) || IS_ERR(qb)) {
		SETUP_FAILED("flight: RC QPs of %d send / receive WRs", FLIGHT_WRS);
		goto out;
	}
	if (buf_alloc(&sb, a->dev) || buf_alloc(&rb, b->dev))
		goto out;
	/* Each message distinct: its number, and bytes that differ from any other's. */
	for (i = 0; i < FLIGHT_WRS; i++) {
		u32 *msg = (u32 *)(data_of(&sb) + i * FLIGHT_MSG);

		msg[0] = i;
		msg[1] = ~i;
		msg[2] = i * 2654435761u;
		msg[3] = 0xf1f1f1f1 ^ i;
	}
	buf_sync_dev(&sb);
	ret = qp_init(qb);
	for (i = 0; i < FLIGHT_WRS && !ret; i++)
		ret = post_recv(qb, i, data_dma(&rb) + i * FLIGHT_MSG, FLIGHT_MSG,
				b->pd->local_dma_lkey);
	ret = ret ?: qp_init(qa) ?: qp_rtr_rts(qa, a, b, qb->qp_num, FLIGHT_ACK_TIMEOUT);
	if (ret) {
		SETUP_FAILED("flight: receiver in INIT with %d receives, sender in RTS: %d",
			     FLIGHT_WRS, ret);
		goto out;
	}
	flight_checks(a, b, qa, qb, &sb, &rb);
out:
	if (!IS_ERR_OR_NULL(qa))
		ib_destroy_qp(qa);
	if (!IS_ERR_OR_NULL(qb))
		ib_destroy_qp(qb);
	buf_free(&sb);
	buf_free(&rb);
	if (!IS_ERR_OR_NULL(ca))
		ib_free_cq(ca);
	if (!IS_ERR_OR_NULL(cb))
		ib_free_cq(cb);
}
