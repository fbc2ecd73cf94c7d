//! CRC-32 (IEEE 802.3, the ICRC's) over long runs of bytes, folded eight 16-byte lanes at a time
//! with carry-less multiplication. The ICRC hashes every byte of every frame twice (built,
//! then checked), a 4 KiB payload each time; `crc32fast` folds four lanes with SSE encodings,
//! whose loads cannot be operands of the XORs, about 0.5 instructions a byte. Here each lane
//! costs two multiplies and two XORs per 128 bytes, one of them reading memory (AVX
//! encodings), and the loop's own bookkeeping is spread over twice the bytes.
//!
//! How a lane folds (the reflected convention: a 16-byte lane read as a little-endian u128
//! holds the coefficient of x^(127 - t) in bit t): a lane L = H·x^64 + Lo standing `D` bytes
//! before another is worth L·x^(8D) there, which is H·(x^(8D+64) mod P) + Lo·(x^(8D) mod P)
//! modulo the CRC's polynomial P, a value under 96 bits that fits a lane. The carry-less
//! product of two reflected 64-bit halves comes out one bit short of the lane's convention, so
//! the constants are x^(8D+63) and x^(8D-1) mod P. What is left after the last fold is a lane
//! congruent to everything before it, whose CRC is the CRC of the whole run: a Barrett
//! reduction ([`x86::reduce`]) gives it. The bytes past the last whole lane are folded in by
//! shuffles ([`x86::fold_tail`]); `crc32fast` hashes runs under [`SHORT_MIN`] bytes. Where the
//! CPU has AVX-512F and VPCLMULQDQ (and the compiler their intrinsics, Rust 1.89: build.rs
//! probes for them), the eight lanes of a block sit in two 512-bit registers and fold four at a
//! time (`x86::wide`), 13 instructions per 128 bytes instead of 35. Runs shorter than two
//! blocks (small messages' packets, ACKs) fold lane by lane where they lie ([`fold_short`]).
//! The ICRC's masked header fields are ORed over a run's first block as its lanes are loaded
//! ([`update_ored`]): no copy of the headers or the run.
// Elsewhere only crc32fast runs: the fold's constants are then unused.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use std::sync::atomic::{AtomicU8, Ordering};

/// The CRC-32 polynomial without its x^32 term, bit e the coefficient of x^e.
const POLY: u32 = 0x04C1_1DB7;
/// Bytes one pass of the fold takes: eight lanes.
const BLOCK: usize = 128;

/// x^n mod P, bit e the coefficient of x^e.
const fn x_pow_mod_p(n: u32) -> u32 {
    // x^0 = 1; then multiply by x n times, reducing as the x^32 term appears.
    let mut r: u32 = 1;
    let mut i = 0;
    while i < n {
        let carry = r & 0x8000_0000 != 0;
        r <<= 1;
        if carry {
            r ^= POLY;
        }
        i += 1;
    }
    r
}

/// The fold constant for x^n: x^(n-1) mod P as a reflected 64-bit half (bit j the
/// coefficient of x^(63 - j)), see the module doc.
const fn fold_constant(n: u32) -> u64 {
    (x_pow_mod_p(n - 1).reverse_bits() as u64) << 32
}

/// Constants to fold a lane `bytes` further on: (for its first half, for its second).
const fn fold_constants(bytes: u32) -> (u64, u64) {
    (fold_constant(8 * bytes + 64), fold_constant(8 * bytes))
}

/// The eight lanes, each `BLOCK` bytes on; and one lane onto the next (16 bytes on).
const FOLD_BLOCK: (u64, u64) = fold_constants(BLOCK as u32);
const FOLD_LANE: (u64, u64) = fold_constants(16);

/// Bytes at the front of a run that [`update_ored`] may OR a mask over: its first block.
pub const ORED_LEN: usize = BLOCK;

/// A mask that ORs nothing.
const NOTHING_ORED: [u8; ORED_LEN] = [0; ORED_LEN];

/// A run that starts `at` bytes (under a lane) into a buffer, folded in the buffer's own
/// lanes (a frame's IP packet behind its Ethernet header, folded as the copy of the frame
/// loads it, `copy`): the bytes before the run count as zeros (zeros in front of a zero
/// register leave it zero), the raw register `!state` is XORed over the run's first four
/// bytes and `ored` ORed over its front. Each lane of the buffer's first block is changed by
/// one AND, OR and XOR with these constants.
pub struct Front {
    at: usize,
    state: u32,
    ored: [u8; ORED_LEN],
    keep: [u8; BLOCK],
    or: [u8; BLOCK],
    xor: [u8; BLOCK],
}

impl Front {
    /// The run from byte `at` (under 16) on, from `state`, with `ored` over its front; the
    /// mask must end inside the buffer's first block.
    pub const fn new(at: usize, state: u32, ored: &[u8; ORED_LEN]) -> Front {
        assert!(at < 16, "the run starts inside the first lane");
        let mut f = Front {
            at,
            state,
            ored: *ored,
            keep: [0xff; BLOCK],
            or: [0; BLOCK],
            xor: [0; BLOCK],
        };
        let mut i = 0;
        while i < at {
            f.keep[i] = 0;
            i += 1;
        }
        let raw = (!state).to_le_bytes();
        let mut i = 0;
        while i < ORED_LEN {
            assert!(
                at + i < BLOCK || ored[i] == 0,
                "the mask ends inside the first block"
            );
            if at + i < BLOCK {
                f.or[at + i] = ored[i];
            }
            if i < raw.len() {
                f.xor[at + i] = raw[i];
            }
            i += 1;
        }
        f
    }

    /// Bytes of a buffer in front of the run.
    pub fn at(&self) -> usize {
        self.at
    }

    /// The run's CRC state folded over `buffer[at..]` where it lies ([`update_ored`]): what
    /// the fused copy (`copy`) gives, computed from the copy afterwards.
    pub fn update(&self, buffer: &[u8]) -> u32 {
        update_ored(self.state, &buffer[self.at.min(buffer.len())..], &self.ored)
    }
}

/// The CRC-32 state (as `crc32fast::Hasher` keeps it: finalized form) after `bytes`, from
/// `state`.
pub fn update(state: u32, bytes: &[u8]) -> u32 {
    update_ored(state, bytes, &NOTHING_ORED)
}

/// [`update`] of `run` with `ored` ORed over its first bytes (the ICRC's masked header
/// fields, set to ones), without a copy of the run: the fold ORs each of the first block's
/// lanes as it loads it. Bytes of `ored` past the run's end are ignored.
pub fn update_ored(state: u32, run: &[u8], ored: &[u8; ORED_LEN]) -> u32 {
    // The length first: a short run never asks whether the CPU folds wide.
    let folded = if run.len() >= 2 * BLOCK {
        fold_long(state, run, ored)
    } else {
        fold_short(state, run, ored)
    };
    folded.unwrap_or_else(|| by_table(state, run, ored))
}

/// [`update_ored`] by crc32fast's table (a lookup a byte): runs under [`SHORT_MIN`] bytes, and
/// CPUs without the fold.
fn by_table(state: u32, run: &[u8], ored: &[u8; ORED_LEN]) -> u32 {
    let front = run.len().min(ORED_LEN);
    let mut first = [0u8; ORED_LEN];
    for ((f, r), o) in first.iter_mut().zip(run).zip(ored) {
        *f = r | o;
    }
    let mut h = crc32fast::Hasher::new_with_initial(state);
    h.update(&first[..front]);
    h.update(&run[front..]);
    h.finalize()
}

/// [`update`] bit by bit, for constants (the CRC state after the ICRC's masked LRH).
pub const fn update_bitwise(state: u32, bytes: &[u8]) -> u32 {
    // The reflected polynomial: bit 31 - e the coefficient of x^e.
    const REFLECTED: u32 = POLY.reverse_bits();
    let mut crc = !state;
    let mut i = 0;
    while i < bytes.len() {
        crc ^= bytes[i] as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ REFLECTED
            } else {
                crc >> 1
            };
            bit += 1;
        }
        i += 1;
    }
    !crc
}

/// Whether a copy of `len` bytes out of another process's memory folds as it copies
/// (`copy`: the wide fold, two blocks or more; and a source aligned for it).
pub fn copy_folds(len: usize) -> bool {
    len >= 2 * BLOCK && wide_available()
}

/// The fold's CPU features as detected once: 0 not yet, else [`DETECTED`] with [`NARROW`]
/// and [`WIDE`] where the CPU has them (every ICRC and every long received frame asks:
/// four feature checks a call cost ~20 instructions).
static FEATURES: AtomicU8 = AtomicU8::new(0);
const DETECTED: u8 = 0x80;
const NARROW: u8 = 1;
const WIDE: u8 = 2;

/// [`FEATURES`], detected on the first call.
fn features() -> u8 {
    match FEATURES.load(Ordering::Relaxed) {
        0 => {
            let narrow = detect_narrow();
            let wide = narrow && x86_wide_detected();
            let f = DETECTED | if narrow { NARROW } else { 0 } | if wide { WIDE } else { 0 };
            FEATURES.store(f, Ordering::Relaxed);
            f
        }
        f => f,
    }
}

/// Whether this CPU runs the fold: x86-64 with PCLMULQDQ and AVX.
fn fold_available() -> bool {
    features() & NARROW != 0
}

/// The CPU has PCLMULQDQ and AVX (asked once, [`features`]).
fn detect_narrow() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("avx")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU runs the wide fold (four lanes to a 512-bit register: a quarter of the
/// narrow fold's instructions): x86-64 with AVX-512F and VPCLMULQDQ, and a compiler that knows
/// them (`rox_wide_fold`: Rust 1.89; the workspace's rust-version is 1.85, whose builds fold
/// narrow). Valgrind
/// has no AVX-512, so callgrind counts the narrow fold.
fn wide_available() -> bool {
    features() & WIDE != 0
}

/// The CPU and the compiler have the wide fold (asked once, [`features`]).
fn x86_wide_detected() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        x86::wide::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`update_ored`] by the block fold, or `None` where it does not run (a CPU without it, a
/// run shorter than two blocks).
fn fold_long(state: u32, run: &[u8], ored: &[u8; ORED_LEN]) -> Option<u32> {
    fold_long_by(wide_available(), state, run, ored)
}

/// [`fold_long`] by the wide fold if `wide` (which must then be available), else the narrow.
fn fold_long_by(wide: bool, state: u32, run: &[u8], ored: &[u8; ORED_LEN]) -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    if run.len() >= 2 * BLOCK && fold_available() {
        let (front, rest) = run.split_at(BLOCK);
        let mut first = [0u8; BLOCK];
        for ((f, r), o) in first.iter_mut().zip(front).zip(ored) {
            *f = r | o;
        }
        let lanes = rest.len() / 16 * 16;
        let lane = if wide {
            assert!(wide_available(), "the wide fold on a CPU without it");
            // SAFETY: the CPU has the features the function is compiled for (asserted);
            // `lanes` is a multiple of 16 within `rest`.
            unsafe { x86::wide::fold(!state, &first, &rest[..lanes]) }
        } else {
            // SAFETY: the CPU has both features the function is compiled for (checked just
            // above); `lanes` is a multiple of 16 within `rest`.
            unsafe { x86::fold(!state, &first, &rest[..lanes]) }
        };
        // SAFETY: the CPU has PCLMULQDQ and AVX (checked above); the run is longer than a
        // lane, and its last bytes are past the mask (it is two blocks long).
        return Some(unsafe { x86::reduce(x86::fold_tail(lane, run, &NOTHING_ORED)) });
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (wide, state, run, ored);
    None
}

/// The shortest run [`fold_short`] takes: one whole lane (a RoCEv2 packet's ICRC run is at
/// least 40 bytes past the masked LRH: IPv4, UDP, BTH).
const SHORT_MIN: usize = 16;

/// [`update_ored`] of a run shorter than two blocks (a small message's packet, an ACK) by
/// folding lane by lane, or `None` where it does not run (no PCLMULQDQ+AVX, outside
/// [`SHORT_MIN`]..2 blocks). crc32fast hashes runs under 128 bytes a table lookup per byte;
/// here each lane is loaded from the run where it lies (the mask ORed in, the raw register
/// XORed into the first), folded onto the next, a last partial lane folded in by shuffles
/// ([`x86::fold_tail`]), and the last lane reduced to the CRC.
fn fold_short(state: u32, run: &[u8], ored: &[u8; ORED_LEN]) -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    if (SHORT_MIN..2 * BLOCK).contains(&run.len()) && fold_available() {
        // SAFETY: the CPU has both features the functions are compiled for (checked just
        // above); the run is at least a lane long.
        return Some(unsafe { x86::reduce(x86::fold_run(!state, run, ored)) });
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (state, run, ored);
    None
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{BLOCK, FOLD_BLOCK, FOLD_LANE, ORED_LEN};

    /// A fold constant pair as one lane: `first` in the low half, `second` in the high.
    pub(super) fn constants((first, second): (u64, u64)) -> __m128i {
        let halves = [first, second];
        // SAFETY: `halves` is 16 readable bytes (little-endian: `first` low); unaligned loads
        // are allowed; SSE2 is part of x86_64.
        unsafe { _mm_loadu_si128(halves.as_ptr().cast()) }
    }

    /// `lane` moved one fold on, plus `next`.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and AVX.
    // The intrinsics below are unsafe fns up to Rust 1.86 (the workspace's rust-version is
    // 1.85) and safe within this function's features from 1.87, where their block is unused:
    // it is needed on the older compilers only.
    #[allow(unused_unsafe)]
    #[target_feature(enable = "pclmulqdq,avx")]
    pub(super) unsafe fn fold_into(lane: __m128i, k: __m128i, next: __m128i) -> __m128i {
        // SAFETY: the CPU has the features (this function's precondition); no memory access.
        unsafe {
            let first = _mm_clmulepi64_si128::<0x00>(lane, k);
            let second = _mm_clmulepi64_si128::<0x11>(lane, k);
            _mm_xor_si128(_mm_xor_si128(first, second), next)
        }
    }

    /// One lane congruent to `first` then `rest` (a multiple of 16 bytes long) with the raw
    /// CRC register `raw` in front: its CRC from zero is the CRC of those bytes from `raw`.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and AVX.
    #[target_feature(enable = "pclmulqdq,avx")]
    pub(super) unsafe fn fold(raw: u32, first: &[u8; BLOCK], rest: &[u8]) -> __m128i {
        assert!(rest.len() % 16 == 0);
        let blocks = rest.len() / BLOCK * BLOCK;
        let mut lanes: [__m128i; 8] = std::array::from_fn(|i| {
            // SAFETY: lane i < 8 of the whole block `first`; the CPU has the features.
            unsafe { load(&first[..], 0, i) }
        });
        lanes[0] = _mm_xor_si128(lanes[0], _mm_cvtsi32_si128(raw as i32));
        let k = constants(FOLD_BLOCK);
        let mut at = 0;
        while at < blocks {
            for (i, lane) in lanes.iter_mut().enumerate() {
                // SAFETY: lane i < 8 of the whole block at `at` (at + BLOCK <= blocks <= len).
                let next = unsafe { load(rest, at, i) };
                *lane = fold_into(*lane, k, next);
            }
            at += BLOCK;
        }
        // SAFETY: the same features; `rest[blocks..]` is whole lanes.
        unsafe { finish(lanes, &rest[blocks..]) }
    }

    /// Lane `i` of the bytes at `at` of `run`.
    ///
    /// # Safety
    /// `at + 16 * (i + 1)` must be within `run` (every caller loads whole blocks or whole
    /// lanes of a run a multiple of 16 bytes long).
    pub(super) unsafe fn load(run: &[u8], at: usize, i: usize) -> __m128i {
        debug_assert!(at + 16 * i + 16 <= run.len());
        // SAFETY: the 16 bytes are within `run` (the caller's promise); unaligned loads are
        // allowed; SSE2 is part of x86_64.
        unsafe { _mm_loadu_si128(run.as_ptr().add(at + 16 * i).cast()) }
    }

    /// The eight lanes of the last block folded into one, then `tail` (whole lanes) folded
    /// onto it lane by lane: the lane [`fold`] returns.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and AVX.
    #[target_feature(enable = "pclmulqdq,avx")]
    pub(super) unsafe fn finish(lanes: [__m128i; 8], tail: &[u8]) -> __m128i {
        let k = constants(FOLD_LANE);
        // SAFETY: the same features.
        let mut acc = unsafe { merge(lanes) };
        assert!(tail.len() % 16 == 0);
        for at in (0..tail.len()).step_by(16) {
            // SAFETY: `tail` is whole lanes (asserted).
            acc = fold_into(acc, k, unsafe { load(tail, at, 0) });
        }
        acc
    }

    /// The eight lanes of the last block folded into one.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and AVX.
    #[target_feature(enable = "pclmulqdq,avx")]
    pub(super) unsafe fn merge(lanes: [__m128i; 8]) -> __m128i {
        let k = constants(FOLD_LANE);
        let mut acc = lanes[0];
        for &lane in &lanes[1..] {
            acc = fold_into(acc, k, lane);
        }
        acc
    }

    /// The fold four lanes to a register: the eight lanes of a block in two 512-bit
    /// registers, each 128-bit part folded on by the same constants as a narrow lane.
    // `rox_wide_fold`: the compiler has the AVX-512 and VPCLMULQDQ intrinsics (build.rs
    // probes it: stable from 1.89); elsewhere this module is the one below, which never
    // folds wide.
    #[cfg(rox_wide_fold)]
    #[allow(clippy::incompatible_msrv)]
    pub(super) mod wide {
        use std::arch::x86_64::*;

        use super::super::{BLOCK, FOLD_BLOCK};
        use super::{constants, finish};

        pub(in super::super) fn available() -> bool {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("vpclmulqdq")
        }

        /// [`super::fold`], four lanes to a register.
        ///
        /// # Safety
        /// The CPU must have AVX-512F and VPCLMULQDQ ([`available`]).
        #[target_feature(enable = "avx512f,vpclmulqdq")]
        pub(in super::super) unsafe fn fold(raw: u32, first: &[u8; BLOCK], rest: &[u8]) -> __m128i {
            assert!(rest.len() % 16 == 0);
            let mut first = *first;
            for (b, r) in first.iter_mut().zip(raw.to_le_bytes()) {
                *b ^= r;
            }
            // The 64 bytes at `at` of `run`.
            let load = |run: &[u8], at: usize| {
                assert!(at + 64 <= run.len());
                // SAFETY: the 64 bytes are within `run` (asserted); unaligned loads are
                // allowed.
                unsafe { _mm512_loadu_si512(run.as_ptr().add(at).cast()) }
            };
            let (mut low, mut high) = (load(&first, 0), load(&first, 64));
            let k = _mm512_broadcast_i32x4(constants(FOLD_BLOCK));
            // Each 128-bit part: its halves times their constants, XOR the next block's part
            // (0x96: a ^ b ^ c).
            let on = |lane: __m512i, next: __m512i| {
                let a = _mm512_clmulepi64_epi128::<0x00>(lane, k);
                let b = _mm512_clmulepi64_epi128::<0x11>(lane, k);
                _mm512_ternarylogic_epi64::<0x96>(a, b, next)
            };
            let blocks = rest.len() / BLOCK * BLOCK;
            for at in (0..blocks).step_by(BLOCK) {
                low = on(low, load(rest, at));
                high = on(high, load(rest, at + 64));
            }
            // SAFETY: AVX-512F implies AVX and VPCLMULQDQ implies PCLMULQDQ; `rest[blocks..]`
            // is whole lanes.
            unsafe { finish(lanes(low, high), &rest[blocks..]) }
        }

        /// The eight 128-bit lanes of a block held in two 512-bit registers, in order.
        ///
        /// # Safety
        /// The CPU must have AVX-512F.
        #[target_feature(enable = "avx512f")]
        pub(in super::super) unsafe fn lanes(low: __m512i, high: __m512i) -> [__m128i; 8] {
            [
                _mm512_extracti32x4_epi32::<0>(low),
                _mm512_extracti32x4_epi32::<1>(low),
                _mm512_extracti32x4_epi32::<2>(low),
                _mm512_extracti32x4_epi32::<3>(low),
                _mm512_extracti32x4_epi32::<0>(high),
                _mm512_extracti32x4_epi32::<1>(high),
                _mm512_extracti32x4_epi32::<2>(high),
                _mm512_extracti32x4_epi32::<3>(high),
            ]
        }
    }

    /// What the module above is on compilers without its intrinsics: never available.
    #[cfg(not(rox_wide_fold))]
    pub(super) mod wide {
        use super::super::BLOCK;
        use std::arch::x86_64::__m128i;

        pub(in super::super) fn available() -> bool {
            false
        }

        /// Never called ([`available`] is false).
        ///
        /// # Safety
        /// None; it panics.
        pub(in super::super) unsafe fn fold(_: u32, _: &[u8; BLOCK], _: &[u8]) -> __m128i {
            unreachable!("the wide fold needs the AVX-512 intrinsics of Rust 1.89")
        }
    }

    /// The 16 bytes at `at` of `run` with those of `ored` at `at` ORed in (none where the
    /// lane reaches past the mask: a whole lane that starts inside it ends inside it; the
    /// run's last, unaligned lane is masked by [`fold_tail`] only within the mask).
    ///
    /// # Safety
    /// `at + 16` must be within `run`.
    #[target_feature(enable = "pclmulqdq,avx")]
    unsafe fn ored_lane(run: &[u8], at: usize, ored: &[u8; ORED_LEN]) -> __m128i {
        // SAFETY: the 16 bytes are within `run` (the caller's promise).
        let bytes = unsafe { load(run, at, 0) };
        if at + 16 <= ORED_LEN {
            // SAFETY: the 16 bytes are within `ored` (just checked).
            _mm_or_si128(bytes, unsafe { load(ored, at, 0) })
        } else {
            bytes
        }
    }

    /// One lane congruent to `run` (at least a lane long) with `ored` ORed over its front and
    /// the raw CRC register `raw` in front: its CRC from zero is the CRC of those bytes from
    /// `raw`. Each lane is loaded where it lies and folded onto the next; a last partial lane
    /// by [`fold_tail`].
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and AVX.
    #[target_feature(enable = "pclmulqdq,avx")]
    pub(super) unsafe fn fold_run(raw: u32, run: &[u8], ored: &[u8; ORED_LEN]) -> __m128i {
        assert!(run.len() >= 16);
        let k = constants(FOLD_LANE);
        // SAFETY: the first lane is within the run (asserted).
        let first = unsafe { ored_lane(run, 0, ored) };
        let mut acc = _mm_xor_si128(first, _mm_cvtsi32_si128(raw as i32));
        let (whole, mut at) = (run.len() / 16 * 16, 16);
        while at < whole {
            // SAFETY: a whole lane below the end of the run's whole lanes.
            acc = fold_into(acc, k, unsafe { ored_lane(run, at, ored) });
            at += 16;
        }
        // SAFETY: the run is at least a lane long (asserted); the CPU has the features.
        unsafe { fold_tail(acc, run, ored) }
    }

    /// `acc`, congruent to the whole lanes of `run` (at least one), with the `r` bytes past
    /// them (the run's length mod 16) folded in. `acc` then those bytes are, behind 16 - `r`
    /// zeros (which leave a zero register zero), two lanes: the zeros and `acc`'s first `r`
    /// bytes, then `acc`'s other bytes and the run's last `r`; both are made by shuffles, the
    /// first folded onto the second.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and AVX.
    #[target_feature(enable = "pclmulqdq,avx")]
    pub(super) unsafe fn fold_tail(acc: __m128i, run: &[u8], ored: &[u8; ORED_LEN]) -> __m128i {
        let r = run.len() % 16;
        if r == 0 {
            return acc;
        }
        assert!(run.len() > 16);
        // SAFETY: the run's last 16 bytes (it is longer than a lane, asserted). Its mask
        // applies where the run is no longer than the mask; past that, the bytes this lane
        // adds (past the whole lanes) are past the mask too.
        let last = unsafe {
            if run.len() <= ORED_LEN {
                ored_lane(run, run.len() - 16, ored)
            } else {
                load(run, run.len() - 16, 0)
            }
        };
        // SAFETY: the same features; r < 16.
        unsafe { fold_last(acc, last, r) }
    }

    /// `acc` with the last `r` (1..16) bytes of `last` folded in ([`fold_tail`]).
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and AVX; `r` < 16.
    #[target_feature(enable = "pclmulqdq,avx")]
    pub(super) unsafe fn fold_last(acc: __m128i, last: __m128i, r: usize) -> __m128i {
        /// Shuffle controls: the 16 bytes at `r` move a lane's bytes up by 16 - r (zeros
        /// below), those at 16 + r down by r (zeros above); 0x80 gives a zero byte.
        static SHIFTS: [u8; 48] = {
            let mut t = [0x80u8; 48];
            let mut i = 0;
            while i < 16 {
                t[16 + i] = i as u8;
                i += 1;
            }
            t
        };
        /// The 16 bytes at `r`: ones over a lane's last `r` bytes.
        static LAST: [u8; 32] = {
            let mut t = [0u8; 32];
            let mut i = 16;
            while i < 32 {
                t[i] = 0xff;
                i += 1;
            }
            t
        };
        assert!(r < 16);
        // SAFETY: r < 16: each 16-byte read is within its table.
        let (up, down, keep) = unsafe {
            (
                load(&SHIFTS, r, 0),
                load(&SHIFTS, 16 + r, 0),
                load(&LAST, r, 0),
            )
        };
        let front = _mm_shuffle_epi8(acc, up);
        let back = _mm_or_si128(_mm_shuffle_epi8(acc, down), _mm_and_si128(last, keep));
        fold_into(front, constants(FOLD_LANE), back)
    }

    /// The CRC (crc32fast's finalized form) of `lane`'s 16 bytes from a zero register: the
    /// lane folded to 96 and then 64 bits, and a Barrett reduction to 32 (Gopal et al., "Fast
    /// CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction", Intel 2009, the
    /// bit-reflected variant; its constants are x^96 and x^64 mod P, P and floor(x^64 / P),
    /// reflected into 33 bits). Where crc32fast would hash the lane a table lookup a byte.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and AVX.
    #[allow(unused_unsafe)]
    #[target_feature(enable = "pclmulqdq,avx")]
    pub(super) unsafe fn reduce(lane: __m128i) -> u32 {
        const X96: i64 = 0x0_ccaa_009e;
        const X64: i64 = 0x1_63cd_6124;
        const P: i64 = 0x1_db71_0641;
        const MU: i64 = 0x1_f701_1641;
        // SAFETY: the CPU has the features (this function's precondition); no memory access.
        unsafe {
            let low32 = _mm_set_epi32(0, 0, 0, -1);
            let by = |x: __m128i, k: i64| _mm_clmulepi64_si128::<0x00>(x, _mm_set_epi64x(0, k));
            let x = _mm_xor_si128(by(lane, X96), _mm_srli_si128::<8>(lane));
            let x = _mm_xor_si128(by(_mm_and_si128(x, low32), X64), _mm_srli_si128::<4>(x));
            let t1 = by(_mm_and_si128(x, low32), MU);
            let t2 = by(_mm_and_si128(t1, low32), P);
            !(_mm_cvtsi128_si32(_mm_srli_si128::<4>(_mm_xor_si128(x, t2))) as u32)
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod copy;

#[cfg(test)]
mod tests;
