// SPDX-License-Identifier: GPL-2.0
//! Rust forms of the attribute structures, flag words and enums ib_core exchanges with a
//! driver: the driver logic fills or reads these, and the trampolines of `ops/` copy them
//! into / out of ib_core's C structures. Where the kernel numbers a value as uapi does (access
//! flags, QP states and types, path MTUs, QP attribute masks, MW types, WC statuses), the logic
//! uses uapi's constants and this file asserts at build time that the two numberings agree.

use super::bindings as b;
use crate::hw::uapi::{
    ids::{Psn, Qpn},
    verbs,
};
use core::ptr::{self, NonNull};

/// A word of flag bits with named members (the bit values are ib_core's).
macro_rules! ib_flags {
    ($(#[$m:meta])* $name:ident: $ty:ty { $($(#[$fm:meta])* $flag:ident = $val:expr;)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Default)]
        pub(crate) struct $name($ty);

        #[allow(dead_code)]
        impl $name {
            $($(#[$fm])* pub(crate) const $flag: Self = Self($val as $ty);)*
            pub(crate) const fn empty() -> Self {
                Self(0)
            }
            pub(crate) const fn from_bits(bits: $ty) -> Self {
                Self(bits)
            }
            pub(crate) const fn bits(self) -> $ty {
                self.0
            }
            /// Every bit of `other` is set.
            pub(crate) const fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }
            /// The bits of `self` that `other` lacks.
            pub(crate) const fn difference(self, other: Self) -> Self {
                Self(self.0 & !other.0)
            }
            pub(crate) const fn union(self, other: Self) -> Self {
                Self(self.0 | other.0)
            }
            pub(crate) const fn is_empty(self) -> bool {
                self.0 == 0
            }
        }

        impl core::ops::BitOr for $name {
            type Output = Self;
            fn bitor(self, other: Self) -> Self {
                Self(self.0 | other.0)
            }
        }

        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, other: Self) {
                self.0 |= other.0;
            }
        }
    };
}
pub(crate) use ib_flags;

// The numberings the driver logic takes from uapi and hands to ib_core unchanged.
const _: () = {
    assert!(verbs::ACCESS_LOCAL_WRITE == b::ib_access_flags_IB_ACCESS_LOCAL_WRITE);
    assert!(verbs::ACCESS_REMOTE_WRITE == b::ib_access_flags_IB_ACCESS_REMOTE_WRITE);
    assert!(verbs::ACCESS_REMOTE_READ == b::ib_access_flags_IB_ACCESS_REMOTE_READ);
    assert!(verbs::ACCESS_REMOTE_ATOMIC == b::ib_access_flags_IB_ACCESS_REMOTE_ATOMIC);
    assert!(verbs::ACCESS_MW_BIND == b::ib_access_flags_IB_ACCESS_MW_BIND);
    assert!(verbs::ACCESS_ON_DEMAND == b::ib_access_flags_IB_ACCESS_ON_DEMAND);
    assert!(verbs::ACCESS_FLUSH_GLOBAL == b::ib_access_flags_IB_ACCESS_FLUSH_GLOBAL);
    assert!(verbs::ACCESS_FLUSH_PERSISTENT == b::ib_access_flags_IB_ACCESS_FLUSH_PERSISTENT);
    assert!(
        verbs::ACCESS_OPTIONAL_MASK
            == (b::IB_UVERBS_ACCESS_OPTIONAL_LAST << 1)
                .wrapping_sub(b::IB_UVERBS_ACCESS_OPTIONAL_FIRST)
    );
    assert!(verbs::MTU_256 as u32 == b::ib_mtu_IB_MTU_256);
    assert!(verbs::MTU_512 as u32 == b::ib_mtu_IB_MTU_512);
    assert!(verbs::MTU_1024 as u32 == b::ib_mtu_IB_MTU_1024);
    assert!(verbs::MTU_2048 as u32 == b::ib_mtu_IB_MTU_2048);
    assert!(verbs::MTU_4096 as u32 == b::ib_mtu_IB_MTU_4096);
    assert!(verbs::MW_TYPE_1 as u32 == b::ib_mw_type_IB_MW_TYPE_1);
    assert!(verbs::MW_TYPE_2 as u32 == b::ib_mw_type_IB_MW_TYPE_2);
};

// User mappings of device pages (`mmap::MmapEntry`) and the driver's page lists assume the
// CPU's pages are rox's.
const _: () = assert!(b::PAGE_SIZE == crate::hw::regs::ROX_PAGE_SIZE);

// ---------------------------------------------------------------------------------------------
// SRQ
// ---------------------------------------------------------------------------------------------

/// The attributes of an SRQ (`ib_srq_attr`).
#[derive(Clone, Copy, Default)]
pub(crate) struct SrqAttr {
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    pub(crate) srq_limit: u32,
    /// Creating an XRC SRQ: its domain and CQ (None: a basic SRQ, and on modify and query).
    pub(crate) xrc: Option<super::xrcd::XrcSrqInit>,
}

impl SrqAttr {
    pub(super) fn from_raw(raw: &b::ib_srq_attr) -> Self {
        Self {
            max_wr: raw.max_wr,
            max_sge: raw.max_sge,
            srq_limit: raw.srq_limit,
            xrc: None,
        }
    }
    pub(super) fn write_to(&self, raw: &mut b::ib_srq_attr) {
        raw.max_wr = self.max_wr;
        raw.max_sge = self.max_sge;
        raw.srq_limit = self.srq_limit;
    }
}

ib_flags! {
    /// Which SRQ attributes a modify changes (`ib_srq_attr_mask`).
    SrqAttrMask: u32 {
        MAX_WR = b::ib_srq_attr_mask_IB_SRQ_MAX_WR;
        LIMIT = b::ib_srq_attr_mask_IB_SRQ_LIMIT;
    }
}

// ---------------------------------------------------------------------------------------------
// MR
// ---------------------------------------------------------------------------------------------

ib_flags! {
    /// What on-demand paging supports for one transport (`ib_odp_transport_cap_bits`).
    OdpTransportCaps: u32 {
        SEND = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SEND;
        RECV = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_RECV;
        WRITE = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_WRITE;
        READ = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_READ;
        ATOMIC = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_ATOMIC;
        SRQ_RECV = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SRQ_RECV;
    }
}

/// On-demand paging capabilities of a device (`ib_odp_caps`, with `IB_ODP_SUPPORT`).
#[derive(Clone, Copy, Default)]
pub(crate) struct OdpCaps {
    pub(crate) rc: OdpTransportCaps,
    pub(crate) ud: OdpTransportCaps,
}

impl OdpCaps {
    fn to_raw(self) -> b::ib_odp_caps {
        let mut caps = b::ib_odp_caps {
            general_caps: u64::from(b::ib_odp_general_cap_bits_IB_ODP_SUPPORT),
            ..Default::default()
        };
        caps.per_transport_caps.rc_odp_caps = self.rc.bits();
        // XRC initiators request and XRC targets respond (into their SRQs) on RC's paths.
        caps.per_transport_caps.xrc_odp_caps = self.rc.bits();
        caps.per_transport_caps.ud_odp_caps = self.ud.bits();
        caps
    }
}

/// What ibv_advise_mr asks for (`enum ib_uverbs_advise_mr_advice`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum MrAdvice {
    /// Make the pages present, readable.
    Prefetch,
    /// Make the pages present, writable.
    PrefetchWrite,
    /// Map only what the CPU has mapped already (no page fault).
    PrefetchNoFault,
}

impl MrAdvice {
    pub(super) fn from_raw(raw: b::ib_uverbs_advise_mr_advice) -> Option<Self> {
        Some(match raw {
            b::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH => Self::Prefetch,
            b::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE => {
                Self::PrefetchWrite
            }
            b::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT => {
                Self::PrefetchNoFault
            }
            _ => return None,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Device and port
// ---------------------------------------------------------------------------------------------

ib_flags! {
    /// Device capabilities (`ib_device_cap_flags`).
    DeviceCapFlags: u64 {
        RC_RNR_NAK_GEN = b::ib_device_cap_flags_IB_DEVICE_RC_RNR_NAK_GEN;
        FLUSH_GLOBAL = b::ib_device_cap_flags_IB_DEVICE_FLUSH_GLOBAL;
        ATOMIC_WRITE = b::ib_device_cap_flags_IB_DEVICE_ATOMIC_WRITE;
        SRQ_RESIZE = b::ib_device_cap_flags_IB_DEVICE_SRQ_RESIZE;
        MEM_MGT_EXTENSIONS = b::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS;
        MEM_WINDOW = b::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW;
        MEM_WINDOW_TYPE_2B = b::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW_TYPE_2B;
        XRC = b::ib_device_cap_flags_IB_DEVICE_XRC;
    }
}

/// The device attributes ib_core reports (`ib_device_attr`); fields rox leaves at zero are
/// absent. `sys_image_guid` is in host order here.
#[derive(Default)]
pub(crate) struct DeviceAttr {
    pub(crate) fw_ver: u64,
    pub(crate) sys_image_guid: u64,
    pub(crate) max_mr_size: u64,
    pub(crate) page_size_cap: u64,
    pub(crate) vendor_id: u32,
    pub(crate) vendor_part_id: u32,
    pub(crate) hw_ver: u32,
    pub(crate) max_qp: u32,
    pub(crate) max_qp_wr: u32,
    pub(crate) device_cap_flags: DeviceCapFlags,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) max_sge_rd: u32,
    pub(crate) max_cq: u32,
    pub(crate) max_cqe: u32,
    pub(crate) max_mr: u32,
    pub(crate) max_mw: u32,
    pub(crate) max_pd: u32,
    pub(crate) max_qp_rd_atom: u32,
    pub(crate) max_qp_init_rd_atom: u32,
    pub(crate) max_res_rd_atom: u32,
    /// `IB_ATOMIC_HCA` (atomics are atomic across the device) or `IB_ATOMIC_NONE`.
    pub(crate) atomic_hca: bool,
    pub(crate) max_ah: u32,
    pub(crate) max_srq: u32,
    pub(crate) max_srq_wr: u32,
    pub(crate) max_srq_sge: u32,
    pub(crate) max_pkeys: u16,
    pub(crate) max_mcast_grp: u32,
    pub(crate) max_mcast_qp_attach: u32,
    pub(crate) max_total_mcast_qp_attach: u32,
    pub(crate) local_ca_ack_delay: u8,
    pub(crate) max_fast_reg_page_list_len: u32,
    /// On-demand paging (`IBK_ON_DEMAND_PAGING`) and what it covers.
    pub(crate) odp: Option<OdpCaps>,
}

impl DeviceAttr {
    pub(super) fn write_to(&self, raw: &mut b::ib_device_attr) {
        raw.fw_ver = self.fw_ver;
        raw.sys_image_guid = self.sys_image_guid.to_be();
        raw.max_mr_size = self.max_mr_size;
        raw.page_size_cap = self.page_size_cap;
        raw.vendor_id = self.vendor_id;
        raw.vendor_part_id = self.vendor_part_id;
        raw.hw_ver = self.hw_ver;
        raw.max_qp = self.max_qp;
        raw.max_qp_wr = self.max_qp_wr;
        raw.device_cap_flags = self.device_cap_flags.bits();
        raw.max_send_sge = self.max_send_sge;
        raw.max_recv_sge = self.max_recv_sge;
        raw.max_sge_rd = self.max_sge_rd;
        raw.max_cq = self.max_cq;
        raw.max_cqe = self.max_cqe;
        raw.max_mr = self.max_mr;
        raw.max_mw = self.max_mw;
        raw.max_pd = self.max_pd;
        raw.max_qp_rd_atom = self.max_qp_rd_atom;
        raw.max_qp_init_rd_atom = self.max_qp_init_rd_atom;
        raw.max_res_rd_atom = self.max_res_rd_atom;
        raw.atomic_cap = if self.atomic_hca {
            b::ib_atomic_cap_IB_ATOMIC_HCA
        } else {
            b::ib_atomic_cap_IB_ATOMIC_NONE
        };
        raw.max_ah = self.max_ah;
        raw.max_srq = self.max_srq;
        raw.max_srq_wr = self.max_srq_wr;
        raw.max_srq_sge = self.max_srq_sge;
        raw.max_pkeys = self.max_pkeys;
        raw.max_mcast_grp = self.max_mcast_grp;
        raw.max_mcast_qp_attach = self.max_mcast_qp_attach;
        raw.max_total_mcast_qp_attach = self.max_total_mcast_qp_attach;
        raw.local_ca_ack_delay = self.local_ca_ack_delay;
        raw.max_fast_reg_page_list_len = self.max_fast_reg_page_list_len;
        if let Some(odp) = self.odp {
            raw.kernel_cap_flags |= u64::from(b::ib_kernel_cap_flags_IBK_ON_DEMAND_PAGING);
            raw.odp_caps = odp.to_raw();
        }
    }
}

/// The attributes of a RoCE port ib_core reports (`ib_port_attr`). MTUs are numbered as
/// `enum ib_mtu` (uapi's `verbs::MTU_*`).
#[derive(Default)]
pub(crate) struct PortAttr {
    /// Link up: `IB_PORT_ACTIVE` / `LINK_UP`; else `IB_PORT_DOWN` / `DISABLED`.
    pub(crate) active: bool,
    pub(crate) max_mtu: u8,
    pub(crate) active_mtu: u8,
    /// The network device's MTU in bytes.
    pub(crate) phys_mtu: u32,
    pub(crate) gid_tbl_len: u32,
    /// The port has a connection manager (`IB_PORT_CM_SUP`).
    pub(crate) cm_sup: bool,
    pub(crate) max_msg_sz: u32,
    pub(crate) pkey_tbl_len: u16,
    pub(crate) active_width: u8,
    pub(crate) active_speed: u16,
}

impl PortAttr {
    pub(super) fn write_to(&self, raw: &mut b::ib_port_attr) {
        (raw.state, raw.phys_state) = if self.active {
            (
                b::ib_port_state_IB_PORT_ACTIVE,
                b::ib_port_phys_state_IB_PORT_PHYS_STATE_LINK_UP as u8,
            )
        } else {
            (
                b::ib_port_state_IB_PORT_DOWN,
                b::ib_port_phys_state_IB_PORT_PHYS_STATE_DISABLED as u8,
            )
        };
        raw.max_mtu = self.max_mtu.into();
        raw.active_mtu = self.active_mtu.into();
        raw.phys_mtu = self.phys_mtu;
        raw.gid_tbl_len = self.gid_tbl_len as i32;
        raw.port_cap_flags = if self.cm_sup {
            b::ib_port_capability_mask_bits_IB_PORT_CM_SUP
        } else {
            0
        };
        raw.max_msg_sz = self.max_msg_sz;
        raw.pkey_tbl_len = self.pkey_tbl_len;
        raw.active_width = self.active_width;
        raw.active_speed = self.active_speed;
    }
}

/// The table sizes of a RoCEv2 port (`ib_port_immutable`; the port speaks RoCEv2, UDP
/// encapsulated, and takes management datagrams of `IB_MGMT_MAD_SIZE`).
pub(crate) struct PortImmutable {
    pub(crate) pkey_tbl_len: u32,
    pub(crate) gid_tbl_len: u32,
}

impl PortImmutable {
    pub(super) fn write_to(&self, raw: &mut b::ib_port_immutable) {
        raw.pkey_tbl_len = self.pkey_tbl_len as i32;
        raw.gid_tbl_len = self.gid_tbl_len as i32;
        raw.core_cap_flags = b::RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
        raw.max_mad_size = b::IB_MGMT_MAD_SIZE;
    }
}

// ---------------------------------------------------------------------------------------------
// Kernel CQ
// ---------------------------------------------------------------------------------------------

const _: () = {
    assert!(verbs::WC_SUCCESS as u32 == b::ib_wc_status_IB_WC_SUCCESS);
    assert!(verbs::WC_WR_FLUSH_ERR as u32 == b::ib_wc_status_IB_WC_WR_FLUSH_ERR);
    assert!(verbs::WC_GENERAL_ERR as u32 == b::ib_wc_status_IB_WC_GENERAL_ERR);
};

/// What a completion completed (`enum ib_wc_opcode`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    CompSwap,
    FetchAdd,
    BindMw,
    LocalInv,
    RegMr,
    Flush,
    AtomicWrite,
    Recv,
    RecvRdmaWithImm,
    /// A number this driver has no name for, passed on as it is.
    Other(u32),
}

impl WcOpcode {
    fn raw(self) -> b::ib_wc_opcode {
        match self {
            Self::Send => b::ib_wc_opcode_IB_WC_SEND,
            Self::RdmaWrite => b::ib_wc_opcode_IB_WC_RDMA_WRITE,
            Self::RdmaRead => b::ib_wc_opcode_IB_WC_RDMA_READ,
            Self::CompSwap => b::ib_wc_opcode_IB_WC_COMP_SWAP,
            Self::FetchAdd => b::ib_wc_opcode_IB_WC_FETCH_ADD,
            Self::BindMw => b::ib_wc_opcode_IB_WC_BIND_MW,
            Self::LocalInv => b::ib_wc_opcode_IB_WC_LOCAL_INV,
            Self::RegMr => b::ib_wc_opcode_IB_WC_REG_MR,
            Self::Flush => b::ib_wc_opcode_IB_WC_FLUSH,
            Self::AtomicWrite => b::ib_wc_opcode_IB_WC_ATOMIC_WRITE,
            Self::Recv => b::ib_wc_opcode_IB_WC_RECV,
            Self::RecvRdmaWithImm => b::ib_wc_opcode_IB_WC_RECV_RDMA_WITH_IMM,
            Self::Other(raw) => raw,
        }
    }
}

ib_flags! {
    /// Completion flags (`ib_wc_flags`).
    WcFlags: u32 {
        GRH = b::ib_wc_flags_IB_WC_GRH;
        WITH_IMM = b::ib_wc_flags_IB_WC_WITH_IMM;
        WITH_INVALIDATE = b::ib_wc_flags_IB_WC_WITH_INVALIDATE;
    }
}

/// Which header the GRH area of a UD receive holds (`enum rdma_network_type`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum NetworkHdr {
    Ipv4,
    Ipv6,
}

/// A work completion of a kernel CQ (`ib_wc`); the fields rox does not have (SLID, P_Key
/// index, path bits, SMAC, VLAN) are zero.
pub(crate) struct Wc {
    pub(crate) wr_id: u64,
    /// `enum ib_wc_status`, numbered as uapi's `verbs::WC_*`.
    pub(crate) status: u32,
    pub(crate) opcode: WcOpcode,
    pub(crate) vendor_err: u32,
    pub(crate) byte_len: u32,
    /// ib_core's QP the completion belongs to (`wc.qp`); None (null) for a QP the CQ does not
    /// list.
    pub(crate) qp: Option<IbQpRef>,
    /// Immediate data (network order) or, with `WITH_INVALIDATE`, the invalidated rkey.
    pub(crate) imm_data: u32,
    pub(crate) src_qp: Qpn,
    pub(crate) flags: WcFlags,
    pub(crate) sl: u8,
    pub(crate) port_num: u32,
    /// UD receives: the header in the GRH area (`IB_WC_WITH_NETWORK_HDR_TYPE`).
    pub(crate) network_hdr: Option<NetworkHdr>,
}

/// ib_core's `ib_qp` of a QP, as a work completion names it (`wc.qp`): given to the driver
/// when the QP is created ([`super::QpInit::ib_qp`]), kept with the QP while it exists, and
/// only ever handed back to ib_core, never dereferenced. So a poll needs no lookup (and no
/// lock) to name the QP of a completion.
#[derive(Clone, Copy)]
pub(crate) struct IbQpRef(NonNull<b::ib_qp>);

// SAFETY: an `IbQpRef` is an address the driver stores and copies into `ib_wc`, from any
// thread; nothing dereferences it through this type.
unsafe impl Send for IbQpRef {}
// SAFETY: as for `Send`: shared references give nothing but the address.
unsafe impl Sync for IbQpRef {}

impl IbQpRef {
    pub(super) fn new(qp: *mut b::ib_qp) -> Option<Self> {
        NonNull::new(qp).map(Self)
    }
}

/// ib_core's array of completions a kernel CQ poll fills.
pub(crate) struct WcOut<'a> {
    pub(super) raw: &'a mut [b::ib_wc],
}

impl WcOut<'_> {
    /// Room for this many completions.
    pub(crate) fn len(&self) -> usize {
        self.raw.len()
    }

    /// Stores `wc` as completion `index` (ignored past [`Self::len`]).
    pub(crate) fn set(&mut self, index: usize, wc: &Wc) {
        let Some(raw) = self.raw.get_mut(index) else {
            return;
        };
        raw.__bindgen_anon_1.wr_id = wc.wr_id;
        raw.status = wc.status;
        raw.opcode = wc.opcode.raw();
        raw.vendor_err = wc.vendor_err;
        raw.byte_len = wc.byte_len;
        raw.qp = wc.qp.map_or(ptr::null_mut(), |qp| qp.0.as_ptr());
        // The union holds the immediate data (network order) or the invalidated rkey.
        raw.ex.imm_data = wc.imm_data;
        raw.src_qp = wc.src_qp.get();
        raw.slid = 0;
        raw.pkey_index = 0;
        raw.sl = wc.sl;
        raw.dlid_path_bits = 0;
        raw.port_num = wc.port_num;
        raw.smac = [0; 6];
        raw.vlan_id = 0;
        let mut flags = wc.flags.bits();
        raw.network_hdr_type = 0;
        if let Some(hdr) = wc.network_hdr {
            raw.network_hdr_type = match hdr {
                NetworkHdr::Ipv4 => b::rdma_network_type_RDMA_NETWORK_IPV4,
                NetworkHdr::Ipv6 => b::rdma_network_type_RDMA_NETWORK_IPV6,
            } as u8;
            flags |= b::ib_wc_flags_IB_WC_WITH_NETWORK_HDR_TYPE;
        }
        raw.wc_flags = flags as i32;
    }
}

// ---------------------------------------------------------------------------------------------
// QP and AH
// ---------------------------------------------------------------------------------------------

// QP types and states, and the modify mask passed on to the device, are numbered as uapi's.
const _: () = {
    assert!(verbs::QPT_GSI as u32 == b::ib_qp_type_IB_QPT_GSI);
    assert!(verbs::QPT_RC as u32 == b::ib_qp_type_IB_QPT_RC);
    assert!(verbs::QPT_UC as u32 == b::ib_qp_type_IB_QPT_UC);
    assert!(verbs::QPT_UD as u32 == b::ib_qp_type_IB_QPT_UD);
    assert!(verbs::QPT_XRC_INI as u32 == b::ib_qp_type_IB_QPT_XRC_INI);
    assert!(verbs::QPT_XRC_TGT as u32 == b::ib_qp_type_IB_QPT_XRC_TGT);
    assert!(verbs::QPS_RESET as u32 == b::ib_qp_state_IB_QPS_RESET);
    assert!(verbs::QPS_INIT as u32 == b::ib_qp_state_IB_QPS_INIT);
    assert!(verbs::QPS_RTR as u32 == b::ib_qp_state_IB_QPS_RTR);
    assert!(verbs::QPS_RTS as u32 == b::ib_qp_state_IB_QPS_RTS);
    assert!(verbs::QPS_SQD as u32 == b::ib_qp_state_IB_QPS_SQD);
    assert!(verbs::QPS_SQE as u32 == b::ib_qp_state_IB_QPS_SQE);
    assert!(verbs::QPS_ERR as u32 == b::ib_qp_state_IB_QPS_ERR);
    assert!(verbs::QP_STATE == b::ib_qp_attr_mask_IB_QP_STATE);
    assert!(verbs::QP_CUR_STATE == b::ib_qp_attr_mask_IB_QP_CUR_STATE);
    assert!(verbs::QP_EN_SQD_ASYNC_NOTIFY == b::ib_qp_attr_mask_IB_QP_EN_SQD_ASYNC_NOTIFY);
    assert!(verbs::QP_ACCESS_FLAGS == b::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS);
    assert!(verbs::QP_PKEY_INDEX == b::ib_qp_attr_mask_IB_QP_PKEY_INDEX);
    assert!(verbs::QP_PORT == b::ib_qp_attr_mask_IB_QP_PORT);
    assert!(verbs::QP_QKEY == b::ib_qp_attr_mask_IB_QP_QKEY);
    assert!(verbs::QP_AV == b::ib_qp_attr_mask_IB_QP_AV);
    assert!(verbs::QP_PATH_MTU == b::ib_qp_attr_mask_IB_QP_PATH_MTU);
    assert!(verbs::QP_TIMEOUT == b::ib_qp_attr_mask_IB_QP_TIMEOUT);
    assert!(verbs::QP_RETRY_CNT == b::ib_qp_attr_mask_IB_QP_RETRY_CNT);
    assert!(verbs::QP_RNR_RETRY == b::ib_qp_attr_mask_IB_QP_RNR_RETRY);
    assert!(verbs::QP_RQ_PSN == b::ib_qp_attr_mask_IB_QP_RQ_PSN);
    assert!(verbs::QP_MAX_QP_RD_ATOMIC == b::ib_qp_attr_mask_IB_QP_MAX_QP_RD_ATOMIC);
    assert!(verbs::QP_ALT_PATH == b::ib_qp_attr_mask_IB_QP_ALT_PATH);
    assert!(verbs::QP_MIN_RNR_TIMER == b::ib_qp_attr_mask_IB_QP_MIN_RNR_TIMER);
    assert!(verbs::QP_SQ_PSN == b::ib_qp_attr_mask_IB_QP_SQ_PSN);
    assert!(verbs::QP_MAX_DEST_RD_ATOMIC == b::ib_qp_attr_mask_IB_QP_MAX_DEST_RD_ATOMIC);
    assert!(verbs::QP_PATH_MIG_STATE == b::ib_qp_attr_mask_IB_QP_PATH_MIG_STATE);
    assert!(verbs::QP_CAP == b::ib_qp_attr_mask_IB_QP_CAP);
    assert!(verbs::QP_DEST_QPN == b::ib_qp_attr_mask_IB_QP_DEST_QPN);
};

/// `IB_QP_RATE_LIMIT`, the one modify mask bit uapi has no name for (rox refuses it).
pub(crate) const QP_RATE_LIMIT: u32 = b::ib_qp_attr_mask_IB_QP_RATE_LIMIT;

/// The capacities of a QP (`ib_qp_cap`).
#[derive(Clone, Copy, Default)]
pub(crate) struct QpCap {
    pub(crate) max_send_wr: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) max_inline_data: u32,
    /// Kept for the consumer (rox does not use it).
    pub(crate) max_rdma_ctxs: u32,
}

impl QpCap {
    pub(super) fn from_raw(raw: &b::ib_qp_cap) -> Self {
        Self {
            max_send_wr: raw.max_send_wr,
            max_recv_wr: raw.max_recv_wr,
            max_send_sge: raw.max_send_sge,
            max_recv_sge: raw.max_recv_sge,
            max_inline_data: raw.max_inline_data,
            max_rdma_ctxs: raw.max_rdma_ctxs,
        }
    }
    pub(super) fn write_to(&self, raw: &mut b::ib_qp_cap) {
        raw.max_send_wr = self.max_send_wr;
        raw.max_recv_wr = self.max_recv_wr;
        raw.max_send_sge = self.max_send_sge;
        raw.max_recv_sge = self.max_recv_sge;
        raw.max_inline_data = self.max_inline_data;
        raw.max_rdma_ctxs = self.max_rdma_ctxs;
    }
}

/// A RoCE address (`rdma_ah_attr` of type `RDMA_AH_ATTR_TYPE_ROCE`, with a GRH).
#[derive(Clone, Copy, Default)]
pub(crate) struct AhAttr {
    /// The address is a RoCE one (the only type rox takes; read from ib_core, always set
    /// when written back).
    pub(crate) roce: bool,
    pub(crate) dgid: [u8; 16],
    pub(crate) flow_label: u32,
    pub(crate) sgid_index: u8,
    pub(crate) hop_limit: u8,
    pub(crate) traffic_class: u8,
    pub(crate) sl: u8,
    pub(crate) dmac: [u8; 6],
    pub(crate) port_num: u32,
}

impl AhAttr {
    pub(super) fn from_raw(raw: &b::rdma_ah_attr) -> Self {
        Self {
            roce: raw.type_ == b::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE,
            dgid: super::gid_bytes(&raw.grh.dgid),
            flow_label: raw.grh.flow_label,
            sgid_index: raw.grh.sgid_index,
            hop_limit: raw.grh.hop_limit,
            traffic_class: raw.grh.traffic_class,
            sl: raw.sl,
            dmac: super::roce_dmac(raw),
            port_num: raw.port_num,
        }
    }
    /// The source GID entry reference (`grh.sgid_attr`) is left as it is.
    pub(super) fn write_to(&self, raw: &mut b::rdma_ah_attr) {
        raw.type_ = b::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
        raw.ah_flags = b::ib_ah_flags_IB_AH_GRH as u8;
        raw.port_num = self.port_num;
        raw.sl = self.sl;
        raw.grh.dgid.raw = self.dgid;
        raw.grh.flow_label = self.flow_label;
        raw.grh.sgid_index = self.sgid_index;
        raw.grh.hop_limit = self.hop_limit;
        raw.grh.traffic_class = self.traffic_class;
        raw.__bindgen_anon_1.roce.dmac = self.dmac;
    }
}

/// The attributes of a QP a modify sets or a query reports (`ib_qp_attr`). States, path MTU
/// and access flags are numbered as uapi's `verbs::*`; PSNs and the destination QPN are typed
/// here, ib_core's u32 converted once in `from_raw` / `write_to`.
#[derive(Clone, Copy, Default)]
pub(crate) struct QpAttr {
    pub(crate) qp_state: u32,
    pub(crate) cur_qp_state: u32,
    pub(crate) path_mtu: u32,
    pub(crate) qkey: u32,
    pub(crate) rq_psn: Psn,
    pub(crate) sq_psn: Psn,
    pub(crate) dest_qp_num: Qpn,
    pub(crate) qp_access_flags: u32,
    pub(crate) cap: QpCap,
    pub(crate) ah_attr: AhAttr,
    pub(crate) pkey_index: u16,
    pub(crate) en_sqd_async_notify: u8,
    pub(crate) sq_draining: u8,
    pub(crate) max_rd_atomic: u8,
    pub(crate) max_dest_rd_atomic: u8,
    pub(crate) min_rnr_timer: u8,
    pub(crate) port_num: u32,
    pub(crate) timeout: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
}

impl QpAttr {
    pub(super) fn from_raw(raw: &b::ib_qp_attr) -> Self {
        Self {
            qp_state: raw.qp_state,
            cur_qp_state: raw.cur_qp_state,
            path_mtu: raw.path_mtu,
            qkey: raw.qkey,
            // ib_core passes the caller's words unchecked; rox keeps their low 24 bits (it
            // always has: a modify with a wider number is not refused).
            rq_psn: Psn::from_wire(raw.rq_psn),
            sq_psn: Psn::from_wire(raw.sq_psn),
            dest_qp_num: Qpn::from_wire(raw.dest_qp_num),
            qp_access_flags: raw.qp_access_flags as u32,
            cap: QpCap::from_raw(&raw.cap),
            ah_attr: AhAttr::from_raw(&raw.ah_attr),
            pkey_index: raw.pkey_index,
            en_sqd_async_notify: raw.en_sqd_async_notify,
            sq_draining: raw.sq_draining,
            max_rd_atomic: raw.max_rd_atomic,
            max_dest_rd_atomic: raw.max_dest_rd_atomic,
            min_rnr_timer: raw.min_rnr_timer,
            port_num: raw.port_num,
            timeout: raw.timeout,
            retry_cnt: raw.retry_cnt,
            rnr_retry: raw.rnr_retry,
        }
    }
    /// rox has no alternate path: the path migration state is always `IB_MIG_MIGRATED`.
    pub(super) fn write_to(&self, raw: &mut b::ib_qp_attr) {
        raw.qp_state = self.qp_state;
        raw.cur_qp_state = self.cur_qp_state;
        raw.path_mtu = self.path_mtu;
        raw.path_mig_state = b::ib_mig_state_IB_MIG_MIGRATED;
        raw.qkey = self.qkey;
        raw.rq_psn = self.rq_psn.get();
        raw.sq_psn = self.sq_psn.get();
        raw.dest_qp_num = self.dest_qp_num.get();
        raw.qp_access_flags = self.qp_access_flags as i32;
        raw.pkey_index = self.pkey_index;
        raw.en_sqd_async_notify = self.en_sqd_async_notify;
        raw.sq_draining = self.sq_draining;
        raw.max_rd_atomic = self.max_rd_atomic;
        raw.max_dest_rd_atomic = self.max_dest_rd_atomic;
        raw.min_rnr_timer = self.min_rnr_timer;
        raw.port_num = self.port_num;
        raw.timeout = self.timeout;
        raw.retry_cnt = self.retry_cnt;
        raw.rnr_retry = self.rnr_retry;
        self.cap.write_to(&mut raw.cap);
        self.ah_attr.write_to(&mut raw.ah_attr);
    }
}

/// What a QP query reports of its creation attributes (`ib_qp_init_attr`).
pub(crate) struct QpInitAttr {
    /// `enum ib_qp_type`, numbered as uapi's `verbs::QPT_*`.
    pub(crate) qp_type: u32,
    pub(crate) cap: QpCap,
    /// Every send WR completes (`IB_SIGNAL_ALL_WR`), not only signalled ones.
    pub(crate) sq_sig_all: bool,
}

impl QpInitAttr {
    pub(super) fn write_to(&self, raw: &mut b::ib_qp_init_attr) {
        raw.qp_type = self.qp_type;
        self.cap.write_to(&mut raw.cap);
        raw.sq_sig_type = if self.sq_sig_all {
            b::ib_sig_type_IB_SIGNAL_ALL_WR
        } else {
            b::ib_sig_type_IB_SIGNAL_REQ_WR
        };
    }
}
