//! cargo-fuzz target `rings`: the body is rox_nic::fuzzing::rings::run (see its docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rox_nic::fuzzing::rings::run(data));
