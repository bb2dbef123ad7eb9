//! Machinery of the multi-process and reliability tests.
//!
//! Every test binary that uses peers re-runs itself: it defines
//! `#[test] fn peer_process() { support::roles::run_if_peer() }`, which does nothing in a normal
//! run and plays a role (publisher, subscriber, ...) when started by [`peer::Peer::spawn`].
#![allow(dead_code)]

pub mod concurrent_roles;
pub mod dir;
pub mod loss_roles;
pub mod peer;
pub mod raw;
pub mod roles;
pub mod untethered_roles;
pub mod wake_roles;
pub mod wire;

pub use dir::ShmDir;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Serialises the heavy multi-process tests of one binary: they measure reaction times (1 s
/// bounds) on a 2-core machine, where two of them at once would only measure each other.
pub fn exclusive() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `SHMLOG_LONG=1`: run many iterations instead of a few.
pub fn long() -> bool {
    std::env::var("SHMLOG_LONG").is_ok_and(|v| v == "1")
}

/// `short` iterations normally, `long` with `SHMLOG_LONG=1`.
pub fn iterations(short: usize, long_n: usize) -> usize {
    if long() {
        long_n
    } else {
        short
    }
}

/// A small deterministic generator for test decisions (kill times, churn); seeded from
/// `SHMLOG_SEED` or the clock, and printed so a failure can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn new(tag: &str) -> Self {
        let seed = std::env::var("SHMLOG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        });
        println!("[{tag}] SHMLOG_SEED={seed}");
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        wire::mix(self.0)
    }

    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Seconds with millisecond precision, for reports.
pub fn secs(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

/// Deterministic message bytes for sequence number `seq` and length `len`.
pub fn pattern(seq: u64, len: usize) -> Vec<u8> {
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ len as u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

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
