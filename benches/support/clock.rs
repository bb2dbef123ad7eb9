//! Timestamps for per-message latency: the TSC, calibrated to nanoseconds against
//! `CLOCK_MONOTONIC`, or `clock_gettime(CLOCK_MONOTONIC)` itself.
//!
//! On x86_64 with an invariant TSC (`constant_tsc nonstop_tsc` in /proc/cpuinfo) the counter
//! is the same on every core of one machine, so a stamp taken on one core can be subtracted
//! from a stamp taken on another core, or in another process (the calibration is repeated
//! per process; both calibrate against the same CLOCK_MONOTONIC and agree to well under a ns
//! per ms). `rdtsc` costs ~10-20 ns in a VM against ~20-40 ns for `clock_gettime`.

#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Which clock stamps are taken with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `rdtsc` scaled to ns.
    Tsc,
    /// `clock_gettime(CLOCK_MONOTONIC)` (vDSO).
    Monotonic,
}

/// A calibrated clock; `now()` returns ns on a monotonic scale shared by all cores.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub source: Source,
    /// ns per TSC tick.
    ns_per_tick: f64,
    tsc0: u64,
    ns0: u64,
}

/// `clock_gettime(CLOCK_MONOTONIC)` in ns.
#[inline(always)]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[inline(always)]
fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // LFENCE first: RDTSC alone may execute before earlier loads complete (out of order,
        // or speculatively past the branch that found a message), which stamped receipts
        // before the message had arrived. LFENCE waits for every earlier instruction.
        // SAFETY: lfence and rdtsc have no memory effects and exist on every x86_64 CPU.
        unsafe {
            core::arch::x86_64::_mm_lfence();
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_ns()
    }
}

fn tsc_is_invariant() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string("/proc/cpuinfo")
            .map(|s| s.contains(" constant_tsc") && s.contains(" nonstop_tsc"))
            .unwrap_or(false)
}

impl Clock {
    /// The TSC if it is invariant (calibrated over `~50 ms`), otherwise CLOCK_MONOTONIC.
    pub fn best() -> Clock {
        if tsc_is_invariant() && std::env::var_os("SHMLOG_BENCH_CLOCK_MONOTONIC").is_none() {
            Clock::tsc()
        } else {
            Clock::monotonic()
        }
    }

    pub fn monotonic() -> Clock {
        Clock { source: Source::Monotonic, ns_per_tick: 1.0, tsc0: 0, ns0: 0 }
    }

    /// Calibrates the TSC against CLOCK_MONOTONIC over ~50 ms.
    pub fn tsc() -> Clock {
        let pair = || {
            // The tightest (ns, tsc) pair of a few tries: rdtsc on both sides of clock_gettime.
            let mut best = (u64::MAX, 0u64, 0u64);
            for _ in 0..16 {
                let a = rdtsc();
                let ns = monotonic_ns();
                let b = rdtsc();
                if b - a < best.0 {
                    best = (b - a, ns, a + (b - a) / 2);
                }
            }
            (best.1, best.2)
        };
        let (ns_a, tsc_a) = pair();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(50) {
            std::hint::spin_loop();
        }
        let (ns_b, tsc_b) = pair();
        let ns_per_tick = (ns_b - ns_a) as f64 / (tsc_b - tsc_a) as f64;
        Clock { source: Source::Tsc, ns_per_tick, tsc0: tsc_a, ns0: ns_a }
    }

    /// Raw reading (ticks for the TSC, ns for CLOCK_MONOTONIC).
    #[inline(always)]
    pub fn raw(&self) -> u64 {
        match self.source {
            Source::Tsc => rdtsc(),
            Source::Monotonic => monotonic_ns(),
        }
    }

    /// Converts a raw difference to ns.
    #[inline(always)]
    pub fn delta_ns(&self, from: u64, to: u64) -> f64 {
        to.wrapping_sub(from) as i64 as f64 * self.ns_per_tick
    }

    /// Now, in ns on the CLOCK_MONOTONIC scale (comparable across processes).
    #[inline(always)]
    pub fn now_ns(&self) -> u64 {
        match self.source {
            Source::Tsc => self.ns0 + ((rdtsc().wrapping_sub(self.tsc0)) as f64 * self.ns_per_tick) as u64,
            Source::Monotonic => monotonic_ns(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self.source {
            Source::Tsc => "rdtsc (invariant TSC, calibrated against CLOCK_MONOTONIC)",
            Source::Monotonic => "clock_gettime(CLOCK_MONOTONIC)",
        }
    }

    /// Mean cost of one `now_ns()` in ns (over 1M calls).
    pub fn cost_ns(&self) -> f64 {
        let n = 1_000_000u64;
        let t = Instant::now();
        let mut acc = 0u64;
        for _ in 0..n {
            acc = acc.wrapping_add(std::hint::black_box(self.now_ns()));
        }
        std::hint::black_box(acc);
        t.elapsed().as_nanos() as f64 / n as f64
    }

    /// Median of back-to-back `now_ns()` differences: the floor under every per-message sample.
    pub fn back_to_back_ns(&self) -> f64 {
        let mut v: Vec<f64> = (0..10_001)
            .map(|_| {
                let a = self.raw();
                let b = self.raw();
                self.delta_ns(a, b)
            })
            .collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    }
}
