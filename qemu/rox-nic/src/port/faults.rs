//! Seeded fault injection on the frames a port sends: loss, duplication, reordering and
//! corruption, deterministic for a given seed so a failing run can be repeated.

use std::fmt;

/// Fault injection probabilities (each in [0, 1]) and the seed that makes a run repeat.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// Drop the frame.
    pub loss: f64,
    /// Deliver the frame twice.
    pub duplicate: f64,
    /// Hold the frame back and deliver it after the next one.
    pub reorder: f64,
    /// Flip one bit of the frame (of a RoCEv2 frame: in BTH..ICRC, so the receiver's ICRC
    /// check must drop it).
    pub corrupt: f64,
    pub seed: u64,
}

/// A `--faults` item that is not `key=value` with a known key and a valid value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadFaultSpec(pub String);

impl fmt::Display for BadFaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad fault injection item {:?} (want loss=P,dup=P,reorder=P,corrupt=P,seed=N with P in [0, 1])",
            self.0
        )
    }
}

impl std::error::Error for BadFaultSpec {}

impl FaultConfig {
    /// Parses `loss=0.01,dup=0.01,reorder=0.01,corrupt=0.01,seed=42` (any subset).
    pub fn parse(spec: &str) -> Result<FaultConfig, BadFaultSpec> {
        let mut cfg = FaultConfig::default();
        for item in spec.split(',').filter(|s| !s.is_empty()) {
            let bad = || BadFaultSpec(item.to_string());
            let (key, value) = item.split_once('=').ok_or_else(bad)?;
            let prob = || -> Result<f64, BadFaultSpec> {
                let p: f64 = value.parse().map_err(|_| bad())?;
                if (0.0..=1.0).contains(&p) {
                    Ok(p)
                } else {
                    Err(bad())
                }
            };
            match key {
                "loss" => cfg.loss = prob()?,
                "dup" | "duplicate" => cfg.duplicate = prob()?,
                "reorder" => cfg.reorder = prob()?,
                "corrupt" => cfg.corrupt = prob()?,
                "seed" => cfg.seed = value.parse().map_err(|_| bad())?,
                _ => return Err(bad()),
            }
        }
        Ok(cfg)
    }
}

/// What the fault injector did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    pub passed: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
}

/// SplitMix64: a tiny, fast, seedable generator. Fault injection runs per frame on the data
/// path (and in debug-built tests), where a cryptographic RNG costs more than the frame.
#[derive(Debug, Clone)]
pub(super) struct SplitMix64(pub(super) u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
        const MIX1: u64 = 0xbf58_476d_1ce4_e5b9;
        const MIX2: u64 = 0x94d0_49bb_1331_11eb;
        self.0 = self.0.wrapping_add(GOLDEN_GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(MIX1);
        z = (z ^ (z >> 27)).wrapping_mul(MIX2);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    pub(super) fn chance(&mut self, p: f64) -> bool {
        // 53 random bits give a uniform f64 in [0, 1).
        const MANTISSA_BITS: u32 = 53;
        let unit =
            (self.next() >> (u64::BITS - MANTISSA_BITS)) as f64 / (1u64 << MANTISSA_BITS) as f64;
        unit < p
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant for fault injection).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Applies [`FaultConfig`] to a stream of packets, deterministically for a given seed. Each
/// packet travels with a tag `T` (e.g. its Ethernet header or destination), which stays with
/// it when it is reordered.
#[derive(Debug)]
pub struct FaultInjector<T = ()> {
    cfg: FaultConfig,
    rng: SplitMix64,
    held: Option<(T, Vec<u8>)>,
    stats: FaultStats,
}

impl<T: Clone> FaultInjector<T> {
    pub fn new(cfg: FaultConfig) -> FaultInjector<T> {
        FaultInjector {
            cfg,
            rng: SplitMix64(cfg.seed),
            held: None,
            stats: FaultStats::default(),
        }
    }

    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    /// Feeds one packet; appends to `out` the packets to deliver now, in order. Corruption
    /// flips a bit at or after byte `corrupt_from` of `packet`.
    pub fn apply(
        &mut self,
        tag: T,
        mut packet: Vec<u8>,
        corrupt_from: usize,
        out: &mut impl Extend<(T, Vec<u8>)>,
    ) {
        self.stats.passed += 1;
        if self.rng.chance(self.cfg.loss) {
            self.stats.lost += 1;
            return;
        }
        if self.rng.chance(self.cfg.corrupt) && packet.len() > corrupt_from {
            let at = corrupt_from + self.rng.below(packet.len() - corrupt_from);
            packet[at] ^= 1 << self.rng.below(u8::BITS as usize);
            self.stats.corrupted += 1;
        }
        if self.rng.chance(self.cfg.duplicate) {
            self.stats.duplicated += 1;
            out.extend(Some((tag.clone(), packet.clone())));
        }
        if self.held.is_none() && self.rng.chance(self.cfg.reorder) {
            self.stats.reordered += 1;
            self.held = Some((tag, packet));
            return;
        }
        out.extend(Some((tag, packet)));
        out.extend(self.held.take());
    }

    /// Releases a held-back packet (call when the sender goes idle so nothing waits forever).
    pub fn flush(&mut self, out: &mut impl Extend<(T, Vec<u8>)>) {
        out.extend(self.held.take());
    }
}
