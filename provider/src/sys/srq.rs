//! The SRQ entry points: create, modify (limit, resize), query and destroy through
//! `ibv_cmd_*`, posting through crate::srq.

use crate::srq::RoxSrq;
use crate::sys::context::RoxContext;
use crate::sys::errno::{int_errno, ptr_or_errno, Errno, Result, EINVAL};
use crate::sys::ffi::{self, DrvCmd, DrvResp, Zeroable};
use crate::sys::objects;
use crate::sys::qp::report;
use crate::sys::wr::WrList;
use crate::wq::ring_depth;
use core::ffi::c_int;
use core::mem::size_of_val;
use rox_uapi::udata::{CreateSrqResp, ModifySrqReq};

/// # Safety
/// `pd` is a live PD of a context made by alloc_context (libibverbs' argument).
pub(super) unsafe fn create(
    pd: *mut ffi::ibv_pd,
    init_attr: &mut ffi::ibv_srq_init_attr,
) -> Result<*mut ffi::ibv_srq> {
    // SAFETY: per the contract.
    let ctx = unsafe { RoxContext::from_ibv((*pd).context) };
    let limits = &ctx.hw().limits;
    let (mut srq, req) = RoxSrq::new(&init_attr.attr, limits)?;
    let mut cmd = DrvCmd::<ffi::ibv_create_srq, _>::new(req);
    let mut resp = DrvResp::<ffi::ib_uverbs_create_srq_resp, CreateSrqResp>::new();
    // SAFETY: our own ibv_srq (stable heap address: the kernel keeps it as user_handle) and
    // command/response buffers of the sizes given.
    let ret = unsafe {
        ffi::ibv_cmd_create_srq(
            pd,
            &mut srq.vsrq.srq,
            init_attr,
            &mut cmd.core,
            size_of_val(&cmd),
            &mut resp.core,
            size_of_val(&resp),
        )
    };
    // On failure the kernel has no SRQ: the box goes (unmapping the ring).
    Errno::check(ret)?;
    // ibv_cmd_create_srq copied the granted attributes into init_attr.attr.
    srq.max_sge = init_attr.attr.max_sge.min(limits.max_srq_sge);
    let slot = ctx.check_db_slot(resp.drv.db_slot);
    let srq = Box::into_raw(srq);
    match slot {
        // SAFETY: `srq` is live and not yet handed out.
        Ok(slot) => unsafe { (*srq).db_slot = slot },
        Err(e) => {
            // SAFETY: the SRQ was just created; undo it.
            unsafe { destroy(srq.cast::<ffi::ibv_srq>()) };
            return Err(e);
        }
    }
    Ok(srq.cast::<ffi::ibv_srq>())
}

pub unsafe extern "C" fn create_srq(
    pd: *mut ffi::ibv_pd,
    attr: *mut ffi::ibv_srq_init_attr,
) -> *mut ffi::ibv_srq {
    // SAFETY: libibverbs passes a live PD and a valid attribute struct.
    ptr_or_errno(unsafe { create(pd, &mut *attr) })
}

fn modify(srq: &RoxSrq, attr: &mut ffi::ibv_srq_attr, attr_mask: c_int) -> Result<()> {
    let ibsrq = (&srq.vsrq.srq as *const ffi::ibv_srq).cast_mut();
    if attr_mask as u32 & ffi::IBV_SRQ_MAX_WR == 0 {
        let mut cmd = ffi::ibv_modify_srq::zeroed();
        // SAFETY: our SRQ, the caller's attributes, a command buffer of the size given.
        let ret =
            unsafe { ffi::ibv_cmd_modify_srq(ibsrq, attr, attr_mask, &mut cmd, size_of_val(&cmd)) };
        return Errno::check(ret);
    }
    // SAFETY: a live SRQ of a live context.
    let limits = &unsafe { RoxContext::from_ibv(srq.vsrq.srq.context) }
        .hw()
        .limits;
    let depth = ring_depth(attr.max_wr, limits.max_srq_wr).ok_or(EINVAL)?;
    // Held until the end: no post and no completion retirement while rings change.
    let mut wq = srq.ring.lock();
    let ring = wq.resized_copy(depth)?;
    let mut cmd = DrvCmd::<ffi::ibv_modify_srq, _>::new(ModifySrqReq {
        buf_addr: ring.addr(),
        log_depth: depth.trailing_zeros(),
        reserved: 0,
    });
    // SAFETY: our SRQ, the caller's attributes, a command buffer of the size given.
    let ret = unsafe {
        ffi::ibv_cmd_modify_srq(ibsrq, attr, attr_mask, &mut cmd.core, size_of_val(&cmd))
    };
    // On failure `ring` is dropped: the kernel unpinned it and the device kept the old ring.
    Errno::check(ret)?;
    // The device reads the new ring now; the old one is unpinned and can go.
    drop(wq.install(ring));
    Ok(())
}

pub unsafe extern "C" fn modify_srq(
    srq: *mut ffi::ibv_srq,
    attr: *mut ffi::ibv_srq_attr,
    attr_mask: c_int,
) -> c_int {
    // SAFETY: libibverbs passes an SRQ made by create_srq and valid attributes.
    let (srq, attr) = unsafe { (objects::srq(srq), &mut *attr) };
    int_errno(modify(srq, attr, attr_mask))
}

pub unsafe extern "C" fn query_srq(srq: *mut ffi::ibv_srq, attr: *mut ffi::ibv_srq_attr) -> c_int {
    let mut cmd = ffi::ibv_query_srq::zeroed();
    // SAFETY: arguments from libibverbs; command buffer of the size given.
    let ret = unsafe { ffi::ibv_cmd_query_srq(srq, attr, &mut cmd, size_of_val(&cmd)) };
    int_errno(Errno::check(ret))
}

/// # Safety
/// `srq` must be an `ibv_srq` made by [`create_srq`]; on success it is freed.
unsafe fn destroy(srq: *mut ffi::ibv_srq) -> c_int {
    // SAFETY: per the contract.
    let ret = unsafe { ffi::ibv_cmd_destroy_srq(srq) };
    if ret == 0 {
        // SAFETY: the kernel released the ring; free the SRQ and its ring.
        let srq = unsafe { Box::from_raw(srq.cast::<RoxSrq>()) };
        if srq.vsrq.srq_type == ffi::IBV_SRQT_XRC {
            // SAFETY: a live SRQ of a live context.
            let hw = unsafe { RoxContext::from_ibv(srq.vsrq.srq.context) }.hw();
            hw.xrc_srqs.remove(srq.vsrq.srq_num);
        }
        drop(srq);
    }
    int_errno(Errno::check(ret))
}

pub unsafe extern "C" fn destroy_srq(srq: *mut ffi::ibv_srq) -> c_int {
    // SAFETY: libibverbs passes an SRQ made by create_srq.
    unsafe { destroy(srq) }
}

pub unsafe extern "C" fn post_srq_recv(
    ibsrq: *mut ffi::ibv_srq,
    wr: *mut ffi::ibv_recv_wr,
    bad_wr: *mut *mut ffi::ibv_recv_wr,
) -> c_int {
    // SAFETY: libibverbs passes an SRQ made by create_srq, of a live context, and the
    // application's WR list.
    let (srq, hw, wrs) = unsafe {
        (
            objects::srq(ibsrq),
            RoxContext::from_ibv((*ibsrq).context).hw(),
            WrList::new(wr),
        )
    };
    // SAFETY: libibverbs passes a writable bad_wr pointer (or null).
    unsafe { report(srq.post_recv(hw, wrs), bad_wr) }
}
