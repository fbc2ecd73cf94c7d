// SPDX-License-Identifier: GPL-2.0
//! Memory windows (type 1 and 2): the device keeps their binding; the driver only names them.

use crate::{
    dev::RoxDev,
    hw::uapi::{admin, ids::Key, verbs},
    ib::Udata,
};
use kernel::prelude::*;

/// A memory window (type 1 or 2): the device keeps its binding; the driver only names it.
pub(crate) struct Mw {
    rkey: Key,
}

/// Allocates a memory window in PD `pdn`; returns its rkey (the device's).
pub(crate) fn alloc_mw(
    dev: &RoxDev<'_>,
    pdn: u32,
    mw_type: u32,
    udata: &mut Udata<'_>,
) -> Result<(Key, Mw)> {
    udata.expect_no_input()?;
    let mw_type = match u8::try_from(mw_type) {
        Ok(t @ (verbs::MW_TYPE_1 | verbs::MW_TYPE_2)) => t,
        _ => return Err(EINVAL),
    };
    let cmd = admin::AllocMwCmd {
        pd: pdn,
        mw_type,
        ..Default::default()
    };
    let rkey = dev.run::<admin::AllocMw>(cmd)?;
    let mw = Mw { rkey };
    if let Err(err) = udata.respond_empty() {
        dealloc_mw(dev, &mw);
        return Err(err);
    }
    Ok((rkey, mw))
}

pub(crate) fn dealloc_mw(dev: &RoxDev<'_>, mw: &Mw) {
    let cmd = admin::KeyCmd {
        key: mw.rkey,
        reserved: 0,
    };
    if let Err(err) = dev
        .run::<admin::DeallocMw>(cmd)
        .or_else(|e| crate::dead::gone_if_dead(dev, e))
    {
        dev_warn!(
            dev.pdev.as_ref(),
            "DEALLOC_MW {:#x} failed: {:?}\n",
            mw.rkey,
            err
        );
    }
}
