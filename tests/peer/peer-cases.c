/*
 * peer-cases: the guest side of the adversarial-peer cases (tests/peer/run, docs/peer.md).
 * For each case: a fresh CQ, MR and RC QP; `CASE name qpn psn rkey va` to rox-peer over TCP,
 * its `PEER qpn psn rkey va` back; INIT -> RTR -> RTS; `GO`; then the case's verbs and the
 * completion statuses and QP state the IBA transport rules ask for; `END`; rox-peer's
 * `VERDICT` (what it saw on the wire). After every case a `normal` exchange on a fresh QP
 * shows the device still serves other QPs. One line per case:
 *     RESULT <case> ok|fail <detail>
 * Exit 0 only if every case passed.
 *
 *   peer-cases DEV GID_INDEX PEER_IP PORT CASE...
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

/* Must match qemu/rox-peer/src/cases.rs and session.rs. */
#define RETRY_CNT 2
#define RNR_RETRY 2
#define ACK_TIMEOUT 14 /* 4.096 us * 2^14 = 67 ms */
#define MSG 64
#define BUF_LEN 8192
#define RECV_OFF 4096 /* receives land here; the peer's WRITE targets it too */
#define SENTINEL 0xa5
#define WAIT_MS 5000

struct qctx {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_qp *qp;
	unsigned char *buf;
	uint32_t peer_rkey;
	uint64_t peer_va;
	int gid_index;
	struct in_addr peer_ip;
	int sock;
	FILE *in;
	char why[512];
	char note[128]; /* what an error case saw, for the report */
};

/* Records the first reason a case failed; returns -1. */
static int failf(struct qctx *q, const char *fmt, ...)
{
	va_list ap;

	if (q->why[0])
		return -1;
	va_start(ap, fmt);
	vsnprintf(q->why, sizeof(q->why), fmt, ap);
	va_end(ap);
	return -1;
}

static uint8_t peer_mem(size_t i) { return (uint8_t)(i * 7 + 3); }
static uint8_t peer_msg(size_t i, uint8_t k) { return (uint8_t)(i * 13) ^ k; }

static long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Up to `n` completions within `ms`; returns how many. */
static int collect(struct qctx *q, struct ibv_wc *wc, int n, int ms)
{
	long end = now_ms() + ms;
	int got = 0;

	while (got < n && now_ms() < end) {
		int r = ibv_poll_cq(q->cq, n - got, wc + got);

		if (r < 0)
			return got;
		got += r;
		if (!r)
			usleep(1000);
	}
	return got;
}

static int qp_state(struct qctx *q)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(q->qp, &a, IBV_QP_STATE, &ia))
		return -1;
	return a.qp_state;
}

static const char *state_name(int s)
{
	static const char *names[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

	return s >= 0 && s <= IBV_QPS_ERR ? names[s] : "?";
}

static int expect_state(struct qctx *q, enum ibv_qp_state want)
{
	int s = qp_state(q);

	if (s != (int)want)
		return failf(q, "QP state %s, expected %s", state_name(s), state_name(want));
	return 0;
}

/* Polls the QP state until it is `want` (an asynchronous transition) or `ms` passed. */
static int await_state(struct qctx *q, enum ibv_qp_state want, int ms)
{
	long end = now_ms() + ms;

	while (qp_state(q) != (int)want && now_ms() < end)
		usleep(2000);
	return expect_state(q, want);
}

static int is_qp_event(enum ibv_event_type t)
{
	return t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR ||
	       t == IBV_EVENT_QP_ACCESS_ERR || t == IBV_EVENT_COMM_EST ||
	       t == IBV_EVENT_SQ_DRAINED || t == IBV_EVENT_PATH_MIG ||
	       t == IBV_EVENT_PATH_MIG_ERR || t == IBV_EVENT_QP_LAST_WQE_REACHED;
}

/* The case QP's affiliated asynchronous event within `ms` must be `want` (IBA 11.6.3.2: a
 * responder error no receive WR is part of reaches the owner only this way). Events of other
 * objects are acknowledged and skipped. */
static int expect_async(struct qctx *q, enum ibv_event_type want, int ms)
{
	long end = now_ms() + ms;
	struct pollfd p = { .fd = q->ctx->async_fd, .events = POLLIN };

	for (;;) {
		struct ibv_async_event ev;
		enum ibv_event_type got;
		long left = end - now_ms();
		int ours;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return failf(q, "no asynchronous event, expected %s", ibv_event_type_str(want));
		if (ibv_get_async_event(q->ctx, &ev))
			return failf(q, "ibv_get_async_event: %s", strerror(errno));
		got = ev.event_type;
		ours = is_qp_event(got) && ev.element.qp == q->qp;
		ibv_ack_async_event(&ev);
		if (!ours)
			continue;
		if (got != want)
			return failf(q, "asynchronous event %s, expected %s", ibv_event_type_str(got),
				     ibv_event_type_str(want));
		return 0;
	}
}

static int expect_wc(struct qctx *q, struct ibv_wc *wc, uint64_t wr_id, enum ibv_wc_status st)
{
	if (wc->wr_id != wr_id)
		return failf(q, "completion of wr %llu, expected wr %llu", (unsigned long long)wc->wr_id,
			     (unsigned long long)wr_id);
	if (wc->status != st)
		return failf(q, "wr %llu: %s, expected %s", (unsigned long long)wr_id,
			     ibv_wc_status_str(wc->status), ibv_wc_status_str(st));
	return 0;
}

/* Exactly `n` completions within WAIT_MS, then none for `quiet_ms`. */
static int take(struct qctx *q, struct ibv_wc *wc, int n, int quiet_ms)
{
	struct ibv_wc extra;
	int got = collect(q, wc, n, WAIT_MS);

	if (got != n)
		return failf(q, "%d completions within %d ms, expected %d", got, WAIT_MS, n);
	if (quiet_ms && collect(q, &extra, 1, quiet_ms))
		return failf(q, "an extra completion: wr %llu %s", (unsigned long long)extra.wr_id,
			     ibv_wc_status_str(extra.status));
	return 0;
}

static int post(struct qctx *q, enum ibv_wr_opcode opcode, uint64_t wr_id, size_t off,
		uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)q->buf + off, .length = len, .lkey = q->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = opcode,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(q->qp, &wr, &bad))
		return failf(q, "ibv_post_send wr %llu: %s", (unsigned long long)wr_id, strerror(errno));
	return 0;
}

static int post_recv(struct qctx *q, uint64_t wr_id, size_t off)
{
	struct ibv_sge sge = { .addr = (uintptr_t)q->buf + off, .length = 1024, .lkey = q->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(q->qp, &wr, &bad))
		return failf(q, "ibv_post_recv: %s", strerror(errno));
	return 0;
}

/* Bytes [off, off+len) of the buffer equal f(i, k) for i from `from`. */
static int check_bytes(struct qctx *q, const char *what, size_t off, size_t len, size_t from,
		       int (*f)(size_t, int), int k)
{
	for (size_t i = 0; i < len; i++)
		if (q->buf[off + i] != (uint8_t)f(from + i, k))
			return failf(q, "%s: byte %zu is %#x, expected %#x", what, i, q->buf[off + i],
				     (uint8_t)f(from + i, k));
	return 0;
}

static int mem_at(size_t i, int k) { (void)k; return peer_mem(i); }
static int msg_at(size_t i, int k) { return peer_msg(i, (uint8_t)k); }
static int sentinel_at(size_t i, int k) { (void)i; (void)k; return SENTINEL; }
static int own_at(size_t i, int k) { return (uint8_t)(i ^ k); }


/* ---------------------------------------------------------------- the cases (guest side) */

static void fill_own(struct qctx *q, size_t off, int k)
{
	for (size_t i = 0; i < MSG; i++)
		q->buf[off + i] = own_at(i, k);
}

static int prep_recv1(struct qctx *q) { return post_recv(q, 100, RECV_OFF); }

static int prep_recv3(struct qctx *q)
{
	for (int i = 0; i < 3; i++)
		if (post_recv(q, 100 + i, RECV_OFF + 1024 * i))
			return -1;
	return 0;
}

static int prep_sentinel(struct qctx *q)
{
	memset(q->buf, SENTINEL, BUF_LEN);
	return 0;
}

/* SEND 64 bytes (echoed back into the posted receive) and READ 256 bytes of the peer. */
static int run_normal(struct qctx *q)
{
	struct ibv_wc wc[3];
	int sends = 0;

	fill_own(q, 0, 0x11);
	if (post(q, IBV_WR_SEND, 1, 0, MSG, 0, 0) ||
	    post(q, IBV_WR_RDMA_READ, 2, 1024, 256, q->peer_va, q->peer_rkey) || take(q, wc, 3, 0))
		return -1;
	for (int i = 0; i < 3; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			return failf(q, "wr %llu: %s", (unsigned long long)wc[i].wr_id,
				     ibv_wc_status_str(wc[i].status));
		if (wc[i].wr_id == 100 && wc[i].byte_len != MSG)
			return failf(q, "echo of %u bytes, expected %d", wc[i].byte_len, MSG);
		if (wc[i].wr_id != 100 && wc[i].wr_id != (uint64_t)++sends)
			return failf(q, "send completions out of order");
	}
	if (check_bytes(q, "echo", RECV_OFF, MSG, 0, own_at, 0x11) ||
	    check_bytes(q, "READ data", 1024, 256, 0, mem_at, 0))
		return -1;
	return expect_state(q, IBV_QPS_RTS);
}

/* Duplicate ACKs and a stale one: each SEND completes once, successfully. */
static int run_dup_ack(struct qctx *q)
{
	struct ibv_wc wc;

	if (post(q, IBV_WR_SEND, 1, 0, MSG, 0, 0) || take(q, &wc, 1, 0) ||
	    expect_wc(q, &wc, 1, IBV_WC_SUCCESS) || post(q, IBV_WR_SEND, 2, 0, MSG, 0, 0) ||
	    take(q, &wc, 1, 300) || expect_wc(q, &wc, 2, IBV_WC_SUCCESS))
		return -1;
	return expect_state(q, IBV_QPS_RTS);
}

/* Only ACKs of PSNs never sent arrive: the SEND is retried and fails (IBA: ghost ACKs are
 * discarded). */
static int run_ack_unsent_psn(struct qctx *q)
{
	struct ibv_wc wc;

	if (post(q, IBV_WR_SEND, 1, 0, MSG, 0, 0) || take(q, &wc, 1, 0) ||
	    expect_wc(q, &wc, 1, IBV_WC_RETRY_EXC_ERR))
		return -1;
	return expect_state(q, IBV_QPS_ERR);
}

/* A sequence NAK: both SENDs are sent again and complete in order. */
static int run_nak_seq(struct qctx *q)
{
	struct ibv_wc wc[2];

	if (post(q, IBV_WR_SEND, 1, 0, MSG, 0, 0) || post(q, IBV_WR_SEND, 2, 0, MSG, 0, 0) ||
	    take(q, wc, 2, 300) || expect_wc(q, &wc[0], 1, IBV_WC_SUCCESS) ||
	    expect_wc(q, &wc[1], 2, IBV_WC_SUCCESS))
		return -1;
	return expect_state(q, IBV_QPS_RTS);
}

/* An ACK beyond an unanswered READ: the READ is asked again and completes with its data. */
static int run_implied_nak(struct qctx *q)
{
	struct ibv_wc wc[2];

	if (post(q, IBV_WR_RDMA_READ, 1, 0, MSG, q->peer_va, q->peer_rkey) ||
	    post(q, IBV_WR_SEND, 2, 1024, MSG, 0, 0) || take(q, wc, 2, 300) ||
	    expect_wc(q, &wc[0], 1, IBV_WC_SUCCESS) || expect_wc(q, &wc[1], 2, IBV_WC_SUCCESS) ||
	    check_bytes(q, "READ data", 0, MSG, 0, mem_at, 0))
		return -1;
	return expect_state(q, IBV_QPS_RTS);
}

/* Silence: the first SEND fails after retry_cnt retries, the second is flushed. */
static int run_retry_exc(struct qctx *q)
{
	struct ibv_wc wc[2];

	if (post(q, IBV_WR_SEND, 1, 0, MSG, 0, 0) || post(q, IBV_WR_SEND, 2, 0, MSG, 0, 0) ||
	    take(q, wc, 2, 0) || expect_wc(q, &wc[0], 1, IBV_WC_RETRY_EXC_ERR) ||
	    expect_wc(q, &wc[1], 2, IBV_WC_WR_FLUSH_ERR))
		return -1;
	return expect_state(q, IBV_QPS_ERR);
}

/* RNR NAK after RNR NAK: the SEND fails once rnr_retry is used up. */
static int run_rnr_retry_exc(struct qctx *q)
{
	struct ibv_wc wc;

	if (post(q, IBV_WR_SEND, 1, 0, MSG, 0, 0) || take(q, &wc, 1, 0) ||
	    expect_wc(q, &wc, 1, IBV_WC_RNR_RETRY_EXC_ERR))
		return -1;
	return expect_state(q, IBV_QPS_ERR);
}

/* SENDs ahead of the expected PSN deliver nothing; the one at the expected PSN arrives once. */
static int run_psn_ahead(struct qctx *q)
{
	struct ibv_wc wc;

	if (take(q, &wc, 1, 500) || expect_wc(q, &wc, 100, IBV_WC_SUCCESS) ||
	    check_bytes(q, "message", RECV_OFF, MSG, 0, msg_at, 1))
		return -1;
	return expect_state(q, IBV_QPS_RTS);
}

/* A duplicate SEND and one from the duplicate half of the PSN space: one delivery. */
static int run_psn_duplicate(struct qctx *q)
{
	struct ibv_wc wc;

	if (take(q, &wc, 1, 2000) || expect_wc(q, &wc, 100, IBV_WC_SUCCESS) ||
	    check_bytes(q, "message", RECV_OFF, MSG, 0, msg_at, 2))
		return -1;
	return expect_state(q, IBV_QPS_RTS);
}

/* SEND MIDDLE without FIRST: the QP goes to error and the posted receive, which the bad packet
 * never took, is flushed (rox and rdma_rxe alike, docs/peer.md). */
static int run_opcode_seq(struct qctx *q)
{
	struct ibv_wc wc;

	if (take(q, &wc, 1, 0) || expect_wc(q, &wc, 100, IBV_WC_WR_FLUSH_ERR))
		return -1;
	snprintf(q->note, sizeof(q->note), "receive: %s", ibv_wc_status_str(wc.status));
	if (expect_state(q, IBV_QPS_ERR))
		return -1;
	/* The bad packet took no receive WR: the owner learns of it by an event. */
	return expect_async(q, IBV_EVENT_QP_REQ_ERR, 1000);
}

/* A READ response longer than the READ: an error completion (bad response, or local length
 * error), the QP in error, and not one byte written past what was asked. */
static int run_read_resp_long(struct qctx *q)
{
	struct ibv_wc wc;

	if (post(q, IBV_WR_RDMA_READ, 1, 0, MSG, q->peer_va, q->peer_rkey) || take(q, &wc, 1, 0) ||
	    check_bytes(q, "past the READ", MSG, BUF_LEN - MSG, 0, sentinel_at, 0))
		return -1;
	if (wc.wr_id != 1 || (wc.status != IBV_WC_BAD_RESP_ERR && wc.status != IBV_WC_LOC_LEN_ERR))
		return failf(q, "wr %llu: %s, expected bad response or local length error",
			     (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	snprintf(q->note, sizeof(q->note), "READ: %s", ibv_wc_status_str(wc.status));
	return expect_state(q, IBV_QPS_ERR);
}

static int prep_sentinel_recv1(struct qctx *q)
{
	return prep_sentinel(q) || prep_recv1(q);
}

/* A WRITE with a wrong R_Key (IBA C9-222.1.1, class C): the responder QP goes to error, its
 * receive queue is flushed, its owner gets QP_ACCESS_ERR, and the buffer is untouched. */
static int run_rkey_to_guest(struct qctx *q)
{
	struct ibv_wc wc;

	if (await_state(q, IBV_QPS_ERR, 2000) || take(q, &wc, 1, 0) ||
	    expect_wc(q, &wc, 100, IBV_WC_WR_FLUSH_ERR) ||
	    check_bytes(q, "target buffer", 0, BUF_LEN, 0, sentinel_at, 0))
		return -1;
	return expect_async(q, IBV_EVENT_QP_ACCESS_ERR, 1000);
}

/* Our WRITE is NAKed with a remote access error. */
static int run_rkey_from_peer(struct qctx *q)
{
	struct ibv_wc wc;

	if (post(q, IBV_WR_RDMA_WRITE, 1, 0, MSG, q->peer_va, q->peer_rkey) || take(q, &wc, 1, 0) ||
	    expect_wc(q, &wc, 1, IBV_WC_REM_ACCESS_ERR))
		return -1;
	return expect_state(q, IBV_QPS_ERR);
}

/* The old READ's response arrives again around the new READ's: each buffer gets its own. */
static int run_read_resp_resend(struct qctx *q)
{
	struct ibv_wc wc;

	if (post(q, IBV_WR_RDMA_READ, 1, 0, MSG, q->peer_va, q->peer_rkey) || take(q, &wc, 1, 0) ||
	    expect_wc(q, &wc, 1, IBV_WC_SUCCESS) ||
	    post(q, IBV_WR_RDMA_READ, 2, 512, MSG, q->peer_va + 1000, q->peer_rkey) ||
	    take(q, &wc, 1, 300) || expect_wc(q, &wc, 2, IBV_WC_SUCCESS) ||
	    check_bytes(q, "READ 1", 0, MSG, 0, mem_at, 0) ||
	    check_bytes(q, "READ 2", 512, MSG, 1000, mem_at, 0))
		return -1;
	return expect_state(q, IBV_QPS_RTS);
}

struct peer_case {
	const char *name;
	int (*prepare)(struct qctx *q); /* before GO: receives, buffer contents */
	int (*run)(struct qctx *q);
};

static const struct peer_case CASES[] = {
	{ "normal", prep_recv1, run_normal },
	{ "dup_ack", NULL, run_dup_ack },
	{ "ack_unsent_psn", NULL, run_ack_unsent_psn },
	{ "nak_seq", NULL, run_nak_seq },
	{ "implied_nak", NULL, run_implied_nak },
	{ "retry_exc", NULL, run_retry_exc },
	{ "rnr_retry_exc", NULL, run_rnr_retry_exc },
	{ "psn_ahead", prep_recv3, run_psn_ahead },
	{ "psn_duplicate", prep_recv3, run_psn_duplicate },
	{ "opcode_seq", prep_recv1, run_opcode_seq },
	{ "read_resp_long", prep_sentinel, run_read_resp_long },
	{ "rkey_to_guest", prep_sentinel_recv1, run_rkey_to_guest },
	{ "rkey_from_peer", NULL, run_rkey_from_peer },
	{ "read_resp_resend", NULL, run_read_resp_resend },
};

/* ---------------------------------------------------------------- QP setup and the protocol */

static int read_line(struct qctx *q, char *line, size_t len)
{
	if (!fgets(line, len, q->in))
		return failf(q, "rox-peer closed the connection");
	line[strcspn(line, "\n")] = 0;
	return 0;
}

static int to_init(struct qctx *q)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };

	return ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      IBV_QP_ACCESS_FLAGS);
}

static int to_rts(struct qctx *q, uint32_t peer_qpn, uint32_t peer_psn, uint32_t my_psn)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				 .dest_qp_num = peer_qpn, .rq_psn = peer_psn, .max_dest_rd_atomic = 1,
				 .min_rnr_timer = 1 };

	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.grh.sgid_index = q->gid_index;
	a.ah_attr.grh.dgid.raw[10] = 0xff;
	a.ah_attr.grh.dgid.raw[11] = 0xff;
	memcpy(&a.ah_attr.grh.dgid.raw[12], &q->peer_ip, 4);
	if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = ACK_TIMEOUT;
	a.retry_cnt = RETRY_CNT;
	a.rnr_retry = RNR_RETRY;
	a.sq_psn = my_psn;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				      IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int make_qp(struct qctx *q)
{
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 16, .max_recv_wr = 16,
						.max_send_sge = 1, .max_recv_sge = 1 } };

	q->cq = ibv_create_cq(q->ctx, 64, NULL, NULL, 0);
	if (!q->cq)
		return failf(q, "ibv_create_cq: %s", strerror(errno));
	memset(q->buf, 0, BUF_LEN);
	q->mr = ibv_reg_mr(q->pd, q->buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE |
			   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!q->mr)
		return failf(q, "ibv_reg_mr: %s", strerror(errno));
	ia.send_cq = ia.recv_cq = q->cq;
	q->qp = ibv_create_qp(q->pd, &ia);
	if (!q->qp)
		return failf(q, "ibv_create_qp: %s", strerror(errno));
	if (to_init(q))
		return failf(q, "QP to INIT: %s", strerror(errno));
	return 0;
}

static void free_qp(struct qctx *q)
{
	if (q->qp)
		ibv_destroy_qp(q->qp);
	if (q->mr)
		ibv_dereg_mr(q->mr);
	if (q->cq)
		ibv_destroy_cq(q->cq);
	q->qp = NULL;
	q->mr = NULL;
	q->cq = NULL;
}

/* One case end to end; returns 0 if both sides passed (q->why says why not). */
static int run_case(struct qctx *q, const struct peer_case *c)
{
	char line[1024];
	unsigned qpn, psn, rkey;
	unsigned long long va;
	uint32_t my_psn = (uint32_t)lrand48() & 0xffffff;

	q->why[0] = q->note[0] = 0;
	if (make_qp(q))
		return -1;
	if (c->prepare && c->prepare(q))
		return -1;
	dprintf(q->sock, "CASE %s %u %u %u %llu\n", c->name, q->qp->qp_num, my_psn, q->mr->rkey,
		(unsigned long long)(uintptr_t)(q->buf + RECV_OFF));
	if (read_line(q, line, sizeof(line)))
		return -1;
	if (sscanf(line, "PEER %u %u %u %llu", &qpn, &psn, &rkey, &va) != 4)
		return failf(q, "rox-peer answered %s", line);
	q->peer_rkey = rkey;
	q->peer_va = va;
	if (to_rts(q, qpn, psn, my_psn))
		return failf(q, "QP to RTR/RTS: %s", strerror(errno));
	dprintf(q->sock, "GO\n");
	c->run(q);
	dprintf(q->sock, "END\n");
	if (read_line(q, line, sizeof(line)))
		return -1;
	if (strncmp(line, "VERDICT ok", 10))
		failf(q, "peer: %s", line + (strncmp(line, "VERDICT ", 8) ? 0 : 8));
	return q->why[0] ? -1 : 0;
}

static int connect_peer(struct qctx *q, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr = q->peer_ip };

	/* rox-peer starts with the lab; the guest may be up first. */
	for (int i = 0; i < 120; i++) {
		q->sock = socket(AF_INET, SOCK_STREAM, 0);
		if (!connect(q->sock, (struct sockaddr *)&sa, sizeof(sa))) {
			q->in = fdopen(q->sock, "r");
			return 0;
		}
		close(q->sock);
		sleep(1);
	}
	fprintf(stderr, "peer-cases: cannot reach rox-peer at %s:%d\n", inet_ntoa(q->peer_ip), port);
	return -1;
}

static const struct peer_case *find_case(const char *name)
{
	for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++)
		if (!strcmp(CASES[i].name, name))
			return &CASES[i];
	return NULL;
}

static struct ibv_context *open_dev(const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;

	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	return ctx;
}

int main(int argc, char **argv)
{
	static unsigned char buf[BUF_LEN] __attribute__((aligned(4096)));
	struct qctx q = { .buf = buf };
	int failed = 0;

	if (argc < 6) {
		fprintf(stderr, "usage: %s DEV GID_INDEX PEER_IP PORT CASE...\n", argv[0]);
		return 2;
	}
	srand48(getpid());
	q.gid_index = atoi(argv[2]);
	if (!inet_aton(argv[3], &q.peer_ip) || !(q.ctx = open_dev(argv[1])) ||
	    !(q.pd = ibv_alloc_pd(q.ctx))) {
		fprintf(stderr, "peer-cases: no device %s or bad address %s\n", argv[1], argv[3]);
		return 2;
	}
	if (connect_peer(&q, atoi(argv[4])))
		return 2;
	for (int i = 5; i < argc; i++) {
		const struct peer_case *c = find_case(argv[i]);
		char why[600] = "";
		int bad;

		if (!c) {
			printf("RESULT %s fail no such case\n", argv[i]);
			failed++;
			continue;
		}
		bad = run_case(&q, c);
		snprintf(why, sizeof(why), "%s", bad ? q.why : q.note);
		free_qp(&q);
		/* The device must still serve a fresh QP after the case. */
		if (strcmp(c->name, "normal") && run_case(&q, find_case("normal"))) {
			if (!bad)
				snprintf(why, sizeof(why), "then normal on a fresh QP: %s", q.why);
			bad = 1;
		}
		free_qp(&q);
		printf("RESULT %s %s %s\n", c->name, bad ? "fail" : "ok", why);
		fflush(stdout);
		failed += !!bad;
	}
	return failed ? 1 : 0;
}
