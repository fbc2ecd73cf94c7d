//! The host benchmarks' message stream (`rox_nic::benchkit::stream`) over a rox-to-rox cable
//! with 256 WQEs in flight, as `ROX_BENCH_PORT=cable ROX_BENCH_WINDOW=256 cargo bench -p
//! rox-nic --bench throughput` runs it: a SEND run after four others must find the receive
//! side as the first left it.
//!
//! Each SEND run used to post a whole window of receive WRs on top of the window the run
//! before left posted: the fifth run of 256 overran the 1024-WQE RQ, the device made the
//! responder's QP fatal (a wild producer index, as it must), and the requester's first SEND
//! ended in WC_RETRY_EXC_ERR (status 12) on a wire that lost nothing. The bench aborted at its
//! 32 KiB point every time, which looked like a transport bug. Message counts are fixed; no
//! assertion is on time or rate.
//!
//! On a host loaded far beyond its cores a WR can still end in WC_RETRY_EXC_ERR: a responder
//! thread that gets no core for 8 x 537 ms (the stream's timeout 17) answers nothing. Its report
//! then shows that thread runnable and waiting for a core through the gap
//! (docs/benchmarks/session-10.md, "Session 10: the abort at 256 WQEs", its session 13 paragraph).

use rox_nic::benchkit::stream::{Limit, Stream, Wait};
use rox_nic::port::limit::cable_wire;
use rox_uapi::admin::*;
use rox_uapi::verbs::*;

const WINDOW: u32 = 256;
const MAX_MSG: u64 = 64 << 10;
/// More SEND runs than the RQ holds windows of receive WRs (1024 / 256).
const SEND_RUNS: u32 = 6;
/// Messages per run: more than a window, so receive WRs are consumed and posted again.
const MSGS: u64 = 600;

#[test]
fn send_runs_after_send_runs_keep_the_responders_receive_queue_within_its_depth() {
    let dir = tempfile::tempdir().unwrap();
    let (la, lb) = cable_wire(dir.path(), "stream.sock");
    let mut s = Stream::new(la, lb, WINDOW, MAX_MSG);
    for run in 0..SEND_RUNS {
        // A run waits for all its completions and panics on a failed one, naming the
        // responder QP's state.
        s.run(WR_SEND, 8, Limit::Msgs(MSGS), Wait::Yield);
        let recvs = s.b.d.query_stats()[STAT_RECV_WQES];
        assert_eq!(recvs, u64::from(run + 1) * MSGS, "SEND run {run}");
    }
    // The point where the bench aborted: the 32 KiB WRITE run, then a 32 KiB SEND run.
    s.run(WR_RDMA_WRITE, 32 << 10, Limit::Msgs(MSGS), Wait::Yield);
    s.run(WR_SEND, 32 << 10, Limit::Msgs(MSGS), Wait::Yield);
    let (gap, threads) = s.longest_gap();
    eprintln!(
        "longest gap without a completion: {gap:?}; {}",
        threads.unwrap_or("")
    );
    let requester = s.a.d.query_stats();
    // The 8 B WRITE that connected the stream, then the runs.
    let messages = 1 + u64::from(SEND_RUNS + 2) * MSGS;
    assert_eq!(requester[STAT_CQES], messages);
    assert_eq!(requester[STAT_WQE_ERRORS], 0);
    let responder = s.b.d.query_stats();
    assert_eq!(
        responder[STAT_RX_UNKNOWN_QP], 0,
        "requests dropped by a responder QP that stopped"
    );
    assert_eq!(s.b.d.query_qp(s.b.qp.qpn).qp_state, QPS_RTS);
    assert_eq!(s.a.d.query_qp(s.a.qp.qpn).qp_state, QPS_RTS);
    assert_eq!(
        responder[STAT_RECV_WQES],
        u64::from(SEND_RUNS + 1) * MSGS,
        "every SEND took one receive WR"
    );
}

#[test]
fn a_send_stream_posts_receive_wrs_without_waking_the_receiving_device() {
    // The stream drives its devices through their companions (posted wakes: a device sleeps
    // as soon as it has nothing to do). Its receive WRs are posted as librox posts them: the
    // engine reads the RQ when a message needs a receive WR, so an RQ doorbell wakes nothing.
    // Waking the receiving device for each (the test driver's plain post_recv) woke it about
    // once per SEND.
    const SENDS: u64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let (la, lb) = cable_wire(dir.path(), "wakes.sock");
    let mut s = Stream::new(la, lb, 64, MAX_MSG);
    let before = s.b.d.wakes;
    s.run(WR_SEND, 8, Limit::Msgs(SENDS), Wait::Yield);
    let wakes = s.b.d.wakes - before;
    assert!(
        wakes <= SENDS / 100,
        "{wakes} wakes of the receiving device for {SENDS} SENDs"
    );
    assert_eq!(s.b.d.query_stats()[STAT_RECV_WQES], SENDS);
}
