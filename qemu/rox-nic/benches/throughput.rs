//! Host benchmark of the device between two rox-nic instances wired back to back: messages/s
//! and GB/s for RDMA WRITE and SEND from 8 B to 1 MiB, next to this host's memcpy bandwidth
//! (one table per wire, see `rox_nic::benchkit`), and below each table the raw limits of its
//! wire: 4 KiB frames, and frames the size of an 8 B WRITE's, moved between two ports with no
//! RDMA on top. Two wires (ROX_BENCH_PORT=dgram|cable|both, default both, in that order):
//! `dgram` ports (Ethernet frames on unix datagram sockets, a system call per batch) and a
//! rox-to-rox `cable` (rings of frames in shared memory, `port::cable`), whose raw frame rate
//! is far above the 1M msg/s goal at 8 B, so the engine, not the wire, sets its row.
//! Run: `cargo bench -p rox-nic --bench throughput` (set ROX_BENCH_SECS to change the time per
//! point; default 0.3 s; ROX_BENCH_WINDOW the WQEs in flight, default 64).
//! For instruction counts (callgrind; wall clock is noise on a loaded machine) set
//! ROX_BENCH_MSGS=N: each point of ROX_BENCH_POINTS (default `write:4096,write:65536,send:8`)
//! then moves exactly N messages over each wire asked for and nothing else runs, and prints
//! its ACK timeouts and the load average beside the rate. ROX_BENCH_WAIT=event makes the
//! application side sleep on completion events instead of yielding (see `Wait`). E.g.
//! `ROX_BENCH_PORT=cable ROX_BENCH_MSGS=2000 ROX_BENCH_POINTS=write:8 valgrind --tool=callgrind target/release/deps/throughput-*`.

use std::os::fd::AsRawFd;
use std::time::Instant;

use rox_nic::benchkit::{self, Rate, SIZES};
use rox_nic::port::limit::{cable_wire, dgram_wire, port_limit, port_limit_frames};
use rox_nic::testkit::pair::Side;
use rox_nic::testkit::*;
use rox_uapi::admin::{
    STAT_ACKS_SENT, STAT_RETRANSMITS, STAT_TIMEOUTS, STAT_TX_PACKETS, STAT_WAKEUPS,
};
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

const PD: u32 = 1;
const ALL: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
const MAX_MSG: u64 = 1 << 20;
/// WQEs in flight by default (64 MiB at 1 MiB: the requester's send window keeps the wire
/// within what the socket buffers hold); ROX_BENCH_WINDOW changes it (at most [`MAX_WINDOW`]).
const WINDOW: u32 = 64;
/// The QP's SQ and RQ hold 1024 WQEs each (`side`); the device's RC window is 256 packets.
const MAX_WINDOW: u32 = 512;

/// WQEs in flight (ROX_BENCH_WINDOW, default [`WINDOW`]).
fn window() -> u32 {
    match std::env::var("ROX_BENCH_WINDOW") {
        Err(_) => WINDOW,
        Ok(w) => match w.parse() {
            Ok(n) if (1..=MAX_WINDOW).contains(&n) => n,
            _ => panic!("ROX_BENCH_WINDOW: 1 to {MAX_WINDOW} WQEs, not {w}"),
        },
    }
}
/// The frame of an 8 B RDMA WRITE: Ethernet 14, IPv4 20, UDP 8, BTH 12, RETH 16, payload 8,
/// ICRC 4.
const WRITE_8B_FRAME: usize = 82;

fn side(link: LinkSpec, last: u8) -> Side {
    /// The benchmark's devices own GIDs 127.0.9.x.
    const SUBNET: u8 = 9;
    let mut d = port_device(link, SUBNET, last, None);
    let cq = d.create_cq(12);
    let (c, mut qp) = d.create_qp_cmd(QPT_RC, PD, cq.id, cq.id, rox_uapi::admin::SRQ_NONE, 10, 10);
    qp.qpn = d.run::<rox_uapi::admin::CreateQp>(c);

    let size = 2 * MAX_MSG;
    let (buf, key) = d.buffer(PD, size, ALL);
    Side {
        d,
        cq,
        qp,
        buf,
        key,
    }
}

/// When a measured point ends: after a time, or after a fixed number of messages.
#[derive(Clone, Copy)]
enum Limit {
    Secs(f64),
    Msgs(u64),
}

fn run(a: &mut Side, b: &mut Side, opcode: u8, size: u64, limit: Limit) -> Rate {
    let (mut posted, mut done) = (0u64, 0u64);
    let window = u64::from(window());
    let mut recvs = 0u64;
    let send = opcode == WR_SEND;
    if send {
        for _ in 0..window {
            b.d.post_recv(&mut b.qp, recvs, &[sge(b.buf, MAX_MSG as u32, b.key)]);
            recvs += 1;
        }
    }
    let start = Instant::now();
    let mut stop = false;
    let mut idle_polls = 0u32;
    let wait = Wait::from_env();
    while !stop || done < posted {
        // The machine may have only two cores for two device threads: the application side
        // does not spin when it has nothing to do.
        if idle_polls > 0 {
            match wait {
                Wait::Yield => std::thread::yield_now(),
                Wait::Event if send => wait_for_cqe(&mut [&mut *a, &mut *b]),
                Wait::Event => wait_for_cqe(&mut [&mut *a]),
            }
        }
        if !stop {
            stop = match limit {
                Limit::Secs(secs) => start.elapsed().as_secs_f64() > secs,
                Limit::Msgs(n) => posted >= n,
            };
        }
        let before = done;
        let mut n = 0;
        while !stop && posted - done < window && !matches!(limit, Limit::Msgs(n) if posted >= n) {
            let w = send_wqe(
                posted,
                opcode,
                WQE_FLAG_SIGNALED,
                &[sge(a.buf, size as u32, a.key)],
            );
            let w = with_rdma(w, b.buf + MAX_MSG, b.key);
            a.d.write_send(&mut a.qp, &w);
            posted += 1;
            n += 1;
        }
        if n > 0 {
            let qp = a.qp;
            a.d.ring_sq(&qp);
        }
        while let Some(c) = a.d.poll_cq(&mut a.cq) {
            assert_eq!(c.status, WC_SUCCESS);
            done += 1;
        }
        if send {
            while let Some(c) = b.d.poll_cq(&mut b.cq) {
                assert_eq!(c.status, WC_SUCCESS);
                b.d.post_recv(&mut b.qp, recvs, &[sge(b.buf, MAX_MSG as u32, b.key)]);
                recvs += 1;
            }
        }
        idle_polls = if done == before && n == 0 {
            idle_polls + 1
        } else {
            0
        };
    }
    let t = start.elapsed().as_secs_f64();
    if send {
        // Drain the receive side and its spare receive WRs.
        while b.d.poll_cq(&mut b.cq).is_some() {}
    }
    Rate::new(done, size, t)
}

/// How the application side waits while it has nothing to do (ROX_BENCH_WAIT).
#[derive(Clone, Copy)]
enum Wait {
    /// `sched_yield` in a loop (the default, as the numbers of earlier sessions): the thread
    /// stays runnable; at load 13 it had a third of the process's CPU samples, most in the
    /// system call.
    Yield,
    /// `event`: sleep on the CQs' completion events (a verbs application's completion
    /// channel), leaving the cores to the device threads; the device then writes an EQE and
    /// signals an interrupt per wait (about 350 more instructions per 8 B WRITE).
    Event,
}

impl Wait {
    fn from_env() -> Wait {
        match std::env::var("ROX_BENCH_WAIT").as_deref() {
            Ok("yield") | Err(_) => Wait::Yield,
            Ok("event") => Wait::Event,
            Ok(other) => panic!("ROX_BENCH_WAIT: event or yield, not {other}"),
        }
    }
}

/// Arms the CQs of `sides` and sleeps until one of them has a completion event (a CQE that
/// came before the arm fires at once: the device checks) or 1 ms passed; then re-arms their
/// completion EQs.
fn wait_for_cqe(sides: &mut [&mut Side]) {
    const SAFETY_NET: std::time::Duration = std::time::Duration::from_millis(1);
    let mut fds = Vec::with_capacity(sides.len());
    for s in sides.iter_mut() {
        s.d.arm_cq(&mut s.cq, rox_uapi::regs::CQ_ARM_NEXT);
        fds.push(libc::pollfd {
            fd: s.d.vectors[COMP_EQ as usize].as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
    }
    rox_nic::sys::poll::ppoll(&mut fds, Some(SAFETY_NET));
    for s in sides.iter_mut() {
        s.d.vectors[COMP_EQ as usize].drain();
        while s.d.poll_eq(COMP_EQ).is_some() {}
        s.d.ack_eq(COMP_EQ, true);
    }
}

/// The one-minute load average (the number is noise without it), or "?".
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// The fixed-count mode (ROX_BENCH_MSGS): only the points asked for, exactly `msgs` each.
fn run_counted(wire: Wire, a: &mut Side, b: &mut Side, msgs: u64) {
    let points = std::env::var("ROX_BENCH_POINTS")
        .unwrap_or_else(|_| "write:4096,write:65536,send:8".into());
    for point in points.split(',') {
        let (op, size) = point
            .split_once(':')
            .expect("ROX_BENCH_POINTS: op:size,...");
        let opcode = match op {
            "write" => WR_RDMA_WRITE,
            "send" => WR_SEND,
            _ => panic!("ROX_BENCH_POINTS: op is write or send, not {op}"),
        };
        let size: u64 = size.parse().expect("ROX_BENCH_POINTS: size in bytes");
        assert!(size <= MAX_MSG, "ROX_BENCH_POINTS: size at most {MAX_MSG}");
        let (req0, resp0) = (a.d.query_stats(), b.d.query_stats());
        let rate = run(a, b, opcode, size, Limit::Msgs(msgs));
        let (req1, resp1) = (a.d.query_stats(), b.d.query_stats());
        let delta = |s1: &[u64], s0: &[u64], i: usize| s1[i] - s0[i];
        // The pair loses nothing: an ACK timeout here is a device thread that got no CPU for
        // longer than the RTO (docs/benchmarks.md), so the load goes beside it.
        println!(
            "{} {op} {size} B: {msgs} messages, {:.0} msg/s; requester {} ACK timeouts, {} \
             retransmissions, {} wakeups; responder {} ACKs, {} wakeups; load {}",
            wire.name(),
            rate.msgs_per_sec,
            delta(&req1, &req0, STAT_TIMEOUTS),
            delta(&req1, &req0, STAT_RETRANSMITS),
            delta(&req1, &req0, STAT_WAKEUPS),
            delta(&resp1, &resp0, STAT_ACKS_SENT),
            delta(&resp1, &resp0, STAT_WAKEUPS),
            load_average(),
        );
    }
}

/// The wire between the two devices (ROX_BENCH_PORT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wire {
    /// Unix datagram sockets: a system call per batch of frames each way.
    Dgram,
    /// A rox-to-rox cable: rings of frames in shared memory, an eventfd wake only when idle.
    Cable,
}

impl Wire {
    /// The wires ROX_BENCH_PORT asks for: `dgram`, `cable`, or `both` (the default).
    fn from_env() -> Vec<Wire> {
        match std::env::var("ROX_BENCH_PORT").as_deref() {
            Ok("both") | Err(_) => vec![Wire::Dgram, Wire::Cable],
            Ok("dgram") => vec![Wire::Dgram],
            Ok("cable") => vec![Wire::Cable],
            Ok(other) => panic!("ROX_BENCH_PORT: dgram, cable or both, not {other}"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Wire::Dgram => "dgram",
            Wire::Cable => "cable",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Wire::Dgram => "dgram ports back to back (unix sockets)",
            Wire::Cable => "a rox-to-rox cable (frame rings in shared memory)",
        }
    }

    /// The two ends' link specs, on sockets named after `tag` in `dir`.
    fn links(self, dir: &std::path::Path, tag: &str) -> (LinkSpec, LinkSpec) {
        match self {
            Wire::Dgram => dgram_wire(dir, &format!("{tag}a.sock"), &format!("{tag}b.sock")),
            Wire::Cable => cable_wire(dir, &format!("{tag}.sock")),
        }
    }
}

/// Two devices joined by `wire`, one connected RC QP each, and one 8 B WRITE done between
/// them: the ends of a cable meet on their data-path threads, so a first message may be lost
/// and retransmitted before anything is measured.
fn pair(wire: Wire, dir: &std::path::Path) -> (Side, Side) {
    let (la, lb) = wire.links(dir, "rdma");
    let mut a = side(la, 1);
    let mut b = side(lb, 2);
    let (qa, qb) = (a.qp, b.qp);
    a.d.connect_mtu(&qa, gid_v4(127, 0, 9, 2), qb.qpn, ALL, MTU_4096);
    b.d.connect_mtu(&qb, gid_v4(127, 0, 9, 1), qa.qpn, ALL, MTU_4096);
    run(&mut a, &mut b, WR_RDMA_WRITE, 8, Limit::Msgs(1));
    (a, b)
}

/// The table of every size over `wire`, its raw limits, and the requester's and responder's
/// packet counts.
fn run_table(wire: Wire, secs: f64) {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b) = pair(wire, dir.path());
    benchkit::print_header(&format!(
        "rox-nic host benchmark: two devices, RC, {}, MTU 4096, {} WQEs in flight, {secs} s per point",
        wire.describe(),
        window()
    ));
    for size in SIZES {
        let write = run(&mut a, &mut b, WR_RDMA_WRITE, size, Limit::Secs(secs));
        let send = run(&mut a, &mut b, WR_SEND, size, Limit::Secs(secs));
        benchkit::print_row(size, write, send);
    }
    benchkit::print_footer();
    let requester = a.d.query_stats();
    let responder = b.d.query_stats();
    // The devices' threads would spin beside the raw measurement: gone first.
    drop((a, b));
    let name = wire.name();
    let (ra, rb) = wire.links(dir.path(), "raw");
    let (fps, mbps) = port_limit(&ra, &rb, 9000, secs.max(0.5)).unwrap();
    println!("{name} raw limit (4 KiB frames, no RDMA): {fps:.0} frames/s, {mbps:.0} MB/s");
    // An 8 B message is one frame: the wire's small-frame rate bounds its msg/s.
    let (sa, sb) = wire.links(dir.path(), "small");
    let (fps, _) = port_limit_frames(&sa, &sb, 9000, secs.max(0.5), WRITE_8B_FRAME).unwrap();
    println!(
        "{name} raw limit ({WRITE_8B_FRAME} B frames as an 8 B WRITE's, no RDMA): {fps:.0} frames/s"
    );
    println!(
        "requester: {} packets sent, {} retransmissions ({} ACK timeouts); responder: {} ACKs \
         (coalesced: {:.1} packets per ACK)",
        requester[STAT_TX_PACKETS],
        requester[STAT_RETRANSMITS],
        requester[STAT_TIMEOUTS],
        responder[STAT_ACKS_SENT],
        requester[STAT_TX_PACKETS] as f64 / responder[STAT_ACKS_SENT].max(1) as f64
    );
    println!();
}

fn main() {
    // `cargo test --benches` runs this with --bench absent; keep that quick.
    let secs: f64 = std::env::var("ROX_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.3);
    let msgs: Option<u64> = std::env::var("ROX_BENCH_MSGS")
        .ok()
        .and_then(|s| s.parse().ok());
    for wire in Wire::from_env() {
        match msgs {
            Some(msgs) => {
                let dir = tempfile::tempdir().unwrap();
                let (mut a, mut b) = pair(wire, dir.path());
                run_counted(wire, &mut a, &mut b, msgs);
            }
            None => run_table(wire, secs),
        }
    }
}
