//! Fuzz target `term_reader`: the scenario and its properties are in `fuzz/src/term_reader.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shmlog_fuzz::term_reader(data));
