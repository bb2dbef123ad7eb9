//! Loom models of the shipped [`ConcurrentWriter`]: its flow control over the real reader slots
//! (`FlowControl::recompute_concurrent`, `admit_slow`), its sweep of dead writers
//! (`concurrent_writer::unblock` under the writers' unblock lock), and partitions reused by
//! several writers, against the shipped [`Reader`], over a concurrent log of 128-byte terms (MTU
//! 64, window 64) in a `LoomRegion`.
//!
//! The `k` models of `log::loom_concurrent` drive the appender and the unblocker with a limit
//! rule of their own and write two terms at most; these drive the writer the publication uses,
//! so every admission, recompute and sweep below is the crate's.
//!
//! The kernel's word (reader slot locks, writer slot locks, the unblock lock) is a loom
//! `AtomicBool` per lock, taken and dropped with SeqCst read-modify-writes and stores, as in
//! `stream::loom_models`. A writer that "dies" drops its flag.
//!
//! Still the model's own: the kernel's locks (above), and the reader's decision to run the
//! unblocker when held (the subscription's `check`, which needs files, is re-stated in
//! `ModelReader::poll`). Not modelled: the doorbell ring of a concurrent writer, a reader that
//! joins while the writers run, and a writer's death during the race (k2 has that, with the
//! model's own limit rule).
//!
//! What keeps them affordable (measured on 2 shared cores; see `docs/verification.md`):
//! - the terms before the race are written and read on the model's thread alone, before any
//!   other thread exists (one interleaving), so loom's budget goes to the race itself;
//! - two threads race, not three: in k4 and k5 one writer shares its thread with the reader (a
//!   process that writes and reads the stream; while back-pressured it polls instead of
//!   yielding), in k6 the dead writer died before the race. With three spinning threads a model
//!   of three racing offers ran for more than 10 minutes at one preemption, and one with the
//!   dead writer's death on a thread of its own for more than 5;
//! - preemption bounds: k4 2 (30 580 iterations, 21 s; 3 gives 150 210 in 54 s), k5 and k6 3
//!   (82 and 7 693 iterations, under 6 s). `SHMLOG_LOOM_K_BOUND` overrides them, for runs by
//!   hand.
//!
//! Models:
//! - `k4_writers_rotate_into_a_reused_partition_vs_reader`: terms 0 to 2 are full (A wrote them,
//!   the reader read them); A and B then offer a message each. Both find term 2 full and may
//!   rotate at once: the tail of partition 0 is reset from term 0's id (the term three back) to
//!   term 3's, then the count moves; the second rotator must leave the tail the first one's
//!   reservation already moved (`SHMLOG_MUTANT=rotate_unchecked` resets it: two reservations
//!   overlap). The reader must get both, in the order reserved. And no offer may say
//!   `NotConnected` while the reader reads: T2 of the 2026-11-27 review (a writer that compared
//!   the reader's position with a tail it loaded before B and the reader moved on dropped the
//!   reader; `SHMLOG_MUTANT=stale_ceiling` puts that back).
//! - `k5_slow_writer_cleans_before_its_share_is_reused_vs_reader`: A's claim ends term 2 and is
//!   committed in the race (so A zeroes its share of partition 0 then); B offers two messages,
//!   the second into that share, in term 3. The reader holds B back until it has read A's
//!   frame, which A commits only after zeroing: B never writes where A zeroes
//!   (`SHMLOG_MUTANT=release_before_clean` commits and releases first).
//! - `k6_dead_writer_swept_by_a_held_back_writer_vs_reader`: D died with its claim of the first
//!   frame open; L offers a message, held back a window past D's hole until its own sweep
//!   (`admit_slow` → `sweep` → `unblock`) pads the hole, or the reader does: as a subscription,
//!   it runs the unblocker when its idle check finds it held at a frame with reservations after
//!   it. Two unblockers, one at a time under the unblock lock (`SHMLOG_MUTANT=unblock_unlocked`
//!   lets both pad at once). The reader gets L's message, never D's.
//!
//! After every poll the reader checks that no writer is further ahead of it than a window and a
//! message (I2), and loom reports any write or zeroing that races with a read (I1, I3).

use super::concurrent_writer::{unblock, ConcurrentWriter, WriterLiveness};
use super::join::JoinAt;
use super::reader::Reader;
use super::slots::{SlotLocks, SlotMut, Slots};
use super::writer::Liveness;
use crate::error::OfferError;
use crate::layout::align;
use crate::layout::frame::{FRAME_ALIGNMENT, HEADER_LEN};
use crate::layout::log_meta::{Geometry, NO_PENDING};
use crate::layout::slots::{self as s, slot_offset};
use crate::log::loom_models::{check_place, check_with, message, Shared, Tally, SESSION_ID};
use crate::log::{Log, LogInit};
use crate::region::{LoomRegion, RegionMut};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use std::sync::Arc;

const TERM: usize = 128;
/// A message of 16 bytes: a frame of 64, half a term, a whole window.
const LEN: usize = 16;
const FRAME: i64 = align(HEADER_LEN + LEN, FRAME_ALIGNMENT) as i64;

/// Runs `model` with the preemption bound `bound` (`SHMLOG_LOOM_K_BOUND` overrides it, for runs
/// by hand), and up to 100 000 branches (threads that wait by yielding).
fn check(name: &str, bound: usize, model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    let by_hand = std::env::var("SHMLOG_LOOM_K_BOUND").ok().and_then(|v| v.parse().ok());
    builder.preemption_bound = Some(by_hand.unwrap_or(bound));
    builder.max_branches = 100_000;
    check_with(name, builder, model);
}

/// A fresh concurrent log of 128-byte terms (window 64) whose term ids wrap after two terms.
fn concurrent_log() -> (Log<Shared>, Shared) {
    let geometry = Geometry { term_length: TERM, page_size: 4096, mtu: 64, window: TERM / 2 };
    let region = Arc::new(LoomRegion::for_log(&geometry));
    let init = LogInit {
        geometry,
        initial_term_id: i32::MAX - 1,
        session_id: SESSION_ID,
        stream_id: 22,
        pid: 1,
        created_ns: 2,
        name: "loom",
        concurrent: true,
        session_seq: 1,
    };
    (Log::initialize(Arc::clone(&region), &init), region)
}

/// A slot file of one slot, every header, doorbell and slot word an atomic (as in
/// `stream::loom_models`; the doorbell is not rung here).
fn slot_region() -> Shared {
    let base = slot_offset(0);
    let mut i64_words = vec![s::MAGIC_OFFSET, s::HIGH_WATER];
    let fields = [s::STATE, s::POSITION, s::JOIN_POSITION, s::PID, s::CLAIMED_NS, s::LOSSES, s::LOST_BYTES];
    i64_words.extend(fields.map(|f| base + f));
    let bell = [
        s::READERS_ARMED,
        s::READERS_BELL,
        s::WRITER_ARMED,
        s::WRITER_BELL,
        s::READERS_SLEEPING,
        s::READERS_PASSED,
    ]
    .map(|f| s::DOORBELL + f);
    let i32_words: Vec<usize> =
        [s::VERSION, s::SLOT_COUNT, s::READY, s::SESSIONS].into_iter().chain(bell).collect();
    let region = Arc::new(LoomRegion::new(s::file_length(1), &[], &i32_words, &i64_words));
    Slots::initialize(Arc::clone(&region), 1);
    // The session (number 1) was running before any reader of the models claimed its slot.
    region.store_i32(s::SESSIONS, 1, Ordering::Relaxed);
    region
}

/// The kernel's locks: reader slot locks, writer slot locks (`true` while the writer lives) and
/// the unblock lock. `sweeps`: a held-back writer may sweep now (always, or never).
struct Kernel {
    readers: Vec<AtomicBool>,
    writers: Vec<AtomicBool>,
    unblock: AtomicBool,
    sweeps: bool,
}

#[derive(Clone)]
struct ModelKernel(Arc<Kernel>);

impl ModelKernel {
    fn new(readers: usize, writers: usize, sweeps: bool) -> Self {
        Self(Arc::new(Kernel {
            readers: (0..readers).map(|_| AtomicBool::new(true)).collect(),
            writers: (0..writers).map(|_| AtomicBool::new(true)).collect(),
            unblock: AtomicBool::new(false),
            sweeps,
        }))
    }

    /// Writer slot `slot`'s owner dies: the kernel drops its lock.
    fn writer_dies(&self, slot: usize) {
        self.0.writers[slot].store(false, Ordering::SeqCst);
    }
}

impl SlotLocks for ModelKernel {
    type Error = std::convert::Infallible;

    fn try_lock(&self, index: usize) -> Result<bool, Self::Error> {
        Ok(self.0.readers[index].compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).is_ok())
    }

    fn unlock(&self, index: usize) {
        self.0.readers[index].store(false, Ordering::SeqCst);
    }
}

impl Liveness for ModelKernel {
    fn sweep_due(&mut self) -> bool {
        self.0.sweeps
    }
}

impl WriterLiveness for ModelKernel {
    fn writer_alive(&self, slot: usize) -> bool {
        self.0.writers[slot].load(Ordering::SeqCst)
    }

    fn with_unblock_lock<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        let lock = &self.0.unblock;
        lock.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).ok()?;
        let out = f();
        lock.store(false, Ordering::SeqCst);
        Some(out)
    }
}

type ModelWriter = ConcurrentWriter<Shared, Shared, ModelKernel>;

/// Writer slot `slot` of the log in `region`, claimed, over the slot table in `slots`.
fn writer(region: &Shared, slots: &Shared, slot: usize, kernel: &ModelKernel) -> ModelWriter {
    let log = Log::open_any_term(Arc::clone(region)).expect("an initialised log");
    assert!(log.claim_writer_slot(slot, 100 + slot as i64, 0));
    let table = Slots::open(Arc::clone(slots)).expect("an initialised slot table");
    ConcurrentWriter::new(log, slot, table, kernel.clone())
}

/// `offer`, retried (yielding) while back-pressured. `NotConnected` fails the model: its reader
/// reads from before the writers start to after they finish.
fn offer(w: &mut ModelWriter, msg: &[u8]) -> i64 {
    for _ in 0..2000 {
        match w.offer(msg) {
            Ok(position) => return position,
            Err(OfferError::BackPressured) => thread::yield_now(),
            Err(OfferError::NotConnected) => {
                panic!(
                    "offer: not connected while a reader reads (limit {}, tail {})",
                    w.limit(),
                    w.position()
                )
            }
            Err(e) => panic!("offer: {e}"),
        }
    }
    panic!("writer stuck at {}: limit {}", w.position(), w.limit());
}

/// The shipped reader, and what it does when a poll finds nothing: with `unblocker` (a
/// read-write view of the log and the kernel's word, as a subscription maps them), its idle
/// check and, if that finds it held at a frame with reservations after it, the unblocker.
struct ModelReader {
    reader: Reader<Shared, Shared>,
    unblocker: Option<(Log<Shared>, ModelKernel)>,
    /// Holes its unblocker padded.
    padded: usize,
}

impl ModelReader {
    /// The reader of the session, joined through slot 0 before any writer starts.
    fn join(region: &Shared, slots: &Shared) -> Self {
        let mut slot = SlotMut::new(Arc::clone(slots), slot_offset(0), 0);
        slot.claim(slots, 7, 0);
        let log = Log::open_any_term(Arc::clone(region)).expect("an initialised log");
        let table = Slots::open(Arc::clone(slots)).expect("an initialised slot table");
        let reader =
            Reader::join(log, &table, slot, JoinAt::Latest, false).unwrap_or_else(|(_, e)| panic!("{e:?}"));
        assert_eq!(reader.position(), 0);
        Self { reader, unblocker: None, padded: 0 }
    }

    /// Runs the unblocker when held, as a subscription does.
    fn unblocking(mut self, region: &Shared, kernel: &ModelKernel) -> Self {
        let log = Log::open_any_term(Arc::clone(region)).expect("an initialised log");
        self.unblocker = Some((log, kernel.clone()));
        self
    }

    /// One poll, adding what it delivers to `got` as `(position after the frame, payload)`;
    /// then checks that no writer is further ahead of the reader's published position than flow
    /// control allows (a window and a message: every reservation starts below a limit a window
    /// past a position the reader published). If nothing moved: the idle check and the
    /// unblocker (if it has one), and a yield. Returns whether it moved.
    fn poll(&mut self, got: &mut Vec<(i64, Vec<u8>)>) -> bool {
        let reader = &mut self.reader;
        let terms = reader.log().terms();
        let window = reader.log().geometry().window as i64;
        let before = reader.position();
        reader.poll(
            |payload, header| {
                check_place(terms, payload, header);
                got.push((header.position(), payload.to_vec()));
            },
            4,
        );
        let position = reader.position();
        assert_eq!(reader.fault(), None, "reader fault at {before}");
        let producer = reader.log().producer_position().expect("tail counters agree with the term count");
        assert!(producer >= position, "producer position {producer} behind a read to {position}");
        assert!(
            producer <= position + window + FRAME,
            "the writers ran to {producer}, more than a window and a message past the reader at {position} (I2)"
        );
        if position != before {
            return true;
        }
        if let Some((log, kernel)) = &self.unblocker {
            reader.idle_check();
            if reader.held() {
                self.padded += unblock(log, kernel).padded;
            }
        }
        thread::yield_now();
        false
    }

    /// Polls until `got` holds `count` messages.
    fn read_to(&mut self, got: &mut Vec<(i64, Vec<u8>)>, count: usize) {
        for _ in 0..2000 {
            if got.len() >= count {
                assert_eq!(got.len(), count, "more messages than sent");
                return;
            }
            self.poll(got);
        }
        let log = self.reader.log();
        let pending: Vec<i64> = (0..2).map(|i| log.writer_pending(i)).collect();
        panic!(
            "reader stuck at {}: producer {:?}, pending words {pending:?}, got {}",
            self.reader.position(),
            log.producer_position(),
            got.len()
        );
    }

    /// Polls until `count` messages arrived; returns them.
    fn read(&mut self, count: usize) -> Vec<(i64, Vec<u8>)> {
        let mut got = Vec::new();
        self.read_to(&mut got, count);
        got
    }

    /// `offer` by a writer in the reader's thread: while back-pressured, the reader polls (into
    /// `got`) instead of the writer yielding.
    fn offer(&mut self, w: &mut ModelWriter, msg: &[u8], got: &mut Vec<(i64, Vec<u8>)>) -> i64 {
        for _ in 0..2000 {
            match w.offer(msg) {
                Ok(position) => return position,
                Err(OfferError::BackPressured) => {
                    self.poll(got);
                }
                Err(OfferError::NotConnected) => {
                    panic!(
                        "offer: not connected while a reader reads (limit {}, tail {})",
                        w.limit(),
                        w.position()
                    )
                }
                Err(e) => panic!("offer: {e}"),
            }
        }
        panic!("writer stuck at {}: limit {}", w.position(), w.limit());
    }
}

/// Message `seq` of writer `tag`: [`message`] with the writer's tag in its first byte.
fn tagged(tag: u8, seq: u8) -> Vec<u8> {
    let mut m = message(seq, LEN);
    m[0] = tag;
    m
}

/// Every message of `sent` arrived once and in its writer's order; returns the positions read.
fn check_writer(got: &[(i64, Vec<u8>)], sent: &[Vec<u8>], name: &str) -> Vec<i64> {
    let mine: Vec<&(i64, Vec<u8>)> = got.iter().filter(|(_, m)| sent.contains(m)).collect();
    let payloads: Vec<&Vec<u8>> = mine.iter().map(|(_, m)| m).collect();
    assert_eq!(payloads, sent.iter().collect::<Vec<_>>(), "writer {name}'s messages, once, in its order");
    mine.iter().map(|(p, _)| *p).collect()
}

/// Writes `count` messages of `w` and reads them, one at a time on the model's thread (before
/// any other thread exists: one interleaving), up to position `count * FRAME`.
fn write_ahead(w: &mut ModelWriter, reader: &mut ModelReader, count: u8) {
    for i in 0..count {
        let m = tagged(b'a', i);
        offer(w, &m);
        assert_eq!(reader.read(1)[0].1, m);
    }
    assert_eq!(reader.reader.position(), count as i64 * FRAME);
}

#[test]
fn k4_writers_rotate_into_a_reused_partition_vs_reader() {
    let name = "k4_writers_rotate_into_a_reused_partition_vs_reader";
    let tally = Tally::default();
    let seen = tally.clone();
    check(name, 2, move || {
        let (log, region) = concurrent_log();
        let slots = slot_region();
        let kernel = ModelKernel::new(1, 2, false);
        let mut reader = ModelReader::join(&region, &slots);
        let (mut a, mut b) = (writer(&region, &slots, 0, &kernel), writer(&region, &slots, 1, &kernel));
        write_ahead(&mut a, &mut reader, 6);
        assert_eq!(log.active_term_count(), 2, "term 2 full, not rotated away yet");
        let (ma, mb) = (tagged(b'A', 0), tagged(b'B', 0));
        let sent = mb.clone();
        // B and the reader share a thread (a process that writes and reads the stream).
        let tb = thread::spawn(move || {
            let mut got = Vec::new();
            let pb = reader.offer(&mut b, &sent, &mut got);
            reader.read_to(&mut got, 2);
            (pb, got)
        });
        let pa = offer(&mut a, &ma);
        let (pb, got) = tb.join().unwrap();
        assert_eq!(check_writer(&got, &[ma], "A"), [pa]);
        assert_eq!(check_writer(&got, &[mb], "B"), [pb]);
        let mut ends = [pa, pb];
        ends.sort();
        assert_eq!(ends, [7 * FRAME, 8 * FRAME], "both in term 3, in partition 0 again");
        assert_eq!(log.active_term_count(), 3);
        assert_eq!(log.producer_position().expect("consistent tails"), 8 * FRAME);
        seen.add(if pa < pb { "A first" } else { "B first" });
    });
    assert_eq!(tally.report(name).len(), 2);
}

#[test]
fn k5_slow_writer_cleans_before_its_share_is_reused_vs_reader() {
    let name = "k5_slow_writer_cleans_before_its_share_is_reused_vs_reader";
    check(name, 3, move || {
        let (log, region) = concurrent_log();
        let slots = slot_region();
        let kernel = ModelKernel::new(1, 2, false);
        let mut reader = ModelReader::join(&region, &slots);
        let (mut a, mut b) = (writer(&region, &slots, 0, &kernel), writer(&region, &slots, 1, &kernel));
        write_ahead(&mut a, &mut reader, 5);
        // A's claim ends term 2: its share of partition 0 is [64, 128), where term 3's second
        // frame goes.
        let claimed = tagged(b'A', 0);
        assert_eq!(a.claim(LEN), Ok(6 * FRAME));
        a.with_claim_buffer(|buffer| buffer.copy_from_slice(&claimed));
        let from_b = vec![tagged(b'B', 0), tagged(b'B', 1)];
        let sent = from_b.clone();
        // B and the reader share a thread; A commits its claim (and zeroes its share) on another.
        let tb = thread::spawn(move || {
            let mut got = Vec::new();
            let pb: Vec<i64> = sent.iter().map(|m| reader.offer(&mut b, m, &mut got)).collect();
            reader.read_to(&mut got, 3);
            (pb, got)
        });
        assert_eq!(a.commit_claim(), Some(6 * FRAME));
        let (pb, got) = tb.join().unwrap();
        assert_eq!(check_writer(&got, &[claimed], "A"), [6 * FRAME]);
        assert_eq!(check_writer(&got, &from_b, "B"), pb);
        assert_eq!(pb, [7 * FRAME, 8 * FRAME], "B's second message where A zeroed");
        assert_eq!(log.active_term_count(), 3);
    });
}

#[test]
fn k6_dead_writer_swept_by_a_held_back_writer_vs_reader() {
    let name = "k6_dead_writer_swept_by_a_held_back_writer_vs_reader";
    let tally = Tally::default();
    let seen = tally.clone();
    check(name, 3, move || {
        let (log, region) = concurrent_log();
        let slots = slot_region();
        let kernel = ModelKernel::new(1, 2, true);
        let mut reader = ModelReader::join(&region, &slots).unblocking(&region, &kernel);
        let (mut d, mut l) = (writer(&region, &slots, 0, &kernel), writer(&region, &slots, 1, &kernel));
        // D's claim of the first frame, its header written, never committed: D dies with it
        // open, and the kernel drops its lock. (When it dies relative to the unblocker is
        // `log::loom_concurrent::k2`'s business.)
        assert_eq!(d.claim(LEN), Ok(FRAME));
        drop(d);
        kernel.writer_dies(0);
        let ml = tagged(b'L', 0);
        let sent = ml.clone();
        let tl = thread::spawn(move || offer(&mut l, &sent));
        let got = reader.read(1);
        let pl = tl.join().unwrap();
        assert_eq!(check_writer(&got, &[ml], "L"), [pl], "L's message, never D's");
        assert_eq!(pl, 2 * FRAME, "after D's hole, padded");
        assert_eq!(log.writer_pending(0), NO_PENDING, "the dead writer's word cleared");
        seen.add(if reader.padded == 1 { "padded by the reader" } else { "padded by L's sweep" });
    });
    assert_eq!(tally.report(name).len(), 2, "both unblockers reached");
}
