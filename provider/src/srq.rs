//! Shared receive queues.
//!
//! Control: librox allocates the ring (a power-of-two number of `queue::RqWqe`s) and passes it
//! in the create_srq udata; rox.ko pins it and returns the SRQ id and the doorbell slot
//! (`a` = producer index). The limit can be armed. Resizing (IBV_SRQ_MAX_WR) loses no posted
//! WR: with the SRQ lock held (nobody posts, no completion is retired) librox copies every
//! outstanding WQE into a new ring at the same free-running index and hands it to rox.ko in
//! the modify_srq udata; the device switches rings at its own consumer index, which lies
//! among the copied WQEs. Only then does librox adopt the new ring and drop the old one; on
//! failure the old ring stays. The verbs entry points are crate::sys::srq's.
//!
//! Data: post_srq_recv writes RQ WQEs and rings slot `a`; completions (on the CQs of the QPs
//! attached) free their slots, possibly out of order.

#![deny(unsafe_code)]

use crate::context::{ContextHw, DeviceLimits};
use crate::qp::{post_recv_list, PostError};
use crate::sys::doorbell::{DoorbellSlot, SlotWord};
use crate::sys::errno::{Result, EINVAL};
use crate::sys::ffi::{self, Zeroable};
use crate::sys::wr::WrList;
use crate::wq::{new_ring, ring_depth, CompletionOrder, Ring};
use core::mem::offset_of;
use rox_uapi::queue::RQ_WQE_SHIFT;
use rox_uapi::udata::CreateSrqReq;

#[repr(C)]
pub struct RoxSrq {
    /// A `verbs_srq` (its `ibv_srq` first) so XRC SRQs keep their type and number.
    pub vsrq: ffi::verbs_srq,
    /// The receive ring (`RqWqe`s).
    pub ring: Ring,
    pub max_sge: u32,
    pub db_slot: DoorbellSlot,
}
const _: () = assert!(offset_of!(RoxSrq, vsrq) == 0);

impl RoxSrq {
    /// A new SRQ for `attr` (before rox.ko created it) and the create_srq udata naming its
    /// ring.
    pub fn new(
        attr: &ffi::ibv_srq_attr,
        limits: &DeviceLimits,
    ) -> Result<(Box<RoxSrq>, CreateSrqReq)> {
        let depth = ring_depth_for(attr, limits)?;
        let ring = new_ring(depth, RQ_WQE_SHIFT, CompletionOrder::AnyOrder)?;
        let req = CreateSrqReq {
            buf_addr: ring.lock().buf_addr(),
            log_depth: depth.trailing_zeros(),
            reserved: 0,
        };
        let srq = Box::new(RoxSrq {
            vsrq: Zeroable::zeroed(),
            ring,
            max_sge: 0,
            db_slot: DoorbellSlot::default(),
        });
        Ok((srq, req))
    }

    /// The caller's wr_id of a receive completion for slot `index` (which becomes free).
    pub fn retire(&self, index: u32) -> Option<u64> {
        self.ring.lock().complete(index)
    }

    /// `ibv_post_srq_recv` of the application's list `wrs`.
    pub fn post_recv(
        &self,
        hw: &ContextHw,
        wrs: WrList<'_, ffi::ibv_recv_wr>,
    ) -> core::result::Result<(), PostError<ffi::ibv_recv_wr>> {
        post_recv_list(
            &self.ring,
            |pi| hw.ring(self.db_slot, SlotWord::A, pi),
            wrs,
            self.max_sge,
        )
    }
}

/// Ring depth of an SRQ of `attr` (create: also its SGEs are checked).
pub fn ring_depth_for(attr: &ffi::ibv_srq_attr, limits: &DeviceLimits) -> Result<u32> {
    if attr.max_sge > limits.max_srq_sge || attr.max_wr == 0 {
        return Err(EINVAL);
    }
    ring_depth(attr.max_wr, limits.max_srq_wr).ok_or(EINVAL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::tests::LIMITS;

    #[test]
    fn srq_depth() {
        let attr = |max_wr, max_sge| ffi::ibv_srq_attr {
            max_wr,
            max_sge,
            srq_limit: 0,
        };
        assert_eq!(ring_depth_for(&attr(100, 1), &LIMITS), Ok(128));
        assert_eq!(ring_depth_for(&attr(0, 1), &LIMITS), Err(EINVAL));
        assert_eq!(ring_depth_for(&attr(1025, 1), &LIMITS), Err(EINVAL));
        assert_eq!(ring_depth_for(&attr(4, 8), &LIMITS), Err(EINVAL));
    }
}
