//! The scenarios of shmlog's cargo-fuzz targets (`fuzz_targets/`), over the crate's internals as
//! `shmlog::__fuzz` re-exports them (built with `--cfg shmlog_fuzz`: `.ci/fuzz.sh`).
//!
//! Each function decodes the fuzzer's bytes into a scenario and panics when a property breaks: a
//! panic is how libFuzzer learns about a bug. Scenarios run over the heap backend (file
//! validation also over real files), single-threaded and deterministic, so a crash input replays
//! exactly. `cargo test` in `fuzz/` runs them in-process: on random inputs (a harness bug shows
//! up without libFuzzer) and on the seed corpus, which must stay meaningful.
//!
//! - [`term_reader`]: the term reader and scanner over hostile term bytes.
//! - [`file_validation`]: log and reader-slot validation over hostile bytes, sizes and files.
//! - [`ops_oracle`]: random operations on the shipped writer and readers against an oracle.
//! - [`assembler`]: `FragmentAssembler` over arbitrary fragment sequences against a reference.
//! - [`journal`]: catalog records, segment frames and damaged recordings on disk.
//! - [`unblock`]: the unblocker of a concurrent log over hostile words.
//! - [`bridge_status`]: a bridge's status file, as `shmlog stat` reads it.
//! - [`bridge_in`]: the in bridge's fragment input from the network, through its duty cycle.
//! - [`doorbell`]: the doorbell page's words as a hostile peer leaves them, under rings and sleeps.

#![allow(clippy::disallowed_types)]
#![warn(unreachable_pub)]

mod assembler;
mod bridge_in;
mod bridge_status;
mod doorbell;
mod file_validation;
mod input;
mod journal;
mod ops_oracle;
mod term_reader;
#[cfg(test)]
mod tests;
mod unblock;

pub use assembler::assembler;
pub use bridge_in::bridge_in;
pub use bridge_status::bridge_status;
pub use doorbell::doorbell;
pub use file_validation::file_validation;
pub use journal::journal;
pub use ops_oracle::ops_oracle;
pub use term_reader::term_reader;
pub use unblock::unblock;
