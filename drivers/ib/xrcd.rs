// SPDX-License-Identifier: GPL-2.0
//! XRC domains. The device has no XRC domain object: a domain is a number the driver gives
//! each `ib_xrcd`, which it passes with every XRC SRQ and XRC target QP it creates; rox-nic
//! lets a target QP deliver only into XRC SRQs of its own number (docs/transport.md, XRC).
//! ib_core keeps the domain's target QPs and its sharing between processes (`ib_open_qp`,
//! the inode of `ibv_open_xrcd`) itself.

use core::sync::atomic::{AtomicU32, Ordering};

/// The driver's data of an `ib_xrcd`: its domain number (never `XRCD_NONE`, 0).
pub(crate) struct XrcdNum(pub(crate) u32);

/// The next domain number. Domains of every rox device come from one counter; a number is
/// reused only after 2^32 - 1 allocations.
static NEXT_XRCD: AtomicU32 = AtomicU32::new(1);

impl XrcdNum {
    pub(crate) fn alloc() -> XrcdNum {
        loop {
            let n = NEXT_XRCD.fetch_add(1, Ordering::Relaxed);
            if n != crate::hw::uapi::admin::XRCD_NONE {
                return XrcdNum(n);
            }
        }
    }
}

/// What an XRC SRQ is created with beyond a basic SRQ's attributes.
#[derive(Clone, Copy)]
pub(crate) struct XrcSrqInit {
    /// The domain's number.
    pub(crate) xrcd: u32,
    /// The device's id of the CQ its receive completions go to.
    pub(crate) cq: u32,
}
