//! The fold fused with a copy out of memory another process may write (a cable's receive
//! ring, `sys::shm::PeerBytes::copy_folding`): each 64 bytes are read from the source once,
//! with a volatile load, stored to the copy and folded from the same register. So the CRC is
//! the copy's, whatever the other process writes meanwhile, and the copy is not read again
//! for it (the second pass over a received frame's bytes that checking its ICRC was).
//!
//! Only where the fold is wide (AVX-512F and VPCLMULQDQ, `x86::wide`) and the copy two
//! blocks or more (a 4 KiB frame): there one 64-byte load, store and fold replace the copy's
//! two 32-byte loads and stores and the fold's load. Lane by lane (16 bytes) a fused copy
//! takes more instructions than a copy and a fold apart (measured: 2,942 against 1,785 a
//! 4 KiB frame under callgrind, and more for a small frame): the fold's loads are operands of
//! its XORs, and the copy's vectors are wider.
//!
//! The caller copies the first lanes itself, to see which run to fold ([`Front`]): they are
//! folded from the copy. The lanes are the buffer's own (the source is aligned), not the
//! run's: the run starts [`Front::at`] bytes in, and the first block's lanes are changed by
//! the [`Front`] as they are loaded. Whole blocks past the first fold four lanes to a
//! register, the lanes past the last whole block one by one, and the buffer's last partial
//! lane is read back from the copy (own memory) and folded in by shuffles
//! (`x86::fold_last`).

// Without the wide fold's intrinsics (`rox_wide_fold`: Rust 1.89) nothing is fused, and the
// narrow helpers below are unused.
#![cfg_attr(not(rox_wide_fold), allow(dead_code, unused_imports))]

use std::arch::x86_64::*;

use super::x86::{constants, fold_into, fold_last, load, merge, reduce};
use super::{Front, BLOCK, FOLD_LANE};
use crate::sys::shm::copy_short;

/// Bytes of a lane.
const LANE: usize = 16;

/// Whether [`copy_fold`] takes a copy of `len` bytes from `src`: a CPU with the wide fold, two
/// blocks at least, and a source 64-aligned (for the loads).
pub(in crate::sys) fn fuses(src: *const u8, len: usize) -> bool {
    (src as usize) % 64 == 0 && super::copy_folds(len)
}

/// Copies `dst.len()` bytes from `src` into `dst` and returns what `front.update(dst)` would
/// (the CRC state of the run in the copy), folding each 64 bytes as they are copied. The first
/// `copied` bytes (whole lanes, a block at most) are already in `dst` (the caller looked at
/// them to choose `front`): they are folded from there, never read from `src` again.
///
/// # Safety
/// [`fuses`] holds for `src` and `dst.len()`; `dst.len()` bytes from `src` may be read
/// (another process may write them meanwhile).
pub(in crate::sys) unsafe fn copy_fold(
    src: *const u8,
    dst: &mut [u8],
    copied: usize,
    front: &Front,
) -> u32 {
    assert!(copied % LANE == 0 && copied <= BLOCK && dst.len() >= 2 * BLOCK);
    assert!(
        fuses(src, dst.len()),
        "a fused copy on a CPU without the wide fold"
    );
    // SAFETY: the CPU has the features and the source its alignment (asserted); the fold
    // reads only within `dst.len()` bytes of `src`.
    unsafe { reduce(wide::copy_fold(src, dst, copied, front)) }
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

/// The eight lanes of the first block, each changed by `front`.
#[target_feature(enable = "pclmulqdq,avx")]
unsafe fn first_block(
    src: *const u8,
    dst: &mut [u8],
    copied: usize,
    front: &Front,
) -> [__m128i; 8] {
    std::array::from_fn(|i| {
        let at = LANE * i;
        // SAFETY: the block is within `dst.len()` (two blocks at least, the caller's) and
        // the front's tables; the features are this function's.
        unsafe {
            let kept = _mm_and_si128(take(src, dst, at, copied), load(&front.keep, at, 0));
            _mm_xor_si128(
                _mm_or_si128(kept, load(&front.or, at, 0)),
                load(&front.xor, at, 0),
            )
        }
    })
}

/// The lanes past the last whole block (`from` on) folded onto `acc` one by one, then the
/// buffer's last partial lane (from the copy, all of it written; past the first block, so
/// the front changes none of it).
#[target_feature(enable = "pclmulqdq,avx")]
unsafe fn copy_fold_rest(mut acc: __m128i, src: *const u8, dst: &mut [u8], from: usize) -> __m128i {
    let n = dst.len();
    let whole = n / LANE * LANE;
    let k = constants(FOLD_LANE);
    // SAFETY: whole lanes within `dst.len()`, then the bytes past them (`src + whole` is
    // 16-aligned); the last 16 bytes of the copy; the features are this function's.
    unsafe {
        let mut at = from;
        while at < whole {
            acc = fold_into(acc, k, take(src, dst, at, 0));
            at += LANE;
        }
        copy_short(src.add(whole), &mut dst[whole..]);
        match n % LANE {
            0 => acc,
            r => fold_last(acc, load(dst, n - LANE, 0), r),
        }
    }
}

#[cfg(rox_wide_fold)]
#[allow(clippy::incompatible_msrv)]
mod wide {
    use std::arch::x86_64::*;

    use super::super::x86::wide::lanes;
    use super::super::{BLOCK, FOLD_BLOCK};
    use super::{constants, copy_fold_rest, first_block, merge, Front};

    /// [`super::copy_fold`]: four lanes to a register, each 64 bytes read with one volatile
    /// load.
    ///
    /// # Safety
    /// As [`super::copy_fold`]'s.
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
        // SAFETY: the narrow fold's features are implied (above); the rest is within
        // `dst.len()`.
        unsafe { copy_fold_rest(merge(lanes(low, high)), src, dst, blocks_end) }
    }
}

/// What the module above is on compilers without its intrinsics: never called.
#[cfg(not(rox_wide_fold))]
mod wide {
    use std::arch::x86_64::__m128i;

    use super::Front;

    /// Never called ([`super::fuses`] is false: the wide fold is never available).
    ///
    /// # Safety
    /// None; it panics.
    pub(super) unsafe fn copy_fold(_: *const u8, _: &mut [u8], _: usize, _: &Front) -> __m128i {
        unreachable!("the wide fold needs the AVX-512 intrinsics of Rust 1.89")
    }
}

#[cfg(test)]
mod tests;
