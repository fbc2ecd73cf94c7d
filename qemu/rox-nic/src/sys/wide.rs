//! 32-byte (AVX) volatile loads and stores, on x86-64 CPUs that have them: half the
//! instructions of 16-byte ones per byte moved ([`super::shm::PeerBytes::copy_to`] and
//! [`super::store_once::store_once`]).

use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_storeu_si256};

/// Bytes per vector (and the alignment the volatile accesses need).
pub(super) const VEC: usize = size_of::<__m256i>();

pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx")
}

/// Copies the whole vectors of `dst.len()` bytes from `from` into `dst`, each read with
/// one volatile load; returns the bytes copied.
///
/// # Safety
/// The CPU has AVX ([`available`]); `from` is 32-aligned and `dst.len()` bytes from it
/// may be read.
#[target_feature(enable = "avx")]
pub(super) unsafe fn load_vectors(from: *const u8, dst: &mut [u8]) -> usize {
    let mut from = from.cast::<__m256i>();
    let len = dst.len();
    let mut chunks = dst.chunks_exact_mut(VEC);
    for chunk in &mut chunks {
        // SAFETY: `from` stays 32-aligned and within the bytes the caller vouches for
        // (one vector per whole chunk of `dst`); `chunk` is 32 bytes of `dst`.
        unsafe {
            _mm256_storeu_si256(chunk.as_mut_ptr().cast(), std::ptr::read_volatile(from));
            from = from.add(1);
        }
    }
    len - chunks.into_remainder().len()
}

/// Stores the whole vectors of `src` at `to`, each with one volatile store, in ascending
/// order; returns the bytes stored.
///
/// # Safety
/// The CPU has AVX ([`available`]); `to` is 32-aligned and `src.len()` bytes from it may
/// be written.
#[target_feature(enable = "avx")]
pub(super) unsafe fn store_vectors(to: *mut u8, src: &[u8]) -> usize {
    let mut to = to.cast::<__m256i>();
    let mut chunks = src.chunks_exact(VEC);
    for chunk in &mut chunks {
        // SAFETY: `to` stays 32-aligned and within the bytes the caller vouches for (one
        // vector per whole chunk of `src`); `chunk` is 32 bytes of `src`.
        unsafe {
            std::ptr::write_volatile(to, _mm256_loadu_si256(chunk.as_ptr().cast()));
            to = to.add(1);
        }
    }
    src.len() - chunks.remainder().len()
}
