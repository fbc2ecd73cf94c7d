// SPDX-License-Identifier: GPL-2.0
//! Queue pairs (RC, UC, UD, XRC initiator and target; GSI for ib_mad): rings in user memory pinned here (or, for kernel
//! consumers, coherent DMA memory with the driver posting WQEs), SQ/RQ producer indices in a
//! doorbell slot, state transitions checked against ib_core's table before the device sees them.

use crate::{
    cq::{Cq, CqListing, QpCqs},
    dead::gone_if_dead,
    dev::{RoxDev, RoxVerbs},
    hw::{
        regs,
        uapi::{admin, ids::Qpn, queue, udata as ud, verbs},
    },
    ib::{
        self, AhAttr, AsyncEvent, Created, DeviceId, IbDev, IbQpRef, QpAttr, QpCap, QpInit,
        QpInitAttr, RecvWr, SendFlags, SendWr, Sge, Udata, WrOpcode,
    },
    ids::DbSlot,
    ring::UserRing,
    srq::Srq,
    ucontext::Ucontext,
    wq::{device_sge, kernel_log_depth, rq_wqe, DbWord, KernelWq, Posted},
};
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{prelude::*, sync::Arc, transmute::AsBytes};

pub(crate) struct Qp {
    qpn: Qpn,
    qp_type: u32,
    sq_sig_all: bool,
    /// The state after the last successful modify (`ib_qp_state`).
    state: AtomicU32,
    cap: QpCap,
    queue: QpQueue,
}

impl Qp {
    /// A new QP of `init` on `queue`, with the capacities granted (written back into `init`),
    /// in RESET, where ib_core's state table starts.
    fn new_in_reset(qpn: Qpn, init: &QpInit<'_, RoxVerbs>, queue: QpQueue) -> Self {
        Qp {
            qpn,
            qp_type: init.qp_type,
            sq_sig_all: init.sq_sig_all,
            state: AtomicU32::new(verbs::QPS_RESET.into()),
            cap: *init.cap,
            queue,
        }
    }
}

enum QpQueue {
    User {
        _sq: UserRing,
        _rq: Option<UserRing>,
        _db: DbSlot,
    },
    /// Shared with the lists of the CQs it completes into (`cq.rs`).
    Kernel { qp: Arc<KernelQp>, cqs: QpCqs },
}

/// The queues of a kernel consumer's QP (ib_mad's GSI QP1, ULPs' RC/UC/UD QPs); their
/// producer indices share one doorbell slot (SQ in word A, RQ in word B).
pub(crate) struct KernelQp {
    pub(crate) sq: KernelWq<queue::SqWqe>,
    /// None with an SRQ.
    pub(crate) rq: Option<KernelWq<queue::RqWqe>>,
    db: DbSlot,
    /// Whether the QP counts in its port's flight (`verbs::qp_type_counts_in_flight` of its
    /// type, decided at create): its SQ doorbells of WQEs that all send packets may skip the
    /// wake ([`ring_sq`]).
    sq_counts_in_flight: bool,
    /// The device ids of the CQs its send and receive completions go to.
    pub(crate) send_cq: u32,
    pub(crate) recv_cq: u32,
    /// ib_core's QP, which its work completions name: the CQs listing this QP hand it over
    /// with each completion, so a poll looks nothing up elsewhere.
    pub(crate) ib_qp: IbQpRef,
}

fn log_depth_for(wrs: u32, requested_log: u32) -> Result<u32> {
    let range = u32::from(admin::DEV_MIN_LOG_DEPTH)..=u32::from(admin::DEV_MAX_LOG_WQ_DEPTH);
    if !range.contains(&requested_log) || wrs > 1 << requested_log {
        return Err(EINVAL);
    }
    Ok(requested_log)
}

/// What a WQE holds, within what the device advertises.
struct WqeLimits {
    send_sge: u32,
    recv_sge: u32,
    inline: u32,
}

/// The WQE limits of a QP on `dev`; EINVAL if `cap` asks for more than they allow, or for more
/// work requests than the device queues.
fn wqe_limits(dev: &RoxDev<'_>, cap: &QpCap) -> Result<WqeLimits> {
    let limits = WqeLimits {
        send_sge: queue::SQ_MAX_SGE.min(dev.attr.max_send_sge),
        recv_sge: queue::RQ_MAX_SGE.min(dev.attr.max_recv_sge),
        inline: queue::SQ_MAX_INLINE.min(dev.attr.max_inline_data),
    };
    if cap.max_send_sge > limits.send_sge
        || cap.max_recv_sge > limits.recv_sge
        || cap.max_inline_data > limits.inline
        || cap.max_send_wr > dev.attr.max_qp_wr
        || cap.max_recv_wr > dev.attr.max_qp_wr
    {
        return Err(EINVAL);
    }
    Ok(limits)
}

pub(crate) fn create(
    dev: &RoxDev<'_>,
    ib: IbDev<'_>,
    uctx: Option<&Ucontext>,
    init: QpInit<'_, RoxVerbs>,
    udata: &mut Udata<'_>,
) -> Result<Created<Qp, Qpn>> {
    // ib_core numbers QP types as uapi does (checked in `ib`).
    let qp_type = match u8::try_from(init.qp_type) {
        Ok(t @ (verbs::QPT_RC | verbs::QPT_UC | verbs::QPT_UD)) => t,
        Ok(verbs::QPT_GSI) if uctx.is_none() => verbs::QPT_GSI,
        // XRC is for user processes (ibv_open_xrcd). ib_core creates a target without udata:
        // it belongs to its XRC domain, not to a process (ib_open_qp shares it), so it is
        // made as the kernel's.
        Ok(verbs::QPT_XRC_INI) if uctx.is_some() => verbs::QPT_XRC_INI,
        Ok(verbs::QPT_XRC_TGT) if uctx.is_none() => verbs::QPT_XRC_TGT,
        _ => return Err(EOPNOTSUPP),
    };
    let Some(uctx) = uctx else {
        return create_kernel(dev, qp_type, init);
    };
    // Neither XRC role has a receive queue: an initiator receives nothing, a target takes
    // each request's SRQ.
    let xrc = matches!(qp_type, verbs::QPT_XRC_INI | verbs::QPT_XRC_TGT);
    let req: ud::CreateQpReq = udata.read()?;
    let cap = &mut *init.cap;
    let WqeLimits {
        send_sge: max_send_sge,
        recv_sge: max_recv_sge,
        inline: max_inline,
    } = wqe_limits(dev, cap)?;
    let log_sq = log_depth_for(cap.max_send_wr, req.log_sq_depth)?;
    let sq = UserRing::new(dev, ib, req.sq_buf_addr, queue::SQ_WQE_SIZE << log_sq, 0)?;
    let (rq, log_rq) = match init.srq {
        Some(_) => (None, 0),
        None if xrc => (None, 0),
        None => {
            let log_rq = log_depth_for(cap.max_recv_wr, req.log_rq_depth)?;
            (
                Some(UserRing::new(
                    dev,
                    ib,
                    req.rq_buf_addr,
                    queue::RQ_WQE_SIZE << log_rq,
                    0,
                )?),
                log_rq,
            )
        }
    };
    let db = uctx.alloc_db_slot(dev)?;
    let cmd = admin::CreateQpCmd {
        qp_type,
        sq_sig_all: init.sq_sig_all.into(),
        log_sq_depth: log_sq as u8,
        log_rq_depth: log_rq as u8,
        pd: init.pd.map_or(0, |pd| pd.pdn()),
        send_cq: init.send_cq.map_or(admin::CQ_NONE, Cq::device_id),
        // An initiator's receive CQ is its send CQ: it completes nothing there.
        recv_cq: init
            .recv_cq
            .or(init.send_cq)
            .map_or(admin::CQ_NONE, Cq::device_id),
        srq: init.srq.map_or(admin::SRQ_NONE, Srq::device_id),
        db_page: uctx.db_page(),
        db_slot: db.slot(),
        xrcd: init.xrcd,
        sq: sq.desc(),
        rq: rq.as_ref().map(UserRing::desc).unwrap_or_default(),
    };
    let qpn = dev.run::<admin::CreateQp>(cmd)?;
    cap.max_send_wr = granted_wrs(cap.max_send_wr, log_sq);
    cap.max_recv_wr = if rq.is_some() {
        granted_wrs(cap.max_recv_wr, log_rq)
    } else {
        0
    };
    // libibverbs knows one `max_sge` (ib_core reports the smaller of send and receive): report
    // no more than that unless more was asked for, so the caps can be passed back in again.
    cap.max_send_sge = cap.max_send_sge.max(max_send_sge.min(max_recv_sge));
    cap.max_recv_sge = if rq.is_some() { max_recv_sge } else { 0 };
    cap.max_inline_data = max_inline;
    let resp = ud::CreateQpResp {
        qpn,
        db_slot: db.slot(),
    };
    let queue = QpQueue::User {
        _sq: sq,
        _rq: rq,
        _db: db,
    };
    let qp = Qp::new_in_reset(qpn, &init, queue);
    if let Err(err) = udata.respond(&resp) {
        destroy(dev, &qp);
        return Err(err);
    }
    Ok(Created {
        data: qp,
        id: qpn,
        size: 0,
    })
}

/// The work requests a queue of `1 << log` entries takes when `wanted` were asked for. A queue
/// asked with 0 (a send-only or receive-only QP, as the verbs allow) keeps 0: nothing can be
/// posted to it (ENOMEM), while the device still gets a real ring of the smallest depth, which
/// it never reads (its producer index stays 0).
fn granted_wrs(wanted: u32, log: u32) -> u32 {
    if wanted == 0 {
        0
    } else {
        1 << log
    }
}

/// A kernel consumer's QP: rings in coherent DMA memory, a slot of the driver's doorbell page.
/// With an SRQ it has no receive ring of its own (0 receive WRs). An XRC target has no PD,
/// CQs or receive ring, and a smallest send ring nothing is posted to (0 send WRs).
fn create_kernel(
    dev: &RoxDev<'_>,
    qp_type: u8,
    init: QpInit<'_, RoxVerbs>,
) -> Result<Created<Qp, Qpn>> {
    let target = qp_type == verbs::QPT_XRC_TGT;
    let (pdn, send_cq, recv_cq) = match (init.pd, init.send_cq, init.recv_cq) {
        (Some(pd), Some(s), Some(r)) if !target => (pd.pdn(), s.device_id(), r.device_id()),
        (None, None, None) if target => (0, admin::CQ_NONE, admin::CQ_NONE),
        _ => return Err(EINVAL),
    };
    let cap = &mut *init.cap;
    if target {
        // Capacities a target is asked for mean nothing: it has no queue of its own.
        *cap = QpCap::default();
    }
    let WqeLimits {
        send_sge: max_send_sge,
        recv_sge: max_recv_sge,
        inline: max_inline,
    } = wqe_limits(dev, cap)?;
    let has_srq = init.srq.is_some() || target;
    let log_sq = kernel_log_depth::<queue::SqWqe>(cap.max_send_wr)?;
    let log_rq = if has_srq {
        0
    } else {
        kernel_log_depth::<queue::RqWqe>(cap.max_recv_wr)?
    };
    let sq = KernelWq::<queue::SqWqe>::new(dev.pdev.as_ref(), log_sq)?;
    let rq = if has_srq {
        None
    } else {
        Some(KernelWq::<queue::RqWqe>::new(dev.pdev.as_ref(), log_rq)?)
    };
    let db = DbSlot::alloc(&dev.kernel_slots)?;
    let cmd = admin::CreateQpCmd {
        qp_type,
        sq_sig_all: init.sq_sig_all.into(),
        log_sq_depth: log_sq as u8,
        log_rq_depth: log_rq as u8,
        pd: pdn,
        send_cq,
        recv_cq,
        srq: init.srq.map_or(admin::SRQ_NONE, Srq::device_id),
        db_page: regs::DB_PAGE_KERNEL,
        db_slot: db.slot(),
        xrcd: init.xrcd,
        sq: sq.desc(),
        rq: rq.as_ref().map(KernelWq::desc).unwrap_or_default(),
    };
    // Allocated before the device has the QP: nothing may fail after it.
    let queues = Arc::new(
        KernelQp {
            sq,
            rq,
            db,
            sq_counts_in_flight: verbs::qp_type_counts_in_flight(qp_type),
            send_cq,
            recv_cq,
            ib_qp: init.ib_qp,
        },
        GFP_KERNEL,
    )?;
    let listing = CqListing::new(init.send_cq, init.recv_cq.or(init.send_cq))?;
    let qpn = dev.run::<admin::CreateQp>(cmd)?;
    // Listed before anything can be posted, so every CQE of it finds it.
    let cqs = listing.insert(qpn, &queues);
    cap.max_send_wr = granted_wrs(cap.max_send_wr, log_sq);
    cap.max_recv_wr = if has_srq {
        0
    } else {
        granted_wrs(cap.max_recv_wr, log_rq)
    };
    cap.max_send_sge = max_send_sge;
    cap.max_recv_sge = if has_srq { 0 } else { max_recv_sge };
    cap.max_inline_data = max_inline;
    let qp = Qp::new_in_reset(qpn, &init, QpQueue::Kernel { qp: queues, cqs });
    Ok(Created {
        data: qp,
        id: qpn,
        size: 0,
    })
}

/// The device's scatter/gather list of a work request, into the WQE's data area.
fn write_sges(data: &mut [u8], sges: &[Sge]) -> Result {
    let size = core::mem::size_of::<queue::Sge>();
    for (i, sge) in sges.iter().enumerate() {
        let entry = data.get_mut(i * size..(i + 1) * size).ok_or(EINVAL)?;
        entry.copy_from_slice(device_sge(sge).as_bytes());
    }
    Ok(())
}

/// The device's opcode of a kernel work request; EINVAL for the ones rox lacks (LSO, masked
/// atomics, signature handover, ...) and numbers the kernel has no name for.
fn wr_opcode(opcode: Option<WrOpcode>) -> Result<u8> {
    Ok(match opcode.ok_or(EINVAL)? {
        WrOpcode::Send => verbs::WR_SEND,
        WrOpcode::SendWithImm => verbs::WR_SEND_WITH_IMM,
        WrOpcode::SendWithInv => verbs::WR_SEND_WITH_INV,
        WrOpcode::RdmaWrite => verbs::WR_RDMA_WRITE,
        WrOpcode::RdmaWriteWithImm => verbs::WR_RDMA_WRITE_WITH_IMM,
        WrOpcode::RdmaRead => verbs::WR_RDMA_READ,
        WrOpcode::AtomicCmpAndSwp => verbs::WR_ATOMIC_CMP_AND_SWP,
        WrOpcode::AtomicFetchAndAdd => verbs::WR_ATOMIC_FETCH_AND_ADD,
        WrOpcode::LocalInv => verbs::WR_LOCAL_INV,
        WrOpcode::RegMr => verbs::WR_REG_MR,
        WrOpcode::BindMw
        | WrOpcode::Lso
        | WrOpcode::RdmaReadWithInv
        | WrOpcode::MaskedAtomicCmpAndSwp
        | WrOpcode::MaskedAtomicFetchAndAdd
        | WrOpcode::Flush
        | WrOpcode::AtomicWrite
        | WrOpcode::RegMrIntegrity => return Err(EINVAL),
    })
}

/// Bytes 24..64 of a kernel send WQE.
fn send_seg(qp: &Qp, opcode: u8, wr: &SendWr<'_, RoxVerbs>) -> Result<queue::SqSeg> {
    if let Some(ud) = wr.ud() {
        let av = ud.ah.av();
        return Ok(queue::SqSeg {
            ud: queue::UdSeg {
                dgid: av.dgid,
                dest_qpn: ud.remote_qpn,
                qkey: ud.remote_qkey,
                flow_label: av.flow_label,
                sgid_index: av.sgid_index,
                hop_limit: av.hop_limit,
                traffic_class: av.traffic_class,
                reserved0: 0,
                dmac: av.dmac,
                reserved1: [0; 2],
            },
        });
    }
    if qp.qp_type == verbs::QPT_UD.into() || qp.qp_type == verbs::QPT_GSI.into() {
        // A datagram needs an address handle.
        return Err(EINVAL);
    }
    // The RDMA, atomic and invalidate segments are uapi's (as librox builds them).
    Ok(match opcode {
        verbs::WR_RDMA_WRITE | verbs::WR_RDMA_WRITE_WITH_IMM | verbs::WR_RDMA_READ => {
            let (remote_addr, rkey) = wr.rdma().ok_or(EINVAL)?;
            queue::SqSeg::remote(remote_addr, rkey)
        }
        verbs::WR_ATOMIC_CMP_AND_SWP | verbs::WR_ATOMIC_FETCH_AND_ADD => {
            let a = wr.atomic().ok_or(EINVAL)?;
            queue::SqSeg::atomic(a.remote_addr, a.rkey, a.compare_add, a.swap)
        }
        verbs::WR_SEND_WITH_INV | verbs::WR_LOCAL_INV => {
            queue::SqSeg::invalidate(wr.invalidate_rkey())
        }
        verbs::WR_REG_MR => {
            let reg = wr.reg().ok_or(EINVAL)?;
            // Only fast-registration MRs (alloc_mr) take a REG_MR; the page list is the one
            // ib_map_mr_sg filled, at most the MR's capacity.
            let list = reg.mr.fast_reg_list().ok_or(EINVAL)?;
            if !reg.page_size.is_power_of_two() || list.npages > list.capacity {
                return Err(EINVAL);
            }
            queue::SqSeg {
                fast_reg: queue::FastRegSeg {
                    iova: reg.iova,
                    length: reg.length,
                    page_list: list.dma_address,
                    key: reg.key,
                    access: reg.access,
                    npages: list.npages,
                    page_shift: reg.page_size.trailing_zeros() as u8,
                    reserved: [0; 3],
                },
            }
        }
        _ => queue::SqSeg::default(),
    })
}

/// Kernel QPs: writes one send WQE (the consumer keeps at most `max_send_wr` outstanding, as
/// the verbs require; ib_drain_* post one more, for which ULPs add one to their depth).
pub(crate) fn post_send(_dev: &RoxDev<'_>, qp: &Qp, wr: &SendWr<'_, RoxVerbs>) -> Result {
    let QpQueue::Kernel { qp: k, .. } = &qp.queue else {
        return Err(EOPNOTSUPP);
    };
    if qp.cap.max_send_wr == 0 {
        return Err(ENOMEM);
    }
    let opcode = wr_opcode(wr.opcode())?;
    let send_flags = wr.send_flags();
    let mut flags = 0;
    if send_flags.contains(SendFlags::SIGNALED) {
        flags |= queue::WQE_FLAG_SIGNALED;
    }
    if send_flags.contains(SendFlags::SOLICITED) {
        flags |= queue::WQE_FLAG_SOLICITED;
    }
    if send_flags.contains(SendFlags::FENCE) {
        flags |= queue::WQE_FLAG_FENCE;
    }
    // uapi's zeroed WQE (as librox's), then what this request sets.
    let mut wqe = queue::SqWqe::new(wr.wr_id(), opcode, flags);
    wqe.imm_data = wr.imm_data();
    wqe.seg = send_seg(qp, opcode, wr)?;
    let sges = wr.sges();
    if matches!(opcode, verbs::WR_LOCAL_INV | verbs::WR_REG_MR) {
        // Local operations carry no data.
    } else if send_flags.contains(SendFlags::INLINE) {
        if !matches!(
            opcode,
            verbs::WR_SEND
                | verbs::WR_SEND_WITH_IMM
                | verbs::WR_SEND_WITH_INV
                | verbs::WR_RDMA_WRITE
                | verbs::WR_RDMA_WRITE_WITH_IMM
        ) {
            return Err(EINVAL);
        }
        let max = (qp.cap.max_inline_data as usize).min(wqe.data.len());
        let len = wr.copy_inline(&mut wqe.data[..max])?;
        wqe.flags |= queue::WQE_FLAG_INLINE;
        wqe.inline_len = len as u32;
    } else {
        if sges.len() > qp.cap.max_send_sge as usize {
            return Err(EINVAL);
        }
        write_sges(&mut wqe.data, sges)?;
        wqe.num_sge = sges.len() as u8;
    }
    let posted = Posted {
        wr_id: wr.wr_id(),
        signaled: qp.sq_sig_all || send_flags.contains(SendFlags::SIGNALED),
        wc_opcode: send_wc_opcode(opcode),
        local: verbs::wr_opcode_is_local(opcode),
    };
    k.sq.post(wqe, posted)
}

/// The completion opcode of a send WQE's opcode (`verbs::WR_*` to `verbs::WC_OPC_*`).
fn send_wc_opcode(opcode: u8) -> u8 {
    match opcode {
        verbs::WR_RDMA_WRITE | verbs::WR_RDMA_WRITE_WITH_IMM => verbs::WC_OPC_RDMA_WRITE,
        verbs::WR_RDMA_READ => verbs::WC_OPC_RDMA_READ,
        verbs::WR_ATOMIC_CMP_AND_SWP => verbs::WC_OPC_COMP_SWAP,
        verbs::WR_ATOMIC_FETCH_AND_ADD => verbs::WC_OPC_FETCH_ADD,
        verbs::WR_LOCAL_INV => verbs::WC_OPC_LOCAL_INV,
        verbs::WR_REG_MR => verbs::WC_OPC_REG_MR,
        _ => verbs::WC_OPC_SEND,
    }
}

/// Kernel QPs: tells the device about new send WQEs; an RC QP's that all send packets wake
/// no idle device whose port's flight is full (`KernelWq::ring_sq`). A dead device completes
/// them in software (`dead.rs`): its send CQ's poller is kicked instead.
pub(crate) fn ring_sq(dev: &RoxDev<'_>, qp: &Qp) {
    let QpQueue::Kernel { qp: k, .. } = &qp.queue else {
        return;
    };
    k.sq.ring_sq(dev, k.db.slot(), k.sq_counts_in_flight);
    if dev.is_dead() {
        dev.registry().kick_kernel_cq(k.send_cq);
    }
}

/// Kernel QPs: writes one receive WQE (EINVAL with an SRQ: receives go to the SRQ).
pub(crate) fn post_recv(_dev: &RoxDev<'_>, qp: &Qp, wr: &RecvWr<'_>) -> Result {
    let QpQueue::Kernel { qp: k, .. } = &qp.queue else {
        return Err(EOPNOTSUPP);
    };
    let Some(rq) = &k.rq else {
        return Err(EINVAL);
    };
    if qp.cap.max_recv_wr == 0 {
        return Err(ENOMEM);
    }
    let wqe = rq_wqe(wr, qp.cap.max_recv_sge)?;
    rq.post(wqe, Posted::recv(wr.wr_id()))
}

/// Kernel QPs: tells the device about new receive WQEs.
pub(crate) fn ring_rq(dev: &RoxDev<'_>, qp: &Qp) {
    let QpQueue::Kernel { qp: k, .. } = &qp.queue else {
        return;
    };
    if let Some(rq) = &k.rq {
        rq.ring(dev, k.db.slot(), DbWord::B);
        if dev.is_dead() {
            dev.registry().kick_kernel_cq(k.recv_cq);
        }
    }
}

/// The device's address vector of a RoCE address.
pub(crate) fn addr_vector(ah: &AhAttr) -> admin::AddrVector {
    admin::AddrVector {
        dgid: ah.dgid,
        flow_label: ah.flow_label,
        sgid_index: ah.sgid_index,
        hop_limit: ah.hop_limit,
        traffic_class: ah.traffic_class,
        sl: ah.sl,
        dmac: ah.dmac,
        reserved: [0; 2],
    }
}

/// ib_core's form of a device address vector.
pub(crate) fn ah_attr(av: &admin::AddrVector) -> AhAttr {
    AhAttr {
        roce: true,
        dgid: av.dgid,
        flow_label: av.flow_label,
        sgid_index: av.sgid_index,
        hop_limit: av.hop_limit,
        traffic_class: av.traffic_class,
        sl: av.sl,
        dmac: av.dmac,
        port_num: admin::PORT_NUM.into(),
    }
}

/// Attribute mask bits rox cannot honour (alternate paths, resizing, rate limits).
const UNSUPPORTED_MASK: u32 =
    verbs::QP_ALT_PATH | verbs::QP_PATH_MIG_STATE | verbs::QP_CAP | ib::QP_RATE_LIMIT;

pub(crate) fn modify(
    dev: &RoxDev<'_>,
    qp: &Qp,
    attr: &QpAttr,
    mask: u32,
    udata: &mut Udata<'_>,
) -> Result {
    udata.expect_no_input()?;
    if mask & UNSUPPORTED_MASK != 0 {
        return Err(EOPNOTSUPP);
    }
    let stored = qp.state.load(Ordering::Acquire);
    let cur = if mask & verbs::QP_CUR_STATE != 0 {
        attr.cur_qp_state
    } else {
        stored
    };
    let next = if mask & verbs::QP_STATE != 0 {
        attr.qp_state
    } else {
        cur
    };
    if cur != stored || !ib::modify_qp_is_ok(cur, next, qp.qp_type, mask) {
        return Err(EINVAL);
    }
    if dev.is_dead() {
        return modify_dead(dev, qp, next, mask, udata);
    }
    if mask & verbs::QP_PORT != 0 && attr.port_num != u32::from(admin::PORT_NUM) {
        return Err(EINVAL);
    }
    if mask & verbs::QP_PKEY_INDEX != 0 && attr.pkey_index != 0 {
        return Err(EINVAL);
    }
    if mask & verbs::QP_PATH_MTU != 0 && verbs::mtu_bytes(attr.path_mtu as u8) == 0 {
        return Err(EINVAL);
    }
    if mask & verbs::QP_ACCESS_FLAGS != 0 {
        // ON_DEMAND describes memory regions; applications (pyverbs' ODP tests) pass an MR's
        // flags to the QP too.
        let access = attr.qp_access_flags & !verbs::ACCESS_ON_DEMAND;
        // Flags IB defines but the device lacks (e.g. ZERO_BASED) are "not supported", which
        // applications and pyverbs treat as a missing feature; others are invalid. Both FLUSH
        // types are accepted: they say what a peer may ask for, the MR decides.
        if access & !verbs::ACCESS_IB_DEFINED != 0 {
            return Err(EINVAL);
        }
        if access & !verbs::ACCESS_QP_SUPPORTED != 0 {
            return Err(EOPNOTSUPP);
        }
    }
    let rd_atomic_max = admin::DEV_MAX_RD_ATOMIC;
    if (mask & verbs::QP_MAX_QP_RD_ATOMIC != 0 && attr.max_rd_atomic > rd_atomic_max)
        || (mask & verbs::QP_MAX_DEST_RD_ATOMIC != 0 && attr.max_dest_rd_atomic > rd_atomic_max)
    {
        return Err(EINVAL);
    }
    let av = if mask & verbs::QP_AV != 0 {
        if !attr.ah_attr.roce || u32::from(attr.ah_attr.sgid_index) >= admin::GID_TABLE_LEN {
            return Err(EINVAL);
        }
        addr_vector(&attr.ah_attr)
    } else {
        admin::AddrVector::default()
    };
    let cmd = admin::ModifyQpCmd {
        qpn: qp.qpn,
        attr_mask: mask,
        attr: admin::QpAttr {
            qp_state: next as u8,
            cur_qp_state: cur as u8,
            path_mtu: attr.path_mtu as u8,
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            min_rnr_timer: attr.min_rnr_timer,
            max_rd_atomic: attr.max_rd_atomic,
            max_dest_rd_atomic: attr.max_dest_rd_atomic,
            port_num: attr.port_num as u8,
            en_sqd_async_notify: attr.en_sqd_async_notify,
            pkey_index: attr.pkey_index,
            qp_access_flags: attr.qp_access_flags & !verbs::ACCESS_ON_DEMAND,
            qkey: attr.qkey,
            rq_psn: attr.rq_psn,
            sq_psn: attr.sq_psn,
            dest_qp_num: attr.dest_qp_num,
            ah: av,
            ..Default::default()
        },
    };
    dev.run::<admin::ModifyQp>(cmd)?;
    set_state(dev, qp, next);
    udata.respond_empty()
}

/// Records a modify's new state. A reset QP's queues are empty, without completions, and their
/// indices start again at 0, as the device's do; the CQEs it left in its CQs go too (they name
/// indices its new work requests reuse, `cq_clean.rs`).
fn set_state(dev: &RoxDev<'_>, qp: &Qp, next: u32) {
    qp.state.store(next, Ordering::Release);
    if let (QpQueue::Kernel { qp: k, cqs }, true) = (&qp.queue, next == u32::from(verbs::QPS_RESET))
    {
        cqs.clean(dev, qp.qpn);
        k.sq.reset();
        if let Some(rq) = &k.rq {
            rq.reset();
        }
    }
}

/// Modify on a dead device: to ERR or RESET succeeds locally (ib_drain_qp and rdma_cm's
/// teardown need it; the work requests complete in software, `dead.rs`), anything else fails.
fn modify_dead(dev: &RoxDev<'_>, qp: &Qp, next: u32, mask: u32, udata: &mut Udata<'_>) -> Result {
    let err = u32::from(verbs::QPS_ERR);
    let local = mask & verbs::QP_STATE != 0 && (next == err || next == u32::from(verbs::QPS_RESET));
    if !local {
        return Err(EIO);
    }
    let was = qp.state.load(Ordering::Acquire);
    set_state(dev, qp, next);
    // A QP on an SRQ that enters ERR reports its last WQE (the device does so when alive);
    // ib_drain_qp waits up to 60 s for it on such a QP.
    if next == err && was != err && has_srq(qp) {
        dev.registry()
            .qp_event(qp.qpn, AsyncEvent::QpLastWqeReached);
    }
    udata.respond_empty()
}

/// Whether the QP takes its receives from an SRQ (it then has no receive queue of its own).
fn has_srq(qp: &Qp) -> bool {
    match &qp.queue {
        QpQueue::User { _rq, .. } => _rq.is_none(),
        QpQueue::Kernel { qp: k, .. } => k.rq.is_none(),
    }
}

pub(crate) fn query(dev: &RoxDev<'_>, qp: &Qp) -> Result<(QpAttr, QpInitAttr)> {
    // QUERY_QP names the QP by its number in the generic query index.
    let (hw, _) = dev.query::<admin::QueryQp, _>(qp.qpn.get())?;
    let attr = QpAttr {
        qp_state: hw.qp_state.into(),
        cur_qp_state: hw.qp_state.into(),
        path_mtu: hw.path_mtu.into(),
        qkey: hw.qkey,
        rq_psn: hw.rq_psn,
        sq_psn: hw.sq_psn,
        dest_qp_num: hw.dest_qp_num,
        qp_access_flags: hw.qp_access_flags,
        pkey_index: hw.pkey_index,
        en_sqd_async_notify: hw.en_sqd_async_notify,
        sq_draining: hw.sq_draining,
        max_rd_atomic: hw.max_rd_atomic,
        max_dest_rd_atomic: hw.max_dest_rd_atomic,
        min_rnr_timer: hw.min_rnr_timer,
        port_num: hw.port_num.into(),
        timeout: hw.timeout,
        retry_cnt: hw.retry_cnt,
        rnr_retry: hw.rnr_retry,
        cap: qp.cap,
        ah_attr: ah_attr(&hw.ah),
    };
    let init = QpInitAttr {
        qp_type: qp.qp_type,
        cap: qp.cap,
        sq_sig_all: qp.sq_sig_all,
    };
    qp.state.store(attr.qp_state, Ordering::Release);
    Ok((attr, init))
}

pub(crate) fn destroy(dev: &RoxDev<'_>, qp: &Qp) {
    let cmd = admin::QpnCmd {
        qpn: qp.qpn,
        reserved: 0,
    };
    // The device first: once it destroyed the QP it writes no more CQEs of it, so the removal
    // below leaves none its consumer could poll after freeing their wr_id. A dead device
    // writes nothing either; its poll flushes the QP's work requests until it is removed.
    if let Err(err) = dev
        .run::<admin::DestroyQp>(cmd)
        .or_else(|e| gone_if_dead(dev, e))
    {
        // ib_core's destroy_qp of a kernel QP cannot fail (the binding's destroy returns
        // nothing), so the QP goes anyway; say loudly that the device may still complete
        // work requests of it, whose CQEs would then name a QP no longer there.
        dev_err!(
            dev.pdev.as_ref(),
            "DESTROY_QP {} failed on a live device: {:?}; its later CQEs are stale\n",
            qp.qpn.get(),
            err
        );
    }
    if let QpQueue::Kernel { cqs, .. } = &qp.queue {
        cqs.remove(dev, qp.qpn);
    }
}
