//! Typed views of the verbs enums the transport engine speaks in.
//!
//! The numbers are defined once, in `rox_uapi::verbs` (= libibverbs numbering); these Rust
//! enums only give them types so the engine can `match` exhaustively. Every discriminant is a
//! uapi constant.

use rox_uapi::verbs as uv;

/// Work completion status, numbered as `enum ibv_wc_status`.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcStatus {
    Success = uv::WC_SUCCESS,
    LocLenErr = uv::WC_LOC_LEN_ERR,
    LocQpOpErr = uv::WC_LOC_QP_OP_ERR,
    LocProtErr = uv::WC_LOC_PROT_ERR,
    MwBindErr = uv::WC_MW_BIND_ERR,
    WrFlushErr = uv::WC_WR_FLUSH_ERR,
    BadRespErr = uv::WC_BAD_RESP_ERR,
    LocAccessErr = uv::WC_LOC_ACCESS_ERR,
    RemInvReqErr = uv::WC_REM_INV_REQ_ERR,
    RemAccessErr = uv::WC_REM_ACCESS_ERR,
    RemOpErr = uv::WC_REM_OP_ERR,
    RetryExcErr = uv::WC_RETRY_EXC_ERR,
    RnrRetryExcErr = uv::WC_RNR_RETRY_EXC_ERR,
    FatalErr = uv::WC_FATAL_ERR,
    GeneralErr = uv::WC_GENERAL_ERR,
}

/// Work completion opcode, numbered as `enum ibv_wc_opcode`.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    Send = uv::WC_OPC_SEND,
    RdmaWrite = uv::WC_OPC_RDMA_WRITE,
    RdmaRead = uv::WC_OPC_RDMA_READ,
    CompSwap = uv::WC_OPC_COMP_SWAP,
    FetchAdd = uv::WC_OPC_FETCH_ADD,
    BindMw = uv::WC_OPC_BIND_MW,
    LocalInv = uv::WC_OPC_LOCAL_INV,
    Flush = uv::WC_OPC_FLUSH,
    AtomicWrite = uv::WC_OPC_ATOMIC_WRITE,
    RegMr = uv::WC_OPC_REG_MR,
    Recv = uv::WC_OPC_RECV,
    RecvRdmaWithImm = uv::WC_OPC_RECV_RDMA_WITH_IMM,
}

/// Send work request opcode, numbered as `enum ibv_wr_opcode`.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    RdmaWrite = uv::WR_RDMA_WRITE,
    RdmaWriteWithImm = uv::WR_RDMA_WRITE_WITH_IMM,
    Send = uv::WR_SEND,
    SendWithImm = uv::WR_SEND_WITH_IMM,
    RdmaRead = uv::WR_RDMA_READ,
    AtomicCmpAndSwp = uv::WR_ATOMIC_CMP_AND_SWP,
    AtomicFetchAndAdd = uv::WR_ATOMIC_FETCH_AND_ADD,
    LocalInv = uv::WR_LOCAL_INV,
    BindMw = uv::WR_BIND_MW,
    SendWithInv = uv::WR_SEND_WITH_INV,
    Flush = uv::WR_FLUSH,
    AtomicWrite = uv::WR_ATOMIC_WRITE,
    RegMr = uv::WR_REG_MR,
}

/// Access flags of MRs and QPs.
pub use rox_uapi::verbs::{
    ACCESS_FLUSH_GLOBAL, ACCESS_FLUSH_PERSISTENT, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC,
    ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
/// FLUSH placement types and levels.
pub use rox_uapi::verbs::{
    FLUSH_LEVEL_MR, FLUSH_LEVEL_RANGE, FLUSH_TYPES_ALL, FLUSH_TYPE_GLOBAL, FLUSH_TYPE_PERSISTENT,
};
/// Completion flags (u8 in uapi; the engine's [`super::Completion::wc_flags`] holds them).
pub use rox_uapi::verbs::{WC_FLAG_GRH, WC_FLAG_WITH_IMM, WC_FLAG_WITH_INV};

/// QP state, numbered as `enum ibv_qp_state`.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    Reset = uv::QPS_RESET,
    Init = uv::QPS_INIT,
    Rtr = uv::QPS_RTR,
    Rts = uv::QPS_RTS,
    Sqd = uv::QPS_SQD,
    Sqe = uv::QPS_SQE,
    Err = uv::QPS_ERR,
}

/// QP transport type, numbered as `enum ibv_qp_type`.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    Rc = uv::QPT_RC,
    Uc = uv::QPT_UC,
    Ud = uv::QPT_UD,
}

/// Path MTU, numbered as `enum ibv_mtu`.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mtu {
    Mtu256 = uv::MTU_256,
    Mtu512 = uv::MTU_512,
    Mtu1024 = uv::MTU_1024,
    Mtu2048 = uv::MTU_2048,
    Mtu4096 = uv::MTU_4096,
}

impl Mtu {
    /// Payload bytes per packet.
    pub fn bytes(self) -> u32 {
        uv::mtu_bytes(self as u8)
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

    /// Decodes an `ibv_mtu` value.
    pub fn from_ibv(value: u8) -> Option<Mtu> {
        Some(match value {
            uv::MTU_256 => Mtu::Mtu256,
            uv::MTU_512 => Mtu::Mtu512,
            uv::MTU_1024 => Mtu::Mtu1024,
            uv::MTU_2048 => Mtu::Mtu2048,
            uv::MTU_4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Mtu;

    #[test]
    fn ud_mtu_is_the_largest_that_fits_the_port() {
        assert_eq!(Mtu::largest_within(9000), Mtu::Mtu4096);
        assert_eq!(Mtu::largest_within(4096 + 72), Mtu::Mtu4096);
        assert_eq!(Mtu::largest_within(4096 + 71), Mtu::Mtu2048);
        assert_eq!(Mtu::largest_within(1500), Mtu::Mtu1024);
        assert_eq!(Mtu::largest_within(100), Mtu::Mtu256);
    }
}
