// SPDX-License-Identifier: GPL-2.0
//! KUnit suites of rox.ko's pure logic, in the module as the kernel's compiler built it:
//! `rox_wq_record` (`wq_record.rs`: retiring work requests by WQE index) and `rox_cq_clean`
//! (`cq_clean.rs`: a reset QP's CQEs taken out of a CQ ring). `#[kunit_tests]` compiles them
//! only when the kernel has CONFIG_KUNIT=y (rox's debug kernel) and the kernel runs them when
//! rox.ko loads; KTAP results in dmesg and debugfs, judged by tests/guest/t-driver-kunit.sh.
//! The host runs fuller unit tests of the same files (`drivers/host/`); these use fixed arrays
//! (no allocation) and keep their checks in the test functions, where `#[kunit_tests]` turns
//! `assert!` and `assert_eq!` into KUnit assertions.

use kernel::prelude::*;

#[kunit_tests(rox_wq_record)]
mod wq_record_suite {
    use crate::uapi::verbs;
    use crate::wq_record::{Posted, WqRecord};

    fn send(wr_id: u64, signaled: bool) -> Posted {
        Posted {
            wr_id,
            signaled,
            wc_opcode: verbs::WC_OPC_SEND,
        }
    }

    #[test]
    fn a_cqe_retires_its_own_entry_when_outstanding_ones_share_its_wr_id() {
        // Entries 0, 1 (unsignaled) and 2 all carry wr_id 7: entry 2's CQE retires 0..=2,
        // where a match by wr_id would take entry 0 and leave 1 and 2 to be flushed again.
        let mut slots = [Posted::default(); 8];
        let mut wq = WqRecord::new(&mut slots[..]);
        for n in 0..3 {
            wq.commit(send(7, n != 1));
        }
        wq.commit(send(9, true));
        wq.retire(2);
        assert_eq!(wq.retire_oldest(), Some(send(9, true)));
        assert_eq!(wq.retire_oldest(), None);
    }

    #[test]
    fn a_cqe_naming_nothing_outstanding_retires_nothing() {
        let mut slots = [Posted::default(); 4];
        let mut wq = WqRecord::new(&mut slots[..]);
        wq.commit(send(1, true));
        wq.commit(send(2, true));
        wq.retire(0);
        wq.retire(0);
        wq.retire(5);
        assert_eq!(wq.retire_oldest(), Some(send(2, true)));
        assert_eq!(wq.retire_oldest(), None);
    }

    #[test]
    fn retirement_follows_the_index_across_the_16_bit_wrap() {
        let mut slots = [Posted::default(); 16];
        let mut wq = WqRecord::new(&mut slots[..]);
        for n in 0..0xfffeu32 {
            wq.commit(send(u64::from(n), true));
            wq.retire(n as u16);
        }
        assert!(!wq.has_outstanding());
        for n in 0xfffeu32..0x1_0003 {
            wq.commit(send(u64::from(n), true));
        }
        // The CQE of the entry at 0x1_0001 carries WQE index 0x0001.
        wq.retire(0x0001);
        assert_eq!(wq.retire_oldest(), Some(send(0x1_0002, true)));
        assert_eq!(wq.retire_oldest(), None);
    }

    #[test]
    fn reset_forgets_entries_and_restarts_the_indices() {
        let mut slots = [Posted::default(); 4];
        let mut wq = WqRecord::new(&mut slots[..]);
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

#[kunit_tests(rox_cq_clean)]
mod cq_clean_suite {
    use crate::cq_clean::{remove_qp_cqes, CqeSlots};
    use crate::uapi::{
        ids::Qpn,
        queue::{owner_for, Cqe},
    };

    /// A CQ ring of `N` (a power of two) CQEs in an array.
    struct Ring<const N: usize>([Cqe; N]);

    impl<const N: usize> CqeSlots for Ring<N> {
        fn depth(&self) -> u32 {
            N as u32
        }
        fn owner(&self, slot: usize) -> Option<u8> {
            self.0.get(slot).map(|c| c.owner)
        }
        fn read(&self, slot: usize) -> Option<Cqe> {
            self.0.get(slot).copied()
        }
        fn write(&mut self, slot: usize, cqe: Cqe) {
            if let Some(entry) = self.0.get_mut(slot) {
                *entry = cqe;
            }
        }
    }

    impl<const N: usize> Ring<N> {
        fn new() -> Self {
            Ring([Cqe::default(); N])
        }

        /// What the device does: the CQE of `qpn`'s WQE `wqe_index` at free-running `index`.
        fn device_writes(&mut self, index: u32, qpn: u32, wqe_index: u16) {
            self.0[(index as usize) & (N - 1)] = Cqe {
                qp_num: Qpn::from_raw(qpn),
                wqe_index,
                owner: owner_for(index, N as u32),
                ..Default::default()
            };
        }

        /// The (qpn, wqe_index) of the valid CQE a poll at free-running `index` finds.
        fn polled(&self, index: u32) -> Option<(u32, u16)> {
            let cqe = self.0[(index as usize) & (N - 1)];
            (cqe.owner == owner_for(index, N as u32)).then(|| (cqe.qp_num.get(), cqe.wqe_index))
        }
    }

    #[test]
    fn a_reset_qps_cqes_leave_and_the_others_keep_their_order() {
        let mut ring = Ring::<8>::new();
        for (index, (qpn, wqe)) in [(5, 0), (9, 0), (5, 1), (9, 1), (5, 2)]
            .into_iter()
            .enumerate()
        {
            ring.device_writes(index as u32, qpn, wqe);
        }
        let consumer = remove_qp_cqes(&mut ring, 0, Qpn::from_raw(5));
        assert_eq!(consumer, 3);
        assert_eq!(ring.polled(3), Some((9, 0)));
        assert_eq!(ring.polled(4), Some((9, 1)));
        assert_eq!(ring.polled(5), None);
    }

    #[test]
    fn moved_cqes_take_the_owner_byte_of_their_new_pass() {
        // Consumer at 6 of a 4-deep ring: the valid entries span the wrap (indices 6..10).
        let mut ring = Ring::<4>::new();
        for index in 0..6 {
            ring.device_writes(index, 1, index as u16);
        }
        ring.device_writes(6, 9, 6);
        ring.device_writes(7, 5, 0);
        ring.device_writes(8, 5, 1);
        ring.device_writes(9, 9, 7);
        let consumer = remove_qp_cqes(&mut ring, 6, Qpn::from_raw(5));
        assert_eq!(consumer, 8);
        assert_eq!(ring.polled(8), Some((9, 6)));
        assert_eq!(ring.polled(9), Some((9, 7)));
        assert_eq!(ring.polled(10), None);
    }
}
