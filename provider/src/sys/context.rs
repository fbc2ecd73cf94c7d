//! The device context: one per `ibv_open_device`. Opening it creates rox.ko's ucontext
//! (whose response carries rox's queue formats and the mmap keys of this context's doorbell
//! page and of the wake page), maps those pages, and caches the device limits that object
//! creation checks against (crate::context). Also the context's QP table and the ops table.

use crate::context::{check_queue_formats, format_fw_ver, ContextHw, DeviceLimits};
use crate::qp::RoxQp;
use crate::sys::doorbell::{Doorbell, DoorbellSlot};
use crate::sys::errno::{ptr_or_errno, Errno, Result, EPROTO};
use crate::sys::ffi::{self, DrvResp, Zeroable};
use crate::sys::{cq, pd, qp, srq, xrc};
use core::ffi::{c_int, c_void};
use core::mem::{offset_of, size_of};
use core::ptr::{self, NonNull};
use rox_uapi::ids::Qpn;
use rox_uapi::queue::{Cqe, CQE_SIZE, RQ_WQE_SIZE, SQ_MAX_INLINE, SQ_WQE_SIZE};
use rox_uapi::regs::DB_SLOTS_PER_PAGE;
use rox_uapi::udata::AllocUcontextResp;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::{Mutex, MutexGuard};

/// The rox driver context; libibverbs allocates it (zeroed) around its `verbs_context`.
#[repr(C)]
pub struct RoxContext {
    pub vctx: ffi::verbs_context,
    /// Set by `open` before the context is handed to libibverbs; `None` only during `open`.
    hw: Option<ContextHw>,
}

/// QPs of a context by QP number, for completion processing. Only crate::sys::qp adds and
/// removes QPs: a QP is added once created and removed before it is freed.
#[derive(Default)]
pub struct QpTable(Mutex<HashMap<Qpn, QpRef>>);

struct QpRef(NonNull<RoxQp>);
// SAFETY: a QpRef is only dereferenced under the table lock while its QP is registered (QPs
// leave the table before they are freed); the QP's mutable state is behind its own locks.
unsafe impl Send for QpRef {}

impl QpTable {
    fn lock(&self) -> MutexGuard<'_, HashMap<Qpn, QpRef>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// # Safety
    /// `qp` stays alive until [`Self::remove`] of `qpn` returned.
    pub(super) unsafe fn insert(&self, qpn: Qpn, qp: NonNull<RoxQp>) {
        self.lock().insert(qpn, QpRef(qp));
    }

    /// Removes `qp` if it is the QP registered under `qpn` (an XRC target opened by number
    /// is not registered, and must not unregister its creator's entry of this context).
    pub(super) fn remove(&self, qpn: Qpn, qp: NonNull<RoxQp>) {
        let mut table = self.lock();
        if table.get(&qpn).is_some_and(|registered| registered.0 == qp) {
            table.remove(&qpn);
        }
    }

    /// The caller's wr_id for a CQE, retiring the WQEs it completes; `None` if the CQE names
    /// no registered QP or no outstanding WQE of it.
    pub fn retire(&self, cqe: &Cqe) -> Option<u64> {
        let table = self.lock();
        let qp = table.get(&cqe.qp_num)?;
        // SAFETY: registered QPs are alive (`insert`'s contract), and stay so while the table
        // lock is held (removal takes it).
        unsafe { qp.0.as_ref() }.retire(cqe)
    }
}

/// Bytes from the start of a `RoxContext` to the `ibv_context` libibverbs hands out.
const IBV_CONTEXT_OFFSET: usize =
    offset_of!(RoxContext, vctx) + offset_of!(ffi::verbs_context, context);

impl RoxContext {
    /// The rox context of an `ibv_context`.
    ///
    /// # Safety
    /// `ctx` must be the `ibv_context` of a live context made by [`alloc_context`].
    pub unsafe fn from_ibv<'a>(ctx: *mut ffi::ibv_context) -> &'a RoxContext {
        // SAFETY: per the contract, `ctx` lies IBV_CONTEXT_OFFSET bytes into a RoxContext.
        unsafe {
            &*ctx
                .cast::<u8>()
                .sub(IBV_CONTEXT_OFFSET)
                .cast::<RoxContext>()
        }
    }

    pub fn hw(&self) -> &ContextHw {
        self.hw
            .as_ref()
            .expect("rox context used before it was opened")
    }

    fn vctx_ptr(&self) -> *mut ffi::verbs_context {
        ptr::addr_of!(self.vctx).cast_mut()
    }

    /// Log an error through libibverbs' logger (VERBS_LOG_LEVEL / VERBS_LOG_FILE).
    pub fn log_err(&self, msg: &str) {
        self.log(ffi::VERBS_LOG_ERR, msg);
    }

    /// Log a debug line (VERBS_LOG_LEVEL=4): what librox did with an object, for users and
    /// tests that must know which QPs a program made without sampling `rdma resource`.
    pub fn log_debug(&self, msg: &str) {
        self.log(ffi::VERBS_LOG_DEBUG, msg);
    }

    fn log(&self, level: u32, msg: &str) {
        let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: a live verbs_context and a "%s" format with one C string argument.
        unsafe { ffi::__verbs_log(self.vctx_ptr(), level, c"rox: %s\n".as_ptr(), msg.as_ptr()) };
    }

    /// The device's name (rox_0, ...), as libibverbs lists it.
    pub fn device_name(&self) -> String {
        // SAFETY: a live context's device, whose name is a NUL-terminated array libibverbs
        // filled from sysfs.
        let name = unsafe { CStr::from_ptr((*self.vctx.context.device).name.as_ptr()) };
        name.to_string_lossy().into_owned()
    }

    /// `verbs_init_and_alloc_context` + `ibv_cmd_get_context` + rox's own setup.
    ///
    /// # Safety
    /// `ibdev` is the device libibverbs passed to alloc_context; `cmd_fd` its uverbs fd.
    unsafe fn open(ibdev: *mut ffi::ibv_device, cmd_fd: c_int) -> Result<*mut ffi::verbs_context> {
        // libibverbs callocs the whole RoxContext and initialises the verbs_context inside it
        // (on failure it closes cmd_fd itself); free_context gives the memory back with free().
        // SAFETY: size and offset describe RoxContext; the offset is passed as a pointer, as
        // the C macro does.
        let ctx = unsafe {
            ffi::_verbs_init_and_alloc_context(
                ibdev,
                cmd_fd,
                size_of::<RoxContext>(),
                ptr::without_provenance_mut(offset_of!(RoxContext, vctx)),
                ffi::RDMA_DRIVER_UNKNOWN,
            )
        }
        .cast::<RoxContext>();
        if ctx.is_null() {
            return Err(Errno::last());
        }
        // SAFETY: `ctx` is a fresh allocation of RoxContext's size; `hw` is still raw zeroes,
        // so it is written without dropping.
        unsafe { ptr::addr_of_mut!((*ctx).hw).write(None) };
        // SAFETY: `ctx` is live, its verbs_context initialised.
        match unsafe { (*ctx).attach(cmd_fd) } {
            Ok(hw) => {
                // SAFETY: still exclusively ours: libibverbs sees it only when we return.
                unsafe {
                    (*ctx).hw = Some(hw);
                    ffi::verbs_set_ops(ptr::addr_of_mut!((*ctx).vctx), &CONTEXT_OPS);
                    Ok(ptr::addr_of_mut!((*ctx).vctx))
                }
            }
            Err(e) => {
                // SAFETY: undo the allocation and verbs_init_context (closes cmd_fd).
                unsafe { Self::release(ctx) };
                Err(e)
            }
        }
    }

    /// Unmap the device pages, uninit the verbs_context (closing its fds), free the memory.
    ///
    /// # Safety
    /// `ctx` was allocated by `open` and is not used afterwards.
    unsafe fn release(ctx: *mut RoxContext) {
        // SAFETY: per the contract.
        unsafe {
            ptr::drop_in_place(ptr::addr_of_mut!((*ctx).hw));
            ffi::verbs_uninit_context(ptr::addr_of_mut!((*ctx).vctx));
            libc::free(ctx.cast::<c_void>());
        }
    }

    /// Create the kernel ucontext and map its pages.
    ///
    /// # Safety
    /// `self.vctx` has been initialised by verbs_init_context with `cmd_fd`.
    unsafe fn attach(&self, cmd_fd: c_int) -> Result<ContextHw> {
        let mut cmd = ffi::ibv_get_context::zeroed();
        let mut resp = DrvResp::<ffi::ib_uverbs_get_context_resp, AllocUcontextResp>::new();
        // SAFETY: command and response buffers of the sizes given.
        Errno::check(unsafe {
            ffi::ibv_cmd_get_context(
                self.vctx_ptr(),
                &mut cmd,
                size_of::<ffi::ibv_get_context>(),
                &mut resp.core,
                size_of_val(&resp),
            )
        })?;
        let ucontext = resp.drv;
        check_queue_formats(&ucontext).inspect_err(|_| {
            self.log_err(&format!(
                "rox.ko's queue formats {ucontext:?} are not this librox's (SQ WQE {SQ_WQE_SIZE}, \
                 RQ WQE {RQ_WQE_SIZE}, CQE {CQE_SIZE}, inline <= {SQ_MAX_INLINE})"
            ))
        })?;
        let doorbell = Doorbell::map(cmd_fd, &ucontext, |msg| self.log_err(msg))?;
        let limits = self.query_limits(&ucontext)?;
        Ok(ContextHw {
            doorbell,
            limits,
            qps: QpTable::default(),
            xrc_srqs: Default::default(),
        })
    }

    fn query_limits(&self, ucontext: &AllocUcontextResp) -> Result<DeviceLimits> {
        let mut attr = ffi::ibv_device_attr_ex::zeroed();
        let mut resp = ffi::ib_uverbs_ex_query_device_resp::zeroed();
        let mut resp_size = size_of_val(&resp);
        // SAFETY: a live context; attr/resp buffers of the sizes given.
        Errno::check(unsafe {
            ffi::ibv_cmd_query_device_any(
                ptr::addr_of!(self.vctx.context).cast_mut(),
                ptr::null(),
                &mut attr,
                size_of_val(&attr),
                &mut resp,
                &mut resp_size,
            )
        })?;
        Ok(DeviceLimits::new(&attr.orig_attr, ucontext))
    }

    /// Validate a doorbell slot number the kernel returned for a new object.
    pub fn check_db_slot(&self, slot: u32) -> Result<DoorbellSlot> {
        DoorbellSlot::new(slot).ok_or_else(|| {
            self.log_err(&format!(
                "rox.ko returned doorbell slot {slot} (page has {DB_SLOTS_PER_PAGE})"
            ));
            EPROTO
        })
    }
}

/// verbs_device_ops.alloc_context.
pub unsafe extern "C" fn alloc_context(
    ibdev: *mut ffi::ibv_device,
    cmd_fd: c_int,
    _private_data: *mut c_void,
) -> *mut ffi::verbs_context {
    // SAFETY: called by libibverbs with its device and a fresh uverbs fd.
    ptr_or_errno(unsafe { RoxContext::open(ibdev, cmd_fd) })
}

unsafe extern "C" fn free_context(ibctx: *mut ffi::ibv_context) {
    // SAFETY: libibverbs passes a context made by alloc_context, for the last time.
    unsafe {
        RoxContext::release(
            ibctx
                .cast::<u8>()
                .sub(IBV_CONTEXT_OFFSET)
                .cast::<RoxContext>(),
        )
    };
}

unsafe extern "C" fn query_device_ex(
    ibctx: *mut ffi::ibv_context,
    input: *const ffi::ibv_query_device_ex_input,
    attr: *mut ffi::ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    let mut resp = ffi::ib_uverbs_ex_query_device_resp::zeroed();
    let mut resp_size = size_of_val(&resp);
    // SAFETY: arguments from libibverbs; resp buffer of the size given.
    let ret = unsafe {
        ffi::ibv_cmd_query_device_any(ibctx, input, attr, attr_size, &mut resp, &mut resp_size)
    };
    if ret == 0 {
        // SAFETY: attr_size covers at least orig_attr (libibverbs guarantees it).
        format_fw_ver(resp.base.fw_ver, unsafe { &mut (*attr).orig_attr.fw_ver });
    }
    ret
}

unsafe extern "C" fn query_port(
    ibctx: *mut ffi::ibv_context,
    port_num: u8,
    port_attr: *mut ffi::ibv_port_attr,
) -> c_int {
    let mut cmd = ffi::ibv_query_port::zeroed();
    // SAFETY: arguments from libibverbs; command buffer of the size given.
    unsafe { ffi::ibv_cmd_query_port(ibctx, port_num, port_attr, &mut cmd, size_of_val(&cmd)) }
}

/// librox's context ops; everything else stays libibverbs' dummies (EOPNOTSUPP).
static CONTEXT_OPS: ffi::verbs_context_ops = ffi::verbs_context_ops {
    free_context: Some(free_context),
    query_device_ex: Some(query_device_ex),
    query_port: Some(query_port),
    alloc_pd: Some(pd::alloc_pd),
    dealloc_pd: Some(pd::dealloc_pd),
    alloc_mw: Some(pd::alloc_mw),
    dealloc_mw: Some(pd::dealloc_mw),
    bind_mw: Some(pd::bind_mw),
    reg_mr: Some(pd::reg_mr),
    dereg_mr: Some(pd::dereg_mr),
    // On-demand paging regions: prefetch is the kernel's (rox.ko faults the pages in).
    advise_mr: Some(ffi::ibv_cmd_advise_mr),
    create_cq: Some(cq::create_cq),
    create_cq_ex: Some(cq::create_cq_ex),
    destroy_cq: Some(cq::destroy_cq),
    resize_cq: Some(cq::resize_cq),
    create_qp: Some(qp::create_qp),
    create_qp_ex: Some(qp::create_qp_ex),
    modify_qp: Some(qp::modify_qp),
    query_qp: Some(qp::query_qp),
    destroy_qp: Some(qp::destroy_qp),
    create_srq: Some(srq::create_srq),
    modify_srq: Some(srq::modify_srq),
    query_srq: Some(srq::query_srq),
    destroy_srq: Some(srq::destroy_srq),
    create_srq_ex: Some(xrc::create_srq_ex),
    get_srq_num: Some(xrc::get_srq_num),
    open_xrcd: Some(xrc::open_xrcd),
    close_xrcd: Some(xrc::close_xrcd),
    open_qp: Some(xrc::open_qp),
    create_ah: Some(pd::create_ah),
    destroy_ah: Some(pd::destroy_ah),
    // Multicast groups are the device's (rox.ko's attach_mcast/detach_mcast); the data path
    // needs nothing beyond the group's AH (its MAC, `Qpn::MULTICAST` from rdma_cm).
    attach_mcast: Some(ffi::ibv_cmd_attach_mcast),
    detach_mcast: Some(ffi::ibv_cmd_detach_mcast),
    post_send: Some(qp::post_send),
    post_recv: Some(qp::post_recv),
    post_srq_recv: Some(srq::post_srq_recv),
    poll_cq: Some(cq::poll_cq),
    req_notify_cq: Some(cq::req_notify_cq),
    // SAFETY: every other member is an Option of a function pointer; None is all-zero.
    ..unsafe { core::mem::zeroed() }
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::tests::test_qp;
    use rox_uapi::verbs;

    /// A CQE finds its QP by the number the QP holds, and finds nothing once the QP left.
    #[test]
    fn qp_table_finds_a_qp_by_its_number() {
        let qp = test_qp(ffi::IBV_QPT_RC);
        qp.sq.lock().commit(0xabc);
        let send_cqe = |qp_num| Cqe {
            wr_id: 0,
            opcode: verbs::WC_OPC_SEND,
            qp_num,
            ..Default::default()
        };
        let table = QpTable::default();
        // SAFETY: `qp` outlives the table.
        unsafe { table.insert(qp.qpn, NonNull::from(&qp)) };
        let other = Qpn::new(qp.qpn.get() + 1).expect("a QPN");
        assert_eq!(table.retire(&send_cqe(other)), None, "another QP's number");
        assert_eq!(table.retire(&send_cqe(qp.qpn)), Some(0xabc));
        qp.sq.lock().commit(0xdef);
        // An XRC target opened by number shares its creator's number but not its entry.
        let opened = test_qp(ffi::IBV_QPT_RC);
        table.remove(qp.qpn, NonNull::from(&opened));
        // The second WQE is slot 1: the CQE that completes it echoes 1.
        let second = Cqe {
            wr_id: 1,
            ..send_cqe(qp.qpn)
        };
        assert_eq!(table.retire(&second), Some(0xdef), "another QP's removal");
        qp.sq.lock().commit(0x123);
        table.remove(qp.qpn, NonNull::from(&qp));
        assert_eq!(table.retire(&send_cqe(qp.qpn)), None, "removed");
    }
}
