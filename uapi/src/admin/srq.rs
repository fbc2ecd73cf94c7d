//! Shared receive queues: CREATE_SRQ and MODIFY_SRQ.

use super::super::queue::PageList;

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
    /// An XRC SRQ: its XRC domain (driver-chosen, not 0); 0: an ordinary SRQ. An XRC target
    /// QP of this domain delivers into it the requests whose XRCETH names it.
    pub xrcd: u32,
    /// An XRC SRQ: the CQ its receive completions go to (target QPs have no CQ of their own).
    pub cq: u32,
}
const _: () = assert!(core::mem::size_of::<CreateSrqCmd>() == 48);

/// `CreateSrqCmd::xrcd` of an ordinary (not XRC) SRQ.
pub const XRCD_NONE: u32 = 0;

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
