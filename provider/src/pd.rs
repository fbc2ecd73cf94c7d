//! Protection domains and memory regions: plain uverbs commands (rox.ko pins MR pages and
//! programs the device; no rox udata).

use crate::sys::errno::{int_errno, ptr_or_errno, Errno, Result};
use crate::sys::ffi::{self, Zeroable};
use core::ffi::{c_int, c_void};
use core::mem::{offset_of, size_of_val};

#[repr(C)]
pub struct RoxPd {
    pub ibv_pd: ffi::ibv_pd,
}
const _: () = assert!(offset_of!(RoxPd, ibv_pd) == 0);

#[repr(C)]
pub struct RoxMr {
    pub vmr: ffi::verbs_mr,
}
const _: () = assert!(offset_of!(RoxMr, vmr) == 0);

fn alloc(ibctx: *mut ffi::ibv_context) -> Result<*mut ffi::ibv_pd> {
    let pd = Box::into_raw(Box::new(RoxPd {
        ibv_pd: Zeroable::zeroed(),
    }));
    let mut cmd = ffi::ibv_alloc_pd::zeroed();
    let mut resp = ffi::ib_uverbs_alloc_pd_resp::zeroed();
    // SAFETY: a live context from libibverbs; our own pd and command/response buffers.
    let ret = unsafe {
        ffi::ibv_cmd_alloc_pd(
            ibctx,
            &mut (*pd).ibv_pd,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp,
            size_of_val(&resp),
        )
    };
    if let Err(e) = Errno::check(ret) {
        // SAFETY: the kernel did not take it; reclaim the box made above.
        drop(unsafe { Box::from_raw(pd) });
        return Err(e);
    }
    // SAFETY: `pd` is live; the ibv_pd is its first member.
    Ok(unsafe { &raw mut (*pd).ibv_pd })
}

pub unsafe extern "C" fn alloc_pd(ibctx: *mut ffi::ibv_context) -> *mut ffi::ibv_pd {
    ptr_or_errno(alloc(ibctx))
}

pub unsafe extern "C" fn dealloc_pd(pd: *mut ffi::ibv_pd) -> c_int {
    // SAFETY: `pd` was made by alloc_pd.
    let ret = unsafe { ffi::ibv_cmd_dealloc_pd(pd) };
    if ret == 0 {
        // SAFETY: destroyed in the kernel; the RoxPd box is ours to free.
        drop(unsafe { Box::from_raw(pd.cast::<RoxPd>()) });
    }
    int_errno(Errno::check(ret))
}

fn register(
    pd: *mut ffi::ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> Result<*mut ffi::ibv_mr> {
    let mr = Box::into_raw(Box::new(RoxMr {
        vmr: Zeroable::zeroed(),
    }));
    let mut cmd = ffi::ibv_reg_mr::zeroed();
    let mut resp = ffi::ib_uverbs_reg_mr_resp::zeroed();
    // SAFETY: arguments from libibverbs; our own verbs_mr and command/response buffers.
    let ret = unsafe {
        ffi::ibv_cmd_reg_mr(
            pd,
            addr,
            length,
            hca_va,
            access,
            &mut (*mr).vmr,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp,
            size_of_val(&resp),
        )
    };
    if let Err(e) = Errno::check(ret) {
        // SAFETY: the kernel did not take it; reclaim the box made above.
        drop(unsafe { Box::from_raw(mr) });
        return Err(e);
    }
    // SAFETY: `mr` is live.
    Ok(unsafe { &raw mut (*mr).vmr.ibv_mr })
}

pub unsafe extern "C" fn reg_mr(
    pd: *mut ffi::ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> *mut ffi::ibv_mr {
    ptr_or_errno(register(pd, addr, length, hca_va, access))
}

pub unsafe extern "C" fn dereg_mr(vmr: *mut ffi::verbs_mr) -> c_int {
    // SAFETY: `vmr` was made by reg_mr.
    let ret = unsafe { ffi::ibv_cmd_dereg_mr(vmr) };
    if ret == 0 {
        // SAFETY: deregistered; the RoxMr box is ours to free.
        drop(unsafe { Box::from_raw(vmr.cast::<RoxMr>()) });
    }
    int_errno(Errno::check(ret))
}
