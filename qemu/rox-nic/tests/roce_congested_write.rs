//! RC WRITE through a congested switch queue with congestion control off: the congestion
//! lab's CC-off flow (tests/cc: ib_write_bw, 64 KiB messages, 128 outstanding) between two
//! transport engines, the receiver behind the port's bottleneck (`--bottleneck
//! rate=400M,limit=512K,kmin=32K,kmax=128K,pmax=0.2`): a sender much faster than the line
//! fills the queue past kmax, where RED drops every frame that is not ECN-capable. The flow
//! must go on losing packets and recovering them; it must never end in RETRY_EXC_ERR, on a
//! quiet host (the receiver takes each frame as it comes) or a loaded one (the receiver's
//! rox-nic reads its socket a batch at a time, every frame of a batch reaching the queue at
//! once as the port's shaper offers them, and its thread gets no core for tens of ms at a
//! time, so the sender times out and goes back behind a backlog).
//!
//! These runs did not end in RETRY_EXC_ERR before the fix of the retry accounting after a
//! timeout either (rto.rs, `a_sequence_nak_behind_each_timeout_spends_no_more_than_the_timeouts`
//! shows that bug): they guard the lab's configuration on the host, where it is cheap.

mod roce_common;
use roce_common::*;

use std::collections::VecDeque;

use rox_nic::port::bottleneck::Bottleneck;
use rox_nic::port::frame::{roce_header, ETH_HEADER_LEN};
use rox_nic::port::BottleneckConfig;
use rox_nic::roce::cc::CcConfig;

const QPN_A: Qpn = Qpn::new(0x111).unwrap();
const QPN_B: Qpn = Qpn::new(0x222).unwrap();
/// The virtual clock's step.
const TICK_NS: u64 = 10_000;
/// The sender's own line, into the switch: a rox-nic process sends a few Gbit/s on one host.
const SENDER_BPS: u64 = 2_000_000_000;
/// One-way delay each way, besides the queue.
const DELAY_NS: u64 = 20_000;
/// perftest's message size, TX depth, MTU and ACK timeout (4.096 µs × 2^14 ≈ 67 ms).
const MSG_BYTES: u32 = 64 * 1024;
const TX_DEPTH: usize = 128;
const ACK_TIMEOUT: u8 = 14;
const BOTTLENECK: &str = "rate=400M,limit=512K,kmin=32K,kmax=128K,pmax=0.2,seed=1";

/// How the receiver's host runs its rox-nic.
#[derive(Clone, Copy, Debug)]
struct Host {
    /// The virtual clock's step: the receiver reads its socket once per step.
    tick_ns: u64,
    /// Frames it reads per step, all offered to the queue at the step's time (None: each
    /// frame as it arrives, at its own time).
    batch: Option<usize>,
    /// Every `.0` ns the receiver's thread gets no core for `.1` ns (None: never).
    stalls: Option<(u64, u64)>,
}

const QUIET: Host = Host {
    tick_ns: TICK_NS,
    batch: None,
    stalls: None,
};

/// A loaded host: 64 frames (the port's batch) per 100 µs, and 35 ms of every 50 ms without
/// a core (the sender then times out about once a stall).
const LOADED: Host = Host {
    tick_ns: 100_000,
    batch: Some(64),
    stalls: Some((50_000_000, 35_000_000)),
};

/// Sender → switch (at [`SENDER_BPS`]) → bottleneck → receiver; ACKs back after
/// [`DELAY_NS`].
struct Path {
    net: Net,
    /// Frames on the sender's line: (arrive at the switch at, Ethernet frame).
    to_switch: VecDeque<(u64, Vec<u8>)>,
    /// When the sender's line is free again.
    sender_line_free: u64,
    switch: Bottleneck,
    /// Responses on the way back: (arrive at, packet).
    to_sender: VecDeque<(u64, Vec<u8>)>,
    host: Host,
}

impl Path {
    fn new(host: Host) -> Path {
        let mut net = Net::new(&[gid_v4(1), gid_v4(2)]);
        let params = QpParams {
            mtu: Mtu::Mtu4096,
            timeout: ACK_TIMEOUT,
            ..QpParams::rc()
        };
        for d in &mut net.devs {
            // `--cc off`: no packet is ECN-capable, so RED drops instead of marking.
            d.engine = Engine::new().with_cc(CcConfig {
                enabled: false,
                ..CcConfig::default()
            });
            d.env.reg_mr(PD, MEM_BASE, u64::from(MSG_BYTES), ALL_ACCESS);
        }
        connect(&mut net, 0, QPN_A, 1, QPN_B, &params);
        Path {
            net,
            to_switch: VecDeque::new(),
            sender_line_free: 0,
            switch: Bottleneck::new(BottleneckConfig::parse(BOTTLENECK).unwrap()),
            to_sender: VecDeque::new(),
            host,
        }
    }

    /// One step: the sender's packets onto its line, what reached the switch into the queue
    /// (unless the receiver is stalled), what the queue let through to the receiver, the
    /// responses back, both engines polled.
    fn tick(&mut self) {
        let now = self.net.now;
        let (a, b) = (self.net.devs[0].gid, self.net.devs[1].gid);
        for (_, p) in self.net.devs[0].env.outbox.drain(..) {
            let head = roce_header(&mac_of(&b), &mac_of(&a), &p);
            let frame = [&head[..], &p].concat();
            let start = self.sender_line_free.max(now);
            self.sender_line_free = start + frame.len() as u64 * 8 * 1_000_000_000 / SENDER_BPS;
            self.to_switch
                .push_back((self.sender_line_free + DELAY_NS, frame));
        }
        for (_, p) in self.net.devs[1].env.outbox.drain(..) {
            self.to_sender.push_back((now + DELAY_NS, p));
        }
        let stalled = self
            .host
            .stalls
            .is_some_and(|(every, stall)| now % every < stall);
        let mut read = 0;
        while let Some(&(at, _)) = self.to_switch.front().filter(|(at, _)| *at <= now) {
            if stalled || self.host.batch.is_some_and(|b| read >= b) {
                break;
            }
            read += 1;
            let (_, frame) = self.to_switch.pop_front().unwrap();
            let at = if self.host.batch.is_some() { now } else { at };
            self.switch.offer(&frame, at);
        }
        let mut passed = Vec::new();
        self.switch.deliver(now, usize::MAX, |f| {
            passed.push(f[ETH_HEADER_LEN..].to_vec())
        });
        for p in passed {
            let (engine, env) = self.net.dev(1);
            let _ = engine.receive(env, &p);
        }
        while self.to_sender.front().is_some_and(|(at, _)| *at <= now) {
            let (_, p) = self.to_sender.pop_front().unwrap();
            let (engine, env) = self.net.dev(0);
            let _ = engine.receive(env, &p);
        }
        for i in 0..2 {
            if i == 1 && stalled {
                continue;
            }
            let (engine, env) = self.net.dev(i);
            engine.poll(env);
        }
        self.net.advance(self.host.tick_ns);
    }

    fn post_write(&mut self, id: u64) {
        let (lkey, rkey) = (self.net.only_mr_key(0), self.net.only_mr_key(1));
        let mut wr = send_wr(
            id,
            WrOpcode::RdmaWrite,
            SendData::Sges(vec![sge(MEM_BASE, MSG_BYTES, lkey)]),
        );
        wr.remote_addr = MEM_BASE;
        wr.rkey = rkey;
        let (engine, env) = self.net.dev(0);
        engine.post_send(env, QPN_A, wr).unwrap();
    }
}

/// Runs the flow for `run_ns` of virtual time, keeping [`TX_DEPTH`] WRITEs posted; returns
/// the WRITEs completed. Panics on a completion in error.
fn run_flow(host: Host, run_ns: u64) -> u64 {
    let mut path = Path::new(host);
    let end = path.net.now + run_ns;
    let (mut posted, mut done) = (0u64, 0u64);
    let (mut longest, mut last_done) = (0u64, path.net.now);
    while path.net.now < end {
        while posted - done < TX_DEPTH as u64 {
            path.post_write(posted);
            posted += 1;
        }
        path.tick();
        for c in path.net.devs[0].env.take_completions() {
            let s = path.net.devs[0].engine.stats();
            assert_eq!(
                c.status,
                WcStatus::Success,
                "WRITE {} after {done} completed, {} ms: timeouts {}, NAK rewinds {}, tail \
                 probes {}, seq NAKs received {}; bottleneck {:?}",
                c.wr_id,
                (path.net.now - 1_000_000) / 1_000_000,
                s.retransmit_timeouts,
                s.nak_rewinds,
                s.tail_probes,
                s.rx_seq_naks,
                path.switch.stats()
            );
            done += 1;
            longest = longest.max(path.net.now - last_done);
            last_done = path.net.now;
        }
    }
    eprintln!("longest wait for a completion: {} ms", longest / 1_000_000);
    let s = path.net.devs[0].engine.stats();
    eprintln!(
        "{host:?}: {done} WRITEs in {} ms: timeouts {}, NAK rewinds {}, tail probes {}, seq NAKs {}; \
         bottleneck {:?}",
        run_ns / 1_000_000,
        s.retransmit_timeouts,
        s.nak_rewinds,
        s.tail_probes,
        s.rx_seq_naks,
        path.switch.stats()
    );
    done
}

#[test]
fn a_cc_off_write_flow_through_a_red_queue_never_exhausts_its_retries() {
    let done = run_flow(QUIET, 2_000_000_000);
    // 400 Mbit/s for 2 s is 1525 WRITEs of 64 KiB at most; go-back-N resends a good part.
    assert!(done > 300, "only {done} WRITEs completed");
}

#[test]
fn a_cc_off_write_flow_on_a_loaded_host_never_exhausts_its_retries() {
    let done = run_flow(LOADED, 2_000_000_000);
    assert!(done > 100, "only {done} WRITEs completed");
}
