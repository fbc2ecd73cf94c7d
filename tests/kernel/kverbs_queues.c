// SPDX-License-Identifier: GPL-2.0
/* Checks of kernel SRQs (receive, limit event) and zero-depth RC/UC/UD QPs. */
#include "rox_kverbs_test.h"

static atomic_t srq_limit_events;

static void srq_event(struct ib_event *ev, void *ctx)
{
	if (ev->event == IB_EVENT_SRQ_LIMIT_REACHED)
		atomic_inc(&srq_limit_events);
}

void check_srq(struct side *a, struct side *b)
{
	struct ib_srq_init_attr init = {
		.event_handler = srq_event,
		.attr = { .max_wr = DEPTH, .max_sge = 1 },
		.srq_type = IB_SRQT_BASIC,
	};
	struct ib_srq_attr attr = { .srq_limit = 3 };
	struct ib_srq *srq;
	struct pair p;
	struct buf rb = {}, sb = {};
	struct ib_wc wc;
	int i, ret, got = 0;
	const struct ib_recv_wr *bad;
	struct ib_recv_wr rwr = { .wr_id = 1 };

	srq = ib_create_srq(b->pd, &init);
	CHECK(!IS_ERR(srq), "srq: kernel SRQ created (max_wr %u)", init.attr.max_wr);
	if (IS_ERR(srq))
		return;
	if (buf_alloc(&rb, b->dev) || buf_alloc(&sb, a->dev))
		goto out;
	if (pair_up(&p, a, b, NULL, srq)) {
		CHECK(0, "srq: RC QP on the SRQ connects");
		goto out;
	}
	CHECK(ib_post_recv(p.qb, &rwr, &bad) != 0, "srq: post_recv to a QP on an SRQ refused");
	for (i = 0; i < 4; i++)
		post_srq_recv(srq, 100 + i, data_dma(&rb) + i * 256, 256, b->pd->local_dma_lkey);
	ret = ib_modify_srq(srq, &attr, IB_SRQ_LIMIT);
	CHECK(!ret, "srq: limit armed at 3");
	atomic_set(&srq_limit_events, 0);
	for (i = 0; i < 2; i++) {
		struct ib_sge sge = { .addr = data_dma(&sb), .length = 32,
				      .lkey = a->pd->local_dma_lkey };
		struct ib_send_wr wr = { .wr_id = 110 + i, .opcode = IB_WR_SEND, .sg_list = &sge,
					 .num_sge = 1 };

		memset(data_of(&sb), 0x10 + i, 32);
		buf_sync_dev(&sb);
		if (!post_send(p.qa, &wr) && !wait_wr(a->cq, 110 + i, NULL) &&
		    !poll_one(b->cq, &wc) && wc.status == IB_WC_SUCCESS && wc.qp == p.qb &&
		    wc.wr_id == 100 + i && wc.byte_len == 32)
			got++;
	}
	CHECK(got == 2, "srq: 2 SENDs received through the SRQ in order");
	for (i = 0; i < 100 && !atomic_read(&srq_limit_events); i++)
		msleep(20);
	CHECK(atomic_read(&srq_limit_events) == 1, "srq: limit event after the fill level fell below 3");
	pair_down(&p, a, b);
out:
	buf_free(&rb);
	buf_free(&sb);
	ib_destroy_srq(srq);
}

/* A send-only QP on a and a receive-only one on b, with a buffer each. */
struct one_way {
	struct ib_qp *so, *ro;
	struct buf sb, rb;
};

/* `w` of QP type `type`; 0 or -errno (one_way_down either way). */
static int one_way_up(struct one_way *w, struct side *a, struct side *b, enum ib_qp_type type)
{
	memset(w, 0, sizeof(*w));
	w->so = create_qp(a, NULL, type, DEPTH, 0, NULL, NULL);
	w->ro = create_qp(b, NULL, type, 0, DEPTH, NULL, NULL);
	if (IS_ERR(w->so))
		return PTR_ERR(w->so);
	if (IS_ERR(w->ro))
		return PTR_ERR(w->ro);
	return buf_alloc(&w->rb, b->dev) ?: buf_alloc(&w->sb, a->dev);
}

/* Frees `w` and empties both sides' CQs of what it left there. */
static void one_way_down(struct one_way *w, struct side *a, struct side *b)
{
	buf_free(&w->rb);
	buf_free(&w->sb);
	if (!IS_ERR(w->so))
		ib_destroy_qp(w->so);
	if (!IS_ERR(w->ro))
		ib_destroy_qp(w->ro);
	drain_cq(a->cq);
	drain_cq(b->cq);
}

void check_zero_depth(struct side *a, struct side *b)
{
	static const enum ib_qp_type types[] = { IB_QPT_RC, IB_QPT_UC, IB_QPT_UD };
	static const char *names[] = { "RC", "UC", "UD" };
	struct side *sides[2] = { a, b };
	int t, s;

	for (t = 0; t < 3; t++) {
		for (s = 0; s < 2; s++) {
			struct ib_qp *so = create_qp(sides[s], NULL, types[t], DEPTH, 0, NULL, NULL);
			struct ib_qp *ro = create_qp(sides[s], NULL, types[t], 0, DEPTH, NULL, NULL);
			struct ib_qp_attr qattr;
			struct ib_qp_init_attr qinit;
			struct ib_recv_wr rwr = { .wr_id = 1 };
			struct ib_send_wr swr = { .wr_id = 1, .opcode = IB_WR_SEND };
			const struct ib_recv_wr *rbad;
			const struct ib_send_wr *sbad;

			CHECK(!IS_ERR(so) && !IS_ERR(ro),
			      "zero-depth: %s send-only and receive-only QPs on %s created",
			      names[t], dev_name(&sides[s]->dev->dev));
			if (!IS_ERR(so)) {
				ib_query_qp(so, &qattr, 0, &qinit);
				CHECK(qinit.cap.max_recv_wr == 0 && ib_post_recv(so, &rwr, &rbad) == -ENOMEM,
				      "zero-depth: %s send-only QP: 0 receive WRs, post_recv -> ENOMEM",
				      names[t]);
				ib_destroy_qp(so);
			}
			if (!IS_ERR(ro)) {
				ib_query_qp(ro, &qattr, 0, &qinit);
				CHECK(qinit.cap.max_send_wr == 0 && ib_post_send(ro, &swr, &sbad) == -ENOMEM,
				      "zero-depth: %s receive-only QP: 0 send WRs, post_send -> ENOMEM",
				      names[t]);
				ib_destroy_qp(ro);
			}
		}
	}
	/* Traffic between a send-only RC QP on a and a receive-only one on b. */
	{
		struct one_way w;
		struct ib_wc wc;
		int ret = -EINVAL;

		if (!one_way_up(&w, a, b, IB_QPT_RC) && !connect_qp(w.so, a, b, w.ro->qp_num) &&
		    !connect_qp(w.ro, b, a, w.so->qp_num)) {
			struct ib_sge sge = { .addr = data_dma(&w.sb), .length = 100,
					      .lkey = a->pd->local_dma_lkey };
			struct ib_send_wr wr = { .wr_id = 200, .opcode = IB_WR_SEND, .sg_list = &sge,
						 .num_sge = 1 };

			post_recv(w.ro, 201, data_dma(&w.rb), PAGE_SIZE, b->pd->local_dma_lkey);
			ret = post_send(w.so, &wr);
			ret = ret ? ret : wait_wr(a->cq, 200, NULL);
			ret = ret ? ret : wait_wr(b->cq, 201, &wc);
		}
		CHECK(!ret && wc.byte_len == 100,
		      "zero-depth: SEND from a send-only RC QP to a receive-only one (status %d)", ret);
		one_way_down(&w, a, b);
	}
	/* UD: a send-only QP on a to a receive-only QP on b through an address handle. */
	{
		struct one_way w;
		struct rdma_ah_attr av;
		struct ib_ah *ah = NULL;
		struct ib_wc wc;
		int ret = -EINVAL;

		if (!one_way_up(&w, a, b, IB_QPT_UD) && !ud_ready(w.so, 0x1111) &&
		    !ud_ready(w.ro, 0x1111)) {
			roce_av(&av, a, b);
			ah = rdma_create_ah(a->pd, &av, RDMA_CREATE_AH_SLEEPABLE);
			if (!IS_ERR(ah)) {
				struct ib_sge sge = { .addr = data_dma(&w.sb), .length = 64,
						      .lkey = a->pd->local_dma_lkey };
				struct ib_ud_wr wr = {
					.wr = { .wr_id = 210, .opcode = IB_WR_SEND, .sg_list = &sge,
						.num_sge = 1 },
					.ah = ah, .remote_qpn = w.ro->qp_num, .remote_qkey = 0x1111,
				};

				post_recv(w.ro, 211, data_dma(&w.rb), PAGE_SIZE, b->pd->local_dma_lkey);
				ret = post_send(w.so, &wr.wr);
				ret = ret ? ret : wait_wr(a->cq, 210, NULL);
				ret = ret ? ret : wait_wr(b->cq, 211, &wc);
			} else {
				ret = PTR_ERR(ah);
				ah = NULL;
			}
		}
		CHECK(!ret && wc.byte_len == 64 + 40 && wc.src_qp == w.so->qp_num,
		      "zero-depth: UD datagram from a send-only QP to a receive-only one (status %d)",
		      ret);
		if (ah)
			rdma_destroy_ah(ah, RDMA_DESTROY_AH_SLEEPABLE);
		one_way_down(&w, a, b);
	}
}
