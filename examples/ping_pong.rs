//! Two processes, two streams: round-trip latency and one-way throughput over shmlog.
//!
//! `cargo run --release --example ping_pong` starts this program again as the "pong" process,
//! then measures:
//! 1. round trips of 32-byte messages (ping → pong → ping), busy-spinning on both sides;
//! 2. one-way throughput: a burst of 32-byte messages the pong process counts and acknowledges.
//!
//! Options (environment): `PING_COUNT` round trips (default 200 000), `BURST` messages (default
//! 10 000 000), `SHMLOG_DIR` directory (default: a fresh one under /dev/shm or the temp dir).

use shmlog::{BusySpin, Header, IdleStrategy, OfferError, Publication, Subscription};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TERM: usize = 8 << 20;
const SIZE: usize = 32;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("pong") {
        return pong(Path::new(&args[2]));
    }
    let dir = scratch_dir();
    let rounds = env_usize("PING_COUNT", 200_000);
    let burst = env_usize("BURST", 10_000_000);
    println!(
        "shmlog ping_pong: 2 processes, {SIZE}-byte messages, {} CPU cores, dir {}",
        cores(),
        dir.display()
    );

    let mut ping = Publication::builder("ping").dir(&dir).term_length(TERM).create()?;
    let mut pong_sub = Subscription::builder("pong").dir(&dir).open()?;
    let mut child =
        Command::new(std::env::current_exe()?).arg("pong").arg(&dir).stdin(Stdio::null()).spawn()?;
    let result = run(&mut ping, &mut pong_sub, rounds, burst);
    let _ = child.wait();
    drop((ping, pong_sub));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run(
    ping: &mut Publication,
    pong: &mut Subscription,
    rounds: usize,
    burst: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    ping.wait_connected(Duration::from_secs(10))?;
    pong.wait_connected(Duration::from_secs(10))?;

    // Round trips: warm up over more than three terms so every page has been touched once.
    let warmup = 3 * TERM / 64 + 10_000;
    let mut samples = Vec::with_capacity(rounds);
    let mut msg = [0u8; SIZE];
    for i in 0..warmup + rounds {
        msg[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let start = Instant::now();
        offer(ping, &msg);
        let mut echoed = false;
        while !echoed {
            pong.poll(|_: &[u8], _: &Header| echoed = true, 1);
        }
        if i >= warmup {
            samples.push(start.elapsed().as_nanos() as u64);
        }
    }
    samples.sort_unstable();
    let pct = |p: f64| samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)];
    println!(
        "round trip ns ({rounds} samples): p50={} p90={} p99={} p99.9={} max={}",
        pct(0.50),
        pct(0.90),
        pct(0.99),
        pct(0.999),
        samples[samples.len() - 1]
    );

    // Throughput: a burst, then one END message; pong replies with the count it received.
    let start = Instant::now();
    msg[..8].copy_from_slice(&0u64.to_le_bytes());
    for _ in 0..burst {
        offer(ping, &msg);
    }
    offer(ping, &[0xFF; 1]);
    let mut received = 0u64;
    let mut idle = BusySpin;
    while received == 0 {
        let n =
            pong.poll(|m: &[u8], _: &Header| received = u64::from_le_bytes(m[..8].try_into().unwrap()), 1);
        idle.idle(n);
    }
    let secs = start.elapsed().as_secs_f64();
    if received != burst as u64 {
        return Err(format!("pong counted {received} messages, {burst} were sent").into());
    }
    println!(
        "throughput: {burst} messages in {:.3} s = {:.2} M msgs/s, {:.0} MB/s of payload",
        secs,
        burst as f64 / secs / 1e6,
        (burst * SIZE) as f64 / secs / 1e6
    );
    Ok(())
}

/// The second process: echoes pings, then counts a burst and reports the count.
fn pong(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let mut sub =
        Subscription::builder("ping").dir(dir).wait_for_publisher(Duration::from_secs(10)).open()?;
    let mut publication = Publication::builder("pong").dir(dir).term_length(TERM).create()?;
    publication.wait_connected(Duration::from_secs(10))?;
    let rounds = env_usize("PING_COUNT", 200_000) + 3 * TERM / 64 + 10_000;
    let mut echoed = 0;
    let mut buf = [0u8; SIZE];
    while echoed < rounds {
        let mut got = false;
        sub.poll(
            |m: &[u8], _: &Header| {
                buf.copy_from_slice(m);
                got = true;
            },
            1,
        );
        if got {
            offer(&mut publication, &buf);
            echoed += 1;
        }
    }
    let mut count = 0u64;
    let mut done = false;
    while !done {
        sub.poll(
            |m: &[u8], _: &Header| {
                if m.len() == 1 {
                    done = true;
                } else {
                    count += 1;
                }
            },
            256,
        );
    }
    offer(&mut publication, &count.to_le_bytes());
    // Stay until the reply is read: the ping process closes its subscription when done.
    let deadline = Instant::now() + Duration::from_secs(10);
    while publication.is_connected() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn offer(publication: &mut Publication, msg: &[u8]) {
    loop {
        match publication.offer(msg) {
            Ok(_) => return,
            Err(OfferError::BackPressured) => std::hint::spin_loop(),
            Err(e) => panic!("offer failed: {e}"),
        }
    }
}

fn scratch_dir() -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    base.join(format!("shmlog-ping-pong-{}", std::process::id()))
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
