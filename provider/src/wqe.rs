//! Send WQE formatting, shared by `ibv_post_send` (crate::qp) and the extended post API
//! (crate::qp_ex): which operations a QP takes, the WQE header, the RDMA / atomic / FLUSH
//! segment, the scatter/gather list and inline payload are each written in one place. It knows
//! of its queue only the few facts in [`SqAttrs`], not the QP.

#![deny(unsafe_code)]

use crate::ah::UdAddress;
use crate::sys::errno::{Result, EINVAL};
use crate::sys::ffi;
use crate::sys::wr::UserBuf;
use core::mem::{offset_of, size_of};
use rox_uapi::ids::{Key, Qpn};
use rox_uapi::queue::{
    BindSeg, RdmaSeg, Sge, SqSeg, SqWqe, UdSeg, SQ_WQE_DATA_SIZE, WQE_FLAG_FENCE, WQE_FLAG_INLINE,
    WQE_FLAG_SIGNALED, WQE_FLAG_SOLICITED,
};
use rox_uapi::verbs;

/// What formatting a send WQE needs to know of its queue (set at QP creation).
#[derive(Clone, Copy, Debug)]
pub struct SqAttrs {
    /// `IBV_QPT_*`: which operations the queue takes.
    pub qp_type: ffi::ibv_qp_type,
    /// `sq_sig_all`: every WQE is signaled.
    pub sig_all: bool,
    /// SGEs per WQE rox.ko granted (at most `queue::SQ_MAX_SGE`).
    pub max_sge: u32,
    /// Inline bytes per WQE rox.ko granted (at most `queue::SQ_MAX_INLINE`).
    pub max_inline: u32,
    /// Whether the queue's QP counts in its port's flight (`verbs::qp_type_counts_in_flight`:
    /// RC, XRC initiator): its doorbell of WQEs that all send packets may skip the wake while
    /// the idle device says the flight is full (`ContextHw::ring_sq`). Decided once, at
    /// create ([`Self::new`]), so that no doorbell maps the type again.
    pub counts_in_flight: bool,
}

impl SqAttrs {
    /// The attributes of a new queue of a QP of `qp_type` (`sq_sig_all`: `sig_all`), before
    /// rox.ko granted its capacities (`max_sge` and `max_inline` 0 until then).
    pub fn new(qp_type: ffi::ibv_qp_type, sig_all: bool) -> Self {
        SqAttrs {
            qp_type,
            sig_all,
            max_sge: 0,
            max_inline: 0,
            counts_in_flight: self::qp_type(qp_type).is_some_and(verbs::qp_type_counts_in_flight),
        }
    }
}

/// libibverbs' QP type -> rox's (`verbs::QPT_*`; None for a type rox does not make). The
/// numbers are the same (ibv_cmd_create_qp_ex hands libibverbs' to rox.ko, which takes it as
/// ib_core's), but librox's rules on QP types that uapi writes take uapi's numbers through here.
pub(crate) fn qp_type(qp_type: ffi::ibv_qp_type) -> Option<u8> {
    Some(match qp_type {
        ffi::IBV_QPT_RC => verbs::QPT_RC,
        ffi::IBV_QPT_UC => verbs::QPT_UC,
        ffi::IBV_QPT_UD => verbs::QPT_UD,
        ffi::IBV_QPT_XRC_SEND => verbs::QPT_XRC_INI,
        ffi::IBV_QPT_XRC_RECV => verbs::QPT_XRC_TGT,
        _ => return None,
    })
}

/// A WR's Q_Key with this bit set means "use the QP's Q_Key" (IB spec 10.2.5).
pub(crate) const QKEY_USE_QP: u32 = 1 << 31;

// rox's WR opcodes are libibverbs' numbers (`verbs::WR_*` = `IBV_WR_*`).
const _: () = {
    assert!(ffi::IBV_WR_RDMA_WRITE == verbs::WR_RDMA_WRITE as u32);
    assert!(ffi::IBV_WR_ATOMIC_FETCH_AND_ADD == verbs::WR_ATOMIC_FETCH_AND_ADD as u32);
    assert!(ffi::IBV_WR_FLUSH == verbs::WR_FLUSH as u32);
    assert!(ffi::IBV_WR_ATOMIC_WRITE == verbs::WR_ATOMIC_WRITE as u32);
    assert!(ffi::IBV_FLUSH_GLOBAL == verbs::FLUSH_TYPE_GLOBAL as u32);
    assert!(ffi::IBV_FLUSH_PERSISTENT == verbs::FLUSH_TYPE_PERSISTENT as u32);
    assert!(ffi::IBV_FLUSH_RANGE == verbs::FLUSH_LEVEL_RANGE as u32);
    assert!(ffi::IBV_FLUSH_MR == verbs::FLUSH_LEVEL_MR as u32);
    assert!(ffi::IBV_WR_LOCAL_INV == verbs::WR_LOCAL_INV as u32);
    assert!(ffi::IBV_WR_BIND_MW == verbs::WR_BIND_MW as u32);
    assert!(ffi::IBV_WR_SEND_WITH_INV == verbs::WR_SEND_WITH_INV as u32);
    assert!(ffi::IBV_MW_TYPE_1 == verbs::MW_TYPE_1 as u32);
    assert!(ffi::IBV_MW_TYPE_2 == verbs::MW_TYPE_2 as u32);
    assert!(ffi::IBV_ACCESS_MW_BIND == verbs::ACCESS_MW_BIND);
};

/// libibverbs' WR opcode -> rox's (`verbs::WR_*`; only these exist on rox).
pub(crate) fn wr_opcode(opcode: ffi::ibv_wr_opcode) -> Option<u8> {
    Some(match opcode {
        ffi::IBV_WR_RDMA_WRITE => verbs::WR_RDMA_WRITE,
        ffi::IBV_WR_RDMA_WRITE_WITH_IMM => verbs::WR_RDMA_WRITE_WITH_IMM,
        ffi::IBV_WR_SEND => verbs::WR_SEND,
        ffi::IBV_WR_SEND_WITH_IMM => verbs::WR_SEND_WITH_IMM,
        ffi::IBV_WR_RDMA_READ => verbs::WR_RDMA_READ,
        ffi::IBV_WR_ATOMIC_CMP_AND_SWP => verbs::WR_ATOMIC_CMP_AND_SWP,
        ffi::IBV_WR_ATOMIC_FETCH_AND_ADD => verbs::WR_ATOMIC_FETCH_AND_ADD,
        ffi::IBV_WR_LOCAL_INV => verbs::WR_LOCAL_INV,
        ffi::IBV_WR_BIND_MW => verbs::WR_BIND_MW,
        ffi::IBV_WR_SEND_WITH_INV => verbs::WR_SEND_WITH_INV,
        ffi::IBV_WR_FLUSH => verbs::WR_FLUSH,
        ffi::IBV_WR_ATOMIC_WRITE => verbs::WR_ATOMIC_WRITE,
        _ => return None,
    })
}

/// Whether a QP of `qp_type` takes operation `op`: RC all, an XRC initiator RC's but FLUSH
/// and ATOMIC WRITE (no XRC form on the wire), UC SEND/WRITE and the memory window
/// operations, UD SEND.
pub(crate) fn opcode_allowed(qp_type: ffi::ibv_qp_type, op: u8) -> bool {
    match qp_type {
        ffi::IBV_QPT_RC => true,
        ffi::IBV_QPT_XRC_SEND => !matches!(op, verbs::WR_FLUSH | verbs::WR_ATOMIC_WRITE),
        ffi::IBV_QPT_UC => matches!(
            op,
            verbs::WR_SEND
                | verbs::WR_SEND_WITH_IMM
                | verbs::WR_RDMA_WRITE
                | verbs::WR_RDMA_WRITE_WITH_IMM
                | verbs::WR_BIND_MW
                | verbs::WR_LOCAL_INV
        ),
        ffi::IBV_QPT_UD => matches!(op, verbs::WR_SEND | verbs::WR_SEND_WITH_IMM),
        _ => false,
    }
}

/// Operations whose payload comes from SGEs or inline data (READ/atomics take SGEs only, as
/// their local destination; FLUSH and ATOMIC WRITE take neither).
fn takes_inline(op: u8) -> bool {
    matches!(
        op,
        verbs::WR_SEND
            | verbs::WR_SEND_WITH_IMM
            | verbs::WR_SEND_WITH_INV
            | verbs::WR_RDMA_WRITE
            | verbs::WR_RDMA_WRITE_WITH_IMM
    )
}

fn takes_sges(op: u8) -> bool {
    !matches!(
        op,
        verbs::WR_FLUSH | verbs::WR_ATOMIC_WRITE | verbs::WR_BIND_MW | verbs::WR_LOCAL_INV
    )
}

/// WQE flags for `IBV_SEND_*` flags (SIGNALED also from `sq_sig_all`; INLINE is set by
/// [`set_inline`]).
#[inline]
fn wqe_flags(sq: &SqAttrs, send_flags: u32) -> u8 {
    let mut flags = 0;
    if sq.sig_all || send_flags & ffi::IBV_SEND_SIGNALED != 0 {
        flags |= WQE_FLAG_SIGNALED;
    }
    if send_flags & ffi::IBV_SEND_SOLICITED != 0 {
        flags |= WQE_FLAG_SOLICITED;
    }
    if send_flags & ffi::IBV_SEND_FENCE != 0 {
        flags |= WQE_FLAG_FENCE;
    }
    flags
}

/// A new WQE of `opcode` for ring slot `index` (its `wr_id`: the device echoes it in the CQE),
/// with no segment and no data yet; EINVAL if the QP's type does not take the operation.
#[inline]
pub(crate) fn new_wqe(sq: &SqAttrs, opcode: u8, send_flags: u32, index: u32) -> Result<SqWqe> {
    if !opcode_allowed(sq.qp_type, opcode) {
        return Err(EINVAL);
    }
    Ok(SqWqe::new(
        u64::from(index),
        opcode,
        wqe_flags(sq, send_flags),
    ))
}

/// The segment of an ATOMIC WRITE: the 8 bytes ride in `compare_add`, in memory order.
pub(crate) fn atomic_write_seg(remote_addr: u64, rkey: Key, value: [u8; 8]) -> SqSeg {
    SqSeg::atomic(remote_addr, rkey, u64::from_ne_bytes(value), 0)
}

/// A window binding as the application describes it (`ibv_mw_bind_info`).
#[derive(Clone, Copy, Debug, Default)]
pub struct BindInfo {
    /// The lkey of the MR bound to, `None` for no MR (an unbind, length 0).
    pub mr_lkey: Option<Key>,
    pub addr: u64,
    pub length: u64,
    /// `IBV_ACCESS_*` of the window.
    pub access: u32,
}

/// The segment of a BIND_MW giving the window whose rkey is `old_rkey` the rkey `new_rkey`
/// (the same window: only the variant may differ) and `info`; EINVAL for a key of another window,
/// access bits a window cannot grant (zero based included), or no MR with a non-zero length.
pub(crate) fn bind_seg(old_rkey: Key, new_rkey: Key, info: &BindInfo) -> Result<SqSeg> {
    if old_rkey.with_variant(new_rkey.variant()) != new_rkey
        || info.access & !verbs::ACCESS_MW_ALLOWED != 0
    {
        return Err(EINVAL);
    }
    let lkey = match info.mr_lkey {
        None if info.length != 0 => return Err(EINVAL),
        // No MR means length 0, and the device reads no lkey for a bind of length 0.
        None => Key::default(),
        Some(lkey) => lkey,
    };
    Ok(SqSeg {
        bind: BindSeg {
            addr: info.addr,
            length: info.length,
            new_rkey,
            lkey,
            access: info.access,
            ..Default::default()
        },
    })
}

/// The UD address segment for a destination: the AH's address vector, the remote QP and its
/// Q_Key (`qp_qkey`, the QP's own, for a Q_Key with the high bit set).
pub(crate) fn ud_seg(ah: &UdAddress, remote_qpn: Qpn, remote_qkey: u32, qp_qkey: u32) -> UdSeg {
    let qkey = if remote_qkey & QKEY_USE_QP != 0 {
        qp_qkey
    } else {
        remote_qkey
    };
    UdSeg {
        dgid: ah.dgid,
        dest_qpn: remote_qpn,
        qkey,
        flow_label: ah.flow_label,
        sgid_index: ah.sgid_index,
        hop_limit: ah.hop_limit,
        traffic_class: ah.traffic_class,
        dmac: ah.dmac,
        ..Default::default()
    }
}

/// The segment of a FLUSH; EINVAL for a placement type that is empty or has unknown bits, an
/// unknown level, or a range length the wire cannot carry (32 bits; level MR ignores it).
pub(crate) fn flush_seg(
    remote_addr: u64,
    rkey: Key,
    len: usize,
    flush_type: u8,
    level: u8,
) -> Result<SqSeg> {
    let length = match level {
        verbs::FLUSH_LEVEL_RANGE => u32::try_from(len).map_err(|_| EINVAL)?,
        verbs::FLUSH_LEVEL_MR => 0,
        _ => return Err(EINVAL),
    };
    if flush_type == 0 || flush_type & !verbs::FLUSH_TYPES_ALL != 0 {
        return Err(EINVAL);
    }
    Ok(SqSeg {
        rdma: RdmaSeg {
            remote_addr,
            rkey,
            length,
            flush_type,
            flush_level: level,
            ..Default::default()
        },
    })
}

/// Store SGE `i` in a send WQE's data area, in `Sge`'s layout (native byte order, as the
/// device reads it).
#[inline]
fn put_sge(data: &mut [u8; SQ_WQE_DATA_SIZE], i: usize, sge: &Sge) {
    const SGE: usize = size_of::<Sge>();
    let mut bytes = [0u8; SGE];
    let mut field = |offset: usize, value: &[u8]| {
        bytes[offset..offset + value.len()].copy_from_slice(value);
    };
    field(offset_of!(Sge, addr), &sge.addr.to_ne_bytes());
    field(offset_of!(Sge, length), &sge.length.to_ne_bytes());
    field(offset_of!(Sge, lkey), &sge.lkey.get().to_ne_bytes());
    // One store of the whole SGE (one bounds check).
    data[i * SGE..(i + 1) * SGE].copy_from_slice(&bytes);
}

/// SGE `i` of a send WQE's data area (tests).
#[cfg(test)]
pub(crate) fn sge_at(data: &[u8; SQ_WQE_DATA_SIZE], i: usize) -> Sge {
    let at = i * size_of::<Sge>();
    let bytes = |offset: usize, len: usize| &data[at + offset..at + offset + len];
    Sge {
        addr: u64::from_ne_bytes(bytes(offset_of!(Sge, addr), 8).try_into().unwrap()),
        length: u32::from_ne_bytes(bytes(offset_of!(Sge, length), 4).try_into().unwrap()),
        lkey: Key::from_raw(u32::from_ne_bytes(
            bytes(offset_of!(Sge, lkey), 4).try_into().unwrap(),
        )),
    }
}

/// Store `sges` as the WQE's scatter/gather list (at most the queue's `max_sge`).
#[inline]
pub(crate) fn set_sges(
    sq: &SqAttrs,
    wqe: &mut SqWqe,
    sges: impl ExactSizeIterator<Item = Sge>,
) -> Result<()> {
    let n = sges.len();
    if n > sq.max_sge as usize || (n != 0 && !takes_sges(wqe.opcode)) {
        return Err(EINVAL);
    }
    for (i, s) in sges.enumerate() {
        // i < max_sge <= SQ_MAX_SGE (rox.ko's cap), so the SGE lies inside `data`.
        put_sge(&mut wqe.data, i, &s);
    }
    wqe.flags &= !WQE_FLAG_INLINE;
    wqe.inline_len = 0;
    wqe.num_sge = n as u8;
    Ok(())
}

/// Copy the application's buffers `bufs` into the WQE as its inline payload (at most the
/// queue's `max_inline`; SEND and WRITE only). Nothing is read before the sizes are checked.
pub(crate) fn set_inline<'a>(
    sq: &SqAttrs,
    wqe: &mut SqWqe,
    bufs: impl Iterator<Item = UserBuf<'a>> + Clone,
) -> Result<()> {
    if !takes_inline(wqe.opcode) {
        return Err(EINVAL);
    }
    let total = bufs
        .clone()
        .try_fold(0usize, |sum, buf| sum.checked_add(buf.len()))
        .ok_or(EINVAL)?;
    if total > sq.max_inline as usize || total > SQ_WQE_DATA_SIZE {
        return Err(EINVAL);
    }
    let mut at = 0;
    for buf in bufs {
        // `at + len <= SQ_WQE_DATA_SIZE` (checked above).
        buf.copy_to(&mut wqe.data[at..at + buf.len()]);
        at += buf.len();
    }
    wqe.flags |= WQE_FLAG_INLINE;
    wqe.num_sge = 0;
    wqe.inline_len = at as u32;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sys::wr::seg;

    /// A queue as the tests' QPs have it: 2 SGEs, 64 inline bytes.
    pub(crate) fn test_sq(qp_type: ffi::ibv_qp_type) -> SqAttrs {
        SqAttrs {
            max_sge: 2,
            max_inline: 64,
            ..SqAttrs::new(qp_type, false)
        }
    }

    #[test]
    fn operations_per_qp_type() {
        let rc = test_sq(ffi::IBV_QPT_RC);
        let uc = test_sq(ffi::IBV_QPT_UC);
        let ud = test_sq(ffi::IBV_QPT_UD);
        let xrc = test_sq(ffi::IBV_QPT_XRC_SEND);
        let xrc_target = test_sq(ffi::IBV_QPT_XRC_RECV);
        for op in [verbs::WR_FLUSH, verbs::WR_ATOMIC_WRITE, verbs::WR_RDMA_READ] {
            assert!(new_wqe(&rc, op, 0, 0).is_ok());
            assert_eq!(new_wqe(&uc, op, 0, 0).err(), Some(EINVAL));
            assert_eq!(new_wqe(&ud, op, 0, 0).err(), Some(EINVAL));
            let xrc_carries = op == verbs::WR_RDMA_READ;
            assert_eq!(new_wqe(&xrc, op, 0, 0).is_ok(), xrc_carries);
            assert_eq!(new_wqe(&xrc_target, op, 0, 0).err(), Some(EINVAL));
        }
        assert_eq!(wr_opcode(ffi::IBV_WR_TSO), None);
        assert_eq!(wr_opcode(ffi::IBV_WR_BIND_MW), Some(verbs::WR_BIND_MW));
        assert_eq!(wr_opcode(ffi::IBV_WR_FLUSH), Some(verbs::WR_FLUSH));
    }

    /// Which queues' doorbells of packets may skip the wake: RC and XRC initiators', by uapi's
    /// rule through librox's one mapping of libibverbs' QP types.
    #[test]
    fn rc_and_xrc_initiator_queues_count_in_the_ports_flight() {
        let cases = [
            (ffi::IBV_QPT_RC, Some(verbs::QPT_RC), true),
            (ffi::IBV_QPT_UC, Some(verbs::QPT_UC), false),
            (ffi::IBV_QPT_UD, Some(verbs::QPT_UD), false),
            (ffi::IBV_QPT_XRC_SEND, Some(verbs::QPT_XRC_INI), true),
            (ffi::IBV_QPT_XRC_RECV, Some(verbs::QPT_XRC_TGT), false),
            (ffi::IBV_QPT_RAW_PACKET, None, false),
            (ffi::IBV_QPT_DRIVER, None, false),
        ];
        for (ibv, rox, counts) in cases {
            assert_eq!(qp_type(ibv), rox, "ibv QP type {ibv}");
            for sig_all in [false, true] {
                let sq = SqAttrs::new(ibv, sig_all);
                assert_eq!(sq.counts_in_flight, counts, "ibv QP type {ibv}");
            }
        }
    }

    #[test]
    fn flush_segment_checks_type_level_and_length() {
        let seg = flush_seg(
            0x1000,
            Key::from_raw(7),
            4096,
            verbs::FLUSH_TYPE_GLOBAL,
            verbs::FLUSH_LEVEL_RANGE,
        )
        .expect("valid");
        let r = seg::rdma(&seg);
        assert_eq!(
            (r.remote_addr, r.rkey, r.length, r.flush_type, r.flush_level),
            (
                0x1000,
                Key::from_raw(7),
                4096,
                verbs::FLUSH_TYPE_GLOBAL,
                verbs::FLUSH_LEVEL_RANGE
            )
        );
        // Level MR ignores the length, even one beyond 32 bits.
        let seg = flush_seg(
            0,
            Key::from_raw(7),
            usize::MAX,
            verbs::FLUSH_TYPE_GLOBAL,
            verbs::FLUSH_LEVEL_MR,
        )
        .expect("valid");
        assert_eq!(seg::rdma(&seg).length, 0);
        let bad = [
            (
                1usize << 32,
                verbs::FLUSH_TYPE_GLOBAL,
                verbs::FLUSH_LEVEL_RANGE,
            ),
            (8, 0, verbs::FLUSH_LEVEL_RANGE),
            (8, 0x4, verbs::FLUSH_LEVEL_RANGE),
            (8, verbs::FLUSH_TYPE_GLOBAL, 2),
        ];
        for (len, ptype, level) in bad {
            assert_eq!(
                flush_seg(0, Key::from_raw(7), len, ptype, level).err(),
                Some(EINVAL)
            );
        }
    }

    #[test]
    fn atomic_write_value_is_in_memory_order() {
        let seg = atomic_write_seg(8, Key::from_raw(1), *b"12345678");
        assert_eq!(seg::rdma(&seg).compare_add.to_ne_bytes(), *b"12345678");
    }

    #[test]
    fn data_rules() {
        let qp = test_sq(ffi::IBV_QPT_RC);
        let sge = Sge {
            addr: 1,
            length: 2,
            lkey: Key::from_raw(3),
        };
        let mut flush = new_wqe(&qp, verbs::WR_FLUSH, 0, 0).unwrap();
        assert_eq!(set_sges(&qp, &mut flush, [sge].into_iter()), Err(EINVAL));
        assert_eq!(set_sges(&qp, &mut flush, [].into_iter()), Ok(()));
        let mut read = new_wqe(&qp, verbs::WR_RDMA_READ, 0, 0).unwrap();
        let byte = [0u8; 1];
        let one = core::iter::once(UserBuf::from_slice(&byte));
        assert_eq!(set_inline(&qp, &mut read, one), Err(EINVAL));
        assert_eq!(
            set_sges(&qp, &mut read, [sge; 3].into_iter()),
            Err(EINVAL),
            "max_send_sge 2"
        );
        let mut send = new_wqe(&qp, verbs::WR_SEND, ffi::IBV_SEND_SIGNALED, 3).unwrap();
        assert_eq!((send.wr_id, send.flags), (3, WQE_FLAG_SIGNALED));
        let big = [0u8; 65];
        let too_big = core::iter::once(UserBuf::from_slice(&big));
        assert_eq!(
            set_inline(&qp, &mut send, too_big),
            Err(EINVAL),
            "max_inline 64"
        );
    }
}
