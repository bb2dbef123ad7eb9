//! Log and reader-slot validation over hostile bytes, sizes and files.
//! The scenario and its checks: `shmlog::fuzz::file_validation` (src/fuzz.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shmlog::fuzz::file_validation(data));
