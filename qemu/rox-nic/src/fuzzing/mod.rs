//! The bodies of rox-nic's fuzz targets: each a plain function over bytes that enters the
//! device through a public entry point and panics when an invariant breaks. The cargo-fuzz
//! crate (`fuzz/`) hands them libFuzzer's inputs; `tests/fuzz_replay.rs` replays every
//! corpus file and every kept crash input through the same functions on stable Rust.
//! docs/fuzzing.md says how to run them.

pub mod admin;
pub mod conversation;
pub mod engine_kit;
pub mod frame;
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
