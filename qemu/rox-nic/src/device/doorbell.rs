//! The doorbell BAR: pages in a memfd that QEMU maps into the guest (and software writes
//! producer indices and CQ arm words to); the device maps it too and polls it with atomic
//! loads.

use std::collections::HashSet;
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

    /// Stores [`regs::DB_DEVICE_RUNNING`] in the `device_idle` of the pages in `pages` (those
    /// [`Self::set_idle_with_rq_wakes`] announced). Release stores, not a full barrier
    /// each: 256 SeqCst stores (a locked exchange each, one per page) took 5.2 µs with the
    /// pages cached (1.7 µs as Release stores), paid on every wake before the device looked
    /// at a doorbell and on every idle announcement (docs/benchmarks.md, "Session 13"). The
    /// protocol needs one full barrier: the caller's `fence(SeqCst)` between announcing
    /// idleness and its last re-scan. When the device wakes, software that still reads idle
    /// only wakes it once more, and a doorbell a running device's scan misses is seen by its
    /// next pass.
    pub fn set_running(&self, pages: &PageSet) {
        for page in pages.iter() {
            self.word(page as usize * regs::ROX_PAGE_SIZE)
                .store(regs::DB_DEVICE_RUNNING, Ordering::Release);
        }
    }

    /// Announces idleness in the pages in `pages`, each saying first whether its RQ
    /// doorbells need a wake (`DbPage::rq_no_wake`): they do on the pages in `rq_wake`, no
    /// others. `pages` are those software may ring an object's doorbell on
    /// ([`DoorbellsUsed::pages`]): a page without one stays running, as nothing rung there
    /// is looked at, and an object created on it later is created by an admin command, which
    /// wakes the device, whose next announcement then includes its page. Both words share a
    /// cache line; as in [`Self::set_running`], the caller fences before its re-scan.
    pub fn set_idle_with_rq_wakes(&self, pages: &PageSet, rq_wake: &PageSet) {
        for page in pages.iter() {
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

    /// Takes `page` out (a page past `DB_PAGE_COUNT` is no page: ignored).
    pub fn remove(&mut self, page: u32) {
        if let Some(w) = self.0.get_mut(page as usize / 64) {
            *w &= !(1 << (page % 64));
        }
    }

    pub fn contains(&self, page: u32) -> bool {
        self.0
            .get(page as usize / 64)
            .is_some_and(|w| w & (1 << (page % 64)) != 0)
    }

    /// The pages in the set, in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                (rest != 0).then(|| {
                    let bit = rest.trailing_zeros();
                    rest &= rest - 1;
                    i as u32 * 64 + bit
                })
            })
        })
    }
}

/// The doorbell slots the device's objects (QPs, CQs, SRQs) hold, and the pages they lie on:
/// the pages whose doorbells software may ring, on which the idle device announces that it
/// sleeps (announcing on all 256 pages cost ~5,000 instructions per sleep, ~250 per 8 B
/// WRITE of the host bench, docs/benchmarks.md "Session 16").
#[derive(Debug)]
pub struct DoorbellsUsed {
    slots: HashSet<(u32, u32)>,
    /// Slots in use per page.
    per_page: Vec<u32>,
    pages: PageSet,
}

impl Default for DoorbellsUsed {
    fn default() -> DoorbellsUsed {
        let mut pages = PageSet::default();
        // The kernel's page always: rox.ko rings its objects' doorbells there.
        pages.insert(regs::DB_PAGE_KERNEL);
        DoorbellsUsed {
            slots: HashSet::new(),
            per_page: vec![0; regs::DB_PAGE_COUNT as usize],
            pages,
        }
    }
}

impl DoorbellsUsed {
    pub fn contains(&self, page: u32, slot: u32) -> bool {
        self.slots.contains(&(page, slot))
    }

    /// Takes slot `slot` of `page` (a page past `DB_PAGE_COUNT` is refused before: ignored);
    /// false if it was taken already.
    pub fn claim(&mut self, page: u32, slot: u32) -> bool {
        if !self.slots.insert((page, slot)) {
            return false;
        }
        if let Some(n) = self.per_page.get_mut(page as usize) {
            *n += 1;
            self.pages.insert(page);
        }
        true
    }

    /// Gives slot `slot` of `page` back (nothing if it was not taken).
    pub fn release(&mut self, page: u32, slot: u32) {
        if !self.slots.remove(&(page, slot)) {
            return;
        }
        if let Some(n) = self.per_page.get_mut(page as usize) {
            *n -= 1;
            if *n == 0 && page != regs::DB_PAGE_KERNEL {
                self.pages.remove(page);
            }
        }
    }

    /// The pages with a slot in use, and the kernel's.
    pub fn pages(&self) -> PageSet {
        self.pages
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pages_in_use_follow_the_slots_claimed_and_released() {
        let mut used = DoorbellsUsed::default();
        let kernel = regs::DB_PAGE_KERNEL;
        assert_eq!(used.pages().iter().collect::<Vec<_>>(), [kernel]);
        assert!(used.claim(3, 0));
        assert!(used.claim(3, 5));
        assert!(!used.claim(3, 5), "a slot is taken once");
        assert!(used.claim(200, 1));
        assert!(used.claim(kernel, 2));
        assert_eq!(used.pages().iter().collect::<Vec<_>>(), [kernel, 3, 200]);
        used.release(3, 0);
        assert!(used.contains(3, 5) && !used.contains(3, 0));
        assert_eq!(used.pages().iter().collect::<Vec<_>>(), [kernel, 3, 200]);
        used.release(3, 0); // not taken: changes nothing
        used.release(3, 5);
        used.release(200, 1);
        used.release(kernel, 2);
        assert_eq!(used.pages().iter().collect::<Vec<_>>(), [kernel]);
    }

    #[test]
    fn the_device_announces_idleness_only_on_the_pages_given_and_takes_it_back_there() {
        let bar = DoorbellBar::new().unwrap();
        let mut pages = PageSet::default();
        for page in [0, 1, 64, regs::DB_PAGE_COUNT - 1] {
            pages.insert(page);
        }
        let mut rq_wake = PageSet::default();
        rq_wake.insert(64);
        bar.set_idle_with_rq_wakes(&pages, &rq_wake);
        for page in 0..regs::DB_PAGE_COUNT {
            let announced = pages.contains(page);
            let idle = if announced {
                regs::DB_DEVICE_IDLE
            } else {
                regs::DB_DEVICE_RUNNING
            };
            assert_eq!(bar.idle(page), idle, "page {page}");
            let no_wake = match (announced, page) {
                (true, 64) => 0,
                (true, _) => regs::DB_RQ_NO_WAKE,
                (false, _) => 0,
            };
            assert_eq!(bar.rq_no_wake(page), no_wake, "page {page}");
        }
        bar.set_running(&pages);
        assert!((0..regs::DB_PAGE_COUNT).all(|p| bar.idle(p) == regs::DB_DEVICE_RUNNING));
    }
}
