#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| picolease_core::fuzzing::lease_set::run(data));
