//! The `ibv_qp_ex` entry points of the extended post API (crate::qp_ex): `ibv_wr_start` takes
//! the SQ lock and `ibv_wr_complete` / `ibv_wr_abort` release it; every call in between gets
//! the QP, its locked send queue and `qp_ex->wr_id` / `wr_flags`, the application's pointers
//! as views (crate::sys::wr), and its keys and QP numbers as `Key` / `Qpn` (converted here,
//! once).

use crate::qp::{RoxQp, SendQueue};
use crate::qp_ex::{self as logic, WrMeta};
use crate::sys::context::RoxContext;
use crate::sys::ffi;
use crate::sys::objects;
use crate::sys::wr::{bind_info, AppSlice, MwView, UserBuf};
use core::ffi::{c_int, c_void};
use rox_uapi::ids::{Key, Qpn};
use rox_uapi::queue::Sge;

/// Mark a QP as extended and install the `ibv_wr_*` functions.
pub fn install(vqp: &mut ffi::verbs_qp) {
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
    ex.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
}

/// The QP, its send queue (locked since wr_start) and the WR's id and flags.
///
/// # Safety
/// `ibqp` is the `ibv_qp_ex` of a live QP made by crate::sys::qp, between wr_start and
/// wr_complete/abort on this thread (which holds the SQ lock), and no other reference to the
/// send queue is alive.
unsafe fn batch<'a>(ibqp: *mut ffi::ibv_qp_ex) -> (&'a RoxQp, &'a mut SendQueue, WrMeta) {
    // SAFETY: per the contract.
    unsafe {
        let qp = objects::qp_ex(ibqp);
        let meta = WrMeta {
            wr_id: (*ibqp).wr_id,
            flags: (*ibqp).wr_flags,
        };
        (qp, qp.sq.held(), meta)
    }
}

unsafe extern "C" fn wr_start(ibqp: *mut ffi::ibv_qp_ex) {
    // SAFETY: libibverbs passes one of our extended QPs.
    let qp = unsafe { objects::qp_ex(ibqp) };
    qp.sq.acquire();
    // SAFETY: the lock was just taken; no other reference to the queue.
    logic::start(unsafe { qp.sq.held() });
}

unsafe extern "C" fn wr_complete(ibqp: *mut ffi::ibv_qp_ex) -> c_int {
    // SAFETY: libibverbs passes one of our extended QPs, after wr_start, of a live context.
    let (qp, sq, _) = unsafe { batch(ibqp) };
    // SAFETY: as above.
    let hw = unsafe { RoxContext::from_ibv((*ibqp).qp_base.context) }.hw();
    let ret = match logic::complete(qp, sq, hw) {
        Ok(()) => 0,
        Err(e) => e.0,
    };
    // SAFETY: taken in wr_start; `sq` is not used any more.
    unsafe { qp.sq.release() };
    ret
}

unsafe extern "C" fn wr_abort(ibqp: *mut ffi::ibv_qp_ex) {
    // SAFETY: libibverbs passes one of our extended QPs, after wr_start.
    let (qp, sq, _) = unsafe { batch(ibqp) };
    logic::abort(sq);
    // SAFETY: taken in wr_start; `sq` is not used any more.
    unsafe { qp.sq.release() };
}

// ---- operations: libibverbs calls each between wr_start and wr_complete/abort on our QP ----

unsafe extern "C" fn wr_send(ibqp: *mut ffi::ibv_qp_ex) {
    // SAFETY: see above.
    let (qp, sq, meta) = unsafe { batch(ibqp) };
    logic::send(qp, sq, meta);
}

unsafe extern "C" fn wr_send_imm(ibqp: *mut ffi::ibv_qp_ex, imm_data: ffi::__be32) {
    // SAFETY: see above.
    let (qp, sq, meta) = unsafe { batch(ibqp) };
    logic::send_imm(qp, sq, meta, imm_data);
}

unsafe extern "C" fn wr_rdma_write(ibqp: *mut ffi::ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: see above.
    let (qp, sq, meta) = unsafe { batch(ibqp) };
    logic::rdma_write(qp, sq, meta, Key::from_raw(rkey), remote_addr);
}

unsafe extern "C" fn wr_rdma_write_imm(
    ibqp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    imm_data: ffi::__be32,
) {
    // SAFETY: see above.
    let (qp, sq, meta) = unsafe { batch(ibqp) };
    logic::rdma_write_imm(qp, sq, meta, Key::from_raw(rkey), remote_addr, imm_data);
}

unsafe extern "C" fn wr_rdma_read(ibqp: *mut ffi::ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: see above.
    let (qp, sq, meta) = unsafe { batch(ibqp) };
    logic::rdma_read(qp, sq, meta, Key::from_raw(rkey), remote_addr);
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    ibqp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    // SAFETY: see above.
    let (qp, sq, meta) = unsafe { batch(ibqp) };
    logic::atomic_cmp_swp(
        qp,
        sq,
        meta,
        Key::from_raw(rkey),
        remote_addr,
        compare,
        swap,
    );
}

unsafe extern "C" fn wr_atomic_fetch_add(
    ibqp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    // SAFETY: see above.
    let (qp, sq, meta) = unsafe { batch(ibqp) };
    logic::atomic_fetch_add(qp, sq, meta, Key::from_raw(rkey), remote_addr, add);
}

unsafe extern "C" fn wr_send_inv(ibqp: *mut ffi::ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: see above.
    let (qp, sq, meta) = unsafe { batch(ibqp) };
    logic::send_inv(qp, sq, meta, Key::from_raw(invalidate_rkey));
}

unsafe extern "C" fn wr_local_inv(ibqp: *mut ffi::ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: see above.
    let (qp, sq, meta) = unsafe { batch(ibqp) };
    logic::local_inv(qp, sq, meta, Key::from_raw(invalidate_rkey));
}

unsafe extern "C" fn wr_bind_mw(
    ibqp: *mut ffi::ibv_qp_ex,
    mw: *mut ffi::ibv_mw,
    rkey: u32,
    bind_info_ptr: *const ffi::ibv_mw_bind_info,
) {
    // SAFETY: see above; libibverbs' arguments: a live window or null, bind info (naming a
    // live MR or none) or null.
    let (qp, sq, meta, mw, info) = unsafe {
        let (qp, sq, meta) = batch(ibqp);
        let info = bind_info_ptr.as_ref().map(|info| bind_info(info));
        (qp, sq, meta, MwView::of(mw), info)
    };
    logic::bind_mw(qp, sq, meta, mw, Key::from_raw(rkey), info);
}

unsafe extern "C" fn wr_flush(
    ibqp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    len: usize,
    flush_type: u8,
    level: u8,
) {
    // SAFETY: see above.
    let (qp, sq, meta) = unsafe { batch(ibqp) };
    logic::flush(
        qp,
        sq,
        meta,
        Key::from_raw(rkey),
        remote_addr,
        len,
        flush_type,
        level,
    );
}

unsafe extern "C" fn wr_atomic_write(
    ibqp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    atomic_wr: *const c_void,
) {
    // SAFETY: see above.
    let (qp, sq, meta) = unsafe { batch(ibqp) };
    // SAFETY: the caller's 8-byte value when not null (ibv_wr_atomic_write's contract).
    let value =
        (!atomic_wr.is_null()).then(|| unsafe { atomic_wr.cast::<[u8; 8]>().read_unaligned() });
    logic::atomic_write(qp, sq, meta, Key::from_raw(rkey), remote_addr, value);
}

unsafe extern "C" fn wr_set_sge(ibqp: *mut ffi::ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    // SAFETY: see above.
    let (qp, sq, _) = unsafe { batch(ibqp) };
    let sge = Sge {
        addr,
        length,
        lkey: Key::from_raw(lkey),
    };
    logic::set_sge(qp, sq, sge);
}

unsafe extern "C" fn wr_set_sge_list(
    ibqp: *mut ffi::ibv_qp_ex,
    num_sge: usize,
    sg_list: *const ffi::ibv_sge,
) {
    // SAFETY: see above; the caller's list of num_sge entries (or null).
    let (qp, sq, sges) = unsafe {
        let (qp, sq, _) = batch(ibqp);
        (qp, sq, AppSlice::new(sg_list, num_sge))
    };
    logic::set_sge_list(qp, sq, sges);
}

unsafe extern "C" fn wr_set_inline_data(
    ibqp: *mut ffi::ibv_qp_ex,
    addr: *mut c_void,
    length: usize,
) {
    // SAFETY: see above; the caller's buffer.
    let (qp, sq, buf) = unsafe {
        let (qp, sq, _) = batch(ibqp);
        (qp, sq, UserBuf::new(addr.cast_const(), length))
    };
    logic::set_inline_data(qp, sq, buf);
}

unsafe extern "C" fn wr_set_inline_data_list(
    ibqp: *mut ffi::ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ffi::ibv_data_buf,
) {
    // SAFETY: see above; the caller's list of num_buf readable buffers (or null).
    let (qp, sq, bufs) = unsafe {
        let (qp, sq, _) = batch(ibqp);
        (qp, sq, AppSlice::new(buf_list, num_buf))
    };
    logic::set_inline_data_list(qp, sq, bufs);
}

unsafe extern "C" fn wr_set_ud_addr(
    ibqp: *mut ffi::ibv_qp_ex,
    ah: *mut ffi::ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    // SAFETY: see above; an AH of this process or null (libibverbs' contract).
    let (qp, sq, ah) = unsafe {
        let (qp, sq, _) = batch(ibqp);
        (qp, sq, (!ah.is_null()).then(|| objects::ah(ah)))
    };
    logic::set_ud_addr(qp, sq, ah, Qpn::from_raw(remote_qpn), remote_qkey);
}

unsafe extern "C" fn wr_set_xrc_srqn(ibqp: *mut ffi::ibv_qp_ex, remote_srqn: u32) {
    // SAFETY: see above.
    let (qp, sq, _) = unsafe { batch(ibqp) };
    logic::set_xrc_srqn(qp, sq, remote_srqn);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::tests::test_qp;
    use crate::sys::errno::{Result, EINVAL, ENOMEM};
    use crate::sys::wr::seg;
    use rox_uapi::queue::{SqWqe, WQE_FLAG_INLINE};
    use rox_uapi::verbs;

    /// `wr_complete` without the doorbell (the test QPs have no context): the batch's result.
    ///
    /// # Safety
    /// The SQ lock is held (since `wr_start`).
    unsafe fn finish(qp: &RoxQp) -> Result<Option<u32>> {
        // SAFETY: per the contract.
        logic::finish(unsafe { qp.sq.held() })
    }

    fn ex(qp: &mut RoxQp) -> *mut ffi::ibv_qp_ex {
        install(&mut qp.vqp);
        // The ibv_qp_ex installed above is the verbs_qp's first member (its union).
        (&raw mut qp.vqp).cast::<ffi::ibv_qp_ex>()
    }

    fn slot(qp: &RoxQp, index: u32) -> SqWqe {
        qp.sq.lock().read::<SqWqe>(index)
    }

    #[test]
    fn a_batch_formats_wqes_in_place() {
        let mut qp = test_qp(ffi::IBV_QPT_RC);
        let ibqp = ex(&mut qp);
        let payload = *b"inline!";
        // SAFETY: the test plays libibverbs: our extended QP, calls in wr_start ..
        // wr_complete order, the lock released after each batch.
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
        assert_eq!(seg::rdma(&w0.seg).rkey, Key::from_raw(5));
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
        // SAFETY: the test plays libibverbs: our extended QP, calls in wr_start ..
        // wr_complete order, the lock released after each batch.
        unsafe {
            wr_start(ibqp);
            wr_send(ibqp);
            wr_set_ud_addr(ibqp, &raw mut ah.ibv_ah, 7, 0x0bad_cafe);
            wr_set_sge(ibqp, 1, 0x1000, 8);
            assert_eq!(finish(&qp), Ok(Some(1)));
            qp.sq.release();
        }
        let ud = seg::ud(&slot(&qp, 0).seg);
        assert_eq!(
            (ud.dest_qpn, ud.qkey, ud.dmac),
            (
                Qpn::from_raw(7),
                0x0bad_cafe,
                [0x52, 0x54, 0x00, 0x12, 0x34, 0x56]
            )
        );
    }

    #[test]
    fn an_error_drops_the_whole_batch() {
        let mut qp = test_qp(ffi::IBV_QPT_UC);
        let ibqp = ex(&mut qp);
        // SAFETY: the test plays libibverbs: our extended QP, calls in wr_start ..
        // wr_complete order, the lock released after each batch.
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
        // SAFETY: the test plays libibverbs: our extended QP, calls in wr_start ..
        // wr_complete order, the lock released after each batch.
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
        let r = seg::rdma(&f.seg);
        assert_eq!(f.opcode, verbs::WR_FLUSH);
        assert_eq!(
            (r.remote_addr, r.rkey, r.length, r.flush_type, r.flush_level),
            (
                0x4000,
                Key::from_raw(3),
                64,
                verbs::FLUSH_TYPE_GLOBAL,
                verbs::FLUSH_LEVEL_RANGE
            )
        );
        let a = slot(&qp, 1);
        let r = seg::rdma(&a.seg);
        assert_eq!((a.opcode, a.num_sge), (verbs::WR_ATOMIC_WRITE, 0));
        assert_eq!((r.remote_addr, r.rkey), (0x5000, Key::from_raw(4)));
        assert_eq!(r.compare_add.to_ne_bytes(), value);
        // SAFETY: the test plays libibverbs: our extended QP, calls in wr_start ..
        // wr_complete order, the lock released after each batch.
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
        // SAFETY: the test plays libibverbs: our extended QP, calls in wr_start ..
        // wr_complete order, the lock released after each batch.
        unsafe {
            wr_start(ibuc);
            wr_atomic_write(ibuc, 4, 0x5000, value.as_ptr().cast());
            assert_eq!(finish(&uc), Err(EINVAL));
            uc.sq.release();
        }
    }
}
