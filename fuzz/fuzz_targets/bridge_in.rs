//! Fuzz target `bridge_in`: the scenario and its properties are in `fuzz/src/bridge_in.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shmlog_fuzz::bridge_in(data));
