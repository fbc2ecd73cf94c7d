// SPDX-License-Identifier: GPL-2.0
//! What rox.ko records of a kernel work queue to complete its work requests in software when
//! the device dies (`dead.rs`): the free-running producer, rung and retired indices and a
//! [`Posted`] per ring slot. Pure logic over a slice (no kernel types, no locking: `wq.rs`
//! holds it under its lock), so that the host runs its unit tests too (`drivers/host/`).
//!
//! Entries retire by the WQE index a polled CQE carries (`queue::Cqe::wqe_index`), never by
//! wr_id: consumers may keep several work requests with one wr_id outstanding.

use crate::uapi::{queue, verbs};
use core::ops::DerefMut;

/// What the driver remembers of a posted work request.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct Posted {
    pub(crate) wr_id: u64,
    /// The device writes a CQE for it on success (unsignaled WRs complete only with an error).
    pub(crate) signaled: bool,
    /// `verbs::WC_OPC_*` its completion carries.
    pub(crate) wc_opcode: u8,
}

impl Posted {
    /// A receive work request (every one gets a CQE).
    pub(crate) fn recv(wr_id: u64) -> Self {
        Self {
            wr_id,
            signaled: true,
            wc_opcode: verbs::WC_OPC_RECV,
        }
    }
}

/// The indices of a kernel work queue of `posted.len()` (a power of two) slots, all
/// free-running: the next entry to post, the value last rung, and the oldest entry whose
/// completion has not been polled yet.
pub(crate) struct WqRecord<S> {
    producer: u32,
    rung: u32,
    retired: u32,
    /// `Posted` of every ring slot, by slot.
    posted: S,
}

impl<S: DerefMut<Target = [Posted]>> WqRecord<S> {
    /// A record of an empty queue with one slot per element of `posted`.
    pub(crate) fn new(posted: S) -> Self {
        debug_assert!(posted.len().is_power_of_two());
        Self {
            producer: 0,
            rung: 0,
            retired: 0,
            posted,
        }
    }

    fn depth(&self) -> u32 {
        self.posted.len() as u32
    }

    /// The slot of free-running index `index`.
    pub(crate) fn slot(&self, index: u32) -> usize {
        (index & (self.depth() - 1)) as usize
    }

    /// The slot the next entry goes to.
    pub(crate) fn next_slot(&self) -> usize {
        self.slot(self.producer)
    }

    /// The entry written at [`Self::next_slot`] is posted.
    pub(crate) fn commit(&mut self, posted: Posted) {
        let slot = self.next_slot();
        if let Some(entry) = self.posted.get_mut(slot) {
            *entry = posted;
        }
        self.producer = self.producer.wrapping_add(1);
    }

    /// The entries outstanding, oldest first: (free-running index of the oldest, count). A
    /// consumer that posted more than the depth overwrote older entries: only the last
    /// `depth` are known.
    fn outstanding(&self) -> (u32, u32) {
        let count = self.producer.wrapping_sub(self.retired).min(self.depth());
        (self.producer.wrapping_sub(count), count)
    }

    /// A CQE of the entry at `wqe_index` was polled: the device consumes the queue in order,
    /// so it and every entry before it (unsignaled ones complete silently) are retired. A CQE
    /// naming nothing outstanding retires nothing.
    pub(crate) fn retire(&mut self, wqe_index: u16) {
        let (oldest, count) = self.outstanding();
        if let Some(offset) = queue::wqe_index_offset(oldest, count, wqe_index) {
            self.retired = oldest.wrapping_add(offset).wrapping_add(1);
        }
    }

    /// The oldest entry posted and not retired, retired now (it completes in software); None
    /// when nothing is outstanding.
    pub(crate) fn retire_oldest(&mut self) -> Option<Posted> {
        let (oldest, count) = self.outstanding();
        if count == 0 {
            return None;
        }
        self.retired = oldest.wrapping_add(1);
        self.posted.get(self.slot(oldest)).copied()
    }

    /// The queue was reset (QP to RESET): its work requests are gone without completions and
    /// its indices start again at 0, as the device's consumer index and doorbell word do (a
    /// producer index carried over would make the device run stale slots, or fail the QP).
    pub(crate) fn reset(&mut self) {
        self.producer = 0;
        self.rung = 0;
        self.retired = 0;
    }

    /// Whether entries are posted and not retired.
    pub(crate) fn has_outstanding(&self) -> bool {
        self.producer != self.retired
    }

    /// The producer index to ring the doorbell with, if entries were posted since the last
    /// ring (it is then taken as rung).
    pub(crate) fn take_unrung(&mut self) -> Option<u32> {
        if self.rung == self.producer {
            return None;
        }
        self.rung = self.producer;
        Some(self.producer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(wr_id: u64, signaled: bool) -> Posted {
        Posted {
            wr_id,
            signaled,
            wc_opcode: verbs::WC_OPC_SEND,
        }
    }

    fn record(depth: usize) -> WqRecord<Vec<Posted>> {
        WqRecord::new(vec![Posted::default(); depth])
    }

    fn drain(wq: &mut WqRecord<Vec<Posted>>) -> Vec<u64> {
        core::iter::from_fn(|| wq.retire_oldest())
            .map(|p| p.wr_id)
            .collect()
    }

    #[test]
    fn a_cqe_retires_its_own_entry_when_outstanding_ones_share_its_wr_id() {
        // A kernel ULP reuses one cookie: entries 0, 1 and 2 all carry wr_id 7.
        let mut wq = record(8);
        for n in 0..3 {
            wq.commit(Posted {
                signaled: n != 1,
                ..send(7, true)
            });
        }
        wq.commit(send(9, true));
        // The CQE of entry 2 (signaled) retires entries 0..=2; by wr_id the oldest
        // signaled match, entry 0, would have been taken and entries 1 and 2 flushed again.
        wq.retire(2);
        let flushed: Vec<u64> = drain(&mut wq);
        assert_eq!(flushed, [9]);
    }

    #[test]
    fn an_error_cqe_of_an_unsignaled_entry_retires_it_and_those_before() {
        let mut wq = record(4);
        wq.commit(send(1, false));
        wq.commit(send(1, false));
        wq.commit(send(1, true));
        wq.retire(1);
        assert_eq!(wq.retire_oldest(), Some(send(1, true)));
        assert_eq!(wq.retire_oldest(), None);
        assert!(!wq.has_outstanding());
    }

    #[test]
    fn a_cqe_naming_nothing_outstanding_retires_nothing() {
        let mut wq = record(4);
        wq.commit(send(1, true));
        wq.commit(send(2, true));
        wq.retire(0);
        // Entry 0 again (a stale or wild CQE), and an index never posted.
        wq.retire(0);
        wq.retire(5);
        assert_eq!(drain(&mut wq), [2]);
    }

    #[test]
    fn retirement_follows_the_index_across_the_16_bit_wrap() {
        let mut wq = record(16);
        // 0xfffe entries posted and completed one by one, as a long-running ULP does.
        for n in 0..0xfffeu32 {
            wq.commit(send(u64::from(n), true));
            wq.retire(n as u16);
        }
        assert!(!wq.has_outstanding());
        for n in 0xfffeu32..0x1_0003 {
            wq.commit(send(u64::from(n), true));
        }
        // The CQE of the entry at 0x1_0001 carries 0x0001.
        wq.retire(0x0001);
        assert_eq!(drain(&mut wq), [0x1_0002]);
    }

    #[test]
    fn overposting_keeps_the_last_depth_entries() {
        let mut wq = record(4);
        for n in 0..6 {
            wq.commit(send(n, true));
        }
        // Entries 0 and 1 were overwritten in their slots; a CQE of entry 1 names nothing
        // known, one of entry 3 retires up to it.
        wq.retire(1);
        assert_eq!(wq.outstanding(), (2, 4));
        wq.retire(3);
        assert_eq!(drain(&mut wq), [4, 5]);
    }

    #[test]
    fn receives_with_one_wr_id_retire_one_by_one() {
        let mut wq = record(4);
        for _ in 0..3 {
            wq.commit(Posted::recv(5));
        }
        wq.retire(0);
        wq.retire(1);
        assert_eq!(wq.retire_oldest(), Some(Posted::recv(5)));
        assert_eq!(wq.retire_oldest(), None);
    }

    #[test]
    fn reset_forgets_entries_and_restarts_the_indices() {
        let mut wq = record(4);
        wq.commit(send(1, true));
        assert_eq!(wq.take_unrung(), Some(1));
        assert_eq!(wq.take_unrung(), None);
        wq.reset();
        assert!(!wq.has_outstanding());
        assert_eq!(wq.next_slot(), 0);
        wq.commit(send(2, true));
        assert_eq!(wq.take_unrung(), Some(1));
        wq.retire(0);
        assert!(!wq.has_outstanding());
    }
}
