// SPDX-License-Identifier: GPL-2.0
//! Completion queues.
//!
//! User CQs: the ring lives in user memory (allocated by the provider, pinned here), the
//! consumer index and arm word in a slot of the context's doorbell page. Arming makes the device
//! post a completion event on the CQ's event queue, which calls the CQ's comp_handler
//! (`ib::Registry::cq_completion`), so `ibv_get_cq_event` works.
//!
//! Kernel CQs (ib_mad's): the ring is coherent DMA memory, the slot one of the driver's own
//! doorbell page; `poll` and `arm` are the kernel consumer's data path.

use crate::{
    cq_clean::{remove_qp_cqes, CqeSlots},
    dead::{self, gone_if_dead},
    dev::RoxDev,
    hw::{
        regs,
        uapi::{admin, ids::Qpn, queue, udata as ud, verbs},
    },
    ib::{
        CqInit, Created, DeviceId, IbDev, IbQpRef, NetworkHdr, Udata, Wc, WcFlags, WcOpcode, WcOut,
    },
    ids::DbSlot,
    qp::KernelQp,
    ring::{KernelRing, UserRing},
    ucontext::Ucontext,
    wq::Posted,
};
use kernel::{
    new_mutex, new_spinlock_irq,
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::{Arc, Mutex, SpinLockIrq},
};

/// log2 of the largest kernel CQ: the device's largest, as far as one level of ring page
/// list describes it.
const KERNEL_MAX_LOG_CQ_DEPTH: u32 = {
    let ring_bytes = queue::PBL_ENTRIES_PER_PAGE as usize * regs::ROX_PAGE_SIZE;
    let ring_max = (ring_bytes / queue::CQE_SIZE).trailing_zeros();
    let dev_max = admin::DEV_MAX_LOG_CQ_DEPTH as u32;
    if ring_max < dev_max {
        ring_max
    } else {
        dev_max
    }
};

pub(crate) struct Cq {
    id: u32,
    queue: CqQueue,
}

enum CqQueue {
    User {
        /// The ring the device writes; replaced by a resize (its pin goes with it).
        ring: Pin<KBox<Mutex<UserRing>>>,
        _db: DbSlot,
    },
    /// Shared with the kernel QPs completing into it (they list themselves in its state).
    Kernel(Arc<KernelCq>),
}

pub(crate) struct KernelCq {
    ring: KernelRing<queue::Cqe>,
    log_depth: u32,
    db: DbSlot,
    state: Pin<KBox<SpinLockIrq<KernelCqState>>>,
}

/// The kernel QPs of a CQ by number.
pub(crate) type KernelQps = RBTree<Qpn, Arc<KernelQp>>;

struct KernelCqState {
    /// Free-running consumer index.
    consumer: u32,
    /// Sequence number of the last arm request (`regs::cq_arm_word`).
    arm_seq: u32,
    /// The kernel QPs whose send or receive completions go to this CQ: a polled CQE retires its
    /// work request through them and names their `ib_qp` to ib_core, and a dead device's poll
    /// flushes theirs. Under the lock the poll holds anyway, so a CQE takes no other lock.
    qps: KernelQps,
}

impl DeviceId for Cq {
    fn device_id(&self) -> u32 {
        self.id
    }
}

/// The smallest allowed log2 depth holding `entries`.
fn log_depth_for(entries: u32) -> u32 {
    entries
        .max(1)
        .next_power_of_two()
        .trailing_zeros()
        .max(admin::DEV_MIN_LOG_DEPTH.into())
}

/// Pins librox's ring of 2^`log_depth` CQEs at `buf_addr` for a CQ of `cqe` entries; returns
/// it with its depth. EINVAL for a depth out of the device's range, or a `cqe` of 0, over the
/// depth or over the device's maximum.
fn pin_user_ring(
    dev: &RoxDev<'_>,
    ib: IbDev<'_>,
    buf_addr: u64,
    log_depth: u32,
    cqe: u32,
) -> Result<(UserRing, u32)> {
    if !(u32::from(admin::DEV_MIN_LOG_DEPTH)..=u32::from(admin::DEV_MAX_LOG_CQ_DEPTH))
        .contains(&log_depth)
    {
        return Err(EINVAL);
    }
    let depth = 1u32 << log_depth;
    if cqe == 0 || cqe > depth || cqe > dev.attr.max_cqe {
        return Err(EINVAL);
    }
    let ring = UserRing::new(
        dev,
        ib,
        buf_addr,
        queue::CQE_SIZE << log_depth,
        verbs::ACCESS_LOCAL_WRITE,
    )?;
    Ok((ring, depth))
}

pub(crate) fn create(
    dev: &RoxDev<'_>,
    ib: IbDev<'_>,
    uctx: Option<&Ucontext>,
    init: &CqInit,
    udata: &mut Udata<'_>,
) -> Result<Created<Cq>> {
    if init.comp_vector >= dev.num_comp_vectors() {
        return Err(EINVAL);
    }
    let Some(uctx) = uctx else {
        return create_kernel(dev, init);
    };
    let req: ud::CreateCqReq = udata.read()?;
    let log_depth = req.log_depth;
    let (ring, depth) = pin_user_ring(dev, ib, req.buf_addr, log_depth, init.cqe)?;
    let db = uctx.alloc_db_slot(dev)?;
    let desc = ring.desc();
    let ring = KBox::pin_init(new_mutex!(ring), GFP_KERNEL)?;
    let cmd = admin::CreateCqCmd {
        ring: desc,
        log_depth: log_depth as u8,
        eqn: dev.comp_eqn(init.comp_vector),
        db_page: uctx.db_page(),
        db_slot: db.slot(),
        ..Default::default()
    };
    let id = dev.run::<admin::CreateCq>(cmd)?;
    let resp = ud::CreateCqResp {
        cq_id: id,
        db_slot: db.slot(),
    };
    let cq = Cq {
        id,
        queue: CqQueue::User { ring, _db: db },
    };
    if let Err(err) = udata.respond(&resp) {
        destroy(dev, &cq);
        return Err(err);
    }
    Ok(Created {
        data: cq,
        id,
        size: depth,
    })
}

/// Resizes a user CQ: librox's new ring (udata `ResizeCqReq`, zeroed) is pinned, the device
/// moves the unconsumed CQEs into it and writes there from now on (`RESIZE_CQ`); then the old
/// ring's pin is dropped. librox holds its CQ lock (nobody polls) meanwhile. EINVAL for a depth
/// out of range, fewer entries than `cqe`, or more unconsumed CQEs than the new ring holds (the
/// old ring stays); EOPNOTSUPP for kernel CQs.
pub(crate) fn resize(
    dev: &RoxDev<'_>,
    ib: IbDev<'_>,
    cq: &Cq,
    cqe: u32,
    udata: &mut Udata<'_>,
) -> Result<u32> {
    let CqQueue::User { ring, .. } = &cq.queue else {
        return Err(EOPNOTSUPP);
    };
    let req: ud::ResizeCqReq = udata.read()?;
    let log_depth = req.log_depth;
    let (new_ring, depth) = pin_user_ring(dev, ib, req.buf_addr, log_depth, cqe)?;
    let mut current = ring.lock();
    let cmd = admin::ResizeCqCmd {
        cq: cq.id,
        log_depth: log_depth as u8,
        ring: new_ring.desc(),
        ..Default::default()
    };
    dev.run::<admin::ResizeCq>(cmd)?;
    // The device writes to the new ring now; the old one is unpinned with the old value.
    *current = new_ring;
    drop(current);
    udata.respond_empty()?;
    Ok(depth)
}

fn create_kernel(dev: &RoxDev<'_>, init: &CqInit) -> Result<Created<Cq>> {
    let log_depth = log_depth_for(init.cqe);
    if init.cqe == 0 || log_depth > KERNEL_MAX_LOG_CQ_DEPTH {
        return Err(EINVAL);
    }
    let ring = KernelRing::<queue::Cqe>::new(dev.pdev.as_ref(), 1 << log_depth)?;
    let db = DbSlot::alloc(&dev.kernel_slots)?;
    let cmd = admin::CreateCqCmd {
        ring: ring.desc(),
        log_depth: log_depth as u8,
        eqn: dev.comp_eqn(init.comp_vector),
        db_page: regs::DB_PAGE_KERNEL,
        db_slot: db.slot(),
        ..Default::default()
    };
    let state = KBox::pin_init(
        new_spinlock_irq!(KernelCqState {
            consumer: 0,
            arm_seq: 0,
            qps: RBTree::new(),
        }),
        GFP_KERNEL,
    )?;
    let kernel = Arc::new(
        KernelCq {
            ring,
            log_depth,
            db,
            state,
        },
        GFP_KERNEL,
    )?;
    let id = dev.run::<admin::CreateCq>(cmd)?;
    let cq = Cq {
        id,
        queue: CqQueue::Kernel(kernel),
    };
    Ok(Created {
        data: cq,
        id,
        size: 1 << log_depth,
    })
}

/// Room in the lists of a kernel QP's CQs, allocated before the device creates the QP (nothing
/// may fail after that).
pub(crate) struct CqListing {
    cqs: [Option<(Arc<KernelCq>, QpNodeRoom)>; 2],
}

/// Room for one QP in a CQ's [`KernelQps`].
type QpNodeRoom = RBTreeNodeReservation<Qpn, Arc<KernelQp>>;

/// The kernel CQs a kernel QP completes into (its send CQ, its receive CQ if another; none for
/// an XRC target), which list it while it exists.
pub(crate) struct QpCqs {
    cqs: [Option<Arc<KernelCq>>; 2],
}

impl CqListing {
    /// Room in `send`'s list and, if it is another CQ, `recv`'s. EINVAL for a user CQ.
    pub(crate) fn new(send: Option<&Cq>, recv: Option<&Cq>) -> Result<Self> {
        let kernel = |cq: Option<&Cq>| -> Result<Option<Arc<KernelCq>>> {
            match cq.map(|cq| &cq.queue) {
                None => Ok(None),
                Some(CqQueue::Kernel(k)) => Ok(Some(k.clone())),
                Some(CqQueue::User { .. }) => Err(EINVAL),
            }
        };
        let send = kernel(send)?;
        let recv = kernel(recv)?.filter(|r| !send.as_ref().is_some_and(|s| Arc::ptr_eq(s, r)));
        let room = |cq: Option<Arc<KernelCq>>| -> Result<_> {
            cq.map(|cq| Ok((cq, RBTreeNodeReservation::new(GFP_KERNEL)?)))
                .transpose()
        };
        Ok(Self {
            cqs: [room(send)?, room(recv)?],
        })
    }

    /// Lists kernel QP `qpn` in its CQs.
    pub(crate) fn insert(self, qpn: Qpn, qp: &Arc<KernelQp>) -> QpCqs {
        let mut cqs = [None, None];
        for (listed, entry) in cqs.iter_mut().zip(self.cqs) {
            if let Some((cq, room)) = entry {
                cq.state.lock().qps.insert(room.into_node(qpn, qp.clone()));
                *listed = Some(cq);
            }
        }
        QpCqs { cqs }
    }
}

impl QpCqs {
    /// Takes destroyed kernel QP `qpn` out of its CQs: its list node and the CQEs of it not
    /// polled yet go together under each CQ's lock, so a concurrent poll sees the QP either
    /// listed with its CQEs (and retires them) or gone with them, never its CQEs unlisted.
    pub(crate) fn remove(&self, dev: &RoxDev<'_>, qpn: Qpn) {
        for cq in self.cqs.iter().flatten() {
            let node = {
                let mut state = cq.state.lock();
                clean_locked(dev, cq, &mut state.consumer, qpn);
                state.qps.remove_node(&qpn)
            };
            // The QP's own reference outlives this one: its rings are freed with the QP, not
            // here under the spinlock.
            drop(node);
        }
    }

    /// Removes the CQEs of kernel QP `qpn` its CQs hold and have not been polled yet
    /// (`cq_clean.rs`): the QP was reset or destroyed, and the device writes no more of them.
    pub(crate) fn clean(&self, dev: &RoxDev<'_>, qpn: Qpn) {
        for cq in self.cqs.iter().flatten() {
            clean_locked(dev, cq, &mut cq.state.lock().consumer, qpn);
        }
    }
}

/// Removes QP `qpn`'s CQEs from `cq`'s ring from `consumer` (its lock held) on; rings the CQ's
/// doorbell with the new consumer index if any left.
fn clean_locked(dev: &RoxDev<'_>, cq: &KernelCq, consumer: &mut u32, qpn: Qpn) {
    let cleaned = remove_qp_cqes(&mut CleanRing(cq), *consumer, qpn);
    if cleaned != *consumer {
        *consumer = cleaned;
        dev.kernel_consumer_index(cq.db.slot(), cleaned);
    }
}

/// A kernel CQ's ring for [`remove_qp_cqes`] (its lock held).
struct CleanRing<'a>(&'a KernelCq);

impl CqeSlots for CleanRing<'_> {
    fn depth(&self) -> u32 {
        1 << self.0.log_depth
    }
    fn owner(&self, slot: usize) -> Option<u8> {
        self.0.ring.ring.read_owner(slot).ok()
    }
    fn read(&self, slot: usize) -> Option<queue::Cqe> {
        self.0.ring.ring.read(slot).ok()
    }
    fn write(&mut self, slot: usize, cqe: queue::Cqe) {
        // In the ring by construction (slot < depth <= its length).
        let _ = self.0.ring.ring.write(slot, cqe);
    }
}

/// ib_core's opcode of a device completion.
fn wc_opcode(opcode: u8) -> WcOpcode {
    match opcode {
        verbs::WC_OPC_SEND => WcOpcode::Send,
        verbs::WC_OPC_RDMA_WRITE => WcOpcode::RdmaWrite,
        verbs::WC_OPC_RDMA_READ => WcOpcode::RdmaRead,
        verbs::WC_OPC_COMP_SWAP => WcOpcode::CompSwap,
        verbs::WC_OPC_FETCH_ADD => WcOpcode::FetchAdd,
        verbs::WC_OPC_BIND_MW => WcOpcode::BindMw,
        verbs::WC_OPC_LOCAL_INV => WcOpcode::LocalInv,
        verbs::WC_OPC_REG_MR => WcOpcode::RegMr,
        verbs::WC_OPC_FLUSH => WcOpcode::Flush,
        verbs::WC_OPC_ATOMIC_WRITE => WcOpcode::AtomicWrite,
        verbs::WC_OPC_RECV => WcOpcode::Recv,
        verbs::WC_OPC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        // Unknown to this driver: passed on as the device numbers it (the numbering is the
        // kernel's, see uapi/src/verbs.rs).
        other => WcOpcode::Other(other.into()),
    }
}

/// ib_core's form of a completion of QP `qp` (None: a QP the CQ does not list).
fn wc_of(cqe: &queue::Cqe, qp: Option<IbQpRef>) -> Wc {
    let mut flags = WcFlags::empty();
    if cqe.wc_flags & verbs::WC_FLAG_GRH != 0 {
        flags |= WcFlags::GRH;
    }
    if cqe.wc_flags & verbs::WC_FLAG_WITH_IMM != 0 {
        flags |= WcFlags::WITH_IMM;
    }
    if cqe.wc_flags & verbs::WC_FLAG_WITH_INV != 0 {
        // `Cqe::imm_data` holds the invalidated rkey (host order), as `ex.invalidate_rkey`.
        flags |= WcFlags::WITH_INVALIDATE;
    }
    Wc {
        wr_id: cqe.wr_id,
        status: cqe.status.into(),
        opcode: wc_opcode(cqe.opcode),
        vendor_err: cqe.vendor_err.into(),
        byte_len: cqe.byte_len,
        qp,
        imm_data: cqe.imm_data,
        src_qp: cqe.src_qp,
        flags,
        // The device reports no service level (RoCE carries none; UD's is in the GRH).
        sl: 0,
        port_num: admin::PORT_NUM.into(),
        // UD receives say which header the GRH area holds (as mlx5 does): ib_core's
        // ib_init_ah_attr_from_wc reads it to build the reply's address (an IPv4 header sits
        // in the last 20 bytes of the GRH area).
        network_hdr: match cqe.network_hdr {
            queue::CQE_NETWORK_HDR_IPV4 => Some(NetworkHdr::Ipv4),
            queue::CQE_NETWORK_HDR_IPV6 => Some(NetworkHdr::Ipv6),
            _ => None,
        },
    }
}

/// Kernel CQs: moves completions into `wc`: the device's, then, once the device is dead and
/// its ring holds no more, a flush error for every work request it never completed
/// (`dead.rs`).
pub(crate) fn poll(dev: &RoxDev<'_>, cq: &Cq, wc: &mut WcOut<'_>) -> Result<usize> {
    let CqQueue::Kernel(k) = &cq.queue else {
        return Err(EOPNOTSUPP);
    };
    let depth = 1u32 << k.log_depth;
    let mut state = k.state.lock();
    // Read before the ring: once it holds, the ring takes no more CQEs, so those read below
    // are all the device wrote and the rest may complete in software.
    let flush = dev.dead_and_quiesced();
    let mut count = 0;
    while count < wc.len() {
        let slot = (state.consumer & (depth - 1)) as usize;
        if k.ring.ring.read_owner(slot)? != queue::owner_for(state.consumer, depth) {
            break;
        }
        let cqe = k.ring.ring.read(slot)?;
        // The QP's list entry, under the lock held here: the work request to retire and
        // ib_core's `ib_qp` of the completion, with no device-wide lookup.
        let qp = state.qps.get(&cqe.qp_num);
        if let Some(qp) = qp {
            retire(qp, &cqe);
        }
        wc.set(count, &wc_of(&cqe, qp.map(|qp| qp.ib_qp)));
        state.consumer = state.consumer.wrapping_add(1);
        count += 1;
    }
    if count > 0 {
        dev.kernel_consumer_index(k.db.slot(), state.consumer);
    }
    if count < wc.len() && flush {
        dead::flush(&state.qps, cq.id, |qp, posted| {
            wc.set(count, &flushed_wc(qp, &posted));
            count += 1;
            count < wc.len()
        });
    }
    Ok(count)
}

/// A CQE of kernel QP `qp` was polled: the work request it completes, and every one before
/// it in its queue, is no longer outstanding.
fn retire(qp: &KernelQp, cqe: &queue::Cqe) {
    if is_recv(cqe.opcode) {
        // Receives of an SRQ are not the QP's (their index is the SRQ's).
        if let Some(rq) = &qp.rq {
            rq.retire(cqe.wqe_index);
        }
    } else {
        qp.sq.retire(cqe.wqe_index);
    }
}

/// Whether a CQE's opcode is a receive's (`verbs::WC_OPC_RECV*`, bit 7 as in ib_core).
fn is_recv(opcode: u8) -> bool {
    opcode & verbs::WC_OPC_RECV != 0
}

/// The completion of a work request of `qp` a dead device never completed.
fn flushed_wc(qp: &KernelQp, posted: &Posted) -> Wc {
    Wc {
        wr_id: posted.wr_id,
        status: verbs::WC_WR_FLUSH_ERR.into(),
        opcode: wc_opcode(posted.wc_opcode),
        vendor_err: 0,
        byte_len: 0,
        qp: Some(qp.ib_qp),
        imm_data: 0,
        src_qp: Qpn::default(),
        flags: WcFlags::empty(),
        sl: 0,
        port_num: admin::PORT_NUM.into(),
        network_hdr: None,
    }
}

/// Kernel CQs: asks for an event at the next (solicited) completion; returns whether
/// completions are already waiting (so the caller polls again instead of waiting).
pub(crate) fn arm(dev: &RoxDev<'_>, cq: &Cq, solicited_only: bool) -> Result<bool> {
    let CqQueue::Kernel(k) = &cq.queue else {
        return Err(EOPNOTSUPP);
    };
    let depth = 1u32 << k.log_depth;
    let mut state = k.state.lock();
    if dev.is_dead() {
        // No event will come: "missed" while anything is left to complete in software.
        let slot = (state.consumer & (depth - 1)) as usize;
        return Ok(
            k.ring.ring.read_owner(slot)? == queue::owner_for(state.consumer, depth)
                || dead::pending(&state.qps, cq.id),
        );
    }
    state.arm_seq = state.arm_seq.wrapping_add(1);
    let arm_type = if solicited_only {
        regs::CQ_ARM_SOLICITED
    } else {
        regs::CQ_ARM_NEXT
    };
    dev.kernel_doorbell(
        k.db.slot(),
        None,
        Some(regs::cq_arm_word(state.arm_seq, arm_type)),
    );
    let slot = (state.consumer & (depth - 1)) as usize;
    Ok(k.ring.ring.read_owner(slot)? == queue::owner_for(state.consumer, depth))
}

pub(crate) fn destroy(dev: &RoxDev<'_>, cq: &Cq) {
    let cmd = admin::HandleCmd {
        handle: cq.id,
        reserved: 0,
    };
    if let Err(err) = dev
        .run::<admin::DestroyCq>(cmd)
        .or_else(|e| gone_if_dead(dev, e))
    {
        dev_warn!(
            dev.pdev.as_ref(),
            "DESTROY_CQ {} failed: {:?}\n",
            cq.id,
            err
        );
    }
}
