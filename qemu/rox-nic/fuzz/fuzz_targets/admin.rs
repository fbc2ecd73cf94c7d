//! cargo-fuzz target `admin`: the body is rox_nic::fuzzing::admin::run (see its docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rox_nic::fuzzing::admin::run(data));
