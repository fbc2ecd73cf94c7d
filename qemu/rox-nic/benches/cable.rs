//! Host benchmark of two rox-nic devices joined by a rox-to-rox cable (`port::cable`: rings of
//! frames in shared memory) over their test guest RAM: GB/s of RDMA WRITE at 64 KiB and 1 MiB
//! (the sizes of the issue 18 goal, ≥ 6 GB/s at 1 MiB between guests), next to the cable's raw
//! limit (4 KiB frames with no RDMA on top) and this host's memcpy bandwidth.
//! Run: `cargo bench -p rox-nic --bench cable` (ROX_BENCH_SECS: time per point, default 1 s;
//! 0.1 s under `cargo test --benches`).
//! For instruction counts (callgrind; wall clock is noise on a loaded host) set ROX_BENCH_MSGS=N:
//! each size of ROX_BENCH_SIZES (default 1048576) then moves exactly N WRITEs and nothing else
//! runs; the bench prints the frames each message took, to divide by, e.g.
//! `ROX_BENCH_MSGS=200 valgrind --tool=callgrind target/release/deps/cable-*`.

use std::time::Instant;

use rox_nic::benchkit::{self, Rate};
use rox_nic::port::limit::{cable_wire, port_limit};
use rox_nic::testkit::pair::{deep_rc_pair, Side};
use rox_nic::testkit::*;
use rox_uapi::admin::{STAT_PORT_TX_FRAMES, STAT_RETRANSMITS};
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

const PD: u32 = 1;
const ALL: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
const MAX_MSG: u64 = 1 << 20;
/// WQEs in flight (deep_rc_pair's send queue holds 2^7).
const WINDOW: u64 = 64;
/// The benchmark's devices own GIDs 127.0.SUBNET.1 and .2.
const SUBNET: u8 = 19;

/// When a measured point ends: after a time, or after a fixed number of messages.
#[derive(Clone, Copy)]
enum Limit {
    Secs(f64),
    Msgs(u64),
}

/// RDMA WRITEs of `size` bytes from a to the second half of b's buffer `target` (with `rkey`),
/// WINDOW in flight, until `limit`.
fn run(a: &mut Side, target: u64, rkey: Key, size: u64, limit: Limit) -> Rate {
    let (mut posted, mut done) = (0u64, 0u64);
    let start = Instant::now();
    let mut stop = false;
    while !stop || done < posted {
        if !stop {
            stop = match limit {
                Limit::Secs(secs) => start.elapsed().as_secs_f64() > secs,
                Limit::Msgs(n) => posted >= n,
            };
        }
        let mut n = 0;
        while !stop && posted - done < WINDOW && !matches!(limit, Limit::Msgs(m) if posted >= m) {
            let w = send_wqe(
                posted,
                WR_RDMA_WRITE,
                WQE_FLAG_SIGNALED,
                &[sge(a.buf, size as u32, a.key)],
            );
            a.d.write_send(&mut a.qp, &with_rdma(w, target + MAX_MSG, rkey));
            posted += 1;
            n += 1;
        }
        if n > 0 {
            let qp = a.qp;
            a.d.ring_sq(&qp);
        }
        let before = done;
        while let Some(c) = a.d.poll_cq(&mut a.cq) {
            assert_eq!(c.status, WC_SUCCESS, "WRITE {} failed", c.wr_id);
            done += 1;
        }
        if done == before && n == 0 {
            // Two device threads may share two cores with this one: yield, do not spin.
            std::thread::yield_now();
        }
    }
    Rate::new(done, size, start.elapsed().as_secs_f64())
}

/// The bytes every WRITE sends (a prefix of them): no two neighbouring pages alike.
fn pattern() -> Vec<u8> {
    (0..MAX_MSG).map(|i| (i * 7 + i / 4093) as u8).collect()
}

/// Completions say only that the WRITEs succeeded: the last one's bytes must also be in place.
fn check_landed(b: &TestDriver, target: u64, size: u64) {
    let landed = b.ram.read(target + MAX_MSG, size as usize);
    assert!(
        landed == pattern()[..size as usize],
        "the last {size} B WRITE's destination differs from its source"
    );
}

/// Device `last` of the pair on cable end `link`, with a buffer of two messages.
fn device(link: LinkSpec, last: u8) -> (TestDriver, u64, Key) {
    let mut d = port_device(link, SUBNET, last, None);
    let (buf, key) = d.buffer(PD, 2 * MAX_MSG, ALL);
    (d, buf, key)
}

/// Thread CPU time of taking one 4 KiB RoCEv2 frame out of a cable's receive buffer and
/// checking its ICRC, `frames` frames a measurement, `rounds` measurements of each way
/// alternated: two passes (copy, then the ICRC over the copy, as before session 17) and the
/// copy that folds the ICRC as it copies (`PeerBytes::copy_folding`: fused where the CPU has
/// the wide fold, else a copy and the transport's check as before).
fn rx_copy_point(frames: u32, rounds: usize) {
    use rox_nic::port::frame::{received_icrc_front, roce_header};
    use rox_nic::roce::wire::{icrc_matches, ICRC_RESIDUE};
    use rox_nic::sys::clock::thread_cpu_ns;
    use rox_nic::sys::shm::{Copied, PeerBytes, SharedMapping};
    let hdr = rox_nic::roce::wire::Headers::new(rox_nic::roce::wire::Bth {
        opcode: rox_nic::roce::wire::opcode::RC_WRITE_MIDDLE,
        solicited: false,
        pkey: rox_nic::roce::wire::DEFAULT_PKEY,
        dest_qpn: rox_nic::roce::Qpn::from_wire(0x11),
        ack_req: false,
        psn: rox_nic::roce::Psn::from_wire(7),
    });
    let gids = (gid_v4(127, 0, SUBNET, 1), gid_v4(127, 0, SUBNET, 2));
    let packet = rox_nic::roce::wire::build_packet(
        &rox_nic::testkit::frames::peer_ip(gids.0, gids.1),
        &hdr,
        &pattern()[..4096],
    );
    let frame = [&roce_header(&[2; 6], &[4; 6], &packet)[..], &packet].concat();
    let map = std::sync::Arc::new(SharedMapping::anonymous(16 << 10).unwrap());
    assert!(map.write(0, &frame));
    let buffer = PeerBytes::carve(&map, 0, 16 << 10, 1)
        .unwrap()
        .pop()
        .unwrap();
    let mut copy = vec![0u8; frame.len()];
    let two_passes = |copy: &mut [u8]| {
        assert!(buffer.copy_to(copy));
        let ip = &copy[14..];
        let icrc = u32::from_le_bytes(ip[ip.len() - 4..].try_into().unwrap());
        assert!(icrc_matches(&ip[..ip.len() - 4], 20, icrc));
    };
    let fused = |copy: &mut [u8]| match buffer
        .copy_folding(copy, |f| received_icrc_front(f).map(|(_, front)| front))
    {
        Copied::Folded(state) => assert_eq!(state, ICRC_RESIDUE),
        _ => two_passes(copy),
    };
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (way, took) in times.iter_mut().enumerate() {
            let start = thread_cpu_ns();
            for _ in 0..frames {
                if way == 0 {
                    two_passes(&mut copy);
                } else {
                    fused(&mut copy);
                }
            }
            took.push((thread_cpu_ns() - start) as f64 / f64::from(frames));
        }
    }
    let show = |t: &[f64]| {
        t.iter()
            .map(|ns| format!("{ns:.0}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "receive copy + ICRC check of a 4 KiB frame, thread CPU ns: two passes {}, folded as \
         copied {}",
        show(&times[0]),
        show(&times[1])
    );
}

fn main() {
    // `cargo test --benches` runs this with --bench absent: a quick pass then.
    let benching = std::env::args().any(|a| a == "--bench");
    let secs: f64 = std::env::var("ROX_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if benching { 1.0 } else { 0.1 });
    let msgs: Option<u64> = std::env::var("ROX_BENCH_MSGS")
        .ok()
        .and_then(|s| s.parse().ok());
    let dir = tempfile::tempdir().unwrap();
    let (la, lb) = cable_wire(dir.path(), "cable.sock");
    let (mut da, abuf, akey) = device(la, 1);
    let (mut db, bbuf, bkey) = device(lb, 2);
    let (cq, qp, _) = deep_rc_pair(&mut da, &mut db, SUBNET, PD);
    let mut a = Side {
        d: da,
        cq,
        qp,
        buf: abuf,
        key: akey,
    };
    a.d.ram.write(a.buf, &pattern());
    // The ends meet on their data path threads: a first WRITE (retransmitted if it went out
    // before they met) makes sure the cable is up before anything is counted.
    run(&mut a, bbuf, bkey, 8, Limit::Msgs(1));
    if let Some(msgs) = msgs {
        let sizes = std::env::var("ROX_BENCH_SIZES").unwrap_or_else(|_| "1048576".into());
        for size in sizes.split(',') {
            let size: u64 = size
                .parse()
                .expect("ROX_BENCH_SIZES: bytes, comma separated");
            assert!(size <= MAX_MSG, "ROX_BENCH_SIZES: at most {MAX_MSG}");
            let frames_before = a.d.query_stats()[STAT_PORT_TX_FRAMES];
            run(&mut a, bbuf, bkey, size, Limit::Msgs(msgs));
            let frames = a.d.query_stats()[STAT_PORT_TX_FRAMES] - frames_before;
            println!("write {size} B: {msgs} messages, {frames} frames out of the requester");
            check_landed(&db, bbuf, size);
        }
        return;
    }
    println!(
        "rox-nic host benchmark: two devices, RC, a rox-to-rox cable, MTU 4096, {WINDOW} WQEs \
         in flight, {secs} s per point"
    );
    println!("load average at start: {}", benchkit::load_average());
    println!(
        "{:>8} | {:>11} {:>8} | {:>12}",
        "size", "WRITE msg/s", "GB/s", "memcpy GB/s"
    );
    for size in [64 << 10, MAX_MSG] {
        let w = run(&mut a, bbuf, bkey, size, Limit::Secs(secs));
        println!(
            "{size:>8} | {:>11.0} {:>8.3} | {:>12.2}",
            w.msgs_per_sec,
            w.gbytes_per_sec,
            benchkit::memcpy_gbps(size as usize)
        );
    }
    println!("load average at end:   {}", benchkit::load_average());
    check_landed(&db, bbuf, MAX_MSG);
    let stats = a.d.query_stats();
    println!(
        "requester: {} frames out, {} retransmissions",
        stats[STAT_PORT_TX_FRAMES], stats[STAT_RETRANSMITS]
    );
    drop((a, db));
    let (ra, rb) = cable_wire(dir.path(), "raw.sock");
    let (fps, mbps) = port_limit(&ra, &rb, 9000, secs.max(0.5)).unwrap();
    println!("cable raw limit (4 KiB frames, no RDMA): {fps:.0} frames/s, {mbps:.0} MB/s");
    rx_copy_point(
        if benching { 20_000 } else { 200 },
        if benching { 7 } else { 1 },
    );
}
