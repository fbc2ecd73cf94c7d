//! Address handles (UD): created through rox.ko (which validates the GID and SGID index); librox
//! keeps the address vector UD send WQEs (`queue::UdSeg`) are built from, with the destination
//! MAC ib_core resolved for it (rox.ko's `udata::CreateAhResp`): rox-nic puts it on the frame.
//! The verbs entry points are crate::sys::pd's.

#![deny(unsafe_code)]

use crate::sys::ffi::{self, Zeroable};
use core::mem::offset_of;
use rox_uapi::udata::CreateAhResp;

/// Where a UD WQE sent with an AH goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdAddress {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    /// The hop limit of the route ib_core resolved (a routed GID needs more than the 1 an
    /// application may have asked for).
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// Destination MAC resolved by the kernel (`udata::CreateAhResp::dmac`).
    pub dmac: [u8; 6],
}

impl UdAddress {
    /// The address of an AH created with the global route `grh` (whose GID is `dgid`), as
    /// rox.ko answered (`resp`).
    pub fn new(grh: &ffi::ibv_global_route, dgid: [u8; 16], resp: &CreateAhResp) -> Self {
        UdAddress {
            dgid,
            flow_label: grh.flow_label,
            sgid_index: grh.sgid_index,
            hop_limit: resp.hop_limit,
            traffic_class: grh.traffic_class,
            dmac: resp.dmac,
        }
    }
}

#[repr(C)]
pub struct RoxAh {
    pub ibv_ah: ffi::ibv_ah,
    /// Filled once rox.ko created the AH.
    pub addr: UdAddress,
}
const _: () = assert!(offset_of!(RoxAh, ibv_ah) == 0);

impl RoxAh {
    /// A new AH before rox.ko created it.
    pub fn new() -> Box<RoxAh> {
        Box::new(RoxAh {
            ibv_ah: Zeroable::zeroed(),
            addr: UdAddress::default(),
        })
    }
}
