//! The doorbell protocol of docs/hardware.md on this context's doorbell page: store a slot word
//! (after the ring entries it announces, release ordering), then — only if the device said it
//! is going to sleep (`DbPage::device_idle`) — write the wake: the word rox.ko named
//! (`wake_value`) at the offset it named (`wake_offset`) of the wake page, which is BAR0's
//! trapped wake page or the posted-wake companion's doorbell page (`rox_uapi::wake`). No
//! syscall, and no VM exit while the device is awake.

use crate::sys::errno::{Result, EPROTO};
use crate::sys::memory::DevicePage;
use core::mem::{offset_of, size_of};
use core::sync::atomic::{fence, AtomicU32, Ordering};
use rox_uapi::regs::{
    db_slot_offset, DbPage, DbSlot, DB_DEVICE_IDLE, DB_SLOTS_PER_PAGE, ROX_PAGE_SIZE,
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

// Every slot and the idle flag lie inside the page.
const _: () = assert!(
    db_slot_offset(DB_SLOTS_PER_PAGE as u32 - 1) + size_of::<DbSlot>() <= ROX_PAGE_SIZE
        && offset_of!(DbPage, device_idle) + size_of::<u32>() <= ROX_PAGE_SIZE
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
        Ok(Doorbell {
            db_page,
            wake_page,
            wake_offset,
            wake_value: ucontext.wake_value,
        })
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

    /// Publish `value` in a slot word without waking the device (CQ consumer index: the device
    /// reads it when it writes the next CQE, it never waits for it).
    pub fn publish(&self, slot: DoorbellSlot, word: SlotWord, value: u32) {
        self.slot_word(slot, word).store(value, Ordering::Release);
    }

    /// Ring a doorbell: publish `value`, then wake the device if it is asleep.
    pub fn ring(&self, slot: DoorbellSlot, word: SlotWord, value: u32) {
        self.publish(slot, word, value);
        // Pairs with the device's fence between setting device_idle and its final re-scan.
        fence(Ordering::SeqCst);
        if self
            .word(offset_of!(DbPage, device_idle))
            .load(Ordering::Relaxed)
            == DB_DEVICE_IDLE
        {
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
}
