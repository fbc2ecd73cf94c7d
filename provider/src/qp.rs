//! Queue pairs (RC, UC, UD).
//!
//! Control: librox allocates the send ring (`queue::SqWqe`s) and, unless the QP uses an SRQ,
//! the receive ring (`queue::RqWqe`s), both power-of-two deep, and passes them in the
//! create_qp udata; rox.ko pins them and returns the QP number and the doorbell slot
//! (`a` = SQ producer index, `b` = RQ producer index). modify/query/destroy are plain uverbs
//! commands (rox.ko checks the state transitions). The verbs entry points are crate::sys::qp's.
//!
//! Data: post_send/post_recv format WQEs straight into the rings and ring the doorbell
//! (crate::sys::doorbell); each WQE's `wr_id` is its slot index (crate::wq), which the CQE
//! echoes.

#![deny(unsafe_code)]

use crate::context::{ContextHw, DeviceLimits};
use crate::qp_ex::{WrBatch, SUPPORTED_SEND_OPS};
use crate::sys::doorbell::{DoorbellSlot, SlotWord};
use crate::sys::errno::{Errno, Result, EINVAL, ENOMEM, EOPNOTSUPP};
use crate::sys::ffi::{self, Zeroable};
use crate::sys::lock::Locked;
use crate::sys::objects::SrqRef;
use crate::sys::wr::{AppWr, RecvWr, SendWr, WrList};
use crate::wq::{new_ring, ring_depth, CompletionOrder, Ring, WorkQueue};
use crate::wqe::{self, SqAttrs};
use core::mem::offset_of;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU32, Ordering};
use rox_uapi::ids::Qpn;
use rox_uapi::queue::{
    Cqe, RdmaSeg, RqWqe, SqSeg, SqWqe, RQ_MAX_SGE, RQ_WQE_SHIFT, SQ_MAX_INLINE, SQ_WQE_SHIFT,
};
use rox_uapi::udata::CreateQpReq;
use rox_uapi::verbs;

#[repr(C)]
pub struct RoxQp {
    pub vqp: ffi::verbs_qp,
    /// The QP's number (rox.ko's create_qp answer): the context's QP table holds the QP under
    /// it, and its CQEs name it.
    pub qpn: Qpn,
    /// The send ring (`SqWqe`s) and the extended post API's batch.
    pub sq: Locked<SendQueue>,
    /// The receive ring (`RqWqe`s); `None` when the QP receives through an SRQ.
    pub rq: Option<Ring>,
    pub srq: Option<SrqRef>,
    pub db_slot: DoorbellSlot,
    /// What send WQE formatting needs of the QP (capacities rox.ko granted).
    pub sq_attrs: SqAttrs,
    /// Receive SGEs rox.ko granted.
    pub max_recv_sge: u32,
    /// The QP's Q_Key (UD), used when a WR's Q_Key has the high bit set.
    pub qkey: AtomicU32,
    /// The QP state as of the last successful modify_qp / query_qp (`IBV_QPS_*`): posting
    /// sends before RTS and receives in RESET is refused, as the verbs API requires.
    pub state: AtomicU32,
}
const _: () = assert!(offset_of!(RoxQp, vqp) == 0);

/// The send queue: its work queue and the extended post API's batch (`ibv_wr_start` ..
/// `ibv_wr_complete`), both under the SQ lock.
pub struct SendQueue {
    pub wq: WorkQueue,
    pub batch: WrBatch,
}

impl Deref for SendQueue {
    type Target = WorkQueue;
    fn deref(&self) -> &WorkQueue {
        &self.wq
    }
}

impl DerefMut for SendQueue {
    fn deref_mut(&mut self) -> &mut WorkQueue {
        &mut self.wq
    }
}

impl RoxQp {
    /// A new QP for `attr` (before rox.ko created it), receiving through `srq` if given, and
    /// the create_qp udata naming its rings.
    pub fn new(
        attr: &ffi::ibv_qp_init_attr_ex,
        limits: &DeviceLimits,
        srq: Option<SrqRef>,
    ) -> Result<(Box<RoxQp>, CreateQpReq)> {
        let (sq_depth, rq_depth) = ring_depths(attr, limits)?;
        let sq = WorkQueue::new(sq_depth, SQ_WQE_SHIFT, CompletionOrder::InOrder)?;
        let rq = match rq_depth {
            0 => None,
            depth => Some(new_ring(depth, RQ_WQE_SHIFT, CompletionOrder::InOrder)?),
        };
        let req = CreateQpReq {
            sq_buf_addr: sq.buf_addr(),
            rq_buf_addr: rq.as_ref().map_or(0, |rq| rq.lock().buf_addr()),
            log_sq_depth: sq_depth.trailing_zeros(),
            log_rq_depth: if rq_depth == 0 {
                0
            } else {
                rq_depth.trailing_zeros()
            },
        };
        let qp = Box::new(RoxQp {
            vqp: Zeroable::zeroed(),
            // Set once rox.ko created the QP.
            qpn: Qpn::default(),
            sq: Locked::new(SendQueue {
                wq: sq,
                batch: WrBatch::default(),
            }),
            rq,
            srq,
            db_slot: DoorbellSlot::default(),
            sq_attrs: SqAttrs {
                qp_type: attr.qp_type,
                sig_all: attr.sq_sig_all != 0,
                max_sge: 0,
                max_inline: 0,
            },
            max_recv_sge: 0,
            qkey: AtomicU32::new(0),
            state: AtomicU32::new(ffi::IBV_QPS_RESET),
        });
        Ok((qp, req))
    }

    /// rox.ko created the QP as number `qpn` and granted `cap` (what ibv_cmd_create_qp_ex
    /// copied back).
    pub fn created(&mut self, qpn: Qpn, cap: &ffi::ibv_qp_cap, limits: &DeviceLimits) {
        self.qpn = qpn;
        // A queue granted no work requests (asked with 0: send-only / receive-only QPs) has a
        // minimal ring that nothing may be posted to.
        if cap.max_send_wr == 0 {
            self.sq.lock().disable();
        }
        if let (Some(rq), 0) = (&self.rq, cap.max_recv_wr) {
            rq.lock().disable();
        }
        self.sq_attrs.max_sge = cap.max_send_sge.min(limits.max_send_sge);
        self.max_recv_sge = cap.max_recv_sge.min(RQ_MAX_SGE);
        self.sq_attrs.max_inline = cap.max_inline_data.min(SQ_MAX_INLINE);
    }

    /// A successful modify_qp of the `IBV_QP_*` bits `mask` with `attr`.
    pub fn modified(&self, attr: &ffi::ibv_qp_attr, mask: u32) {
        if mask & ffi::IBV_QP_QKEY != 0 {
            self.qkey.store(attr.qkey, Ordering::Relaxed);
        }
        if mask & ffi::IBV_QP_STATE != 0 {
            self.state.store(attr.qp_state, Ordering::Release);
        }
        if mask & ffi::IBV_QP_STATE != 0 && attr.qp_state == ffi::IBV_QPS_RESET {
            // The device restarted the QP's doorbell slot and indices at 0; so does librox.
            self.sq.lock().reset();
            if let Some(rq) = &self.rq {
                rq.lock().reset();
            }
        }
    }

    /// A successful query_qp: the kernel reports the current state (the device may have moved
    /// the QP to SQE/ERR).
    pub fn queried(&self, attr: &ffi::ibv_qp_attr) {
        self.state.store(attr.qp_state, Ordering::Release);
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
        match (&self.rq, &self.srq) {
            (Some(rq), _) => rq.lock().complete(index),
            // An SRQ outlives the QPs attached to it (SrqRef).
            (None, Some(srq)) => srq.get().retire(index),
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

// ---------------------------------------------------------------------------------------------
// Data path
// ---------------------------------------------------------------------------------------------

/// Format the send WQE of `wr` (to be written at slot `index`) for a queue of `sq` whose QP's
/// Q_Key is `qkey`.
fn send_wqe(sq: &SqAttrs, qkey: &AtomicU32, wr: &SendWr<'_>, index: u32) -> Result<SqWqe> {
    let opcode = wqe::wr_opcode(wr.opcode()).ok_or(EINVAL)?;
    // `ibv_send_wr` has no fields for FLUSH / ATOMIC WRITE: only the extended post API
    // (ibv_wr_flush / ibv_wr_atomic_write) can express them.
    if matches!(opcode, verbs::WR_FLUSH | verbs::WR_ATOMIC_WRITE) {
        return Err(EINVAL);
    }
    let mut wqe = wqe::new_wqe(sq, opcode, wr.send_flags(), index)?;
    if matches!(
        opcode,
        verbs::WR_SEND_WITH_IMM | verbs::WR_RDMA_WRITE_WITH_IMM
    ) {
        // The value is in network order already.
        wqe.imm_data = wr.imm_data();
    }
    wqe.seg = match opcode {
        _ if sq.qp_type == ffi::IBV_QPT_UD => {
            let (ah, remote_qpn, remote_qkey) = wr.ud();
            let ah = ah.ok_or(EINVAL)?;
            SqSeg {
                ud: wqe::ud_seg(
                    &ah.addr,
                    remote_qpn,
                    remote_qkey,
                    qkey.load(Ordering::Relaxed),
                ),
            }
        }
        verbs::WR_ATOMIC_CMP_AND_SWP | verbs::WR_ATOMIC_FETCH_AND_ADD => {
            let (remote_addr, rkey, compare_add, swap) = wr.atomic();
            wqe::atomic_seg(remote_addr, rkey, compare_add, swap)
        }
        verbs::WR_SEND | verbs::WR_SEND_WITH_IMM => SqSeg {
            rdma: RdmaSeg::default(),
        },
        verbs::WR_SEND_WITH_INV | verbs::WR_LOCAL_INV => wqe::invalidate_seg(wr.invalidate_rkey()),
        verbs::WR_BIND_MW => {
            // Type 1 windows are bound with ibv_bind_mw only (crate::mw).
            let (mw, new_rkey, info) = wr.bind_mw().ok_or(EINVAL)?;
            if mw.mw_type != ffi::IBV_MW_TYPE_2 {
                return Err(EINVAL);
            }
            wqe::bind_seg(mw.rkey, new_rkey, &info)?
        }
        _ => {
            let (remote_addr, rkey) = wr.rdma();
            wqe::rdma_seg(remote_addr, rkey)
        }
    };
    if matches!(opcode, verbs::WR_BIND_MW | verbs::WR_LOCAL_INV) {
        // No data: the SGE list is ignored.
        return Ok(wqe);
    }
    if wr.send_flags() & ffi::IBV_SEND_INLINE != 0 {
        wqe::set_inline(sq, &mut wqe, wr.inline_bufs()?)?;
    } else {
        wqe::set_sges(sq, &mut wqe, wr.sges(sq.max_sge)?)?;
    }
    Ok(wqe)
}

/// A failed post: the WR that failed (for `*bad_wr`) and the errno.
pub type PostError<W> = (*mut W, Errno);

/// Post a list of WRs to one work queue: `write` formats and stores one WR at a slot index;
/// the doorbell announces every WR stored before the first failure. Returns the failing WR.
fn post_list<'a, W: 'a>(
    wq: &mut WorkQueue,
    ring_doorbell: impl FnOnce(u32),
    wrs: impl Iterator<Item = (*mut W, AppWr<'a, W>)>,
    mut write: impl FnMut(&AppWr<'a, W>, u32, &mut WorkQueue) -> Result<u64>,
) -> core::result::Result<(), PostError<W>> {
    let start = wq.pi();
    let mut failure = None;
    for (at, wr) in wrs {
        let Some(index) = wq.next_index() else {
            failure = Some((at, ENOMEM));
            break;
        };
        match write(&wr, index, wq) {
            Ok(wr_id) => wq.commit(wr_id),
            Err(e) => {
                failure = Some((at, e));
                break;
            }
        }
    }
    if wq.pi() != start {
        ring_doorbell(wq.pi());
    }
    failure.map_or(Ok(()), Err)
}

/// Post one WQE that `make` formats for a slot index, and ring the doorbell: for work
/// requests that do not come as an `ibv_send_wr` list (ibv_bind_mw).
pub(crate) fn post_one(
    qp: &RoxQp,
    hw: &ContextHw,
    wr_id: u64,
    make: impl FnOnce(&SqAttrs, u32) -> Result<SqWqe>,
) -> Result<()> {
    if !qp.can_send() {
        return Err(EINVAL);
    }
    let mut sq = qp.sq.lock();
    let index = sq.next_index().ok_or(ENOMEM)?;
    let wqe = make(&qp.sq_attrs, index)?;
    sq.write(index, wqe);
    sq.commit(wr_id);
    hw.ring(qp.db_slot, SlotWord::A, sq.pi());
    Ok(())
}

/// `ibv_post_send` of the application's list `wrs`.
pub fn post_send(
    qp: &RoxQp,
    hw: &ContextHw,
    wrs: WrList<'_, ffi::ibv_send_wr>,
) -> core::result::Result<(), PostError<ffi::ibv_send_wr>> {
    if !qp.can_send() {
        return Err((wrs.head(), EINVAL));
    }
    let mut sq = qp.sq.lock();
    post_list(
        &mut sq,
        |pi| hw.ring(qp.db_slot, SlotWord::A, pi),
        wrs,
        |w, index, wq| {
            let wqe = send_wqe(&qp.sq_attrs, &qp.qkey, w, index)?;
            wq.write(index, wqe);
            Ok(w.wr_id())
        },
    )
}

/// Format a receive WQE (RQ or SRQ) for slot `index`.
pub fn recv_wqe(wr: &RecvWr<'_>, index: u32, max_sge: u32) -> Result<RqWqe> {
    let sges = wr.sges(max_sge.min(RQ_MAX_SGE))?;
    let mut wqe = RqWqe {
        wr_id: u64::from(index),
        num_sge: sges.len() as u8,
        ..Default::default()
    };
    for (dst, sge) in wqe.sge.iter_mut().zip(sges) {
        *dst = sge;
    }
    Ok(wqe)
}

/// Post receive WRs to a ring whose doorbell word is given.
pub fn post_recv_list(
    ring: &Ring,
    ring_doorbell: impl FnOnce(u32),
    wrs: WrList<'_, ffi::ibv_recv_wr>,
    max_sge: u32,
) -> core::result::Result<(), PostError<ffi::ibv_recv_wr>> {
    post_list(&mut ring.lock(), ring_doorbell, wrs, |w, index, wq| {
        let wqe = recv_wqe(w, index, max_sge)?;
        wq.write(index, wqe);
        Ok(w.wr_id())
    })
}

/// `ibv_post_recv` of the application's list `wrs`.
pub fn post_recv(
    qp: &RoxQp,
    hw: &ContextHw,
    wrs: WrList<'_, ffi::ibv_recv_wr>,
) -> core::result::Result<(), PostError<ffi::ibv_recv_wr>> {
    // Receives of an SRQ QP go to the SRQ; none are accepted in RESET.
    let Some(rq) = qp.rq.as_ref().filter(|_| qp.can_receive()) else {
        return Err((wrs.head(), EINVAL));
    };
    post_recv_list(
        rq,
        |pi| hw.ring(qp.db_slot, SlotWord::B, pi),
        wrs,
        qp.max_recv_sge,
    )
}

const _: () =
    assert!(size_of::<SqWqe>() == 1 << SQ_WQE_SHIFT && size_of::<RqWqe>() == 1 << RQ_WQE_SHIFT);

#[cfg(test)]
// The tests play the application: they hand work requests over as libibverbs would.
#[allow(unsafe_code)]
pub(crate) mod tests {
    use super::*;
    use crate::ah::{RoxAh, UdAddress};
    use crate::sys::wr::seg;
    use crate::wqe::{sge_at, QKEY_USE_QP};
    use core::ffi::c_int;
    use rox_uapi::ids::Key;
    use rox_uapi::queue::{Sge, UdSeg, WQE_FLAG_FENCE, WQE_FLAG_INLINE, WQE_FLAG_SIGNALED};

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
        attr.srq = core::ptr::NonNull::dangling().as_ptr();
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
            qpn: Qpn::new(0x12).expect("a QPN"),
            sq: Locked::new(SendQueue {
                wq: WorkQueue::new(4, SQ_WQE_SHIFT, CompletionOrder::InOrder).expect("ring"),
                batch: WrBatch::default(),
            }),
            rq: Some(new_ring(4, RQ_WQE_SHIFT, CompletionOrder::InOrder).expect("ring")),
            srq: None,
            db_slot: DoorbellSlot::default(),
            sq_attrs: crate::wqe::tests::test_sq(qp_type),
            max_recv_sge: 2,
            qkey: AtomicU32::new(0x1111_1111),
            state: AtomicU32::new(ffi::IBV_QPS_RTS),
        }
    }

    /// The application's list starting at `first`.
    pub(crate) fn list<W>(first: *mut W) -> WrList<'static, W> {
        // SAFETY: the tests' WRs (and what they name) outlive each use of the list.
        unsafe { WrList::new(first) }
    }

    /// `send_wqe` of one application WR.
    fn format(qp: &RoxQp, wr: &ffi::ibv_send_wr, index: u32) -> Result<SqWqe> {
        let (_, w) = list((wr as *const ffi::ibv_send_wr).cast_mut())
            .next()
            .expect("one WR");
        send_wqe(&qp.sq_attrs, &qp.qkey, &w, index)
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
        let wqe = format(&qp, &wr, 5).expect("valid WR");
        assert_eq!(
            wqe.wr_id, 5,
            "the WQE carries its slot index, not the caller's wr_id"
        );
        assert_eq!(wqe.opcode, verbs::WR_RDMA_WRITE_WITH_IMM);
        assert_eq!(wqe.flags, WQE_FLAG_SIGNALED | WQE_FLAG_FENCE);
        assert_eq!(wqe.imm_data, 0x0102_0304);
        assert_eq!(wqe.num_sge, 1);
        let rdma = seg::rdma(&wqe.seg);
        assert_eq!(
            (rdma.remote_addr, rdma.rkey),
            (0xdead_0000, Key::from_raw(9))
        );
        assert_eq!(
            sge_at(&wqe.data, 0),
            Sge {
                addr: 0x1000,
                length: 64,
                lkey: Key::from_raw(7)
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
        let wqe = format(&qp, &wr, 0).expect("valid WR");
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
            format(&qp, &send_wr(ffi::IBV_WR_SEND, &mut three, 0), 0).err(),
            Some(EINVAL)
        );
        let big = [0u8; 65];
        let mut one = [ffi::ibv_sge {
            addr: big.as_ptr() as u64,
            length: 65,
            lkey: 0,
        }];
        let inline_too_big = send_wr(ffi::IBV_WR_SEND, &mut one, ffi::IBV_SEND_INLINE);
        assert_eq!(format(&qp, &inline_too_big, 0).err(), Some(EINVAL));
        assert_eq!(
            format(&qp, &send_wr(ffi::IBV_WR_TSO, &mut [], 0), 0).err(),
            Some(EINVAL)
        );
        // FLUSH / ATOMIC WRITE only through ibv_wr_*; BIND_MW needs a type 2 window.
        for op in [
            ffi::IBV_WR_FLUSH,
            ffi::IBV_WR_ATOMIC_WRITE,
            ffi::IBV_WR_BIND_MW,
        ] {
            assert_eq!(format(&qp, &send_wr(op, &mut [], 0), 0).err(), Some(EINVAL));
        }
        // LOCAL_INV and SEND_WITH_INV carry the rkey to invalidate.
        let mut inv = send_wr(ffi::IBV_WR_LOCAL_INV, &mut [], 0);
        inv.__bindgen_anon_1.invalidate_rkey = 0x8000_0123;
        let wqe = format(&qp, &inv, 0).expect("valid");
        assert_eq!(
            (wqe.opcode, seg::rdma(&wqe.seg).rkey),
            (verbs::WR_LOCAL_INV, Key::from_raw(0x8000_0123))
        );
        let uc = test_qp(ffi::IBV_QPT_UC);
        assert_eq!(
            format(&uc, &send_wr(ffi::IBV_WR_RDMA_READ, &mut [], 0), 0).err(),
            Some(EINVAL)
        );
        let ud = test_qp(ffi::IBV_QPT_UD);
        assert_eq!(
            format(&ud, &send_wr(ffi::IBV_WR_SEND, &mut [], 0), 0).err(),
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
            &mut qp.sq.lock().wq,
            |pi| rung = Some(pi),
            list(wrs.as_mut_ptr()),
            |w, index, wq| {
                let wqe = send_wqe(&qp.sq_attrs, &qp.qkey, w, index)?;
                wq.write(index, wqe);
                Ok(w.wr_id())
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
            &mut qp.sq.lock().wq,
            |pi| rung = Some(pi),
            list(&raw mut wrs[2]),
            |w, index, wq| {
                let wqe = send_wqe(&qp.sq_attrs, &qp.qkey, w, index)?;
                wq.write(index, wqe);
                Ok(w.wr_id())
            },
        );
        assert_eq!(
            r.map_err(|(wr, e)| (wr as *const _, e)),
            Err((&wrs[4] as *const _, ENOMEM))
        );
        assert_eq!(rung, Some(4));
        let written = qp.sq.lock().read::<SqWqe>(3);
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
        RoxAh {
            ibv_ah: Zeroable::zeroed(),
            addr: UdAddress {
                dgid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2],
                flow_label: 0x12345,
                sgid_index: 1,
                hop_limit: 64,
                traffic_class: 0x20,
                dmac: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
            },
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
        let wqe = format(&qp, &wr, 0).expect("valid WR");
        let ud = seg::ud(&wqe.seg);
        assert_eq!(
            ud,
            UdSeg {
                dgid: ah.addr.dgid,
                dest_qpn: Qpn::new(0x42).expect("a QPN"),
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
        let (_, w) = list(&raw mut wr).next().expect("one WR");
        let wqe = recv_wqe(&w, 9, 2).expect("valid");
        assert_eq!((wqe.wr_id, wqe.num_sge), (9, 2));
        assert_eq!(
            wqe.sge[1],
            Sge {
                addr: 0x2000,
                length: 128,
                lkey: Key::from_raw(3)
            }
        );
        assert_eq!(recv_wqe(&w, 9, 1).err(), Some(EINVAL));
    }

    /// Host micro-benchmark of librox's own data-path work per message (no device, no
    /// syscall): post one signaled SEND with one SGE (lock, format, write the WQE, commit),
    /// then — after the test writes its CQE as the device would — poll it (owner check, read,
    /// retire the slot, build the `ibv_wc`). Run with
    /// `cargo test --release -- --ignored --nocapture post_poll_benchmark` (in the root).
    #[test]
    #[ignore = "micro-benchmark"]
    fn post_poll_benchmark() {
        use crate::cq::work_completion;
        use crate::sys::memory::CqeRing;
        const ROUNDS: u32 = 2_000_000;
        let qp = test_qp(ffi::IBV_QPT_RC);
        let mut cq = CqeRing::new(4).expect("ring");
        let mut sges = [ffi::ibv_sge {
            addr: 0x1000,
            length: 64,
            lkey: 7,
        }];
        let mut wr = send_wr(ffi::IBV_WR_SEND, &mut sges, ffi::IBV_SEND_SIGNALED);
        let mut ci = 0u32;
        let mut sum = 0u64;
        let start = std::time::Instant::now();
        for round in 0..ROUNDS {
            wr.wr_id = u64::from(round);
            let mut rung = 0;
            let r = post_list(
                &mut qp.sq.lock().wq,
                |pi| rung = pi,
                list(&raw mut wr),
                |w, index, wq| {
                    let wqe = send_wqe(&qp.sq_attrs, &qp.qkey, w, index)?;
                    wq.write(index, wqe);
                    Ok(w.wr_id())
                },
            );
            assert!(r.is_ok() && rung == round.wrapping_add(1));
            cq.device_writes(
                ci,
                Cqe {
                    wr_id: u64::from(round),
                    opcode: verbs::WC_OPC_SEND,
                    ..Default::default()
                },
            );
            let cqe = cq.take(ci).expect("a CQE");
            ci = ci.wrapping_add(1);
            let wc = work_completion(&cqe, qp.retire(&cqe).expect("outstanding"));
            sum = sum.wrapping_add(wc.wr_id);
        }
        let ns = start.elapsed().as_nanos() as f64 / f64::from(ROUNDS);
        assert_eq!(sum, (0..u64::from(ROUNDS)).sum::<u64>());
        println!("post_poll_benchmark: {ns:.1} ns per post_send + poll_cq ({ROUNDS} rounds)");
    }
}
