//! RC exactly-once, in-order delivery of 10^5 checksummed messages over a wire that loses,
//! duplicates, reorders and corrupts packets (fixed seed: every run is the same run).

mod roce_common;
use roce_common::*;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MESSAGES: u64 = 100_000;
const QPN_A: Qpn = Qpn::new(0x101).unwrap();
const QPN_B: Qpn = Qpn::new(0x202).unwrap();
/// Send WRs outstanding at once (each owns a send slot until it completes).
const SEND_WINDOW: u64 = 32;
/// Receive WRs kept posted (more than the send window: no RNR in this test).
const RECV_DEPTH: u64 = 256;
const SLOT: u64 = 1024;
const SEND_AREA: u64 = MEM_BASE;
const RECV_AREA: u64 = MEM_BASE + SEND_WINDOW * SLOT;
/// Header of every message: sequence number (8 bytes) and CRC-32 of the body (4 bytes).
const HEADER: usize = 12;
/// Every this many messages one spans several packets.
const MULTI_PACKET_EVERY: u64 = 16;

fn message(seq: u64, rng: &mut StdRng) -> Vec<u8> {
    let len = if seq % MULTI_PACKET_EVERY == 0 {
        rng.gen_range(300..=700)
    } else {
        rng.gen_range(16..=64)
    };
    let body = pattern(seq as u32, len - HEADER);
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&seq.to_le_bytes());
    m.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    m.extend_from_slice(&body);
    m
}

#[test]
fn rc_exactly_once_in_order_under_loss_duplication_reordering_corruption() {
    let mut net = Net::new(&[gid_v4(1), gid_v4(2)]);
    let faults = faults(0.02, 0.01, 0x5eed);
    net.faults = Some(FaultInjector::new(faults));
    let key_a = net.devs[0]
        .env
        .reg_mr(PD, SEND_AREA, SEND_WINDOW * SLOT, ALL_ACCESS);
    let key_b = net.devs[1]
        .env
        .reg_mr(PD, RECV_AREA, RECV_DEPTH * SLOT, ALL_ACCESS);
    let params = QpParams {
        timeout: 8,
        ..QpParams::rc()
    };
    connect(&mut net, 0, QPN_A, 1, QPN_B, &params);
    for slot in 0..RECV_DEPTH {
        let wr = recv_wr(slot, vec![sge(RECV_AREA + slot * SLOT, SLOT as u32, key_b)]);
        net.devs[1].env.post_recv(QPN_B, wr);
    }

    let mut rng = StdRng::seed_from_u64(7);
    let (mut posted, mut sent_ok, mut received) = (0u64, 0u64, 0u64);
    let mut rounds = 0u64;
    while received < MESSAGES || sent_ok < MESSAGES {
        while posted < MESSAGES && posted - sent_ok < SEND_WINDOW {
            let m = message(posted, &mut rng);
            let addr = SEND_AREA + (posted % SEND_WINDOW) * SLOT;
            let (engine, env) = net.dev(0);
            env.fill(addr, &m);
            let wr = send_wr(
                posted,
                WrOpcode::Send,
                SendData::Sges(vec![sge(addr, m.len() as u32, key_a)]),
            );
            engine.post_send(env, QPN_A, wr).unwrap();
            posted += 1;
        }
        assert!(
            net.pump(),
            "stalled with {sent_ok} sent, {received} received"
        );
        rounds += 1;
        for c in net.devs[0].env.take_completions() {
            assert_eq!(
                (c.status, c.wr_id),
                (WcStatus::Success, sent_ok),
                "send completions in order"
            );
            sent_ok += 1;
        }
        for c in net.devs[1].env.take_completions() {
            assert_eq!(c.status, WcStatus::Success);
            let addr = RECV_AREA + c.wr_id * SLOT;
            let env = &net.devs[1].env;
            let m = env.bytes(addr, c.byte_len as usize);
            let seq = u64::from_le_bytes(m[..8].try_into().unwrap());
            let crc = u32::from_le_bytes(m[8..12].try_into().unwrap());
            assert_eq!(seq, received, "delivered in order, exactly once");
            assert_eq!(crc32fast::hash(&m[HEADER..]), crc, "message {seq} intact");
            received += 1;
            let wr = recv_wr(c.wr_id, vec![sge(addr, SLOT as u32, key_b)]);
            net.devs[1].env.post_recv(QPN_B, wr);
        }
    }
    let f = net.faults.as_ref().unwrap().stats();
    let (a, b) = (
        net.devs[0].engine.stats().clone(),
        net.devs[1].engine.stats().clone(),
    );
    println!("faults {f:?}");
    println!("requester {a:?}");
    println!("responder {b:?}");
    println!("rounds {rounds}, virtual time {} ms", net.now / 1_000_000);
    assert!(f.lost > 0 && f.duplicated > 0 && f.reordered > 0 && f.corrupted > 0);
    assert!(
        a.rx_icrc_errors + b.rx_icrc_errors > 0,
        "corrupted packets are caught by the ICRC"
    );
    assert!(b.rx_duplicates > 0 && b.rx_out_of_sequence > 0);
    assert!(a.retransmit_timeouts + a.nak_rewinds > 0);
    assert_eq!(net.devs[0].engine.qp_state(QPN_A), Some(QpState::Rts));
}

/// The mixed test's operations: SEND, WRITE, READ, FETCH_ADD, CMP_SWAP, in turn.
const KINDS: u64 = 5;
/// Its operations in flight at once (each owns a requester slot until it completes).
const WINDOW: u64 = 16;
const READ_LEN: u32 = 600;
/// What each FETCH_ADD adds to the responder's counter.
const ADD: u64 = 3;

/// Where the mixed test's operations go. Requester: send/read slots. Responder: receive
/// slots, write slots, a read-only source, the atomics' counter.
struct Mixed {
    local: u64,
    remote_recv: u64,
    remote_write: u64,
    remote_source: u64,
    counter: u64,
    key_a: Key,
    key_b: Key,
    /// What every READ reads.
    source: Vec<u8>,
}

impl Mixed {
    /// Two engines on a faulty wire, connected, with the regions laid out and the responder's
    /// receives posted.
    fn new() -> (Net, Mixed) {
        let mut net = Net::new(&[gid_v4(1), gid_v4(2)]);
        let faults = faults(0.03, 0.01, 0xfeed);
        net.faults = Some(FaultInjector::new(faults));
        let remote_source = MEM_BASE + 2 * WINDOW * SLOT;
        let m = Mixed {
            local: MEM_BASE,
            remote_recv: MEM_BASE,
            remote_write: MEM_BASE + WINDOW * SLOT,
            remote_source,
            counter: remote_source + u64::from(READ_LEN),
            key_a: net.devs[0]
                .env
                .reg_mr(PD, MEM_BASE, 2 * WINDOW * SLOT, ALL_ACCESS),
            key_b: net.devs[1]
                .env
                .reg_mr(PD, MEM_BASE, 4 * WINDOW * SLOT, ALL_ACCESS),
            source: pattern(0xabc, READ_LEN as usize),
        };
        net.devs[1].env.fill(m.remote_source, &m.source);
        let params = QpParams {
            timeout: 8,
            max_rd_atomic: 4,
            ..QpParams::rc()
        };
        connect(&mut net, 0, QPN_A, 1, QPN_B, &params);
        for slot in 0..2 * WINDOW {
            let at = m.remote_recv + (slot % WINDOW) * SLOT;
            let wr = recv_wr(slot, vec![sge(at, SLOT as u32, m.key_b)]);
            net.devs[1].env.post_recv(QPN_B, wr);
        }
        (net, m)
    }

    /// The requester's slot of operation `i`.
    fn slot(&self, i: u64) -> u64 {
        self.local + (i % WINDOW) * SLOT
    }

    /// Operation `i` (its kind `i % KINDS`), its slot in `env` filled as it needs.
    fn wr(&self, i: u64, env: &mut MockEnv) -> SendWr {
        let addr = self.slot(i);
        let key_a = self.key_a;
        let mut wr = match i % KINDS {
            0 | 1 => {
                let m = pattern(i as u32, 40 + (i % 300) as usize);
                env.fill(addr, &m);
                let opcode = if i % KINDS == 0 {
                    WrOpcode::Send
                } else {
                    WrOpcode::RdmaWrite
                };
                send_wr(
                    i,
                    opcode,
                    SendData::Sges(vec![sge(addr, m.len() as u32, key_a)]),
                )
            }
            2 => {
                env.fill(addr, &[0; READ_LEN as usize]);
                send_wr(
                    i,
                    WrOpcode::RdmaRead,
                    SendData::Sges(vec![sge(addr, READ_LEN, key_a)]),
                )
            }
            3 => send_wr(
                i,
                WrOpcode::AtomicFetchAndAdd,
                SendData::Sges(vec![sge(addr, 8, key_a)]),
            ),
            _ => send_wr(
                i,
                WrOpcode::AtomicCmpAndSwp,
                SendData::Sges(vec![sge(addr, 8, key_a)]),
            ),
        };
        wr.rkey = self.key_b;
        wr.remote_addr = match i % KINDS {
            1 => self.remote_write + (i % WINDOW) * SLOT,
            2 => self.remote_source,
            _ => self.counter,
        };
        wr.compare_add = if i % KINDS == 3 { ADD } else { u64::MAX }; // the CMP_SWAP never matches
        wr.swap = 0;
        wr
    }
}

/// Mixed SEND / WRITE / READ / FETCH_ADD / CMP_SWAP traffic under the same faults: READs and
/// atomics exercise retransmitted READ requests (re-executed) and duplicate atomics (replayed
/// from the saved result, never executed twice).
#[test]
fn rc_mixed_operations_exactly_once_under_faults() {
    const OPS: u64 = 20_000;
    let (mut net, m) = Mixed::new();
    let (mut posted, mut completed, mut received, mut adds_done) = (0u64, 0u64, 0u64, 0u64);
    let mut rounds = 0u64;
    while completed < OPS {
        while posted < OPS && posted - completed < WINDOW {
            let i = posted;
            let (engine, env) = net.dev(0);
            let wr = m.wr(i, env);
            engine.post_send(env, QPN_A, wr).unwrap();
            posted += 1;
        }
        assert!(
            net.pump(),
            "stalled at {completed} of {OPS}: {:#?} {:#?}",
            net.devs[0].engine,
            net.devs[1].engine
        );
        rounds += 1;
        for c in net.devs[0].env.take_completions() {
            assert_eq!(
                (c.status, c.wr_id),
                (WcStatus::Success, completed),
                "in order, all succeed"
            );
            let env = &net.devs[0].env;
            let result = || u64::from_le_bytes(env.bytes(m.slot(c.wr_id), 8).try_into().unwrap());
            match c.wr_id % KINDS {
                2 => assert_eq!(
                    env.bytes(m.slot(c.wr_id), READ_LEN as usize),
                    &m.source[..],
                    "READ {}",
                    c.wr_id
                ),
                3 => {
                    assert_eq!(
                        result(),
                        adds_done * ADD,
                        "FETCH_ADD {} executed exactly once",
                        c.wr_id
                    );
                    adds_done += 1;
                }
                4 => assert_eq!(
                    result(),
                    adds_done * ADD,
                    "CMP_SWAP {} saw the counter",
                    c.wr_id
                ),
                _ => {}
            }
            completed += 1;
        }
        for c in net.devs[1].env.take_completions() {
            assert_eq!(c.status, WcStatus::Success);
            let expected_id = received * KINDS;
            let sent = pattern(expected_id as u32, 40 + (expected_id % 300) as usize);
            let addr = m.remote_recv + (c.wr_id % WINDOW) * SLOT;
            assert_eq!(
                net.devs[1].env.bytes(addr, c.byte_len as usize),
                &sent[..],
                "SEND {expected_id} in order, intact"
            );
            received += 1;
            net.devs[1].env.post_recv(
                QPN_B,
                recv_wr(c.wr_id, vec![sge(addr, SLOT as u32, m.key_b)]),
            );
        }
    }
    assert_eq!(received, OPS / KINDS);
    let final_counter = u64::from_le_bytes(net.devs[1].env.bytes(m.counter, 8).try_into().unwrap());
    assert_eq!(
        final_counter,
        OPS / KINDS * ADD,
        "every FETCH_ADD applied exactly once"
    );
    let (a, b) = (
        net.devs[0].engine.stats().clone(),
        net.devs[1].engine.stats().clone(),
    );
    println!("faults {:?}", net.faults.as_ref().unwrap().stats());
    println!("requester {a:?}");
    println!("responder {b:?}");
    println!("rounds {rounds}, virtual time {} ms", net.now / 1_000_000);
    assert!(b.rx_duplicates > 0 && a.retransmit_timeouts + a.nak_rewinds > 0);
}
