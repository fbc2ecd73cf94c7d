// SPDX-License-Identifier: GPL-2.0
//! On-demand paging memory (`struct ib_umem_odp`): user memory that is *not* pinned. ib_core
//! watches the range with an mmu interval notifier; when the CPU's mapping of some pages
//! changes, the notifier calls [`Verbs::odp_invalidate`] with the umem's mutex held, and the
//! driver makes the device stop using those pages before it returns. Pages are made present
//! (faulted in and DMA-mapped) with [`UmemOdp::map`], whose callback also runs under the mutex,
//! so a translation handed to the device can never be stale.

use super::{bindings as b, obj::dev_of, IbDev, Verbs};
use core::{marker::PhantomData, ptr::NonNull};
use kernel::ffi::c_ulong;
use kernel::{error::from_err_ptr, prelude::*};

/// What the notifier needs to find the driver: its ops table (ib_core keeps a pointer to it)
/// and the driver's data for this region.
struct OdpBox<V: Verbs> {
    ops: b::mmu_interval_notifier_ops,
    data: V::Odp,
}

/// An on-demand paging umem with the driver's data `V::Odp`, released on drop.
///
/// # Invariants
///
/// `raw` is a umem returned by `ib_umem_odp_get` for a device of `V`, not yet released, whose
/// notifier ops are `boxed.ops` and whose `private` is null or points to `boxed`.
pub(crate) struct UmemOdp<V: Verbs> {
    raw: NonNull<b::ib_umem_odp>,
    boxed: Pin<KBox<OdpBox<V>>>,
}

// SAFETY: a umem may be used and released from any thread; `V::Odp` is Send + Sync.
unsafe impl<V: Verbs> Send for UmemOdp<V> {}
// SAFETY: shared use goes through the umem's mutex (`map`, `locked`) or reads fixed fields.
unsafe impl<V: Verbs> Sync for UmemOdp<V> {}

/// The umem's mutex is held: no invalidation runs; page states are stable.
pub(crate) struct OdpLocked<'a> {
    raw: NonNull<b::ib_umem_odp>,
    _life: PhantomData<&'a ()>,
}

impl OdpLocked<'_> {
    /// The DMA address of page `index` and whether the CPU mapping is writable, if the page is
    /// present (DMA-mapping it on first use); `None` if it is not present.
    pub(crate) fn page(&self, index: usize) -> Result<Option<(u64, bool)>> {
        let odp = self.raw.as_ptr();
        // SAFETY: the umem is live and its mutex held (type invariant of the lock guard's
        // creator); `index` is checked against the umem's page count.
        unsafe {
            let npages = (b::rox_shim_umem_odp_end(odp) - b::rox_shim_umem_odp_start(odp))
                >> (*odp).page_shift;
            if index >= npages as usize {
                return Err(EINVAL);
            }
            if !b::rox_shim_umem_odp_page_valid(odp, index) {
                return Ok(None);
            }
            let writable = b::rox_shim_umem_odp_page_writable(odp, index);
            let dma = b::rox_shim_umem_odp_dma_map_page(odp, index);
            if b::rox_shim_umem_odp_dma_mapping_error(odp, dma) {
                return Err(EFAULT);
            }
            Ok(Some((dma, writable)))
        }
    }
}

/// The notifier's invalidate callback.
///
/// # Safety
///
/// Called by the mmu notifier core for a umem made by [`UmemOdp::get`] (type invariant).
unsafe extern "C" fn invalidate<V: Verbs>(
    mni: *mut b::mmu_interval_notifier,
    range: *const b::mmu_notifier_range,
    cur_seq: c_ulong,
) -> bool {
    // SAFETY: `mni` is the notifier of a live `ib_umem_odp` (its removal, in
    // `ib_umem_odp_release`, waits for running callbacks); `range` is valid for the call;
    // `private` is null or our `OdpBox`, which is freed only after the umem is released; the
    // umem is released before its ib_device is deallocated (the driver drops every `UmemOdp`
    // in its dereg_mr, which ib_unregister_device runs before `IbRegistration` deallocates the
    // device, and no event handler keeps one past dereg_mr), so `umem.ibdev` is live.
    unsafe {
        if !b::rox_shim_mmu_range_blockable(range) {
            return false;
        }
        let odp = b::rox_shim_umem_odp_of_notifier(mni);
        b::rox_shim_umem_odp_lock(odp);
        b::rox_shim_mmu_interval_set_seq(mni, cur_seq);
        let ustart = b::rox_shim_umem_odp_start(odp) as u64;
        let uend = b::rox_shim_umem_odp_end(odp) as u64;
        let start = ustart.max((*range).start as u64);
        let end = uend.min((*range).end as u64);
        if start < end {
            let boxed = (*odp).private.cast::<OdpBox<V>>().cast_const();
            if !boxed.is_null() {
                let shift = (*odp).page_shift;
                let first = ((start - ustart) >> shift) as usize;
                let last = ((end - 1 - ustart) >> shift) as usize;
                let dev = dev_of::<V>((*odp).umem.ibdev);
                V::odp_invalidate(dev, &(*boxed).data, first, last - first + 1);
            }
            b::ib_umem_odp_unmap_dma_pages(odp, start, end);
        }
        b::rox_shim_umem_odp_unlock(odp);
    }
    true
}

impl<V: Verbs> UmemOdp<V> {
    /// Watches `len` bytes of the calling process's memory at `addr` for a region with
    /// `access` (`IB_ACCESS_*`, with `IB_ACCESS_ON_DEMAND`); nothing is pinned or mapped yet.
    pub(crate) fn get(
        ib: IbDev<'_>,
        addr: u64,
        len: usize,
        access: u32,
        data: V::Odp,
    ) -> Result<Self> {
        if len == 0 {
            return Err(EINVAL);
        }
        let boxed = KBox::pin(
            OdpBox::<V> {
                ops: b::mmu_interval_notifier_ops {
                    invalidate: Some(invalidate::<V>),
                    invalidate_start: None,
                    invalidate_finish: None,
                },
                data,
            },
            GFP_KERNEL,
        )?;
        // SAFETY: `ib` is a registered device of `V`; ib_core validates the range and access;
        // `boxed.ops` outlives the umem (released before `boxed` is dropped).
        let raw = from_err_ptr(unsafe {
            b::ib_umem_odp_get(ib.as_raw(), addr as usize, len, access as i32, &boxed.ops)
        })?;
        let raw = NonNull::new(raw).ok_or(ENOMEM)?;
        // SAFETY: a fresh live umem; `private` is written under its mutex, which the notifier
        // takes before reading it.
        unsafe {
            b::rox_shim_umem_odp_lock(raw.as_ptr());
            (*raw.as_ptr()).private = (&raw const *boxed).cast_mut().cast();
            b::rox_shim_umem_odp_unlock(raw.as_ptr());
        }
        // INVARIANT: `private` points to `boxed`, whose ops the umem uses.
        Ok(Self { raw, boxed })
    }

    /// The driver's data.
    pub(crate) fn data(&self) -> &V::Odp {
        &self.boxed.data
    }

    /// The first user address of the umem's first page.
    pub(crate) fn start(&self) -> u64 {
        // SAFETY: live umem (type invariant).
        unsafe { b::rox_shim_umem_odp_start(self.raw.as_ptr()) as u64 }
    }

    /// log2 of the umem's page size.
    pub(crate) fn page_shift(&self) -> u32 {
        // SAFETY: live umem; `page_shift` is fixed at creation.
        unsafe { (*self.raw.as_ptr()).page_shift }
    }

    /// Number of pages the umem spans.
    pub(crate) fn npages(&self) -> usize {
        // SAFETY: live umem (type invariant).
        let end = unsafe { b::rox_shim_umem_odp_end(self.raw.as_ptr()) } as u64;
        ((end - self.start()) >> self.page_shift()) as usize
    }

    /// Whether the region may be written (the CPU mapping is faulted writable).
    pub(crate) fn writable(&self) -> bool {
        // SAFETY: live umem; `writable` is fixed at creation.
        unsafe { (*self.raw.as_ptr()).umem.writable() != 0 }
    }

    /// Runs `f` with the umem's mutex held (no invalidation runs meanwhile).
    pub(crate) fn locked<R>(&self, f: impl FnOnce(&OdpLocked<'_>) -> R) -> R {
        let guard = OdpLocked {
            raw: self.raw,
            _life: PhantomData,
        };
        // SAFETY: live umem; the mutex is released below.
        unsafe { b::rox_shim_umem_odp_lock(self.raw.as_ptr()) };
        let r = f(&guard);
        // SAFETY: taken above.
        unsafe { b::rox_shim_umem_odp_unlock(self.raw.as_ptr()) };
        r
    }

    /// Makes pages `[first, first + count)` present (`fault`: faulting them in, writable if
    /// `write`; otherwise taking only what the CPU has mapped already), then runs `f` with the
    /// umem's mutex held, so that what `f` reads is current until it returns.
    pub(crate) fn map<R>(
        &self,
        first: usize,
        count: usize,
        write: bool,
        fault: bool,
        f: impl FnOnce(&OdpLocked<'_>) -> R,
    ) -> Result<R> {
        if count == 0
            || first
                .checked_add(count)
                .is_none_or(|end| end > self.npages())
        {
            return Err(EINVAL);
        }
        let shift = self.page_shift();
        let va = self.start() + ((first as u64) << shift);
        let mask = if write {
            // SAFETY: returns a constant.
            unsafe { b::rox_shim_hmm_pfn_write() as u64 }
        } else {
            0
        };
        // SAFETY: live umem; the range lies inside it. On success the mutex is held and
        // released below.
        let ret = unsafe {
            b::ib_umem_odp_map_dma_and_lock(
                self.raw.as_ptr(),
                va,
                (count as u64) << shift,
                mask,
                fault,
            )
        };
        if ret < 0 {
            return Err(Error::from_errno(ret));
        }
        let guard = OdpLocked {
            raw: self.raw,
            _life: PhantomData,
        };
        let r = f(&guard);
        // SAFETY: `ib_umem_odp_map_dma_and_lock` returned with the mutex held.
        unsafe { b::rox_shim_umem_odp_unlock(self.raw.as_ptr()) };
        Ok(r)
    }
}

impl<V: Verbs> Drop for UmemOdp<V> {
    fn drop(&mut self) {
        // SAFETY: live umem (type invariant), released once; this removes the notifier (waiting
        // for running callbacks) before `boxed` goes. It reads `umem.ibdev` (DMA unmapping):
        // the driver drops every `UmemOdp` in its dereg_mr, while the ib_device exists (see
        // `invalidate`).
        unsafe { b::ib_umem_odp_release(self.raw.as_ptr()) };
    }
}
