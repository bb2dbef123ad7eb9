//! The physical bounds of this machine, measured in the same run as the other benches so
//! that every figure can be stated as a ratio to its bound:
//!
//! - `bounds/raw_pingpong`: round trip of a counter between two threads over two cache lines;
//! - `bounds/bare_ring`: a single-producer ring of 64-byte seq-in-slot frames, 32 B payload
//!   (the throughput ceiling), ring in L2 (4096 slots) and 64 MiB (1 Mi slots);
//! - `bounds/memcpy`: 64 KiB copies, hot (same destination) and walking a 3 MiB buffer
//!   (the footprint of a log with 1 MiB terms);
//! - `bounds/clock`: the cost of a timestamp;
//! - `scheduler_gaps`: how long a thread spinning alone on each CPU goes without running.

mod support;

use criterion::{BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::{Duration, Instant};
use support::bounds::{memcpy_rate, BareRing, RawPingPong};
use support::clock::{monotonic_ns, Clock};
use support::{Args, Pcts};

const B: &str = "bounds";

fn raw_pingpong(c: &mut Criterion, args: &Args) {
    support::pin(0);
    let mut pp = RawPingPong::start(1);
    pp.warm(args.n(200_000, 100) as u64, Duration::from_secs(2));
    c.bench_function("bounds/raw_pingpong", |b| b.iter_custom(|n| pp.run(n)));
    if args.wants("bounds/raw_pingpong") {
        let clock = Clock::best();
        let mut s = pp.samples(&clock, args.n(1_000_000, 20), Duration::from_secs(5));
        Pcts::of(&mut s).report(B, "raw_pingpong_rtt");
    }
    drop(pp);
    support::unpin();
}

fn bare_ring(c: &mut Criterion, args: &Args) {
    let mut g = c.benchmark_group("bounds/bare_ring");
    g.throughput(Throughput::Elements(1));
    for (label, cap) in [("l2_4096", 4096usize), ("64MiB", 1 << 20)] {
        support::pin(0);
        let mut ring = BareRing::start(cap, 1);
        ring.warm(if args.test { 10 } else { 3 * cap as u64 }, 65536.min(cap as u64), Duration::from_secs(3));
        g.bench_function(BenchmarkId::from_parameter(label), |b| b.iter_custom(|n| ring.run(n)));
        if args.wants(&format!("bounds/bare_ring/{label}")) {
            let n = args.n(20_000_000, 1000) as u64;
            let mut rates: Vec<f64> = (0..3).map(|_| ring.rate(n)).collect();
            let p = Pcts::of(&mut rates);
            support::record_value(B, &format!("bare_ring_{label}_msgs_per_s"), p.p50, "msg/s");
        }
        drop(ring);
        support::unpin();
    }
    g.finish();
}

fn memcpy(c: &mut Criterion, args: &Args) {
    let size = 64 * 1024;
    let mut g = c.benchmark_group("bounds/memcpy_64KiB");
    g.throughput(Throughput::Bytes(size as u64));
    for (label, footprint) in [("hot", size), ("walk_3MiB", 3 << 20)] {
        g.bench_function(label, |b| {
            let src = vec![0x5au8; size];
            let mut dst = vec![0u8; footprint];
            let slots = footprint / size;
            let mut k = 0;
            b.iter(|| {
                let at = (k % slots) * size;
                k += 1;
                // SAFETY: in bounds (at + size <= footprint), no overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        black_box(src.as_ptr()),
                        black_box(dst.as_mut_ptr().add(at)),
                        black_box(size),
                    )
                }
            })
        });
        if args.wants(&format!("bounds/memcpy_64KiB/{label}")) {
            let rounds = args.n(100_000, 10);
            let mut r: Vec<f64> = (0..3).map(|_| memcpy_rate(size, footprint, rounds)).collect();
            support::record_value(
                B,
                &format!("memcpy_64KiB_{label}_bytes_per_s"),
                Pcts::of(&mut r).p50,
                "B/s",
            );
        }
    }
    g.finish();
}

fn clocks(c: &mut Criterion, args: &Args) {
    let mut g = c.benchmark_group("bounds/clock");
    let tsc = Clock::best();
    g.bench_function("clock_gettime_monotonic", |b| b.iter(monotonic_ns));
    g.bench_function("instant_now", |b| b.iter(std::time::Instant::now));
    g.bench_function("calibrated_tsc_now_ns", |b| b.iter(|| tsc.now_ns()));
    g.finish();
    if args.wants("bounds/clock") {
        support::record_value(B, "clock_cost_ns", tsc.cost_ns(), "ns");
        support::record_value(B, "clock_back_to_back_ns", tsc.back_to_back_ns(), "ns");
        support::record_value(B, "clock_gettime_cost_ns", Clock::monotonic().cost_ns(), "ns");
        eprintln!("[{B}] clock used for per-message samples: {}", tsc.name());
    }
}

fn main() {
    let args = Args::parse();
    support::banner(B);
    let mut c = support::criterion(Duration::from_secs(1), Duration::from_secs(3));
    raw_pingpong(&mut c, &args);
    bare_ring(&mut c, &args);
    memcpy(&mut c, &args);
    clocks(&mut c, &args);
    scheduler_gaps(&args);
    c.final_summary();
}

/// The floor under every tail figure: a thread spinning alone on each CPU (both at once,
/// touching nothing shared) records every gap of more than 50 µs between two clock reads, that
/// is, time it was not running (host or guest scheduling, interrupts). No transport can have a
/// p99.9 below what these gaps do to a thread that waits for a message.
fn scheduler_gaps(args: &Args) {
    if !args.wants("scheduler_gaps") {
        return;
    }
    let seconds = if args.test { 0.05 } else { 5.0 };
    let spin = move |cpu: usize| {
        support::pin(cpu);
        let start = Instant::now();
        let mut last = start;
        let (mut count, mut lost, mut max) = (0u64, Duration::ZERO, Duration::ZERO);
        while start.elapsed().as_secs_f64() < seconds {
            let now = Instant::now();
            let gap = now - last;
            if gap > Duration::from_micros(50) {
                count += 1;
                lost += gap;
                max = max.max(gap);
            }
            last = now;
        }
        (count, lost, max)
    };
    let other = support::spawn_on(1, move || spin(1));
    let results = [spin(0), other.join().expect("gap thread")];
    support::unpin();
    for (cpu, (count, lost, max)) in results.into_iter().enumerate() {
        eprintln!(
            "[{B}] scheduler gaps on CPU {cpu}: {count} gaps > 50 us in {seconds} s, {:.1} ms lost, largest {:.2} ms",
            lost.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
        support::record(
            B,
            &format!("scheduler_gaps_cpu{cpu}"),
            &[
                ("seconds", seconds),
                ("count", count as f64),
                ("lost_ms", lost.as_secs_f64() * 1e3),
                ("max_ns", max.as_nanos() as f64),
            ],
            &[],
        );
    }
}
