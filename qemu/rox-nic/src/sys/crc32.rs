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
//! reduction ([`x86::reduce`]) gives it, and `crc32fast` hashes the last bytes (under a lane)
//! and runs under [`SHORT_MIN`] bytes. Where the CPU has AVX-512F and VPCLMULQDQ (and the
//! compiler their intrinsics, Rust 1.89: build.rs probes for them), the eight lanes of a block sit in two 512-bit
//! registers and fold four at a time (`x86::wide`), 13 instructions per 128 bytes instead of
//! 35. Runs shorter than two blocks (small messages' packets, ACKs) fold lane by lane and end
//! in a Barrett reduction ([`fold_short`]).
// Elsewhere only crc32fast runs: the fold's constants are then unused.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

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

/// The CRC-32 state (as `crc32fast::Hasher` keeps it: finalized form) after `bytes`, from
/// `state`.
pub fn update(state: u32, bytes: &[u8]) -> u32 {
    update_parts(state, &[], bytes)
}

/// [`update`] over `head` then `body` (the ICRC's masked headers, built apart, and the rest
/// of the packet), as if they were one run: `head` (at most 128 bytes) and the start of
/// `body` make the first block of the fold.
pub fn update_parts(state: u32, head: &[u8], body: &[u8]) -> u32 {
    if let Some(crc) = fold_parts(state, head, body) {
        return crc;
    }
    if let Some(crc) = fold_short(state, head, body) {
        return crc;
    }
    let mut h = crc32fast::Hasher::new_with_initial(state);
    h.update(head);
    h.update(body);
    h.finalize()
}

/// Whether this CPU runs the fold: x86-64 with PCLMULQDQ and AVX.
fn fold_available() -> bool {
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
    #[cfg(target_arch = "x86_64")]
    {
        x86::wide::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`update_parts`] by the fold, or `None` where it does not run (a CPU without it, a head
/// longer than a block, fewer than two blocks in all): then `crc32fast` hashes everything.
fn fold_parts(state: u32, head: &[u8], body: &[u8]) -> Option<u32> {
    fold_parts_by(wide_available(), state, head, body)
}

/// [`fold_parts`] by the wide fold if `wide` (which must then be available), else the narrow.
fn fold_parts_by(wide: bool, state: u32, head: &[u8], body: &[u8]) -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    if head.len() <= BLOCK && head.len() + body.len() >= 2 * BLOCK && fold_available() {
        let mut first = [0u8; BLOCK];
        let (from_body, rest) = body.split_at(BLOCK - head.len());
        first[..head.len()].copy_from_slice(head);
        first[head.len()..].copy_from_slice(from_body);
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
        // SAFETY: the CPU has PCLMULQDQ and AVX (checked above).
        let crc = unsafe { x86::reduce_bytes(&lane) };
        let tail = &rest[lanes..];
        if tail.is_empty() {
            return Some(crc);
        }
        let mut last = crc32fast::Hasher::new_with_initial(crc);
        last.update(tail);
        return Some(last.finalize());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (wide, state, head, body);
    None
}

/// The shortest run [`fold_short`] takes (a RoCEv2 packet's ICRC run is at least 48 bytes:
/// masked LRH, IPv4, UDP, BTH).
const SHORT_MIN: usize = 32;

/// [`update_parts`] of a run shorter than two blocks (a small message's packet, an ACK) by
/// folding lane by lane, or `None` where it does not run (no PCLMULQDQ+AVX, outside
/// [`SHORT_MIN`]..2 blocks). crc32fast hashes runs under 128 bytes a table lookup per byte
/// (about 290 instructions for an 8 B WRITE's 72 bytes); here the run is copied behind zeros
/// up to whole lanes (zeros in front of a zero CRC register leave it zero, so the raw
/// register goes into the run's first four bytes, as the long fold puts it in its first
/// lane), folded one lane onto the next, and the last lane reduced to the CRC.
fn fold_short(state: u32, head: &[u8], body: &[u8]) -> Option<u32> {
    let len = head.len() + body.len();
    #[cfg(target_arch = "x86_64")]
    if (SHORT_MIN..2 * BLOCK).contains(&len) && fold_available() {
        let mut run = [0u8; 2 * BLOCK];
        let pad = (16 - len % 16) % 16;
        run[pad..pad + head.len()].copy_from_slice(head);
        run[pad + head.len()..pad + len].copy_from_slice(body);
        for (b, r) in run[pad..pad + 4].iter_mut().zip((!state).to_le_bytes()) {
            *b ^= r;
        }
        // SAFETY: the CPU has both features the functions are compiled for (checked just
        // above); `pad + len` is a whole number of lanes within `run`.
        return Some(unsafe { x86::reduce(x86::fold_lanes(&run[..pad + len])) });
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (state, head, body, len);
    None
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{BLOCK, FOLD_BLOCK, FOLD_LANE};

    /// A fold constant pair as one lane: `first` in the low half, `second` in the high.
    fn constants((first, second): (u64, u64)) -> __m128i {
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
    unsafe fn fold_into(lane: __m128i, k: __m128i, next: __m128i) -> __m128i {
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
    pub(super) unsafe fn fold(raw: u32, first: &[u8; BLOCK], rest: &[u8]) -> [u8; 16] {
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
    unsafe fn load(run: &[u8], at: usize, i: usize) -> __m128i {
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
    pub(super) unsafe fn finish(lanes: [__m128i; 8], tail: &[u8]) -> [u8; 16] {
        let k = constants(FOLD_LANE);
        let mut acc = lanes[0];
        for &lane in &lanes[1..] {
            acc = fold_into(acc, k, lane);
        }
        assert!(tail.len() % 16 == 0);
        for at in (0..tail.len()).step_by(16) {
            // SAFETY: `tail` is whole lanes (asserted).
            acc = fold_into(acc, k, unsafe { load(tail, at, 0) });
        }
        let mut out = [0u8; 16];
        // SAFETY: `out` has 16 bytes; unaligned stores are allowed.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), acc) };
        out
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
        pub(in super::super) unsafe fn fold(
            raw: u32,
            first: &[u8; BLOCK],
            rest: &[u8],
        ) -> [u8; 16] {
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
            let lanes = [
                _mm512_extracti32x4_epi32::<0>(low),
                _mm512_extracti32x4_epi32::<1>(low),
                _mm512_extracti32x4_epi32::<2>(low),
                _mm512_extracti32x4_epi32::<3>(low),
                _mm512_extracti32x4_epi32::<0>(high),
                _mm512_extracti32x4_epi32::<1>(high),
                _mm512_extracti32x4_epi32::<2>(high),
                _mm512_extracti32x4_epi32::<3>(high),
            ];
            // SAFETY: AVX-512F implies AVX and VPCLMULQDQ implies PCLMULQDQ; `rest[blocks..]`
            // is whole lanes.
            unsafe { finish(lanes, &rest[blocks..]) }
        }
    }

    /// What the module above is on compilers without its intrinsics: never available.
    #[cfg(not(rox_wide_fold))]
    pub(super) mod wide {
        use super::super::BLOCK;

        pub(in super::super) fn available() -> bool {
            false
        }

        /// Never called ([`available`] is false).
        ///
        /// # Safety
        /// None; it panics.
        pub(in super::super) unsafe fn fold(_: u32, _: &[u8; BLOCK], _: &[u8]) -> [u8; 16] {
            unreachable!("the wide fold needs the AVX-512 intrinsics of Rust 1.89")
        }
    }

    /// One lane congruent to `run` (whole lanes, at least one), each lane folded onto the
    /// next: its CRC from zero is the CRC of `run` from zero.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and AVX.
    #[target_feature(enable = "pclmulqdq,avx")]
    pub(super) unsafe fn fold_lanes(run: &[u8]) -> __m128i {
        assert!(run.len() % 16 == 0 && !run.is_empty());
        let k = constants(FOLD_LANE);
        let mut lanes = run.chunks_exact(16);
        let lane = |l: &[u8]| {
            // SAFETY: `l` is one of `run`'s 16-byte lanes; unaligned loads are allowed.
            unsafe { _mm_loadu_si128(l.as_ptr().cast()) }
        };
        let mut acc = lane(lanes.next().expect("a lane"));
        for next in lanes {
            acc = fold_into(acc, k, lane(next));
        }
        acc
    }

    /// [`reduce`] of the lane `bytes` holds (the last lane of a long fold: reduced here
    /// instead of hashed by crc32fast's table, a lookup a byte).
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and AVX.
    #[target_feature(enable = "pclmulqdq,avx")]
    pub(super) unsafe fn reduce_bytes(bytes: &[u8; 16]) -> u32 {
        // SAFETY: `bytes` is 16 readable bytes; unaligned loads are allowed; the CPU has the
        // features `reduce` needs (this function's precondition).
        unsafe { reduce(_mm_loadu_si128(bytes.as_ptr().cast())) }
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn reference(state: u32, bytes: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new_with_initial(state);
        h.update(bytes);
        h.finalize()
    }

    #[test]
    fn x_pow_mod_p_reduces_by_the_polynomial() {
        assert_eq!(x_pow_mod_p(0), 1);
        assert_eq!(x_pow_mod_p(31), 0x8000_0000);
        assert_eq!(x_pow_mod_p(32), POLY);
        assert_eq!(x_pow_mod_p(33), POLY << 1);
    }

    /// `head` then `body` from `state` as crc32fast hashes them, by [`update_parts`] and by
    /// the fold itself; the fold must run wherever the CPU has it and the lengths allow (else
    /// crc32fast would only be compared with itself). Returns whether it ran.
    fn check(state: u32, head: &[u8], body: &[u8]) -> bool {
        let whole = [head, body].concat();
        let want = reference(state, &whole);
        let (h, b) = (head.len(), body.len());
        assert_eq!(update_parts(state, head, body), want, "{h} + {b} B");
        let fold = fold_parts(state, head, body);
        let applies = h <= BLOCK && h + b >= 2 * BLOCK;
        assert_eq!(
            fold.is_some(),
            applies && fold_available(),
            "{h} + {b} B: the fold's path"
        );
        if let Some(crc) = fold {
            assert_eq!(crc, want, "{h} + {b} B by the fold");
        }
        // Both folds wherever the CPU has the wide one (the narrow one is then not the
        // default path, and is still what callgrind and older compilers run).
        if wide_available() {
            let narrow = fold_parts_by(false, state, head, body);
            assert_eq!(narrow, fold, "{h} + {b} B by the narrow fold");
            let wide = fold_parts_by(true, state, head, body);
            assert_eq!(wide, fold, "{h} + {b} B by the wide fold");
        }
        let short = fold_short(state, head, body);
        let short_applies = (SHORT_MIN..2 * BLOCK).contains(&(h + b));
        assert_eq!(
            short.is_some(),
            short_applies && fold_available(),
            "{h} + {b} B: the short fold's path"
        );
        if let Some(crc) = short {
            assert_eq!(crc, want, "{h} + {b} B by the short fold");
        }
        fold.is_some() || short.is_some()
    }

    fn report_path(test: &str, folded: usize, runs: usize) {
        let path = if wide_available() {
            "wide (AVX-512 VPCLMULQDQ) and narrow PCLMULQDQ folds"
        } else if fold_available() {
            "PCLMULQDQ fold"
        } else {
            "crc32fast only (no PCLMULQDQ+AVX)"
        };
        eprintln!("{test}: {path}: {folded} of {runs} runs folded");
    }

    /// The standard check value, and every length around the fold's edges from any state,
    /// as crc32fast computes them.
    #[test]
    fn the_fold_gives_crc32fast_s_crc_for_every_length_and_state() {
        assert_eq!(update(0, b"123456789"), 0xCBF4_3926);
        let mut rng = rand::rngs::StdRng::seed_from_u64(32);
        let bytes: Vec<u8> = (0..9000).map(|_| rng.gen()).collect();
        let lengths = (0..600).chain([1023, 1024, 1025, 4095, 4096, 4097, 4108, 8192, 9000]);
        let (mut runs, mut folded) = (0, 0);
        for len in lengths {
            for state in [0, !0, rng.gen()] {
                let at = rng.gen_range(0..=bytes.len() - len);
                folded += usize::from(check(state, &[], &bytes[at..at + len]));
                runs += 1;
            }
        }
        report_path("every length", folded, runs);
    }

    /// A head of any length up to a block, then a body: as if one run.
    #[test]
    fn head_and_body_hash_as_one_run() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(33);
        let bytes: Vec<u8> = (0..5000).map(|_| rng.gen()).collect();
        let (mut runs, mut folded) = (0, 0);
        for head in [0, 1, 15, 16, 48, 68, 127, 128, 129] {
            for body in [0, 1, 8, 24, 100, 255, 256, 300, 4096, 4100, 4871] {
                let (h, b) = bytes[..head + body].split_at(head);
                folded += usize::from(check(rng.gen(), h, b));
                runs += 1;
            }
        }
        report_path("head and body", folded, runs);
    }

    /// The CPU's feature flags as the kernel lists them (/proc/cpuinfo's first `flags` line).
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn cpu_flags() -> Vec<String> {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_else(|e| panic!("/proc/cpuinfo (every x86-64 Linux has it): {e}"));
        cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("flags").and_then(|r| r.split_once(':')))
            .unwrap_or_else(|| panic!("no flags line in /proc/cpuinfo"))
            .1
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    /// The fast path's detection, checked against the kernel's view of the CPU: if
    /// `fold_available()` wrongly said no, the tests above would quietly test crc32fast only.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[test]
    fn fold_detection_agrees_with_proc_cpuinfo() {
        let flags = cpu_flags();
        let has = |flag: &str| flags.iter().any(|f| f == flag);
        let listed = has("pclmulqdq") && has("avx");
        assert_eq!(
            fold_available(),
            listed,
            "fold_available() against /proc/cpuinfo (pclmulqdq {}, avx {})",
            has("pclmulqdq"),
            has("avx")
        );
    }

    /// The wide fold's detection, checked against the kernel's view of the CPU: if
    /// `wide_available()` wrongly said no, the hosts that have it would fold narrow and the
    /// tests above would never run the wide fold.
    #[cfg(all(rox_wide_fold, target_os = "linux"))]
    #[test]
    fn wide_fold_detection_agrees_with_proc_cpuinfo() {
        let flags = cpu_flags();
        let has = |flag: &str| flags.iter().any(|f| f == flag);
        assert_eq!(
            wide_available(),
            has("avx512f") && has("vpclmulqdq"),
            "wide_available() against /proc/cpuinfo (avx512f {}, vpclmulqdq {})",
            has("avx512f"),
            has("vpclmulqdq")
        );
    }

    /// The build script's probe finds the wide fold's intrinsics on every compiler that surely
    /// has them (stable from 1.89; nightlies and betas of 1.89 may not): a probe that never
    /// compiled would leave every host folding narrow, unseen.
    #[rustversion::all(stable, since(1.89))]
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_wide_fold_is_compiled_in_on_stable_1_89_and_later() {
        #[cfg(not(rox_wide_fold))]
        panic!("build.rs's probe failed on this compiler");
    }

    /// The ICRC runs of small messages (an 8 B WRITE: 48 bytes of masked headers and 24 of
    /// RETH and payload; an ACK: 48 and 4 of AETH) take the short fold where the CPU has
    /// it, and every bit of them counts.
    #[test]
    fn short_packets_fold_lane_by_lane_and_every_bit_counts() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(34);
        for (head, body) in [
            (48, 24),
            (48, 4),
            (68, 24),
            (SHORT_MIN, 0),
            (0, 2 * BLOCK - 1),
        ] {
            let mut bytes: Vec<u8> = (0..head + body).map(|_| rng.gen()).collect();
            let state = rng.gen();
            let (h, b) = bytes.split_at(head);
            assert_eq!(check(state, h, b), fold_available(), "{head} + {body} B");
            let crc = update_parts(state, h, b);
            for bit in 0..bytes.len() * 8 {
                bytes[bit / 8] ^= 1 << (bit % 8);
                let (h, b) = bytes.split_at(head);
                assert_ne!(
                    update_parts(state, h, b),
                    crc,
                    "{head} + {body} B, bit {bit}"
                );
                bytes[bit / 8] ^= 1 << (bit % 8);
            }
        }
    }

    /// One changed bit anywhere changes the CRC (each lane really counts).
    #[test]
    fn every_bit_of_a_long_run_counts() {
        let mut bytes = vec![0x5au8; 4096];
        let crc = update(0, &bytes);
        for at in (0..bytes.len()).step_by(61) {
            bytes[at] ^= 0x10;
            assert_ne!(update(0, &bytes), crc, "byte {at}");
            check(0, &[], &bytes);
            bytes[at] ^= 0x10;
        }
    }
}
