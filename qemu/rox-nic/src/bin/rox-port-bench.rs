//! rox-port-bench: the raw limit of the wires a rox-nic port can own — how many 4 KiB frames per
//! second (and MB/s) this host moves through them with no RDMA on top, batched the way the
//! device's data path batches. tests/bench/compare prints it next to the RDMA numbers, so the
//! distance to the physical limit is visible.
//!
//!   rox-port-bench [--seconds S] [--mtu N] [--only KIND] [--rounds R] [--json]
//!
//! Measures every kind of port: a pair of unix dgram sockets (QEMU `-netdev dgram` framing), a
//! unix stream (`-netdev stream` framing), a rox-to-rox cable (shared-memory rings) and two taps
//! on a Linux bridge, the taps once with one `read`/`writev` per frame ("bridge"), once with
//! io_uring bursts ("bridge-uring") and once with io_uring and UDP segmentation offload, the
//! frames addressed as RoCEv2 so runs of them cross as one request ("bridge-gso", rox-nic's
//! tap's default; ROX_TAP_GSO=off sends frames one by one). The taps and the bridge live in a network namespace private to this
//! process (it vanishes with the process, so nothing is left behind); that part needs root.
//! `--json` prints one JSON object per port kind instead of text (tests/bench/compare reads
//! it).

#![deny(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use rox_nic::port::limit::{
    cable_wire, dgram_wire, port_limit, port_limit_tap, stream_wire, RAW_FRAME_BYTES,
};
use rox_nic::port::netns;
use rox_nic::port::tap::TapIo;
use rox_nic::port::LinkSpec;
use rox_nic::sys;

#[derive(Parser, Debug)]
#[command(about = "Raw frames/s and MB/s of the wires a rox-nic port can own")]
struct Args {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// MTU of the taps and the bridge.
    #[arg(long, default_value_t = 9000)]
    mtu: usize,
    /// One JSON object per line: {"port": KIND, "frame_bytes", "frames_per_s", "mb_per_s"}.
    #[arg(long)]
    json: bool,
    /// Measure only these port kinds (comma-separated: dgram, stream, cable, bridge,
    /// bridge-uring, bridge-gso).
    #[arg(long, default_value = "")]
    only: String,
    /// Measure the bridge this many times, its two tap back ends alternately.
    #[arg(long, default_value_t = 1)]
    rounds: u32,
}

impl Args {
    fn measures(&self, kind: &str) -> bool {
        self.only.is_empty() || self.only.split(',').any(|k| k == kind)
    }
}

/// Two taps on a bridge, in a network namespace of this process's own.
fn private_bridge(mtu: usize) -> Result<(LinkSpec, LinkSpec), String> {
    sys::net::unshare_network_namespace()
        .map_err(|e| format!("unshare(CLONE_NEWNET): {e} (needs root)"))?;
    netns::bridge_with_taps(mtu, &["tapa", "tapb"]).map_err(|e| e.to_string())?;
    Ok((LinkSpec::Tap("tapa".into()), LinkSpec::Tap("tapb".into())))
}

/// Prints one measurement; false if it failed.
fn report(kind: &str, what: &str, json: bool, result: std::io::Result<(f64, f64)>) -> bool {
    match result {
        Ok((fps, mbps)) if json => {
            println!(
                "{}",
                serde_json::json!({
                    "port": kind,
                    "frame_bytes": RAW_FRAME_BYTES,
                    "frames_per_s": fps.round(),
                    "mb_per_s": mbps.round(),
                })
            );
            true
        }
        Ok((fps, mbps)) => {
            println!(
                "port raw limit, {what}, {} B frames: {fps:.0} frames/s, {mbps:.0} MB/s",
                RAW_FRAME_BYTES
            );
            true
        }
        Err(e) => {
            eprintln!("rox-port-bench: {what}: {e}");
            false
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    // The namespace first, while this process has one thread.
    let bridge = private_bridge(args.mtu);
    let dir = match tempfile_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rox-port-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dgram = dgram_wire(&dir, "a.sock", "b.sock");
    let stream = stream_wire(&dir, "s.sock");
    let cable = cable_wire(&dir, "c.sock");
    let mut ok = true;
    for (kind, what, (tx, rx)) in [
        ("dgram", "unix dgram socket pair", dgram),
        ("stream", "unix stream", stream),
        ("cable", "rox-to-rox cable (shared memory)", cable),
    ] {
        if !args.measures(kind) {
            continue;
        }
        let result = port_limit(&tx, &rx, args.mtu, args.seconds);
        ok &= report(kind, what, args.json, result);
    }
    let _ = std::fs::remove_dir_all(&dir);
    match bridge {
        Ok((ta, tb)) => ok &= bridge_limits(&ta, &tb, &args),
        Err(e) if args.measures("bridge") || args.measures("bridge-uring") => {
            eprintln!("rox-port-bench: tap pair: {e}");
            ok = false;
        }
        Err(_) => {}
    }
    if std::env::var_os("ROX_PORT_BENCH_DEBUG").is_some() {
        let _ = netns::ip(&["-s", "link"]);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The bridge's limit with each tap back end (and io_uring with segmentation offload),
/// `--rounds` times alternately (plain first);
/// false if a measurement failed (io_uring missing on this host is said, not a failure).
fn bridge_limits(ta: &LinkSpec, tb: &LinkSpec, args: &Args) -> bool {
    let mut ok = true;
    let uring = sys::uring::available();
    for _ in 0..args.rounds {
        for (kind, io, gso, what) in [
            ("bridge", TapIo::Plain, false, "one read/writev per frame"),
            ("bridge-uring", TapIo::Uring, false, "io_uring bursts"),
            (
                "bridge-gso",
                TapIo::Uring,
                true,
                "io_uring, UDP segmentation offload (frames to UDP 4791)",
            ),
        ] {
            if !args.measures(kind) {
                continue;
            }
            if let (TapIo::Uring, Err(e)) = (io, &uring) {
                eprintln!("rox-port-bench: {kind}: io_uring unavailable here ({e}): not measured");
                continue;
            }
            let what = format!("two taps on a Linux bridge (MTU {}), {what}", args.mtu);
            let result = port_limit_tap(ta, tb, args.mtu, args.seconds, io, gso);
            ok &= report(kind, &what, args.json, result);
        }
    }
    ok
}

/// A fresh directory for the dgram sockets (unix socket paths must stay short).
fn tempfile_dir() -> Result<std::path::PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("rox-port-bench.{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}
