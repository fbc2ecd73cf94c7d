//! Guest memory as seen by the device: the RAM fds QEMU passes in DMA_MAP, mapped shared
//! through rust-vmm's `vm-memory` (volatile, bounds-checked accesses: the guest writes the same
//! memory concurrently), and the translation of DMA addresses. A bad address is an error value,
//! never a crash.

use std::cell::Cell;
use std::fs::File;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use vm_memory::volatile_memory::VolatileSlice;
use vm_memory::{AtomicInteger, FileOffset, MmapRegion, VolatileMemory};

/// A DMA access outside every mapped region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("DMA access [{addr:#x}, +{len:#x}) is not mapped guest memory")]
pub struct DmaError {
    pub addr: u64,
    pub len: u64,
}

/// Guest memory as the protection table (`device::mem::MemTable`) reaches it: the
/// device's DMA mappings ([`GuestMemory`]) or, in the engine's host tests, plain memory
/// ([`SliceRam`]). Every method fails with a [`DmaError`] outside the memory, never panics.
pub trait GuestRam {
    /// Copy guest memory at `addr` into `buf`.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError>;
    /// Copy `data` into guest memory at `addr`; a write refused (not memory, not writable)
    /// stores nothing (`device::mem` relies on it).
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
        if addr % 8 != 0 {
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

pub use crate::sys::pod::{as_bytes, as_bytes_mut, from_bytes, read_as, Pod};

/// One DMA_MAP'ed region: `size` bytes at guest address `iova`, a shared mapping of a fd
/// (vm-memory's `MmapRegion`: bounds-checked, volatile accesses, unmapped when the last user
/// drops it).
pub struct MappedRegion {
    pub iova: u64,
    pub size: u64,
    /// QEMU maps ROM-like memory read-only; the device must not write there.
    pub writable: bool,
    map: MmapRegion<()>,
}

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
        let len = usize::try_from(size).ok().filter(|&n| n > 0);
        let (Some(len), Some(_)) = (len, iova.checked_add(size)) else {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        };
        let file = FileOffset::new(fd.try_clone()?, offset);
        let map = MmapRegion::build(Some(file), len, prot, libc::MAP_SHARED)
            .map_err(std::io::Error::other)?;
        Ok(MappedRegion {
            iova,
            size,
            writable,
            map,
        })
    }

    fn contains(&self, addr: u64) -> bool {
        addr >= self.iova && addr - self.iova < self.size
    }

    /// The bytes `[off, off+len)` of the mapping (offsets from its start).
    fn slice(&self, off: u64, len: usize) -> Option<VolatileSlice<'_, ()>> {
        self.map.get_slice(usize::try_from(off).ok()?, len).ok()
    }

    /// Copies `buf.len()` bytes at offset `off` of the mapping into `buf`.
    pub fn read_at(&self, off: u64, buf: &mut [u8]) -> Option<()> {
        let n = self.slice(off, buf.len())?.copy_to(buf);
        (n == buf.len()).then_some(())
    }

    /// Copies `data` to offset `off` of the mapping, every byte stored once, as a DMA engine
    /// writes ([`crate::sys::store_once::store_once`] says why).
    pub fn write_at(&self, off: u64, data: &[u8]) -> Option<()> {
        if !self.writable {
            return None;
        }
        crate::sys::store_once::store_once(&self.slice(off, data.len())?, data).then_some(())
    }

    /// The naturally aligned integer at offset `off` of the mapping, as an atomic.
    pub fn atomic_at<T: AtomicInteger>(&self, off: u64) -> Option<&T> {
        self.map.get_atomic_ref(usize::try_from(off).ok()?).ok()
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

    /// The region holding guest address `addr`, the offset of `addr` in it and the number of
    /// contiguous bytes available from there.
    fn region_at(&self, addr: u64) -> Option<(&MappedRegion, u64, u64)> {
        let i = self.regions.partition_point(|r| r.iova + r.size <= addr);
        let r = self.regions.get(i)?;
        if !r.contains(addr) {
            return None;
        }
        let off = addr - r.iova;
        Some((r, off, r.size - off))
    }

    /// Test kit: the mapped bytes `[addr, addr+len)`, inside one region, as the device
    /// accesses them (to watch its stores: `sys::store_trace`).
    #[cfg(any(test, feature = "testkit"))]
    pub fn volatile_slice(&self, addr: u64, len: usize) -> Result<VolatileSlice<'_, ()>, DmaError> {
        let err = DmaError {
            addr,
            len: len as u64,
        };
        let (r, off, avail) = self.region_at(addr).ok_or(err)?;
        if avail < len as u64 {
            return Err(err);
        }
        r.slice(off, len).ok_or(err)
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
            let (r, _, avail) = self.region_at(cur).ok_or(err)?;
            if write && !r.writable {
                return Err(err);
            }
            cur = cur.saturating_add(avail);
        }
        Ok(())
    }

    /// Copy guest memory at `addr` into `buf`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        let err = DmaError {
            addr,
            len: buf.len() as u64,
        };
        if let Some((r, off, avail)) = self.region_at(addr) {
            if !buf.is_empty() && avail >= buf.len() as u64 {
                // Inside one region (nearly always): one lookup, which is the check.
                return r.read_at(off, buf).ok_or(err);
            }
        }
        self.check(addr, buf.len() as u64)?;
        self.for_each_piece(addr, buf.len(), err, |r, off, piece| {
            r.read_at(off, &mut buf[piece])
        })
    }

    /// Copy `data` into guest memory at `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        let err = DmaError {
            addr,
            len: data.len() as u64,
        };
        if let Some((r, off, avail)) = self.region_at(addr) {
            // (An empty write is no access: it may name a read-only region.)
            if !data.is_empty() && avail >= data.len() as u64 {
                // Inside one region (nearly always): one lookup; write_at refuses a
                // read-only region before it stores anything.
                return r.write_at(off, data).ok_or(err);
            }
        }
        self.check_access(addr, data.len() as u64, true)?;
        self.for_each_piece(addr, data.len(), err, |r, off, piece| {
            r.write_at(off, &data[piece])
        })
    }

    /// Copies `[addr, addr+len)`, an access spanning regions, one region's piece at a time:
    /// `copy` gets the region, the piece's offset in it and the piece's range in the access.
    /// `err` is the access's error, for a piece that is not mapped or fails to copy.
    fn for_each_piece(
        &self,
        addr: u64,
        len: usize,
        err: DmaError,
        mut copy: impl FnMut(&MappedRegion, u64, Range<usize>) -> Option<()>,
    ) -> Result<(), DmaError> {
        let mut done = 0usize;
        while done < len {
            let (r, off, avail) = self.region_at(addr + done as u64).ok_or(err)?;
            let n = (avail as usize).min(len - done);
            copy(r, off, done..done + n).ok_or(err)?;
            done += n;
        }
        Ok(())
    }

    pub fn read_obj<T: Pod>(&self, addr: u64) -> Result<T, DmaError> {
        let mut value: T = from_bytes(&[]);
        self.read(addr, as_bytes_mut(&mut value))?;
        Ok(value)
    }

    /// [`Self::read_obj`] into `value` (its bytes are all replaced, or on an error may be
    /// partly): a loop reading entry after entry reuses one, with no copy of each out of a
    /// `Result` (a 256-byte SQ WQE was zeroed, read, then moved).
    pub fn read_into<T: Pod>(&self, addr: u64, value: &mut T) -> Result<(), DmaError> {
        self.read(addr, as_bytes_mut(value))
    }

    pub fn write_obj<T: Pod>(&self, addr: u64, value: &T) -> Result<(), DmaError> {
        self.write(addr, as_bytes(value))
    }

    /// Write an owner-bit entry: every byte but the last, then the last byte (the owner) with
    /// a release store, so software that sees the owner sees the whole entry.
    pub fn write_entry_owner_last<T: Pod>(&self, addr: u64, value: &T) -> Result<(), DmaError> {
        let bytes = as_bytes(value);
        let (body, owner) = bytes.split_at(bytes.len() - 1);
        // Inside one writable region (every ring in practice): that one lookup is the check;
        // the general path below looked the region up three times per CQE.
        if let Some((r, off, avail)) = self.region_at(addr) {
            if r.writable && avail >= bytes.len() as u64 {
                let err = DmaError {
                    addr,
                    len: bytes.len() as u64,
                };
                r.write_at(off, body).ok_or(err)?;
                let cell: &AtomicU8 = r.atomic_at(off + body.len() as u64).ok_or(err)?;
                cell.store(owner[0], Ordering::Release);
                return Ok(());
            }
        }
        // Checked whole first: a refused owner byte must not leave a written body behind.
        self.check_access(addr, bytes.len() as u64, true)?;
        self.write(addr, body)?;
        let owner_addr = addr + body.len() as u64;
        let err = DmaError { addr, len: 1 };
        let (r, off, _) = self.region_at(owner_addr).ok_or(err)?;
        let cell: &AtomicU8 = r.atomic_at(off).ok_or(err)?;
        cell.store(owner[0], Ordering::Release);
        Ok(())
    }

    /// The guest's u64 at `addr` as an atomic, for RDMA atomics (8-byte aligned addresses only).
    pub fn atomic_u64(&self, addr: u64) -> Result<&AtomicU64, DmaError> {
        let err = DmaError { addr, len: 8 };
        if addr % 8 != 0 {
            return Err(err);
        }
        let (r, off, avail) = self.region_at(addr).ok_or(err)?;
        if avail < 8 || !r.writable {
            return Err(err);
        }
        r.atomic_at(off).ok_or(err)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A writable page at 0x1000 and a read-only one right after it, over one memfd.
    fn two_pages() -> GuestMemory {
        let fd = crate::sys::fd::memfd(c"rox-dma-test").expect("memfd");
        fd.set_len(8192).expect("size");
        let rw = MappedRegion::map(&fd, 0, 0x1000, 4096).expect("map");
        let ro = MappedRegion::map_with(&fd, 4096, 0x2000, 4096, false).expect("map");
        GuestMemory::default().with_region(rw).with_region(ro)
    }

    #[test]
    fn accesses_inside_one_region_and_across_two_check_the_same() {
        let mem = two_pages();
        mem.write(0x1ff0, &[7u8; 16])
            .expect("inside the writable page");
        let mut across = [0u8; 32];
        mem.read(0x1ff0, &mut across)
            .expect("a read may span both pages");
        assert_eq!(&across[..16], &[7u8; 16]);
        assert!(
            mem.write(0x1ff8, &[9u8; 16]).is_err(),
            "the read-only page refuses its half"
        );
        assert!(
            mem.write(0x2000, &[9u8; 4]).is_err(),
            "inside the read-only page"
        );
        assert!(
            mem.write(0x2000, &[]).is_ok(),
            "an empty write is no access"
        );
        let mut back = [0u8; 16];
        mem.read(0x1ff0, &mut back).expect("read");
        assert_eq!(back, [7u8; 16], "a refused write stored nothing");
        assert!(mem.read(0x2ff8, &mut [0u8; 16]).is_err(), "past the end");
        assert!(mem.read(0x800, &mut [0u8; 4]).is_err(), "before the start");
        assert!(mem.write_entry_owner_last(0x1ffc, &u64::MAX).is_err());
        mem.read(0x1ff0, &mut back).expect("read");
        assert_eq!(back, [7u8; 16], "a refused entry wrote no body");
        assert!(
            mem.write_entry_owner_last(0x2010, &u64::MAX).is_err(),
            "an entry inside the read-only page"
        );
        mem.write_entry_owner_last(0x1ff0, &0x0102_0304_0506_0708u64)
            .expect("an entry inside the writable page");
        mem.read(0x1ff0, &mut back).expect("read");
        assert_eq!(back[..8], 0x0102_0304_0506_0708u64.to_ne_bytes());
        assert_eq!(back[8..], [7u8; 8], "nothing past the entry");
    }

    /// An access spanning regions lands each piece at its own region's offset (the two
    /// regions map the memfd's pages in the other order, so a piece at the wrong offset or in
    /// the wrong region reads back wrong).
    #[test]
    fn an_access_across_two_regions_copies_each_piece_in_its_region() {
        let fd = crate::sys::fd::memfd(c"rox-dma-test").expect("memfd");
        fd.set_len(8192).expect("size");
        let low = MappedRegion::map(&fd, 4096, 0x1000, 4096).expect("map");
        let high = MappedRegion::map(&fd, 0, 0x2000, 4096).expect("map");
        let mem = GuestMemory::default().with_region(low).with_region(high);
        let data: Vec<u8> = (1..=40).collect();
        mem.write(0x1ff0, &data)
            .expect("a write may span both pages");
        let mut back = [0u8; 40];
        mem.read(0x1ff0, &mut back)
            .expect("a read may span both pages");
        assert_eq!(back[..], data[..]);
        let (mut low_tail, mut high_head) = ([0u8; 16], [0u8; 24]);
        mem.read(0x1ff0, &mut low_tail)
            .expect("inside the low page");
        mem.read(0x2000, &mut high_head)
            .expect("inside the high page");
        assert_eq!(low_tail[..], data[..16]);
        assert_eq!(high_head[..], data[16..]);
        let mut file = [0u8; 40];
        std::os::unix::fs::FileExt::read_exact_at(&fd, &mut file[..24], 0).expect("pread");
        std::os::unix::fs::FileExt::read_exact_at(&fd, &mut file[24..], 8192 - 16).expect("pread");
        assert_eq!(file[..24], data[16..], "the high page is the file's first");
        assert_eq!(file[24..], data[..16], "the low page is the file's second");
    }

    #[test]
    fn store_once_copies_every_length_at_every_alignment_and_nothing_else() {
        let fd = crate::sys::fd::memfd(c"rox-dma-test").expect("memfd");
        fd.set_len(4096).expect("size");
        let region = MappedRegion::map(&fd, 0, 0, 4096).expect("map");
        let src: Vec<u8> = (1..=128).collect();
        for offset in 0..16u64 {
            for len in 0..=100 {
                region.write_at(0, &[0u8; 128]).expect("clear");
                region.write_at(offset, &src[..len]).expect("write");
                let mut buf = [0u8; 128];
                region.read_at(0, &mut buf).expect("read");
                let at = offset as usize;
                assert_eq!(&buf[at..at + len], &src[..len], "{offset}+{len}");
                assert!(buf[..at].iter().chain(&buf[at + len..]).all(|&b| b == 0));
            }
        }
    }
}
