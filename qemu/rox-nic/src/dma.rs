//! Guest memory as seen by the device: the RAM fds QEMU passes in DMA_MAP, mmapped shared, and
//! bounds-checked translation of DMA addresses. A bad address is an error value, never a crash.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// A DMA access outside every mapped region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("DMA access [{addr:#x}, +{len:#x}) is not mapped guest memory")]
pub struct DmaError {
    pub addr: u64,
    pub len: u64,
}

/// Plain-old-data: every bit pattern is a valid value and the type has no padding that matters.
///
/// # Safety
/// Implement only for `#[repr(C)]` types made of integers, arrays of integers and uapi's
/// `ids` newtypes (`#[repr(transparent)]` u32s of which every bit pattern is a value).
pub unsafe trait Pod: Copy + 'static {}

macro_rules! pod {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: only listed for integers and uapi's `#[repr(C)]` structs of integers,
            // integer arrays and `ids` newtypes (checked by their layout asserts), as `Pod`
            // requires.
            unsafe impl Pod for $t {}
        )*
    };
}
pod!(u8, u16, u32, u64);
pod!(
    rox_uapi::queue::Sge,
    rox_uapi::queue::SqWqe,
    rox_uapi::queue::RqWqe,
    rox_uapi::queue::Cqe,
    rox_uapi::queue::Eqe,
    rox_uapi::queue::PageList,
    rox_uapi::admin::AdminCmd,
    rox_uapi::admin::AdminCpl,
    rox_uapi::admin::QpAttr,
    rox_uapi::admin::DeviceAttr,
    rox_uapi::admin::PortAttr,
    rox_uapi::admin::QueryCmd,
    rox_uapi::admin::HandleCmd,
    rox_uapi::admin::KeyCmd,
    rox_uapi::admin::QpnCmd,
    rox_uapi::admin::SetGidCmd,
    rox_uapi::admin::McastCmd,
    rox_uapi::admin::RegMrCmd,
    rox_uapi::admin::CreateCqCmd,
    rox_uapi::admin::AllocMwCmd,
    rox_uapi::admin::ResizeCqCmd,
    rox_uapi::admin::CreateQpCmd,
    rox_uapi::admin::ModifyQpCmd,
    rox_uapi::admin::CreateSrqCmd,
    rox_uapi::admin::ModifySrqCmd,
    rox_uapi::admin::SetPortStateCmd,
    rox_uapi::admin::OdpUpdateCmd,
    rox_uapi::admin::NoPayload,
);

/// View a Pod value as bytes.
pub fn as_bytes<T: Pod>(value: &T) -> &[u8] {
    // SAFETY: T is Pod, so all of its bytes are initialised plain data.
    unsafe { std::slice::from_raw_parts(value as *const T as *const u8, size_of::<T>()) }
}

/// Build a Pod value from bytes (zero-extended if short).
pub fn from_bytes<T: Pod>(bytes: &[u8]) -> T {
    // SAFETY: T is Pod: the all-zero pattern and any bytes copied over it are valid values.
    unsafe {
        let mut value: T = std::mem::zeroed();
        let n = bytes.len().min(size_of::<T>());
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), &mut value as *mut T as *mut u8, n);
        value
    }
}

/// Copies `src` to `dst` as a DMA engine writes: every byte stored exactly once, in ascending
/// address order (aligned 8-byte stores, single bytes at the ends). `memcpy` may store bytes
/// twice (glibc copies 16..31 bytes as two overlapping 16-byte stores, larger sizes with
/// overlapping head and tail vectors): software that updates memory as soon as it sees the
/// device's bytes there — rsockets rewrites the target SGE a credit WRITE placed, without
/// waiting for the completion — would have its update undone by the second store.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes.
unsafe fn store_once(dst: *mut u8, src: &[u8]) {
    const WORD: usize = size_of::<u64>();
    let n = src.len();
    let head = dst.align_offset(WORD).min(n);
    let words = (n - head) / WORD;
    for (i, &b) in src[..head].iter().enumerate() {
        // SAFETY: i < n, inside dst's range.
        unsafe { dst.add(i).write_volatile(b) };
    }
    for w in 0..words {
        let at = head + w * WORD;
        let word = u64::from_ne_bytes(src[at..at + WORD].try_into().expect("a word"));
        // SAFETY: at + WORD <= n, and dst + at is 8-byte aligned (after `head`).
        unsafe { dst.add(at).cast::<u64>().write_volatile(word) };
    }
    let tail = head + words * WORD;
    for (i, &b) in src[tail..].iter().enumerate() {
        // SAFETY: tail + i < n, inside dst's range.
        unsafe { dst.add(tail + i).write_volatile(b) };
    }
}

/// One DMA_MAP'ed region: `size` bytes at guest address `iova`, mmapped from a fd.
pub struct MappedRegion {
    pub iova: u64,
    pub size: u64,
    /// QEMU maps ROM-like memory read-only; the device must not write there.
    pub writable: bool,
    ptr: *mut u8,
}

// SAFETY: the mapping is shared memory; all accesses go through raw pointer copies and atomics.
unsafe impl Send for MappedRegion {}
// SAFETY: as for Send: no access relies on exclusive use of the mapping.
unsafe impl Sync for MappedRegion {}

impl MappedRegion {
    /// Map `size` bytes of `fd` at file offset `offset` as guest addresses `[iova, iova+size)`.
    pub fn map(fd: &File, offset: u64, iova: u64, size: u64) -> std::io::Result<MappedRegion> {
        Self::map_with(fd, offset, iova, size, true)
    }

    /// [`MappedRegion::map`], read-only unless `writable`.
    pub fn map_with(
        fd: &File,
        offset: u64,
        iova: u64,
        size: u64,
        writable: bool,
    ) -> std::io::Result<MappedRegion> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        if size == 0 || iova.checked_add(size).is_none() {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a fresh shared mapping of a fd we were given; failure is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(MappedRegion {
            iova,
            size,
            writable,
            ptr: ptr as *mut u8,
        })
    }

    fn contains(&self, addr: u64) -> bool {
        addr >= self.iova && addr - self.iova < self.size
    }
}

impl Drop for MappedRegion {
    fn drop(&mut self) {
        // SAFETY: we own this mapping; every user holds an Arc to us.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.size as usize) };
    }
}

/// The set of mapped regions. Immutable: DMA_MAP/UNMAP build a new one; the data path holds an
/// `Arc` snapshot, so an unmap never pulls memory from under an access in progress.
#[derive(Clone, Default)]
pub struct GuestMemory {
    regions: Vec<Arc<MappedRegion>>,
}

impl GuestMemory {
    pub fn with_region(&self, region: MappedRegion) -> GuestMemory {
        let mut regions: Vec<_> = self
            .regions
            .iter()
            .filter(|r| {
                // A new mapping replaces whatever overlapped it.
                r.iova + r.size <= region.iova || region.iova + region.size <= r.iova
            })
            .cloned()
            .collect();
        regions.push(Arc::new(region));
        regions.sort_by_key(|r| r.iova);
        GuestMemory { regions }
    }

    /// Remove every region overlapping `[iova, iova+size)`.
    pub fn without_range(&self, iova: u64, size: u64) -> GuestMemory {
        let end = iova.saturating_add(size);
        GuestMemory {
            regions: self
                .regions
                .iter()
                .filter(|r| r.iova + r.size <= iova || end <= r.iova)
                .cloned()
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// Host pointer, the number of contiguous bytes available at guest address `addr`, and
    /// whether they may be written.
    fn host_region(&self, addr: u64) -> Option<(*mut u8, u64, bool)> {
        let i = self.regions.partition_point(|r| r.iova + r.size <= addr);
        let r = self.regions.get(i)?;
        if !r.contains(addr) {
            return None;
        }
        let off = addr - r.iova;
        // SAFETY: off < r.size, inside the mapping.
        Some((unsafe { r.ptr.add(off as usize) }, r.size - off, r.writable))
    }

    fn host(&self, addr: u64) -> Option<(*mut u8, u64)> {
        self.host_region(addr).map(|(p, n, _)| (p, n))
    }

    /// Check that `[addr, addr+len)` is entirely mapped.
    pub fn check(&self, addr: u64, len: u64) -> Result<(), DmaError> {
        self.check_access(addr, len, false)
    }

    /// Check that `[addr, addr+len)` is mapped, and writable if `write`.
    pub fn check_access(&self, addr: u64, len: u64, write: bool) -> Result<(), DmaError> {
        let err = DmaError { addr, len };
        let end = addr.checked_add(len).ok_or(err)?;
        let mut cur = addr;
        while cur < end {
            let (_, avail, writable) = self.host_region(cur).ok_or(err)?;
            if write && !writable {
                return Err(err);
            }
            cur = cur.saturating_add(avail);
        }
        Ok(())
    }

    /// Copy guest memory at `addr` into `buf`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        self.check(addr, buf.len() as u64)?;
        let mut done = 0usize;
        while done < buf.len() {
            let (p, avail) = self.host(addr + done as u64).expect("checked above");
            let n = (avail as usize).min(buf.len() - done);
            // SAFETY: [p, p+n) is inside a live mapping (checked); buf is ours.
            unsafe { std::ptr::copy_nonoverlapping(p, buf[done..].as_mut_ptr(), n) };
            done += n;
        }
        Ok(())
    }

    /// Copy `data` into guest memory at `addr`, every byte stored once ([`store_once`]).
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        self.check_access(addr, data.len() as u64, true)?;
        let mut done = 0usize;
        while done < data.len() {
            let (p, avail) = self.host(addr + done as u64).expect("checked above");
            let n = (avail as usize).min(data.len() - done);
            // SAFETY: [p, p+n) is inside a live mapping (checked).
            unsafe { store_once(p, &data[done..done + n]) };
            done += n;
        }
        Ok(())
    }

    pub fn read_obj<T: Pod>(&self, addr: u64) -> Result<T, DmaError> {
        // SAFETY: T is Pod.
        let mut value: T = unsafe { std::mem::zeroed() };
        // SAFETY: the slice covers exactly `value`.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(&mut value as *mut T as *mut u8, size_of::<T>())
        };
        self.read(addr, bytes)?;
        Ok(value)
    }

    pub fn write_obj<T: Pod>(&self, addr: u64, value: &T) -> Result<(), DmaError> {
        self.write(addr, as_bytes(value))
    }

    /// Write an owner-bit entry: every byte but the last, a release fence, then the last byte
    /// (the owner), so software that sees the owner sees the whole entry.
    pub fn write_entry_owner_last<T: Pod>(&self, addr: u64, value: &T) -> Result<(), DmaError> {
        let bytes = as_bytes(value);
        let (body, owner) = bytes.split_at(bytes.len() - 1);
        self.check_access(addr, bytes.len() as u64, true)?;
        self.write(addr, body)?;
        let owner_addr = addr + body.len() as u64;
        let (p, _) = self.host(owner_addr).expect("checked above");
        // SAFETY: p is inside a live mapping; AtomicU8 has the alignment of u8.
        unsafe { (*(p as *const AtomicU8)).store(owner[0], Ordering::Release) };
        Ok(())
    }

    /// The guest's u64 at `addr` as an atomic, for RDMA atomics (8-byte aligned addresses only).
    pub fn atomic_u64(&self, addr: u64) -> Result<&AtomicU64, DmaError> {
        let err = DmaError { addr, len: 8 };
        if !addr.is_multiple_of(8) {
            return Err(err);
        }
        let (p, avail, writable) = self.host_region(addr).ok_or(err)?;
        if avail < 8 || !writable {
            return Err(err);
        }
        // SAFETY: 8 aligned bytes inside a live mapping that outlives &self.
        Ok(unsafe { &*(p as *const AtomicU64) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_once_copies_every_length_at_every_alignment_and_nothing_else() {
        let src: Vec<u8> = (1..=64).collect();
        for offset in 0..8 {
            for len in 0..=40 {
                let mut buf = [0u8; 64];
                // SAFETY: offset + len <= 48 < 64.
                unsafe { store_once(buf.as_mut_ptr().add(offset), &src[..len]) };
                assert_eq!(&buf[offset..offset + len], &src[..len], "{offset}+{len}");
                assert!(buf[..offset]
                    .iter()
                    .chain(&buf[offset + len..])
                    .all(|&b| b == 0));
            }
        }
    }
}
