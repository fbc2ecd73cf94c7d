// SPDX-License-Identifier: GPL-2.0
//! User mappings of device pages (doorbell and wake pages) through ib_core's
//! `rdma_user_mmap_entry`: the driver inserts an entry per page and hands its offset to the
//! provider, which mmaps the uverbs file at that offset.

use super::{bindings as b, obj::dev_of, Verbs};
use core::{marker::PhantomData, ptr::NonNull};
use kernel::{error::to_result, ffi::c_int, prelude::*};

/// The ucontext a mapping belongs to, during alloc_ucontext.
#[derive(Clone, Copy)]
pub(crate) struct UcontextRef<'a> {
    raw: NonNull<b::ib_ucontext>,
    _life: PhantomData<&'a b::ib_ucontext>,
}

impl UcontextRef<'_> {
    /// # Safety
    ///
    /// `raw` is a ucontext ib_core passed to the current callback.
    pub(crate) unsafe fn from_raw(raw: *mut b::ib_ucontext) -> Self {
        Self {
            raw: NonNull::new(raw).unwrap_or(NonNull::dangling()),
            _life: PhantomData,
        }
    }
}

/// What ib_core's entry is embedded in: the entry first, then the page frame to map.
#[repr(C)]
struct RoxEntry {
    entry: b::rdma_user_mmap_entry,
    /// First page frame number of the device memory to map.
    pfn: u64,
}

/// One page range of device memory that a ucontext may map, non-cached. Removed from ib_core
/// on drop (mappings then fail); freed by ib_core's `mmap_free` once no mapping uses it.
///
/// # Invariants
///
/// `entry` points to a `RoxEntry` inserted into its ucontext and not yet removed.
pub(crate) struct MmapEntry {
    entry: NonNull<RoxEntry>,
}

// SAFETY: ib_core's mmap entries are reference counted and may be removed from any thread.
unsafe impl Send for MmapEntry {}
// SAFETY: `MmapEntry` has no interior mutability of its own.
unsafe impl Sync for MmapEntry {}

impl MmapEntry {
    /// Makes `length` bytes of device memory at page frame `pfn` mappable through `uctx`.
    pub(crate) fn new(uctx: UcontextRef<'_>, pfn: u64, length: usize) -> Result<Self> {
        let mut boxed = KBox::<RoxEntry>::new_uninit(GFP_KERNEL)?;
        let raw = boxed.as_mut_ptr();
        // SAFETY: fresh allocation; ib_core requires the entry zeroed before insertion.
        let boxed = unsafe {
            core::ptr::addr_of_mut!((*raw).entry).write_bytes(0, 1);
            (*raw).pfn = pfn;
            boxed.assume_init()
        };
        let raw = KBox::into_raw(boxed);
        // SAFETY: `uctx` is alive for this call; the entry is zeroed and stays allocated until
        // ib_core calls `mmap_free` (or we free it below on failure).
        let ret =
            unsafe { b::rdma_user_mmap_entry_insert(uctx.raw.as_ptr(), &mut (*raw).entry, length) };
        if let Err(err) = to_result(ret) {
            // SAFETY: insertion failed, ib_core holds no reference.
            drop(unsafe { KBox::from_raw(raw) });
            return Err(err);
        }
        // INVARIANT: inserted.
        Ok(Self {
            entry: NonNull::new(raw).ok_or(EINVAL)?,
        })
    }

    /// The mmap offset user space passes to mmap(2).
    pub(crate) fn offset(&self) -> u64 {
        // SAFETY: the entry is alive while inserted (type invariant).
        unsafe { b::rox_shim_user_mmap_get_offset(&(*self.entry.as_ptr()).entry) }
    }
}

impl Drop for MmapEntry {
    fn drop(&mut self) {
        // SAFETY: inserted (type invariant); ib_core drops its reference and calls `mmap_free`
        // when the last mapping goes.
        unsafe { b::rdma_user_mmap_entry_remove(&mut (*self.entry.as_ptr()).entry) };
    }
}

/// ops.mmap: maps the entry at the VMA's offset, non-cached, if the driver still allows that
/// page ([`Verbs::map_user_page`]).
///
/// # Safety
///
/// Called only by ib_core (`ib_device_ops.mmap`) with a live ucontext of a `V` device and the
/// VMA of the mmap call, valid (and its mm locked) for the call.
pub(super) unsafe extern "C" fn mmap<V: Verbs>(
    uctx: *mut b::ib_ucontext,
    vma: *mut b::vm_area_struct,
) -> c_int {
    // SAFETY: ib_core passes the calling process's ucontext and VMA.
    let entry = unsafe { b::rdma_user_mmap_entry_get(uctx, vma) };
    if entry.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: every entry of our ucontexts is the first field of a `RoxEntry`; we hold the
    // reference `rdma_user_mmap_entry_get` took; the ucontext's device is one of `V`'s.
    let (pfn, dev) = unsafe { ((*entry.cast::<RoxEntry>()).pfn, dev_of::<V>((*uctx).device)) };
    let ret = V::map_user_page(dev, pfn, || {
        // SAFETY: the VMA is valid for this call; `entry` is held (above).
        to_result(unsafe {
            let length = b::rox_shim_vma_size(vma);
            let prot = b::rox_shim_pgprot_noncached((*vma).vm_page_prot);
            b::rdma_user_mmap_io(uctx, vma, pfn as usize, length as usize, prot, entry)
        })
    });
    // SAFETY: the reference taken above.
    unsafe { b::rdma_user_mmap_entry_put(entry) };
    match ret {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// ops.mmap_free: the last reference to an entry is gone.
///
/// # Safety
///
/// Called only by ib_core (`ib_device_ops.mmap_free`), once per entry, with the `entry` member
/// of an `MmapEntry` this file allocated and inserted; nothing uses the entry afterwards.
pub(super) unsafe extern "C" fn mmap_free(entry: *mut b::rdma_user_mmap_entry) {
    // SAFETY: the entry was allocated as a `KBox<RoxEntry>` by `MmapEntry::new` and ib_core
    // holds no reference any more.
    drop(unsafe { KBox::from_raw(entry.cast::<RoxEntry>()) });
}
