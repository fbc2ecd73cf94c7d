//! The answers a batch of frames owes leave with that batch: a responder's data-path thread
//! that loses its core right after it took a batch from the port (held there by the test,
//! `hold_after_rx_batch`, as a loaded host would) has already put the batch's ACKs on the
//! wire, so the requester completes while the responder is still held; and they stay one ACK
//! per QP per batch, not one per packet; a READ's response, made at once, leaves with its
//! batch too (device/datapath/wire_io.rs `answer_taken`).

use std::sync::Arc;
use std::time::Instant;

use rox_nic::device::Shared;
use rox_nic::testkit::*;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

const PD: u32 = 1;
const ACCESS: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
/// One packet a WRITE.
const MSG: u64 = 256;
/// WRITEs posted while the responder is held: one receive batch (`port::BATCH` is 64).
const HELD_WRITES: u64 = 32;
/// 4.3 s: the requester's timer does not fire while the test holds the responder.
const ACK_TIMEOUT: u8 = 20;

/// Lets the responder's thread go however the test ends (a failed test must not leave it
/// held through the teardown).
struct Release(Arc<Shared>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.hold_after_rx_batch.release();
    }
}

#[test]
fn a_batchs_acks_leave_before_the_responder_loses_its_core() {
    let dir = tempfile::tempdir().unwrap();
    // Two QPs: the second has measured no round trip when it sends, so no tail probe joins
    // its WRITEs while the responder is held.
    let (mut a, mut b, mut a_cq, mut qps) = pair::rc_qps_over_dgram(
        dir.path(),
        &pair::RcQps::new(32, 2, (PD, ACCESS)),
        7,
        ACK_TIMEOUT,
    );
    let total = (HELD_WRITES + 1) * MSG;
    let (src, src_key) = a.buffer(PD, total, ACCESS);
    let (dst, dst_key) = b.buffer(PD, total, ACCESS);
    let data = pattern(3, total as usize);
    a.ram.write(src, &data);
    let write = |n: u64| {
        let w = send_wqe(
            n,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(src + n * MSG, MSG as u32, src_key)],
        );
        with_rdma(w, dst + n * MSG, dst_key)
    };
    let hold = Release(b.shared().clone());
    let held = || hold.0.hold_after_rx_batch.is_held();

    hold.0.hold_after_rx_batch.arm();
    a.post_send(&mut qps[0], &write(0));
    completes_while_held(&mut a, &mut a_cq, held, "WRITE's ACK");

    // Held still: WRITEs queue up in the responder's socket, taken in one batch on release.
    for n in 1..=HELD_WRITES {
        a.post_send(&mut qps[1], &write(n));
    }
    let sent = 1 + HELD_WRITES;
    wait_until(
        || a.query_stats()[STAT_PORT_TX_FRAMES] == sent,
        "the requester did not send its WRITEs",
    );
    assert!(held(), "the responder went on before the test let it");
    hold.0.hold_after_rx_batch.release();
    for n in 1..=HELD_WRITES {
        let c = a.wait_cqe(&mut a_cq);
        assert_eq!(c.status, WC_SUCCESS, "completion {n} (wr_id {})", c.wr_id);
    }
    assert!(
        b.ram.read(dst, total as usize) == data,
        "the received bytes differ from the sent ones"
    );
    let stats = a.query_stats();
    assert_eq!(
        (stats[STAT_PORT_TX_FRAMES], stats[STAT_RETRANSMITS]),
        (sent, 0),
        "packets the requester sent, and resent"
    );
    assert_eq!(
        stats[STAT_RX_PACKETS], 2,
        "ACKs the requester got: one for the first batch, one for the {HELD_WRITES} WRITEs \
         of one QP taken in the next"
    );
}

/// A READ is answered at once, not through the ACKs owed: its response leaves with the batch
/// that took the request too, so the requester completes while the responder is held.
#[test]
fn a_batchs_read_responses_leave_before_the_responder_loses_its_core() {
    let dir = tempfile::tempdir().unwrap();
    let access = ACCESS | ACCESS_REMOTE_READ;
    let (mut a, mut b, mut a_cq, mut qps) = pair::rc_qps_over_dgram(
        dir.path(),
        &pair::RcQps::new(33, 1, (PD, access)),
        7,
        ACK_TIMEOUT,
    );
    let (local, local_key) = a.buffer(PD, MSG, access);
    let (remote, remote_key) = b.buffer(PD, MSG, access);
    let data = pattern(5, MSG as usize);
    b.ram.write(remote, &data);
    let read = send_wqe(
        0,
        WR_RDMA_READ,
        WQE_FLAG_SIGNALED,
        &[sge(local, MSG as u32, local_key)],
    );
    let hold = Release(b.shared().clone());
    let held = || hold.0.hold_after_rx_batch.is_held();

    hold.0.hold_after_rx_batch.arm();
    a.post_send(&mut qps[0], &with_rdma(read, remote, remote_key));
    completes_while_held(&mut a, &mut a_cq, held, "READ's response");
    assert!(
        a.ram.read(local, MSG as usize) == data,
        "the READ brought other bytes"
    );
}

/// Once the responder took the request just posted and is held after that batch, the
/// requester completes it successfully while the responder is still held: `answer` left
/// with the batch, not waiting in the responder's port queue through the hold.
fn completes_while_held(
    a: &mut TestDriver,
    cq: &mut TestCq,
    held: impl Fn() -> bool,
    answer: &str,
) {
    wait_until(&held, "the responder never took the request");
    let c = wait_cqe_while(a, cq, &held);
    assert_eq!(c.status, WC_SUCCESS);
    assert!(
        held(),
        "the requester completed only after the responder's thread went on: the {answer} \
         waited in its port queue through the hold"
    );
}

/// Polls `a`'s CQ until a CQE comes, failing if `going_on` turns false first (or after
/// `TIMEOUT`).
fn wait_cqe_while(a: &mut TestDriver, cq: &mut TestCq, going_on: impl Fn() -> bool) -> Cqe {
    let start = Instant::now();
    loop {
        if let Some(c) = a.poll_cq(cq) {
            return c;
        }
        assert!(
            going_on() && start.elapsed() < TIMEOUT,
            "no completion while the responder's thread was held after its receive batch: \
             the ACK waited in its port queue"
        );
        std::thread::yield_now();
    }
}
