//! The doorbell protocol of docs/hardware.md on this context's doorbell page: store a slot word
//! (after the ring entries it announces, release ordering), then — only if the device said it
//! is going to sleep (`DbPage::device_idle`) — write the wake register (one trapped write). No
//! syscall, and no VM exit while the device is awake.

use crate::context::ContextHw;
use core::mem::offset_of;
use core::sync::atomic::{fence, AtomicU32, Ordering};
use rox_uapi::regs::{db_slot_offset, DbPage, DbSlot, DB_DEVICE_IDLE, WAKE_PAGE_OFFSET, WAKE_REG};

/// Which word of a doorbell slot (`DbSlot::a` / `DbSlot::b`; meaning per object type).
#[derive(Clone, Copy, Debug)]
pub enum SlotWord {
    A,
    B,
}

/// Offset of the wake register inside the wake page.
const WAKE_REG_IN_PAGE: usize = (WAKE_REG - WAKE_PAGE_OFFSET) as usize;

impl ContextHw {
    fn word(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: `offset` is a 4-byte aligned offset inside the mapped doorbell page (checked
        // by the callers' slot validation), which stays mapped while `self` lives.
        unsafe { &*self.db_page.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    fn slot_word(&self, slot: u32, word: SlotWord) -> &AtomicU32 {
        let within = match word {
            SlotWord::A => offset_of!(DbSlot, a),
            SlotWord::B => offset_of!(DbSlot, b),
        };
        self.word(db_slot_offset(slot) + within)
    }

    /// Publish `value` in a slot word without waking the device (CQ consumer index: the device
    /// reads it when it writes the next CQE, it never waits for it).
    pub fn publish(&self, slot: u32, word: SlotWord, value: u32) {
        self.slot_word(slot, word).store(value, Ordering::Release);
    }

    /// Ring a doorbell: publish `value`, then wake the device if it is asleep.
    pub fn ring(&self, slot: u32, word: SlotWord, value: u32) {
        self.publish(slot, word, value);
        // Pairs with the device's fence between setting device_idle and its final re-scan.
        fence(Ordering::SeqCst);
        if self
            .word(offset_of!(DbPage, device_idle))
            .load(Ordering::Relaxed)
            == DB_DEVICE_IDLE
        {
            // SAFETY: the wake register lies inside the mapped wake page; a 32-bit store.
            unsafe {
                self.wake_page
                    .as_ptr()
                    .add(WAKE_REG_IN_PAGE)
                    .cast::<u32>()
                    .write_volatile(self.ucontext.db_page)
            };
        }
    }
}
