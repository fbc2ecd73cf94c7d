//! The extended post API (`ibv_qp_ex`: `ibv_wr_start`, `ibv_wr_<op>`, `ibv_wr_set_*`,
//! `ibv_wr_complete` / `ibv_wr_abort`) for QPs created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
//!
//! `ibv_wr_start` takes the SQ lock; each `ibv_wr_<op>` formats a new WQE in place at the next
//! ring slot (with `qp_ex->wr_id` / `wr_flags`), the `ibv_wr_set_*` calls complete it;
//! `ibv_wr_complete` rings the doorbell once for the whole batch and unlocks. A bad WR or a
//! full ring is remembered, and `ibv_wr_complete` then drops the whole batch (nothing of it
//! reaches the device) and returns the errno, as the verbs API specifies.
//!
//! The entry points (crate::sys::qp_ex) hold the SQ lock from `ibv_wr_start` on and hand each
//! function here the QP and its locked [`SendQueue`].

#![deny(unsafe_code)]

use crate::ah::RoxAh;
use crate::context::ContextHw;
use crate::qp::{RoxQp, SendQueue};
use crate::sys::errno::{Errno, Result, EINVAL, ENOMEM};
use crate::sys::ffi;
use crate::sys::wr::{AppSlice, MwView, UserBuf};
use crate::wqe::{self, BindInfo};
use rox_uapi::ids::{Key, Qpn};
use rox_uapi::queue::{Sge, SqSeg, SqWqe};
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
pub struct WrBatch {
    /// The SQ producer index at `ibv_wr_start` (where an abort rolls back to).
    start: u32,
    /// Slot of the WQE the `ibv_wr_set_*` calls apply to.
    current: Option<u32>,
    /// The first error of the batch.
    error: Option<Errno>,
    /// A WQE of the batch is a local operation (`ContextHw::ring_sq`: its doorbell wakes).
    local: bool,
}

/// `qp_ex->wr_id` and `qp_ex->wr_flags` when an operation is posted.
#[derive(Clone, Copy, Debug)]
pub struct WrMeta {
    pub wr_id: u64,
    pub flags: u32,
}

fn fail(batch: &mut WrBatch, e: Errno) {
    batch.error.get_or_insert(e);
    batch.current = None;
}

/// Record an operation refused before it began (bad arguments).
pub fn refuse(sq: &mut SendQueue, e: Errno) {
    fail(&mut sq.batch, e);
}

/// Start a WQE of `opcode` at the next slot; the caller then fills its segment. `None` after an
/// earlier error of the batch, or if this one fails (recorded).
fn begin<'q>(qp: &RoxQp, sq: &'q mut SendQueue, meta: WrMeta, opcode: u8) -> Option<&'q mut SqWqe> {
    let SendQueue { wq, batch } = sq;
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
    let new = match wqe::new_wqe(&qp.sq_attrs, opcode, meta.flags, index) {
        Ok(w) => w,
        Err(e) => {
            fail(batch, e);
            return None;
        }
    };
    // A free slot of the ring (next_index), not visible to the device before the doorbell.
    wq.write(index, new);
    wq.commit(meta.wr_id);
    batch.current = Some(index);
    batch.local |= verbs::wr_opcode_is_local(opcode);
    Some(wq.entry_mut(index))
}

/// The WQE the `ibv_wr_set_*` calls apply to, with the batch.
fn current(sq: &mut SendQueue) -> Option<(&mut WrBatch, &mut SqWqe)> {
    let SendQueue { wq, batch } = sq;
    if batch.error.is_some() {
        return None;
    }
    let Some(index) = batch.current else {
        // A set call without an operation first.
        fail(batch, EINVAL);
        return None;
    };
    // The slot `begin` wrote, still owned by this batch.
    Some((batch, wq.entry_mut(index)))
}

/// `ibv_wr_start` (the SQ lock just taken).
pub fn start(sq: &mut SendQueue) {
    sq.batch = WrBatch {
        start: sq.wq.pi(),
        current: None,
        error: None,
        local: false,
    };
}

/// End a batch: the producer index to announce (`None`: nothing to announce), or the batch's
/// error after dropping all of it.
pub fn finish(sq: &mut SendQueue) -> Result<Option<u32>> {
    let SendQueue { wq, batch } = sq;
    batch.current = None;
    if let Some(e) = batch.error.take() {
        wq.rollback(batch.start);
        return Err(e);
    }
    Ok((wq.pi() != batch.start).then_some(wq.pi()))
}

/// `ibv_wr_complete`: announce the batch (or drop it and return its errno).
pub fn complete(qp: &RoxQp, sq: &mut SendQueue, hw: &ContextHw) -> Result<()> {
    let packets_only = !sq.batch.local;
    if let Some(pi) = finish(sq)? {
        hw.ring_sq(qp.db_slot, &qp.sq_attrs, packets_only, pi);
    }
    Ok(())
}

/// `ibv_wr_abort`: drop the batch.
pub fn abort(sq: &mut SendQueue) {
    let SendQueue { wq, batch } = sq;
    wq.rollback(batch.start);
    *batch = WrBatch::default();
}

// ---- operations --------------------------------------------------------------------------

pub fn send(qp: &RoxQp, sq: &mut SendQueue, meta: WrMeta) {
    begin(qp, sq, meta, verbs::WR_SEND);
}

pub fn send_imm(qp: &RoxQp, sq: &mut SendQueue, meta: WrMeta, imm_data: u32) {
    if let Some(wqe) = begin(qp, sq, meta, verbs::WR_SEND_WITH_IMM) {
        wqe.imm_data = imm_data;
    }
}

pub fn rdma_write(qp: &RoxQp, sq: &mut SendQueue, meta: WrMeta, rkey: Key, remote_addr: u64) {
    if let Some(wqe) = begin(qp, sq, meta, verbs::WR_RDMA_WRITE) {
        wqe.seg = SqSeg::remote(remote_addr, rkey);
    }
}

pub fn rdma_write_imm(
    qp: &RoxQp,
    sq: &mut SendQueue,
    meta: WrMeta,
    rkey: Key,
    remote_addr: u64,
    imm_data: u32,
) {
    if let Some(wqe) = begin(qp, sq, meta, verbs::WR_RDMA_WRITE_WITH_IMM) {
        wqe.seg = SqSeg::remote(remote_addr, rkey);
        wqe.imm_data = imm_data;
    }
}

pub fn rdma_read(qp: &RoxQp, sq: &mut SendQueue, meta: WrMeta, rkey: Key, remote_addr: u64) {
    if let Some(wqe) = begin(qp, sq, meta, verbs::WR_RDMA_READ) {
        wqe.seg = SqSeg::remote(remote_addr, rkey);
    }
}

pub fn atomic_cmp_swp(
    qp: &RoxQp,
    sq: &mut SendQueue,
    meta: WrMeta,
    rkey: Key,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    if let Some(wqe) = begin(qp, sq, meta, verbs::WR_ATOMIC_CMP_AND_SWP) {
        wqe.seg = SqSeg::atomic(remote_addr, rkey, compare, swap);
    }
}

pub fn atomic_fetch_add(
    qp: &RoxQp,
    sq: &mut SendQueue,
    meta: WrMeta,
    rkey: Key,
    remote_addr: u64,
    add: u64,
) {
    if let Some(wqe) = begin(qp, sq, meta, verbs::WR_ATOMIC_FETCH_AND_ADD) {
        wqe.seg = SqSeg::atomic(remote_addr, rkey, add, 0);
    }
}

/// SEND with invalidate (RC): the peer invalidates its window `invalidate_rkey`.
pub fn send_inv(qp: &RoxQp, sq: &mut SendQueue, meta: WrMeta, invalidate_rkey: Key) {
    if let Some(wqe) = begin(qp, sq, meta, verbs::WR_SEND_WITH_INV) {
        wqe.seg = SqSeg::invalidate(invalidate_rkey);
    }
}

/// LOCAL_INV of a type 2 window: complete in itself.
pub fn local_inv(qp: &RoxQp, sq: &mut SendQueue, meta: WrMeta, invalidate_rkey: Key) {
    if let Some(wqe) = begin(qp, sq, meta, verbs::WR_LOCAL_INV) {
        wqe.seg = SqSeg::invalidate(invalidate_rkey);
    }
}

/// BIND_MW of a type 2 window `mw` to `rkey` (the same window with the consumer's variant)
/// with `info`: complete in itself. A missing window or binding, or a type 1 window, is EINVAL.
pub fn bind_mw(
    qp: &RoxQp,
    sq: &mut SendQueue,
    meta: WrMeta,
    mw: Option<MwView>,
    rkey: Key,
    info: Option<BindInfo>,
) {
    let (Some(mw), Some(info)) = (mw.filter(|mw| mw.mw_type == ffi::IBV_MW_TYPE_2), info) else {
        return refuse(sq, EINVAL);
    };
    if let Some(wqe) = begin(qp, sq, meta, verbs::WR_BIND_MW) {
        match wqe::bind_seg(mw.rkey, rkey, &info) {
            Ok(seg) => wqe.seg = seg,
            Err(e) => refuse(sq, e),
        }
    }
}

/// FLUSH (RC): complete in itself, no `ibv_wr_set_*` follows.
#[allow(clippy::too_many_arguments)]
pub fn flush(
    qp: &RoxQp,
    sq: &mut SendQueue,
    meta: WrMeta,
    rkey: Key,
    remote_addr: u64,
    len: usize,
    flush_type: u8,
    level: u8,
) {
    if let Some(wqe) = begin(qp, sq, meta, verbs::WR_FLUSH) {
        match wqe::flush_seg(remote_addr, rkey, len, flush_type, level) {
            Ok(seg) => wqe.seg = seg,
            Err(e) => refuse(sq, e),
        }
    }
}

/// ATOMIC WRITE (RC) of the 8 bytes `value` (`None`: no value given, EINVAL): complete in
/// itself.
pub fn atomic_write(
    qp: &RoxQp,
    sq: &mut SendQueue,
    meta: WrMeta,
    rkey: Key,
    remote_addr: u64,
    value: Option<[u8; 8]>,
) {
    let Some(value) = value else {
        return refuse(sq, EINVAL);
    };
    if let Some(wqe) = begin(qp, sq, meta, verbs::WR_ATOMIC_WRITE) {
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

pub fn set_sge(qp: &RoxQp, sq: &mut SendQueue, sge: Sge) {
    if let Some((batch, wqe)) = current(sq) {
        check(
            batch,
            wqe::set_sges(&qp.sq_attrs, wqe, core::iter::once(sge)),
        );
    }
}

pub fn set_sge_list(qp: &RoxQp, sq: &mut SendQueue, sges: AppSlice<'_, ffi::ibv_sge>) {
    if let Some((batch, wqe)) = current(sq) {
        let result = sges
            .sges()
            .and_then(|sges| wqe::set_sges(&qp.sq_attrs, wqe, sges));
        check(batch, result);
    }
}

pub fn set_inline_data(qp: &RoxQp, sq: &mut SendQueue, buf: UserBuf<'_>) {
    if let Some((batch, wqe)) = current(sq) {
        check(
            batch,
            wqe::set_inline(&qp.sq_attrs, wqe, core::iter::once(buf)),
        );
    }
}

pub fn set_inline_data_list(qp: &RoxQp, sq: &mut SendQueue, bufs: AppSlice<'_, ffi::ibv_data_buf>) {
    if let Some((batch, wqe)) = current(sq) {
        let result = bufs
            .bufs()
            .and_then(|bufs| wqe::set_inline(&qp.sq_attrs, wqe, bufs));
        check(batch, result);
    }
}

/// `ibv_wr_set_xrc_srqn`: the remote XRC SRQ of an XRC initiator's current WR.
pub fn set_xrc_srqn(qp: &RoxQp, sq: &mut SendQueue, remote_srqn: u32) {
    if let Some((batch, wqe)) = current(sq) {
        if qp.sq_attrs.qp_type != ffi::IBV_QPT_XRC_SEND {
            return fail(batch, EINVAL);
        }
        wqe.xrc_srqn = remote_srqn;
    }
}

pub fn set_ud_addr(
    qp: &RoxQp,
    sq: &mut SendQueue,
    ah: Option<&RoxAh>,
    remote_qpn: Qpn,
    remote_qkey: u32,
) {
    if let Some((batch, wqe)) = current(sq) {
        if qp.sq_attrs.qp_type != ffi::IBV_QPT_UD {
            return fail(batch, EINVAL);
        }
        match ah {
            Some(ah) => {
                let qkey = qp.qkey.load(core::sync::atomic::Ordering::Relaxed);
                wqe.seg = SqSeg {
                    ud: wqe::ud_seg(&ah.addr, remote_qpn, remote_qkey, qkey),
                };
            }
            None => fail(batch, EINVAL),
        }
    }
}
