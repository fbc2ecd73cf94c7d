// SPDX-License-Identifier: GPL-2.0
/*
 * Helpers the checks share: sides (a device's PD, CQ and RoCEv2 GID), polling, QP creation and
 * connection, DMA buffers with guard pages, posting and fast registration.
 */
#include "rox_kverbs_test.h"

/* The first RoCEv2 GID of port 1 that is an IPv4-mapped address. */
int find_gid(struct side *s)
{
	int i;

	for (i = 0; i < 16; i++) {
		const struct ib_gid_attr *attr = rdma_get_gid_attr(s->dev, 1, i);
		bool v4;

		if (IS_ERR(attr))
			continue;
		v4 = attr->gid_type == IB_GID_TYPE_ROCE_UDP_ENCAP &&
		     ipv6_addr_v4mapped((struct in6_addr *)attr->gid.raw);
		if (v4) {
			struct net_device *ndev;

			s->gid = attr->gid;
			s->gid_index = i;
			rcu_read_lock();
			ndev = rdma_read_gid_attr_ndev_rcu(attr);
			if (!IS_ERR(ndev))
				ether_addr_copy(s->mac, ndev->dev_addr);
			rcu_read_unlock();
		}
		rdma_put_gid_attr(attr);
		if (v4)
			return 0;
	}
	return -ENOENT;
}

int side_init(struct side *s, struct ib_device *dev)
{
	s->dev = dev;
	s->pd = ib_alloc_pd(dev, 0);
	if (IS_ERR(s->pd))
		return PTR_ERR(s->pd);
	s->cq = ib_alloc_cq(dev, NULL, 256, 0, IB_POLL_DIRECT);
	if (IS_ERR(s->cq)) {
		ib_dealloc_pd(s->pd);
		return PTR_ERR(s->cq);
	}
	return find_gid(s);
}

void side_fini(struct side *s)
{
	if (!IS_ERR_OR_NULL(s->cq))
		ib_free_cq(s->cq);
	if (!IS_ERR_OR_NULL(s->pd))
		ib_dealloc_pd(s->pd);
}

/* Polls `cq` for one completion (up to TIMEOUT_MS); 0 or -ETIMEDOUT. */
int poll_one(struct ib_cq *cq, struct ib_wc *wc)
{
	unsigned long end = jiffies + msecs_to_jiffies(TIMEOUT_MS);

	do {
		int n = ib_poll_cq(cq, 1, wc);

		if (n < 0)
			return n;
		if (n == 1)
			return 0;
		usleep_range(100, 200);
	} while (time_before(jiffies, end));
	return -ETIMEDOUT;
}

/* Polls until the completion of `wr_id` (others are skipped); its status or -ETIMEDOUT. */
int wait_wr(struct ib_cq *cq, u64 wr_id, struct ib_wc *out)
{
	struct ib_wc wc;
	int i;

	for (i = 0; i < 64; i++) {
		int ret = poll_one(cq, &wc);

		if (ret)
			return ret;
		if (wc.wr_id == wr_id) {
			if (out)
				*out = wc;
			return wc.status;
		}
	}
	return -EIO;
}

/* Takes every completion left on `cq`. */
void drain_cq(struct ib_cq *cq)
{
	struct ib_wc wc[8];

	while (ib_poll_cq(cq, 8, wc) > 0)
		;
}

struct ib_qp *create_qp(struct side *s, struct ib_pd *pd, enum ib_qp_type type,
			u32 send_wr, u32 recv_wr, struct ib_srq *srq, struct ib_cq *cq)
{
	struct ib_qp_init_attr init = {
		.send_cq = cq ? cq : s->cq,
		.recv_cq = cq ? cq : s->cq,
		.srq = srq,
		.qp_type = type,
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.cap = {
			.max_send_wr = send_wr,
			.max_recv_wr = srq ? 0 : recv_wr,
			.max_send_sge = 2,
			.max_recv_sge = srq ? 0 : 2,
			.max_inline_data = 64,
		},
	};

	return ib_create_qp(pd ? pd : s->pd, &init);
}

void roce_av(struct rdma_ah_attr *ah, struct side *from, struct side *to)
{
	memset(ah, 0, sizeof(*ah));
	ah->type = RDMA_AH_ATTR_TYPE_ROCE;
	ah->port_num = 1;
	ah->ah_flags = IB_AH_GRH;
	ah->grh.dgid = to->gid;
	ah->grh.sgid_index = from->gid_index;
	ah->grh.hop_limit = 64;
	ether_addr_copy(ah->roce.dmac, to->mac);
}

/* RESET -> INIT -> RTR -> RTS of an RC/UC QP talking to `rqpn` on side `to`. */
int connect_qp(struct ib_qp *qp, struct side *from, struct side *to, u32 rqpn)
{
	return qp_init(qp) ?: qp_rtr_rts(qp, from, to, rqpn, ACK_TIMEOUT);
}

/* RESET -> INIT of an RC/UC QP on port 1, open to the peer's RDMA (and atomics on RC). */
int qp_init(struct ib_qp *qp)
{
	int rc = qp->qp_type == IB_QPT_RC;
	struct ib_qp_attr attr = {
		.qp_state = IB_QPS_INIT,
		.port_num = 1,
		.pkey_index = 0,
		.qp_access_flags = IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ |
				   (rc ? IB_ACCESS_REMOTE_ATOMIC : 0),
	};

	return ib_modify_qp(qp, &attr,
			    IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_ACCESS_FLAGS);
}

/* INIT -> RTR -> RTS of an RC/UC QP talking to `rqpn` on side `to`; an RC QP's local ACK
 * timeout is `timeout` (4.096 us << timeout). */
int qp_rtr_rts(struct ib_qp *qp, struct side *from, struct side *to, u32 rqpn, u8 timeout)
{
	struct ib_qp_attr attr = {};
	int ret;
	int rc = qp->qp_type == IB_QPT_RC;

	attr.qp_state = IB_QPS_RTR;
	attr.path_mtu = IB_MTU_1024;
	attr.dest_qp_num = rqpn;
	attr.rq_psn = 0;
	roce_av(&attr.ah_attr, from, to);
	if (rc) {
		attr.max_dest_rd_atomic = 4;
		attr.min_rnr_timer = 1;
	}
	ret = ib_modify_qp(qp, &attr,
			   IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU | IB_QP_DEST_QPN | IB_QP_RQ_PSN |
				   (rc ? IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER : 0));
	if (ret)
		return ret;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IB_QPS_RTS;
	attr.sq_psn = 0;
	if (rc) {
		attr.timeout = timeout;
		attr.retry_cnt = 7;
		attr.rnr_retry = 7;
		attr.max_rd_atomic = 4;
	}
	return ib_modify_qp(qp, &attr,
			    IB_QP_STATE | IB_QP_SQ_PSN |
				    (rc ? IB_QP_TIMEOUT | IB_QP_RETRY_CNT | IB_QP_RNR_RETRY |
						  IB_QP_MAX_QP_RD_ATOMIC
					: 0));
}

/* UD: RESET -> INIT -> RTR -> RTS. */
int ud_ready(struct ib_qp *qp, u32 qkey)
{
	struct ib_qp_attr attr = { .qp_state = IB_QPS_INIT, .port_num = 1, .qkey = qkey };
	int ret = ib_modify_qp(qp, &attr, IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_QKEY);

	if (ret)
		return ret;
	attr.qp_state = IB_QPS_RTR;
	ret = ib_modify_qp(qp, &attr, IB_QP_STATE);
	if (ret)
		return ret;
	attr.qp_state = IB_QPS_RTS;
	attr.sq_psn = 0;
	return ib_modify_qp(qp, &attr, IB_QP_STATE | IB_QP_SQ_PSN);
}

int pair_up(struct pair *p, struct side *a, struct side *b, struct ib_pd *pdb,
	    struct ib_srq *srqb)
{
	int ret;

	p->qa = create_qp(a, NULL, IB_QPT_RC, DEPTH, DEPTH, NULL, NULL);
	if (IS_ERR(p->qa))
		return PTR_ERR(p->qa);
	p->qb = create_qp(b, pdb, IB_QPT_RC, DEPTH, DEPTH, srqb, NULL);
	if (IS_ERR(p->qb)) {
		ib_destroy_qp(p->qa);
		return PTR_ERR(p->qb);
	}
	ret = connect_qp(p->qa, a, b, p->qb->qp_num);
	if (!ret)
		ret = connect_qp(p->qb, b, a, p->qa->qp_num);
	if (ret) {
		ib_destroy_qp(p->qa);
		ib_destroy_qp(p->qb);
	}
	return ret;
}

void pair_down(struct pair *p, struct side *a, struct side *b)
{
	ib_destroy_qp(p->qa);
	ib_destroy_qp(p->qb);
	drain_cq(a->cq);
	drain_cq(b->cq);
}

int cq_pair_cqs(struct cq_pair *p, struct side *a, struct side *b, enum ib_poll_context ctx,
		int vector)
{
	p->qa = NULL;
	p->qb = NULL;
	p->ca = ib_alloc_cq(a->dev, NULL, 64, vector % a->dev->num_comp_vectors, ctx);
	p->cb = ib_alloc_cq(b->dev, NULL, 64, vector % b->dev->num_comp_vectors, ctx);
	if (IS_ERR(p->ca))
		return PTR_ERR(p->ca);
	return PTR_ERR_OR_ZERO(p->cb);
}

int cq_pair_connect(struct cq_pair *p, struct side *a, struct side *b)
{
	p->qa = create_qp(a, NULL, IB_QPT_RC, DEPTH, DEPTH, NULL, p->ca);
	p->qb = create_qp(b, NULL, IB_QPT_RC, DEPTH, DEPTH, NULL, p->cb);
	if (IS_ERR(p->qa))
		return PTR_ERR(p->qa);
	if (IS_ERR(p->qb))
		return PTR_ERR(p->qb);
	return connect_qp(p->qa, a, b, p->qb->qp_num) ?: connect_qp(p->qb, b, a, p->qa->qp_num);
}

void cq_pair_down(struct cq_pair *p)
{
	if (!IS_ERR_OR_NULL(p->qa))
		ib_destroy_qp(p->qa);
	if (!IS_ERR_OR_NULL(p->qb))
		ib_destroy_qp(p->qb);
	if (!IS_ERR_OR_NULL(p->ca))
		ib_free_cq(p->ca);
	if (!IS_ERR_OR_NULL(p->cb))
		ib_free_cq(p->cb);
}

int buf_alloc(struct buf *b, struct ib_device *dev)
{
	b->dev = dev;
	b->cpu = kmalloc(BUF_PAGES * PAGE_SIZE, GFP_KERNEL);
	if (!b->cpu) {
		SETUP_FAILED("buffer of %lu pages", (unsigned long)BUF_PAGES);
		return -ENOMEM;
	}
	memset(b->cpu, GUARD, BUF_PAGES * PAGE_SIZE);
	b->dma = ib_dma_map_single(dev, b->cpu, BUF_PAGES * PAGE_SIZE, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(dev, b->dma)) {
		SETUP_FAILED("DMA mapping of a buffer on %s", dev_name(&dev->dev));
		kfree(b->cpu);
		b->cpu = NULL;
		return -EIO;
	}
	return 0;
}

void buf_free(struct buf *b)
{
	if (!b->cpu)
		return;
	ib_dma_unmap_single(b->dev, b->dma, BUF_PAGES * PAGE_SIZE, DMA_BIDIRECTIONAL);
	kfree(b->cpu);
}

void buf_sync_cpu(struct buf *b)
{
	ib_dma_sync_single_for_cpu(b->dev, b->dma, BUF_PAGES * PAGE_SIZE, DMA_BIDIRECTIONAL);
}

void buf_sync_dev(struct buf *b)
{
	ib_dma_sync_single_for_device(b->dev, b->dma, BUF_PAGES * PAGE_SIZE, DMA_BIDIRECTIONAL);
}

/* Whether the guard pages are intact. */
bool guards_ok(struct buf *b)
{
	return !memchr_inv(b->cpu, GUARD, PAGE_SIZE) &&
	       !memchr_inv(b->cpu + (BUF_PAGES - 1) * PAGE_SIZE, GUARD, PAGE_SIZE);
}

int post_recv(struct ib_qp *qp, u64 wr_id, u64 addr, u32 len, u32 lkey)
{
	struct ib_sge sge = { .addr = addr, .length = len, .lkey = lkey };
	struct ib_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };
	const struct ib_recv_wr *bad;

	return ib_post_recv(qp, &wr, &bad);
}

int post_srq_recv(struct ib_srq *srq, u64 wr_id, u64 addr, u32 len, u32 lkey)
{
	struct ib_sge sge = { .addr = addr, .length = len, .lkey = lkey };
	struct ib_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };
	const struct ib_recv_wr *bad;

	return ib_post_srq_recv(srq, &wr, &bad);
}

/*
 * `n` receives of 128 bytes each, receive i at `addr` + 128 i: with `cqe` each completes
 * through it (ib_core's polling), else their wr_ids are `wr_id`, `wr_id` + 1, ... All are
 * posted; 0 or the first error.
 */
int post_recvs(struct ib_qp *qp, int n, struct ib_cqe *cqe, u64 wr_id, u64 addr, u32 lkey)
{
	int i, ret = 0;

	for (i = 0; i < n; i++) {
		struct ib_sge sge = { .addr = addr + i * 128, .length = 128, .lkey = lkey };
		struct ib_recv_wr wr = { .sg_list = &sge, .num_sge = 1 };
		const struct ib_recv_wr *bad;
		int err;

		if (cqe)
			wr.wr_cqe = cqe;
		else
			wr.wr_id = wr_id + i;
		err = ib_post_recv(qp, &wr, &bad);
		ret = ret ?: err;
	}
	return ret;
}

/* `n` signalled SENDs of the 64 bytes at `addr`, completing as post_recvs' receives do. */
int post_sends(struct ib_qp *qp, int n, struct ib_cqe *cqe, u64 wr_id, u64 addr, u32 lkey)
{
	int i, ret = 0;

	for (i = 0; i < n; i++) {
		struct ib_sge sge = { .addr = addr, .length = 64, .lkey = lkey };
		struct ib_send_wr wr = { .opcode = IB_WR_SEND, .sg_list = &sge, .num_sge = 1 };
		int err;

		if (cqe)
			wr.wr_cqe = cqe;
		else
			wr.wr_id = wr_id + i;
		err = post_send(qp, &wr);
		ret = ret ?: err;
	}
	return ret;
}

int post_send(struct ib_qp *qp, struct ib_send_wr *wr)
{
	const struct ib_send_wr *bad;

	wr->send_flags |= IB_SEND_SIGNALED;
	return ib_post_send(qp, wr, &bad);
}

int rdma_op(struct ib_qp *qp, enum ib_wr_opcode op, u64 wr_id, u64 laddr, u32 len,
	    u32 lkey, u64 raddr, u32 rkey)
{
	struct ib_sge sge = { .addr = laddr, .length = len, .lkey = lkey };
	struct ib_rdma_wr wr = {
		.wr = { .wr_id = wr_id, .opcode = op, .sg_list = &sge, .num_sge = 1 },
		.remote_addr = raddr,
		.rkey = rkey,
	};

	return post_send(qp, &wr.wr);
}

/* Maps `b`'s data pages into `mr` (npages of them) and registers them with a new key variant
 * through a REG_MR on `qp`; the REG_MR completion status (or an errno). */
int fast_reg(struct ib_qp *qp, struct ib_cq *cq, struct ib_mr *mr, struct buf *b,
	     int npages, int access)
{
	struct scatterlist sg;
	struct ib_reg_wr wr = {};
	struct ib_wc wc;
	int n, ret;

	sg_init_table(&sg, 1);
	sg_dma_address(&sg) = data_dma(b);
	sg_dma_len(&sg) = npages * PAGE_SIZE;
	n = ib_map_mr_sg(mr, &sg, 1, NULL, PAGE_SIZE);
	if (n != 1)
		return n < 0 ? n : -EINVAL;
	ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey));
	wr.wr.opcode = IB_WR_REG_MR;
	wr.wr.wr_id = 0xf00d;
	wr.mr = mr;
	wr.key = mr->rkey;
	wr.access = access;
	ret = post_send(qp, &wr.wr);
	if (ret)
		return ret;
	ret = wait_wr(cq, 0xf00d, &wc);
	if (ret == 0 && wc.opcode != IB_WC_REG_MR)
		return -EPROTO;
	return ret;
}

int local_inv(struct ib_qp *qp, struct ib_cq *cq, u32 rkey, struct ib_wc *wc)
{
	struct ib_send_wr wr = { .wr_id = 0x1ee, .opcode = IB_WR_LOCAL_INV };
	int ret;

	wr.ex.invalidate_rkey = rkey;
	ret = post_send(qp, &wr);
	return ret ? ret : wait_wr(cq, 0x1ee, wc);
}

void count_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct ctx_counter *c = container_of(wc->wr_cqe, struct ctx_counter, cqe);

	if (wc->status == IB_WC_SUCCESS)
		atomic_inc(&c->ok);
	else if (wc->status == IB_WC_WR_FLUSH_ERR)
		atomic_inc(&c->flushed);
	else
		atomic_inc(&c->other);
	if (atomic_read(&c->ok) + atomic_read(&c->flushed) + atomic_read(&c->other) == c->want)
		complete(&c->done);
}
