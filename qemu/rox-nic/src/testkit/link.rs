//! How the test driver reaches the device: direct calls or a vfio-user socket, and the
//! doorbell BAR mapped from the fd the server sends.

use super::*;

/// How the test driver reaches the device.
pub enum Link {
    /// Direct calls into the device model.
    InProcess(Box<RoxNic>),
    /// A vfio-user socket served by a thread running the crate's server loop.
    Socket {
        client: RefCell<vfio_user::Client>,
        server: Option<JoinHandle<()>>,
        path: PathBuf,
    },
}

/// The doorbell BAR as the driver sees it: a shared mapping of the BAR's fd.
pub struct DbMap {
    ptr: *mut u8,
}

// SAFETY: shared memory accessed through atomics only.
unsafe impl Send for DbMap {}

impl DbMap {
    pub(super) fn map(fd: RawFd) -> DbMap {
        // SAFETY: mapping the doorbell BAR fd; failure checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BAR_DB_SIZE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        assert!(ptr != libc::MAP_FAILED, "mmap doorbell BAR");
        DbMap {
            ptr: ptr as *mut u8,
        }
    }

    fn word(&self, page: u32, offset: usize) -> &AtomicU32 {
        assert!(page < DB_PAGE_COUNT && offset < ROX_PAGE_SIZE);
        // SAFETY: inside the mapping, 4-byte aligned (offsets are multiples of 4).
        unsafe { &*(self.ptr.add(page as usize * ROX_PAGE_SIZE + offset) as *const AtomicU32) }
    }

    pub fn slot(&self, page: u32, slot: u32) -> DbSlot {
        let off = db_slot_offset(slot);
        DbSlot {
            a: self.word(page, off).load(Ordering::Acquire),
            b: self.word(page, off + 4).load(Ordering::Acquire),
        }
    }

    pub fn store_a(&self, page: u32, slot: u32, v: u32) {
        self.word(page, db_slot_offset(slot))
            .store(v, Ordering::Release);
    }

    pub fn store_b(&self, page: u32, slot: u32, v: u32) {
        self.word(page, db_slot_offset(slot) + 4)
            .store(v, Ordering::Release);
    }

    /// The page's `device_idle` word.
    pub fn idle(&self, page: u32) -> u32 {
        self.word(page, 0).load(Ordering::SeqCst)
    }
}

impl Drop for DbMap {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, BAR_DB_SIZE as usize) };
    }
}
