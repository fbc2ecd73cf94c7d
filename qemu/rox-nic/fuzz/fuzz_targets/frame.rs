//! cargo-fuzz target `frame`: the body is rox_nic::fuzzing::frame::run (see its docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rox_nic::fuzzing::frame::run(data));
