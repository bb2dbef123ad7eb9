//! Fuzz target `assembler`: the scenario and its properties are in `fuzz/src/assembler.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shmlog_fuzz::assembler(data));
