//! Admin queue: command and completion entries, opcodes, status codes, per-command payloads.
//!
//! The admin queue is two contiguous DMA rings of `1 << REG_ADMIN_LOG_DEPTH` entries: a command
//! ring of [`AdminCmd`] written by the driver and a completion ring of [`AdminCpl`] written by
//! the device (owner-bit convention of [`super::queue`]). The driver writes commands, then the
//! new free-running producer index to `REG_ADMIN_DB`. The device executes commands in order and
//! writes one completion per command at the same ring index, then an `EQE_TYPE_ADMIN` event on
//! EQ 0 (if EQ 0 is enabled). The driver keeps at most `depth` commands outstanding.
//!
//! Commands that return more than 8 bytes write a response structure to a driver-provided DMA
//! buffer (`resp_addr`, at least [`ADMIN_RESP_MAX`] bytes, or the size of the response).

use super::ids::{Key, Psn, Qpn};
use super::queue::PageList;

pub const ADMIN_CMD_SIZE: usize = 128;
pub const ADMIN_CPL_SIZE: usize = 16;
/// Bytes of command-specific payload in an [`AdminCmd`].
pub const ADMIN_PAYLOAD_SIZE: usize = ADMIN_CMD_SIZE - 8;
/// Largest response structure a command writes to `resp_addr`.
pub const ADMIN_RESP_MAX: usize = super::regs::ROX_PAGE_SIZE;

// Opcodes.
/// Payload [`QueryCmd`]; response [`DeviceAttr`].
pub const ADMIN_OP_QUERY_DEVICE: u8 = 0x01;
/// Payload [`QueryCmd`] (with `index` = port number, 1); response [`PortAttr`].
pub const ADMIN_OP_QUERY_PORT: u8 = 0x02;
/// Payload [`SetGidCmd`].
pub const ADMIN_OP_SET_GID: u8 = 0x03;
/// No payload; result0 = MAC bytes 0..4 (byte 0 in bits 0..8), result1 = MAC bytes 4..6.
pub const ADMIN_OP_READ_MAC: u8 = 0x04;
/// Payload [`RegMrCmd`]; result0 = lkey, result1 = rkey.
pub const ADMIN_OP_REG_MR: u8 = 0x10;
/// Payload [`KeyCmd`] (key = lkey). Memory windows bound to the MR are unbound.
pub const ADMIN_OP_DEREG_MR: u8 = 0x11;
/// Payload [`AllocMwCmd`]; result0 = the window's rkey (`Key::WINDOW_FLAG` set; the low 8 bits
/// change with binds, the rest names the window).
pub const ADMIN_OP_ALLOC_MW: u8 = 0x12;
/// Payload [`KeyCmd`] (key = any rkey of the window).
pub const ADMIN_OP_DEALLOC_MW: u8 = 0x13;
/// Payload [`OdpUpdateCmd`]: map, unmap or fail pages of an on-demand (`MR_FLAG_ON_DEMAND`)
/// region. When the completion is written the device no longer uses an unmapped page (the
/// command runs between data-path passes; no access through the old translation is in flight).
pub const ADMIN_OP_ODP_UPDATE: u8 = 0x14;
/// Payload [`CreateCqCmd`]; result0 = CQ id.
pub const ADMIN_OP_CREATE_CQ: u8 = 0x20;
/// Payload [`HandleCmd`] (handle = CQ id).
pub const ADMIN_OP_DESTROY_CQ: u8 = 0x21;
/// Payload [`ResizeCqCmd`]: the CQ continues in a new ring; result0 = its depth.
pub const ADMIN_OP_RESIZE_CQ: u8 = 0x22;
/// Payload [`CreateQpCmd`]; result0 = QPN.
pub const ADMIN_OP_CREATE_QP: u8 = 0x30;
/// Payload [`ModifyQpCmd`]; result0 = the new QP state.
pub const ADMIN_OP_MODIFY_QP: u8 = 0x31;
/// Payload [`QueryCmd`] (index = QPN); response [`QpAttr`]; result0 = QP state.
pub const ADMIN_OP_QUERY_QP: u8 = 0x32;
/// Payload [`QpnCmd`]. The QP leaves every multicast group it is in.
pub const ADMIN_OP_DESTROY_QP: u8 = 0x33;
/// Payload [`McastCmd`]: UD QP `qpn` receives the RoCEv2 packets to multicast GID `gid`
/// (destination QPN `Qpn::MULTICAST`); each attached QP checks its own Q_Key. BAD_HANDLE:
/// no such QP; BAD_PARAM: not a multicast GID or not a UD QP; NO_RESOURCES: the group table
/// or the group is full. Attaching a QP that is already attached succeeds (no change).
pub const ADMIN_OP_ATTACH_MCAST: u8 = 0x34;
/// Payload [`McastCmd`]: the QP leaves the group (the group goes when its last QP leaves).
/// BAD_HANDLE: the QP is not attached to that group.
pub const ADMIN_OP_DETACH_MCAST: u8 = 0x35;
/// Payload [`CreateSrqCmd`]; result0 = SRQ id.
pub const ADMIN_OP_CREATE_SRQ: u8 = 0x40;
/// Payload [`ModifySrqCmd`].
pub const ADMIN_OP_MODIFY_SRQ: u8 = 0x41;
/// Payload [`HandleCmd`] (handle = SRQ id); result0 = limit, result1 = WQEs posted and not
/// yet consumed.
pub const ADMIN_OP_QUERY_SRQ: u8 = 0x42;
/// Payload [`HandleCmd`] (handle = SRQ id).
pub const ADMIN_OP_DESTROY_SRQ: u8 = 0x43;
/// Payload [`QueryCmd`]; response `[u64; STATS_COUNT]` indexed by `STAT_*`; result0 =
/// STATS_COUNT.
pub const ADMIN_OP_QUERY_STATS: u8 = 0x50;
/// Payload [`SetPortStateCmd`]: the driver reports the link state of the paired netdev. A
/// change posts `EQE_TYPE_PORT_CHANGE` (handle = port, aux = new `verbs::PORT_*` state) on
/// EQ 0; QUERY_PORT reports the state. While the port is `PORT_DOWN` the device neither sends
/// nor accepts fabric packets (RC peers retry). The port starts `PORT_ACTIVE` after reset.
pub const ADMIN_OP_SET_PORT_STATE: u8 = 0x05;

// Status codes (AdminCpl::status).
pub const ADMIN_STATUS_SUCCESS: u8 = 0;
/// Unknown opcode.
pub const ADMIN_STATUS_BAD_OPCODE: u8 = 1;
/// No such object (QPN, CQ id, SRQ id, lkey) or it belongs to another PD.
pub const ADMIN_STATUS_BAD_HANDLE: u8 = 2;
/// Invalid QP state transition, or a required attribute missing / a forbidden one present
/// for the transition (IB spec table of modify-QP attributes).
pub const ADMIN_STATUS_BAD_STATE: u8 = 3;
/// A field is out of range (depth, MTU, access bits, page list, GID index, ...).
pub const ADMIN_STATUS_BAD_PARAM: u8 = 4;
/// Out of QPs, CQs, SRQs, MRs or doorbell slots.
pub const ADMIN_STATUS_NO_RESOURCES: u8 = 5;
/// A DMA address in the command (page list, response buffer) is not mapped guest memory.
pub const ADMIN_STATUS_BAD_DMA: u8 = 6;
/// The object is still in use (CQ/SRQ attached to a QP).
pub const ADMIN_STATUS_BUSY: u8 = 7;
/// The doorbell (page, slot) is out of range or already used by another object.
pub const ADMIN_STATUS_BAD_DOORBELL: u8 = 8;

/// Common 8-byte header of every command.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct AdminCmdHdr {
    /// `ADMIN_OP_*`.
    pub opcode: u8,
    pub flags: u8,
    /// Echoed in the completion.
    pub cmd_id: u16,
    pub reserved: u32,
}

/// One admin command (128 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AdminCmd {
    pub hdr: AdminCmdHdr,
    pub payload: AdminPayload,
}
const _: () = assert!(core::mem::size_of::<AdminCmd>() == ADMIN_CMD_SIZE);

/// Command payloads by opcode.
#[repr(C)]
#[derive(Clone, Copy)]
pub union AdminPayload {
    pub raw: [u8; ADMIN_PAYLOAD_SIZE],
    pub query: QueryCmd,
    pub handle: HandleCmd,
    pub key: KeyCmd,
    pub qp: QpnCmd,
    pub set_gid: SetGidCmd,
    pub reg_mr: RegMrCmd,
    pub create_cq: CreateCqCmd,
    pub create_qp: CreateQpCmd,
    pub modify_qp: ModifyQpCmd,
    pub create_srq: CreateSrqCmd,
    pub alloc_mw: AllocMwCmd,
    pub resize_cq: ResizeCqCmd,
    pub modify_srq: ModifySrqCmd,
    pub set_port_state: SetPortStateCmd,
    pub odp_update: OdpUpdateCmd,
    pub mcast: McastCmd,
    pub none: NoPayload,
}
const _: () = assert!(core::mem::size_of::<AdminPayload>() == ADMIN_PAYLOAD_SIZE);

/// One admin completion (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct AdminCpl {
    pub cmd_id: u16,
    /// `ADMIN_STATUS_*`.
    pub status: u8,
    /// The opcode of the command.
    pub opcode: u8,
    pub result0: u32,
    pub result1: u32,
    pub reserved: [u8; 3],
    /// Written last, see [`super::queue`].
    pub owner: u8,
}
const _: () = assert!(core::mem::size_of::<AdminCpl>() == ADMIN_CPL_SIZE);

/// Commands that name one object.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct HandleCmd {
    pub handle: u32,
    pub reserved: u32,
}

/// Commands that name a memory region or window by one of its keys.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct KeyCmd {
    pub key: Key,
    pub reserved: u32,
}

/// Commands that name a queue pair.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct QpnCmd {
    pub qpn: Qpn,
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<KeyCmd>() == core::mem::size_of::<HandleCmd>());
const _: () = assert!(core::mem::size_of::<QpnCmd>() == core::mem::size_of::<HandleCmd>());

/// Commands that write a response structure.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct QueryCmd {
    /// QPN for QUERY_QP, port number for QUERY_PORT, 0 otherwise.
    pub index: u32,
    pub reserved: u32,
    /// DMA address of the response buffer.
    pub resp_addr: u64,
}

/// Set or clear one GID table entry. The device answers RoCEv2 packets whose destination GID
/// is a valid entry and uses the entry as source GID for `sgid_index`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct SetGidCmd {
    pub index: u32,
    /// `verbs::GID_TYPE_ROCE_UDP_ENCAP`.
    pub gid_type: u8,
    /// 1 = set, 0 = clear.
    pub valid: u8,
    pub reserved: u16,
    /// Network order.
    pub gid: [u8; 16],
}
pub const GID_TABLE_LEN: u32 = 16;

/// Register a memory region.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct RegMrCmd {
    pub pd: u32,
    /// `verbs::ACCESS_*`.
    pub access: u32,
    /// First virtual address of the region as seen in WQEs and by remote peers.
    pub iova: u64,
    pub length: u64,
    /// Data pages; `iova` maps to `offset_in_first_page` bytes into page 0.
    pub pbl: PageList,
    /// Byte offset of `iova` in the first page (user buffers need not be page aligned).
    pub offset_in_first_page: u32,
    /// `MR_FLAG_*`.
    pub flags: u32,
}
/// The region is guest-physical: `iova` is the DMA address itself, `pbl` is ignored (the
/// kernel's DMA MR / local_dma_lkey-like use).
pub const MR_FLAG_PHYSICAL: u32 = 1 << 0;
/// On-demand paging: `pbl.addr` is ignored, `pbl.npages` pages of `pbl.page_shift` =
/// `ROX_PAGE_SHIFT` describe the region and all start not present. The driver maps pages with
/// `ADMIN_OP_ODP_UPDATE`; an access to a page that is not present (or not writable, for a
/// write) posts `EQE_TYPE_PAGE_FAULT` and waits: a requester stalls its send queue, a responder
/// answers RNR NAK; a page the driver failed (`ODP_OP_FAIL`) makes the next access fail with
/// a protection / remote access error (then the page is not present again).
pub const MR_FLAG_ON_DEMAND: u32 = 1 << 1;
/// A fast-registration MR (`ib_alloc_mr(IB_MR_TYPE_MEM_REG)`): `pbl.npages` is its capacity
/// (the most pages one `verbs::WR_REG_MR` may bind, at most `DEV_MAX_FAST_REG_PAGES`); `iova`,
/// `length`, `access`, `pbl.addr`, `pbl.page_shift` and `offset_in_first_page` are ignored. The
/// key starts invalid (no access through it) until a `WR_REG_MR` on a QP of the same PD binds
/// pages to it; `WR_LOCAL_INV` or a remote `WR_SEND_WITH_INV` makes it invalid again.
pub const MR_FLAG_FAST_REG: u32 = 1 << 2;
/// Most pages a fast-registration MR may hold (`max_fast_reg_page_list_len`).
pub const DEV_MAX_FAST_REG_PAGES: u32 = 4096;

/// Update the translation of pages `[first_page, first_page + npages)` of on-demand region
/// `key` (its lkey). `ODP_OP_MAP`: `pages` is the DMA address of `npages` little-endian u64
/// entries, each `ODP_PTE_PRESENT | ODP_PTE_WRITE? | page DMA address` (an entry without
/// `ODP_PTE_PRESENT` leaves its page as it is); `npages <= ODP_MAX_UPDATE_PAGES`.
/// `ODP_OP_UNMAP`: the pages become not present (`pages` ignored). `ODP_OP_FAIL`: the pages
/// cannot be made present (the fault failed): the next access to each fails, after which the
/// page is not present again (a later access faults anew). Each op ends an outstanding page
/// fault of its pages (UNMAP of a not-present page just lets its access fault again).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct OdpUpdateCmd {
    pub key: Key,
    pub first_page: u32,
    pub npages: u32,
    /// `ODP_OP_*`.
    pub op: u32,
    pub pages: u64,
}
pub const ODP_OP_MAP: u32 = 1;
pub const ODP_OP_UNMAP: u32 = 2;
pub const ODP_OP_FAIL: u32 = 3;
/// Page table entry bits (a page is at least 4 KiB aligned, the low bits are free).
pub const ODP_PTE_PRESENT: u64 = 1 << 0;
pub const ODP_PTE_WRITE: u64 = 1 << 1;
pub const ODP_PTE_FLAGS: u64 = ODP_PTE_PRESENT | ODP_PTE_WRITE;
/// Most pages one `ODP_OP_MAP` carries (one 4 KiB page of entries).
pub const ODP_MAX_UPDATE_PAGES: u32 = 512;

/// Create a completion queue.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CreateCqCmd {
    pub ring: PageList,
    /// log2 of the number of CQEs.
    pub log_depth: u8,
    pub reserved0: u8,
    pub reserved1: u16,
    /// Event queue (1..MAX_EQS) that receives this CQ's completion events.
    pub eqn: u32,
    pub db_page: u32,
    pub db_slot: u32,
}

/// `CreateQpCmd::srq` when the QP has its own RQ.
pub const SRQ_NONE: u32 = 0;

/// Create a queue pair (state RESET).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CreateQpCmd {
    /// `verbs::QPT_*`.
    pub qp_type: u8,
    /// 1: every send WQE generates a CQE (IB_SIGNAL_ALL_WR).
    pub sq_sig_all: u8,
    pub log_sq_depth: u8,
    /// Ignored when `srq != SRQ_NONE`.
    pub log_rq_depth: u8,
    pub pd: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub srq: u32,
    pub db_page: u32,
    pub db_slot: u32,
    pub reserved: u32,
    pub sq: PageList,
    pub rq: PageList,
}

/// Address vector (`struct ib_ah_attr` with GRH, RoCEv2).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct AddrVector {
    /// Network order.
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    pub dmac: [u8; 6],
    pub reserved: [u8; 2],
}
const _: () = assert!(core::mem::size_of::<AddrVector>() == 32);

/// QP attributes (`struct ib_qp_attr` subset) for MODIFY_QP and QUERY_QP.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// `verbs::QPS_*`.
    pub qp_state: u8,
    pub cur_qp_state: u8,
    /// `verbs::MTU_*`.
    pub path_mtu: u8,
    /// Local ACK timeout: 4.096 us * 2^timeout (0 = infinite).
    pub timeout: u8,
    pub retry_cnt: u8,
    /// 7 = infinite.
    pub rnr_retry: u8,
    /// IB RNR timer encoding (0..=31).
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    /// QUERY_QP: 1 while an SQD transition is still draining.
    pub sq_draining: u8,
    pub port_num: u8,
    pub en_sqd_async_notify: u8,
    pub pkey_index: u16,
    pub reserved0: u16,
    /// `verbs::ACCESS_*` for remote access to this QP.
    pub qp_access_flags: u32,
    pub qkey: u32,
    pub rq_psn: Psn,
    pub sq_psn: Psn,
    pub dest_qp_num: Qpn,
    pub reserved1: u32,
    pub ah: AddrVector,
}
const _: () = assert!(core::mem::size_of::<QpAttr>() == 72);

#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ModifyQpCmd {
    pub qpn: Qpn,
    /// `verbs::QP_*` mask bits.
    pub attr_mask: u32,
    pub attr: QpAttr,
}

/// Resize a CQ: the device moves the CQEs software has not consumed (from the consumer index
/// in the CQ's doorbell slot to its producer index) to the same free-running indices of the
/// new ring, with the owner bit of the new depth, marks every other entry of the new ring
/// not valid for the next index that lands on it, and writes all later CQEs there. BAD_PARAM
/// if the unconsumed CQEs do not fit, the CQ is in error, or the depth is out of range.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ResizeCqCmd {
    pub cq: u32,
    /// log2 of the new depth (`DEV_MIN_LOG_DEPTH..=DEV_MAX_LOG_CQ_DEPTH`).
    pub log_depth: u8,
    pub reserved: [u8; 3],
    pub ring: PageList,
}

/// Allocate a memory window.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct AllocMwCmd {
    pub pd: u32,
    /// `verbs::MW_TYPE_1` or `verbs::MW_TYPE_2`.
    pub mw_type: u8,
    pub reserved: [u8; 3],
}
// Keys (MR lkey/rkey, window rkey): `super::ids::Key`. The device picks a random variant for
// every new MR and window, so keys cannot be guessed from one another.

/// Create a shared receive queue.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CreateSrqCmd {
    pub pd: u32,
    pub log_depth: u8,
    pub reserved0: [u8; 3],
    /// SRQ limit (0 = disarmed): when the number of posted WQEs falls below it, the device
    /// sends `EQE_TYPE_SRQ_LIMIT` once and disarms.
    pub limit: u32,
    pub db_page: u32,
    pub db_slot: u32,
    pub reserved1: u32,
    pub ring: PageList,
}

/// `ModifySrqCmd::attr_mask` (`enum ib_srq_attr_mask`).
pub const SRQ_ATTR_MAX_WR: u32 = 1 << 0;
pub const SRQ_ATTR_LIMIT: u32 = 1 << 1;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ModifySrqCmd {
    pub srq: u32,
    /// `SRQ_ATTR_LIMIT` and/or `SRQ_ATTR_MAX_WR` (resize: switch to `ring`).
    pub attr_mask: u32,
    pub limit: u32,
    /// `SRQ_ATTR_MAX_WR`: log2 of the new ring's depth (`DEV_MIN_LOG_DEPTH..=
    /// DEV_MAX_LOG_WQ_DEPTH`).
    pub log_depth: u8,
    pub reserved: [u8; 3],
    /// `SRQ_ATTR_MAX_WR`: the new ring. Free-running indices carry on: software copies every
    /// WQE still posted (index `i` at slot `i & (new_depth - 1)`) before the command; the
    /// device then reads the WQEs from `ci` on in the new ring. BAD_PARAM if more WQEs are
    /// posted than the new ring holds, or if the limit exceeds its depth.
    pub ring: PageList,
}

/// Payload of `ADMIN_OP_SET_PORT_STATE`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct SetPortStateCmd {
    /// `PORT_NUM`.
    pub port: u32,
    /// `verbs::PORT_ACTIVE` (netdev up with carrier) or `verbs::PORT_DOWN`.
    pub state: u32,
}

const _: () = assert!(core::mem::size_of::<SetPortStateCmd>() == 8);

/// Payload of `ADMIN_OP_ATTACH_MCAST` / `ADMIN_OP_DETACH_MCAST`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct McastCmd {
    pub qpn: Qpn,
    pub reserved: u32,
    /// The group's GID, network order: an IPv6 multicast address (`ff..`), or an IPv4 one
    /// (224.0.0.0/4) as an IPv4-mapped GID (`::ffff:a.b.c.d`), as RoCEv2 carries them.
    pub gid: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<McastCmd>() == 24);

/// Whether `gid` names a multicast group (see [`McastCmd::gid`]).
pub fn is_multicast_gid(gid: &[u8; 16]) -> bool {
    const IPV6_MULTICAST_PREFIX: u8 = 0xff;
    const IPV4_MAPPED_PREFIX: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
    const IPV4_MULTICAST_MASK: u8 = 0xf0;
    const IPV4_MULTICAST_HIGH_BITS: u8 = 0xe0;
    gid[0] == IPV6_MULTICAST_PREFIX
        || (gid[..12] == IPV4_MAPPED_PREFIX
            && gid[12] & IPV4_MULTICAST_MASK == IPV4_MULTICAST_HIGH_BITS)
}
const _: () = assert!(core::mem::size_of::<OdpUpdateCmd>() == 24);
const _: () = assert!(core::mem::size_of::<QueryCmd>() <= ADMIN_PAYLOAD_SIZE);
const _: () = assert!(core::mem::size_of::<SetGidCmd>() <= ADMIN_PAYLOAD_SIZE);
const _: () = assert!(core::mem::size_of::<RegMrCmd>() == 48);
const _: () = assert!(core::mem::size_of::<CreateCqCmd>() == 32);
const _: () = assert!(core::mem::size_of::<CreateQpCmd>() == 64);
const _: () = assert!(core::mem::size_of::<ModifyQpCmd>() == 80);
const _: () = assert!(core::mem::size_of::<CreateSrqCmd>() == 40);

/// Response of QUERY_DEVICE.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct DeviceAttr {
    pub fw_ver: u64,
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_qp_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_inline_data: u32,
    /// Host ACK delay, IB encoding.
    pub local_ca_ack_delay: u32,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    /// Completion event queues (EQ 1..num_comp_eqs).
    pub num_comp_eqs: u32,
    pub num_db_pages: u32,
    /// `ATOMIC_CAP_*` (`enum ib_atomic_cap`).
    pub atomic_cap: u32,
    /// `regs::CAP_*`.
    pub caps: u32,
    /// Memory windows (0 without `regs::CAP_MW`).
    pub max_mw: u32,
    /// Multicast groups the device can hold.
    pub max_mcast_grp: u32,
    /// QPs one group can hold.
    pub max_mcast_qp_attach: u32,
    /// QP attachments over all groups.
    pub max_total_mcast_qp_attach: u32,
}
const _: () = assert!(core::mem::size_of::<DeviceAttr>() == 144);
pub const ATOMIC_CAP_NONE: u32 = 0;
pub const ATOMIC_CAP_HCA: u32 = 1;

/// Response of QUERY_PORT.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// `verbs::PORT_*`.
    pub state: u8,
    pub max_mtu: u8,
    pub active_mtu: u8,
    /// IB physical port state: 5 = LinkUp.
    pub phys_state: u8,
    pub gid_tbl_len: u32,
    pub max_msg_sz: u32,
    pub pkey_tbl_len: u16,
    /// IB encodings (`IB_WIDTH_*`, `IB_SPEED_*`).
    pub active_width: u8,
    pub active_speed: u8,
    /// The paired virtio-net NIC's MAC.
    pub mac: [u8; 6],
    pub reserved: [u8; 2],
}
const _: () = assert!(core::mem::size_of::<PortAttr>() == 24);
pub const PHYS_STATE_LINK_UP: u8 = 5;
/// IB physical port state reported while the port is `PORT_DOWN`.
pub const PHYS_STATE_DISABLED: u8 = 3;
/// rox has one port, number 1.
pub const PORT_NUM: u8 = 1;

// Limits of this device model, also reported by QUERY_DEVICE.
pub const DEV_MAX_QP: u32 = 1024;
pub const DEV_MAX_CQ: u32 = 1024;
pub const DEV_MAX_SRQ: u32 = 256;
pub const DEV_MAX_MR: u32 = 4096;
pub const DEV_MAX_MW: u32 = 4096;
/// Largest log2 depth of an SQ, RQ or SRQ.
pub const DEV_MAX_LOG_WQ_DEPTH: u8 = 14;
/// Largest log2 depth of a CQ.
pub const DEV_MAX_LOG_CQ_DEPTH: u8 = 16;
/// Smallest log2 depth of any ring.
pub const DEV_MIN_LOG_DEPTH: u8 = 1;
/// Outstanding RDMA READ / atomic requests per QP (initiator and responder). 128 as rdma_rxe:
/// perftest sets a QP's initiator depth to the peer's responder resources without clamping it
/// to the local limit, so a smaller limit fails READ and atomic runs against rxe (EINVAL at RTS).
pub const DEV_MAX_RD_ATOMIC: u8 = 128;
/// Largest page list (data pages) of one MR or ring.
pub const DEV_MAX_PBL_PAGES: u32 = 1 << 20;
pub const DEV_MAX_MR_SIZE: u64 = 1 << 40;
/// Page sizes supported in page lists: 4 KiB .. 1 GiB.
pub const DEV_PAGE_SIZE_CAP: u64 = !((1u64 << 12) - 1) & ((1u64 << 31) - 1);
pub const DEV_FW_VERSION: u64 = 1;
pub const DEV_HW_VERSION: u32 = 1;
/// IB ACK delay encoding reported to ib_core.
pub const DEV_LOCAL_CA_ACK_DELAY: u32 = 15;
pub const DEV_MAX_MCAST_GRP: u32 = 64;
pub const DEV_MAX_MCAST_QP_ATTACH: u32 = 32;
pub const DEV_MAX_TOTAL_MCAST_QP_ATTACH: u32 = 512;

/// Statistics counters (indices into the QUERY_STATS response).
pub const STAT_TX_PACKETS: usize = 0;
pub const STAT_TX_BYTES: usize = 1;
pub const STAT_RX_PACKETS: usize = 2;
pub const STAT_RX_BYTES: usize = 3;
pub const STAT_RX_DROPPED: usize = 4;
pub const STAT_RX_ICRC_ERRORS: usize = 5;
/// Go-back-N rewinds (ACK timeouts plus sequence-error / RNR NAKs received).
pub const STAT_RETRANSMITS: usize = 6;
/// NAKs (sequence error, RNR) this device's responders sent.
pub const STAT_NAKS_SENT: usize = 7;
/// ACKs this device's responders sent (after coalescing).
pub const STAT_ACKS_SENT: usize = 8;
/// Local ACK timeouts that caused a retransmission.
pub const STAT_TIMEOUTS: usize = 9;
pub const STAT_DUP_REQUESTS: usize = 10;
pub const STAT_SEND_WQES: usize = 11;
pub const STAT_RECV_WQES: usize = 12;
pub const STAT_CQES: usize = 13;
pub const STAT_EQES: usize = 14;
pub const STAT_INTERRUPTS: usize = 15;
pub const STAT_DOORBELL_SCANS: usize = 16;
pub const STAT_WAKEUPS: usize = 17;
pub const STAT_WQE_ERRORS: usize = 18;
/// Page fault events posted for on-demand paging regions (`EQE_TYPE_PAGE_FAULT`).
pub const STAT_PAGE_FAULTS: usize = 19;
/// Ethernet frames received on the port (every frame, before any check).
pub const STAT_PORT_RX_FRAMES: usize = 20;
/// Ethernet frames sent on the port (RoCE and the paired netdev's).
pub const STAT_PORT_TX_FRAMES: usize = 21;
/// Frames from the port handed to the paired netdev (not RoCE for this device).
pub const STAT_PORT_TO_NETDEV: usize = 22;
/// Frames the paired netdev sent, put on the port.
pub const STAT_PORT_FROM_NETDEV: usize = 23;
/// Dropped: shorter than their headers say, a malformed IP/UDP header, or IPv4 options on a
/// RoCEv2 packet.
pub const STAT_PORT_DROP_MALFORMED: usize = 24;
/// Dropped: longer than the port MTU allows.
pub const STAT_PORT_DROP_OVERSIZE: usize = 25;
/// Dropped: unicast to another MAC.
pub const STAT_PORT_DROP_OTHER_MAC: usize = 26;
/// Dropped: VLAN-tagged (rox's port is untagged).
pub const STAT_PORT_DROP_VLAN: usize = 27;
/// Dropped: the paired netdev could not take the frame (not attached, or its socket full).
pub const STAT_PORT_DROP_NETDEV: usize = 28;
/// RoCE packets dropped because no QP of this device has the destination QPN.
pub const STAT_RX_UNKNOWN_QP: usize = 29;
/// RoCE packets dropped for a P_Key or (UD) Q_Key that does not match the QP's.
pub const STAT_RX_BAD_KEY: usize = 30;
/// RoCE packets to another device dropped before the port because their destination MAC was
/// all zeroes (the sender had no resolved address).
pub const STAT_PORT_DROP_NO_DMAC: usize = 31;
/// Copies of multicast RoCE packets (received, or sent by this device to a group it has QPs
/// in) handed to attached QPs: one per packet and QP; each QP then checks its own Q_Key
/// (`STAT_RX_BAD_KEY`) and state.
pub const STAT_RX_MCAST_COPIES: usize = 32;
pub const STATS_COUNT: usize = 33;

// ---------------------------------------------------------------------------------------------
// Typed commands
// ---------------------------------------------------------------------------------------------

/// An admin command: its opcode, the payload it carries and what its completion's two result
/// words mean. rox-nic dispatches through it and the driver can execute through it, so a payload
/// or a result that does not belong to the opcode does not compile (nova-core's `CommandToGsp`
/// does the same for its firmware queue).
pub trait AdminCommand {
    const OPCODE: u8;
    /// The payload struct, at the start of [`AdminCmd::payload`].
    type Payload: Copy + Default;
    /// The completion's `result0`/`result1`, typed.
    type Result: ResultWords;
    /// The command's payload area holding `payload` (zeroes after it).
    fn payload(payload: Self::Payload) -> AdminPayload;
}

/// A typed result carried in an [`AdminCpl`]'s `result0` and `result1`.
pub trait ResultWords: Sized {
    fn to_words(self) -> (u32, u32);
    fn from_words(result0: u32, result1: u32) -> Self;
}

/// Commands that answer nothing but their status.
impl ResultWords for () {
    fn to_words(self) -> (u32, u32) {
        (0, 0)
    }
    fn from_words(_: u32, _: u32) -> Self {}
}

/// Commands that answer one number (an id, a key, a depth, a count): `result0`.
impl ResultWords for u32 {
    fn to_words(self) -> (u32, u32) {
        (self, 0)
    }
    fn from_words(result0: u32, _: u32) -> Self {
        result0
    }
}

/// ALLOC_MW: the window's rkey.
impl ResultWords for Key {
    fn to_words(self) -> (u32, u32) {
        (self.get(), 0)
    }
    fn from_words(result0: u32, _: u32) -> Self {
        Key::from_raw(result0)
    }
}

/// CREATE_QP: the new QP's number.
impl ResultWords for Qpn {
    fn to_words(self) -> (u32, u32) {
        (self.get(), 0)
    }
    fn from_words(result0: u32, _: u32) -> Self {
        Qpn::from_raw(result0)
    }
}

/// REG_MR: the new region's keys.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct MrKeys {
    pub lkey: Key,
    pub rkey: Key,
}
impl ResultWords for MrKeys {
    fn to_words(self) -> (u32, u32) {
        (self.lkey.get(), self.rkey.get())
    }
    fn from_words(result0: u32, result1: u32) -> Self {
        MrKeys {
            lkey: Key::from_raw(result0),
            rkey: Key::from_raw(result1),
        }
    }
}

/// READ_MAC: the port's MAC (bytes 0..4 in `result0`, byte 0 in its low bits; 4..6 in
/// `result1`).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct MacAddr(pub [u8; 6]);
impl ResultWords for MacAddr {
    fn to_words(self) -> (u32, u32) {
        let m = self.0;
        (
            u32::from_le_bytes([m[0], m[1], m[2], m[3]]),
            u32::from_le_bytes([m[4], m[5], 0, 0]),
        )
    }
    fn from_words(result0: u32, result1: u32) -> Self {
        let (a, b) = (result0.to_le_bytes(), result1.to_le_bytes());
        MacAddr([a[0], a[1], a[2], a[3], b[0], b[1]])
    }
}

/// QUERY_SRQ: its limit and the WQEs posted and not yet consumed.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct SrqCounts {
    pub limit: u32,
    pub posted: u32,
}
impl ResultWords for SrqCounts {
    fn to_words(self) -> (u32, u32) {
        (self.limit, self.posted)
    }
    fn from_words(result0: u32, result1: u32) -> Self {
        SrqCounts {
            limit: result0,
            posted: result1,
        }
    }
}

/// The payload of a command that carries none (READ_MAC).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct NoPayload {
    pub reserved: u64,
}

/// `admin_commands! { Type = OPCODE, union_field: Payload => Result; ... }`: one marker type
/// per opcode.
macro_rules! admin_commands {
    ($( $(#[$meta:meta])* $name:ident = $op:ident, $field:ident: $payload:ty => $result:ty; )*) => {
        $(
            $(#[$meta])*
            pub struct $name;
            impl AdminCommand for $name {
                const OPCODE: u8 = $op;
                type Payload = $payload;
                type Result = $result;
                fn payload(payload: $payload) -> AdminPayload {
                    let mut area = AdminPayload { raw: [0; ADMIN_PAYLOAD_SIZE] };
                    area.$field = payload;
                    area
                }
            }
        )*
    };
}

admin_commands! {
    /// Writes [`DeviceAttr`] to `resp_addr`.
    QueryDevice = ADMIN_OP_QUERY_DEVICE, query: QueryCmd => ();
    /// Writes [`PortAttr`] of port `index` to `resp_addr`.
    QueryPort = ADMIN_OP_QUERY_PORT, query: QueryCmd => ();
    SetGid = ADMIN_OP_SET_GID, set_gid: SetGidCmd => ();
    ReadMac = ADMIN_OP_READ_MAC, none: NoPayload => MacAddr;
    SetPortState = ADMIN_OP_SET_PORT_STATE, set_port_state: SetPortStateCmd => ();
    RegMr = ADMIN_OP_REG_MR, reg_mr: RegMrCmd => MrKeys;
    /// key = its lkey.
    DeregMr = ADMIN_OP_DEREG_MR, key: KeyCmd => ();
    AllocMw = ADMIN_OP_ALLOC_MW, alloc_mw: AllocMwCmd => Key;
    /// key = any rkey of the window.
    DeallocMw = ADMIN_OP_DEALLOC_MW, key: KeyCmd => ();
    OdpUpdate = ADMIN_OP_ODP_UPDATE, odp_update: OdpUpdateCmd => ();
    /// Answers the CQ id.
    CreateCq = ADMIN_OP_CREATE_CQ, create_cq: CreateCqCmd => u32;
    /// handle = CQ id.
    DestroyCq = ADMIN_OP_DESTROY_CQ, handle: HandleCmd => ();
    /// Answers the new depth.
    ResizeCq = ADMIN_OP_RESIZE_CQ, resize_cq: ResizeCqCmd => u32;
    CreateQp = ADMIN_OP_CREATE_QP, create_qp: CreateQpCmd => Qpn;
    /// Answers the QP's new state (`verbs::QPS_*`).
    ModifyQp = ADMIN_OP_MODIFY_QP, modify_qp: ModifyQpCmd => u32;
    /// index = QPN; writes [`QpAttr`] to `resp_addr`, answers the QP state.
    QueryQp = ADMIN_OP_QUERY_QP, query: QueryCmd => u32;
    DestroyQp = ADMIN_OP_DESTROY_QP, qp: QpnCmd => ();
    AttachMcast = ADMIN_OP_ATTACH_MCAST, mcast: McastCmd => ();
    DetachMcast = ADMIN_OP_DETACH_MCAST, mcast: McastCmd => ();
    /// Answers the SRQ id.
    CreateSrq = ADMIN_OP_CREATE_SRQ, create_srq: CreateSrqCmd => u32;
    ModifySrq = ADMIN_OP_MODIFY_SRQ, modify_srq: ModifySrqCmd => ();
    /// handle = SRQ id.
    QuerySrq = ADMIN_OP_QUERY_SRQ, handle: HandleCmd => SrqCounts;
    /// handle = SRQ id.
    DestroySrq = ADMIN_OP_DESTROY_SRQ, handle: HandleCmd => ();
    /// Writes `[u64; STATS_COUNT]` to `resp_addr`, answers STATS_COUNT.
    QueryStats = ADMIN_OP_QUERY_STATS, query: QueryCmd => u32;
}

/// A command that writes a response structure to [`QueryCmd::resp_addr`]: which one.
pub trait AdminQuery: AdminCommand<Payload = QueryCmd> {
    type Response: Copy;
}
impl AdminQuery for QueryDevice {
    type Response = DeviceAttr;
}
impl AdminQuery for QueryPort {
    type Response = PortAttr;
}
impl AdminQuery for QueryQp {
    type Response = QpAttr;
}
impl AdminQuery for QueryStats {
    type Response = [u64; STATS_COUNT];
}
