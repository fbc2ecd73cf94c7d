/*
 * mcast-verbs: UD multicast through libibverbs alone (no rdma_cm: the kernel's rdma_cm does not
 * join IPv6 groups on RoCEv2, cma_iboe_join_multicast answers ENOTSUPP). A UD QP on RECV_DEV
 * attaches to GROUP (ibv_attach_mcast); a UD QP on SEND_DEV sends COUNT messages to it
 * (AH to the group GID, remote QPN 0xFFFFFF); every message must arrive intact, from the
 * sender's QPN. Then the bad-input checks: attach to a unicast GID and a second detach fail
 * with EINVAL, and after the detach nothing arrives.
 *
 *   mcast-verbs SEND_DEV SEND_GID_INDEX RECV_DEV GROUP [COUNT]
 *
 * Between hosts, one side each (the sender waits for every send completion, so nothing is
 * lost to the QP going away early, unlike mckey's sender):
 *   mcast-verbs recv DEV GROUP COUNT      attach, print "attached", receive COUNT messages
 *   mcast-verbs send DEV GID_INDEX GROUP COUNT
 * GROUP: an IPv6 group or an IPv4 one (then the GID is IPv4-mapped).
 * Exit 0 only if everything above held; every failure prints why.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define QKEY 0x11111111u
#define MULTICAST_QPN 0xffffffu
#define MSG_SIZE 256
#define GRH_SIZE 40
/* How long a completion may take: a deadline against a hang, not a speed (a loaded host may not
 * run a rox-nic process for a while). */
#define WAIT_MS 60000

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
};

static int fail(const char *what, int err)
{
	fprintf(stderr, "FAIL: %s: %s\n", what, strerror(err));
	exit(1);
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
	if (!ctx)
		fail(name, ENODEV);
	return ctx;
}

static void setup(struct side *s, const char *dev, int depth)
{
	struct ibv_qp_init_attr init = {
		.qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = depth, .max_recv_wr = depth, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = QKEY };
	size_t len = (size_t)depth * (MSG_SIZE + GRH_SIZE);

	s->ctx = open_dev(dev);
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = s->pd ? ibv_create_cq(s->ctx, 2 * depth, NULL, NULL, 0) : NULL;
	init.send_cq = init.recv_cq = s->cq;
	s->qp = s->cq ? ibv_create_qp(s->pd, &init) : NULL;
	s->buf = calloc(1, len);
	s->mr = s->qp && s->buf ? ibv_reg_mr(s->pd, s->buf, len, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!s->mr)
		fail("creating PD/CQ/QP/MR", errno);
	if (ibv_modify_qp(s->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		fail("modify to INIT", errno);
	attr.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(s->qp, &attr, IBV_QP_STATE))
		fail("modify to RTR", errno);
	attr.qp_state = IBV_QPS_RTS;
	attr.sq_psn = 0;
	if (ibv_modify_qp(s->qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN))
		fail("modify to RTS", errno);
}

static void post_recv(struct side *s, int i)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)s->buf + (size_t)i * (MSG_SIZE + GRH_SIZE),
		.length = MSG_SIZE + GRH_SIZE,
		.lkey = s->mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(s->qp, &wr, &bad))
		fail("post_recv", errno);
}

static long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Polls until `want` completions arrived (or WAIT_MS passed); returns how many did. */
static int poll_n(struct side *s, struct ibv_wc *wc, int want, int wait_ms)
{
	int got = 0;
	long until = now_ms() + wait_ms;

	while (got < want && now_ms() < until) {
		int n = ibv_poll_cq(s->cq, want - got, wc + got);

		if (n < 0)
			fail("poll_cq", EIO);
		got += n;
	}
	return got;
}

/* Message `seq`: its number in the first 4 bytes, then a pattern of the number and the offset,
 * so a receiver can tell every message from another and from a zeroed or stale buffer. */
static char pattern_byte(int seq, int offset)
{
	return (char)('a' + (seq * 7 + offset) % 26);
}

static void fill_message(char *msg, int seq)
{
	uint32_t tag = (uint32_t)seq;

	memcpy(msg, &tag, sizeof(tag));
	for (int j = sizeof(tag); j < MSG_SIZE; j++)
		msg[j] = pattern_byte(seq, j);
}

static void send_all(struct side *s, struct ibv_ah *ah, int count)
{
	struct ibv_wc wc[64];

	for (int i = 0; i < count; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)s->buf, .length = MSG_SIZE, .lkey = s->mr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED,
			.wr.ud = { .ah = ah, .remote_qpn = MULTICAST_QPN, .remote_qkey = QKEY },
		}, *bad;

		fill_message(s->buf, i);
		if (ibv_post_send(s->qp, &wr, &bad))
			fail("post_send", errno);
		if (poll_n(s, wc, 1, WAIT_MS) != 1 || wc[0].status != IBV_WC_SUCCESS)
			fail("send completion", EIO);
	}
}

static void parse_group(const char *text, union ibv_gid *gid)
{
	struct in_addr v4;

	memset(gid, 0, sizeof(*gid));
	if (inet_pton(AF_INET, text, &v4) == 1) {
		gid->raw[10] = gid->raw[11] = 0xff;
		memcpy(&gid->raw[12], &v4, 4);
	} else if (inet_pton(AF_INET6, text, gid->raw) != 1) {
		fail("GROUP is not an IP address", EINVAL);
	}
}

/* Checks `count` receive completions in `wc`, from `src_qp` (0: any) to `group`. */
static void check_received(struct side *rcv, struct ibv_wc *wc, int count, uint32_t src_qp,
			   const union ibv_gid *group)
{
	char seen[64] = { 0 };

	for (int i = 0; i < count; i++) {
		char *msg = rcv->buf + wc[i].wr_id * (MSG_SIZE + GRH_SIZE) + GRH_SIZE;
		uint32_t seq;

		if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len != MSG_SIZE + GRH_SIZE ||
		    (src_qp && wc[i].src_qp != src_qp) || !(wc[i].wc_flags & IBV_WC_GRH))
			fail("receive completion (status, length, src_qp or GRH flag)", EIO);
		/* Each message the sender sent (fill_message), each once. */
		memcpy(&seq, msg, sizeof(seq));
		if (seq >= (uint32_t)count || seen[seq]++)
			fail("payload: a message number not sent, or received twice", EIO);
		for (int j = sizeof(seq); j < MSG_SIZE; j++)
			if (msg[j] != pattern_byte(seq, j))
				fail("payload differs from the sender's pattern", EIO);
		/* The GRH area: an IPv6 header's destination at 24, an IPv4 one's at 36. */
		if (group->raw[0] == 0xff ? memcmp(msg - GRH_SIZE + 24, group->raw, 16)
					  : memcmp(msg - GRH_SIZE + 36, &group->raw[12], 4))
			fail("GRH destination is not the group", EIO);
	}
}

static int one_side(char **argv)
{
	struct side s = {0};
	union ibv_gid group;
	struct ibv_wc wc[64];
	int recv = !strcmp(argv[1], "recv");
	int count = atoi(argv[recv ? 4 : 5]);

	if (count < 1 || count > 64)
		fail("COUNT must be 1..64", EINVAL);
	parse_group(argv[recv ? 3 : 4], &group);
	setup(&s, argv[2], count);
	if (recv) {
		int err = ibv_attach_mcast(s.qp, &group, 0);

		if (err)
			fail("ibv_attach_mcast", err);
		for (int i = 0; i < count; i++)
			post_recv(&s, i);
		printf("attached\n");
		fflush(stdout);
		if (poll_n(&s, wc, count, 120000) != count)
			fail("not every message arrived", ETIMEDOUT);
		check_received(&s, wc, count, 0, &group);
		err = ibv_detach_mcast(s.qp, &group, 0);
		if (err)
			fail("ibv_detach_mcast", err);
		printf("ok   received %d x %d bytes on %s (%s)\n", count, MSG_SIZE, argv[3], argv[2]);
		return 0;
	}
	struct ibv_ah_attr ah_attr = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = group, .sgid_index = atoi(argv[3]), .hop_limit = 1 },
	};
	struct ibv_ah *ah = ibv_create_ah(s.pd, &ah_attr);

	if (!ah)
		fail("create_ah to the group", errno);
	send_all(&s, ah, count);
	printf("ok   sent %d x %d bytes to %s (%s), every send completed\n", count, MSG_SIZE, argv[4], argv[2]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "recv"))
		return one_side(argv);
	if (argc == 6 && !strcmp(argv[1], "send"))
		return one_side(argv);

	struct side snd = {0}, rcv = {0};
	union ibv_gid group, unicast;
	struct ibv_wc wc[64];
	int count = argc > 5 ? atoi(argv[5]) : 16;

	if (argc < 5 || count < 1 || count > 64) {
		fprintf(stderr, "usage: mcast-verbs SEND_DEV SEND_GID_INDEX RECV_DEV GROUP [COUNT <= 64]\n"
				"       mcast-verbs recv DEV GROUP COUNT\n"
				"       mcast-verbs send DEV GID_INDEX GROUP COUNT\n");
		return 2;
	}
	parse_group(argv[4], &group);
	setup(&snd, argv[1], count);
	setup(&rcv, argv[3], count);

	/* Bad input first: a unicast GID is no group; nothing is attached yet to detach. */
	if (ibv_query_gid(snd.ctx, 1, atoi(argv[2]), &unicast))
		fail("query_gid", errno);
	errno = 0;
	if (ibv_attach_mcast(rcv.qp, &unicast, 0) != EINVAL && errno != EINVAL)
		fail("attach to a unicast GID did not fail with EINVAL", errno);
	if (ibv_detach_mcast(rcv.qp, &group, 0) == 0)
		fail("detach of an unattached QP succeeded", 0);
	printf("ok   attach to a unicast GID and detach of an unattached QP fail\n");

	int err = ibv_attach_mcast(rcv.qp, &group, 0);
	if (err)
		fail("ibv_attach_mcast", err);
	for (int i = 0; i < count; i++)
		post_recv(&rcv, i);
	struct ibv_ah_attr ah_attr = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = group, .sgid_index = atoi(argv[2]), .hop_limit = 1 },
	};
	struct ibv_ah *ah = ibv_create_ah(snd.pd, &ah_attr);
	if (!ah)
		fail("create_ah to the group", errno);
	send_all(&snd, ah, count);
	int got = poll_n(&rcv, wc, count, WAIT_MS);
	if (got != count)
		fail("not every message arrived", ETIMEDOUT);
	check_received(&rcv, wc, count, snd.qp->qp_num, &group);
	printf("ok   %d x %d bytes from %s to %s on %s\n", count, MSG_SIZE, argv[1], argv[4], argv[3]);

	err = ibv_detach_mcast(rcv.qp, &group, 0);
	if (err)
		fail("ibv_detach_mcast", err);
	if (ibv_detach_mcast(rcv.qp, &group, 0) == 0)
		fail("second detach succeeded", 0);
	post_recv(&rcv, 0);
	send_all(&snd, ah, 1);
	if (poll_n(&rcv, wc, 1, 1000) != 0)
		fail("a message arrived after the detach", EIO);
	printf("ok   detached: nothing arrives; a second detach fails\n");
	return 0;
}
