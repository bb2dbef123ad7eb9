//! Untethered subscriptions (issue 25), each figure a ratio of two measurements of the same run:
//!
//! - `publisher/stopped_untethered` vs `publisher/alone`: a publisher offering 64-byte messages
//!   as fast as a tethered reader thread drains them, with and without an untethered
//!   subscription that never polls (a stopped reader) on the same stream. The ratio of their
//!   rates must be at least 0.95: the stopped reader costs the publisher one more slot to pass
//!   over at each limit recompute, nothing else.
//! - `reader/untethered` vs `reader/tethered_copy`: one thread offers a batch of 256 messages of
//!   64 bytes (not timed) and polls them back (timed), through an untethered subscription
//!   (copy, then check) or a tethered one with `copy_payloads(true)` (copy only). The ratio of
//!   their read rates must be at least 0.8.
//!
//! `cargo bench --bench untethered` (criterion output, then the ratios on stderr and in
//! `target/bench-results/untethered.jsonl`); `-- --test` runs each once, as CI does.

mod support;

use criterion::{BenchmarkId, Throughput};
use shmlog::{Header, Publication, Subscription};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};
use support::{Args, Pcts, ShmDir};

const B: &str = "untethered";
const TERM: usize = 1 << 20;
const LEN: usize = 64;
const BATCH: usize = 256;

fn subscription(dir: &Path, name: &str, tethered: bool, copy: bool) -> Subscription {
    Subscription::builder(name).dir(dir).tethered(tethered).copy_payloads(copy).open().expect("subscribe")
}

/// Offers `n` messages while a thread drains them through a tethered subscription; returns the
/// time the offers took. With `stopped`, an untethered subscription that never polls is open.
fn publisher_run(n: u64, stopped: bool) -> Duration {
    let dir = ShmDir::new("ut-pub");
    let mut p = Publication::builder("ut").dir(dir.path()).term_length(TERM).create().expect("create");
    let mut drain = subscription(dir.path(), "ut", true, false);
    let _stopped = stopped.then(|| subscription(dir.path(), "ut", false, false));
    p.wait_for_readers(1 + usize::from(stopped), Duration::from_secs(10)).expect("readers join");
    let msg = [7u8; LEN];
    std::thread::scope(|s| {
        let reader = s.spawn(move || {
            let mut got = 0u64;
            while got < n {
                got += drain.poll(
                    |m: &[u8], _: &Header| {
                        black_box(m.len());
                    },
                    usize::MAX,
                ) as u64;
            }
        });
        let start = Instant::now();
        for _ in 0..n {
            while p.offer(black_box(&msg)).is_err() {
                std::hint::spin_loop();
            }
        }
        let took = start.elapsed();
        reader.join().unwrap();
        took
    })
}

/// Polls one batch back after offering it (offers not timed); returns the time the polls took.
fn read_batch(p: &mut Publication, s: &mut Subscription, msg: &[u8]) -> Duration {
    for _ in 0..BATCH {
        p.offer(msg).expect("offer");
    }
    let start = Instant::now();
    let mut got = 0;
    while got < BATCH {
        got += s.poll(
            |m: &[u8], _: &Header| {
                black_box((m.first(), m.last()));
            },
            usize::MAX,
        );
    }
    start.elapsed()
}

/// A publication and a subscription (untethered, or tethered and copying), warmed over all
/// three terms.
fn reader_pair(dir: &Path, untethered: bool) -> (Publication, Subscription) {
    let mut p = Publication::builder("ut").dir(dir).term_length(TERM).create().expect("create");
    let mut s = subscription(dir, "ut", !untethered, !untethered);
    p.wait_connected(Duration::from_secs(10)).expect("subscriber joins");
    let msg = [5u8; LEN];
    for _ in 0..(3 * TERM / 96 / BATCH + 1) {
        read_batch(&mut p, &mut s, &msg);
    }
    (p, s)
}

fn main() {
    let args = Args::parse();
    support::banner(B);
    let mut c = support::criterion(Duration::from_millis(300), Duration::from_secs(2));
    let n = args.n(1_000_000, 1000) as u64;

    let mut g = c.benchmark_group("untethered/publisher");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n));
    for (label, stopped) in [("alone", false), ("stopped_untethered", true)] {
        g.bench_function(BenchmarkId::from_parameter(label), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| publisher_run(n, stopped)).sum())
        });
    }
    g.finish();

    let mut g = c.benchmark_group("untethered/reader");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (label, untethered) in [("tethered_copy", false), ("untethered", true)] {
        let dir = ShmDir::new("ut-read");
        let (mut p, mut s) = reader_pair(dir.path(), untethered);
        let msg = [9u8; LEN];
        g.bench_function(BenchmarkId::from_parameter(label), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| read_batch(&mut p, &mut s, &msg)).sum())
        });
    }
    g.finish();

    if args.wants("untethered/ratios") {
        // Our own figures: the two sides alternated, five rounds each, medians.
        let rounds = args.n(5, 1);
        let mut alone = Vec::new();
        let mut with_stopped = Vec::new();
        for _ in 0..rounds {
            alone.push(n as f64 / publisher_run(n, false).as_secs_f64());
            with_stopped.push(n as f64 / publisher_run(n, true).as_secs_f64());
        }
        let (alone, with_stopped) = (Pcts::of(&mut alone).p50, Pcts::of(&mut with_stopped).p50);
        let batches = args.n(4000, 10);
        let dirs = (ShmDir::new("ut-r1"), ShmDir::new("ut-r2"));
        let (mut tp, mut ts) = reader_pair(dirs.0.path(), false);
        let (mut up, mut us) = reader_pair(dirs.1.path(), true);
        let msg = [9u8; LEN];
        let (mut tethered, mut untethered) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t: Duration = (0..batches).map(|_| read_batch(&mut tp, &mut ts, &msg)).sum();
            let u: Duration = (0..batches).map(|_| read_batch(&mut up, &mut us, &msg)).sum();
            tethered.push((batches * BATCH) as f64 / t.as_secs_f64());
            untethered.push((batches * BATCH) as f64 / u.as_secs_f64());
        }
        let (tethered, untethered) = (Pcts::of(&mut tethered).p50, Pcts::of(&mut untethered).p50);
        assert_eq!(us.laps(), 0, "the untethered reader kept up: never lapped");
        support::record_value(B, "publisher_alone_msgs_per_s", alone, "msg/s");
        support::record_value(B, "publisher_with_stopped_untethered_msgs_per_s", with_stopped, "msg/s");
        support::record_value(B, "publisher_ratio", with_stopped / alone, "x");
        support::record_value(B, "reader_tethered_copy_msgs_per_s", tethered, "msg/s");
        support::record_value(B, "reader_untethered_msgs_per_s", untethered, "msg/s");
        support::record_value(B, "reader_ratio", untethered / tethered, "x");
    }
    c.final_summary();
}
