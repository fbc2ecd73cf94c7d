//! Admin queue: command and completion entries, opcodes, status codes, per-command payloads.
//!
//! The admin queue is two contiguous DMA rings of `1 << REG_ADMIN_LOG_DEPTH` entries: a command
//! ring of [`AdminCmd`] written by the driver and a completion ring of [`AdminCpl`] written by
//! the device (owner-bit convention of [`super::queue`]). The driver writes commands, then the
//! new free-running producer index to `REG_ADMIN_DB`. The device executes commands in order and
//! writes one completion per command at the same ring index, then an `EQE_TYPE_ADMIN` event on
//! EQ 0 (if EQ 0 is enabled). The driver keeps at most `depth` commands outstanding.
//!
//! Commands that return more than 8 bytes (the queries: payload [`QueryCmd`]) write a
//! response structure to a driver-provided DMA buffer of `resp_len` bytes at `resp_addr`: the
//! device writes the response's first `min(resp_len, its size)` bytes, nothing after them, and
//! answers how many in `result1` ([`QueryAnswer`]). So a device whose response grew (counters
//! appended) and a driver built against the shorter layout agree: the driver gets the prefix
//! it knows; a driver built against a longer one finds its tail untouched (zero, as it
//! allocated it), unless the tail holds a field it cannot take as zero: each query names the
//! prefix a driver needs ([`AdminQuery::REQUIRED_LEN`]), and rox.ko refuses an answer of fewer
//! bytes. `resp_len` 0, which an older driver wrote there (a reserved word), gets
//! ADMIN_STATUS_BAD_PARAM and nothing written: such a driver gave no bound, and a clear
//! refusal beats writing past its buffer. The change raised `ROX_VERSION` to 2, so such a
//! driver already refuses the device at probe with both versions in its message.
//!
//! One file per command family: `device.rs` (device and port queries, GID table, port state,
//! the device's limits), `stats.rs` (the QUERY_STATS counters), `counters.rs` (QUERY_COUNTERS:
//! the port's PMA and mlx5-named counters, with its opcode and command), `mr.rs` (memory regions,
//! on-demand paging, memory windows), `cq.rs`, `qp.rs` (incl. address vectors and multicast),
//! `srq.rs`, and `command.rs` (each opcode's payload and result as a type). Everything is
//! re-exported here: users name it all `admin::X`.

mod command;
mod counters;
mod cq;
mod device;
mod mr;
mod qp;
mod srq;
mod stats;

pub use self::command::*;
pub use self::counters::*;
pub use self::cq::*;
pub use self::device::*;
pub use self::mr::*;
pub use self::qp::*;
pub use self::srq::*;
pub use self::stats::*;

use super::ids::{Key, Qpn};

pub const ADMIN_CMD_SIZE: usize = 128;
pub const ADMIN_CPL_SIZE: usize = 16;
/// Bytes of command-specific payload in an [`AdminCmd`].
pub const ADMIN_PAYLOAD_SIZE: usize = ADMIN_CMD_SIZE - 8;
/// Largest response structure a command writes to `resp_addr` (a query writes at most
/// `resp_len` bytes of it).
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
/// Payload [`QueryCmd`]; response [`Stats`] indexed by `STAT_*` (a prefix of it:
/// `resp_len`); result0 = STATS_COUNT, result1 = the bytes written.
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

/// Commands that write a response structure (the queries; see the module's doc for the rule).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct QueryCmd {
    /// QPN for QUERY_QP, port number for QUERY_PORT and QUERY_COUNTERS, 0 otherwise.
    pub index: u32,
    /// Bytes of the response buffer: the device writes at most this many (not 0).
    pub resp_len: u32,
    /// DMA address of the response buffer.
    pub resp_addr: u64,
}
const _: () = assert!(core::mem::size_of::<QueryCmd>() == 16);
// `resp_len` is the word older drivers left 0 as `reserved`: that is how their commands are
// told apart (and refused).
const _: () = assert!(core::mem::offset_of!(QueryCmd, index) == 0);
const _: () = assert!(core::mem::offset_of!(QueryCmd, resp_len) == 4);
const _: () = assert!(core::mem::offset_of!(QueryCmd, resp_addr) == 8);

/// The payload of a command that carries none (READ_MAC).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct NoPayload {
    pub reserved: u64,
}
