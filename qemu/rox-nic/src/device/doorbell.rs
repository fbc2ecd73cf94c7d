//! The doorbell BAR: pages in a memfd that QEMU maps into the guest (and software writes
//! producer indices and CQ arm words to); the device maps it too and polls it with atomic
//! loads. Each page's header carries the summary doorbell's news bytes
//! (docs/summary-doorbell.md); `slots` keeps which object holds each slot.

use std::fs::File;
use std::mem::offset_of;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use rox_uapi::regs::{self, DbSlot};
use vm_memory::{FileOffset, MmapRegion, VolatileMemory};

use crate::sys;

mod slots;
pub use slots::{DbObject, DoorbellsUsed, PageObjects};

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

    /// Byte `offset` of the BAR, as an atomic: a store there changes that byte and no other,
    /// while the device swaps whole news words from another thread.
    fn byte(&self, offset: usize) -> &AtomicU8 {
        self.map
            .get_atomic_ref(offset)
            .expect("doorbell byte offsets are inside the BAR")
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

    fn page_offset(page: u32, within: usize) -> usize {
        page as usize * regs::ROX_PAGE_SIZE + within
    }

    /// Software side (tests, the harness): store the news byte of slot `slot`'s group, after
    /// the slot (release), as the summary doorbell's protocol has it (`regs::DbPage`). The
    /// device stores it too, for a group it must look at again on its next pass.
    pub fn store_news(&self, page: u32, slot: u32) {
        self.byte(Self::page_offset(page, regs::db_news_offset(slot)))
            .store(regs::DB_NEWS_SET, Ordering::Release);
    }

    /// Software side (tests, the harness): say whether the owner of `page` stores news
    /// (`DbPage::news_on`).
    pub fn set_news_on(&self, page: u32, on: bool) {
        let value = if on { regs::DB_NEWS_ON } else { 0 };
        self.word(Self::page_offset(page, offset_of!(regs::DbPage, news_on)))
            .store(value, Ordering::Release);
    }

    /// Whether the owner of `page` says it stores news (`DbPage::news_on`).
    pub fn news_on(&self, page: u32) -> bool {
        self.word(Self::page_offset(page, offset_of!(regs::DbPage, news_on)))
            .load(Ordering::Relaxed)
            == regs::DB_NEWS_ON
    }

    /// Takes the news of `page`: bit g of the result is set if group g's news byte was. A word
    /// of news bytes is swapped with 0 only when it is not 0 already (a locked instruction per
    /// word with news, none for the others); acquire, so the slots stored before the news are
    /// seen by the caller's loads, and a news byte stored after the swap stays for the next
    /// take.
    pub fn take_news(&self, page: u32) -> u64 {
        const _: () = assert!(regs::DB_NEWS_BYTES <= u64::BITS as usize);
        let mut groups = 0;
        for (w, first) in (0..regs::DB_NEWS_BYTES).step_by(8).enumerate() {
            let word: &AtomicU64 = self
                .map
                .get_atomic_ref(Self::page_offset(page, regs::DB_NEWS_OFFSET + first))
                .expect("news words are aligned and inside the BAR");
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let bytes = word.swap(0, Ordering::Acquire).to_le_bytes();
            for (b, &byte) in bytes.iter().enumerate() {
                if byte != 0 {
                    groups |= 1 << (w * 8 + b);
                }
            }
        }
        groups
    }

    /// Stores [`regs::DB_DEVICE_RUNNING`] in the `device_idle` of the pages in `pages` (those
    /// [`Self::set_idle_with_wakes`] announced). Release stores, not a full barrier
    /// each: 256 SeqCst stores (a locked exchange each, one per page) took 5.2 µs with the
    /// pages cached (1.7 µs as Release stores), paid on every wake before the device looked
    /// at a doorbell and on every idle announcement (docs/benchmarks/session-13.md, "Session 13:
    /// loopback ib_send_lat"). The protocol needs one full barrier: the caller's `fence(SeqCst)`
    /// between announcing
    /// idleness and its last re-scan. When the device wakes, software that still reads idle
    /// only wakes it once more, and a doorbell a running device's scan misses is seen by its
    /// next pass.
    pub fn set_running(&self, pages: &PageSet) {
        for page in pages.iter() {
            self.word(page as usize * regs::ROX_PAGE_SIZE)
                .store(regs::DB_DEVICE_RUNNING, Ordering::Release);
        }
    }

    /// Announces idleness in the pages in `pages`, each saying first which of its doorbells
    /// need a wake: its RQ doorbells (`DbPage::rq_no_wake`) on the pages in `rq_wake`, no
    /// others; its RC SQ doorbells of packets (`DbPage::rc_sq_no_wake`: the port's flight is
    /// full) on all but the pages in `rc_sq_quiet`. `pages` are those software may ring an
    /// object's doorbell on ([`DoorbellsUsed::pages`]): a page without one stays running, as
    /// nothing rung there is looked at, and an object created on it later is created by an
    /// admin command, which wakes the device, whose next announcement then includes its page.
    /// The words share a cache line; as in [`Self::set_running`], the caller fences before its
    /// re-scan.
    pub fn set_idle_with_wakes(&self, pages: &PageSet, rq_wake: &PageSet, rc_sq_quiet: &PageSet) {
        for page in pages.iter() {
            let base = page as usize * regs::ROX_PAGE_SIZE;
            let no_wake = if rq_wake.contains(page) {
                0
            } else {
                regs::DB_RQ_NO_WAKE
            };
            let rc_sq_no_wake = if rc_sq_quiet.contains(page) {
                regs::DB_RC_SQ_NO_WAKE
            } else {
                0
            };
            // Before `device_idle`: software that sees the device idle sees these too.
            self.word(base + offset_of!(regs::DbPage, rq_no_wake))
                .store(no_wake, Ordering::Relaxed);
            self.word(base + offset_of!(regs::DbPage, rc_sq_no_wake))
                .store(rc_sq_no_wake, Ordering::Relaxed);
            self.word(base)
                .store(regs::DB_DEVICE_IDLE, Ordering::Release);
        }
    }

    /// `DbPage::rq_no_wake` of `page` as the device last announced it.
    pub fn rq_no_wake(&self, page: u32) -> u32 {
        self.word(page as usize * regs::ROX_PAGE_SIZE + offset_of!(regs::DbPage, rq_no_wake))
            .load(Ordering::Acquire)
    }

    /// `DbPage::rc_sq_no_wake` of `page` as the device last announced it.
    pub fn rc_sq_no_wake(&self, page: u32) -> u32 {
        self.word(page as usize * regs::ROX_PAGE_SIZE + offset_of!(regs::DbPage, rc_sq_no_wake))
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

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
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

    /// A trapped byte store (software's news byte when BAR2 is not mmapped): that byte of
    /// its word and no other, the same release store of one byte as [`Self::store_news`]
    /// (what a guest's mapped store is too). It races the data path's whole-word swap of
    /// the news word: Rust's memory model leaves mixed-size atomics to the hardware, and
    /// this relies on x86-64's and ARMv8's single-copy atomic byte stores inside a word,
    /// as the mapped guest's stores already do (`regs::DbPage`).
    pub fn write_byte(&self, offset: u64, value: u8) {
        if offset < regs::BAR_DB_SIZE {
            self.byte(offset as usize).store(value, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_announces_idleness_only_on_the_pages_given_and_takes_it_back_there() {
        let bar = DoorbellBar::new().unwrap();
        let mut pages = PageSet::default();
        for page in [0, 1, 64, regs::DB_PAGE_COUNT - 1] {
            pages.insert(page);
        }
        let mut rq_wake = PageSet::default();
        rq_wake.insert(64);
        let mut rc_sq_quiet = PageSet::default();
        rc_sq_quiet.insert(64);
        bar.set_idle_with_wakes(&pages, &rq_wake, &rc_sq_quiet);
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
            let rc_sq_no_wake = if announced && page == 64 {
                regs::DB_RC_SQ_NO_WAKE
            } else {
                0
            };
            assert_eq!(bar.rc_sq_no_wake(page), rc_sq_no_wake, "page {page}");
        }
        bar.set_running(&pages);
        assert!((0..regs::DB_PAGE_COUNT).all(|p| bar.idle(p) == regs::DB_DEVICE_RUNNING));
    }

    #[test]
    fn taking_news_names_the_groups_stored_and_clears_them_and_nothing_else() {
        let bar = DoorbellBar::new().unwrap();
        assert_eq!(bar.take_news(5), 0);
        let last = regs::DB_SLOTS_PER_PAGE as u32 - 1;
        let edge = regs::DB_NEWS_GROUP_SLOTS as u32;
        for slot in [0, 1, edge, 8 * edge, last] {
            bar.store_news(5, slot);
        }
        bar.store_news(6, 0);
        let groups = bar.take_news(5);
        let expected = [0, 1, 8, regs::db_news_group(last)]
            .iter()
            .fold(0u64, |m, g| m | 1 << g);
        assert_eq!(groups, expected, "{groups:#x}");
        assert_eq!(bar.take_news(5), 0, "taken news is gone");
        assert_eq!(bar.take_news(6), 1, "another page's news is its own");
        // The news bytes lie in the header, clear of the slots and the words beside them.
        bar.store_a(5, 0, 7);
        bar.set_news_on(5, true);
        bar.store_news(5, last);
        assert!(bar.news_on(5) && !bar.news_on(6));
        assert_eq!(bar.take_news(5), 1 << regs::db_news_group(last));
        assert_eq!(bar.slot(5, 0).a, 7);
        assert!(bar.news_on(5));
        assert_eq!((bar.idle(5), bar.rq_no_wake(5)), (0, 0));
    }

    #[test]
    fn a_trapped_byte_store_changes_that_byte_and_leaves_its_word_neighbours() {
        let bar = DoorbellBar::new().unwrap();
        let news = 3 * regs::ROX_PAGE_SIZE as u64 + regs::DB_NEWS_OFFSET as u64;
        bar.write_word(news, 0x4433_2211);
        bar.write_byte(news + 2, regs::DB_NEWS_SET);
        let set = u32::from(regs::DB_NEWS_SET) << 16;
        assert_eq!(bar.read_word(news), 0x4400_2211 | set);
        bar.write_byte(news + 2, 0);
        assert_eq!(bar.read_word(news), 0x4400_2211);
        // Past the BAR: ignored, not a panic.
        bar.write_byte(regs::BAR_DB_SIZE, 1);
    }

    /// The protocol's race (`regs::DbPage`): software stores two slots of two groups whose
    /// news bytes share a word, each followed by its news byte, while the device takes that
    /// word's news and loads the slots of the groups it found. Each slot must be seen by the
    /// take after its news byte, or by the next one. Were the word read and then cleared with
    /// a store (no swap), the second news byte, stored in between, would be lost (that loses
    /// some in every few thousand rounds here).
    #[test]
    fn a_slot_stored_while_the_device_takes_its_groups_news_is_seen_by_that_take_or_the_next() {
        use std::sync::atomic::AtomicU32;
        use std::sync::Arc;
        const PAGE: u32 = 9;
        const ROUNDS: u32 = 20_000;
        let slots = [0, regs::DB_NEWS_GROUP_SLOTS as u32];
        assert_eq!(
            regs::db_news_offset(slots[1]) / 8,
            regs::db_news_offset(0) / 8
        );
        let bar = Arc::new(DoorbellBar::new().unwrap());
        let started = Arc::new(AtomicU32::new(0));
        let stored = Arc::new(AtomicU32::new(0));
        let software = {
            let (bar, started, stored) = (bar.clone(), started.clone(), stored.clone());
            std::thread::spawn(move || {
                for round in 1..=ROUNDS {
                    while started.load(Ordering::Acquire) != round {
                        std::hint::spin_loop();
                    }
                    for slot in slots {
                        bar.store_a(PAGE, slot, round);
                        bar.store_news(PAGE, slot);
                    }
                    stored.store(round, Ordering::Release);
                }
            })
        };
        for round in 1..=ROUNDS {
            let mut seen = [false; 2];
            let mut take = || {
                let groups = bar.take_news(PAGE);
                for (i, &slot) in slots.iter().enumerate() {
                    if groups & 1 << regs::db_news_group(slot) != 0 {
                        seen[i] |= bar.slot(PAGE, slot).a == round;
                    }
                }
            };
            started.store(round, Ordering::Release);
            while stored.load(Ordering::Acquire) != round {
                take();
            }
            take();
            assert_eq!(seen, [true, true], "round {round}");
        }
        software.join().unwrap();
    }
}
