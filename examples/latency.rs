//! One-way latency the way users measure it: HdrHistogram p50/p90/p99/p99.9/max for
//!
//! (a) a burst of 100 000 messages sent back to back (queueing included), and
//! (b) a fixed rate of 10 000 msg/s for N seconds,
//!
//! over shmlog, and in the same run over aeron-rs 0.1.8 + a real Aeron media driver (with
//! `--features aeron-compare` and the jar from `scripts/fetch-aeron-driver.sh`) and over
//! crossbeam-channel (in-process baseline). 32-byte messages whose first 8 bytes are the send
//! time; publisher on CPU 0, subscriber thread on CPU 1 polling up to 256 at a time, busy spin;
//! 8 MiB terms for both log-based systems with a warm-up over all three terms.
//!
//! Clock: the invariant TSC read with `rdtsc` and calibrated against CLOCK_MONOTONIC (its cost
//! is printed; ~10-20 ns in a VM), or `--clock monotonic` for `clock_gettime` (~20-50 ns).
//! The sender stamps every message; the receiver reads the clock once per poll, after the
//! batch, and charges that time to each message of it (never earlier than the true receipt).
//!
//! ```text
//! cargo run --release --example latency -- [--seconds 10] [--burst 100000] [--rate 10000]
//! cargo run --release --example latency --features aeron-compare -- --seconds 10
//! ```

#[path = "../benches/support/mod.rs"]
mod support;

use hdrhistogram::Histogram;
use std::time::Duration;
use support::clock::Clock;
use support::transport::{self as tr, Rx, Sink, Tx};

struct Opts {
    seconds: u64,
    burst: u64,
    rate: f64,
    term: usize,
    only: Option<String>,
    clock: Clock,
}

fn parse() -> Opts {
    let mut o =
        Opts { seconds: 10, burst: 100_000, rate: 10_000.0, term: 8 << 20, only: None, clock: Clock::best() };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--seconds" => o.seconds = val().parse().expect("--seconds N"),
            "--burst" => o.burst = val().parse().expect("--burst N"),
            "--rate" => o.rate = val().parse().expect("--rate MSGS_PER_S"),
            "--term" => o.term = val().parse().expect("--term BYTES"),
            "--only" => o.only = Some(val()),
            "--clock" => {
                o.clock = match val().as_str() {
                    "monotonic" => Clock::monotonic(),
                    _ => Clock::tsc(),
                }
            }
            "-h" | "--help" => {
                println!("latency [--seconds N] [--burst N] [--rate R] [--term BYTES] [--only shmlog|aeron-rs|crossbeam-channel] [--clock tsc|monotonic]");
                std::process::exit(0);
            }
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    o
}

fn hist(samples: &[f64]) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    for &s in samples {
        h.saturating_record(s.max(1.0) as u64);
    }
    h
}

fn report(system: &str, mode: &str, samples: &[f64]) {
    let h = hist(samples);
    let q = |p: f64| h.value_at_quantile(p);
    println!(
        "{system:<18} {mode:<22} n={:<7} p50={:>6} p90={:>6} p99={:>7} p99.9={:>8} max={:>9}  (ns)",
        h.len(),
        q(0.50),
        q(0.90),
        q(0.99),
        q(0.999),
        h.max()
    );
    support::record(
        "latency",
        &format!("{mode}/{system}"),
        &[
            ("n", h.len() as f64),
            ("p50", q(0.50) as f64),
            ("p90", q(0.90) as f64),
            ("p99", q(0.99) as f64),
            ("p999", q(0.999) as f64),
            ("max", h.max() as f64),
            ("mean", h.mean()),
        ],
        &[("unit", "ns")],
    );
}

/// Warm-up, then the burst and the fixed-rate runs over one system.
fn run<T: Tx>(o: &Opts, system: &str, tx: &mut T, sink: &Sink) {
    let mut sent = 0u64;
    let warm = (3 * o.term / 64 + 10_000) as u64;
    let mut left = warm;
    while left > 0 {
        let k = left.min(65536);
        tr::burst(tx, sink, &mut sent, k);
        left -= k;
    }
    // A short stamped warm-up of both code paths.
    tr::stamped_burst(tx, sink, &mut sent, &o.clock, o.burst.min(10_000));
    tr::stamped_fixed_rate(tx, sink, &mut sent, &o.clock, (o.rate as u64 / 10).max(1), o.rate);

    let s = tr::stamped_burst(tx, sink, &mut sent, &o.clock, o.burst);
    report(system, &format!("burst_{}", o.burst), &s);
    let n = (o.rate * o.seconds as f64) as u64;
    let s = tr::stamped_fixed_rate(tx, sink, &mut sent, &o.clock, n, o.rate);
    report(system, &format!("rate_{}_per_s_{}s", o.rate as u64, o.seconds), &s);
}

fn with_sink<R: Rx + Send + 'static, T: Tx>(o: &Opts, system: &str, rx: R, tx: &mut T) {
    let sink = Sink::new();
    let (s2, clock) = (sink.clone(), o.clock);
    let h = support::spawn_on(1, move || {
        support::pin(1);
        let mut rx = rx;
        tr::sink_loop(&mut rx, &s2, clock, 256);
    });
    support::pin(0);
    run(o, system, tx, &sink);
    sink.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = h.join();
    support::unpin();
}

fn shmlog_run(o: &Opts) {
    let dir = support::ShmDir::new("latency");
    let mut p =
        shmlog::Publication::builder("latency").dir(&dir.path).term_length(o.term).create().expect("create");
    let s = shmlog::Subscription::builder("latency").dir(&dir.path).open().expect("open");
    p.wait_connected(Duration::from_secs(10)).expect("connected");
    with_sink(o, "shmlog", s, &mut p);
}

fn crossbeam_run(o: &Opts) {
    let (mut tx, rx) = crossbeam_channel::bounded::<[u8; 32]>(8192);
    with_sink(o, "crossbeam-channel", rx, &mut tx);
}

#[cfg(feature = "aeron-compare")]
fn aeron_run(o: &Opts) {
    use support::aeron_driver::MediaDriver;
    use tr::aeron::{AeronSinkRx, AeronTx, Client};
    let driver = match MediaDriver::start(o.term) {
        Ok(d) => d,
        Err(why) => return println!("aeron-rs           SKIPPED: {why}"),
    };
    let client = match Client::connect(&driver.dir_string(), &[1001]) {
        Ok(c) => c,
        Err(why) => return println!("aeron-rs           SKIPPED: {why}"),
    };
    {
        let p = client.publications[0].lock().unwrap();
        with_sink(o, "aeron-rs", AeronSinkRx::new(client.subscriptions[0].clone()), &mut AeronTx(&p));
    }
    drop(client);
    drop(driver);
}

#[cfg(not(feature = "aeron-compare"))]
fn aeron_run(_o: &Opts) {
    println!("aeron-rs           SKIPPED: built without `--features aeron-compare`");
}

fn main() {
    let o = parse();
    println!(
        "one-way latency, 32 B, {} core(s) ({}), load average {:.2}; term {} KiB; clock: {} (cost {:.1} ns per stamp)",
        support::cores(),
        support::cpu_model(),
        support::loadavg(),
        o.term >> 10,
        o.clock.name(),
        o.clock.cost_ns()
    );
    support::record("latency", "clock", &[("cost_ns", o.clock.cost_ns())], &[("clock", o.clock.name())]);
    let wants = |s: &str| o.only.as_deref().is_none_or(|x| x == s);
    if wants("shmlog") {
        shmlog_run(&o);
    }
    if wants("aeron-rs") {
        aeron_run(&o);
    }
    if wants("crossbeam-channel") {
        crossbeam_run(&o);
    }
}
