// SPDX-License-Identifier: GPL-2.0
//! Queue memory described to the device by page lists: [`PageList`] (pinned user memory, also
//! the buffers of MRs), [`UserRing`] (the rings of user CQs, QPs and SRQs) and [`KernelRing`]
//! (the rings of kernel consumers' queues, in coherent DMA memory).

use crate::{
    dev::RoxDev,
    hw::{
        regs,
        uapi::{admin, queue},
    },
    ib::{dma::DmaArray, umem::Umem, IbDev},
};
use kernel::{
    device::{Bound, Device},
    prelude::*,
    transmute::{AsBytes, FromBytes},
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

/// A ring of `T` in coherent DMA memory for a kernel consumer's queue, with the page list that
/// describes it to the device (whole 4 KiB pages; the device uses the first `entries`).
pub(crate) struct KernelRing<T: AsBytes + FromBytes + Copy> {
    pub(crate) ring: DmaArray<T>,
    _pbl: DmaArray<u64>,
    desc: queue::PageList,
}

impl<T: AsBytes + FromBytes + Copy> KernelRing<T> {
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
