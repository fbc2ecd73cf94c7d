//! Host benchmark of the transport engine between two in-memory devices (not a timed test):
//! messages/s and GB/s of RDMA WRITE and SEND from 8 B to 1 MiB at MTU 4096, next to the host's
//! memcpy bandwidth measured in the same run. It measures the engine (packet building, ICRC,
//! parsing, PSN/ACK logic, memory copies through the env); the fabric socket is not involved.
//!
//! Run: cargo test --release -p rox-nic --test roce_bench -- --ignored --nocapture

mod roce_common;
use roce_common::*;

use std::time::Instant;

const QPN_A: u32 = 0x11;
const QPN_B: u32 = 0x22;
const SRC: u64 = MEM_BASE;
const DST: u64 = MEM_BASE + (2 << 20);
const MAX_SIZE: u32 = 1 << 20;
const SIZES: [u32; 7] = [8, 64, 512, 4096, 32 << 10, 256 << 10, MAX_SIZE];
/// WRs kept in flight.
const DEPTH: u64 = 32;
/// Bytes moved per measurement (bounded by the message counts below).
const BYTES_PER_POINT: u64 = 256 << 20;
const MIN_MESSAGES: u64 = 200;
const MAX_MESSAGES: u64 = 200_000;

/// memcpy bandwidth for a buffer of `len` bytes (1 MiB: cache-resident like the benchmark's
/// buffers; 64 MiB: DRAM).
fn memcpy_gbps(len: usize) -> f64 {
    let src = vec![0x5au8; len];
    let mut dst = vec![0u8; len];
    dst.copy_from_slice(&src);
    let rounds = (512 << 20) / len;
    let t = Instant::now();
    for _ in 0..rounds {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    }
    (rounds * len) as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn run(opcode: WrOpcode, size: u32) -> (f64, f64) {
    let mut net = Net::new(&[gid_v4(1), gid_v4(2)]);
    let ka = net.devs[0]
        .env
        .reg_mr(PD, SRC, u64::from(MAX_SIZE), ALL_ACCESS);
    let kb = net.devs[1]
        .env
        .reg_mr(PD, DST, u64::from(MAX_SIZE), ALL_ACCESS);
    let params = QpParams {
        mtu: Mtu::Mtu4096,
        ..QpParams::rc()
    };
    connect(&mut net, 0, QPN_A, 1, QPN_B, &params);
    let messages = (BYTES_PER_POINT / u64::from(size)).clamp(MIN_MESSAGES, MAX_MESSAGES);
    if opcode == WrOpcode::Send {
        for i in 0..messages {
            net.devs[1].env.post_recv(
                QPN_B,
                RecvWr {
                    wr_id: i,
                    sges: vec![sge(DST, size, kb)],
                },
            );
        }
    }
    let start = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    while done < messages {
        while posted < messages && posted - done < DEPTH {
            let mut wr = send_wr(posted, opcode, SendData::Sges(vec![sge(SRC, size, ka)]));
            wr.remote_addr = DST;
            wr.rkey = kb;
            let (engine, env) = net.dev(0);
            engine.post_send(env, QPN_A, wr).unwrap();
            posted += 1;
        }
        assert!(net.pump());
        for c in net.devs[0].env.take_completions() {
            assert_eq!(c.status, WcStatus::Success);
            done += 1;
        }
        net.devs[1].env.completions.clear();
    }
    let secs = start.elapsed().as_secs_f64();
    (
        messages as f64 / secs,
        messages as f64 * f64::from(size) / secs / 1e9,
    )
}

#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn engine_write_and_send_bandwidth() {
    let memcpy = || {
        format!(
            "{:.2} GB/s (1 MiB), {:.2} GB/s (64 MiB)",
            memcpy_gbps(1 << 20),
            memcpy_gbps(64 << 20)
        )
    };
    println!("host memcpy: {}", memcpy());
    println!(
        "{:>8} {:>14} {:>10} {:>14} {:>10}",
        "size", "WRITE msg/s", "GB/s", "SEND msg/s", "GB/s"
    );
    for size in SIZES {
        let (wm, wg) = run(WrOpcode::RdmaWrite, size);
        let (sm, sg) = run(WrOpcode::Send, size);
        println!("{size:>8} {wm:>14.0} {wg:>10.3} {sm:>14.0} {sg:>10.3}");
    }
    println!("host memcpy: {}", memcpy());
}

/// The same exchange with every packet going through a host UDP socket of the fabric (two
/// sockets in one process, one thread): what two rox-nic processes' data paths can reach.
fn run_over_fabric(opcode: WrOpcode, size: u32) -> (f64, f64) {
    use roce_common::roce::fabric::{Fabric, FabricConfig, MAX_DATAGRAM};
    let dir = tempfile::tempdir().unwrap();
    let cfg = FabricConfig {
        directory: dir.path().to_path_buf(),
        bind: std::net::Ipv4Addr::LOCALHOST,
        faults: None,
        pcap: None,
    };
    let mut net = Net::new(&[gid_v4(1), gid_v4(2)]);
    let mut fabrics: Vec<Fabric> = (0..2).map(|_| Fabric::open(&cfg).unwrap()).collect();
    for (f, d) in fabrics.iter_mut().zip(&net.devs) {
        f.add_gid(d.gid).unwrap();
    }
    let ka = net.devs[0]
        .env
        .reg_mr(PD, SRC, u64::from(MAX_SIZE), ALL_ACCESS);
    let kb = net.devs[1]
        .env
        .reg_mr(PD, DST, u64::from(MAX_SIZE), ALL_ACCESS);
    let params = QpParams {
        mtu: Mtu::Mtu4096,
        timeout: 14,
        ..QpParams::rc()
    };
    connect(&mut net, 0, QPN_A, 1, QPN_B, &params);
    let messages = (BYTES_PER_POINT / 4 / u64::from(size)).clamp(MIN_MESSAGES, MAX_MESSAGES / 4);
    if opcode == WrOpcode::Send {
        for i in 0..messages {
            net.devs[1].env.post_recv(
                QPN_B,
                RecvWr {
                    wr_id: i,
                    sges: vec![sge(DST, size, kb)],
                },
            );
        }
    }
    let epoch = Instant::now();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let (mut posted, mut done) = (0u64, 0u64);
    while done < messages {
        // The engines run on the real clock here (Net::dev hands out `net.now`).
        net.now = epoch.elapsed().as_nanos() as u64;
        while posted < messages && posted - done < DEPTH {
            let mut wr = send_wr(posted, opcode, SendData::Sges(vec![sge(SRC, size, ka)]));
            wr.remote_addr = DST;
            wr.rkey = kb;
            let (engine, env) = net.dev(0);
            engine.post_send(env, QPN_A, wr).unwrap();
            posted += 1;
        }
        for (d, f) in net.devs.iter_mut().zip(fabrics.iter_mut()) {
            d.env.now = epoch.elapsed().as_nanos() as u64;
            for (gid, p) in std::mem::take(&mut d.env.outbox) {
                f.send(&gid, p).unwrap();
            }
            while let Some(n) = f.recv(&mut buf, None).unwrap() {
                let _ = d.engine.receive(&mut d.env, &buf[..n]);
            }
            d.engine.poll(&mut d.env);
        }
        for c in net.devs[0].env.take_completions() {
            assert_eq!(c.status, WcStatus::Success);
            done += 1;
        }
        net.devs[1].env.completions.clear();
    }
    let secs = epoch.elapsed().as_secs_f64();
    let stats = net.devs[0].engine.stats();
    if stats.retransmit_timeouts + stats.nak_rewinds > 0 {
        println!(
            "  ({size} B {opcode:?}: {} timeouts, {} NAK rewinds: packets lost, or the process was descheduled past the ACK timeout)",
            stats.retransmit_timeouts, stats.nak_rewinds
        );
    }
    (
        messages as f64 / secs,
        messages as f64 * f64::from(size) / secs / 1e9,
    )
}

#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn fabric_write_and_send_bandwidth() {
    println!("over UDP sockets on 127.0.0.1, one thread for both devices");
    println!(
        "{:>8} {:>14} {:>10} {:>14} {:>10}",
        "size", "WRITE msg/s", "GB/s", "SEND msg/s", "GB/s"
    );
    for size in SIZES {
        let (wm, wg) = run_over_fabric(WrOpcode::RdmaWrite, size);
        let (sm, sg) = run_over_fabric(WrOpcode::Send, size);
        println!("{size:>8} {wm:>14.0} {wg:>10.3} {sm:>14.0} {sg:>10.3}");
    }
}
