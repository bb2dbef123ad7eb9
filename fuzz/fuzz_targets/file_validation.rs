//! Fuzz target `file_validation`: the scenario and its properties are in `fuzz/src/file_validation.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shmlog_fuzz::file_validation(data));
