//! Fuzz target `doorbell`: the scenario and its properties are in `fuzz/src/doorbell.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shmlog_fuzz::doorbell(data));
