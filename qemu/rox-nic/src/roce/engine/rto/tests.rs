//! The retransmission timer and the tail probe, driven through the engine's QP.

use super::super::test_env::*;
use super::*;
use crate::roce::wire::{NakCode, Syndrome};
use crate::roce::*;

fn psns(env: &TestEnv) -> Vec<(u32, bool)> {
    env.sent_parsed()
        .iter()
        .map(|p| (p.hdr.bth.psn.get(), p.hdr.bth.ack_req))
        .collect()
}

/// An RC QP that measured a round trip of `rtt` and sent a 3-packet SEND (PSNs 100..=102).
fn sent_send(rtt: u64) -> (TestEnv, EngineStats, Qp) {
    let (mut env, mut stats, mut qp) = rc_fixture();
    qp.req.retry_left = 7;
    qp.req.rtt.sample(rtt);
    qp.req.rtt.sample_ack_req(rtt);
    let wqe = qp.make_wqe(send_wr(1, WrOpcode::Send, 3000));
    qp.enqueue(&mut env, &mut stats, wqe);
    env.sent.clear();
    (env, stats, qp)
}

/// Lets the timer of `qp` fire as a tail probe: checks that what it sends is the packet of
/// PSN `psn` alone, asking for an ACK, and counted as a probe; clears what was sent and
/// returns when the probe left.
fn fire_probe(env: &mut TestEnv, stats: &mut EngineStats, qp: &mut Qp, psn: u32) -> u64 {
    env.now = qp.req.timer_deadline.expect("the probe's timer");
    let probes = stats.tail_probes;
    env.sent.clear();
    qp.on_timers(env, stats);
    assert_eq!(
        psns(env),
        [(psn, true)],
        "the tail probe: the first packet not known to have arrived, asking for an ACK"
    );
    assert_eq!(stats.tail_probes, probes + 1, "counted as a tail probe");
    env.sent.clear();
    env.now
}

#[test]
fn a_stall_gets_two_tail_probes_then_the_rto_goes_back_n_without_spending_a_retry() {
    let (mut env, mut stats, mut qp) = sent_send(100_000);
    let retries = qp.req.retry_left;
    assert_eq!(
        qp.req.timer_deadline,
        Some(200_000),
        "the probe after two round trips"
    );
    fire_probe(&mut env, &mut stats, &mut qp, 100);
    assert_eq!(
        qp.req.timer_deadline,
        Some(600_000),
        "the second after twice as long"
    );
    fire_probe(&mut env, &mut stats, &mut qp, 100);
    assert_eq!(stats.tail_probes, 2);
    assert_eq!(qp.req.cursor, 1, "probes leave the cursor");
    let rto = qp.req.rtt.rto_ns(u64::MAX);
    assert_eq!(qp.req.timer_deadline, Some(600_000 + rto), "then the RTO");
    env.now += rto;
    qp.on_timers(&mut env, &mut stats);
    assert_eq!(psns(&env), [(100, false), (101, false), (102, true)]);
    assert_eq!(stats.retransmit_timeouts, 1);
    assert_eq!(
        qp.req.retry_left, retries,
        "a retry is spent only per local ACK timeout (67 ms) without progress"
    );
    // The RTO backs off and no probe comes until progress.
    assert_eq!(qp.req.timer_deadline, Some(env.now + 2 * rto));
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    assert_eq!(qp.req.timer_deadline, None, "all acknowledged");
    assert_eq!(qp.req.rtt.backoff, 0);
}

/// A responder that NAKs a gap once and then drops what follows it (rdma_rxe): the resend
/// after its NAK is lost too, so it says nothing more. The probe is the packet it waits
/// for; its ACK shows the packets after it were lost, and they go again at once: no
/// timeout.
#[test]
fn a_probe_answered_by_an_ack_short_of_what_was_sent_goes_back_at_once() {
    let (mut env, mut stats, mut qp) = sent_send(100_000);
    const SEQ_NAK: Syndrome = Syndrome::Nak(NakCode::PsnSequenceError);
    env.now = 50_000;
    ack_from_peer(&mut qp, &mut env, &mut stats, 100, SEQ_NAK);
    assert_eq!(
        psns(&env),
        [(100, false), (101, false), (102, true)],
        "fast retransmit"
    );
    // All three resends are lost (or dropped past the gap): silence until the probe, the
    // packet the responder waits for.
    fire_probe(&mut env, &mut stats, &mut qp, 100);
    env.now += 100_000;
    ack_from_peer(&mut qp, &mut env, &mut stats, 100, Syndrome::Ack);
    assert_eq!(
        psns(&env),
        [(101, false), (102, true)],
        "the rest again, at once"
    );
    assert_eq!((stats.tail_probes, stats.retransmit_timeouts), (1, 0));
    assert_eq!(stats.nak_rewinds, 2);
    // An ACK of everything after the next probe goes back nowhere.
    fire_probe(&mut env, &mut stats, &mut qp, 101);
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    assert!(env.sent.is_empty());
    assert_eq!((stats.nak_rewinds, qp.req.timer_deadline), (2, None));
}

/// An ACK that left the responder before the probe could reach it (the rest of a receive
/// batch the probe's timer interrupted) comes sooner than any round trip: it is progress,
/// not the probe's answer — no rewind, no halved window, nothing resent. The answer after
/// it (the responder, holding 100-101, repeats its newest ACK for the duplicate probe)
/// still shows the loss of 102. (Before, the early ACK went back to 102 and halved the
/// window: part of the 506-5,261 duplicate requests per 300k messages of the host bench
/// with ACKs every 8-32 frames and nothing lost.)
#[test]
fn an_ack_in_flight_before_the_tail_probe_is_not_its_answer() {
    const RTT: u64 = 100_000;
    let (mut env, mut stats, mut qp) = sent_send(RTT);
    let probe_at = fire_probe(&mut env, &mut stats, &mut qp, 100);
    let window = qp.req.window;
    env.now = probe_at + RTT / 10;
    ack_from_peer(&mut qp, &mut env, &mut stats, 101, Syndrome::Ack);
    assert!(env.sent.is_empty(), "nothing resent: {:?}", psns(&env));
    assert_eq!(stats.nak_rewinds, 0);
    assert!(qp.req.window > window / 2, "the window is not halved");
    env.now = probe_at + RTT;
    ack_from_peer(&mut qp, &mut env, &mut stats, 101, Syndrome::Ack);
    assert_eq!(psns(&env), [(102, true)], "the lost packet again, at once");
    assert_eq!((stats.nak_rewinds, stats.retransmit_timeouts), (1, 0));
    env.sent.clear();
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    assert!(env.sent.is_empty());
    assert_eq!(qp.req.timer_deadline, None, "all acknowledged");
}

/// A bulk flow: each message's first packet leaves at once and the rest, with the AckReq
/// on the last, 20 µs later; its ACK comes a round trip after that. Every sample of the
/// first packet then takes 20 µs more than a round trip. A lost message's tail probe is
/// one packet asking for an ACK: its answer, a plain round trip later, is sooner than all
/// of those samples and is still taken for the answer — the lost packets go again at
/// once, no RTO wait. (Before, the smallest round trip was the smallest of those samples:
/// the answer was refused as too early, the next probe's too, and the loss waited for
/// the RTO.) The scheduler's one-packet allowance also makes that first packet ask for an
/// ACK (the last before its next turn), which the ACK of the whole message does not answer
/// exactly: no smallest round trip is measured here, and the answer is taken on its PSN.
#[test]
fn a_probe_answered_after_one_round_trip_goes_back_though_every_sample_was_longer() {
    const RTT: u64 = 100_000;
    const SPREAD: u64 = 20_000;
    let (mut env, mut stats, mut qp) = rc_fixture();
    qp.req.retry_left = 7;
    let mut next = 100;
    for message in 0..4u64 {
        let at = message * 1_000_000;
        env.now = at;
        env.send_allowance = Some(1);
        let wqe = qp.make_wqe(send_wr(message, WrOpcode::Send, 4096));
        qp.enqueue(&mut env, &mut stats, wqe);
        env.now = at + SPREAD;
        env.send_allowance = None;
        qp.transmit(&mut env, &mut stats);
        next += 4;
        env.now = at + SPREAD + RTT;
        ack_from_peer(&mut qp, &mut env, &mut stats, next - 1, Syndrome::Ack);
    }
    assert_eq!(qp.req.rtt.srtt_ns, RTT + SPREAD, "every sample was longer");
    // PSNs 116..=118: all three lost (or dropped after the gap).
    env.now = 4_000_000;
    let wqe = qp.make_wqe(send_wr(9, WrOpcode::Send, 3000));
    qp.enqueue(&mut env, &mut stats, wqe);
    let probe_at = fire_probe(&mut env, &mut stats, &mut qp, 116);
    env.now = probe_at + RTT + 1;
    ack_from_peer(&mut qp, &mut env, &mut stats, 116, Syndrome::Ack);
    assert_eq!(
        psns(&env),
        [(117, false), (118, true)],
        "the rest again, at once"
    );
    assert_eq!((stats.nak_rewinds, stats.retransmit_timeouts), (1, 0));
}

/// An ACK of exactly the probed PSN, sooner than any round trip after the probe left,
/// answers the original (a responder that ACKs every packet, woken late): progress, not
/// the probe's answer. The same ACK again a round trip after the probe is its answer.
#[test]
fn an_ack_of_the_probed_psn_sooner_than_a_round_trip_is_not_its_answer() {
    const RTT: u64 = 100_000;
    let (mut env, mut stats, mut qp) = sent_send(RTT);
    let probe_at = fire_probe(&mut env, &mut stats, &mut qp, 100);
    env.now = probe_at + RTT / 10;
    ack_from_peer(&mut qp, &mut env, &mut stats, 100, Syndrome::Ack);
    assert!(env.sent.is_empty(), "nothing resent: {:?}", psns(&env));
    assert_eq!(stats.nak_rewinds, 0);
    env.now = probe_at + RTT;
    ack_from_peer(&mut qp, &mut env, &mut stats, 100, Syndrome::Ack);
    assert_eq!(
        psns(&env),
        [(101, false), (102, true)],
        "the lost packets again, at once"
    );
    assert_eq!((stats.nak_rewinds, stats.retransmit_timeouts), (1, 0));
}

/// A READ's response moves the oldest unacknowledged PSN past everything sent before the
/// tail probe: nothing is left for the probe's answer to show lost, and the probe is
/// forgotten then, not at the next ACK.
#[test]
fn a_read_response_past_all_sent_before_the_probe_forgets_it() {
    use crate::roce::wire::{self, opcode as op, Aeth};
    const RTT: u64 = 100_000;
    let (mut env, mut stats, mut qp) = sent_send(RTT);
    let wqe = qp.make_wqe(send_wr(2, WrOpcode::RdmaRead, 1024));
    qp.enqueue(&mut env, &mut stats, wqe);
    fire_probe(&mut env, &mut stats, &mut qp, 100);
    assert!(qp.req.rtt.tail_probe.is_some(), "the probe of 100 is out");
    env.now += RTT;
    let bytes = packet_from_peer(op::RC_READ_RESPONSE_ONLY, 103, &[9; 1024], |h| {
        h.aeth = Some(Aeth {
            syndrome: Syndrome::Ack,
            msn: Msn::default(),
        })
    });
    qp.completer_receive(&mut env, &mut stats, &wire::parse_packet(&bytes).unwrap());
    assert_eq!(env.completions.len(), 2, "the SEND and the READ");
    assert_eq!(qp.req.rtt.tail_probe, None);
}

/// A responder asleep when the window came wakes after the probe left and ACKs the
/// window in parts, then the probe: its first ACK, past the probed PSN but short of what
/// was sent, comes a round trip after the probe and is still not the answer. Had 102
/// been lost, the next probe (the first packet still missing) finds it.
#[test]
fn an_ack_past_the_probed_psn_and_short_of_the_window_is_progress_only() {
    const RTT: u64 = 100_000;
    let (mut env, mut stats, mut qp) = sent_send(RTT);
    fire_probe(&mut env, &mut stats, &mut qp, 100);
    env.now += 2 * RTT;
    ack_from_peer(&mut qp, &mut env, &mut stats, 101, Syndrome::Ack);
    assert!(env.sent.is_empty(), "nothing resent: {:?}", psns(&env));
    assert_eq!(stats.nak_rewinds, 0);
    // Silence: 102 was lost after all. The next probe is 102 itself.
    fire_probe(&mut env, &mut stats, &mut qp, 102);
    env.now += RTT;
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    assert!(env.sent.is_empty());
    assert_eq!((stats.nak_rewinds, stats.retransmit_timeouts), (0, 0));
    assert_eq!(qp.req.timer_deadline, None, "all acknowledged");
}

/// Early ACKs that end up covering everything sent before the probe leave nothing for
/// its answer to show lost: a later short ACK (of packets sent after the probe) is not
/// taken for it.
#[test]
fn once_all_sent_before_the_probe_is_acknowledged_its_answer_goes_back_nowhere() {
    const RTT: u64 = 100_000;
    let (mut env, mut stats, mut qp) = sent_send(RTT);
    let probe_at = fire_probe(&mut env, &mut stats, &mut qp, 100);
    env.now = probe_at + RTT / 10;
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    assert_eq!(qp.req.rtt.tail_probe, None, "nothing left for the answer");
    let wqe = qp.make_wqe(send_wr(2, WrOpcode::Send, 3000));
    qp.enqueue(&mut env, &mut stats, wqe);
    env.sent.clear();
    env.now = probe_at + RTT;
    ack_from_peer(&mut qp, &mut env, &mut stats, 103, Syndrome::Ack);
    assert!(env.sent.is_empty(), "resent: {:?}", psns(&env));
    assert_eq!(stats.nak_rewinds, 0);
}

/// The responder's thread got no core for two and a half scheduler ticks (a loaded host):
/// its ACK comes 10 ms late. The tail probes go (a packet each), but nothing times out
/// and no window is resent.
#[test]
fn a_responder_late_by_a_few_scheduler_ticks_causes_no_timeout() {
    let (mut env, mut stats, mut qp) = sent_send(100_000);
    let late = 10 * SCHED_TICK_NS / 4;
    while let Some(deadline) = qp.req.timer_deadline.filter(|&t| t <= late) {
        env.now = deadline;
        qp.on_timers(&mut env, &mut stats);
    }
    env.now = late;
    qp.on_timers(&mut env, &mut stats);
    assert_eq!(
        psns(&env),
        [(100, true), (100, true)],
        "the two probes only"
    );
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    assert_eq!(stats.retransmit_timeouts, 0);
    assert_eq!(psns(&env).len(), 2, "nothing resent");
    assert_eq!(qp.req.timer_deadline, None, "all acknowledged");
}

/// A 3-packet SEND (PSNs 100..=102 onwards) on `qp` at `env.now`; clears what was sent.
fn send_three(env: &mut TestEnv, stats: &mut EngineStats, qp: &mut Qp, id: u64) {
    let wqe = qp.make_wqe(send_wr(id, WrOpcode::Send, 3000));
    qp.enqueue(env, stats, wqe);
    env.sent.clear();
}

/// A responder that answered late once (its thread waited for a core; nothing lost): the
/// SEND's ACK came 30 µs after the probe, sooner than any probe is answered, so the probe
/// was spurious. The probe time grows by that lateness, and the next answer as late gets
/// no probe: nothing is sent twice. (Before, each such answer cost a probe of a packet that
/// had arrived: the duplicates of lossless two-guest runs.)
#[test]
fn a_responder_late_once_gets_no_probe_the_next_time() {
    const RTT: u64 = 100_000;
    const LATE: u64 = 30_000;
    let (mut env, mut stats, mut qp) = sent_send(RTT);
    let probe_at = fire_probe(&mut env, &mut stats, &mut qp, 100);
    assert_eq!(probe_at, 2 * RTT);
    env.now = probe_at + LATE;
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    assert!(env.sent.is_empty(), "nothing resent: {:?}", psns(&env));
    assert_eq!((stats.nak_rewinds, lateness(&qp)), (0, LATE));
    // The next SEND, answered as late: no probe.
    let start = env.now;
    send_three(&mut env, &mut stats, &mut qp, 2);
    assert_eq!(qp.req.timer_deadline, Some(start + 2 * RTT + LATE));
    env.now = start + 2 * RTT + LATE - 1;
    qp.on_timers(&mut env, &mut stats);
    ack_from_peer(&mut qp, &mut env, &mut stats, 105, Syndrome::Ack);
    assert!(env.sent.is_empty(), "sent again: {:?}", psns(&env));
    assert_eq!(
        (
            stats.tail_probes,
            stats.retransmit_timeouts,
            stats.nak_rewinds
        ),
        (1, 0, 0)
    );
    assert_eq!(qp.req.timer_deadline, None, "all acknowledged");
}

/// After that lesson a lost tail is still found by the probe, before the RTO: its answer
/// (an ACK of the first packet only) shows the loss, the rest goes again at once, and the
/// lateness learnt is forgotten (the probe was needed).
#[test]
fn a_lost_tail_after_a_spurious_probe_is_still_found_by_the_next() {
    const RTT: u64 = 100_000;
    let (mut env, mut stats, mut qp) = sent_send(RTT);
    let probe_at = fire_probe(&mut env, &mut stats, &mut qp, 100);
    env.now = probe_at + 30_000;
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    let start = env.now;
    send_three(&mut env, &mut stats, &mut qp, 2);
    // 104 and 105 are lost.
    let probe_at = fire_probe(&mut env, &mut stats, &mut qp, 103);
    assert!(probe_at - start < qp.rto_ns().unwrap(), "before the RTO");
    env.now = probe_at + RTT;
    ack_from_peer(&mut qp, &mut env, &mut stats, 103, Syndrome::Ack);
    assert_eq!(
        psns(&env),
        [(104, false), (105, true)],
        "the lost tail again, at once"
    );
    assert_eq!((stats.nak_rewinds, stats.retransmit_timeouts), (1, 0));
    assert_eq!(lateness(&qp), 0);
}

/// An ACK of everything a round trip or more after the probe may be its answer (the probe
/// took the lost last packet's place): nothing is learnt from it.
#[test]
fn an_answer_a_round_trip_after_the_probe_teaches_no_lateness() {
    const RTT: u64 = 100_000;
    let (mut env, mut stats, mut qp) = sent_send(RTT);
    let probe_at = fire_probe(&mut env, &mut stats, &mut qp, 100);
    env.now = probe_at + RTT;
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    assert_eq!(lateness(&qp), 0);
}

/// The originals queued in front of the responder (at 256 QPs in two guests, ~100 frames,
/// draining as fast as its thread got a core): their ACK overtakes the probe later than a
/// round trip, and then the responder answers the probe, a duplicate, by repeating it. That
/// repeat shows the probe was spurious: the lateness learnt is the time from the probe to
/// the originals' ACK. (Before, every such probe went unlearnt: in a traced lab 50 of 62
/// probed originals reached the responder only after their probe left.)
#[test]
fn a_repeat_of_the_ack_that_overtook_a_probe_shows_it_spurious() {
    const RTT: u64 = 100_000;
    let (mut env, mut stats, mut qp) = sent_send(RTT);
    let probe_at = fire_probe(&mut env, &mut stats, &mut qp, 100);
    env.now = probe_at + RTT + 10_000;
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    assert_eq!(lateness(&qp), 0, "the probe's answer or the originals' ACK");
    env.now += 50_000;
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    assert_eq!(lateness(&qp), RTT + 10_000, "the probe was a duplicate");
    assert!(env.sent.is_empty(), "nothing resent: {:?}", psns(&env));
    assert_eq!(stats.nak_rewinds, 0);
}

/// A probe that took a lost last packet's place is answered once; the next ACK is of new
/// packets: nothing is learnt.
#[test]
fn an_ack_of_new_packets_after_an_overtaken_probe_teaches_nothing() {
    const RTT: u64 = 100_000;
    let (mut env, mut stats, mut qp) = sent_send(RTT);
    let probe_at = fire_probe(&mut env, &mut stats, &mut qp, 100);
    env.now = probe_at + RTT;
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    send_three(&mut env, &mut stats, &mut qp, 2);
    env.now += RTT;
    ack_from_peer(&mut qp, &mut env, &mut stats, 105, Syndrome::Ack);
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    assert_eq!(lateness(&qp), 0);
}

/// However late the answers were, the probe stays due before the RTO: a real tail loss after
/// a long stall is still found by a probe, not by the RTO.
#[test]
fn the_learnt_lateness_never_takes_the_probe_past_the_rto_floor() {
    let (env, _, mut qp) = sent_send(100_000);
    qp.probe_was_spurious(1_000, 1_000 + 10 * RTO_MIN_NS);
    assert_eq!(lateness(&qp), LATENESS_MAX_NS);
    qp.restart_timer(env.now);
    let rto = qp.rto_ns().expect("the QP has an ACK timeout");
    let deadline = qp.req.timer_deadline.expect("a timer is armed");
    assert!(
        qp.req.timer_probe,
        "the timer armed is the probe's, not the RTO's"
    );
    assert!(
        deadline - env.now < rto,
        "probe due {} ns after, RTO {rto}",
        deadline - env.now
    );
}

/// What one QP learnt delays the probes of every QP sharing its lateness (an engine's): a
/// peer's thread waiting for a core delays the answers of all QPs in flight at once.
#[test]
fn a_lateness_learnt_by_one_qp_delays_the_probe_of_another() {
    const RTT: u64 = 100_000;
    let (mut env, mut stats, mut qp) = sent_send(RTT);
    let (mut env2, mut stats2, mut other) = sent_send(RTT);
    other.req.pto_lateness = std::sync::Arc::clone(&qp.req.pto_lateness);
    let probe_at = fire_probe(&mut env, &mut stats, &mut qp, 100);
    env.now = probe_at + 30_000;
    ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    other.restart_timer(env2.now);
    assert_eq!(other.req.timer_deadline, Some(env2.now + 2 * RTT + 30_000));
    env2.now += 2 * RTT + 29_999;
    other.on_timers(&mut env2, &mut stats2);
    assert_eq!(stats2.tail_probes, 0);
}

fn lateness(qp: &Qp) -> u64 {
    qp.req.pto_lateness.at(0)
}

/// The lateness fades by half per second after it was last learnt, so a link whose answers
/// stopped being late gets its fast probes back.
#[test]
fn the_learnt_lateness_halves_every_second() {
    let (_, _, qp) = sent_send(100_000);
    let t = 5 * LATENESS_HALF_LIFE_NS;
    qp.probe_was_spurious(t - 400_000, t);
    let late = |at| qp.req.pto_lateness.at(at);
    assert_eq!(late(t + LATENESS_HALF_LIFE_NS - 1), 400_000);
    assert_eq!(late(t + LATENESS_HALF_LIFE_NS), 200_000);
    assert_eq!(late(t + 3 * LATENESS_HALF_LIFE_NS), 50_000);
    // Learnt again: the larger of what is left and the new lateness, from then on.
    qp.probe_was_spurious(
        t + LATENESS_HALF_LIFE_NS,
        t + LATENESS_HALF_LIFE_NS + 100_000,
    );
    assert_eq!(late(t + LATENESS_HALF_LIFE_NS + 100_000), 200_000);
}

#[test]
fn the_rto_floor_is_three_scheduler_ticks() {
    let mut e = RttEstimator::default();
    e.sample(50_000);
    assert_eq!(e.rto_ns(u64::MAX), 3 * SCHED_TICK_NS);
}

#[test]
fn timeouts_spend_retries_once_the_attribute_timeout_passed() {
    let (mut env, mut stats, mut qp) = sent_send(1_000_000);
    let attr = qp.ack_timeout_ns().unwrap();
    let retries = qp.req.retry_left;
    let mut spent_at = Vec::new();
    while env.now < 3 * attr {
        env.now = qp.req.timer_deadline.expect("armed");
        qp.on_timers(&mut env, &mut stats);
        if qp.req.retry_left != retries - spent_at.len() as u8 {
            spent_at.push(env.now);
        }
    }
    assert!(stats.retransmit_timeouts > 3);
    assert_eq!(spent_at.len(), 3, "one per attribute timeout: {spent_at:?}");
}

/// A congested queue drops the resend after each timeout too, so the responder NAKs the
/// same PSN behind every timeout: the same loss, which spends a retry only per local ACK
/// timeout, as the timeouts do. (A timeout used to forget the loss, so each NAK behind it
/// spent a retry of its own: the congestion lab's CC-off WRITE flow ran out of its 7 in
/// a few hundred ms of a loaded host, RETRY_EXC_ERR.)
#[test]
fn a_sequence_nak_behind_each_timeout_spends_no_more_than_the_timeouts() {
    const SEQ_NAK: Syndrome = Syndrome::Nak(NakCode::PsnSequenceError);
    let (mut env, mut stats, mut qp) = sent_send(1_000_000);
    let attr = qp.ack_timeout_ns().unwrap();
    let retries = qp.req.retry_left;
    let mut spent_at = Vec::new();
    let mut count_spent = |qp: &Qp, now| {
        if qp.req.retry_left != retries - spent_at.len() as u8 {
            spent_at.push(now);
        }
    };
    while env.now < 3 * attr {
        env.now = qp.req.timer_deadline.expect("armed: the WR did not fail");
        let timeouts = stats.retransmit_timeouts;
        qp.on_timers(&mut env, &mut stats);
        count_spent(&qp, env.now);
        if stats.retransmit_timeouts > timeouts {
            // The resend of PSN 100 was dropped, the ones after it arrived: a NAK.
            env.now += qp.req.rtt.srtt_ns;
            ack_from_peer(&mut qp, &mut env, &mut stats, 100, SEQ_NAK);
            count_spent(&qp, env.now);
        }
    }
    assert!(stats.retransmit_timeouts > 3 && stats.nak_rewinds > 3);
    assert_eq!(spent_at.len(), 3, "one per attribute timeout: {spent_at:?}");
}

/// A NAK for a PSN past a READ whose response has not come (stale: it asks no rewind) still
/// acknowledges the WRITE before that READ: its completion is written at once.
#[test]
fn a_stale_nak_completes_the_writes_it_acknowledges() {
    let (mut env, mut stats, mut qp) = rc_fixture();
    for (id, opcode) in [
        (1, WrOpcode::RdmaWrite),
        (2, WrOpcode::RdmaRead),
        (3, WrOpcode::RdmaWrite),
    ] {
        let wqe = qp.make_wqe(send_wr(id, opcode, 8));
        qp.enqueue(&mut env, &mut stats, wqe);
    }
    assert_eq!(
        qp.req.next_psn.get(),
        103,
        "one packet each, PSNs 100..=102"
    );
    let stale = stats.rx_stale_responses;
    env.now += 1_000;
    ack_from_peer(
        &mut qp,
        &mut env,
        &mut stats,
        102,
        Syndrome::Nak(NakCode::PsnSequenceError),
    );
    assert_eq!(
        stats.rx_stale_responses,
        stale + 1,
        "no rewind past the READ"
    );
    assert_eq!(
        qp.una().get(),
        101,
        "the WRITE before the READ is acknowledged"
    );
    let done: Vec<u64> = env.completions.iter().map(|c| c.wr_id).collect();
    assert_eq!(done, [1], "its completion written with the NAK");
}

#[test]
fn a_repeated_sequence_nak_rewinds_again_only_after_half_a_round_trip() {
    let (mut env, mut stats, mut qp) = sent_send(100_000);
    const SEQ_NAK: Syndrome = Syndrome::Nak(NakCode::PsnSequenceError);
    ack_from_peer(&mut qp, &mut env, &mut stats, 101, SEQ_NAK);
    assert_eq!(psns(&env), [(101, false), (102, true)], "fast retransmit");
    env.sent.clear();
    env.now += 10_000;
    ack_from_peer(&mut qp, &mut env, &mut stats, 101, SEQ_NAK);
    assert!(
        env.sent.is_empty(),
        "answers packets sent before the rewind"
    );
    assert_eq!(stats.rx_stale_responses, 1);
    env.now += 50_000;
    ack_from_peer(&mut qp, &mut env, &mut stats, 101, SEQ_NAK);
    assert_eq!(
        psns(&env),
        [(101, false), (102, true)],
        "the resend was lost"
    );
    assert_eq!(stats.nak_rewinds, 2);
    assert_eq!(
        qp.req.retry_left, 6,
        "the same loss NAKed again spends a retry only per local ACK timeout"
    );
}

#[test]
fn acks_of_first_transmissions_give_round_trip_samples() {
    let (mut env, mut stats, mut qp) = rc_fixture();
    env.now = 1_000;
    let wqe = qp.make_wqe(send_wr(1, WrOpcode::Send, 8));
    qp.enqueue(&mut env, &mut stats, wqe);
    assert_eq!(
        qp.req.timer_deadline,
        Some(1_000 + qp.ack_timeout_ns().unwrap())
    );
    env.now = 31_000;
    ack_from_peer(&mut qp, &mut env, &mut stats, 100, Syndrome::Ack);
    assert_eq!(qp.req.rtt.srtt_ns, 30_000);
    // A retransmitted packet is not timed (Karn).
    let wqe = qp.make_wqe(send_wr(2, WrOpcode::Send, 8));
    qp.enqueue(&mut env, &mut stats, wqe);
    qp.rewind_to(Psn::from_wire(101));
    qp.rtt_forget_probe();
    qp.transmit(&mut env, &mut stats);
    env.now = 1_000_000;
    ack_from_peer(&mut qp, &mut env, &mut stats, 101, Syndrome::Ack);
    assert_eq!(qp.req.rtt.srtt_ns, 30_000);
}

#[test]
fn rto_follows_the_samples_within_the_floor_and_the_attribute() {
    let mut e = RttEstimator::default();
    let attr = 537_000_000;
    assert_eq!(
        e.rto_ns(attr),
        attr,
        "no sample yet: the attribute's timeout"
    );
    e.sample(10_000_000);
    assert_eq!((e.srtt_ns, e.rttvar_ns), (10_000_000, 5_000_000));
    assert_eq!(e.rto_ns(attr), 30_000_000, "srtt + 4 rttvar");
    for _ in 0..50 {
        e.sample(100_000);
    }
    assert!(e.srtt_ns < 200_000, "converges: {}", e.srtt_ns);
    assert_eq!(e.rto_ns(attr), RTO_MIN_NS, "never below the floor");
    assert_eq!(e.rto_ns(1_000_000), 1_000_000, "never beyond the attribute");
}

#[test]
fn timeouts_in_a_row_double_the_rto_up_to_the_attribute() {
    let mut e = RttEstimator::default();
    e.sample(1_000_000);
    let base = e.rto_ns(u64::MAX);
    e.backoff = 1;
    assert_eq!(e.rto_ns(u64::MAX), 2 * base);
    e.backoff = 3;
    assert_eq!(e.rto_ns(u64::MAX), 8 * base);
    e.backoff = 40;
    assert_eq!(e.rto_ns(50_000_000), 50_000_000);
}

#[test]
fn a_repeated_nak_counts_after_half_a_round_trip() {
    let mut e = RttEstimator::default();
    assert_eq!(e.nak_repeat_ns(), NAK_REPEAT_MIN_NS);
    e.sample(4_000_000);
    assert_eq!(e.nak_repeat_ns(), 2_000_000);
}
