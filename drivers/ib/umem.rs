// SPDX-License-Identifier: GPL-2.0
//! Pinned user memory (`struct ib_umem`): MR buffers and the rings the provider allocates.

use super::{bindings as b, IbDev};
use core::ptr::NonNull;
use kernel::{error::from_err_ptr, prelude::*};

/// User pages pinned and DMA-mapped for the device, released on drop.
///
/// # Invariants
///
/// `raw` is a umem returned by `ib_umem_get*` and not yet released.
pub(crate) struct Umem {
    raw: NonNull<b::ib_umem>,
}

// SAFETY: a umem may be used and released from any thread.
unsafe impl Send for Umem {}
// SAFETY: the accessors only read the umem.
unsafe impl Sync for Umem {}

impl Umem {
    /// Pins `len` bytes of the calling process's memory at `addr` with `access` (`IB_ACCESS_*`).
    pub(crate) fn get(ib: IbDev<'_>, addr: u64, len: usize, access: u32) -> Result<Self> {
        if len == 0 {
            return Err(EINVAL);
        }
        // SAFETY: `ib` is a registered device; ib_core validates the range and access.
        let raw = from_err_ptr(unsafe {
            b::rox_shim_umem_get(ib.as_raw(), addr as usize, len, access as i32)
        })?;
        // INVARIANT: a fresh umem.
        Ok(Self {
            raw: NonNull::new(raw).ok_or(ENOMEM)?,
        })
    }

    /// The largest page size of `pgsz_bitmap` that maps the umem at device address `iova`.
    pub(crate) fn best_page_size(&self, pgsz_bitmap: u64, iova: u64) -> Option<u64> {
        // SAFETY: live umem (type invariant).
        let pgsz =
            unsafe { b::ib_umem_find_best_pgsz(self.raw.as_ptr(), pgsz_bitmap as usize, iova) };
        (pgsz != 0).then_some(pgsz as u64)
    }

    /// Number of `pgsz` blocks covering the umem.
    pub(crate) fn num_blocks(&self, pgsz: u64) -> usize {
        // SAFETY: live umem (type invariant).
        unsafe { b::rox_shim_umem_num_dma_blocks(self.raw.as_ptr(), pgsz as usize) }
    }

    /// Calls `f` with the DMA address of each `pgsz` block, in order (`pgsz` from
    /// [`Self::best_page_size`] or at most `PAGE_SIZE`).
    pub(crate) fn for_each_block(&self, pgsz: u64, mut f: impl FnMut(u64) -> Result) -> Result {
        let mut iter = b::ib_block_iter::default();
        // SAFETY: live umem; the iterator is local and used only with it.
        unsafe { b::rox_shim_umem_block_iter_start(&mut iter, self.raw.as_ptr(), pgsz as usize) };
        // SAFETY: as above.
        while unsafe { b::rox_shim_umem_block_iter_next(&mut iter) } {
            // SAFETY: the iterator points at a valid block.
            f(unsafe { b::rox_shim_block_iter_dma_address(&mut iter) })?;
        }
        Ok(())
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: live umem (type invariant), released once.
        unsafe { b::ib_umem_release(self.raw.as_ptr()) };
    }
}
