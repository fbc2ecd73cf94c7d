// SPDX-License-Identifier: GPL-2.0
//! Trampolines of kernel consumers' data path (ib_mad's GSI QP1 and its CQ, nvme-rdma, ...):
//! post send/receive work requests, poll and arm CQs. User QPs and CQs never get here, their
//! data path is in the provider.

use super::errno;
use crate::ib::{
    attr::WcOut,
    bindings as b,
    obj::{dev_of, Obj},
    wr::{RecvWr, SendWr},
    Verbs,
};
use core::marker::PhantomData;
use kernel::ffi::c_int;

/// ib_core's `post_send` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a live QP of a `V`
/// device, created by this driver; `wr` is a null-terminated chain of work requests valid for
/// the call (for a UD/GSI QP each one the `wr` member of an `ib_ud_wr`); `bad` is writable.
pub(super) unsafe extern "C" fn post_send<V: Verbs>(
    qp: *mut b::ib_qp,
    wr: *const b::ib_send_wr,
    bad: *mut *const b::ib_send_wr,
) -> c_int {
    // SAFETY: one of our live QPs; `wr` is a valid chain for the duration of the call.
    let (dev, data, is_ud) = unsafe {
        let qp_type = (*qp).qp_type;
        (
            dev_of::<V>((*qp).device),
            Obj::<b::ib_qp, V::Qp>::data_of(qp),
            qp_type == b::ib_qp_type_IB_QPT_UD || qp_type == b::ib_qp_type_IB_QPT_GSI,
        )
    };
    let mut cur = wr;
    let mut result = Ok(());
    while !cur.is_null() {
        // SAFETY: non-null element of the caller's chain.
        let raw = unsafe { &*cur };
        let view = SendWr::<V> {
            raw,
            is_ud,
            _verbs: PhantomData,
        };
        if let Err(err) = V::post_send(dev, data, &view) {
            // SAFETY: ib_core passes a valid output pointer.
            unsafe { *bad = cur };
            result = Err(err);
            break;
        }
        cur = raw.next;
    }
    V::ring_sq(dev, data);
    errno(result)
}

/// ib_core's `post_recv` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a live QP of a `V`
/// device, created by this driver; `wr` is a null-terminated chain of work requests valid for
/// the call (for a UD/GSI QP each one the `wr` member of an `ib_ud_wr`); `bad` is writable.
pub(super) unsafe extern "C" fn post_recv<V: Verbs>(
    qp: *mut b::ib_qp,
    wr: *const b::ib_recv_wr,
    bad: *mut *const b::ib_recv_wr,
) -> c_int {
    // SAFETY: one of our live QPs; `wr` is a valid chain for the duration of the call.
    let (dev, data) = unsafe {
        (
            dev_of::<V>((*qp).device),
            Obj::<b::ib_qp, V::Qp>::data_of(qp),
        )
    };
    let mut cur = wr;
    let mut result = Ok(());
    while !cur.is_null() {
        // SAFETY: non-null element of the caller's chain.
        let raw = unsafe { &*cur };
        if let Err(err) = V::post_recv(dev, data, &RecvWr { raw }) {
            // SAFETY: ib_core passes a valid output pointer.
            unsafe { *bad = cur };
            result = Err(err);
            break;
        }
        cur = raw.next;
    }
    V::ring_rq(dev, data);
    errno(result)
}

/// ib_core's `post_srq_recv` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `srq` is a live SRQ of a `V`
/// device, created by this driver; `wr` is a null-terminated chain of work requests valid for
/// the call (for a UD/GSI QP each one the `wr` member of an `ib_ud_wr`); `bad` is writable.
pub(super) unsafe extern "C" fn post_srq_recv<V: Verbs>(
    srq: *mut b::ib_srq,
    wr: *const b::ib_recv_wr,
    bad: *mut *const b::ib_recv_wr,
) -> c_int {
    // SAFETY: one of our live SRQs; `wr` is a valid chain for the duration of the call.
    let (dev, data) = unsafe {
        (
            dev_of::<V>((*srq).device),
            Obj::<b::ib_srq, V::Srq>::data_of(srq),
        )
    };
    let mut cur = wr;
    let mut result = Ok(());
    while !cur.is_null() {
        // SAFETY: non-null element of the caller's chain.
        let raw = unsafe { &*cur };
        if let Err(err) = V::post_srq_recv(dev, data, &RecvWr { raw }) {
            // SAFETY: ib_core passes a valid output pointer.
            unsafe { *bad = cur };
            result = Err(err);
            break;
        }
        cur = raw.next;
    }
    V::ring_srq(dev, data);
    errno(result)
}

/// ib_core's `poll_cq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `cq` is a live CQ of a `V`
/// device, created by this driver; `wc` has room for `n` completions.
pub(super) unsafe extern "C" fn poll_cq<V: Verbs>(
    cq: *mut b::ib_cq,
    n: c_int,
    wc: *mut b::ib_wc,
) -> c_int {
    if n <= 0 || wc.is_null() {
        return 0;
    }
    // SAFETY: one of our live CQs; `wc` has room for `n` completions.
    let (dev, data, wcs) = unsafe {
        (
            dev_of::<V>((*cq).device),
            Obj::<b::ib_cq, V::Cq>::data_of(cq),
            core::slice::from_raw_parts_mut(wc, n as usize),
        )
    };
    let mut out = WcOut { raw: wcs };
    match V::poll_cq(dev, data, &mut out) {
        Ok(count) => count as c_int,
        Err(err) => err.to_errno(),
    }
}

/// ib_core's `req_notify_cq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `cq` is a live CQ of a `V`
/// device, created by this driver.
pub(super) unsafe extern "C" fn req_notify_cq<V: Verbs>(
    cq: *mut b::ib_cq,
    flags: b::ib_cq_notify_flags,
) -> c_int {
    // SAFETY: one of our live CQs.
    let (dev, data) = unsafe {
        (
            dev_of::<V>((*cq).device),
            Obj::<b::ib_cq, V::Cq>::data_of(cq),
        )
    };
    let solicited =
        flags & b::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK == b::ib_cq_notify_flags_IB_CQ_SOLICITED;
    match V::req_notify_cq(dev, data, solicited) {
        Ok(missed) if flags & b::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS != 0 => {
            missed.into()
        }
        Ok(_) => 0,
        Err(err) => err.to_errno(),
    }
}
