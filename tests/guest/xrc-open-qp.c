/* ibv_open_qp on an XRC target QP (tests/guest/t-provider-xrc.sh builds and runs this): the
 * target belongs to its XRC domain, not to the process that created it.
 * Usage: xrc-open-qp <device> <gid index> <domain file>
 * Two processes, each with its own context of <device>, open the XRC domain on <domain file>:
 *   creator: makes an XRC target QP in the domain and hands its number to the opener; once
 *            the opener holds it, destroys its own handle, closes the domain and the device;
 *   opener:  checks that opening the number as another QP type or in another domain fails,
 *            opens it (ibv_open_qp), and after the creator is gone moves it to RTR through its
 *            handle, connects an XRC initiator of its own to it and sends one message naming
 *            its own XRC SRQ: it must arrive there, its completion naming the target. Then it
 *            destroys its handle, the last one: the number can no longer be opened.
 * Exit status 0 when every step went as described; each failure prints its reason. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "qp-loop.h"

enum { MSG = 64, SRQ_WR = 4 };

static const char *dev_name, *domain_file;
static int gid_index;

#define FAIL(...)                                                   \
	do {                                                        \
		fprintf(stderr, "xrc-open-qp: FAIL: " __VA_ARGS__); \
		fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
		return 1;                                           \
	} while (0)

static struct ibv_xrcd *open_domain(struct ibv_context *ctx, int fd)
{
	struct ibv_xrcd_init_attr a = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = fd, .oflags = O_CREAT };
	return ibv_open_xrcd(ctx, &a);
}

static struct ibv_qp *open_target(struct ibv_context *ctx, struct ibv_xrcd *xrcd, uint32_t qpn,
				  enum ibv_qp_type type)
{
	struct ibv_qp_open_attr a = { .comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
		IBV_QP_OPEN_ATTR_TYPE, .qp_num = qpn, .xrcd = xrcd, .qp_type = type };
	return ibv_open_qp(ctx, &a);
}

/* A process's own context of the device and the XRC domain on the domain file. */
struct domain {
	struct ibv_context *ctx;
	int fd;
	struct ibv_xrcd *xrcd;
};

/* Opens `d` for `who` (creator or opener): 0, or 1 after saying what failed. */
static int domain_open(struct domain *d, const char *who)
{
	d->ctx = open_device_named(dev_name);
	if (!d->ctx)
		FAIL("%s: cannot open %s", who, dev_name);
	d->fd = open(domain_file, O_RDONLY | O_CREAT, 0600);
	d->xrcd = d->fd < 0 ? NULL : open_domain(d->ctx, d->fd);
	if (!d->xrcd)
		FAIL("%s: cannot open the XRC domain on %s", who, domain_file);
	return 0;
}

/* Lets go of `d`: 0, or -1 if the domain or the context would not close. */
static int domain_close(struct domain *d)
{
	if (ibv_close_xrcd(d->xrcd) || ibv_close_device(d->ctx))
		return -1;
	close(d->fd);
	return 0;
}

/* Makes the target, hands its number over `to_opener`, waits on `from_opener` until the
 * opener holds it, then lets go of everything and says so. */
static int creator(int to_opener, int from_opener)
{
	struct domain d;
	if (domain_open(&d, "creator"))
		return 1;
	struct ibv_qp_init_attr_ex qa = { .qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = d.xrcd };
	struct ibv_qp *target = ibv_create_qp_ex(d.ctx, &qa);
	if (!target)
		FAIL("creator: cannot create the XRC target QP");
	uint32_t qpn = target->qp_num;
	char ack;
	if (write(to_opener, &qpn, sizeof(qpn)) != sizeof(qpn) ||
	    read(from_opener, &ack, 1) != 1 || ack != 'o')
		FAIL("creator: the opener did not open target QP %u", qpn);
	if (ibv_destroy_qp(target) || domain_close(&d))
		FAIL("creator: cannot let go of target QP %u, its domain or its context", qpn);
	printf("xrc-open-qp: creator made target QP %u and let go of it\n", qpn);
	fflush(stdout);
	return write(to_opener, "d", 1) == 1 ? 0 : 1;
}

/* Refused opens of `qpn`: as another QP type, and in a domain that does not hold it. */
static int refused_opens(struct ibv_context *ctx, struct ibv_xrcd *xrcd, uint32_t qpn)
{
	if (open_target(ctx, xrcd, qpn, IBV_QPT_RC))
		FAIL("opener: target QP %u opened as an RC QP", qpn);
	struct ibv_xrcd *other = open_domain(ctx, -1);
	if (!other)
		FAIL("opener: cannot open a second XRC domain");
	if (open_target(ctx, other, qpn, IBV_QPT_XRC_RECV))
		FAIL("opener: target QP %u opened in an XRC domain it is not in", qpn);
	return ibv_close_xrcd(other) ? 1 : 0;
}

/* One send from an initiator of the opener to the opened target, naming `srq`: 0 if it arrived
 * there with its data and its completion names the target. */
static int send_through(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq,
			struct ibv_srq *srq, struct ibv_qp *target)
{
	static char buf[2 * MSG];
	union ibv_gid gid;
	uint32_t srqn;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr_ex qa = { .qp_type = IBV_QPT_XRC_SEND, .send_cq = cq,
		.recv_cq = cq, .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd,
		.cap = { .max_send_wr = 2, .max_send_sge = 1 } };
	struct ibv_qp *initiator = mr ? ibv_create_qp_ex(ctx, &qa) : NULL;
	if (!initiator || ibv_query_gid(ctx, 1, gid_index, &gid) || ibv_get_srq_num(srq, &srqn))
		FAIL("opener: cannot make the initiator");
	if (to_rtr(target, IBV_QPT_XRC_RECV, initiator->qp_num, &gid, gid_index))
		FAIL("opener: cannot move the opened target to RTR");
	if (to_rts(initiator, IBV_QPT_XRC_SEND, target->qp_num, &gid, gid_index))
		FAIL("opener: cannot move the initiator to RTS");
	struct ibv_qp_attr got;
	struct ibv_qp_init_attr init;
	if (ibv_query_qp(target, &got, IBV_QP_STATE, &init) || got.qp_state != IBV_QPS_RTR)
		FAIL("opener: the opened target queries as state %d, want RTR", got.qp_state);

	memset(buf, 0, MSG);
	memset(buf + MSG, 'x', MSG);
	snprintf(buf + MSG, MSG, "through opened target QP %u", target->qp_num);
	struct ibv_sge rsge = { .addr = (uintptr_t)buf, .length = MSG, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 0xa, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	struct ibv_sge ssge = { .addr = (uintptr_t)buf + MSG, .length = MSG, .lkey = mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 1, .sg_list = &ssge, .num_sge = 1,
		.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *sbad;
	swr.qp_type.xrc.remote_srqn = srqn;
	if (ibv_post_srq_recv(srq, &rwr, &rbad) || ibv_post_send(initiator, &swr, &sbad))
		FAIL("opener: cannot post");
	int seen = 0;
	for (int i = 0; i < 2; i++) {
		struct ibv_wc wc;
		if (next_wc(cq, &wc))
			FAIL("opener: %d of 2 completions", i);
		if (wc.status != IBV_WC_SUCCESS)
			FAIL("opener: wr %#llx completed with %s", (unsigned long long)wc.wr_id,
			     ibv_wc_status_str(wc.status));
		if (wc.wr_id == 0xa && (wc.qp_num != target->qp_num || wc.byte_len != MSG))
			FAIL("opener: the receive names QP %u with %u bytes, want %u and %d",
			     wc.qp_num, wc.byte_len, target->qp_num, MSG);
		seen |= wc.wr_id == 0xa ? 2 : wc.wr_id == 1 ? 1 : 4;
	}
	if (seen != 3 || memcmp(buf, buf + MSG, MSG))
		FAIL("opener: completions %#x (want the send and the receive) or the data differs",
		     seen);
	printf("xrc-open-qp: opener sent to SRQ %u through the opened target QP %u\n", srqn,
	       target->qp_num);
	return ibv_destroy_qp(initiator) || ibv_dereg_mr(mr) ? 1 : 0;
}

static int opener(int from_creator, int to_creator)
{
	uint32_t qpn;
	char done;
	if (read(from_creator, &qpn, sizeof(qpn)) != sizeof(qpn))
		FAIL("opener: no target QP number from the creator");
	struct domain d;
	if (domain_open(&d, "opener"))
		return 1;
	struct ibv_context *ctx = d.ctx;
	struct ibv_xrcd *xrcd = d.xrcd;
	if (refused_opens(ctx, xrcd, qpn))
		return 1;
	struct ibv_qp *target = open_target(ctx, xrcd, qpn, IBV_QPT_XRC_RECV);
	if (!target || target->qp_num != qpn || target->qp_type != IBV_QPT_XRC_RECV)
		FAIL("opener: ibv_open_qp of target QP %u", qpn);
	printf("xrc-open-qp: opener opened target QP %u\n", qpn);
	fflush(stdout);
	if (write(to_creator, "o", 1) != 1 || read(from_creator, &done, 1) != 1 || done != 'd')
		FAIL("opener: the creator did not let go");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_srq_init_attr_ex sa = { .attr = { .max_wr = SRQ_WR, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ |
			     IBV_SRQ_INIT_ATTR_XRCD,
		.srq_type = IBV_SRQT_XRC, .pd = pd, .cq = cq, .xrcd = xrcd };
	struct ibv_srq *srq = pd && cq ? ibv_create_srq_ex(ctx, &sa) : NULL;
	if (!srq)
		FAIL("opener: cannot create the XRC SRQ");
	if (send_through(ctx, pd, cq, srq, target))
		return 1;
	if (ibv_destroy_qp(target))
		FAIL("opener: cannot destroy the opened target QP %u", qpn);
	/* The last handle is gone: so is the QP. */
	struct ibv_qp *again = open_target(ctx, xrcd, qpn, IBV_QPT_XRC_RECV);
	if (again)
		FAIL("opener: target QP %u opened again after its last handle was destroyed", qpn);
	if (ibv_destroy_srq(srq) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) || domain_close(&d))
		FAIL("opener: cannot clean up");
	printf("xrc-open-qp: target QP %u is gone with its last handle\n", qpn);
	return 0;
}

int main(int argc, char **argv)
{
	int to_opener[2], to_creator[2], status;
	if (argc != 4) {
		fprintf(stderr, "usage: %s <device> <gid index> <domain file>\n", argv[0]);
		return 2;
	}
	dev_name = argv[1];
	gid_index = atoi(argv[2]);
	domain_file = argv[3];
	if (pipe(to_opener) || pipe(to_creator))
		FAIL("pipe");
	/* Before any verbs call: each process opens its own context. */
	pid_t pid = fork();
	if (pid < 0)
		FAIL("fork");
	if (pid == 0) {
		/* Only the creator's ends stay open elsewhere: its exit ends the opener's reads. */
		close(to_opener[1]);
		close(to_creator[0]);
		return opener(to_opener[0], to_creator[1]);
	}
	close(to_opener[0]);
	close(to_creator[1]);
	int rc = creator(to_opener[1], to_creator[0]);
	/* A failed creator closes the pipes: the opener's read ends instead of waiting. */
	close(to_opener[1]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		rc = 1;
	return rc;
}
