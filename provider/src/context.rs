//! The device context: one per `ibv_open_device`. Opening it creates rox.ko's ucontext
//! (whose response carries rox's queue formats and the mmap keys of this context's doorbell
//! page and of the wake page), maps those pages, and caches the device limits that object
//! creation checks against.

use crate::sys::errno::{ptr_or_errno, Errno, Result, EPROTO};
use crate::sys::ffi::{self, DrvResp, Zeroable};
use crate::sys::memory::DevicePage;
use crate::qp::RoxQp;
use crate::{ah, cq, mw, pd, qp, srq};
use core::ffi::{c_int, c_void};
use core::mem::{offset_of, size_of};
use core::ptr::{self, NonNull};
use rox_uapi::queue::{Cqe, CQE_SIZE, RQ_WQE_SIZE, SQ_MAX_INLINE, SQ_WQE_SIZE};
use rox_uapi::regs::DB_SLOTS_PER_PAGE;
use rox_uapi::udata::AllocUcontextResp;
use std::collections::HashMap;
use std::ffi::CString;
use std::io::Write;
use std::sync::{Mutex, MutexGuard};

/// The rox driver context; libibverbs allocates it (zeroed) around its `verbs_context`.
#[repr(C)]
pub struct RoxContext {
    pub vctx: ffi::verbs_context,
    /// Set by `open` before the context is handed to libibverbs; `None` only during `open`.
    hw: Option<ContextHw>,
}

/// What a context holds of the device once it is open.
pub struct ContextHw {
    /// This context's doorbell page (`regs::DbPage`): QP/CQ/SRQ slots, device idle flag.
    pub db_page: DevicePage,
    /// The wake page (BAR0 `regs::WAKE_PAGE_OFFSET`), written only when the device is idle.
    pub wake_page: DevicePage,
    /// rox.ko's ucontext response: queue entry sizes, capabilities, inline limit.
    pub ucontext: AllocUcontextResp,
    pub limits: DeviceLimits,
    /// The context's QPs by number: a CQE names its QP by number.
    pub qps: QpTable,
}

/// QPs of a context by QP number, for completion processing.
#[derive(Default)]
pub struct QpTable(Mutex<HashMap<u32, QpRef>>);

struct QpRef(NonNull<RoxQp>);
// SAFETY: a QpRef is only dereferenced under the table lock while its QP is registered (QPs
// leave the table before they are freed); the QP's mutable state is behind its own locks.
unsafe impl Send for QpRef {}

impl QpTable {
    fn lock(&self) -> MutexGuard<'_, HashMap<u32, QpRef>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn insert(&self, qpn: u32, qp: NonNull<RoxQp>) {
        self.lock().insert(qpn, QpRef(qp));
    }

    pub fn remove(&self, qpn: u32) {
        self.lock().remove(&qpn);
    }

    /// The caller's wr_id for a CQE, retiring the WQEs it completes; `None` if the CQE names
    /// no registered QP or no outstanding WQE of it.
    pub fn retire(&self, cqe: &Cqe) -> Option<u64> {
        let table = self.lock();
        let qp = table.get(&cqe.qp_num)?;
        // SAFETY: registered QPs are alive (see QpRef).
        unsafe { qp.0.as_ref() }.retire(cqe)
    }
}

/// Device limits (from query_device at open) that object creation checks before it allocates
/// rings.
#[derive(Clone, Copy, Debug)]
pub struct DeviceLimits {
    pub max_qp_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_cqe: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_inline: u32,
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
        let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: a live verbs_context and a "%s" format with one C string argument.
        unsafe {
            ffi::__verbs_log(
                self.vctx_ptr(),
                ffi::VERBS_LOG_ERR,
                c"rox: %s\n".as_ptr(),
                msg.as_ptr(),
            )
        };
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
        let db_page = DevicePage::map(
            cmd_fd,
            ucontext.db_mmap_key,
            libc::PROT_READ | libc::PROT_WRITE,
        )
        .inspect_err(|e| self.log_err(&format!("cannot map the doorbell page: {e:?}")))?;
        let wake_page = DevicePage::map(cmd_fd, ucontext.wake_mmap_key, libc::PROT_WRITE)
            .inspect_err(|e| self.log_err(&format!("cannot map the wake page: {e:?}")))?;
        let limits = self.query_limits(&ucontext)?;
        Ok(ContextHw {
            db_page,
            wake_page,
            ucontext,
            limits,
            qps: QpTable::default(),
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
        let a = &attr.orig_attr;
        let nonneg = |v: c_int| u32::try_from(v).unwrap_or(0);
        Ok(DeviceLimits {
            max_qp_wr: nonneg(a.max_qp_wr),
            // The send WQE holds SQ_MAX_SGE SGEs and rox.ko grants that many (the device's
            // max_sge is the smaller receive limit); ibv_create_qp hands the granted caps back
            // to the caller, who may reuse them for the next QP.
            max_send_sge: rox_uapi::queue::SQ_MAX_SGE,
            max_recv_sge: nonneg(a.max_sge).min(rox_uapi::queue::RQ_MAX_SGE),
            max_cqe: nonneg(a.max_cqe),
            max_srq_wr: nonneg(a.max_srq_wr),
            max_srq_sge: nonneg(a.max_srq_sge).min(rox_uapi::queue::RQ_MAX_SGE),
            max_inline: ucontext.max_inline,
        })
    }

    /// Validate a doorbell slot number the kernel returned for a new object.
    pub fn check_db_slot(&self, slot: u32) -> Result<u32> {
        if (slot as usize) < DB_SLOTS_PER_PAGE {
            Ok(slot)
        } else {
            self.log_err(&format!(
                "rox.ko returned doorbell slot {slot} (page has {DB_SLOTS_PER_PAGE})"
            ));
            Err(EPROTO)
        }
    }
}

/// The ucontext response must describe exactly the queue formats this librox was built with.
fn check_queue_formats(u: &AllocUcontextResp) -> Result<()> {
    let same = u.sq_wqe_size as usize == SQ_WQE_SIZE
        && u.rq_wqe_size as usize == RQ_WQE_SIZE
        && u.cqe_size as usize == CQE_SIZE
        && u.max_inline <= SQ_MAX_INLINE;
    if same {
        Ok(())
    } else {
        Err(EPROTO)
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

/// Firmware version as "major.minor.sub" from rox.ko's 64-bit fw_ver (16 bits each, as
/// rdma_rxe reports it).
fn format_fw_ver(raw: u64, out: &mut [core::ffi::c_char]) {
    const FIELD_BITS: u32 = 16;
    const FIELD_MASK: u64 = 0xffff;
    let major = (raw >> (2 * FIELD_BITS)) & FIELD_MASK;
    let minor = (raw >> FIELD_BITS) & FIELD_MASK;
    let sub = raw & FIELD_MASK;
    let mut text = Vec::new();
    let _ = write!(text, "{major}.{minor}.{sub}");
    text.truncate(out.len().saturating_sub(1));
    for (dst, &src) in out.iter_mut().zip(text.iter().chain(core::iter::once(&0))) {
        *dst = src as core::ffi::c_char;
    }
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
    alloc_mw: Some(mw::alloc_mw),
    dealloc_mw: Some(mw::dealloc_mw),
    bind_mw: Some(mw::bind_mw),
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
    create_ah: Some(ah::create_ah),
    destroy_ah: Some(ah::destroy_ah),
    // Multicast groups are the device's (rox.ko's attach_mcast/detach_mcast); the data path
    // needs nothing beyond the group's AH (its MAC, QPN 0xFFFFFF from rdma_cm).
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

    /// A C string field (fixed array) as text.
    fn c_field(field: &[core::ffi::c_char]) -> String {
        let bytes: Vec<u8> = field
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn fw_ver_is_major_minor_sub() {
        let mut out = [0 as core::ffi::c_char; 64];
        format_fw_ver((1 << 32) | (2 << 16) | 3, &mut out);
        assert_eq!(c_field(&out), "1.2.3");
        let mut tiny = [0x7f as core::ffi::c_char; 4];
        format_fw_ver((10 << 32) | (20 << 16) | 30, &mut tiny);
        assert_eq!(c_field(&tiny), "10.");
    }

    #[test]
    fn queue_formats_must_match_uapi() {
        let good = AllocUcontextResp {
            sq_wqe_size: SQ_WQE_SIZE as u32,
            rq_wqe_size: RQ_WQE_SIZE as u32,
            cqe_size: CQE_SIZE as u32,
            max_inline: SQ_MAX_INLINE,
            ..Default::default()
        };
        assert!(check_queue_formats(&good).is_ok());
        assert_eq!(
            check_queue_formats(&AllocUcontextResp {
                cqe_size: 64,
                ..good
            }),
            Err(EPROTO)
        );
        assert_eq!(
            check_queue_formats(&AllocUcontextResp::default()),
            Err(EPROTO)
        );
    }
}
