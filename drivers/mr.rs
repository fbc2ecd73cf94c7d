// SPDX-License-Identifier: GPL-2.0
//! Memory regions and the DMA page lists that describe pinned user memory to the device
//! (MR buffers and the rings of CQs, QPs and SRQs).

use crate::{
    admin::payload,
    dev::RoxDev,
    hw::{
        regs,
        uapi::{admin, queue, verbs},
    },
    ib::{
        bindings::IB_UVERBS_ACCESS_OPTIONAL_FIRST, bindings::IB_UVERBS_ACCESS_OPTIONAL_LAST,
        dma::DmaArray, umem::Umem, IbDev, RegisteredMr, Udata,
    },
};
use kernel::{
    device::{Bound, Device},
    prelude::*,
};

/// A page list in DMA memory (`uapi::queue::PageList`), kept alive as long as the device may
/// read it.
pub(crate) struct PageList {
    /// Level 1: the data page addresses. Level 2: the addresses of `leaves`.
    _top: DmaArray<u64>,
    /// Level 2 only: pages of data page addresses.
    _leaves: KVec<DmaArray<u64>>,
    desc: queue::PageList,
}

impl PageList {
    /// Describes `umem` in pages of `1 << page_shift` bytes.
    pub(crate) fn new(dev: &Device<Bound>, umem: &Umem, page_shift: u8) -> Result<Self> {
        let page_size = 1u64 << page_shift;
        let npages = umem.num_blocks(page_size);
        if npages == 0 || npages > admin::DEV_MAX_PBL_PAGES as usize {
            return Err(EINVAL);
        }
        let per_page = queue::PBL_ENTRIES_PER_PAGE as usize;
        let (top, leaves, level) = if npages <= per_page {
            let top = DmaArray::<u64>::zeroed(dev, npages)?;
            let mut index = 0;
            umem.for_each_block(page_size, |addr| {
                top.write(index, addr)?;
                index += 1;
                Ok(())
            })?;
            (top, KVec::new(), queue::PBL_LEVEL_1)
        } else {
            let nleaves = npages.div_ceil(per_page);
            let top = DmaArray::<u64>::zeroed(dev, nleaves)?;
            let mut leaves = KVec::with_capacity(nleaves, GFP_KERNEL)?;
            for leaf in 0..nleaves {
                let page = DmaArray::<u64>::zeroed(dev, per_page)?;
                top.write(leaf, page.dma_address())?;
                leaves.push(page, GFP_KERNEL)?;
            }
            let mut index = 0;
            umem.for_each_block(page_size, |addr| {
                leaves
                    .get(index / per_page)
                    .ok_or(EINVAL)?
                    .write(index % per_page, addr)?;
                index += 1;
                Ok(())
            })?;
            (top, leaves, queue::PBL_LEVEL_2)
        };
        let desc = queue::PageList {
            addr: top.dma_address(),
            npages: npages as u32,
            page_shift,
            level,
            reserved: 0,
        };
        Ok(Self {
            _top: top,
            _leaves: leaves,
            desc,
        })
    }

    pub(crate) fn desc(&self) -> queue::PageList {
        self.desc
    }
}

/// A user ring: `bytes` of page-aligned user memory at `addr`, pinned, with its page list.
pub(crate) struct UserRing {
    _umem: Umem,
    pbl: PageList,
}

impl UserRing {
    pub(crate) fn new(
        dev: &RoxDev<'_>,
        ib: IbDev<'_>,
        addr: u64,
        bytes: usize,
        access: u32,
    ) -> Result<Self> {
        if addr % regs::ROX_PAGE_SIZE as u64 != 0 {
            return Err(EINVAL);
        }
        let umem = Umem::get(ib, addr, bytes, access)?;
        let pbl = PageList::new(dev.pdev.as_ref(), &umem, regs::ROX_PAGE_SHIFT as u8)?;
        Ok(Self { _umem: umem, pbl })
    }

    pub(crate) fn desc(&self) -> queue::PageList {
        self.pbl.desc()
    }
}

/// A registered memory region.
pub(crate) struct Mr {
    lkey: u32,
    /// User MRs: the pinned pages and their page list, which the device may read any time.
    _mem: Option<(Umem, PageList)>,
}

/// The IB access flags the device implements; the optional ones (hints) are ignored.
fn device_access(access: u32) -> Result<u32> {
    let optional = IB_UVERBS_ACCESS_OPTIONAL_FIRST..=IB_UVERBS_ACCESS_OPTIONAL_LAST;
    let optional_mask = (optional.end() << 1).wrapping_sub(*optional.start());
    let access = access & !optional_mask;
    if access & !verbs::ACCESS_SUPPORTED != 0 {
        return Err(EOPNOTSUPP);
    }
    Ok(access)
}

fn register(
    dev: &RoxDev<'_>,
    cmd: admin::RegMrCmd,
    mem: Option<(Umem, PageList)>,
) -> Result<RegisteredMr<Mr>> {
    let cpl = dev.exec(admin::ADMIN_OP_REG_MR, payload!(reg_mr: cmd))?;
    Ok(RegisteredMr {
        data: Mr {
            lkey: cpl.result0,
            _mem: mem,
        },
        lkey: cpl.result0,
        rkey: cpl.result1,
    })
}

pub(crate) fn reg_user_mr(
    dev: &RoxDev<'_>,
    ib: IbDev<'_>,
    pdn: u32,
    start: u64,
    length: u64,
    iova: u64,
    access: u32,
    udata: &mut Udata<'_>,
) -> Result<RegisteredMr<Mr>> {
    udata.expect_no_input()?;
    let access = device_access(access)?;
    if length == 0 || length > dev.attr.max_mr_size {
        return Err(EINVAL);
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
    let cmd = admin::HandleCmd {
        handle: mr.lkey,
        reserved: 0,
    };
    if let Err(err) = dev.exec(admin::ADMIN_OP_DEREG_MR, payload!(handle: cmd)) {
        dev_warn!(
            dev.pdev.as_ref(),
            "DEREG_MR {:#x} failed: {:?}\n",
            mr.lkey,
            err
        );
    }
}

/// A ring of `T` in coherent DMA memory for a kernel consumer's queue, with the page list that
/// describes it to the device (whole 4 KiB pages; the device uses the first `entries`).
pub(crate) struct KernelRing<T: kernel::transmute::AsBytes + kernel::transmute::FromBytes + Copy> {
    pub(crate) ring: DmaArray<T>,
    _pbl: DmaArray<u64>,
    desc: queue::PageList,
}

impl<T: kernel::transmute::AsBytes + kernel::transmute::FromBytes + Copy> KernelRing<T> {
    pub(crate) fn new(dev: &Device<Bound>, entries: usize) -> Result<Self> {
        let page = regs::ROX_PAGE_SIZE;
        let bytes = entries
            .checked_mul(core::mem::size_of::<T>())
            .ok_or(EINVAL)?;
        let npages = bytes.div_ceil(page);
        if npages == 0 || npages > queue::PBL_ENTRIES_PER_PAGE as usize {
            return Err(EINVAL);
        }
        let ring = DmaArray::<T>::zeroed(dev, npages * page / core::mem::size_of::<T>())?;
        let pbl = DmaArray::<u64>::zeroed(dev, npages)?;
        for i in 0..npages {
            pbl.write(i, ring.dma_address() + (i * page) as u64)?;
        }
        let desc = queue::PageList {
            addr: pbl.dma_address(),
            npages: npages as u32,
            page_shift: regs::ROX_PAGE_SHIFT as u8,
            level: queue::PBL_LEVEL_1,
            reserved: 0,
        };
        Ok(Self {
            ring,
            _pbl: pbl,
            desc,
        })
    }

    pub(crate) fn desc(&self) -> queue::PageList {
        self.desc
    }
}

/// A memory window (type 1 or 2): the device keeps its binding; the driver only names it.
pub(crate) struct Mw {
    rkey: u32,
}

/// Allocates a memory window in PD `pdn`; returns its rkey (the device's).
pub(crate) fn alloc_mw(dev: &RoxDev<'_>, pdn: u32, mw_type: u32, udata: &mut Udata<'_>) -> Result<(u32, Mw)> {
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
    let rkey = dev
        .exec(admin::ADMIN_OP_ALLOC_MW, payload!(alloc_mw: cmd))?
        .result0;
    let mw = Mw { rkey };
    if let Err(err) = udata.respond_empty() {
        dealloc_mw(dev, &mw);
        return Err(err);
    }
    Ok((rkey, mw))
}

pub(crate) fn dealloc_mw(dev: &RoxDev<'_>, mw: &Mw) {
    let cmd = admin::HandleCmd {
        handle: mw.rkey,
        reserved: 0,
    };
    if let Err(err) = dev.exec(admin::ADMIN_OP_DEALLOC_MW, payload!(handle: cmd)) {
        dev_warn!(
            dev.pdev.as_ref(),
            "DEALLOC_MW {:#x} failed: {:?}\n",
            mw.rkey,
            err
        );
    }
}
