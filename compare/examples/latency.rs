//! One-way latency the way users measure it: HdrHistogram p50/p90/p99/p99.9/max for
//!
//! (a) a burst of 100 000 messages sent back to back (queueing included), and
//! (b) a fixed rate of 10 000 msg/s for N seconds,
//!
//! over shmlog, and in the same run over aeron-rs 0.1.8 + a real Aeron media driver (with
//! the jar from `scripts/fetch-aeron-driver.sh`) and over
//! crossbeam-channel (in-process baseline), and over a bare seq-in-slot ring (the floor: what
//! any shared-memory transport pays at least). 32-byte messages whose first 8 bytes are the send
//! time; publisher on CPU 0, subscriber thread on CPU 1 polling up to 256 at a time, busy spin;
//! 8 MiB terms for both log-based systems with a warm-up over all three terms.
//!
//! Clock: the invariant TSC read with `rdtsc` and calibrated against CLOCK_MONOTONIC (its cost
//! is printed; ~10-20 ns in a VM), or `--clock monotonic` for `clock_gettime` (~20-50 ns).
//! The sender stamps every message; the receiver reads the clock once per poll, after the
//! batch, and charges that time to each message of it (never earlier than the true receipt).
//!
//! The systems take turns rather than running one after the other (this VM changes speed every
//! few seconds to minutes): all the streams and receiver threads exist at once, each system
//! sends 5 bursts and the fixed rate in one-second slices, and a receiver sleeps (parked) while
//! it is not its system's turn. The Aeron driver therefore runs through every system's
//! turns, and its noise is in every row; once it has stopped, shmlog runs the same schedule
//! alone (`shmlog-alone`: a host without a driver, as shmlog is deployed).
//!
//! ```text
//! cargo run --release --example latency -- [--seconds 10] [--burst 100000] [--rate 10000]
//! (from the repository's top: add --manifest-path compare/Cargo.toml)
//! ```

use shmlog_compare::{support, transport as tr};

use hdrhistogram::Histogram;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use support::clock::Clock;
use tr::{Rx, Sink, Tx};

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
                println!("latency [--seconds N] [--burst N] [--rate R] [--term BYTES] [--only shmlog|aeron-rs|crossbeam-channel|bare-ring] [--clock tsc|monotonic]");
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

/// One system under test: its sending side, the sink of its receiver thread (on CPU 1), and
/// the samples collected so far. A lane's receiver sleeps except during the lane's own turns.
struct Lane<T: Tx> {
    tx: T,
    sink: Arc<Sink>,
    receiver: Option<JoinHandle<()>>,
    sent: u64,
    burst: Vec<f64>,
    rate: Vec<f64>,
}

impl<T: Tx> Lane<T> {
    fn new<R: Rx + Send + 'static>(o: &Opts, tx: T, rx: R) -> Self {
        let sink = Sink::new();
        sink.active.close();
        let (s2, clock) = (sink.clone(), o.clock);
        let receiver = support::spawn_on(1, move || {
            support::pin(1);
            let mut rx = rx;
            tr::sink_loop(&mut rx, &s2, clock, 256);
        });
        Lane { tx, sink, receiver: Some(receiver), sent: 0, burst: Vec::new(), rate: Vec::new() }
    }

    /// Runs `f` with the receiver awake (it confirms before any timed message: `stamped_*`
    /// wait for its acknowledgement of recording).
    fn turn<X>(&mut self, f: impl FnOnce(&mut T, &Sink, &mut u64) -> X) -> X {
        self.sink.active.open();
        let x = f(&mut self.tx, &self.sink, &mut self.sent);
        self.sink.active.close();
        x
    }
}

impl<T: Tx> Drop for Lane<T> {
    fn drop(&mut self) {
        self.sink.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.receiver.take() {
            let _ = h.join();
        }
    }
}

/// What the schedule asks of a lane, whatever its transport.
trait Turns {
    /// Unstamped traffic over all three terms, then a short stamped run of both workloads.
    fn warm(&mut self, o: &Opts);
    fn burst(&mut self, o: &Opts);
    /// `n` messages at the fixed rate.
    fn rate(&mut self, o: &Opts, n: u64);
    /// The burst and fixed-rate samples so far; starts afresh.
    fn take_samples(&mut self) -> (Vec<f64>, Vec<f64>);
}

impl<T: Tx> Turns for Lane<T> {
    fn warm(&mut self, o: &Opts) {
        let warm = (3 * o.term / 64 + 10_000) as u64;
        self.turn(|tx, sink, sent| {
            let mut left = warm;
            while left > 0 {
                let k = left.min(65536);
                tr::burst(tx, sink, sent, k);
                left -= k;
            }
            tr::stamped_burst(tx, sink, sent, &o.clock, o.burst.min(10_000));
            tr::stamped_fixed_rate(tx, sink, sent, &o.clock, (o.rate as u64 / 10).max(1), o.rate);
        });
    }

    fn burst(&mut self, o: &Opts) {
        let s = self.turn(|tx, sink, sent| tr::stamped_burst(tx, sink, sent, &o.clock, o.burst));
        self.burst.extend(s);
    }

    fn rate(&mut self, o: &Opts, n: u64) {
        let s = self.turn(|tx, sink, sent| tr::stamped_fixed_rate(tx, sink, sent, &o.clock, n, o.rate));
        self.rate.extend(s);
    }

    fn take_samples(&mut self) -> (Vec<f64>, Vec<f64>) {
        (std::mem::take(&mut self.burst), std::mem::take(&mut self.rate))
    }
}

/// The schedule: every lane warmed up, then `BURSTS` rounds of one burst per lane, then the
/// fixed rate in one-second slices, lanes taking turns (the first lane rotating per round).
/// This VM moves between a fast and a slow state every few seconds to minutes; taking turns
/// gives every system the same share of both instead of its own minutes of the run.
fn run_interleaved(o: &Opts, lanes: &mut [(&'static str, &mut dyn Turns)]) {
    const BURSTS: usize = 5;
    support::pin(0);
    for (_, lane) in lanes.iter_mut() {
        lane.warm(o);
    }
    let k = lanes.len();
    for r in 0..BURSTS {
        for i in 0..k {
            lanes[(r + i) % k].1.burst(o);
        }
    }
    let per_slice = o.rate as u64;
    let total = (o.rate * o.seconds as f64) as u64;
    let mut done = 0;
    for r in 0.. {
        if done >= total {
            break;
        }
        let n = per_slice.min(total - done);
        for i in 0..k {
            lanes[(r + i) % k].1.rate(o, n);
        }
        done += n;
    }
    support::unpin();
    for (system, lane) in lanes.iter_mut() {
        let (burst, rate) = lane.take_samples();
        report(system, &format!("burst_{}", o.burst), &burst);
        report(system, &format!("rate_{}_per_s_{}s", o.rate as u64, o.seconds), &rate);
    }
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

    let dir = support::ShmDir::new("latency");
    let mut shm = None;
    if wants("shmlog") {
        let mut p = shmlog::Publication::builder("latency")
            .dir(dir.path())
            .term_length(o.term)
            .create()
            .expect("create");
        let s = shmlog::Subscription::builder("latency").dir(dir.path()).open().expect("open");
        p.wait_connected(Duration::from_secs(10)).expect("connected");
        shm = Some(Lane::new(&o, p, s));
    }
    let mut cb = None;
    if wants("crossbeam-channel") {
        let (tx, rx) = crossbeam_channel::bounded::<[u8; 32]>(8192);
        cb = Some(Lane::new(&o, tx, rx));
    }
    let mut raw = None;
    if wants("bare-ring") {
        let (tx, rx) = tr::raw::channel(8192);
        raw = Some(Lane::new(&o, tx, rx));
    }
    let mut had_driver = false;
    with_aeron(&o, wants("aeron-rs"), |aeron| {
        let mut lanes: Vec<(&'static str, &mut dyn Turns)> = Vec::new();
        if let Some(l) = shm.as_mut() {
            lanes.push(("shmlog", l));
        }
        if let Some(l) = aeron {
            had_driver = true;
            lanes.push(("aeron-rs", l));
        }
        if let Some(l) = cb.as_mut() {
            lanes.push(("crossbeam-channel", l));
        }
        if let Some(l) = raw.as_mut() {
            lanes.push(("bare-ring", l));
        }
        run_interleaved(&o, &mut lanes);
    });
    // The Aeron driver's threads wake up now and then on these two CPUs and delay whichever
    // thread they interrupt, so the figures above have its noise in all three columns. shmlog
    // is deployed without one: measure it once more as it runs on a host of its own.
    if let (true, Some(l)) = (had_driver, shm.as_mut()) {
        run_interleaved(&o, &mut [("shmlog-alone", l)]);
    }
}

/// Calls `f` with a lane over aeron-rs and a media driver of its own (`None`, after a SKIPPED
/// line, without Java, the jar or the feature), and stops both afterwards.
fn with_aeron(o: &Opts, wanted: bool, f: impl FnOnce(Option<&mut dyn Turns>)) {
    use shmlog_compare::aeron_driver::MediaDriver;
    use tr::aeron::{AeronSinkRx, AeronTx, Client};
    if !wanted {
        return f(None);
    }
    let started = MediaDriver::start(o.term)
        .and_then(|driver| Client::connect(&driver.dir_string(), &[1001]).map(|client| (client, driver)));
    let (client, driver) = match started {
        Ok(both) => both,
        Err(why) => {
            println!("aeron-rs           SKIPPED: {why}");
            return f(None);
        }
    };
    {
        let publication = client.publications[0].lock().unwrap();
        let rx = AeronSinkRx::new(client.subscriptions[0].clone());
        let mut lane = Lane::new(o, AeronTx(&publication), rx);
        f(Some(&mut lane));
    } // the lane's receiver is joined here, before the client and the driver go
    drop(client);
    drop(driver);
}
