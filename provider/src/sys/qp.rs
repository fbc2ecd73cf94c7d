//! The QP entry points: create, modify, query and destroy through `ibv_cmd_*` (with the QP
//! table kept), posting through crate::qp.

use crate::qp::{self as logic, PostError, RoxQp};
use crate::sys::context::RoxContext;
use crate::sys::doorbell::DoorbellSlot;
use crate::sys::errno::{int_errno, ptr_or_errno, Errno, Result};
use crate::sys::ffi::{self, DrvCmd, DrvResp, Zeroable};
use crate::sys::objects::{self, SrqRef};
use crate::sys::qp_ex;
use crate::sys::wr::WrList;
use core::ffi::c_int;
use core::mem::size_of_val;
use core::ptr::NonNull;
use rox_uapi::ids::Qpn;
use rox_uapi::udata::CreateQpResp;

/// # Safety
/// `ibctx` is a context made by alloc_context; `attr.srq` null or a live SRQ of it
/// (libibverbs' arguments).
unsafe fn create(
    ibctx: *mut ffi::ibv_context,
    attr: &mut ffi::ibv_qp_init_attr_ex,
) -> Result<*mut ffi::ibv_qp> {
    // SAFETY: per the contract.
    let ctx = unsafe { RoxContext::from_ibv(ibctx) };
    let kind = logic::qp_type_name(attr.qp_type);
    // SAFETY: per the contract.
    let created = unsafe { create_checked(ctx, ibctx, attr) };
    match &created {
        Ok(qp) => ctx.log_debug(&format!(
            "{}: created {kind} QP {}",
            ctx.device_name(),
            // SAFETY: a QP just created: a live RoxQp, whose ibv_qp it starts with.
            unsafe { (*qp.cast::<RoxQp>()).qpn.get() }
        )),
        Err(e) => ctx.log_debug(&format!(
            "{}: creating a {kind} QP failed: errno {}",
            ctx.device_name(),
            e.0
        )),
    }
    created
}

/// An XRC QP is attached to no SRQ (a target delivers into the SRQ each request names): an
/// SRQ given with one is judged (logic::xrc_srq_check: only an XRC SRQ, only on a target) and
/// then not passed to rox.ko.
///
/// # Safety
/// As `create`; `ctx` is `ibctx`'s rox context.
unsafe fn create_checked(
    ctx: &RoxContext,
    ibctx: *mut ffi::ibv_context,
    attr: &mut ffi::ibv_qp_init_attr_ex,
) -> Result<*mut ffi::ibv_qp> {
    // SAFETY: an SRQ outlives the QPs attached to it (rox.ko refuses to destroy it).
    let given_srq = unsafe { SrqRef::new(attr.srq) };
    if !matches!(attr.qp_type, ffi::IBV_QPT_XRC_SEND | ffi::IBV_QPT_XRC_RECV) {
        // SAFETY: per the contract.
        return unsafe { create_in(ctx, ibctx, attr, given_srq) };
    }
    logic::xrc_srq_check(attr.qp_type, given_srq.map(|s| s.get().vsrq.srq_type))?;
    let given = core::mem::replace(&mut attr.srq, core::ptr::null_mut());
    // SAFETY: per the contract.
    let created = unsafe { create_in(ctx, ibctx, attr, None) };
    attr.srq = given;
    created
}

/// # Safety
/// As `create`; `ctx` is `ibctx`'s rox context and `srq` the SRQ of `attr`.
unsafe fn create_in(
    ctx: &RoxContext,
    ibctx: *mut ffi::ibv_context,
    attr: &mut ffi::ibv_qp_init_attr_ex,
    srq: Option<SrqRef>,
) -> Result<*mut ffi::ibv_qp> {
    let hw = ctx.hw();
    let (mut qp, req) = RoxQp::new(attr, &hw.limits, srq)?;
    let mut cmd = DrvCmd::<ffi::ibv_create_qp, _>::new(req);
    let mut resp = DrvResp::<ffi::ib_uverbs_create_qp_resp, CreateQpResp>::new();
    // ibv_cmd_create_qp_ex takes no CREATE_FLAGS mask (that is ibv_cmd_create_qp_ex2); the
    // flags are 0 here (RoxQp::new checked), so the mask bit is dropped for the call.
    let requested_mask = attr.comp_mask;
    attr.comp_mask &= !ffi::IBV_QP_INIT_ATTR_CREATE_FLAGS;
    // SAFETY: our own verbs_qp (stable heap address: the kernel keeps it as user_handle) and
    // command/response buffers of the sizes given; `attr` from the caller.
    let ret = unsafe {
        ffi::ibv_cmd_create_qp_ex(
            ibctx,
            &mut qp.vqp,
            attr,
            &mut cmd.core,
            size_of_val(&cmd),
            &mut resp.core,
            size_of_val(&resp),
        )
    };
    attr.comp_mask = requested_mask;
    // On failure the kernel has no QP: the box goes (unmapping the rings).
    Errno::check(ret)?;
    // An XRC target is created by ib_core without rox's udata (it belongs to its XRC domain,
    // not to this process): no response of rox's, no doorbell; libibverbs set its number.
    let xrc_target = attr.qp_type == ffi::IBV_QPT_XRC_RECV;
    // ibv_cmd_create_qp_ex copied the granted capacities into attr.cap; the QP number comes in
    // rox's response (the core response struct is only filled on the write path, not on the
    // ioctl path).
    let qpn = if xrc_target {
        // SAFETY: the ibv_qp member of the verbs_qp union, which libibverbs filled.
        Qpn::from_raw(unsafe { qp.vqp.__bindgen_anon_1.qp.qp_num })
    } else {
        resp.drv.qpn
    };
    qp.created(qpn, &attr.cap, &hw.limits);
    if attr.comp_mask & ffi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        qp_ex::install(&mut qp.vqp);
    }
    let slot = if xrc_target {
        Ok(DoorbellSlot::default())
    } else {
        ctx.check_db_slot(resp.drv.db_slot)
    };
    // The ibv_qp is at the start of the verbs_qp union, itself first in RoxQp.
    let qp = Box::into_raw(qp);
    let ibv_qp = qp.cast::<ffi::ibv_qp>();
    match slot {
        // SAFETY: `qp` is live and not yet handed out.
        Ok(slot) => unsafe { (*qp).db_slot = slot },
        Err(e) => {
            // SAFETY: the QP was just created; undo it.
            unsafe { destroy(ibv_qp) };
            return Err(e);
        }
    }
    // SAFETY: `qp` is live and stays registered under its number until `destroy` removes it,
    // before freeing it.
    unsafe { hw.qps.insert((*qp).qpn, NonNull::new_unchecked(qp)) };
    Ok(ibv_qp)
}

pub unsafe extern "C" fn create_qp_ex(
    ibctx: *mut ffi::ibv_context,
    attr: *mut ffi::ibv_qp_init_attr_ex,
) -> *mut ffi::ibv_qp {
    // SAFETY: libibverbs passes a context made by alloc_context and a valid attribute struct.
    ptr_or_errno(unsafe { create(ibctx, &mut *attr) })
}

pub unsafe extern "C" fn create_qp(
    pd: *mut ffi::ibv_pd,
    attr: *mut ffi::ibv_qp_init_attr,
) -> *mut ffi::ibv_qp {
    // SAFETY: libibverbs passes a live PD and a valid attribute struct.
    let (ibctx, attr) = unsafe { ((*pd).context, &mut *attr) };
    let mut attr_ex = ffi::ibv_qp_init_attr_ex {
        qp_context: attr.qp_context,
        send_cq: attr.send_cq,
        recv_cq: attr.recv_cq,
        srq: attr.srq,
        cap: attr.cap,
        qp_type: attr.qp_type,
        sq_sig_all: attr.sq_sig_all,
        comp_mask: ffi::IBV_QP_INIT_ATTR_PD,
        pd,
        ..Zeroable::zeroed()
    };
    // SAFETY: the PD's context, made by alloc_context.
    let qp = ptr_or_errno(unsafe { create(ibctx, &mut attr_ex) });
    if !qp.is_null() {
        // The kernel's actual capacities, as ibv_create_qp reports them.
        attr.cap = attr_ex.cap;
    }
    qp
}

pub unsafe extern "C" fn modify_qp(
    ibqp: *mut ffi::ibv_qp,
    attr: *mut ffi::ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    let mut cmd = ffi::ibv_modify_qp::zeroed();
    // SAFETY: arguments from libibverbs; command buffer of the size given.
    let ret = unsafe { ffi::ibv_cmd_modify_qp(ibqp, attr, attr_mask, &mut cmd, size_of_val(&cmd)) };
    if ret != 0 {
        return int_errno(Errno::check(ret));
    }
    // SAFETY: a QP made by this module; `attr` valid for the bits of `attr_mask`.
    let (qp, attr) = unsafe { (objects::qp(ibqp), &*attr) };
    qp.modified(attr, attr_mask as u32);
    if attr_mask as u32 & ffi::IBV_QP_STATE != 0 {
        // SAFETY: a live QP of a context made by alloc_context.
        let (ctx, kind) = unsafe { (RoxContext::from_ibv((*ibqp).context), (*ibqp).qp_type) };
        ctx.log_debug(&format!(
            "{}: {} QP {} to {}",
            ctx.device_name(),
            logic::qp_type_name(kind),
            qp.qpn.get(),
            logic::qp_state_name(attr.qp_state)
        ));
    }
    0
}

pub unsafe extern "C" fn query_qp(
    ibqp: *mut ffi::ibv_qp,
    attr: *mut ffi::ibv_qp_attr,
    attr_mask: c_int,
    init_attr: *mut ffi::ibv_qp_init_attr,
) -> c_int {
    let mut cmd = ffi::ibv_query_qp::zeroed();
    // SAFETY: arguments from libibverbs; command buffer of the size given.
    let ret = unsafe {
        ffi::ibv_cmd_query_qp(
            ibqp,
            attr,
            attr_mask,
            init_attr,
            &mut cmd,
            size_of_val(&cmd),
        )
    };
    if ret == 0 {
        // SAFETY: a QP made by this module; `attr` was filled by the command.
        unsafe { objects::qp(ibqp).queried(&*attr) };
    }
    int_errno(Errno::check(ret))
}

/// # Safety
/// `ibqp` must be an `ibv_qp` made by this module; on success it is freed.
unsafe fn destroy(ibqp: *mut ffi::ibv_qp) -> c_int {
    // SAFETY: per the contract.
    let (ret, qpn, ibctx) = unsafe {
        (
            ffi::ibv_cmd_destroy_qp(ibqp),
            objects::qp(ibqp).qpn,
            (*ibqp).context,
        )
    };
    if ret == 0 {
        // SAFETY: the QP's context is live; after removal no poller can reach the QP.
        let hw = unsafe { RoxContext::from_ibv(ibctx) }.hw();
        if let Some(qp) = NonNull::new(ibqp.cast::<RoxQp>()) {
            hw.qps.remove(qpn, qp);
        }
        // SAFETY: the kernel released the rings; free the QP and its rings.
        drop(unsafe { Box::from_raw(ibqp.cast::<RoxQp>()) });
    }
    int_errno(Errno::check(ret))
}

pub unsafe extern "C" fn destroy_qp(qp: *mut ffi::ibv_qp) -> c_int {
    // SAFETY: libibverbs passes a QP made by this module.
    unsafe { destroy(qp) }
}

/// 0, or the errno with `*bad_wr` set to the WR that failed.
///
/// # Safety
/// `bad_wr` is null or writable.
pub(super) unsafe fn report<W>(
    result: core::result::Result<(), PostError<W>>,
    bad_wr: *mut *mut W,
) -> c_int {
    match result {
        Ok(()) => 0,
        Err((wr, e)) => {
            if !bad_wr.is_null() {
                // SAFETY: per the contract.
                unsafe { *bad_wr = wr };
            }
            e.0
        }
    }
}

pub unsafe extern "C" fn post_send(
    ibqp: *mut ffi::ibv_qp,
    wr: *mut ffi::ibv_send_wr,
    bad_wr: *mut *mut ffi::ibv_send_wr,
) -> c_int {
    // SAFETY: libibverbs passes a QP made by this module, of a live context, and the
    // application's WR list.
    let (qp, hw, wrs) = unsafe {
        (
            objects::qp(ibqp),
            RoxContext::from_ibv((*ibqp).context).hw(),
            WrList::new(wr),
        )
    };
    // SAFETY: libibverbs passes a writable bad_wr pointer (or null).
    unsafe { report(logic::post_send(qp, hw, wrs), bad_wr) }
}

pub unsafe extern "C" fn post_recv(
    ibqp: *mut ffi::ibv_qp,
    wr: *mut ffi::ibv_recv_wr,
    bad_wr: *mut *mut ffi::ibv_recv_wr,
) -> c_int {
    // SAFETY: libibverbs passes a QP made by this module, of a live context, and the
    // application's WR list.
    let (qp, hw, wrs) = unsafe {
        (
            objects::qp(ibqp),
            RoxContext::from_ibv((*ibqp).context).hw(),
            WrList::new(wr),
        )
    };
    // SAFETY: libibverbs passes a writable bad_wr pointer (or null).
    unsafe { report(logic::post_recv(qp, hw, wrs), bad_wr) }
}
