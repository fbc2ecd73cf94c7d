//! Kernel <-> provider udata structures (the driver-specific parts of uverbs commands).
//! Small and obvious on purpose; the driver team extends them. Sizes are multiples of 8.
//!
//! create_ah answers [`CreateAhResp`]: the destination MAC ib_core resolved for the AH, which
//! the provider writes into every UD send WQE (`queue::UdSeg::dmac`) so rox-nic's Ethernet
//! port can address the frame.

/// uverbs ABI version of rox.ko (`ib_device_ops.uverbs_abi_ver`); librox accepts exactly this
/// version (`match_min_abi_version = match_max_abi_version`). 2: the CQE carries the WQE index
/// where `sl` was and an XRC-SRQ flag, the send WQE the XRC SRQ number (a librox of version 1
/// would misread both, so it does not bind to this rox.ko).
/// 3: alloc_ucontext answers where in the wake page to write and what (`wake_offset`,
/// `wake_value`), so the wake page may be the posted-wake companion's register page.
pub const UVERBS_ABI_VERSION: u32 = 3;

use super::ids::Qpn;

c_struct! {
    /// Response of alloc_ucontext.
    pub struct AllocUcontextResp as rox_alloc_ucontext_resp {
        /// mmap offset of this context's doorbell page (`regs::DbPage`, 4 KiB).
        pub db_mmap_key: u64,
        /// mmap offset of the wake page: BAR0 `regs::WAKE_PAGE_OFFSET` (4 KiB, trapped), or the
        /// posted-wake companion's register page (`wake::IVSHMEM_BAR_REGS`) when the driver
        /// uses it.
        pub wake_mmap_key: u64,
        /// Index of the doorbell page (BAR2 page number), informational.
        pub db_page: u32,
        /// `regs::CAP_*`.
        pub caps: u32,
        pub sq_wqe_size: u32,
        pub rq_wqe_size: u32,
        pub cqe_size: u32,
        pub max_inline: u32,
        /// Byte offset in the wake page of the 32-bit register a wake writes (0 for the trapped
        /// `regs::WAKE_REG`, `wake::IVSHMEM_DOORBELL` for the companion).
        pub wake_offset: u32,
        /// The value a wake writes there (the doorbell page index for the trapped register,
        /// `wake::doorbell_value(..)` for the companion).
        pub wake_value: u32,
    }
}
const _: () = assert!(core::mem::size_of::<AllocUcontextResp>() == 48);

c_struct! {
    /// create_cq request: the provider allocated the ring before the call: `1 << log_depth` CQEs
    /// (`CQE_SIZE << log_depth` bytes), page aligned, zeroed. The kernel reports
    /// `cqe = 1 << log_depth` back to the application.
    pub struct CreateCqReq as rox_create_cq_req {
        pub buf_addr: u64,
        pub log_depth: u32,
        pub reserved: u32,
    }
}

c_struct! {
    pub struct CreateCqResp as rox_create_cq_resp {
        pub cq_id: u32,
        /// Slot in the context's doorbell page: `a` = consumer index, `b` = arm word.
        pub db_slot: u32,
    }
}

c_struct! {
    /// create_qp request: rings allocated by the provider (page aligned, zeroed; SQ `SQ_WQE_SIZE <<
    /// log_sq_depth` bytes, RQ `RQ_WQE_SIZE << log_rq_depth` bytes). With an SRQ there is no RQ:
    /// `rq_buf_addr = 0` and `log_rq_depth = 0`. A queue of 0 work requests (send-only or
    /// receive-only QP) still has a ring of at least `admin::DEV_MIN_LOG_DEPTH`; the kernel grants
    /// it 0 WRs, so nothing is posted to it and the device never reads it.
    pub struct CreateQpReq as rox_create_qp_req {
        pub sq_buf_addr: u64,
        pub rq_buf_addr: u64,
        pub log_sq_depth: u32,
        pub log_rq_depth: u32,
    }
}

c_struct! {
    pub struct CreateQpResp as rox_create_qp_resp {
        pub qpn: Qpn,
        /// Slot in the context's doorbell page: `a` = SQ producer index, `b` = RQ producer index.
        pub db_slot: u32,
    }
}

c_struct! {
    /// create_srq request.
    pub struct CreateSrqReq as rox_create_srq_req {
        pub buf_addr: u64,
        pub log_depth: u32,
        pub reserved: u32,
    }
}

c_struct! {
    pub struct CreateSrqResp as rox_create_srq_resp {
        pub srq_id: u32,
        /// Slot in the context's doorbell page: `a` = producer index.
        pub db_slot: u32,
    }
}

c_struct! {
    /// create_ah response (`ibv_create_ah`, no request): the destination MAC ib_core resolved for
    /// the AH's GID (neighbour table, multicast mapping or the local netdev's MAC for a local GID;
    /// `rdma_ah_attr.roce.dmac`), as `mlx5_ib_create_ah_resp` hands it to mlx5's provider, and the
    /// hop limit of the route it resolved through: applications often ask for 1 (the libibverbs
    /// pingpongs do), which ib_core replaces with the route's for a routed RoCEv2 GID, else an IP
    /// router would drop every UD packet.
    pub struct CreateAhResp as rox_create_ah_resp {
        pub dmac: [u8; 6],
        pub hop_limit: u8,
        pub reserved: u8,
    }
}

c_struct! {
    /// `ibv_resize_cq`: the new ring (zeroed; the device fills it, see `admin::ResizeCqCmd`).
    pub struct ResizeCqReq as rox_resize_cq_req {
        pub buf_addr: u64,
        pub log_depth: u32,
        pub reserved: u32,
    }
}

c_struct! {
    /// `ibv_modify_srq` with `IBV_SRQ_MAX_WR` (resize): the new ring, already holding a copy of
    /// every WQE still posted at the same free-running index.
    pub struct ModifySrqReq as rox_modify_srq_req {
        pub buf_addr: u64,
        pub log_depth: u32,
        pub reserved: u32,
    }
}

const _: () = assert!(core::mem::size_of::<CreateCqReq>() == 16);
const _: () = assert!(core::mem::size_of::<CreateCqResp>() == 8);
const _: () = assert!(core::mem::size_of::<CreateQpReq>() == 24);
const _: () = assert!(core::mem::size_of::<CreateQpResp>() == 8);
const _: () = assert!(core::mem::size_of::<CreateSrqReq>() == 16);
const _: () = assert!(core::mem::size_of::<CreateSrqResp>() == 8);
const _: () = assert!(core::mem::size_of::<ModifySrqReq>() == 16);
const _: () = assert!(core::mem::size_of::<ResizeCqReq>() == 16);
const _: () = assert!(core::mem::size_of::<CreateAhResp>() == 8);
