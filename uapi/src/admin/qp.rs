//! Queue pairs: CREATE_QP, MODIFY_QP / QUERY_QP attributes (with the address vector) and
//! multicast attachment.

use super::super::ids::{Psn, Qpn};
use super::super::queue::PageList;

/// `CreateQpCmd::srq` when the QP has its own RQ.
pub const SRQ_NONE: u32 = 0;
/// The CQs of an XRC target QP, which has none: its receives complete on its SRQs' CQs, and it
/// sends nothing of its own (`CreateQpCmd::send_cq`/`recv_cq` are ignored).
pub const CQ_NONE: u32 = u32::MAX;

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
    /// `QPT_XRC_TGT`: the QP's XRC domain (`CreateSrqCmd::xrcd`); otherwise 0.
    pub xrcd: u32,
    pub sq: PageList,
    pub rq: PageList,
}
const _: () = assert!(core::mem::size_of::<CreateQpCmd>() == 64);

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
const _: () = assert!(core::mem::size_of::<ModifyQpCmd>() == 80);

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
