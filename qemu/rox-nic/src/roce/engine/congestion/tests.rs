//! Congestion control in the engine on a controlled clock: CNPs sent and taken, the paced
//! requester, and paced READ responses with every other response of their QP behind them.

use super::super::test_env::{self, *};
use super::*;
use crate::roce::cc::{dcqcn, CcConfig, ECN_ECT0, ECN_NOT_ECT};
use crate::roce::wire::{Aeth, NakCode, Reth, Syndrome};
use rox_uapi::verbs::{ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ};

const US: u64 = 1000;

fn engine_with(cc: CcConfig, env: &mut TestEnv, qp_type: QpType) -> Engine {
    let mut engine = Engine::new().with_cc(cc);
    engine.create_qp(rts_qp(qp_type).cfg).unwrap();
    // A 268 ms local ACK timeout: the pacing tests watch the timer.
    engine
        .modify_qp(env, LOCAL_QPN, &rts_modify_timed())
        .unwrap();
    engine
}

/// Posts WR 1, an `opcode` of `len` bytes ([`send_wr`]), on the test QP.
fn post(engine: &mut Engine, env: &mut TestEnv, opcode: WrOpcode, len: u32) {
    engine
        .post_send(env, LOCAL_QPN, send_wr(1, opcode, len))
        .unwrap();
}

fn cc_off() -> CcConfig {
    CcConfig {
        enabled: false,
        ..CcConfig::default()
    }
}

/// `packet` as a congested router leaves it: ECN set to CE (the IPv4 header checksum
/// fixed; the ICRC masks the TOS byte).
fn marked_ce(mut packet: Vec<u8>) -> Vec<u8> {
    packet[1] |= ECN_CE;
    packet[10..12].fill(0);
    let sum = wire::ipv4_header_checksum(&packet[..20]);
    packet[10..12].copy_from_slice(&sum.to_be_bytes());
    packet
}

fn cnp_from_peer(dest: Qpn) -> Vec<u8> {
    packet_from_peer(op::CNP, 0, &CNP_RESERVED, |h| {
        h.bth.dest_qpn = dest;
        h.bth.ack_req = false;
    })
}

fn sends(env: &mut TestEnv, n: usize) {
    for i in 0..n {
        env.recv.push_back(RecvWr {
            wqe_index: 0,
            wr_id: i as u64,
            sges: Vec::new(),
        });
    }
}

#[test]
fn ce_marked_packets_get_one_cnp_per_min_time_between_cnps() {
    let mut env = TestEnv::new();
    let mut engine = engine_with(CcConfig::default(), &mut env, QpType::Rc);
    sends(&mut env, 3);
    for (psn, at) in [(100, 0), (101, US), (102, 5 * US)] {
        env.now = 1_000_000 + at;
        let send = marked_ce(packet_from_peer(op::RC_SEND_ONLY, psn, &[], |_| {}));
        engine.receive(&mut env, &send).unwrap();
    }
    engine.poll(&mut env);
    let cnps: Vec<_> = env.sent.iter().filter(|p| p[20 + 8] == op::CNP).collect();
    assert_eq!(
        cnps.len(),
        2,
        "at 0 and 5 µs; the one at 1 µs is within 4 µs"
    );
    let cnp = wire::parse_packet(cnps[0]).expect("a valid packet (ICRC, lengths)");
    assert_eq!(cnp.hdr.bth.dest_qpn, PEER_QPN, "to the sender's QP");
    assert_eq!((cnp.hdr.bth.psn.get(), cnp.hdr.bth.ack_req), (0, false));
    assert_eq!(cnp.payload, &[0; 16], "16 reserved bytes");
    assert_eq!(cnps[0][20 + 8 + 1], 0, "no flags");
    assert_eq!(cnps[0][20 + 8 + 4], 0x40, "BECN");
    assert_eq!(
        wire::ecn_of(cnp.ip_header),
        ECN_NOT_ECT,
        "a CNP is not paced"
    );
    let acks: Vec<_> = env
        .sent_parsed()
        .into_iter()
        .filter(|p| p.hdr.bth.opcode == op::RC_ACKNOWLEDGE)
        .collect();
    assert!(!acks.is_empty());
    for ack in acks {
        assert_eq!(wire::ecn_of(ack.ip_header), ECN_NOT_ECT, "nor an ACK");
    }
    assert_eq!(wire::ipv4_header_checksum(cnp.ip_header), 0);
    assert_eq!(cnp.ip_header[1] >> 2, 48, "mlx5's default cnp_dscp (CS6)");
    let s = engine.stats();
    assert_eq!((s.np_ecn_marked_roce_packets, s.np_cnp_sent), (3, 2));
    assert_eq!(
        env.completions.len(),
        3,
        "the SENDs themselves were delivered"
    );
}

/// A CNP carries the device's cnp_dscp, not the QP's traffic class; the requests keep
/// the QP's.
#[test]
fn a_cnp_carries_cnp_dscp_whatever_the_qps_traffic_class() {
    let mut env = TestEnv::new();
    let mut cc = CcConfig::default();
    cc.params.apply_list("cnp_dscp=26,cnp_802p_prio=3").unwrap();
    let mut engine = engine_with(cc, &mut env, QpType::Rc);
    engine
        .qps
        .get_mut(&LOCAL_QPN)
        .unwrap()
        .av
        .as_mut()
        .unwrap()
        .traffic_class = 10 << 2;
    sends(&mut env, 1);
    let send = marked_ce(packet_from_peer(op::RC_SEND_ONLY, 100, &[], |_| {}));
    engine.receive(&mut env, &send).unwrap();
    engine.poll(&mut env);
    post(&mut engine, &mut env, WrOpcode::RdmaWrite, 64);
    let sent = env.sent_parsed();
    let tos = |opcode| {
        let p = sent.iter().find(|p| p.hdr.bth.opcode == opcode).unwrap();
        assert_eq!(wire::ipv4_header_checksum(p.ip_header), 0);
        p.ip_header[1]
    };
    assert_eq!(tos(op::CNP), 26 << 2, "DSCP 26, Not-ECT");
    assert_eq!(tos(op::RC_WRITE_ONLY), 10 << 2 | ECN_ECT0, "the QP's own");
    assert_eq!(tos(op::RC_ACKNOWLEDGE), 10 << 2, "the QP's own, Not-ECT");
}

#[test]
fn with_cc_off_packets_are_not_ect_ce_is_counted_and_cnps_ignored() {
    let mut env = TestEnv::new();
    let mut engine = engine_with(cc_off(), &mut env, QpType::Rc);
    sends(&mut env, 1);
    let send = marked_ce(packet_from_peer(op::RC_SEND_ONLY, 100, &[], |_| {}));
    engine.receive(&mut env, &send).unwrap();
    engine.receive(&mut env, &cnp_from_peer(LOCAL_QPN)).unwrap();
    engine.poll(&mut env);
    let sent = env.sent_parsed();
    assert_eq!(sent.len(), 1, "the ACK, no CNP");
    assert_eq!(sent[0].hdr.bth.opcode, op::RC_ACKNOWLEDGE);
    assert_eq!(wire::ecn_of(sent[0].ip_header), ECN_NOT_ECT);
    let s = engine.stats();
    assert_eq!(
        (s.np_ecn_marked_roce_packets, s.np_cnp_sent),
        (1, 0),
        "CE still counted"
    );
    assert_eq!((s.rp_cnp_handled, s.rp_cnp_ignored), (0, 1));
    // Nothing is paced either.
    post(&mut engine, &mut env, WrOpcode::RdmaWrite, 8 * 1024);
    assert_eq!(env.sent.len(), 1 + 8);
}

#[test]
fn cnps_no_rc_or_uc_qp_can_take_are_dropped_and_counted_alone() {
    let mut env = TestEnv::new();
    let mut engine = engine_with(CcConfig::default(), &mut env, QpType::Ud);
    let before = engine.stats().clone();
    let unknown = Qpn::from_wire(0x777);
    for dest in [unknown, LOCAL_QPN] {
        assert_eq!(
            engine.receive(&mut env, &cnp_from_peer(dest)),
            Err(RxDrop::UnwantedCnp(dest))
        );
    }
    let s = engine.stats();
    assert_eq!(s.rx_cnp_dropped, 2);
    let others = EngineStats {
        rx_packets: before.rx_packets + 2,
        rx_cnp_dropped: 2,
        ..before
    };
    assert_eq!(*s, others, "no other counter moved");
    // From an address other than an RC QP's peer: dropped too.
    let mut env = TestEnv::new();
    let mut engine = engine_with(CcConfig::default(), &mut env, QpType::Rc);
    let stranger = from_source(cnp_from_peer(LOCAL_QPN), [10, 0, 0, 9]);
    assert_eq!(
        engine.receive(&mut env, &stranger),
        Err(RxDrop::UnwantedCnp(LOCAL_QPN))
    );
    assert_eq!(engine.stats().rp_cnp_handled, 0);
}

#[test]
fn a_cnp_paces_the_requester_through_the_engine_timer() {
    let mut env = TestEnv::new();
    let mut engine = engine_with(CcConfig::default(), &mut env, QpType::Rc);
    env.now = 1_000_000;
    engine.receive(&mut env, &cnp_from_peer(LOCAL_QPN)).unwrap();
    assert_eq!(engine.stats().rp_cnp_handled, 1);
    assert_eq!(engine.next_deadline(), None, "nothing to send: no timer");
    post(&mut engine, &mut env, WrOpcode::RdmaWrite, 4 * 1024);
    assert_eq!(env.sent.len(), 1, "the first packet goes, the rest wait");
    let request = wire::parse_packet(&env.sent[0]).unwrap();
    assert_eq!(
        wire::ecn_of(request.ip_header),
        ECN_ECT0,
        "paced: ECN-capable"
    );
    let qp = &engine.qps[&LOCAL_QPN];
    let rate = qp.cc.rate_kbps();
    let gap = crate::roce::cc::dcqcn::wire_time_ns(env.sent[0].len() as u64, rate);
    let wake = qp.cc.wake_at.expect("paced");
    assert_eq!(wake, 1_000_000 + gap);
    // The engine's deadline is the pacing time (the ACK timeout is later).
    assert_eq!(engine.next_deadline(), Some(wake));
    env.now = wake - 1;
    engine.poll(&mut env);
    assert_eq!(env.sent.len(), 1, "not before its time");
    env.now = wake;
    engine.poll(&mut env);
    assert_eq!(env.sent.len(), 2);
}

fn ack_from_peer(psn: u32) -> Vec<u8> {
    packet_from_peer(op::RC_ACKNOWLEDGE, psn, &[], |h| {
        h.aeth = Some(wire::Aeth {
            syndrome: wire::Syndrome::Ack,
            msn: Msn::default(),
        })
    })
}

/// Across a pacing gap with every sent packet ACKed (an RTT sample taken), nothing is in
/// flight: no tail probe (it would bypass pacing) and no timeout, at any rate.
#[test]
fn a_paced_qp_with_everything_sent_acked_takes_no_probe_or_timeout() {
    for line_rate in [10, 2] {
        let mut env = TestEnv::new();
        let mut cc = CcConfig::default();
        cc.params.line_rate = line_rate;
        let mut engine = engine_with(cc, &mut env, QpType::Rc);
        env.now = 1_000_000;
        engine.receive(&mut env, &cnp_from_peer(LOCAL_QPN)).unwrap();
        post(&mut engine, &mut env, WrOpcode::RdmaWrite, 4 * 1024);
        let mut wake_ups = 0;
        while let Some(last) = env.sent_parsed().last().map(|p| p.hdr.bth.psn.get()) {
            // Each packet is ACKed 10 µs after it went, then the QP waits for its pacing
            // (waking at each DCQCN increase event).
            env.now += 10 * US;
            engine.receive(&mut env, &ack_from_peer(last)).unwrap();
            let Some(next) = engine.next_deadline() else {
                break;
            };
            env.now = env.now.max(next);
            engine.poll(&mut env);
            wake_ups += 1;
            assert!(wake_ups < 10_000, "line rate {line_rate}: it goes on");
        }
        let s = engine.stats();
        assert_eq!(env.sent.len(), 4, "line rate {line_rate}: paced, all sent");
        assert_eq!((s.tail_probes, s.retransmit_timeouts), (0, 0));
        assert_eq!(engine.next_deadline(), None, "all ACKed: no timer");
    }
}

/// The same when the port's scheduler holds the QP back for many round trips.
#[test]
fn a_qp_the_scheduler_holds_back_with_everything_acked_takes_no_probe() {
    let mut env = TestEnv::new();
    let mut engine = engine_with(cc_off(), &mut env, QpType::Rc);
    env.send_allowance = Some(1);
    env.now = 1_000_000;
    post(&mut engine, &mut env, WrOpcode::RdmaWrite, 4 * 1024);
    assert_eq!(env.sent.len(), 1);
    env.now += 10 * US;
    engine.receive(&mut env, &ack_from_peer(100)).unwrap();
    assert_eq!(engine.next_deadline(), None, "nothing in flight");
    env.now += 100_000 * US;
    engine.poll(&mut env);
    let s = engine.stats();
    assert_eq!((s.tail_probes, s.retransmit_timeouts), (0, 0));
    assert_eq!(env.sent.len(), 1, "still held back");
    env.send_allowance = None;
    engine.resume_send(&mut env, LOCAL_QPN);
    assert_eq!(env.sent.len(), 4);
    assert!(
        engine.next_deadline().is_some(),
        "in flight again: the timer runs"
    );
}

#[test]
fn a_qp_that_cannot_receive_sends_no_cnp_and_a_flushed_one_no_timer() {
    let mut env = TestEnv::new();
    let mut engine = engine_with(CcConfig::default(), &mut env, QpType::Rc);
    engine.receive(&mut env, &cnp_from_peer(LOCAL_QPN)).unwrap();
    post(&mut engine, &mut env, WrOpcode::RdmaWrite, 4 * 1024);
    assert!(engine.next_deadline().is_some(), "paced");
    engine.set_error(&mut env, LOCAL_QPN).unwrap();
    assert_eq!(
        engine.next_deadline(),
        None,
        "a flushed QP waits for nothing"
    );
    env.sent.clear();
    let send = marked_ce(packet_from_peer(op::RC_SEND_ONLY, 100, &[], |_| {}));
    assert_eq!(
        engine.receive(&mut env, &send),
        Err(RxDrop::NoQp(LOCAL_QPN))
    );
    assert!(env.sent.is_empty(), "no CNP from a QP in ERR");
    let s = engine.stats();
    assert_eq!((s.np_ecn_marked_roce_packets, s.np_cnp_sent), (1, 0));
}

/// An engine whose test QP answers READs and atomics (four at once).
fn responder(cc: CcConfig, env: &mut TestEnv) -> Engine {
    let mut engine = Engine::new().with_cc(cc);
    engine.create_qp(rts_qp(QpType::Rc).cfg).unwrap();
    let modify = QpModify {
        access_flags: Some(ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC),
        max_dest_rd_atomic: Some(4),
        ..rts_modify()
    };
    engine.modify_qp(env, LOCAL_QPN, &modify).unwrap();
    fill_pattern(env, MEM_LEN);
    engine
}

fn read_request(psn: u32, va: u64, len: u32) -> Vec<u8> {
    packet_from_peer(op::RC_READ_REQUEST, psn, &[], |h| {
        h.reth = Some(Reth {
            va,
            rkey: RKEY,
            dma_len: len,
        })
    })
}

/// Plays the engine's timers until none is armed (none may be past 1 s): the time each
/// packet sent from `first` on left at.
fn play_timers(engine: &mut Engine, env: &mut TestEnv, first: usize) -> Vec<u64> {
    let mut at = vec![env.now; env.sent.len() - first];
    while let Some(t) = engine.next_deadline() {
        assert!(t < env.now + 1_000_000_000, "a timer a second away");
        env.now = env.now.max(t);
        engine.poll(env);
        at.resize(env.sent.len() - first, env.now);
    }
    at
}

/// A READ's responses leave at once while the QP is not cut. A CNP cuts the QP's rate,
/// and the next READ's responses leave one per their time at that rate, through the
/// engine's timer, with the right data; with CC on they are ECN-capable.
#[test]
fn a_cnp_cuts_the_rate_of_a_read_response_stream() {
    const LEN: u32 = 16 * 1024;
    let mut env = TestEnv::new();
    let mut engine = responder(CcConfig::default(), &mut env);
    env.now = 1_000_000;
    engine
        .receive(&mut env, &read_request(100, 0, LEN))
        .unwrap();
    assert_eq!(env.sent.len(), 16, "uncut: all 16 responses at once");
    assert_eq!(engine.next_deadline(), None);
    engine.receive(&mut env, &cnp_from_peer(LOCAL_QPN)).unwrap();
    assert_eq!(engine.stats().rp_cnp_handled, 1);
    let rate = engine.qps[&LOCAL_QPN].cc.rate_kbps();
    engine
        .receive(&mut env, &read_request(116, 0x4000, LEN))
        .unwrap();
    assert_eq!(
        env.sent.len(),
        17,
        "cut: the first response goes, the rest wait"
    );
    let at = play_timers(&mut engine, &mut env, 16);
    let sent = env.sent_parsed();
    let responses = &sent[16..];
    assert_eq!(responses.len(), 16);
    for (i, p) in responses.iter().enumerate() {
        assert_eq!(p.hdr.bth.psn.get(), 116 + i as u32, "in order, each once");
        assert_eq!(wire::ecn_of(p.ip_header), ECN_ECT0, "paced: ECN-capable");
        if i > 0 {
            let gap = dcqcn::wire_time_ns(env.sent[16 + i - 1].len() as u64, rate);
            assert_eq!(
                at[i] - at[i - 1],
                gap,
                "response {i}: its time at the cut rate"
            );
        }
    }
    let data: Vec<u8> = responses.iter().flat_map(|p| p.payload.to_vec()).collect();
    assert_eq!(data, env.mem[0x4000..0x4000 + LEN as usize]);
    for p in &sent[..16] {
        assert_eq!(wire::ecn_of(p.ip_header), ECN_ECT0);
    }
    // With CC off, READ responses are Not-ECT.
    let mut env = TestEnv::new();
    let mut engine = responder(cc_off(), &mut env);
    engine
        .receive(&mut env, &read_request(100, 0, 2048))
        .unwrap();
    for p in env.sent_parsed() {
        assert_eq!(wire::ecn_of(p.ip_header), ECN_NOT_ECT);
    }
}

/// A responder whose QP a CNP cut to 100 Mb/s, with `recv_wrs` receive WRs posted and an
/// 8 KiB READ (PSN 100..107) queued behind the pacing.
fn paced_responder(env: &mut TestEnv, recv_wrs: usize) -> Engine {
    let mut cc = CcConfig::default();
    cc.params.rate_to_set_on_first_cnp = 100;
    let mut engine = responder(cc, env);
    sends(env, recv_wrs);
    env.now = 1_000_000;
    engine.receive(env, &cnp_from_peer(LOCAL_QPN)).unwrap();
    engine
        .receive(env, &read_request(100, 0, 8 * 1024))
        .unwrap();
    engine
}

/// Responses leave in PSN order: the ACK of a SEND behind a paced READ waits for its
/// responses; a duplicate READ from the middle of it (the requester's retry) replaces
/// the waiting rest, so no response is sent twice.
#[test]
fn an_ack_waits_for_paced_read_responses_and_a_retried_read_replaces_the_rest() {
    let mut env = TestEnv::new();
    let mut engine = paced_responder(&mut env, 1);
    let send = packet_from_peer(op::RC_SEND_ONLY, 108, &[], |_| {});
    engine.receive(&mut env, &send).unwrap();
    engine.poll(&mut env);
    assert_eq!(env.sent.len(), 1, "one response, no ACK yet");
    // The requester asks again from PSN 103 (3 KiB in).
    engine
        .receive(&mut env, &read_request(103, 3 * 1024, 5 * 1024))
        .unwrap();
    play_timers(&mut engine, &mut env, 0);
    let sent = env.sent_parsed();
    let order: Vec<(u8, u32)> = sent
        .iter()
        .map(|p| (p.hdr.bth.opcode, p.hdr.bth.psn.get()))
        .collect();
    use op::*;
    assert_eq!(
        order,
        [
            (RC_READ_RESPONSE_FIRST, 100),
            (RC_READ_RESPONSE_MIDDLE, 101),
            (RC_READ_RESPONSE_MIDDLE, 102),
            // The retry's responses, as IBA wants them: FIRST at the PSN it asked from.
            (RC_READ_RESPONSE_FIRST, 103),
            (RC_READ_RESPONSE_MIDDLE, 104),
            (RC_READ_RESPONSE_MIDDLE, 105),
            (RC_READ_RESPONSE_MIDDLE, 106),
            (RC_READ_RESPONSE_LAST, 107),
            (RC_ACKNOWLEDGE, 108),
        ]
    );
    let data: Vec<u8> = sent[..8].iter().flat_map(|p| p.payload.to_vec()).collect();
    assert_eq!(data, env.mem[..8 * 1024]);
    assert_eq!(engine.stats().rx_duplicates, 1);
}

/// A selective retry (rox's requester asks again for exactly the responses it lost) takes
/// the place of those responses only: the responses of the same READ past its range and of
/// the READs after it still waiting behind the pacing are sent, each once. Forgetting
/// everything from the retry's PSN on (right for a go-back-N retry, which asks again for all
/// of it) left the requester waiting for a tail probe or its timer for every READ behind.
#[test]
fn a_retry_of_a_few_responses_forgets_only_those_behind_the_pacing() {
    let mut env = TestEnv::new();
    let mut engine = paced_responder(&mut env, 0);
    // A second 8 KiB READ (PSN 108..115) behind the first.
    engine
        .receive(&mut env, &read_request(108, 0x2000, 8 * 1024))
        .unwrap();
    engine.poll(&mut env);
    assert_eq!(env.sent.len(), 1, "cut: one READ response, the rest wait");
    // Response 100 was lost on the way: the requester asks again for it alone.
    engine
        .receive(&mut env, &read_request(100, 0, 1024))
        .unwrap();
    // And later, with responses 101..103 in, for 104..105.
    env.now += 1;
    engine
        .receive(&mut env, &read_request(104, 4 * 1024, 2 * 1024))
        .unwrap();
    play_timers(&mut engine, &mut env, 0);
    let sent = env.sent_parsed();
    let mut psns: Vec<u32> = sent.iter().map(|p| p.hdr.bth.psn.get()).collect();
    assert_eq!(
        psns.iter().filter(|&&psn| psn == 100).count(),
        2,
        "100, then its retry: {psns:?}"
    );
    psns.sort_unstable();
    psns.dedup();
    assert_eq!(
        psns,
        (100..116).collect::<Vec<u32>>(),
        "every response sent"
    );
    assert_eq!(sent.len(), 17, "none but the retried one twice: {sent:?}");
    for p in &sent {
        let psn = p.hdr.bth.psn.get();
        let (base, at) = if psn < 108 {
            (0, psn - 100)
        } else {
            (0x2000, psn - 108)
        };
        let from = base + at as usize * 1024;
        assert_eq!(p.payload, &env.mem[from..from + 1024], "PSN {psn}'s data");
    }
}

/// A responder cut to 100 Mb/s by a CNP, then a READ of 8 KiB at PSN 100 (8 responses)
/// and `then` (PSN 108 on): every packet it sends, as (opcode, PSN), whether the READ's
/// data was right, and the last packet's AETH syndrome.
fn cut_read_then(then: &[Vec<u8>], recv_wrs: usize) -> (Vec<(u8, u32)>, bool, Syndrome) {
    let mut env = TestEnv::new();
    let mut engine = paced_responder(&mut env, recv_wrs);
    for packet in then {
        engine.receive(&mut env, packet).unwrap();
    }
    engine.poll(&mut env);
    assert_eq!(env.sent.len(), 1, "cut: one READ response, the rest wait");
    play_timers(&mut engine, &mut env, 0);
    let sent = env.sent_parsed();
    let data: Vec<u8> = sent[..8].iter().flat_map(|p| p.payload.to_vec()).collect();
    let order = sent
        .iter()
        .map(|p| (p.hdr.bth.opcode, p.hdr.bth.psn.get()))
        .collect();
    let last = sent.last().and_then(|p| p.hdr.aeth).expect("an AETH");
    (order, data == env.mem[..8 * 1024], last.syndrome)
}

fn read_responses_100_to_107() -> Vec<(u8, u32)> {
    let mut order = vec![(op::RC_READ_RESPONSE_FIRST, 100)];
    order.extend((101..107).map(|psn| (op::RC_READ_RESPONSE_MIDDLE, psn)));
    order.push((op::RC_READ_RESPONSE_LAST, 107));
    order
}

/// Every response of a QP waits behind its paced READ responses, in PSN order: an atomic
/// ACK (and its replay for a duplicate), an RNR NAK and a sequence NAK. Sent at once, a
/// response past the READ's PSNs would make the requester ask for the READ again.
#[test]
fn every_response_waits_behind_paced_read_responses() {
    let fetch_add = atomic_from_peer(op::RC_FETCH_ADD, 108, 0x8000, 2);
    let (order, data_right, _) = cut_read_then(&[fetch_add.clone(), fetch_add], 0);
    let mut want = read_responses_100_to_107();
    want.extend([(op::RC_ATOMIC_ACKNOWLEDGE, 108); 2]);
    assert_eq!(
        order, want,
        "the atomic ACK and its replay after the READ's responses"
    );
    assert!(data_right);

    // A SEND with no receive WR posted: an RNR NAK.
    let send = packet_from_peer(op::RC_SEND_ONLY, 108, &[], |_| {});
    let (order, data_right, syndrome) = cut_read_then(&[send], 0);
    let mut want = read_responses_100_to_107();
    want.push((op::RC_ACKNOWLEDGE, 108));
    assert_eq!(order, want, "the RNR NAK after the READ's responses");
    assert!(matches!(syndrome, Syndrome::RnrNak(_)));
    assert!(data_right);

    // A SEND past a lost one: a sequence NAK for PSN 108.
    let send = packet_from_peer(op::RC_SEND_ONLY, 109, &[], |_| {});
    let (order, data_right, syndrome) = cut_read_then(&[send], 1);
    assert_eq!(order, want, "the sequence NAK after the READ's responses");
    assert_eq!(syndrome, Syndrome::Nak(NakCode::PsnSequenceError));
    assert!(data_right);
}

/// The requester's side of responses overtaking READ responses: neither an ACK nor a
/// sequence NAK past a READ completes it (a READ is never acknowledged implicitly), and
/// its responses arriving after them still complete it with their data.
#[test]
fn an_ack_or_nak_past_a_read_never_completes_it_without_its_data() {
    let (mut env, mut stats, mut qp) = rc_fixture();
    // A 2-packet READ (100..=101) into address 0, then a SEND (102).
    for (wr_id, opcode, len) in [(1, WrOpcode::RdmaRead, 2000), (2, WrOpcode::Send, 64)] {
        let wqe = qp.make_wqe(send_wr(wr_id, opcode, len));
        qp.enqueue(&mut env, &mut stats, wqe);
    }
    env.mem[..2000].fill(0);
    test_env::ack_from_peer(&mut qp, &mut env, &mut stats, 102, Syndrome::Ack);
    let nak = Syndrome::Nak(NakCode::PsnSequenceError);
    test_env::ack_from_peer(&mut qp, &mut env, &mut stats, 102, nak);
    assert!(
        env.completions.is_empty(),
        "no READ completes without its data"
    );
    let data: Vec<u8> = (0..2000).map(|i| (i % 251) as u8).collect();
    for (psn, opcode, part) in [
        (100, op::RC_READ_RESPONSE_FIRST, &data[..1024]),
        (101, op::RC_READ_RESPONSE_LAST, &data[1024..]),
    ] {
        let bytes = packet_from_peer(opcode, psn, part, |h| {
            h.aeth = Some(Aeth {
                syndrome: Syndrome::Ack,
                msn: Msn::default(),
            })
        });
        qp.completer_receive(&mut env, &mut stats, &wire::parse_packet(&bytes).unwrap());
    }
    let first = env.completions.first().expect("the READ completes");
    assert_eq!((first.wr_id, first.status), (1, WcStatus::Success));
    assert_eq!(env.mem[..2000], data[..]);
}

#[test]
fn a_storm_of_cnps_holds_the_qp_at_its_floor_and_it_still_sends() {
    let mut env = TestEnv::new();
    let mut cc = CcConfig::default();
    cc.params.rpg_min_rate = 1000;
    let mut engine = engine_with(cc, &mut env, QpType::Rc);
    for i in 0..10_000 {
        env.now = i * US;
        engine.receive(&mut env, &cnp_from_peer(LOCAL_QPN)).unwrap();
    }
    assert_eq!(engine.qps[&LOCAL_QPN].cc.rate_kbps(), 1_000_000);
    assert_eq!(engine.stats().rp_cnp_handled, 10_000);
    post(&mut engine, &mut env, WrOpcode::Send, 64);
    assert_eq!(env.sent.len(), 1, "a paced QP still sends");
}

/// The CNP rate limit is the port's, as mlx5's notification point is configured per port:
/// CE-marked packets for two QPs 1 µs apart get one CNP between them, and the next one
/// past min_time_between_cnps gets its own (to the QP's own peer).
#[test]
fn the_cnp_rate_limit_is_the_ports_whichever_qp_the_marks_are_for() {
    const OTHER_QPN: Qpn = Qpn::from_wire(0x12);
    const OTHER_PEER: Qpn = Qpn::from_wire(0x23);
    let mut env = TestEnv::new();
    let mut engine = engine_with(CcConfig::default(), &mut env, QpType::Rc);
    let mut other = rts_qp(QpType::Rc).cfg;
    other.qpn = OTHER_QPN;
    engine.create_qp(other).unwrap();
    let modify = QpModify {
        dest_qpn: Some(OTHER_PEER),
        ..rts_modify()
    };
    engine.modify_qp(&mut env, OTHER_QPN, &modify).unwrap();
    sends(&mut env, 3);
    for (qpn, psn, at) in [
        (LOCAL_QPN, 100, 0),
        (OTHER_QPN, 100, US),
        (OTHER_QPN, 101, 5 * US),
    ] {
        env.now = 1_000_000 + at;
        let send = packet_from_peer(op::RC_SEND_ONLY, psn, &[], |h| h.bth.dest_qpn = qpn);
        engine.receive(&mut env, &marked_ce(send)).unwrap();
    }
    let cnps: Vec<Qpn> = env
        .sent_parsed()
        .iter()
        .filter(|p| p.hdr.bth.opcode == op::CNP)
        .map(|p| p.hdr.bth.dest_qpn)
        .collect();
    assert_eq!(
        cnps,
        [PEER_QPN, OTHER_PEER],
        "the mark at 1 µs is within 4 µs of the port's last CNP"
    );
    let s = engine.stats();
    assert_eq!((s.np_ecn_marked_roce_packets, s.np_cnp_sent), (3, 2));
}

/// ACKs and NAKs are counted when they leave, not when they are queued behind paced READ
/// responses: a sequence NAK still waiting when its QP errors is never sent, nor counted.
#[test]
fn a_nak_queued_behind_paced_reads_counts_only_if_it_leaves() {
    for error_first in [false, true] {
        let mut env = TestEnv::new();
        let mut engine = paced_responder(&mut env, 1);
        // A SEND past a lost one (108): a sequence NAK, queued behind the READ's responses.
        let send = packet_from_peer(op::RC_SEND_ONLY, 109, &[], |_| {});
        engine.receive(&mut env, &send).unwrap();
        assert_eq!(engine.stats().naks_sent, 0, "queued, not sent");
        if error_first {
            engine.set_error(&mut env, LOCAL_QPN).unwrap();
        }
        play_timers(&mut engine, &mut env, 0);
        let naks_on_wire = env
            .sent_parsed()
            .iter()
            .filter(|p| {
                p.hdr
                    .aeth
                    .is_some_and(|a| matches!(a.syndrome, Syndrome::Nak(_)))
            })
            .count() as u64;
        assert_eq!(
            naks_on_wire,
            u64::from(!error_first),
            "error first: {error_first}"
        );
        assert_eq!(engine.stats().naks_sent, naks_on_wire, "counted as sent");
    }
}
