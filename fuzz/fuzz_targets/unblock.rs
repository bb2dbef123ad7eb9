//! Fuzz target `unblock`: the scenario and its properties are in `fuzz/src/unblock.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shmlog_fuzz::unblock(data));
