//! Loss recovery of RC between two transport engines over a lossy link: a 16 MiB RDMA WRITE
//! and a 16 MiB RDMA READ (1 MiB WRs, 16 in flight, as tests/interop/rdma-xfer.c moves them)
//! across a wire with a rate, a delay and seeded random loss in both directions (the port's
//! fault injection). Asserts that the data arrives intact, that the transfer keeps a good part
//! of the lossless goodput of the same wire without waiting out long timeouts, that the
//! retransmitted bytes per lost byte stay bounded, and that a READ moves at most twice the
//! bytes it needs (its retries ask for the missing responses only).

mod roce_common;
use roce_common::*;

use std::collections::VecDeque;

const QPN_A: Qpn = Qpn::new(0x111).unwrap();
const QPN_B: Qpn = Qpn::new(0x222).unwrap();
/// The wire's clock tick; each direction carries one packet per tick: 4 KiB per 10 µs,
/// about what two rox-nic processes move between guests on one host, so that the timers'
/// floors weigh as they do there.
const TICK_NS: u64 = 10_000;
/// One-way delay of the wire: a round trip of 50 µs plus queueing.
const DELAY_NS: u64 = 25_000;
const MIB: usize = 1 << 20;
const XFER_BYTES: usize = 16 * MIB;
const CHUNK_BYTES: usize = MIB;
const IN_FLIGHT_WRS: usize = 16;
const MTU_BYTES: usize = 4096;
/// rdma_cm's (and so rdma-xfer's) local ACK timeout: 4.096 µs × 2^14 ≈ 67 ms; a bigger
/// one only makes the old fixed timer's stalls longer.
const ACK_TIMEOUT: u8 = 14;
/// Where each side's buffer lies in its mock memory.
const BUF: u64 = MEM_BASE;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Write,
    Read,
}

/// What a transfer cost.
#[derive(Debug)]
struct Outcome {
    /// Virtual time from the first post to the last completion.
    elapsed_ns: u64,
    /// Time the wire stood idle waiting for a timer (the retransmission timer: a stall).
    stalled_ns: u64,
    /// The longest single such wait.
    longest_stall_ns: u64,
    /// Packets the data's sender sent (WRITE: the requester; READ: the responder).
    data_packets_sent: u64,
    /// Packets the faults dropped (both directions, any kind).
    packets_lost: u64,
    timeouts: u64,
    #[allow(dead_code)] // shown in the Debug output
    retransmits: u64,
}

impl Outcome {
    fn needed_packets() -> u64 {
        (XFER_BYTES / MTU_BYTES) as u64
    }

    fn resent_packets(&self) -> u64 {
        self.data_packets_sent
            .saturating_sub(Self::needed_packets())
    }
}

/// Two engines joined by a wire that carries one packet per tick and direction after
/// [`DELAY_NS`], dropping packets by `faults`.
struct Link {
    net: Net,
    faults: FaultInjector<Gid>,
    /// Per destination device: packets (deliverable at, bytes) in order.
    queues: [VecDeque<(u64, Vec<u8>)>; 2],
}

impl Link {
    fn new(loss: f64, seed: u64) -> Link {
        let mut net = Net::new(&[gid_v4(1), gid_v4(2)]);
        let params = QpParams {
            mtu: Mtu::Mtu4096,
            timeout: ACK_TIMEOUT,
            max_rd_atomic: IN_FLIGHT_WRS as u8,
            ..QpParams::rc()
        };
        for d in &mut net.devs {
            d.env.mem = vec![0; XFER_BYTES];
            d.env.reg_mr(PD, BUF, XFER_BYTES as u64, ALL_ACCESS);
        }
        connect(&mut net, 0, QPN_A, 1, QPN_B, &params);
        let faults = FaultInjector::new(FaultConfig {
            loss,
            seed,
            ..FaultConfig::default()
        });
        Link {
            net,
            faults,
            queues: [VecDeque::new(), VecDeque::new()],
        }
    }

    /// One tick: what the devices sent goes on the wire (through the faults), one packet per
    /// direction that has crossed it is delivered, timers run. If nothing is in flight at all
    /// the clock jumps to the next timer; returns that wait (0: none).
    fn tick(&mut self) -> u64 {
        let now = self.net.now;
        for i in 0..2 {
            let sent: Vec<_> = self.net.devs[i].env.outbox.drain(..).collect();
            for (dst, p) in sent {
                let mut out = Vec::new();
                self.faults.apply(dst, p, 0, &mut out);
                for (dst, p) in out {
                    let to = self.net.devs.iter().position(|d| d.gid == dst).unwrap();
                    self.queues[to].push_back((now + DELAY_NS, p));
                }
            }
        }
        for to in 0..2 {
            if self.queues[to].front().is_some_and(|(at, _)| *at <= now) {
                let (_, p) = self.queues[to].pop_front().unwrap();
                let (engine, env) = self.net.dev(to);
                let _ = engine.receive(env, &p);
            }
        }
        for i in 0..2 {
            let (engine, env) = self.net.dev(i);
            engine.poll(env);
        }
        let busy = self.queues.iter().any(|q| !q.is_empty())
            || self.net.devs.iter().any(|d| !d.env.outbox.is_empty());
        if busy {
            self.net.advance(TICK_NS);
            return 0;
        }
        let next = self
            .net
            .devs
            .iter()
            .filter_map(|d| d.engine.next_deadline())
            .min();
        match next {
            Some(t) if t > now + TICK_NS => {
                self.net.now = t;
                t - now
            }
            _ => {
                self.net.advance(TICK_NS);
                0
            }
        }
    }

    /// Moves [`XFER_BYTES`] from B to A (READ, posted on A) or from A to B (WRITE).
    fn transfer(&mut self, op: Op) -> Outcome {
        let (src, dst) = if op == Op::Write { (0, 1) } else { (1, 0) };
        let data = pattern(7, XFER_BYTES);
        self.net.devs[src].env.fill(BUF, &data);
        let (lkey, rkey) = (self.net.only_mr_key(0), self.net.only_mr_key(1));
        let start = self.net.now;
        let sender_before = self.net.devs[src].engine.stats().tx_packets;
        let chunks = XFER_BYTES / CHUNK_BYTES;
        let (mut posted, mut done) = (0, 0);
        let (mut stalled_ns, mut longest_stall_ns) = (0, 0);
        while done < chunks {
            while posted < chunks && posted - done < IN_FLIGHT_WRS {
                let off = (posted * CHUNK_BYTES) as u64;
                let opcode = if op == Op::Write {
                    WrOpcode::RdmaWrite
                } else {
                    WrOpcode::RdmaRead
                };
                let mut wr = send_wr(
                    posted as u64,
                    opcode,
                    SendData::Sges(vec![sge(BUF + off, CHUNK_BYTES as u32, lkey)]),
                );
                wr.remote_addr = BUF + off;
                wr.rkey = rkey;
                let (engine, env) = self.net.dev(0);
                engine.post_send(env, QPN_A, wr).unwrap();
                posted += 1;
            }
            let waited = self.tick();
            stalled_ns += waited;
            longest_stall_ns = longest_stall_ns.max(waited);
            for c in self.net.devs[0].env.take_completions() {
                assert_eq!(c.status, WcStatus::Success, "{op:?}: {c:?}");
                done += 1;
            }
            assert!(
                self.net.now - start < 60_000_000_000,
                "{op:?}: not done after 60 s of virtual time ({done} of {chunks} WRs)"
            );
        }
        assert!(
            self.net.devs[dst].env.bytes(BUF, XFER_BYTES) == &data[..],
            "{op:?}: the data arrived changed"
        );
        let stats = self.net.devs[0].engine.stats();
        Outcome {
            elapsed_ns: self.net.now - start,
            stalled_ns,
            longest_stall_ns,
            data_packets_sent: self.net.devs[src].engine.stats().tx_packets - sender_before,
            packets_lost: self.faults.stats().lost,
            timeouts: stats.retransmit_timeouts,
            retransmits: stats.retransmit_timeouts + stats.nak_rewinds,
        }
    }
}

fn measure(op: Op, loss: f64, seed: u64) -> Outcome {
    let outcome = Link::new(loss, seed).transfer(op);
    eprintln!("{op:?} at {loss} loss, seed {seed}: {outcome:?}");
    outcome
}

/// The bounds every lossy transfer keeps against a lossless one over the same wire.
fn assert_recovers(op: Op, loss: f64, seed: u64) -> Outcome {
    let clean = measure(op, 0.0, seed);
    assert_eq!(clean.data_packets_sent, Outcome::needed_packets());
    assert_eq!((clean.timeouts, clean.stalled_ns), (0, 0));
    let lossy = measure(op, loss, seed);
    assert!(lossy.packets_lost > 0);
    // At least a quarter of the lossless goodput.
    assert!(
        lossy.elapsed_ns <= 4 * clean.elapsed_ns,
        "{op:?} at {loss}: {} µs against {} µs lossless",
        lossy.elapsed_ns / 1000,
        clean.elapsed_ns / 1000
    );
    // Timers only catch what nothing else shows (a lost tail): a few short waits, never the
    // attribute's whole timeout.
    let attr_timeout_ns = 4096u64 << ACK_TIMEOUT;
    assert!(
        lossy.longest_stall_ns < attr_timeout_ns / 4,
        "{op:?} at {loss}: a stall of {} µs",
        lossy.longest_stall_ns / 1000
    );
    assert!(
        lossy.stalled_ns <= lossy.elapsed_ns / 4,
        "{op:?} at {loss}: {} µs of {} µs waiting for timers",
        lossy.stalled_ns / 1000,
        lossy.elapsed_ns / 1000
    );
    lossy
}

#[test]
fn write_at_5_percent_loss_keeps_a_quarter_of_the_goodput_and_resends_a_bounded_amount() {
    for seed in [1, 2] {
        let lossy = assert_recovers(Op::Write, 0.05, seed);
        // Go-back-N resends what was in flight after a loss: the window, which shrinks to a
        // few dozen packets on a lossy path.
        let per_lost = lossy.resent_packets() as f64 / lossy.packets_lost as f64;
        assert!(
            per_lost <= 24.0,
            "{} packets resent for {} lost",
            lossy.resent_packets(),
            lossy.packets_lost
        );
    }
}

#[test]
fn write_at_1_percent_loss_recovers_without_stalls() {
    assert_recovers(Op::Write, 0.01, 3);
}

#[test]
fn read_at_5_percent_loss_moves_at_most_twice_the_bytes() {
    for seed in [1, 2] {
        let lossy = assert_recovers(Op::Read, 0.05, seed);
        assert!(
            lossy.data_packets_sent <= 2 * Outcome::needed_packets(),
            "{} response packets for {}",
            lossy.data_packets_sent,
            Outcome::needed_packets()
        );
    }
}

#[test]
fn read_at_1_percent_loss_resends_little() {
    let lossy = assert_recovers(Op::Read, 0.01, 3);
    assert!(
        lossy.data_packets_sent * 100 <= 110 * Outcome::needed_packets(),
        "{} response packets for {}",
        lossy.data_packets_sent,
        Outcome::needed_packets()
    );
}
