//! Random publisher/subscriber operations checked against a VecDeque oracle.
//! The scenario and its checks: `shmlog::fuzz::ops_oracle` (src/fuzz.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shmlog::fuzz::ops_oracle(data));
