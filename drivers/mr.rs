// SPDX-License-Identifier: GPL-2.0
//! Memory regions: user MRs (pinned, with their page list, or on demand: see `odp.rs`), the
//! kernel's DMA MR and fast-registration MRs with the page list `ib_map_mr_sg` fills.

use crate::{
    dev::RoxDev,
    hw::uapi::{admin, ids::Key, queue, verbs},
    ib::{dma::DmaArray, umem::Umem, IbDev, RegisteredMr, Udata, UserRange},
    odp::{self, OdpMr},
    ring::PageList,
};
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{prelude::*, sync::Arc};

/// A registered memory region.
pub(crate) struct Mr {
    lkey: Key,
    /// User MRs: the pinned pages and their page list, which the device may read any time.
    _mem: Option<(Umem, PageList)>,
    /// On-demand paging regions (not pinned).
    odp: Option<Arc<OdpMr>>,
    /// Fast-registration MRs: the page list `IB_WR_REG_MR` hands the device.
    fast_reg: Option<FastRegPages>,
}

/// The page list of a fast-registration MR (`admin::MR_FLAG_FAST_REG`): `ib_map_mr_sg` fills
/// it (through `ib_sg_to_pages`), an `IB_WR_REG_MR` names it, and the device reads it when it
/// executes that WQE. Its capacity is the MR's (`max_num_sg` of `ib_alloc_mr`).
pub(crate) struct FastRegPages {
    list: DmaArray<u64>,
    /// Pages of the current mapping. Kernel consumers map an MR from one thread at a time and
    /// only post its REG_MR after mapping it (the verbs' rules); atomic so that a `&Mr` will do.
    count: AtomicU32,
}

/// What an `IB_WR_REG_MR` WQE needs of a fast-registration MR.
pub(crate) struct FastRegList {
    pub(crate) dma_address: u64,
    pub(crate) npages: u32,
    pub(crate) capacity: u32,
}

impl Mr {
    /// The page list of a fast-registration MR; None for other MRs.
    pub(crate) fn fast_reg_list(&self) -> Option<FastRegList> {
        self.fast_reg.as_ref().map(|f| FastRegList {
            dma_address: f.list.dma_address(),
            npages: f.count.load(Ordering::Acquire),
            capacity: f.list.len() as u32,
        })
    }

    /// `ib_map_mr_sg` starts a new mapping.
    pub(crate) fn clear_pages(&self) -> Result {
        let f = self.fast_reg.as_ref().ok_or(EINVAL)?;
        f.count.store(0, Ordering::Release);
        Ok(())
    }

    /// Appends one page (its DMA address) to the mapping; ENOMEM once the list is full (then
    /// `ib_sg_to_pages` stops and `ib_map_mr_sg` reports how much it mapped).
    pub(crate) fn set_page(&self, addr: u64) -> Result {
        let f = self.fast_reg.as_ref().ok_or(EINVAL)?;
        let n = f.count.load(Ordering::Acquire);
        if n as usize >= f.list.len() {
            return Err(ENOMEM);
        }
        f.list.write(n as usize, addr.to_le())?;
        f.count.store(n + 1, Ordering::Release);
        Ok(())
    }
}

/// `ib_alloc_mr(IB_MR_TYPE_MEM_REG, max_num_sg)`: a device MR with `MR_FLAG_FAST_REG` whose
/// capacity is `max_num_sg` pages (1..=`DEV_MAX_FAST_REG_PAGES`, else EINVAL), and its page
/// list in coherent DMA memory. Its key is invalid until a REG_MR binds pages to it.
pub(crate) fn alloc_fast_reg_mr(
    dev: &RoxDev<'_>,
    pdn: u32,
    max_num_sg: u32,
) -> Result<RegisteredMr<Mr>> {
    if max_num_sg == 0 || max_num_sg > admin::DEV_MAX_FAST_REG_PAGES {
        return Err(EINVAL);
    }
    let list = DmaArray::<u64>::zeroed(dev.pdev.as_ref(), max_num_sg as usize)?;
    let cmd = admin::RegMrCmd {
        pd: pdn,
        pbl: queue::PageList {
            npages: max_num_sg,
            ..Default::default()
        },
        flags: admin::MR_FLAG_FAST_REG,
        ..Default::default()
    };
    let keys = dev.run::<admin::RegMr>(cmd)?;
    Ok(RegisteredMr {
        data: Mr {
            lkey: keys.lkey,
            _mem: None,
            odp: None,
            fast_reg: Some(FastRegPages {
                list,
                count: AtomicU32::new(0),
            }),
        },
        lkey: keys.lkey,
        rkey: keys.rkey,
    })
}

/// The IB access flags the device implements; the optional ones (hints) are ignored.
fn device_access(access: u32) -> Result<u32> {
    let access = access & !verbs::ACCESS_OPTIONAL_MASK;
    if access & !verbs::ACCESS_SUPPORTED != 0 {
        return Err(EOPNOTSUPP);
    }
    Ok(access)
}

/// The Mr of an on-demand paging region [`odp::reg_odp_mr`] registered.
fn on_demand_mr(reg: RegisteredMr<Arc<OdpMr>>) -> RegisteredMr<Mr> {
    RegisteredMr {
        data: Mr {
            lkey: reg.lkey,
            _mem: None,
            odp: Some(reg.data),
            fast_reg: None,
        },
        lkey: reg.lkey,
        rkey: reg.rkey,
    }
}

fn register(
    dev: &RoxDev<'_>,
    cmd: admin::RegMrCmd,
    mem: Option<(Umem, PageList)>,
) -> Result<RegisteredMr<Mr>> {
    let keys = dev.run::<admin::RegMr>(cmd)?;
    Ok(RegisteredMr {
        data: Mr {
            lkey: keys.lkey,
            _mem: mem,
            odp: None,
            fast_reg: None,
        },
        lkey: keys.lkey,
        rkey: keys.rkey,
    })
}

pub(crate) fn reg_user_mr(
    dev: &RoxDev<'_>,
    ib: IbDev<'_>,
    pdn: u32,
    range: UserRange,
    access: u32,
    udata: &mut Udata<'_>,
) -> Result<RegisteredMr<Mr>> {
    let UserRange {
        start,
        length,
        iova,
    } = range;
    udata.expect_no_input()?;
    let on_demand = access & verbs::ACCESS_ON_DEMAND != 0;
    let access = device_access(access & !verbs::ACCESS_ON_DEMAND)?;
    if length == 0 || length > dev.attr.max_mr_size {
        return Err(EINVAL);
    }
    if on_demand {
        let mr = on_demand_mr(odp::reg_odp_mr(dev, ib, pdn, start, length, iova, access)?);
        if let Err(err) = udata.respond_empty() {
            dereg_mr(dev, &mr.data);
            return Err(err);
        }
        return Ok(mr);
    }
    let umem = Umem::get(ib, start, usize::try_from(length)?, access)?;
    let page_size = umem
        .best_page_size(dev.attr.page_size_cap, iova)
        .ok_or(EINVAL)?;
    let page_shift = page_size.trailing_zeros() as u8;
    let pbl = PageList::new(dev.pdev.as_ref(), &umem, page_shift)?;
    let cmd = admin::RegMrCmd {
        pd: pdn,
        access,
        iova,
        length,
        pbl: pbl.desc(),
        offset_in_first_page: (iova & (page_size - 1)) as u32,
        flags: 0,
    };
    let mr = register(dev, cmd, Some((umem, pbl)))?;
    udata.respond_empty()?;
    Ok(mr)
}

/// The kernel's DMA MR: DMA addresses used as they are (as far as the device reaches).
pub(crate) fn get_dma_mr(dev: &RoxDev<'_>, pdn: u32, access: u32) -> Result<RegisteredMr<Mr>> {
    let cmd = admin::RegMrCmd {
        pd: pdn,
        access: device_access(access)?,
        iova: 0,
        length: dev.attr.max_mr_size,
        flags: admin::MR_FLAG_PHYSICAL,
        ..Default::default()
    };
    register(dev, cmd, None)
}

pub(crate) fn dereg_mr(dev: &RoxDev<'_>, mr: &Mr) {
    let result = match &mr.odp {
        Some(odp) => odp::dereg_odp_mr(dev, odp, mr.lkey),
        None => dev.run::<admin::DeregMr>(admin::KeyCmd {
            key: mr.lkey,
            reserved: 0,
        }),
    };
    if let Err(err) = result.or_else(|e| crate::dead::gone_if_dead(dev, e)) {
        dev_warn!(
            dev.pdev.as_ref(),
            "DEREG_MR {:#x} failed: {:?}\n",
            mr.lkey,
            err
        );
    }
}
