//! The extended post API (`ibv_qp_ex`: `ibv_wr_start`, `ibv_wr_<op>`, `ibv_wr_set_*`,
//! `ibv_wr_complete` / `ibv_wr_abort`) for QPs created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
//!
//! `ibv_wr_start` takes the SQ lock; each `ibv_wr_<op>` formats a new WQE in place at the next
//! ring slot (with `qp_ex->wr_id` / `wr_flags`), the `ibv_wr_set_*` calls complete it;
//! `ibv_wr_complete` rings the doorbell once for the whole batch and unlocks. A bad WR or a
//! full ring is remembered, and `ibv_wr_complete` then drops the whole batch (nothing of it
//! reaches the device) and returns the errno, as the verbs API specifies.

use crate::context::RoxContext;
use crate::sys::doorbell::SlotWord;
use crate::sys::errno::{Errno, Result, EINVAL, ENOMEM};
use crate::sys::ffi;
use crate::qp::{ud_seg, RoxQp};
use crate::wqe;
use core::ffi::{c_int, c_void};
use rox_uapi::queue::{SqSeg, SqWqe};
use rox_uapi::verbs;

/// The `IBV_QP_EX_WITH_*` operations rox supports (its 12 opcodes).
pub(crate) const SUPPORTED_SEND_OPS: u64 = (ffi::IBV_QP_EX_WITH_RDMA_WRITE
    | ffi::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | ffi::IBV_QP_EX_WITH_SEND
    | ffi::IBV_QP_EX_WITH_SEND_WITH_IMM
    | ffi::IBV_QP_EX_WITH_RDMA_READ
    | ffi::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | ffi::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | ffi::IBV_QP_EX_WITH_FLUSH
    | ffi::IBV_QP_EX_WITH_ATOMIC_WRITE
    | ffi::IBV_QP_EX_WITH_BIND_MW
    | ffi::IBV_QP_EX_WITH_LOCAL_INV
    | ffi::IBV_QP_EX_WITH_SEND_WITH_INV) as u64;

/// State of one `ibv_wr_start` .. `ibv_wr_complete` batch.
#[derive(Default)]
pub(crate) struct WrBatch {
    /// The SQ producer index at `ibv_wr_start` (where an abort rolls back to).
    start: u32,
    /// Slot of the WQE the `ibv_wr_set_*` calls apply to.
    current: Option<u32>,
    /// The first error of the batch.
    error: Option<Errno>,
}

/// Mark a QP as extended and install the `ibv_wr_*` functions.
pub(crate) fn install(vqp: &mut ffi::verbs_qp) {
    vqp.comp_mask |= ffi::VERBS_QP_EX;
    // SAFETY: every member of the union is plain data; the QP is not shared yet.
    let ex = unsafe { &mut vqp.__bindgen_anon_1.qp_ex };
    ex.wr_start = Some(wr_start);
    ex.wr_complete = Some(wr_complete);
    ex.wr_abort = Some(wr_abort);
    ex.wr_send = Some(wr_send);
    ex.wr_send_imm = Some(wr_send_imm);
    ex.wr_rdma_write = Some(wr_rdma_write);
    ex.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    ex.wr_rdma_read = Some(wr_rdma_read);
    ex.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    ex.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    ex.wr_flush = Some(wr_flush);
    ex.wr_atomic_write = Some(wr_atomic_write);
    ex.wr_bind_mw = Some(wr_bind_mw);
    ex.wr_local_inv = Some(wr_local_inv);
    ex.wr_send_inv = Some(wr_send_inv);
    ex.wr_set_sge = Some(wr_set_sge);
    ex.wr_set_sge_list = Some(wr_set_sge_list);
    ex.wr_set_inline_data = Some(wr_set_inline_data);
    ex.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    ex.wr_set_ud_addr = Some(wr_set_ud_addr);
}

/// # Safety
/// `ibqp` is the `ibv_qp_ex` of a live QP made by crate::qp.
unsafe fn qp_of<'a>(ibqp: *mut ffi::ibv_qp_ex) -> &'a RoxQp {
    // SAFETY: the ibv_qp_ex is the verbs_qp union, first in RoxQp.
    unsafe { &*ibqp.cast::<RoxQp>() }
}

/// The batch of a QP whose SQ lock the caller holds (between wr_start and wr_complete/abort).
///
/// # Safety
/// The SQ lock is held by this thread and no other reference to the batch is alive.
#[allow(clippy::mut_from_ref)]
unsafe fn batch(qp: &RoxQp) -> &mut WrBatch {
    // SAFETY: per the contract.
    unsafe { &mut *qp.batch.get() }
}

fn fail(batch: &mut WrBatch, e: Errno) {
    batch.error.get_or_insert(e);
    batch.current = None;
}

/// Start a WQE of `opcode` at the next slot; the caller then fills its segment. `None` after an
/// earlier error of the batch, or if this one fails (recorded).
///
/// # Safety
/// Between wr_start and wr_complete/abort on this thread; `ibqp` as for [`qp_of`].
unsafe fn begin<'a>(ibqp: *mut ffi::ibv_qp_ex, opcode: u8) -> Option<&'a mut SqWqe> {
    // SAFETY: per the contract.
    let (qp, wr_id, wr_flags) = unsafe { (qp_of(ibqp), (*ibqp).wr_id, (*ibqp).wr_flags) };
    // SAFETY: the SQ lock is held (contract).
    let (batch, wq) = unsafe { (batch(qp), qp.sq.held()) };
    if batch.error.is_some() {
        return None;
    }
    if !qp.can_send() {
        fail(batch, EINVAL);
        return None;
    }
    let Some(index) = wq.next_index() else {
        fail(batch, ENOMEM);
        return None;
    };
    let new = match wqe::new_wqe(qp, opcode, wr_flags, index) {
        Ok(w) => w,
        Err(e) => {
            fail(batch, e);
            return None;
        }
    };
    let slot = wq.entry::<SqWqe>(index);
    // SAFETY: a free slot of the ring (next_index), not visible to the device before the
    // doorbell.
    let wqe = unsafe {
        slot.write(new);
        &mut *slot
    };
    wq.commit(wr_id);
    batch.current = Some(index);
    Some(wqe)
}

/// The WQE the `ibv_wr_set_*` calls apply to, with its QP and batch.
///
/// # Safety
/// As for [`begin`].
unsafe fn current<'a>(
    ibqp: *mut ffi::ibv_qp_ex,
) -> Option<(&'a RoxQp, &'a mut WrBatch, &'a mut SqWqe)> {
    // SAFETY: per the contract.
    let qp = unsafe { qp_of(ibqp) };
    // SAFETY: the SQ lock is held (contract).
    let batch = unsafe { batch(qp) };
    if batch.error.is_some() {
        return None;
    }
    let Some(index) = batch.current else {
        // A set call without an operation first.
        fail(batch, EINVAL);
        return None;
    };
    // SAFETY: the slot `begin` wrote, still owned by this batch.
    // SAFETY: the SQ lock is held (contract).
    let wqe = unsafe { &mut *qp.sq.held().entry::<SqWqe>(index) };
    Some((qp, batch, wqe))
}

unsafe extern "C" fn wr_start(ibqp: *mut ffi::ibv_qp_ex) {
    // SAFETY: libibverbs passes one of our extended QPs.
    let qp = unsafe { qp_of(ibqp) };
    qp.sq.acquire();
    // SAFETY: the lock was just taken.
    let start = unsafe { qp.sq.held() }.pi();
    // SAFETY: the lock is held.
    unsafe {
        *batch(qp) = WrBatch {
            start,
            current: None,
            error: None,
        }
    };
}

/// End a batch: the producer index to announce (`None`: nothing to announce), or the batch's
/// error after dropping all of it. Releases nothing.
///
/// # Safety
/// The SQ lock is held by this thread.
unsafe fn finish(qp: &RoxQp) -> Result<Option<u32>> {
    // SAFETY: per the contract.
    let (batch, wq) = unsafe { (batch(qp), qp.sq.held()) };
    batch.current = None;
    if let Some(e) = batch.error.take() {
        wq.rollback(batch.start);
        return Err(e);
    }
    Ok((wq.pi() != batch.start).then_some(wq.pi()))
}

unsafe extern "C" fn wr_complete(ibqp: *mut ffi::ibv_qp_ex) -> c_int {
    // SAFETY: libibverbs passes one of our extended QPs, after wr_start.
    let qp = unsafe { qp_of(ibqp) };
    // SAFETY: the lock is held since wr_start.
    let ret = match unsafe { finish(qp) } {
        Ok(announce) => {
            if let Some(pi) = announce {
                // SAFETY: the QP's context is live.
                let hw = unsafe { RoxContext::from_ibv((*ibqp).qp_base.context) }.hw();
                hw.ring(qp.db_slot, SlotWord::A, pi);
            }
            0
        }
        Err(e) => e.0,
    };
    // SAFETY: taken in wr_start.
    unsafe { qp.sq.release() };
    ret
}

unsafe extern "C" fn wr_abort(ibqp: *mut ffi::ibv_qp_ex) {
    // SAFETY: libibverbs passes one of our extended QPs, after wr_start.
    let qp = unsafe { qp_of(ibqp) };
    // SAFETY: the lock is held since wr_start.
    unsafe {
        let (batch, wq) = (batch(qp), qp.sq.held());
        wq.rollback(batch.start);
        *batch = WrBatch::default();
        qp.sq.release();
    }
}

// ---- operations --------------------------------------------------------------------------
// SAFETY (all): called by libibverbs between wr_start and wr_complete/abort on our QP.

unsafe extern "C" fn wr_send(ibqp: *mut ffi::ibv_qp_ex) {
    unsafe { begin(ibqp, verbs::WR_SEND) };
}

unsafe extern "C" fn wr_send_imm(ibqp: *mut ffi::ibv_qp_ex, imm_data: ffi::__be32) {
    if let Some(wqe) = unsafe { begin(ibqp, verbs::WR_SEND_WITH_IMM) } {
        wqe.imm_data = imm_data;
    }
}

unsafe extern "C" fn wr_rdma_write(ibqp: *mut ffi::ibv_qp_ex, rkey: u32, remote_addr: u64) {
    if let Some(wqe) = unsafe { begin(ibqp, verbs::WR_RDMA_WRITE) } {
        wqe.seg = wqe::rdma_seg(remote_addr, rkey);
    }
}

unsafe extern "C" fn wr_rdma_write_imm(
    ibqp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    imm_data: ffi::__be32,
) {
    if let Some(wqe) = unsafe { begin(ibqp, verbs::WR_RDMA_WRITE_WITH_IMM) } {
        wqe.seg = wqe::rdma_seg(remote_addr, rkey);
        wqe.imm_data = imm_data;
    }
}

unsafe extern "C" fn wr_rdma_read(ibqp: *mut ffi::ibv_qp_ex, rkey: u32, remote_addr: u64) {
    if let Some(wqe) = unsafe { begin(ibqp, verbs::WR_RDMA_READ) } {
        wqe.seg = wqe::rdma_seg(remote_addr, rkey);
    }
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    ibqp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    if let Some(wqe) = unsafe { begin(ibqp, verbs::WR_ATOMIC_CMP_AND_SWP) } {
        wqe.seg = wqe::atomic_seg(remote_addr, rkey, compare, swap);
    }
}

unsafe extern "C" fn wr_atomic_fetch_add(
    ibqp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    if let Some(wqe) = unsafe { begin(ibqp, verbs::WR_ATOMIC_FETCH_AND_ADD) } {
        wqe.seg = wqe::atomic_seg(remote_addr, rkey, add, 0);
    }
}

/// SEND with invalidate (RC): the peer invalidates its window `invalidate_rkey`.
unsafe extern "C" fn wr_send_inv(ibqp: *mut ffi::ibv_qp_ex, invalidate_rkey: u32) {
    if let Some(wqe) = unsafe { begin(ibqp, verbs::WR_SEND_WITH_INV) } {
        wqe.seg = wqe::invalidate_seg(invalidate_rkey);
    }
}

/// LOCAL_INV of a type 2 window: complete in itself.
unsafe extern "C" fn wr_local_inv(ibqp: *mut ffi::ibv_qp_ex, invalidate_rkey: u32) {
    if let Some(wqe) = unsafe { begin(ibqp, verbs::WR_LOCAL_INV) } {
        wqe.seg = wqe::invalidate_seg(invalidate_rkey);
    }
}

/// BIND_MW of a type 2 window to `rkey` (its index, a new low byte): complete in itself.
unsafe extern "C" fn wr_bind_mw(
    ibqp: *mut ffi::ibv_qp_ex,
    mw: *mut ffi::ibv_mw,
    rkey: u32,
    bind_info: *const ffi::ibv_mw_bind_info,
) {
    // SAFETY: libibverbs' arguments: a live window or null, bind info or null.
    let type_2 = !mw.is_null() && unsafe { (*mw).type_ } == ffi::IBV_MW_TYPE_2;
    if !type_2 || bind_info.is_null() {
        // SAFETY: between wr_start and wr_complete (this function's contract).
        return fail(unsafe { batch(qp_of(ibqp)) }, EINVAL);
    }
    if let Some(wqe) = unsafe { begin(ibqp, verbs::WR_BIND_MW) } {
        // SAFETY: a live window and the caller's bind info (checked non-null above).
        match unsafe { wqe::bind_seg(mw, rkey, &*bind_info) } {
            Ok(seg) => wqe.seg = seg,
            // SAFETY: between wr_start and wr_complete (this function's contract).
            Err(e) => fail(unsafe { batch(qp_of(ibqp)) }, e),
        }
    }
}

/// FLUSH (RC): complete in itself, no `ibv_wr_set_*` follows.
unsafe extern "C" fn wr_flush(
    ibqp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    len: usize,
    flush_type: u8,
    level: u8,
) {
    if let Some(wqe) = unsafe { begin(ibqp, verbs::WR_FLUSH) } {
        match wqe::flush_seg(remote_addr, rkey, len, flush_type, level) {
            Ok(seg) => wqe.seg = seg,
            // SAFETY: between wr_start and wr_complete (this function's contract).
            Err(e) => fail(unsafe { batch(qp_of(ibqp)) }, e),
        }
    }
}

/// ATOMIC WRITE (RC) of the 8 bytes at `atomic_wr`: complete in itself.
unsafe extern "C" fn wr_atomic_write(
    ibqp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    atomic_wr: *const c_void,
) {
    if atomic_wr.is_null() {
        // SAFETY: between wr_start and wr_complete (this function's contract).
        return fail(unsafe { batch(qp_of(ibqp)) }, EINVAL);
    }
    if let Some(wqe) = unsafe { begin(ibqp, verbs::WR_ATOMIC_WRITE) } {
        // SAFETY: the caller's 8-byte value (ibv_wr_atomic_write's contract).
        let value = unsafe { atomic_wr.cast::<[u8; 8]>().read_unaligned() };
        wqe.seg = wqe::atomic_write_seg(remote_addr, rkey, value);
    }
}

// ---- data and address --------------------------------------------------------------------

/// Record a failed `ibv_wr_set_*` in the batch.
fn check(batch: &mut WrBatch, result: Result<()>) {
    if let Err(e) = result {
        fail(batch, e);
    }
}

unsafe extern "C" fn wr_set_sge(ibqp: *mut ffi::ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    if let Some((qp, batch, wqe)) = unsafe { current(ibqp) } {
        check(
            batch,
            wqe::set_sges(qp, wqe, &[ffi::ibv_sge { addr, length, lkey }]),
        );
    }
}

unsafe extern "C" fn wr_set_sge_list(
    ibqp: *mut ffi::ibv_qp_ex,
    num_sge: usize,
    sg_list: *const ffi::ibv_sge,
) {
    if let Some((qp, batch, wqe)) = unsafe { current(ibqp) } {
        let sges = match num_sge {
            0 => &[][..],
            // SAFETY: the caller's list of num_sge entries.
            n if !sg_list.is_null() => unsafe { core::slice::from_raw_parts(sg_list, n) },
            _ => return fail(batch, EINVAL),
        };
        check(batch, wqe::set_sges(qp, wqe, sges));
    }
}

unsafe extern "C" fn wr_set_inline_data(
    ibqp: *mut ffi::ibv_qp_ex,
    addr: *mut c_void,
    length: usize,
) {
    if let Some((qp, batch, wqe)) = unsafe { current(ibqp) } {
        let buf = core::iter::once((addr.cast_const(), length));
        // SAFETY: the caller's buffer.
        check(batch, unsafe { wqe::set_inline(qp, wqe, buf) });
    }
}

unsafe extern "C" fn wr_set_inline_data_list(
    ibqp: *mut ffi::ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ffi::ibv_data_buf,
) {
    if let Some((qp, batch, wqe)) = unsafe { current(ibqp) } {
        if num_buf > 0 && buf_list.is_null() {
            return fail(batch, EINVAL);
        }
        let list = match num_buf {
            0 => &[][..],
            // SAFETY: the caller's list of num_buf entries.
            n => unsafe { core::slice::from_raw_parts(buf_list, n) },
        };
        let bufs = list.iter().map(|b| (b.addr.cast_const(), b.length));
        // SAFETY: the caller's buffers.
        check(batch, unsafe { wqe::set_inline(qp, wqe, bufs) });
    }
}

unsafe extern "C" fn wr_set_ud_addr(
    ibqp: *mut ffi::ibv_qp_ex,
    ah: *mut ffi::ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    if let Some((qp, batch, wqe)) = unsafe { current(ibqp) } {
        if qp.qp_type != ffi::IBV_QPT_UD {
            return fail(batch, EINVAL);
        }
        // SAFETY: an AH of this process (libibverbs' contract).
        match unsafe { ud_seg(qp, ah, remote_qpn, remote_qkey) } {
            Ok(ud) => wqe.seg = SqSeg { ud },
            Err(e) => fail(batch, e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::tests::test_qp;
    use rox_uapi::queue::WQE_FLAG_INLINE;

    fn ex(qp: &mut RoxQp) -> *mut ffi::ibv_qp_ex {
        install(&mut qp.vqp);
        // SAFETY: the union member installed above.
        unsafe { &raw mut qp.vqp.__bindgen_anon_1.qp_ex }
    }

    fn slot(qp: &RoxQp, index: u32) -> SqWqe {
        // SAFETY: reading a ring entry of the test QP.
        unsafe { qp.sq.lock().entry::<SqWqe>(index).read() }
    }

    #[test]
    fn a_batch_formats_wqes_in_place() {
        let mut qp = test_qp(ffi::IBV_QPT_RC);
        let ibqp = ex(&mut qp);
        let payload = *b"inline!";
        unsafe {
            wr_start(ibqp);
            (*ibqp).wr_id = 7;
            (*ibqp).wr_flags = ffi::IBV_SEND_SIGNALED;
            wr_rdma_write_imm(ibqp, 5, 0x9000, 0x0a0b_0c0d);
            wr_set_sge_list(
                ibqp,
                2,
                [ffi::ibv_sge {
                    addr: 1,
                    length: 2,
                    lkey: 3,
                }; 2]
                    .as_ptr(),
            );
            (*ibqp).wr_id = 8;
            (*ibqp).wr_flags = 0;
            wr_send(ibqp);
            wr_set_inline_data(ibqp, payload.as_ptr() as *mut c_void, payload.len());
            assert_eq!(finish(&qp), Ok(Some(2)));
            qp.sq.release();
        }
        let w0 = slot(&qp, 0);
        assert_eq!(
            (w0.wr_id, w0.opcode, w0.num_sge, w0.imm_data),
            (0, verbs::WR_RDMA_WRITE_WITH_IMM, 2, 0x0a0b_0c0d)
        );
        assert_eq!(
            w0.flags & rox_uapi::queue::WQE_FLAG_SIGNALED,
            rox_uapi::queue::WQE_FLAG_SIGNALED
        );
        assert_eq!(unsafe { w0.seg.rdma }.rkey, 5);
        let w1 = slot(&qp, 1);
        assert_eq!(
            (w1.opcode, w1.flags, w1.inline_len),
            (verbs::WR_SEND, WQE_FLAG_INLINE, 7)
        );
        assert_eq!(&w1.data[..7], b"inline!");
        // The CQE of slot 1 gives back the caller's wr_id of the second WR.
        let cqe = rox_uapi::queue::Cqe {
            wr_id: 1,
            opcode: verbs::WC_OPC_SEND,
            ..Default::default()
        };
        assert_eq!(qp.retire(&cqe), Some(8));
    }

    #[test]
    fn ud_addr_carries_the_ahs_mac() {
        let mut qp = test_qp(ffi::IBV_QPT_UD);
        let ibqp = ex(&mut qp);
        let mut ah = crate::qp::tests::test_ah();
        unsafe {
            wr_start(ibqp);
            wr_send(ibqp);
            wr_set_ud_addr(ibqp, &raw mut ah.ibv_ah, 7, 0x0bad_cafe);
            wr_set_sge(ibqp, 1, 0x1000, 8);
            assert_eq!(finish(&qp), Ok(Some(1)));
            qp.sq.release();
        }
        let ud = unsafe { slot(&qp, 0).seg.ud };
        assert_eq!(
            (ud.dest_qpn, ud.qkey, ud.dmac),
            (7, 0x0bad_cafe, [0x52, 0x54, 0x00, 0x12, 0x34, 0x56])
        );
    }

    #[test]
    fn an_error_drops_the_whole_batch() {
        let mut qp = test_qp(ffi::IBV_QPT_UC);
        let ibqp = ex(&mut qp);
        unsafe {
            wr_start(ibqp);
            wr_send(ibqp);
            wr_set_sge(ibqp, 1, 0x1000, 8);
            // UC has no RDMA READ.
            wr_rdma_read(ibqp, 1, 0x2000);
            wr_set_sge(ibqp, 1, 0x1000, 8);
            assert_eq!(finish(&qp), Err(EINVAL));
            qp.sq.release();
            // The ring is empty again: four more WQEs fit (depth 4), the fifth is ENOMEM.
            wr_start(ibqp);
            for _ in 0..5 {
                wr_send(ibqp);
            }
            assert_eq!(finish(&qp), Err(ENOMEM));
            qp.sq.release();
            wr_start(ibqp);
            wr_send(ibqp);
            wr_abort(ibqp);
            assert_eq!(qp.sq.lock().pi(), 0);
        }
    }

    #[test]
    fn flush_and_atomic_write() {
        let mut qp = test_qp(ffi::IBV_QPT_RC);
        let ibqp = ex(&mut qp);
        let value = *b"atomic!!";
        unsafe {
            wr_start(ibqp);
            wr_flush(
                ibqp,
                3,
                0x4000,
                64,
                ffi::IBV_FLUSH_GLOBAL as u8,
                ffi::IBV_FLUSH_RANGE as u8,
            );
            wr_atomic_write(ibqp, 4, 0x5000, value.as_ptr().cast());
            assert_eq!(finish(&qp), Ok(Some(2)));
            qp.sq.release();
        }
        let f = slot(&qp, 0);
        let r = unsafe { f.seg.rdma };
        assert_eq!(f.opcode, verbs::WR_FLUSH);
        assert_eq!(
            (r.remote_addr, r.rkey, r.length, r.flush_type, r.flush_level),
            (
                0x4000,
                3,
                64,
                verbs::FLUSH_TYPE_GLOBAL,
                verbs::FLUSH_LEVEL_RANGE
            )
        );
        let a = slot(&qp, 1);
        let r = unsafe { a.seg.rdma };
        assert_eq!((a.opcode, a.num_sge), (verbs::WR_ATOMIC_WRITE, 0));
        assert_eq!((r.remote_addr, r.rkey), (0x5000, 4));
        assert_eq!(r.compare_add.to_ne_bytes(), value);
        unsafe {
            // A bad placement type fails the batch; so does an SGE on a FLUSH.
            wr_start(ibqp);
            wr_flush(ibqp, 3, 0, 8, 0, ffi::IBV_FLUSH_RANGE as u8);
            assert_eq!(finish(&qp), Err(EINVAL));
            qp.sq.release();
            wr_start(ibqp);
            wr_flush(ibqp, 3, 0, 8, 1, ffi::IBV_FLUSH_MR as u8);
            wr_set_sge(ibqp, 1, 0x1000, 8);
            assert_eq!(finish(&qp), Err(EINVAL));
            qp.sq.release();
        }
        // UC has neither.
        let mut uc = test_qp(ffi::IBV_QPT_UC);
        let ibuc = ex(&mut uc);
        unsafe {
            wr_start(ibuc);
            wr_atomic_write(ibuc, 4, 0x5000, value.as_ptr().cast());
            assert_eq!(finish(&uc), Err(EINVAL));
            uc.sq.release();
        }
    }
}
