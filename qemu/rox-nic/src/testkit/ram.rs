//! Guest RAM for the test driver: a memfd the device maps through DMA_MAP and the test maps
//! too.

use super::*;

/// Guest RAM in a memfd, mapped into the test too.
pub struct GuestRam {
    pub file: File,
    ptr: *mut u8,
    pub base: u64,
    pub size: u64,
    next: u64,
}

// SAFETY: shared memory accessed by copies.
unsafe impl Send for GuestRam {}

impl GuestRam {
    pub fn new(base: u64, size: u64) -> GuestRam {
        // SAFETY: plain syscalls; results checked.
        unsafe {
            let fd = libc::memfd_create(c"rox-test-ram".as_ptr(), libc::MFD_CLOEXEC);
            assert!(fd >= 0, "memfd_create");
            let file = File::from_raw_fd(fd);
            file.set_len(size).expect("size test RAM");
            let ptr = libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert!(ptr != libc::MAP_FAILED, "mmap test RAM");
            GuestRam {
                file,
                ptr: ptr as *mut u8,
                base,
                size,
                next: base,
            }
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

    fn host(&self, addr: u64, len: usize) -> *mut u8 {
        assert!(
            addr >= self.base && addr + len as u64 <= self.base + self.size,
            "address {addr:#x} outside test RAM"
        );
        // SAFETY: bounds checked above.
        unsafe { self.ptr.add((addr - self.base) as usize) }
    }

    pub fn write(&self, addr: u64, data: &[u8]) {
        // SAFETY: host() checks bounds.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.host(addr, data.len()), data.len())
        }
    }

    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        // SAFETY: host() checks bounds.
        unsafe { std::ptr::copy_nonoverlapping(self.host(addr, len), v.as_mut_ptr(), len) };
        v
    }

    pub fn fill(&self, addr: u64, len: usize, byte: u8) {
        // SAFETY: host() checks bounds.
        unsafe { std::ptr::write_bytes(self.host(addr, len), byte, len) }
    }

    pub fn write_obj<T: Pod>(&self, addr: u64, v: &T) {
        self.write(addr, as_bytes(v))
    }

    pub fn read_obj<T: Pod>(&self, addr: u64) -> T {
        from_bytes(&self.read(addr, size_of::<T>()))
    }

    /// The owner byte of an entry, read with acquire ordering.
    pub fn owner(&self, addr: u64) -> u8 {
        // SAFETY: bounds checked; u8 atomics need no alignment.
        unsafe { (*(self.host(addr, 1) as *const AtomicU8)).load(Ordering::Acquire) }
    }
}

impl Drop for GuestRam {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.size as usize) };
    }
}
