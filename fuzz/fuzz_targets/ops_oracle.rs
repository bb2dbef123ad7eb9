//! Fuzz target `ops_oracle`: the scenario and its properties are in `fuzz/src/ops_oracle.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shmlog_fuzz::ops_oracle(data));
