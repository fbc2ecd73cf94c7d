// SPDX-License-Identifier: GPL-2.0
//! Trampolines of shared receive queues: create, modify, query, destroy.

use super::{errno, ucontext_of, xrcd::xrcd_num};
use crate::ib::{
    attr::{SrqAttr, SrqAttrMask},
    bindings as b,
    ibdev::ib_of,
    obj::{dev_of, Obj},
    xrcd::XrcSrqInit,
    DeviceId, Udata, Verbs,
};
use kernel::{ffi::c_int, prelude::*};

/// ib_core's `create_srq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `srq` is a SRQ ib_core
/// allocated with the size of an `Obj` of `V`'s type, its driver data not initialised; `init`
/// is valid for reading and writing for the duration of the call; `udata` is null (kernel
/// caller) or the user call's udata, valid for the call.
pub(super) unsafe extern "C" fn create_srq<V: Verbs>(
    srq: *mut b::ib_srq,
    init: *mut b::ib_srq_init_attr,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes an SRQ it allocated with our size (pd set) and valid attributes.
    let (dev, ibdev, init, pd) = unsafe {
        (
            dev_of::<V>((*srq).device),
            (*srq).device,
            &mut *init,
            Obj::<b::ib_pd, V::Pd>::data_of((*srq).pd),
        )
    };
    let xrc = match init.srq_type {
        b::ib_srq_type_IB_SRQT_BASIC => None,
        // SAFETY: ib_core sets an XRC SRQ's domain and CQ (of this device, alive while the
        // SRQ is) in `ext`.
        b::ib_srq_type_IB_SRQT_XRC => unsafe {
            let (cq, xrcd) = (init.ext.cq, init.ext.__bindgen_anon_1.xrc.xrcd);
            if cq.is_null() || xrcd.is_null() {
                return EINVAL.to_errno();
            }
            Some(XrcSrqInit {
                xrcd: xrcd_num(xrcd),
                cq: Obj::<b::ib_cq, V::Cq>::data_of(cq).device_id(),
            })
        },
        _ => return EOPNOTSUPP.to_errno(),
    };
    // SAFETY: `udata` is null or valid for this call.
    let (mut udata_w, uctx) = unsafe { (Udata::from_raw(udata), ucontext_of::<V>(udata)) };
    errno((|| {
        let mut attr = SrqAttr::from_raw(&init.attr);
        attr.xrc = xrc;
        let created = V::create_srq(dev, ib_of(ibdev), uctx, pd, &mut attr, &mut udata_w)?;
        attr.write_to(&mut init.attr);
        let id = created.id;
        if xrc.is_some() {
            // SAFETY: our fresh SRQ; ib_core reports the number to the process (the XRCETH
            // its peers name).
            unsafe { (*srq).ext.__bindgen_anon_1.xrc.srq_num = id };
        }
        // SAFETY: fresh object, data not initialised.
        unsafe { Obj::<b::ib_srq, V::Srq>::init(srq, created.data) };
        if let Err(err) = V::registry(dev).insert_srq(id, srq, || V::admits(dev, uctx)) {
            // SAFETY: initialised just above; ib_core frees the memory on error.
            unsafe { Obj::<b::ib_srq, V::Srq>::destroy(srq, |data| V::destroy_srq(dev, data)) };
            return Err(err);
        }
        Ok(())
    })())
}

/// ib_core's `modify_srq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `srq` is a live SRQ of a `V`
/// device, created by this driver; `attr` is valid for reading and writing for the duration of
/// the call; `udata` is null (kernel caller) or the user call's udata, valid for the call.
pub(super) unsafe extern "C" fn modify_srq<V: Verbs>(
    srq: *mut b::ib_srq,
    attr: *mut b::ib_srq_attr,
    mask: b::ib_srq_attr_mask,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: one of our live SRQs and valid attributes.
    let (dev, data, attr) = unsafe {
        (
            dev_of::<V>((*srq).device),
            Obj::<b::ib_srq, V::Srq>::data_of(srq),
            &*attr,
        )
    };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    // SAFETY: a live SRQ belongs to a registered device.
    let ib = ib_of(unsafe { (*srq).device });
    let (attr, mask) = (SrqAttr::from_raw(attr), SrqAttrMask::from_bits(mask));
    errno(V::modify_srq(dev, ib, data, &attr, mask, &mut udata))
}

/// ib_core's `query_srq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `srq` is a live SRQ of a `V`
/// device, created by this driver; `attr` is valid for reading and writing for the duration of
/// the call.
pub(super) unsafe extern "C" fn query_srq<V: Verbs>(
    srq: *mut b::ib_srq,
    attr: *mut b::ib_srq_attr,
) -> c_int {
    // SAFETY: one of our live SRQs and a valid output buffer.
    let (dev, data, attr) = unsafe {
        (
            dev_of::<V>((*srq).device),
            Obj::<b::ib_srq, V::Srq>::data_of(srq),
            &mut *attr,
        )
    };
    errno(V::query_srq(dev, data).map(|a| a.write_to(attr)))
}

/// ib_core's `destroy_srq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `srq` is a live SRQ this driver
/// created, passed here once, with no other callback on it running or following.
pub(super) unsafe extern "C" fn destroy_srq<V: Verbs>(
    srq: *mut b::ib_srq,
    _udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: an SRQ created by `create_srq`, destroyed once.
    unsafe {
        let dev = dev_of::<V>((*srq).device);
        Obj::<b::ib_srq, V::Srq>::destroy(srq, |data| {
            V::registry(dev).remove_srq(data.device_id());
            V::destroy_srq(dev, data);
        });
    }
    0
}
