//! Fuzz target `journal`: the scenario and its properties are in `fuzz/src/journal.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shmlog_fuzz::journal(data));
