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
//! its ACK timeouts, the responder's ACKs, NAKs and duplicates (a retransmission with no NAK
//! and no timeout is a tail probe's rewind) and the load average beside the rate.
//! ROX_BENCH_WAIT=event makes the
//! application side sleep on completion events instead of yielding (see `Wait`);
//! ROX_BENCH_ACK_TIMEOUT=T connects the QPs with local ACK timeout T instead of 17.
//! ROX_BENCH_WAKE=trapped drives the devices as a driver of a device without a posted-wake
//! companion (the wake register; the device naps before it sleeps) instead of through the
//! companion, as rox.ko in rox-lab's guests does (the default since session 14);
//! ROX_BENCH_POSTED_SPIN_US=N has the devices spin N µs before they sleep while wakes are
//! posted (default the device's, 10, which is also the most; 0: `--posted-spin-us 0`);
//! ROX_BENCH_ADAPTIVE_SPIN=0 spins it always (the plain spin); 1, or unset, spins it only where
//! it brings the next work sooner than sleeping at once (`--adaptive-spin`, the device's
//! default since session 22; docs/benchmarks/session-19-spin.md). E.g.
//! `ROX_BENCH_PORT=cable ROX_BENCH_MSGS=2000 ROX_BENCH_POINTS=write:8 valgrind --tool=callgrind target/release/deps/throughput-*`.

use rox_nic::benchkit::stream::{Limit, Stream, Wait, MAX_WINDOW};
use rox_nic::benchkit::{self, SIZES};
use rox_nic::port::limit::{cable_wire, dgram_wire, port_limit, port_limit_frames};
use rox_nic::testkit::LinkSpec;
use rox_uapi::admin::{
    STAT_ACKS_SENT, STAT_DUP_REQUESTS, STAT_NAKS_SENT, STAT_RETRANSMITS, STAT_TIMEOUTS,
    STAT_TX_PACKETS, STAT_WAKEUPS,
};
use rox_uapi::verbs::{WR_RDMA_WRITE, WR_SEND};

const MAX_MSG: u64 = 1 << 20;
/// WQEs in flight by default (64 MiB at 1 MiB: the requester's send window keeps the wire
/// within what the socket buffers hold); ROX_BENCH_WINDOW changes it (at most
/// [`MAX_WINDOW`]; the device's RC window is 256 packets).
const WINDOW: u32 = 64;

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

/// The one-minute load average (the number is noise without it), or "?".
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// The fixed-count mode (ROX_BENCH_MSGS): only the points asked for, exactly `msgs` each.
fn run_counted(wire: Wire, p: &mut Stream, msgs: u64) {
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
        let (req0, resp0) = (p.a.d.query_stats(), p.b.d.query_stats());
        let rate = p.run(opcode, size, Limit::Msgs(msgs), Wait::from_env());
        let (req1, resp1) = (p.a.d.query_stats(), p.b.d.query_stats());
        let delta = |s1: &[u64], s0: &[u64], i: usize| s1[i] - s0[i];
        // The pair loses nothing: an ACK timeout here is a device thread that got no CPU for
        // longer than the RTO (docs/benchmarks/session-05.md, "What those ACK timeouts are"), so
        // the load goes beside it.
        println!(
            "{} {op} {size} B: {msgs} messages, {:.0} msg/s; requester {} ACK timeouts, {} \
             retransmissions, {} wakeups; responder {} ACKs, {} NAKs, {} duplicates, {} wakeups; \
             load {}",
            wire.name(),
            rate.msgs_per_sec,
            delta(&req1, &req0, STAT_TIMEOUTS),
            delta(&req1, &req0, STAT_RETRANSMITS),
            delta(&req1, &req0, STAT_WAKEUPS),
            delta(&resp1, &resp0, STAT_ACKS_SENT),
            delta(&resp1, &resp0, STAT_NAKS_SENT),
            delta(&resp1, &resp0, STAT_DUP_REQUESTS),
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

/// Two devices joined by `wire` (see [`Stream::new`]).
fn pair(wire: Wire, dir: &std::path::Path) -> Stream {
    let (la, lb) = wire.links(dir, "rdma");
    Stream::new(la, lb, window(), MAX_MSG)
}

/// The table of every size over `wire`, its raw limits, and the requester's and responder's
/// packet counts.
fn run_table(wire: Wire, secs: f64) {
    let dir = tempfile::tempdir().unwrap();
    let mut p = pair(wire, dir.path());
    benchkit::print_header(&format!(
        "rox-nic host benchmark: two devices, RC, {}, MTU 4096, {} WQEs in flight, {secs} s per point",
        wire.describe(),
        p.window()
    ));
    for size in SIZES {
        let write = p.run(WR_RDMA_WRITE, size, Limit::Secs(secs), Wait::from_env());
        let send = p.run(WR_SEND, size, Limit::Secs(secs), Wait::from_env());
        benchkit::print_row(size, write, send);
    }
    benchkit::print_footer();
    let requester = p.a.d.query_stats();
    let responder = p.b.d.query_stats();
    // The devices' threads would spin beside the raw measurement: gone first.
    drop(p);
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
                let mut p = pair(wire, dir.path());
                run_counted(wire, &mut p, msgs);
            }
            None => run_table(wire, secs),
        }
    }
}
