// SPDX-License-Identifier: GPL-2.0
//! Arrays of device-visible entries in coherent DMA memory, shared with a device that reads and
//! writes them concurrently: every access is a volatile copy of one whole entry.

use core::sync::atomic::{fence, Ordering};
use kernel::{
    device::{Bound, Device},
    dma::{Coherent, DmaAddress},
    prelude::*,
    transmute::{AsBytes, FromBytes},
};

/// `len` entries of `T` in coherent DMA memory (rings, page lists, response buffers).
pub(crate) struct DmaArray<T: AsBytes + FromBytes + Copy> {
    mem: Coherent<[T]>,
}

impl<T: AsBytes + FromBytes + Copy> DmaArray<T> {
    /// Allocates `len` zeroed entries.
    pub(crate) fn zeroed(dev: &Device<Bound>, len: usize) -> Result<Self> {
        if len == 0 {
            return Err(EINVAL);
        }
        Ok(Self {
            mem: Coherent::zeroed_slice(dev, len, GFP_KERNEL)?,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.mem.len()
    }

    /// The bus address the device uses for entry 0.
    pub(crate) fn dma_address(&self) -> DmaAddress {
        self.mem.dma_address()
    }

    fn entry(&self, index: usize) -> Result<*mut T> {
        if index >= self.len() {
            return Err(EINVAL);
        }
        // SAFETY: `index < len`, so the offset stays inside the allocation of `len` entries.
        Ok(unsafe { self.mem.as_mut_ptr().cast::<T>().add(index) })
    }

    /// Copies entry `index` out of DMA memory.
    pub(crate) fn read(&self, index: usize) -> Result<T> {
        let entry = self.entry(index)?;
        // SAFETY: `entry` points to an initialised, aligned `T` inside the allocation; `T` is
        // `FromBytes`, so whatever bytes the device wrote form a valid value. Volatile, because
        // the device writes this memory behind the compiler's back.
        Ok(unsafe { entry.read_volatile() })
    }

    /// Copies `value` into entry `index`.
    pub(crate) fn write(&self, index: usize, value: T) -> Result {
        let entry = self.entry(index)?;
        // SAFETY: `entry` points to an aligned `T` inside the allocation; `T: AsBytes` has no
        // padding, so the device sees only initialised bytes.
        unsafe { entry.write_volatile(value) };
        Ok(())
    }

    /// Reads the last byte of entry `index` (the owner byte of device-written entries, see
    /// `uapi/src/queue.rs`), then orders every later read of the entry after it (acquire).
    pub(crate) fn read_owner(&self, index: usize) -> Result<u8> {
        let entry = self.entry(index)?;
        // SAFETY: the last byte of an entry inside the allocation; any `u8` is valid.
        let owner = unsafe {
            entry
                .cast::<u8>()
                .add(core::mem::size_of::<T>() - 1)
                .read_volatile()
        };
        fence(Ordering::Acquire);
        Ok(owner)
    }
}

/// Lets `pdev` address all 64 bits for streaming and coherent DMA.
///
/// Takes the `Core` context (probe): no other context of the driver exists yet, so no DMA
/// allocation or mapping of this device can run concurrently.
pub(crate) fn set_dma_mask_64(pdev: &kernel::pci::Device<kernel::device::Core<'_>>) -> Result {
    use kernel::dma::{Device as _, DmaMask};
    // SAFETY: see above: called from probe before any allocation, with nothing concurrent.
    unsafe { pdev.dma_set_mask_and_coherent(DmaMask::new::<64>()) }
}
