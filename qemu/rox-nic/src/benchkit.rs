//! What the host benchmarks share: the memcpy reference, the load average, and the one table
//! they print (messages/s and GB/s of WRITE and SEND per message size, next to the memcpy
//! bandwidth of the same size measured in the same run), and the message stream they measure
//! ([`stream`]).

use std::time::Instant;

pub mod stream;
pub mod watch;

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
