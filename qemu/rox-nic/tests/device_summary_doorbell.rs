//! The summary doorbell (docs/summary-doorbell.md, `rox_uapi::regs::DbPage`): on a page whose
//! owner stores news bytes the device looks only at the groups with news. What a slot-by-slot
//! scan found by itself must still be found: work a QP could not take when its news came
//! (posted before RTS, more than a batch), doorbells stored while the device takes the news of
//! their group, and every doorbell of a page whose owner stores no news, or whose `news_on`
//! an older driver left behind.

use rox_nic::testkit::loopback::{ALL_ACCESS, PD};
use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;
use std::time::Duration;

/// A device that goes idle after `idle_after` without work.
fn device(mac_last: u8, idle_after: Duration) -> TestDriver {
    let mut cfg = DeviceConfig::new([2, 0, 0, 0, 0x5d, mac_last]);
    cfg.idle_after = idle_after;
    TestDriver::new(cfg)
}

/// `n` RC QPs connected to themselves on one CQ of 2^`log_cq` entries, with a buffer.
fn self_connected(
    d: &mut TestDriver,
    n: usize,
    log_cq: u8,
) -> (TestCq, Vec<TestQp>, u64, rox_uapi::ids::Key) {
    let gid = gid_v4(127, 0, 0, 1);
    d.set_gid(0, gid);
    let cq = d.create_cq(log_cq);
    let qps = (0..n)
        .map(|_| {
            let qp = d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
            d.connect(&qp, gid, qp.qpn, ALL_ACCESS);
            qp
        })
        .collect();
    let (buf, key) = d.buffer(PD, 8192, ALL_ACCESS);
    (cq, qps, buf, key)
}

fn write(wr_id: u64, buf: u64, key: rox_uapi::ids::Key) -> SqWqe {
    rdma_wqe(wr_id, WR_RDMA_WRITE, sge(buf, 8, key), buf + 4096, key)
}

/// Waits for `n` CQEs on `cq`, all successful; returns their wr_ids sorted.
fn completions(d: &mut TestDriver, cq: &mut TestCq, n: usize) -> Vec<u64> {
    let mut ids: Vec<u64> = (0..n)
        .map(|_| {
            let c = d.wait_cqe(cq);
            assert_eq!(c.status, WC_SUCCESS, "CQE {c:?}");
            c.wr_id
        })
        .collect();
    ids.sort();
    ids
}

/// WQEs rung while the QP cannot send yet, and more of them than the device fetches in a pass:
/// the device takes their news at once, so it must keep looking at that QP (as a slot-by-slot
/// scan did) until it took them all, across its sleeps too.
#[test]
fn work_the_qp_could_not_take_when_its_news_came_is_sent_later() {
    let mut d = device(1, Duration::from_millis(2));
    let gid = gid_v4(127, 0, 0, 1);
    d.set_gid(0, gid);
    let mut cq = d.create_cq(9);
    let mut qp = d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
    let (buf, key) = d.buffer(PD, 8192, ALL_ACCESS);
    const WRS: u64 = 200;
    for id in 0..WRS {
        d.write_send(&mut qp, &write(id, buf, key));
    }
    d.ring_sq(&qp);
    // Taken while in RESET; the device runs out of work and sleeps.
    d.wait_announced_idle();
    assert!(d.poll_cq(&mut cq).is_none(), "nothing is sent before RTS");
    d.connect(&qp, gid, qp.qpn, ALL_ACCESS);
    assert_eq!(
        completions(&mut d, &mut cq, WRS as usize),
        (0..WRS).collect::<Vec<_>>()
    );
}

/// Doorbells of QPs that share a news byte, stored one after another while the device takes
/// that byte (spinning, or in its re-scan after announcing idleness): each is seen, in the
/// pass that took the news or in the next (the byte it set again), never lost.
#[test]
fn doorbells_stored_while_the_device_takes_their_groups_news_are_all_seen() {
    let mut d = device(2, Duration::from_micros(50));
    // Eight QPs on slots 1..=8: all in news group 0 with their CQ (slot 0).
    let (mut cq, mut qps, buf, key) = self_connected(&mut d, 8, 10);
    assert!(qps
        .iter()
        .all(|qp| db_news_group(qp.db_slot) == db_news_group(cq.db_slot)));
    let mut next = 0u64;
    for round in 0..1500 {
        // Some rounds find the device asleep: the re-scan after its announcement races too.
        if round % 100 == 0 {
            d.wait_announced_idle();
        }
        let first = next;
        for qp in qps.iter_mut() {
            d.post_send(qp, &write(next, buf, key));
            next += 1;
        }
        let expected: Vec<u64> = (first..next).collect();
        assert_eq!(
            completions(&mut d, &mut cq, qps.len()),
            expected,
            "round {round}"
        );
    }
}

/// A provider without `CAP_DB_SUMMARY` stores no news: the device scans its page slot by slot
/// and sees every doorbell, an SQ's, an RQ's in the error state and a CQ's arm word, awake or
/// woken from sleep.
#[test]
fn a_page_whose_owner_stores_no_news_has_every_doorbell_seen() {
    let mut d = device(3, Duration::from_millis(2));
    d.stop_news();
    // The driver does (also under ROX_TEST_DOORBELLS=slots).
    d.db.set_news_on(DB_PAGE_KERNEL, true);
    every_doorbell_is_seen(&mut d);
}

/// An older rox.ko never says it stores news on its own page, and does not clear a user page's
/// `news_on` for the page's next context: the device then trusts no page's `news_on`, and a
/// context that stores no news on a page its predecessor marked still has its doorbells seen.
#[test]
fn a_stale_news_on_is_not_trusted_without_the_drivers() {
    let mut d = device(4, Duration::from_millis(2));
    d.stop_news();
    d.db.set_news_on(TEST_DB_PAGE, true);
    d.db.set_news_on(DB_PAGE_KERNEL, false);
    every_doorbell_is_seen(&mut d);
}

fn every_doorbell_is_seen(d: &mut TestDriver) {
    let (mut cq, mut qps, buf, key) = self_connected(d, 3, 8);
    for round in 0..20u64 {
        if round % 5 == 0 {
            d.wait_announced_idle();
        }
        for (i, qp) in qps.iter_mut().enumerate() {
            d.post_send(qp, &write(round * 8 + i as u64, buf, key));
        }
        completions(d, &mut cq, qps.len());
    }
    // A CQ arm word: the next completion posts an event.
    d.drain_eq(COMP_EQ);
    d.arm_cq(&mut cq, CQ_ARM_NEXT);
    d.wait_announced_idle();
    d.post_send(&mut qps[0], &write(1000, buf, key));
    assert_eq!(d.wait_cqe(&mut cq).wr_id, 1000);
    assert_eq!(d.wait_event(COMP_EQ, EQE_TYPE_COMPLETION).handle, cq.id);
    // An RQ doorbell of a QP in the error state: its receive WQE is flushed.
    let qp = &mut qps[1];
    d.modify_qp_state(qp.qpn, QPS_ERR);
    d.wait_announced_idle();
    d.post_recv(qp, 77, &[sge(buf, 8, key)]);
    let c = d.wait_cqe(&mut cq);
    assert_eq!((c.wr_id, c.status), (77, WC_WR_FLUSH_ERR));
}
