//! Whether the compiler has the intrinsics of the ICRC's wide fold (`sys::crc32`, AVX-512F and
//! VPCLMULQDQ): stable from Rust 1.89, but nightlies numbered 1.89 from before their
//! stabilisation lack them, so the version alone cannot say. A probe that uses each of them as
//! the fold does is type-checked by this build's own compiler, target and flags; where it
//! passes, cfg `rox_wide_fold` compiles the wide fold in (else only the narrow one is).

use std::env;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

/// Every intrinsic and target feature `sys::crc32`'s `x86::wide` uses.
const PROBE: &str = r#"
use std::arch::x86_64::*;
pub fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("vpclmulqdq")
}
#[target_feature(enable = "avx512f,vpclmulqdq")]
pub unsafe fn fold(run: &[u8; 64], k: __m128i) -> __m128i {
    let lane = unsafe { _mm512_loadu_si512(run.as_ptr().cast()) };
    let k = _mm512_broadcast_i32x4(k);
    let a = _mm512_clmulepi64_epi128::<0x00>(lane, k);
    let b = _mm512_clmulepi64_epi128::<0x11>(lane, k);
    _mm512_extracti32x4_epi32::<3>(_mm512_ternarylogic_epi64::<0x96>(a, b, lane))
}
"#;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(rox_wide_fold)");
    println!("cargo::rerun-if-changed=build.rs");
    if env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("x86_64") {
        return;
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let probe = out.join("wide_fold_probe.rs");
    // Where the probe cannot even be written, the narrow fold is the safe answer.
    if fs::write(&probe, PROBE).is_err() {
        return;
    }
    let mut rustc = Command::new(env::var_os("RUSTC").expect("cargo sets RUSTC"));
    rustc
        .args([
            "--crate-type=lib",
            "--crate-name=wide_fold_probe",
            "--emit=metadata",
        ])
        .args(["--edition=2021", "--cap-lints=allow", "--target"])
        .arg(env::var("TARGET").expect("cargo sets TARGET"))
        .arg("--out-dir")
        .arg(&out);
    // The build's own flags (a target CPU, say), as cargo hands them to build scripts.
    if let Ok(flags) = env::var("CARGO_ENCODED_RUSTFLAGS") {
        rustc.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    }
    let compiled = rustc
        .arg(&probe)
        .output()
        .is_ok_and(|done| done.status.success());
    if compiled {
        println!("cargo::rustc-cfg=rox_wide_fold");
    }
}
