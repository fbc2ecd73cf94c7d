//! Queue pairs (RC, UC, UD).
//!
//! Control: librox allocates the send ring (`queue::SqWqe`s) and, unless the QP uses an SRQ,
//! the receive ring (`queue::RqWqe`s), both power-of-two deep, and passes them in the
//! create_qp udata; rox.ko pins them and returns the QP number and the doorbell slot
//! (`a` = SQ producer index, `b` = RQ producer index). modify/query/destroy are plain uverbs
//! commands (rox.ko checks the state transitions).
//!
//! Data: post_send/post_recv format WQEs straight into the rings and ring the doorbell
//! (crate::sys::doorbell); each WQE's `wr_id` is its slot index (crate::wq), which the CQE echoes.

use crate::ah::RoxAh;
use crate::context::{DeviceLimits, RoxContext};
use crate::sys::doorbell::SlotWord;
use crate::sys::errno::{int_errno, ptr_or_errno, Errno, Result, EINVAL, ENOMEM, EOPNOTSUPP};
use crate::sys::ffi::{self, DrvCmd, DrvResp, Zeroable};
use crate::sys::memory::ring_depth;
use crate::qp_ex::{self, WrBatch, SUPPORTED_SEND_OPS};
use crate::srq::RoxSrq;
use crate::wq::{CompletionOrder, Ring, WorkQueue};
use crate::wqe;
use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::mem::{offset_of, size_of, size_of_val};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering};
use rox_uapi::queue::{
    Cqe, RdmaSeg, RqWqe, Sge, SqSeg, SqWqe, UdSeg, RQ_MAX_SGE, RQ_WQE_SHIFT, SQ_MAX_INLINE,
    SQ_WQE_SHIFT,
};
use rox_uapi::udata::{CreateQpReq, CreateQpResp};
use rox_uapi::verbs;

#[repr(C)]
pub struct RoxQp {
    pub vqp: ffi::verbs_qp,
    /// The send ring (`SqWqe`s).
    pub(crate) sq: Ring,
    /// The receive ring (`RqWqe`s); `None` when the QP receives through an SRQ.
    pub(crate) rq: Option<Ring>,
    pub(crate) srq: Option<NonNull<RoxSrq>>,
    pub(crate) db_slot: u32,
    pub(crate) qp_type: ffi::ibv_qp_type,
    pub(crate) sq_sig_all: bool,
    /// Capacities rox.ko granted (create_qp response).
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) max_inline: u32,
    /// The QP's Q_Key (UD), used when a WR's Q_Key has the high bit set.
    pub(crate) qkey: AtomicU32,
    /// The QP state as of the last successful modify_qp / query_qp (`IBV_QPS_*`): posting
    /// sends before RTS and receives in RESET is refused, as the verbs API requires.
    pub(crate) state: AtomicU32,
    /// The extended post API's batch (`ibv_wr_start` .. `ibv_wr_complete`), only touched with
    /// the SQ lock held.
    pub(crate) batch: UnsafeCell<WrBatch>,
}
const _: () = assert!(offset_of!(RoxQp, vqp) == 0);

/// A WR's Q_Key with this bit set means "use the QP's Q_Key" (IB spec 10.2.5).
const QKEY_USE_QP: u32 = 1 << 31;

impl RoxQp {
    /// # Safety
    /// `qp` must be an `ibv_qp` made by this module and still alive.
    unsafe fn from_ibv<'a>(qp: *mut ffi::ibv_qp) -> &'a RoxQp {
        // SAFETY: the ibv_qp is the first member of the verbs_qp, itself first in RoxQp.
        unsafe { &*qp.cast::<RoxQp>() }
    }

    /// Sends may be posted from RTS on (in SQD, SQE and ERR they wait or are flushed).
    pub(crate) fn can_send(&self) -> bool {
        !matches!(
            self.state.load(Ordering::Acquire),
            ffi::IBV_QPS_RESET | ffi::IBV_QPS_INIT | ffi::IBV_QPS_RTR
        )
    }

    /// Receives may be posted from INIT on.
    fn can_receive(&self) -> bool {
        self.state.load(Ordering::Acquire) != ffi::IBV_QPS_RESET
    }

    /// The caller's wr_id for a completion of this QP (and retire the WQEs it covers), or
    /// `None` if the completion names no outstanding WQE.
    pub fn retire(&self, cqe: &Cqe) -> Option<u64> {
        // The CQE's wr_id is the WQE's slot index (the device echoes what librox wrote).
        let index = cqe.wr_id as u32;
        if cqe.opcode & verbs::WC_OPC_RECV == 0 {
            return self.sq.lock().complete(index);
        }
        match (&self.rq, self.srq) {
            (Some(rq), _) => rq.lock().complete(index),
            // SAFETY: an SRQ outlives the QPs attached to it (rox.ko refuses to destroy it).
            (None, Some(srq)) => unsafe { srq.as_ref() }.retire(index),
            (None, None) => None,
        }
    }
}

/// Init-attribute masks librox accepts; anything else (XRC domain, RSS, send-ops flags of the
/// extended post API, ...) is not supported.
const SUPPORTED_COMP_MASK: u32 = ffi::IBV_QP_INIT_ATTR_PD
    | ffi::IBV_QP_INIT_ATTR_CREATE_FLAGS
    | ffi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;

/// Ring depths of a new QP: (send, receive); receive is 0 with an SRQ.
fn ring_depths(attr: &ffi::ibv_qp_init_attr_ex, limits: &DeviceLimits) -> Result<(u32, u32)> {
    match attr.qp_type {
        ffi::IBV_QPT_RC | ffi::IBV_QPT_UC | ffi::IBV_QPT_UD => {}
        _ => return Err(EOPNOTSUPP),
    }
    if attr.comp_mask & !SUPPORTED_COMP_MASK != 0
        || (attr.comp_mask & ffi::IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && attr.create_flags != 0)
        || (attr.comp_mask & ffi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0
            && attr.send_ops_flags & !SUPPORTED_SEND_OPS != 0)
    {
        return Err(EOPNOTSUPP);
    }
    let cap = &attr.cap;
    if cap.max_send_sge > limits.max_send_sge || cap.max_inline_data > limits.max_inline {
        return Err(EINVAL);
    }
    let sq_depth = ring_depth(cap.max_send_wr, limits.max_qp_wr).ok_or(EINVAL)?;
    let rq_depth = if attr.srq.is_null() {
        if cap.max_recv_sge > limits.max_recv_sge {
            return Err(EINVAL);
        }
        ring_depth(cap.max_recv_wr, limits.max_qp_wr).ok_or(EINVAL)?
    } else {
        0
    };
    Ok((sq_depth, rq_depth))
}

fn create(
    ibctx: *mut ffi::ibv_context,
    attr: &mut ffi::ibv_qp_init_attr_ex,
) -> Result<*mut ffi::ibv_qp> {
    // SAFETY: libibverbs passes a context made by alloc_context.
    let ctx = unsafe { RoxContext::from_ibv(ibctx) };
    let hw = ctx.hw();
    let (sq_depth, rq_depth) = ring_depths(attr, &hw.limits)?;
    let sq = Ring::new(sq_depth, SQ_WQE_SHIFT, CompletionOrder::InOrder)?;
    let rq = match rq_depth {
        0 => None,
        depth => Some(Ring::new(depth, RQ_WQE_SHIFT, CompletionOrder::InOrder)?),
    };
    let qp = Box::into_raw(Box::new(RoxQp {
        vqp: Zeroable::zeroed(),
        sq,
        rq,
        srq: NonNull::new(attr.srq.cast::<RoxSrq>()),
        db_slot: 0,
        qp_type: attr.qp_type,
        sq_sig_all: attr.sq_sig_all != 0,
        max_send_sge: 0,
        max_recv_sge: 0,
        max_inline: 0,
        qkey: AtomicU32::new(0),
        state: AtomicU32::new(ffi::IBV_QPS_RESET),
        batch: UnsafeCell::new(WrBatch::default()),
    }));
    // SAFETY: `qp` is live and exclusively ours until returned.
    let qp_ref = unsafe { &mut *qp };
    let mut cmd = DrvCmd::<ffi::ibv_create_qp, _>::new(CreateQpReq {
        sq_buf_addr: qp_ref.sq.lock().buf_addr(),
        rq_buf_addr: qp_ref.rq.as_ref().map_or(0, |rq| rq.lock().buf_addr()),
        log_sq_depth: sq_depth.trailing_zeros(),
        log_rq_depth: if rq_depth == 0 {
            0
        } else {
            rq_depth.trailing_zeros()
        },
    });
    let mut resp = DrvResp::<ffi::ib_uverbs_create_qp_resp, CreateQpResp>::new();
    // ibv_cmd_create_qp_ex takes no CREATE_FLAGS mask (that is ibv_cmd_create_qp_ex2); the
    // flags are 0 here (ring_depths checked), so the mask bit is dropped for the call.
    let requested_mask = attr.comp_mask;
    attr.comp_mask &= !ffi::IBV_QP_INIT_ATTR_CREATE_FLAGS;
    // SAFETY: our own verbs_qp (stable heap address: the kernel keeps it as user_handle) and
    // command/response buffers of the sizes given; `attr` from the caller.
    let ret = unsafe {
        ffi::ibv_cmd_create_qp_ex(
            ibctx,
            &mut qp_ref.vqp,
            attr,
            &mut cmd.core,
            size_of_val(&cmd),
            &mut resp.core,
            size_of_val(&resp),
        )
    };
    attr.comp_mask = requested_mask;
    if let Err(e) = Errno::check(ret) {
        // SAFETY: the kernel has no QP; reclaim the box (unmapping the rings).
        drop(unsafe { Box::from_raw(qp) });
        return Err(e);
    }
    // ibv_cmd_create_qp_ex copied the granted capacities into attr.cap. A queue granted no
    // work requests (asked with 0: send-only / receive-only QPs) has a minimal ring that
    // nothing may be posted to.
    if attr.cap.max_send_wr == 0 {
        qp_ref.sq.lock().disable();
    }
    if let (Some(rq), 0) = (&qp_ref.rq, attr.cap.max_recv_wr) {
        rq.lock().disable();
    }
    qp_ref.max_send_sge = attr.cap.max_send_sge.min(hw.limits.max_send_sge);
    qp_ref.max_recv_sge = attr.cap.max_recv_sge.min(RQ_MAX_SGE);
    qp_ref.max_inline = attr.cap.max_inline_data.min(SQ_MAX_INLINE);
    if attr.comp_mask & ffi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        qp_ex::install(&mut qp_ref.vqp);
    }
    // SAFETY: the union member every QP has.
    let ibv_qp = unsafe { &raw mut qp_ref.vqp.__bindgen_anon_1.qp };
    match ctx.check_db_slot(resp.drv.db_slot) {
        Ok(slot) => qp_ref.db_slot = slot,
        Err(e) => {
            // SAFETY: the QP was just created; undo it.
            unsafe { destroy(ibv_qp) };
            return Err(e);
        }
    }
    // libibverbs set qp_num (the core response struct is only filled on the write path, not
    // on the ioctl path).
    // SAFETY: `ibv_qp` points into the live QP.
    hw.qps
        .insert(unsafe { (*ibv_qp).qp_num }, NonNull::from(&*qp_ref));
    Ok(ibv_qp)
}

pub unsafe extern "C" fn create_qp_ex(
    ibctx: *mut ffi::ibv_context,
    attr: *mut ffi::ibv_qp_init_attr_ex,
) -> *mut ffi::ibv_qp {
    // SAFETY: libibverbs passes a valid attribute struct.
    ptr_or_errno(create(ibctx, unsafe { &mut *attr }))
}

pub unsafe extern "C" fn create_qp(
    pd: *mut ffi::ibv_pd,
    attr: *mut ffi::ibv_qp_init_attr,
) -> *mut ffi::ibv_qp {
    // SAFETY: libibverbs passes a live PD and a valid attribute struct.
    let (ibctx, attr) = unsafe { ((*pd).context, &mut *attr) };
    let mut attr_ex = ffi::ibv_qp_init_attr_ex {
        qp_context: attr.qp_context,
        send_cq: attr.send_cq,
        recv_cq: attr.recv_cq,
        srq: attr.srq,
        cap: attr.cap,
        qp_type: attr.qp_type,
        sq_sig_all: attr.sq_sig_all,
        comp_mask: ffi::IBV_QP_INIT_ATTR_PD,
        pd,
        ..Zeroable::zeroed()
    };
    let qp = ptr_or_errno(create(ibctx, &mut attr_ex));
    if !qp.is_null() {
        // The kernel's actual capacities, as ibv_create_qp reports them.
        attr.cap = attr_ex.cap;
    }
    qp
}

pub unsafe extern "C" fn modify_qp(
    ibqp: *mut ffi::ibv_qp,
    attr: *mut ffi::ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    let mut cmd = ffi::ibv_modify_qp::zeroed();
    // SAFETY: arguments from libibverbs; command buffer of the size given.
    let ret = unsafe { ffi::ibv_cmd_modify_qp(ibqp, attr, attr_mask, &mut cmd, size_of_val(&cmd)) };
    if ret != 0 {
        return int_errno(Errno::check(ret));
    }
    // SAFETY: a QP made by this module; `attr` valid for the bits of `attr_mask`.
    let (qp, attr) = unsafe { (RoxQp::from_ibv(ibqp), &*attr) };
    let mask = attr_mask as u32;
    if mask & ffi::IBV_QP_QKEY != 0 {
        qp.qkey.store(attr.qkey, Ordering::Relaxed);
    }
    if mask & ffi::IBV_QP_STATE != 0 {
        qp.state.store(attr.qp_state, Ordering::Release);
    }
    if mask & ffi::IBV_QP_STATE != 0 && attr.qp_state == ffi::IBV_QPS_RESET {
        // The device restarted the QP's doorbell slot and indices at 0; so does librox.
        qp.sq.lock().reset();
        if let Some(rq) = &qp.rq {
            rq.lock().reset();
        }
    }
    0
}

pub unsafe extern "C" fn query_qp(
    ibqp: *mut ffi::ibv_qp,
    attr: *mut ffi::ibv_qp_attr,
    attr_mask: c_int,
    init_attr: *mut ffi::ibv_qp_init_attr,
) -> c_int {
    let mut cmd = ffi::ibv_query_qp::zeroed();
    // SAFETY: arguments from libibverbs; command buffer of the size given.
    let ret = unsafe {
        ffi::ibv_cmd_query_qp(
            ibqp,
            attr,
            attr_mask,
            init_attr,
            &mut cmd,
            size_of_val(&cmd),
        )
    };
    if ret == 0 {
        // The kernel reports the current state (the device may have moved the QP to SQE/ERR).
        // SAFETY: a QP made by this module; `attr` was filled by the command.
        unsafe {
            RoxQp::from_ibv(ibqp)
                .state
                .store((*attr).qp_state, Ordering::Release)
        };
    }
    int_errno(Errno::check(ret))
}

/// # Safety
/// `ibqp` must be an `ibv_qp` made by this module; on success it is freed.
unsafe fn destroy(ibqp: *mut ffi::ibv_qp) -> c_int {
    // SAFETY: per the contract.
    let (ret, qpn, ibctx) = unsafe {
        (
            ffi::ibv_cmd_destroy_qp(ibqp),
            (*ibqp).qp_num,
            (*ibqp).context,
        )
    };
    if ret == 0 {
        // SAFETY: the QP's context is live; after removal no poller can reach the QP.
        unsafe { RoxContext::from_ibv(ibctx) }.hw().qps.remove(qpn);
        // SAFETY: the kernel released the rings; free the QP and its rings.
        drop(unsafe { Box::from_raw(ibqp.cast::<RoxQp>()) });
    }
    int_errno(Errno::check(ret))
}

pub unsafe extern "C" fn destroy_qp(qp: *mut ffi::ibv_qp) -> c_int {
    // SAFETY: libibverbs passes a QP made by this module.
    unsafe { destroy(qp) }
}

// ---------------------------------------------------------------------------------------------
// Data path
// ---------------------------------------------------------------------------------------------

/// The WR's scatter/gather list.
///
/// # Safety
/// `wr.sg_list` holds `wr.num_sge` entries (libibverbs' contract with the application).
unsafe fn sg_list(
    sg_list: *const ffi::ibv_sge,
    num_sge: c_int,
    max: u32,
) -> Result<&'static [ffi::ibv_sge]> {
    let n = u32::try_from(num_sge).map_err(|_| EINVAL)?;
    if n > max {
        return Err(EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    if sg_list.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: per the contract.
    Ok(unsafe { core::slice::from_raw_parts(sg_list, n as usize) })
}

/// Format the send WQE of `wr` (to be written at slot `index`).
///
/// # Safety
/// `wr` is an application's work request: its SGE list and (inline) buffers are readable, and a
/// UD WR's AH was made by [`crate::ah`].
unsafe fn send_wqe(qp: &RoxQp, wr: &ffi::ibv_send_wr, index: u32) -> Result<SqWqe> {
    let opcode = wqe::wr_opcode(wr.opcode).ok_or(EINVAL)?;
    // `ibv_send_wr` has no fields for FLUSH / ATOMIC WRITE: only the extended post API
    // (ibv_wr_flush / ibv_wr_atomic_write) can express them.
    if matches!(opcode, verbs::WR_FLUSH | verbs::WR_ATOMIC_WRITE) {
        return Err(EINVAL);
    }
    let mut wqe = wqe::new_wqe(qp, opcode, wr.send_flags, index)?;
    if matches!(
        opcode,
        verbs::WR_SEND_WITH_IMM | verbs::WR_RDMA_WRITE_WITH_IMM
    ) {
        // SAFETY: both union members are plain u32s; the value is in network order already.
        wqe.imm_data = unsafe { wr.__bindgen_anon_1.imm_data };
    }
    // SAFETY: `wr.wr` is the union member matching the opcode / QP type.
    wqe.seg = unsafe {
        match opcode {
            _ if qp.qp_type == ffi::IBV_QPT_UD => SqSeg {
                ud: ud_seg(qp, wr.wr.ud.ah, wr.wr.ud.remote_qpn, wr.wr.ud.remote_qkey)?,
            },
            verbs::WR_ATOMIC_CMP_AND_SWP | verbs::WR_ATOMIC_FETCH_AND_ADD => wqe::atomic_seg(
                wr.wr.atomic.remote_addr,
                wr.wr.atomic.rkey,
                wr.wr.atomic.compare_add,
                wr.wr.atomic.swap,
            ),
            verbs::WR_SEND | verbs::WR_SEND_WITH_IMM => SqSeg {
                rdma: RdmaSeg::default(),
            },
            verbs::WR_SEND_WITH_INV | verbs::WR_LOCAL_INV => {
                wqe::invalidate_seg(wr.__bindgen_anon_1.invalidate_rkey)
            }
            verbs::WR_BIND_MW => {
                // Type 1 windows are bound with ibv_bind_mw only (crate::mw).
                let b = &wr.__bindgen_anon_2.bind_mw;
                if b.mw.is_null() || (*b.mw).type_ != ffi::IBV_MW_TYPE_2 {
                    return Err(EINVAL);
                }
                wqe::bind_seg(b.mw, b.rkey, &b.bind_info)?
            }
            _ => wqe::rdma_seg(wr.wr.rdma.remote_addr, wr.wr.rdma.rkey),
        }
    };
    if matches!(opcode, verbs::WR_BIND_MW | verbs::WR_LOCAL_INV) {
        // No data: the SGE list is ignored.
        return Ok(wqe);
    }
    if wr.send_flags & ffi::IBV_SEND_INLINE != 0 {
        // SAFETY: per the contract.
        let sges = unsafe { sg_list(wr.sg_list, wr.num_sge, u32::MAX)? };
        let bufs = sges
            .iter()
            .map(|s| (s.addr as usize as *const c_void, s.length as usize));
        // SAFETY: the application's buffers (the inline contract: read at post time).
        unsafe { wqe::set_inline(qp, &mut wqe, bufs)? };
    } else {
        // SAFETY: per the contract.
        let sges = unsafe { sg_list(wr.sg_list, wr.num_sge, qp.max_send_sge)? };
        wqe::set_sges(qp, &mut wqe, sges)?;
    }
    Ok(wqe)
}

/// The UD address segment for a destination.
///
/// # Safety
/// `ah` is null or an AH made by [`crate::ah`].
pub(crate) unsafe fn ud_seg(
    qp: &RoxQp,
    ah: *mut ffi::ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) -> Result<UdSeg> {
    if ah.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: per the contract.
    let ah = unsafe { RoxAh::from_ibv(ah) };
    let grh = &ah.attr.grh;
    let qkey = if remote_qkey & QKEY_USE_QP != 0 {
        qp.qkey.load(Ordering::Relaxed)
    } else {
        remote_qkey
    };
    Ok(UdSeg {
        // SAFETY: the raw bytes of the GID union.
        dgid: unsafe { grh.dgid.raw },
        dest_qpn: remote_qpn,
        qkey,
        flow_label: grh.flow_label,
        sgid_index: grh.sgid_index,
        hop_limit: grh.hop_limit,
        traffic_class: grh.traffic_class,
        dmac: ah.dmac,
        ..Default::default()
    })
}

/// Post a list of WRs to one ring: `write` formats and stores one WR at a slot index; the
/// doorbell announces every WR stored before the first failure. Returns the failing WR.
fn post_list<W>(
    ring: &Ring,
    ring_doorbell: impl FnOnce(u32),
    first: *mut W,
    next: impl Fn(&W) -> *mut W,
    mut write: impl FnMut(&W, u32, &WorkQueue) -> Result<u64>,
) -> core::result::Result<(), (*mut W, Errno)> {
    let mut wq = ring.lock();
    let start = wq.pi();
    let mut cur = first;
    let mut failure = None;
    while !cur.is_null() {
        // SAFETY: a WR of the application's list (libibverbs' contract).
        let wr = unsafe { &*cur };
        let Some(index) = wq.next_index() else {
            failure = Some((cur, ENOMEM));
            break;
        };
        match write(wr, index, &wq) {
            Ok(wr_id) => wq.commit(wr_id),
            Err(e) => {
                failure = Some((cur, e));
                break;
            }
        }
        cur = next(wr);
    }
    if wq.pi() != start {
        ring_doorbell(wq.pi());
    }
    failure.map_or(Ok(()), Err)
}

/// Post one WQE that `make` formats for a slot index, and ring the doorbell: for work
/// requests that do not come as an `ibv_send_wr` list (ibv_bind_mw).
pub(crate) fn post_one(
    ibqp: *mut ffi::ibv_qp,
    wr_id: u64,
    make: impl FnOnce(&RoxQp, u32) -> Result<SqWqe>,
) -> Result<()> {
    // SAFETY: libibverbs passes a QP made by this module, of a live context.
    let (qp, hw) = unsafe {
        (
            RoxQp::from_ibv(ibqp),
            RoxContext::from_ibv((*ibqp).context).hw(),
        )
    };
    if !qp.can_send() {
        return Err(EINVAL);
    }
    let mut wq = qp.sq.lock();
    let index = wq.next_index().ok_or(ENOMEM)?;
    let wqe = make(qp, index)?;
    // SAFETY: the slot is free (next_index) and inside the ring.
    unsafe { wq.entry::<SqWqe>(index).write(wqe) };
    wq.commit(wr_id);
    hw.ring(qp.db_slot, SlotWord::A, wq.pi());
    Ok(())
}

pub unsafe extern "C" fn post_send(
    ibqp: *mut ffi::ibv_qp,
    wr: *mut ffi::ibv_send_wr,
    bad_wr: *mut *mut ffi::ibv_send_wr,
) -> c_int {
    // SAFETY: libibverbs passes a QP made by this module, of a live context.
    let (qp, hw) = unsafe {
        (
            RoxQp::from_ibv(ibqp),
            RoxContext::from_ibv((*ibqp).context).hw(),
        )
    };
    if !qp.can_send() {
        return report::<ffi::ibv_send_wr>(Err((wr, EINVAL)), bad_wr);
    }
    let result = post_list(
        &qp.sq,
        |pi| hw.ring(qp.db_slot, SlotWord::A, pi),
        wr,
        |w| w.next,
        |w, index, wq| {
            // SAFETY: an application WR (see send_wqe).
            let wqe = unsafe { send_wqe(qp, w, index)? };
            // SAFETY: the slot is free (next_index) and inside the ring.
            unsafe { wq.entry::<SqWqe>(index).write(wqe) };
            Ok(w.wr_id)
        },
    );
    report(result, bad_wr)
}

/// Format a receive WQE (RQ or SRQ) for slot `index`.
///
/// # Safety
/// `wr.sg_list` holds `wr.num_sge` entries.
pub unsafe fn recv_wqe(wr: &ffi::ibv_recv_wr, index: u32, max_sge: u32) -> Result<RqWqe> {
    // SAFETY: per the contract.
    let sges = unsafe { sg_list(wr.sg_list, wr.num_sge, max_sge.min(RQ_MAX_SGE))? };
    let mut wqe = RqWqe {
        wr_id: u64::from(index),
        num_sge: sges.len() as u8,
        ..Default::default()
    };
    for (dst, s) in wqe.sge.iter_mut().zip(sges) {
        *dst = Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
    }
    Ok(wqe)
}

/// Post receive WRs to a ring whose doorbell word is given.
pub fn post_recv_list(
    ring: &Ring,
    ring_doorbell: impl FnOnce(u32),
    wr: *mut ffi::ibv_recv_wr,
    bad_wr: *mut *mut ffi::ibv_recv_wr,
    max_sge: u32,
) -> c_int {
    let result = post_list(
        ring,
        ring_doorbell,
        wr,
        |w| w.next,
        |w, index, wq| {
            // SAFETY: an application WR.
            let wqe = unsafe { recv_wqe(w, index, max_sge)? };
            // SAFETY: the slot is free (next_index) and inside the ring.
            unsafe { wq.entry::<RqWqe>(index).write(wqe) };
            Ok(w.wr_id)
        },
    );
    report(result, bad_wr)
}

pub unsafe extern "C" fn post_recv(
    ibqp: *mut ffi::ibv_qp,
    wr: *mut ffi::ibv_recv_wr,
    bad_wr: *mut *mut ffi::ibv_recv_wr,
) -> c_int {
    // SAFETY: libibverbs passes a QP made by this module, of a live context.
    let (qp, hw) = unsafe {
        (
            RoxQp::from_ibv(ibqp),
            RoxContext::from_ibv((*ibqp).context).hw(),
        )
    };
    // Receives of an SRQ QP go to the SRQ; none are accepted in RESET.
    let Some(rq) = qp.rq.as_ref().filter(|_| qp.can_receive()) else {
        return report::<ffi::ibv_recv_wr>(Err((wr, EINVAL)), bad_wr);
    };
    post_recv_list(
        rq,
        |pi| hw.ring(qp.db_slot, SlotWord::B, pi),
        wr,
        bad_wr,
        qp.max_recv_sge,
    )
}

/// 0, or the errno with `*bad_wr` set to the WR that failed.
fn report<W>(result: core::result::Result<(), (*mut W, Errno)>, bad_wr: *mut *mut W) -> c_int {
    match result {
        Ok(()) => 0,
        Err((wr, e)) => {
            if !bad_wr.is_null() {
                // SAFETY: libibverbs passes a writable bad_wr pointer.
                unsafe { *bad_wr = wr };
            }
            e.0
        }
    }
}

const _: () =
    assert!(size_of::<SqWqe>() == 1 << SQ_WQE_SHIFT && size_of::<RqWqe>() == 1 << RQ_WQE_SHIFT);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rox_uapi::queue::{WQE_FLAG_FENCE, WQE_FLAG_INLINE, WQE_FLAG_SIGNALED};

    const LIMITS: DeviceLimits = DeviceLimits {
        max_qp_wr: 1024,
        max_send_sge: 12,
        max_recv_sge: 7,
        max_cqe: 4096,
        max_srq_wr: 1024,
        max_srq_sge: 7,
        max_inline: 192,
    };

    fn rc(max_send_wr: u32, max_recv_wr: u32) -> ffi::ibv_qp_init_attr_ex {
        ffi::ibv_qp_init_attr_ex {
            qp_type: ffi::IBV_QPT_RC,
            comp_mask: ffi::IBV_QP_INIT_ATTR_PD,
            cap: ffi::ibv_qp_cap {
                max_send_wr,
                max_recv_wr,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            ..Zeroable::zeroed()
        }
    }

    #[test]
    fn depths_round_up_and_respect_limits() {
        assert_eq!(ring_depths(&rc(10, 3), &LIMITS), Ok((16, 4)));
        assert_eq!(
            ring_depths(&rc(0, 1), &LIMITS),
            Ok((2, 2)),
            "the device's smallest ring"
        );
        assert_eq!(ring_depths(&rc(1025, 1), &LIMITS), Err(EINVAL));
        let mut too_many_sge = rc(1, 1);
        too_many_sge.cap.max_recv_sge = 8;
        assert_eq!(ring_depths(&too_many_sge, &LIMITS), Err(EINVAL));
        let mut inline = rc(1, 1);
        inline.cap.max_inline_data = 193;
        assert_eq!(ring_depths(&inline, &LIMITS), Err(EINVAL));
    }

    #[test]
    fn srq_qps_have_no_receive_ring() {
        let mut attr = rc(4, 4096);
        attr.srq = NonNull::dangling().as_ptr();
        assert_eq!(ring_depths(&attr, &LIMITS), Ok((4, 0)));
    }

    #[test]
    fn unsupported_types_and_masks() {
        let mut xrc = rc(1, 1);
        xrc.qp_type = ffi::IBV_QPT_XRC_SEND;
        assert_eq!(ring_depths(&xrc, &LIMITS), Err(EOPNOTSUPP));
        let mut send_ops = rc(1, 1);
        send_ops.comp_mask |= ffi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        send_ops.send_ops_flags =
            u64::from(ffi::IBV_QP_EX_WITH_SEND | ffi::IBV_QP_EX_WITH_RDMA_WRITE);
        assert_eq!(ring_depths(&send_ops, &LIMITS), Ok((2, 2)));
        send_ops.send_ops_flags |= u64::from(ffi::IBV_QP_EX_WITH_TSO);
        assert_eq!(ring_depths(&send_ops, &LIMITS), Err(EOPNOTSUPP));
        let mut flags = rc(1, 1);
        flags.comp_mask |= ffi::IBV_QP_INIT_ATTR_CREATE_FLAGS;
        flags.create_flags = 1;
        assert_eq!(ring_depths(&flags, &LIMITS), Err(EOPNOTSUPP));
    }

    /// A QP for formatting tests: rings of 4 entries, no context behind it.
    pub(crate) fn test_qp(qp_type: ffi::ibv_qp_type) -> RoxQp {
        RoxQp {
            vqp: Zeroable::zeroed(),
            sq: Ring::new(4, SQ_WQE_SHIFT, CompletionOrder::InOrder).expect("ring"),
            rq: Some(Ring::new(4, RQ_WQE_SHIFT, CompletionOrder::InOrder).expect("ring")),
            srq: None,
            db_slot: 0,
            qp_type,
            sq_sig_all: false,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline: 64,
            qkey: AtomicU32::new(0x1111_1111),
            state: AtomicU32::new(ffi::IBV_QPS_RTS),
            batch: UnsafeCell::new(WrBatch::default()),
        }
    }

    fn send_wr(
        opcode: ffi::ibv_wr_opcode,
        sges: &mut [ffi::ibv_sge],
        flags: u32,
    ) -> ffi::ibv_send_wr {
        let mut wr = ffi::ibv_send_wr::zeroed();
        wr.wr_id = 0xabcd;
        wr.opcode = opcode;
        wr.send_flags = flags;
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = sges.len() as c_int;
        wr
    }

    #[test]
    fn rdma_write_wqe() {
        let qp = test_qp(ffi::IBV_QPT_RC);
        let mut sges = [ffi::ibv_sge {
            addr: 0x1000,
            length: 64,
            lkey: 7,
        }];
        let mut wr = send_wr(
            ffi::IBV_WR_RDMA_WRITE_WITH_IMM,
            &mut sges,
            ffi::IBV_SEND_SIGNALED | ffi::IBV_SEND_FENCE,
        );
        wr.__bindgen_anon_1.imm_data = 0x0102_0304;
        wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: 0xdead_0000,
            rkey: 9,
        };
        let wqe = unsafe { send_wqe(&qp, &wr, 5) }.expect("valid WR");
        assert_eq!(
            wqe.wr_id, 5,
            "the WQE carries its slot index, not the caller's wr_id"
        );
        assert_eq!(wqe.opcode, verbs::WR_RDMA_WRITE_WITH_IMM);
        assert_eq!(wqe.flags, WQE_FLAG_SIGNALED | WQE_FLAG_FENCE);
        assert_eq!(wqe.imm_data, 0x0102_0304);
        assert_eq!(wqe.num_sge, 1);
        let rdma = unsafe { wqe.seg.rdma };
        assert_eq!((rdma.remote_addr, rdma.rkey), (0xdead_0000, 9));
        let sge = unsafe { wqe.data.as_ptr().cast::<Sge>().read_unaligned() };
        assert_eq!(
            sge,
            Sge {
                addr: 0x1000,
                length: 64,
                lkey: 7
            }
        );
    }

    #[test]
    fn inline_send_copies_the_payload() {
        let qp = test_qp(ffi::IBV_QPT_RC);
        let a = *b"hello ";
        let b = *b"rox";
        let mut sges = [
            ffi::ibv_sge {
                addr: a.as_ptr() as u64,
                length: a.len() as u32,
                lkey: 0,
            },
            ffi::ibv_sge {
                addr: b.as_ptr() as u64,
                length: b.len() as u32,
                lkey: 0,
            },
        ];
        let wr = send_wr(ffi::IBV_WR_SEND, &mut sges, ffi::IBV_SEND_INLINE);
        let wqe = unsafe { send_wqe(&qp, &wr, 0) }.expect("valid WR");
        assert_eq!(wqe.flags, WQE_FLAG_INLINE);
        assert_eq!(&wqe.data[..wqe.inline_len as usize], b"hello rox");
    }

    #[test]
    fn invalid_send_wrs() {
        let qp = test_qp(ffi::IBV_QPT_RC);
        let mut three = [ffi::ibv_sge {
            addr: 0,
            length: 1,
            lkey: 0,
        }; 3];
        assert_eq!(
            unsafe { send_wqe(&qp, &send_wr(ffi::IBV_WR_SEND, &mut three, 0), 0) }.err(),
            Some(EINVAL)
        );
        let big = [0u8; 65];
        let mut one = [ffi::ibv_sge {
            addr: big.as_ptr() as u64,
            length: 65,
            lkey: 0,
        }];
        let inline_too_big = send_wr(ffi::IBV_WR_SEND, &mut one, ffi::IBV_SEND_INLINE);
        assert_eq!(
            unsafe { send_wqe(&qp, &inline_too_big, 0) }.err(),
            Some(EINVAL)
        );
        assert_eq!(
            unsafe { send_wqe(&qp, &send_wr(ffi::IBV_WR_TSO, &mut [], 0), 0) }.err(),
            Some(EINVAL)
        );
        // FLUSH / ATOMIC WRITE only through ibv_wr_*; BIND_MW needs a type 2 window.
        for op in [
            ffi::IBV_WR_FLUSH,
            ffi::IBV_WR_ATOMIC_WRITE,
            ffi::IBV_WR_BIND_MW,
        ] {
            assert_eq!(
                unsafe { send_wqe(&qp, &send_wr(op, &mut [], 0), 0) }.err(),
                Some(EINVAL)
            );
        }
        // LOCAL_INV and SEND_WITH_INV carry the rkey to invalidate.
        let mut inv = send_wr(ffi::IBV_WR_LOCAL_INV, &mut [], 0);
        inv.__bindgen_anon_1.invalidate_rkey = 0x8000_0123;
        let wqe = unsafe { send_wqe(&qp, &inv, 0) }.expect("valid");
        assert_eq!(
            (wqe.opcode, unsafe { wqe.seg.rdma }.rkey),
            (verbs::WR_LOCAL_INV, 0x8000_0123)
        );
        let uc = test_qp(ffi::IBV_QPT_UC);
        assert_eq!(
            unsafe { send_wqe(&uc, &send_wr(ffi::IBV_WR_RDMA_READ, &mut [], 0), 0) }.err(),
            Some(EINVAL)
        );
        let ud = test_qp(ffi::IBV_QPT_UD);
        assert_eq!(
            unsafe { send_wqe(&ud, &send_wr(ffi::IBV_WR_SEND, &mut [], 0), 0) }.err(),
            Some(EINVAL),
            "no AH"
        );
    }

    #[test]
    fn post_list_stops_at_the_first_bad_wr_and_rings_for_the_good_ones() {
        let qp = test_qp(ffi::IBV_QPT_RC);
        let mut sges = [ffi::ibv_sge {
            addr: 0x1000,
            length: 8,
            lkey: 1,
        }];
        let mut wrs: Vec<ffi::ibv_send_wr> = (0..6)
            .map(|_| send_wr(ffi::IBV_WR_SEND, &mut sges, 0))
            .collect();
        wrs[2].opcode = ffi::IBV_WR_BIND_MW;
        for i in 0..5 {
            let next: *mut ffi::ibv_send_wr = &mut wrs[i + 1];
            wrs[i].wr_id = 100 + i as u64;
            wrs[i].next = next;
        }
        let mut rung = None;
        let r = post_list(
            &qp.sq,
            |pi| rung = Some(pi),
            wrs.as_mut_ptr(),
            |w| w.next,
            |w, index, wq| {
                let wqe = unsafe { send_wqe(&qp, w, index)? };
                unsafe { wq.entry::<SqWqe>(index).write(wqe) };
                Ok(w.wr_id)
            },
        );
        assert_eq!(
            r.map_err(|(wr, e)| (wr as *const _, e)),
            Err((&wrs[2] as *const _, EINVAL))
        );
        assert_eq!(rung, Some(2));
        // Ring full after 4 posts: ENOMEM on the fifth.
        wrs[2].opcode = ffi::IBV_WR_SEND;
        let mut rung = None;
        let r = post_list(
            &qp.sq,
            |pi| rung = Some(pi),
            &mut wrs[2],
            |w| w.next,
            |w, index, wq| {
                let wqe = unsafe { send_wqe(&qp, w, index)? };
                unsafe { wq.entry::<SqWqe>(index).write(wqe) };
                Ok(w.wr_id)
            },
        );
        assert_eq!(
            r.map_err(|(wr, e)| (wr as *const _, e)),
            Err((&wrs[4] as *const _, ENOMEM))
        );
        assert_eq!(rung, Some(4));
        let written = unsafe { qp.sq.lock().entry::<SqWqe>(3).read() };
        assert_eq!(written.wr_id, 3);
        // A completion of slot 1 (signaled) frees slots 0 and 1 and names wr 101.
        let cqe = Cqe {
            wr_id: 1,
            opcode: verbs::WC_OPC_SEND,
            ..Default::default()
        };
        assert_eq!(qp.retire(&cqe), Some(101));
    }

    /// An AH as create_ah leaves it: the caller's attributes and the kernel's resolved MAC.
    pub(crate) fn test_ah() -> RoxAh {
        let mut attr = ffi::ibv_ah_attr::zeroed();
        attr.is_global = 1;
        attr.grh.dgid.raw = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];
        attr.grh.sgid_index = 1;
        attr.grh.hop_limit = 64;
        attr.grh.traffic_class = 0x20;
        attr.grh.flow_label = 0x12345;
        RoxAh {
            ibv_ah: Zeroable::zeroed(),
            attr,
            dmac: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
        }
    }

    #[test]
    fn ud_send_carries_the_ahs_address_and_mac() {
        let qp = test_qp(ffi::IBV_QPT_UD);
        let mut ah = test_ah();
        let mut sges = [ffi::ibv_sge {
            addr: 0x1000,
            length: 8,
            lkey: 1,
        }];
        let mut wr = send_wr(ffi::IBV_WR_SEND, &mut sges, 0);
        wr.wr.ud = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: &raw mut ah.ibv_ah,
            remote_qpn: 0x42,
            remote_qkey: QKEY_USE_QP,
        };
        let wqe = unsafe { send_wqe(&qp, &wr, 0) }.expect("valid WR");
        let ud = unsafe { wqe.seg.ud };
        assert_eq!(
            ud,
            UdSeg {
                dgid: unsafe { ah.attr.grh.dgid.raw },
                dest_qpn: 0x42,
                qkey: 0x1111_1111,
                flow_label: 0x12345,
                sgid_index: 1,
                hop_limit: 64,
                traffic_class: 0x20,
                dmac: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
                ..Default::default()
            },
            "the QP's Q_Key for a Q_Key with the high bit set, the AH's MAC"
        );
    }

    #[test]
    fn receive_wqe() {
        let mut sges = [ffi::ibv_sge {
            addr: 0x2000,
            length: 128,
            lkey: 3,
        }; 2];
        let mut wr = ffi::ibv_recv_wr::zeroed();
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = 2;
        let wqe = unsafe { recv_wqe(&wr, 9, 2) }.expect("valid");
        assert_eq!((wqe.wr_id, wqe.num_sge), (9, 2));
        assert_eq!(
            wqe.sge[1],
            Sge {
                addr: 0x2000,
                length: 128,
                lkey: 3
            }
        );
        assert_eq!(unsafe { recv_wqe(&wr, 9, 1) }.err(), Some(EINVAL));
    }
}
