//! Bookkeeping of one work queue (SQ, RQ or SRQ) on the software side.
//!
//! The WQE librox writes carries, as its `wr_id`, the free-running index of its ring slot; the
//! device copies it into the CQE, so a completion names its slot. The caller's wr_id lives here,
//! per slot. Send and RQ completions come back in ring order (one CQE may stand for earlier
//! unsignaled WQEs too); SRQ completions may come back out of order across QPs, so each slot
//! is freed on its own and the consumer index advances over freed slots.

#![deny(unsafe_code)]

use crate::sys::errno::{Result, EINVAL};
use crate::sys::lock::Locked;
use crate::sys::memory::{RingEntry, SlotRing};
use rox_uapi::admin::DEV_MIN_LOG_DEPTH;

/// Smallest ring the device accepts (`admin::DEV_MIN_LOG_DEPTH`).
const MIN_RING_DEPTH: u32 = 1 << DEV_MIN_LOG_DEPTH;

/// Number of entries of a ring that must hold at least `wanted` entries: the next power of two,
/// at least the device's minimum, or `None` above `max`.
pub fn ring_depth(wanted: u32, max: u32) -> Option<u32> {
    let depth = wanted.max(MIN_RING_DEPTH).checked_next_power_of_two()?;
    (depth <= max).then_some(depth)
}

/// A ring of WQEs in librox's memory (pinned by rox.ko) with its bookkeeping, behind the lock
/// posting and completion processing take. The buffer lives inside the lock too, so an SRQ
/// resize can swap it while nobody posts.
pub type Ring = Locked<WorkQueue>;

/// A zeroed ring of `depth` (a power of two) entries of `1 << entry_shift` bytes.
pub fn new_ring(depth: u32, entry_shift: u32, order: CompletionOrder) -> Result<Ring> {
    Ok(Locked::new(WorkQueue::new(depth, entry_shift, order)?))
}

/// One work queue's ring buffer, producer/consumer indices (free-running, wrapping u32, as
/// the doorbell carries them) and the wr_id of every ring slot.
pub struct WorkQueue {
    ring: SlotRing,
    entry_shift: u32,
    depth: u32,
    /// Entries that may be outstanding: `depth`, or 0 for a queue created with no work requests
    /// (a send-only or receive-only QP keeps a ring of the device's smallest depth that nothing
    /// is ever posted to).
    capacity: u32,
    /// Next index to post at.
    pi: u32,
    /// Oldest index not completed yet.
    ci: u32,
    wr_ids: Box<[u64]>,
    /// Out-of-order queues (SRQ): slots completed while an older one is still outstanding.
    done: Option<Box<[bool]>>,
}

/// How completions of a queue arrive.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CompletionOrder {
    /// SQ and RQ: a completion also retires every older slot.
    InOrder,
    /// SRQ: each completion retires its own slot only.
    AnyOrder,
}

impl WorkQueue {
    pub fn new(depth: u32, entry_shift: u32, order: CompletionOrder) -> Result<Self> {
        assert!(depth.is_power_of_two());
        let slots = depth as usize;
        Ok(WorkQueue {
            ring: SlotRing::new(depth, entry_shift)?,
            entry_shift,
            depth,
            capacity: depth,
            pi: 0,
            ci: 0,
            wr_ids: vec![0; slots].into_boxed_slice(),
            done: (order == CompletionOrder::AnyOrder)
                .then(|| vec![false; slots].into_boxed_slice()),
        })
    }

    /// User virtual address of the ring (what rox.ko pins).
    pub fn buf_addr(&self) -> u64 {
        self.ring.addr()
    }

    /// Store the entry of free-running index `index` (a slot [`Self::next_index`] gave).
    #[inline]
    pub fn write<T: RingEntry>(&mut self, index: u32, entry: T) {
        self.ring.write(index, entry);
    }

    /// The entry of free-running index `index`, for formatting in place.
    pub fn entry_mut<T: RingEntry>(&mut self, index: u32) -> &mut T {
        self.ring.slot_mut(index)
    }

    /// A copy of the entry of free-running index `index`.
    #[cfg(test)]
    pub fn read<T: RingEntry>(&self, index: u32) -> T {
        self.ring.read(index)
    }

    /// A new ring of `depth` entries holding a copy of every entry not completed yet, at the
    /// same free-running index (for a resize: the device keeps reading at its own consumer
    /// index, which lies among them). EINVAL if they do not fit.
    pub fn resized_copy(&self, depth: u32) -> Result<SlotRing> {
        let outstanding = self.pi.wrapping_sub(self.ci);
        if !depth.is_power_of_two() || outstanding > depth {
            return Err(EINVAL);
        }
        let mut ring = SlotRing::new(depth, self.entry_shift)?;
        for k in 0..outstanding {
            ring.copy_slot_from(&self.ring, self.ci.wrapping_add(k));
        }
        Ok(ring)
    }

    /// Switch to `ring` (made by [`Self::resized_copy`]), keeping every outstanding entry's
    /// wr_id and completion state under its index. Returns the old ring.
    pub fn install(&mut self, ring: SlotRing) -> SlotRing {
        let depth = ring.depth();
        let slots = depth as usize;
        let mut wr_ids = vec![0; slots].into_boxed_slice();
        let mut done = self
            .done
            .as_ref()
            .map(|_| vec![false; slots].into_boxed_slice());
        let outstanding = self.pi.wrapping_sub(self.ci);
        for k in 0..outstanding {
            let index = self.ci.wrapping_add(k);
            let (old, new) = (self.slot(index), (index & (depth - 1)) as usize);
            wr_ids[new] = self.wr_ids[old];
            if let (Some(d), Some(old_done)) = (done.as_deref_mut(), self.done.as_deref()) {
                d[new] = old_done[old];
            }
        }
        self.wr_ids = wr_ids;
        self.done = done;
        self.depth = depth;
        self.capacity = depth;
        core::mem::replace(&mut self.ring, ring)
    }

    /// Make the queue take no work requests (it was created with none): posting is ENOMEM.
    pub fn disable(&mut self) {
        self.capacity = 0;
    }

    /// The producer index (what the doorbell announces).
    pub fn pi(&self) -> u32 {
        self.pi
    }

    pub fn is_full(&self) -> bool {
        self.pi.wrapping_sub(self.ci) >= self.capacity
    }

    fn slot(&self, index: u32) -> usize {
        (index & (self.depth - 1)) as usize
    }

    /// Reserve the next slot for `wr_id`; returns its index (the caller writes the WQE there,
    /// then [`Self::commit`]s). `None` when the queue is full.
    pub fn next_index(&self) -> Option<u32> {
        (!self.is_full()).then_some(self.pi)
    }

    /// The WQE at the index [`Self::next_index`] gave is written: account for it.
    pub fn commit(&mut self, wr_id: u64) {
        let slot = self.slot(self.pi);
        self.wr_ids[slot] = wr_id;
        self.pi = self.pi.wrapping_add(1);
    }

    /// A completion for slot `index`: the caller's wr_id, or `None` if `index` is not an
    /// outstanding slot (a completion this queue does not know; the slot state is unchanged).
    pub fn complete(&mut self, index: u32) -> Option<u64> {
        let outstanding = self.pi.wrapping_sub(self.ci);
        if index.wrapping_sub(self.ci) >= outstanding {
            return None;
        }
        let slot = self.slot(index);
        let wr_id = self.wr_ids[slot];
        match self.done.as_deref_mut() {
            None => self.ci = index.wrapping_add(1),
            Some(done) => {
                if done[slot] {
                    return None;
                }
                done[slot] = true;
                let mask = self.depth - 1;
                while self.ci != self.pi && done[(self.ci & mask) as usize] {
                    done[(self.ci & mask) as usize] = false;
                    self.ci = self.ci.wrapping_add(1);
                }
            }
        }
        Some(wr_id)
    }

    /// Forget the WQEs committed since the producer index was `pi` (never announced to the
    /// device: an aborted `ibv_wr_start` batch).
    pub fn rollback(&mut self, pi: u32) {
        debug_assert!(self.pi.wrapping_sub(pi) <= self.pi.wrapping_sub(self.ci));
        self.pi = pi;
    }

    /// Back to empty at index 0 (QP moved to RESET: the device restarts its indices at 0).
    pub fn reset(&mut self) {
        self.pi = 0;
        self.ci = 0;
        if let Some(done) = self.done.as_deref_mut() {
            done.fill(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_depth_rounds_up_to_a_power_of_two_within_the_limit() {
        assert_eq!(ring_depth(0, 16), Some(MIN_RING_DEPTH));
        assert_eq!(ring_depth(1, 16), Some(MIN_RING_DEPTH));
        assert_eq!(ring_depth(5, 16), Some(8));
        assert_eq!(ring_depth(16, 16), Some(16));
        assert_eq!(ring_depth(17, 16), None);
        assert_eq!(ring_depth(u32::MAX, u32::MAX), None);
    }

    fn post(wq: &mut WorkQueue, wr_id: u64) -> Option<u32> {
        let index = wq.next_index()?;
        wq.commit(wr_id);
        Some(index)
    }

    #[test]
    fn a_queue_created_with_no_work_requests_takes_none() {
        let mut wq = WorkQueue::new(2, 7, CompletionOrder::InOrder).unwrap();
        wq.disable();
        assert!(wq.is_full());
        assert_eq!(post(&mut wq, 1), None);
        wq.reset();
        assert_eq!(post(&mut wq, 1), None, "still none after a reset");
        assert_eq!(wq.complete(0), None);
    }

    #[test]
    fn in_order_completion_retires_older_unsignaled_slots() {
        let mut wq = WorkQueue::new(4, 7, CompletionOrder::InOrder).unwrap();
        for id in 10..14 {
            post(&mut wq, id).expect("room");
        }
        assert!(wq.is_full());
        assert_eq!(post(&mut wq, 99), None);
        // One signaled completion for the third WQE frees the first three.
        assert_eq!(wq.complete(2), Some(12));
        assert_eq!(post(&mut wq, 14), Some(4));
        assert_eq!(post(&mut wq, 15), Some(5));
        assert_eq!(post(&mut wq, 16), Some(6));
        assert_eq!(post(&mut wq, 17), None);
        // A stale or unknown index changes nothing.
        assert_eq!(wq.complete(1), None);
        assert_eq!(wq.complete(7), None);
        assert_eq!(wq.complete(3), Some(13));
        assert_eq!(wq.complete(6), Some(16));
        assert!(!wq.is_full());
        assert_eq!(wq.pi(), 7);
    }

    #[test]
    fn indices_wrap_around_u32() {
        let mut wq = WorkQueue::new(2, 7, CompletionOrder::InOrder).unwrap();
        wq.pi = u32::MAX;
        wq.ci = u32::MAX;
        assert_eq!(post(&mut wq, 1), Some(u32::MAX));
        assert_eq!(post(&mut wq, 2), Some(0));
        assert!(wq.is_full());
        assert_eq!(wq.complete(0), Some(2));
        assert_eq!(wq.pi(), 1);
        assert!(!wq.is_full());
    }

    #[test]
    fn any_order_frees_slots_as_they_complete() {
        let mut wq = WorkQueue::new(4, 7, CompletionOrder::AnyOrder).unwrap();
        for id in 0..4 {
            post(&mut wq, 100 + id).expect("room");
        }
        assert_eq!(wq.complete(2), Some(102));
        assert!(wq.is_full(), "slot 0 is still outstanding");
        assert_eq!(wq.complete(2), None, "completed twice");
        assert_eq!(wq.complete(0), Some(100));
        assert_eq!(post(&mut wq, 104), Some(4));
        assert!(wq.is_full());
        assert_eq!(wq.complete(1), Some(101));
        // 1 and 2 are done: two slots free.
        assert_eq!(post(&mut wq, 105), Some(5));
        assert_eq!(post(&mut wq, 106), Some(6));
        assert_eq!(post(&mut wq, 107), None);
    }

    #[test]
    fn reset_empties() {
        let mut wq = WorkQueue::new(2, 7, CompletionOrder::AnyOrder).unwrap();
        post(&mut wq, 1);
        post(&mut wq, 2);
        assert_eq!(wq.complete(1), Some(2));
        wq.reset();
        assert_eq!(wq.pi(), 0);
        assert_eq!(post(&mut wq, 3), Some(0));
        assert_eq!(post(&mut wq, 4), Some(1));
        assert_eq!(wq.complete(1), Some(4));
        assert_eq!(wq.complete(0), Some(3));
    }

    #[test]
    fn resize_keeps_outstanding_entries_and_wr_ids() {
        let mut wq = WorkQueue::new(4, 7, CompletionOrder::AnyOrder).unwrap();
        // Indices 0..6 posted over time; 0, 1 and 3 completed: 2, 4, 5 outstanding (ci = 2).
        for id in 0..4 {
            let i = post(&mut wq, 100 + id).unwrap();
            wq.write(i, [i as u8; 128]);
        }
        assert_eq!(wq.complete(0), Some(100));
        assert_eq!(wq.complete(1), Some(101));
        assert_eq!(wq.complete(3), Some(103));
        for id in 4..6 {
            let i = post(&mut wq, 100 + id).unwrap();
            wq.write(i, [i as u8; 128]);
        }
        assert!(wq.resized_copy(2).is_err(), "indices 2..=5 do not fit in 2");
        let ring = wq.resized_copy(8).unwrap();
        let old = wq.install(ring);
        drop(old);
        assert_eq!(wq.depth, 8);
        for i in [2u32, 4, 5] {
            assert_eq!(wq.read::<[u8; 128]>(i), [i as u8; 128]);
        }
        // Indices 2..=5 still occupy the ring (3 is done, 2 is not): four more fit.
        for id in 6..10 {
            assert_eq!(post(&mut wq, 100 + id), Some(id as u32));
        }
        assert_eq!(post(&mut wq, 99), None);
        assert_eq!(wq.complete(4), Some(104));
        assert_eq!(wq.complete(3), None, "completed before the resize");
        assert_eq!(wq.complete(2), Some(102));
        assert_eq!(wq.complete(9), Some(109));
        assert_eq!(wq.complete(5), Some(105));
        assert_eq!(post(&mut wq, 110), Some(10));
    }
}
