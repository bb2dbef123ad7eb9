//! The physical bounds every figure is compared with, measured in the same run:
//!
//! - [`RawPingPong`]: two threads bounce a counter over two cache lines (one per direction,
//!   like two streams), PAUSE in the spin loop: the floor under any round trip. Its
//!   [`RawPingPong::start_sequential`] form moves to the next 64-byte line with every message,
//!   as a log does: the floor under any log's round trip.
//! - [`BareRing`]: a single-producer single-consumer ring of 64-byte slots, each
//!   `[seq u64 | 32 B payload | pad]`, the sequence word stored last with release inside the slot,
//!   the consumer's position published once per batch: the ceiling for 32 B messages in 64 B
//!   frames (an Aeron frame is a 32 B header + 32 B payload), with no headers to check, no
//!   rotation, no cleaning and no flow-control file.
//! - memcpy bandwidth (in the `bounds` and `offer_poll` benches).

#![allow(dead_code)]

use super::clock::Clock;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[repr(C, align(128))]
#[derive(Default)]
struct Line(AtomicU64);

/// One 64-byte line.
#[repr(C, align(64))]
#[derive(Default)]
struct Line64(AtomicU64);

/// The lines of each direction (a power of two): message `v` (counting from 1) goes to line
/// `(v - 1) % lines`, a mask rather than a division so the bound costs what it should.
/// Allocated apart with a spare line each, so no ping line shares a 128-byte pair with a pong
/// line (the adjacent-line prefetcher fetches pairs).
struct PingLines {
    ping: Box<[Line64]>,
    pong: Box<[Line64]>,
    mask: u64,
}

impl PingLines {
    fn new(lines: usize) -> Self {
        assert!(lines.is_power_of_two());
        let lane = || (0..lines + 1).map(|_| Line64::default()).collect();
        PingLines { ping: lane(), pong: lane(), mask: lines as u64 - 1 }
    }

    #[inline(always)]
    fn at(lane: &[Line64], mask: u64, v: u64) -> &AtomicU64 {
        &lane[((v - 1) & mask) as usize].0
    }
}

/// A ponger thread echoing a counter from one cache line to another.
pub struct RawPingPong {
    lines: Arc<PingLines>,
    next: u64,
    ponger: Option<JoinHandle<()>>,
}

const STOP: u64 = u64::MAX;

impl RawPingPong {
    /// Starts the ponger, pinned to CPU `ponger_cpu`; every message uses the same two lines.
    pub fn start(ponger_cpu: usize) -> Self {
        Self::start_sequential(ponger_cpu, 1)
    }

    /// Like [`RawPingPong::start`], but each direction walks a ring of `lines` 64-byte lines,
    /// one per message, as a log walks its term: the bound for a log of `64 * lines` bytes
    /// (`lines` a power of two).
    pub fn start_sequential(ponger_cpu: usize, lines: usize) -> Self {
        let lines = Arc::new(PingLines::new(lines));
        let l = lines.clone();
        let ponger = super::spawn_on(ponger_cpu, move || {
            super::pin(ponger_cpu);
            let mut expect = 1;
            loop {
                let v = PingLines::at(&l.ping, l.mask, expect).load(Ordering::Acquire);
                if v == STOP {
                    return;
                }
                if v != expect {
                    std::hint::spin_loop();
                    continue;
                }
                PingLines::at(&l.pong, l.mask, v).store(v, Ordering::Release);
                expect += 1;
            }
        });
        RawPingPong { lines, next: 0, ponger: Some(ponger) }
    }

    #[inline(always)]
    fn one(&mut self) {
        self.next += 1;
        let (v, l) = (self.next, &*self.lines);
        PingLines::at(&l.ping, l.mask, v).store(v, Ordering::Release);
        while PingLines::at(&l.pong, l.mask, v).load(Ordering::Acquire) != v {
            std::hint::spin_loop();
        }
    }

    /// Up to `n` round trips, stopping after `max`.
    pub fn warm(&mut self, n: u64, max: Duration) {
        let deadline = Instant::now() + max;
        for i in 0..n {
            if i % 4096 == 0 && Instant::now() > deadline {
                break;
            }
            self.one();
        }
    }

    /// `n` round trips, untimed individually: total time.
    pub fn run(&mut self, n: u64) -> Duration {
        let t = Instant::now();
        for _ in 0..n {
            self.one();
        }
        t.elapsed()
    }

    /// Up to `n` round trips, each timed with `clock`, for at most `max` (a loaded machine can
    /// make a spinning round trip wait for a scheduler slice): RTT samples in ns.
    pub fn samples(&mut self, clock: &Clock, n: usize, max: Duration) -> Vec<f64> {
        let mut out = Vec::with_capacity(n);
        let deadline = Instant::now() + max;
        for i in 0..n {
            if i % 4096 == 0 && Instant::now() > deadline {
                break;
            }
            let a = clock.raw();
            self.one();
            let b = clock.raw();
            out.push(clock.delta_ns(a, b));
        }
        out
    }
}

impl Drop for RawPingPong {
    fn drop(&mut self) {
        let l = &*self.lines;
        PingLines::at(&l.ping, l.mask, self.next + 1).store(STOP, Ordering::Release);
        if let Some(h) = self.ponger.take() {
            let _ = h.join();
        }
    }
}

#[repr(C, align(64))]
struct Slot {
    seq: AtomicU64,
    payload: UnsafeCell<[u64; 4]>,
}

struct Ring {
    slots: Box<[Slot]>,
    mask: u64,
    /// Consumer position, published per batch.
    head: Line,
    stop: AtomicBool,
    /// Checksum the consumer computes over every payload word (keeps the reads honest).
    sum: Line,
}

// SAFETY: a payload is written only by the producer before the release store of its slot's
// sequence, and read only by the consumer after the acquire load of that sequence; the producer
// rewrites a slot only after the consumer's released head has passed it.
unsafe impl Sync for Ring {}
// SAFETY: as above; the ring owns its slots.
unsafe impl Send for Ring {}

/// A bare SPSC seq-in-slot ring with a consumer thread that runs until dropped.
pub struct BareRing {
    ring: Arc<Ring>,
    produced: u64,
    cached_head: u64,
    consumer: Option<JoinHandle<()>>,
}

impl BareRing {
    /// A ring of `capacity` 64-byte slots (a power of two), pre-faulted, consumer on `cpu`.
    pub fn start(capacity: usize, consumer_cpu: usize) -> Self {
        assert!(capacity.is_power_of_two());
        let slots: Box<[Slot]> = (0..capacity)
            .map(|_| Slot { seq: AtomicU64::new(0), payload: UnsafeCell::new([0; 4]) })
            .collect();
        let ring = Arc::new(Ring {
            slots,
            mask: capacity as u64 - 1,
            head: Line::default(),
            stop: AtomicBool::new(false),
            sum: Line::default(),
        });
        let r = ring.clone();
        let consumer = super::spawn_on(consumer_cpu, move || {
            super::pin(consumer_cpu);
            let batch = (r.mask + 1) / 4;
            let mut pos = 0u64;
            let mut published = 0u64;
            let mut sum = 0u64;
            loop {
                let slot = &r.slots[(pos & r.mask) as usize];
                if slot.seq.load(Ordering::Acquire) == pos + 1 {
                    // SAFETY: see `unsafe impl Sync for Ring`.
                    let p = unsafe { *slot.payload.get() };
                    sum = sum.wrapping_add(p[0] ^ p[1] ^ p[2] ^ p[3]);
                    pos += 1;
                    if pos - published >= batch {
                        r.head.0.store(pos, Ordering::Release);
                        published = pos;
                    }
                } else {
                    if published != pos {
                        r.head.0.store(pos, Ordering::Release);
                        published = pos;
                    }
                    if r.stop.load(Ordering::Relaxed) {
                        r.sum.0.store(sum, Ordering::Relaxed);
                        return;
                    }
                    std::hint::spin_loop();
                }
            }
        });
        BareRing { ring, produced: 0, cached_head: 0, consumer: Some(consumer) }
    }

    /// Sends `n` messages of 32 bytes and waits until the consumer has read them: total time.
    pub fn run(&mut self, n: u64) -> Duration {
        let t = Instant::now();
        let cap = self.ring.mask + 1;
        for _ in 0..n {
            let i = self.produced;
            if i - self.cached_head >= cap {
                loop {
                    self.cached_head = self.ring.head.0.load(Ordering::Acquire);
                    if i - self.cached_head < cap {
                        break;
                    }
                    std::hint::spin_loop();
                }
            }
            let slot = &self.ring.slots[(i & self.ring.mask) as usize];
            // SAFETY: the consumer has passed this slot (head > i - cap), see `Sync` above.
            unsafe { *slot.payload.get() = [i, i + 1, i + 2, i + 3] };
            slot.seq.store(i + 1, Ordering::Release);
            self.produced = i + 1;
        }
        while self.ring.head.0.load(Ordering::Acquire) < self.produced {
            std::hint::spin_loop();
        }
        self.cached_head = self.produced;
        t.elapsed()
    }

    /// Messages per second over `n` messages.
    pub fn rate(&mut self, n: u64) -> f64 {
        n as f64 / self.run(n).as_secs_f64()
    }

    /// Sends chunks of `chunk` messages until `n` were sent or `max` passed.
    pub fn warm(&mut self, n: u64, chunk: u64, max: Duration) {
        let deadline = Instant::now() + max;
        let mut sent = 0;
        while sent < n && Instant::now() < deadline {
            self.run(chunk);
            sent += chunk;
        }
    }
}

impl Drop for BareRing {
    fn drop(&mut self) {
        self.ring.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.consumer.take() {
            let _ = h.join();
        }
    }
}

/// memcpy of `size` bytes from a fixed source to a destination that walks through a buffer of
/// `footprint` bytes (the footprint of a log): bytes per second over `rounds` copies.
pub fn memcpy_rate(size: usize, footprint: usize, rounds: usize) -> f64 {
    let src = vec![0x5au8; size];
    let mut dst = vec![0u8; footprint.max(size)];
    let slots = dst.len() / size;
    let t = Instant::now();
    for k in 0..rounds {
        let at = (k % slots) * size;
        // SAFETY: src has `size` bytes; dst has at least `at + size` bytes; no overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::hint::black_box(src.as_ptr()),
                std::hint::black_box(dst.as_mut_ptr().add(at)),
                std::hint::black_box(size),
            )
        };
    }
    std::hint::black_box(&dst);
    (size * rounds) as f64 / t.elapsed().as_secs_f64()
}
