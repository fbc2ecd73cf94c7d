//! Memory librox shares with rox-nic: queue rings (anonymous, page-aligned, zeroed user memory
//! that rox.ko pins and hands to the device as a page list) and pages of the device mapped
//! through the uverbs command fd (the doorbell page and the wake page).

use crate::sys::errno::{Errno, Result, EINVAL};
use crate::sys::ffi;
use core::ffi::c_void;
use core::mem::{offset_of, size_of};
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicU8, Ordering};
use rox_uapi::queue::{owner_for, Cqe, RqWqe, SqWqe, CQE_SHIFT};
use rox_uapi::regs::ROX_PAGE_SIZE;

/// A ring buffer in this process's memory, handed to the kernel by address: page aligned,
/// whole pages, zero-filled (so a fresh CQ ring holds no valid CQE under the owner-bit rule),
/// and excluded from fork (ibv_dontfork_range) so a child never breaks the kernel's pin.
pub struct QueueBuffer {
    addr: NonNull<u8>,
    len: usize,
}

/// A fresh anonymous private mapping of `len` bytes (whole pages), zeroed, read-write.
fn anonymous_pages(len: usize) -> Result<NonNull<u8>> {
    // SAFETY: a fresh anonymous private mapping; no existing memory is affected.
    let addr = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    NonNull::new(addr.cast::<u8>()).ok_or(EINVAL)
}

impl QueueBuffer {
    /// A ring of `entries` entries of `1 << entry_shift` bytes.
    pub fn new(entries: u32, entry_shift: u32) -> Result<Self> {
        let bytes = (entries as usize).checked_shl(entry_shift).ok_or(EINVAL)?;
        let len = bytes
            .max(1)
            .checked_next_multiple_of(ROX_PAGE_SIZE)
            .ok_or(EINVAL)?;
        let addr = anonymous_pages(len)?;
        // SAFETY: [addr, addr + len) is the mapping made above.
        let ret = unsafe { ffi::ibv_dontfork_range(addr.as_ptr().cast::<c_void>(), len) };
        if ret != 0 {
            // SAFETY: unmapping the mapping made above, which nothing else references.
            unsafe { libc::munmap(addr.as_ptr().cast::<c_void>(), len) };
            return Err(Errno(ret));
        }
        Ok(QueueBuffer { addr, len })
    }

    /// User virtual address the kernel pins.
    pub fn addr(&self) -> u64 {
        self.addr.as_ptr() as u64
    }

    /// Entry `index` (a free-running index) of this buffer seen as a ring of `depth` `T`s.
    #[inline]
    fn entry<T>(&self, index: u32, depth: u32) -> *mut T {
        assert!(depth.is_power_of_two() && depth as usize * size_of::<T>() <= self.len);
        // SAFETY: `index & (depth - 1)` < depth, and depth entries of T fit in the buffer.
        unsafe {
            self.addr
                .as_ptr()
                .cast::<T>()
                .add((index & (depth - 1)) as usize)
        }
    }
}

impl Drop for QueueBuffer {
    fn drop(&mut self) {
        // Only dropped after the kernel object using the ring was destroyed (its pin is gone).
        // SAFETY: the range is this buffer's own mapping, made in `new`.
        unsafe {
            ffi::ibv_dofork_range(self.addr.as_ptr().cast::<c_void>(), self.len);
            libc::munmap(self.addr.as_ptr().cast::<c_void>(), self.len);
        }
    }
}

// SAFETY: the buffer is plain memory owned by this value; access to its contents is
// synchronised by the owning queue.
unsafe impl Send for QueueBuffer {}
// SAFETY: as above.
unsafe impl Sync for QueueBuffer {}

/// The entry types of rox's rings: plain old data (integers, arrays and unions of them), for
/// which every bit pattern is a valid value, so an entry may be read whatever the device or a
/// previous use of the slot left in it.
///
/// # Safety
/// Implement only for such types.
pub unsafe trait RingEntry: Copy {}
// SAFETY: rox_uapi's ring formats are `repr(C)` structs of integers, byte arrays and a union of
// such structs (`SqSeg`).
unsafe impl RingEntry for SqWqe {}
// SAFETY: as above.
unsafe impl RingEntry for RqWqe {}
// SAFETY: as above.
unsafe impl RingEntry for Cqe {}
// SAFETY: bytes.
unsafe impl<const N: usize> RingEntry for [u8; N] {}

/// A ring of `depth` (a power of two) slots of `1 << entry_shift` bytes in a [`QueueBuffer`],
/// indexed by free-running index. The software side owns every slot the device does not read
/// (a send/receive ring's slots outside [consumer, producer) of the device): it writes them
/// through `&mut self`.
pub struct SlotRing {
    buf: QueueBuffer,
    depth: u32,
    entry_shift: u32,
}

impl SlotRing {
    pub fn new(depth: u32, entry_shift: u32) -> Result<Self> {
        assert!(depth.is_power_of_two());
        Ok(SlotRing {
            buf: QueueBuffer::new(depth, entry_shift)?,
            depth,
            entry_shift,
        })
    }

    /// User virtual address of the ring (what rox.ko pins).
    pub fn addr(&self) -> u64 {
        self.buf.addr()
    }

    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// The slot of free-running index `index`, as a `T` (the ring's entry type).
    #[inline]
    fn slot<T: RingEntry>(&self, index: u32) -> *mut T {
        assert_eq!(size_of::<T>(), 1 << self.entry_shift);
        self.buf.entry::<T>(index, self.depth)
    }

    /// Store an entry in slot `index`.
    #[inline]
    pub fn write<T: RingEntry>(&mut self, index: u32, entry: T) {
        // SAFETY: a whole entry inside the ring (`slot`); `&mut self` excludes any other access
        // from this process, and the device does not read a slot before the doorbell announces
        // it.
        unsafe { self.slot::<T>(index).write(entry) };
    }

    /// Slot `index` for formatting in place.
    pub fn slot_mut<T: RingEntry>(&mut self, index: u32) -> &mut T {
        // SAFETY: as for `write`; every bit pattern is a valid T (RingEntry), and the borrow
        // of `self` bounds the reference.
        unsafe { &mut *self.slot::<T>(index) }
    }

    /// A copy of slot `index` (tests).
    #[cfg(test)]
    pub fn read<T: RingEntry>(&self, index: u32) -> T {
        // SAFETY: a whole entry inside the ring; every bit pattern is a valid T. Volatile: the
        // device may have written it.
        unsafe { self.slot::<T>(index).read_volatile() }
    }

    /// Copy slot `index` of `from` (same entry size) into slot `index` of this ring.
    pub fn copy_slot_from(&mut self, from: &SlotRing, index: u32) {
        assert_eq!(self.entry_shift, from.entry_shift);
        let size = 1usize << self.entry_shift;
        let src = from.buf.entry::<u8>(0, 1) as usize + (index & (from.depth - 1)) as usize * size;
        let dst = self.buf.entry::<u8>(0, 1) as usize + (index & (self.depth - 1)) as usize * size;
        // SAFETY: both are whole entries inside their buffers (slot < depth, depth entries of
        // `size` bytes each); the buffers are distinct mappings; `&mut self` excludes other
        // writers of the destination.
        unsafe { ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, size) };
    }
}

/// A CQ's ring of `Cqe`s as the consumer sees it: the device writes each entry, its owner byte
/// last (release); a CQE is valid when its owner byte is the one of the current pass.
pub struct CqeRing {
    ring: SlotRing,
}

impl CqeRing {
    /// A zeroed ring of `depth` CQEs (no entry valid under the owner-bit rule).
    pub fn new(depth: u32) -> Result<Self> {
        Ok(CqeRing {
            ring: SlotRing::new(depth, CQE_SHIFT)?,
        })
    }

    pub fn addr(&self) -> u64 {
        self.ring.addr()
    }

    pub fn depth(&self) -> u32 {
        self.ring.depth()
    }

    /// The CQE at consumer index `ci` if the device has written it.
    pub fn take(&self, ci: u32) -> Option<Cqe> {
        // (The ring's entries are Cqes by construction: no size check per poll.)
        let entry = self.ring.buf.entry::<Cqe>(ci, self.ring.depth);
        // SAFETY: the owner byte of a CQE inside the ring (an AtomicU8 has u8's layout); the
        // device writes it last with release ordering.
        let owner = unsafe {
            &*entry
                .cast::<u8>()
                .add(offset_of!(Cqe, owner))
                .cast::<AtomicU8>()
        };
        if owner.load(Ordering::Acquire) != owner_for(ci, self.ring.depth) {
            return None;
        }
        // SAFETY: the entry is complete (owner seen above) and the device does not touch it
        // again until the consumer index passes it.
        Some(unsafe { entry.read_volatile() })
    }

    /// What the device does (tests): the body, then the owner byte of pass `index / depth`.
    #[cfg(test)]
    pub fn device_writes(&mut self, index: u32, mut cqe: Cqe) {
        cqe.owner = owner_for(index, self.ring.depth);
        self.ring.write(index, cqe);
    }
}

/// One page of the device (BAR memory) mapped into this process with the mmap key rox.ko gave
/// in the ucontext response.
pub struct DevicePage {
    addr: NonNull<u8>,
}

impl DevicePage {
    pub fn map(cmd_fd: i32, mmap_key: u64, prot: i32) -> Result<Self> {
        let offset = libc::off_t::try_from(mmap_key).map_err(|_| EINVAL)?;
        // SAFETY: a new shared mapping of the uverbs fd at the offset the kernel handed out.
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                ROX_PAGE_SIZE,
                prot,
                libc::MAP_SHARED,
                cmd_fd,
                offset,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        Ok(DevicePage {
            addr: NonNull::new(addr.cast::<u8>()).ok_or(EINVAL)?,
        })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.addr.as_ptr()
    }

    /// Tests: a zeroed page of ordinary memory in place of a device page.
    #[cfg(test)]
    pub fn anonymous() -> Result<Self> {
        Ok(DevicePage {
            addr: anonymous_pages(ROX_PAGE_SIZE)?,
        })
    }
}

impl Drop for DevicePage {
    fn drop(&mut self) {
        // SAFETY: the page is this value's own mapping, made in `map`.
        unsafe { libc::munmap(self.addr.as_ptr().cast::<c_void>(), ROX_PAGE_SIZE) };
    }
}

// SAFETY: a device page is shared with the device by design; every access to it is a volatile
// or atomic access made by the data path.
unsafe impl Send for DevicePage {}
// SAFETY: as above.
unsafe impl Sync for DevicePage {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_buffer_is_page_aligned_zeroed_whole_pages() {
        let buf = QueueBuffer::new(3, rox_uapi::queue::CQE_SHIFT).expect("mmap");
        assert_eq!(buf.addr() % ROX_PAGE_SIZE as u64, 0);
        assert_eq!(buf.len, ROX_PAGE_SIZE);
        // SAFETY: reading the buffer's own mapping.
        let bytes = unsafe { core::slice::from_raw_parts(buf.addr() as *const u8, buf.len) };
        assert!(bytes.iter().all(|&b| b == 0));
    }
}
