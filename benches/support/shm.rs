//! shmlog building blocks shared by the benches: stream pairs, a counting subscriber thread, an
//! echo (pong) loop, and their child-process versions.

#![allow(dead_code)]

use shmlog::{Publication, Subscription};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Creates stream `name` in `dir` with a subscriber already joined (so offers do not fail with
/// `NotConnected`).
pub fn pair(dir: &Path, name: &str, term: usize) -> (Publication, Subscription) {
    let mut p = Publication::builder(name).dir(dir).term_length(term).create().expect("create publication");
    let s = Subscription::builder(name).dir(dir).open().expect("open subscription");
    p.wait_connected(Duration::from_secs(10)).expect("subscriber joins");
    (p, s)
}

/// Offers `msg`, spinning while back-pressured. Panics on other errors.
#[inline(always)]
pub fn offer_spin(p: &mut Publication, msg: &[u8]) -> i64 {
    loop {
        match p.offer(msg) {
            Ok(pos) => return pos,
            Err(e) if e.is_retryable() => std::hint::spin_loop(),
            Err(e) => panic!("offer failed: {e:?}"),
        }
    }
}

/// A thread polling a subscription and counting fragments into a shared counter.
pub struct Counter {
    pub received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Subscription>>,
}

impl Counter {
    pub fn start(mut sub: Subscription, cpu: usize, fragment_limit: usize) -> Self {
        let received = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, st) = (received.clone(), stop.clone());
        let handle = super::spawn_on(cpu, move || {
            super::pin(cpu);
            let mut n = 0u64;
            let mut sum = 0u64;
            loop {
                let k = sub.poll(
                    |payload: &[u8], _: &shmlog::Header| {
                        sum = sum.wrapping_add(payload.first().copied().unwrap_or(0) as u64);
                    },
                    fragment_limit,
                );
                if k > 0 {
                    n += k as u64;
                    r.store(n, Ordering::Release);
                } else {
                    if st.load(Ordering::Relaxed) {
                        std::hint::black_box(sum);
                        return sub;
                    }
                    std::hint::spin_loop();
                }
            }
        });
        Counter { received, stop, handle: Some(handle) }
    }

    /// Waits until `n` fragments were received in total.
    pub fn wait_for(&self, n: u64) {
        wait_count(&self.received, n);
    }

    pub fn stop(mut self) -> Subscription {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().expect("counter thread")
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A message length that tells an echo loop to stop.
pub const STOP_LEN: usize = 7;

/// Echoes every fragment of `sub` onto `publication` until a `STOP_LEN` message arrives.
pub fn echo_loop(sub: &mut Subscription, publication: &mut Publication) {
    let mut done = false;
    while !done {
        sub.poll(
            |payload: &[u8], _: &shmlog::Header| {
                if payload.len() == STOP_LEN {
                    done = true;
                } else {
                    offer_spin(publication, payload);
                }
            },
            16,
        );
    }
}

/// A thread echoing `ping` onto `pong`.
pub struct Echo {
    handle: Option<JoinHandle<(Subscription, Publication)>>,
}

impl Echo {
    pub fn start(mut ping: Subscription, mut pong: Publication, cpu: usize) -> Echo {
        let handle = super::spawn_on(cpu, move || {
            super::pin(cpu);
            echo_loop(&mut ping, &mut pong);
            (ping, pong)
        });
        Echo { handle: Some(handle) }
    }

    /// Stops the echo thread by sending the stop message on `ping`; hands back its endpoints
    /// (so a paired measurement can give its CPU to something else and start it again).
    pub fn stop(mut self, ping: &mut Publication) -> (Subscription, Publication) {
        offer_spin(ping, &[0u8; STOP_LEN]);
        self.handle.take().expect("running").join().expect("echo thread")
    }
}

/// Ping side of a round trip: offers `msg` on `ping` and spins until one fragment comes back on
/// `pong`.
#[inline(always)]
pub fn round_trip(ping: &mut Publication, pong: &mut Subscription, msg: &[u8]) {
    offer_spin(ping, msg);
    while pong.poll(
        |p: &[u8], _: &shmlog::Header| {
            std::hint::black_box(p.len());
        },
        1,
    ) == 0
    {
        std::hint::spin_loop();
    }
}

/// Runs `f` up to `n` times or until `max` passed; returns how many times it ran.
pub fn bounded(n: u64, max: Duration, mut f: impl FnMut()) -> u64 {
    let deadline = Instant::now() + max;
    for i in 0..n {
        if i % 1024 == 0 && Instant::now() > deadline {
            return i;
        }
        f();
    }
    n
}

/// Spins until `counter >= n`; panics after a minute without (fail, do not hang).
pub fn wait_count(counter: &AtomicU64, n: u64) {
    let mut i = 0u32;
    let mut deadline = None;
    while counter.load(Ordering::Acquire) < n {
        std::hint::spin_loop();
        i = i.wrapping_add(1);
        if i % (1 << 20) == 0 {
            let d = *deadline.get_or_insert_with(|| Instant::now() + Duration::from_secs(60));
            assert!(Instant::now() < d, "receiver stalled at {} of {n}", counter.load(Ordering::Acquire));
        }
    }
}
