//! Machinery of the multi-process and reliability tests.
//!
//! The multi-process tests re-run their own binary: its root defines
//! `#[test] fn peer_process() { support::roles::run_if_peer() }`, which does nothing in a normal
//! run and plays a role (publisher, subscriber, ...) when started by [`peer::Peer::spawn`].
#![allow(dead_code)]

mod basics;
pub mod concurrent_roles;
pub mod dir;
pub mod hops;
pub mod loss_roles;
pub mod peer;
pub mod raw;
pub mod roles;
pub mod spawns;
pub mod untethered_roles;
pub mod wake_roles;
pub mod wire;

pub use basics::*;
pub use dir::ShmDir;

use std::time::Duration;

/// Waits (bounded, yielding) until the `i32` at `offset` of the file at `path` satisfies `ok`.
pub fn await_word(path: &std::path::Path, offset: u64, ok: impl Fn(i32) -> bool, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ok(raw::file_i32(path, offset)) {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::yield_now();
    }
}

/// CPU time the calling thread has used.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
