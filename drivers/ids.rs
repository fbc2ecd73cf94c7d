// SPDX-License-Identifier: GPL-2.0
//! Lock-free allocators of small integer ids (doorbell pages, doorbell slots).

use crate::hw::regs;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::{prelude::*, sync::Arc};

const BITS_PER_WORD: usize = u64::BITS as usize;

/// Ids `first..limit` out of a bitmap of `WORDS * 64` bits.
pub(crate) struct IdBitmap<const WORDS: usize> {
    words: [AtomicU64; WORDS],
    first: u32,
    limit: u32,
}

impl<const WORDS: usize> IdBitmap<WORDS> {
    pub(crate) const CAPACITY: usize = WORDS * BITS_PER_WORD;

    pub(crate) fn new(first: u32, limit: u32) -> Self {
        Self {
            words: [const { AtomicU64::new(0) }; WORDS],
            first,
            limit: core::cmp::min(limit, Self::CAPACITY as u32),
        }
    }

    /// Takes the lowest free id (`ENOSPC` when all are taken).
    pub(crate) fn alloc(&self) -> Result<u32> {
        for id in self.first..self.limit {
            let (word, bit) = (id as usize / BITS_PER_WORD, id as usize % BITS_PER_WORD);
            let mask = 1u64 << bit;
            if self.words[word].fetch_or(mask, Ordering::AcqRel) & mask == 0 {
                return Ok(id);
            }
        }
        Err(ENOSPC)
    }

    /// Returns `id` (taken by [`Self::alloc`]).
    pub(crate) fn free(&self, id: u32) {
        if id >= self.first && id < self.limit {
            let (word, bit) = (id as usize / BITS_PER_WORD, id as usize % BITS_PER_WORD);
            self.words[word].fetch_and(!(1u64 << bit), Ordering::AcqRel);
        }
    }
}

/// Slots of one doorbell page.
pub(crate) type DbSlots = IdBitmap<{ regs::DB_SLOTS_PER_PAGE.div_ceil(u64::BITS as usize) }>;

impl DbSlots {
    /// All slots of a doorbell page.
    pub(crate) fn new_page() -> Result<Arc<Self>> {
        Ok(Arc::new(
            Self::new(0, regs::DB_SLOTS_PER_PAGE as u32),
            GFP_KERNEL,
        )?)
    }
}

/// A slot of a doorbell page, returned on drop.
pub(crate) struct DbSlot {
    slots: Arc<DbSlots>,
    slot: u32,
}

impl DbSlot {
    pub(crate) fn alloc(slots: &Arc<DbSlots>) -> Result<Self> {
        let slot = slots.alloc().map_err(|_| ENOMEM)?;
        Ok(Self {
            slots: slots.clone(),
            slot,
        })
    }

    pub(crate) fn slot(&self) -> u32 {
        self.slot
    }
}

impl Drop for DbSlot {
    fn drop(&mut self) {
        self.slots.free(self.slot);
    }
}
