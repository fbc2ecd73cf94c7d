// SPDX-License-Identifier: GPL-2.0
//! Trampolines of address handles: create (kernel and user), query, destroy.

use super::errno;
use crate::ib::{
    attr::AhAttr,
    bindings as b,
    obj::{dev_of, Obj},
    Udata, Verbs,
};
use kernel::ffi::c_int;

/// ib_core's `create_ah` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ah` is a AH ib_core allocated
/// with the size of an `Obj` of `V`'s type, its driver data not initialised; `init` is valid
/// for reading and writing for the duration of the call; `udata` is null (kernel caller) or the
/// user call's udata, valid for the call.
pub(super) unsafe extern "C" fn create_ah<V: Verbs>(
    ah: *mut b::ib_ah,
    init: *mut b::rdma_ah_init_attr,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes an AH it allocated with our size and a valid address.
    let (dev, attr) = unsafe { (dev_of::<V>((*ah).device), &*(*init).ah_attr) };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    errno(
        V::create_ah(dev, &AhAttr::from_raw(attr), &mut udata).map(|data| {
            // SAFETY: fresh object, data not initialised.
            unsafe { Obj::<b::ib_ah, V::Ah>::init(ah, data) }
        }),
    )
}

/// ib_core's `query_ah` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ah` is a live AH of a `V`
/// device, created by this driver; `attr` is valid for reading and writing for the duration of
/// the call.
pub(super) unsafe extern "C" fn query_ah<V: Verbs>(
    ah: *mut b::ib_ah,
    attr: *mut b::rdma_ah_attr,
) -> c_int {
    // SAFETY: one of our live AHs and a valid output buffer.
    let (dev, data, attr) = unsafe {
        (
            dev_of::<V>((*ah).device),
            Obj::<b::ib_ah, V::Ah>::data_of(ah),
            &mut *attr,
        )
    };
    errno(V::query_ah(dev, data).map(|a| a.write_to(attr)))
}

/// ib_core's `destroy_ah` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ah` is a live AH this driver
/// created, passed here once, with no other callback on it running or following.
pub(super) unsafe extern "C" fn destroy_ah<V: Verbs>(ah: *mut b::ib_ah, _flags: u32) -> c_int {
    // SAFETY: an AH created by `create_ah`, destroyed once.
    unsafe {
        let dev = dev_of::<V>((*ah).device);
        Obj::<b::ib_ah, V::Ah>::destroy(ah, |data| V::destroy_ah(dev, data));
    }
    0
}
