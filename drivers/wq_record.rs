// SPDX-License-Identifier: GPL-2.0
//! What rox.ko records of a kernel work queue to complete its work requests in software when
//! the device dies (`dead.rs`): the free-running producer, rung and retired indices and a
//! [`Posted`] per ring slot. Pure logic over a slice (no kernel types, no locking: `wq.rs`
//! holds it under its lock), so that its tests (`logic_tests.rs`) run on the host and in KUnit.
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
    /// A local operation (`verbs::wr_opcode_is_local`): the device executes it without
    /// sending a packet, so its doorbell must wake the device however full the port's flight
    /// (`slot_store::SlotStore::sq`).
    pub(crate) local: bool,
}

impl Posted {
    /// A receive work request (every one gets a CQE).
    pub(crate) fn recv(wr_id: u64) -> Self {
        Self {
            wr_id,
            signaled: true,
            wc_opcode: verbs::WC_OPC_RECV,
            local: false,
        }
    }
}

/// What a doorbell tells the device of the entries posted since the last one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unrung {
    /// The producer index to ring with.
    pub(crate) producer: u32,
    /// None of them is a local operation ([`Posted::local`]): all send packets.
    pub(crate) packets_only: bool,
}

/// The indices of a kernel work queue of `posted.len()` (a power of two) slots, all
/// free-running: the next entry to post, the value last rung, and the oldest entry whose
/// completion has not been polled yet.
pub(crate) struct WqRecord<S> {
    producer: u32,
    rung: u32,
    retired: u32,
    /// An entry posted since the last ring is a local operation.
    unrung_local: bool,
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
            unrung_local: false,
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
        self.unrung_local |= posted.local;
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
        self.unrung_local = false;
    }

    /// Whether entries are posted and not retired.
    pub(crate) fn has_outstanding(&self) -> bool {
        self.producer != self.retired
    }

    /// What to ring the doorbell with, if entries were posted since the last ring (they are
    /// then taken as rung).
    pub(crate) fn take_unrung(&mut self) -> Option<Unrung> {
        if self.rung == self.producer {
            return None;
        }
        self.rung = self.producer;
        let packets_only = !core::mem::take(&mut self.unrung_local);
        Some(Unrung {
            producer: self.producer,
            packets_only,
        })
    }
}
