//! One publisher, N subscribers (1..64), 32-byte messages: the publisher's cost per offer.
//!
//! The subscribers are threads with a Backoff or Yielding idle strategy, all on CPU 1; the
//! publisher runs on CPU 0 (2 cores: N busy-spinning readers would only measure the
//! scheduler). Offers are timed in batches of 1024 (64 KiB of frames, well inside the flow-
//! control window); between batches, untimed, the publisher waits until every subscriber has
//! read everything, so the figure is what one offer costs the publisher with N readers
//! attached, not how fast N readers share one CPU. Beside it, UDP: the same message sent with N
//! `sendto` calls to N sockets bound on 127.0.0.1 (drained between batches, untimed).

mod support;

use criterion::{BenchmarkId, Criterion};
use shmlog::{Backoff, IdleStrategy, Publication, Subscription, Yielding};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::shm::offer_spin;
use support::{Args, Pcts, ShmDir};

const B: &str = "fanout";
const NS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
const BATCH: u64 = 1024;
const MSG: [u8; 32] = [9u8; 32];
const TERM: usize = 1 << 20;

#[repr(align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

struct Fanout {
    publication: Publication,
    received: Arc<Vec<Padded>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    sent: u64,
    _dir: ShmDir,
}

impl Fanout {
    fn start(n: usize, idle: &str) -> Fanout {
        let dir = ShmDir::new("fan");
        let mut publication = Publication::builder("fan")
            .dir(dir.path())
            .term_length(TERM)
            .create()
            .expect("create publication");
        let received: Arc<Vec<Padded>> = Arc::new((0..n).map(|_| Padded::default()).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for i in 0..n {
            let sub = Subscription::builder("fan").dir(dir.path()).open().expect("open subscription");
            let (r, st) = (received.clone(), stop.clone());
            let idle = idle.to_string();
            threads.push(support::spawn_on(1, move || {
                support::pin(1);
                match idle.as_str() {
                    "backoff" => reader(sub, Backoff::default(), &r[i].0, &st),
                    _ => reader(sub, Yielding, &r[i].0, &st),
                }
            }));
        }
        // Every subscription joined inside `open`, before its thread started.
        publication.wait_connected(Duration::from_secs(20)).expect("subscribers join");
        Fanout { publication, received, stop, threads, sent: 0, _dir: dir }
    }

    /// Waits (untimed, yielding) until every subscriber has read everything.
    fn settle(&self) {
        for r in self.received.iter() {
            while r.0.load(Ordering::Acquire) < self.sent {
                std::thread::yield_now();
            }
        }
    }

    /// Offers `n` messages in timed batches; returns the summed batch times.
    fn run(&mut self, n: u64, batches: &mut Vec<f64>) -> Duration {
        let mut total = Duration::ZERO;
        let mut left = n;
        while left > 0 {
            let k = left.min(BATCH);
            self.settle();
            let t = Instant::now();
            for _ in 0..k {
                offer_spin(&mut self.publication, &MSG);
            }
            let dt = t.elapsed();
            total += dt;
            batches.push(dt.as_nanos() as f64 / k as f64);
            self.sent += k;
            left -= k;
        }
        total
    }
}

fn reader(mut sub: Subscription, mut idle: impl IdleStrategy, received: &AtomicU64, stop: &AtomicBool) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let k = sub.poll(
            |p: &[u8], _: &shmlog::Header| {
                std::hint::black_box(p[0]);
            },
            256,
        );
        if k > 0 {
            n += k as u64;
            received.store(n, Ordering::Release);
        }
        idle.idle(k);
    }
}

impl Drop for Fanout {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn shmlog_fanout(c: &mut Criterion, args: &Args) {
    for idle in ["backoff", "yielding"] {
        let mut g = c.benchmark_group(format!("fanout/shmlog_{idle}"));
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(100))
            .measurement_time(Duration::from_millis(300));
        for n in NS {
            let name = format!("fanout/shmlog_{idle}/{n}");
            if !args.wants(&name) {
                continue;
            }
            support::pin(0);
            let mut f = Fanout::start(n, idle);
            let mut scratch = Vec::new();
            f.run(args.n(64 * BATCH as usize, 2) as u64, &mut scratch);
            g.bench_function(BenchmarkId::from_parameter(n), |b| {
                b.iter_custom(|iters| f.run(iters, &mut Vec::new()))
            });
            let mut per_offer = Vec::new();
            f.run(args.n(200, 2) as u64 * BATCH, &mut per_offer);
            let p = Pcts::of(&mut per_offer);
            support::record(
                B,
                &name,
                &[("mean", p.mean), ("p50", p.p50), ("p90", p.p90)],
                &[("unit", "ns/offer")],
            );
            eprintln!(
                "[{B}] {name}: publisher ns/offer, batches of {BATCH}: mean {:.1} p50 {:.1} p90 {:.1}",
                p.mean, p.p50, p.p90
            );
            drop(f);
            support::unpin();
        }
        g.finish();
    }
}

/// 1 and 64 subscribers alternated: rounds of (fresh 1-subscriber stream, 100 timed batches;
/// fresh 64-subscriber stream, 100 timed batches). The VM moves between a fast and a slow state
/// every few seconds to minutes, so the 1 and 64 figures of the sweep above, taken a minute
/// apart, can come from different states; the target is judged on the median of the per-round
/// ratios of the mean cost per offer.
fn paired(args: &Args) {
    const ROUNDS: usize = 7;
    for idle in ["backoff", "yielding"] {
        let name = format!("fanout/paired/shmlog_{idle}");
        if !args.wants(&name) {
            continue;
        }
        support::pin(0);
        let (mut one, mut many, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let cost = |n: usize| {
                let mut f = Fanout::start(n, idle);
                f.run(args.n(16 * BATCH as usize, 2) as u64, &mut Vec::new());
                let mut per_offer = Vec::new();
                f.run(args.n(100, 2) as u64 * BATCH, &mut per_offer);
                Pcts::of(&mut per_offer).mean
            };
            let (a, b) = (cost(1), cost(64));
            one.push(a);
            many.push(b);
            ratios.push(b / a);
        }
        support::unpin();
        let (a, b, r) = (Pcts::of(&mut one).p50, Pcts::of(&mut many).p50, Pcts::of(&mut ratios).p50);
        eprintln!("[{B}] {name}: ns/offer, median of {ROUNDS} rounds: 1 subscriber {a:.1}, 64 subscribers {b:.1}, median ratio {r:.2}");
        support::record(B, &name, &[("one", a), ("many", b), ("ratio", r)], &[("unit", "ns/offer")]);
    }
}

struct Udp {
    tx: UdpSocket,
    rx: Vec<UdpSocket>,
    addrs: Vec<std::net::SocketAddr>,
}

impl Udp {
    fn new(n: usize) -> Udp {
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind sender");
        let rx: Vec<UdpSocket> = (0..n)
            .map(|_| {
                let s = UdpSocket::bind("127.0.0.1:0").expect("bind receiver");
                s.set_nonblocking(true).unwrap();
                s
            })
            .collect();
        let addrs = rx.iter().map(|s| s.local_addr().unwrap()).collect();
        Udp { tx, rx, addrs }
    }

    fn drain(&self) {
        let mut buf = [0u8; 64];
        for s in &self.rx {
            while s.recv(&mut buf).is_ok() {}
        }
    }

    fn run(&self, n: u64, batches: &mut Vec<f64>) -> Duration {
        let mut total = Duration::ZERO;
        let mut left = n;
        while left > 0 {
            let k = left.min(64);
            self.drain();
            let t = Instant::now();
            for _ in 0..k {
                for a in &self.addrs {
                    self.tx.send_to(&MSG, a).expect("sendto");
                }
            }
            let dt = t.elapsed();
            total += dt;
            batches.push(dt.as_nanos() as f64 / k as f64);
            left -= k;
        }
        total
    }
}

fn udp_fanout(c: &mut Criterion, args: &Args) {
    let mut g = c.benchmark_group("fanout/udp_unicast_loopback");
    g.sample_size(10).warm_up_time(Duration::from_millis(100)).measurement_time(Duration::from_millis(500));
    for n in NS {
        let name = format!("fanout/udp_unicast_loopback/{n}");
        if !args.wants(&name) {
            continue;
        }
        support::pin(0);
        let u = Udp::new(n);
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_custom(|iters| u.run(iters, &mut Vec::new()))
        });
        let mut per = Vec::new();
        u.run(args.n(2000, 2) as u64, &mut per);
        let p = Pcts::of(&mut per);
        support::record(
            B,
            &name,
            &[("mean", p.mean), ("p50", p.p50), ("p90", p.p90)],
            &[("unit", "ns/message")],
        );
        eprintln!("[{B}] {name}: sender ns/message (N sendto): mean {:.0} p50 {:.0}", p.mean, p.p50);
        support::unpin();
    }
    g.finish();
}

fn main() {
    let args = Args::parse();
    support::banner(B);
    let mut c = Criterion::default().configure_from_args();
    shmlog_fanout(&mut c, &args);
    paired(&args);
    udp_fanout(&mut c, &args);
    c.final_summary();
}
