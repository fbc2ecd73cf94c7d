//! Device and port: QUERY_DEVICE / QUERY_PORT responses, the GID table, the port state the
//! driver reports, and the limits of this device model.

use super::ADMIN_PAYLOAD_SIZE;

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
const _: () = assert!(core::mem::size_of::<SetGidCmd>() <= ADMIN_PAYLOAD_SIZE);

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
