//! cargo-fuzz target `conversation`: the body is rox_nic::fuzzing::conversation::run (see its docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rox_nic::fuzzing::conversation::run(data));
