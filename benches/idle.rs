//! Wake-up latency of each idle strategy: a subscriber thread polls with the strategy while the
//! stream is quiet; after a gap (50 µs or 2 ms, long enough for Backoff to reach its longest
//! park) the main thread offers a message carrying a timestamp (calibrated TSC) and the
//! subscriber records `now - stamp` when it sees it. Criterion gets the sum of those
//! latencies (the gaps are not counted); p50/p99 are printed beside. `blocking` is no idle
//! strategy but `poll_blocking`, which sleeps on the stream's doorbell; `futex_floor` is the
//! bound for any kernel wake-up: the waiter sleeps on a bare futex word that the offering thread
//! bumps and wakes right after its offer (every lane pays that `FUTEX_WAKE` on the offering side,
//! so the lanes stay comparable).

mod support;

use criterion::{BenchmarkId, Criterion};
use shmlog::{Backoff, BusySpin, IdleStrategy, NoOp, Publication, Sleeping, Subscription, Yielding};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::clock::Clock;
use support::shm::{offer_spin, pair};
use support::{Args, Pcts, ShmDir};

const B: &str = "idle";

struct Waiter {
    publication: Publication,
    seen: Arc<AtomicU64>,
    latency_ns: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    sent: u64,
    clock: Clock,
    floor: Arc<Floor>,
    _dir: ShmDir,
}

fn wait_loop(
    mut sub: Subscription,
    mut idle: impl IdleStrategy,
    clock: Clock,
    seen: &AtomicU64,
    lat: &AtomicU64,
    stop: &AtomicBool,
) {
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut stamp = 0u64;
        let k = sub
            .poll(|p: &[u8], _: &shmlog::Header| stamp = u64::from_le_bytes(p[..8].try_into().unwrap()), 1);
        if k > 0 {
            let now = clock.now_ns();
            lat.store(now.saturating_sub(stamp), Ordering::Relaxed);
            n += 1;
            seen.store(n, Ordering::Release);
        }
        idle.idle(k);
    }
}

/// `poll_blocking`: sleeps on the stream's doorbell (a futex) instead of idling.
fn blocking_loop(mut sub: Subscription, clock: Clock, seen: &AtomicU64, lat: &AtomicU64, stop: &AtomicBool) {
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut stamp = 0u64;
        let handler = |p: &[u8], _: &shmlog::Header| stamp = u64::from_le_bytes(p[..8].try_into().unwrap());
        if sub.poll_blocking(handler, 1, Duration::from_millis(10)).fragments() > 0 {
            let now = clock.now_ns();
            lat.store(now.saturating_sub(stamp), Ordering::Relaxed);
            n += 1;
            seen.store(n, Ordering::Release);
        }
    }
}

/// The floor of any kernel wake-up: a bare futex word in this process, bumped and woken
/// (`FUTEX_WAKE`) by the offering thread right after its offer; the waiter sleeps on the word,
/// then takes the message with one poll.
struct Floor {
    word: std::sync::atomic::AtomicU32,
}

impl Floor {
    fn wake(&self) {
        support::futex::bump_and_wake_all(&self.word);
    }

    fn wait(&self, seen: u32) {
        support::futex::wait(&self.word, seen, Some(Duration::from_millis(10)));
    }
}

fn floor_loop(
    mut sub: Subscription,
    floor: &Floor,
    clock: Clock,
    seen: &AtomicU64,
    lat: &AtomicU64,
    stop: &AtomicBool,
) {
    let mut n = 0;
    let mut word = floor.word.load(Ordering::Acquire);
    while !stop.load(Ordering::Relaxed) {
        floor.wait(word);
        // Poll after every wake-up or timeout, moved word or not: a bump that came before this
        // thread first read the word (a slow start) would otherwise leave its message unread and
        // the offering side waiting for ever (CI hung here once).
        word = floor.word.load(Ordering::Acquire);
        let mut stamp = 0u64;
        let k = sub
            .poll(|p: &[u8], _: &shmlog::Header| stamp = u64::from_le_bytes(p[..8].try_into().unwrap()), 1);
        if k > 0 {
            lat.store(clock.now_ns().saturating_sub(stamp), Ordering::Relaxed);
            n += 1;
            seen.store(n, Ordering::Release);
        }
    }
}

impl Waiter {
    fn start(strategy: &str) -> Waiter {
        let dir = ShmDir::new("idle");
        let (publication, sub) = pair(dir.path(), "idle", 1 << 20);
        let clock = Clock::best();
        let seen = Arc::new(AtomicU64::new(0));
        let latency_ns = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, l, st) = (seen.clone(), latency_ns.clone(), stop.clone());
        let strategy = strategy.to_string();
        let floor = Arc::new(Floor { word: std::sync::atomic::AtomicU32::new(0) });
        let f = floor.clone();
        let thread = support::spawn_on(1, move || {
            support::pin(1);
            match strategy.as_str() {
                "busy_spin" => wait_loop(sub, BusySpin, clock, &s, &l, &st),
                "noop" => wait_loop(sub, NoOp, clock, &s, &l, &st),
                "yielding" => wait_loop(sub, Yielding, clock, &s, &l, &st),
                "sleeping_1us" => wait_loop(sub, Sleeping::default(), clock, &s, &l, &st),
                "blocking" => blocking_loop(sub, clock, &s, &l, &st),
                "futex_floor" => floor_loop(sub, &f, clock, &s, &l, &st),
                _ => wait_loop(sub, Backoff::default(), clock, &s, &l, &st),
            }
        });
        Waiter { publication, seen, latency_ns, stop, thread: Some(thread), sent: 0, clock, floor, _dir: dir }
    }

    /// One wake-up after `gap`: its latency in ns.
    fn once(&mut self, gap: Duration) -> u64 {
        std::thread::sleep(gap);
        let stamp = self.clock.now_ns();
        offer_spin(&mut self.publication, &stamp.to_le_bytes());
        self.floor.wake();
        self.sent += 1;
        while self.seen.load(Ordering::Acquire) < self.sent {
            std::thread::yield_now();
        }
        self.latency_ns.load(Ordering::Relaxed)
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn main() {
    let args = Args::parse();
    support::banner(B);
    let mut c = Criterion::default().configure_from_args();
    for (gap_label, gap) in [("gap_50us", Duration::from_micros(50)), ("gap_2ms", Duration::from_millis(2))] {
        let mut g = c.benchmark_group(format!("idle/wakeup_{gap_label}"));
        g.sample_size(10).warm_up_time(Duration::from_millis(200)).measurement_time(Duration::from_secs(1));
        for strategy in
            ["busy_spin", "noop", "yielding", "sleeping_1us", "backoff", "blocking", "futex_floor"]
        {
            let name = format!("idle/wakeup_{gap_label}/{strategy}");
            if !args.wants(&name) {
                continue;
            }
            support::pin(0);
            let mut w = Waiter::start(strategy);
            for _ in 0..args.n(20, 1) {
                w.once(gap);
            }
            g.bench_function(BenchmarkId::from_parameter(strategy), |b| {
                b.iter_custom(|n| Duration::from_nanos((0..n).map(|_| w.once(gap)).sum()))
            });
            let mut s: Vec<f64> = (0..args.n(300, 2)).map(|_| w.once(gap) as f64).collect();
            Pcts::of(&mut s).report(B, &name);
            drop(w);
            support::unpin();
        }
        g.finish();
    }
    c.final_summary();
}
