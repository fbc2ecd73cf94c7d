/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * tests/lib/rdma-cm-wait.h — waiting for an rdma_cm connection's end, shared by the guest
 * programs that end on it (tests/interop/rdma-xfer.c, tests/soak/send-seq.c; each is one
 * file compiled in the guest, which includes this by its path relative to the source).
 *
 * A side whose last message is answered must not wait for that message's own completion: if
 * its ACK is lost the peer has already exited and the wait would never end. The peer's
 * rdma_disconnect (or its exit) reaches this side as RDMA_CM_EVENT_DISCONNECTED instead.
 */
#ifndef ROX_TESTS_RDMA_CM_WAIT_H
#define ROX_TESTS_RDMA_CM_WAIT_H

#include <errno.h>
#include <poll.h>
#include <time.h>
#include <rdma/rdma_cma.h>

static double rdma_cm_wait_clock(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * Takes the events of `ch` (acknowledging each) until RDMA_CM_EVENT_DISCONNECTED or for at
 * most `timeout_s` seconds. Returns 1 when the DISCONNECTED event came, 0 when the time ran
 * out, -1 when poll or rdma_get_cm_event failed (errno says why). What a timeout means is the
 * caller's to say.
 */
static int rdma_cm_wait_disconnect(struct rdma_event_channel *ch, double timeout_s)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	double deadline = rdma_cm_wait_clock() + timeout_s;

	for (;;) {
		struct rdma_cm_event *ev;
		enum rdma_cm_event_type type;
		int left_ms = (int)((deadline - rdma_cm_wait_clock()) * 1000);
		int ready;

		if (left_ms <= 0)
			return 0;
		ready = poll(&pfd, 1, left_ms);
		if (ready < 0 && errno == EINTR)
			continue;
		if (ready < 0)
			return -1;
		if (ready == 0)
			return 0;
		if (rdma_get_cm_event(ch, &ev))
			return -1;
		type = ev->event;
		rdma_ack_cm_event(ev);
		if (type == RDMA_CM_EVENT_DISCONNECTED)
			return 1;
	}
}

#endif
