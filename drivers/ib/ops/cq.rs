// SPDX-License-Identifier: GPL-2.0
//! Trampolines of completion queues: create, resize, destroy.

use super::{errno, ucontext_of};
use crate::ib::{
    bindings as b,
    ibdev::ib_of,
    obj::{dev_of, Obj},
    CqInit, DeviceId, Udata, Verbs,
};
use kernel::ffi::{c_int, c_uint};

/// ib_core's `create_cq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `cq` is a CQ ib_core allocated
/// with the size of an `Obj` of `V`'s type, its driver data not initialised; `attr` is valid
/// for reading for the duration of the call; `attrs` is null or the uverbs attribute bundle of
/// the call.
pub(super) unsafe extern "C" fn create_cq<V: Verbs>(
    cq: *mut b::ib_cq,
    attr: *const b::ib_cq_init_attr,
    attrs: *mut b::uverbs_attr_bundle,
) -> c_int {
    // SAFETY: ib_core passes a CQ it allocated with our size and valid attributes.
    let (dev, ibdev, attr) = unsafe { (dev_of::<V>((*cq).device), (*cq).device, &*attr) };
    // SAFETY: `attrs` is null (kernel CQ) or the call's attribute bundle.
    let raw_udata = unsafe { b::rox_shim_attrs_udata(attrs) };
    // SAFETY: as above.
    let (mut udata, uctx) = unsafe { (Udata::from_raw(raw_udata), ucontext_of::<V>(raw_udata)) };
    let init = CqInit {
        cqe: attr.cqe,
        comp_vector: attr.comp_vector,
    };
    errno((|| {
        let created = V::create_cq(dev, ib_of(ibdev), uctx, &init, &mut udata)?;
        // SAFETY: fresh object; `cqe` is ours to set.
        unsafe { (*cq).cqe = created.size as c_int };
        let id = created.id;
        // SAFETY: fresh object, data not initialised.
        unsafe { Obj::<b::ib_cq, V::Cq>::init(cq, created.data) };
        if let Err(err) = V::registry(dev).insert_cq(id, cq, || V::admits(dev, uctx)) {
            // SAFETY: initialised just above; ib_core frees the memory on error.
            unsafe { Obj::<b::ib_cq, V::Cq>::destroy(cq, |data| V::destroy_cq(dev, data)) };
            return Err(err);
        }
        Ok(())
    })())
}

/// ib_core's `destroy_cq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `cq` is a live CQ this driver
/// created, passed here once, with no other callback on it running or following.
pub(super) unsafe extern "C" fn destroy_cq<V: Verbs>(
    cq: *mut b::ib_cq,
    _udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: a CQ created by `create_cq`, destroyed once.
    unsafe {
        let dev = dev_of::<V>((*cq).device);
        Obj::<b::ib_cq, V::Cq>::destroy(cq, |data| {
            V::registry(dev).remove_cq(data.device_id());
            V::destroy_cq(dev, data);
        });
    }
    0
}

/// ib_core's `resize_user_cq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `cq` is a live CQ of a `V`
/// device, created by this driver; `udata` is null (kernel caller) or the user call's udata,
/// valid for the call.
pub(super) unsafe extern "C" fn resize_user_cq<V: Verbs>(
    cq: *mut b::ib_cq,
    cqe: c_uint,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: one of our live CQs (ib_core holds it for the call).
    let (dev, ib, data) = unsafe {
        (
            dev_of::<V>((*cq).device),
            ib_of((*cq).device),
            Obj::<b::ib_cq, V::Cq>::data_of(cq),
        )
    };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    errno(V::resize_cq(dev, ib, data, cqe, &mut udata).map(|entries| {
        // SAFETY: our CQ; ib_core reports `cqe` back to user space after the call.
        unsafe { (*cq).cqe = entries as c_int };
    }))
}
