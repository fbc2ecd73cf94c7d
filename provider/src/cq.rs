//! Completion queues.
//!
//! Control: librox allocates the CQE ring (a power-of-two number of `queue::Cqe`s, zeroed,
//! page aligned) and passes its address and depth in the create_cq udata; rox.ko pins it and
//! returns the doorbell slot (`a` = consumer index, `b` = arm word) of this context's page.
//!
//! Data: poll_cq takes CQEs by the owner-bit rule (`queue::owner_for`), turns each into an
//! `ibv_wc` (the QP it names gives back the caller's wr_id) and publishes the consumer index;
//! req_notify_cq publishes a new arm word. Neither makes a syscall or wakes the device (it
//! reads both words when it writes the next CQE).

use crate::context::{ContextHw, RoxContext};
use crate::sys::doorbell::SlotWord;
use crate::sys::errno::{int_errno, ptr_or_errno, Errno, Result, EINVAL, ENOENT, EOPNOTSUPP};
use crate::sys::ffi::{self, DrvCmd, DrvResp, Zeroable};
use crate::sys::lock::Locked;
use crate::sys::memory::{ring_depth, QueueBuffer};
use core::ffi::{c_int, c_uint};
use core::mem::{offset_of, size_of_val};
use core::sync::atomic::{AtomicU8, Ordering};
use rox_uapi::queue::{owner_for, Cqe, CQE_NETWORK_HDR_NONE, CQE_SHIFT};
use rox_uapi::regs::{cq_arm_word, CQ_ARM_NEXT, CQ_ARM_SOLICITED};
use rox_uapi::udata::{CreateCqReq, CreateCqResp, ResizeCqReq};
use rox_uapi::verbs;

#[repr(C)]
pub struct RoxCq {
    pub vcq: ffi::verbs_cq,
    db_slot: u32,
    state: Locked<CqState>,
}
const _: () = assert!(offset_of!(RoxCq, vcq) == 0);

/// Software side of a CQ.
struct CqState {
    /// The CQE ring (`depth` entries of `queue::Cqe`); replaced by a resize.
    ring: QueueBuffer,
    depth: u32,
    /// Free-running consumer index (published in the doorbell slot's `a`).
    ci: u32,
    /// Sequence number of the last arm request (in the arm word, slot `b`).
    arm_seq: u32,
    /// Extended polling: the CQE `ibv_start_poll`/`ibv_next_poll` made current (its fields are
    /// what the `ibv_wc_read_*` functions return).
    current: Cqe,
}

impl RoxCq {
    /// # Safety
    /// `cq` must be an `ibv_cq` made by [`create_cq`] and still alive.
    unsafe fn from_ibv<'a>(cq: *mut ffi::ibv_cq) -> &'a RoxCq {
        // SAFETY: the ibv_cq is the first member of the verbs_cq, itself first in RoxCq.
        unsafe { &*cq.cast::<RoxCq>() }
    }

    /// Take the next CQE (advancing the consumer index) and the caller's wr_id for it.
    fn next(&self, state: &mut CqState, hw: &ContextHw) -> Option<(Cqe, u64)> {
        let cqe = state.take(state.ci)?;
        state.ci = state.ci.wrapping_add(1);
        // A CQE of a QP librox does not know (destroyed meanwhile) keeps the device's wr_id.
        let wr_id = hw.qps.retire(&cqe).unwrap_or(cqe.wr_id);
        Some((cqe, wr_id))
    }
}

impl CqState {
    fn new(ring: QueueBuffer, depth: u32) -> CqState {
        CqState {
            ring,
            depth,
            ci: 0,
            arm_seq: 0,
            current: Cqe::default(),
        }
    }

    /// The CQE at `ci` if the device has written it (owner byte checked with acquire).
    fn take(&self, ci: u32) -> Option<Cqe> {
        let entry = self.ring.entry::<Cqe>(ci, self.depth);
        // SAFETY: the owner byte of a CQE inside the ring; the device writes it last with
        // release ordering.
        let owner = unsafe {
            &*entry
                .cast::<u8>()
                .add(offset_of!(Cqe, owner))
                .cast::<AtomicU8>()
        };
        if owner.load(Ordering::Acquire) != owner_for(ci, self.depth) {
            return None;
        }
        // SAFETY: the entry is complete (owner seen above) and the device does not touch it
        // again until the consumer index passes it.
        Some(unsafe { entry.read_volatile() })
    }
}

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

/// Work-completion fields an extended CQ can report (all of `ibv_wc`'s).
const SUPPORTED_WC_FLAGS: u64 = ffi::IBV_WC_STANDARD_FLAGS as u64;
const SUPPORTED_CQ_COMP_MASK: u32 = ffi::IBV_CQ_INIT_ATTR_MASK_FLAGS;
/// Single-threaded use needs nothing special (the lock is just uncontended).
const SUPPORTED_CQ_FLAGS: u32 = ffi::IBV_CREATE_CQ_ATTR_SINGLE_THREADED;

fn check_extended(attr: &ffi::ibv_cq_init_attr_ex) -> Result<()> {
    let flags = if attr.comp_mask & ffi::IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
        attr.flags
    } else {
        0
    };
    if attr.comp_mask & !SUPPORTED_CQ_COMP_MASK != 0
        || attr.wc_flags & !SUPPORTED_WC_FLAGS != 0
        || flags & !SUPPORTED_CQ_FLAGS != 0
    {
        return Err(EOPNOTSUPP);
    }
    Ok(())
}

/// Create a CQ; returns its `verbs_cq` (whose union holds the `ibv_cq` and the `ibv_cq_ex`).
fn create(ibctx: *mut ffi::ibv_context, command: CreateCommand<'_>) -> Result<*mut ffi::verbs_cq> {
    // SAFETY: libibverbs passes a context made by alloc_context.
    let ctx = unsafe { RoxContext::from_ibv(ibctx) };
    let wanted = match command {
        CreateCommand::Basic { cqe, .. } => u32::try_from(cqe).map_err(|_| EINVAL)?,
        CreateCommand::Extended(attr) => {
            check_extended(attr)?;
            attr.cqe
        }
    };
    if wanted == 0 {
        return Err(EINVAL);
    }
    let depth = ring_depth(wanted, ctx.hw().limits.max_cqe).ok_or(EINVAL)?;
    let ring = QueueBuffer::new(depth, CQE_SHIFT)?;
    let buf_addr = ring.addr();
    let cq = Box::into_raw(Box::new(RoxCq {
        vcq: Zeroable::zeroed(),
        db_slot: 0,
        state: Locked::new(CqState::new(ring, depth)),
    }));
    // SAFETY: `cq` is live and exclusively ours until returned.
    let cq_ref = unsafe { &mut *cq };
    let req = CreateCqReq {
        buf_addr,
        log_depth: depth.trailing_zeros(),
        reserved: 0,
    };
    let vcq = &raw mut cq_ref.vcq;
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
    if let Err(e) = Errno::check(ret) {
        // SAFETY: the kernel has no CQ; reclaim the box (unmapping the ring).
        drop(unsafe { Box::from_raw(cq) });
        return Err(e);
    }
    match ctx.check_db_slot(db_slot) {
        Ok(slot) => cq_ref.db_slot = slot,
        Err(e) => {
            // SAFETY: the CQ was just created; undo it.
            unsafe { destroy(&raw mut (*vcq).__bindgen_anon_1.cq) };
            return Err(e);
        }
    }
    Ok(vcq)
}

pub unsafe extern "C" fn create_cq(
    ibctx: *mut ffi::ibv_context,
    cqe: c_int,
    channel: *mut ffi::ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ffi::ibv_cq {
    let vcq = create(
        ibctx,
        CreateCommand::Basic {
            cqe,
            channel,
            comp_vector,
        },
    );
    // SAFETY: the union member every CQ has.
    ptr_or_errno(vcq.map(|vcq| unsafe { &raw mut (*vcq).__bindgen_anon_1.cq }))
}

pub unsafe extern "C" fn create_cq_ex(
    ibctx: *mut ffi::ibv_context,
    attr: *mut ffi::ibv_cq_init_attr_ex,
) -> *mut ffi::ibv_cq_ex {
    // SAFETY: libibverbs passes a valid attribute struct.
    let vcq = create(ibctx, CreateCommand::Extended(unsafe { &*attr }));
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

// The CQE carries libibverbs' own numbering (rox_uapi::verbs says so); check the bindings agree.
const _: () = {
    assert!(ffi::IBV_WC_SUCCESS == verbs::WC_SUCCESS as u32);
    assert!(ffi::IBV_WC_WR_FLUSH_ERR == verbs::WC_WR_FLUSH_ERR as u32);
    assert!(ffi::IBV_WC_GENERAL_ERR == verbs::WC_GENERAL_ERR as u32);
    assert!(ffi::IBV_WC_SEND == verbs::WC_OPC_SEND as u32);
    assert!(ffi::IBV_WC_FETCH_ADD == verbs::WC_OPC_FETCH_ADD as u32);
    assert!(ffi::IBV_WC_FLUSH == verbs::WC_OPC_FLUSH as u32);
    assert!(ffi::IBV_WC_BIND_MW == verbs::WC_OPC_BIND_MW as u32);
    assert!(ffi::IBV_WC_LOCAL_INV == verbs::WC_OPC_LOCAL_INV as u32);
    assert!(ffi::IBV_WC_WITH_INV == verbs::WC_FLAG_WITH_INV as u32);
    assert!(ffi::IBV_WC_ATOMIC_WRITE == verbs::WC_OPC_ATOMIC_WRITE as u32);
    assert!(ffi::IBV_WC_RECV == verbs::WC_OPC_RECV as u32);
    assert!(ffi::IBV_WC_RECV_RDMA_WITH_IMM == verbs::WC_OPC_RECV_RDMA_WITH_IMM as u32);
    assert!(ffi::IBV_WC_GRH == verbs::WC_FLAG_GRH as u32);
    assert!(ffi::IBV_WC_WITH_IMM == verbs::WC_FLAG_WITH_IMM as u32);
};

/// `ibv_wc.sl` of a RoCE completion as mlx5 reports it (its CQE's packet type, which UCX's UD
/// transport reads to find the destination GID in the GRH area): bit 3 set for a RoCE frame
/// with a UDP header (RoCEv2), bits 2:0 the L3 header type (1 IPv6, 2 IPv4). rox's
/// `CQE_NETWORK_HDR_*` values are those L3 types; completions without one report the CQE's sl.
const ROCE_PKT_TYPE_UDP: u8 = 0x8;

fn work_completion_sl(cqe: &Cqe) -> u8 {
    match cqe.network_hdr {
        CQE_NETWORK_HDR_NONE => cqe.sl,
        l3 => ROCE_PKT_TYPE_UDP | l3,
    }
}

/// The `ibv_wc` of a CQE whose caller wr_id is `wr_id`.
fn work_completion(cqe: &Cqe, wr_id: u64) -> ffi::ibv_wc {
    ffi::ibv_wc {
        wr_id,
        status: u32::from(cqe.status),
        opcode: u32::from(cqe.opcode),
        vendor_err: u32::from(cqe.vendor_err),
        byte_len: cqe.byte_len,
        // Network order in both.
        __bindgen_anon_1: ffi::ibv_wc__bindgen_ty_1 {
            imm_data: cqe.imm_data,
        },
        qp_num: cqe.qp_num,
        src_qp: cqe.src_qp,
        wc_flags: u32::from(cqe.wc_flags),
        pkey_index: 0,
        slid: 0,
        sl: work_completion_sl(cqe),
        dlid_path_bits: 0,
    }
}

pub unsafe extern "C" fn poll_cq(
    ibcq: *mut ffi::ibv_cq,
    num_entries: c_int,
    wc: *mut ffi::ibv_wc,
) -> c_int {
    // SAFETY: libibverbs passes a CQ made by create_cq, of a live context.
    let (cq, hw) = unsafe {
        (
            RoxCq::from_ibv(ibcq),
            RoxContext::from_ibv((*ibcq).context).hw(),
        )
    };
    let wanted = usize::try_from(num_entries).unwrap_or(0);
    if wanted == 0 {
        return 0;
    }
    let mut state = cq.state.lock();
    let mut polled = 0;
    while polled < wanted {
        let Some((cqe, wr_id)) = cq.next(&mut state, hw) else {
            break;
        };
        // SAFETY: the caller's array holds num_entries entries.
        unsafe { wc.add(polled).write(work_completion(&cqe, wr_id)) };
        polled += 1;
    }
    if polled > 0 {
        hw.publish(cq.db_slot, SlotWord::A, state.ci);
    }
    polled as c_int
}

// ---- extended CQ (ibv_start_poll / ibv_next_poll / ibv_end_poll / ibv_wc_read_*) ----------
//
// The CQ lock is held from a successful start_poll to end_poll (libibverbs' contract: nothing
// else polls this CQ in between on this thread, and end_poll follows every successful
// start_poll).

/// # Safety
/// `ibcq` is an extended CQ made by [`create_cq_ex`] and still alive.
unsafe fn cq_ex<'a>(ibcq: *mut ffi::ibv_cq_ex) -> (&'a RoxCq, &'a ContextHw) {
    // SAFETY: the ibv_cq_ex shares the address of the ibv_cq (both are the verbs_cq union).
    unsafe {
        (
            RoxCq::from_ibv(ibcq.cast()),
            RoxContext::from_ibv((*ibcq).context).hw(),
        )
    }
}

/// Make the next CQE current; ENOENT when the ring holds none.
///
/// # Safety
/// `ibcq` as for [`cq_ex`]; the caller holds the CQ lock.
unsafe fn advance(ibcq: *mut ffi::ibv_cq_ex) -> c_int {
    // SAFETY: per the contract.
    let (cq, hw) = unsafe { cq_ex(ibcq) };
    // SAFETY: the lock is held (contract); this is the only reference to the state.
    let state = unsafe { cq.state.held() };
    match cq.next(state, hw) {
        None => ENOENT.0,
        Some((cqe, wr_id)) => {
            state.current = cqe;
            // SAFETY: the caller's CQ; these two fields are how libibverbs reports them.
            unsafe {
                (*ibcq).wr_id = wr_id;
                (*ibcq).status = u32::from(cqe.status);
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
    let (cq, _) = unsafe { cq_ex(ibcq) };
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
    let (cq, hw) = unsafe { cq_ex(ibcq) };
    // SAFETY: the lock is held since start_poll.
    unsafe {
        hw.publish(cq.db_slot, SlotWord::A, cq.state.held().ci);
        cq.state.release();
    }
}

/// The current CQE (between start_poll and end_poll).
///
/// # Safety
/// `ibcq` as for [`cq_ex`], between a successful start_poll and end_poll.
unsafe fn current(ibcq: *mut ffi::ibv_cq_ex) -> Cqe {
    // SAFETY: per the contract the lock is held; a copy is taken.
    unsafe { cq_ex(ibcq).0.state.held().current }
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
    unsafe { current(ibcq) }.qp_num
}
unsafe extern "C" fn read_src_qp(ibcq: *mut ffi::ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { current(ibcq) }.src_qp
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

fn resize(ibcq: *mut ffi::ibv_cq, cqe: c_int) -> Result<()> {
    // SAFETY: libibverbs passes a CQ made by create_cq, of a live context.
    let (cq, limits) = unsafe {
        (
            RoxCq::from_ibv(ibcq),
            &RoxContext::from_ibv((*ibcq).context).hw().limits,
        )
    };
    let wanted = u32::try_from(cqe).ok().filter(|&n| n > 0).ok_or(EINVAL)?;
    let depth = ring_depth(wanted, limits.max_cqe).ok_or(EINVAL)?;
    let ring = QueueBuffer::new(depth, CQE_SHIFT)?;
    // Held until the end: nobody polls while the device moves the unconsumed CQEs (from the
    // consumer index this lock's holders publish) into the new ring.
    let mut state = cq.state.lock();
    let mut cmd = DrvCmd::<ffi::ibv_resize_cq, _>::new(ResizeCqReq {
        buf_addr: ring.addr(),
        log_depth: depth.trailing_zeros(),
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
    state.ring = ring;
    state.depth = depth;
    Ok(())
}

/// `ibv_resize_cq`: a new ring of `next_pow2(cqe)` entries; the device moves the CQEs not
/// polled yet into it (EINVAL if they do not fit: the old ring stays).
pub unsafe extern "C" fn resize_cq(ibcq: *mut ffi::ibv_cq, cqe: c_int) -> c_int {
    int_errno(resize(ibcq, cqe))
}

pub unsafe extern "C" fn req_notify_cq(ibcq: *mut ffi::ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: libibverbs passes a CQ made by create_cq, of a live context.
    let (cq, hw) = unsafe {
        (
            RoxCq::from_ibv(ibcq),
            RoxContext::from_ibv((*ibcq).context).hw(),
        )
    };
    let arm_type = if solicited_only != 0 {
        CQ_ARM_SOLICITED
    } else {
        CQ_ARM_NEXT
    };
    let mut state = cq.state.lock();
    state.arm_seq = state.arm_seq.wrapping_add(1);
    hw.publish(
        cq.db_slot,
        SlotWord::B,
        cq_arm_word(state.arm_seq, arm_type),
    );
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_cq(depth: u32) -> RoxCq {
        RoxCq {
            vcq: Zeroable::zeroed(),
            db_slot: 0,
            state: Locked::new(CqState::new(
                QueueBuffer::new(depth, CQE_SHIFT).expect("ring"),
                depth,
            )),
        }
    }

    /// What the device does: body, then the owner byte of pass `index / depth`.
    fn device_writes(cq: &RoxCq, index: u32, mut cqe: Cqe) {
        let state = cq.state.lock();
        cqe.owner = owner_for(index, state.depth);
        unsafe { state.ring.entry::<Cqe>(index, state.depth).write(cqe) };
    }

    #[test]
    fn owner_bit_decides_what_is_valid_across_passes() {
        let cq = test_cq(2);
        assert!(
            cq.state.lock().take(0).is_none(),
            "a zeroed ring holds no CQE"
        );
        device_writes(
            &cq,
            0,
            Cqe {
                wr_id: 10,
                ..Default::default()
            },
        );
        device_writes(
            &cq,
            1,
            Cqe {
                wr_id: 11,
                ..Default::default()
            },
        );
        assert_eq!(cq.state.lock().take(0).map(|c| c.wr_id), Some(10));
        assert_eq!(cq.state.lock().take(1).map(|c| c.wr_id), Some(11));
        // Second pass: slot 0 still holds the pass-0 entry until the device rewrites it.
        assert!(cq.state.lock().take(2).is_none());
        device_writes(
            &cq,
            2,
            Cqe {
                wr_id: 12,
                ..Default::default()
            },
        );
        assert_eq!(cq.state.lock().take(2).map(|c| c.wr_id), Some(12));
        assert!(cq.state.lock().take(3).is_none());
    }

    #[test]
    fn work_completion_fields() {
        let cqe = Cqe {
            wr_id: 3,
            byte_len: 4096,
            imm_data: 0x1234_5678,
            qp_num: 17,
            src_qp: 18,
            status: verbs::WC_REM_ACCESS_ERR,
            opcode: verbs::WC_OPC_RECV_RDMA_WITH_IMM,
            wc_flags: verbs::WC_FLAG_WITH_IMM,
            sl: 2,
            vendor_err: 5,
            ..Default::default()
        };
        let wc = work_completion(&cqe, 0xfeed);
        assert_eq!(wc.wr_id, 0xfeed);
        assert_eq!(wc.status, ffi::IBV_WC_REM_ACCESS_ERR);
        assert_eq!(wc.opcode, ffi::IBV_WC_RECV_RDMA_WITH_IMM);
        assert_eq!(unsafe { wc.__bindgen_anon_1.imm_data }, 0x1234_5678);
        assert_eq!(
            (wc.byte_len, wc.qp_num, wc.src_qp, wc.sl, wc.vendor_err),
            (4096, 17, 18, 2, 5)
        );
        assert_eq!(wc.wc_flags, ffi::IBV_WC_WITH_IMM);
    }

    /// A UD receive reports its packet type in `sl` as mlx5 does (UCX's ud_verbs reads it).
    #[test]
    fn ud_receive_sl_is_the_roce_packet_type() {
        use rox_uapi::queue::{CQE_NETWORK_HDR_IPV4, CQE_NETWORK_HDR_IPV6};
        for (network_hdr, sl) in [(CQE_NETWORK_HDR_IPV4, 0xa), (CQE_NETWORK_HDR_IPV6, 0x9)] {
            let cqe = Cqe {
                opcode: verbs::WC_OPC_RECV,
                wc_flags: verbs::WC_FLAG_GRH,
                network_hdr,
                ..Default::default()
            };
            assert_eq!(work_completion(&cqe, 1).sl, sl);
        }
    }
}
