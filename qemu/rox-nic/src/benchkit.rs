//! What the host benchmarks share: the memcpy reference, the load average, and the one table
//! they print (messages/s and GB/s of WRITE and SEND per message size, next to the memcpy
//! bandwidth of the same size measured in the same run).

use std::time::Instant;

/// Message sizes every benchmark measures: 8 B to 1 MiB.
pub const SIZES: [u64; 7] = [8, 64, 512, 4096, 32 << 10, 256 << 10, 1 << 20];
/// Bytes copied per memcpy measurement (enough rounds to be stable, short enough to not matter).
const MEMCPY_BYTES: usize = 256 << 20;

/// Host memcpy bandwidth in GB/s for copies of `len` bytes (cache-resident for small sizes,
/// like the device's buffers in the benchmarks; for tiny sizes the per-copy overhead shows, as
/// it does for the device).
pub fn memcpy_gbps(len: usize) -> f64 {
    let src = vec![0x5au8; len];
    let mut dst = vec![0u8; len];
    dst.copy_from_slice(&src);
    let rounds = (MEMCPY_BYTES / len).max(1);
    let start = Instant::now();
    for _ in 0..rounds {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    }
    (rounds * len) as f64 / start.elapsed().as_secs_f64() / 1e9
}

/// The 1-, 5- and 15-minute load averages as `/proc/loadavg` shows them (the machines are
/// shared: numbers mean little without it).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// One measured point: messages per second and bytes per second.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rate {
    pub msgs_per_sec: f64,
    pub gbytes_per_sec: f64,
}

impl Rate {
    pub fn new(messages: u64, size: u64, secs: f64) -> Rate {
        Rate {
            msgs_per_sec: messages as f64 / secs,
            gbytes_per_sec: (messages * size) as f64 / secs / 1e9,
        }
    }
}

/// Prints the table header; `title` says what was measured.
pub fn print_header(title: &str) {
    println!("{title}");
    println!("load average at start: {}", load_average());
    println!(
        "{:>8} | {:>11} {:>8} | {:>11} {:>8} | {:>12}",
        "size", "WRITE msg/s", "GB/s", "SEND msg/s", "GB/s", "memcpy GB/s"
    );
}

/// Prints one row: both rates and the memcpy bandwidth of the same size, measured now.
pub fn print_row(size: u64, write: Rate, send: Rate) {
    println!(
        "{size:>8} | {:>11.0} {:>8.3} | {:>11.0} {:>8.3} | {:>12.2}",
        write.msgs_per_sec,
        write.gbytes_per_sec,
        send.msgs_per_sec,
        send.gbytes_per_sec,
        memcpy_gbps(size as usize)
    );
}

pub fn print_footer() {
    println!("load average at end:   {}", load_average());
}

/// Bytes per frame of [`port_limit`].
pub const RAW_FRAME_BYTES: usize = 4096;

/// The raw limit of a wire: 4 KiB frames from a port on `tx` to a port on `rx` (a sender and a
/// receiver thread, batched as the data path batches, no RDMA on top) for `secs`. Returns
/// (frames/s, MB/s) received.
pub fn port_limit(
    tx: &crate::port::LinkSpec,
    rx: &crate::port::LinkSpec,
    mtu: usize,
    secs: f64,
) -> std::io::Result<(f64, f64)> {
    use crate::port::{frame::ETH_HEADER_LEN, Link, Port, BATCH};
    use std::sync::atomic::{AtomicBool, Ordering};
    let (mac_tx, mac_rx) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let open = |spec, mac| -> std::io::Result<Port> {
        Port::with_link(Link::open(spec)?, mac, mtu, None, None).map_err(std::io::Error::other)
    };
    let mut receiver_port = open(rx, mac_rx)?;
    let mut sender = open(tx, mac_tx)?;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let receiver = {
        let stop = stop.clone();
        std::thread::spawn(move || -> std::io::Result<(u64, u64)> {
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
    let payload = raw_udp_packet(RAW_FRAME_BYTES - ETH_HEADER_LEN);
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

/// A well-formed IPv4 UDP packet of `len` bytes (zero payload) between two test addresses: a
/// Linux bridge with br_netfilter loaded drops IP frames whose header does not check out.
fn raw_udp_packet(len: usize) -> Vec<u8> {
    const IPV4_UDP_TTL64: [u8; 12] = [0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
    const SRC: [u8; 4] = [192, 0, 2, 1];
    const DST: [u8; 4] = [192, 0, 2, 2];
    const DISCARD_PORT: u16 = 9;
    let mut p = vec![0u8; len];
    p[..12].copy_from_slice(&IPV4_UDP_TTL64);
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[12..16].copy_from_slice(&SRC);
    p[16..20].copy_from_slice(&DST);
    let checksum = crate::roce::wire::ipv4_header_checksum(&p[..20]);
    p[10..12].copy_from_slice(&checksum.to_be_bytes());
    p[20..22].copy_from_slice(&DISCARD_PORT.to_be_bytes());
    p[22..24].copy_from_slice(&DISCARD_PORT.to_be_bytes());
    p[24..26].copy_from_slice(&((len - 20) as u16).to_be_bytes());
    p
}
