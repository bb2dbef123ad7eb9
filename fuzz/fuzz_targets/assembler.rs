//! FragmentAssembler over arbitrary fragment sequences, against a reference model.
//! The scenario and its checks: `shmlog::fuzz::assembler` (src/fuzz.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shmlog::fuzz::assembler(data));
