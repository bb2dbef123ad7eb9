//! Loom models of the stream layer: flow control over the real reader slots, joining a running
//! stream, and the eviction of dead readers. Like `log::loom_models` (whose helpers they use),
//! they run the real code over `LoomRegion`s: the appender and `reader::read` over a log,
//! [`Slots`] over a slot file, [`FlowControl::recompute`] and [`join::join`].
//!
//! The writer admits a message exactly as `Publication::admit`/`admit_slow` do: below the
//! cached limit it appends; at or above it, it recomputes the limit from the slots (slowest
//! reader of the session plus the window, `T / 2`) and appends if now below it; otherwise it is
//! back-pressured and tries again later (it yields). Readers publish their positions with
//! [`Slots::set_position`] after every poll that moved, as `Subscription::poll` does.
//!
//! Every reader checks, after every poll, that the writer is not further ahead of it than flow
//! control allows: for a reader the writer has counted since it joined, a window plus one
//! message; for a reader that joined while the writer was running, a term more (the writer may
//! run on a limit it computed just before the join; see `stream::join`). Within those bounds
//! the writer cannot clean or overwrite what the reader has not read (I2, I3); past them the
//! model fails even before the reader meets the damage.
//!
//! Models:
//! - `d1_flow_control_over_slots_vs_poll`: one reader through the slot file; nine messages
//!   through five terms of 128 bytes, so the writer cleans and reuses partitions behind the
//!   reader on a lazily recomputed limit (I2, I3).
//! - `d2_join_slowest_while_writing`, `d3_join_latest_while_writing`: while the writer runs
//!   (held back by a first reader that keeps up), a second reader joins through [`join::join`]
//!   at the slowest reader (the default rule) or at the writer's position, at whatever moment
//!   loom picks, and then reads every message from its join position on, whole and in order;
//!   the writer must count it in time never to lap it (I2, I5).
//! - `f_evict_dead_reader_vs_live_and_new_readers`: the publisher's sweep
//!   ([`Slots::evict_dead`]) frees a dead reader's slot, never a live one's, while the live
//!   reader keeps publishing positions and a new reader claims a slot
//!   ([`Slots::claim_free`]), possibly the dead one's (I6).
//!
//! The model `e_fragmented_messages_vs_assembler` (fragments vs the real `FragmentAssembler`)
//! is in `log::loom_models`, next to the other models of the log alone.

use super::flow::FlowControl;
use super::join::{self, JoinRule};
use super::slots::{SlotLocks, Slots};
use crate::layout::align;
use crate::layout::frame::{FRAME_ALIGNMENT, HEADER_LEN};
use crate::layout::slots::{self as s, slot_offset, STATE_ACTIVE, STATE_FREE};
use crate::log::appender::{Appender, Tripped};
use crate::log::loom_models::{check, check_place, message, new_log, Shared, Tally, SESSION_ID};
use crate::log::reader::{read, Action};
use crate::log::Log;
use crate::region::LoomRegion;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use std::sync::Arc;

/// Largest frame of the models' messages (16 payload bytes and the header, aligned).
const MAX_FRAME: i64 = 64;

/// A slot file of `count` slots: every header and slot field as an atomic word.
fn slot_region(count: usize) -> LoomRegion {
    let mut i64_words = vec![s::MAGIC_OFFSET, s::HIGH_WATER];
    for i in 0..count {
        let base = slot_offset(i);
        i64_words.extend([s::STATE, s::POSITION, s::JOIN_POSITION, s::PID, s::CLAIMED_NS].map(|f| base + f));
    }
    LoomRegion::new(s::file_length(count), &[], &[s::VERSION, s::SLOT_COUNT, s::READY], &i64_words)
}

type SharedSlots = Arc<Slots<Arc<LoomRegion>>>;

fn new_slots(count: usize) -> SharedSlots {
    Arc::new(Slots::initialize(Arc::new(slot_region(count)), count))
}

/// The publication's writer: appender, flow control and the slot file.
struct Writer {
    app: Appender<Shared>,
    flow: FlowControl,
    slots: SharedSlots,
}

impl Writer {
    fn new(app: Appender<Shared>, slots: SharedSlots) -> Self {
        let flow = FlowControl::new(app.log().geometry().window, app.position());
        Self { app, flow, slots }
    }

    /// `Publication::admit` + `admit_slow`, retried while back-pressured.
    fn admit(&mut self) {
        loop {
            let position = self.app.position();
            if position < self.flow.limit() {
                return;
            }
            if position < self.flow.recompute(&*self.slots, SESSION_ID) {
                return;
            }
            thread::yield_now();
        }
    }

    /// `Publication::offer`: admit, append, rotate on a trip. Returns the position after it.
    fn offer(&mut self, msg: &[u8]) -> i64 {
        loop {
            self.admit();
            match self.app.append(&[msg], msg.len()) {
                Ok(position) => return position,
                Err(Tripped) => self.app.rotate().expect("far below the max position"),
            }
        }
    }
}

/// One message as the writer laid it out: `[start, end)` and its payload.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sent {
    start: i64,
    end: i64,
    payload: Vec<u8>,
}

/// The messages of `lens` bytes as the writer lays them out in terms of `term_length` bytes
/// (frames 32-aligned, a message that does not fit padded over to the next term).
fn layout(lens: &[usize], term_length: i64) -> Vec<Sent> {
    let mut at = 0i64;
    lens.iter()
        .enumerate()
        .map(|(i, &len)| {
            let framed = align(HEADER_LEN + len, FRAME_ALIGNMENT) as i64;
            if at % term_length + framed > term_length {
                at += term_length - at % term_length;
            }
            let sent = Sent { start: at, end: at + framed, payload: message(i as u8, len) };
            at += framed;
            sent
        })
        .collect()
}

/// A subscription's reading part: its view of the log and its slot.
struct SlotReader {
    log: Log<Shared>,
    slots: SharedSlots,
    slot: usize,
    position: i64,
    /// How far the writer may be ahead of our published position (see the module docs).
    lead: i64,
    got: Vec<Sent>,
}

impl SlotReader {
    fn new(region: Shared, slots: SharedSlots, slot: usize, position: i64, lead: i64) -> Self {
        let log = Log::open_any_term(region).expect("an initialised log");
        Self { log, slots, slot, position, lead, got: Vec::new() }
    }

    /// One `Subscription::poll` of up to `fragment_limit` fragments; yields if nothing moved.
    fn poll(&mut self, fragment_limit: usize) {
        let terms = self.log.terms();
        let got = &mut self.got;
        let scan = read(
            &self.log,
            self.position,
            fragment_limit,
            |payload, header| {
                check_place(terms, payload, header);
                let end = header.position();
                let start = end - align(header.frame_length() as usize, FRAME_ALIGNMENT) as i64;
                got.push(Sent { start, end, payload: payload.to_vec() });
                Action::Continue
            },
            |_| unreachable!("the handler never commits"),
        );
        assert_eq!(scan.fault, None, "reader fault at position {}", self.position);
        let producer = self.log.producer_position().expect("tail counters agree with the term count");
        assert!(producer >= scan.position, "producer position {producer} behind a read to {}", scan.position);
        assert!(
            producer <= self.position + self.lead,
            "the writer ran to {producer}, more than {} past the reader at {} (I2)",
            self.lead,
            self.position
        );
        if scan.position > self.position {
            self.position = scan.position;
            self.slots.set_position(self.slot, scan.position);
        } else {
            thread::yield_now();
        }
    }

    /// Polls until the reader stands at `end`.
    fn read_to(&mut self, end: i64, fragment_limit: usize) {
        while self.position < end {
            self.poll(fragment_limit);
        }
        assert_eq!(self.position, end);
    }
}

#[test]
fn d1_flow_control_over_slots_vs_poll() {
    check("d1_flow_control_over_slots_vs_poll", || {
        // As `c2` in `log::loom_models`, with the real flow control: terms of 128 bytes; frames
        // of 64, 64 | 64, 64 | 64, 32, pad | 64, 32, pad | 64, so partitions 0 and 1 are cleaned
        // and written again behind the reader.
        let term = 128;
        let (app, region) = new_log(term, i32::MAX - 1);
        let window = app.log().geometry().window as i64;
        let slots = new_slots(1);
        slots.claim(0, 7, 0);
        slots.activate(0, SESSION_ID, 0);
        let lens = [16, 16, 16, 16, 16, 0, 16, 0, 16];
        let sent = layout(&lens, term as i64);
        assert_eq!(
            sent.iter().map(|m| m.end).collect::<Vec<_>>(),
            [64, 128, 192, 256, 320, 352, 448, 480, 576]
        );
        let mut reader = SlotReader::new(region, Arc::clone(&slots), 0, 0, window + MAX_FRAME);
        let mut writer = Writer::new(app, slots);
        let payloads: Vec<Vec<u8>> = sent.iter().map(|m| m.payload.clone()).collect();
        let writer = thread::spawn(move || payloads.iter().map(|m| writer.offer(m)).collect::<Vec<_>>());
        reader.read_to(576, 4);
        let ends = writer.join().unwrap();
        assert_eq!(ends, sent.iter().map(|m| m.end).collect::<Vec<_>>());
        assert_eq!(reader.got, sent);
    });
}

/// A reader joins by `rule` through [`join::join`] while the writer runs, then reads from its
/// join position to the end: it must see exactly the messages from there on, whole and in
/// order, and the writer must never lap it.
///
/// The first reader (slot 0, active from position 0) is a reader in another process that keeps
/// up: the writer thread publishes its position right after each commit. That is the same
/// happens-before a real reader's position carries (it acquired the commit before publishing),
/// and stale loads of it (which loom explores) give the joiner older positions as the slowest
/// reader. Its own reading is what `d1` models; a third model thread would multiply the state
/// space far beyond the time budget.
fn join_while_writing(name: &str, rule: JoinRule) {
    let tally = Tally::default();
    let seen = tally.clone();
    check(name, move || {
        // Terms of 128 bytes; five messages in frames of 64: the writer cleans partition 0 while
        // writing the last one, so a reader it lapped there would lose frames.
        let term = 128;
        let (app, region) = new_log(term, 3);
        let window = app.log().geometry().window as i64;
        let slots = new_slots(2);
        slots.claim(0, 7, 0);
        slots.activate(0, SESSION_ID, 0);
        slots.claim(1, 8, 0);
        let sent = layout(&[16; 5], term as i64);
        let end = sent.last().unwrap().end;
        assert_eq!(end, 320);
        let mut writer = Writer::new(app, Arc::clone(&slots));
        let payloads: Vec<Vec<u8>> = sent.iter().map(|m| m.payload.clone()).collect();
        let writer = thread::spawn(move || {
            for m in &payloads {
                let position = writer.offer(m);
                writer.slots.set_position(0, position);
            }
        });
        let log = Log::open_any_term(Arc::clone(&region)).expect("an initialised log");
        let at = join::join(&log, &slots, 1, rule).expect("a running log is joinable");
        assert_eq!(slots.state(1), (SESSION_ID, STATE_ACTIVE));
        // Until the writer has counted it, a joiner may trail it by a term more.
        let mut joiner = SlotReader::new(region, Arc::clone(&slots), 1, at, term as i64 + window + MAX_FRAME);
        joiner.read_to(end, 2);
        writer.join().unwrap();
        assert!(
            at == end || sent.iter().any(|m| m.start == at),
            "joined at {at}, not where a message starts"
        );
        let want: Vec<Sent> = sent.iter().filter(|m| m.start >= at).cloned().collect();
        assert_eq!(joiner.got, want, "joined at {at}");
        seen.add(format_args!("joined at {at:>3}"));
    });
    // Joins at every message boundary: before, while and after the writer runs.
    let seen = tally.report(name);
    assert_eq!(seen.len(), 6, "join positions reached: {seen:?}");
}

#[test]
fn d2_join_slowest_while_writing() {
    join_while_writing("d2_join_slowest_while_writing", JoinRule::Slowest);
}

#[test]
fn d3_join_latest_while_writing() {
    join_while_writing("d3_join_latest_while_writing", JoinRule::Latest);
}

/// The kernel's slot locks: a flag per slot, taken and dropped with SeqCst read-modify-writes
/// and stores (a lock system call is serialised by the kernel's lock on the file's lock list,
/// and orders memory like a lock). A reader that dies is a slot whose flag is dropped while its
/// state word still says ACTIVE.
struct ModelLocks(Vec<AtomicBool>);

impl SlotLocks for ModelLocks {
    type Error = std::convert::Infallible;

    fn try_lock(&self, index: usize) -> Result<bool, Self::Error> {
        Ok(self.0[index].compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).is_ok())
    }

    fn unlock(&self, index: usize) {
        self.0[index].store(false, Ordering::SeqCst);
    }
}

impl ModelLocks {
    fn held(&self, index: usize) -> bool {
        self.0[index].load(Ordering::SeqCst)
    }
}

#[test]
fn f_evict_dead_reader_vs_live_and_new_readers() {
    let tally = Tally::default();
    let seen = tally.clone();
    check("f_evict_dead_reader_vs_live_and_new_readers", move || {
        let slots = new_slots(3);
        let locks = Arc::new(ModelLocks((0..3).map(|_| AtomicBool::new(false)).collect()));
        let claim = |pid| slots.claim_free(&*locks, pid, 0).unwrap().expect("a free slot");
        // Slot 0: a live reader. Slot 1: a reader that died (the kernel dropped its lock).
        assert_eq!(claim(1), 0);
        slots.activate(0, SESSION_ID, 0);
        assert_eq!(claim(2), 1);
        slots.activate(1, SESSION_ID, 0);
        locks.unlock(1);

        let (s, l) = (Arc::clone(&slots), Arc::clone(&locks));
        let publisher = thread::spawn(move || {
            let evicted = s.evict_dead(&*l);
            let mut flow = FlowControl::new(64, 0);
            flow.recompute(&*s, SESSION_ID);
            (evicted, flow.readers())
        });
        let s = Arc::clone(&slots);
        let live = thread::spawn(move || {
            // Still polling: its position moves on while the publisher sweeps.
            for position in [32, 64] {
                s.set_position(0, position);
                thread::yield_now();
            }
        });
        // A new reader claims a slot (the dead reader's, if its lock is free at that moment)
        // and joins.
        let mine = claim(3);
        slots.activate(mine, SESSION_ID, 96);
        let (evicted, counted) = publisher.join().unwrap();
        live.join().unwrap();

        assert_eq!(slots.state(0), (SESSION_ID, STATE_ACTIVE), "the live reader was evicted");
        assert!(locks.held(0));
        assert_eq!(
            slots.state(mine),
            (SESSION_ID, STATE_ACTIVE),
            "the new reader's slot {mine} was freed (I6)"
        );
        assert!(locks.held(mine));
        assert_eq!(slots.view(mine).pid, 3);
        let outcome = match (mine, evicted) {
            (1, 0) => "the new reader took over the dead reader's slot before the sweep",
            (1, 1) => "the sweep freed the dead reader's slot, then the new reader took it",
            (2, 1) => {
                // The sweep held slot 1's lock when the new reader tried it, and freed it.
                assert_eq!(slots.state(1).1, STATE_FREE);
                assert!(!locks.held(1));
                "the new reader took slot 2 while the sweep held slot 1"
            }
            _ => panic!("new reader in slot {mine}, {evicted} evicted"),
        };
        // The publisher's limit counted the live reader (at most where it got to).
        assert!(counted.count >= 1 && counted.min.is_some_and(|m| m <= 96), "{counted:?}");
        seen.add(outcome);
    });
    let seen = tally.report("f_evict_dead_reader_vs_live_and_new_readers");
    assert_eq!(seen.len(), 3, "outcomes reached: {seen:?}");
}
