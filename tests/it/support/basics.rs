//! The std-only basics of the tests: serialising the heavy tests, iteration counts, a seeded
//! generator, message patterns. The bridge's tests (`bridge/tests/`) include this file with
//! `#[path]` beside `dir.rs` and `wire.rs`, not the rest of `tests/it/support`.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Serialises the heavy multi-process tests of the test binary: they measure reaction times (1 s
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
        super::wire::mix(self.0)
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
