//! Loom models of the log protocol.
//!
//! Each model runs the real [`Appender`] on a writer thread against the real [`reader::read`] on
//! the model's main thread, over a log in a [`LoomRegion`] with tiny terms (128 to 1024 bytes,
//! MTU 64, window `T / 2`, page 4096), and checks what a subscriber must see: exactly the
//! committed messages, in order, byte-exact, with the header of the place they sit in, never a
//! partial frame and never a fault. Loom itself reports data races on payload bytes and
//! cleaning that is not ordered after a reader's last access (see `region::loom`).
//!
//! Flow control is the publication's admission rule, reduced to one reader: the reader stores
//! the position it consumed to (release) in a loom `AtomicI64` after every poll that moved, and
//! the writer starts a message only while its position is below that position plus the window
//! (acquire), as the publication's limit check does (I2). The real flow control over reader
//! slots, joins and eviction are modelled in `stream::loom_models`, with these helpers.
//!
//! The reader also checks, after every poll, that the writer's published position
//! (`Log::producer_position`: tail counters read against the active term count) is consistent and
//! at least what it read, which checks the order of the stores of a rotation.
//!
//! Models (the writer runs on a spawned thread, the reader on the model's thread):
//! - `a_offers_vs_poll`: five offers (32, 0, 17, 0 and 31 bytes) filling a term of 256 bytes,
//!   polled two fragments at a time; the window (128) holds the writer back (I1, I2).
//! - `a2_offers_vs_read_block`: four offers read with `read_block` in blocks of at most 96
//!   bytes, the frames, length words included, decoded from the block's bytes.
//! - `a3_fragmented_offers_vs_poll`: two messages of two fragments each (term of 512 bytes, the
//!   smallest whose largest message exceeds one frame's payload), each fragment committed on
//!   its own and delivered with its BEGIN/END flag.
//! - `b_claim_commit_and_abort_vs_poll`: a claim filled in place, given a reserved value and
//!   committed; a claim aborted (the reader must skip it as padding); an offer; a claim of an
//!   empty payload; and a claim that does not fit, so the term is padded and the claim lands in
//!   the next term (term id wrapping from `i32::MAX`).
//! - `c1_rotation_with_padding_vs_poll`: terms of 128 bytes, polled one fragment at a time:
//!   term 0 is padded at its end and the writer rotates (term id wrapping from `i32::MAX`),
//!   term 1 is filled exactly; the window holds the writer back at every message.
//! - `c2_cleaning_and_reuse_vs_poll`: nine messages through five terms of 128 bytes: terms 0
//!   and 1 filled exactly (rotation with no padding), term 2 written while the writer zeroes
//!   partition 0 behind the reader and padded at its end, term 3 written into partition 0
//!   again while zeroing partition 1, and term 4 into partition 1 again: the reader must never
//!   see the stale frames of terms 0 and 1 (I3), and loom checks that no zeroing races with a
//!   reader's access to the same bytes or length words. Cleaning starts only at term count 2,
//!   so this is the one model of this file that can see a writer that does not clean.
//! - `e_fragmented_messages_vs_assembler`: messages of three, one and two fragments (terms of
//!   1024 bytes) polled two fragments at a time into the real `FragmentAssembler`, as
//!   `Subscription::poll(&mut assembler, n)` does: every message is delivered once, whole and
//!   byte-exact, with the header of a whole message, however the polls split it.
//!
//! Models d (flow control and joins over the reader slots) and f (eviction of dead readers)
//! are in `stream::loom_models`.
//!
//! Run: `.ci/loom.sh`, or by hand:
//! `RUSTFLAGS="--cfg shmlog_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom
//! cargo test --release --lib loom_models -- --nocapture` (the preemption bound defaults to 2
//! here when `LOOM_MAX_PREEMPTIONS` is unset). See `docs/verification.md` for results and the
//! mutants that show each model can fail.

use super::appender::{Appender, ClaimedFrame, Tripped};
use super::header::Header;
use super::position::Terms;
use super::reader::{read, read_block, Action, InPlace};
use super::{Log, LogInit};
use crate::api::assembler::FragmentAssembler;
use crate::api::handler::FragmentHandler;
use crate::layout::align;
use crate::layout::frame::{
    HeaderRest, BEGIN_FLAG, END_FLAG, FRAME_ALIGNMENT, HEADER_LEN, TYPE_DATA, UNFRAGMENTED,
};
use crate::layout::log_meta::Geometry;
use crate::region::LoomRegion;
use crate::sync::{AtomicI64, Ordering};
use loom::thread;
use std::sync::Arc;
use std::time::Instant;

pub(crate) type Shared = Arc<LoomRegion>;

const MTU: usize = 64;
const PAGE: usize = 4096;
pub(crate) const SESSION_ID: i32 = 11;
const STREAM_ID: i32 = 22;

/// Runs `model` under loom: the preemption bound is `LOOM_MAX_PREEMPTIONS` or 2, the branch
/// limit `LOOM_MAX_BRANCHES` or 10 000. Prints the iterations and the time taken.
pub(crate) fn check(name: &str, model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    if std::env::var_os("LOOM_MAX_BRANCHES").is_none() {
        builder.max_branches = 10_000;
    }
    check_with(name, builder, model);
}

/// Runs `model` under the loom `builder` given; prints the iterations and the time taken.
pub(crate) fn check_with(
    name: &str,
    builder: loom::model::Builder,
    model: impl Fn() + Sync + Send + 'static,
) {
    // Bookkeeping outside the model: counts executions, never seen by loom.
    let iterations = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&iterations);
    let start = Instant::now();
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        model();
    });
    println!(
        "loom model {name}: {} iterations in {:.2?} (preemption bound {:?})",
        iterations.load(std::sync::atomic::Ordering::Relaxed),
        start.elapsed(),
        builder.preemption_bound
    );
}

/// Counts outcomes across a model's executions (bookkeeping outside the model, never seen by
/// loom), so a test can print them and assert that loom reached the interleavings it is about.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tally(Arc<std::sync::Mutex<std::collections::BTreeMap<String, usize>>>);

impl Tally {
    pub(crate) fn add(&self, outcome: impl std::fmt::Display) {
        *self.0.lock().unwrap().entry(outcome.to_string()).or_default() += 1;
    }

    /// Prints the outcomes and returns them.
    pub(crate) fn report(&self, name: &str) -> std::collections::BTreeMap<String, usize> {
        let seen = self.0.lock().unwrap().clone();
        println!("loom model {name}: outcomes {seen:?}");
        seen
    }
}

/// Message `i` of `len` bytes: distinct, non-zero bytes, so a torn or stale copy shows.
pub(crate) fn message(i: u8, len: usize) -> Vec<u8> {
    (0..len).map(|j| i.wrapping_mul(64).wrapping_add(j as u8).wrapping_add(1)).collect()
}

/// The writer: the appender plus the publication's admission rule.
struct Writer {
    app: Appender<Shared>,
    consumed: Arc<AtomicI64>,
    window: i64,
}

impl Writer {
    /// Waits, yielding to the reader, until the limit admits a message at the writer's position.
    fn await_limit(&self) {
        while self.app.position() >= self.consumed.load(Ordering::Acquire) + self.window {
            thread::yield_now();
        }
    }

    /// Offers `msg` as the publication does: admit, append, and on a trip rotate and retry.
    /// Returns the position after the message.
    fn offer(&mut self, msg: &[u8]) -> i64 {
        loop {
            self.await_limit();
            match self.app.append(&[msg], msg.len()) {
                Ok(position) => return position,
                Err(Tripped) => self.app.rotate().expect("far below the max position"),
            }
        }
    }

    /// Claims a frame of `len` payload bytes as the publication does.
    fn claim(&mut self, len: usize) -> ClaimedFrame {
        loop {
            self.await_limit();
            match self.app.claim(len) {
                Ok(frame) => return frame,
                Err(Tripped) => self.app.rotate().expect("far below the max position"),
            }
        }
    }
}

/// One fragment as the handler saw it.
#[derive(Debug, PartialEq, Eq)]
struct Delivered {
    payload: Vec<u8>,
    /// Position after the fragment.
    position: i64,
    flags: u8,
    reserved_value: i64,
}

/// The reader: its own view of the log, opened from the region as a subscriber would.
struct Reader {
    log: Log<Shared>,
    position: i64,
    consumed: Arc<AtomicI64>,
}

impl Reader {
    /// Polls until `count` fragments are delivered, `fragment_limit` per poll, checking each
    /// header against the place it was read from, and publishes the position after every poll
    /// that moved (only then may the writer reuse what it passed).
    fn poll_until(&mut self, count: usize, fragment_limit: usize) -> Vec<Delivered> {
        let terms = self.log.terms();
        let mut got = Vec::with_capacity(count);
        while got.len() < count {
            let before = got.len();
            // SAFETY: the model's flow control: the writer starts a message only below the
            // position this reader published (after its previous read) plus the window (I2).
            let scan = unsafe {
                read(
                    &self.log,
                    self.position,
                    fragment_limit.min(count - before),
                    |payload, header| {
                        check_place(terms, payload, header);
                        got.push(Delivered {
                            payload: payload.to_vec(),
                            position: header.position(),
                            flags: header.flags(),
                            reserved_value: header.reserved_value(),
                        });
                        Action::Continue
                    },
                    |_| unreachable!("the handler never commits"),
                )
            };
            assert_eq!(scan.fault, None, "reader fault at position {}", self.position);
            assert_eq!(scan.fragments, got.len() - before);
            self.advance(scan.position);
        }
        got
    }

    /// Like [`Reader::poll_until`] with [`read_block`]: blocks of at most `max_bytes` (or one
    /// frame), whose frames, length words included, are decoded from the block's bytes.
    fn block_poll_until(&mut self, count: usize, max_bytes: usize) -> Vec<Delivered> {
        let terms = self.log.terms();
        let mut got = Vec::with_capacity(count);
        while got.len() < count {
            // SAFETY: as in `poll_until`.
            let scan = unsafe {
                read_block(&self.log, self.position, max_bytes, &mut InPlace, |block: &[u8], start| {
                    let mut at = 0;
                    while at < block.len() {
                        let len = i32::from_le_bytes(block[at..at + 4].try_into().unwrap()) as usize;
                        let rest = HeaderRest::decode(block[at + 4..at + HEADER_LEN].try_into().unwrap());
                        let end = at + align(len, FRAME_ALIGNMENT);
                        let frame_start = start + at as i64;
                        assert!(len >= HEADER_LEN && end <= block.len(), "torn block at {frame_start}");
                        assert_eq!(rest.frame_type, TYPE_DATA);
                        assert_eq!(rest.term_id, terms.term_id(frame_start));
                        assert_eq!(rest.term_offset as usize, terms.term_offset(frame_start));
                        got.push(Delivered {
                            payload: block[at + HEADER_LEN..at + len].to_vec(),
                            position: start + end as i64,
                            flags: rest.flags,
                            reserved_value: rest.reserved_value,
                        });
                        at = end;
                    }
                })
            };
            assert_eq!(scan.fault, None, "reader fault at position {}", self.position);
            self.advance(scan.position);
        }
        got
    }

    /// Moves to `position` (where a read stopped) and publishes it if it moved; yields if not.
    /// Also checks the writer's published position against it: the tail counters and the term
    /// count must agree (the rotation order) and be at least what was read.
    fn advance(&mut self, position: i64) {
        assert!(position >= self.position);
        assert_eq!(position % FRAME_ALIGNMENT as i64, 0);
        let producer = self.log.producer_position().expect("tail counters agree with the term count");
        assert!(producer >= position, "producer position {producer} behind a read to {position}");
        if position > self.position {
            self.position = position;
            self.consumed.store(position, Ordering::Release);
        } else {
            thread::yield_now();
        }
    }
}

/// A fresh log of terms of `term_length` bytes (MTU 64, window `T / 2`): its appender, and the
/// region for the readers' views (`Log::open_any_term`).
pub(crate) fn new_log(term_length: usize, initial_term_id: i32) -> (Appender<Shared>, Shared) {
    let (log, region) = new_plain_log(term_length, initial_term_id);
    (Appender::new(log).expect("a fresh log"), region)
}

/// A fresh log of terms of `term_length` bytes (MTU 64, window `T / 2`) and its region.
pub(crate) fn new_plain_log(term_length: usize, initial_term_id: i32) -> (Log<Shared>, Shared) {
    new_log_region(term_length, initial_term_id, false)
}

/// [`new_plain_log`] whose region also models racy reads (`LoomRegion::with_racy_reads`), for
/// untethered readers.
pub(crate) fn new_racy_log(term_length: usize, initial_term_id: i32) -> (Log<Shared>, Shared) {
    new_log_region(term_length, initial_term_id, true)
}

fn new_log_region(term_length: usize, initial_term_id: i32, racy: bool) -> (Log<Shared>, Shared) {
    let geometry = Geometry { term_length, page_size: PAGE, mtu: MTU, window: term_length / 2 };
    let region = LoomRegion::for_log(&geometry);
    let region = Arc::new(if racy { region.with_racy_reads() } else { region });
    let init = LogInit {
        geometry,
        initial_term_id,
        session_id: SESSION_ID,
        stream_id: STREAM_ID,
        pid: 1,
        created_ns: 2,
        name: "loom",
        concurrent: false,
        session_seq: 1,
    };
    let log = Log::initialize(Arc::clone(&region), &init);
    (log, region)
}

/// Checks that a delivered fragment's header names the place it was read from.
pub(crate) fn check_place(terms: Terms, payload: &[u8], header: &Header) {
    let aligned = align(header.frame_length() as usize, FRAME_ALIGNMENT);
    let start = header.position() - aligned as i64;
    assert_eq!(header.frame_length() as usize, HEADER_LEN + payload.len());
    assert_eq!(header.term_id(), terms.term_id(start));
    assert_eq!(header.term_offset() as usize, terms.term_offset(start));
    assert_eq!(header.session_id(), SESSION_ID);
    assert_eq!(header.stream_id(), STREAM_ID);
}

/// A fresh log of terms of `term_length` bytes, as its writer and one reader at position 0.
fn setup(term_length: usize, initial_term_id: i32) -> (Writer, Reader) {
    let (app, region) = new_log(term_length, initial_term_id);
    let reader_log = Log::open_any_term(region).expect("an initialised log");
    let consumed = Arc::new(AtomicI64::new(0));
    let window = app.log().geometry().window as i64;
    let writer = Writer { app, consumed: Arc::clone(&consumed), window };
    (writer, Reader { log: reader_log, position: 0, consumed })
}

/// What the reader must have seen for `messages` ending at `positions`: unfragmented, in order,
/// byte-exact.
fn expected(messages: &[Vec<u8>], positions: &[i64]) -> Vec<Delivered> {
    messages
        .iter()
        .zip(positions)
        .map(|(m, &position)| Delivered {
            payload: m.clone(),
            position,
            flags: UNFRAGMENTED,
            reserved_value: 0,
        })
        .collect()
}

#[test]
fn a_offers_vs_poll() {
    check("a_offers_vs_poll", || {
        let (mut writer, mut reader) = setup(256, 5);
        // Frames of 64, 32, 64, 32 and 64 bytes fill the term; the window (128) holds the writer.
        let messages = [message(0, 32), message(1, 0), message(2, 17), message(3, 0), message(4, 31)];
        let sent = messages.clone();
        let writer = thread::spawn(move || sent.iter().map(|m| writer.offer(m)).collect::<Vec<_>>());
        let got = reader.poll_until(messages.len(), 2);
        let positions = writer.join().unwrap();
        assert_eq!(positions, [64, 96, 160, 192, 256]);
        assert_eq!(got, expected(&messages, &positions));
    });
}

#[test]
fn a2_offers_vs_read_block() {
    check("a2_offers_vs_read_block", || {
        let (mut writer, mut reader) = setup(256, 5);
        let messages = [message(0, 32), message(1, 0), message(2, 17), message(3, 0)];
        let sent = messages.clone();
        let writer = thread::spawn(move || sent.iter().map(|m| writer.offer(m)).collect::<Vec<_>>());
        let got = reader.block_poll_until(messages.len(), 96);
        let positions = writer.join().unwrap();
        assert_eq!(positions, [64, 96, 160, 192]);
        assert_eq!(got, expected(&messages, &positions));
    });
}

#[test]
fn a3_fragmented_offers_vs_poll() {
    check("a3_fragmented_offers_vs_poll", || {
        // A term of 512 bytes is the smallest whose largest message (T / 8 = 64 bytes) is above
        // the largest payload of a frame (MTU 64 - header 32): messages of 64 and 40 bytes go out
        // as two fragments each, every fragment committed on its own.
        let (mut writer, mut reader) = setup(512, 5);
        let messages = [message(0, 64), message(1, 40)];
        let sent = messages.clone();
        let writer = thread::spawn(move || sent.iter().map(|m| writer.offer(m)).collect::<Vec<_>>());
        let got = reader.poll_until(4, 3);
        let positions = writer.join().unwrap();
        assert_eq!(positions, [128, 256]);
        let fragment =
            |m: &[u8], flags, position| Delivered { payload: m.to_vec(), position, flags, reserved_value: 0 };
        let want = [
            fragment(&messages[0][..32], BEGIN_FLAG, 64),
            fragment(&messages[0][32..], END_FLAG, 128),
            fragment(&messages[1][..32], BEGIN_FLAG, 192),
            fragment(&messages[1][32..], END_FLAG, 256),
        ];
        assert_eq!(got, want);
    });
}

#[test]
fn b_claim_commit_and_abort_vs_poll() {
    check("b_claim_commit_and_abort_vs_poll", || {
        let (mut writer, mut reader) = setup(256, i32::MAX);
        let claimed = [message(0, 20), message(3, 0), message(4, 32)];
        let offered = message(2, 5);
        let (c, o) = (claimed.clone(), offered.clone());
        let writer = thread::spawn(move || {
            let mut positions = Vec::new();
            let mut claim_and_commit = |writer: &mut Writer, msg: &[u8], reserved: i64| {
                let frame = writer.claim(msg.len());
                writer.app.with_claim_payload(&frame, |payload| payload.copy_from_slice(msg));
                writer.app.set_claim_reserved_value(&frame, reserved);
                positions.push(frame.position);
                writer.app.commit(frame);
            };
            // [0, 64) committed, [64, 128) aborted, [128, 192) offered, [192, 224) committed;
            // the last claim does not fit: [224, 256) is padded and it lands in the next term.
            claim_and_commit(&mut writer, &c[0], -7);
            let frame = writer.claim(9);
            writer.app.with_claim_payload(&frame, |payload| payload.fill(0xAB));
            writer.app.abort(frame);
            let offered_at = writer.offer(&o);
            claim_and_commit(&mut writer, &c[1], 1);
            claim_and_commit(&mut writer, &c[2], 2);
            positions.insert(1, offered_at);
            positions
        });
        let got = reader.poll_until(4, 4);
        let positions = writer.join().unwrap();
        assert_eq!(positions, [64, 192, 224, 320]);
        let messages = [claimed[0].clone(), offered, claimed[1].clone(), claimed[2].clone()];
        let mut want = expected(&messages, &positions);
        want[0].reserved_value = -7;
        want[2].reserved_value = 1;
        want[3].reserved_value = 2;
        assert_eq!(got, want);
    });
}

#[test]
fn c1_rotation_with_padding_vs_poll() {
    check("c1_rotation_with_padding_vs_poll", || {
        let (mut writer, mut reader) = setup(128, i32::MAX);
        // Term 0: frames of 64 and 32 bytes, then one of 64 that does not fit: padding, and the
        // term id wraps to `i32::MIN`. Term 1: two frames of 64 fill it exactly.
        let messages = [message(0, 16), message(1, 0), message(2, 16), message(3, 16)];
        let sent = messages.clone();
        let writer = thread::spawn(move || {
            let positions = sent.iter().map(|m| writer.offer(m)).collect::<Vec<_>>();
            (positions, writer.app.log().active_term_count())
        });
        let got = reader.poll_until(messages.len(), 1);
        let (positions, term_count) = writer.join().unwrap();
        assert_eq!(positions, [64, 96, 192, 256]);
        assert_eq!(term_count, 1);
        assert_eq!(got, expected(&messages, &positions));
    });
}

#[test]
fn c2_cleaning_and_reuse_vs_poll() {
    check("c2_cleaning_and_reuse_vs_poll", || {
        let (mut writer, mut reader) = setup(128, i32::MAX - 1);
        // Terms 0 and 1: two frames of 64 each, filling them exactly (rotation with no padding).
        // Term 2 (partition 2, zeroing partition 0 behind the reader): 64, 32, padding of 32.
        // Term 3 (partition 0 again, zeroing partition 1): 64, 32 over term 0's old frames, and
        // padding. Term 4 (partition 1 again, over term 1's old frames): 64.
        let mut messages: Vec<Vec<u8>> = (0..4).map(|i| message(10 + i, 16)).collect();
        messages.extend([message(0, 16), message(1, 0), message(2, 16), message(3, 0), message(4, 16)]);
        let sent = messages.clone();
        let writer = thread::spawn(move || {
            let positions = sent.iter().map(|m| writer.offer(m)).collect::<Vec<_>>();
            (positions, writer.app.log().active_term_count())
        });
        let got = reader.poll_until(messages.len(), 4);
        let (positions, term_count) = writer.join().unwrap();
        assert_eq!(positions, [64, 128, 192, 256, 320, 352, 448, 480, 576]);
        assert_eq!(term_count, 4);
        assert_eq!(got, expected(&messages, &positions));
    });
}

#[test]
fn e_fragmented_messages_vs_assembler() {
    let tally = Tally::default();
    let seen = tally.clone();
    check("e_fragmented_messages_vs_assembler", move || {
        // Terms of 1024 bytes (the smallest whose largest message, T / 8 = 128 bytes, takes
        // three fragments of the 32-byte max payload): 70 bytes go out as fragments of 32, 32
        // and 6, then an unfragmented message of 5, then 40 bytes as 32 and 8. Each fragment is
        // committed on its own; the reader polls two fragments at a time into the real
        // assembler, as `Subscription::poll(&mut assembler, 2)` does, so messages are split
        // across polls wherever the writer happens to be.
        let (mut writer, mut reader) = setup(1024, 5);
        let messages = [message(0, 70), message(1, 5), message(2, 40)];
        let sent = messages.clone();
        let writer = thread::spawn(move || sent.iter().map(|m| writer.offer(m)).collect::<Vec<_>>());
        let whole = std::cell::RefCell::new(Vec::new());
        let mut assembler = FragmentAssembler::new(|payload: &[u8], header: &Header| {
            whole.borrow_mut().push((payload.to_vec(), *header))
        });
        let terms = reader.log.terms();
        let (mut fragments, mut split_polls) = (0, 0);
        while whole.borrow().len() < messages.len() {
            // SAFETY: as in `Reader::poll_until`.
            let scan = unsafe {
                read(
                    &reader.log,
                    reader.position,
                    2,
                    |payload, header| {
                        check_place(terms, payload, header);
                        FragmentHandler::on_fragment(&mut assembler, payload, header);
                        Action::Continue
                    },
                    |_| unreachable!("the handler never commits"),
                )
            };
            assert_eq!(scan.fault, None, "reader fault at position {}", reader.position);
            fragments += scan.fragments;
            // Fragments delivered when each message is complete: 3, 4, 6. Anything else here
            // means this poll ended inside a message, which the assembler carries over.
            if ![0, 3, 4, 6].contains(&fragments) {
                split_polls += 1;
            }
            reader.advance(scan.position);
        }
        seen.add(format_args!("polls ending inside a message: {split_polls}"));
        let positions = writer.join().unwrap();
        assert_eq!(positions, [192, 256, 384]);
        assert_eq!(fragments, 6);
        let whole = whole.into_inner();
        assert_eq!(whole.len(), messages.len());
        for ((payload, header), (message, &end)) in whole.iter().zip(messages.iter().zip(&positions)) {
            assert_eq!(payload, message, "message ending at {end} delivered whole and byte-exact");
            assert_eq!(header.position(), end);
            assert_eq!(header.flags(), UNFRAGMENTED);
            assert_eq!(header.frame_length() as usize, HEADER_LEN + message.len());
            assert_eq!((header.session_id(), header.stream_id()), (SESSION_ID, STREAM_ID));
        }
        // The first fragment's header: where the message starts.
        assert_eq!(whole[0].1.term_offset(), 0);
        assert_eq!(whole[2].1.term_offset(), 256);
    });
    let seen = tally.report("e_fragmented_messages_vs_assembler");
    assert!(seen.keys().any(|k| !k.ends_with(": 0")), "no execution split a message across polls");
}
