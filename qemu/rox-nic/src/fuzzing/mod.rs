//! The bodies of rox-nic's fuzz targets: each a plain function over bytes that enters the
//! device through a public entry point and panics when an invariant breaks. The cargo-fuzz
//! crate (`fuzz/`) hands them libFuzzer's inputs; `tests/fuzz_replay.rs` replays every
//! corpus file and every kept crash input through the same functions on stable Rust.
//! docs/fuzzing.md says how to run them.

pub mod admin;
pub mod conversation;
pub mod engine_kit;
pub mod frame;
pub mod frame_fold;
pub mod gso;
pub mod rings;
pub mod wire;

/// One fuzz target: its name (the directory of its corpus under `fuzz/corpus/`) and body.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every target, in the order `make fuzz` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "wire",
        run: wire::run,
    },
    Target {
        name: "admin",
        run: admin::run,
    },
    Target {
        name: "rings",
        run: rings::run,
    },
    Target {
        name: "frame",
        run: frame::run,
    },
    Target {
        name: "conversation",
        run: conversation::run,
    },
    Target {
        name: "gso",
        run: gso::run,
    },
];

/// Seed inputs of target `name`, built from the same code paths the host tests use.
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    match name {
        "wire" => wire::seeds(),
        "admin" => admin::seeds(),
        "rings" => rings::seeds(),
        "frame" => frame::seeds(),
        "conversation" => conversation::seeds(),
        "gso" => gso::seeds(),
        _ => Vec::new(),
    }
}

/// `count` inputs of `len` bytes each, for a target that reads its input as a stream of
/// choices: byte `j` of input `i` is a multiplicative hash of `j` (times `mul`, shifted right
/// by `shift`) xor `i * salt`, so the choices vary along an input and between inputs.
fn hashed_inputs(count: u8, len: u32, mul: u32, shift: u32, salt: u8) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| {
            (0..len)
                .map(|j| (j.wrapping_mul(mul) >> shift) as u8 ^ i.wrapping_mul(salt))
                .collect()
        })
        .collect()
}
