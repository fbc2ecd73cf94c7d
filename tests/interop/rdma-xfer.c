/*
 * rdma-xfer: move a large buffer between two RDMA devices by RDMA WRITE or RDMA READ over an
 * rdma_cm connection and prove it arrived intact (a checksum of every byte on both sides).
 *
 *   server: rdma-xfer -s ADDR [-p PORT] [-m MiB]
 *   client: rdma-xfer -c ADDR [-p PORT] -o write|read [-m MiB] [-k CHUNK_KiB]
 *
 * write: the client fills its buffer with a seeded pattern and RDMA WRITEs it into the server's
 *        zeroed buffer, then SENDs its checksum; the server checksums what landed and answers
 *        with its own. read: the server fills its buffer, the client RDMA READs all of it and
 *        compares with the checksum the server put in the connection's private data.
 * Exit 0 only if both checksums are equal; every failure prints why.
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

#define MAX_OUTSTANDING 16

struct conn_info {
	uint64_t addr;
	uint64_t checksum;
	uint32_t rkey;
	uint32_t mib;
};

struct msg {
	uint64_t checksum;
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

struct side {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr, *msg_mr;
	uint8_t *buf;
	size_t len;
	struct msg msg[2]; /* [0] received, [1] sent */
	int seen[3];       /* wr_ids 1 (receive) and 2 (send) completed */
};

static void setup_qp(struct rdma_cm_id *id, struct side *s)
{
	struct ibv_qp_init_attr qa = {0};
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
	if (rdma_create_qp(id, s->pd, &qa))
		die("rdma_create_qp");
	s->mr = ibv_reg_mr(s->pd, s->buf, s->len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!s->mr)
		die("ibv_reg_mr (buffer)");
	s->msg_mr = ibv_reg_mr(s->pd, s->msg, sizeof(s->msg), IBV_ACCESS_LOCAL_WRITE);
	if (!s->msg_mr)
		die("ibv_reg_mr (message)");
}

static void post_recv_msg(struct rdma_cm_id *id, struct side *s)
{
	struct ibv_sge sge = { (uintptr_t)&s->msg[0], sizeof(s->msg[0]), s->msg_mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(id->qp, &wr, &bad))
		die("ibv_post_recv");
}

static void post_send_msg(struct rdma_cm_id *id, struct side *s)
{
	struct ibv_sge sge = { (uintptr_t)&s->msg[1], sizeof(s->msg[1]), s->msg_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(id->qp, &wr, &bad))
		die("ibv_post_send (message)");
}

/* Waits for one completion; any error status fails the run. */
static struct ibv_wc wait_wc(struct side *s)
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

/* RDMA WRITE or READ of the whole buffer in chunks, at most MAX_OUTSTANDING in flight. */
static void move_all(struct rdma_cm_id *id, struct side *s, const struct conn_info *peer,
		     enum ibv_wr_opcode op, size_t chunk)
{
	size_t off = 0, done = 0, posted = 0, total = (s->len + chunk - 1) / chunk;
	while (done < total) {
		while (posted < total && posted - done < MAX_OUTSTANDING) {
			size_t n = s->len - off < chunk ? s->len - off : chunk;
			struct ibv_sge sge = { (uintptr_t)s->buf + off, (uint32_t)n, s->mr->lkey };
			struct ibv_send_wr wr = { .wr_id = 100 + posted, .sg_list = &sge, .num_sge = 1,
						  .opcode = op, .send_flags = IBV_SEND_SIGNALED }, *bad;
			wr.wr.rdma.remote_addr = peer->addr + off;
			wr.wr.rdma.rkey = peer->rkey;
			if (ibv_post_send(id->qp, &wr, &bad))
				die("ibv_post_send (data)");
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

static int server(const char *addr, size_t mib)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen_id, *id;
	struct rdma_addrinfo *ai = resolve(addr, 1);
	struct rdma_cm_event *ev;
	struct side s = { .len = mib << 20 };
	struct conn_info info;
	struct rdma_conn_param param = { .responder_resources = 16, .initiator_depth = 16,
					 .retry_count = 7, .rnr_retry_count = 7 };

	if (!ch || rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_bind_addr(listen_id, ai->ai_src_addr) || rdma_listen(listen_id, 1))
		die("rdma_bind_addr/listen");
	printf("rdma-xfer: server listening on %s:%s, %zu MiB\n", addr, port, mib);
	fflush(stdout);
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	id = ev->id;
	rdma_ack_cm_event(ev);
	if (posix_memalign((void **)&s.buf, 4096, s.len))
		fail("out of memory");
	/* The client's request says which operation follows: write (zeroed target) or read. */
	memset(s.buf, 0, s.len);
	fill_pattern(s.buf, s.len, 0x7265616420ull); /* read mode data; write mode overwrites it */
	setup_qp(id, &s);
	post_recv_msg(id, &s);
	info.addr = (uintptr_t)s.buf;
	info.rkey = s.mr->rkey;
	info.mib = mib;
	info.checksum = checksum(s.buf, s.len);
	param.private_data = &info;
	param.private_data_len = sizeof(info);
	if (rdma_accept(id, &param))
		die("rdma_accept");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
	/* The client's SEND ends the transfer: after a write it carries the client's checksum,
	 * after a read the client's checksum of what it read. */
	wait_for(&s, 1);
	uint64_t theirs = s.msg[0].checksum, ours = checksum(s.buf, s.len);
	s.msg[1].checksum = ours;
	post_send_msg(id, &s);
	wait_for(&s, 2);
	printf("rdma-xfer: server checksum %016" PRIx64 ", client's %016" PRIx64 ": %s\n", ours,
	       theirs, ours == theirs ? "equal" : "DIFFERENT");
	ev = NULL;
	if (rdma_get_cm_event(ch, &ev) == 0)
		rdma_ack_cm_event(ev);
	rdma_disconnect(id);
	return ours == theirs ? 0 : 1;
}

static int client(const char *addr, const char *op, size_t mib, size_t chunk)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_addrinfo *ai = resolve(addr, 0);
	struct rdma_cm_event *ev;
	struct side s = { .len = mib << 20 };
	struct conn_info peer;
	struct rdma_conn_param param = { .responder_resources = 16, .initiator_depth = 16,
					 .retry_count = 7, .rnr_retry_count = 7 };
	int write = strcmp(op, "write") == 0;
	double t0;

	if (!write && strcmp(op, "read") != 0)
		fail("-o takes write or read");
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
	if (write)
		fill_pattern(s.buf, s.len, 0x7772697465ull);
	else
		memset(s.buf, 0, s.len);
	setup_qp(id, &s);
	post_recv_msg(id, &s);
	if (rdma_connect(id, &param))
		die("rdma_connect");
	ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
	if (ev->param.conn.private_data_len < sizeof(peer))
		fail("server sent no buffer description");
	memcpy(&peer, ev->param.conn.private_data, sizeof(peer));
	rdma_ack_cm_event(ev);
	if (peer.mib != mib)
		fail("server and client disagree on the size (-m)");
	t0 = now();
	move_all(id, &s, &peer, write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ, chunk);
	double secs = now() - t0;
	uint64_t ours = checksum(s.buf, s.len);
	s.msg[1].checksum = ours;
	post_send_msg(id, &s);
	wait_for(&s, 2);
	wait_for(&s, 1);
	uint64_t theirs = s.msg[0].checksum;
	int ok = ours == theirs && (write || ours == peer.checksum);
	printf("rdma-xfer: %s %zu MiB in %.2f s (%.1f MB/s), checksum %016" PRIx64 " vs server's %016" PRIx64
	       ": %s\n", op, mib, secs, (double)s.len / secs / 1e6, ours, theirs,
	       ok ? "equal" : "DIFFERENT");
	rdma_disconnect(id);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	const char *srv = NULL, *cli = NULL, *op = "write";
	size_t mib = 256, chunk_kib = 1024;
	int c;
	while ((c = getopt(argc, argv, "s:c:o:m:k:p:")) != -1) {
		switch (c) {
		case 's': srv = optarg; break;
		case 'c': cli = optarg; break;
		case 'o': op = optarg; break;
		case 'm': mib = strtoul(optarg, NULL, 0); break;
		case 'k': chunk_kib = strtoul(optarg, NULL, 0); break;
		case 'p': port = optarg; break;
		default:
			fprintf(stderr, "usage: rdma-xfer -s ADDR [-p PORT] [-m MiB] | -c ADDR [-p PORT] -o write|read [-m MiB] [-k KiB]\n");
			return 2;
		}
	}
	if (!!srv == !!cli || mib == 0 || chunk_kib == 0)
		fail("give exactly one of -s ADDR / -c ADDR, and sizes above 0");
	setvbuf(stdout, NULL, _IOLBF, 0);
	return srv ? server(srv, mib) : client(cli, op, mib, chunk_kib << 10);
}
