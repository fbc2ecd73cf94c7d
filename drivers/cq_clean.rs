// SPDX-License-Identifier: GPL-2.0
//! Taking a QP's completions out of a kernel CQ's ring when the QP is reset or destroyed (as
//! mlx5's `__mlx5_ib_cq_clean`). A reset QP's queues start again at index 0 (`wq_record.rs`),
//! so a CQE it left in the ring names a WQE index the new work requests reuse: polled later, it
//! would retire a new work request that was never done (review L2), and a CQE of a destroyed QP
//! hands its consumer a `wr_id` it may have freed. Pure logic over [`CqeSlots`] (no kernel
//! types, no locking: the caller holds the CQ's lock), so that the host runs its tests
//! (`drivers/host/`).

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

#[cfg(test)]
mod tests {
    use super::*;

    struct Ring(Vec<Cqe>);

    impl CqeSlots for Ring {
        fn depth(&self) -> u32 {
            self.0.len() as u32
        }
        fn owner(&self, slot: usize) -> Option<u8> {
            self.0.get(slot).map(|c| c.owner)
        }
        fn read(&self, slot: usize) -> Option<Cqe> {
            self.0.get(slot).copied()
        }
        fn write(&mut self, slot: usize, cqe: Cqe) {
            self.0[slot] = cqe;
        }
    }

    impl Ring {
        /// A zeroed ring: no entry valid on the first pass.
        fn new(depth: usize) -> Self {
            Ring(vec![Cqe::default(); depth])
        }

        /// What the device does: the CQE of `qpn`'s WQE `wqe_index` at free-running `index`.
        fn device_writes(&mut self, index: u32, qpn: u32, wqe_index: u16) {
            let depth = self.depth();
            self.0[(index & (depth - 1)) as usize] = Cqe {
                qp_num: Qpn::from_raw(qpn),
                wqe_index,
                wr_id: u64::from(qpn) << 32 | u64::from(wqe_index),
                owner: owner_for(index, depth),
                ..Default::default()
            };
        }

        /// What a poll from `consumer` returns: (qpn, wqe_index) of each valid CQE in order.
        fn poll(&self, mut consumer: u32) -> Vec<(u32, u16)> {
            let depth = self.depth();
            let mut out = Vec::new();
            loop {
                let cqe = self.0[(consumer & (depth - 1)) as usize];
                if cqe.owner != owner_for(consumer, depth) || out.len() == depth as usize {
                    return out;
                }
                out.push((cqe.qp_num.get(), cqe.wqe_index));
                consumer = consumer.wrapping_add(1);
            }
        }
    }

    #[test]
    fn a_reset_qps_cqes_leave_and_the_others_keep_their_order() {
        let mut ring = Ring::new(8);
        for (index, (qpn, wqe)) in [(5, 0), (9, 0), (5, 1), (9, 1), (5, 2)]
            .into_iter()
            .enumerate()
        {
            ring.device_writes(index as u32, qpn, wqe);
        }
        let consumer = remove_qp_cqes(&mut ring, 0, Qpn::from_raw(5));
        assert_eq!(consumer, 3);
        assert_eq!(ring.poll(consumer), [(9, 0), (9, 1)]);
    }

    #[test]
    fn a_stale_cqe_cannot_reach_the_poll_of_the_reused_queue() {
        // QP 5 posted WQEs 0..3; the device completed 0 and 1; the QP is reset before they
        // were polled and posts again from index 0. Without the clean, the poll would see
        // (5, 0) and (5, 1) and retire the new WQEs 0 and 1 the device has not done.
        let mut ring = Ring::new(4);
        ring.device_writes(0, 5, 0);
        ring.device_writes(1, 5, 1);
        let consumer = remove_qp_cqes(&mut ring, 0, Qpn::from_raw(5));
        assert_eq!(consumer, 2);
        assert!(ring.poll(consumer).is_empty());
        // The device goes on at its producer index 2 with the new WQE 0's completion.
        ring.device_writes(2, 5, 0);
        assert_eq!(ring.poll(consumer), [(5, 0)]);
    }

    #[test]
    fn moved_cqes_take_the_owner_byte_of_their_new_pass() {
        // Consumer at 6 of a 4-deep ring: the valid entries span the wrap (indices 6..10).
        let mut ring = Ring::new(4);
        for index in 0..6 {
            ring.device_writes(index, 1, index as u16);
        }
        ring.device_writes(6, 9, 6);
        ring.device_writes(7, 5, 0);
        ring.device_writes(8, 5, 1);
        ring.device_writes(9, 9, 7);
        let consumer = remove_qp_cqes(&mut ring, 6, Qpn::from_raw(5));
        assert_eq!(consumer, 8);
        assert_eq!(ring.poll(consumer), [(9, 6), (9, 7)]);
        // The device's next CQE (index 10, slot 2) is found after them.
        ring.device_writes(10, 9, 8);
        assert_eq!(ring.poll(consumer), [(9, 6), (9, 7), (9, 8)]);
    }

    #[test]
    fn a_full_ring_and_an_empty_one() {
        let mut ring = Ring::new(4);
        assert_eq!(remove_qp_cqes(&mut ring, 0, Qpn::from_raw(5)), 0);
        for index in 0..4 {
            ring.device_writes(index, if index % 2 == 0 { 5 } else { 7 }, index as u16);
        }
        let consumer = remove_qp_cqes(&mut ring, 0, Qpn::from_raw(5));
        assert_eq!(consumer, 2);
        assert_eq!(ring.poll(consumer), [(7, 1), (7, 3)]);
        // Nothing of QP 7 is removed when another QP is cleaned.
        assert_eq!(
            remove_qp_cqes(&mut ring, consumer, Qpn::from_raw(5)),
            consumer
        );
    }
}
