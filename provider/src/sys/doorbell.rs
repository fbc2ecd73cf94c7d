//! The doorbell protocol of docs/hardware.md on this context's doorbell page: store a slot word
//! (after the ring entries it announces, release ordering), then — only if the device said it
//! is going to sleep (`DbPage::device_idle`) — write the wake: the word rox.ko named
//! (`wake_value`) at the offset it named (`wake_offset`) of the wake page, which is BAR0's
//! trapped wake page or the posted-wake companion's doorbell page (`rox_uapi::wake`). No
//! syscall, and no VM exit while the device is awake. A QP's RQ doorbell skips the wake also
//! when the idle device said its page's RQ doorbells need none (`DbPage::rq_no_wake`).
//! On a device with the summary doorbell (`CAP_DB_SUMMARY`) each slot store is followed by the
//! news byte of the slot's group (`DbPage::news`), which is what the device looks for.

use crate::sys::errno::{Result, EPROTO};
use crate::sys::memory::DevicePage;
use core::mem::{offset_of, size_of};
use core::sync::atomic::{fence, AtomicU32, AtomicU8, Ordering};
use rox_uapi::regs::{
    db_news_offset, db_slot_offset, DbPage, DbSlot, CAP_DB_SUMMARY, DB_DEVICE_IDLE, DB_NEWS_ON,
    DB_NEWS_SET, DB_RC_SQ_NO_WAKE, DB_RQ_NO_WAKE, DB_SLOTS_PER_PAGE, ROX_PAGE_SIZE,
};
use rox_uapi::udata::AllocUcontextResp;

/// Which word of a doorbell slot (`DbSlot::a` / `DbSlot::b`; meaning per object type).
#[derive(Clone, Copy, Debug)]
pub enum SlotWord {
    A,
    B,
}

/// A doorbell slot number of the page, checked to lie inside it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DoorbellSlot(u32);

impl DoorbellSlot {
    /// `None` for a slot beyond the page.
    pub fn new(slot: u32) -> Option<Self> {
        ((slot as usize) < DB_SLOTS_PER_PAGE).then_some(DoorbellSlot(slot))
    }
}

// Every slot, news byte and header word lies inside the page.
const _: () = assert!(
    db_slot_offset(DB_SLOTS_PER_PAGE as u32 - 1) + size_of::<DbSlot>() <= ROX_PAGE_SIZE
        && db_news_offset(DB_SLOTS_PER_PAGE as u32 - 1) < ROX_PAGE_SIZE
        && offset_of!(DbPage, device_idle) + size_of::<u32>() <= ROX_PAGE_SIZE
        && offset_of!(DbPage, rq_no_wake) + size_of::<u32>() <= ROX_PAGE_SIZE
        && offset_of!(DbPage, news_on) + size_of::<u32>() <= ROX_PAGE_SIZE
        && offset_of!(DbPage, rc_sq_no_wake) + size_of::<u32>() <= ROX_PAGE_SIZE
);

/// The offset in the wake page of the register a wake writes, as rox.ko's ucontext answer
/// names it: a 32-bit aligned word inside the page, else the answer is refused (EPROTO).
pub fn checked_wake_offset(u: &AllocUcontextResp) -> Result<usize> {
    let offset = u.wake_offset as usize;
    if offset % size_of::<u32>() == 0 && offset + size_of::<u32>() <= ROX_PAGE_SIZE {
        Ok(offset)
    } else {
        Err(EPROTO)
    }
}

/// This context's doorbell page and the wake page, mapped.
pub struct Doorbell {
    /// This context's doorbell page (`regs::DbPage`): QP/CQ/SRQ slots, device idle flag.
    db_page: DevicePage,
    /// The wake page (BAR0's trapped one or the companion's), written only when the device is
    /// idle.
    wake_page: DevicePage,
    /// Where in the wake page a wake writes (checked by [`checked_wake_offset`]).
    wake_offset: usize,
    /// What a wake writes there.
    wake_value: u32,
    /// Store a news byte after each slot (the device has `CAP_DB_SUMMARY`).
    news: bool,
}

impl Doorbell {
    /// Map the two pages of rox.ko's ucontext answer through the uverbs fd; `log` reports
    /// which one failed.
    pub fn map(cmd_fd: i32, ucontext: &AllocUcontextResp, log: impl Fn(&str)) -> Result<Self> {
        let wake_offset = checked_wake_offset(ucontext).inspect_err(|_| {
            log(&format!(
                "rox.ko's wake offset {:#x} is not a 32-bit word of a {ROX_PAGE_SIZE}-byte page",
                ucontext.wake_offset
            ))
        })?;
        let db_page = DevicePage::map(
            cmd_fd,
            ucontext.db_mmap_key,
            libc::PROT_READ | libc::PROT_WRITE,
        )
        .inspect_err(|e| log(&format!("cannot map the doorbell page: {e:?}")))?;
        let wake_page = DevicePage::map(cmd_fd, ucontext.wake_mmap_key, libc::PROT_WRITE)
            .inspect_err(|e| log(&format!("cannot map the wake page: {e:?}")))?;
        Ok(Doorbell::new(db_page, wake_page, wake_offset, ucontext))
    }

    /// The doorbell of the two pages mapped; on a device with the summary doorbell it says
    /// on its page, before any slot of it is rung, that it stores news (`DbPage::news_on`).
    fn new(
        db_page: DevicePage,
        wake_page: DevicePage,
        wake_offset: usize,
        ucontext: &AllocUcontextResp,
    ) -> Self {
        let doorbell = Doorbell {
            db_page,
            wake_page,
            wake_offset,
            wake_value: ucontext.wake_value,
            news: ucontext.caps & CAP_DB_SUMMARY != 0,
        };
        if doorbell.news {
            doorbell
                .word(offset_of!(DbPage, news_on))
                .store(DB_NEWS_ON, Ordering::Release);
        }
        doorbell
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset % size_of::<u32>() == 0 && offset < ROX_PAGE_SIZE);
        // SAFETY: `offset` is a 4-byte aligned offset inside the mapped doorbell page (a
        // DoorbellSlot's word or the idle flag, checked above at compile time), which stays
        // mapped while `self` lives.
        unsafe { &*self.db_page.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    fn slot_word(&self, slot: DoorbellSlot, word: SlotWord) -> &AtomicU32 {
        let within = match word {
            SlotWord::A => offset_of!(DbSlot, a),
            SlotWord::B => offset_of!(DbSlot, b),
        };
        self.word(db_slot_offset(slot.0) + within)
    }

    /// Publish `value` in a slot word without waking the device (a CQ's arm word: the device
    /// takes it before it writes the next CQE), then its news byte.
    pub fn publish(&self, slot: DoorbellSlot, word: SlotWord, value: u32) {
        self.slot_word(slot, word).store(value, Ordering::Release);
        if self.news {
            // SAFETY: the news byte of a DoorbellSlot's group lies inside the mapped doorbell
            // page (checked above at compile time), which stays mapped while `self` lives.
            let news = unsafe {
                &*self
                    .db_page
                    .as_ptr()
                    .add(db_news_offset(slot.0))
                    .cast::<AtomicU8>()
            };
            // Release: after the slot, as the device reads it after taking the news.
            news.store(DB_NEWS_SET, Ordering::Release);
        }
    }

    /// Publish a CQ's consumer index: no wake and no news, as the device never looks for it
    /// (it reads it when it writes a CQE).
    pub fn publish_consumer_index(&self, slot: DoorbellSlot, value: u32) {
        self.slot_word(slot, SlotWord::A)
            .store(value, Ordering::Release);
    }

    /// Ring a doorbell: publish `value`, then wake the device if it is asleep.
    pub fn ring(&self, slot: DoorbellSlot, word: SlotWord, value: u32) {
        self.ring_and_wake(slot, word, value, None);
    }

    /// Ring a QP's RQ doorbell (`DbSlot::b`): as [`Self::ring`], but without the wake when the
    /// idle device said this page's RQ doorbells need none. A wake for nothing is a vCPU exit,
    /// and it hands the device a core while the poster's next doorbell (the SEND after the
    /// receive it reposted) waits.
    pub fn ring_rq(&self, slot: DoorbellSlot, value: u32) {
        self.ring_and_wake(
            slot,
            SlotWord::B,
            value,
            Some((offset_of!(DbPage, rq_no_wake), DB_RQ_NO_WAKE)),
        );
    }

    /// Ring an RC (or XRC initiator) QP's SQ doorbell whose new WQEs all send packets: as
    /// [`Self::ring`], but without the wake when the idle device said its port's flight is
    /// full (`DbPage::rc_sq_no_wake`): it could send none of them before the ACK or timer
    /// that wakes it anyway, and perftest's ib_write_bw posts 12,800 WQEs to 256 QPs before
    /// it polls once (docs/benchmarks/session-20-qps.md).
    pub fn ring_rc_sq(&self, slot: DoorbellSlot, value: u32) {
        self.ring_and_wake(
            slot,
            SlotWord::A,
            value,
            Some((offset_of!(DbPage, rc_sq_no_wake), DB_RC_SQ_NO_WAKE)),
        );
    }

    /// Publishes `value`, then wakes the idle device unless the page's word at `no_wake`
    /// (offset, value) says this doorbell needs none.
    fn ring_and_wake(
        &self,
        slot: DoorbellSlot,
        word: SlotWord,
        value: u32,
        no_wake: Option<(usize, u32)>,
    ) {
        self.publish(slot, word, value);
        // Pairs with the device's fence between setting device_idle and its final re-scan.
        fence(Ordering::SeqCst);
        // Acquire: the device stores the no-wake words before device_idle.
        let idle = self
            .word(offset_of!(DbPage, device_idle))
            .load(Ordering::Acquire);
        let says_no_wake = no_wake
            .map(|(offset, quiet)| move || self.word(offset).load(Ordering::Relaxed) == quiet);
        if wake_needed(idle, says_no_wake) {
            // SAFETY: `wake_offset` is an aligned 32-bit word inside the mapped wake page
            // (`checked_wake_offset`), which stays mapped while `self` lives; a 32-bit store.
            unsafe {
                self.wake_page
                    .as_ptr()
                    .add(self.wake_offset)
                    .cast::<u32>()
                    .write_volatile(self.wake_value)
            };
        }
    }
}

/// Whether a doorbell must wake a device whose page says `device_idle`. `says_no_wake` reads
/// the page's no-wake word for this kind of doorbell (`rq_no_wake` for an RQ,
/// `rc_sq_no_wake` for an RC SQ of packets; only while the device is idle); None for any
/// other doorbell.
fn wake_needed(device_idle: u32, says_no_wake: Option<impl FnOnce() -> bool>) -> bool {
    device_idle == DB_DEVICE_IDLE && says_no_wake.is_none_or(|read| !read())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rox_uapi::regs::{WAKE_PAGE_OFFSET, WAKE_REG};
    use rox_uapi::wake::IVSHMEM_DOORBELL;

    fn resp(wake_offset: u32) -> AllocUcontextResp {
        AllocUcontextResp {
            wake_offset,
            ..Default::default()
        }
    }

    #[test]
    fn an_rq_doorbell_skips_the_wake_only_where_the_idle_device_said_so() {
        use rox_uapi::regs::DB_DEVICE_RUNNING;
        let other: Option<fn() -> bool> = None;
        assert!(
            wake_needed(DB_DEVICE_IDLE, other),
            "an SQ or CQ arm doorbell"
        );
        assert!(!wake_needed(DB_DEVICE_RUNNING, other));
        assert!(!wake_needed(DB_DEVICE_IDLE, Some(|| true)));
        assert!(
            wake_needed(DB_DEVICE_IDLE, Some(|| false)),
            "a page with a QP in the error state, or a device that never writes the word"
        );
        let unread = || -> bool { panic!("a no-wake word read while the device runs") };
        assert!(!wake_needed(DB_DEVICE_RUNNING, Some(unread)));
    }

    #[test]
    fn an_rc_sq_doorbell_skips_the_wake_only_while_the_idle_device_says_its_flight_is_full() {
        let page = || DevicePage::anonymous().expect("mmap");
        let resp = AllocUcontextResp {
            wake_value: 0xfeed,
            ..resp(0)
        };
        let db = Doorbell::new(page(), page(), 0, &resp);
        let set = |offset: usize, value: u32| {
            // SAFETY: an aligned word of the header of the mapped doorbell page.
            unsafe {
                db.db_page
                    .as_ptr()
                    .add(offset)
                    .cast::<u32>()
                    .write_volatile(value)
            };
        };
        let wakes = || {
            // SAFETY: the wake word at offset 0 of the mapped wake page.
            let w = unsafe { db.wake_page.as_ptr().cast::<u32>().read_volatile() };
            // SAFETY: as above.
            unsafe { db.wake_page.as_ptr().cast::<u32>().write_volatile(0) };
            w == 0xfeed
        };
        let slot = DoorbellSlot::new(3).unwrap();
        set(offset_of!(DbPage, device_idle), DB_DEVICE_IDLE);
        set(offset_of!(DbPage, rc_sq_no_wake), DB_RC_SQ_NO_WAKE);
        db.ring_rc_sq(slot, 1);
        assert!(
            !wakes(),
            "the flight is full: an RC SQ of packets waits for the ACK"
        );
        db.ring(slot, SlotWord::A, 2);
        assert!(
            wakes(),
            "any other SQ doorbell (UD, UC, a local operation) wakes"
        );
        db.publish(slot, SlotWord::B, 3);
        db.ring(slot, SlotWord::B, 4);
        assert!(wakes(), "a CQ arm wakes");
        set(offset_of!(DbPage, rc_sq_no_wake), 0);
        db.ring_rc_sq(slot, 5);
        assert!(
            wakes(),
            "without the word (or from a device that never writes it)"
        );
    }

    #[test]
    fn wake_offsets_of_both_wake_pages_are_accepted() {
        let trapped = (WAKE_REG - WAKE_PAGE_OFFSET) as u32;
        assert_eq!(checked_wake_offset(&resp(trapped)), Ok(trapped as usize));
        let posted = IVSHMEM_DOORBELL as u32;
        assert_eq!(checked_wake_offset(&resp(posted)), Ok(posted as usize));
        let last = (ROX_PAGE_SIZE - 4) as u32;
        assert_eq!(checked_wake_offset(&resp(last)), Ok(last as usize));
    }

    #[test]
    fn wake_offset_unaligned_or_outside_the_page_is_refused() {
        for bad in [
            2,
            13,
            ROX_PAGE_SIZE as u32 - 2,
            ROX_PAGE_SIZE as u32,
            u32::MAX - 3,
        ] {
            assert_eq!(
                checked_wake_offset(&resp(bad)),
                Err(EPROTO),
                "offset {bad:#x}"
            );
        }
    }

    /// A doorbell over two pages of ordinary memory, for a device with `caps`.
    fn doorbell(caps: u32) -> Doorbell {
        let page = || DevicePage::anonymous().expect("mmap");
        Doorbell::new(page(), page(), 0, &AllocUcontextResp { caps, ..resp(0) })
    }

    /// The doorbell page's 64-byte header.
    fn header(db: &Doorbell) -> [u8; 64] {
        let mut out = [0u8; 64];
        for (i, byte) in out.iter_mut().enumerate() {
            // SAFETY: a byte of the header of the mapped doorbell page.
            *byte = unsafe { db.db_page.as_ptr().add(i).read_volatile() };
        }
        out
    }

    fn clear_news(db: &Doorbell) {
        for i in offset_of!(DbPage, news)..64 {
            // SAFETY: a byte of the news of the mapped doorbell page.
            unsafe { db.db_page.as_ptr().add(i).write_volatile(0) };
        }
    }

    fn news(db: &Doorbell) -> Vec<usize> {
        let start = offset_of!(DbPage, news);
        (start..64)
            .filter(|&i| header(db)[i] != 0)
            .map(|i| i - start)
            .collect()
    }

    #[test]
    fn with_the_summary_doorbell_every_ring_stores_its_groups_news_and_the_page_says_so() {
        use rox_uapi::regs::{db_news_group, DB_NEWS_GROUP_SLOTS};
        let db = doorbell(CAP_DB_SUMMARY);
        let news_on = offset_of!(DbPage, news_on);
        assert_eq!(header(&db)[news_on..news_on + 4], DB_NEWS_ON.to_ne_bytes());
        let last = DB_SLOTS_PER_PAGE as u32 - 1;
        for n in [0, DB_NEWS_GROUP_SLOTS as u32, last] {
            let slot = DoorbellSlot::new(n).unwrap();
            let group = db_news_group(n);
            db.ring(slot, SlotWord::A, 5);
            assert_eq!(db.slot_word(slot, SlotWord::A).load(Ordering::Relaxed), 5);
            assert_eq!(news(&db), [group], "SQ doorbell of slot {n}");
            clear_news(&db);
            db.ring_rq(slot, 6);
            assert_eq!(news(&db), [group], "RQ doorbell of slot {n}");
            clear_news(&db);
            db.publish(slot, SlotWord::B, 7);
            assert_eq!(news(&db), [group], "CQ arm word of slot {n}");
            clear_news(&db);
            db.publish_consumer_index(slot, 8);
            assert_eq!(db.slot_word(slot, SlotWord::A).load(Ordering::Relaxed), 8);
            assert!(news(&db).is_empty(), "a consumer index is not news");
        }
    }

    #[test]
    fn without_the_summary_doorbell_no_ring_touches_the_page_header() {
        let db = doorbell(0);
        for n in [0, 17, DB_SLOTS_PER_PAGE as u32 - 1] {
            let slot = DoorbellSlot::new(n).unwrap();
            db.ring(slot, SlotWord::A, 1);
            db.ring_rq(slot, 2);
            db.publish(slot, SlotWord::B, 3);
            db.publish_consumer_index(slot, 4);
        }
        assert_eq!(header(&db), [0; 64], "news_on and news stay 0");
    }
}
