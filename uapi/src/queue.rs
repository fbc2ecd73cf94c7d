//! Queue entries in host memory: SQ/RQ/SRQ work queue entries, scatter/gather elements,
//! completion queue entries, event queue entries, and DMA page lists.
//!
//! Rings: every ring has a power-of-two number of fixed-size entries. User rings (SQ, RQ, SRQ,
//! CQ) are user memory pinned by the kernel and given to the device as a DMA page list
//! ([`PageList`]); entries never straddle a 4 KiB page because every entry size divides it.
//! Producer/consumer indices are free-running wrapping u32 counters; the slot is
//! `index & (depth - 1)`.
//!
//! Ownership of device-written entries (CQE, EQE, admin completions) uses an owner bit: on the
//! n-th pass over the ring (n = index / depth, counting from 0) the device writes
//! `owner = (n & 1) ^ 1`, so a zero-initialised ring holds no valid entries, and software
//! accepts the entry at `ci` when `owner == ((ci / depth) & 1) ^ 1`. The device writes the owner
//! byte last with release ordering; software reads it with acquire ordering.

use super::ids::{Key, Qpn};

/// Owner value the device writes for entries at `index` of a ring of `depth` entries.
pub const fn owner_for(index: u32, depth: u32) -> u8 {
    (((index / depth) & 1) ^ 1) as u8
}

/// Scatter/gather element (`struct ibv_sge`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: Key,
}
const _: () = assert!(core::mem::size_of::<Sge>() == 16);

// ---------------------------------------------------------------------------------------------
// Send queue
// ---------------------------------------------------------------------------------------------

pub const SQ_WQE_SIZE: usize = 256;
pub const SQ_WQE_SHIFT: u32 = 8;
/// Bytes of the SQ WQE data area: SGEs or inline data.
pub const SQ_WQE_DATA_SIZE: usize = 192;
pub const SQ_MAX_SGE: u32 = (SQ_WQE_DATA_SIZE / core::mem::size_of::<Sge>()) as u32;
pub const SQ_MAX_INLINE: u32 = SQ_WQE_DATA_SIZE as u32;

/// `SqWqe::flags`: generate a CQE even if the QP is not sq_sig_all.
pub const WQE_FLAG_SIGNALED: u8 = 1 << 0;
/// Set the solicited-event bit on the last packet (SEND / WRITE_WITH_IMM).
pub const WQE_FLAG_SOLICITED: u8 = 1 << 1;
/// The data area holds `inline_len` bytes of payload instead of SGEs.
pub const WQE_FLAG_INLINE: u8 = 1 << 2;
/// Wait for outstanding READ/atomic responses before executing this WQE.
pub const WQE_FLAG_FENCE: u8 = 1 << 3;
pub const WQE_FLAGS_ALL: u8 = WqeFlags::ALL.bits();

uapi_flags! {
    /// `SqWqe::flags`, typed.
    pub struct WqeFlags: u8 {
        SIGNALED = WQE_FLAG_SIGNALED,
        SOLICITED = WQE_FLAG_SOLICITED,
        INLINE = WQE_FLAG_INLINE,
        FENCE = WQE_FLAG_FENCE,
    }
}

/// RDMA / atomic / FLUSH segment of an RC/UC send WQE (bytes 24..64).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct RdmaSeg {
    /// WRITE/READ/FLUSH: remote virtual address; atomics: remote address (8-byte aligned).
    pub remote_addr: u64,
    pub rkey: Key,
    /// FLUSH with `FLUSH_LEVEL_RANGE`: bytes to flush from `remote_addr`.
    pub length: u32,
    /// CMP_AND_SWP: compare value; FETCH_AND_ADD: add value; ATOMIC_WRITE: the 8 bytes to
    /// write, in memory order (`u64::from_ne_bytes` of them).
    pub compare_add: u64,
    /// CMP_AND_SWP: swap value.
    pub swap: u64,
    /// FLUSH: `verbs::FLUSH_TYPE_*` bits (at least one).
    pub flush_type: u8,
    /// FLUSH: `verbs::FLUSH_LEVEL_*`.
    pub flush_level: u8,
    pub reserved: [u8; 6],
}
const _: () = assert!(core::mem::size_of::<RdmaSeg>() == 40);

/// UD address vector segment of a UD/GSI send WQE (bytes 24..64).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct UdSeg {
    /// Destination GID, network order (a RoCEv2 IPv4-mapped or IPv6 address).
    pub dgid: [u8; 16],
    pub dest_qpn: Qpn,
    pub qkey: u32,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved0: u8,
    /// Destination MAC of the Ethernet frame: the one ib_core resolved for the address handle
    /// (kernel UD: from the AH; user UD: librox from rox.ko's `udata::CreateAhResp`). rox-nic
    /// drops a packet to another device's GID whose dmac is all zeroes.
    pub dmac: [u8; 6],
    pub reserved1: [u8; 2],
}
const _: () = assert!(core::mem::size_of::<UdSeg>() == 40);

/// Memory window bind segment of a `WR_BIND_MW` WQE (bytes 24..64): bind the window whose
/// rkey index (`new_rkey.index()`) this names to `[addr, addr + length)` of the MR `lkey`, with
/// `access` (`verbs::ACCESS_MW_ALLOWED` bits); its rkey becomes `new_rkey`. Length 0 unbinds
/// a type 1 window.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct BindSeg {
    pub addr: u64,
    pub length: u64,
    pub new_rkey: Key,
    pub lkey: Key,
    pub access: u32,
    pub reserved: [u8; 12],
}
const _: () = assert!(core::mem::size_of::<BindSeg>() == 40);

/// Fast-registration segment of a `WR_REG_MR` WQE (bytes 24..64), executed in send-queue order
/// like every other WQE: the fast-registration MR (`admin::MR_FLAG_FAST_REG`) whose key index
/// (`key.index()`) this names, in the QP's PD and currently invalid, maps
/// `[iova, iova + length)` onto `npages` pages of `1 << page_shift` bytes whose DMA addresses
/// the device reads (when it executes the WQE) from `page_list`: `npages` little-endian u64,
/// each aligned to the page size. `iova` sits `iova & (page size - 1)` bytes into the first
/// page. The MR's lkey and rkey both become `key` (the consumer picks the variant byte, as
/// `ib_update_fast_reg_key` does) and its access becomes `access` (`verbs::ACCESS_*`).
/// Failures (unknown key or index, another PD, not a fast-registration MR, still valid,
/// `npages` over the MR's capacity or 0, pages not covering `length`, page_shift outside
/// 12..=30, a misaligned page) complete with `verbs::WC_MW_BIND_ERR` and change nothing.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct FastRegSeg {
    pub iova: u64,
    pub length: u64,
    /// DMA address of the page list.
    pub page_list: u64,
    pub key: Key,
    /// `verbs::ACCESS_*`.
    pub access: u32,
    pub npages: u32,
    pub page_shift: u8,
    pub reserved: [u8; 3],
}
const _: () = assert!(core::mem::size_of::<FastRegSeg>() == 40);

/// Bytes 24..64 of a send WQE: [`RdmaSeg`] for RC/UC, [`UdSeg`] for UD/GSI, [`BindSeg`] for
/// `WR_BIND_MW`, [`FastRegSeg`] for `WR_REG_MR`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union SqSeg {
    pub rdma: RdmaSeg,
    pub ud: UdSeg,
    pub bind: BindSeg,
    pub fast_reg: FastRegSeg,
}
const _: () = assert!(core::mem::size_of::<SqSeg>() == 40);

impl SqSeg {
    /// The segment of an operation on `[remote_addr ..)` through `rkey` (WRITE, READ; an rkey
    /// alone: `remote_addr` 0): the rest zero.
    #[inline]
    pub fn remote(remote_addr: u64, rkey: Key) -> Self {
        Self::atomic(remote_addr, rkey, 0, 0)
    }

    /// The segment of an atomic at `remote_addr` through `rkey` (`swap`: CMP_AND_SWP only).
    #[inline]
    pub fn atomic(remote_addr: u64, rkey: Key, compare_add: u64, swap: u64) -> Self {
        SqSeg {
            rdma: RdmaSeg {
                remote_addr,
                rkey,
                compare_add,
                swap,
                ..Default::default()
            },
        }
    }

    /// The segment of a LOCAL_INV or SEND_WITH_INV: the rkey to invalidate, in
    /// [`RdmaSeg::rkey`]; the rest zero.
    #[inline]
    pub fn invalidate(rkey: Key) -> Self {
        Self::remote(0, rkey)
    }
}

/// The segment of an operation that reads none (SEND, SEND_WITH_IMM): all 40 bytes zero.
impl Default for SqSeg {
    #[inline]
    fn default() -> Self {
        SqSeg {
            rdma: RdmaSeg::default(),
        }
    }
}
const _: () = assert!(core::mem::size_of::<RdmaSeg>() == core::mem::size_of::<SqSeg>());

/// Send queue WQE (256 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SqWqe {
    pub wr_id: u64,
    /// `verbs::WR_*`.
    pub opcode: u8,
    /// `WQE_FLAG_*`.
    pub flags: u8,
    /// Number of valid SGEs in `data` (ignored with `WQE_FLAG_INLINE`).
    pub num_sge: u8,
    pub reserved0: u8,
    /// Immediate data, network order (as in `ibv_send_wr.imm_data`).
    pub imm_data: u32,
    /// Payload bytes in `data` with `WQE_FLAG_INLINE`.
    pub inline_len: u32,
    /// XRC initiator QPs: the remote XRC SRQ the message is for (the XRCETH); else 0.
    pub xrc_srqn: u32,
    pub seg: SqSeg,
    /// `num_sge` [`Sge`]s, or `inline_len` bytes of inline payload.
    pub data: [u8; SQ_WQE_DATA_SIZE],
}
const _: () = assert!(core::mem::size_of::<SqWqe>() == SQ_WQE_SIZE);

impl SqWqe {
    /// A WQE of `opcode` with `flags` (`WQE_FLAG_*`): every other field zero, no SGE, no
    /// payload, an all-zero segment.
    #[inline]
    pub fn new(wr_id: u64, opcode: u8, flags: u8) -> Self {
        SqWqe {
            wr_id,
            opcode,
            flags,
            num_sge: 0,
            reserved0: 0,
            imm_data: 0,
            inline_len: 0,
            xrc_srqn: 0,
            seg: SqSeg::default(),
            data: [0; SQ_WQE_DATA_SIZE],
        }
    }
}
const _: () = assert!(core::mem::offset_of!(SqWqe, seg) == 24);
const _: () = assert!(core::mem::offset_of!(SqWqe, data) == 64);
const _: () = assert!(1 << SQ_WQE_SHIFT == SQ_WQE_SIZE);

// ---------------------------------------------------------------------------------------------
// Receive queue and shared receive queue
// ---------------------------------------------------------------------------------------------

pub const RQ_WQE_SIZE: usize = 128;
pub const RQ_WQE_SHIFT: u32 = 7;
pub const RQ_MAX_SGE: u32 = 7;

/// Receive WQE, used by RQs and SRQs (128 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct RqWqe {
    pub wr_id: u64,
    pub num_sge: u8,
    pub reserved: [u8; 7],
    pub sge: [Sge; RQ_MAX_SGE as usize],
}
const _: () = assert!(core::mem::size_of::<RqWqe>() == RQ_WQE_SIZE);
const _: () = assert!(1 << RQ_WQE_SHIFT == RQ_WQE_SIZE);

// ---------------------------------------------------------------------------------------------
// Completion queue
// ---------------------------------------------------------------------------------------------

pub const CQE_SIZE: usize = 32;
pub const CQE_SHIFT: u32 = 5;

/// Completion queue entry (32 bytes). Fields mirror `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Cqe {
    pub wr_id: u64,
    pub byte_len: u32,
    /// Immediate data, network order; valid with `verbs::WC_FLAG_WITH_IMM`.
    pub imm_data: u32,
    /// The local QP number.
    pub qp_num: Qpn,
    /// UD receives: source QP number.
    pub src_qp: Qpn,
    /// `verbs::WC_*` status.
    pub status: u8,
    /// `verbs::WC_OPC_*`.
    pub opcode: u8,
    /// `verbs::WC_FLAG_*`.
    pub wc_flags: u8,
    /// Device-specific detail for error statuses (`VENDOR_ERR_*`).
    pub vendor_err: u8,
    /// The index of the WQE this CQE completes in its queue (the QP's SQ or RQ, or the SRQ a
    /// receive came from): the low 16 bits of the free-running index the WQE was posted at.
    /// Queues hold at most 2^`admin::DEV_MAX_LOG_WQ_DEPTH` entries, so among the entries
    /// outstanding it names exactly one ([`wqe_index_offset`]) even when several share a
    /// wr_id. A send CQE also completes the unsignaled WQEs posted before it.
    pub wqe_index: u16,
    /// UD receives: the network header the packet arrived with (`CQE_NETWORK_HDR_*`), so that
    /// the consumer knows where the destination GID sits in the 40-byte GRH area (an IPv4
    /// header fills its last 20 bytes). `CQE_NETWORK_HDR_NONE` for every other completion.
    pub network_hdr: u8,
    /// Written last, see the module documentation.
    pub owner: u8,
}
const _: () = assert!(core::mem::size_of::<Cqe>() == CQE_SIZE);
const _: () = assert!(core::mem::offset_of!(Cqe, owner) == CQE_SIZE - 1);
const _: () = assert!(core::mem::offset_of!(Cqe, wqe_index) == 28);
const _: () = assert!(super::admin::DEV_MAX_LOG_WQ_DEPTH <= 16);

/// Where the WQE a CQE's `wqe_index` names sits among the `outstanding` entries of a queue
/// whose oldest outstanding entry was posted at free-running index `oldest`: its offset from
/// that entry (0 = the oldest), or None when no outstanding entry has that index (a CQE of a
/// queue that was reset, or a wild one).
pub const fn wqe_index_offset(oldest: u32, outstanding: u32, wqe_index: u16) -> Option<u32> {
    let offset = (wqe_index.wrapping_sub(oldest as u16)) as u32;
    if offset < outstanding {
        Some(offset)
    } else {
        None
    }
}
const _: () = assert!(1 << CQE_SHIFT == CQE_SIZE);

/// rox's own bit in `Cqe::wc_flags` (no `WC_FLAG_*` uses it): the receive of an XRC target QP,
/// `Cqe::src_qp` holds the number of the XRC SRQ the message went into (whose WQE `wr_id`
/// names). librox takes the SRQ from it, strips the bit and reports `src_qp` 0.
pub const CQE_FLAG_XRC_SRQ: u8 = 1 << 7;

/// `Cqe::network_hdr`: not reported (not a UD receive).
pub const CQE_NETWORK_HDR_NONE: u8 = 0;
/// `Cqe::network_hdr`: RoCEv2 over IPv6 (the GRH area holds the IPv6 header).
pub const CQE_NETWORK_HDR_IPV6: u8 = 1;
/// `Cqe::network_hdr`: RoCEv2 over IPv4 (the IPv4 header is in the last 20 bytes of the GRH
/// area). The values are those of the L3 header type mlx5 reports, which UCX reads.
pub const CQE_NETWORK_HDR_IPV4: u8 = 2;

/// `Cqe::vendor_err` values: why a WQE failed, for debugging.
pub const VENDOR_ERR_NONE: u8 = 0;
pub const VENDOR_ERR_BAD_OPCODE: u8 = 1;
pub const VENDOR_ERR_BAD_SGE_COUNT: u8 = 2;
pub const VENDOR_ERR_BAD_LKEY: u8 = 3;
pub const VENDOR_ERR_BAD_INLINE: u8 = 4;
pub const VENDOR_ERR_BAD_DMA: u8 = 5;
pub const VENDOR_ERR_WILD_INDEX: u8 = 6;
pub const VENDOR_ERR_LENGTH: u8 = 7;

// ---------------------------------------------------------------------------------------------
// Event queue
// ---------------------------------------------------------------------------------------------

pub const EQE_SIZE: usize = 16;
pub const EQE_SHIFT: u32 = 4;

/// Event queue entry (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Eqe {
    /// `EQE_TYPE_*`.
    pub event_type: u8,
    pub reserved0: [u8; 3],
    /// CQ id (completion, CQ error), QPN (QP events), SRQ id, port number, or the admin
    /// completion ring index.
    pub handle: u32,
    /// Extra detail: for `EQE_TYPE_DEVICE_FATAL` the `FATAL_*` code; for QP fatal a
    /// `VENDOR_ERR_*` code.
    pub aux: u32,
    /// `EQE_TYPE_PAGE_FAULT`: the pages the access needs from `aux`'s page on, 24-bit
    /// little-endian (≥ 1); 0 otherwise.
    pub count: [u8; 3],
    /// Written last, see the module documentation.
    pub owner: u8,
}
const _: () = assert!(core::mem::size_of::<Eqe>() == EQE_SIZE);
const _: () = assert!(1 << EQE_SHIFT == EQE_SIZE);

/// Completion event on an armed CQ (EQ given at CQ creation).
pub const EQE_TYPE_COMPLETION: u8 = 1;
/// An admin completion was written (EQ 0).
pub const EQE_TYPE_ADMIN: u8 = 2;
/// QP went to the error state on its own (IB_EVENT_QP_FATAL).
pub const EQE_TYPE_QP_FATAL: u8 = 3;
/// CQ overflowed or its ring is unreachable (IB_EVENT_CQ_ERR).
pub const EQE_TYPE_CQ_ERROR: u8 = 4;
/// SRQ fill level dropped below its limit; the limit is disarmed (IB_EVENT_SRQ_LIMIT_REACHED).
pub const EQE_TYPE_SRQ_LIMIT: u8 = 5;
/// Port state changed (IB_EVENT_PORT_ACTIVE / PORT_ERR).
pub const EQE_TYPE_PORT_CHANGE: u8 = 6;
/// The device entered the fatal state (IB_EVENT_DEVICE_FATAL), best effort.
pub const EQE_TYPE_DEVICE_FATAL: u8 = 7;
/// Last WQE reached on an SRQ-attached QP in error (IB_EVENT_QP_LAST_WQE_REACHED).
pub const EQE_TYPE_QP_LAST_WQE: u8 = 8;
/// SQ drained after RTS -> SQD (IB_EVENT_SQ_DRAINED).
pub const EQE_TYPE_SQ_DRAINED: u8 = 9;
/// An SRQ became unusable (wild producer index, unreachable ring) (IB_EVENT_SRQ_ERR).
pub const EQE_TYPE_SRQ_ERROR: u8 = 10;
/// An access hit a page of an on-demand region that is not present (or not writable for a
/// write): handle = the region's lkey, aux = page index within the region, with
/// `EQE_PAGE_FAULT_WRITE` for a write, `count` = the pages the access needs from there on.
/// While one is outstanding for a page (until the driver answers with `ADMIN_OP_ODP_UPDATE`
/// MAP, UNMAP or FAIL) no other is posted for it, and none is posted while EQ 0 is half full
/// (the access waits and retries either way).
pub const EQE_TYPE_PAGE_FAULT: u8 = 11;
pub const EQE_PAGE_FAULT_WRITE: u32 = 1 << 31;
/// An RC QP's responder NAKed a malformed request (invalid request) that no receive WR was
/// part of, and the QP went to the error state (IB_EVENT_QP_REQ_ERR).
pub const EQE_TYPE_QP_REQ_ERR: u8 = 12;
/// An RC QP's responder NAKed a request for an R_Key, bounds or access-rights violation
/// (remote access error), and the QP went to the error state (IB_EVENT_QP_ACCESS_ERR).
pub const EQE_TYPE_QP_ACCESS_ERR: u8 = 13;
const _: () = assert!(super::admin::DEV_MAX_PBL_PAGES <= EQE_PAGE_FAULT_WRITE);
/// Largest `count` of a page fault event.
pub const EQE_PAGE_FAULT_MAX_COUNT: u32 = (1 << 24) - 1;

impl Eqe {
    /// The `count` field as a number.
    pub fn fault_count(&self) -> u32 {
        u32::from_le_bytes([self.count[0], self.count[1], self.count[2], 0])
    }
}

// ---------------------------------------------------------------------------------------------
// DMA page lists
// ---------------------------------------------------------------------------------------------

/// A page list is a contiguous DMA buffer of `npages` little-endian u64 DMA addresses, each the
/// start of one page of `1 << page_shift` bytes (level 1), or — for long lists — a contiguous
/// buffer of u64 DMA addresses of 4 KiB pages that each hold `PBL_ENTRIES_PER_PAGE` such
/// addresses (level 2).
pub const PBL_LEVEL_1: u8 = 1;
pub const PBL_LEVEL_2: u8 = 2;
pub const PBL_ENTRIES_PER_PAGE: u32 = (super::regs::ROX_PAGE_SIZE / 8) as u32;

/// A page list reference inside admin commands.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PageList {
    /// DMA address of the (first level of the) list.
    pub addr: u64,
    /// Number of data pages.
    pub npages: u32,
    /// log2 of the data page size (12 = 4 KiB, up to `PAGE_SHIFT_MAX`).
    pub page_shift: u8,
    /// `PBL_LEVEL_1` or `PBL_LEVEL_2`.
    pub level: u8,
    pub reserved: u16,
}
const _: () = assert!(core::mem::size_of::<PageList>() == 16);
pub const PAGE_SHIFT_MIN: u8 = 12;
pub const PAGE_SHIFT_MAX: u8 = 30;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_send_wqe_carries_only_its_id_opcode_and_flags() {
        let w = SqWqe::new(7, crate::verbs::WR_SEND, WQE_FLAG_SIGNALED);
        assert_eq!(
            (w.wr_id, w.opcode, w.flags),
            (7, crate::verbs::WR_SEND, WQE_FLAG_SIGNALED)
        );
        assert_eq!((w.num_sge, w.reserved0, w.imm_data), (0, 0, 0));
        assert_eq!((w.inline_len, w.xrc_srqn), (0, 0));
        assert!(w.data.iter().all(|&b| b == 0));
    }

    #[test]
    fn a_wqe_index_names_one_outstanding_entry_across_the_16_bit_wrap() {
        // Entries posted at 0xfffe..0x10002 are outstanding: their CQE indices wrap at 2^16.
        let (oldest, outstanding) = (0xfffe, 4);
        assert_eq!(wqe_index_offset(oldest, outstanding, 0xfffe), Some(0));
        assert_eq!(wqe_index_offset(oldest, outstanding, 0xffff), Some(1));
        assert_eq!(wqe_index_offset(oldest, outstanding, 0x0001), Some(3));
        assert_eq!(wqe_index_offset(oldest, outstanding, 0x0002), None);
        assert_eq!(wqe_index_offset(oldest, outstanding, 0xfffd), None);
        // The free-running u32 wraps too.
        assert_eq!(wqe_index_offset(u32::MAX, 2, 0), Some(1));
        assert_eq!(wqe_index_offset(7, 0, 7), None);
    }

    #[test]
    fn the_deepest_queue_fits_the_wqe_index() {
        let depth = 1u32 << super::super::admin::DEV_MAX_LOG_WQ_DEPTH;
        // Every outstanding entry of a full queue gets its own offset.
        let oldest = 0xffff_f000u32;
        for n in 0..depth {
            let index = oldest.wrapping_add(n) as u16;
            assert_eq!(wqe_index_offset(oldest, depth, index), Some(n));
        }
    }
}
