// SPDX-License-Identifier: GPL-2.0
//! How driver objects live inside ib_core's: [`Obj`] (an ib_core structure followed by the
//! driver's data), [`Container`] (the ib_device followed by the driver's state), and the
//! accessors the trampolines use to get from ib_core's pointers back to the driver's types.

use super::{bindings as b, RegisteredMr, Verbs};
use core::{
    ffi::c_void,
    mem::{size_of, MaybeUninit},
    ptr,
};
use kernel::prelude::*;

/// A driver object as ib_core allocates it: ib_core's structure first (ib_core requires offset
/// 0), then the driver's data.
///
/// # Invariants
///
/// `data` is initialised from the successful return of the create callback until the destroy
/// callback drops it; ib_core only passes initialised objects to the other callbacks.
#[repr(C)]
pub(super) struct Obj<I, D> {
    ib: I,
    data: MaybeUninit<D>,
}

impl<I, D> Obj<I, D> {
    pub(super) const SIZE: usize = {
        // ib_core allocates with kzalloc: natural alignment up to 8 bytes is guaranteed.
        assert!(core::mem::align_of::<Self>() <= 8);
        size_of::<Self>()
    };

    /// # Safety
    ///
    /// `ib` points to the `I` at the start of a live `Obj<I, D>` whose data is initialised.
    pub(super) unsafe fn data_of<'a>(ib: *const I) -> &'a D {
        // SAFETY: per the function's requirements; `Obj` is `repr(C)` with `ib` first.
        unsafe { (*ib.cast::<Self>()).data.assume_init_ref() }
    }

    /// # Safety
    ///
    /// `ib` points to the `I` at the start of an `Obj<I, D>` whose data is not initialised.
    pub(super) unsafe fn init(ib: *mut I, data: D) {
        // SAFETY: per the function's requirements.
        unsafe { (*ib.cast::<Self>()).data.write(data) };
    }

    /// Drops the data.
    ///
    /// # Safety
    ///
    /// `ib` points to the `I` at the start of an `Obj<I, D>` whose data is initialised; it is
    /// not used again.
    pub(super) unsafe fn drop_data(ib: *mut I) {
        // SAFETY: per the function's requirements.
        unsafe { (*ib.cast::<Self>()).data.assume_init_drop() };
    }

    /// Hands the data to `release` (the driver's destroy verb), then drops it: the one shape
    /// of every destroy/dealloc trampoline and of a create undone after its verb succeeded.
    ///
    /// # Safety
    ///
    /// `ib` points to the `I` at the start of an `Obj<I, D>` whose data is initialised; it is
    /// not used again.
    pub(super) unsafe fn destroy(ib: *mut I, release: impl FnOnce(&D)) {
        // SAFETY: per the function's requirements; `release` is done with the data before it
        // is dropped.
        unsafe {
            release(Self::data_of(ib));
            Self::drop_data(ib);
        }
    }
}

/// What ib_core allocates for the device: its `ib_device`, then a pointer to the driver's state.
#[repr(C)]
pub(super) struct Container {
    pub(super) ib: b::ib_device,
    pub(super) dev: *const c_void,
    /// The counter descriptors (owned by the registration).
    pub(super) counter_descs: *const b::rdma_stat_desc,
    pub(super) num_counters: usize,
}

/// The driver state of the ib_device `ibdev`.
///
/// # Safety
///
/// `ibdev` is an ib_device allocated by [`super::IbRegistration::register`] for `V` and not yet
/// deallocated (true for every callback ib_core makes).
pub(super) unsafe fn dev_of<'a, V: Verbs>(ibdev: *mut b::ib_device) -> &'a V::Dev<'a> {
    // SAFETY: per the function's requirements, `dev` points to the live `V::Dev` held by the
    // registration, which outlives every callback.
    unsafe { &*(*ibdev.cast::<Container>()).dev.cast::<V::Dev<'a>>() }
}

/// Allocates an `ib_mr` with the driver's data, as ib_core expects of reg_user_mr/get_dma_mr
/// (MRs are the one object the driver allocates itself).
pub(super) fn new_mr<D>(mr: Result<RegisteredMr<D>>) -> *mut b::ib_mr {
    let mr = match mr {
        Ok(mr) => mr,
        Err(err) => return err.to_ptr(),
    };
    let mut obj = match KBox::<Obj<b::ib_mr, D>>::new_uninit(GFP_KERNEL) {
        Ok(obj) => obj,
        // `mr.data` is dropped here: the driver's drop releases the device object.
        Err(_) => return ENOMEM.to_ptr(),
    };
    let raw = obj.as_mut_ptr();
    // SAFETY: `raw` is a fresh allocation of an `Obj`; an all-zero `ib_mr` is its initial state
    // (ib_core fills in the generic fields after we return).
    unsafe {
        ptr::addr_of_mut!((*raw).ib).write_bytes(0, 1);
        (*raw).ib.lkey = mr.lkey.get();
        (*raw).ib.rkey = mr.rkey.get();
        (*raw).data.write(mr.data);
    }
    // SAFETY: fully initialised above.
    let obj = unsafe { obj.assume_init() };
    KBox::into_raw(obj).cast::<b::ib_mr>()
}
