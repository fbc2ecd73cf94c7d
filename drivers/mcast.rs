// SPDX-License-Identifier: GPL-2.0
//! UD multicast: attaching and detaching QPs to multicast groups. The device keeps the group
//! table, delivers a packet to a group to each attached QP (each checks its own Q_Key) and
//! loops this device's sends to a group back to its attached QPs. ib_core has already checked
//! that the GID is a multicast address and the QP a UD QP; the device checks again.
//!
//! Errors: EINVAL for a QP not attached to the group (detach) or input the device refuses;
//! ENOMEM when the group table or the group is full (`admin::DEV_MAX_MCAST_*`).

use crate::{
    dev::RoxDev,
    hw::uapi::{admin, ids::Qpn},
};
use kernel::prelude::*;

fn mcast_cmd(qpn: Qpn, gid: &[u8; 16]) -> admin::McastCmd {
    admin::McastCmd {
        qpn,
        reserved: 0,
        gid: *gid,
    }
}

/// QP `qpn` receives the packets sent to group `gid`.
pub(crate) fn attach(dev: &RoxDev<'_>, qpn: Qpn, gid: &[u8; 16]) -> Result {
    if !admin::is_multicast_gid(gid) {
        return Err(EINVAL);
    }
    dev.run::<admin::AttachMcast>(mcast_cmd(qpn, gid))
}

/// QP `qpn` leaves group `gid`.
pub(crate) fn detach(dev: &RoxDev<'_>, qpn: Qpn, gid: &[u8; 16]) -> Result {
    dev.run::<admin::DetachMcast>(mcast_cmd(qpn, gid))
}
