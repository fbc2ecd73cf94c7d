// SPDX-License-Identifier: GPL-2.0
//! The `process_mad` trampoline: ib_core hands the driver management datagrams (its sysfs
//! `counters/` reads, and MADs arriving on QP1) to answer or to pass on.

use crate::ib::{
    bindings as b,
    obj::dev_of,
    verbs::{MadAnswer, MAD_SIZE},
    Verbs,
};
use kernel::ffi::c_int;

const _: () = assert!(core::mem::size_of::<b::ib_mad>() == MAD_SIZE);

/// ib_core's `process_mad` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ibdev` is the ib_device
/// registered for `V` (not yet deallocated); `in_mad` is valid for reading and `out_mad` for
/// writing `*out_mad_size` bytes (an IB device gets `sizeof(struct ib_mad)`) for the duration
/// of the call; `out_mad_size` is valid for reading.
pub(super) unsafe extern "C" fn process_mad<V: Verbs>(
    ibdev: *mut b::ib_device,
    _flags: c_int,
    port: u32,
    _in_wc: *const b::ib_wc,
    _in_grh: *const b::ib_grh,
    in_mad: *const b::ib_mad,
    out_mad: *mut b::ib_mad,
    out_mad_size: *mut usize,
    _out_mad_pkey_index: *mut u16,
) -> c_int {
    // SAFETY: `out_mad_size` is valid for reading for this call.
    if unsafe { *out_mad_size } < MAD_SIZE {
        // Not an IB MAD buffer (OPA's are larger, never smaller): nothing to answer into.
        return b::ib_mad_result_IB_MAD_RESULT_FAILURE as c_int;
    }
    // SAFETY: one of our devices; both MADs are `MAD_SIZE` bytes (asserted above and just
    // checked), valid for the call, and ib_core never passes the same buffer as both.
    let (dev, mad, out) = unsafe {
        (
            dev_of::<V>(ibdev),
            &*in_mad.cast::<[u8; MAD_SIZE]>(),
            &mut *out_mad.cast::<[u8; MAD_SIZE]>(),
        )
    };
    let result = match V::process_mad(dev, port, mad, out) {
        Ok(MadAnswer::Reply) => {
            b::ib_mad_result_IB_MAD_RESULT_SUCCESS | b::ib_mad_result_IB_MAD_RESULT_REPLY
        }
        Ok(MadAnswer::NotOurs) => b::ib_mad_result_IB_MAD_RESULT_SUCCESS,
        Err(_) => b::ib_mad_result_IB_MAD_RESULT_FAILURE,
    };
    result as c_int
}
