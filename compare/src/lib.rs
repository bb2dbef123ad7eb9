//! What the comparison shares: the benches' common support (the machine banner, pinning, clocks,
//! percentiles, child processes; `benches/support/` of the main crate, included as it is), one
//! sending/receiving interface over shmlog, aeron-rs, crossbeam-channel and the bare ring
//! ([`transport`]), and the Java media driver as a child process ([`aeron_driver`]).

#![allow(clippy::disallowed_types, dead_code)]
#![warn(unreachable_pub)]

#[path = "../../benches/support/mod.rs"]
pub mod support;

pub mod aeron_driver;
pub mod transport;
