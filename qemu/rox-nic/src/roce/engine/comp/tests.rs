use super::super::test_env::*;
use super::*;
use crate::roce::wire::{self, opcode as op};

const SEQ_NAK: Syndrome = Syndrome::Nak(NakCode::PsnSequenceError);

fn psn(n: u32) -> Psn {
    Psn::from_wire(n)
}

/// An RC QP that has sent `wrs` (SEND of `len` bytes each; PSNs from 100).
fn sent(wrs: &[(WrOpcode, u32)]) -> (TestEnv, EngineStats, Qp) {
    let (mut env, mut stats, mut qp) = rc_fixture();
    for (id, &(opcode, len)) in wrs.iter().enumerate() {
        let wqe = qp.make_wqe(send_wr(id as u64, opcode, len));
        qp.enqueue(&mut env, &mut stats, wqe);
    }
    env.sent.clear();
    (env, stats, qp)
}

#[test]
fn una_is_the_oldest_psn_not_known_to_have_arrived() {
    // A 3-packet SEND (100..=102) and a 2-packet READ (103..=104).
    let (_, _, mut qp) = sent(&[(WrOpcode::Send, 3000), (WrOpcode::RdmaRead, 2000)]);
    assert_eq!(qp.una(), psn(100));
    assert!(qp.ack_through(psn(101), 0), "progress");
    assert_eq!(
        qp.una(),
        psn(102),
        "inside the SEND: the packet after the ACKed one"
    );
    assert!(!qp.ack_through(psn(100), 0), "an older ACK is no progress");
    qp.ack_through(psn(102), 0);
    assert_eq!(qp.una(), psn(103), "the READ has no response yet");
    qp.req.sq[1].read_pkts_done = 1;
    assert_eq!(
        qp.una(),
        psn(104),
        "the READ resumes at its first missing response"
    );
    qp.req.sq[1].read_pkts_done = 2;
    assert_eq!(qp.una(), qp.req.next_psn, "nothing outstanding");
}

#[test]
fn an_ack_through_a_flush_proves_it_executed() {
    let (mut env, mut stats, mut qp) = sent(&[]);
    for wr in [flush_wr(0), send_wr(1, WrOpcode::Send, 8)] {
        let wqe = qp.make_wqe(wr);
        qp.enqueue(&mut env, &mut stats, wqe);
    }
    assert_eq!(env.sent.len(), 2);
    assert!(qp.ack_through(psn(101), 0));
    assert!(qp.req.sq[0].done() && qp.req.sq[1].done());
}

#[test]
fn acks_retire_in_order_and_progress_resets_the_retry_counts() {
    let (mut env, mut stats, mut qp) = sent(&[(WrOpcode::Send, 8), (WrOpcode::Send, 8)]);
    qp.req.retry_left = 1;
    ack_from_peer(&mut qp, &mut env, &mut stats, 100, Syndrome::Ack);
    assert_eq!(env.completions.len(), 1);
    assert_eq!(env.completions[0].wr_id, 0);
    assert_eq!(qp.req.retry_left, qp.retry_cnt);
    ack_from_peer(&mut qp, &mut env, &mut stats, 100, Syndrome::Ack);
    assert_eq!(stats.rx_stale_responses, 1, "the same ACK again");
    ack_from_peer(&mut qp, &mut env, &mut stats, 105, Syndrome::Ack);
    assert_eq!(stats.rx_stale_responses, 2, "an ACK for a PSN never sent");
    ack_from_peer(&mut qp, &mut env, &mut stats, 101, Syndrome::Ack);
    assert!(qp.req.sq.is_empty());
    assert_eq!(qp.req.timer_deadline, None, "nothing outstanding: no timer");
}

#[test]
fn a_sequence_nak_rewinds_to_its_psn_and_shrinks_the_window() {
    let (mut env, mut stats, mut qp) = sent(&[(WrOpcode::Send, 3000)]);
    ack_from_peer(&mut qp, &mut env, &mut stats, 101, SEQ_NAK);
    assert_eq!(env.completions.len(), 0);
    let resent: Vec<u32> = env
        .sent_parsed()
        .iter()
        .map(|p| p.hdr.bth.psn.get())
        .collect();
    assert_eq!(resent, [101, 102], "go-back-N from the NAKed PSN");
    assert_eq!(qp.req.window, super::super::MAX_INFLIGHT_PSNS / 2);
    assert_eq!(stats.nak_rewinds, 1);
    // A NAK for a PSN that is not the oldest outstanding one is stale.
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, SEQ_NAK);
    assert_eq!(
        stats.rx_stale_responses, 0,
        "102 is una after the implied ACK of 101"
    );
    ack_from_peer(&mut qp, &mut env, &mut stats, 101, SEQ_NAK);
    assert_eq!(stats.rx_stale_responses, 1);
}

#[test]
fn rnr_naks_wait_and_exhaust_rnr_retry() {
    let (mut env, mut stats, mut qp) = sent(&[(WrOpcode::Send, 8)]);
    qp.rnr_retry = 1;
    qp.req.rnr_left = 1;
    ack_from_peer(&mut qp, &mut env, &mut stats, 100, Syndrome::RnrNak(1));
    assert_eq!(qp.req.rnr_until, Some(rnr_timer_ns(1)));
    assert!(env.sent.is_empty(), "waits out the RNR timer");
    ack_from_peer(&mut qp, &mut env, &mut stats, 100, Syndrome::RnrNak(1));
    let c = env.completions[0];
    assert_eq!(c.status, WcStatus::RnrRetryExcErr);
    assert_eq!(qp.state, QpState::Err);
}

#[test]
fn an_atomic_response_is_progress_that_renews_rnr_retry() {
    let (mut env, mut stats, mut qp) =
        sent(&[(WrOpcode::AtomicFetchAndAdd, 8), (WrOpcode::Send, 8)]);
    qp.rnr_retry = 1;
    qp.req.rnr_left = 1;
    ack_from_peer(&mut qp, &mut env, &mut stats, 100, Syndrome::RnrNak(1));
    env.now = qp.req.rnr_until.expect("waiting out the RNR NAK");
    qp.on_timers(&mut env, &mut stats);
    assert_eq!(env.sent.len(), 2, "atomic and SEND sent again");
    let bytes = packet_from_peer(op::RC_ATOMIC_ACKNOWLEDGE, 100, &[], |h| {
        h.aeth = peer_aeth(Syndrome::Ack);
        h.atomic_ack = Some(5);
    });
    qp.completer_receive(&mut env, &mut stats, &wire::parse_packet(&bytes).unwrap());
    assert_eq!(env.completions[0].status, WcStatus::Success);
    assert_eq!(qp.req.rnr_left, 1, "progress renews rnr_retry");
    ack_from_peer(&mut qp, &mut env, &mut stats, 101, Syndrome::RnrNak(1));
    assert_eq!(
        env.completions.len(),
        1,
        "the SEND waits, it has not failed"
    );
    assert_eq!(qp.state, QpState::Rts);
}

#[test]
fn other_naks_fail_the_wr_with_their_status() {
    for (code, status) in [
        (NakCode::RemoteAccessError, WcStatus::RemAccessErr),
        (NakCode::RemoteOperationalError, WcStatus::RemOpErr),
        (NakCode::InvalidRequest, WcStatus::RemInvReqErr),
        (NakCode::InvalidRdRequest, WcStatus::RemInvReqErr),
    ] {
        let (mut env, mut stats, mut qp) = sent(&[(WrOpcode::RdmaWrite, 8), (WrOpcode::Send, 8)]);
        ack_from_peer(&mut qp, &mut env, &mut stats, 101, Syndrome::Nak(code));
        let statuses: Vec<WcStatus> = env.completions.iter().map(|c| c.status).collect();
        assert_eq!(
            statuses,
            [WcStatus::Success, status, WcStatus::WrFlushErr][..2],
            "{code:?}"
        );
        assert_eq!(qp.state, QpState::Err);
    }
}

#[test]
fn ack_timeout_goes_back_n_then_exhausts_retry_cnt() {
    let (mut env, mut stats, mut qp) = sent(&[(WrOpcode::Send, 8)]);
    qp.req.retry_left = 1;
    let deadline = qp.req.timer_deadline.expect("armed");
    env.now = deadline;
    qp.on_timers(&mut env, &mut stats);
    assert_eq!(env.sent.len(), 1, "retransmitted");
    assert_eq!(stats.retransmit_timeouts, 1);
    env.now = qp.req.timer_deadline.expect("re-armed");
    qp.on_timers(&mut env, &mut stats);
    assert_eq!(env.completions[0].status, WcStatus::RetryExcErr);
    assert_eq!(qp.state, QpState::Err);
}

#[test]
fn rnr_timer_codes_follow_iba_table_45() {
    assert_eq!(rnr_timer_ns(0), 655_360_000);
    assert_eq!(rnr_timer_ns(1), 10_000);
    assert_eq!(rnr_timer_ns(13), 960_000);
    assert_eq!(rnr_timer_ns(14), 1_280_000);
    assert_eq!(rnr_timer_ns(31), 491_520_000);
}
