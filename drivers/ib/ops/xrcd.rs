// SPDX-License-Identifier: GPL-2.0
//! The XRC domain trampolines of `struct ib_device_ops`: a domain is a number
//! ([`super::super::xrcd`]); nothing goes to the device.

use super::super::{bindings as b, obj::Obj, xrcd::XrcdNum};
use kernel::ffi::c_int;

/// ib_core's `alloc_xrcd` callback (`ib_device_ops`).
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `xrcd` is an XRC domain
/// ib_core allocated with the size of an `Obj` of [`XrcdNum`], its driver data not initialised.
pub(super) unsafe extern "C" fn alloc_xrcd(
    xrcd: *mut b::ib_xrcd,
    _udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: fresh object of our size, data not initialised.
    unsafe { Obj::<b::ib_xrcd, XrcdNum>::init(xrcd, XrcdNum::alloc()) };
    0
}

/// ib_core's `dealloc_xrcd` callback (`ib_device_ops`).
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `xrcd` is a live domain
/// `alloc_xrcd` initialised, passed here once, with no SRQ or QP of it left.
pub(super) unsafe extern "C" fn dealloc_xrcd(
    xrcd: *mut b::ib_xrcd,
    _udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: a domain created by `alloc_xrcd`, destroyed once.
    unsafe { Obj::<b::ib_xrcd, XrcdNum>::destroy(xrcd, |_| ()) };
    0
}

/// The domain number of `xrcd`.
///
/// # Safety
///
/// `xrcd` is a live domain of a rox device (`alloc_xrcd` initialised it).
pub(super) unsafe fn xrcd_num(xrcd: *const b::ib_xrcd) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { Obj::<b::ib_xrcd, XrcdNum>::data_of(xrcd) }.0
}
