//! Many writers into one stream (`ConcurrentPublication`) against the exclusive `Publication` and
//! against crossbeam-channel's MPMC, in the same run.
//!
//! - `offer_poll`: one thread offers a 64-byte message and polls it back, with the exclusive and
//!   the concurrent publication in alternating rounds (the cost of the CAS reservation and the
//!   pending word without contention; goal ≤ 1.3×).
//! - `throughput`: 64-byte messages from 1 and 2 writer threads into one stream, read by one
//!   reader thread, against the exclusive publication (1 writer) and crossbeam-channel (bounded,
//!   1 and 2 senders, one receiver). Writers and readers yield when they cannot go on (two cores:
//!   three threads must not all spin). Messages per second, median of the rounds.

mod support;

use criterion::{BenchmarkId, Criterion};
use crossbeam_channel::{bounded, TryRecvError, TrySendError};
use shmlog::{ConcurrentPublication, Header, OfferError, Publication, Subscription};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};
use support::{Args, Pcts, ShmDir};

const B: &str = "concurrent";
const TERM: usize = 1 << 20;
const MSG: usize = 64;

fn subscribe(dir: &Path, name: &str) -> Subscription {
    Subscription::builder(name).dir(dir).open().expect("subscription")
}

fn concurrent(dir: &Path, name: &str) -> ConcurrentPublication {
    Publication::builder(name).dir(dir).term_length(TERM).open_concurrent().expect("concurrent publication")
}

fn exclusive(dir: &Path, name: &str) -> Publication {
    Publication::builder(name).dir(dir).term_length(TERM).create().expect("publication")
}

/// Polls until `s` has read up to `position`.
#[inline(always)]
fn poll_to(s: &mut Subscription, position: i64) {
    while s.position() < position {
        s.poll(
            |p: &[u8], _: &Header| {
                black_box(p.len());
            },
            usize::MAX,
        );
    }
}

/// A writer of either kind, for code shared by both.
trait Offer {
    fn offer_msg(&mut self, msg: &[u8]) -> Result<i64, OfferError>;
}

impl Offer for Publication {
    #[inline(always)]
    fn offer_msg(&mut self, msg: &[u8]) -> Result<i64, OfferError> {
        self.offer(msg)
    }
}

impl Offer for ConcurrentPublication {
    #[inline(always)]
    fn offer_msg(&mut self, msg: &[u8]) -> Result<i64, OfferError> {
        self.offer(msg)
    }
}

#[inline(always)]
fn offer_poll(p: &mut impl Offer, s: &mut Subscription, msg: &[u8]) {
    let position = p.offer_msg(black_box(msg)).expect("offer");
    poll_to(s, position);
}

/// Nanoseconds per offer + poll over `n` messages.
fn ns_per(p: &mut impl Offer, s: &mut Subscription, n: usize) -> f64 {
    let msg = [5u8; MSG];
    let start = Instant::now();
    for _ in 0..n {
        offer_poll(p, s, &msg);
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

/// Waits until `s` is counted by the stream's writers (`connected` asks them).
fn connect(s: &mut Subscription, mut connected: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !connected() {
        s.poll(|_: &[u8], _: &Header| {}, 1);
        assert!(Instant::now() < deadline, "the subscription never joined");
    }
}

fn uncontended(c: &mut Criterion, args: &Args) {
    let dir = ShmDir::new("conc-op");
    let mut ex = exclusive(dir.path(), "ex");
    let mut exs = subscribe(dir.path(), "ex");
    connect(&mut exs, || ex.is_connected());
    let mut co = concurrent(dir.path(), "co");
    let mut cos = subscribe(dir.path(), "co");
    connect(&mut cos, || co.is_connected());
    let warm = args.n(200_000, 10);
    ns_per(&mut ex, &mut exs, warm);
    ns_per(&mut co, &mut cos, warm);
    let mut g = c.benchmark_group("concurrent/offer_poll");
    let msg = [5u8; MSG];
    g.bench_function(BenchmarkId::from_parameter("exclusive_64B"), |b| {
        b.iter(|| offer_poll(&mut ex, &mut exs, &msg))
    });
    g.bench_function(BenchmarkId::from_parameter("concurrent_64B"), |b| {
        b.iter(|| offer_poll(&mut co, &mut cos, &msg))
    });
    g.finish();
    if !args.wants("concurrent/offer_poll/ratio") {
        return;
    }
    // Alternating rounds, the ratio of each pair, medians of both.
    let (rounds, n) = (args.n(15, 3), args.n(1_000_000, 10));
    let (mut exn, mut con, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let e = ns_per(&mut ex, &mut exs, n);
        let c = ns_per(&mut co, &mut cos, n);
        exn.push(e);
        con.push(c);
        ratios.push(c / e);
    }
    let (e, c, r) = (Pcts::of(&mut exn).p50, Pcts::of(&mut con).p50, Pcts::of(&mut ratios).p50);
    support::record(
        B,
        "offer_poll_64B",
        &[("exclusive_ns", e), ("concurrent_ns", c), ("ratio", r)],
        &[("what", "one thread, offer + poll back; ratio = concurrent / exclusive (goal <= 1.3)")],
    );
    eprintln!("[{B}] offer+poll 64 B, one thread: exclusive {e:.1} ns, concurrent {c:.1} ns, ratio {r:.3} (goal <= 1.3)");
    // The offer alone: batches of offers timed, then polled back untimed; beside it the floor,
    // an uncontended CAS against a plain store to a word of our own.
    let batches = args.n(2000, 5);
    let (mut exo, mut coo, mut ro, mut floor) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let e = offer_only(&mut ex, &mut exs, batches);
        let c = offer_only(&mut co, &mut cos, batches);
        exo.push(e);
        coo.push(c);
        ro.push(c / e);
        floor.push(cas_minus_store_ns(batches * BATCH));
    }
    let (e, c, r, f) =
        (Pcts::of(&mut exo).p50, Pcts::of(&mut coo).p50, Pcts::of(&mut ro).p50, Pcts::of(&mut floor).p50);
    let at_floor = (e + f) / e;
    support::record(
        B,
        "offer_only_64B",
        &[
            ("exclusive_ns", e),
            ("concurrent_ns", c),
            ("ratio", r),
            ("cas_extra_ns", f),
            ("floor_ratio", at_floor),
        ],
        &[(
            "what",
            "one thread, offers timed in batches of 1000; floor = (exclusive + CAS - store) / exclusive",
        )],
    );
    eprintln!(
        "[{B}] offer 64 B alone: exclusive {e:.1} ns, concurrent {c:.1} ns, ratio {r:.3}; an uncontended CAS \
         costs {f:.1} ns more than a store, so the floor is {at_floor:.3}"
    );
}

const BATCH: usize = 1000;

/// Nanoseconds per offer, offers timed in batches of [`BATCH`] and polled back in between.
fn offer_only(p: &mut impl Offer, s: &mut Subscription, batches: usize) -> f64 {
    let msg = [5u8; MSG];
    let mut timed = Duration::ZERO;
    for _ in 0..batches {
        let start = Instant::now();
        let mut last = 0;
        for _ in 0..BATCH {
            last = p.offer_msg(black_box(&msg)).expect("offer");
        }
        timed += start.elapsed();
        poll_to(s, last);
    }
    timed.as_nanos() as f64 / (batches * BATCH) as f64
}

/// What an uncontended compare-and-swap costs over a release store, ns (the same loop shape).
fn cas_minus_store_ns(n: usize) -> f64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    let word = AtomicI64::new(0);
    let start = Instant::now();
    for i in 0..n as i64 {
        let _ = black_box(&word).compare_exchange(i, i + 1, Ordering::AcqRel, Ordering::Acquire);
    }
    let cas = start.elapsed();
    let start = Instant::now();
    for i in 0..n as i64 {
        black_box(&word).store(i + 1, Ordering::Release);
    }
    let store = start.elapsed();
    (cas.as_nanos() as f64 - store.as_nanos() as f64) / n as f64
}

/// Messages per second: `writers` threads each offer `n` messages through a handle made by
/// `open`, one reader reads them all.
fn stream_rate<W: Offer + Send + 'static>(
    dir: &Path,
    name: &str,
    writers: usize,
    n: usize,
    open: impl Fn() -> W,
    connected: impl Fn(&mut W) -> bool,
) -> f64 {
    let mut handles: Vec<W> = (0..writers).map(|_| open()).collect();
    let mut s = subscribe(dir, name);
    connect(&mut s, || connected(&mut handles[0]));
    let go = std::sync::Arc::new(std::sync::Barrier::new(writers + 1));
    let threads: Vec<_> = handles
        .into_iter()
        .map(|mut w| {
            let go = go.clone();
            std::thread::spawn(move || {
                let msg = [7u8; MSG];
                go.wait();
                for _ in 0..n {
                    loop {
                        match w.offer_msg(&msg) {
                            Ok(_) => break,
                            Err(e) if e.is_retryable() => std::thread::yield_now(),
                            Err(e) => panic!("offer: {e}"),
                        }
                    }
                }
                w
            })
        })
        .collect();
    go.wait();
    let start = Instant::now();
    let (mut got, total) = (0usize, writers * n);
    while got < total {
        let k = s.poll(
            |p: &[u8], _: &Header| {
                black_box(p.len());
            },
            256,
        );
        if k == 0 {
            std::thread::yield_now();
        }
        got += k;
    }
    let rate = total as f64 / start.elapsed().as_secs_f64();
    // The handles close after the reader has everything.
    for t in threads {
        drop(t.join().unwrap());
    }
    rate
}

/// The same with crossbeam-channel: `senders` threads, one receiver, bounded to a capacity of
/// about a window of 64-byte messages' worth of slots.
fn channel_rate(senders: usize, n: usize) -> f64 {
    let (tx, rx) = bounded::<[u8; MSG]>(8192);
    let go = std::sync::Arc::new(std::sync::Barrier::new(senders + 1));
    let threads: Vec<_> = (0..senders)
        .map(|_| {
            let (tx, go) = (tx.clone(), go.clone());
            std::thread::spawn(move || {
                go.wait();
                for _ in 0..n {
                    let mut msg = [7u8; MSG];
                    loop {
                        match tx.try_send(msg) {
                            Ok(()) => break,
                            Err(TrySendError::Full(m)) => {
                                msg = m;
                                std::thread::yield_now();
                            }
                            Err(TrySendError::Disconnected(_)) => panic!("receiver gone"),
                        }
                    }
                }
            })
        })
        .collect();
    drop(tx);
    go.wait();
    let start = Instant::now();
    let mut got = 0usize;
    while got < senders * n {
        match rx.try_recv() {
            Ok(m) => {
                black_box(m[0]);
                got += 1;
            }
            Err(TryRecvError::Empty) => std::thread::yield_now(),
            Err(TryRecvError::Disconnected) => break,
        }
    }
    let rate = got as f64 / start.elapsed().as_secs_f64();
    for t in threads {
        t.join().unwrap();
    }
    rate
}

fn throughput(args: &Args) {
    if !args.wants("concurrent/throughput") {
        return;
    }
    let (rounds, n) = (args.n(7, 1), args.n(2_000_000, 1000));
    let mut rates: Vec<(&str, Vec<f64>)> = vec![
        ("exclusive_1w", Vec::new()),
        ("concurrent_1w", Vec::new()),
        ("concurrent_2w", Vec::new()),
        ("crossbeam_1s", Vec::new()),
        ("crossbeam_2s", Vec::new()),
    ];
    for round in 0..rounds {
        let dir = ShmDir::new("conc-tp");
        let d = dir.path();
        let name = |k: &str| format!("{k}{round}");
        for (label, samples) in rates.iter_mut() {
            let rate = match *label {
                "exclusive_1w" => {
                    let s = name("e");
                    stream_rate(d, &s, 1, n, || exclusive(d, &s), |p| p.is_connected())
                }
                "concurrent_1w" => {
                    let s = name("c1");
                    stream_rate(d, &s, 1, n, || concurrent(d, &s), |p| p.is_connected())
                }
                "concurrent_2w" => {
                    let s = name("c2");
                    stream_rate(d, &s, 2, n / 2, || concurrent(d, &s), |p| p.is_connected())
                }
                "crossbeam_1s" => channel_rate(1, n),
                _ => channel_rate(2, n / 2),
            };
            samples.push(rate);
        }
    }
    let mut med = std::collections::BTreeMap::new();
    for (label, samples) in rates.iter_mut() {
        let p = Pcts::of(samples).p50;
        med.insert(*label, p);
        eprintln!("[{B}] throughput {label}: {:.2} M msgs/s (64 B, median of {rounds})", p / 1e6);
    }
    let nums: Vec<(&str, f64)> = med.iter().map(|(k, v)| (*k, *v)).collect();
    support::record(B, "throughput_64B", &nums, &[("unit", "msgs/s")]);
    eprintln!(
        "[{B}] concurrent 2 writers / crossbeam 2 senders: {:.2}x; concurrent 1 writer / exclusive: {:.2}x",
        med["concurrent_2w"] / med["crossbeam_2s"],
        med["concurrent_1w"] / med["exclusive_1w"]
    );
}

fn main() {
    let args = Args::parse();
    support::banner(B);
    let mut c = support::criterion(Duration::from_millis(300), Duration::from_secs(1));
    uncontended(&mut c, &args);
    throughput(&args);
    c.final_summary();
}
