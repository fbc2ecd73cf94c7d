//! Queue pairs (RC, UC, UD): the QP object and its lifecycle.
//!
//! Control: librox allocates the send ring (`queue::SqWqe`s) and, unless the QP uses an SRQ,
//! the receive ring (`queue::RqWqe`s), both power-of-two deep, and passes them in the
//! create_qp udata; rox.ko pins them and returns the QP number and the doorbell slot
//! (`a` = SQ producer index, `b` = RQ producer index). modify/query/destroy are plain uverbs
//! commands (rox.ko checks the state transitions). The verbs entry points are crate::sys::qp's.
//!
//! Data: post_send/post_recv format WQEs straight into the rings and ring the doorbell
//! (crate::sys::doorbell); each WQE's `wr_id` is its slot index (crate::wq), which the CQE
//! echoes. [`post`] is the posting loop both queues share, [`send`] builds send WQEs,
//! [`recv`] receive WQEs (of an RQ or an SRQ).

#![deny(unsafe_code)]

mod post;
mod recv;
mod send;

pub use post::PostError;
pub use recv::post_recv;
pub(crate) use recv::post_recv_list;
pub(crate) use send::post_one;
pub use send::post_send;

use crate::context::DeviceLimits;
use crate::qp_ex::{WrBatch, SUPPORTED_SEND_OPS};
use crate::sys::doorbell::DoorbellSlot;
use crate::sys::errno::{Result, EINVAL, EOPNOTSUPP};
use crate::sys::ffi::{self, Zeroable};
use crate::sys::lock::Locked;
use crate::sys::objects::SrqRef;
use crate::wq::{new_ring, ring_depth, CompletionOrder, Ring, WorkQueue};
use crate::wqe::SqAttrs;
use core::mem::offset_of;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU32, Ordering};
use rox_uapi::ids::Qpn;
use rox_uapi::queue::{Cqe, RqWqe, SqWqe, RQ_MAX_SGE, RQ_WQE_SHIFT, SQ_MAX_INLINE, SQ_WQE_SHIFT};
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
            sq_attrs: SqAttrs::new(attr.qp_type, attr.sq_sig_all != 0),
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

/// Whether an XRC QP of `qp_type` may be created with an SRQ of type `srq_type` (None: no
/// SRQ), as the kernel's ioctl create_qp judges it (uverbs_std_types_qp.c): an initiator takes
/// none (EINVAL), a target only an XRC SRQ (EINVAL for a basic one). libfabric's verbs provider
/// gives its targets its XRC SRQ (vrb_msg_ep_get_qp_attr). rox does not attach it: a target
/// delivers each request into the SRQ the request names, whichever that is.
pub fn xrc_srq_check(qp_type: ffi::ibv_qp_type, srq_type: Option<ffi::ibv_srq_type>) -> Result<()> {
    match (qp_type, srq_type) {
        (ffi::IBV_QPT_XRC_SEND, Some(_)) => Err(EINVAL),
        (ffi::IBV_QPT_XRC_RECV, Some(t)) if t != ffi::IBV_SRQT_XRC => Err(EINVAL),
        _ => Ok(()),
    }
}

/// A QP type as `rdma resource show qp` names it, for librox's debug log.
pub fn qp_type_name(qp_type: ffi::ibv_qp_type) -> &'static str {
    match qp_type {
        ffi::IBV_QPT_RC => "RC",
        ffi::IBV_QPT_UC => "UC",
        ffi::IBV_QPT_UD => "UD",
        ffi::IBV_QPT_XRC_SEND => "XRC_INI",
        ffi::IBV_QPT_XRC_RECV => "XRC_TGT",
        ffi::IBV_QPT_RAW_PACKET => "RAW_PACKET",
        _ => "unknown",
    }
}

/// A QP state as `rdma resource show qp` names it, for librox's debug log.
pub fn qp_state_name(state: ffi::ibv_qp_state) -> &'static str {
    match state {
        ffi::IBV_QPS_RESET => "RESET",
        ffi::IBV_QPS_INIT => "INIT",
        ffi::IBV_QPS_RTR => "RTR",
        ffi::IBV_QPS_RTS => "RTS",
        ffi::IBV_QPS_SQD => "SQD",
        ffi::IBV_QPS_SQE => "SQE",
        ffi::IBV_QPS_ERR => "ERR",
        _ => "unknown",
    }
}

/// Init-attribute masks librox accepts (the XRC domain of an XRC target); anything else (RSS,
/// ...) is not supported.
const SUPPORTED_COMP_MASK: u32 = ffi::IBV_QP_INIT_ATTR_PD
    | ffi::IBV_QP_INIT_ATTR_XRCD
    | ffi::IBV_QP_INIT_ATTR_CREATE_FLAGS
    | ffi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;

/// Ring depths of a new QP: (send, receive); receive is 0 with an SRQ.
fn ring_depths(attr: &ffi::ibv_qp_init_attr_ex, limits: &DeviceLimits) -> Result<(u32, u32)> {
    let xrc = matches!(attr.qp_type, ffi::IBV_QPT_XRC_SEND | ffi::IBV_QPT_XRC_RECV);
    match attr.qp_type {
        ffi::IBV_QPT_RC | ffi::IBV_QPT_UC | ffi::IBV_QPT_UD => {}
        _ if xrc => {}
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
    // Neither XRC role has a receive queue (an initiator receives nothing, a target takes the
    // SRQ each request names): receive capacities asked for are ignored, as on other HCAs. An
    // SRQ given with an XRC QP was judged (xrc_srq_check) and is not passed on.
    let rq_depth = if xrc {
        0
    } else if attr.srq.is_null() {
        if cap.max_recv_sge > limits.max_recv_sge {
            return Err(EINVAL);
        }
        ring_depth(cap.max_recv_wr, limits.max_qp_wr).ok_or(EINVAL)?
    } else {
        0
    };
    Ok((sq_depth, rq_depth))
}

const _: () =
    assert!(size_of::<SqWqe>() == 1 << SQ_WQE_SHIFT && size_of::<RqWqe>() == 1 << RQ_WQE_SHIFT);

#[cfg(test)]
// The tests play the application: they hand work requests over as libibverbs would.
#[allow(unsafe_code)]
pub(crate) mod tests {
    use super::*;
    use crate::ah::{RoxAh, UdAddress};
    use crate::context::tests::LIMITS;
    use crate::sys::wr::WrList;

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
    fn qp_types_are_named_as_rdma_resource_names_them() {
        let names: Vec<_> = [
            ffi::IBV_QPT_RC,
            ffi::IBV_QPT_UC,
            ffi::IBV_QPT_UD,
            ffi::IBV_QPT_XRC_SEND,
            ffi::IBV_QPT_XRC_RECV,
        ]
        .into_iter()
        .map(qp_type_name)
        .collect();
        assert_eq!(names, ["RC", "UC", "UD", "XRC_INI", "XRC_TGT"]);
        assert_eq!(qp_state_name(ffi::IBV_QPS_RTS), "RTS");
        assert_eq!(qp_state_name(ffi::IBV_QPS_ERR), "ERR");
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

    /// A new QP keeps, from create on, whether it counts in the port's flight: uapi's rule
    /// for its type (RC and XRC initiators do), which no doorbell asks again.
    #[test]
    fn a_new_qp_stores_whether_it_counts_in_the_ports_flight() {
        let cases = [
            (ffi::IBV_QPT_RC, true),
            (ffi::IBV_QPT_UC, false),
            (ffi::IBV_QPT_UD, false),
            (ffi::IBV_QPT_XRC_SEND, true),
            (ffi::IBV_QPT_XRC_RECV, false),
        ];
        for (qp_type, counts) in cases {
            let mut attr = rc(4, 4);
            attr.qp_type = qp_type;
            let (qp, _) = RoxQp::new(&attr, &LIMITS, None).expect("a QP");
            assert_eq!(qp.sq_attrs.counts_in_flight, counts, "QP type {qp_type}");
            let rule = crate::wqe::qp_type(qp_type).is_some_and(verbs::qp_type_counts_in_flight);
            assert_eq!(qp.sq_attrs.counts_in_flight, rule, "QP type {qp_type}");
        }
    }

    #[test]
    fn srq_qps_have_no_receive_ring() {
        let mut attr = rc(4, 4096);
        attr.srq = core::ptr::NonNull::dangling().as_ptr();
        assert_eq!(ring_depths(&attr, &LIMITS), Ok((4, 0)));
    }

    #[test]
    fn xrc_qps_have_no_receive_ring() {
        let mut initiator = rc(8, 0);
        initiator.qp_type = ffi::IBV_QPT_XRC_SEND;
        assert_eq!(ring_depths(&initiator, &LIMITS), Ok((8, 0)));
        // pyverbs asks its targets for the default capacities (1 send, 10 receive WRs).
        let mut target = rc(1, 10);
        target.qp_type = ffi::IBV_QPT_XRC_RECV;
        target.comp_mask = ffi::IBV_QP_INIT_ATTR_XRCD;
        assert_eq!(ring_depths(&target, &LIMITS), Ok((2, 0)), "a minimal ring");
    }

    #[test]
    fn xrc_srq_only_an_xrc_one_on_a_target() {
        use ffi::{IBV_QPT_RC, IBV_QPT_XRC_RECV, IBV_QPT_XRC_SEND, IBV_SRQT_BASIC, IBV_SRQT_XRC};
        let cases = [
            (IBV_QPT_XRC_SEND, None, Ok(())),
            (IBV_QPT_XRC_SEND, Some(IBV_SRQT_XRC), Err(EINVAL)),
            (IBV_QPT_XRC_SEND, Some(IBV_SRQT_BASIC), Err(EINVAL)),
            (IBV_QPT_XRC_RECV, None, Ok(())),
            (IBV_QPT_XRC_RECV, Some(IBV_SRQT_XRC), Ok(())),
            (IBV_QPT_XRC_RECV, Some(IBV_SRQT_BASIC), Err(EINVAL)),
            (IBV_QPT_RC, Some(IBV_SRQT_BASIC), Ok(())),
        ];
        for (qp_type, srq_type, want) in cases {
            assert_eq!(
                xrc_srq_check(qp_type, srq_type),
                want,
                "{qp_type} {srq_type:?}"
            );
        }
    }

    #[test]
    fn unsupported_types_and_masks() {
        let mut raw = rc(1, 1);
        raw.qp_type = ffi::IBV_QPT_RAW_PACKET;
        assert_eq!(ring_depths(&raw, &LIMITS), Err(EOPNOTSUPP));
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
}
