//! Fuzz target `bridge_status`: the scenario and its properties are in `fuzz/src/bridge_status.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shmlog_fuzz::bridge_status(data));
