//! `shmlog latency`: one-way latency between a publisher and a subscriber.
//!
//! Every message starts with the `CLOCK_MONOTONIC` time at which it was offered (8 bytes, little
//! endian) and a sequence number (8 bytes); the subscriber subtracts the first from its own clock
//! when the message is delivered. Both ends may be separate processes: the clock is the host's.

use crate::histogram::{self, Summary};
use crate::sys::{mono_ns, stop_requested};
use clap::ValueEnum;
use shmlog::{
    Backoff, BusySpin, FragmentAssembler, Header, IdleStrategy, NoOp, OfferError, Publication, Sleeping,
    Subscription, Yielding,
};
use std::cell::Cell;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Bytes of timestamp and sequence number at the start of every message.
pub(crate) const STAMP_LEN: usize = 16;

/// How a loop waits when it found nothing to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum IdleKind {
    /// Spin with the CPU's spin hint: lowest latency, one full core.
    Spin,
    /// Spin without even the hint.
    Noop,
    /// Yield to the scheduler.
    Yield,
    /// Sleep 1 µs (the kernel rounds it up, typically to 50+ µs).
    Sleep,
    /// Spin, then yield, then park from 1 µs doubling to 1 ms.
    Backoff,
}

/// Runs `$body` with `$idle` bound to the chosen strategy's concrete type (no dynamic dispatch
/// in the measured loops).
macro_rules! with_idle {
    ($kind:expr, |$idle:ident| $body:expr) => {
        match $kind {
            IdleKind::Spin => {
                let $idle = BusySpin;
                $body
            }
            IdleKind::Noop => {
                let $idle = NoOp;
                $body
            }
            IdleKind::Yield => {
                let $idle = Yielding;
                $body
            }
            IdleKind::Sleep => {
                let $idle = Sleeping::default();
                $body
            }
            IdleKind::Backoff => {
                let $idle = Backoff::default();
                $body
            }
        }
    };
}

/// Errors of the latency commands, already phrased for people.
#[derive(Debug)]
pub(crate) enum RunError {
    Shmlog(shmlog::Error),
    Offer(OfferError),
    Other(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Shmlog(e) => e.fmt(f),
            Self::Offer(e) => write!(f, "offer failed: {e}"),
            Self::Other(s) => f.write_str(s),
        }
    }
}

impl From<shmlog::Error> for RunError {
    fn from(e: shmlog::Error) -> Self {
        Self::Shmlog(e)
    }
}

impl From<OfferError> for RunError {
    fn from(e: OfferError) -> Self {
        Self::Offer(e)
    }
}

/// Prints "[ 3 s] <what> N (R msg/s)" to stderr about once a second.
struct Progress {
    what: &'static str,
    start: Instant,
    next: Instant,
    last_count: u64,
    last_at: Instant,
}

impl Progress {
    fn new(what: &'static str) -> Self {
        let now = Instant::now();
        Self { what, start: now, next: now + Duration::from_secs(1), last_count: 0, last_at: now }
    }

    #[inline]
    fn tick(&mut self, count: u64) {
        let now = Instant::now();
        if now >= self.next {
            self.print(count, now);
        }
    }

    #[cold]
    fn print(&mut self, count: u64, now: Instant) {
        let secs = now.duration_since(self.last_at).as_secs_f64();
        let rate = (count - self.last_count) as f64 / secs;
        eprintln!(
            "[{:>4.0} s] {} {count} ({rate:.0} msg/s)",
            now.duration_since(self.start).as_secs_f64(),
            self.what
        );
        self.last_count = count;
        self.last_at = now;
        self.next = now + Duration::from_secs(1);
    }
}

/// Settings shared by the publisher side.
#[derive(Clone, Debug)]
pub(crate) struct PubArgs {
    pub dir: PathBuf,
    pub stream: String,
    pub rate: f64,
    pub duration: f64,
    pub size: usize,
    pub term_length: usize,
    pub wait: f64,
    pub idle: IdleKind,
}

/// Settings of the subscriber side.
#[derive(Clone, Debug)]
pub(crate) struct SubArgs {
    pub dir: PathBuf,
    pub stream: String,
    pub count: u64,
    pub timeout: f64,
    pub warmup: usize,
    pub idle: IdleKind,
    pub hgrm: Option<PathBuf>,
    pub svg: Option<PathBuf>,
}

/// Why a receiving loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Count,
    Closed,
    Timeout,
    Interrupted,
}

impl End {
    fn describe(self) -> &'static str {
        match self {
            End::Count => "all messages received",
            End::Closed => "the publisher closed the stream",
            End::Timeout => "timed out waiting for a message",
            End::Interrupted => "interrupted: partial result",
        }
    }
}

struct Received {
    samples: Vec<u64>,
    malformed: u64,
    elapsed: Duration,
    end: End,
}

/// Polls until `count` messages (0: until end of stream), end of stream, `timeout` without a
/// message, or Ctrl-C.
fn receive(
    mut sub: Subscription,
    mut idle: impl IdleStrategy,
    count: u64,
    timeout: Duration,
    ready: Option<&AtomicBool>,
) -> Received {
    let capacity = if count > 0 { count.min(50_000_000) as usize } else { 1 << 20 };
    let mut samples: Vec<u64> = Vec::with_capacity(capacity);
    let mut malformed = 0u64;
    // Read by the loop while the handler (which holds `samples` mutably) counts.
    let received = Cell::new(0u64);
    let record = |payload: &[u8], _: &Header| {
        let now = mono_ns();
        match payload.get(..8) {
            Some(stamp) => {
                let sent = u64::from_le_bytes(stamp.try_into().expect("8 bytes"));
                samples.push(now.saturating_sub(sent));
                received.set(received.get() + 1);
            }
            None => malformed += 1,
        }
    };
    let mut assembler = FragmentAssembler::with_capacity(record, 4096);
    let mut progress = Progress::new("received");
    let mut last_message = Instant::now();
    let mut first: Option<Instant> = None;
    if let Some(ready) = ready {
        ready.store(true, Ordering::Release);
    }
    let end = loop {
        let n = sub.poll(&mut assembler, 256);
        let got = received.get();
        if n > 0 {
            last_message = Instant::now();
            first.get_or_insert(last_message);
            if count > 0 && got >= count {
                break End::Count;
            }
            progress.tick(got);
            idle.idle(n);
            continue;
        }
        if stop_requested() {
            break End::Interrupted;
        }
        if got > 0 && sub.is_end_of_stream() {
            break End::Closed;
        }
        if last_message.elapsed() > timeout {
            break End::Timeout;
        }
        progress.tick(got);
        idle.idle(0);
    };
    drop(assembler);
    let elapsed = first.map_or(Duration::ZERO, |t| last_message.duration_since(t));
    Received { samples, malformed, elapsed, end }
}

/// Writes `msg`'s timestamp and sequence number.
#[inline(always)]
fn stamp(msg: &mut [u8], seq: u64) {
    msg[8..16].copy_from_slice(&seq.to_le_bytes());
    msg[..8].copy_from_slice(&mono_ns().to_le_bytes());
}

/// What a publishing loop did.
struct Sent {
    sent: u64,
    back_pressured: u64,
    elapsed: Duration,
    note: Option<&'static str>,
}

/// Offers `total` messages of `size` bytes, spaced `interval_ns` apart (0: as fast as possible).
fn send(
    publication: &mut Publication,
    mut idle: impl IdleStrategy,
    total: u64,
    interval_ns: f64,
    size: usize,
) -> Result<Sent, RunError> {
    let mut msg = vec![0u8; size];
    let mut progress = Progress::new("sent");
    let mut back_pressured = 0u64;
    let start_instant = Instant::now();
    let start = mono_ns();
    let mut sent = 0u64;
    let mut note = None;
    'outer: while sent < total {
        if interval_ns > 0.0 {
            let due = start + (sent as f64 * interval_ns) as u64;
            idle.reset();
            while mono_ns() < due {
                if stop_requested() {
                    note = Some("interrupted");
                    break 'outer;
                }
                progress.tick(sent);
                idle.idle(0);
            }
        }
        idle.reset();
        loop {
            stamp(&mut msg, sent);
            match publication.offer(&msg) {
                Ok(_) => break,
                Err(OfferError::BackPressured) => {
                    back_pressured += 1;
                    if stop_requested() {
                        note = Some("interrupted");
                        break 'outer;
                    }
                    progress.tick(sent);
                    idle.idle(0);
                }
                Err(OfferError::NotConnected) => {
                    note = Some("the subscriber went away");
                    break 'outer;
                }
                Err(e) => return Err(e.into()),
            }
        }
        sent += 1;
        progress.tick(sent);
    }
    Ok(Sent { sent, back_pressured, elapsed: start_instant.elapsed(), note })
}

fn check_size(size: usize, publication: &Publication) -> Result<(), RunError> {
    if size < STAMP_LEN || size > publication.max_message_len() {
        return Err(RunError::Other(format!(
            "--size must be from {STAMP_LEN} (timestamp and sequence) to {} bytes (the term length / 8)",
            publication.max_message_len()
        )));
    }
    Ok(())
}

/// Waits for a subscriber, up to `wait` seconds or Ctrl-C; `Ok(false)` if interrupted.
fn wait_for_subscriber(publication: &mut Publication, wait: f64) -> Result<bool, RunError> {
    let deadline = Instant::now() + Duration::from_secs_f64(wait);
    while !publication.is_connected() {
        if stop_requested() {
            return Ok(false);
        }
        if Instant::now() >= deadline {
            return Err(RunError::Other(format!(
                "no subscriber joined {} within {wait} s",
                publication.path().display()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(true)
}

fn sent_line(s: &Sent, size: usize) -> String {
    let secs = s.elapsed.as_secs_f64().max(1e-9);
    format!(
        "sent {} messages of {size} bytes in {secs:.3} s ({:.0} msg/s, {:.3} MB/s), back-pressured {} times{}",
        s.sent,
        s.sent as f64 / secs,
        s.sent as f64 * size as f64 / secs / 1e6,
        s.back_pressured,
        s.note.map_or_else(String::new, |n| format!(" ({n})"))
    )
}

/// `shmlog latency pub`.
pub(crate) fn run_pub(a: &PubArgs) -> Result<(), RunError> {
    let positive = |v: f64| v > 0.0 && v.is_finite();
    if !positive(a.rate) || !positive(a.duration) {
        return Err(RunError::Other("--rate and --duration must be positive".into()));
    }
    let mut publication = Publication::builder(&a.stream).dir(&a.dir).term_length(a.term_length).create()?;
    check_size(a.size, &publication)?;
    let total = (a.rate * a.duration).round().max(1.0) as u64;
    eprintln!(
        "publishing {total} messages of {} bytes at {} msg/s on {} (pid {}); waiting up to {} s for a subscriber",
        a.size,
        a.rate,
        publication.path().display(),
        std::process::id(),
        a.wait
    );
    if !wait_for_subscriber(&mut publication, a.wait)? {
        println!("interrupted before a subscriber joined");
        return Ok(());
    }
    let sent = with_idle!(a.idle, |idle| send(&mut publication, idle, total, 1e9 / a.rate, a.size))?;
    println!("{}", sent_line(&sent, a.size));
    Ok(())
}

/// `shmlog latency sub`.
pub(crate) fn run_sub(a: &SubArgs) -> Result<(), RunError> {
    let sub = Subscription::builder(&a.stream).dir(&a.dir).open()?;
    let until = if a.count > 0 { format!("{} messages", a.count) } else { "the end of stream".to_owned() };
    eprintln!(
        "subscribed to {} in {} (pid {}); stopping at {until}, or after {} s without a message",
        a.stream,
        a.dir.display(),
        std::process::id(),
        a.timeout
    );
    let timeout = Duration::from_secs_f64(a.timeout);
    let got = with_idle!(a.idle, |idle| receive(sub, idle, a.count, timeout, None));
    report(&got, a.warmup, a.hgrm.as_deref(), a.svg.as_deref())
}

/// Settings of `shmlog latency burst`.
#[derive(Clone, Debug)]
pub(crate) struct BurstArgs {
    pub dir: PathBuf,
    pub stream: Option<String>,
    pub count: u64,
    pub size: usize,
    pub term_length: usize,
    pub warmup: usize,
    pub idle: IdleKind,
    pub hgrm: Option<PathBuf>,
    pub svg: Option<PathBuf>,
}

/// `shmlog latency burst`: both ends in this process, on two threads; the publisher offers as
/// fast as flow control allows.
pub(crate) fn run_burst(a: &BurstArgs) -> Result<(), RunError> {
    let stream = a.stream.clone().unwrap_or_else(|| format!("shmlog-burst-{}", std::process::id()));
    let mut publication = Publication::builder(&stream).dir(&a.dir).term_length(a.term_length).create()?;
    check_size(a.size, &publication)?;
    let sub = Subscription::builder(&stream).dir(&a.dir).open()?;
    if !wait_for_subscriber(&mut publication, 5.0)? {
        return Ok(());
    }
    eprintln!("burst of {} messages of {} bytes on {}", a.count, a.size, publication.path().display());
    // The publisher starts once the receiving thread polls, so the figures measure the burst,
    // not how long the scheduler took to start a thread.
    let ready = AtomicBool::new(false);
    let (sent, got) = std::thread::scope(|scope| {
        let receiver = scope.spawn(|| {
            let timeout = Duration::from_secs(10);
            with_idle!(a.idle, |idle| receive(sub, idle, a.count, timeout, Some(&ready)))
        });
        while !ready.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let sent = with_idle!(a.idle, |idle| send(&mut publication, idle, a.count, 0.0, a.size));
        (sent, receiver.join().expect("the receiving thread does not panic"))
    });
    let sent = sent?;
    println!("{}", sent_line(&sent, a.size));
    drop(publication);
    report(&got, a.warmup, a.hgrm.as_deref(), a.svg.as_deref())
}

/// Prints the summary, the 20 groups, and writes the optional files.
fn report(got: &Received, warmup: usize, hgrm: Option<&Path>, svg: Option<&Path>) -> Result<(), RunError> {
    let samples = &got.samples[warmup.min(got.samples.len())..];
    let secs = got.elapsed.as_secs_f64();
    println!(
        "received {} messages in {secs:.3} s ({:.0} msg/s); {}{}",
        got.samples.len(),
        if secs > 0.0 { got.samples.len() as f64 / secs } else { 0.0 },
        got.end.describe(),
        if got.malformed > 0 {
            format!("; {} messages too short to carry a timestamp", got.malformed)
        } else {
            String::new()
        }
    );
    let Some(all) = histogram::summarize(samples) else {
        return Err(RunError::Other(match got.end {
            End::Interrupted => "interrupted before any message arrived".to_owned(),
            _ => "no message received".to_owned(),
        }));
    };
    print!(
        "{}",
        format_report(&all, &histogram::group_summaries(samples, 20), warmup.min(got.samples.len()))
    );
    if hgrm.is_some() || svg.is_some() {
        let h = histogram::histogram(samples);
        if let Some(path) = hgrm {
            std::fs::write(path, histogram::hgrm(&h))
                .map_err(|e| RunError::Other(format!("{}: write histogram: {e}", path.display())))?;
            println!("wrote {}", path.display());
        }
        if let Some(path) = svg {
            let title = format!("shmlog one-way latency, {} messages", samples.len());
            std::fs::write(path, histogram::svg(&histogram::curve(&h), &title))
                .map_err(|e| RunError::Other(format!("{}: write plot: {e}", path.display())))?;
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// The summary block and the per-group table.
fn format_report(all: &Summary, groups: &[Summary], skipped: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\none-way latency in µs (CLOCK_MONOTONIC){}:",
        if skipped > 0 { format!(", first {skipped} skipped as warm-up") } else { String::new() }
    );
    let _ = writeln!(s, "  count  {:>12}", all.count);
    let _ = writeln!(s, "  mean   {:>12.3}", histogram::us(all.mean));
    let _ = writeln!(s, "  min    {:>12.3}", histogram::us(all.min as f64));
    let _ = writeln!(s, "  max    {:>12.3}", histogram::us(all.max as f64));
    for ((_, name), v) in histogram::PERCENTILES.iter().zip(all.percentiles) {
        let _ = writeln!(s, "  {name:<6} {:>12.3}", histogram::us(v as f64));
    }
    let _ = writeln!(s, "\nin {} consecutive groups, in time order:", groups.len());
    let _ = writeln!(s, "{}", histogram::table_header("group"));
    for (i, g) in groups.iter().enumerate() {
        let _ = writeln!(s, "{}", histogram::table_row(&format!("{}/{}", i + 1, groups.len()), g));
    }
    s
}
