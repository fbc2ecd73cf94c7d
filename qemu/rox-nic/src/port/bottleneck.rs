//! A congested switch port in front of the device: the egress queue of a switch toward this
//! receiver, applied to the frames arriving at the port (`--bottleneck`). Frames drain at a
//! fixed line rate; the queue holds at most `limit` bytes (tail drop beyond it); between `kmin`
//! and `kmax` queued bytes an arriving ECN-capable frame (ECT(0) or ECT(1)) is marked
//! Congestion Experienced with a probability rising linearly from 0 to `pmax`, and above `kmax`
//! always, as a switch configured for DCQCN does (RED/WRED on the instantaneous queue, ECN
//! on). A frame that is not ECN-capable is dropped instead, as RED does. Seeded: a run repeats.
//! The queue is the RoCE traffic class's, as switches give RoCEv2 a priority of its own: only
//! RoCEv2 frames (UDP port 4791) go through it; the rest (the paired netdev's ARP, TCP...) pass
//! undelayed (else RED would drop a connection's handshake while RoCE fills the queue).
//!
//! Time is the caller's (nanoseconds from any fixed epoch): a frame leaves the queue when the
//! line would have finished sending it, so the port's poll timeout ([`Bottleneck::due_in`]) is
//! all the pacing needs; nothing spins.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use super::faults::SplitMix64;
use super::frame::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_HEADER_LEN};
use super::{Link, RxBatch, BATCH};
use crate::roce::wire::{ipv4_header_checksum, IPV6_HEADER_LEN, ROCE_V2_UDP_PORT};

/// The queue's shape. Sizes are bytes of Ethernet frame (header included).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BottleneckConfig {
    /// Line rate, bits per second.
    pub rate_bps: u64,
    /// Bytes the queue holds; an arriving frame that does not fit is dropped.
    pub limit: usize,
    /// Queue depth where marking (or, for frames that are not ECN-capable, dropping) starts.
    pub kmin: usize,
    /// Queue depth where the probability reaches `pmax`; above it every frame is marked.
    pub kmax: usize,
    /// Marking probability at `kmax`, in (0, 1].
    pub pmax: f64,
    pub seed: u64,
}

/// Defaults for what `--bottleneck` leaves out (only the rate is required): a shallow
/// switch buffer with DCQCN-style thresholds.
const DEFAULT_LIMIT: usize = 512 << 10;
const DEFAULT_KMIN: usize = 32 << 10;
const DEFAULT_KMAX: usize = 128 << 10;
const DEFAULT_PMAX: f64 = 0.2;

/// A `--bottleneck` spec that does not parse or is inconsistent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadBottleneckSpec(pub String);

impl fmt::Display for BadBottleneckSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad --bottleneck: {} (want rate=R[k|M|G] bits/s, and optionally limit=B, kmin=B, \
             kmax=B in bytes [K|M = KiB|MiB] with 0 < kmin < kmax <= limit, pmax=P in (0, 1], \
             seed=N)",
            self.0
        )
    }
}

impl std::error::Error for BadBottleneckSpec {}

/// `200M` → 200_000_000 (SI multipliers, as link speeds are given).
fn parse_rate(v: &str) -> Option<u64> {
    let (num, mult) = match v.char_indices().last()? {
        (i, 'k' | 'K') => (&v[..i], 1_000),
        (i, 'M') => (&v[..i], 1_000_000),
        (i, 'G') => (&v[..i], 1_000_000_000),
        _ => (v, 1),
    };
    let n: f64 = num.parse().ok()?;
    let bps = n * mult as f64;
    (bps.is_finite() && (1.0..=1e12).contains(&bps)).then_some(bps as u64)
}

/// `64K` → 65536 (binary multipliers, as buffer sizes are given).
fn parse_bytes(v: &str) -> Option<usize> {
    let (num, shift) = match v.char_indices().last()? {
        (i, 'K' | 'k') => (&v[..i], 10),
        (i, 'M') => (&v[..i], 20),
        _ => (v, 0),
    };
    let n: usize = num.parse().ok()?;
    n.checked_mul(1 << shift).filter(|&b| b <= 1 << 30)
}

impl BottleneckConfig {
    /// Parses `rate=200M,limit=512K,kmin=32K,kmax=128K,pmax=0.2,seed=1` (rate required).
    pub fn parse(spec: &str) -> Result<BottleneckConfig, BadBottleneckSpec> {
        let mut rate = None;
        let mut cfg = BottleneckConfig {
            rate_bps: 0,
            limit: DEFAULT_LIMIT,
            kmin: DEFAULT_KMIN,
            kmax: DEFAULT_KMAX,
            pmax: DEFAULT_PMAX,
            seed: 0,
        };
        for item in spec.split(',').filter(|s| !s.is_empty()) {
            let bad = || BadBottleneckSpec(format!("{item:?}"));
            let (key, v) = item.split_once('=').ok_or_else(bad)?;
            match key {
                "rate" => rate = Some(parse_rate(v).ok_or_else(bad)?),
                "limit" => cfg.limit = parse_bytes(v).ok_or_else(bad)?,
                "kmin" => cfg.kmin = parse_bytes(v).ok_or_else(bad)?,
                "kmax" => cfg.kmax = parse_bytes(v).ok_or_else(bad)?,
                "pmax" => {
                    cfg.pmax = v.parse().map_err(|_| bad())?;
                    if !(cfg.pmax > 0.0 && cfg.pmax <= 1.0) {
                        return Err(bad());
                    }
                }
                "seed" => cfg.seed = v.parse().map_err(|_| bad())?,
                _ => return Err(bad()),
            }
        }
        cfg.rate_bps = rate.ok_or_else(|| BadBottleneckSpec("no rate=".into()))?;
        if !(0 < cfg.kmin && cfg.kmin < cfg.kmax && cfg.kmax <= cfg.limit) {
            return Err(BadBottleneckSpec(format!(
                "kmin={} kmax={} limit={}",
                cfg.kmin, cfg.kmax, cfg.limit
            )));
        }
        Ok(cfg)
    }

    /// Nanoseconds the line takes to send `bytes`.
    fn send_ns(&self, bytes: usize) -> u64 {
        (bytes as u128 * 8 * 1_000_000_000 / self.rate_bps as u128) as u64
    }
}

/// What the bottleneck did, since the port opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BottleneckStats {
    /// Frames (and their bytes) that went through to the device.
    pub passed: u64,
    pub passed_bytes: u64,
    /// Frames dropped because the queue was full.
    pub tail_drops: u64,
    /// Frames that were not ECN-capable dropped by RED above `kmin`.
    pub red_drops: u64,
    /// ECN-capable frames marked Congestion Experienced.
    pub ce_marked: u64,
    /// The deepest the queue was, in bytes.
    pub max_depth: u64,
}

/// The ECN field of an IP frame (None: not IPv4/IPv6, or too short).
fn ecn_of(frame: &[u8]) -> Option<u8> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let l3 = &frame[ETH_HEADER_LEN..];
    match ethertype {
        ETHERTYPE_IPV4 if l3.len() >= 20 && l3[0] >> 4 == 4 => Some(l3[1] & 0b11),
        ETHERTYPE_IPV6 if l3.len() >= 40 && l3[0] >> 4 == 6 => Some((l3[1] >> 4) & 0b11),
        _ => None,
    }
}

/// Whether a frame is a RoCEv2 packet (IPv4 or IPv6, UDP to port 4791): the queue's class.
fn is_roce_v2(frame: &[u8]) -> bool {
    const IP_PROTO_UDP: u8 = 17;
    let Some(l3) = frame.get(ETH_HEADER_LEN..) else {
        return false;
    };
    let udp_at = match ecn_of(frame).map(|_| l3[0] >> 4) {
        Some(4) if l3[9] == IP_PROTO_UDP => usize::from(l3[0] & 0x0f) * 4,
        Some(6) if l3[6] == IP_PROTO_UDP => IPV6_HEADER_LEN,
        _ => return false,
    };
    l3.get(udp_at + 2..udp_at + 4)
        .is_some_and(|p| u16::from_be_bytes([p[0], p[1]]) == ROCE_V2_UDP_PORT)
}

const ECN_NOT_ECT: u8 = 0b00;
const ECN_CE: u8 = 0b11;

/// Sets the ECN field of an ECN-capable IP frame to CE (fixing an IPv4 header's checksum;
/// RoCEv2's ICRC does not cover the field).
fn mark_ce(frame: &mut [u8]) {
    let l3 = &mut frame[ETH_HEADER_LEN..];
    if l3[0] >> 4 == 4 {
        let ihl = usize::from(l3[0] & 0x0f) * 4;
        l3[1] |= ECN_CE;
        if (20..=l3.len()).contains(&ihl) {
            l3[10..12].fill(0);
            let sum = ipv4_header_checksum(&l3[..ihl]);
            l3[10..12].copy_from_slice(&sum.to_be_bytes());
        }
    } else {
        l3[1] |= ECN_CE << 4;
    }
}

/// A frame in the queue and when it arrived.
struct Queued {
    frame: Vec<u8>,
    arrived_ns: u64,
}

/// The queue, its drain and its marking.
pub struct Bottleneck {
    cfg: BottleneckConfig,
    rng: SplitMix64,
    queue: VecDeque<Queued>,
    /// Bytes in `queue`.
    depth: usize,
    /// When the line finished sending the last frame that left the queue.
    line_free_ns: u64,
    /// Frames the line has sent, waiting for the device to take them.
    sent: VecDeque<Vec<u8>>,
    stats: BottleneckStats,
}

impl Bottleneck {
    pub fn new(cfg: BottleneckConfig) -> Bottleneck {
        Bottleneck {
            cfg,
            rng: SplitMix64(cfg.seed),
            queue: VecDeque::new(),
            depth: 0,
            line_free_ns: 0,
            sent: VecDeque::new(),
            stats: BottleneckStats::default(),
        }
    }

    pub fn stats(&self) -> BottleneckStats {
        self.stats
    }

    /// When the head of the queue finishes on the line.
    fn head_done_ns(&self) -> Option<u64> {
        let head = self.queue.front()?;
        Some(self.line_free_ns.max(head.arrived_ns) + self.cfg.send_ns(head.frame.len()))
    }

    /// Moves every frame the line has finished sending by `now_ns` out of the queue.
    fn advance(&mut self, now_ns: u64) {
        while let Some(done) = self.head_done_ns().filter(|&d| d <= now_ns) {
            let Some(q) = self.queue.pop_front() else {
                break;
            };
            self.line_free_ns = done;
            self.depth -= q.frame.len();
            self.stats.passed += 1;
            self.stats.passed_bytes += q.frame.len() as u64;
            self.sent.push_back(q.frame);
        }
    }

    /// The probability of marking (or dropping) a frame arriving at queue depth `depth`.
    fn red_probability(&self, depth: usize) -> f64 {
        let c = &self.cfg;
        if depth <= c.kmin {
            0.0
        } else if depth >= c.kmax {
            1.0
        } else {
            c.pmax * (depth - c.kmin) as f64 / (c.kmax - c.kmin) as f64
        }
    }

    /// A frame arrives at `now_ns`: queued (perhaps marked CE), or dropped and counted.
    pub fn offer(&mut self, frame: &[u8], now_ns: u64) {
        self.advance(now_ns);
        if self.depth + frame.len() > self.cfg.limit {
            self.stats.tail_drops += 1;
            return;
        }
        let p = self.red_probability(self.depth);
        let mut frame = frame.to_vec();
        if p > 0.0 && self.rng.chance(p) {
            match ecn_of(&frame) {
                Some(ECN_CE) => {}
                Some(ECN_NOT_ECT) | None => {
                    self.stats.red_drops += 1;
                    return;
                }
                Some(_) => {
                    mark_ce(&mut frame);
                    self.stats.ce_marked += 1;
                }
            }
        }
        self.depth += frame.len();
        self.stats.max_depth = self.stats.max_depth.max(self.depth as u64);
        if self.queue.is_empty() {
            // The line was idle since it last sent: the frame starts on it now.
            self.line_free_ns = self.line_free_ns.max(now_ns);
        }
        self.queue.push_back(Queued {
            frame,
            arrived_ns: now_ns,
        });
    }

    /// Hands the device, oldest first, up to `max` frames the line has sent by `now_ns`.
    pub fn deliver(&mut self, now_ns: u64, max: usize, mut to: impl FnMut(&[u8])) -> usize {
        self.advance(now_ns);
        let n = max.min(self.sent.len());
        for f in self.sent.drain(..n) {
            to(&f);
        }
        n
    }

    /// How long until a frame is ready for the device (None: the queue is empty).
    pub fn due_in(&self, now_ns: u64) -> Option<Duration> {
        if !self.sent.is_empty() {
            return Some(Duration::ZERO);
        }
        self.head_done_ns()
            .map(|d| Duration::from_nanos(d.saturating_sub(now_ns)))
    }
}

/// How often, at most, the port logs the bottleneck's counters while they change.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// The bottleneck as a port's receive side uses it: frames from the link go into the queue,
/// the device gets what the line has sent; the counters are logged while they change (the
/// lab's receiving guest reads them in its rox-nic log).
pub(super) struct Shaper {
    queue: Bottleneck,
    /// What one receive from the link brought, before the queue.
    arrivals: RxBatch,
    logged: BottleneckStats,
    logged_at: Duration,
}

impl Shaper {
    pub(super) fn new(cfg: BottleneckConfig, max_frame: usize) -> Shaper {
        log::info!(
            "rox-nic: bottleneck on arriving frames: {} bit/s, limit {} B, marking from {} B to \
             {} B (p {} at {} B), seed {}",
            cfg.rate_bps,
            cfg.limit,
            cfg.kmin,
            cfg.kmax,
            cfg.pmax,
            cfg.kmax,
            cfg.seed
        );
        Shaper {
            queue: Bottleneck::new(cfg),
            arrivals: RxBatch::new(max_frame),
            logged: BottleneckStats::default(),
            logged_at: Duration::ZERO,
        }
    }

    pub(super) fn stats(&self) -> BottleneckStats {
        self.queue.stats()
    }

    /// Receives what `link` has: RoCEv2 frames into the queue, the rest straight into `out`;
    /// then fills `out` up to a batch with frames the line has sent by `now` (time since the
    /// port opened).
    pub(super) fn recv(
        &mut self,
        link: &mut Link,
        out: &mut RxBatch,
        now: Duration,
    ) -> std::io::Result<usize> {
        let now_ns = now.as_nanos() as u64;
        out.clear();
        let (queue, arrivals) = (&mut self.queue, &mut self.arrivals);
        let mut arrive = |f: &[u8]| {
            if is_roce_v2(f) {
                queue.offer(f, now_ns);
            } else {
                out.push_frame(f, false);
            }
        };
        match link {
            // A cable's frames are already copies in its own memory: queued from there, not
            // copied into `arrivals` first.
            Link::Cable(c) => {
                if c.recv_lent()? > 0 {
                    c.lent_frames().for_each(|(f, _)| arrive(f));
                    c.release_lent();
                }
            }
            link => {
                if link.recv(arrivals)? > 0 {
                    arrivals.frames().for_each(arrive);
                }
            }
        }
        let room = BATCH - out.len();
        let n = out.len()
            + self
                .queue
                .deliver(now_ns, room, |f| out.push_frame(f, false));
        if now >= self.logged_at + REPORT_EVERY && self.queue.stats() != self.logged {
            self.log_stats();
            self.logged_at = now;
        }
        Ok(n)
    }

    /// How long until frames are ready for the device, or counters that changed are due in
    /// the log (so the last change is logged even when no frame follows it).
    pub(super) fn due_in(&self, now: Duration) -> Option<Duration> {
        let frames = self.queue.due_in(now.as_nanos() as u64);
        let report = (self.queue.stats() != self.logged)
            .then(|| (self.logged_at + REPORT_EVERY).saturating_sub(now));
        match (frames, report) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// One log line of the counters (rox-lab's tests/cc reads the last one).
    pub(super) fn log_stats(&mut self) {
        let s = self.queue.stats();
        log::info!(
            "rox-nic: bottleneck stats: passed={} passed_bytes={} tail_drops={} red_drops={} \
             ce_marked={} max_depth={}",
            s.passed,
            s.passed_bytes,
            s.tail_drops,
            s.red_drops,
            s.ce_marked,
            s.max_depth
        );
        self.logged = s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 UDP frame of `len` bytes with ECN field `ecn` and a correct header checksum.
    fn ipv4_frame(len: usize, ecn: u8) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let ip = &mut f[ETH_HEADER_LEN..];
        ip[0] = 0x45;
        ip[1] = ecn;
        ip[8] = 64;
        ip[9] = 17;
        ip[22..24].copy_from_slice(&ROCE_V2_UDP_PORT.to_be_bytes());
        let sum = ipv4_header_checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        f
    }

    fn cfg(spec: &str) -> BottleneckConfig {
        BottleneckConfig::parse(spec).unwrap()
    }

    #[test]
    fn a_spec_parses_with_units_and_defaults() {
        let c = cfg("rate=200M,limit=1M,kmin=10K,kmax=100K,pmax=0.5,seed=7");
        assert_eq!(c.rate_bps, 200_000_000);
        assert_eq!((c.limit, c.kmin, c.kmax), (1 << 20, 10 << 10, 100 << 10));
        assert_eq!((c.pmax, c.seed), (0.5, 7));
        let d = cfg("rate=1.5G");
        assert_eq!(d.rate_bps, 1_500_000_000);
        assert_eq!(
            (d.limit, d.kmin, d.kmax),
            (DEFAULT_LIMIT, DEFAULT_KMIN, DEFAULT_KMAX)
        );
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for bad in [
            "",
            "limit=1M",
            "rate=fast",
            "rate=0",
            "rate=100M,pmax=0",
            "rate=100M,pmax=1.5",
            "rate=100M,kmin=64K,kmax=32K",
            "rate=100M,kmax=2M,limit=1M",
            "rate=100M,kmin=0",
            "rate=100M,colour=red",
            "rate=100M,limit",
            "rate=100M,limit=99999999999999999999",
        ] {
            let e = BottleneckConfig::parse(bad).unwrap_err();
            assert!(e.to_string().contains("--bottleneck"), "{bad}: {e}");
        }
    }

    #[test]
    fn frames_leave_at_the_line_rate() {
        // 8 Mbit/s: a 1000-byte frame takes 1 ms on the line.
        let mut b = Bottleneck::new(cfg("rate=8M,limit=64K,kmin=32K,kmax=48K"));
        for _ in 0..5 {
            b.offer(&ipv4_frame(1000, 0), 0);
        }
        let mut got = 0;
        assert_eq!(b.deliver(999_999, 64, |_| got += 1), 0);
        assert_eq!(b.due_in(999_999), Some(Duration::from_nanos(1)));
        assert_eq!(b.deliver(1_000_000, 64, |_| got += 1), 1);
        assert_eq!(b.deliver(3_500_000, 64, |_| got += 1), 2);
        // A batch limit leaves the rest for the next call.
        assert_eq!(b.deliver(10_000_000, 1, |_| got += 1), 1);
        assert_eq!(b.due_in(10_000_000), Some(Duration::ZERO));
        assert_eq!(b.deliver(10_000_000, 64, |_| got += 1), 1);
        assert_eq!(got, 5);
        assert_eq!(b.due_in(10_000_000), None);
        // After the line idled, a new frame starts when it arrives, not in the past.
        b.offer(&ipv4_frame(1000, 0), 20_000_000);
        assert_eq!(b.deliver(20_500_000, 64, |_| ()), 0);
        assert_eq!(b.deliver(21_000_000, 64, |_| ()), 1);
        let s = b.stats();
        assert_eq!((s.passed, s.passed_bytes), (6, 6000));
    }

    #[test]
    fn a_full_queue_drops_at_the_tail() {
        let mut b = Bottleneck::new(cfg("rate=8M,limit=4000,kmin=3000,kmax=4000,pmax=1"));
        for _ in 0..10 {
            b.offer(&ipv4_frame(1000, 0b10), 0);
        }
        let s = b.stats();
        // 3 fit below kmin unmarked, the 4th is marked (depth 3000 = kmin: p = 0), beyond
        // 4000 bytes the rest are tail-dropped.
        assert_eq!(s.tail_drops, 6);
        assert_eq!(s.max_depth, 4000);
    }

    #[test]
    fn ecn_capable_frames_are_marked_and_others_dropped_above_kmax() {
        let c = cfg("rate=8M,limit=64K,kmin=2000,kmax=3000,pmax=0.1");
        for (ecn, marked, dropped) in [(0b10, 7, 0), (0b01, 7, 0), (0b00, 0, 7), (0b11, 0, 0)] {
            let mut b = Bottleneck::new(c);
            let mut out = Vec::new();
            for _ in 0..10 {
                b.offer(&ipv4_frame(1000, ecn), 0);
            }
            b.deliver(u64::MAX / 2, 64, |f| out.push(f.to_vec()));
            let s = b.stats();
            assert_eq!(
                (s.ce_marked, s.red_drops),
                (marked, dropped),
                "ecn {ecn:#b}"
            );
            assert_eq!(out.len() as u64, 10 - dropped);
            // The first three arrived at depth 0, 1000 and 2000 (= kmin): never marked.
            for (i, f) in out.iter().enumerate() {
                let ip = &f[ETH_HEADER_LEN..ETH_HEADER_LEN + 20];
                let want = if i < 3 || ecn == 0b11 { ecn } else { ECN_CE };
                assert_eq!(ip[1] & 0b11, want, "frame {i} ecn {ecn:#b}");
                assert_eq!(ipv4_header_checksum(ip), 0, "frame {i}: header checksum");
            }
        }
    }

    #[test]
    fn marking_rises_linearly_between_kmin_and_kmax() {
        let b = Bottleneck::new(cfg("rate=8M,limit=64K,kmin=10K,kmax=20K,pmax=0.4"));
        assert_eq!(b.red_probability(10 << 10), 0.0);
        assert!((b.red_probability(15 << 10) - 0.2).abs() < 1e-9);
        assert_eq!(b.red_probability(20 << 10), 1.0);
        // Statistically, at a fixed depth of 15 KiB about 20 % of frames are marked.
        let mut b = Bottleneck::new(cfg("rate=8M,limit=64K,kmin=10K,kmax=20K,pmax=0.4,seed=3"));
        for _ in 0..15 {
            b.offer(&ipv4_frame(1024, 0b10), 0);
        }
        let before = b.stats().ce_marked;
        let n = 10_000;
        for _ in 0..n {
            // One arrives, one leaves: the depth stays at 15 KiB.
            b.offer(&ipv4_frame(1024, 0b10), 0);
            b.queue.pop_back();
            b.depth -= 1024;
        }
        let rate = (b.stats().ce_marked - before) as f64 / n as f64;
        assert!((0.17..0.23).contains(&rate), "marked {rate}");
    }

    #[test]
    fn ipv6_frames_are_marked_in_the_traffic_class() {
        let mut f = vec![0u8; 1000];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        f[ETH_HEADER_LEN] = 0x60;
        f[ETH_HEADER_LEN + 1] = 0b10 << 4;
        let mut b = Bottleneck::new(cfg("rate=8M,limit=64K,kmin=1000,kmax=2000,pmax=1"));
        for _ in 0..3 {
            b.offer(&f, 0);
        }
        let mut out = Vec::new();
        b.deliver(u64::MAX / 2, 64, |f| out.push(f.to_vec()));
        assert_eq!(b.stats().ce_marked, 1);
        assert_eq!(out[2][ETH_HEADER_LEN + 1] >> 4, ECN_CE);
    }

    #[test]
    fn a_port_with_a_bottleneck_paces_what_it_receives_and_says_when_to_look_again() {
        use crate::port::limit::dgram_wire;
        use crate::port::{Port, PortConfig};
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = dgram_wire(dir.path(), "a.sock", "b.sock");
        let mut sender = Port::open(&PortConfig::new(a), [2, 0, 0, 0, 0, 1]).unwrap();
        // 80 Mbit/s: a 1000-byte frame takes 100 µs on the line; 20 of them 2 ms.
        let mut cfg = PortConfig::new(b);
        cfg.bottleneck = Some(BottleneckConfig::parse("rate=80M").unwrap());
        let mut receiver = Port::open(&cfg, [2, 0, 0, 0, 0, 2]).unwrap();
        assert_eq!(receiver.retry_in(), None, "an empty queue needs no wake-up");
        for _ in 0..20 {
            sender.queue_frame(&ipv4_frame(1000, 0b10));
        }
        assert_eq!(sender.flush(), 20);
        let start = std::time::Instant::now();
        let mut got = receiver.recv().unwrap();
        assert!(got < 20, "all 20 frames at once: no pacing");
        assert!(
            receiver.retry_in().is_some(),
            "frames queued: the port asks to be woken"
        );
        while got < 20 && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(receiver.retry_in().unwrap_or(Duration::from_micros(100)));
            got += receiver.recv().unwrap();
        }
        assert_eq!(got, 20);
        // A frame of another class (here ARP) is not queued behind RoCE: it comes at once.
        for _ in 0..20 {
            sender.queue_frame(&ipv4_frame(1000, 0b10));
        }
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        sender.queue_frame(&arp);
        assert_eq!(sender.flush(), 21);
        std::thread::sleep(Duration::from_millis(1));
        receiver.recv().unwrap();
        assert!(
            receiver.frames().any(|f| f.len() == 60),
            "the ARP frame waited for the RoCE queue"
        );
        while receiver.retry_in().is_some() && start.elapsed() < Duration::from_secs(5) {
            receiver.recv().unwrap();
        }
        assert!(
            start.elapsed() >= Duration::from_micros(1900),
            "{:?}",
            start.elapsed()
        );
        let s = receiver.bottleneck_stats().unwrap();
        assert_eq!((s.passed, s.passed_bytes, s.tail_drops), (40, 40_000, 0));
    }

    #[test]
    fn only_roce_v2_frames_are_of_the_queues_class() {
        assert!(is_roce_v2(&ipv4_frame(100, 0)));
        let mut tcp = ipv4_frame(100, 0);
        tcp[ETH_HEADER_LEN + 9] = 6;
        assert!(!is_roce_v2(&tcp));
        let mut other_port = ipv4_frame(100, 0);
        other_port[ETH_HEADER_LEN + 23] ^= 1;
        assert!(!is_roce_v2(&other_port));
        let mut v6 = vec![0u8; 100];
        v6[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        v6[ETH_HEADER_LEN] = 0x60;
        v6[ETH_HEADER_LEN + 6] = 17;
        v6[ETH_HEADER_LEN + 42..ETH_HEADER_LEN + 44]
            .copy_from_slice(&ROCE_V2_UDP_PORT.to_be_bytes());
        assert!(is_roce_v2(&v6));
        for short in [&[][..], &[0u8; 13][..], &ipv4_frame(100, 0)[..30]] {
            assert!(!is_roce_v2(short));
        }
    }

    #[test]
    fn runt_and_non_ip_frames_are_queued_or_dropped_never_marked() {
        let mut b = Bottleneck::new(cfg("rate=8M,limit=64K,kmin=16,kmax=17,pmax=1"));
        let arp = {
            let mut f = vec![0u8; 60];
            f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
            f
        };
        // Depth 17 after the two runts: each ARP frame then meets p = 1.
        for f in [vec![0u8; 3], vec![0u8; 14], arp.clone(), arp] {
            b.offer(&f, 0);
        }
        let s = b.stats();
        assert_eq!(s.ce_marked, 0);
        assert_eq!(s.red_drops, 2);
    }
}
