//! Host benchmark of many QPs sharing one port: two devices on a `dgram` wire, the same 2048
//! WRITEs of 8 KiB (16 MiB) spread over each QP count of ROX_QPS_LIST (default `16 256`), all
//! posted at once (tests/many_qps). Per count it prints the rate, what the sender's port and
//! transport counted, the receiver's ACKs (its port's frames), and how each device's data-path
//! loop ran: passes, passes with work, naps and idle sleeps. Wall clock is noise on a shared
//! 2-core host; for instruction counts run one count at a time under callgrind, with an ACK
//! timeout valgrind's slowness does not reach (ROX_QPS_ACK_TIMEOUT, IB's exponent, default
//! 16 = 268 ms) and one profile for the timed part alone, and divide a function's cost by the passes printed here:
//! `ROX_QPS_LIST=256 ROX_QPS_ACK_TIMEOUT=22 valgrind --tool=callgrind
//! --dump-before='*timed_part_*' target/release/deps/qps-*` (the timed part: `callgrind.out.PID.2`;
//! docs/benchmarks/session-08.md, "Session 8: 16 against 256 QPs"). ROX_QPS_TRACE_DIR=DIR writes
//! both devices' WQE traces of each run there (DIR/SUBNET-QPS-{a,b}.wqe-trace, for rox-trace).
//! ROX_QPS_POSTING=one-by-one[:GAP_NS] posts as perftest does instead (QP after QP, a doorbell
//! per WQE, GAP_NS between posts) and the sender's column `fetches/parked` says how often its
//! device took WQEs from a doorbell and how often it left them for the QP's turn.
//! ROX_QPS_MESSAGES=N moves N messages a run instead (perftest's 12,800: 50 a QP at 256 QPs),
//! ROX_QPS_WAKE=posted wakes the devices as rox.ko does in a guest. ROX_QPS_BUFFERS=per-qp sends
//! each QP's messages from one 8 KiB buffer to one, as perftest does (the devices' working set
//! grows with the QP count), instead of each message from and to bytes of its own.
//! Run: `cargo bench -p rox-nic --bench qps`.

#[path = "../tests/many_qps/mod.rs"]
mod many_qps;

use many_qps::{messages, write_over_qps, Loop, Posting, ACK_TIMEOUT, MSG};

fn main() {
    let messages = messages();
    let list = std::env::var("ROX_QPS_LIST").unwrap_or_else(|_| "16 256".into());
    let counts: Vec<u64> = list
        .split([' ', ','])
        .filter(|s| !s.is_empty())
        .map(|s| {
            let q: u64 = s
                .parse()
                .unwrap_or_else(|_| panic!("ROX_QPS_LIST: {s:?} is not a QP count"));
            assert!(
                q > 0 && messages % q == 0,
                "ROX_QPS_LIST: {q} does not divide the {messages} messages"
            );
            q
        })
        .collect();
    let ack_timeout = std::env::var("ROX_QPS_ACK_TIMEOUT").map_or(ACK_TIMEOUT, |v| {
        v.parse()
            .ok()
            .filter(|t| (1..32).contains(t))
            .unwrap_or_else(|| panic!("ROX_QPS_ACK_TIMEOUT: {v:?} is not an exponent 1..31"))
    });
    let posting = Posting::from_env();
    let dir = tempfile::tempdir().expect("a temporary directory for the wire's sockets");
    println!(
        "{messages} RDMA WRITEs of {MSG} B per run, posted {posting:?}, {} buffers, ACK timeout {ack_timeout}; load {}",
        if many_qps::per_qp_buffers() { "per-QP" } else { "per-message" },
        std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default(),
    );
    println!(
        "{:>5} {:>8} {:>7} {:>6} {:>7} {:>9} | {:>28} | {:>14} | {:>28}",
        "qps",
        "MiB/s",
        "frames",
        "acks",
        "retrans",
        "timeouts",
        "sender passes/work/naps/sleeps",
        "fetches/parked",
        "receiver passes/work/naps/sleeps"
    );
    for (i, &qps) in counts.iter().enumerate() {
        // A fresh pair of devices (and subnet) per run.
        let r = write_over_qps(dir.path(), 30 + i as u8, qps, ack_timeout, posting);
        let rate = (messages * MSG) as f64 / r.elapsed.as_secs_f64() / f64::from(1 << 20);
        let show = |l: &Loop| format!("{}/{}/{}/{}", l.passes, l.work_passes, l.naps, l.sleeps);
        println!(
            "{qps:>5} {rate:>8.1} {:>7} {:>6} {:>7} {:>9} | {:>28} | {:>14} | {:>28}",
            r.port_tx_frames,
            r.acks,
            r.retransmits,
            r.timeouts,
            show(&r.loops[0]),
            format!("{}/{}", r.loops[0].fetches, r.loops[0].parked),
            show(&r.loops[1])
        );
        assert_eq!(
            r.xmit_discards, 0,
            "{qps} QPs: frames lost in the sending device's own queue"
        );
    }
}
