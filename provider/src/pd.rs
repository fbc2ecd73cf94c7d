//! Protection domains and memory regions: plain uverbs commands (rox.ko pins MR pages and
//! programs the device; no rox udata). The verbs entry points are crate::sys::pd's.

#![deny(unsafe_code)]

use crate::sys::ffi::{self, Zeroable};
use core::mem::offset_of;

#[repr(C)]
pub struct RoxPd {
    pub ibv_pd: ffi::ibv_pd,
}
const _: () = assert!(offset_of!(RoxPd, ibv_pd) == 0);

#[repr(C)]
pub struct RoxMr {
    pub vmr: ffi::verbs_mr,
}
const _: () = assert!(offset_of!(RoxMr, vmr) == 0);

impl RoxPd {
    pub fn new() -> Box<RoxPd> {
        Box::new(RoxPd {
            ibv_pd: Zeroable::zeroed(),
        })
    }
}

impl RoxMr {
    pub fn new() -> Box<RoxMr> {
        Box::new(RoxMr {
            vmr: Zeroable::zeroed(),
        })
    }
}
