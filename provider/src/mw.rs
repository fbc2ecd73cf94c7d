//! Memory windows. Allocated and freed through rox.ko (plain uverbs commands; the device keeps
//! the window and its binding). Type 1 windows are bound with `ibv_bind_mw`: a BIND_MW WQE on
//! the QP's send queue whose new rkey is the window's rkey with its low byte incremented
//! (`ibv_mw.rkey` takes it at once; a failed bind completes with IBV_WC_MW_BIND_ERR). Type 2
//! windows are bound with IBV_WR_BIND_MW work requests (crate::qp, crate::qp_ex) and ended
//! with LOCAL_INV or a peer's SEND_WITH_INV.

use crate::sys::errno::{int_errno, ptr_or_errno, Errno, Result, EINVAL};
use crate::sys::ffi::{self, Zeroable};
use crate::qp::post_one;
use crate::wqe;
use core::ffi::c_int;
use core::mem::size_of_val;
use rox_uapi::verbs;

fn alloc(pd: *mut ffi::ibv_pd, mw_type: ffi::ibv_mw_type) -> Result<*mut ffi::ibv_mw> {
    let mw = Box::into_raw(Box::new(ffi::ibv_mw::zeroed()));
    let mut cmd = ffi::ibv_alloc_mw::zeroed();
    let mut resp = ffi::ib_uverbs_alloc_mw_resp::zeroed();
    // SAFETY: a live PD from libibverbs; our own ibv_mw and command/response buffers.
    let ret = unsafe {
        ffi::ibv_cmd_alloc_mw(
            pd,
            mw_type,
            mw,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp,
            size_of_val(&resp),
        )
    };
    if let Err(e) = Errno::check(ret) {
        // SAFETY: the kernel did not take it; reclaim the box made above.
        drop(unsafe { Box::from_raw(mw) });
        return Err(e);
    }
    Ok(mw)
}

pub unsafe extern "C" fn alloc_mw(
    pd: *mut ffi::ibv_pd,
    mw_type: ffi::ibv_mw_type,
) -> *mut ffi::ibv_mw {
    ptr_or_errno(alloc(pd, mw_type))
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

/// `ibv_bind_mw` of a type 1 window.
///
/// # Safety
/// Live QP and window; `mw_bind` valid (libibverbs' contract).
unsafe fn bind(
    qp: *mut ffi::ibv_qp,
    mw: *mut ffi::ibv_mw,
    mw_bind: &ffi::ibv_mw_bind,
) -> Result<()> {
    // SAFETY: per the contract.
    let (mw_type, rkey) = unsafe { ((*mw).type_, (*mw).rkey) };
    if mw_type != ffi::IBV_MW_TYPE_1 {
        return Err(EINVAL);
    }
    let new_rkey = wqe::inc_rkey(rkey);
    post_one(qp, mw_bind.wr_id, |rqp, index| {
        let mut w = wqe::new_wqe(rqp, verbs::WR_BIND_MW, mw_bind.send_flags, index)?;
        // SAFETY: per the contract.
        w.seg = unsafe { wqe::bind_seg(mw, new_rkey, &mw_bind.bind_info)? };
        Ok(w)
    })?;
    // SAFETY: per the contract; the application reads the new rkey from here.
    unsafe { (*mw).rkey = new_rkey };
    Ok(())
}

pub unsafe extern "C" fn bind_mw(
    qp: *mut ffi::ibv_qp,
    mw: *mut ffi::ibv_mw,
    mw_bind: *mut ffi::ibv_mw_bind,
) -> c_int {
    if qp.is_null() || mw.is_null() || mw_bind.is_null() {
        return EINVAL.0;
    }
    // SAFETY: libibverbs' arguments.
    int_errno(unsafe { bind(qp, mw, &*mw_bind) })
}
