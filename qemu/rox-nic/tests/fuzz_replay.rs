//! Regression replay of the fuzz targets on stable Rust: every seed, every corpus file
//! (`fuzz/corpus/<target>/`) and every kept crash input (`fuzz/regressions/<target>/`) goes
//! through the same function libFuzzer calls (rox_nic::fuzzing). A failure names the file.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use rox_nic::fuzzing::{seeds, Target, TARGETS};

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .map(|e| e.expect("read corpus directory").path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// Runs every input of `target`; answers (inputs run, failures with their names).
fn replay(target: &Target) -> (usize, Vec<String>) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut inputs: Vec<(String, Vec<u8>)> = seeds(target.name)
        .into_iter()
        .enumerate()
        .map(|(i, s)| (format!("seed {i}"), s))
        .collect();
    for kind in ["regressions", "corpus"] {
        for path in files(&fuzz.join(kind).join(target.name)) {
            let bytes = std::fs::read(&path).expect("read input");
            inputs.push((path.display().to_string(), bytes));
        }
    }
    let mut failed = Vec::new();
    for (name, bytes) in &inputs {
        if catch_unwind(AssertUnwindSafe(|| (target.run)(bytes))).is_err() {
            failed.push(name.clone());
        }
    }
    (inputs.len(), failed)
}

fn replay_target(name: &str) {
    let target = TARGETS
        .iter()
        .find(|t| t.name == name)
        .expect("a target of that name");
    let (ran, failed) = replay(target);
    println!("{name}: {ran} inputs replayed, {} failed", failed.len());
    assert!(ran > 0, "{name}: no input to replay");
    assert!(failed.is_empty(), "{name}: inputs that fail: {failed:#?}");
}

#[test]
fn every_target_is_replayed_here() {
    let mut names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    names.sort();
    assert_eq!(
        names,
        ["admin", "conversation", "frame", "gso", "rings", "wire"]
    );
}

#[test]
fn wire_corpus_and_crashes_replay() {
    replay_target("wire");
}

#[test]
fn admin_corpus_and_crashes_replay() {
    replay_target("admin");
}

#[test]
fn rings_corpus_and_crashes_replay() {
    replay_target("rings");
}

#[test]
fn frame_corpus_and_crashes_replay() {
    replay_target("frame");
}

#[test]
fn conversation_corpus_and_crashes_replay() {
    replay_target("conversation");
}

#[test]
fn gso_corpus_and_crashes_replay() {
    replay_target("gso");
}
