//! Data integrity of rsockets' traffic pattern (`roce_integrity_rs`: rstream's program over
//! rsockets' WRITE_WITH_IMM ring protocol, every byte verified) played by two transport
//! engines over a virtual wire that loses, duplicates, reorders and corrupts packets, drops
//! the tail of bursts, and with receivers slow to repost (RNR).
//!
//! The short seeds run in `cargo test`; `ROX_INTEGRITY_SEEDS=N` runs N seeds per case, and
//! the ignored `rstream_random_cases_many_seeds` draws a new case per seed.

mod roce_common;
mod roce_integrity_rs;
use roce_common::*;
use roce_integrity_rs::{Layout, Payload, Program, Rs, Verbs, Wc, RECV_WR_ID};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const QPN_A: Qpn = Qpn::new(0x111).unwrap();
const QPN_B: Qpn = Qpn::new(0x222).unwrap();
const QPNS: [Qpn; 2] = [QPN_A, QPN_B];

/// The two engines and their mock memories as rsockets' verbs.
struct EngineVerbs {
    net: Net,
}

impl Verbs for EngineVerbs {
    fn post_write_imm(
        &mut self,
        side: usize,
        msg: u32,
        data: Payload,
        remote_addr: u64,
        rkey: u32,
    ) {
        let data = match data {
            Payload::Inline(bytes) => SendData::Inline(bytes),
            Payload::Sges(pieces) => {
                let key = self.net.devs[side].env.mrs[0].key;
                SendData::Sges(pieces.iter().map(|&(a, n)| sge(a, n, key)).collect())
            }
        };
        let mut wr = send_wr(u64::from(msg), WrOpcode::RdmaWriteWithImm, data);
        wr.imm = msg;
        wr.remote_addr = remote_addr;
        wr.rkey = Key::from_raw(rkey);
        let (engine, env) = self.net.dev(side);
        engine.post_send(env, QPNS[side], wr).unwrap();
    }

    fn post_recvs(&mut self, side: usize, n: u32) {
        let (engine, env) = self.net.dev(side);
        for _ in 0..n {
            env.post_recv(QPNS[side], recv_wr(RECV_WR_ID, Vec::new()));
        }
        engine.recv_posted(env, QPNS[side]).unwrap();
    }

    fn poll(&mut self, side: usize) -> Vec<Wc> {
        let env = &mut self.net.devs[side].env;
        env.take_completions()
            .into_iter()
            .map(|c| {
                assert_eq!(c.qp_num, QPNS[side]);
                if c.is_recv {
                    assert_eq!(c.opcode, WcOpcode::RecvRdmaWithImm);
                }
                Wc {
                    is_recv: c.is_recv,
                    wr_id: c.wr_id,
                    error: (c.status != WcStatus::Success).then(|| format!("{c:?}")),
                    imm: (c.wc_flags & WC_FLAG_WITH_IMM != 0).then_some(c.imm),
                    byte_len: c.byte_len,
                }
            })
            .collect()
    }

    fn read(&self, side: usize, addr: u64, len: usize) -> Vec<u8> {
        self.net.devs[side].env.bytes(addr, len).to_vec()
    }

    fn write(&mut self, side: usize, addr: u64, data: &[u8]) {
        self.net.devs[side].env.fill(addr, data);
    }
}

/// Wire impairments of one case.
#[derive(Clone, Copy, Debug)]
struct Case {
    mtu: Mtu,
    size: usize,
    count: usize,
    iterations: usize,
    one_way: bool,
    loss: f64,
    duplicate: f64,
    reorder: f64,
    corrupt: f64,
    /// Rounds a receiver takes to post its receive WRs again (RNR NAKs when > 0).
    repost_delay: u64,
    /// Packets a device takes per round (a full socket buffer drops the rest of a burst).
    rx_capacity: Option<usize>,
}

/// What one run moved and what the transport had to do for it (both engines summed).
#[derive(Debug, Default)]
struct Outcome {
    bytes: u64,
    writes: u64,
    inline_writes: u64,
    credits: u64,
    rounds: u64,
    rnr_naks: u64,
    seq_naks: u64,
    timeouts: u64,
    duplicates: u64,
    icrc_drops: u64,
}

fn run_case(case: &Case, seed: u64) -> Outcome {
    let mut net = Net::new(&[gid_v4(1), gid_v4(2)]);
    net.rx_capacity = case.rx_capacity;
    if case.loss + case.duplicate + case.reorder + case.corrupt > 0.0 {
        net.faults = Some(FaultInjector::new(FaultConfig {
            loss: case.loss,
            duplicate: case.duplicate,
            reorder: case.reorder,
            corrupt: case.corrupt,
            seed,
        }));
    }
    let keys: Vec<Key> = (0..2)
        .map(|d| {
            net.devs[d]
                .env
                .reg_mr(PD, MEM_BASE, Layout::BYTES, ALL_ACCESS)
        })
        .collect();
    let params = QpParams {
        mtu: case.mtu,
        timeout: 8,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpParams::rc()
    };
    connect(&mut net, 0, QPN_A, 1, QPN_B, &params);
    let layout = |d: usize| Layout::back_to_back(MEM_BASE, keys[d].get());
    let mut v = EngineVerbs { net };
    let mut rs = [
        Rs::connect(&mut v, 0, layout(0), layout(1)),
        Rs::connect(&mut v, 1, layout(1), layout(0)),
    ];
    let mut program = Program::new(case.size, case.count, case.iterations, case.one_way);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut round = 0u64;
    let mut idle = 0u32;
    while !program.finished() {
        round += 1;
        assert!(round < 20_000_000, "no end after {round} rounds");
        let mut progress = false;
        for (side, r) in rs.iter_mut().enumerate() {
            let delay = rng.gen_range(0..=case.repost_delay);
            r.process_cq(&mut v, round, delay);
            progress |= program.turn(side, r, &mut v);
        }
        let wire = v.net.pump();
        idle = if progress || wire { 0 } else { idle + 1 };
        let waiting = rs.iter().any(|r| !r.reposts.is_empty());
        assert!(
            idle < 1000 || waiting,
            "stalled at round {round}: {:#?} {:#?}",
            v.net.devs[0].engine,
            v.net.devs[1].engine
        );
    }
    // Let the last ACKs settle: every write completes, nothing errs.
    for _ in 0..100_000 {
        for r in rs.iter_mut() {
            r.poll_cq(&mut v, round, 0);
        }
        if !v.net.pump() {
            break;
        }
    }
    let net = &v.net;
    for (qpn, d) in [(QPN_A, 0), (QPN_B, 1)] {
        assert_eq!(net.devs[d].engine.qp_state(qpn), Some(QpState::Rts));
    }
    let (a, b) = (net.devs[0].engine.stats(), net.devs[1].engine.stats());
    Outcome {
        bytes: rs[0].rx_total + rs[1].rx_total,
        writes: rs[0].writes_posted + rs[1].writes_posted,
        inline_writes: rs[0].inline_writes + rs[1].inline_writes,
        credits: rs[0].credits_sent + rs[1].credits_sent,
        rounds: round,
        rnr_naks: a.rnr_naks_sent + b.rnr_naks_sent,
        seq_naks: a.naks_sent + b.naks_sent,
        timeouts: a.retransmit_timeouts + b.retransmit_timeouts,
        duplicates: a.rx_duplicates + b.rx_duplicates,
        icrc_drops: a.rx_icrc_errors + b.rx_icrc_errors,
    }
}

fn seeds(default: u64) -> u64 {
    std::env::var("ROX_INTEGRITY_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Runs `case` over seeds; returns the outcomes summed (to check the faults really happened).
fn run_seeds(name: &str, case: Case, default_seeds: u64) -> Outcome {
    let n = seeds(default_seeds);
    let mut sum = Outcome::default();
    for seed in 0..n {
        let out = run_case(&case, 0x1000 + seed);
        sum.bytes += out.bytes;
        sum.writes += out.writes;
        sum.inline_writes += out.inline_writes;
        sum.credits += out.credits;
        sum.rounds += out.rounds;
        sum.rnr_naks += out.rnr_naks;
        sum.seq_naks += out.seq_naks;
        sum.timeouts += out.timeouts;
        sum.duplicates += out.duplicates;
        sum.icrc_drops += out.icrc_drops;
    }
    println!("{name}: {n} seeds verified, {sum:?}");
    sum
}

const CLEAN: Case = Case {
    mtu: Mtu::Mtu4096,
    size: 65536,
    count: 200,
    iterations: 1,
    one_way: false,
    loss: 0.0,
    duplicate: 0.0,
    reorder: 0.0,
    corrupt: 0.0,
    repost_delay: 0,
    rx_capacity: None,
};

/// [`CLEAN`] on a wire that loses, duplicates, reorders and corrupts a little.
const LOSSY: Case = Case {
    loss: 0.01,
    duplicate: 0.01,
    reorder: 0.02,
    corrupt: 0.005,
    ..CLEAN
};

/// The failing run's shape exactly: `rstream -S 65536 -C 200 -T v`, no faults. Each 64 KiB
/// message ends in a 16-byte inline write at the start of a fresh ring half (the 16-byte
/// sync shifts every message), where the guest run saw its bad byte.
#[test]
fn rstream_64k_200_each_way_clean_wire() {
    let out = run_case(&CLEAN, 1);
    assert_eq!(out.bytes, 2 * (16 + 200 * 65536));
    assert!(
        out.inline_writes >= 400,
        "the 16-byte tails went inline: {out:?}"
    );
    println!("{out:?}");
}

/// The failing shape (fewer messages) under loss, duplication, reordering and corruption.
#[test]
fn rstream_64k_each_way_lossy_wire() {
    let case = Case { count: 60, ..LOSSY };
    let out = run_seeds("lossy-60", case, 2);
    assert!(out.seq_naks + out.timeouts > 0 && out.duplicates > 0 && out.icrc_drops > 0);
}

/// `rstream -S 65536 -I 40`: ping-pong, one message in flight each way.
#[test]
fn rstream_64k_ping_pong_lossy_wire() {
    let case = Case {
        count: 1,
        iterations: 40,
        ..LOSSY
    };
    let out = run_seeds("lossy", case, 2);
    assert!(out.seq_naks + out.timeouts > 0 && out.duplicates > 0 && out.icrc_drops > 0);
}

#[test]
fn rstream_one_way_slow_receiver_rnr() {
    // Small messages, one way: up to rq_size writes in flight against a receive queue the
    // receiver refills late.
    let case = Case {
        one_way: true,
        size: 1000,
        count: 4000,
        repost_delay: 40,
        loss: 0.005,
        ..CLEAN
    };
    let out = run_seeds("rnr", case, 2);
    assert!(
        out.rnr_naks > 0,
        "the slow receiver caused RNR NAKs: {out:?}"
    );
}

#[test]
fn rstream_small_mtu_burst_drops() {
    let case = Case {
        mtu: Mtu::Mtu1024,
        count: 30,
        rx_capacity: Some(24),
        duplicate: 0.01,
        reorder: 0.01,
        ..CLEAN
    };
    let out = run_seeds("burst", case, 2);
    assert!(
        out.seq_naks + out.timeouts > 0,
        "burst drops forced retransmission: {out:?}"
    );
}

/// The long hunt: every seed draws its own case (size, MTU, direction, faults, slow receiver,
/// burst drops). `ROX_INTEGRITY_SEEDS=N cargo test --release -p rox-nic --test roce_integrity
/// -- --ignored --nocapture`.
#[test]
#[ignore]
fn rstream_random_cases_many_seeds() {
    let n = seeds(200);
    let sizes = [16usize, 1000, 4096, 65520, 65536, 100_000, 1 << 20];
    let mtus = [Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096];
    for seed in 0..n {
        let mut rng = StdRng::seed_from_u64(0xc0de_0000 + seed);
        let size = sizes[rng.gen_range(0..sizes.len())];
        let faulty = rng.gen_bool(0.7);
        let ping_pong = rng.gen_bool(0.3);
        let p = |rng: &mut StdRng, max: f64| if faulty { rng.gen_range(0.0..max) } else { 0.0 };
        let case = Case {
            mtu: mtus[rng.gen_range(0..mtus.len())],
            size,
            count: if ping_pong {
                1
            } else {
                ((4 << 20) / size).clamp(4, 400)
            },
            iterations: if ping_pong {
                ((1 << 20) / size).clamp(4, 200)
            } else {
                1
            },
            one_way: rng.gen_bool(0.3),
            loss: p(&mut rng, 0.03),
            duplicate: p(&mut rng, 0.03),
            reorder: p(&mut rng, 0.05),
            corrupt: p(&mut rng, 0.01),
            repost_delay: if rng.gen_bool(0.3) {
                rng.gen_range(1..60)
            } else {
                0
            },
            rx_capacity: rng.gen_bool(0.3).then(|| rng.gen_range(8..64)),
        };
        let out = run_case(&case, seed);
        println!("seed {seed}: {case:?} -> {out:?}");
    }
    println!("{n} random cases verified");
}
