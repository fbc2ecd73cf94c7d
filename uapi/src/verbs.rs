//! InfiniBand enums shared by device, kernel and provider. Numbering equals libibverbs
//! (`enum ibv_*`) and the kernel's `ib_verbs.h`, so values pass through unchanged.

/// Work completion status (`enum ibv_wc_status` / `enum ib_wc_status`).
pub const WC_SUCCESS: u8 = 0;
pub const WC_LOC_LEN_ERR: u8 = 1;
pub const WC_LOC_QP_OP_ERR: u8 = 2;
pub const WC_LOC_EEC_OP_ERR: u8 = 3;
pub const WC_LOC_PROT_ERR: u8 = 4;
pub const WC_WR_FLUSH_ERR: u8 = 5;
pub const WC_MW_BIND_ERR: u8 = 6;
pub const WC_BAD_RESP_ERR: u8 = 7;
pub const WC_LOC_ACCESS_ERR: u8 = 8;
pub const WC_REM_INV_REQ_ERR: u8 = 9;
pub const WC_REM_ACCESS_ERR: u8 = 10;
pub const WC_REM_OP_ERR: u8 = 11;
pub const WC_RETRY_EXC_ERR: u8 = 12;
pub const WC_RNR_RETRY_EXC_ERR: u8 = 13;
pub const WC_LOC_RDD_VIOL_ERR: u8 = 14;
pub const WC_REM_INV_RD_REQ_ERR: u8 = 15;
pub const WC_REM_ABORT_ERR: u8 = 16;
pub const WC_INV_EECN_ERR: u8 = 17;
pub const WC_INV_EEC_STATE_ERR: u8 = 18;
pub const WC_FATAL_ERR: u8 = 19;
pub const WC_RESP_TIMEOUT_ERR: u8 = 20;
pub const WC_GENERAL_ERR: u8 = 21;

/// Work completion opcode (`enum ibv_wc_opcode` / `enum ib_wc_opcode`).
pub const WC_OPC_SEND: u8 = 0;
pub const WC_OPC_RDMA_WRITE: u8 = 1;
pub const WC_OPC_RDMA_READ: u8 = 2;
pub const WC_OPC_COMP_SWAP: u8 = 3;
pub const WC_OPC_FETCH_ADD: u8 = 4;
pub const WC_OPC_BIND_MW: u8 = 5;
pub const WC_OPC_LOCAL_INV: u8 = 6;
pub const WC_OPC_FLUSH: u8 = 8;
pub const WC_OPC_ATOMIC_WRITE: u8 = 9;
/// A `WR_REG_MR` completed (`IB_WC_REG_MR`).
pub const WC_OPC_REG_MR: u8 = 10;
pub const WC_OPC_RECV: u8 = 128;
pub const WC_OPC_RECV_RDMA_WITH_IMM: u8 = 129;

/// Work completion flags as libibverbs numbers them (`IBV_WC_GRH`, `IBV_WC_WITH_IMM`,
/// `IBV_WC_WITH_INV`). The kernel's `IB_WC_*` agree for GRH and WITH_IMM only
/// (`IB_WC_WITH_INVALIDATE` is bit 2); kernel QPs never see WITH_INV (they bind no windows).
pub const WC_FLAG_GRH: u8 = 1 << 0;
pub const WC_FLAG_WITH_IMM: u8 = 1 << 1;
/// The message was a SEND with invalidate: `Cqe::imm_data` holds the invalidated rkey (host
/// order, like `ibv_wc.invalidated_rkey`).
pub const WC_FLAG_WITH_INV: u8 = 1 << 3;

/// Work request opcode (`enum ibv_wr_opcode` / `enum ib_wr_opcode`), used in [`super::queue::SqWqe::opcode`].
pub const WR_RDMA_WRITE: u8 = 0;
pub const WR_RDMA_WRITE_WITH_IMM: u8 = 1;
pub const WR_SEND: u8 = 2;
pub const WR_SEND_WITH_IMM: u8 = 3;
pub const WR_RDMA_READ: u8 = 4;
pub const WR_ATOMIC_CMP_AND_SWP: u8 = 5;
pub const WR_ATOMIC_FETCH_AND_ADD: u8 = 6;
/// Invalidate the key named by `RdmaSeg::rkey`: a bound type 2 memory window, or a valid
/// fast-registration MR (`admin::MR_FLAG_FAST_REG`), of the QP's PD; the key must match
/// exactly (variant included). Anything else completes with `WC_MW_BIND_ERR`.
pub const WR_LOCAL_INV: u8 = 7;
/// Bind a memory window (`SqSeg::bind`).
pub const WR_BIND_MW: u8 = 8;
/// RC SEND whose last packet asks the responder to invalidate `RdmaSeg::rkey` (a type 2
/// memory window bound to the responder's QP, or a valid fast-registration MR of the
/// responder QP's PD).
pub const WR_SEND_WITH_INV: u8 = 9;
/// RC only: make earlier writes to a remote range (or whole MR) globally visible / persistent
/// (IBA memory placement extensions; the WQE's `RdmaSeg` carries length, type and level).
pub const WR_FLUSH: u8 = 14;
/// RC only: write 8 bytes atomically (`RdmaSeg::compare_add` holds them, in memory order).
pub const WR_ATOMIC_WRITE: u8 = 15;
/// Fast registration (`IB_WR_REG_MR`): `SqSeg::fast_reg`. Kernel consumers only.
pub const WR_REG_MR: u8 = 0x20;

/// FLUSH placement types (`IBV_FLUSH_GLOBAL` / `IBV_FLUSH_PERSISTENT`; the FETH's PLT bits).
pub const FLUSH_TYPE_GLOBAL: u8 = 1 << 0;
pub const FLUSH_TYPE_PERSISTENT: u8 = 1 << 1;
pub const FLUSH_TYPES_ALL: u8 = FLUSH_TYPE_GLOBAL | FLUSH_TYPE_PERSISTENT;
/// FLUSH selectivity levels (`IBV_FLUSH_RANGE` / `IBV_FLUSH_MR`; the FETH's SEL field).
pub const FLUSH_LEVEL_RANGE: u8 = 0;
pub const FLUSH_LEVEL_MR: u8 = 1;

/// Memory access flags (`IB_ACCESS_*` / `IBV_ACCESS_*`).
pub const ACCESS_LOCAL_WRITE: u32 = 1 << 0;
pub const ACCESS_REMOTE_WRITE: u32 = 1 << 1;
pub const ACCESS_REMOTE_READ: u32 = 1 << 2;
pub const ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;
/// Memory windows may be bound to the region.
pub const ACCESS_MW_BIND: u32 = 1 << 4;
/// The access bits a memory window can grant (`ibv_mw_bind_info.mw_access_flags`; LOCAL_WRITE
/// is accepted and means nothing for a window).
pub const ACCESS_MW_ALLOWED: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
/// On-demand paging: the region is not pinned (the driver registers it with
/// `admin::MR_FLAG_ON_DEMAND`; the device never sees this bit). Meaningless for a QP (ignored
/// there, as other providers do).
pub const ACCESS_ON_DEMAND: u32 = 1 << 6;
/// The region / QP accepts FLUSH requests of placement type GLOBAL.
pub const ACCESS_FLUSH_GLOBAL: u32 = 1 << 8;
/// The region / QP accepts FLUSH requests of placement type PERSISTENT. The last access bit IB
/// defines individually (`IB_ACCESS_FLUSH_PERSISTENT`).
pub const ACCESS_FLUSH_PERSISTENT: u32 = 1 << 9;
/// All access bits the device understands on an MR; others are rejected with
/// `ADMIN_STATUS_BAD_PARAM`. No FLUSH_PERSISTENT: rox has no persistent memory (like rdma_rxe
/// on pages that are not pmem), so a PERSISTENT FLUSH always meets a region without it.
pub const ACCESS_SUPPORTED: u32 = ACCESS_LOCAL_WRITE
    | ACCESS_REMOTE_WRITE
    | ACCESS_REMOTE_READ
    | ACCESS_REMOTE_ATOMIC
    | ACCESS_MW_BIND
    | ACCESS_FLUSH_GLOBAL;
/// All access bits the device understands on a QP (which FLUSH types a peer may request).
pub const ACCESS_QP_SUPPORTED: u32 = ACCESS_SUPPORTED | ACCESS_FLUSH_PERSISTENT;
/// IB's optional (hint) access bits, `IB_ACCESS_OPTIONAL_FIRST..=IB_ACCESS_OPTIONAL_LAST`.
pub const ACCESS_OPTIONAL_MASK: u32 = ((1 << 30) - 1) & !((1 << 20) - 1);
/// Every access bit IB defines: a bit outside this is invalid, a bit inside it but outside
/// [`ACCESS_SUPPORTED`] / [`ACCESS_QP_SUPPORTED`] is a feature rox lacks (EOPNOTSUPP).
pub const ACCESS_IB_DEFINED: u32 = ((ACCESS_FLUSH_PERSISTENT << 1) - 1) | ACCESS_OPTIONAL_MASK;

uapi_flags! {
    /// The access bits of a region, window or QP that the device understands (what
    /// [`ACCESS_QP_SUPPORTED`] holds), typed; `from_bits` refuses any other bit.
    pub struct Access: u32 {
        LOCAL_WRITE = ACCESS_LOCAL_WRITE,
        REMOTE_WRITE = ACCESS_REMOTE_WRITE,
        REMOTE_READ = ACCESS_REMOTE_READ,
        REMOTE_ATOMIC = ACCESS_REMOTE_ATOMIC,
        MW_BIND = ACCESS_MW_BIND,
        FLUSH_GLOBAL = ACCESS_FLUSH_GLOBAL,
        FLUSH_PERSISTENT = ACCESS_FLUSH_PERSISTENT,
    }
}

impl Access {
    /// Accesses that write memory on a peer's behalf; IB requires local write with them.
    pub const REMOTE_WRITES: Access = Access::REMOTE_WRITE.union(Access::REMOTE_ATOMIC);
    /// Valid on a region: known bits within [`ACCESS_SUPPORTED`], and remote write or atomic
    /// only with local write.
    pub const fn valid_for_region(bits: u32) -> bool {
        match Access::from_bits(bits) {
            Some(a) => {
                bits & !ACCESS_SUPPORTED == 0
                    && (!a.intersects(Access::REMOTE_WRITES) || a.contains(Access::LOCAL_WRITE))
            }
            None => false,
        }
    }
}

/// QP states (`enum ib_qp_state` / `enum ibv_qp_state`).
pub const QPS_RESET: u8 = 0;
pub const QPS_INIT: u8 = 1;
pub const QPS_RTR: u8 = 2;
pub const QPS_RTS: u8 = 3;
pub const QPS_SQD: u8 = 4;
pub const QPS_SQE: u8 = 5;
pub const QPS_ERR: u8 = 6;

/// Memory window types (`enum ibv_mw_type`).
pub const MW_TYPE_1: u8 = 1;
pub const MW_TYPE_2: u8 = 2;

/// QP types (`enum ib_qp_type`; RC/UC/UD equal `enum ibv_qp_type`).
pub const QPT_GSI: u8 = 1;
pub const QPT_RC: u8 = 2;
pub const QPT_UC: u8 = 3;
pub const QPT_UD: u8 = 4;
/// XRC initiator (`IB_QPT_XRC_INI`, libibverbs' `IBV_QPT_XRC_SEND`).
pub const QPT_XRC_INI: u8 = 9;
/// XRC target (`IB_QPT_XRC_TGT`, libibverbs' `IBV_QPT_XRC_RECV`).
pub const QPT_XRC_TGT: u8 = 10;

/// Whether a QP of type `qp_type` (`QPT_*`) counts in its port's flight: RC and the XRC
/// initiator, whose request packets stay in flight until acknowledged. While the flight is
/// full such a QP's new WQEs that send packets wait, parked, for the ACK or retransmission
/// timer that wakes the device (docs/transport.md, "Parked QPs"), so its SQ doorbell of such
/// WQEs may skip the wake while the idle device says `regs::DbPage::rc_sq_no_wake`. The one
/// rule rox-nic (which QPs park, which pages say the word), librox and rox.ko (which SQ
/// doorbells may skip the wake) read.
pub const fn qp_type_counts_in_flight(qp_type: u8) -> bool {
    matches!(qp_type, QPT_RC | QPT_XRC_INI)
}
/// The QP number of the GSI QP (QP1).
pub const GSI_QPN: u32 = 1;
/// The well-known Q_Key of QP1.
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Path MTU (`enum ib_mtu`).
pub const MTU_256: u8 = 1;
pub const MTU_512: u8 = 2;
pub const MTU_1024: u8 = 3;
pub const MTU_2048: u8 = 4;
pub const MTU_4096: u8 = 5;

/// Bytes of a path MTU enum value, or 0 if invalid.
pub const fn mtu_bytes(mtu: u8) -> u32 {
    match mtu {
        MTU_256..=MTU_4096 => 128 << mtu,
        _ => 0,
    }
}

/// Modify-QP attribute mask bits (`enum ib_qp_attr_mask` / `enum ibv_qp_attr_mask`).
pub const QP_STATE: u32 = 1 << 0;
pub const QP_CUR_STATE: u32 = 1 << 1;
pub const QP_EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
pub const QP_ACCESS_FLAGS: u32 = 1 << 3;
pub const QP_PKEY_INDEX: u32 = 1 << 4;
pub const QP_PORT: u32 = 1 << 5;
pub const QP_QKEY: u32 = 1 << 6;
pub const QP_AV: u32 = 1 << 7;
pub const QP_PATH_MTU: u32 = 1 << 8;
pub const QP_TIMEOUT: u32 = 1 << 9;
pub const QP_RETRY_CNT: u32 = 1 << 10;
pub const QP_RNR_RETRY: u32 = 1 << 11;
pub const QP_RQ_PSN: u32 = 1 << 12;
pub const QP_MAX_QP_RD_ATOMIC: u32 = 1 << 13;
pub const QP_ALT_PATH: u32 = 1 << 14;
pub const QP_MIN_RNR_TIMER: u32 = 1 << 15;
pub const QP_SQ_PSN: u32 = 1 << 16;
pub const QP_MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
pub const QP_PATH_MIG_STATE: u32 = 1 << 18;
pub const QP_CAP: u32 = 1 << 19;
pub const QP_DEST_QPN: u32 = 1 << 20;

/// Port states (`enum ib_port_state`).
pub const PORT_DOWN: u8 = 1;
pub const PORT_INIT: u8 = 2;
pub const PORT_ARMED: u8 = 3;
pub const PORT_ACTIVE: u8 = 4;

/// GID types of the GID table (`enum ib_gid_type`): rox only speaks RoCEv2.
pub const GID_TYPE_ROCE_UDP_ENCAP: u8 = 2;

// PSNs and QP numbers are 24 bits: `super::ids::{Psn, Qpn}`.
/// Largest RDMA message (2^31 bytes, IB spec).
pub const MAX_MSG_SIZE: u32 = 1 << 31;
/// Atomic operand size.
pub const ATOMIC_SIZE: u32 = 8;
/// Bytes of the GRH the device writes in front of every UD receive buffer.
pub const GRH_SIZE: u32 = 40;

// Typed views of the numbers above (rox-nic's engine matches on them; decode with `from_u8`).

uapi_enum! {
    /// Work completion status, numbered as `enum ibv_wc_status`.
    pub enum WcStatus {
        Success = WC_SUCCESS,
        LocLenErr = WC_LOC_LEN_ERR,
        LocQpOpErr = WC_LOC_QP_OP_ERR,
        LocProtErr = WC_LOC_PROT_ERR,
        MwBindErr = WC_MW_BIND_ERR,
        WrFlushErr = WC_WR_FLUSH_ERR,
        BadRespErr = WC_BAD_RESP_ERR,
        LocAccessErr = WC_LOC_ACCESS_ERR,
        RemInvReqErr = WC_REM_INV_REQ_ERR,
        RemAccessErr = WC_REM_ACCESS_ERR,
        RemOpErr = WC_REM_OP_ERR,
        RetryExcErr = WC_RETRY_EXC_ERR,
        RnrRetryExcErr = WC_RNR_RETRY_EXC_ERR,
        FatalErr = WC_FATAL_ERR,
        GeneralErr = WC_GENERAL_ERR,
    }
}

uapi_enum! {
    /// Work completion opcode, numbered as `enum ibv_wc_opcode`.
    pub enum WcOpcode {
        Send = WC_OPC_SEND,
        RdmaWrite = WC_OPC_RDMA_WRITE,
        RdmaRead = WC_OPC_RDMA_READ,
        CompSwap = WC_OPC_COMP_SWAP,
        FetchAdd = WC_OPC_FETCH_ADD,
        BindMw = WC_OPC_BIND_MW,
        LocalInv = WC_OPC_LOCAL_INV,
        Flush = WC_OPC_FLUSH,
        AtomicWrite = WC_OPC_ATOMIC_WRITE,
        RegMr = WC_OPC_REG_MR,
        Recv = WC_OPC_RECV,
        RecvRdmaWithImm = WC_OPC_RECV_RDMA_WITH_IMM,
    }
}

uapi_enum! {
    /// Send work request opcode, numbered as `enum ibv_wr_opcode`.
    pub enum WrOpcode {
        RdmaWrite = WR_RDMA_WRITE,
        RdmaWriteWithImm = WR_RDMA_WRITE_WITH_IMM,
        Send = WR_SEND,
        SendWithImm = WR_SEND_WITH_IMM,
        RdmaRead = WR_RDMA_READ,
        AtomicCmpAndSwp = WR_ATOMIC_CMP_AND_SWP,
        AtomicFetchAndAdd = WR_ATOMIC_FETCH_AND_ADD,
        LocalInv = WR_LOCAL_INV,
        BindMw = WR_BIND_MW,
        SendWithInv = WR_SEND_WITH_INV,
        Flush = WR_FLUSH,
        AtomicWrite = WR_ATOMIC_WRITE,
        RegMr = WR_REG_MR,
    }
}

impl WrOpcode {
    /// Whether a WQE of this opcode is a local operation (BIND_MW, LOCAL_INV, REG_MR): the
    /// device executes it without sending a packet. librox's and rox.ko's wake rules and the
    /// device's parking read this one rule (docs/transport.md, "Parked QPs"), and the engine's
    /// classification is checked against it.
    pub const fn is_local(self) -> bool {
        matches!(
            self,
            WrOpcode::BindMw | WrOpcode::LocalInv | WrOpcode::RegMr
        )
    }
}

/// Whether a WQE's opcode byte (`WR_*`) is a local operation ([`WrOpcode::is_local`]); a
/// byte that is no opcode is not one. The form librox and rox.ko ask when ringing an SQ (a
/// doorbell of WQEs none of which is local may skip the wake: `regs::DbPage::rc_sq_no_wake`).
pub const fn wr_opcode_is_local(opcode: u8) -> bool {
    match WrOpcode::from_u8(opcode) {
        Some(op) => op.is_local(),
        None => false,
    }
}

uapi_enum! {
    /// QP state, numbered as `enum ibv_qp_state`.
    pub enum QpState {
        Reset = QPS_RESET,
        Init = QPS_INIT,
        Rtr = QPS_RTR,
        Rts = QPS_RTS,
        Sqd = QPS_SQD,
        Sqe = QPS_SQE,
        Err = QPS_ERR,
    }
}

uapi_enum! {
    /// QP transport type, numbered as `enum ibv_qp_type`.
    pub enum QpType {
        Rc = QPT_RC,
        Uc = QPT_UC,
        Ud = QPT_UD,
    }
}

uapi_enum! {
    /// Path MTU, numbered as `enum ibv_mtu`.
    pub enum Mtu {
        Mtu256 = MTU_256,
        Mtu512 = MTU_512,
        Mtu1024 = MTU_1024,
        Mtu2048 = MTU_2048,
        Mtu4096 = MTU_4096,
    }
}

impl Mtu {
    /// Payload bytes per packet.
    pub fn bytes(self) -> u32 {
        mtu_bytes(self as u8)
    }

    /// The largest MTU whose UD packets fit in an IP MTU of `ip_mtu` bytes: payload plus the
    /// largest RoCEv2 headers (IPv6, UDP, BTH, DETH) and the ICRC. At least 256.
    pub fn largest_within(ip_mtu: usize) -> Mtu {
        const UD_OVERHEAD: usize = 40 + 8 + 12 + 8 + 4;
        [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512]
            .into_iter()
            .find(|m| m.bytes() as usize + UD_OVERHEAD <= ip_mtu)
            .unwrap_or(Mtu::Mtu256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every QP type's answer, pinned: only RC and the XRC initiator send requests that wait
    /// for acknowledgements (UC and UD are unacknowledged, GSI is UD, an XRC target has no
    /// send queue); any other number is no type rox counts.
    #[test]
    fn only_rc_and_the_xrc_initiator_count_in_the_ports_flight() {
        for qp_type in 0..=u8::MAX {
            let want = matches!(qp_type, 2 | 9);
            assert_eq!(qp_type_counts_in_flight(qp_type), want, "QP type {qp_type}");
        }
        assert!(qp_type_counts_in_flight(QPT_RC) && qp_type_counts_in_flight(QPT_XRC_INI));
        for other in [QPT_GSI, QPT_UC, QPT_UD, QPT_XRC_TGT] {
            assert!(!qp_type_counts_in_flight(other), "QP type {other}");
        }
    }

    /// Every byte's answer, pinned: exactly BIND_MW, LOCAL_INV and REG_MR are local; every
    /// other opcode sends packets, and a byte that is no opcode is not local.
    #[test]
    fn only_bind_mw_local_inv_and_reg_mr_bytes_are_local() {
        for opcode in 0..=u8::MAX {
            let want = matches!(opcode, WR_LOCAL_INV | WR_BIND_MW | WR_REG_MR);
            assert_eq!(wr_opcode_is_local(opcode), want, "opcode byte {opcode}");
            let typed = WrOpcode::from_u8(opcode).is_some_and(WrOpcode::is_local);
            assert_eq!(wr_opcode_is_local(opcode), typed, "opcode byte {opcode}");
        }
        assert_eq!((WR_LOCAL_INV, WR_BIND_MW, WR_REG_MR), (7, 8, 0x20));
    }

    #[test]
    fn ud_mtu_is_the_largest_that_fits_the_port() {
        assert_eq!(Mtu::largest_within(9000), Mtu::Mtu4096);
        assert_eq!(Mtu::largest_within(4096 + 72), Mtu::Mtu4096);
        assert_eq!(Mtu::largest_within(4096 + 71), Mtu::Mtu2048);
        assert_eq!(Mtu::largest_within(1500), Mtu::Mtu1024);
        assert_eq!(Mtu::largest_within(100), Mtu::Mtu256);
    }
}
