// SPDX-License-Identifier: GPL-2.0
//! The tests of rox.ko's pure logic, written once and run twice: `wq_record.rs` (retiring work
//! requests by WQE index), `cq_clean.rs` (a reset QP's CQEs taken out of a CQ ring),
//! `cut_off.rs` (a companion's removal against a create of a cut-off context) and
//! `slot_store.rs` (what a doorbell slot store asks of the device) and `query_len.rs` (what the
//! driver takes of a query's response).
//!
//! - On the host, `cargo test -p rox-driver-host-tests` (`drivers/host/` includes this file by
//!   path): every `#[test]` below is a plain unit test.
//! - In rox.ko, on a kernel with CONFIG_KUNIT=y (rox's debug kernel; rox_main.rs includes this
//!   file only there): `#[kunit_tests]` makes each module a KUnit suite (`rox_wq_record`,
//!   `rox_cq_clean`, `rox_cut_off`, `rox_slot_store`, `rox_query_len`) and each `#[test]` a
//!   case of the same name, which the kernel runs when rox.ko loads; KTAP in dmesg and
//!   debugfs, judged by tests/guest/t-driver-kunit.sh.
//!
//! So the cases need no allocation (fixed arrays) and no `assert!` (KUnit's replaces it only
//! in the test functions themselves, not in their helpers): each returns a [`Checked`], and
//! [`check!`] fails it with the file, line and condition of the first check that did not hold.
//! KUnit fails a case whose `Result` is an `Err`; the kernel build also logs the failed check.

/// A case's outcome: `Err` names the check that failed.
type Checked = Result<(), &'static str>;

/// The condition must hold, or the case fails here.
macro_rules! check {
    ($cond:expr) => {
        if !$cond {
            return failed(concat!(
                file!(),
                ":",
                line!(),
                ": check failed: ",
                stringify!($cond)
            ));
        }
    };
}

#[cfg(not(CONFIG_KUNIT = "y"))]
fn failed(check: &'static str) -> Checked {
    Err(check)
}

/// KUnit reports only that the case returned an `Err`: the check that failed goes to the log.
#[cfg(CONFIG_KUNIT = "y")]
fn failed(check: &'static str) -> Checked {
    kernel::pr_err!("KUnit: {}\n", check);
    Err(check)
}

#[cfg_attr(CONFIG_KUNIT = "y", kernel::prelude::kunit_tests(rox_wq_record))]
mod wq_record_suite {
    use super::{failed, Checked};
    use crate::uapi::verbs;
    use crate::wq_record::{Posted, Unrung, WqRecord};

    fn send(wr_id: u64, signaled: bool) -> Posted {
        Posted {
            wr_id,
            signaled,
            wc_opcode: verbs::WC_OPC_SEND,
            local: false,
        }
    }

    /// A ring of the entries up to `producer`, all of which send packets.
    fn packets(producer: u32) -> Option<Unrung> {
        Some(Unrung {
            producer,
            packets_only: true,
        })
    }

    /// Whether retiring the oldest entry one by one yields exactly the wr_ids `expected`.
    fn drains_to(wq: &mut WqRecord<&mut [Posted]>, expected: &[u64]) -> bool {
        expected
            .iter()
            .all(|&wr_id| wq.retire_oldest().map(|p| p.wr_id) == Some(wr_id))
            && wq.retire_oldest().is_none()
    }

    #[test]
    fn a_cqe_retires_its_own_entry_when_outstanding_ones_share_its_wr_id() -> Checked {
        // A kernel ULP reuses one cookie: entries 0, 1 (unsignaled) and 2 all carry wr_id 7.
        let mut slots = [Posted::default(); 8];
        let mut wq = WqRecord::new(&mut slots[..]);
        for n in 0..3 {
            wq.commit(send(7, n != 1));
        }
        wq.commit(send(9, true));
        // The CQE of entry 2 retires entries 0..=2; by wr_id the oldest signaled match, entry
        // 0, would have been taken and entries 1 and 2 flushed again.
        wq.retire(2);
        check!(wq.retire_oldest() == Some(send(9, true)));
        check!(wq.retire_oldest().is_none());
        Ok(())
    }

    #[test]
    fn an_error_cqe_of_an_unsignaled_entry_retires_it_and_those_before() -> Checked {
        let mut slots = [Posted::default(); 4];
        let mut wq = WqRecord::new(&mut slots[..]);
        wq.commit(send(1, false));
        wq.commit(send(1, false));
        wq.commit(send(1, true));
        wq.retire(1);
        check!(wq.retire_oldest() == Some(send(1, true)));
        check!(wq.retire_oldest().is_none());
        check!(!wq.has_outstanding());
        Ok(())
    }

    #[test]
    fn a_cqe_naming_nothing_outstanding_retires_nothing() -> Checked {
        let mut slots = [Posted::default(); 4];
        let mut wq = WqRecord::new(&mut slots[..]);
        wq.commit(send(1, true));
        wq.commit(send(2, true));
        wq.retire(0);
        // Entry 0 again (a stale or wild CQE), and an index never posted.
        wq.retire(0);
        wq.retire(5);
        check!(drains_to(&mut wq, &[2]));
        Ok(())
    }

    #[test]
    fn retirement_follows_the_index_across_the_16_bit_wrap() -> Checked {
        let mut slots = [Posted::default(); 16];
        let mut wq = WqRecord::new(&mut slots[..]);
        // 0xfffe entries posted and completed one by one, as a long-running ULP does.
        for n in 0..0xfffeu32 {
            wq.commit(send(u64::from(n), true));
            wq.retire(n as u16);
        }
        check!(!wq.has_outstanding());
        for n in 0xfffeu32..0x1_0003 {
            wq.commit(send(u64::from(n), true));
        }
        // The CQE of the entry at 0x1_0001 carries WQE index 0x0001.
        wq.retire(0x0001);
        check!(drains_to(&mut wq, &[0x1_0002]));
        Ok(())
    }

    #[test]
    fn overposting_keeps_the_last_depth_entries() -> Checked {
        let mut slots = [Posted::default(); 4];
        let mut wq = WqRecord::new(&mut slots[..]);
        for n in 0..6 {
            wq.commit(send(n, true));
        }
        // Entries 0 and 1 were overwritten in their slots; a CQE of entry 1 names nothing
        // known (entry 2 is still the oldest outstanding), one of entry 3 retires up to it.
        wq.retire(1);
        check!(wq.retire_oldest() == Some(send(2, true)));
        wq.retire(3);
        check!(drains_to(&mut wq, &[4, 5]));
        Ok(())
    }

    #[test]
    fn receives_with_one_wr_id_retire_one_by_one() -> Checked {
        let mut slots = [Posted::default(); 4];
        let mut wq = WqRecord::new(&mut slots[..]);
        for _ in 0..3 {
            wq.commit(Posted::recv(5));
        }
        wq.retire(0);
        wq.retire(1);
        check!(wq.retire_oldest() == Some(Posted::recv(5)));
        check!(wq.retire_oldest().is_none());
        Ok(())
    }

    #[test]
    fn reset_forgets_entries_and_restarts_the_indices() -> Checked {
        let mut slots = [Posted::default(); 4];
        let mut wq = WqRecord::new(&mut slots[..]);
        wq.commit(send(1, true));
        check!(wq.take_unrung() == packets(1));
        check!(wq.take_unrung().is_none());
        wq.reset();
        check!(!wq.has_outstanding());
        check!(wq.next_slot() == 0);
        wq.commit(send(2, true));
        check!(wq.take_unrung() == packets(1));
        wq.retire(0);
        check!(!wq.has_outstanding());
        Ok(())
    }

    /// An RC SQ's ring may skip the wake only if no entry since the last ring is a local
    /// operation (`SlotStore::sq`): one among packets makes the whole ring wake, and the next
    /// ring of packets alone may skip it again.
    #[test]
    fn a_ring_says_whether_an_entry_since_the_last_one_is_a_local_operation() -> Checked {
        let mut slots = [Posted::default(); 8];
        let mut wq = WqRecord::new(&mut slots[..]);
        let local_inv = Posted {
            wc_opcode: verbs::WC_OPC_LOCAL_INV,
            local: true,
            ..send(2, true)
        };
        wq.commit(send(1, false));
        wq.commit(local_inv);
        wq.commit(send(3, true));
        let with_local = Some(Unrung {
            producer: 3,
            packets_only: false,
        });
        check!(wq.take_unrung() == with_local);
        wq.commit(send(4, true));
        check!(wq.take_unrung() == packets(4));
        // A local operation posted and then reset away is not the next ring's.
        wq.commit(local_inv);
        wq.reset();
        wq.commit(send(5, true));
        check!(wq.take_unrung() == packets(1));
        Ok(())
    }
}

#[cfg_attr(CONFIG_KUNIT = "y", kernel::prelude::kunit_tests(rox_cq_clean))]
mod cq_clean_suite {
    use super::{failed, Checked};
    use crate::cq_clean::{remove_qp_cqes, CqeSlots};
    use crate::uapi::{
        ids::Qpn,
        queue::{owner_for, Cqe},
    };

    /// A CQ ring of `N` (a power of two) CQEs in an array, zeroed: no entry valid on the
    /// first pass.
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

        fn at(index: u32) -> usize {
            (index as usize) & (N - 1)
        }

        /// What the device does: the CQE of `qpn`'s WQE `wqe_index` at free-running `index`.
        fn device_writes(&mut self, index: u32, qpn: u32, wqe_index: u16) {
            self.0[Self::at(index)] = Cqe {
                qp_num: Qpn::from_raw(qpn),
                wqe_index,
                wr_id: (u64::from(qpn) << 32) | u64::from(wqe_index),
                owner: owner_for(index, N as u32),
                ..Default::default()
            };
        }

        /// Whether a poll from `consumer` finds exactly the valid CQEs `expected`, as (qpn,
        /// wqe_index) in order, and then none.
        fn polls_to(&self, consumer: u32, expected: &[(u32, u16)]) -> bool {
            let polled = |index: u32| {
                let cqe = self.0[Self::at(index)];
                (cqe.owner == owner_for(index, N as u32)).then(|| (cqe.qp_num.get(), cqe.wqe_index))
            };
            let mut index = consumer;
            for &want in expected {
                if polled(index) != Some(want) {
                    return false;
                }
                index = index.wrapping_add(1);
            }
            expected.len() == N || polled(index).is_none()
        }
    }

    #[test]
    fn a_reset_qps_cqes_leave_and_the_others_keep_their_order() -> Checked {
        let mut ring = Ring::<8>::new();
        for (index, (qpn, wqe)) in [(5, 0), (9, 0), (5, 1), (9, 1), (5, 2)]
            .into_iter()
            .enumerate()
        {
            ring.device_writes(index as u32, qpn, wqe);
        }
        let consumer = remove_qp_cqes(&mut ring, 0, Qpn::from_raw(5));
        check!(consumer == 3);
        check!(ring.polls_to(consumer, &[(9, 0), (9, 1)]));
        Ok(())
    }

    #[test]
    fn a_stale_cqe_cannot_reach_the_poll_of_the_reused_queue() -> Checked {
        // QP 5 posted WQEs 0..3; the device completed 0 and 1; the QP is reset before they
        // were polled and posts again from index 0. Without the clean, the poll would see
        // (5, 0) and (5, 1) and retire the new WQEs 0 and 1 the device has not done.
        let mut ring = Ring::<4>::new();
        ring.device_writes(0, 5, 0);
        ring.device_writes(1, 5, 1);
        let consumer = remove_qp_cqes(&mut ring, 0, Qpn::from_raw(5));
        check!(consumer == 2);
        check!(ring.polls_to(consumer, &[]));
        // The device goes on at its producer index 2 with the new WQE 0's completion.
        ring.device_writes(2, 5, 0);
        check!(ring.polls_to(consumer, &[(5, 0)]));
        Ok(())
    }

    #[test]
    fn moved_cqes_take_the_owner_byte_of_their_new_pass() -> Checked {
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
        check!(consumer == 8);
        check!(ring.polls_to(consumer, &[(9, 6), (9, 7)]));
        // The device's next CQE (index 10, slot 2) is found after them.
        ring.device_writes(10, 9, 8);
        check!(ring.polls_to(consumer, &[(9, 6), (9, 7), (9, 8)]));
        Ok(())
    }

    #[test]
    fn a_full_ring_and_an_empty_one() -> Checked {
        let mut ring = Ring::<4>::new();
        check!(remove_qp_cqes(&mut ring, 0, Qpn::from_raw(5)) == 0);
        for index in 0..4 {
            ring.device_writes(index, if index % 2 == 0 { 5 } else { 7 }, index as u16);
        }
        let consumer = remove_qp_cqes(&mut ring, 0, Qpn::from_raw(5));
        check!(consumer == 2);
        check!(ring.polls_to(consumer, &[(7, 1), (7, 3)]));
        // Nothing of QP 7 is removed when another QP is cleaned.
        check!(remove_qp_cqes(&mut ring, consumer, Qpn::from_raw(5)) == consumer);
        Ok(())
    }
}

#[cfg_attr(CONFIG_KUNIT = "y", kernel::prelude::kunit_tests(rox_cut_off))]
mod cut_off_suite {
    use super::{failed, Checked};
    use crate::cut_off::CutOff;

    /// How a create of a context made before the cut-off ended.
    #[derive(Clone, Copy, PartialEq)]
    enum Outcome {
        /// EIO: at the early check or at the registration.
        Refused,
        /// Registered: the process has the object.
        Registered,
    }

    /// One create of a user QP (0: the early check of `alloc_db_slot`, 1: the device makes
    /// the QP, 2: registration under the registry's lock) beside a companion's removal (0:
    /// begin, 1: list the registered user QPs under the registry's lock, 2: end), as
    /// `ucontext.rs`, the registry's insert and `wake::PostedWake::companion_removed` do them.
    struct Race {
        cut_off: CutOff,
        made_before: bool,
        create_steps: usize,
        removal_steps: usize,
        outcome: Option<Outcome>,
        registered: bool,
        listed: bool,
        /// Whether the create passed the early check and was refused at the registration.
        refused_late: bool,
    }

    impl Race {
        fn new() -> Self {
            let cut_off = CutOff::new();
            let made_before = cut_off.context_made_before();
            Race {
                cut_off,
                made_before,
                create_steps: 0,
                removal_steps: 0,
                outcome: None,
                registered: false,
                listed: false,
                refused_late: false,
            }
        }

        fn create_step(&mut self) {
            let step = self.create_steps;
            self.create_steps += 1;
            if self.outcome.is_some() {
                return;
            }
            let refused = self.cut_off.refuses(self.made_before);
            match step {
                0 if refused => self.outcome = Some(Outcome::Refused),
                2 if refused => {
                    self.outcome = Some(Outcome::Refused);
                    self.refused_late = true;
                }
                2 => {
                    self.registered = true;
                    self.outcome = Some(Outcome::Registered);
                }
                _ => {}
            }
        }

        fn removal_step(&mut self) {
            match self.removal_steps {
                0 => self.cut_off.begin(),
                1 => self.listed = self.registered,
                _ => self.cut_off.end(),
            }
            self.removal_steps += 1;
        }

        /// Runs the six steps in the order of `order`'s low six bits (set: the create's next
        /// step, clear: the removal's), which has three of each.
        fn run(order: u32) -> Self {
            let mut race = Race::new();
            for bit in 0..6 {
                if order & (1 << bit) != 0 {
                    race.create_step();
                } else {
                    race.removal_step();
                }
            }
            race
        }
    }

    #[test]
    fn a_create_racing_the_removal_is_refused_or_its_qp_is_failed() -> Checked {
        let (mut orders, mut late, mut failed_qps) = (0, 0, 0);
        for order in (0u32..64).filter(|o| o.count_ones() == 3) {
            let race = Race::run(order);
            orders += 1;
            // Every create ends, and one the removal did not list (so never failed: a QP that
            // silently never reaches the device) is never handed to the process.
            check!(race.outcome.is_some());
            if race.outcome == Some(Outcome::Registered) {
                check!(race.listed);
                failed_qps += 1;
            }
            if race.refused_late {
                check!(!race.listed);
                late += 1;
            }
        }
        check!(orders == 20);
        // The window exists: some creates pass the early check and meet the cut-off only at
        // the registration; and a create registered before the listing is failed, not refused.
        check!(late > 0);
        check!(failed_qps > 0);
        Ok(())
    }

    #[test]
    fn only_contexts_made_before_the_removal_ended_are_cut_off() -> Checked {
        let cut_off = CutOff::new();
        let before = cut_off.context_made_before();
        check!(before);
        check!(!cut_off.refuses(before));
        cut_off.begin();
        // Made while the removal runs: its pages may be mapped before they are revoked.
        let during = cut_off.context_made_before();
        check!(cut_off.refuses(before) && cut_off.refuses(during));
        cut_off.end();
        let after = cut_off.context_made_before();
        check!(!after);
        check!(!cut_off.refuses(after));
        check!(cut_off.refuses(before) && cut_off.refuses(during));
        Ok(())
    }
}

#[cfg_attr(CONFIG_KUNIT = "y", kernel::prelude::kunit_tests(rox_slot_store))]
mod slot_store_suite {
    use super::{failed, Checked};
    use crate::slot_store::{AfterStore, SlotStore};
    use crate::uapi::regs::{CAP_DB_SUMMARY, DB_DEVICE_IDLE, DB_DEVICE_RUNNING, DB_RC_SQ_NO_WAKE};
    use crate::uapi::verbs;
    use core::cell::Cell;

    /// A page whose `rc_sq_no_wake` reads `word`; `read` says whether it was read.
    fn page_says(word: u32, read: &Cell<bool>) -> impl FnOnce() -> u32 + '_ {
        move || {
            read.set(true);
            word
        }
    }

    /// What follows `store` on a page whose `rc_sq_no_wake` is `word`.
    fn after_with(store: SlotStore, device_idle: u32, word: u32) -> AfterStore {
        store.after(device_idle, page_says(word, &Cell::new(false)))
    }

    #[test]
    fn a_consumer_index_stores_no_news_and_wakes_nothing() -> Checked {
        // The device reads it when it writes a CQE: news would cost it a visit per poll.
        check!(!SlotStore::ConsumerIndex.stores_news(CAP_DB_SUMMARY));
        check!(!SlotStore::ConsumerIndex.may_wake());
        Ok(())
    }

    #[test]
    fn a_ring_or_arm_stores_news_on_a_summary_device_and_may_wake() -> Checked {
        check!(SlotStore::Ring.stores_news(CAP_DB_SUMMARY));
        check!(SlotStore::Ring.stores_news(!0));
        check!(!SlotStore::Ring.stores_news(!CAP_DB_SUMMARY));
        check!(SlotStore::Ring.may_wake());
        Ok(())
    }

    #[test]
    fn only_a_ring_or_arm_wakes_a_sleeping_device() -> Checked {
        // The page's rc_sq_no_wake concerns RC SQ doorbells of packets alone.
        for word in [0, DB_RC_SQ_NO_WAKE] {
            check!(after_with(SlotStore::Ring, DB_DEVICE_IDLE, word) == AfterStore::Wake);
            let consumer = after_with(SlotStore::ConsumerIndex, DB_DEVICE_IDLE, word);
            check!(consumer == AfterStore::Nothing);
            check!(after_with(SlotStore::Ring, DB_DEVICE_RUNNING, word) == AfterStore::Nothing);
            let consumer = after_with(SlotStore::ConsumerIndex, DB_DEVICE_RUNNING, word);
            check!(consumer == AfterStore::Nothing);
        }
        Ok(())
    }

    #[test]
    fn every_store_that_reads_all_ones_looks_for_a_removed_device() -> Checked {
        // A kernel CQ poll that found CQEs stores only its consumer index: it must still notice
        // a surprise-removed device, as a ring does.
        let stores = [
            SlotStore::ConsumerIndex,
            SlotStore::Ring,
            SlotStore::RcSqOfPackets,
        ];
        for store in stores {
            check!(after_with(store, u32::MAX, DB_RC_SQ_NO_WAKE) == AfterStore::ConfirmRemoved);
        }
        Ok(())
    }

    /// Only an SQ of a QP that counts in the port's flight (RC; the one rule of uapi's)
    /// whose new WQEs all send packets may skip the wake; any other SQ rings as before.
    #[test]
    fn only_an_rc_sq_of_packets_may_skip_the_wake() -> Checked {
        let rc = verbs::qp_type_counts_in_flight(verbs::QPT_RC);
        check!(SlotStore::sq(rc, true) == SlotStore::RcSqOfPackets);
        check!(SlotStore::sq(rc, false) == SlotStore::Ring);
        for other in [verbs::QPT_UD, verbs::QPT_UC, verbs::QPT_GSI] {
            let counts = verbs::qp_type_counts_in_flight(other);
            check!(SlotStore::sq(counts, true) == SlotStore::Ring);
            check!(SlotStore::sq(counts, false) == SlotStore::Ring);
        }
        // Otherwise a ring: its news byte, and the idle check.
        check!(SlotStore::RcSqOfPackets.stores_news(CAP_DB_SUMMARY));
        check!(!SlotStore::RcSqOfPackets.stores_news(!CAP_DB_SUMMARY));
        check!(SlotStore::RcSqOfPackets.may_wake());
        Ok(())
    }

    /// A kernel RC SQ of packets wakes an idle device unless its page says the port's flight
    /// is full; the word is read only from a sleeping device (a running one needs no wake).
    #[test]
    fn an_rc_sq_of_packets_wakes_no_idle_device_whose_flight_is_full() -> Checked {
        let store = SlotStore::RcSqOfPackets;
        let full = after_with(store, DB_DEVICE_IDLE, DB_RC_SQ_NO_WAKE);
        check!(full == AfterStore::Nothing);
        // 0: a page with an RC QP in the error state, or a device that never writes the word.
        check!(after_with(store, DB_DEVICE_IDLE, 0) == AfterStore::Wake);
        check!(after_with(store, DB_DEVICE_IDLE, 7) == AfterStore::Wake);
        let read = Cell::new(false);
        let running = store.after(DB_DEVICE_RUNNING, page_says(DB_RC_SQ_NO_WAKE, &read));
        check!(running == AfterStore::Nothing && !read.get());
        let read = Cell::new(false);
        let _ = SlotStore::Ring.after(DB_DEVICE_IDLE, page_says(0, &read));
        check!(!read.get());
        Ok(())
    }
}

#[cfg_attr(CONFIG_KUNIT = "y", kernel::prelude::kunit_tests(rox_query_len))]
mod query_len_suite {
    use super::{failed, Checked};
    use crate::query_len::{keep_prefix, written_prefix, BadLength};
    use crate::uapi::admin::{
        AdminQuery, DeviceAttr, PortAttr, QueryDevice, QueryPort, QueryStats, Stats,
    };
    use core::mem::size_of;

    /// A device with fewer counters than the driver knows, one with as many, one with more.
    #[test]
    fn a_device_writes_at_most_the_buffer_it_was_given() -> Checked {
        let buffer = size_of::<Stats>();
        let required = QueryStats::REQUIRED_LEN;
        check!(written_prefix(37 * 8, required, buffer) == Ok(37 * 8));
        check!(written_prefix(buffer as u32, required, buffer) == Ok(buffer));
        check!(written_prefix(buffer as u32 + 8, required, buffer) == Err(BadLength::Over));
        check!(written_prefix(u32::MAX, required, buffer) == Err(BadLength::Over));
        Ok(())
    }

    /// QUERY_DEVICE: every field is read (a zero limit would be taken as the device's), so a
    /// device that writes less than all of `DeviceAttr`, or nothing, is refused.
    #[test]
    fn a_device_attr_shorter_than_the_fields_read_is_refused() -> Checked {
        let (required, buffer) = (QueryDevice::REQUIRED_LEN, size_of::<DeviceAttr>());
        // Every version-2 device writes these 144 bytes: a higher floor refuses them all.
        check!(required == 144);
        check!(written_prefix(0, required, buffer) == Err(BadLength::Short));
        check!(written_prefix(buffer as u32 - 4, required, buffer) == Err(BadLength::Short));
        check!(written_prefix(buffer as u32, required, buffer) == Ok(buffer));
        Ok(())
    }

    /// QUERY_PORT: the driver reads up to `active_speed` (byte 15); the MAC after it comes
    /// from READ_MAC, so a device that stops there is taken, one byte less is not.
    #[test]
    fn a_port_attr_shorter_than_its_active_speed_is_refused() -> Checked {
        let (required, buffer) = (QueryPort::REQUIRED_LEN, size_of::<PortAttr>());
        check!(required == 16);
        check!(written_prefix(0, required, buffer) == Err(BadLength::Short));
        check!(written_prefix(15, required, buffer) == Err(BadLength::Short));
        check!(written_prefix(16, required, buffer) == Ok(16));
        check!(written_prefix(buffer as u32, required, buffer) == Ok(buffer));
        check!(written_prefix(buffer as u32 + 1, required, buffer) == Err(BadLength::Over));
        Ok(())
    }

    /// The counter queries need nothing: a counter the device lacks reads as zero.
    #[test]
    fn a_counter_query_may_write_nothing() -> Checked {
        check!(written_prefix(0, QueryStats::REQUIRED_LEN, size_of::<Stats>()) == Ok(0));
        Ok(())
    }

    #[test]
    fn what_the_device_did_not_write_reads_as_zero() -> Checked {
        let mut response = [0xa5u8; 16];
        keep_prefix(&mut response, 10);
        check!(response[..10].iter().all(|&b| b == 0xa5));
        check!(response[10..].iter().all(|&b| b == 0));
        let mut whole = [0xa5u8; 16];
        keep_prefix(&mut whole, 16);
        check!(whole.iter().all(|&b| b == 0xa5));
        Ok(())
    }
}
