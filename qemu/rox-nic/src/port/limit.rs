//! The raw limit of a wire, with no RDMA on top: what `rox-port-bench` and the throughput
//! benchmark print next to the RDMA numbers, so the distance to the physical limit is visible.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::frame::ETH_HEADER_LEN;
use super::tap::{Tap, TapIo};
use super::{Link, LinkSpec, Port, BATCH};
use crate::roce::wire::ROCE_V2_UDP_PORT;

/// A unix stream wire on socket `name` in `dir`: the listening and the connecting end.
pub fn stream_wire(dir: &Path, name: &str) -> (LinkSpec, LinkSpec) {
    let p = dir.join(name);
    (
        LinkSpec::StreamListen(p.clone()),
        LinkSpec::StreamConnect(p),
    )
}

/// A rox-to-rox cable on socket `name` in `dir`: the listening and the connecting end.
pub fn cable_wire(dir: &Path, name: &str) -> (LinkSpec, LinkSpec) {
    let p = dir.join(name);
    (LinkSpec::CableListen(p.clone()), LinkSpec::CableConnect(p))
}

/// A unix dgram wire between sockets `a` and `b` in `dir`: the two ends' link specs.
pub fn dgram_wire(dir: &Path, a: &str, b: &str) -> (LinkSpec, LinkSpec) {
    let (pa, pb) = (dir.join(a), dir.join(b));
    (
        LinkSpec::Dgram {
            local: pa.clone(),
            remote: pb.clone(),
        },
        LinkSpec::Dgram {
            local: pb,
            remote: pa,
        },
    )
}

/// Bytes per frame of [`port_limit`].
pub const RAW_FRAME_BYTES: usize = 4096;

/// The raw limit of a wire: 4 KiB frames from a port on `tx` to a port on `rx` (a sender and a
/// receiver thread, batched as the data path batches, no RDMA on top) for `secs`. Returns
/// (frames/s, MB/s) received.
pub fn port_limit(
    tx: &LinkSpec,
    rx: &LinkSpec,
    mtu: usize,
    secs: f64,
) -> std::io::Result<(f64, f64)> {
    port_limit_tap_io(tx, rx, mtu, secs, TapIo::Auto)
}

/// [`port_limit`] with taps on back end `tap_io`, frames one by one.
pub fn port_limit_tap_io(
    tx: &LinkSpec,
    rx: &LinkSpec,
    mtu: usize,
    secs: f64,
    tap_io: TapIo,
) -> std::io::Result<(f64, f64)> {
    port_limit_tap(tx, rx, mtu, secs, tap_io, false)
}

/// [`port_limit_tap_io`]; with `gso`, the taps take and make UDP segmentation-offload requests
/// and the frames are addressed to the RoCEv2 port, so runs of them leave as one request as
/// rox's do (`tap::gso`).
pub fn port_limit_tap(
    tx: &LinkSpec,
    rx: &LinkSpec,
    mtu: usize,
    secs: f64,
    tap_io: TapIo,
    gso: bool,
) -> std::io::Result<(f64, f64)> {
    measure(tx, rx, mtu, secs, tap_io, RAW_FRAME_BYTES, gso)
}

/// [`port_limit`] with frames of `frame_bytes` (at least 64): the most small messages the
/// wire itself could carry, one frame each.
pub fn port_limit_frames(
    tx: &LinkSpec,
    rx: &LinkSpec,
    mtu: usize,
    secs: f64,
    frame_bytes: usize,
) -> std::io::Result<(f64, f64)> {
    const MIN_FRAME: usize = 64;
    measure(
        tx,
        rx,
        mtu,
        secs,
        TapIo::Auto,
        frame_bytes.max(MIN_FRAME),
        false,
    )
}

fn measure(
    tx: &LinkSpec,
    rx: &LinkSpec,
    mtu: usize,
    secs: f64,
    tap_io: TapIo,
    frame_bytes: usize,
    gso: bool,
) -> std::io::Result<(f64, f64)> {
    let (mac_tx, mac_rx) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let open = move |spec: &LinkSpec, mac| -> std::io::Result<Port> {
        let link = match spec {
            LinkSpec::Tap(name) => Link::Tap(Tap::open_with_gso(name, tap_io, gso)?),
            _ => Link::open(spec)?,
        };
        Port::with_link(link, mac, mtu, None, None).map_err(std::io::Error::other)
    };
    // The sending end first (a listening end of a stream or cable binds here), then the
    // receiving one on its own thread; they meet as the sender flushes and the receiver polls.
    let mut sender = open(tx, mac_tx)?;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let receiver = {
        let stop = stop.clone();
        let rx = rx.clone();
        std::thread::spawn(move || -> std::io::Result<(u64, u64)> {
            let mut receiver_port = open(&rx, mac_rx)?;
            let (mut frames, mut bytes) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                if receiver_port.recv()? == 0 {
                    std::thread::yield_now();
                }
                for f in receiver_port.frames() {
                    frames += 1;
                    bytes += f.len() as u64;
                }
            }
            Ok((frames, bytes))
        })
    };
    // Until the receiving end is there, what is sent is lost: start the clock once it is.
    let connected = Instant::now();
    while !sender.link().is_connected() {
        if connected.elapsed().as_secs() >= 5 {
            stop.store(true, Ordering::Relaxed);
            let _ = receiver.join();
            return Err(std::io::Error::other("the receiving end never connected"));
        }
        sender.queue_ip(&mac_rx, raw_udp_packet(64, DISCARD_PORT));
        sender.flush();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let port = if gso { ROCE_V2_UDP_PORT } else { DISCARD_PORT };
    let payload = raw_udp_packet(frame_bytes - ETH_HEADER_LEN, port);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < secs {
        while sender.has_backlog() {
            if sender.flush() == 0 {
                std::thread::yield_now();
            }
        }
        for _ in 0..BATCH {
            sender.queue_ip(&mac_rx, payload.clone());
        }
        sender.flush();
    }
    let t = start.elapsed().as_secs_f64();
    // Let the receiver take what is still queued, then stop it.
    std::thread::sleep(std::time::Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let (frames, bytes) = receiver
        .join()
        .map_err(|_| std::io::Error::other("receiver thread panicked"))??;
    Ok((frames as f64 / t, bytes as f64 / t / 1e6))
}

const DISCARD_PORT: u16 = 9;

/// A well-formed IPv4 UDP packet of `len` bytes (zero payload) between two test addresses, to
/// UDP port `port`: a Linux bridge with br_netfilter loaded drops IP frames whose header does
/// not check out.
fn raw_udp_packet(len: usize, port: u16) -> Vec<u8> {
    const IPV4_UDP_TTL64: [u8; 12] = [0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
    const SRC: [u8; 4] = [192, 0, 2, 1];
    const DST: [u8; 4] = [192, 0, 2, 2];
    let mut p = vec![0u8; len];
    p[..12].copy_from_slice(&IPV4_UDP_TTL64);
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[12..16].copy_from_slice(&SRC);
    p[16..20].copy_from_slice(&DST);
    let checksum = crate::roce::wire::ipv4_header_checksum(&p[..20]);
    p[10..12].copy_from_slice(&checksum.to_be_bytes());
    p[20..22].copy_from_slice(&DISCARD_PORT.to_be_bytes());
    p[22..24].copy_from_slice(&port.to_be_bytes());
    p[24..26].copy_from_slice(&((len - 20) as u16).to_be_bytes());
    p
}
