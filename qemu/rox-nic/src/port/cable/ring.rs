//! The layout of the cable's memfd: a header page, then per direction a ring's control
//! block, its descriptors and its buffers.

use super::{DESC_LEN, PAGE};

/// Bytes of a ring's descriptors (whole pages).
fn descriptors_len(slots: u32) -> usize {
    (slots as usize * DESC_LEN).next_multiple_of(PAGE)
}

/// Where ring `r` (0: listener to connector, 1: back) starts in the memfd.
fn ring_base(r: usize, slots: u32, slot_len: u32) -> usize {
    PAGE + r * (PAGE + descriptors_len(slots) + slots as usize * slot_len as usize)
}

/// The memfd's size for `slots` slots of `slot_len` bytes per ring.
pub(super) fn region_len(slots: u32, slot_len: u32) -> usize {
    ring_base(2, slots, slot_len)
}

/// One direction of the cable, as one end sees it: a control block, `slots` descriptors and
/// `slots` buffers.
#[derive(Clone, Copy)]
pub(super) struct Ring {
    pub(super) base: usize,
    pub(super) slots: u32,
    pub(super) slot_len: u32,
}

impl Ring {
    pub(super) fn new(r: usize, slots: u32, slot_len: u32) -> Ring {
        // `slot` masks ring positions.
        debug_assert!(slots.is_power_of_two());
        Ring {
            base: ring_base(r, slots, slot_len),
            slots,
            slot_len,
        }
    }

    /// The slot of ring position `count` (`slots` is [`RING_SLOTS`], a power of two: a mask,
    /// not a division, on every frame).
    pub(super) fn slot(&self, count: u32) -> usize {
        (count & (self.slots - 1)) as usize
    }

    /// The descriptor of ring position `count`.
    pub(super) fn descriptor(&self, count: u32) -> usize {
        self.base + PAGE + self.slot(count) * DESC_LEN
    }

    /// Buffer `index` (< slots).
    pub(super) fn buffer(&self, index: u32) -> usize {
        self.base + PAGE + descriptors_len(self.slots) + index as usize * self.slot_len as usize
    }
}
