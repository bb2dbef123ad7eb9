//! A sender woken for room: how soon a publisher held back by its reader runs again once the
//! reader moves, for each way a sender can wait (issue 33: "`AsyncSender` waiting for room:
//! woken within the same bound as a receiver"):
//!
//! - `blocking`:     `Sender::send_timeout` (`offer_blocking`: the writer's side of the doorbell);
//! - `async`:        `AsyncSender::send().await` on a current-thread tokio runtime, made inside
//!   it (it awaits the stream's wake FIFO in the runtime's reactor);
//! - `async-waiter`: the same through the process's waiter thread (`SHMLOG_ASYNC_WAITER=1`);
//! - `futex-floor`:  a bare shared futex word the reader bumps and wakes: any wake-up's cost.
//!
//! ```text
//! cargo run --release --example room -- [--rate 1000] [--seconds 3] [--lanes blocking,async,...]
//! ```
//!
//! The reader (this process) takes one message a tick at `--rate` a second: it writes the time
//! into a shared page, then polls one message, which moves its position and rings the writer's
//! bell (the floor: bumps the word and wakes it). The writer (a child process per lane) keeps
//! the log full, so each send waits for the room one message frees, and records now minus that
//! time (the same CLOCK_MONOTONIC in both processes) after the first 5 % of sends. Reported: the
//! wake-up's p50 and p99 in µs, and the writer process's CPU per second (every thread of it).

#[path = "../benches/support/futex.rs"]
mod futex;
#[path = "../benches/support/page.rs"]
mod page;

use hdrhistogram::Histogram;
use shmlog::{AsyncSender, Bytes, Publication, Sender, Subscription};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const LANES: &[&str] = &["blocking", "async", "async-waiter", "futex-floor"];
/// 32 bytes of payload: one 64-byte frame, the room one poll of one message frees.
const MESSAGE: [u8; 32] = [7; 32];
/// The page's slots: the time the reader freed room, and how many sends the writer made.
const FREED_AT: usize = 0;
const SENT: usize = 1;

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of the whole process (user + system, every thread).
fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The writer's side, in a child process: `count` sends, each timed from the reader's stamp.
fn writer(lane: &str, dir: &Path, count: u64) {
    let page = page::Page::open(&dir.join("page"), false);
    let warmup = count / 20;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
    let (mut cpu0, mut wall0) = (0, 0);
    let mut took = |i: u64| {
        if i == warmup {
            (cpu0, wall0) = (process_cpu_ns(), now_ns());
        }
        if i >= warmup {
            hist.saturating_record(now_ns().saturating_sub(page.slot(FREED_AT).load(Ordering::Acquire)));
        }
        page.slot(SENT).store(i + 1, Ordering::Release);
    };
    if lane == "futex-floor" {
        let word = page.word();
        let mut seen = word.load(Ordering::Acquire);
        println!("ready");
        for i in 0..count {
            while word.load(Ordering::Acquire) == seen {
                futex::wait(word, seen, None);
            }
            seen = word.load(Ordering::Acquire);
            took(i);
        }
    } else {
        let publication = Publication::builder("room").dir(dir).term_length(64 * 1024).create().unwrap();
        println!("ready");
        let mut tx = Sender::new(publication, Bytes);
        tx.publication().wait_for_readers(1, Duration::from_secs(30)).unwrap();
        // Fill the log: from here on every send waits for room.
        while tx.send(&MESSAGE.to_vec()).is_ok() {}
        if lane == "blocking" {
            for i in 0..count {
                tx.send_timeout(&MESSAGE.to_vec(), Duration::from_secs(10)).unwrap();
                took(i);
            }
        } else {
            let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
            rt.block_on(async {
                let mut tx = AsyncSender::new(tx).unwrap();
                assert_eq!(tx.in_reactor(), lane == "async", "the sender sleeps in the wrong place");
                let m = MESSAGE.to_vec();
                for i in 0..count {
                    tx.send(&m).await.unwrap();
                    took(i);
                }
            });
        }
    }
    let cores = (process_cpu_ns() - cpu0) as f64 / (now_ns() - wall0).max(1) as f64;
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    println!("report p50={:.1} p99={:.1} cpu={:.4}", us(0.5), us(0.99), cores);
}

/// One lane: a writer process, this process reading one message a tick until it has sent
/// `count`. Returns the writer's report line.
fn run_lane(exe: &Path, dir: &Path, lane: &str, rate: u64, count: u64) -> String {
    let page = page::Page::open(&dir.join("page"), true);
    page.slot(SENT).store(0, Ordering::Release);
    let mut cmd = Command::new(exe);
    cmd.args(["--writer", lane, &count.to_string()]).arg(dir).stdout(Stdio::piped());
    if lane == "async-waiter" {
        cmd.env("SHMLOG_ASYNC_WAITER", "1");
    }
    let mut child = cmd.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the writer failed to start");
    let mut sub = (lane != "futex-floor").then(|| Subscription::builder("room").dir(dir).open().unwrap());
    let period = Duration::from_nanos(1_000_000_000 / rate);
    let start = Instant::now();
    let mut tick = 0u32;
    while page.slot(SENT).load(Ordering::Acquire) < count {
        tick += 1;
        let at = start + period * tick;
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        page.slot(FREED_AT).store(now_ns(), Ordering::Release);
        match &mut sub {
            Some(sub) => {
                sub.poll(|_: &[u8], _: &shmlog::Header| {}, 1);
            }
            None => futex::bump_and_wake_all(page.word()),
        }
        // A writer that died would leave this loop waiting for ever (CI runs it).
        if page.slot(SENT).load(Ordering::Acquire) < count {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("the {lane} writer exited before its last send: {status}");
            }
        }
    }
    line.clear();
    while !line.starts_with("report") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the writer ended without a report");
    }
    child.wait().unwrap();
    line.trim().to_string()
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("--writer") {
        writer(&argv[1], Path::new(&argv[3]), argv[2].parse().unwrap());
        return;
    }
    let (mut rate, mut seconds, mut lanes) = (1000u64, 3.0f64, LANES.iter().map(|s| s.to_string()).collect());
    for pair in argv.chunks(2) {
        let v = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--rate" => rate = v.parse().expect("--rate"),
            "--seconds" => seconds = v.parse().expect("--seconds"),
            "--lanes" => lanes = v.split(',').map(str::to_string).collect::<Vec<_>>(),
            other => panic!("unknown argument {other}"),
        }
    }
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "room: a writer held back by one reader taking {rate} msg/s, {seconds} s per lane, {cores} cores"
    );
    println!(
        "wake-up from the reader's move to the writer's return, µs; the writer process's CPU per second"
    );
    println!("{:14} {:>8} {:>8} {:>8}", "lane", "p50", "p99", "cpu");
    let exe = std::env::current_exe().unwrap();
    let count = (rate as f64 * seconds) as u64;
    for lane in &lanes {
        let dir: PathBuf = std::env::temp_dir().join(format!("shmlog-room-{}-{lane}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let report = run_lane(&exe, &dir, lane, rate, count);
        let field =
            |k: &str| report.split_whitespace().find_map(|w| w.strip_prefix(k)).unwrap_or("?").to_string();
        let cpu: f64 = field("cpu=").parse().unwrap_or(f64::NAN);
        println!("{:14} {:>8} {:>8} {:>7.1}%", lane, field("p50="), field("p99="), cpu * 100.0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
