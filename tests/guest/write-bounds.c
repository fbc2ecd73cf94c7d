/* write_bounds DEVICE: RC loopback WRITEs that overrun their target MR; prints one line per
 * case and exits 1 if any case did not fail with IBV_WC_REM_ACCESS_ERR or changed a byte. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#include "qp-loop.h"

#define GUARD 4096
#define GID_INDEX 0

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static uint8_t pattern_byte(size_t i)
{
	return (uint8_t)(i * 7 + 3 + (i >> 8));
}

/* One case: a fresh QP pair, a region of region_len bytes inside GUARD pattern bytes on each
 * side, a WRITE of len bytes at offset off. Returns 0 if it failed cleanly. */
static int run_case(const char *what, size_t region_len, size_t off, size_t len)
{
	size_t area_len = region_len + 2 * GUARD;
	uint8_t *area = malloc(area_len), *src = malloc(len);
	if (!area || !src)
		die("malloc");
	for (size_t i = 0; i < area_len; i++)
		area[i] = pattern_byte(i);
	for (size_t i = 0; i < len; i++)
		src[i] = (uint8_t)~pattern_byte(i + GUARD + off);
	struct ibv_mr *target = ibv_reg_mr(pd, area + GUARD, region_len,
					   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_mr *src_mr = ibv_reg_mr(pd, src, len, IBV_ACCESS_LOCAL_WRITE);
	if (!target || !src_mr)
		die("ibv_reg_mr");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq)
		die("ibv_create_cq");
	struct ibv_qp_init_attr init = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *requester = ibv_create_qp(pd, &init), *responder = ibv_create_qp(pd, &init);
	if (!requester || !responder)
		die("ibv_create_qp");
	if (to_rts(requester, IBV_QPT_RC, responder->qp_num, &gid, GID_INDEX) ||
	    to_rts(responder, IBV_QPT_RC, requester->qp_num, &gid, GID_INDEX))
		die("ibv_modify_qp");
	struct ibv_sge sge = { .addr = (uintptr_t)src, .length = len, .lkey = src_mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 1,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = (uintptr_t)(area + GUARD + off), .rkey = target->rkey },
	}, *bad;
	if (ibv_post_send(requester, &wr, &bad))
		die("ibv_post_send");
	struct ibv_wc wc;
	int n = 0;
	time_t deadline = time(NULL) + 60;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && time(NULL) < deadline)
		;
	size_t changed = 0, first = 0;
	for (size_t i = 0; i < area_len; i++)
		if (area[i] != pattern_byte(i) && changed++ == 0)
			first = i;
	int ok = n == 1 && wc.wr_id == 1 && wc.status == IBV_WC_REM_ACCESS_ERR && changed == 0;
	printf("%s: %s, %zu bytes changed", what,
	       n == 1 ? ibv_wc_status_str(wc.status) : "no completion", changed);
	if (changed)
		printf(" (first at region offset %ld)", (long)first - GUARD);
	printf(" -> %s\n", ok ? "ok" : "WRONG");
	ibv_destroy_qp(requester);
	ibv_destroy_qp(responder);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(target);
	ibv_dereg_mr(src_mr);
	free(area);
	free(src);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DEVICE\n", argv[0]);
		return 2;
	}
	ctx = open_device_named(argv[1]);
	if (!ctx) {
		fprintf(stderr, "no device %s\n", argv[1]);
		return 2;
	}
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd");
	if (ibv_query_gid(ctx, 1, GID_INDEX, &gid))
		die("ibv_query_gid");
	int bad = 0;
	bad += run_case("8001 into 8000", 8000, 0, 8001);
	bad += run_case("65537 into 65536", 65536, 0, 65537);
	bad += run_case("5000 at 4000 of 8000", 8000, 4000, 5000);
	return bad ? 1 : 0;
}
