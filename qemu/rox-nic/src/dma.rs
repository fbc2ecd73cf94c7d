//! Guest memory as seen by the device: the RAM fds QEMU passes in DMA_MAP, mmapped shared, and
//! bounds-checked translation of DMA addresses. A bad address is an error value, never a crash.

use std::cell::Cell;
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

/// Guest memory as the protection table ([`crate::device::mem::MemTable`]) reaches it: the
/// device's DMA mappings ([`GuestMemory`]) or, in the engine's host tests, plain memory
/// ([`SliceRam`]). Every method fails with a [`DmaError`] outside the memory, never panics.
pub trait GuestRam {
    /// Copy guest memory at `addr` into `buf`.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError>;
    /// Copy `data` into guest memory at `addr`.
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError>;
    /// Check that `[addr, addr+len)` is memory, and writable if `write`.
    fn check_access(&self, addr: u64, len: u64, write: bool) -> Result<(), DmaError>;
    /// Replace the little-endian u64 at 8-aligned `addr` by `update(old)` (unless it answers
    /// None) atomically with respect to everything else touching it; returns the old value.
    fn fetch_update_u64(
        &self,
        addr: u64,
        update: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Result<u64, DmaError>;
}

impl<T: GuestRam + ?Sized> GuestRam for Arc<T> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        (**self).read(addr, buf)
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        (**self).write(addr, data)
    }
    fn check_access(&self, addr: u64, len: u64, write: bool) -> Result<(), DmaError> {
        (**self).check_access(addr, len, write)
    }
    fn fetch_update_u64(
        &self,
        addr: u64,
        update: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Result<u64, DmaError> {
        (**self).fetch_update_u64(addr, update)
    }
}

/// Plain memory as guest RAM at guest address `base` (the engine's test double and fuzzers):
/// one thread, so a read-modify-write is atomic.
pub struct SliceRam<'a> {
    base: u64,
    bytes: &'a [Cell<u8>],
}

impl<'a> SliceRam<'a> {
    pub fn new(base: u64, bytes: &'a mut [u8]) -> SliceRam<'a> {
        SliceRam {
            base,
            bytes: Cell::from_mut(bytes).as_slice_of_cells(),
        }
    }

    fn range(&self, addr: u64, len: u64) -> Result<&'a [Cell<u8>], DmaError> {
        let err = DmaError { addr, len };
        let start = usize::try_from(addr.checked_sub(self.base).ok_or(err)?).map_err(|_| err)?;
        let len = usize::try_from(len).map_err(|_| err)?;
        let end = start.checked_add(len).ok_or(err)?;
        self.bytes.get(start..end).ok_or(err)
    }
}

impl GuestRam for SliceRam<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        let src = self.range(addr, buf.len() as u64)?;
        for (b, c) in buf.iter_mut().zip(src) {
            *b = c.get();
        }
        Ok(())
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        let dst = self.range(addr, data.len() as u64)?;
        for (c, &b) in dst.iter().zip(data) {
            c.set(b);
        }
        Ok(())
    }
    fn check_access(&self, addr: u64, len: u64, _write: bool) -> Result<(), DmaError> {
        self.range(addr, len).map(|_| ())
    }
    fn fetch_update_u64(
        &self,
        addr: u64,
        update: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Result<u64, DmaError> {
        if !addr.is_multiple_of(8) {
            return Err(DmaError { addr, len: 8 });
        }
        let mut old = [0u8; 8];
        self.read(addr, &mut old)?;
        let old = u64::from_le_bytes(old);
        if let Some(new) = update(old) {
            self.write(addr, &new.to_le_bytes())?;
        }
        Ok(old)
    }
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

    /// Copy `data` into guest memory at `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        self.check_access(addr, data.len() as u64, true)?;
        let mut done = 0usize;
        while done < data.len() {
            let (p, avail) = self.host(addr + done as u64).expect("checked above");
            let n = (avail as usize).min(data.len() - done);
            // SAFETY: [p, p+n) is inside a live mapping (checked).
            unsafe { std::ptr::copy_nonoverlapping(data[done..].as_ptr(), p, n) };
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

impl GuestRam for GuestMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        GuestMemory::read(self, addr, buf)
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        GuestMemory::write(self, addr, data)
    }
    fn check_access(&self, addr: u64, len: u64, write: bool) -> Result<(), DmaError> {
        GuestMemory::check_access(self, addr, len, write)
    }
    fn fetch_update_u64(
        &self,
        addr: u64,
        update: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Result<u64, DmaError> {
        // A real atomic on guest memory: atomic with respect to the guest's CPUs too. Guest
        // memory is little-endian like the host (x86).
        let cell = self.atomic_u64(addr)?;
        let update = |raw: u64| update(u64::from_le(raw)).map(u64::to_le);
        match cell.fetch_update(Ordering::AcqRel, Ordering::Acquire, update) {
            Ok(old) | Err(old) => Ok(u64::from_le(old)),
        }
    }
}
