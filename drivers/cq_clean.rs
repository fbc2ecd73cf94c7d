// SPDX-License-Identifier: GPL-2.0
//! Taking a QP's completions out of a kernel CQ's ring when the QP is reset or destroyed (as
//! mlx5's `__mlx5_ib_cq_clean`). A reset QP's queues start again at index 0 (`wq_record.rs`),
//! so a CQE it left in the ring names a WQE index the new work requests reuse: polled later, it
//! would retire a new work request that was never done (review L2), and a CQE of a destroyed QP
//! hands its consumer a `wr_id` it may have freed. Pure logic over [`CqeSlots`] (no kernel
//! types, no locking: the caller holds the CQ's lock), so that its tests (`logic_tests.rs`) run
//! on the host and in KUnit.

use crate::uapi::{
    ids::Qpn,
    queue::{owner_for, Cqe},
};

/// A CQ ring of `depth()` CQEs as the driver reads and writes it.
pub(crate) trait CqeSlots {
    fn depth(&self) -> u32;
    /// The owner byte of the CQE in `slot` (None: no such slot).
    fn owner(&self, slot: usize) -> Option<u8>;
    fn read(&self, slot: usize) -> Option<Cqe>;
    fn write(&mut self, slot: usize, cqe: Cqe);
}

/// Removes the CQEs of QP `qpn` among those the device has written from free-running consumer
/// index `consumer` on, keeping the others in order; returns the new consumer index.
///
/// The device writes at its producer index and beyond, never below it, so only the CQEs
/// already there are looked at: from the newest back to the consumer, each kept one moves
/// towards the producer end by the number removed after it, with the owner byte of its new
/// index, and the consumer index skips the slots left behind. A CQE the device writes
/// meanwhile lands past them, untouched.
pub(crate) fn remove_qp_cqes(ring: &mut impl CqeSlots, consumer: u32, qpn: Qpn) -> u32 {
    let depth = ring.depth();
    let slot = |index: u32| (index & (depth - 1)) as usize;
    let mut written = 0;
    while written < depth {
        let index = consumer.wrapping_add(written);
        if ring.owner(slot(index)) != Some(owner_for(index, depth)) {
            break;
        }
        written += 1;
    }
    let mut removed = 0u32;
    for back in (0..written).rev() {
        let index = consumer.wrapping_add(back);
        let Some(mut cqe) = ring.read(slot(index)) else {
            continue;
        };
        if cqe.qp_num == qpn {
            removed += 1;
        } else if removed > 0 {
            let to = index.wrapping_add(removed);
            cqe.owner = owner_for(to, depth);
            ring.write(slot(to), cqe);
        }
    }
    consumer.wrapping_add(removed)
}
