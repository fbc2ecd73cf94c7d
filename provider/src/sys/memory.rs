//! Memory librox shares with rox-nic: queue rings (anonymous, page-aligned, zeroed user memory
//! that rox.ko pins and hands to the device as a page list) and pages of the device mapped
//! through the uverbs command fd (the doorbell page and the wake page).

use crate::sys::errno::{Errno, Result, EINVAL};
use crate::sys::ffi;
use core::ffi::c_void;
use core::mem::size_of;
use core::ptr::{self, NonNull};
use rox_uapi::admin::DEV_MIN_LOG_DEPTH;
use rox_uapi::regs::ROX_PAGE_SIZE;

/// Smallest ring the device accepts (`admin::DEV_MIN_LOG_DEPTH`).
const MIN_RING_DEPTH: u32 = 1 << DEV_MIN_LOG_DEPTH;

/// Number of entries of a ring that must hold at least `wanted` entries: the next power of two,
/// at least the device's minimum, or `None` above `max`.
pub fn ring_depth(wanted: u32, max: u32) -> Option<u32> {
    let depth = wanted.max(MIN_RING_DEPTH).checked_next_power_of_two()?;
    (depth <= max).then_some(depth)
}

/// A ring buffer in this process's memory, handed to the kernel by address: page aligned,
/// whole pages, zero-filled (so a fresh CQ ring holds no valid CQE under the owner-bit rule),
/// and excluded from fork (ibv_dontfork_range) so a child never breaks the kernel's pin.
pub struct QueueBuffer {
    addr: NonNull<u8>,
    len: usize,
}

impl QueueBuffer {
    /// A ring of `entries` entries of `1 << entry_shift` bytes.
    pub fn new(entries: u32, entry_shift: u32) -> Result<Self> {
        let bytes = (entries as usize).checked_shl(entry_shift).ok_or(EINVAL)?;
        let len = bytes
            .max(1)
            .checked_next_multiple_of(ROX_PAGE_SIZE)
            .ok_or(EINVAL)?;
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
        let addr = NonNull::new(addr.cast::<u8>()).ok_or(EINVAL)?;
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
    pub fn entry<T>(&self, index: u32, depth: u32) -> *mut T {
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
unsafe impl Sync for QueueBuffer {}

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
unsafe impl Sync for DevicePage {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_depth_rounds_up_to_a_power_of_two_within_the_limit() {
        assert_eq!(ring_depth(0, 16), Some(MIN_RING_DEPTH));
        assert_eq!(ring_depth(1, 16), Some(MIN_RING_DEPTH));
        assert_eq!(ring_depth(5, 16), Some(8));
        assert_eq!(ring_depth(16, 16), Some(16));
        assert_eq!(ring_depth(17, 16), None);
        assert_eq!(ring_depth(u32::MAX, u32::MAX), None);
    }

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
