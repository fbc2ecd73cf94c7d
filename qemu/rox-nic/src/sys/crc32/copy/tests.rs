//! The fused copy and fold against the copy and the fold made apart, at every length, front
//! and path, and under a writer that changes the source while it is copied.

use super::super::{wide_available, Front, ORED_LEN};
use super::*;
use crate::sys::shm::{Copied, PeerBytes, SharedMapping};
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The CRC of `buffer[at..]` from `state` with `ored` over its front, by crc32fast over a
/// masked copy (no fold of this module's).
fn reference(at: usize, state: u32, ored: &[u8; ORED_LEN], buffer: &[u8]) -> u32 {
    let mut run = buffer[at.min(buffer.len())..].to_vec();
    for (b, o) in run.iter_mut().zip(ored) {
        *b |= o;
    }
    let mut h = crc32fast::Hasher::new_with_initial(state);
    h.update(&run);
    h.finalize()
}

/// A mask of a few bytes of ones within the first `room` bytes.
fn mask(rng: &mut impl Rng, room: usize) -> [u8; ORED_LEN] {
    let mut ored = [0u8; ORED_LEN];
    for _ in 0..9 {
        ored[rng.gen_range(0..room)] = if rng.gen() { 0xff } else { 0x0f };
    }
    ored
}

/// `bytes` in a page-aligned shared mapping, as the peer's buffer of a cable.
fn peer_bytes(bytes: &[u8]) -> (Arc<SharedMapping>, PeerBytes) {
    let map =
        Arc::new(SharedMapping::anonymous(bytes.len().max(1).next_multiple_of(4096)).unwrap());
    assert!(map.write(0, bytes));
    let peer = PeerBytes::carve(&map, 0, bytes.len().max(1), 1)
        .unwrap()
        .pop()
        .unwrap();
    (map, peer)
}

/// Every length 0-599 and around 1, 4 and 8 KiB, fronts at 0, 14 (a frame's IP packet) and
/// anywhere in the first lane, from any state, after none, 4 or 8 lanes the caller copied:
/// the copy copies every byte, and where it is fused (the wide fold, two blocks or more)
/// gives crc32fast's CRC of the copy, directly and through `PeerBytes::copy_folding`.
#[test]
fn the_fused_copy_gives_the_copy_and_its_crc_for_every_length_and_front() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(171);
    let bytes: Vec<u8> = (0..9000).map(|_| rng.gen()).collect();
    let (map, peer) = peer_bytes(&bytes);
    let src = map.as_ptr().cast_const();
    let lengths = (0..600).chain([1023, 1024, 1025, 4095, 4096, 4097, 4108, 4110, 8192, 9000]);
    let (mut fused, mut copies) = (0, 0);
    for len in lengths {
        for at in [14, 0, rng.gen_range(0..16)] {
            let ored = mask(&mut rng, BLOCK - at);
            let state = rng.gen();
            let front = Front::new(at, state, &ored);
            let want = reference(at, state, &ored, &bytes[..len]);
            assert_eq!(
                front.update(&bytes[..len]),
                want,
                "{len} B from {at}: the fold"
            );
            let mut dst = vec![0xa5; len];
            let copied = peer.copy_folding(&mut dst, |first| {
                assert_eq!(first, &bytes[..crate::sys::shm::PEEK_LEN]);
                Some(&front)
            });
            assert_eq!(dst, bytes[..len], "{len} B copied");
            copies += 1;
            if !fuses(src, len) {
                assert_eq!(copied, Copied::Plain, "{len} B");
                continue;
            }
            fused += 1;
            assert_eq!(copied, Copied::Folded(want), "{len} B from {at}");
            for copied in [0, 64, BLOCK] {
                let mut dst = vec![0x5a; len];
                dst[..copied].copy_from_slice(&bytes[..copied]);
                // SAFETY: `fuses` holds; the mapping holds `len` bytes from `src`.
                let got = unsafe { copy_fold(src, &mut dst, copied, &front) };
                assert_eq!(got, want, "{len} B from {at}, {copied} copied");
                assert_eq!(dst, bytes[..len], "{len} B copied, {copied} copied");
            }
        }
    }
    eprintln!(
        "fused copy: {fused} of {copies} copies fused (wide fold: {})",
        wide_available()
    );
    assert_eq!(fused > 0, wide_available());
    assert_eq!(
        peer.copy_folding(&mut vec![0; 9001], |_| unreachable!()),
        Copied::Refused
    );
}

/// A lane the caller copied is folded from the copy, never read from the source again: with
/// the source changed since, the CRC is still the copy's.
#[test]
fn the_lanes_the_caller_copied_are_folded_from_the_copy() {
    let bytes: Vec<u8> = (0..4100u32).map(|i| (i * 13 + 1) as u8).collect();
    let (map, _peer) = peer_bytes(&bytes);
    if !fuses(map.as_ptr(), bytes.len()) {
        return;
    }
    let front = Front::new(14, 0x1234_5678, &[0; ORED_LEN]);
    for (len, copied) in [(256, 32), (299, BLOCK), (4100, 64)] {
        let mut dst = vec![0; len];
        dst[..copied].copy_from_slice(&bytes[..copied]);
        assert!(
            map.write(0, &vec![0xee; copied]),
            "the peer rewrites what was copied"
        );
        // SAFETY: `fuses` holds; the mapping holds `len` bytes.
        let got = unsafe { copy_fold(map.as_ptr(), &mut dst, copied, &front) };
        assert_eq!(dst, bytes[..len]);
        assert_eq!(got, front.update(&dst), "{len} B");
        assert!(map.write(0, &bytes[..copied]));
    }
}

/// A peer that writes the bytes while they are copied: every copy's CRC is the CRC of the
/// copy it made (old bytes, new ones or a mix), never of bytes it did not keep. (Whether the
/// writer hit a copy is up to the scheduler; the count is printed, not asserted.)
#[test]
fn a_frame_changed_while_it_is_copied_gets_the_crc_of_the_copy() {
    let len = 4108;
    let old = vec![0x11u8; len];
    let (map, peer) = peer_bytes(&old);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (map, stop) = (map.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let at = (i * 97) % (len - 64);
                map.write(at, &[(i as u8) | 0x80; 64]);
                i += 1;
            }
        })
    };
    let front = Front::new(14, 0xdead_beef, &[0; ORED_LEN]);
    let mut changed = 0;
    for n in (0..3000).map(|i| [300, 1100, len][i % 3]) {
        let mut dst = vec![0; n];
        match peer.copy_folding(&mut dst, |_| Some(&front)) {
            Copied::Folded(got) => assert_eq!(got, front.update(&dst), "{n} B: the copy's CRC"),
            copied => assert!(!fuses(map.as_ptr(), n) && copied == Copied::Plain, "{n} B"),
        }
        changed += usize::from(dst != old[..n]);
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    eprintln!("changed while copied: {changed} of 3000 copies saw the writer");
}
