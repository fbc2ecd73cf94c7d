//! The doorbell BAR: pages in a memfd that QEMU maps into the guest (and software writes
//! producer indices and CQ arm words to); the device maps it too and polls it with atomic
//! loads.

use std::fs::File;
use std::mem::offset_of;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use rox_uapi::regs::{self, DbSlot};
use vm_memory::{FileOffset, MmapRegion, VolatileMemory};

use crate::sys;

/// The doorbell BAR: `DB_PAGE_COUNT` pages in a memfd that QEMU maps into the guest; we map it
/// too and poll it.
pub struct DoorbellBar {
    file: File,
    map: MmapRegion<()>,
}

impl DoorbellBar {
    pub fn new() -> std::io::Result<DoorbellBar> {
        let file = sys::fd::memfd(c"rox-nic-doorbells")?;
        file.set_len(regs::BAR_DB_SIZE)?;
        Self::map(file)
    }

    /// Maps the doorbell BAR behind `file` (the device's own, or the fd a driver got for it).
    pub fn map(file: File) -> std::io::Result<DoorbellBar> {
        let offset = FileOffset::new(file.try_clone()?, 0);
        let map = MmapRegion::from_file(offset, regs::BAR_DB_SIZE as usize)
            .map_err(std::io::Error::other)?;
        Ok(DoorbellBar { file, map })
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        // Offsets are the device's own (slots, pages): always aligned and inside the BAR.
        self.map
            .get_atomic_ref(offset)
            .expect("doorbell offsets are aligned and inside the BAR")
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

    /// Stores `value` in every page's `device_idle`. Release stores, not a full barrier
    /// each: 256 SeqCst stores (a locked exchange each, one per page) took 5.2 µs with the
    /// pages cached (1.7 µs as Release stores), paid on every wake before the device looked
    /// at a doorbell and on every idle announcement (docs/benchmarks.md, "Session 13"). The
    /// protocol needs one full barrier: the caller's `fence(SeqCst)` between announcing
    /// idleness and its last re-scan. When the device wakes, software that still reads idle
    /// only wakes it once more, and a doorbell a running device's scan misses is seen by its
    /// next pass.
    pub fn set_idle(&self, value: u32) {
        for page in 0..regs::DB_PAGE_COUNT {
            self.word(page as usize * regs::ROX_PAGE_SIZE)
                .store(value, Ordering::Release);
        }
    }

    /// Announces idleness in every page, each saying first whether its RQ doorbells need a
    /// wake (`DbPage::rq_no_wake`): they do on the pages in `rq_wake`, no others. Both words
    /// share a cache line, so this costs what [`Self::set_idle`] does; as there, the caller
    /// fences before its re-scan.
    pub fn set_idle_with_rq_wakes(&self, rq_wake: &PageSet) {
        for page in 0..regs::DB_PAGE_COUNT {
            let base = page as usize * regs::ROX_PAGE_SIZE;
            let no_wake = if rq_wake.contains(page) {
                0
            } else {
                regs::DB_RQ_NO_WAKE
            };
            // Before `device_idle`: software that sees the device idle sees this too.
            self.word(base + offset_of!(regs::DbPage, rq_no_wake))
                .store(no_wake, Ordering::Relaxed);
            self.word(base)
                .store(regs::DB_DEVICE_IDLE, Ordering::Release);
        }
    }

    /// `DbPage::rq_no_wake` of `page` as the device last announced it.
    pub fn rq_no_wake(&self, page: u32) -> u32 {
        self.word(page as usize * regs::ROX_PAGE_SIZE + offset_of!(regs::DbPage, rq_no_wake))
            .load(Ordering::Acquire)
    }

    pub fn idle(&self, page: u32) -> u32 {
        self.word(page as usize * regs::ROX_PAGE_SIZE)
            .load(Ordering::SeqCst)
    }

    /// Zero every page (device reset).
    pub fn clear(&self) {
        self.fill(0);
    }

    /// Store `value` in every word of every page.
    pub fn fill(&self, value: u32) {
        for off in (0..regs::BAR_DB_SIZE as usize).step_by(4) {
            self.word(off).store(value, Ordering::Relaxed);
        }
        std::sync::atomic::fence(Ordering::SeqCst);
    }
}

/// A set of doorbell pages, one bit per page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageSet([u64; (regs::DB_PAGE_COUNT as usize).div_ceil(64)]);

impl PageSet {
    /// Adds `page` (a page past `DB_PAGE_COUNT` is no page: ignored).
    pub fn insert(&mut self, page: u32) {
        if let Some(w) = self.0.get_mut(page as usize / 64) {
            *w |= 1 << (page % 64);
        }
    }

    pub fn contains(&self, page: u32) -> bool {
        self.0
            .get(page as usize / 64)
            .is_some_and(|w| w & (1 << (page % 64)) != 0)
    }
}

impl DoorbellBar {
    /// A trapped 32-bit access to the doorbell BAR (only if the guest did not mmap it).
    pub fn read_word(&self, offset: u64) -> u32 {
        if offset % 4 != 0 || offset >= regs::BAR_DB_SIZE {
            return 0;
        }
        self.word(offset as usize).load(Ordering::Acquire)
    }

    pub fn write_word(&self, offset: u64, value: u32) {
        if offset % 4 == 0 && offset < regs::BAR_DB_SIZE {
            self.word(offset as usize).store(value, Ordering::Release);
        }
    }
}
