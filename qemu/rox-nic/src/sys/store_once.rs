//! [`store_once`], the copy into guest memory (which QEMU's vCPUs share) that stores each
//! byte exactly once, as a DMA engine does.

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

use vm_memory::volatile_memory::VolatileSlice;

#[cfg(target_arch = "x86_64")]
use super::wide;

/// Copies `src` into `dst` (of the same length; false, nothing written, if not) as a DMA
/// engine writes: every byte stored exactly once, in ascending address order (aligned 32-byte
/// stores on x86-64 with AVX, else 16-byte ones, aligned smaller ones around them and 8-byte
/// ones elsewhere, single bytes up to the first word and 4-, 2- and 1-byte ones after the last).
/// `memcpy` may store bytes twice (glibc copies 16..31 bytes as two overlapping 16-byte
/// stores, larger sizes with overlapping head and tail vectors): software that updates memory
/// as soon as it sees the device's bytes there — rsockets rewrites the target SGE a credit
/// WRITE placed, without waiting for the completion — would have its update undone by the
/// second store (the rsockets verification failure between two rox guests). Relaxed atomic
/// and volatile stores are stores the compiler may neither split, merge, repeat nor turn into
/// a `memcpy` call. One bounds check for the whole copy, none per word.
pub fn store_once(dst: &VolatileSlice<'_, ()>, src: &[u8]) -> bool {
    const WORD: usize = size_of::<u64>();
    if dst.len() != src.len() {
        return false;
    }
    let guard = dst.ptr_guard_mut();
    let first = guard.as_ptr();
    let n = src.len();
    let mut at = 0;
    // SAFETY: `dst` is `n` bytes of a live mapping (its guard keeps the pointer valid for this
    // call), so every byte at `first + i`, i < n, may be written; each store below is inside
    // [0, n) and aligned to its size (the checks before each loop; the tail's 4- and 2-byte
    // ones start word-aligned: every step after the first loop adds a multiple of 8,
    // debug-asserted there); the 32-byte ones only
    // with AVX, checked by `wide::available()`. Other parties (the guest)
    // touch this memory only concurrently as they do any DMA target, which atomic and
    // volatile stores tolerate (as vm-memory's own accessors).
    unsafe {
        let store_byte =
            |i: usize| AtomicU8::from_ptr(first.add(i)).store(src[i], Ordering::Relaxed);
        let store_word = |i: usize| {
            let value = u64::from_ne_bytes(src[i..i + WORD].try_into().expect("a word"));
            AtomicU64::from_ptr(first.add(i).cast::<u64>()).store(value, Ordering::Relaxed);
        };
        while at < n && (first as usize + at) % WORD != 0 {
            store_byte(at);
            at += 1;
        }
        // Under two vectors' worth left (a small payload, a CQE's 31-byte body): words and
        // the tail below, without the vector steps' checks (a CQE body cost ~128
        // instructions through them).
        #[cfg(target_arch = "x86_64")]
        if n - at >= 32 {
            // 8-aligned here: one word makes it 16-aligned (or leaves fewer than 16 bytes).
            use std::arch::x86_64::{__m128i, _mm_loadu_si128};
            const VEC: usize = size_of::<__m128i>();
            if n - at >= WORD && (first as usize + at) % VEC != 0 {
                store_word(at);
                at += WORD;
            }
            if wide::available() {
                // One 16-byte vector to 32-align, then 32-byte ones; the rest below.
                if n - at >= VEC && (first as usize + at) % wide::VEC != 0 {
                    let v = _mm_loadu_si128(src[at..at + VEC].as_ptr().cast());
                    std::ptr::write_volatile(first.add(at).cast::<__m128i>(), v);
                    at += VEC;
                }
                // 32-aligned here if a whole vector is left (the step above).
                if n - at >= wide::VEC {
                    at += wide::store_vectors(first.add(at), &src[at..]);
                }
            }
            // SSE2 is part of x86-64: no feature check needed. Four vectors a round, then
            // single ones (a tight loop: the bounds are the chunks').
            let mut to = first.add(at).cast::<__m128i>();
            let mut rounds = src[at..].chunks_exact(4 * VEC);
            for round in &mut rounds {
                for v in round.chunks_exact(VEC) {
                    std::ptr::write_volatile(to, _mm_loadu_si128(v.as_ptr().cast()));
                    to = to.add(1);
                }
            }
            let mut singles = rounds.remainder().chunks_exact(VEC);
            for v in &mut singles {
                std::ptr::write_volatile(to, _mm_loadu_si128(v.as_ptr().cast()));
                to = to.add(1);
            }
            at = n - singles.remainder().len();
        }
        while n - at >= WORD {
            store_word(at);
            at += WORD;
        }
        // Under a word left, `at` word-aligned (the steps above only add whole words to the
        // alignment the first loop made) or nothing left: a half word, a quarter, a byte.
        debug_assert!(at == n || (first as usize + at) % WORD == 0);
        if n - at >= 4 {
            let value = u32::from_ne_bytes(src[at..at + 4].try_into().expect("4 bytes"));
            AtomicU32::from_ptr(first.add(at).cast::<u32>()).store(value, Ordering::Relaxed);
            at += 4;
        }
        if n - at >= 2 {
            let value = u16::from_ne_bytes(src[at..at + 2].try_into().expect("2 bytes"));
            AtomicU16::from_ptr(first.add(at).cast::<u16>()).store(value, Ordering::Relaxed);
            at += 2;
        }
        if at < n {
            store_byte(at);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_once_copies_exactly_its_slice_or_nothing_when_lengths_differ() {
        let src: Vec<u8> = (1..=200).collect();
        // Every alignment of the first byte (the 8-, 16- and 32-byte steps), short and long.
        // And every length under 40 at every alignment: the short copies skip the vector
        // steps and end in 4-, 2- and 1-byte stores.
        let cases = (0..32)
            .map(|at| (at, 200 - at))
            .chain([(3, 61), (7, 1), (5, 0)])
            .chain((0..32).flat_map(|at| (0..40).map(move |len| (at, len))));
        for (at, len) in cases {
            let mut mem = [0u8; 256];
            assert!(store_once(
                &VolatileSlice::from(&mut mem[at..at + len]),
                &src[..len]
            ));
            assert_eq!(&mem[at..at + len], &src[..len], "{at}+{len}");
            assert!(mem[..at].iter().chain(&mem[at + len..]).all(|&b| b == 0));
        }
        let mut mem = [0u8; 16];
        assert!(!store_once(&VolatileSlice::from(&mut mem[..8]), &src[..9]));
        assert_eq!(mem, [0; 16], "a length mismatch writes nothing");
    }
}
