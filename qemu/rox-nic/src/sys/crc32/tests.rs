use super::*;
use rand::{Rng, SeedableRng};

fn reference(state: u32, bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(state);
    h.update(bytes);
    h.finalize()
}

/// `run` with `ored` ORed over its front, as [`update_ored`] hashes it.
fn ored_copy(run: &[u8], ored: &[u8; ORED_LEN]) -> Vec<u8> {
    let mut bytes = run.to_vec();
    for (b, o) in bytes.iter_mut().zip(ored) {
        *b |= o;
    }
    bytes
}

#[test]
fn x_pow_mod_p_reduces_by_the_polynomial() {
    assert_eq!(x_pow_mod_p(0), 1);
    assert_eq!(x_pow_mod_p(31), 0x8000_0000);
    assert_eq!(x_pow_mod_p(32), POLY);
    assert_eq!(x_pow_mod_p(33), POLY << 1);
}

/// The constant form gives crc32fast's CRC (and after the ICRC's masked LRH the raw register
/// rdma_rxe starts from, 0xdebb20e3).
#[test]
fn the_bitwise_crc_is_crc32fast_s() {
    assert_eq!(update_bitwise(0, b"123456789"), 0xCBF4_3926);
    assert_eq!(!update_bitwise(0, &[0xff; 8]), 0xdebb_20e3);
    let mut rng = rand::rngs::StdRng::seed_from_u64(31);
    for len in 0..70 {
        let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        let state = rng.gen();
        assert_eq!(
            update_bitwise(state, &bytes),
            reference(state, &bytes),
            "{len} B"
        );
    }
}

/// `run` with `ored` over its front from `state` as crc32fast hashes it, by [`update_ored`]
/// and by each path that takes its length: the table, the short fold, the long fold (both
/// folds wherever the CPU has the wide one). Each fold must run wherever the CPU has it and
/// the length is its (else crc32fast would only be compared with itself). Returns whether a
/// fold ran.
fn check(state: u32, run: &[u8], ored: &[u8; ORED_LEN]) -> bool {
    let want = reference(state, &ored_copy(run, ored));
    let len = run.len();
    assert_eq!(update_ored(state, run, ored), want, "{len} B");
    assert_eq!(by_table(state, run, ored), want, "{len} B by the table");
    let long = fold_long(state, run, ored);
    let long_applies = len >= 2 * BLOCK;
    assert_eq!(
        long.is_some(),
        long_applies && fold_available(),
        "{len} B: the fold's path"
    );
    if let Some(crc) = long {
        assert_eq!(crc, want, "{len} B by the fold");
    }
    // Both folds wherever the CPU has the wide one (the narrow one is then not the default
    // path, and is still what callgrind and older compilers run).
    if wide_available() {
        let narrow = fold_long_by(false, state, run, ored);
        assert_eq!(narrow, long, "{len} B by the narrow fold");
        let wide = fold_long_by(true, state, run, ored);
        assert_eq!(wide, long, "{len} B by the wide fold");
    }
    let short = fold_short(state, run, ored);
    let short_applies = (SHORT_MIN..2 * BLOCK).contains(&len);
    assert_eq!(
        short.is_some(),
        short_applies && fold_available(),
        "{len} B: the short fold's path"
    );
    if let Some(crc) = short {
        assert_eq!(crc, want, "{len} B by the short fold");
    }
    long.is_some() || short.is_some()
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

/// A mask of `ones` random bytes set to ones (the ICRC's: a few whole bytes, one nibble).
fn random_mask(rng: &mut impl Rng, ones: usize) -> [u8; ORED_LEN] {
    let mut ored = [0u8; ORED_LEN];
    for _ in 0..ones {
        ored[rng.gen_range(0..ORED_LEN)] = if rng.gen() { 0xff } else { 0x0f };
    }
    ored
}

/// The standard check value, and every length 0-599 and around 1, 4 and 8 KiB from any state,
/// with no mask, a sparse one and one of all ones, as crc32fast computes them.
#[test]
fn the_fold_gives_crc32fast_s_crc_for_every_length_state_and_mask() {
    assert_eq!(update(0, b"123456789"), 0xCBF4_3926);
    let mut rng = rand::rngs::StdRng::seed_from_u64(32);
    let bytes: Vec<u8> = (0..9000).map(|_| rng.gen()).collect();
    let lengths = (0..600).chain([1023, 1024, 1025, 4095, 4096, 4097, 4108, 8192, 9000]);
    let masks = [NOTHING_ORED, random_mask(&mut rng, 9), [0xff; ORED_LEN]];
    let (mut runs, mut folded) = (0, 0);
    for len in lengths {
        for (state, ored) in [0, !0, rng.gen()].into_iter().zip(&masks) {
            let at = rng.gen_range(0..=bytes.len() - len);
            folded += usize::from(check(state, &bytes[at..at + len], ored));
            runs += 1;
        }
    }
    report_path("every length", folded, runs);
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

/// The ICRC runs of small messages past the masked LRH (an 8 B WRITE: 40 bytes of IPv4, UDP
/// and BTH, 24 of RETH and payload; an ACK: 40 and 4 of AETH; over IPv6 20 more; a bare BTH)
/// take the short fold where the CPU has it, and every bit of them counts, masked or not (a
/// masked bit is a one whatever it was: flipping it must not change the CRC).
#[test]
fn short_packets_fold_lane_by_lane_and_every_bit_counts() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(34);
    for len in [64, 44, 84, 40, SHORT_MIN, 17, 31, 2 * BLOCK - 1] {
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        let ored = random_mask(&mut rng, 9);
        let state = rng.gen();
        assert_eq!(check(state, &bytes, &ored), fold_available(), "{len} B");
        let crc = update_ored(state, &bytes, &ored);
        for bit in 0..len * 8 {
            bytes[bit / 8] ^= 1 << (bit % 8);
            let masked = ored.get(bit / 8).is_some_and(|o| o & (1 << (bit % 8)) != 0);
            let flipped = update_ored(state, &bytes, &ored);
            if masked {
                assert_eq!(flipped, crc, "{len} B, masked bit {bit}");
            } else {
                assert_ne!(flipped, crc, "{len} B, bit {bit}");
            }
            bytes[bit / 8] ^= 1 << (bit % 8);
        }
    }
}

/// One changed bit anywhere changes the CRC (each lane really counts), at lengths that end in
/// a partial lane and in whole ones.
#[test]
fn every_bit_of_a_long_run_counts() {
    for len in [4096, 4104, 4136] {
        let mut bytes = vec![0x5au8; len];
        let crc = update(0, &bytes);
        for at in (0..len).step_by(61).chain([len - 1]) {
            bytes[at] ^= 0x10;
            assert_ne!(update(0, &bytes), crc, "{len} B, byte {at}");
            check(0, &bytes, &NOTHING_ORED);
            bytes[at] ^= 0x10;
        }
    }
}
