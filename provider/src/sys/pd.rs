//! The entry points of the plain uverbs objects: PDs, MRs, memory windows (and `ibv_bind_mw`,
//! crate::mw) and address handles (crate::ah).

use crate::ah::{RoxAh, UdAddress};
use crate::mw;
use crate::pd::{RoxMr, RoxPd};
use crate::sys::context::RoxContext;
use crate::sys::errno::{int_errno, ptr_or_errno, Errno, Result, EINVAL};
use crate::sys::ffi::{self, DrvResp, Zeroable};
use crate::sys::objects;
use crate::sys::wr::{bind_info, MwView};
use core::ffi::{c_int, c_void};
use core::mem::size_of_val;
use rox_uapi::udata::CreateAhResp;

/// # Safety
/// `ibctx` is a live context (libibverbs' argument).
unsafe fn alloc(ibctx: *mut ffi::ibv_context) -> Result<*mut ffi::ibv_pd> {
    let mut pd = RoxPd::new();
    let mut cmd = ffi::ibv_alloc_pd::zeroed();
    let mut resp = ffi::ib_uverbs_alloc_pd_resp::zeroed();
    // SAFETY: a live context (contract); our own pd and command/response buffers.
    let ret = unsafe {
        ffi::ibv_cmd_alloc_pd(
            ibctx,
            &mut pd.ibv_pd,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp,
            size_of_val(&resp),
        )
    };
    // On failure the kernel did not take it: the box goes.
    Errno::check(ret)?;
    // The ibv_pd is the first member of RoxPd.
    Ok(Box::into_raw(pd).cast::<ffi::ibv_pd>())
}

pub unsafe extern "C" fn alloc_pd(ibctx: *mut ffi::ibv_context) -> *mut ffi::ibv_pd {
    // SAFETY: libibverbs passes a live context.
    ptr_or_errno(unsafe { alloc(ibctx) })
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

/// # Safety
/// libibverbs' arguments of reg_mr.
unsafe fn register(
    pd: *mut ffi::ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> Result<*mut ffi::ibv_mr> {
    let mut mr = RoxMr::new();
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
            &mut mr.vmr,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp,
            size_of_val(&resp),
        )
    };
    // On failure the kernel did not take it: the box goes.
    Errno::check(ret)?;
    // The ibv_mr is the first member of the verbs_mr, itself first in RoxMr.
    Ok(Box::into_raw(mr).cast::<ffi::ibv_mr>())
}

pub unsafe extern "C" fn reg_mr(
    pd: *mut ffi::ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> *mut ffi::ibv_mr {
    // SAFETY: libibverbs' arguments.
    ptr_or_errno(unsafe { register(pd, addr, length, hca_va, access) })
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

/// # Safety
/// `pd` is a live PD (libibverbs' argument).
unsafe fn alloc_window(
    pd: *mut ffi::ibv_pd,
    mw_type: ffi::ibv_mw_type,
) -> Result<*mut ffi::ibv_mw> {
    let mut mw = Box::new(ffi::ibv_mw::zeroed());
    let mut cmd = ffi::ibv_alloc_mw::zeroed();
    let mut resp = ffi::ib_uverbs_alloc_mw_resp::zeroed();
    // SAFETY: a live PD (contract); our own ibv_mw and command/response buffers.
    let ret = unsafe {
        ffi::ibv_cmd_alloc_mw(
            pd,
            mw_type,
            &mut *mw,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp,
            size_of_val(&resp),
        )
    };
    // On failure the kernel did not take it: the box goes.
    Errno::check(ret)?;
    Ok(Box::into_raw(mw))
}

pub unsafe extern "C" fn alloc_mw(
    pd: *mut ffi::ibv_pd,
    mw_type: ffi::ibv_mw_type,
) -> *mut ffi::ibv_mw {
    // SAFETY: libibverbs passes a live PD.
    ptr_or_errno(unsafe { alloc_window(pd, mw_type) })
}

pub unsafe extern "C" fn dealloc_mw(mw: *mut ffi::ibv_mw) -> c_int {
    // SAFETY: `mw` was made by alloc_mw.
    let ret = unsafe { ffi::ibv_cmd_dealloc_mw(mw) };
    if ret == 0 {
        // SAFETY: destroyed in the kernel; the box is ours to free.
        drop(unsafe { Box::from_raw(mw) });
    }
    int_errno(Errno::check(ret))
}

/// `ibv_bind_mw` of a type 1 window (crate::mw).
pub unsafe extern "C" fn bind_mw(
    ibqp: *mut ffi::ibv_qp,
    mw: *mut ffi::ibv_mw,
    mw_bind: *mut ffi::ibv_mw_bind,
) -> c_int {
    if ibqp.is_null() || mw.is_null() || mw_bind.is_null() {
        return EINVAL.0;
    }
    // SAFETY: libibverbs' arguments: a QP made by crate::sys::qp of a live context, a live
    // window, a bind request whose MR is live or null.
    let (qp, hw, window, mw_bind, info) = unsafe {
        let mw_bind = &*mw_bind;
        (
            objects::qp(ibqp),
            RoxContext::from_ibv((*ibqp).context).hw(),
            MwView::of(mw),
            mw_bind,
            bind_info(&mw_bind.bind_info),
        )
    };
    let Some(window) = window else {
        return EINVAL.0;
    };
    match mw::bind(qp, hw, window, mw_bind.wr_id, mw_bind.send_flags, &info) {
        Ok(new_rkey) => {
            // SAFETY: a live window; the application reads the new rkey from here.
            unsafe { (*mw).rkey = new_rkey.get() };
            0
        }
        Err(e) => e.0,
    }
}

/// # Safety
/// `pd` is a live PD (libibverbs' argument).
unsafe fn create_address(
    pd: *mut ffi::ibv_pd,
    attr: &mut ffi::ibv_ah_attr,
) -> Result<*mut ffi::ibv_ah> {
    let mut ah = RoxAh::new();
    let mut resp = DrvResp::<ffi::ib_uverbs_create_ah_resp, CreateAhResp>::new();
    // SAFETY: arguments from libibverbs; our own ibv_ah (stable heap address) and a response
    // buffer of the size given (core response followed by rox's).
    let ret = unsafe {
        ffi::ibv_cmd_create_ah(pd, &mut ah.ibv_ah, attr, &mut resp.core, size_of_val(&resp))
    };
    // On failure the kernel has no AH: the box goes.
    Errno::check(ret)?;
    // SAFETY: the raw bytes of the GID union (16 bytes, any value valid).
    let dgid = unsafe { attr.grh.dgid.raw };
    ah.addr = UdAddress::new(&attr.grh, dgid, &resp.drv);
    // The ibv_ah is the first member of RoxAh.
    Ok(Box::into_raw(ah).cast::<ffi::ibv_ah>())
}

pub unsafe extern "C" fn create_ah(
    pd: *mut ffi::ibv_pd,
    attr: *mut ffi::ibv_ah_attr,
) -> *mut ffi::ibv_ah {
    // SAFETY: libibverbs passes a live PD and a valid attribute struct.
    ptr_or_errno(unsafe { create_address(pd, &mut *attr) })
}

pub unsafe extern "C" fn destroy_ah(ah: *mut ffi::ibv_ah) -> c_int {
    // SAFETY: libibverbs passes an AH made by create_ah.
    let ret = unsafe { ffi::ibv_cmd_destroy_ah(ah) };
    if ret == 0 {
        // SAFETY: destroyed in the kernel; the RoxAh box is ours to free.
        drop(unsafe { Box::from_raw(ah.cast::<RoxAh>()) });
    }
    int_errno(Errno::check(ret))
}
