//! Shared receive queues.
//!
//! Control: librox allocates the ring (a power-of-two number of `queue::RqWqe`s) and passes it
//! in the create_srq udata; rox.ko pins it and returns the SRQ id and the doorbell slot
//! (`a` = producer index). The limit can be armed. Resizing (IBV_SRQ_MAX_WR) loses no posted
//! WR: with the SRQ lock held (nobody posts, no completion is retired) librox copies every
//! outstanding WQE into a new ring at the same free-running index and hands it to rox.ko in
//! the modify_srq udata; the device switches rings at its own consumer index, which lies
//! among the copied WQEs. Only then does librox adopt the new ring and drop the old one; on
//! failure the old ring stays.
//!
//! Data: post_srq_recv writes RQ WQEs and rings slot `a`; completions (on the CQs of the QPs
//! attached) free their slots, possibly out of order.

use crate::context::{DeviceLimits, RoxContext};
use crate::sys::doorbell::SlotWord;
use crate::sys::errno::{int_errno, ptr_or_errno, Errno, Result, EINVAL};
use crate::sys::ffi::{self, DrvCmd, DrvResp, Zeroable};
use crate::sys::memory::ring_depth;
use crate::qp::post_recv_list;
use crate::wq::{CompletionOrder, Ring};
use core::ffi::c_int;
use core::mem::{offset_of, size_of_val};
use rox_uapi::queue::RQ_WQE_SHIFT;
use rox_uapi::udata::{CreateSrqReq, CreateSrqResp, ModifySrqReq};

#[repr(C)]
pub struct RoxSrq {
    pub ibv_srq: ffi::ibv_srq,
    /// The receive ring (`RqWqe`s).
    ring: Ring,
    max_sge: u32,
    db_slot: u32,
}
const _: () = assert!(offset_of!(RoxSrq, ibv_srq) == 0);

impl RoxSrq {
    /// # Safety
    /// `srq` must be an `ibv_srq` made by [`create_srq`] and still alive.
    unsafe fn from_ibv<'a>(srq: *mut ffi::ibv_srq) -> &'a RoxSrq {
        // SAFETY: the ibv_srq is the first member of RoxSrq.
        unsafe { &*srq.cast::<RoxSrq>() }
    }

    /// The caller's wr_id of a receive completion for slot `index` (which becomes free).
    pub fn retire(&self, index: u32) -> Option<u64> {
        self.ring.lock().complete(index)
    }
}

fn ring_depth_for(attr: &ffi::ibv_srq_attr, limits: &DeviceLimits) -> Result<u32> {
    if attr.max_sge > limits.max_srq_sge || attr.max_wr == 0 {
        return Err(EINVAL);
    }
    ring_depth(attr.max_wr, limits.max_srq_wr).ok_or(EINVAL)
}

fn create(
    pd: *mut ffi::ibv_pd,
    init_attr: &mut ffi::ibv_srq_init_attr,
) -> Result<*mut ffi::ibv_srq> {
    // SAFETY: libibverbs passes a live PD of a context made by alloc_context.
    let ctx = unsafe { RoxContext::from_ibv((*pd).context) };
    let limits = &ctx.hw().limits;
    let depth = ring_depth_for(&init_attr.attr, limits)?;
    let ring = Ring::new(depth, RQ_WQE_SHIFT, CompletionOrder::AnyOrder)?;
    let srq = Box::into_raw(Box::new(RoxSrq {
        ibv_srq: Zeroable::zeroed(),
        ring,
        max_sge: 0,
        db_slot: 0,
    }));
    // SAFETY: `srq` is live and exclusively ours until returned.
    let srq_ref = unsafe { &mut *srq };
    let mut cmd = DrvCmd::<ffi::ibv_create_srq, _>::new(CreateSrqReq {
        buf_addr: srq_ref.ring.lock().buf_addr(),
        log_depth: depth.trailing_zeros(),
        reserved: 0,
    });
    let mut resp = DrvResp::<ffi::ib_uverbs_create_srq_resp, CreateSrqResp>::new();
    // SAFETY: our own ibv_srq (stable heap address: the kernel keeps it as user_handle) and
    // command/response buffers of the sizes given.
    let ret = unsafe {
        ffi::ibv_cmd_create_srq(
            pd,
            &mut srq_ref.ibv_srq,
            init_attr,
            &mut cmd.core,
            size_of_val(&cmd),
            &mut resp.core,
            size_of_val(&resp),
        )
    };
    if let Err(e) = Errno::check(ret) {
        // SAFETY: the kernel has no SRQ; reclaim the box (unmapping the ring).
        drop(unsafe { Box::from_raw(srq) });
        return Err(e);
    }
    // ibv_cmd_create_srq copied the granted attributes into init_attr.attr.
    srq_ref.max_sge = init_attr.attr.max_sge.min(limits.max_srq_sge);
    match ctx.check_db_slot(resp.drv.db_slot) {
        Ok(slot) => srq_ref.db_slot = slot,
        Err(e) => {
            // SAFETY: the SRQ was just created; undo it.
            unsafe { destroy(&mut srq_ref.ibv_srq) };
            return Err(e);
        }
    }
    Ok(&mut srq_ref.ibv_srq)
}

pub unsafe extern "C" fn create_srq(
    pd: *mut ffi::ibv_pd,
    attr: *mut ffi::ibv_srq_init_attr,
) -> *mut ffi::ibv_srq {
    // SAFETY: libibverbs passes a valid attribute struct.
    ptr_or_errno(create(pd, unsafe { &mut *attr }))
}

fn modify(srq: &RoxSrq, attr: &mut ffi::ibv_srq_attr, attr_mask: c_int) -> Result<()> {
    let ibsrq = (&srq.ibv_srq as *const ffi::ibv_srq).cast_mut();
    if attr_mask as u32 & ffi::IBV_SRQ_MAX_WR == 0 {
        let mut cmd = ffi::ibv_modify_srq::zeroed();
        // SAFETY: our SRQ, the caller's attributes, a command buffer of the size given.
        let ret =
            unsafe { ffi::ibv_cmd_modify_srq(ibsrq, attr, attr_mask, &mut cmd, size_of_val(&cmd)) };
        return Errno::check(ret);
    }
    // SAFETY: a live SRQ of a live context.
    let limits = &unsafe { RoxContext::from_ibv(srq.ibv_srq.context) }
        .hw()
        .limits;
    let depth = ring_depth(attr.max_wr, limits.max_srq_wr).ok_or(EINVAL)?;
    // Held until the end: no post and no completion retirement while rings change.
    let mut wq = srq.ring.lock();
    let buf = wq.resized_copy(depth)?;
    let mut cmd = DrvCmd::<ffi::ibv_modify_srq, _>::new(ModifySrqReq {
        buf_addr: buf.addr(),
        log_depth: depth.trailing_zeros(),
        reserved: 0,
    });
    // SAFETY: our SRQ, the caller's attributes, a command buffer of the size given.
    let ret = unsafe {
        ffi::ibv_cmd_modify_srq(ibsrq, attr, attr_mask, &mut cmd.core, size_of_val(&cmd))
    };
    // On failure `buf` is dropped: the kernel unpinned it and the device kept the old ring.
    Errno::check(ret)?;
    // The device reads the new ring now; the old one is unpinned and can go.
    drop(wq.install(buf, depth));
    Ok(())
}

pub unsafe extern "C" fn modify_srq(
    srq: *mut ffi::ibv_srq,
    attr: *mut ffi::ibv_srq_attr,
    attr_mask: c_int,
) -> c_int {
    // SAFETY: libibverbs passes an SRQ made by create_srq and valid attributes.
    int_errno(modify(
        unsafe { RoxSrq::from_ibv(srq) },
        unsafe { &mut *attr },
        attr_mask,
    ))
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
        drop(unsafe { Box::from_raw(srq.cast::<RoxSrq>()) });
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
    // SAFETY: libibverbs passes an SRQ made by create_srq, of a live context.
    let (srq, hw) = unsafe {
        (
            RoxSrq::from_ibv(ibsrq),
            RoxContext::from_ibv((*ibsrq).context).hw(),
        )
    };
    post_recv_list(
        &srq.ring,
        |pi| hw.ring(srq.db_slot, SlotWord::A, pi),
        wr,
        bad_wr,
        srq.max_sge,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: DeviceLimits = DeviceLimits {
        max_qp_wr: 1024,
        max_send_sge: 12,
        max_recv_sge: 7,
        max_cqe: 4096,
        max_srq_wr: 1024,
        max_srq_sge: 7,
        max_inline: 192,
    };

    #[test]
    fn srq_depth() {
        let attr = |max_wr, max_sge| ffi::ibv_srq_attr {
            max_wr,
            max_sge,
            srq_limit: 0,
        };
        assert_eq!(ring_depth_for(&attr(100, 1), &LIMITS), Ok(128));
        assert_eq!(ring_depth_for(&attr(0, 1), &LIMITS), Err(EINVAL));
        assert_eq!(ring_depth_for(&attr(1025, 1), &LIMITS), Err(EINVAL));
        assert_eq!(ring_depth_for(&attr(4, 8), &LIMITS), Err(EINVAL));
    }
}
