//! The bridge pair against plain Aeron over the same UDP path, in the same run.
//!
//! Two Java media drivers (1.51.0, SHARED threading, backoff idle, 1 MiB terms, MTU 1408), each
//! in its own directory, stand for two hosts joined by UDP on loopback. Two systems carry 32-byte
//! messages from "host A" to "host B":
//!
//! - `aeron`: an aeron-rs publication on driver A, an aeron-rs subscription on driver B;
//! - `bridge`: a shmlog publication on A → `BridgeOut` → driver A → UDP → driver B → `BridgeIn`
//!   → a shmlog subscription on B (both bridges in threads of this process, with their default
//!   back-off idling).
//!
//! Workloads, the systems taking turns round by round:
//! - `throughput_32B` (criterion): back-to-back offers, the receiver thread counting; time per
//!   message from the first offer to the last receipt;
//! - `oneway_32B`: 10 000 msg/s stamped with the monotonic clock, the receiver recording
//!   `now - stamp` (same process, same clock); percentiles. A third lane, `two_shmlog_hops`,
//!   measures the two hops the bridge pair adds, without Aeron: a relay thread woken by the
//!   stream's doorbell (as the out bridge is) writing into a second stream (as the in bridge
//!   does), and a reader polling it. Plain Aeron plus those two hops is the bridge pair's floor
//!   on this machine.
//!
//! Needs Java 17+ and the driver jar (scripts/fetch-aeron-driver.sh);
//! without them it prints SKIPPED.

#[path = "../../benches/support/mod.rs"]
mod support;

use aeron_rs::aeron::Aeron;
use aeron_rs::concurrent::atomic_buffer::AtomicBuffer;
use aeron_rs::concurrent::logbuffer::header::Header as AeronHeader;
use aeron_rs::context::Context;
use aeron_rs::utils::types::Index;
use criterion::{BenchmarkId, Throughput};
use shmlog::{Header, OfferError, Publication, Subscription};
use shmlog_bridge::{BridgeBuilder, Driver, DriverConfig, MediaDriver};
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use support::{Args, Pcts, ShmDir};

const B: &str = "bridge";
const STREAM: &str = "bridge-bench";
const RATE: f64 = 10_000.0;

/// Nanoseconds on the monotonic clock since the bench started (one clock for both ends).
fn now_ns(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

/// What a receiver thread has seen: a count, and one-way latencies while `record` is on.
struct Sink {
    count: AtomicU64,
    record: AtomicBool,
    samples: Mutex<Vec<f64>>,
    stop: AtomicBool,
    t0: Instant,
}

impl Sink {
    fn new(t0: Instant) -> Arc<Sink> {
        Arc::new(Sink {
            count: AtomicU64::new(0),
            record: AtomicBool::new(false),
            samples: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            t0,
        })
    }

    fn on_message(&self, m: &[u8]) {
        if self.record.load(Ordering::Relaxed) {
            let stamp = u64::from_le_bytes(m[..8].try_into().unwrap());
            self.samples.lock().unwrap().push(now_ns(self.t0).saturating_sub(stamp) as f64);
        }
        self.count.fetch_add(1, Ordering::Release);
    }

    fn wait_count(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.count.load(Ordering::Acquire) < n {
            assert!(
                Instant::now() < deadline,
                "[{B}] receiver stalled at {} of {n}",
                self.count.load(Ordering::Relaxed)
            );
            std::thread::yield_now();
        }
    }
}

/// A system's threads, stopped and joined on drop (one system runs at a time: two cores).
struct Running {
    stop: Arc<AtomicBool>,
    sink: Arc<Sink>,
    handles: Vec<JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.sink.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// A sending end of either system.
trait Send32 {
    /// Offers `m`; false if pushed back.
    fn try_send(&mut self, m: &[u8; 32]) -> bool;
}

impl Send32 for Publication {
    fn try_send(&mut self, m: &[u8; 32]) -> bool {
        match self.offer(m) {
            Ok(_) => true,
            Err(OfferError::BackPressured | OfferError::NotConnected) => false,
            Err(e) => panic!("[{B}] offer: {e}"),
        }
    }
}

struct AeronTx(Arc<Mutex<aeron_rs::publication::Publication>>, [u8; 32]);

impl Send32 for AeronTx {
    fn try_send(&mut self, m: &[u8; 32]) -> bool {
        self.1 = *m;
        let p = self.0.lock().unwrap();
        p.offer_part(AtomicBuffer::wrap_slice(&mut self.1), 0, 32).is_ok()
    }
}

fn send(tx: &mut impl Send32, m: &[u8; 32]) {
    while !tx.try_send(m) {
        std::thread::yield_now();
    }
}

/// An aeron-rs client on `dir` whose conductor is invoked by a thread of its own every
/// millisecond; returns what `setup` made with it.
fn aeron_client<T: Send + 'static>(
    dir: String,
    stop: Arc<AtomicBool>,
    setup: impl FnOnce(&mut Aeron) -> T + Send + 'static,
) -> (T, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut ctx = Context::new();
        ctx.set_aeron_dir(dir);
        ctx.set_use_conductor_agent_invoker(true);
        let mut aeron = Aeron::new(ctx).expect("aeron-rs connect");
        tx.send(setup(&mut aeron)).unwrap();
        while !stop.load(Ordering::Relaxed) {
            aeron.conductor_agent_invoker().invoke();
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    (rx.recv().unwrap(), h)
}

fn find<T>(
    aeron: &mut Aeron,
    mut f: impl FnMut(&mut Aeron) -> Result<T, aeron_rs::utils::errors::AeronError>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        aeron.conductor_agent_invoker().invoke();
        match f(aeron) {
            Ok(x) => return x,
            Err(e) if Instant::now() > deadline => panic!("[{B}] aeron-rs: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// Plain Aeron: a publication on driver A, a subscription on driver B, a receiver thread.
fn plain(a: &MediaDriver, b: &MediaDriver, channel: &str, t0: Instant) -> (AeronTx, Running) {
    let (sink, stop) = (Sink::new(t0), Arc::new(AtomicBool::new(false)));
    let ch = CString::new(channel).unwrap();
    let c2 = ch.clone();
    let (sub, hb) = aeron_client(b.dir().display().to_string(), stop.clone(), move |aeron| {
        let id = aeron.add_subscription(c2, 1).unwrap();
        find(aeron, |a| a.find_subscription(id))
    });
    let (publication, ha) = aeron_client(a.dir().display().to_string(), stop.clone(), move |aeron| {
        let id = aeron.add_publication(ch, 1).unwrap();
        find(aeron, |a| a.find_publication(id))
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !publication.lock().unwrap().is_connected() {
        assert!(Instant::now() < deadline, "[{B}] aeron publication never connected");
        std::thread::sleep(Duration::from_millis(5));
    }
    let s = sink.clone();
    let rx = std::thread::spawn(move || {
        let sink = s;
        let mut handler = |buf: &AtomicBuffer, offset: Index, length: Index, _: &AeronHeader| {
            sink.on_message(&buf.as_slice()[offset as usize..(offset + length) as usize]);
        };
        while !sink.stop.load(Ordering::Relaxed) {
            if sub.lock().unwrap().poll(&mut handler, 256) == 0 {
                std::thread::yield_now();
            }
        }
    });
    (AeronTx(publication, [0; 32]), Running { stop, sink, handles: vec![rx, ha, hb] })
}

/// The two hops the bridge pair adds to plain Aeron, without Aeron: a shmlog publication, a relay
/// thread that sleeps on the stream's doorbell as `BridgeOut::run` does and offers each message
/// into a second stream (as `BridgeIn` does), and a reader of that stream polling as the others.
fn hops(t0: Instant) -> (Publication, Running) {
    let (sink, stop) = (Sink::new(t0), Arc::new(AtomicBool::new(false)));
    let (d1, d2) = (ShmDir::new("bridge-bench-hop1"), ShmDir::new("bridge-bench-hop2"));
    let publication = Publication::builder(STREAM).dir(d1.path()).create().unwrap();
    let mut relay_in = Subscription::builder(STREAM).dir(d1.path()).open().unwrap();
    let mut relay_out = Publication::builder(STREAM).dir(d2.path()).create().unwrap();
    let mut sub = Subscription::builder(STREAM).dir(d2.path()).open().unwrap();
    let st = stop.clone();
    let relay = std::thread::spawn(move || {
        let mut scratch = Vec::new();
        while !st.load(Ordering::Relaxed) {
            let n = relay_in.poll(
                |m: &[u8], _: &Header| {
                    scratch.clear();
                    scratch.extend_from_slice(m);
                    while relay_out.offer(&scratch).is_err() {
                        std::thread::yield_now();
                    }
                },
                64,
            );
            if n == 0 {
                relay_in.wait_readable(Duration::from_millis(1));
            }
        }
    });
    let s = sink.clone();
    let rx = std::thread::spawn(move || {
        let sink = s;
        let _dirs = (d1, d2);
        while !sink.stop.load(Ordering::Relaxed) {
            if sub.poll(|m: &[u8], _: &Header| sink.on_message(m), 256) == 0 {
                shmlog_reader_idle(&mut sub);
            }
        }
    });
    (publication, Running { stop, sink, handles: vec![relay, rx] })
}

/// The bridge pair: a shmlog publication on A, both bridges in threads, a reader on B.
fn bridged(a: &MediaDriver, b: &MediaDriver, channel: &str, t0: Instant) -> (Publication, Running) {
    let (sink, stop) = (Sink::new(t0), Arc::new(AtomicBool::new(false)));
    let (da, db) = (ShmDir::new("bridge-bench-a"), ShmDir::new("bridge-bench-b"));
    let publication = Publication::builder(STREAM).dir(da.path()).create().unwrap();
    let bridge = |dir: &ShmDir, driver: &MediaDriver| {
        BridgeBuilder::new(STREAM)
            .dir(dir.path())
            .channel(channel)
            .aeron_stream_id(2)
            .driver(Driver::Attach(driver.dir().to_path_buf()))
            // `BRIDGE_BENCH_SPIN_US`: the out bridge polls that long before sleeping (default 0).
            .spin_before_sleep(Duration::from_micros(
                std::env::var("BRIDGE_BENCH_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(0),
            ))
    };
    let (ready_tx, ready_rx) = mpsc::channel();
    let (inb, st, r) = (bridge(&db, b), stop.clone(), ready_tx.clone());
    let hin = std::thread::spawn(move || {
        let mut bridge = inb.open_in().expect("bridge in");
        r.send(()).unwrap();
        // Polled as the plain Aeron receiver polls: yielding between empty polls.
        bridge.run_with(&st, &mut shmlog::Yielding);
    });
    ready_rx.recv().unwrap();
    let mut sub = Subscription::builder(STREAM)
        .dir(db.path())
        .wait_for_publisher(Duration::from_secs(30))
        .open()
        .unwrap();
    let (outb, st) = (bridge(&da, a), stop.clone());
    let hout = std::thread::spawn(move || {
        let mut bridge = outb.open_out().expect("bridge out");
        ready_tx.send(()).unwrap();
        bridge.run(&st);
    });
    ready_rx.recv().unwrap();
    let s = sink.clone();
    let rx = std::thread::spawn(move || {
        let sink = s;
        let _dirs = (da, db); // removed when the receiver ends
        while !sink.stop.load(Ordering::Relaxed) {
            if sub.poll(|m: &[u8], _: &Header| sink.on_message(m), 256) == 0 {
                shmlog_reader_idle(&mut sub);
            }
        }
    });
    // The receiver last: its directories outlive the bridges.
    (publication, Running { stop, sink, handles: vec![hin, hout, rx] })
}

/// CPU time so far of this process and both drivers (every thread), in nanoseconds: a
/// pipeline on 2 cores is bound by the CPU it spends per message.
fn cpu_ns(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_dir(format!("/proc/{pid}/task")).ok())
        .flat_map(|tasks| tasks.flatten())
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()))
        .sum()
}

/// How the shmlog readers idle: yield as the plain Aeron receiver does, or (`BRIDGE_BENCH_WAIT=1`)
/// sleep on the doorbell.
fn shmlog_reader_idle(sub: &mut Subscription) {
    if std::env::var_os("BRIDGE_BENCH_WAIT").is_some() {
        sub.wait_readable(Duration::from_millis(1));
    } else {
        std::thread::yield_now();
    }
}

/// Sends `n` messages back to back and waits for all; returns the time.
fn burst(tx: &mut impl Send32, sink: &Sink, n: u64) -> Duration {
    let start = Instant::now();
    let base = sink.count.load(Ordering::Acquire);
    let m = [0u8; 32];
    for _ in 0..n {
        send(tx, &m);
    }
    sink.wait_count(base + n);
    start.elapsed()
}

/// Sends `n` stamped messages at [`RATE`] and returns the one-way latencies (ns).
fn paced(tx: &mut impl Send32, sink: &Sink, n: u64) -> Vec<f64> {
    let base = sink.count.load(Ordering::Acquire);
    sink.samples.lock().unwrap().clear();
    sink.record.store(true, Ordering::Relaxed);
    let gap = Duration::from_secs_f64(1.0 / RATE);
    let mut next = Instant::now();
    let mut m = [0u8; 32];
    for _ in 0..n {
        while Instant::now() < next {
            std::thread::yield_now();
        }
        next += gap;
        m[..8].copy_from_slice(&now_ns(sink.t0).to_le_bytes());
        send(tx, &m);
    }
    sink.wait_count(base + n);
    sink.record.store(false, Ordering::Relaxed);
    std::mem::take(&mut *sink.samples.lock().unwrap())
}

fn start_driver(tag: &str) -> Result<MediaDriver, String> {
    let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm").join(dir.file_name().unwrap())
    } else {
        dir
    };
    // The jar: $AERON_JAR, else found in target/aeron/ (DriverConfig::jar_search_list).
    let mut cfg = DriverConfig::new(dir);
    cfg.properties.push(("aeron.mtu.length".into(), "1408".into()));
    MediaDriver::start(&cfg)
}

/// Both systems, built afresh for each measurement on new ports and stream ids.
struct Hosts {
    a: MediaDriver,
    b: MediaDriver,
    t0: Instant,
}

impl Hosts {
    fn channel() -> String {
        let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        format!("aeron:udp?endpoint=127.0.0.1:{port}")
    }

    fn plain(&self) -> (AeronTx, Running) {
        let (mut tx, r) = plain(&self.a, &self.b, &Self::channel(), self.t0);
        burst(&mut tx, &r.sink, WARM_UP); // every term of both logs once
        (tx, r)
    }

    fn hops(&self) -> (Publication, Running) {
        let (mut tx, r) = hops(self.t0);
        tx.wait_for_readers(1, Duration::from_secs(30)).unwrap();
        burst(&mut tx, &r.sink, WARM_UP);
        (tx, r)
    }

    fn bridged(&self) -> (Publication, Running) {
        let (mut tx, r) = bridged(&self.a, &self.b, &Self::channel(), self.t0);
        tx.wait_for_readers(1, Duration::from_secs(30)).unwrap();
        burst(&mut tx, &r.sink, WARM_UP);
        (tx, r)
    }
}

/// Warm-up messages: 3 terms of 1 MiB at 64 bytes a frame.
const WARM_UP: u64 = 50_000;

fn main() {
    let args = Args::parse();
    support::banner(B);
    let drivers =
        start_driver("aeron-bench-host-a").and_then(|a| Ok((a, start_driver("aeron-bench-host-b")?)));
    let (a, b) = match drivers {
        Ok(d) => d,
        Err(e) => {
            eprintln!("[{B}] SKIPPED: {e}");
            return;
        }
    };
    let hosts = Hosts { a, b, t0: Instant::now() };

    let mut c = support::criterion(Duration::from_millis(500), Duration::from_secs(3));
    let mut g = c.benchmark_group(format!("{B}/throughput_32B"));
    g.throughput(Throughput::Elements(1));
    {
        let (mut tx, r) = hosts.plain();
        g.bench_function(BenchmarkId::from_parameter("aeron"), |bn| {
            bn.iter_custom(|n| burst(&mut tx, &r.sink, n))
        });
    }
    {
        let (mut tx, r) = hosts.bridged();
        g.bench_function(BenchmarkId::from_parameter("bridge"), |bn| {
            bn.iter_custom(|n| burst(&mut tx, &r.sink, n))
        });
    }
    g.finish();

    // Alternating rounds, each system built afresh and alone: throughput, then one-way latency.
    let rounds = args.n(5, 1);
    let n = args.n(1_000_000, 2_000) as u64;
    let per = args.n(10_000, 200) as u64;
    let (mut ta, mut tb, mut la, mut lb, mut lh) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let pids = [std::process::id(), hosts.a.pid(), hosts.b.pid()];
    let (mut ca, mut cb) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (mut tx, r) = hosts.plain();
        let cpu = cpu_ns(&pids);
        ta.push(n as f64 / burst(&mut tx, &r.sink, n).as_secs_f64());
        ca.push((cpu_ns(&pids) - cpu) as f64 / n as f64);
        la.extend(paced(&mut tx, &r.sink, per));
        drop(r);
        let (mut tx, r) = hosts.bridged();
        let cpu = cpu_ns(&pids);
        tb.push(n as f64 / burst(&mut tx, &r.sink, n).as_secs_f64());
        cb.push((cpu_ns(&pids) - cpu) as f64 / n as f64);
        lb.extend(paced(&mut tx, &r.sink, per));
        drop(r);
        let (mut tx, r) = hosts.hops();
        lh.extend(paced(&mut tx, &r.sink, per));
    }
    let (cpu_a, cpu_b) = (Pcts::of(&mut ca).p50, Pcts::of(&mut cb).p50);
    support::record_value(B, "cpu_per_message/aeron", cpu_a, "ns");
    support::record_value(B, "cpu_per_message/bridge", cpu_b, "ns");
    eprintln!(
        "[{B}] CPU per message in the bursts (this process and both drivers, all threads): bridge pair {:.2}× plain \
         Aeron; on {} cores a CPU-bound pipeline's throughput ratio cannot exceed {:.2}",
        cpu_b / cpu_a,
        support::cores(),
        cpu_a / cpu_b
    );
    let (ma, mb) = (Pcts::of(&mut ta).p50, Pcts::of(&mut tb).p50);
    support::record_value(B, "throughput_32B/aeron", ma, "msgs/s");
    support::record_value(B, "throughput_32B/bridge", mb, "msgs/s");
    eprintln!(
        "[{B}] throughput: bridge pair {:.2}× plain Aeron's messages/s (median of {rounds} rounds of {n})",
        mb / ma
    );
    let (pa, pb, ph) = (Pcts::of(&mut la), Pcts::of(&mut lb), Pcts::of(&mut lh));
    pa.report(B, "oneway_32B/aeron");
    pb.report(B, "oneway_32B/bridge");
    ph.report(B, "oneway_32B/two_shmlog_hops");
    eprintln!(
        "[{B}] floor of the bridge pair: plain Aeron p50 + the two shmlog hops' p50 = {:.2}× plain Aeron's p50",
        (pa.p50 + ph.p50) / pa.p50
    );
    eprintln!(
        "[{B}] one-way at {RATE} msg/s: bridge pair p50 {:.2}×, p99 {:.2}× plain Aeron",
        pb.p50 / pa.p50,
        pb.p99 / pa.p99
    );
    c.final_summary();
}
