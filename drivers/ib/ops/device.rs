// SPDX-License-Identifier: GPL-2.0
//! Trampolines of the device itself: attributes, port, GIDs, counters, ucontexts and PDs.

use super::errno;
use crate::ib::{
    bindings as b,
    ibdev::ib_of,
    mmap::UcontextRef,
    obj::{dev_of, Container, Obj},
    Udata, Verbs,
};
use core::ffi::c_void;
use kernel::{ffi::c_int, prelude::*};

/// ib_core's `query_device` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ibdev` is the ib_device
/// registered for `V` (not yet deallocated); `attr` is valid for reading and writing for the
/// duration of the call; `udata` is null (kernel caller) or the user call's udata, valid for
/// the call.
pub(super) unsafe extern "C" fn query_device<V: Verbs>(
    ibdev: *mut b::ib_device,
    attr: *mut b::ib_device_attr,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes its device and a valid attribute buffer.
    let (dev, attr) = unsafe { (dev_of::<V>(ibdev), &mut *attr) };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    errno(V::query_device(dev, &mut udata).map(|a| a.write_to(attr)))
}

/// ib_core's `query_port` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ibdev` is the ib_device
/// registered for `V` (not yet deallocated); `attr` is valid for reading and writing for the
/// duration of the call.
pub(super) unsafe extern "C" fn query_port<V: Verbs>(
    ibdev: *mut b::ib_device,
    port: u32,
    attr: *mut b::ib_port_attr,
) -> c_int {
    // SAFETY: ib_core passes its device and a valid, zeroed attribute buffer.
    let (dev, attr) = unsafe { (dev_of::<V>(ibdev), &mut *attr) };
    errno(V::query_port(dev, ib_of(ibdev), port).map(|a| a.write_to(attr)))
}

/// ib_core's `get_port_immutable` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ibdev` is the ib_device
/// registered for `V` (not yet deallocated); `imm` is valid for reading and writing for the
/// duration of the call.
pub(super) unsafe extern "C" fn get_port_immutable<V: Verbs>(
    ibdev: *mut b::ib_device,
    port: u32,
    imm: *mut b::ib_port_immutable,
) -> c_int {
    // SAFETY: ib_core passes its device and a valid buffer.
    let (dev, imm) = unsafe { (dev_of::<V>(ibdev), &mut *imm) };
    errno(V::get_port_immutable(dev, port).map(|i| i.write_to(imm)))
}

/// ib_core's `get_link_layer` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: nothing beyond being called by
/// ib_core (the arguments are not dereferenced).
pub(super) unsafe extern "C" fn get_link_layer(
    _ibdev: *mut b::ib_device,
    _port: u32,
) -> b::rdma_link_layer {
    b::rdma_link_layer_IB_LINK_LAYER_ETHERNET
}

/// ib_core's `query_pkey` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `pkey` is valid for reading and
/// writing for the duration of the call.
pub(super) unsafe extern "C" fn query_pkey(
    _ibdev: *mut b::ib_device,
    _port: u32,
    index: u16,
    pkey: *mut u16,
) -> c_int {
    /// The default (full membership) P_Key, the only entry of a RoCE port's table.
    const DEFAULT_PKEY: u16 = 0xffff;
    if index != 0 {
        return EINVAL.to_errno();
    }
    // SAFETY: ib_core passes a valid output pointer.
    unsafe { *pkey = DEFAULT_PKEY };
    0
}

/// ib_core's `add_gid` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `attr` is valid for reading for
/// the duration of the call.
pub(super) unsafe extern "C" fn add_gid<V: Verbs>(
    attr: *const b::ib_gid_attr,
    _ctx: *mut *mut c_void,
) -> c_int {
    // SAFETY: ib_core passes a valid GID attribute of one of our devices.
    let (dev, attr) = unsafe { (dev_of::<V>((*attr).device), &*attr) };
    // SAFETY: every bit pattern of the GID union is a valid byte array.
    let gid = unsafe { &attr.gid.raw };
    errno(V::set_gid(dev, attr.index.into(), Some(gid)))
}

/// ib_core's `del_gid` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `attr` is valid for reading for
/// the duration of the call.
pub(super) unsafe extern "C" fn del_gid<V: Verbs>(
    attr: *const b::ib_gid_attr,
    _ctx: *mut *mut c_void,
) -> c_int {
    // SAFETY: ib_core passes a valid GID attribute of one of our devices.
    let (dev, attr) = unsafe { (dev_of::<V>((*attr).device), &*attr) };
    errno(V::set_gid(dev, attr.index.into(), None))
}

/// ib_core's `alloc_ucontext` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `uctx` is a ucontext ib_core
/// allocated with the size of an `Obj` of `V`'s type, its driver data not initialised; `udata`
/// is null (kernel caller) or the user call's udata, valid for the call.
pub(super) unsafe extern "C" fn alloc_ucontext<V: Verbs>(
    uctx: *mut b::ib_ucontext,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes a ucontext it allocated with our size for one of our devices.
    let dev = unsafe { dev_of::<V>((*uctx).device) };
    // SAFETY: `udata` is valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    // SAFETY: `uctx` is alive until dealloc_ucontext.
    let uref = unsafe { UcontextRef::from_raw(uctx) };
    errno(V::alloc_ucontext(dev, uref, &mut udata).map(|data| {
        // SAFETY: fresh object, data not initialised.
        unsafe { Obj::<b::ib_ucontext, V::Ucontext>::init(uctx, data) }
    }))
}

/// ib_core's `dealloc_ucontext` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `uctx` is a live ucontext this
/// driver created, passed here once, with no other callback on it running or following.
pub(super) unsafe extern "C" fn dealloc_ucontext<V: Verbs>(uctx: *mut b::ib_ucontext) {
    // SAFETY: a ucontext created by `alloc_ucontext`, destroyed once.
    unsafe {
        let dev = dev_of::<V>((*uctx).device);
        Obj::<b::ib_ucontext, V::Ucontext>::destroy(uctx, |data| V::dealloc_ucontext(dev, data));
    }
}

/// ib_core's `disassociate_ucontext` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: nothing beyond being called by
/// ib_core (the arguments are not dereferenced).
pub(super) unsafe extern "C" fn disassociate_ucontext(_uctx: *mut b::ib_ucontext) {
    // Nothing to do: ib_core zaps the user mappings of our mmap entries itself, and the
    // objects are destroyed through the ordinary callbacks.
}

/// ib_core's `alloc_pd` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `pd` is a PD ib_core allocated
/// with the size of an `Obj` of `V`'s type, its driver data not initialised; `udata` is null
/// (kernel caller) or the user call's udata, valid for the call.
pub(super) unsafe extern "C" fn alloc_pd<V: Verbs>(
    pd: *mut b::ib_pd,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes a PD it allocated with our size for one of our devices.
    let dev = unsafe { dev_of::<V>((*pd).device) };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    errno(V::alloc_pd(dev, &mut udata).map(|data| {
        // SAFETY: fresh object, data not initialised.
        unsafe { Obj::<b::ib_pd, V::Pd>::init(pd, data) }
    }))
}

/// ib_core's `dealloc_pd` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `pd` is a live PD this driver
/// created, passed here once, with no other callback on it running or following.
pub(super) unsafe extern "C" fn dealloc_pd<V: Verbs>(
    pd: *mut b::ib_pd,
    _udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: a PD created by `alloc_pd`, destroyed once.
    unsafe {
        let dev = dev_of::<V>((*pd).device);
        Obj::<b::ib_pd, V::Pd>::destroy(pd, |data| V::dealloc_pd(dev, data));
    }
    0
}

/// ib_core's `alloc_hw_port_stats` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ibdev` is the ib_device
/// registered for `V` (not yet deallocated).
pub(super) unsafe extern "C" fn alloc_hw_port_stats(
    ibdev: *mut b::ib_device,
    _port: u32,
) -> *mut b::rdma_hw_stats {
    // SAFETY: one of our devices; the descriptors live as long as the registration, which
    // outlives every use ib_core makes of them.
    unsafe {
        let container = ibdev.cast::<Container>();
        b::rdma_alloc_hw_stats_struct(
            (*container).counter_descs,
            (*container).num_counters as c_int,
            b::RDMA_HW_STATS_DEFAULT_LIFESPAN as usize,
        )
    }
}

/// ib_core's `get_hw_stats` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ibdev` is the ib_device
/// registered for `V` (not yet deallocated); `stats` is valid for reading and writing for the
/// duration of the call.
pub(super) unsafe extern "C" fn get_hw_stats<V: Verbs>(
    ibdev: *mut b::ib_device,
    stats: *mut b::rdma_hw_stats,
    _port: u32,
    _index: c_int,
) -> c_int {
    // SAFETY: one of our devices and a counter structure `alloc_hw_port_stats` made, whose
    // `value` array holds `num_counters` entries; ib_core holds its lock during the call.
    let (dev, values) = unsafe {
        let count = (*stats).num_counters as usize;
        (dev_of::<V>(ibdev), (*stats).value.as_mut_slice(count))
    };
    match V::read_counters(dev, values) {
        Ok(()) => values.len() as c_int,
        Err(err) => err.to_errno(),
    }
}
