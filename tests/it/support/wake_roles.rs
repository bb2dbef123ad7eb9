//! Sleepers of every kind on one stream (`tests/it/wakeups.rs`): each sleeps its own way until a
//! message arrives and measures how long after its sending it got it.

use super::roles::{Ctx, Settings};
use shmlog::{AsyncReceiver, Bytes, Header, Polled, Receiver, RecvError, Subscription};
use std::time::Duration;

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the host.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A message: its sequence number and when it was sent.
pub fn message(seq: u64) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[..8].copy_from_slice(&seq.to_le_bytes());
    m[8..].copy_from_slice(&mono_ns().to_le_bytes());
    m
}

/// What one sleeper saw.
struct Tally {
    next: u64,
    max_ns: u64,
    late: u64,
    late_ns: u64,
}

impl Tally {
    fn on(&mut self, ctx: &Ctx, m: &[u8]) {
        let seq = u64::from_le_bytes(m[..8].try_into().unwrap());
        let sent = u64::from_le_bytes(m[8..16].try_into().unwrap());
        if seq != self.next {
            ctx.fail(&format!("expected message {}, got {seq}", self.next));
        }
        self.next += 1;
        let lat = mono_ns().saturating_sub(sent);
        self.max_ns = self.max_ns.max(lat);
        if lat > self.late_ns {
            self.late += 1;
        }
    }
}

/// `kind` = `poll_blocking`, `receiver`, `wait_any`, `async` (through the waiter thread) or
/// `async_reactor` (in a tokio runtime's reactor); reads `count` messages, then
/// prints `done n=.. max_us=.. late=..` (late: later than `late_ms`).
pub fn sleeper(cfg: &Settings, ctx: &Ctx) -> ! {
    let open = |name: &str| {
        Subscription::builder(name)
            .dir(cfg.dir())
            .liveness_interval(Duration::from_millis(cfg.u64_or("liveness_ms", 5000)))
            .open()
            .unwrap_or_else(|e| ctx.fail(&format!("open: {e}")))
    };
    let mut sub = open(cfg.name());
    let count = cfg.u64_or("count", 0);
    let mut t = Tally { next: 0, max_ns: 0, late: 0, late_ns: cfg.u64_or("late_ms", 10) * 1_000_000 };
    let kind = cfg.str("kind").unwrap_or("poll_blocking").to_owned();
    ctx.emit("ready", &format!("kind={kind}"));
    let step = Duration::from_secs(60);
    match kind.as_str() {
        "poll_blocking" => {
            while t.next < count {
                ctx.check_deadline();
                if let Polled::Closed | Polled::Fault(_) =
                    sub.poll_blocking(|m: &[u8], _: &Header| t.on(ctx, m), 64, step)
                {
                    ctx.fail("closed early");
                }
            }
        }
        "receiver" => {
            let mut rx = Receiver::new(sub, Bytes);
            while t.next < count {
                ctx.check_deadline();
                match rx.recv_timeout(step) {
                    Ok(m) => t.on(ctx, &m),
                    Err(RecvError::Timeout) => {}
                    Err(e) => ctx.fail(&format!("recv: {e}")),
                }
            }
        }
        "wait_any" => {
            let mut idle = open(&format!("{}-idle", cfg.name()));
            while t.next < count {
                ctx.check_deadline();
                Subscription::wait_any(&mut [&mut idle, &mut sub], step);
                sub.poll(|m: &[u8], _: &Header| t.on(ctx, m), 64);
            }
        }
        "async" | "async_reactor" | "async_io" => {
            // Made outside any runtime, the receiver sleeps through the waiter thread (`async`:
            // spawned with SHMLOG_ASYNC_WAITER=1) or in async-io's reactor (`async_io`, feature
            // `async-io`: async-io's thread wakes the tokio task); made inside a runtime with its
            // IO driver, in that runtime's reactor.
            let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
            let make = || {
                AsyncReceiver::new(Receiver::new(sub, Bytes)).unwrap_or_else(|e| ctx.fail(&format!("{e}")))
            };
            let mut rx = if kind == "async_reactor" { runtime.block_on(async { make() }) } else { make() };
            if rx.in_reactor() != (kind != "async") {
                ctx.fail(&format!("{kind}: in_reactor() is {}", rx.in_reactor()));
            }
            runtime.block_on(async {
                while t.next < count {
                    match rx.recv().await {
                        Ok(m) => t.on(ctx, &m),
                        Err(e) => ctx.fail(&format!("recv: {e}")),
                    }
                }
            });
        }
        other => ctx.fail(&format!("unknown sleeper kind {other}")),
    }
    ctx.emit("done", &format!("n={} max_us={} late={}", t.next, t.max_ns / 1000, t.late));
    std::process::exit(0)
}
