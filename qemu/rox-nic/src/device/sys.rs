//! Small OS helpers: eventfds and the memfd-backed doorbell BAR.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use rox_uapi::regs::{self, DbSlot};

/// A non-blocking eventfd used to wake the data-path thread.
pub struct EventFd(File);

impl EventFd {
    pub fn new() -> std::io::Result<EventFd> {
        // SAFETY: plain syscall; the fd is checked and then owned by the File.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own.
        Ok(EventFd(unsafe { File::from_raw_fd(fd) }))
    }

    pub fn signal(&self) {
        // A full counter (EAGAIN) still leaves the fd readable, which is all we need.
        let _ = (&self.0).write(&1u64.to_ne_bytes());
    }

    /// Consume pending signals; true if there were any.
    pub fn drain(&self) -> bool {
        let mut buf = [0u8; 8];
        (&self.0).read(&mut buf).is_ok()
    }

    pub fn try_clone_file(&self) -> std::io::Result<File> {
        self.0.try_clone()
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Signal an interrupt eventfd as vfio does: write 1u64.
pub fn signal_irq(file: &File) {
    let _ = (&*file).write(&1u64.to_ne_bytes());
}

/// The doorbell BAR: `DB_PAGE_COUNT` pages in a memfd that QEMU maps into the guest; we map it
/// too and poll it.
pub struct DoorbellBar {
    file: File,
    ptr: *mut u8,
}

// SAFETY: shared memory accessed only through atomics.
unsafe impl Send for DoorbellBar {}
// SAFETY: as for Send: every access is an atomic load or store.
unsafe impl Sync for DoorbellBar {}

impl DoorbellBar {
    pub fn new() -> std::io::Result<DoorbellBar> {
        let name = c"rox-nic-doorbells";
        // SAFETY: plain syscall with a valid C string.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fresh fd we own.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(regs::BAR_DB_SIZE)?;
        // SAFETY: a fresh shared mapping of our memfd; failure is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                regs::BAR_DB_SIZE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(DoorbellBar {
            file,
            ptr: ptr as *mut u8,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        assert!(offset.is_multiple_of(4) && offset < regs::BAR_DB_SIZE as usize);
        // SAFETY: aligned, inside the mapping, which lives as long as self.
        unsafe { &*(self.ptr.add(offset) as *const AtomicU32) }
    }

    fn slot_offset(page: u32, slot: u32) -> usize {
        page as usize * regs::ROX_PAGE_SIZE + regs::db_slot_offset(slot)
    }

    pub fn slot(&self, page: u32, slot: u32) -> DbSlot {
        let off = Self::slot_offset(page, slot);
        DbSlot {
            a: self.word(off).load(Ordering::Acquire),
            b: self.word(off + 4).load(Ordering::Acquire),
        }
    }

    /// Software side (tests, the harness): store one half of a slot.
    pub fn store_a(&self, page: u32, slot: u32, value: u32) {
        self.word(Self::slot_offset(page, slot))
            .store(value, Ordering::Release);
    }
    pub fn store_b(&self, page: u32, slot: u32, value: u32) {
        self.word(Self::slot_offset(page, slot) + 4)
            .store(value, Ordering::Release);
    }

    pub fn set_idle(&self, value: u32) {
        for page in 0..regs::DB_PAGE_COUNT {
            self.word(page as usize * regs::ROX_PAGE_SIZE)
                .store(value, Ordering::SeqCst);
        }
    }

    pub fn idle(&self, page: u32) -> u32 {
        self.word(page as usize * regs::ROX_PAGE_SIZE)
            .load(Ordering::SeqCst)
    }

    /// Zero every page (device reset).
    pub fn clear(&self) {
        for off in (0..regs::BAR_DB_SIZE as usize).step_by(4) {
            self.word(off).store(0, Ordering::Relaxed);
        }
        std::sync::atomic::fence(Ordering::SeqCst);
    }
}

impl Drop for DoorbellBar {
    fn drop(&mut self) {
        // SAFETY: our own mapping.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, regs::BAR_DB_SIZE as usize) };
    }
}

impl DoorbellBar {
    /// A trapped 32-bit access to the doorbell BAR (only if the guest did not mmap it).
    pub fn read_word(&self, offset: u64) -> u32 {
        if !offset.is_multiple_of(4) || offset >= regs::BAR_DB_SIZE {
            return 0;
        }
        self.word(offset as usize).load(Ordering::Acquire)
    }

    pub fn write_word(&self, offset: u64, value: u32) {
        if offset.is_multiple_of(4) && offset < regs::BAR_DB_SIZE {
            self.word(offset as usize).store(value, Ordering::Release);
        }
    }
}
