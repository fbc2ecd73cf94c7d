//! The CQ entry points (`verbs_context_ops` and the `ibv_cq_ex` polling functions): create,
//! resize and destroy through `ibv_cmd_*`, polling and arming through crate::cq.

use crate::cq::{self as logic, work_completion_sl, RoxCq};
use crate::sys::context::RoxContext;
use crate::sys::errno::{int_errno, ptr_or_errno, Errno, Result, EINVAL, ENOENT};
use crate::sys::ffi::{self, DrvCmd, DrvResp, Zeroable};
use crate::sys::objects;
use core::ffi::{c_int, c_uint};
use core::mem::{size_of_val, MaybeUninit};
use rox_uapi::udata::{CreateCqResp, ResizeCqReq};

/// Which create command makes the CQ.
enum CreateCommand<'a> {
    /// `ibv_create_cq`.
    Basic {
        cqe: c_int,
        channel: *mut ffi::ibv_comp_channel,
        comp_vector: c_int,
    },
    /// `ibv_create_cq_ex` (an `ibv_cq_ex` with the polling functions below).
    Extended(&'a ffi::ibv_cq_init_attr_ex),
}

/// Create a CQ; returns its `verbs_cq` (whose union holds the `ibv_cq` and the `ibv_cq_ex`).
///
/// # Safety
/// `ibctx` is a context made by alloc_context (libibverbs' argument).
unsafe fn create(
    ibctx: *mut ffi::ibv_context,
    command: CreateCommand<'_>,
) -> Result<*mut ffi::verbs_cq> {
    // SAFETY: per the contract.
    let ctx = unsafe { RoxContext::from_ibv(ibctx) };
    let wanted = match command {
        CreateCommand::Basic { cqe, .. } => u32::try_from(cqe).map_err(|_| EINVAL)?,
        CreateCommand::Extended(attr) => {
            logic::check_extended(attr)?;
            attr.cqe
        }
    };
    let mut cq = RoxCq::new(wanted, &ctx.hw().limits)?;
    let req = cq.state.lock().create_req();
    let vcq = &raw mut cq.vcq;
    // SAFETY (both arms): our own CQ (stable heap address: the kernel keeps it as
    // user_handle) and command/response buffers of the sizes given.
    let (ret, db_slot) = match command {
        CreateCommand::Basic {
            cqe,
            channel,
            comp_vector,
        } => {
            let mut cmd = DrvCmd::<ffi::ibv_create_cq, _>::new(req);
            let mut resp = DrvResp::<ffi::ib_uverbs_create_cq_resp, CreateCqResp>::new();
            // SAFETY: see above.
            let ret = unsafe {
                ffi::ibv_cmd_create_cq(
                    ibctx,
                    cqe,
                    channel,
                    comp_vector,
                    &raw mut (*vcq).__bindgen_anon_1.cq,
                    &mut cmd.core,
                    size_of_val(&cmd),
                    &mut resp.core,
                    size_of_val(&resp),
                )
            };
            (ret, resp.drv.db_slot)
        }
        CreateCommand::Extended(attr) => {
            let mut cmd = DrvCmd::<ffi::ibv_create_cq_ex, _>::new(req);
            let mut resp = DrvResp::<ffi::ib_uverbs_ex_create_cq_resp, CreateCqResp>::new();
            // SAFETY: see above.
            let ret = unsafe {
                ffi::ibv_cmd_create_cq_ex(
                    ibctx,
                    attr,
                    vcq,
                    &mut cmd.core,
                    size_of_val(&cmd),
                    &mut resp.core,
                    size_of_val(&resp),
                    0,
                )
            };
            (ret, resp.drv.db_slot)
        }
    };
    // On failure the kernel has no CQ: the box goes (unmapping the ring).
    Errno::check(ret)?;
    let cq = Box::into_raw(cq);
    match ctx.check_db_slot(db_slot) {
        // SAFETY: `cq` is live and not yet handed out.
        Ok(slot) => unsafe { (*cq).db_slot = slot },
        Err(e) => {
            // SAFETY: the CQ was just created; undo it.
            unsafe { destroy(cq.cast::<ffi::ibv_cq>()) };
            return Err(e);
        }
    }
    Ok(cq.cast::<ffi::verbs_cq>())
}

pub unsafe extern "C" fn create_cq(
    ibctx: *mut ffi::ibv_context,
    cqe: c_int,
    channel: *mut ffi::ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ffi::ibv_cq {
    // SAFETY: libibverbs passes a context made by alloc_context.
    let vcq = unsafe {
        create(
            ibctx,
            CreateCommand::Basic {
                cqe,
                channel,
                comp_vector,
            },
        )
    };
    // The ibv_cq is at the start of the verbs_cq union.
    ptr_or_errno(vcq.map(|vcq| vcq.cast::<ffi::ibv_cq>()))
}

pub unsafe extern "C" fn create_cq_ex(
    ibctx: *mut ffi::ibv_context,
    attr: *mut ffi::ibv_cq_init_attr_ex,
) -> *mut ffi::ibv_cq_ex {
    // SAFETY: libibverbs passes a context made by alloc_context and a valid attribute struct.
    let vcq = unsafe { create(ibctx, CreateCommand::Extended(&*attr)) };
    ptr_or_errno(vcq.map(|vcq| {
        // SAFETY: a CQ just made by `create`, not yet visible to anyone else.
        let ex = unsafe { &mut (*vcq).__bindgen_anon_1.cq_ex };
        ex.start_poll = Some(start_poll);
        ex.next_poll = Some(next_poll);
        ex.end_poll = Some(end_poll);
        ex.read_opcode = Some(read_opcode);
        ex.read_vendor_err = Some(read_vendor_err);
        ex.read_byte_len = Some(read_byte_len);
        ex.read_imm_data = Some(read_imm_data);
        ex.read_qp_num = Some(read_qp_num);
        ex.read_src_qp = Some(read_src_qp);
        ex.read_wc_flags = Some(read_wc_flags);
        ex.read_slid = Some(read_slid);
        ex.read_sl = Some(read_sl);
        ex.read_dlid_path_bits = Some(read_dlid_path_bits);
        ex as *mut ffi::ibv_cq_ex
    }))
}

/// # Safety
/// `cq` must be an `ibv_cq` made by [`create_cq`]; on success it is freed.
unsafe fn destroy(cq: *mut ffi::ibv_cq) -> c_int {
    // SAFETY: per the contract.
    let ret = unsafe { ffi::ibv_cmd_destroy_cq(cq) };
    if ret == 0 {
        // SAFETY: the kernel released the ring; free the CQ and its ring.
        drop(unsafe { Box::from_raw(cq.cast::<RoxCq>()) });
    }
    int_errno(Errno::check(ret))
}

pub unsafe extern "C" fn destroy_cq(cq: *mut ffi::ibv_cq) -> c_int {
    // SAFETY: libibverbs passes a CQ made by create_cq.
    unsafe { destroy(cq) }
}

pub unsafe extern "C" fn poll_cq(
    ibcq: *mut ffi::ibv_cq,
    num_entries: c_int,
    wc: *mut ffi::ibv_wc,
) -> c_int {
    // SAFETY: libibverbs passes a CQ made by create_cq, of a live context.
    let (cq, hw) = unsafe {
        (
            objects::cq(ibcq),
            RoxContext::from_ibv((*ibcq).context).hw(),
        )
    };
    let wanted = usize::try_from(num_entries).unwrap_or(0);
    if wanted == 0 {
        return 0;
    }
    // SAFETY: the caller's array holds num_entries entries (written, never read, here).
    let wc =
        unsafe { core::slice::from_raw_parts_mut(wc.cast::<MaybeUninit<ffi::ibv_wc>>(), wanted) };
    cq.poll(hw, wc) as c_int
}

// ---- extended CQ (ibv_start_poll / ibv_next_poll / ibv_end_poll / ibv_wc_read_*) ----------
//
// The CQ lock is held from a successful start_poll to end_poll (libibverbs' contract: nothing
// else polls this CQ in between on this thread, and end_poll follows every successful
// start_poll).

/// Make the next CQE current; ENOENT when the ring holds none.
///
/// # Safety
/// `ibcq` is an extended CQ made by [`create_cq_ex`]; the caller holds the CQ lock.
unsafe fn advance(ibcq: *mut ffi::ibv_cq_ex) -> c_int {
    // SAFETY: per the contract.
    let (cq, hw) = unsafe {
        (
            objects::cq_ex(ibcq),
            RoxContext::from_ibv((*ibcq).context).hw(),
        )
    };
    // SAFETY: the lock is held (contract); this is the only reference to the state.
    let state = unsafe { cq.state.held() };
    match cq.advance(state, hw) {
        None => ENOENT.0,
        Some((wr_id, status)) => {
            // SAFETY: the caller's CQ; these two fields are how libibverbs reports them.
            unsafe {
                (*ibcq).wr_id = wr_id;
                (*ibcq).status = status;
            }
            0
        }
    }
}

unsafe extern "C" fn start_poll(
    ibcq: *mut ffi::ibv_cq_ex,
    attr: *mut ffi::ibv_poll_cq_attr,
) -> c_int {
    // SAFETY: libibverbs passes a valid (or null) attribute struct.
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return EINVAL.0;
    }
    // SAFETY: libibverbs passes one of our extended CQs.
    let cq = unsafe { objects::cq_ex(ibcq) };
    cq.state.acquire();
    // SAFETY: the lock was just taken.
    let ret = unsafe { advance(ibcq) };
    if ret != 0 {
        // No end_poll follows a failed start_poll.
        // SAFETY: taken above.
        unsafe { cq.state.release() };
    }
    ret
}

unsafe extern "C" fn next_poll(ibcq: *mut ffi::ibv_cq_ex) -> c_int {
    // SAFETY: between start_poll and end_poll: our CQ, lock held.
    unsafe { advance(ibcq) }
}

unsafe extern "C" fn end_poll(ibcq: *mut ffi::ibv_cq_ex) {
    // SAFETY: libibverbs passes one of our extended CQs after a successful start_poll.
    let (cq, hw) = unsafe {
        (
            objects::cq_ex(ibcq),
            RoxContext::from_ibv((*ibcq).context).hw(),
        )
    };
    // SAFETY: the lock is held since start_poll; released last.
    unsafe {
        cq.end_poll(cq.state.held(), hw);
        cq.state.release();
    }
}

/// The current CQE (between start_poll and end_poll).
///
/// # Safety
/// `ibcq` is one of our extended CQs, between a successful start_poll and end_poll.
unsafe fn current(ibcq: *mut ffi::ibv_cq_ex) -> rox_uapi::queue::Cqe {
    // SAFETY: per the contract the lock is held; a copy is taken.
    unsafe { objects::cq_ex(ibcq).state.held().current }
}

unsafe extern "C" fn read_opcode(ibcq: *mut ffi::ibv_cq_ex) -> ffi::ibv_wc_opcode {
    // SAFETY: called between start_poll and end_poll (libibverbs' contract).
    u32::from(unsafe { current(ibcq) }.opcode)
}
unsafe extern "C" fn read_vendor_err(ibcq: *mut ffi::ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    u32::from(unsafe { current(ibcq) }.vendor_err)
}
unsafe extern "C" fn read_byte_len(ibcq: *mut ffi::ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { current(ibcq) }.byte_len
}
unsafe extern "C" fn read_imm_data(ibcq: *mut ffi::ibv_cq_ex) -> ffi::__be32 {
    // SAFETY: as above. Network order in both.
    unsafe { current(ibcq) }.imm_data
}
unsafe extern "C" fn read_qp_num(ibcq: *mut ffi::ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { current(ibcq) }.qp_num.get()
}
unsafe extern "C" fn read_src_qp(ibcq: *mut ffi::ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { current(ibcq) }.src_qp.get()
}
unsafe extern "C" fn read_wc_flags(ibcq: *mut ffi::ibv_cq_ex) -> c_uint {
    // SAFETY: as above.
    c_uint::from(unsafe { current(ibcq) }.wc_flags)
}
/// RoCE has no LIDs.
unsafe extern "C" fn read_slid(_ibcq: *mut ffi::ibv_cq_ex) -> u32 {
    0
}
unsafe extern "C" fn read_sl(ibcq: *mut ffi::ibv_cq_ex) -> u8 {
    // SAFETY: as above.
    work_completion_sl(&unsafe { current(ibcq) })
}
/// RoCE has no LIDs.
unsafe extern "C" fn read_dlid_path_bits(_ibcq: *mut ffi::ibv_cq_ex) -> u8 {
    0
}

/// # Safety
/// `ibcq` is a CQ made by create_cq, of a live context (libibverbs' argument).
unsafe fn resize(ibcq: *mut ffi::ibv_cq, cqe: c_int) -> Result<()> {
    // SAFETY: per the contract.
    let (cq, limits) = unsafe {
        (
            objects::cq(ibcq),
            &RoxContext::from_ibv((*ibcq).context).hw().limits,
        )
    };
    let wanted = u32::try_from(cqe).map_err(|_| EINVAL)?;
    let ring = logic::new_ring(wanted, limits)?;
    // Held until the end: nobody polls while the device moves the unconsumed CQEs (from the
    // consumer index this lock's holders publish) into the new ring.
    let mut state = cq.state.lock();
    let mut cmd = DrvCmd::<ffi::ibv_resize_cq, _>::new(ResizeCqReq {
        buf_addr: ring.addr(),
        log_depth: ring.depth().trailing_zeros(),
        reserved: 0,
    });
    let mut resp = ffi::ib_uverbs_resize_cq_resp::zeroed();
    // SAFETY: our CQ and command/response buffers of the sizes given; on success libibverbs
    // sets `ibcq->cqe` from the response.
    let ret = unsafe {
        ffi::ibv_cmd_resize_cq(
            ibcq,
            cqe,
            &mut cmd.core,
            size_of_val(&cmd),
            &mut resp,
            size_of_val(&resp),
        )
    };
    // On failure `ring` goes (the kernel unpinned it; the device kept the old one).
    Errno::check(ret)?;
    // The device writes to the new ring now; the old one is unpinned and can go.
    state.install(ring);
    Ok(())
}

/// `ibv_resize_cq`: a new ring of `next_pow2(cqe)` entries; the device moves the CQEs not
/// polled yet into it (EINVAL if they do not fit: the old ring stays).
pub unsafe extern "C" fn resize_cq(ibcq: *mut ffi::ibv_cq, cqe: c_int) -> c_int {
    // SAFETY: libibverbs passes a CQ made by create_cq.
    int_errno(unsafe { resize(ibcq, cqe) })
}

pub unsafe extern "C" fn req_notify_cq(ibcq: *mut ffi::ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: libibverbs passes a CQ made by create_cq, of a live context.
    let (cq, hw) = unsafe {
        (
            objects::cq(ibcq),
            RoxContext::from_ibv((*ibcq).context).hw(),
        )
    };
    cq.req_notify(hw, solicited_only != 0);
    0
}

/// The immediate data of a work completion (tests).
#[cfg(test)]
pub fn wc_imm_data(wc: &ffi::ibv_wc) -> u32 {
    // SAFETY: both members of this union are u32s at offset 0.
    unsafe { wc.__bindgen_anon_1.imm_data }
}
