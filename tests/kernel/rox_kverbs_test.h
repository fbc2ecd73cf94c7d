/* SPDX-License-Identifier: GPL-2.0 */
/* Shared by the files of rox_kverbs_test.ko (tests/kernel/Kbuild; kverbs_main.c describes it). */
#ifndef ROX_KVERBS_TEST_H
#define ROX_KVERBS_TEST_H

#include <linux/module.h>
#include <linux/slab.h>
#include <linux/delay.h>
#include <linux/scatterlist.h>
#include <linux/completion.h>
#include <linux/inet.h>
#include <linux/etherdevice.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_cache.h>

#define PFX "rox_kverbs: "
#define TIMEOUT_MS 5000
#define GUARD 0xa5
#define NPAGES 4          /* data pages of a fast-registration target */
#define BUF_PAGES (NPAGES + 2) /* a guard page each side */
#define DEPTH 16
#define ACK_TIMEOUT 14 /* connect_qp's local ACK timeout: 67 ms */

/* The totals the module prints (kverbs_main.c). */
extern int passed, failed;
/* Side B's ib device (module parameter, kverbs_main.c). */
extern char *peer;

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

/* A connected RC pair a<->b (optionally in other PDs / on an SRQ at b). */
struct pair {
	struct ib_qp *qa, *qb;
};

/*
 * An RC pair a<->b on two CQs of its own that ib_core polls (cq_pair_cqs' poll context and
 * completion vector): for checks whose completions reach ib_cqe callbacks (count_done).
 */
struct cq_pair {
	struct ib_cq *ca, *cb;
	struct ib_qp *qa, *qb;
};

/* A DMA-mapped buffer of BUF_PAGES pages, the first and last a guard. */
struct buf {
	struct ib_device *dev;
	u8 *cpu;
	u64 dma;
};

#define RW_ACCESS (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ | \
		   IB_ACCESS_REMOTE_ATOMIC)

static inline u8 *data_of(struct buf *b) { return b->cpu + PAGE_SIZE; }
static inline u64 data_dma(struct buf *b) { return b->dma + PAGE_SIZE; }

/* Completions counted through ib_cqe callbacks (count_done) until `want` of them. */
struct ctx_counter {
	struct ib_cqe cqe;
	atomic_t ok, flushed, other;
	struct completion done;
	int want;
};

/* kverbs_lib.c */
int find_gid(struct side *s);
int side_init(struct side *s, struct ib_device *dev);
void side_fini(struct side *s);
int poll_one(struct ib_cq *cq, struct ib_wc *wc);
int wait_wr(struct ib_cq *cq, u64 wr_id, struct ib_wc *out);
void drain_cq(struct ib_cq *cq);
struct ib_qp *create_qp(struct side *s, struct ib_pd *pd, enum ib_qp_type type,
			u32 send_wr, u32 recv_wr, struct ib_srq *srq, struct ib_cq *cq);
void roce_av(struct rdma_ah_attr *ah, struct side *from, struct side *to);
int connect_qp(struct ib_qp *qp, struct side *from, struct side *to, u32 rqpn);
/* connect_qp's two halves: a QP in INIT takes receives but drops every packet that arrives. */
int qp_init(struct ib_qp *qp);
int qp_rtr_rts(struct ib_qp *qp, struct side *from, struct side *to, u32 rqpn, u8 timeout);
int ud_ready(struct ib_qp *qp, u32 qkey);
int pair_up(struct pair *p, struct side *a, struct side *b, struct ib_pd *pdb,
	    struct ib_srq *srqb);
void pair_down(struct pair *p, struct side *a, struct side *b);
/* The CQs of `p` (vector taken modulo each device's); 0 or -errno. cq_pair_down after either. */
int cq_pair_cqs(struct cq_pair *p, struct side *a, struct side *b, enum ib_poll_context ctx,
		int vector);
/* Its QPs on those CQs, connected; 0 or -errno. */
int cq_pair_connect(struct cq_pair *p, struct side *a, struct side *b);
/* Destroys what cq_pair_cqs and cq_pair_connect made. */
void cq_pair_down(struct cq_pair *p);
int buf_alloc(struct buf *b, struct ib_device *dev);
void buf_free(struct buf *b);
void buf_sync_cpu(struct buf *b);
void buf_sync_dev(struct buf *b);
bool guards_ok(struct buf *b);
int post_recv(struct ib_qp *qp, u64 wr_id, u64 addr, u32 len, u32 lkey);
int post_srq_recv(struct ib_srq *srq, u64 wr_id, u64 addr, u32 len, u32 lkey);
int post_send(struct ib_qp *qp, struct ib_send_wr *wr);
int post_recvs(struct ib_qp *qp, int n, struct ib_cqe *cqe, u64 wr_id, u64 addr, u32 lkey);
int post_sends(struct ib_qp *qp, int n, struct ib_cqe *cqe, u64 wr_id, u64 addr, u32 lkey);
int rdma_op(struct ib_qp *qp, enum ib_wr_opcode op, u64 wr_id, u64 laddr, u32 len,
	    u32 lkey, u64 raddr, u32 rkey);
int fast_reg(struct ib_qp *qp, struct ib_cq *cq, struct ib_mr *mr, struct buf *b,
	     int npages, int access);
int local_inv(struct ib_qp *qp, struct ib_cq *cq, u32 rkey, struct ib_wc *wc);
void count_done(struct ib_cq *cq, struct ib_wc *wc);

/* The checks: kverbs_rw.c, kverbs_bad_input.c, kverbs_queues.c, kverbs_poll.c, kverbs_hang.c,
 * kverbs_flight.c */
void check_attrs(struct side *a);
void check_send_inline(struct side *a, struct side *b);
void check_fast_reg(struct side *a, struct side *b);
void check_bad_input(struct side *a, struct side *b);
void check_srq(struct side *a, struct side *b);
void check_zero_depth(struct side *a, struct side *b);
void check_poll_ctx(struct side *a, struct side *b, enum ib_poll_context ctx,
		    const char *name, int vector);
void check_reset_reuse(struct side *a, struct side *b);
void check_hung_device(struct side *a, struct side *b);
void check_full_flight(struct side *a, struct side *b);

#endif
