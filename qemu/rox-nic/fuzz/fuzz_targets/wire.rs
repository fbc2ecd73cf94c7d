//! cargo-fuzz target `wire`: the body is rox_nic::fuzzing::wire::run (see its docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rox_nic::fuzzing::wire::run(data));
