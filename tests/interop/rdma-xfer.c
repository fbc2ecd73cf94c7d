/*
 * rdma-xfer: move a large buffer between two RDMA devices by RDMA WRITE, RDMA READ, RDMA
 * WRITE + FLUSH or ATOMIC WRITE over an rdma_cm connection (IPv4 or IPv6 addresses) and prove
 * it arrived intact (a checksum of every byte on both sides).
 *
 *   server: rdma-xfer -s ADDR [-p PORT] [-o OP] [-m MiB | -K KiB]
 *   client: rdma-xfer -c ADDR [-p PORT] -o OP [-m MiB | -K KiB] [-k CHUNK_KiB]
 *                     [-L QP_FILE -W DONE_FILE]
 *   OP: write | read | flush | atomic-write | mw (the server needs it for flush, atomic-write
 *       and mw: its buffer's access rights, its memory window)
 *
 * write: the client fills its buffer with a seeded pattern and RDMA WRITEs it into the server's
 *        zeroed buffer, then SENDs its checksum; the server checksums what landed and answers
 *        with its own. flush: the same WRITEs, then one FLUSH (global visibility) of the whole
 *        range before the checksum. atomic-write: the buffer goes as 8-byte ATOMIC WRITEs.
 *        read: the server fills its buffer, the client RDMA READs all of it and compares with
 *        the checksum the server put in the connection's private data.
 *        mw: the server binds a type 2 memory window over its buffer (a BIND_MW work request)
 *        and SENDs its R_Key; the client RDMA WRITEs the buffer through the window, sends its
 *        checksum by SEND with invalidate naming the window's R_Key, and the server requires a
 *        receive completion with IBV_WC_WITH_INV and that R_Key; after the server's answer
 *        the client WRITEs 8 bytes through the invalidated window and requires a remote
 *        access error (the QP then goes to error; the connection ends as usual).
 * -L/-W (write; tests/net/flood.sh's live-QP phase): once connected, the client writes its QP
 * number and its responder's expected PSN ("QPN PSN") to QP_FILE, then WRITEs the buffer again
 * and again until DONE_FILE exists (at most 300 s) before the checksum exchange: the QP stays
 * live while another host aims bad frames at it.
 * The server ends on the client's disconnect (the client disconnects only once it has the
 * server's answer), never on its own last SEND's completion: a lost ACK of that SEND must not
 * keep it waiting. Exit 0 only if both checksums are equal; every failure prints why.
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#include "../lib/rdma-cm-wait.h"

#define MAX_OUTSTANDING 16

struct conn_info {
	uint64_t addr;
	uint64_t checksum;
	uint32_t rkey;
	uint32_t kib; /* the buffer size */
};

struct msg {
	uint64_t checksum;
	uint64_t addr; /* mw: the window's address and R_Key */
	uint32_t rkey;
	uint32_t spare;
};

static void die(const char *what)
{
	fprintf(stderr, "rdma-xfer: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void fail(const char *what)
{
	fprintf(stderr, "rdma-xfer: %s\n", what);
	exit(1);
}

/* FNV-1a over 64-bit words: every byte counts, and it is fast enough for a TCG guest. */
static uint64_t checksum(const uint8_t *p, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;
	const uint64_t *w = (const uint64_t *)p;
	for (size_t i = 0; i < len / 8; i++) {
		h ^= w[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static void fill_pattern(uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t *w = (uint64_t *)p, x = seed;
	for (size_t i = 0; i < len / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		w[i] = x;
	}
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type type)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event");
	if (ev->event != type) {
		fprintf(stderr, "rdma-xfer: expected %s, got %s (status %d)\n", rdma_event_str(type),
			rdma_event_str(ev->event), ev->status);
		exit(1);
	}
	return ev;
}

enum op { OP_WRITE, OP_READ, OP_FLUSH, OP_ATOMIC_WRITE, OP_MW };
static const char *const op_names[] = { "write", "read", "flush", "atomic-write", "mw" };

static enum op parse_op(const char *name)
{
	for (unsigned int i = 0; i < sizeof(op_names) / sizeof(op_names[0]); i++)
		if (strcmp(name, op_names[i]) == 0)
			return (enum op)i;
	fail("-o takes write, read, flush, atomic-write or mw");
	return OP_WRITE;
}

struct side {
	struct ibv_qp_ex *qpx; /* flush and atomic-write: every WR goes through ibv_wr_* */
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr, *msg_mr;
	struct ibv_mw *mw; /* mw: the server's window */
	struct ibv_wc recv_wc; /* the last receive completion (wr_id 1) */
	uint8_t *buf;
	size_t len;
	struct msg msg[2]; /* [0] received, [1] sent */
	int seen[3];       /* wr_ids 1 (receive) and 2 (send) completed */
};

/* The QP (an extended one on a flush or atomic-write client) and the buffer's MR, with the
 * access rights `op` needs at the responder. */
static void setup_qp(struct rdma_cm_id *id, struct side *s, enum op op, int is_client)
{
	struct ibv_qp_init_attr_ex qa = {0};
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	s->pd = ibv_alloc_pd(id->verbs);
	if (!s->pd)
		die("ibv_alloc_pd");
	s->cq = ibv_create_cq(id->verbs, 2 * MAX_OUTSTANDING + 4, NULL, NULL, 0);
	if (!s->cq)
		die("ibv_create_cq");
	qa.send_cq = s->cq;
	qa.recv_cq = s->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = MAX_OUTSTANDING + 2;
	qa.cap.max_recv_wr = 2;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qa.pd = s->pd;
	qa.comp_mask = IBV_QP_INIT_ATTR_PD;
	if (is_client && (op == OP_FLUSH || op == OP_ATOMIC_WRITE)) {
		qa.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
				    IBV_QP_EX_WITH_FLUSH | IBV_QP_EX_WITH_ATOMIC_WRITE;
	}
	if (rdma_create_qp_ex(id, &qa))
		die("rdma_create_qp_ex");
	if (qa.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		s->qpx = ibv_qp_to_qp_ex(id->qp);
		if (!s->qpx)
			die("ibv_qp_to_qp_ex");
	}
	if (op == OP_FLUSH)
		access |= IBV_ACCESS_FLUSH_GLOBAL;
	if (op == OP_ATOMIC_WRITE)
		access |= IBV_ACCESS_REMOTE_ATOMIC;
	if (op == OP_MW)
		access |= IBV_ACCESS_MW_BIND;
	s->mr = ibv_reg_mr(s->pd, s->buf, s->len, access);
	if (!s->mr)
		die("ibv_reg_mr (buffer)");
	s->msg_mr = ibv_reg_mr(s->pd, s->msg, sizeof(s->msg), IBV_ACCESS_LOCAL_WRITE);
	if (!s->msg_mr)
		die("ibv_reg_mr (message)");
}

static struct ibv_wc wait_wc(struct side *s);

static void post_recv_msg(struct rdma_cm_id *id, struct side *s)
{
	struct ibv_sge sge = { (uintptr_t)&s->msg[0], sizeof(s->msg[0]), s->msg_mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(id->qp, &wr, &bad))
		die("ibv_post_recv");
}

/* The message in msg[1] as a SEND, or a SEND with invalidate of `invalidate_rkey` if not 0. */
static void post_send_msg_inv(struct rdma_cm_id *id, struct side *s, uint32_t invalidate_rkey)
{
	struct ibv_sge sge = { (uintptr_t)&s->msg[1], sizeof(s->msg[1]), s->msg_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = invalidate_rkey ? IBV_WR_SEND_WITH_INV : IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.invalidate_rkey = invalidate_rkey;
	if (s->qpx) {
		ibv_wr_start(s->qpx);
		s->qpx->wr_id = 2;
		s->qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(s->qpx);
		ibv_wr_set_sge(s->qpx, sge.lkey, sge.addr, sge.length);
		errno = ibv_wr_complete(s->qpx);
		if (errno)
			die("ibv_wr_send (message)");
		return;
	}
	if (ibv_post_send(id->qp, &wr, &bad))
		die("ibv_post_send (message)");
}

static void post_send_msg(struct rdma_cm_id *id, struct side *s)
{
	post_send_msg_inv(id, s, 0);
}

/* One data WR of `n` bytes at `off`: RDMA WRITE or READ through ibv_post_send, or RDMA
 * WRITE / ATOMIC WRITE (8 bytes) through the extended QP. */
static void post_data(struct rdma_cm_id *id, struct side *s, const struct conn_info *peer,
		      enum op op, uint64_t wr_id, size_t off, size_t n)
{
	struct ibv_sge sge = { (uintptr_t)s->buf + off, (uint32_t)n, s->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				  .opcode = op == OP_READ ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (!s->qpx) {
		wr.wr.rdma.remote_addr = peer->addr + off;
		wr.wr.rdma.rkey = peer->rkey;
		if (ibv_post_send(id->qp, &wr, &bad))
			die("ibv_post_send (data)");
		return;
	}
	ibv_wr_start(s->qpx);
	s->qpx->wr_id = wr_id;
	s->qpx->wr_flags = IBV_SEND_SIGNALED;
	if (op == OP_ATOMIC_WRITE) {
		ibv_wr_atomic_write(s->qpx, peer->rkey, peer->addr + off, s->buf + off);
	} else {
		ibv_wr_rdma_write(s->qpx, peer->rkey, peer->addr + off);
		ibv_wr_set_sge(s->qpx, sge.lkey, sge.addr, sge.length);
	}
	errno = ibv_wr_complete(s->qpx);
	if (errno)
		die("ibv_wr_* (data)");
}

/* FLUSH of the peer's whole buffer (global visibility) and its completion. */
static void flush_all(struct side *s, const struct conn_info *peer)
{
	struct ibv_wc wc;
	ibv_wr_start(s->qpx);
	s->qpx->wr_id = 3;
	s->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_flush(s->qpx, peer->rkey, peer->addr, s->len, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE);
	errno = ibv_wr_complete(s->qpx);
	if (errno)
		die("ibv_wr_flush");
	while ((wc = wait_wc(s)).wr_id != 3)
		if (wc.wr_id == 1 || wc.wr_id == 2)
			s->seen[wc.wr_id] = 1;
	if (wc.opcode != IBV_WC_FLUSH)
		fail("the FLUSH completed with another opcode");
}

/* Waits for one completion, whatever its status; a receive's is kept in recv_wc. */
static struct ibv_wc poll_wc(struct side *s)
{
	struct ibv_wc wc;
	double deadline = now() + 120;
	int n;
	while ((n = ibv_poll_cq(s->cq, 1, &wc)) == 0) {
		if (now() > deadline)
			fail("no completion within 120 s");
	}
	if (n < 0)
		fail("ibv_poll_cq failed");
	if (wc.wr_id == 1)
		s->recv_wc = wc;
	return wc;
}

/* Waits for one completion; any error status fails the run. */
static struct ibv_wc wait_wc(struct side *s)
{
	struct ibv_wc wc = poll_wc(s);

	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "rdma-xfer: completion wr_id %" PRIu64 " failed: %s (vendor_err %u)\n",
			wc.wr_id, ibv_wc_status_str(wc.status), wc.vendor_err);
		exit(1);
	}
	return wc;
}

/* Waits until the message with this wr_id (1 receive, 2 send) completed; data completions
 * seen meanwhile are already accounted for by move_all. */
static void wait_for(struct side *s, uint64_t wr_id)
{
	while (!s->seen[wr_id]) {
		uint64_t id = wait_wc(s).wr_id;
		if (id == 1 || id == 2)
			s->seen[id] = 1;
	}
}

/* The whole buffer in chunks (8 bytes each for ATOMIC WRITE), at most MAX_OUTSTANDING in
 * flight. */
static void move_all(struct rdma_cm_id *id, struct side *s, const struct conn_info *peer,
		     enum op op, size_t chunk)
{
	size_t off = 0, done = 0, posted = 0, total;
	if (op == OP_ATOMIC_WRITE)
		chunk = sizeof(uint64_t);
	total = (s->len + chunk - 1) / chunk;
	while (done < total) {
		while (posted < total && posted - done < MAX_OUTSTANDING) {
			size_t n = s->len - off < chunk ? s->len - off : chunk;
			post_data(id, s, peer, op, 100 + posted, off, n);
			off += n;
			posted++;
		}
		uint64_t id = wait_wc(s).wr_id;
		if (id == 1 || id == 2)
			s->seen[id] = 1; /* a message, not a data chunk */
		else
			done++;
	}
}

static const char *port = "20886";

static struct rdma_addrinfo *resolve(const char *addr, int passive)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	if (passive)
		hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(addr, port, &hints, &res))
		die("rdma_getaddrinfo");
	return res;
}

/* Waits up to 120 s for the connection's end: the server's end of a transfer, and the client's
 * after its own rdma_disconnect. */
static void wait_disconnect(struct rdma_event_channel *ch)
{
	int seen = rdma_cm_wait_disconnect(ch, 120);

	if (seen < 0)
		die("rdma_get_cm_event");
	if (!seen)
		fail("no DISCONNECTED event within 120 s");
}

/* rdma_cm gives a responder QP remote read and write access only (and redoes INIT from its
 * own attributes inside rdma_accept), while a FLUSH needs the QP's FLUSH access too (IBA
 * A19; rox and rdma_rxe both check it). rdma_accept has moved the QP to RTS; RTS->RTS may
 * change the access flags. The client's FLUSH follows its REP, RTU and all its WRITEs. */
static void grant_flush(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr = {
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_FLUSH_GLOBAL,
	};

	errno = ibv_modify_qp(qp, &attr, IBV_QP_ACCESS_FLAGS);
	if (errno)
		die("ibv_modify_qp (FLUSH access)");
}

/* mw, server: binds a type 2 window over the whole buffer (remote write) with a BIND_MW work
 * request on the connection's QP, and SENDs the client its address and new R_Key. */
static uint32_t bind_window(struct rdma_cm_id *id, struct side *s)
{
	struct ibv_send_wr wr = { .wr_id = 4, .opcode = IBV_WR_BIND_MW,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;

	s->mw = ibv_alloc_mw(s->pd, IBV_MW_TYPE_2);
	if (!s->mw)
		die("ibv_alloc_mw (type 2)");
	wr.bind_mw.mw = s->mw;
	wr.bind_mw.rkey = ibv_inc_rkey(s->mw->rkey);
	wr.bind_mw.bind_info.mr = s->mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)s->buf;
	wr.bind_mw.bind_info.length = s->len;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (ibv_post_send(id->qp, &wr, &bad))
		die("ibv_post_send (BIND_MW)");
	while ((wc = wait_wc(s)).wr_id != 4)
		if (wc.wr_id == 1 || wc.wr_id == 2)
			s->seen[wc.wr_id] = 1;
	if (wc.opcode != IBV_WC_BIND_MW)
		fail("the BIND_MW completed with another opcode");
	printf("rdma-xfer: server bound a type 2 MW over its buffer: R_Key %#x (the MR's %#x)\n",
	       wr.bind_mw.rkey, s->mr->rkey);
	s->msg[1].addr = (uintptr_t)s->buf;
	s->msg[1].rkey = wr.bind_mw.rkey;
	post_send_msg(id, s);
	wait_for(s, 2);
	s->seen[2] = 0;
	return wr.bind_mw.rkey;
}

/* The kernel's IB_WC_WITH_INVALIDATE (include/rdma/ib_verbs.h), which is IBV_WC_IP_CSUM_OK in
 * libibverbs' numbering: rdma_rxe's provider copies the kernel's work completion into the
 * ibv_wc as it is (rdma-core 56.1 providers/rxe/rxe.c, memcpy in its poll), so on rxe a SEND
 * with invalidate shows this bit, not IBV_WC_WITH_INV; the invalidated R_Key is in its place. */
#define KERNEL_IB_WC_WITH_INVALIDATE (1u << 2)

/* mw, server: the client's checksum came by SEND with invalidate of the window's R_Key: the
 * receive completion says so (IBV_WC_WITH_INV; on an rxe device rxe's kernel bit, above) and
 * names that R_Key. */
static int invalidated_by_send(struct rdma_cm_id *id, const struct side *s, uint32_t mw_rkey)
{
	const struct ibv_wc *wc = &s->recv_wc;
	int rxe = strncmp(ibv_get_device_name(id->verbs->device), "rxe", 3) == 0;
	int flagged = (wc->wc_flags & IBV_WC_WITH_INV) ||
		      (rxe && (wc->wc_flags & KERNEL_IB_WC_WITH_INVALIDATE));
	int ok = flagged && wc->invalidated_rkey == mw_rkey;

	printf("rdma-xfer: server's receive: wc_flags %#x (%s), invalidated R_Key %#x (the "
	       "window's %#x): %s\n", wc->wc_flags,
	       wc->wc_flags & IBV_WC_WITH_INV ? "IBV_WC_WITH_INV" :
	       flagged ? "rxe: the kernel's IB_WC_WITH_INVALIDATE bit, not IBV_WC_WITH_INV" :
			 "no invalidate flag",
	       wc->invalidated_rkey, mw_rkey, ok ? "invalidated" : "NOT INVALIDATED");
	return ok;
}

/* mw, client: one 8-byte WRITE through the invalidated window must fail with a remote access
 * error (the responder NAKs it). */
static int window_refused(struct rdma_cm_id *id, struct side *s, const struct conn_info *peer)
{
	struct ibv_wc wc;

	post_data(id, s, peer, OP_WRITE, 5, 0, sizeof(uint64_t));
	while ((wc = poll_wc(s)).wr_id != 5)
		;
	printf("rdma-xfer: WRITE through the invalidated window: %s\n",
	       ibv_wc_status_str(wc.status));
	return wc.status == IBV_WC_REM_ACCESS_ERR;
}

static int server(const char *addr, size_t len, enum op op)
{
	uint32_t mw_rkey = 0;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen_id, *id;
	struct rdma_addrinfo *ai = resolve(addr, 1);
	struct rdma_cm_event *ev;
	struct side s = { .len = len };
	struct conn_info info;
	struct rdma_conn_param param = { .responder_resources = 16, .initiator_depth = 16,
					 .retry_count = 7, .rnr_retry_count = 7 };

	if (!ch || rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_bind_addr(listen_id, ai->ai_src_addr) || rdma_listen(listen_id, 1))
		die("rdma_bind_addr/listen");
	printf("rdma-xfer: server listening on %s:%s, %zu KiB, %s\n", addr, port, len >> 10,
	       op_names[op]);
	fflush(stdout);
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	id = ev->id;
	rdma_ack_cm_event(ev);
	if (posix_memalign((void **)&s.buf, 4096, s.len))
		fail("out of memory");
	/* Read mode data; the other modes overwrite it. */
	fill_pattern(s.buf, s.len, 0x7265616420ull);
	setup_qp(id, &s, op, 0);
	post_recv_msg(id, &s);
	info.addr = (uintptr_t)s.buf;
	info.rkey = s.mr->rkey;
	info.kib = (uint32_t)(len >> 10);
	info.checksum = checksum(s.buf, s.len);
	param.private_data = &info;
	param.private_data_len = sizeof(info);
	if (rdma_accept(id, &param))
		die("rdma_accept");
	if (op == OP_FLUSH)
		grant_flush(id->qp);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
	if (op == OP_MW)
		mw_rkey = bind_window(id, &s);
	/* The client's SEND ends the transfer: after a write it carries the client's checksum,
	 * after a read the client's checksum of what it read. */
	wait_for(&s, 1);
	uint64_t theirs = s.msg[0].checksum, ours = checksum(s.buf, s.len);
	int invalidated = op != OP_MW || invalidated_by_send(id, &s, mw_rkey);
	s.msg[1].checksum = ours;
	post_send_msg(id, &s);
	/* The client disconnects once it has our answer; our SEND's own completion may never
	 * come (its ACK lost, the client's QP gone). */
	wait_disconnect(ch);
	printf("rdma-xfer: server checksum %016" PRIx64 ", client's %016" PRIx64 ": %s\n", ours,
	       theirs, ours == theirs ? "equal" : "DIFFERENT");
	return ours == theirs && invalidated ? 0 : 1;
}

static const char *live_qp_file, *live_done_file;

/* -L: "QPN PSN" of the connected QP (its responder's expected PSN) to live_qp_file, whole. */
static void publish_live_qp(struct ibv_qp *qp)
{
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr attr;
	char tmp[512];
	FILE *f;

	if (ibv_query_qp(qp, &attr, IBV_QP_RQ_PSN, &init))
		die("ibv_query_qp (RQ PSN)");
	snprintf(tmp, sizeof(tmp), "%s.tmp", live_qp_file);
	f = fopen(tmp, "w");
	if (!f || fprintf(f, "%u %u\n", qp->qp_num, attr.rq_psn) < 0 || fclose(f) ||
	    rename(tmp, live_qp_file))
		die("writing the -L file");
	printf("rdma-xfer: live QP %#x, responder expects PSN %#x\n", qp->qp_num, attr.rq_psn);
}

static int client(const char *addr, enum op op, size_t len, size_t chunk)
{
	unsigned int rounds = 0;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_addrinfo *ai = resolve(addr, 0);
	struct rdma_cm_event *ev;
	struct side s = { .len = len };
	struct conn_info peer;
	struct rdma_conn_param param = { .responder_resources = 16, .initiator_depth = 16,
					 .retry_count = 7, .rnr_retry_count = 7 };
	double t0;

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_resolve_addr(id, NULL, ai->ai_dst_addr, 5000))
		die("rdma_resolve_addr");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(id, 5000))
		die("rdma_resolve_route");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	if (posix_memalign((void **)&s.buf, 4096, s.len))
		fail("out of memory");
	if (op == OP_READ)
		memset(s.buf, 0, s.len);
	else
		fill_pattern(s.buf, s.len, 0x7772697465ull);
	setup_qp(id, &s, op, 1);
	post_recv_msg(id, &s);
	if (rdma_connect(id, &param))
		die("rdma_connect");
	ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
	if (ev->param.conn.private_data_len < sizeof(peer))
		fail("server sent no buffer description");
	memcpy(&peer, ev->param.conn.private_data, sizeof(peer));
	rdma_ack_cm_event(ev);
	if (peer.kib != (uint32_t)(len >> 10))
		fail("server and client disagree on the size (-m / -K)");
	if (op == OP_MW) {
		/* The window's R_Key, then a receive for the server's answer. */
		wait_for(&s, 1);
		s.seen[1] = 0;
		if (s.msg[0].addr != peer.addr || s.msg[0].rkey == peer.rkey)
			fail("the server's window is not over its buffer or has the MR's R_Key");
		peer.rkey = s.msg[0].rkey;
		post_recv_msg(id, &s);
	}
	if (live_qp_file)
		publish_live_qp(id->qp);
	t0 = now();
	do {
		move_all(id, &s, &peer, op, chunk);
		rounds++;
	} while (live_done_file && access(live_done_file, F_OK) && now() - t0 < 300);
	if (live_done_file && access(live_done_file, F_OK))
		fail("-W: the done file did not appear within 300 s");
	if (rounds > 1)
		printf("rdma-xfer: the buffer written %u times while the QP was live\n", rounds);
	if (op == OP_FLUSH)
		flush_all(&s, &peer);
	double secs = now() - t0;
	uint64_t ours = checksum(s.buf, s.len);
	s.msg[1].checksum = ours;
	post_send_msg_inv(id, &s, op == OP_MW ? peer.rkey : 0);
	wait_for(&s, 2);
	wait_for(&s, 1);
	uint64_t theirs = s.msg[0].checksum;
	int ok = ours == theirs && (op != OP_READ || ours == peer.checksum);
	if (op == OP_MW && !window_refused(id, &s, &peer))
		ok = 0;
	printf("rdma-xfer: %s %zu KiB in %.2f s (%.1f MB/s), checksum %016" PRIx64
	       " vs server's %016" PRIx64 ": %s\n", op_names[op], len >> 10, secs,
	       (double)s.len * rounds / secs / 1e6, ours, theirs, ok ? "equal" : "DIFFERENT");
	/* Stay until our DREQ is answered (or the CM gives up on it): a client that exits at once
	 * takes the DREQ's retransmissions with it, and a lost DREQ would leave the server waiting. */
	rdma_disconnect(id);
	wait_disconnect(ch);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	const char *srv = NULL, *cli = NULL;
	enum op op = OP_WRITE;
	size_t kib = 256 << 10, chunk_kib = 1024;
	int c;
	while ((c = getopt(argc, argv, "s:c:o:m:K:k:p:L:W:")) != -1) {
		switch (c) {
		case 's': srv = optarg; break;
		case 'c': cli = optarg; break;
		case 'o': op = parse_op(optarg); break;
		case 'm': kib = strtoul(optarg, NULL, 0) << 10; break;
		case 'K': kib = strtoul(optarg, NULL, 0); break;
		case 'k': chunk_kib = strtoul(optarg, NULL, 0); break;
		case 'p': port = optarg; break;
		case 'L': live_qp_file = optarg; break;
		case 'W': live_done_file = optarg; break;
		default:
			fprintf(stderr, "usage: rdma-xfer -s ADDR [-p PORT] [-o OP] [-m MiB | -K KiB] | "
					"-c ADDR [-p PORT] -o OP [-m MiB | -K KiB] [-k KiB]\n");
			return 2;
		}
	}
	if (!live_qp_file != !live_done_file || (live_qp_file && (srv || op != OP_WRITE)))
		fail("-L and -W go together, on a write client");
	if (!!srv == !!cli || kib == 0 || chunk_kib == 0)
		fail("give exactly one of -s ADDR / -c ADDR, and sizes above 0");
	setvbuf(stdout, NULL, _IOLBF, 0);
	return srv ? server(srv, kib << 10, op) : client(cli, op, kib << 10, chunk_kib << 10);
}
