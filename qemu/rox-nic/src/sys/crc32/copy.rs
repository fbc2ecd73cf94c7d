//! The fold fused with a copy out of memory another process may write (a cable's receive
//! ring, `sys::shm::PeerBytes::copy_folding`): each lane is read from the source once, with a
//! volatile load, stored to the copy and folded from the same register. So the CRC is the
//! copy's, whatever the other process writes meanwhile, and the copy is not read again for
//! it (the second pass over a received frame's bytes that checking its ICRC was).
//!
//! The caller copies the first lanes itself, to see which run to fold ([`Front`]): they are
//! folded from the copy.
//!
//! The lanes are the buffer's own (the source is aligned), not the run's: the run starts
//! [`Front::at`] bytes in, and the first block's lanes are changed by the [`Front`] as they
//! are loaded. Whole blocks past the first fold eight lanes at a time (four to a register
//! where the CPU folds wide), the rest lane by lane; the buffer's last partial lane is read
//! back from the copy (own memory) and folded in by shuffles (`x86::fold_last`).

use std::arch::x86_64::*;
use std::sync::atomic::{AtomicU8, Ordering};

use super::x86::{constants, fold_into, fold_last, load, merge, reduce};
use super::{Front, BLOCK, FOLD_BLOCK, FOLD_LANE, FRONT_LEN};
use crate::sys::shm::copy_short;

/// Bytes of a lane.
const LANE: usize = 16;

/// How this CPU fuses: the narrow fold (PCLMULQDQ and AVX) or the wide (AVX-512F and
/// VPCLMULQDQ as well).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::sys) enum Fold {
    Narrow,
    Wide,
}

/// [`Fold`] as detected once: 0 not yet, 1 none, 2 narrow, 3 wide (a small frame's copy
/// cannot afford four feature checks).
static DETECTED: AtomicU8 = AtomicU8::new(0);

/// How [`copy_fold`] takes a copy of `len` bytes from `src`, if it does: a CPU with the fold,
/// at least two lanes, and a source 64-aligned (for the loads, 16 or 64 bytes).
pub(in crate::sys) fn fold_for(src: *const u8, len: usize) -> Option<Fold> {
    if len < 2 * LANE || (src as usize) % 64 != 0 {
        return None;
    }
    let mode = match DETECTED.load(Ordering::Relaxed) {
        0 => {
            let mode = match (super::fold_available(), super::wide_available()) {
                (false, _) => 1,
                (true, false) => 2,
                (true, true) => 3,
            };
            DETECTED.store(mode, Ordering::Relaxed);
            mode
        }
        mode => mode,
    };
    match mode {
        2 => Some(Fold::Narrow),
        3 => Some(Fold::Wide),
        _ => None,
    }
}

/// Copies `dst.len()` bytes from `src` into `dst` and returns what `front.update(dst)` would
/// (the CRC state of the run in the copy), folding each lane as it is copied. The first
/// `copied` bytes (whole lanes, a block at most, one lane at least) are already in `dst` (the
/// caller looked at them to choose `front`): they are folded from there, never read from
/// `src` again.
///
/// # Safety
/// `fold` is what [`fold_for`] gave for `src` and `dst.len()` (or [`Fold::Narrow`] where it
/// gave [`Fold::Wide`]); `dst.len()` bytes from `src` may be read (another process may write
/// them meanwhile).
pub(in crate::sys) unsafe fn copy_fold(
    fold: Fold,
    src: *const u8,
    dst: &mut [u8],
    copied: usize,
    front: &Front,
) -> u32 {
    assert!(copied % LANE == 0 && (LANE..=BLOCK).contains(&copied) && copied <= dst.len());
    // SAFETY: the CPU has the features and the source its alignment ([`fold_for`], the
    // caller's promise); each function reads only within `dst.len()` bytes of `src`.
    unsafe {
        let lane = if dst.len() < 2 * BLOCK {
            copy_fold_short(src, dst, copied, front)
        } else if fold == Fold::Wide {
            wide::copy_fold(src, dst, copied, front)
        } else {
            copy_fold_long(src, dst, copied, front)
        };
        reduce(lane)
    }
}

/// Lane `at` of the buffer: from `dst` if the caller copied it already (under `copied`), else
/// read from `src` once and stored to `dst`.
///
/// # Safety
/// `at + 16` bytes from `src` may be read (16-aligned), and `dst` is that long.
#[target_feature(enable = "pclmulqdq,avx")]
unsafe fn take(src: *const u8, dst: &mut [u8], at: usize, copied: usize) -> __m128i {
    assert!(at + LANE <= dst.len());
    if at < copied {
        // SAFETY: within `dst` (asserted).
        return unsafe { load(dst, at, 0) };
    }
    // SAFETY: aligned and readable (the caller's promise); a volatile load reads each byte
    // once, whatever the other process writes; the store is within `dst` (asserted).
    unsafe {
        let v = std::ptr::read_volatile(src.add(at).cast::<__m128i>());
        _mm_storeu_si128(dst.as_mut_ptr().add(at).cast(), v);
        v
    }
}

/// The lane at `at` (inside the first block, any offset) changed by `front`.
#[target_feature(enable = "pclmulqdq,avx")]
unsafe fn fronted(v: __m128i, front: &Front, at: usize) -> __m128i {
    assert!(at + LANE <= FRONT_LEN);
    // SAFETY: within the front's tables (asserted).
    unsafe {
        let kept = _mm_and_si128(v, load(&front.keep, at, 0));
        _mm_xor_si128(
            _mm_or_si128(kept, load(&front.or, at, 0)),
            load(&front.xor, at, 0),
        )
    }
}

/// The buffer's last partial lane (from the copy, all of it written) folded into `acc`, the
/// fold of its whole lanes; changed by `front` where it reaches into the first block.
#[target_feature(enable = "pclmulqdq,avx")]
unsafe fn fold_copy_tail(acc: __m128i, dst: &[u8], front: &Front) -> __m128i {
    let n = dst.len();
    let r = n % LANE;
    if r == 0 {
        return acc;
    }
    assert!(n > LANE);
    // SAFETY: the buffer's last 16 bytes (it is longer than a lane); the front's tables at
    // their offset where it is inside them; the features are this function's.
    unsafe {
        let last = load(dst, n - LANE, 0);
        let last = if n <= FRONT_LEN {
            fronted(last, front, n - LANE)
        } else {
            last
        };
        fold_last(acc, last, r)
    }
}

/// [`copy_fold`] of a buffer shorter than two blocks (a small message's frame, an ACK): lane
/// by lane, the lanes the caller copied from the copy, the others read once and stored.
///
/// # Safety
/// As [`copy_fold`]'s.
#[target_feature(enable = "pclmulqdq,avx")]
unsafe fn copy_fold_short(src: *const u8, dst: &mut [u8], copied: usize, front: &Front) -> __m128i {
    let n = dst.len();
    let whole = n / LANE * LANE;
    assert!(copied >= LANE && copied <= whole && whole <= 2 * BLOCK);
    let k = constants(FOLD_LANE);
    // SAFETY: every lane below `whole` is within `dst` and `src`'s `n` bytes (16-aligned:
    // the source is 64-aligned); the features are this function's.
    unsafe {
        let mut acc = fronted(load(dst, 0, 0), front, 0);
        let mut at = LANE;
        while at < copied {
            acc = fold_into(acc, k, fronted(load(dst, at, 0), front, at));
            at += LANE;
        }
        let to = dst.as_mut_ptr();
        while at < whole {
            let v = std::ptr::read_volatile(src.add(at).cast::<__m128i>());
            _mm_storeu_si128(to.add(at).cast(), v);
            let v = if at < BLOCK { fronted(v, front, at) } else { v };
            acc = fold_into(acc, k, v);
            at += LANE;
        }
        copy_short(src.add(whole), &mut dst[whole..]);
        fold_copy_tail(acc, dst, front)
    }
}

/// The eight lanes of the first block, changed by `front`.
#[target_feature(enable = "pclmulqdq,avx")]
unsafe fn first_block(
    src: *const u8,
    dst: &mut [u8],
    copied: usize,
    front: &Front,
) -> [__m128i; 8] {
    // SAFETY: the block is within `dst.len()` (two blocks at least, the callers'); the
    // features are this function's.
    std::array::from_fn(|i| unsafe { fronted(take(src, dst, LANE * i, copied), front, LANE * i) })
}

/// The lanes past the last whole block (`from` on) folded onto `acc` one by one, then the
/// last partial lane.
#[target_feature(enable = "pclmulqdq,avx")]
unsafe fn copy_fold_rest(
    mut acc: __m128i,
    src: *const u8,
    dst: &mut [u8],
    from: usize,
    front: &Front,
) -> __m128i {
    let whole = dst.len() / LANE * LANE;
    let k = constants(FOLD_LANE);
    // SAFETY: whole lanes within `dst.len()`, then the bytes past them.
    unsafe {
        let mut at = from;
        while at < whole {
            acc = fold_into(acc, k, take(src, dst, at, 0));
            at += LANE;
        }
        copy_short(src.add(whole), &mut dst[whole..]);
        fold_copy_tail(acc, dst, front)
    }
}

/// [`copy_fold`] of two blocks or more by the narrow fold: eight lanes a block.
///
/// # Safety
/// As [`copy_fold`]'s.
#[target_feature(enable = "pclmulqdq,avx")]
unsafe fn copy_fold_long(src: *const u8, dst: &mut [u8], copied: usize, front: &Front) -> __m128i {
    let blocks_end = dst.len() / BLOCK * BLOCK;
    let k = constants(FOLD_BLOCK);
    // SAFETY: whole blocks within `dst.len()`; the features are this function's.
    unsafe {
        let mut lanes = first_block(src, dst, copied, front);
        let mut at = BLOCK;
        while at < blocks_end {
            for (i, lane) in lanes.iter_mut().enumerate() {
                *lane = fold_into(*lane, k, take(src, dst, at + LANE * i, 0));
            }
            at += BLOCK;
        }
        copy_fold_rest(merge(lanes), src, dst, blocks_end, front)
    }
}

#[cfg(rox_wide_fold)]
#[allow(clippy::incompatible_msrv)]
mod wide {
    use std::arch::x86_64::*;

    use super::super::{BLOCK, FOLD_BLOCK};
    use super::{constants, copy_fold_rest, first_block, merge, Front};

    /// [`super::copy_fold_long`], four lanes to a register: each 64 bytes read with one
    /// volatile load.
    ///
    /// # Safety
    /// As [`super::copy_fold`]'s, and the CPU has AVX-512F and VPCLMULQDQ.
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    pub(super) unsafe fn copy_fold(
        src: *const u8,
        dst: &mut [u8],
        copied: usize,
        front: &Front,
    ) -> __m128i {
        let blocks_end = dst.len() / BLOCK * BLOCK;
        assert!(blocks_end >= BLOCK && (src as usize) % 64 == 0);
        // SAFETY: AVX-512F implies AVX and VPCLMULQDQ implies PCLMULQDQ; the first block is
        // within `dst.len()`.
        let first = unsafe { first_block(src, dst, copied, front) };
        let mut firsts = [0u8; BLOCK];
        for (i, lane) in first.iter().enumerate() {
            // SAFETY: lane i's 16 bytes of the 128.
            unsafe { _mm_storeu_si128(firsts.as_mut_ptr().add(16 * i).cast(), *lane) };
        }
        // SAFETY: 64 bytes at 0 and 64 of the 128.
        let (mut low, mut high) = unsafe {
            (
                _mm512_loadu_si512(firsts.as_ptr().cast()),
                _mm512_loadu_si512(firsts.as_ptr().add(64).cast()),
            )
        };
        let k = _mm512_broadcast_i32x4(constants(FOLD_BLOCK));
        let on = |lane: __m512i, next: __m512i| {
            let a = _mm512_clmulepi64_epi128::<0x00>(lane, k);
            let b = _mm512_clmulepi64_epi128::<0x11>(lane, k);
            _mm512_ternarylogic_epi64::<0x96>(a, b, next)
        };
        // The 64 bytes at `at`, read once and stored to the copy.
        let mut take = |at: usize| {
            assert!(at + 64 <= dst.len());
            // SAFETY: 64-aligned (the source is, `at` is a multiple of 64) and readable (the
            // caller's promise); the store is within `dst` (asserted).
            unsafe {
                let v = std::ptr::read_volatile(src.add(at).cast::<__m512i>());
                _mm512_storeu_si512(dst.as_mut_ptr().add(at).cast(), v);
                v
            }
        };
        for at in (BLOCK..blocks_end).step_by(BLOCK) {
            low = on(low, take(at));
            high = on(high, take(at + 64));
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
        // SAFETY: the narrow fold's features are implied (above); the rest is within
        // `dst.len()`.
        unsafe { copy_fold_rest(merge(lanes), src, dst, blocks_end, front) }
    }
}

/// What the module above is on compilers without its intrinsics: never called.
#[cfg(not(rox_wide_fold))]
mod wide {
    use std::arch::x86_64::__m128i;

    use super::Front;

    /// Never called (the wide fold is never available).
    ///
    /// # Safety
    /// None; it panics.
    pub(super) unsafe fn copy_fold(_: *const u8, _: &mut [u8], _: usize, _: &Front) -> __m128i {
        unreachable!("the wide fold needs the AVX-512 intrinsics of Rust 1.89")
    }
}

#[cfg(test)]
mod tests;
