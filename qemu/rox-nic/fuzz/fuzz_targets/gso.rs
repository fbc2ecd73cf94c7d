//! cargo-fuzz target `gso`: the body is rox_nic::fuzzing::gso::run (see its docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rox_nic::fuzzing::gso::run(data));
