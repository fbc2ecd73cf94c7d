// SPDX-License-Identifier: GPL-2.0
//! Trampolines of memory regions (user, DMA, fast-registration; `advise_mr` for on-demand
//! paging) and memory windows.

use super::errno;
use crate::hw::uapi::ids::Key;
use crate::ib::{
    attr::MrAdvice,
    bindings as b,
    ibdev::ib_of,
    obj::{dev_of, new_mr, Obj},
    Udata, UserRange, Verbs,
};
use kernel::{
    ffi::{c_int, c_uint},
    prelude::*,
};

/// ib_core's `alloc_mw` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `mw` is a MW ib_core allocated
/// with the size of an `Obj` of `V`'s type, its driver data not initialised; `udata` is null
/// (kernel caller) or the user call's udata, valid for the call.
pub(super) unsafe extern "C" fn alloc_mw<V: Verbs>(
    mw: *mut b::ib_mw,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes an MW it allocated with our size, in one of our PDs.
    let (dev, pd, mw_type) = unsafe {
        (
            dev_of::<V>((*mw).device),
            Obj::<b::ib_pd, V::Pd>::data_of((*mw).pd),
            (*mw).type_,
        )
    };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    errno(
        V::alloc_mw(dev, pd, mw_type, &mut udata).map(|(rkey, data)| {
            // SAFETY: fresh object, data not initialised; ib_core reads `rkey` after we return.
            unsafe {
                (*mw).rkey = rkey.get();
                Obj::<b::ib_mw, V::Mw>::init(mw, data)
            }
        }),
    )
}

/// ib_core's `dealloc_mw` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `mw` is a live MW this driver
/// created, passed here once, with no other callback on it running or following.
pub(super) unsafe extern "C" fn dealloc_mw<V: Verbs>(mw: *mut b::ib_mw) -> c_int {
    // SAFETY: an MW created by `alloc_mw`, destroyed once.
    unsafe {
        let dev = dev_of::<V>((*mw).device);
        Obj::<b::ib_mw, V::Mw>::destroy(mw, |data| V::dealloc_mw(dev, data));
    }
    0
}

/// ib_core's `reg_user_mr` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `pd` is a live PD of a `V`
/// device, created by this driver; `udata` is null (kernel caller) or the user call's udata,
/// valid for the call.
pub(super) unsafe extern "C" fn reg_user_mr<V: Verbs>(
    pd: *mut b::ib_pd,
    start: u64,
    length: u64,
    iova: u64,
    access: c_int,
    _dmah: *mut b::ib_dmah,
    udata: *mut b::ib_udata,
) -> *mut b::ib_mr {
    // SAFETY: ib_core passes one of our live PDs.
    let (dev, pd_data, ibdev) = unsafe {
        let ibdev = (*pd).device;
        (
            dev_of::<V>(ibdev),
            Obj::<b::ib_pd, V::Pd>::data_of(pd),
            ibdev,
        )
    };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    let range = UserRange {
        start,
        length,
        iova,
    };
    new_mr(V::reg_user_mr(
        dev,
        ib_of(ibdev),
        pd_data,
        range,
        access as u32,
        &mut udata,
    ))
}

/// ib_core's `advise_mr` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `pd` is a live PD of a `V`
/// device, created by this driver; `sg_list` holds `num_sge` entries.
pub(super) unsafe extern "C" fn advise_mr<V: Verbs>(
    pd: *mut b::ib_pd,
    advice: b::ib_uverbs_advise_mr_advice,
    flags: u32,
    sg_list: *mut b::ib_sge,
    num_sge: u32,
    _attrs: *mut b::uverbs_attr_bundle,
) -> c_int {
    // SAFETY: ib_core passes one of our live PDs and `num_sge` SGEs it copied in.
    let (dev, pd_data, sg) = unsafe {
        (
            dev_of::<V>((*pd).device),
            Obj::<b::ib_pd, V::Pd>::data_of(pd),
            core::slice::from_raw_parts(sg_list, num_sge as usize),
        )
    };
    let mut sges = KVec::with_capacity(sg.len(), GFP_KERNEL);
    let sges = match &mut sges {
        Ok(v) => {
            for s in sg {
                // Capacity reserved above.
                let _ = v.push((s.addr, s.length, Key::from_raw(s.lkey)), GFP_KERNEL);
            }
            v
        }
        Err(_) => return ENOMEM.to_errno(),
    };
    let flush = flags & b::ib_uverbs_advise_mr_flag_IB_UVERBS_ADVISE_MR_FLAG_FLUSH != 0;
    let Some(advice) = MrAdvice::from_raw(advice) else {
        return EOPNOTSUPP.to_errno();
    };
    errno(V::advise_mr(dev, pd_data, advice, flush, sges))
}

/// ib_core's `get_dma_mr` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `pd` is a live PD of a `V`
/// device, created by this driver.
pub(super) unsafe extern "C" fn get_dma_mr<V: Verbs>(
    pd: *mut b::ib_pd,
    access: c_int,
) -> *mut b::ib_mr {
    // SAFETY: ib_core passes one of our live PDs.
    let (dev, pd_data) = unsafe {
        (
            dev_of::<V>((*pd).device),
            Obj::<b::ib_pd, V::Pd>::data_of(pd),
        )
    };
    new_mr(V::get_dma_mr(dev, pd_data, access as u32))
}

/// ib_core's `dereg_mr` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `mr` is a live MR this driver
/// created, passed here once, with no other callback on it running or following.
pub(super) unsafe extern "C" fn dereg_mr<V: Verbs>(
    mr: *mut b::ib_mr,
    _udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: an MR made by `new_mr` (a `KBox<Obj<ib_mr, V::Mr>>`), deregistered once.
    unsafe {
        let dev = dev_of::<V>((*mr).device);
        // `Obj` keeps its data in `MaybeUninit`: drop it, then free the allocation.
        Obj::<b::ib_mr, V::Mr>::destroy(mr, |data| V::dereg_mr(dev, data));
        drop(KBox::from_raw(mr.cast::<Obj<b::ib_mr, V::Mr>>()));
    }
    0
}

/// ib_core's `alloc_mr` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `pd` is a live PD of a `V`
/// device, created by this driver.
pub(super) unsafe extern "C" fn alloc_mr<V: Verbs>(
    pd: *mut b::ib_pd,
    mr_type: b::ib_mr_type,
    max_num_sg: u32,
) -> *mut b::ib_mr {
    if mr_type != b::ib_mr_type_IB_MR_TYPE_MEM_REG {
        return EOPNOTSUPP.to_ptr();
    }
    // SAFETY: ib_core passes one of our live PDs.
    let (dev, pd_data) = unsafe {
        (
            dev_of::<V>((*pd).device),
            Obj::<b::ib_pd, V::Pd>::data_of(pd),
        )
    };
    new_mr(V::alloc_mr(dev, pd_data, max_num_sg))
}

/// `ib_sg_to_pages`' callback: one page of the mapping.
///
/// # Safety
///
/// `mr` is an MR of a `V` device (made by `new_mr`, so an `Obj<ib_mr, V::Mr>` with
/// initialised data), alive for the call: `ib_sg_to_pages` only calls this with the MR
/// `map_mr_sg` passed it.
unsafe extern "C" fn mr_set_page<V: Verbs>(mr: *mut b::ib_mr, addr: u64) -> c_int {
    // SAFETY: per the function's requirements.
    let data = unsafe { Obj::<b::ib_mr, V::Mr>::data_of(mr) };
    errno(V::mr_set_page(data, addr))
}

/// ib_core's `map_mr_sg` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `mr` is a live MR of a `V`
/// device, created by this driver; `sg` is a DMA-mapped scatterlist of `sg_nents` entries,
/// `sg_offset` null or valid.
pub(super) unsafe extern "C" fn map_mr_sg<V: Verbs>(
    mr: *mut b::ib_mr,
    sg: *mut b::scatterlist,
    sg_nents: c_int,
    sg_offset: *mut c_uint,
) -> c_int {
    // SAFETY: ib_map_mr_sg passes one of our live MRs (every MR of this device is made by
    // `new_mr`) and a DMA-mapped scatterlist of `sg_nents` entries; MRs that are not
    // fast-registration ones are refused by `mr_clear_pages` before any page is set.
    let data = unsafe { Obj::<b::ib_mr, V::Mr>::data_of(mr) };
    if let Err(err) = V::mr_clear_pages(data) {
        return err.to_errno();
    }
    // SAFETY: as above; `mr_set_page::<V>` is called with this MR only (its contract), and
    // `ib_sg_to_pages` sets the MR's iova/length from the scatterlist.
    unsafe { b::ib_sg_to_pages(mr, sg, sg_nents, sg_offset, Some(mr_set_page::<V>)) }
}
