//! What a device context holds once it is open (doorbells, rox.ko's ucontext answer, the
//! device limits object creation checks against, the QP table completions use), and the checks
//! made on opening it. The context object itself, its opening and the ops table are
//! crate::sys::context's.

#![deny(unsafe_code)]

use crate::sys::context::QpTable;
use crate::sys::doorbell::{Doorbell, DoorbellSlot, SlotWord};
use crate::sys::errno::{Result, EPROTO};
use core::ffi::c_char;
use rox_uapi::queue::{CQE_SIZE, RQ_WQE_SIZE, SQ_MAX_INLINE, SQ_WQE_SIZE};
use rox_uapi::udata::AllocUcontextResp;
use std::io::Write;

/// What a context holds of the device once it is open.
pub struct ContextHw {
    /// This context's doorbell page and the wake register.
    pub doorbell: Doorbell,
    pub limits: DeviceLimits,
    /// The context's QPs by number: a CQE names its QP by number.
    pub qps: QpTable,
    /// The context's XRC SRQs by number: an XRC receive's CQE names its SRQ.
    pub xrc_srqs: crate::xrc::XrcSrqTable,
}

impl ContextHw {
    /// Publish `value` in a slot word without waking the device (crate::sys::doorbell).
    pub fn publish(&self, slot: DoorbellSlot, word: SlotWord, value: u32) {
        self.doorbell.publish(slot, word, value);
    }

    /// Publish a CQ's consumer index (crate::sys::doorbell).
    pub fn publish_consumer_index(&self, slot: DoorbellSlot, value: u32) {
        self.doorbell.publish_consumer_index(slot, value);
    }

    /// Ring a doorbell: publish `value`, then wake the device if it is asleep.
    pub fn ring(&self, slot: DoorbellSlot, word: SlotWord, value: u32) {
        self.doorbell.ring(slot, word, value);
    }

    /// Ring a QP's SQ doorbell for new WQEs of `sq` that are all `packets_only` or not: the
    /// WQEs that all send packets of a QP that counts in the port's flight (RC, XRC initiator:
    /// `SqAttrs::counts_in_flight`, decided at create) skip the wake while the idle device
    /// says its flight is full (crate::sys::doorbell).
    pub fn ring_sq(
        &self,
        slot: DoorbellSlot,
        sq: &crate::wqe::SqAttrs,
        packets_only: bool,
        value: u32,
    ) {
        if packets_only && sq.counts_in_flight {
            self.doorbell.ring_rc_sq(slot, value);
        } else {
            self.doorbell.ring(slot, SlotWord::A, value);
        }
    }

    /// Ring a QP's RQ doorbell: publish `value`, then wake the device if it is asleep and said
    /// this page's RQ doorbells need a wake (crate::sys::doorbell).
    pub fn ring_rq(&self, slot: DoorbellSlot, value: u32) {
        self.doorbell.ring_rq(slot, value);
    }
}

/// Device limits (from query_device at open) that object creation checks before it allocates
/// rings.
#[derive(Clone, Copy, Debug)]
pub struct DeviceLimits {
    pub max_qp_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_cqe: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_inline: u32,
}

impl DeviceLimits {
    /// The limits of a device whose query_device answered `attr`, with rox.ko's ucontext
    /// answer `ucontext`.
    pub fn new(attr: &crate::sys::ffi::ibv_device_attr, ucontext: &AllocUcontextResp) -> Self {
        let nonneg = |v: core::ffi::c_int| u32::try_from(v).unwrap_or(0);
        DeviceLimits {
            max_qp_wr: nonneg(attr.max_qp_wr),
            // The send WQE holds SQ_MAX_SGE SGEs and rox.ko grants that many (the device's
            // max_sge is the smaller receive limit); ibv_create_qp hands the granted caps back
            // to the caller, who may reuse them for the next QP.
            max_send_sge: rox_uapi::queue::SQ_MAX_SGE,
            max_recv_sge: nonneg(attr.max_sge).min(rox_uapi::queue::RQ_MAX_SGE),
            max_cqe: nonneg(attr.max_cqe),
            max_srq_wr: nonneg(attr.max_srq_wr),
            max_srq_sge: nonneg(attr.max_srq_sge).min(rox_uapi::queue::RQ_MAX_SGE),
            max_inline: ucontext.max_inline,
        }
    }
}

/// The ucontext response must describe exactly the queue formats this librox was built with.
pub fn check_queue_formats(u: &AllocUcontextResp) -> Result<()> {
    let same = u.sq_wqe_size as usize == SQ_WQE_SIZE
        && u.rq_wqe_size as usize == RQ_WQE_SIZE
        && u.cqe_size as usize == CQE_SIZE
        && u.max_inline <= SQ_MAX_INLINE;
    if same {
        Ok(())
    } else {
        Err(EPROTO)
    }
}

/// Firmware version as "major.minor.sub" from rox.ko's 64-bit fw_ver (16 bits each, as
/// rdma_rxe reports it).
pub fn format_fw_ver(raw: u64, out: &mut [c_char]) {
    const FIELD_BITS: u32 = 16;
    const FIELD_MASK: u64 = 0xffff;
    let major = (raw >> (2 * FIELD_BITS)) & FIELD_MASK;
    let minor = (raw >> FIELD_BITS) & FIELD_MASK;
    let sub = raw & FIELD_MASK;
    let mut text = Vec::new();
    let _ = write!(text, "{major}.{minor}.{sub}");
    text.truncate(out.len().saturating_sub(1));
    for (dst, &src) in out.iter_mut().zip(text.iter().chain(core::iter::once(&0))) {
        *dst = src as c_char;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Limits of a device for the QP and SRQ create rules' tests.
    pub(crate) const LIMITS: DeviceLimits = DeviceLimits {
        max_qp_wr: 1024,
        max_send_sge: 12,
        max_recv_sge: 7,
        max_cqe: 4096,
        max_srq_wr: 1024,
        max_srq_sge: 7,
        max_inline: 192,
    };

    /// A C string field (fixed array) as text.
    fn c_field(field: &[core::ffi::c_char]) -> String {
        let bytes: Vec<u8> = field
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn fw_ver_is_major_minor_sub() {
        let mut out = [0 as core::ffi::c_char; 64];
        format_fw_ver((1 << 32) | (2 << 16) | 3, &mut out);
        assert_eq!(c_field(&out), "1.2.3");
        let mut tiny = [0x7f as core::ffi::c_char; 4];
        format_fw_ver((10 << 32) | (20 << 16) | 30, &mut tiny);
        assert_eq!(c_field(&tiny), "10.");
    }

    #[test]
    fn queue_formats_must_match_uapi() {
        let good = AllocUcontextResp {
            sq_wqe_size: SQ_WQE_SIZE as u32,
            rq_wqe_size: RQ_WQE_SIZE as u32,
            cqe_size: CQE_SIZE as u32,
            max_inline: SQ_MAX_INLINE,
            ..Default::default()
        };
        assert!(check_queue_formats(&good).is_ok());
        assert_eq!(
            check_queue_formats(&AllocUcontextResp {
                cqe_size: 64,
                ..good
            }),
            Err(EPROTO)
        );
        assert_eq!(
            check_queue_formats(&AllocUcontextResp::default()),
            Err(EPROTO)
        );
    }
}
