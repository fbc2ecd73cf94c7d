// SPDX-License-Identifier: GPL-2.0
/*
 * rox_kverbs_test: kernel verbs through rox.ko, between rox_0 and rox_1 (two rox NICs of one
 * guest on one bridge; each side may also be the same device: module parameter peer=rox_0).
 *
 * Loaded after rox.ko by tests/guest/t-driver-kverbs.sh. It registers an ib_client, takes the
 * two devices, runs every check at load time, prints one "ok"/"FAIL" line per check and then
 * "rox_kverbs: result: N passed, M failed". A setup step that fails and cuts a check short
 * (a buffer, PD, MR or QP pair it needs) counts as a failure of its own (SETUP_FAILED), and
 * t-driver-kverbs.sh also requires N to be the full number of checks. The module stays loaded
 * until rmmod (nothing of it is left on the devices by then).
 *
 * Checks: device attributes; RC SEND/RECV with inline data and immediate; fast registration
 * (ib_alloc_mr, ib_map_mr_sg, IB_WR_REG_MR) then RDMA WRITE/READ through the new rkey from the
 * peer; atomics; LOCAL_INV then the old rkey fails; SEND_WITH_INV invalidates (and the receive
 * says so); ib_inc_rkey re-registration; kernel SRQ receive and its limit event; zero-depth
 * RC/UC/UD QPs on both devices (creation, caps, ENOMEM when posting to the empty side, a SEND
 * from a send-only to a receive-only QP); a CQ per ib_cq poll context with ib_drain_qp; bad
 * input: a page list beyond the MR's capacity, a REG_MR whose pages do not cover its length,
 * LOCAL_INV of another PD's key, SEND_WITH_INV of an unknown or foreign rkey -> error
 * completions, with a guard pattern around every target buffer that must stay intact.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/delay.h>
#include <linux/scatterlist.h>
#include <linux/completion.h>
#include <linux/inet.h>
#include <linux/etherdevice.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_cache.h>

static char *peer = "rox_1";
module_param(peer, charp, 0444);
MODULE_PARM_DESC(peer, "ib device of side B (side A is rox_0)");
static bool hang;
module_param(hang, bool, 0444);
MODULE_PARM_DESC(hang, "only the hung-device check: WRs in flight on rox_0, whose device the "
		       "runner makes hang (tests/guest/t-z-driver-hung-device.sh)");

#define PFX "rox_kverbs: "
#define TIMEOUT_MS 5000
#define GUARD 0xa5
#define NPAGES 4          /* data pages of a fast-registration target */
#define BUF_PAGES (NPAGES + 2) /* a guard page each side */
#define DEPTH 16

static int passed, failed;

#define CHECK(cond, fmt, ...)                                                          \
	do {                                                                           \
		if (cond) {                                                            \
			passed++;                                                      \
			pr_info(PFX "ok   " fmt "\n", ##__VA_ARGS__);                  \
		} else {                                                               \
			failed++;                                                      \
			pr_info(PFX "FAIL " fmt " (%s:%d)\n", ##__VA_ARGS__, __FILE__, \
				__LINE__);                                             \
		}                                                                      \
	} while (0)

/* A setup step a check needs failed: the check is cut short, which is a failure too. */
#define SETUP_FAILED(fmt, ...)                                                          \
	do {                                                                           \
		failed++;                                                              \
		pr_info(PFX "FAIL setup: " fmt " (%s:%d)\n", ##__VA_ARGS__, __FILE__,  \
			__LINE__);                                                     \
	} while (0)

/* One side: a device, a PD and a CQ polled directly by these checks. */
struct side {
	struct ib_device *dev;
	struct ib_pd *pd;
	struct ib_cq *cq;
	int gid_index;
	union ib_gid gid;
	/* MAC of the GID's netdev: kernel consumers hand ib_core resolved addresses. */
	u8 mac[ETH_ALEN];
};

static struct ib_device *dev_a, *dev_b;

static int add_one(struct ib_device *dev)
{
	if (!strcmp(dev_name(&dev->dev), "rox_0") && !dev_a)
		dev_a = dev;
	if (!strcmp(dev_name(&dev->dev), peer) && !dev_b)
		dev_b = dev;
	return 0;
}

static void remove_one(struct ib_device *dev, void *data)
{
	if (dev == dev_a)
		dev_a = NULL;
	if (dev == dev_b)
		dev_b = NULL;
}

static struct ib_client client = {
	.name = "rox_kverbs_test",
	.add = add_one,
	.remove = remove_one,
};

/* The first RoCEv2 GID of port 1 that is an IPv4-mapped address. */
static int find_gid(struct side *s)
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

static int side_init(struct side *s, struct ib_device *dev)
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

static void side_fini(struct side *s)
{
	if (!IS_ERR_OR_NULL(s->cq))
		ib_free_cq(s->cq);
	if (!IS_ERR_OR_NULL(s->pd))
		ib_dealloc_pd(s->pd);
}

/* Polls `cq` for one completion (up to TIMEOUT_MS); 0 or -ETIMEDOUT. */
static int poll_one(struct ib_cq *cq, struct ib_wc *wc)
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
static int wait_wr(struct ib_cq *cq, u64 wr_id, struct ib_wc *out)
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
static void drain_cq(struct ib_cq *cq)
{
	struct ib_wc wc[8];

	while (ib_poll_cq(cq, 8, wc) > 0)
		;
}

static struct ib_qp *create_qp(struct side *s, struct ib_pd *pd, enum ib_qp_type type,
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

static void roce_av(struct rdma_ah_attr *ah, struct side *from, struct side *to)
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
static int connect_qp(struct ib_qp *qp, struct side *from, struct side *to, u32 rqpn)
{
	struct ib_qp_attr attr = {};
	int ret;
	int rc = qp->qp_type == IB_QPT_RC;
	int access = IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ |
		     (rc ? IB_ACCESS_REMOTE_ATOMIC : 0);

	attr.qp_state = IB_QPS_INIT;
	attr.port_num = 1;
	attr.pkey_index = 0;
	attr.qp_access_flags = access;
	ret = ib_modify_qp(qp, &attr,
			   IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_ACCESS_FLAGS);
	if (ret)
		return ret;
	memset(&attr, 0, sizeof(attr));
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
		attr.timeout = 14;
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
static int ud_ready(struct ib_qp *qp, u32 qkey)
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

/* A connected RC pair a<->b (optionally in other PDs / on an SRQ at b). */
struct pair {
	struct ib_qp *qa, *qb;
};

static int pair_up(struct pair *p, struct side *a, struct side *b, struct ib_pd *pdb,
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

static void pair_down(struct pair *p, struct side *a, struct side *b)
{
	ib_destroy_qp(p->qa);
	ib_destroy_qp(p->qb);
	drain_cq(a->cq);
	drain_cq(b->cq);
}

/* A DMA-mapped buffer of BUF_PAGES pages, the first and last a guard. */
struct buf {
	struct ib_device *dev;
	u8 *cpu;
	u64 dma;
};

static int buf_alloc(struct buf *b, struct ib_device *dev)
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

static void buf_free(struct buf *b)
{
	if (!b->cpu)
		return;
	ib_dma_unmap_single(b->dev, b->dma, BUF_PAGES * PAGE_SIZE, DMA_BIDIRECTIONAL);
	kfree(b->cpu);
}

static u8 *data_of(struct buf *b) { return b->cpu + PAGE_SIZE; }
static u64 data_dma(struct buf *b) { return b->dma + PAGE_SIZE; }

static void buf_sync_cpu(struct buf *b)
{
	ib_dma_sync_single_for_cpu(b->dev, b->dma, BUF_PAGES * PAGE_SIZE, DMA_BIDIRECTIONAL);
}

static void buf_sync_dev(struct buf *b)
{
	ib_dma_sync_single_for_device(b->dev, b->dma, BUF_PAGES * PAGE_SIZE, DMA_BIDIRECTIONAL);
}

/* Whether the guard pages are intact. */
static bool guards_ok(struct buf *b)
{
	return !memchr_inv(b->cpu, GUARD, PAGE_SIZE) &&
	       !memchr_inv(b->cpu + (BUF_PAGES - 1) * PAGE_SIZE, GUARD, PAGE_SIZE);
}

static int post_recv(struct ib_qp *qp, u64 wr_id, u64 addr, u32 len, u32 lkey)
{
	struct ib_sge sge = { .addr = addr, .length = len, .lkey = lkey };
	struct ib_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };
	const struct ib_recv_wr *bad;

	return ib_post_recv(qp, &wr, &bad);
}

static int post_srq_recv(struct ib_srq *srq, u64 wr_id, u64 addr, u32 len, u32 lkey)
{
	struct ib_sge sge = { .addr = addr, .length = len, .lkey = lkey };
	struct ib_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };
	const struct ib_recv_wr *bad;

	return ib_post_srq_recv(srq, &wr, &bad);
}

static int post_send(struct ib_qp *qp, struct ib_send_wr *wr)
{
	const struct ib_send_wr *bad;

	wr->send_flags |= IB_SEND_SIGNALED;
	return ib_post_send(qp, wr, &bad);
}

static int rdma_op(struct ib_qp *qp, enum ib_wr_opcode op, u64 wr_id, u64 laddr, u32 len,
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
static int fast_reg(struct ib_qp *qp, struct ib_cq *cq, struct ib_mr *mr, struct buf *b,
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

static int local_inv(struct ib_qp *qp, struct ib_cq *cq, u32 rkey, struct ib_wc *wc)
{
	struct ib_send_wr wr = { .wr_id = 0x1ee, .opcode = IB_WR_LOCAL_INV };
	int ret;

	wr.ex.invalidate_rkey = rkey;
	ret = post_send(qp, &wr);
	return ret ? ret : wait_wr(cq, 0x1ee, wc);
}

#define RW_ACCESS (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ | \
		   IB_ACCESS_REMOTE_ATOMIC)

/* ------------------------------------------------------------------------------------------ */

static void check_attrs(struct side *a)
{
	struct ib_device_attr *at = &a->dev->attrs;

	CHECK(at->device_cap_flags & IB_DEVICE_MEM_MGT_EXTENSIONS,
	      "attrs: IB_DEVICE_MEM_MGT_EXTENSIONS advertised");
	CHECK(at->max_fast_reg_page_list_len >= NPAGES,
	      "attrs: max_fast_reg_page_list_len %u", at->max_fast_reg_page_list_len);
	CHECK(at->max_send_sge > 1 && at->max_recv_sge > 1, "attrs: max_send_sge %d max_recv_sge %d",
	      at->max_send_sge, at->max_recv_sge);
	CHECK(a->dev->num_comp_vectors > 1, "attrs: %d completion vectors",
	      a->dev->num_comp_vectors);
	CHECK(at->max_srq > 0 && at->atomic_cap != IB_ATOMIC_NONE, "attrs: max_srq %d atomic_cap %d",
	      at->max_srq, at->atomic_cap);
}

static void check_send_inline(struct side *a, struct side *b)
{
	static const char msg[] = "inline from the kernel's own memory";
	struct pair p;
	struct buf rb = {};
	struct ib_send_wr wr = {};
	struct ib_sge sge;
	struct ib_wc wc;
	char *src;
	int ret;

	if (pair_up(&p, a, b, NULL, NULL)) {
		CHECK(0, "send: RC pair rox_0<->%s connects", peer);
		return;
	}
	CHECK(p.qa->qp_type == IB_QPT_RC, "send: RC pair rox_0 qpn %u <-> %s qpn %u connected",
	      p.qa->qp_num, peer, p.qb->qp_num);
	src = kmalloc(64, GFP_KERNEL);
	if (!src) {
		SETUP_FAILED("send: 64-byte source buffer");
		goto out;
	}
	if (buf_alloc(&rb, b->dev))
		goto out;
	memcpy(src, msg, sizeof(msg));
	post_recv(p.qb, 1, data_dma(&rb), PAGE_SIZE, b->pd->local_dma_lkey);
	post_recv(p.qb, 2, data_dma(&rb) + 64, PAGE_SIZE, b->pd->local_dma_lkey);
	sge.addr = (u64)(uintptr_t)src;
	sge.length = sizeof(msg);
	sge.lkey = 0;
	wr.wr_id = 10;
	wr.opcode = IB_WR_SEND;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IB_SEND_INLINE;
	ret = post_send(p.qa, &wr);
	CHECK(!ret && !wait_wr(a->cq, 10, NULL), "send: inline SEND of %zu bytes posted and completed",
	      sizeof(msg));
	/* The source may change right after the post: the bytes were copied into the WQE. */
	memset(src, 0, 64);
	ret = wait_wr(b->cq, 1, &wc);
	buf_sync_cpu(&rb);
	CHECK(!ret && wc.byte_len == sizeof(msg) && !memcmp(data_of(&rb), msg, sizeof(msg)) &&
		      wc.opcode == IB_WC_RECV && wc.qp == p.qb,
	      "send: received %u bytes, equal to the inline source", wc.byte_len);
	/* SEND_WITH_IMM */
	memcpy(src, msg, sizeof(msg));
	wr.wr_id = 11;
	wr.opcode = IB_WR_SEND_WITH_IMM;
	wr.ex.imm_data = cpu_to_be32(0x12345678);
	wr.send_flags = 0;
	sge.length = 16;
	/* Not inline: from a DMA-mapped buffer of a's, through a's local DMA lkey. */
	{
		struct buf sb = {};

		if (!buf_alloc(&sb, a->dev)) {
			sge.addr = data_dma(&sb);
			sge.lkey = a->pd->local_dma_lkey;
			ret = post_send(p.qa, &wr);
			ret = ret ? ret : wait_wr(a->cq, 11, NULL);
			ret = ret ? ret : wait_wr(b->cq, 2, &wc);
			CHECK(!ret && (wc.wc_flags & IB_WC_WITH_IMM) &&
				      wc.ex.imm_data == cpu_to_be32(0x12345678) && wc.byte_len == 16,
			      "send: SEND_WITH_IMM delivers imm 0x%x", be32_to_cpu(wc.ex.imm_data));
			buf_free(&sb);
		}
	}
	/* Inline larger than the QP's limit is refused at post time. */
	{
		const struct ib_send_wr *bad;
		struct ib_sge big = { .addr = (u64)(uintptr_t)src, .length = 4096 };
		struct ib_send_wr w = { .wr_id = 12, .opcode = IB_WR_SEND, .sg_list = &big,
					.num_sge = 1, .send_flags = IB_SEND_INLINE | IB_SEND_SIGNALED };
		char *huge = kmalloc(4096, GFP_KERNEL);

		if (huge) {
			big.addr = (u64)(uintptr_t)huge;
			ret = ib_post_send(p.qa, &w, &bad);
			CHECK(ret == -EINVAL && bad == &w,
			      "send: inline of 4096 bytes (over max_inline_data) -> %d", ret);
			kfree(huge);
		}
	}
out:
	kfree(src);
	buf_free(&rb);
	pair_down(&p, a, b);
}

/* Fast registration on b, then a's WRITE/READ/atomics through the new rkey, LOCAL_INV,
 * SEND_WITH_INV, re-registration with ib_inc_rkey. */
static void check_fast_reg(struct side *a, struct side *b)
{
	struct pair p;
	struct buf tb = {}, lb = {}, rb = {};
	struct ib_mr *mr;
	struct ib_wc wc;
	u32 old_rkey, rkey;
	u64 *res;
	int ret, i;

	if (pair_up(&p, a, b, NULL, NULL)) {
		CHECK(0, "fastreg: RC pair connects");
		return;
	}
	mr = ib_alloc_mr(b->pd, IB_MR_TYPE_MEM_REG, NPAGES);
	CHECK(!IS_ERR(mr), "fastreg: ib_alloc_mr(MEM_REG, %d) -> %ld", NPAGES,
	      IS_ERR(mr) ? PTR_ERR(mr) : 0);
	if (IS_ERR(mr))
		goto out_pair;
	if (buf_alloc(&tb, b->dev) || buf_alloc(&lb, a->dev) || buf_alloc(&rb, b->dev))
		goto out;
	old_rkey = mr->rkey;
	ret = fast_reg(p.qb, b->cq, mr, &tb, NPAGES, RW_ACCESS);
	CHECK(ret == 0 && mr->rkey == ib_inc_rkey(old_rkey) && mr->length == NPAGES * PAGE_SIZE,
	      "fastreg: REG_MR of %d pages completes IB_WC_REG_MR, rkey %#x -> %#x, iova %#llx",
	      NPAGES, old_rkey, mr->rkey, mr->iova);
	if (ret)
		goto out;
	rkey = mr->rkey;
	for (i = 0; i < NPAGES * PAGE_SIZE; i++)
		data_of(&lb)[i] = (u8)(i * 7 + 3);
	buf_sync_dev(&lb);
	ret = rdma_op(p.qa, IB_WR_RDMA_WRITE, 20, data_dma(&lb), NPAGES * PAGE_SIZE,
		      a->pd->local_dma_lkey, mr->iova, rkey);
	ret = ret ? ret : wait_wr(a->cq, 20, &wc);
	buf_sync_cpu(&tb);
	CHECK(!ret && !memcmp(data_of(&tb), data_of(&lb), NPAGES * PAGE_SIZE) && guards_ok(&tb),
	      "fastreg: peer RDMA WRITE of %lu bytes through rkey %#x landed, guards intact",
	      NPAGES * PAGE_SIZE, rkey);
	memset(data_of(&lb), 0, NPAGES * PAGE_SIZE);
	buf_sync_dev(&lb);
	ret = rdma_op(p.qa, IB_WR_RDMA_READ, 21, data_dma(&lb), NPAGES * PAGE_SIZE,
		      a->pd->local_dma_lkey, mr->iova, rkey);
	ret = ret ? ret : wait_wr(a->cq, 21, &wc);
	buf_sync_cpu(&lb);
	CHECK(!ret && wc.opcode == IB_WC_RDMA_READ &&
		      !memcmp(data_of(&tb), data_of(&lb), NPAGES * PAGE_SIZE),
	      "fastreg: peer RDMA READ through rkey %#x returns the data", rkey);

	/* Inline RDMA WRITE from a kernel virtual address, then WRITE_WITH_IMM. */
	{
		static const char pat[] = "inline RDMA WRITE through a fast-registered rkey";
		struct ib_sge sge = { .addr = (u64)(uintptr_t)pat, .length = sizeof(pat) };
		struct ib_rdma_wr w = {
			.wr = { .wr_id = 24, .opcode = IB_WR_RDMA_WRITE, .sg_list = &sge,
				.num_sge = 1, .send_flags = IB_SEND_INLINE },
			.remote_addr = mr->iova + 200, .rkey = rkey,
		};

		ret = post_send(p.qa, &w.wr);
		ret = ret ? ret : wait_wr(a->cq, 24, &wc);
		buf_sync_cpu(&tb);
		CHECK(!ret && !memcmp(data_of(&tb) + 200, pat, sizeof(pat)),
		      "fastreg: inline RDMA WRITE of %zu bytes lands (status %d)", sizeof(pat), ret);
		post_recv(p.qb, 25, data_dma(&rb), PAGE_SIZE, b->pd->local_dma_lkey);
		sge.addr = data_dma(&lb);
		sge.lkey = a->pd->local_dma_lkey;
		sge.length = 32;
		w.wr.wr_id = 26;
		w.wr.opcode = IB_WR_RDMA_WRITE_WITH_IMM;
		w.wr.send_flags = 0;
		w.wr.ex.imm_data = cpu_to_be32(0xabcd);
		ret = post_send(p.qa, &w.wr);
		ret = ret ? ret : wait_wr(a->cq, 26, NULL);
		ret = ret ? ret : wait_wr(b->cq, 25, &wc);
		CHECK(!ret && wc.opcode == IB_WC_RECV_RDMA_WITH_IMM && (wc.wc_flags & IB_WC_WITH_IMM) &&
			      wc.ex.imm_data == cpu_to_be32(0xabcd),
		      "fastreg: RDMA WRITE_WITH_IMM completes IB_WC_RECV_RDMA_WITH_IMM imm 0x%x (status %d)",
		      be32_to_cpu(wc.ex.imm_data), ret);
	}

	/* Atomics on the registered memory (offset 64, 8-byte aligned). */
	res = (u64 *)data_of(&lb);
	*(u64 *)(data_of(&tb) + 64) = 100;
	buf_sync_dev(&tb);
	{
		struct ib_sge sge = { .addr = data_dma(&lb), .length = 8,
				      .lkey = a->pd->local_dma_lkey };
		struct ib_atomic_wr aw = {
			.wr = { .wr_id = 22, .opcode = IB_WR_ATOMIC_FETCH_AND_ADD, .sg_list = &sge,
				.num_sge = 1 },
			.remote_addr = mr->iova + 64, .rkey = rkey, .compare_add = 5,
		};

		ret = post_send(p.qa, &aw.wr);
		ret = ret ? ret : wait_wr(a->cq, 22, &wc);
		buf_sync_cpu(&lb);
		buf_sync_cpu(&tb);
		CHECK(!ret && wc.opcode == IB_WC_FETCH_ADD && *res == 100 &&
			      *(u64 *)(data_of(&tb) + 64) == 105,
		      "atomic: FETCH_AND_ADD returned %llu, memory now %llu", *res,
		      *(u64 *)(data_of(&tb) + 64));
		aw.wr.wr_id = 23;
		aw.wr.opcode = IB_WR_ATOMIC_CMP_AND_SWP;
		aw.compare_add = 105;
		aw.swap = 7;
		ret = post_send(p.qa, &aw.wr);
		ret = ret ? ret : wait_wr(a->cq, 23, &wc);
		buf_sync_cpu(&lb);
		buf_sync_cpu(&tb);
		CHECK(!ret && wc.opcode == IB_WC_COMP_SWAP && *res == 105 &&
			      *(u64 *)(data_of(&tb) + 64) == 7,
		      "atomic: CMP_AND_SWP returned %llu, memory now %llu", *res,
		      *(u64 *)(data_of(&tb) + 64));
	}

	/* SEND_WITH_INV of the rkey: the receive reports it, the key is gone. */
	post_recv(p.qb, 30, data_dma(&rb), PAGE_SIZE, b->pd->local_dma_lkey);
	{
		struct ib_sge sge = { .addr = data_dma(&lb), .length = 8,
				      .lkey = a->pd->local_dma_lkey };
		struct ib_send_wr wr = { .wr_id = 31, .opcode = IB_WR_SEND_WITH_INV,
					 .sg_list = &sge, .num_sge = 1 };

		wr.ex.invalidate_rkey = rkey;
		ret = post_send(p.qa, &wr);
		ret = ret ? ret : wait_wr(a->cq, 31, NULL);
		ret = ret ? ret : wait_wr(b->cq, 30, &wc);
		CHECK(!ret && (wc.wc_flags & IB_WC_WITH_INVALIDATE) && wc.ex.invalidate_rkey == rkey,
		      "send_with_inv: receive has IB_WC_WITH_INVALIDATE, rkey %#x (status %d)",
		      wc.ex.invalidate_rkey, ret);
	}
	memset(data_of(&lb), 0x3c, NPAGES * PAGE_SIZE);
	buf_sync_dev(&lb);
	buf_sync_cpu(&tb);
	memcpy(data_of(&rb), data_of(&tb), NPAGES * PAGE_SIZE); /* remember the contents */
	ret = rdma_op(p.qa, IB_WR_RDMA_WRITE, 32, data_dma(&lb), 64, a->pd->local_dma_lkey,
		      mr->iova, rkey);
	ret = ret ? ret : wait_wr(a->cq, 32, &wc);
	buf_sync_cpu(&tb);
	CHECK(ret == IB_WC_REM_ACCESS_ERR && !memcmp(data_of(&rb), data_of(&tb), NPAGES * PAGE_SIZE) &&
		      guards_ok(&tb),
	      "send_with_inv: WRITE through the invalidated rkey -> status %d (REM_ACCESS_ERR %d), nothing written",
	      ret, IB_WC_REM_ACCESS_ERR);
	pair_down(&p, a, b);

	/* Re-registration with the next key variant, then LOCAL_INV. */
	if (pair_up(&p, a, b, NULL, NULL)) {
		CHECK(0, "fastreg: second RC pair connects");
		goto out_mr;
	}
	old_rkey = rkey;
	ret = fast_reg(p.qb, b->cq, mr, &tb, NPAGES, RW_ACCESS);
	rkey = mr->rkey;
	CHECK(ret == 0 && rkey == ib_inc_rkey(old_rkey),
	      "fastreg: re-registration with ib_inc_rkey %#x -> %#x (status %d)", old_rkey, rkey,
	      ret);
	ret = rdma_op(p.qa, IB_WR_RDMA_WRITE, 40, data_dma(&lb), 64, a->pd->local_dma_lkey,
		      mr->iova, rkey);
	ret = ret ? ret : wait_wr(a->cq, 40, &wc);
	buf_sync_cpu(&tb);
	CHECK(!ret && !memchr_inv(data_of(&tb), 0x3c, 64), "fastreg: WRITE through the new rkey lands");
	ret = local_inv(p.qb, b->cq, rkey, &wc);
	CHECK(ret == 0 && wc.opcode == IB_WC_LOCAL_INV, "local_inv: LOCAL_INV of %#x completes (status %d)",
	      rkey, ret);
	memcpy(data_of(&rb), data_of(&tb), NPAGES * PAGE_SIZE);
	memset(data_of(&lb), 0x77, PAGE_SIZE);
	buf_sync_dev(&lb);
	ret = rdma_op(p.qa, IB_WR_RDMA_WRITE, 41, data_dma(&lb), 64, a->pd->local_dma_lkey,
		      mr->iova, rkey);
	ret = ret ? ret : wait_wr(a->cq, 41, &wc);
	buf_sync_cpu(&tb);
	CHECK(ret == IB_WC_REM_ACCESS_ERR && !memcmp(data_of(&rb), data_of(&tb), NPAGES * PAGE_SIZE) &&
		      guards_ok(&tb),
	      "local_inv: WRITE through the invalidated rkey -> status %d, nothing written", ret);
	pair_down(&p, a, b);
	goto out_mr;
out:
	pair_down(&p, a, b);
out_mr:
	buf_free(&tb);
	buf_free(&lb);
	buf_free(&rb);
	if (!IS_ERR(mr))
		ib_dereg_mr(mr);
	return;
out_pair:
	pair_down(&p, a, b);
}

/* The bad input of issue 11. */
static void check_bad_input(struct side *a, struct side *b)
{
	struct pair p, p2;
	struct buf tb = {}, tb2 = {}, lb = {}, snap = {};
	struct ib_mr *mr = NULL, *mr2 = NULL;
	struct ib_pd *pd2;
	struct scatterlist sg;
	struct ib_wc wc;
	int ret, n;

	pd2 = ib_alloc_pd(b->dev, 0);
	if (IS_ERR(pd2)) {
		SETUP_FAILED("bad: second PD: %ld", PTR_ERR(pd2));
		return;
	}
	if (buf_alloc(&tb, b->dev) || buf_alloc(&tb2, b->dev) || buf_alloc(&lb, a->dev) ||
	    buf_alloc(&snap, b->dev))
		goto out;

	/* A page list beyond the MR's capacity: ib_map_mr_sg maps only what fits. */
	mr = ib_alloc_mr(b->pd, IB_MR_TYPE_MEM_REG, 2);
	if (IS_ERR(mr)) {
		CHECK(0, "bad: ib_alloc_mr(2)");
		mr = NULL;
		goto out;
	}
	sg_init_table(&sg, 1);
	sg_dma_address(&sg) = data_dma(&tb);
	sg_dma_len(&sg) = NPAGES * PAGE_SIZE;
	n = ib_map_mr_sg(mr, &sg, 1, NULL, PAGE_SIZE);
	CHECK(n < 1 || mr->length <= 2 * PAGE_SIZE,
	      "bad: ib_map_mr_sg of %d pages into a 2-page MR maps %llu bytes (returns %d)", NPAGES,
	      mr->length, n);
	CHECK(IS_ERR(ib_alloc_mr(b->pd, IB_MR_TYPE_MEM_REG,
				 b->dev->attrs.max_fast_reg_page_list_len + 1)),
	      "bad: ib_alloc_mr beyond max_fast_reg_page_list_len refused");

	/* A REG_MR whose pages do not cover its length: error completion, key stays invalid. */
	if (pair_up(&p, a, b, NULL, NULL)) {
		SETUP_FAILED("bad: RC pair for the short REG_MR");
		goto out;
	}
	sg_dma_len(&sg) = 2 * PAGE_SIZE;
	n = ib_map_mr_sg(mr, &sg, 1, NULL, PAGE_SIZE);
	mr->length = NPAGES * PAGE_SIZE; /* claims more than the 2 pages mapped */
	ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey));
	{
		struct ib_reg_wr wr = { .wr = { .wr_id = 50, .opcode = IB_WR_REG_MR },
					.mr = mr, .key = mr->rkey, .access = RW_ACCESS };

		ret = post_send(p.qb, &wr.wr);
		ret = ret ? ret : wait_wr(b->cq, 50, &wc);
		CHECK(ret > 0, "bad: REG_MR with a page list shorter than its length -> status %d (MW_BIND_ERR %d)",
		      ret, IB_WC_MW_BIND_ERR);
	}
	memcpy(data_of(&snap), data_of(&tb), NPAGES * PAGE_SIZE);
	ret = rdma_op(p.qa, IB_WR_RDMA_WRITE, 51, data_dma(&lb), 64, a->pd->local_dma_lkey,
		      mr->iova, mr->rkey);
	ret = ret ? ret : wait_wr(a->cq, 51, &wc);
	buf_sync_cpu(&tb);
	CHECK(ret > 0 && !memcmp(data_of(&snap), data_of(&tb), NPAGES * PAGE_SIZE) && guards_ok(&tb),
	      "bad: WRITE through the refused registration's key -> status %d, nothing written", ret);
	pair_down(&p, a, b);

	/* Another PD's key: mr2 in pd2 (b), registered through a QP of pd2. */
	mr2 = ib_alloc_mr(pd2, IB_MR_TYPE_MEM_REG, NPAGES);
	if (IS_ERR(mr2)) {
		SETUP_FAILED("bad: ib_alloc_mr in the second PD: %ld", PTR_ERR(mr2));
		mr2 = NULL;
		goto out;
	}
	if (pair_up(&p2, a, b, pd2, NULL)) {
		SETUP_FAILED("bad: RC pair in the second PD");
		goto out;
	}
	ret = fast_reg(p2.qb, b->cq, mr2, &tb2, NPAGES, RW_ACCESS);
	CHECK(ret == 0, "bad: fast registration in a second PD (status %d)", ret);
	if (pair_up(&p, a, b, NULL, NULL)) {
		SETUP_FAILED("bad: RC pair for LOCAL_INV of another PD's key");
		pair_down(&p2, a, b);
		goto out;
	}
	ret = local_inv(p.qb, b->cq, mr2->rkey, &wc);
	CHECK(ret > 0, "bad: LOCAL_INV of another PD's key %#x -> status %d", mr2->rkey, ret);
	pair_down(&p, a, b);
	/* mr2 must still be valid: a WRITE through it lands. */
	memset(data_of(&lb), 0x5a, 64);
	buf_sync_dev(&lb);
	ret = rdma_op(p2.qa, IB_WR_RDMA_WRITE, 52, data_dma(&lb), 64, a->pd->local_dma_lkey,
		      mr2->iova, mr2->rkey);
	ret = ret ? ret : wait_wr(a->cq, 52, &wc);
	buf_sync_cpu(&tb2);
	CHECK(!ret && !memchr_inv(data_of(&tb2), 0x5a, 64),
	      "bad: the other PD's key still works after the refused LOCAL_INV");

	/* SEND_WITH_INV of an unknown rkey and of a foreign one (pd2's, to a pd QP). */
	{
		u32 keys[2] = { 0x00fffe00 | 0x42, mr2->rkey };
		const char *what[2] = { "an unknown", "another PD's" };
		int k;

		for (k = 0; k < 2; k++) {
			struct ib_sge sge = { .addr = data_dma(&lb), .length = 8,
					      .lkey = a->pd->local_dma_lkey };
			struct ib_send_wr wr = { .wr_id = 60 + k, .opcode = IB_WR_SEND_WITH_INV,
						 .sg_list = &sge, .num_sge = 1 };
			int rret;

			if (pair_up(&p, a, b, NULL, NULL)) {
				SETUP_FAILED("bad: RC pair for SEND_WITH_INV %d", k);
				break;
			}
			post_recv(p.qb, 70 + k, data_dma(&snap), PAGE_SIZE, b->pd->local_dma_lkey);
			wr.ex.invalidate_rkey = keys[k];
			ret = post_send(p.qa, &wr);
			ret = ret ? ret : wait_wr(a->cq, 60 + k, &wc);
			rret = wait_wr(b->cq, 70 + k, NULL);
			CHECK(ret > 0 && rret != 0,
			      "bad: SEND_WITH_INV of %s rkey %#x -> sender status %d, receiver status %d",
			      what[k], keys[k], ret, rret);
			pair_down(&p, a, b);
		}
	}
	memset(data_of(&lb), 0x6b, 64);
	buf_sync_dev(&lb);
	ret = rdma_op(p2.qa, IB_WR_RDMA_WRITE, 53, data_dma(&lb), 64, a->pd->local_dma_lkey,
		      mr2->iova, mr2->rkey);
	ret = ret ? ret : wait_wr(a->cq, 53, &wc);
	buf_sync_cpu(&tb2);
	CHECK(!ret && !memchr_inv(data_of(&tb2), 0x6b, 64) && guards_ok(&tb2),
	      "bad: the foreign key survived the SEND_WITH_INV, guards intact");
	pair_down(&p2, a, b);
out:
	if (mr)
		ib_dereg_mr(mr);
	if (mr2)
		ib_dereg_mr(mr2);
	buf_free(&tb);
	buf_free(&tb2);
	buf_free(&lb);
	buf_free(&snap);
	ib_dealloc_pd(pd2);
}

static atomic_t srq_limit_events;

static void srq_event(struct ib_event *ev, void *ctx)
{
	if (ev->event == IB_EVENT_SRQ_LIMIT_REACHED)
		atomic_inc(&srq_limit_events);
}

static void check_srq(struct side *a, struct side *b)
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

static void check_zero_depth(struct side *a, struct side *b)
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
		struct ib_qp *so = create_qp(a, NULL, IB_QPT_RC, DEPTH, 0, NULL, NULL);
		struct ib_qp *ro = create_qp(b, NULL, IB_QPT_RC, 0, DEPTH, NULL, NULL);
		struct buf rb = {}, sb = {};
		struct ib_wc wc;
		int ret = -EINVAL;

		if (!IS_ERR(so) && !IS_ERR(ro) && !buf_alloc(&rb, b->dev) && !buf_alloc(&sb, a->dev) &&
		    !connect_qp(so, a, b, ro->qp_num) && !connect_qp(ro, b, a, so->qp_num)) {
			struct ib_sge sge = { .addr = data_dma(&sb), .length = 100,
					      .lkey = a->pd->local_dma_lkey };
			struct ib_send_wr wr = { .wr_id = 200, .opcode = IB_WR_SEND, .sg_list = &sge,
						 .num_sge = 1 };

			post_recv(ro, 201, data_dma(&rb), PAGE_SIZE, b->pd->local_dma_lkey);
			ret = post_send(so, &wr);
			ret = ret ? ret : wait_wr(a->cq, 200, NULL);
			ret = ret ? ret : wait_wr(b->cq, 201, &wc);
		}
		CHECK(!ret && wc.byte_len == 100,
		      "zero-depth: SEND from a send-only RC QP to a receive-only one (status %d)", ret);
		buf_free(&rb);
		buf_free(&sb);
		if (!IS_ERR(so))
			ib_destroy_qp(so);
		if (!IS_ERR(ro))
			ib_destroy_qp(ro);
		drain_cq(a->cq);
		drain_cq(b->cq);
	}
	/* UD: a send-only QP on a to a receive-only QP on b through an address handle. */
	{
		struct ib_qp *so = create_qp(a, NULL, IB_QPT_UD, DEPTH, 0, NULL, NULL);
		struct ib_qp *ro = create_qp(b, NULL, IB_QPT_UD, 0, DEPTH, NULL, NULL);
		struct buf rb = {}, sb = {};
		struct rdma_ah_attr av;
		struct ib_ah *ah = NULL;
		struct ib_wc wc;
		int ret = -EINVAL;

		if (!IS_ERR(so) && !IS_ERR(ro) && !buf_alloc(&rb, b->dev) && !buf_alloc(&sb, a->dev) &&
		    !ud_ready(so, 0x1111) && !ud_ready(ro, 0x1111)) {
			roce_av(&av, a, b);
			ah = rdma_create_ah(a->pd, &av, RDMA_CREATE_AH_SLEEPABLE);
			if (!IS_ERR(ah)) {
				struct ib_sge sge = { .addr = data_dma(&sb), .length = 64,
						      .lkey = a->pd->local_dma_lkey };
				struct ib_ud_wr wr = {
					.wr = { .wr_id = 210, .opcode = IB_WR_SEND, .sg_list = &sge,
						.num_sge = 1 },
					.ah = ah, .remote_qpn = ro->qp_num, .remote_qkey = 0x1111,
				};

				post_recv(ro, 211, data_dma(&rb), PAGE_SIZE, b->pd->local_dma_lkey);
				ret = post_send(so, &wr.wr);
				ret = ret ? ret : wait_wr(a->cq, 210, NULL);
				ret = ret ? ret : wait_wr(b->cq, 211, &wc);
			} else {
				ret = PTR_ERR(ah);
				ah = NULL;
			}
		}
		CHECK(!ret && wc.byte_len == 64 + 40 && wc.src_qp == so->qp_num,
		      "zero-depth: UD datagram from a send-only QP to a receive-only one (status %d)",
		      ret);
		if (ah)
			rdma_destroy_ah(ah, RDMA_DESTROY_AH_SLEEPABLE);
		buf_free(&rb);
		buf_free(&sb);
		if (!IS_ERR(so))
			ib_destroy_qp(so);
		if (!IS_ERR(ro))
			ib_destroy_qp(ro);
		drain_cq(a->cq);
		drain_cq(b->cq);
	}
}

/* A CQ per poll context, completions counted through ib_cqe callbacks, then ib_drain_qp. */
struct ctx_counter {
	struct ib_cqe cqe;
	atomic_t ok, flushed, other;
	struct completion done;
	int want;
};

static void count_done(struct ib_cq *cq, struct ib_wc *wc)
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

static void check_poll_ctx(struct side *a, struct side *b, enum ib_poll_context ctx,
			   const char *name, int vector)
{
	const int n = 8;
	struct ib_cq *ca, *cb;
	struct ib_qp *qa = NULL, *qb = NULL;
	struct side sa = *a, sb2 = *b;
	struct ctx_counter sends = {}, recvs = {};
	struct buf rb = {}, tx = {};
	int i, ret = 0;
	bool finished;

	ca = ib_alloc_cq(a->dev, NULL, 64, vector % a->dev->num_comp_vectors, ctx);
	cb = ib_alloc_cq(b->dev, NULL, 64, vector % b->dev->num_comp_vectors, ctx);
	CHECK(!IS_ERR(ca) && !IS_ERR(cb), "cq %s: CQs on completion vector %d", name, vector);
	if (IS_ERR(ca) || IS_ERR(cb))
		goto out;
	sa.cq = ca;
	sb2.cq = cb;
	qa = create_qp(&sa, NULL, IB_QPT_RC, DEPTH, DEPTH, NULL, ca);
	qb = create_qp(&sb2, NULL, IB_QPT_RC, DEPTH, DEPTH, NULL, cb);
	if (IS_ERR(qa) || IS_ERR(qb) || connect_qp(qa, a, b, qb->qp_num) ||
	    connect_qp(qb, b, a, qa->qp_num) || buf_alloc(&rb, b->dev) || buf_alloc(&tx, a->dev)) {
		CHECK(0, "cq %s: RC pair", name);
		goto out;
	}
	sends.cqe.done = count_done;
	recvs.cqe.done = count_done;
	init_completion(&sends.done);
	init_completion(&recvs.done);
	sends.want = n;
	/* n receives consumed, 2 more flushed by the drain. */
	recvs.want = n + 2;
	for (i = 0; i < n + 2; i++) {
		struct ib_sge sge = { .addr = data_dma(&rb) + i * 128, .length = 128,
				      .lkey = b->pd->local_dma_lkey };
		struct ib_recv_wr wr = { .wr_cqe = &recvs.cqe, .sg_list = &sge, .num_sge = 1 };
		const struct ib_recv_wr *bad;

		ret |= ib_post_recv(qb, &wr, &bad);
	}
	for (i = 0; i < n; i++) {
		struct ib_sge sge = { .addr = data_dma(&tx), .length = 64,
				      .lkey = a->pd->local_dma_lkey };
		struct ib_send_wr wr = { .wr_cqe = &sends.cqe, .opcode = IB_WR_SEND,
					 .sg_list = &sge, .num_sge = 1,
					 .send_flags = IB_SEND_SIGNALED };
		const struct ib_send_wr *bad;

		ret |= ib_post_send(qa, &wr, &bad);
	}
	if (ctx == IB_POLL_DIRECT) {
		unsigned long end = jiffies + msecs_to_jiffies(TIMEOUT_MS);

		while ((atomic_read(&sends.ok) < n || atomic_read(&recvs.ok) < n) &&
		       time_before(jiffies, end)) {
			ib_process_cq_direct(ca, -1);
			ib_process_cq_direct(cb, -1);
			usleep_range(100, 200);
		}
		finished = atomic_read(&sends.ok) == n && atomic_read(&recvs.ok) == n;
	} else {
		finished = wait_for_completion_timeout(&sends.done, msecs_to_jiffies(TIMEOUT_MS));
		for (i = 0; i < 250 && atomic_read(&recvs.ok) < n; i++)
			msleep(20);
		finished = finished && atomic_read(&recvs.ok) == n;
	}
	CHECK(!ret && finished && !atomic_read(&sends.other),
	      "cq %s: %d SENDs and %d receives completed through ib_core's polling", name,
	      atomic_read(&sends.ok), atomic_read(&recvs.ok));
	ib_drain_qp(qa);
	ib_drain_qp(qb);
	if (ctx == IB_POLL_DIRECT)
		ib_process_cq_direct(cb, -1);
	CHECK(atomic_read(&recvs.flushed) == 2 && !atomic_read(&recvs.other),
	      "cq %s: ib_drain_qp returned, the 2 receives left were flushed (%d)", name,
	      atomic_read(&recvs.flushed));
out:
	if (!IS_ERR_OR_NULL(qa))
		ib_destroy_qp(qa);
	if (!IS_ERR_OR_NULL(qb))
		ib_destroy_qp(qb);
	buf_free(&rb);
	buf_free(&tx);
	if (!IS_ERR_OR_NULL(ca))
		ib_free_cq(ca);
	if (!IS_ERR_OR_NULL(cb))
		ib_free_cq(cb);
}

/*
 * Review L2: a kernel QP reset while completions of its earlier SENDs sit unpolled in its CQ,
 * then connected again: the poll returns only the new SENDs' completions. Its queue restarts
 * at index 0, so a stale CQE (wr_id 100..102, WQE index 0..2) would have come first and
 * retired the new WQEs 0 and 1 before the device did them; rox.ko takes a reset QP's CQEs out
 * of its CQs.
 */
static void check_reset_reuse(struct side *a, struct side *b)
{
	struct pair p;
	struct buf tx = {}, rb = {};
	struct ib_qp_attr reset = { .qp_state = IB_QPS_RESET };
	struct ib_wc wc[8];
	u64 got[8];
	int i, n = 0, ret = 0;
	unsigned long end;

	if (pair_up(&p, a, b, NULL, NULL)) {
		SETUP_FAILED("reset reuse: RC pair");
		return;
	}
	if (buf_alloc(&tx, a->dev) || buf_alloc(&rb, b->dev)) {
		SETUP_FAILED("reset reuse: buffers");
		goto out;
	}
	for (i = 0; i < 5; i++)
		ret |= post_recv(p.qb, i, data_dma(&rb) + i * 128, 128, b->pd->local_dma_lkey);
	for (i = 0; i < 3; i++) {
		struct ib_sge sge = { .addr = data_dma(&tx), .length = 64,
				      .lkey = a->pd->local_dma_lkey };
		struct ib_send_wr wr = { .wr_id = 100 + i, .opcode = IB_WR_SEND, .sg_list = &sge,
					 .num_sge = 1, .send_flags = IB_SEND_SIGNALED };

		ret |= post_send(p.qa, &wr);
	}
	/* The 3 arrived (their receives completed); the sender's CQEs follow the ACKs. */
	for (i = 0; i < 3; i++)
		ret |= wait_wr(b->cq, i, NULL);
	msleep(300);
	/* Both ends start again (PSN 0); the reset drops the 2 receives left at b. */
	ret |= ib_modify_qp(p.qa, &reset, IB_QP_STATE);
	ret |= ib_modify_qp(p.qb, &reset, IB_QP_STATE);
	drain_cq(b->cq);
	ret |= connect_qp(p.qa, a, b, p.qb->qp_num);
	ret |= connect_qp(p.qb, b, a, p.qa->qp_num);
	for (i = 0; i < 2; i++)
		ret |= post_recv(p.qb, 10 + i, data_dma(&rb) + i * 128, 128, b->pd->local_dma_lkey);
	for (i = 0; i < 2; i++) {
		struct ib_sge sge = { .addr = data_dma(&tx), .length = 64,
				      .lkey = a->pd->local_dma_lkey };
		struct ib_send_wr wr = { .wr_id = 200 + i, .opcode = IB_WR_SEND, .sg_list = &sge,
					 .num_sge = 1, .send_flags = IB_SEND_SIGNALED };

		ret |= post_send(p.qa, &wr);
	}
	/* Everything a's CQ returns within 1 s (the new SENDs take milliseconds). */
	end = jiffies + msecs_to_jiffies(1000);
	while (time_before(jiffies, end) && n < ARRAY_SIZE(got)) {
		int k = ib_poll_cq(a->cq, ARRAY_SIZE(wc), wc);

		for (i = 0; i < k && n < ARRAY_SIZE(got); i++)
			got[n++] = wc[i].status == IB_WC_SUCCESS ? wc[i].wr_id : 0;
		usleep_range(1000, 2000);
	}
	CHECK(!ret && n == 2 && got[0] == 200 && got[1] == 201,
	      "reset reuse: after a reset with 3 completions unpolled, a's CQ returns only the "
	      "2 new SENDs (%d completions, first wr_id %llu)",
	      n, n ? got[0] : 0ULL);
out:
	pair_down(&p, a, b);
	buf_free(&tx);
	buf_free(&rb);
}

/*
 * The hung-device check (hang=1): 8 receives and 4 SENDs in flight on an RC QP of rox_0 (the
 * peer has no receives: the SENDs meet RNR NAKs, retried for ever), then "hang: ready"; the
 * runner makes rox_0's device hang (rox-nic --die-on ...,fatal=hang: it reports a fatal
 * error, keeps answering registers and never completes the reset). rox.ko must give up on
 * the reset after its 2 s deadline and complete all 12 with IB_WC_WR_FLUSH_ERR through
 * ib_core's softirq poller, within HANG_WAIT_MS.
 */
#define HANG_WAIT_MS 60000

static void check_hung_device(struct side *a, struct side *b)
{
	const int nrecv = 8, nsend = 4;
	struct ib_cq *ca, *cb;
	struct ib_qp *qa = NULL, *qb = NULL;
	struct side sa = *a, sb2 = *b;
	struct ctx_counter wrs = {};
	struct buf rb = {}, tx = {};
	unsigned long start;
	int i, ret = 0;
	bool finished;

	ca = ib_alloc_cq(a->dev, NULL, 64, 0, IB_POLL_SOFTIRQ);
	cb = ib_alloc_cq(b->dev, NULL, 64, 0, IB_POLL_SOFTIRQ);
	if (IS_ERR(ca) || IS_ERR(cb)) {
		SETUP_FAILED("hang: CQs");
		goto out;
	}
	sa.cq = ca;
	sb2.cq = cb;
	qa = create_qp(&sa, NULL, IB_QPT_RC, DEPTH, DEPTH, NULL, ca);
	qb = create_qp(&sb2, NULL, IB_QPT_RC, DEPTH, DEPTH, NULL, cb);
	if (IS_ERR(qa) || IS_ERR(qb) || connect_qp(qa, a, b, qb->qp_num) ||
	    connect_qp(qb, b, a, qa->qp_num) || buf_alloc(&rb, a->dev) || buf_alloc(&tx, a->dev)) {
		SETUP_FAILED("hang: RC pair");
		goto out;
	}
	wrs.cqe.done = count_done;
	init_completion(&wrs.done);
	wrs.want = nrecv + nsend;
	for (i = 0; i < nrecv; i++) {
		struct ib_sge sge = { .addr = data_dma(&rb) + i * 128, .length = 128,
				      .lkey = a->pd->local_dma_lkey };
		struct ib_recv_wr wr = { .wr_cqe = &wrs.cqe, .sg_list = &sge, .num_sge = 1 };
		const struct ib_recv_wr *bad;

		ret |= ib_post_recv(qa, &wr, &bad);
	}
	for (i = 0; i < nsend; i++) {
		struct ib_sge sge = { .addr = data_dma(&tx), .length = 64,
				      .lkey = a->pd->local_dma_lkey };
		struct ib_send_wr wr = { .wr_cqe = &wrs.cqe, .opcode = IB_WR_SEND,
					 .sg_list = &sge, .num_sge = 1,
					 .send_flags = IB_SEND_SIGNALED };
		const struct ib_send_wr *bad;

		ret |= ib_post_send(qa, &wr, &bad);
	}
	CHECK(!ret, "hang: %d receives and %d SENDs posted on rox_0", nrecv, nsend);
	/* Still in flight a moment later: the device is alive and nothing can complete. */
	msleep(200);
	CHECK(!atomic_read(&wrs.ok) && !atomic_read(&wrs.flushed) && !atomic_read(&wrs.other),
	      "hang: nothing completed before the device hangs");
	pr_info(PFX "hang: ready, %d work requests in flight\n", nrecv + nsend);
	start = jiffies;
	finished = wait_for_completion_timeout(&wrs.done, msecs_to_jiffies(HANG_WAIT_MS));
	pr_info(PFX "hang: %d flushed, %d successful, %d other after %u ms\n",
		atomic_read(&wrs.flushed), atomic_read(&wrs.ok), atomic_read(&wrs.other),
		jiffies_to_msecs(jiffies - start));
	CHECK(finished && atomic_read(&wrs.flushed) == nrecv + nsend,
	      "hang: all %d work requests completed with IB_WC_WR_FLUSH_ERR", nrecv + nsend);
out:
	if (!IS_ERR_OR_NULL(qa))
		ib_destroy_qp(qa);
	if (!IS_ERR_OR_NULL(qb))
		ib_destroy_qp(qb);
	buf_free(&rb);
	buf_free(&tx);
	if (!IS_ERR_OR_NULL(ca))
		ib_free_cq(ca);
	if (!IS_ERR_OR_NULL(cb))
		ib_free_cq(cb);
}

static int __init rox_kverbs_init(void)
{
	struct side a = {}, b = {};
	int ret;

	ret = ib_register_client(&client);
	if (ret)
		return ret;
	if (!dev_a || !dev_b) {
		pr_info(PFX "FAIL rox_0 and %s not both present\n", peer);
		pr_info(PFX "result: 0 passed, 1 failed\n");
		return 0;
	}
	ret = side_init(&a, dev_a);
	if (!ret)
		ret = side_init(&b, dev_b);
	if (ret) {
		pr_info(PFX "FAIL setup (PD, CQ, IPv4 RoCEv2 GID) of rox_0 / %s: %d\n", peer, ret);
		failed++;
		goto out;
	}
	pr_info(PFX "rox_0 GID index %d %pI6, %s GID index %d %pI6\n", a.gid_index, a.gid.raw,
		peer, b.gid_index, b.gid.raw);
	if (hang) {
		check_hung_device(&a, &b);
		goto out;
	}
	check_attrs(&a);
	check_send_inline(&a, &b);
	check_fast_reg(&a, &b);
	check_srq(&a, &b);
	check_reset_reuse(&a, &b);
	check_zero_depth(&a, &b);
	check_poll_ctx(&a, &b, IB_POLL_DIRECT, "direct", 0);
	check_poll_ctx(&a, &b, IB_POLL_SOFTIRQ, "softirq", 1);
	check_poll_ctx(&a, &b, IB_POLL_WORKQUEUE, "workqueue", 0);
	check_poll_ctx(&a, &b, IB_POLL_UNBOUND_WORKQUEUE, "unbound-workqueue", 1);
	check_bad_input(&a, &b);
out:
	side_fini(&a);
	side_fini(&b);
	pr_info(PFX "result: %d passed, %d failed\n", passed, failed);
	return 0;
}

static void __exit rox_kverbs_exit(void)
{
	ib_unregister_client(&client);
}

module_init(rox_kverbs_init);
module_exit(rox_kverbs_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("rox kernel verbs test (tests/kernel)");
