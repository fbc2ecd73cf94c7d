//! Completion queues: CREATE_CQ and RESIZE_CQ.

use super::super::queue::PageList;

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
const _: () = assert!(core::mem::size_of::<CreateCqCmd>() == 32);

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
