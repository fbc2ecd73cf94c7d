//! Completion queues.
//!
//! Control: librox allocates the CQE ring (a power-of-two number of `queue::Cqe`s, zeroed,
//! page aligned) and passes its address and depth in the create_cq udata; rox.ko pins it and
//! returns the doorbell slot (`a` = consumer index, `b` = arm word) of this context's page.
//!
//! Data: poll_cq takes CQEs by the owner-bit rule (`queue::owner_for`, crate::sys::memory's
//! `CqeRing`), turns each into an `ibv_wc` (the QP it names gives back the caller's wr_id) and
//! publishes the consumer index; req_notify_cq publishes a new arm word. Neither makes a
//! syscall or wakes the device (it reads both words when it writes the next CQE). The verbs
//! entry points are crate::sys::cq's.

#![deny(unsafe_code)]

use crate::context::{ContextHw, DeviceLimits};
use crate::sys::doorbell::{DoorbellSlot, SlotWord};
use crate::sys::errno::{Result, EINVAL, EOPNOTSUPP};
use crate::sys::ffi::{self, Zeroable};
use crate::sys::lock::Locked;
use crate::sys::memory::CqeRing;
use crate::wq::ring_depth;
use core::mem::{offset_of, MaybeUninit};
use rox_uapi::queue::{Cqe, CQE_NETWORK_HDR_NONE};
use rox_uapi::regs::{cq_arm_word, CQ_ARM_NEXT, CQ_ARM_SOLICITED};
use rox_uapi::udata::CreateCqReq;
use rox_uapi::verbs;

#[repr(C)]
pub struct RoxCq {
    pub vcq: ffi::verbs_cq,
    pub db_slot: DoorbellSlot,
    pub state: Locked<CqState>,
}
const _: () = assert!(offset_of!(RoxCq, vcq) == 0);

/// Software side of a CQ.
pub struct CqState {
    /// The CQE ring; replaced by a resize.
    ring: CqeRing,
    /// Free-running consumer index (published in the doorbell slot's `a`).
    ci: u32,
    /// Sequence number of the last arm request (in the arm word, slot `b`).
    arm_seq: u32,
    /// Extended polling: the CQE `ibv_start_poll`/`ibv_next_poll` made current (its fields are
    /// what the `ibv_wc_read_*` functions return).
    pub current: Cqe,
}

impl CqState {
    fn new(ring: CqeRing) -> CqState {
        CqState {
            ring,
            ci: 0,
            arm_seq: 0,
            current: Cqe::default(),
        }
    }

    /// The ring's address and depth for rox.ko.
    pub fn create_req(&self) -> CreateCqReq {
        CreateCqReq {
            buf_addr: self.ring.addr(),
            log_depth: self.ring.depth().trailing_zeros(),
            reserved: 0,
        }
    }

    /// Poll `ring` from now on (a resize rox.ko accepted: the device writes there now, and the
    /// old ring, unpinned, goes).
    pub fn install(&mut self, ring: CqeRing) {
        self.ring = ring;
    }
}

/// `ibv_create_cq_ex`'s attributes: EOPNOTSUPP for what a rox CQ cannot report or do.
pub fn check_extended(attr: &ffi::ibv_cq_init_attr_ex) -> Result<()> {
    let flags = if attr.comp_mask & ffi::IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
        attr.flags
    } else {
        0
    };
    if attr.comp_mask & !SUPPORTED_CQ_COMP_MASK != 0
        || attr.wc_flags & !SUPPORTED_WC_FLAGS != 0
        || flags & !SUPPORTED_CQ_FLAGS != 0
    {
        return Err(EOPNOTSUPP);
    }
    Ok(())
}

/// Work-completion fields an extended CQ can report (all of `ibv_wc`'s).
const SUPPORTED_WC_FLAGS: u64 = ffi::IBV_WC_STANDARD_FLAGS as u64;
const SUPPORTED_CQ_COMP_MASK: u32 = ffi::IBV_CQ_INIT_ATTR_MASK_FLAGS;
/// Single-threaded use needs nothing special (the lock is just uncontended).
const SUPPORTED_CQ_FLAGS: u32 = ffi::IBV_CREATE_CQ_ATTR_SINGLE_THREADED;

/// A zeroed CQE ring for a CQ asked to hold `wanted` entries (`ibv_create_cq`'s or
/// `ibv_resize_cq`'s `cqe`): EINVAL for none or more than the device takes.
pub fn new_ring(wanted: u32, limits: &DeviceLimits) -> Result<CqeRing> {
    if wanted == 0 {
        return Err(EINVAL);
    }
    let depth = ring_depth(wanted, limits.max_cqe).ok_or(EINVAL)?;
    CqeRing::new(depth)
}

impl RoxCq {
    /// A new CQ (before rox.ko created it) asked to hold `wanted` entries.
    pub fn new(wanted: u32, limits: &DeviceLimits) -> Result<Box<RoxCq>> {
        Ok(Box::new(RoxCq {
            vcq: Zeroable::zeroed(),
            db_slot: DoorbellSlot::default(),
            state: Locked::new(CqState::new(new_ring(wanted, limits)?)),
        }))
    }

    /// Take the next CQE (advancing the consumer index) and the caller's wr_id for it.
    fn next(&self, state: &mut CqState, hw: &ContextHw) -> Option<(Cqe, u64)> {
        let mut cqe = state.ring.take(state.ci)?;
        state.ci = state.ci.wrapping_add(1);
        // An XRC receive retires its SRQ's WQE; every other CQE its QP's. A CQE of a QP or SRQ
        // librox does not know (destroyed meanwhile) keeps the device's wr_id.
        let wr_id = match hw.xrc_srqs.take(&mut cqe) {
            Some(wr_id) => wr_id,
            None => hw.qps.retire(&cqe),
        }
        .unwrap_or(cqe.wr_id);
        Some((cqe, wr_id))
    }

    /// `ibv_poll_cq`: fill `wc` with the completions there are (at most its length); returns
    /// how many.
    pub fn poll(&self, hw: &ContextHw, wc: &mut [MaybeUninit<ffi::ibv_wc>]) -> usize {
        if wc.is_empty() {
            return 0;
        }
        let mut state = self.state.lock();
        let mut polled = 0;
        while polled < wc.len() {
            let Some((cqe, wr_id)) = self.next(&mut state, hw) else {
                break;
            };
            wc[polled].write(work_completion(&cqe, wr_id));
            polled += 1;
        }
        if polled > 0 {
            hw.publish_consumer_index(self.db_slot, state.ci);
        }
        polled
    }

    /// Extended polling (`ibv_start_poll` / `ibv_next_poll`, the CQ lock held): make the next
    /// CQE current; its caller wr_id and status, `None` when the ring holds none.
    pub fn advance(&self, state: &mut CqState, hw: &ContextHw) -> Option<(u64, u32)> {
        let (cqe, wr_id) = self.next(state, hw)?;
        state.current = cqe;
        Some((wr_id, u32::from(cqe.status)))
    }

    /// `ibv_end_poll` (the CQ lock held): publish the consumer index.
    pub fn end_poll(&self, state: &CqState, hw: &ContextHw) {
        hw.publish_consumer_index(self.db_slot, state.ci);
    }

    /// `ibv_req_notify_cq`: a new arm word (next completion, or next solicited one).
    pub fn req_notify(&self, hw: &ContextHw, solicited_only: bool) {
        let arm_type = if solicited_only {
            CQ_ARM_SOLICITED
        } else {
            CQ_ARM_NEXT
        };
        let mut state = self.state.lock();
        state.arm_seq = state.arm_seq.wrapping_add(1);
        hw.publish(
            self.db_slot,
            SlotWord::B,
            cq_arm_word(state.arm_seq, arm_type),
        );
    }
}

// The CQE carries libibverbs' own numbering (rox_uapi::verbs says so); check the bindings agree.
const _: () = {
    assert!(ffi::IBV_WC_SUCCESS == verbs::WC_SUCCESS as u32);
    assert!(ffi::IBV_WC_WR_FLUSH_ERR == verbs::WC_WR_FLUSH_ERR as u32);
    assert!(ffi::IBV_WC_GENERAL_ERR == verbs::WC_GENERAL_ERR as u32);
    assert!(ffi::IBV_WC_SEND == verbs::WC_OPC_SEND as u32);
    assert!(ffi::IBV_WC_FETCH_ADD == verbs::WC_OPC_FETCH_ADD as u32);
    assert!(ffi::IBV_WC_FLUSH == verbs::WC_OPC_FLUSH as u32);
    assert!(ffi::IBV_WC_BIND_MW == verbs::WC_OPC_BIND_MW as u32);
    assert!(ffi::IBV_WC_LOCAL_INV == verbs::WC_OPC_LOCAL_INV as u32);
    assert!(ffi::IBV_WC_WITH_INV == verbs::WC_FLAG_WITH_INV as u32);
    assert!(ffi::IBV_WC_ATOMIC_WRITE == verbs::WC_OPC_ATOMIC_WRITE as u32);
    assert!(ffi::IBV_WC_RECV == verbs::WC_OPC_RECV as u32);
    assert!(ffi::IBV_WC_RECV_RDMA_WITH_IMM == verbs::WC_OPC_RECV_RDMA_WITH_IMM as u32);
    assert!(ffi::IBV_WC_GRH == verbs::WC_FLAG_GRH as u32);
    assert!(ffi::IBV_WC_WITH_IMM == verbs::WC_FLAG_WITH_IMM as u32);
};

/// `ibv_wc.sl` of a RoCE completion as mlx5 reports it (its CQE's packet type, which UCX's UD
/// transport reads to find the destination GID in the GRH area): bit 3 set for a RoCE frame
/// with a UDP header (RoCEv2), bits 2:0 the L3 header type (1 IPv6, 2 IPv4). rox's
/// `CQE_NETWORK_HDR_*` values are those L3 types; completions without one report sl 0 (rox
/// has no service level to report).
const ROCE_PKT_TYPE_UDP: u8 = 0x8;

pub fn work_completion_sl(cqe: &Cqe) -> u8 {
    match cqe.network_hdr {
        CQE_NETWORK_HDR_NONE => 0,
        l3 => ROCE_PKT_TYPE_UDP | l3,
    }
}

/// The `ibv_wc` of a CQE whose caller wr_id is `wr_id`.
pub fn work_completion(cqe: &Cqe, wr_id: u64) -> ffi::ibv_wc {
    ffi::ibv_wc {
        wr_id,
        status: u32::from(cqe.status),
        opcode: u32::from(cqe.opcode),
        vendor_err: u32::from(cqe.vendor_err),
        byte_len: cqe.byte_len,
        // Network order in both.
        __bindgen_anon_1: ffi::ibv_wc__bindgen_ty_1 {
            imm_data: cqe.imm_data,
        },
        // The QP numbers leave as the C struct's integers here.
        qp_num: cqe.qp_num.get(),
        src_qp: cqe.src_qp.get(),
        wc_flags: u32::from(cqe.wc_flags),
        pkey_index: 0,
        slid: 0,
        sl: work_completion_sl(cqe),
        dlid_path_bits: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rox_uapi::ids::Qpn;

    fn test_cq(depth: u32) -> RoxCq {
        RoxCq {
            vcq: Zeroable::zeroed(),
            db_slot: DoorbellSlot::default(),
            state: Locked::new(CqState::new(CqeRing::new(depth).expect("ring"))),
        }
    }

    /// What the device does: body, then the owner byte of pass `index / depth`.
    fn device_writes(cq: &RoxCq, index: u32, cqe: Cqe) {
        cq.state.lock().ring.device_writes(index, cqe);
    }

    #[test]
    fn owner_bit_decides_what_is_valid_across_passes() {
        let cq = test_cq(2);
        assert!(
            cq.state.lock().ring.take(0).is_none(),
            "a zeroed ring holds no CQE"
        );
        device_writes(
            &cq,
            0,
            Cqe {
                wr_id: 10,
                ..Default::default()
            },
        );
        device_writes(
            &cq,
            1,
            Cqe {
                wr_id: 11,
                ..Default::default()
            },
        );
        assert_eq!(cq.state.lock().ring.take(0).map(|c| c.wr_id), Some(10));
        assert_eq!(cq.state.lock().ring.take(1).map(|c| c.wr_id), Some(11));
        // Second pass: slot 0 still holds the pass-0 entry until the device rewrites it.
        assert!(cq.state.lock().ring.take(2).is_none());
        device_writes(
            &cq,
            2,
            Cqe {
                wr_id: 12,
                ..Default::default()
            },
        );
        assert_eq!(cq.state.lock().ring.take(2).map(|c| c.wr_id), Some(12));
        assert!(cq.state.lock().ring.take(3).is_none());
    }

    #[test]
    fn work_completion_fields() {
        let cqe = Cqe {
            wr_id: 3,
            byte_len: 4096,
            imm_data: 0x1234_5678,
            qp_num: Qpn::new(17).expect("a QPN"),
            src_qp: Qpn::new(18).expect("a QPN"),
            status: verbs::WC_REM_ACCESS_ERR,
            opcode: verbs::WC_OPC_RECV_RDMA_WITH_IMM,
            wc_flags: verbs::WC_FLAG_WITH_IMM,
            vendor_err: 5,
            wqe_index: 9,
            ..Default::default()
        };
        let wc = work_completion(&cqe, 0xfeed);
        assert_eq!(wc.wr_id, 0xfeed);
        assert_eq!(wc.status, ffi::IBV_WC_REM_ACCESS_ERR);
        assert_eq!(wc.opcode, ffi::IBV_WC_RECV_RDMA_WITH_IMM);
        assert_eq!(crate::sys::cq::wc_imm_data(&wc), 0x1234_5678);
        assert_eq!(
            (wc.byte_len, wc.qp_num, wc.src_qp, wc.sl, wc.vendor_err),
            (4096, 17, 18, 0, 5)
        );
        assert_eq!(wc.wc_flags, ffi::IBV_WC_WITH_IMM);
    }

    /// A UD receive reports its packet type in `sl` as mlx5 does (UCX's ud_verbs reads it).
    #[test]
    fn ud_receive_sl_is_the_roce_packet_type() {
        use rox_uapi::queue::{CQE_NETWORK_HDR_IPV4, CQE_NETWORK_HDR_IPV6};
        for (network_hdr, sl) in [(CQE_NETWORK_HDR_IPV4, 0xa), (CQE_NETWORK_HDR_IPV6, 0x9)] {
            let cqe = Cqe {
                opcode: verbs::WC_OPC_RECV,
                wc_flags: verbs::WC_FLAG_GRH,
                network_hdr,
                ..Default::default()
            };
            assert_eq!(work_completion(&cqe, 1).sl, sl);
        }
    }
}
