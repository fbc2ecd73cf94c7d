//! An RC QP whose doorbell brings WQEs while the port's flight is full is parked: its WQEs
//! stay in its SQ until its turn, and its doorbell is no work for the pass
//! (device/datapath/sched.rs, "Parked QPs"); the idle device says on its doorbell pages that
//! an RC SQ doorbell of packets needs no wake (`DbPage::rc_sq_no_wake`). Everything else goes
//! at once: a UD send, the flush of a parked QP moved to the error state.
//!
//! Two devices on a dgram wire. The receiver's thread is held after its first receive (as a
//! host that took its core would), so the sender's 2 MiB WRITE keeps the port's whole flight
//! (256 packets) unacknowledged for as long as the test needs (the ACK timeout's 4.3 s bounds
//! the retries; the RTO may resend that flight after its 12 ms floor, which nothing here
//! depends on). Then WRITEs are posted one by one, as perftest posts them.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rox_nic::device::Shared;
use rox_nic::testkit::pair::{rc_qps_over_dgram, RcQps, Side};
use rox_nic::testkit::*;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

const PD: u32 = 1;
const ACCESS: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
const SUBNET: u8 = 43;
/// 4.096 µs × 2^20: no ACK timeout while the receiver is held.
const ACK_TIMEOUT: u8 = 20;
/// Twice the port's flight at a 4 KiB MTU: half of it waits however the first ACKs fall.
const BIG: u64 = 2 << 20;
const MSG: u64 = 8192;
/// The port's whole flight at a 4 KiB MTU (256 packets).
const FLIGHT: u64 = 1 << 20;
/// QPs that post one WRITE each while the flight is full.
const LATE: usize = 8;

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < TIMEOUT, "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits for two whole passes of the data path after now: a doorbell stored before is seen.
fn two_passes(shared: &Arc<Shared>) {
    let now = shared.loop_passes.load(Ordering::SeqCst);
    wait_until("the data path made no pass", || {
        shared.loop_passes.load(Ordering::SeqCst) >= now + 2
    });
}

/// An RDMA WRITE of `len` bytes at offset `at` of buffer `src` to the same offset of `dst`
/// (wr_id: the offset).
fn write_at(src: (u64, Key), dst: (u64, Key), at: u64, len: u64) -> SqWqe {
    let sge = sge(src.0 + at, len as u32, src.1);
    rdma_wqe(at, WR_RDMA_WRITE, sge, dst.0 + at, dst.1)
}

/// Waits until the sender's flight is full and stays so (the receiver is held): two whole
/// passes of its data path sent nothing more, so an ACK the receiver sent before its hold
/// has been read and its room used (whatever the host's scheduling).
fn settled_at_full_flight(a: &mut TestDriver) {
    let sender = a.shared().clone();
    loop {
        let frames = a.query_stats()[STAT_PORT_TX_FRAMES];
        two_passes(&sender);
        if frames >= 256 && a.query_stats()[STAT_PORT_TX_FRAMES] == frames {
            return;
        }
    }
}

#[test]
fn while_the_flight_is_full_rc_doorbells_are_parked_and_ud_sends_and_flushes_go_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let spec = RcQps {
        log_sq: 4,
        ..RcQps::new(SUBNET, 2 + LATE as u64, (PD, ACCESS))
    };
    let (mut a, mut b, mut a_cq, mut qps) = rc_qps_over_dgram(dir.path(), &spec, 8, ACK_TIMEOUT);
    let len = BIG + (LATE as u64 + 1) * MSG;
    let (src, src_key) = a.buffer(PD, len, ACCESS);
    let (dst, dst_key) = b.buffer(PD, len, ACCESS);
    let data = pattern(7, len as usize);
    a.ram.write(src, &data);
    let ud = a.create_qp(QPT_UD, PD, a_cq.id, a_cq.id, SRQ_NONE);
    a.activate_ud(&ud, 0x42);
    let mut ud = ud;
    let sender = a.shared().clone();
    let receiver = b.shared().clone();
    let hold = &receiver.hold_before_timers;
    let _release = hold.release_on_drop();

    // The flight fills and stays full: the receiver holds after its first receive.
    hold.arm();
    let write = |at, len| write_at((src, src_key), (dst, dst_key), at, len);
    a.post_send(&mut qps[0], &write(0, BIG));
    wait_until("the receiver never took a frame", || hold.is_held());
    settled_at_full_flight(&mut a);

    // Perftest's posting: one WQE, one doorbell, on QP after QP.
    let fetches = sender.sq_fetches.load(Ordering::SeqCst);
    let parked = sender.parked_doorbells.load(Ordering::SeqCst);
    for (i, qp) in qps[1..=LATE].iter_mut().enumerate() {
        let at = BIG + i as u64 * MSG;
        a.post_send(qp, &write(at, MSG));
        two_passes(&sender);
    }
    assert_eq!(
        (
            sender.sq_fetches.load(Ordering::SeqCst) - fetches,
            sender.parked_doorbells.load(Ordering::SeqCst) - parked
        ),
        (0, LATE as u64),
        "(fetches, parks) of {LATE} doorbells while the flight was full"
    );
    // No fetch, so no new packet: the port's frame count is no check here, QP 0's tail probes
    // (after two round trips without progress) and RTO resends (12 ms floor) add to it.

    // Idle with the flight full, the device says RC doorbells of packets need no wake: one
    // more WRITE is posted without one (the ACK will wake the device).
    a.wait_announced_idle();
    assert_eq!(a.db.rc_sq_no_wake(TEST_DB_PAGE), DB_RC_SQ_NO_WAKE);
    let last = BIG + LATE as u64 * MSG;
    assert!(
        !a.post_rc_send_as_librox(&mut qps[1], &write(last, MSG)),
        "an RC WRITE woke the device while its flight was full"
    );

    // A UD send is not held by the flight: it completes while every WRITE waits.
    let w = ud_wqe(
        900,
        WR_SEND,
        sge(src, 64, src_key),
        Side::gid(SUBNET, 2),
        Qpn::new(2).unwrap(),
        0x42,
    );
    let posted = Instant::now();
    a.post_send(&mut ud, &w);
    a.expect_cqe(&mut a_cq, 900, WC_SUCCESS);
    // Printed, not asserted (a loaded host's scheduling): session 19's held sleep made this
    // wait for the flight's ACK, 3.9-4.8 ms.
    eprintln!(
        "a UD send posted to the idle device with its flight full: CQE after {:?}",
        posted.elapsed()
    );

    local_op_goes_at_once(&mut a, &mut qps[LATE + 1], &mut a_cq, src_key);

    // A parked QP moved to the error state flushes its WQE at once, not at a turn.
    let flushed = 3;
    a.modify_qp_state(qps[flushed].qpn, QPS_ERR);
    a.expect_cqe(&mut a_cq, BIG + (flushed as u64 - 1) * MSG, WC_WR_FLUSH_ERR);
    // Its page now wakes the device for RC doorbells: a QP in the error state flushes at once.
    a.wait_announced_idle();
    assert_eq!(a.db.rc_sq_no_wake(TEST_DB_PAGE), 0);

    // The receiver goes on: every other WRITE completes, its bytes in place.
    hold.release();
    let mut expected: Vec<u64> = (0..LATE as u64)
        .filter(|&i| i != flushed as u64 - 1)
        .map(|i| BIG + i * MSG)
        .collect();
    expected.insert(0, 0);
    expected.push(last);
    let done: Vec<u64> = (0..expected.len())
        .map(|_| a.wait_cqe(&mut a_cq))
        .map(|c| {
            assert_eq!(c.status, WC_SUCCESS, "{c:?}");
            c.wr_id
        })
        .collect();
    arrived(&b, dst, &data, done, &expected);
}

/// A local operation at the head of an RC QP's SQ needs no flight: it is taken at once while
/// the flight is full, not parked (a LOCAL_INV of a key that is no window or fast-registered
/// MR: it completes in error, which also shows it ran).
fn local_op_goes_at_once(a: &mut TestDriver, qp: &mut TestQp, cq: &mut TestCq, key: Key) {
    let sender = a.shared().clone();
    let fetches = sender.sq_fetches.load(Ordering::SeqCst);
    let inv = with_rdma(send_wqe(901, WR_LOCAL_INV, WQE_FLAG_SIGNALED, &[]), 0, key);
    a.post_send(qp, &inv);
    let c = a.wait_cqe(cq);
    assert_eq!((c.wr_id, c.opcode), (901, WC_OPC_LOCAL_INV), "{c:?}");
    assert_eq!(sender.sq_fetches.load(Ordering::SeqCst), fetches + 1);
}

/// The WRITEs completed (`done`, by wr_id: the offset written) are those `expected`, each one's
/// bytes at the receiver's `dst` as sent (`data`; the one at 0 is [`BIG`], the others [`MSG`]).
fn arrived(b: &TestDriver, dst: u64, data: &[u8], mut done: Vec<u64>, expected: &[u64]) {
    done.sort();
    assert_eq!(done, expected);
    for &at in expected {
        let len = if at == 0 { BIG } else { MSG };
        assert!(
            b.ram.read(dst + at, len as usize) == data[at as usize..(at + len) as usize],
            "the WRITE at {at} arrived other than sent"
        );
    }
}

/// A doorbell stored while the device goes idle, by a driver that read it running (so it
/// rang no wake), is found by the idle re-scan after the flight emptied: the QP is not parked
/// on the budget's old count of a full flight (nothing in flight would wake the device), its
/// WRITE goes (review of s20-qps: without the fresh count, no CQE ever came).
#[test]
fn a_doorbell_the_idle_rescan_finds_after_the_flight_emptied_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let spec = RcQps {
        log_sq: 4,
        ..RcQps::new(SUBNET + 1, 1, (PD, ACCESS))
    };
    let (mut a, mut b, mut a_cq, mut qps) = rc_qps_over_dgram(dir.path(), &spec, 8, ACK_TIMEOUT);
    let len = FLIGHT + MSG;
    let (src, src_key) = a.buffer(PD, len, ACCESS);
    let (dst, dst_key) = b.buffer(PD, len, ACCESS);
    let data = pattern(9, len as usize);
    a.ram.write(src, &data);
    let sender = a.shared().clone();
    let receiver = b.shared().clone();
    let write = |at, len| write_at((src, src_key), (dst, dst_key), at, len);

    // The sender's budget counts a full flight (one WRITE of exactly the port's flight): the
    // receiver holds after its first receive while the sender's passes go on; then every ACK comes and no QP waits (no new count).
    let hold = &receiver.hold_before_timers;
    let _release = hold.release_on_drop();
    hold.arm();
    a.post_send(&mut qps[0], &write(0, FLIGHT));
    wait_until("the receiver never took a frame", || hold.is_held());
    settled_at_full_flight(&mut a);
    two_passes(&sender);
    hold.release();
    a.expect_cqe(&mut a_cq, 0, WC_SUCCESS);
    a.wait_announced_idle();

    // The next time it goes idle, the device is held between its announcement and its
    // re-scan; the WQE and its doorbell are stored there with no wake.
    let rescan = &sender.hold_before_idle_rescan;
    let _release_rescan = rescan.release_on_drop();
    rescan.arm();
    a.ring_sq(&qps[0]);
    wait_until("the device did not go idle again", || rescan.is_held());
    a.write_send(&mut qps[0], &write(FLIGHT, MSG));
    std::sync::atomic::fence(Ordering::SeqCst);
    a.doorbell_a(qps[0].db_slot, qps[0].sq_pi);
    rescan.release();
    a.expect_cqe(&mut a_cq, FLIGHT, WC_SUCCESS);
    for (at, len) in [(0, FLIGHT), (FLIGHT, MSG)] {
        assert!(
            b.ram.read(dst + at, len as usize) == data[at as usize..(at + len) as usize],
            "the WRITE at {at} arrived other than sent"
        );
    }
}
