//! The term reader and scanner over hostile term bytes.
//! The scenario and its checks: `shmlog::fuzz::term_reader` (src/fuzz.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shmlog::fuzz::term_reader(data));
