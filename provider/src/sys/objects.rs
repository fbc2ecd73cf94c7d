//! The rox objects behind the pointers libibverbs and applications pass: each `ibv_*` object
//! librox makes is the first member of its Rox* struct (checked at compile time where the struct
//! is defined), so the pointer is the struct's.

use crate::ah::RoxAh;
use crate::cq::RoxCq;
use crate::qp::RoxQp;
use crate::srq::RoxSrq;
use crate::sys::ffi;
use core::ptr::NonNull;

/// # Safety
/// `qp` is an `ibv_qp` made by crate::sys::qp and alive during `'a`.
pub unsafe fn qp<'a>(qp: *mut ffi::ibv_qp) -> &'a RoxQp {
    // SAFETY: the ibv_qp is the first member of the verbs_qp, itself first in RoxQp.
    unsafe { &*qp.cast::<RoxQp>() }
}

/// # Safety
/// `qp` is the `ibv_qp_ex` of a QP made by crate::sys::qp and alive during `'a`.
pub unsafe fn qp_ex<'a>(qp: *mut ffi::ibv_qp_ex) -> &'a RoxQp {
    // SAFETY: the ibv_qp_ex is the verbs_qp union, first in RoxQp.
    unsafe { &*qp.cast::<RoxQp>() }
}

/// # Safety
/// `cq` is an `ibv_cq` made by crate::sys::cq and alive during `'a`.
pub unsafe fn cq<'a>(cq: *mut ffi::ibv_cq) -> &'a RoxCq {
    // SAFETY: the ibv_cq is the first member of the verbs_cq, itself first in RoxCq.
    unsafe { &*cq.cast::<RoxCq>() }
}

/// # Safety
/// `cq` is the `ibv_cq_ex` of a CQ made by crate::sys::cq and alive during `'a`.
pub unsafe fn cq_ex<'a>(cq: *mut ffi::ibv_cq_ex) -> &'a RoxCq {
    // SAFETY: the ibv_cq_ex shares the address of the ibv_cq (both are the verbs_cq union).
    unsafe { &*cq.cast::<RoxCq>() }
}

/// # Safety
/// `srq` is an `ibv_srq` made by crate::sys::srq and alive during `'a`.
pub unsafe fn srq<'a>(srq: *mut ffi::ibv_srq) -> &'a RoxSrq {
    // SAFETY: the ibv_srq is the first member of RoxSrq.
    unsafe { &*srq.cast::<RoxSrq>() }
}

/// # Safety
/// `ah` is an `ibv_ah` made by crate::sys::pd and alive during `'a`.
pub unsafe fn ah<'a>(ah: *mut ffi::ibv_ah) -> &'a RoxAh {
    // SAFETY: the ibv_ah is the first member of RoxAh.
    unsafe { &*ah.cast::<RoxAh>() }
}

/// The SRQ a QP receives through: it outlives the QP (rox.ko refuses to destroy an SRQ that
/// QPs are attached to).
pub struct SrqRef(NonNull<RoxSrq>);

// SAFETY: a RoxSrq is shared between threads by design (its mutable state is behind its lock).
unsafe impl Send for SrqRef {}
// SAFETY: as above.
unsafe impl Sync for SrqRef {}

impl SrqRef {
    /// `None` for a null `ibv_srq`.
    ///
    /// # Safety
    /// `srq` is null or an `ibv_srq` made by crate::sys::srq that outlives the holder.
    pub unsafe fn new(srq: *mut ffi::ibv_srq) -> Option<Self> {
        NonNull::new(srq.cast::<RoxSrq>()).map(SrqRef)
    }

    pub fn get(&self) -> &RoxSrq {
        // SAFETY: alive as long as the holder (the constructor's contract).
        unsafe { self.0.as_ref() }
    }
}
