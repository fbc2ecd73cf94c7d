//! Guest RAM for the test driver: a memfd the device maps through DMA_MAP and the test maps
//! too (the same vm-memory mapping the device uses).

use super::*;
use crate::dma::MappedRegion;

/// Guest RAM in a memfd, mapped into the test too.
pub struct GuestRam {
    pub file: File,
    map: MappedRegion,
    pub base: u64,
    pub size: u64,
    next: u64,
}

impl GuestRam {
    pub fn new(base: u64, size: u64) -> GuestRam {
        let file = crate::sys::fd::memfd(c"rox-test-ram").expect("memfd_create");
        file.set_len(size).expect("size test RAM");
        let map = MappedRegion::map(&file, 0, base, size).expect("mmap test RAM");
        GuestRam {
            file,
            map,
            base,
            size,
            next: base,
        }
    }

    /// Allocate `size` bytes aligned to `align` (zeroed: the memfd starts zeroed and nothing is
    /// ever freed).
    pub fn alloc(&mut self, size: u64, align: u64) -> u64 {
        let addr = self.next.div_ceil(align) * align;
        assert!(addr + size <= self.base + self.size, "test RAM exhausted");
        self.next = addr + size;
        addr
    }

    /// The offset of `[addr, addr+len)` in the RAM (which it must lie in).
    fn offset(&self, addr: u64, len: usize) -> u64 {
        assert!(
            addr >= self.base && addr + len as u64 <= self.base + self.size,
            "address {addr:#x} outside test RAM"
        );
        addr - self.base
    }

    pub fn write(&self, addr: u64, data: &[u8]) {
        self.map
            .write_at(self.offset(addr, data.len()), data)
            .expect("inside test RAM");
    }

    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.map
            .read_at(self.offset(addr, len), &mut v)
            .expect("inside test RAM");
        v
    }

    pub fn fill(&self, addr: u64, len: usize, byte: u8) {
        self.write(addr, &vec![byte; len]);
    }

    pub fn write_obj<T: Pod>(&self, addr: u64, v: &T) {
        self.write(addr, as_bytes(v))
    }

    /// Read straight into the value: the benchmarks poll every CQE with this, and a Vec per
    /// read cost their polling thread about 250 instructions per message.
    pub fn read_obj<T: Pod>(&self, addr: u64) -> T {
        let mut value: T = from_bytes(&[]);
        self.map
            .read_at(
                self.offset(addr, size_of::<T>()),
                crate::dma::as_bytes_mut(&mut value),
            )
            .expect("inside test RAM");
        value
    }

    /// The owner byte of an entry, read with acquire ordering.
    pub fn owner(&self, addr: u64) -> u8 {
        let cell: &AtomicU8 = self
            .map
            .atomic_at(self.offset(addr, 1))
            .expect("inside test RAM");
        cell.load(Ordering::Acquire)
    }
}
