//! The XRC entry points: XRC domains (`ibv_open_xrcd` / `ibv_close_xrcd`), XRC SRQs
//! (`ibv_create_srq_ex` with `IBV_SRQT_XRC`, `ibv_get_srq_num`) and opening an existing XRC
//! target QP by number (`ibv_open_qp`). XRC QPs are created by crate::sys::qp
//! (ibv_create_qp_ex with `IBV_QPT_XRC_SEND` / `IBV_QPT_XRC_RECV`); their receives retire
//! through crate::xrc.

use crate::qp::RoxQp;
use crate::srq::RoxSrq;
use crate::sys::context::RoxContext;
use crate::sys::errno::{int_errno, ptr_or_errno, Errno, Result, EINVAL, EOPNOTSUPP};
use crate::sys::ffi::{self, DrvCmd, DrvResp, Zeroable};
use crate::sys::objects::{self, SrqRef};
use crate::sys::srq;
use core::ffi::c_int;
use core::mem::{size_of, size_of_val};
use rox_uapi::ids::Qpn;
use rox_uapi::udata::CreateSrqResp;

/// # Safety
/// `ibctx` is a context made by alloc_context, `attr` valid (libibverbs' arguments).
unsafe fn open(
    ibctx: *mut ffi::ibv_context,
    attr: *mut ffi::ibv_xrcd_init_attr,
) -> Result<*mut ffi::ibv_xrcd> {
    let mut xrcd = Box::new(ffi::verbs_xrcd::zeroed());
    let mut cmd = ffi::ibv_open_xrcd::zeroed();
    let mut resp = ffi::ib_uverbs_open_xrcd_resp::zeroed();
    // SAFETY: our own verbs_xrcd of the size given, the caller's attributes, command and
    // response buffers of the sizes given.
    let ret = unsafe {
        ffi::ibv_cmd_open_xrcd(
            ibctx,
            &mut *xrcd,
            size_of::<ffi::verbs_xrcd>() as c_int,
            attr,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp,
            size_of_val(&resp),
        )
    };
    Errno::check(ret)?;
    // The ibv_xrcd is the first member of the verbs_xrcd.
    Ok(Box::into_raw(xrcd).cast::<ffi::ibv_xrcd>())
}

pub unsafe extern "C" fn open_xrcd(
    ibctx: *mut ffi::ibv_context,
    attr: *mut ffi::ibv_xrcd_init_attr,
) -> *mut ffi::ibv_xrcd {
    // SAFETY: libibverbs passes a context made by alloc_context and valid attributes.
    ptr_or_errno(unsafe { open(ibctx, attr) })
}

pub unsafe extern "C" fn close_xrcd(xrcd: *mut ffi::ibv_xrcd) -> c_int {
    let vxrcd = xrcd.cast::<ffi::verbs_xrcd>();
    // SAFETY: an XRC domain open_xrcd made (its ibv_xrcd starts the verbs_xrcd).
    let ret = unsafe { ffi::ibv_cmd_close_xrcd(vxrcd) };
    if ret == 0 {
        // SAFETY: closed: ours to free, as open_xrcd allocated it.
        drop(unsafe { Box::from_raw(vxrcd) });
    }
    int_errno(Errno::check(ret))
}

/// # Safety
/// `ibctx` is a context made by alloc_context and `attr` valid, its PD, CQ and XRC domain
/// (when named) live objects of it (libibverbs' arguments).
unsafe fn create_srq(
    ibctx: *mut ffi::ibv_context,
    attr: &mut ffi::ibv_srq_init_attr_ex,
) -> Result<*mut ffi::ibv_srq> {
    let xrc =
        attr.comp_mask & ffi::IBV_SRQ_INIT_ATTR_TYPE != 0 && attr.srq_type == ffi::IBV_SRQT_XRC;
    let known = ffi::IBV_SRQ_INIT_ATTR_TYPE
        | ffi::IBV_SRQ_INIT_ATTR_PD
        | ffi::IBV_SRQ_INIT_ATTR_XRCD
        | ffi::IBV_SRQ_INIT_ATTR_CQ;
    let basic =
        attr.comp_mask & ffi::IBV_SRQ_INIT_ATTR_TYPE == 0 || attr.srq_type == ffi::IBV_SRQT_BASIC;
    if attr.comp_mask & !known != 0 || !(xrc || basic) {
        return Err(EOPNOTSUPP);
    }
    if attr.comp_mask & ffi::IBV_SRQ_INIT_ATTR_PD == 0 || attr.pd.is_null() {
        return Err(EINVAL);
    }
    if !xrc {
        let mut init = ffi::ibv_srq_init_attr {
            srq_context: attr.srq_context,
            attr: attr.attr,
        };
        // SAFETY: the caller's live PD of this context.
        let srq = unsafe { srq::create(attr.pd, &mut init) }?;
        attr.attr = init.attr;
        return Ok(srq);
    }
    let needed = ffi::IBV_SRQ_INIT_ATTR_XRCD | ffi::IBV_SRQ_INIT_ATTR_CQ;
    if attr.comp_mask & needed != needed || attr.xrcd.is_null() || attr.cq.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: per the contract.
    let ctx = unsafe { RoxContext::from_ibv(ibctx) };
    let hw = ctx.hw();
    let (mut srq, req) = RoxSrq::new(&attr.attr, &hw.limits)?;
    let mut cmd = DrvCmd::<ffi::ibv_create_xsrq, _>::new(req);
    let mut resp = DrvResp::<ffi::ib_uverbs_create_srq_resp, CreateSrqResp>::new();
    // SAFETY: our own verbs_srq (stable heap address: the kernel keeps it as user_handle),
    // the caller's attributes and command/response buffers of the sizes given.
    let ret = unsafe {
        ffi::ibv_cmd_create_srq_ex(
            ibctx,
            &mut srq.vsrq,
            attr,
            &mut cmd.core,
            size_of_val(&cmd),
            &mut resp.core,
            size_of_val(&resp),
        )
    };
    Errno::check(ret)?;
    srq.max_sge = attr.attr.max_sge.min(hw.limits.max_srq_sge);
    let slot = ctx.check_db_slot(resp.drv.db_slot);
    let srq_num = srq.vsrq.srq_num;
    let srq = Box::into_raw(srq);
    let ibsrq = srq.cast::<ffi::ibv_srq>();
    match slot {
        // SAFETY: `srq` is live and not yet handed out.
        Ok(slot) => unsafe { (*srq).db_slot = slot },
        Err(e) => {
            // SAFETY: the SRQ was just created; undo it.
            unsafe { srq::destroy_srq(ibsrq) };
            return Err(e);
        }
    }
    // SAFETY: the SRQ stays registered until crate::sys::srq's destroy removes it, before
    // freeing it.
    if let Some(srq_ref) = unsafe { SrqRef::new(ibsrq) } {
        hw.xrc_srqs.insert(srq_num, srq_ref);
    }
    Ok(ibsrq)
}

pub unsafe extern "C" fn create_srq_ex(
    ibctx: *mut ffi::ibv_context,
    attr: *mut ffi::ibv_srq_init_attr_ex,
) -> *mut ffi::ibv_srq {
    // SAFETY: libibverbs passes a context made by alloc_context and a valid attribute struct.
    ptr_or_errno(unsafe { create_srq(ibctx, &mut *attr) })
}

pub unsafe extern "C" fn get_srq_num(ibsrq: *mut ffi::ibv_srq, srq_num: *mut u32) -> c_int {
    // SAFETY: libibverbs passes an SRQ librox made and a writable number.
    let (srq, out) = unsafe { (objects::srq(ibsrq), &mut *srq_num) };
    if srq.vsrq.srq_type != ffi::IBV_SRQT_XRC {
        return int_errno(Err(EINVAL));
    }
    *out = srq.vsrq.srq_num;
    0
}

/// # Safety
/// `ibctx` is a context made by alloc_context and `attr` valid, its XRC domain (when named)
/// one of this context (libibverbs' arguments).
unsafe fn open_target(
    ibctx: *mut ffi::ibv_context,
    attr: &mut ffi::ibv_qp_open_attr,
) -> Result<*mut ffi::ibv_qp> {
    let needed =
        ffi::IBV_QP_OPEN_ATTR_NUM | ffi::IBV_QP_OPEN_ATTR_XRCD | ffi::IBV_QP_OPEN_ATTR_TYPE;
    // Only an XRC target belongs to a domain rather than to a process (as ib_core's
    // ib_open_qp requires).
    if attr.comp_mask & needed != needed
        || attr.xrcd.is_null()
        || attr.qp_type != ffi::IBV_QPT_XRC_RECV
    {
        return Err(EINVAL);
    }
    // SAFETY: per the contract.
    let ctx = unsafe { RoxContext::from_ibv(ibctx) };
    let hw = ctx.hw();
    // The handle is a target QP as create_qp_ex makes one (no rings of its own: it posts
    // nothing, its receives arrive in the SRQ each request names); ib_core opens it without a
    // call into rox.ko, so no udata goes either way.
    let as_created = ffi::ibv_qp_init_attr_ex {
        qp_type: ffi::IBV_QPT_XRC_RECV,
        comp_mask: ffi::IBV_QP_INIT_ATTR_XRCD,
        xrcd: attr.xrcd,
        ..Zeroable::zeroed()
    };
    let (mut qp, _) = RoxQp::new(&as_created, &hw.limits, None)?;
    let mut cmd = ffi::ibv_open_qp::zeroed();
    let mut resp = ffi::ib_uverbs_create_qp_resp::zeroed();
    // SAFETY: our own verbs_qp of the size given (stable heap address: the kernel keeps it as
    // user_handle), the caller's attributes and command/response buffers of the sizes given.
    let ret = unsafe {
        ffi::ibv_cmd_open_qp(
            ibctx,
            &mut qp.vqp,
            size_of::<ffi::verbs_qp>() as c_int,
            attr,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp,
            size_of_val(&resp),
        )
    };
    Errno::check(ret)?;
    qp.created(Qpn::from_raw(attr.qp_num), &as_created.cap, &hw.limits);
    // Not in the context's QP table: nothing completes on a target's own queues, and the
    // QP's creator (maybe this context) keeps its entry under the same number.
    Ok(Box::into_raw(qp).cast::<ffi::ibv_qp>())
}

pub unsafe extern "C" fn open_qp(
    ibctx: *mut ffi::ibv_context,
    attr: *mut ffi::ibv_qp_open_attr,
) -> *mut ffi::ibv_qp {
    // SAFETY: libibverbs passes a context made by alloc_context and a valid attribute struct.
    ptr_or_errno(unsafe { open_target(ibctx, &mut *attr) })
}
