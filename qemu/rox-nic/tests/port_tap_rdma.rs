//! Two whole devices on two taps of a Linux bridge, in a network namespace of the test's own
//! thread (it goes with the thread), move RDMA WRITEs with each tap back end (`ROX_TAP_IO`
//! plain and io_uring, alternately): every message arrives intact. It prints MB/s, frames and
//! retransmissions per round — the host-side view of rox-nic's data path driving a tap
//! (`cargo test --release -p rox-nic --test port_tap_rdma -- --nocapture`); the rates are not
//! asserted (a loaded host decides them). Needs what tests/port_tap.rs needs; ROX_ALLOW_SKIP_TAP=1
//! lets it skip where that is missing. Its own test binary: it sets ROX_TAP_IO.

use std::time::Instant;

use rox_nic::device::LinkSpec;
use rox_nic::port::netns;
use rox_nic::port::tap::{TapIo, TAP_GSO_ENV, TAP_IO_ENV};
use rox_nic::testkit::pair::deep_rc_pair;
use rox_nic::testkit::*;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

const PD: u32 = 1;
const ACCESS: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
/// The devices of this test own GIDs 127.0.14.x.
const SUBNET: u8 = 14;
const ALLOW_SKIP_ENV: &str = "ROX_ALLOW_SKIP_TAP";
/// Within the pair's send queue (128 WQEs).
const MESSAGES: u64 = 96;
/// Bytes per WRITE (ROX_TAP_RDMA_BYTES overrides, up to 1 MiB, for measuring).
const MESSAGE: u64 = 64 << 10;
/// Rounds of each back end, alternately (ROX_TAP_RDMA_ROUNDS overrides, for measuring).
const ROUNDS: usize = 1;

/// A bridge with taps tapa and tapb, MTU 9000, bridge netfilter off (as rox-lab makes them), in
/// a network namespace of this thread's own.
fn bridge() -> std::io::Result<()> {
    rox_nic::sys::net::unshare_network_namespace()?;
    netns::bridge_with_taps(9000, &["tapa", "tapb"])
}

/// How one end's tap moves frames: its back end and segmentation offload.
#[derive(Clone, Copy)]
struct End(TapIo, bool);

impl End {
    fn name(self) -> String {
        match self {
            End(TapIo::Plain, _) => "plain".into(),
            End(_, gso) => format!("uring{}", if gso { "+gso" } else { "" }),
        }
    }
}

/// One round: a fresh pair of devices on the taps, a's end `ea` and b's `eb`; WRITEs MESSAGES
/// of `message` bytes from a to b, checks them, and prints the rate.
fn round(ea: End, eb: End, message: u64) {
    let name = format!("{} -> {}", ea.name(), eb.name());
    let device = |end: End, tap: &str, host| {
        let io = if end.0 == TapIo::Plain {
            "plain"
        } else {
            "uring"
        };
        std::env::set_var(TAP_IO_ENV, io);
        std::env::set_var(TAP_GSO_ENV, if end.1 { "on" } else { "off" });
        port_device(LinkSpec::Tap(tap.into()), SUBNET, host, None)
    };
    let mut a = device(ea, "tapa", 1);
    let mut b = device(eb, "tapb", 2);
    let (mut a_cq, mut qa, _b_cq) = deep_rc_pair(&mut a, &mut b, SUBNET, PD);
    let total = MESSAGES * message;
    let (src, src_key) = a.buffer(PD, total, ACCESS);
    let (dst, dst_key) = b.buffer(PD, total, ACCESS);
    let data = pattern(41, total as usize);
    a.ram.write(src, &data);
    let start = Instant::now();
    for i in 0..MESSAGES {
        let at = i * message;
        let w = send_wqe(
            i,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(src + at, message as u32, src_key)],
        );
        a.write_send(&mut qa, &with_rdma(w, dst + at, dst_key));
    }
    a.ring_sq(&qa);
    for i in 0..MESSAGES {
        let c = a.wait_cqe(&mut a_cq);
        let sb = b.query_stats();
        assert_eq!(
            (c.wr_id, c.status),
            (i, WC_SUCCESS),
            "{name}: WRITE {i}; responder: {} frames in, {} ICRC errors, {} malformed",
            sb[STAT_PORT_RX_FRAMES],
            sb[STAT_RX_ICRC_ERRORS],
            sb[STAT_PORT_DROP_MALFORMED]
        );
    }
    let secs = start.elapsed().as_secs_f64();
    assert!(
        b.ram.read(dst, total as usize) == data,
        "{name}: WRITEs arrived intact"
    );
    let (sa, sb) = (a.query_stats(), b.query_stats());
    assert!(
        sa[STAT_PORT_TX_FRAMES] >= total / 4096,
        "{name}: the frames crossed the taps"
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "tap {name}: {MESSAGES} WRITEs of {message} B in {secs:.3} s: {:.0} MB/s; requester sent \
         {} frames, {} retransmissions ({} timeouts); responder received {} frames, sent {}; requester \
         received {}; load {}",
        total as f64 / secs / 1e6,
        sa[STAT_PORT_TX_FRAMES],
        sa[STAT_RETRANSMITS],
        sa[STAT_TIMEOUTS],
        sb[STAT_PORT_RX_FRAMES],
        sb[STAT_PORT_TX_FRAMES],
        sa[STAT_PORT_RX_FRAMES],
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}

#[test]
fn rdma_writes_cross_a_bridge_intact_on_both_tap_back_ends() {
    let outcome = std::thread::spawn(|| -> std::io::Result<()> {
        bridge()?;
        let rounds = std::env::var("ROX_TAP_RDMA_ROUNDS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(ROUNDS);
        let message = std::env::var("ROX_TAP_RDMA_BYTES")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(MESSAGE)
            .clamp(4096, 1 << 20);
        let plain = End(TapIo::Plain, false);
        let (uring, gso) = (End(TapIo::Uring, false), End(TapIo::Uring, true));
        for _ in 0..rounds {
            round(plain, plain, message);
            match rox_nic::sys::uring::available() {
                Ok(()) => {
                    round(uring, uring, message);
                    // Runs of frames as one request, cut by the receiving rox-nic; and cut by
                    // the kernel for a tap that takes no offloads (each frame's ICRC then
                    // must hold with the IP ID the kernel gave it); and replies as requests
                    // to a tap without them.
                    round(gso, gso, message);
                    round(gso, plain, message);
                    round(plain, gso, message);
                }
                Err(e) => println!("tap uring: not run, io_uring unavailable here ({e})"),
            }
        }
        Ok(())
    })
    .join()
    .unwrap();
    if let Err(e) = outcome {
        assert!(
            std::env::var(ALLOW_SKIP_ENV).as_deref() == Ok("1"),
            "cannot make a network namespace with a bridge and taps here ({e}); run as root, or \
             set {ALLOW_SKIP_ENV}=1 to skip this test"
        );
        println!("SKIPPED ({ALLOW_SKIP_ENV}=1): no bridge with taps here ({e})");
    }
}
