//! Loom models of the stream layer: the protocol's own [`Writer`] and [`Reader`] over the real
//! reader slots, joining a running stream, forged slot words, and the eviction of dead readers.
//! Like `log::loom_models` (whose helpers they use), they run the shipped code over
//! `LoomRegion`s: nothing here re-implements admission, rotation, joining or polling.
//!
//! The writer thread calls [`Writer::offer`] and retries while it is back-pressured (yielding);
//! readers call [`Reader::poll`], which publishes their positions through their own slots. After
//! every poll a reader checks that the writer is not further ahead of it than flow control
//! allows: for a reader the writer has counted since it joined, a window plus one message; for a
//! reader that joined while the writer was running, a term more (the writer may run on a limit it
//! computed just before the join; see `stream::join`). Within those bounds the writer cannot
//! clean or overwrite what the reader has not read (I2, I3); past them the model fails even
//! before the reader meets the damage.
//!
//! Models:
//! - `d1_flow_control_over_slots_vs_poll`: one reader; nine messages through five terms of 128
//!   bytes, so the writer cleans and reuses partitions behind the reader on a lazily recomputed
//!   limit (I2, I3).
//! - `d2_join_slowest_while_writing`, `d3_join_latest_while_writing`: while the writer runs
//!   (held back by a first reader that keeps up), a second reader joins at the slowest reader (the
//!   default rule) or at the writer's position, at whatever moment loom picks, and then reads
//!   every message from its join position on, whole and in order; the writer must count it in
//!   time never to lap it (I2, I5).
//! - `f_evict_dead_reader_vs_live_and_new_readers`: the writer's sweep ([`Slots::evict_dead`])
//!   frees a dead reader's slot, never a live one's, while the live reader keeps publishing
//!   positions and a new reader claims a slot ([`Slots::lock_free`]), possibly the dead one's
//!   (I6).
//! - `g_forged_position_vs_joining_reader`: the session's only active slot holds a position far
//!   past the writer (a stray or forged word) while a reader joins and reads: the writer must
//!   neither trust the word nor lose sight of the joiner (S1).
//! - `h_doorbell_sleeping_reader_vs_sleeping_writer`: nobody spins. The reader sleeps on the
//!   doorbell whenever a poll finds nothing ([`Reader::wait_for_news`]); the writer, held back
//!   by a window of one message, sleeps until the reader moves ([`Writer::wait_for_room`]). A
//!   modelled futex wait ignores its timeout, so a lost wake-up either way is a deadlock, which
//!   loom reports; the mutants that drop the barriers or the sleeper's re-check must hit one.
//! - `i_doorbell_one_wake_reaches_every_sleeper`: two readers sleep on the doorbell while the
//!   writer commits; the writer wakes one of them (a modelled `FUTEX_WAKE` of one is
//!   `notify_one`), which must wake the other (the mutant that does not pass it on deadlocks).
//! - `i2_doorbell_one_wake_reaches_every_kind_of_sleeper`: the same with the second reader
//!   sleeping in steps, as `Subscription::wait_any` and the async receiver's waiter thread do
//!   (`doorbell::sleep` after arming and a last look): the mutant whose sleepers do not count
//!   themselves (what those two did before) deadlocks.
//!
//! - `u_untethered_reader_lapped_during_copy`: the only reader is untethered, so the writer runs
//!   on without waiting for it: six messages through three terms, cleaning partition 0 while the
//!   reader may still be copying from it. Every message the reader delivers must be the one the
//!   writer laid at that place, byte for byte (never bytes zeroed or overwritten during the
//!   copy), and every message it does not deliver must lie in a loss it reported. The mutant
//!   `SHMLOG_MUTANT=skip_copy_check`, which trusts the copy, must fail it.
//!
//! The model `e_fragmented_messages_vs_assembler` (fragments vs the real `FragmentAssembler`)
//! is in `log::loom_models`, next to the other models of the log alone.

use super::doorbell::{self, Doorbell, Fanout};
use super::join::JoinAt;
use super::reader::Reader;
use super::slots::{SlotLocks, SlotMut, Slots};
use super::writer::{Liveness, Writer};
use crate::layout::align;
use crate::layout::frame::{FRAME_ALIGNMENT, HEADER_LEN};
use crate::layout::slots::{self as s, slot_offset, STATE_ACTIVE, STATE_FREE};
use crate::log::loom_models::{
    check, check_place, message, new_plain_log, new_racy_log, Shared, Tally, SESSION_ID,
};
use crate::log::Log;
use crate::region::{LoomRegion, RegionMut};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use std::sync::Arc;

/// Largest frame of the models' messages (16 payload bytes and the header, aligned).
const MAX_FRAME: i64 = 64;

/// A slot file of `count` slots: every header, doorbell and slot field as an atomic word, the
/// two bells as futexes.
fn slot_region(count: usize) -> Shared {
    let mut i64_words = vec![s::MAGIC_OFFSET, s::HIGH_WATER];
    for i in 0..count {
        let base = slot_offset(i);
        let fields =
            [s::STATE, s::POSITION, s::JOIN_POSITION, s::PID, s::CLAIMED_NS, s::LOSSES, s::LOST_BYTES];
        i64_words.extend(fields.map(|f| base + f));
    }
    let bell = [
        s::READERS_ARMED,
        s::READERS_BELL,
        s::WRITER_ARMED,
        s::WRITER_BELL,
        s::READERS_SLEEPING,
        s::READERS_PASSED,
        s::READERS_FD_SLEEPING,
        s::READERS_FD_PASSED,
        s::WRITER_FD_SLEEPING,
    ]
    .map(|f| s::DOORBELL + f);
    let i32_words: Vec<usize> =
        [s::VERSION, s::SLOT_COUNT, s::READY, s::SESSIONS].into_iter().chain(bell).collect();
    let region = LoomRegion::new(s::file_length(count), &[], &i32_words, &i64_words);
    Arc::new(region.with_futexes(&[s::DOORBELL + s::READERS_BELL, s::DOORBELL + s::WRITER_BELL]))
}

/// The doorbell of the slot file in `region`.
fn bell(region: &Shared) -> Doorbell<Shared> {
    Doorbell::new(Arc::clone(region), s::DOORBELL)
}

/// The slot table of `count` slots in `region`, whose session counter says the models' session
/// (number 1) was running before any of their readers claimed a slot.
fn new_slots(region: &Shared, count: usize) -> Slots<Shared> {
    let slots = Slots::initialize(Arc::clone(region), count);
    region.store_i32(s::SESSIONS, 1, crate::sync::Ordering::Relaxed);
    slots
}

/// Slot `index` of the table in `region`, claimed (its lock is the model's business).
fn claimed(region: &Shared, index: usize, pid: i64) -> SlotMut<Shared> {
    let mut slot = SlotMut::new(Arc::clone(region), slot_offset(index), index);
    slot.claim(region, pid, 0);
    slot
}

/// The kernel's slot locks: a flag per slot, taken and dropped with SeqCst read-modify-writes
/// and stores (a lock system call is serialised by the kernel's lock on the file's lock list,
/// and orders memory like a lock). A reader that dies is a slot whose flag is dropped while its
/// state word still says ACTIVE. The writer of models d and g never sweeps.
struct ModelLocks(Vec<AtomicBool>, Option<Arc<Fanout>>);

impl ModelLocks {
    fn new(count: usize) -> Self {
        Self((0..count).map(|_| AtomicBool::new(false)).collect(), None)
    }

    fn held(&self, index: usize) -> bool {
        self.0[index].load(Ordering::SeqCst)
    }
}

impl SlotLocks for ModelLocks {
    type Error = std::convert::Infallible;

    fn try_lock(&self, index: usize) -> Result<bool, Self::Error> {
        Ok(self.0[index].compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).is_ok())
    }

    fn unlock(&self, index: usize) {
        self.0[index].store(false, Ordering::SeqCst);
    }
}

impl SlotLocks for Arc<ModelLocks> {
    type Error = std::convert::Infallible;

    fn try_lock(&self, index: usize) -> Result<bool, Self::Error> {
        (**self).try_lock(index)
    }

    fn unlock(&self, index: usize) {
        (**self).unlock(index)
    }
}

impl Liveness for Arc<ModelLocks> {
    fn sweep_due(&mut self) -> bool {
        false
    }

    fn fanout(&self) -> Option<&Fanout> {
        self.1.as_deref()
    }
}

type ModelWriter = Writer<Shared, Shared, Arc<ModelLocks>>;

/// A writer of `log` over the slot table in `slots`.
fn writer(log: Log<Shared>, slots: &Shared, count: usize) -> ModelWriter {
    writer_with(log, slots, ModelLocks::new(count))
}

/// A writer of `log` over the slot table in `slots`, with `locks` (and its wake FIFO, if any).
fn writer_with(log: Log<Shared>, slots: &Shared, locks: ModelLocks) -> ModelWriter {
    let table = Slots::open(Arc::clone(slots)).expect("an initialised slot table");
    assert_eq!(table.count(), locks.0.len());
    Writer::new(log, table, Arc::new(locks)).expect("a fresh log")
}

/// `Writer::offer`, retried while back-pressured or not connected. Returns the position after
/// the message.
fn offer(writer: &mut ModelWriter, msg: &[u8]) -> i64 {
    loop {
        match writer.offer(msg) {
            Ok(position) => return position,
            Err(e) if e.is_retryable() => thread::yield_now(),
            Err(e) => panic!("offer: {e}"),
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

/// A subscription's reading part: the protocol's reader and what it got.
struct SlotReader {
    reader: Reader<Shared, Shared>,
    /// How far the writer may be ahead of our published position (see the module docs).
    lead: i64,
    got: Vec<Sent>,
}

impl SlotReader {
    /// Joins `region`'s log through `slot` by `rule`.
    fn join(region: &Shared, slots: &Shared, slot: SlotMut<Shared>, rule: JoinAt, lead: i64) -> Self {
        let log = Log::open_any_term(Arc::clone(region)).expect("an initialised log");
        let table = Slots::open(Arc::clone(slots)).expect("an initialised slot table");
        let reader =
            Reader::join(log, &table, slot, rule, false).unwrap_or_else(|(_, e)| panic!("join: {e:?}"));
        Self { reader, lead, got: Vec::new() }
    }

    /// One poll of up to `fragment_limit` fragments; yields if nothing moved.
    fn poll(&mut self, fragment_limit: usize) {
        let before = self.reader.position();
        let terms = self.reader.log().terms();
        let got = &mut self.got;
        self.reader.poll(
            |payload, header| {
                check_place(terms, payload, header);
                let end = header.position();
                let start = end - align(header.frame_length() as usize, FRAME_ALIGNMENT) as i64;
                got.push(Sent { start, end, payload: payload.to_vec() });
            },
            fragment_limit,
        );
        let position = self.reader.position();
        assert_eq!(self.reader.fault(), None, "reader fault at position {before}");
        let producer =
            self.reader.log().producer_position().expect("tail counters agree with the term count");
        assert!(producer >= position, "producer position {producer} behind a read to {position}");
        assert!(
            producer <= position + self.lead,
            "the writer ran to {producer}, more than {} past the reader at {position} (I2)",
            self.lead
        );
        if position == before {
            thread::yield_now();
        }
    }

    /// One poll of an untethered reader: checks every delivery, no bound on the writer.
    fn poll_untethered(&mut self, fragment_limit: usize) {
        let terms = self.reader.log().terms();
        let got = &mut self.got;
        self.reader.poll(
            |payload, header| {
                check_place(terms, payload, header);
                let end = header.position();
                let start = end - align(header.frame_length() as usize, FRAME_ALIGNMENT) as i64;
                got.push(Sent { start, end, payload: payload.to_vec() });
            },
            fragment_limit,
        );
        assert_eq!(self.reader.fault(), None, "reader fault");
    }

    /// Polls until the reader stands at `end`, sleeping on the doorbell (the modelled futex waits
    /// for ever) whenever a poll finds nothing.
    fn read_to_sleeping(&mut self, end: i64, fragment_limit: usize) {
        while self.reader.position() < end {
            let before = self.reader.position();
            self.poll(fragment_limit);
            if self.reader.position() == before {
                self.reader.wait_for_news(std::time::Duration::MAX);
            }
        }
    }

    /// Like [`SlotReader::read_to_sleeping`], but sleeping the way `Subscription::wait_any` and
    /// the async receiver do: the doorbell's steps one by one (arm, barrier, a last look, then
    /// `doorbell::sleep`, which the async receiver leaves to its waiter thread).
    fn read_to_sleeping_in_steps(&mut self, end: i64, fragment_limit: usize) {
        while self.reader.position() < end {
            let before = self.reader.position();
            self.poll(fragment_limit);
            if self.reader.position() != before {
                continue;
            }
            let bell = self.reader.bell().expect("a slot with a doorbell");
            let armed = bell.arm_readers();
            assert!(doorbell::barrier());
            if self.reader.has_news() {
                continue;
            }
            doorbell::sleep(&[(bell, armed)], &[], std::time::Duration::MAX);
        }
    }

    /// Like [`SlotReader::read_to_sleeping`], but sleeping as an async receiver in a runtime's
    /// reactor does: interest in the wake FIFO first (`fanout.token()`, an edge-triggered
    /// registration), then `doorbell::prepare_reactor_sleep`, then a sleep until the FIFO is
    /// written, and `doorbell::finish_reactor_sleep` when it runs again.
    fn read_to_sleeping_in_reactor(&mut self, end: i64, fragment_limit: usize, fanout: &Fanout) {
        let mut asleep = None;
        while self.reader.position() < end {
            let bell = self.reader.bell().expect("a slot with a doorbell");
            if let Some(armed) = asleep.take() {
                doorbell::finish_reactor_sleep(bell, armed);
            }
            let before = self.reader.position();
            self.poll(fragment_limit);
            if self.reader.position() != before {
                continue;
            }
            let bell = self.reader.bell().expect("a slot with a doorbell");
            let token = fanout.token();
            let has_news = || self.reader.has_news();
            if let Some((armed, _)) = doorbell::prepare_reactor_sleep(
                bell,
                Doorbell::arm_readers,
                has_news,
                std::time::Duration::MAX,
            ) {
                asleep = Some(armed);
                fanout.wait_past(token);
            }
        }
        if let Some(armed) = asleep {
            doorbell::finish_reactor_sleep(self.reader.bell().expect("a doorbell"), armed);
        }
    }

    /// Polls until the reader stands at `end`.
    fn read_to(&mut self, end: i64, fragment_limit: usize) {
        while self.reader.position() < end {
            self.poll(fragment_limit);
        }
        assert_eq!(self.reader.position(), end);
    }
}

#[test]
fn d1_flow_control_over_slots_vs_poll() {
    check("d1_flow_control_over_slots_vs_poll", || {
        // As `c2` in `log::loom_models`, with the real flow control: terms of 128 bytes; frames
        // of 64, 64 | 64, 64 | 64, 32, pad | 64, 32, pad | 64, so partitions 0 and 1 are cleaned
        // and written again behind the reader.
        let term = 128;
        let (log, region) = new_plain_log(term, i32::MAX - 1);
        let window = log.geometry().window as i64;
        let slots = slot_region(1);
        new_slots(&slots, 1);
        let mut reader =
            SlotReader::join(&region, &slots, claimed(&slots, 0, 7), JoinAt::Latest, window + MAX_FRAME);
        assert_eq!(reader.reader.position(), 0);
        let lens = [16, 16, 16, 16, 16, 0, 16, 0, 16];
        let sent = layout(&lens, term as i64);
        assert_eq!(
            sent.iter().map(|m| m.end).collect::<Vec<_>>(),
            [64, 128, 192, 256, 320, 352, 448, 480, 576]
        );
        let mut writer = writer(log, &slots, 1);
        let payloads: Vec<Vec<u8>> = sent.iter().map(|m| m.payload.clone()).collect();
        let writer =
            thread::spawn(move || payloads.iter().map(|m| offer(&mut writer, m)).collect::<Vec<_>>());
        reader.read_to(576, 4);
        let ends = writer.join().unwrap();
        assert_eq!(ends, sent.iter().map(|m| m.end).collect::<Vec<_>>());
        assert_eq!(reader.got, sent);
    });
}

/// A reader joins by `rule` while the writer runs, then reads from its join position to the
/// end: it must see exactly the messages from there on, whole and in order, and the writer must
/// never lap it.
///
/// The first reader (slot 0, active from position 0) is a reader in another process that keeps
/// up: the writer thread publishes its position right after each commit. That is the same
/// happens-before a real reader's position carries (it acquired the commit before publishing),
/// and stale loads of it (which loom explores) give the joiner older positions as the slowest
/// reader. Its own reading is what `d1` models; a third model thread would multiply the state
/// space far beyond the time budget.
fn join_while_writing(name: &str, rule: JoinAt) {
    let tally = Tally::default();
    let seen = tally.clone();
    check(name, move || {
        // Terms of 128 bytes; five messages in frames of 64: the writer cleans partition 0 while
        // writing the last one, so a reader it lapped there would lose frames.
        let term = 128;
        let (log, region) = new_plain_log(term, 3);
        let window = log.geometry().window as i64;
        let slots = slot_region(2);
        new_slots(&slots, 2);
        let first = claimed(&slots, 0, 7);
        first.activate(SESSION_ID, 0);
        let joiner_slot = claimed(&slots, 1, 8);
        let sent = layout(&[16; 5], term as i64);
        let end = sent.last().unwrap().end;
        assert_eq!(end, 320);
        let mut writer = writer(log, &slots, 2);
        let payloads: Vec<Vec<u8>> = sent.iter().map(|m| m.payload.clone()).collect();
        let writer = thread::spawn(move || {
            for m in &payloads {
                let position = offer(&mut writer, m);
                first.set_position(position);
            }
        });
        // Until the writer has counted it, a joiner may trail it by a term more.
        let mut joiner =
            SlotReader::join(&region, &slots, joiner_slot, rule, term as i64 + window + MAX_FRAME);
        let table = Slots::open(Arc::clone(&slots)).unwrap();
        assert_eq!(table.state(1), (SESSION_ID, STATE_ACTIVE));
        let at = joiner.reader.join_position();
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
    join_while_writing("d2_join_slowest_while_writing", JoinAt::Slowest);
}

#[test]
fn d3_join_latest_while_writing() {
    join_while_writing("d3_join_latest_while_writing", JoinAt::Latest);
}

/// A reader that waits for a session when the session begins is owed all of it
/// (`Slots::scan_rising`, `SlotMut::owe_sessions_after`). The session's publisher takes its
/// number from the stream's counter and writes five messages through three terms, held only by
/// a first reader that keeps up (as in `d2`). Meanwhile a second reader claims a slot and says
/// which sessions are owed to it: if it read the counter from before the publisher's number, the
/// session is owed to it and it joins it at the oldest message the log holds (what a follower
/// does for such a session), which must be the session's start, and reads every message; if it
/// read the new number, it joins by its own rule (the slowest reader) and reads from there.
/// Either way the writer never laps it. `ignore_owed_readers` (the writer does not count the
/// waiting reader) and `no_owed_fence` (the reader does not fence between its waiting word and
/// its re-read of the counter) must fail it.
#[test]
fn o_a_reader_waiting_when_a_session_begins_is_owed_all_of_it() {
    let tally = Tally::default();
    let seen = tally.clone();
    let name = "o_a_reader_waiting_when_a_session_begins_is_owed_all_of_it";
    check(name, move || {
        let term = 128;
        let (log, region) = new_plain_log(term, 3);
        assert_eq!(log.session_seq(), 1);
        let window = log.geometry().window as i64;
        let slots = slot_region(2);
        let table = new_slots(&slots, 2);
        region_before_the_session(&slots);
        let first = claimed(&slots, 0, 7);
        first.activate(SESSION_ID, 0);
        let sent = layout(&[16; 5], term as i64);
        let end = sent.last().unwrap().end;
        let payloads: Vec<Vec<u8>> = sent.iter().map(|m| m.payload.clone()).collect();
        let writer_slots = Arc::clone(&slots);
        let writer = thread::spawn(move || {
            // The publisher takes its number, then (after creating its log) writes.
            assert_eq!(table.next_session(), 1);
            let mut writer = writer(log, &writer_slots, 2);
            for m in &payloads {
                let position = offer(&mut writer, m);
                first.set_position(position);
            }
        });
        let mut slot = SlotMut::new(Arc::clone(&slots), slot_offset(1), 1);
        slot.claim(&*slots, 8, 0);
        let known = slot.owe_sessions_after(&Slots::open(Arc::clone(&slots)).unwrap());
        let owed = known < 1;
        let rule = if owed { JoinAt::Earliest } else { JoinAt::Slowest };
        let mut joiner = SlotReader::join(&region, &slots, slot, rule, term as i64 + window + MAX_FRAME);
        let at = joiner.reader.join_position();
        joiner.read_to(end, 2);
        writer.join().unwrap();
        if owed {
            let st = Slots::open(Arc::clone(&slots)).unwrap().sessions();
            assert_eq!(at, 0, "owed the session, joined at {at}, known {known}, counter now {st}");
        }
        let want: Vec<Sent> = sent.iter().filter(|m| m.start >= at).cloned().collect();
        assert_eq!(joiner.got, want, "joined at {at}");
        seen.add(format_args!("owed {owed}, joined at {at:>3}"));
    });
    let seen = tally.report(name);
    assert!(seen.keys().any(|s| s.starts_with("owed true")), "never owed: {seen:?}");
    assert!(seen.keys().any(|s| s.starts_with("owed false")), "always owed: {seen:?}");
}

/// Sets the stream's session counter of the slot file in `region` to 0: no session yet.
fn region_before_the_session(region: &Shared) {
    region.store_i32(s::SESSIONS, 0, crate::sync::Ordering::Relaxed);
}

#[test]
fn f_evict_dead_reader_vs_live_and_new_readers() {
    let tally = Tally::default();
    let seen = tally.clone();
    check("f_evict_dead_reader_vs_live_and_new_readers", move || {
        let slots = slot_region(3);
        let table = Arc::new(new_slots(&slots, 3));
        let locks = Arc::new(ModelLocks::new(3));
        let claim = |pid| {
            let index = table.lock_free(&*locks).unwrap().expect("a free slot");
            claimed(&slots, index, pid)
        };
        // Slot 0: a live reader. Slot 1: a reader that died (the kernel dropped its lock).
        let live = claim(1);
        assert_eq!(live.index(), 0);
        live.activate(SESSION_ID, 0);
        let dead = claim(2);
        assert_eq!(dead.index(), 1);
        dead.activate(SESSION_ID, 0);
        locks.unlock(1);

        let (t, l) = (Arc::clone(&table), Arc::clone(&locks));
        let publisher = thread::spawn(move || {
            let evicted = t.evict_dead(&*l);
            let mut flow = super::flow::FlowControl::new(64, 0);
            flow.recompute(&*t, SESSION_ID, 96);
            (evicted, flow.readers())
        });
        let reading = thread::spawn(move || {
            // Still polling: its position moves on while the publisher sweeps.
            for position in [32, 64] {
                live.set_position(position);
                thread::yield_now();
            }
        });
        // A new reader claims a slot (the dead reader's, if its lock is free at that moment)
        // and joins.
        let mine = claim(3);
        mine.activate(SESSION_ID, 96);
        let (evicted, counted) = publisher.join().unwrap();
        reading.join().unwrap();

        assert_eq!(table.state(0), (SESSION_ID, STATE_ACTIVE), "the live reader was evicted");
        assert!(locks.held(0));
        let index = mine.index();
        assert_eq!(
            table.state(index),
            (SESSION_ID, STATE_ACTIVE),
            "the new reader's slot {index} was freed (I6)"
        );
        assert!(locks.held(index));
        assert_eq!(table.view(index).pid, 3);
        let outcome = match (index, evicted) {
            (1, 0) => "the new reader took over the dead reader's slot before the sweep",
            (1, 1) => "the sweep freed the dead reader's slot, then the new reader took it",
            (2, 1) => {
                // The sweep held slot 1's lock when the new reader tried it, and freed it.
                assert_eq!(table.state(1).1, STATE_FREE);
                assert!(!locks.held(1));
                "the new reader took slot 2 while the sweep held slot 1"
            }
            _ => panic!("new reader in slot {index}, {evicted} evicted"),
        };
        // The publisher's limit counted the live reader (at most where it got to).
        assert!(counted.count >= 1 && counted.min.is_some_and(|m| m <= 96), "{counted:?}");
        seen.add(outcome);
    });
    let seen = tally.report("f_evict_dead_reader_vs_live_and_new_readers");
    assert_eq!(seen.len(), 3, "outcomes reached: {seen:?}");
}

#[test]
fn g_forged_position_vs_joining_reader() {
    check("g_forged_position_vs_joining_reader", || {
        // The review's S1 case: the session's only active slot holds a position far past the
        // writer (a stray or forged word) when the writer first reads the slots; a reader joins
        // at the writer's position while the writer runs. Nine messages through five terms of
        // 128 bytes. Trusting the word would give a limit near infinity that the writer never
        // recomputes, so the joiner, invisible, would be lapped. The writer ignores the word (and
        // recomputes at every rotation anyway), so it waits for the joiner and never laps it.
        let term = 128;
        let (log, region) = new_plain_log(term, 5);
        let window = log.geometry().window as i64;
        let slots = slot_region(2);
        new_slots(&slots, 2);
        let forged = claimed(&slots, 1, 8);
        forged.activate(SESSION_ID, 0);
        forged.set_position(i64::MAX / 2);
        let joiner_slot = claimed(&slots, 0, 7);
        let sent = layout(&[16, 16, 16, 16, 16, 0, 16, 0, 16], term as i64);
        let mut writer = writer(log, &slots, 2);
        let payloads: Vec<Vec<u8>> = sent.iter().map(|m| m.payload.clone()).collect();
        let writer = thread::spawn(move || {
            for m in &payloads {
                offer(&mut writer, m);
            }
        });
        let lead = term as i64 + window + MAX_FRAME;
        let mut joiner = SlotReader::join(&region, &slots, joiner_slot, JoinAt::Latest, lead);
        let at = joiner.reader.join_position();
        joiner.read_to(576, 4);
        writer.join().unwrap();
        let want: Vec<Sent> = sent.iter().filter(|m| m.start >= at).cloned().collect();
        assert_eq!(joiner.got, want, "joined at {at}");
    });
}

/// How a model's writer waits for room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriterSleeps {
    /// `Writer::wait_for_room`: on the writer's bell.
    OnTheBell,
    /// As `AsyncSender` in a runtime's reactor: interest in the wake FIFO first (its token),
    /// then `doorbell::prepare_reactor_sleep` on the writer's bell, a sleep until a write past
    /// the token, `finish_reactor_sleep`.
    InTheReactor,
}

/// Nobody spins: terms of 128 bytes, so a window of 64: one 64-byte frame. Three messages: the
/// writer must sleep for room before the second and the third (as `sleeps` says), the reader
/// (on the readers' bell) for each message. A lost wake-up either way is a deadlock.
fn writer_and_reader_asleep(sleeps: WriterSleeps) {
    let term = 128;
    let (log, region) = new_plain_log(term, i32::MAX - 1);
    let window = log.geometry().window as i64;
    assert_eq!(window, MAX_FRAME);
    let slots = slot_region(1);
    new_slots(&slots, 1);
    // The reader rings the writer through its slot's bell, which knows the stream's wake FIFO
    // (asked only when a reactor sleeper is counted).
    let fanout = Arc::new(Fanout::default());
    let slot = claimed(&slots, 0, 7).with_bell(bell(&slots).with_fanout(Arc::clone(&fanout)));
    let mut reader = SlotReader::join(&region, &slots, slot, JoinAt::Latest, window + MAX_FRAME);
    let sent = layout(&[16; 3], term as i64);
    let mut writer = writer(log, &slots, 1).with_doorbell();
    let own_bell = bell(&slots);
    let payloads: Vec<Vec<u8>> = sent.iter().map(|m| m.payload.clone()).collect();
    let writer = thread::spawn(move || {
        for m in &payloads {
            loop {
                match writer.offer(m) {
                    Ok(_) => break,
                    Err(crate::error::OfferError::BackPressured) => match sleeps {
                        WriterSleeps::OnTheBell => {
                            writer.wait_for_room(std::time::Duration::MAX);
                        }
                        WriterSleeps::InTheReactor => {
                            let token = fanout.token();
                            let room = || writer.has_room();
                            if let Some((armed, _)) = doorbell::prepare_reactor_sleep(
                                &own_bell,
                                Doorbell::arm_writer,
                                room,
                                std::time::Duration::MAX,
                            ) {
                                fanout.wait_past(token);
                                doorbell::finish_reactor_sleep(&own_bell, armed);
                            }
                        }
                    },
                    Err(e) => panic!("offer: {e}"),
                }
            }
        }
    });
    reader.read_to_sleeping(sent.last().unwrap().end, 4);
    writer.join().unwrap();
    assert_eq!(reader.got, sent);
}

#[test]
fn h_doorbell_sleeping_reader_vs_sleeping_writer() {
    check("h_doorbell_sleeping_reader_vs_sleeping_writer", || {
        writer_and_reader_asleep(WriterSleeps::OnTheBell)
    });
}

/// As `h`, but the writer awaits room in an async runtime's reactor, as `AsyncSender` does in a
/// tokio runtime, so the reader that moves must write the FIFO (its ring finds no thread asleep
/// on the writer's bell). The mutants whose reactor sleepers do not count themselves, or whose
/// ringer reads the count without its fence after the bump, deadlock: no FIFO write.
#[test]
fn h2_doorbell_writer_asleep_in_a_reactor_is_woken_for_room() {
    check("h2_doorbell_writer_asleep_in_a_reactor_is_woken_for_room", || {
        writer_and_reader_asleep(WriterSleeps::InTheReactor)
    });
}

/// Two readers, each on its own thread, sleep whenever a poll finds nothing while the writer
/// commits two messages of one frame each (terms of 1 KiB: a window of 512 bytes, never held
/// back); the second sleeps in steps if `in_steps`.
fn two_sleepers_one_wake(in_steps: bool) {
    let term = 1024;
    let (log, region) = new_plain_log(term, 0);
    let window = log.geometry().window as i64;
    let slots = slot_region(2);
    new_slots(&slots, 2);
    let sent = layout(&[16; 2], term as i64);
    let end = sent.last().unwrap().end;
    let join = |index: usize, pid: i64| {
        let slot = claimed(&slots, index, pid).with_bell(bell(&slots));
        SlotReader::join(&region, &slots, slot, JoinAt::Latest, window + MAX_FRAME)
    };
    let (mut first, mut second) = (join(0, 7), join(1, 8));
    let mut writer = writer(log, &slots, 2).with_doorbell();
    let payloads: Vec<Vec<u8>> = sent.iter().map(|m| m.payload.clone()).collect();
    let writer = thread::spawn(move || {
        for m in &payloads {
            offer(&mut writer, m);
        }
    });
    let other = thread::spawn(move || {
        if in_steps {
            second.read_to_sleeping_in_steps(end, 4);
        } else {
            second.read_to_sleeping(end, 4);
        }
        second.got
    });
    first.read_to_sleeping(end, 4);
    writer.join().unwrap();
    assert_eq!(other.join().unwrap(), sent);
    assert_eq!(first.got, sent);
}

#[test]
fn i_doorbell_one_wake_reaches_every_sleeper() {
    check("i_doorbell_one_wake_reaches_every_sleeper", || two_sleepers_one_wake(false));
}

/// As `i`, but the second reader sleeps in steps (`Subscription::wait_any`, the async receiver):
/// before every way to sleep went through `doorbell::sleep`, that sleeper was not counted among
/// the sleepers, and the writer's single wake-up could reach it and stop there, or reach the
/// other, which saw nobody to pass it on to (a deadlock here).
#[test]
fn i2_doorbell_one_wake_reaches_every_kind_of_sleeper() {
    check("i2_doorbell_one_wake_reaches_every_kind_of_sleeper", || two_sleepers_one_wake(true));
}

/// How a model's reader sleeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sleeps {
    OnTheBell,
    InTheReactor,
}

/// Readers, each on its own thread and sleeping as `kinds` says, while the writer commits
/// `messages` messages of one frame each (terms of 1 KiB, never held back). Every reader must
/// get every message: a lost wake-up is a deadlock (modelled waits ignore their timeouts).
fn sleepers_one_wake(kinds: &[Sleeps], messages: usize) {
    let term = 1024;
    let (log, region) = new_plain_log(term, 0);
    let window = log.geometry().window as i64;
    let slots = slot_region(kinds.len());
    new_slots(&slots, kinds.len());
    let fanout = Arc::new(Fanout::default());
    let sent = layout(&vec![16; messages], term as i64);
    let end = sent.last().unwrap().end;
    let mut writer =
        writer_with(log, &slots, ModelLocks(ModelLocks::new(kinds.len()).0, Some(Arc::clone(&fanout))))
            .with_doorbell();
    let readers: Vec<_> = kinds
        .iter()
        .enumerate()
        .map(|(i, &kind)| {
            let slot =
                claimed(&slots, i, 7 + i as i64).with_bell(bell(&slots).with_fanout(Arc::clone(&fanout)));
            let mut reader = SlotReader::join(&region, &slots, slot, JoinAt::Latest, window + MAX_FRAME);
            let fanout = Arc::clone(&fanout);
            thread::spawn(move || {
                match kind {
                    Sleeps::OnTheBell => reader.read_to_sleeping(end, 4),
                    Sleeps::InTheReactor => reader.read_to_sleeping_in_reactor(end, 4, &fanout),
                }
                reader.got
            })
        })
        .collect();
    let payloads: Vec<Vec<u8>> = sent.iter().map(|m| m.payload.clone()).collect();
    for m in &payloads {
        offer(&mut writer, m);
    }
    for r in readers {
        assert_eq!(r.join().unwrap(), sent);
    }
}

/// A reader asleep on the bell and one asleep in an async runtime's reactor (awaiting the wake
/// FIFO): the writer's single wake-up reaches one, who must pass it on to the other, or the
/// writer writes the FIFO itself. The mutants whose reactor sleepers do not count themselves
/// (nobody writes the FIFO) or do not check the bell after counting themselves in (a ring that
/// read the count before it wrote no FIFO for them) deadlock.
#[test]
fn i3_doorbell_one_wake_reaches_a_reactor_sleeper() {
    check("i3_doorbell_one_wake_reaches_a_reactor_sleeper", || {
        sleepers_one_wake(&[Sleeps::OnTheBell, Sleeps::InTheReactor], 2)
    });
}

/// One reader asleep on the bell and two in reactors, one message: a reactor sleeper that finds
/// the ring as it goes to sleep passes it on to the thread, and must not keep that thread from
/// writing the FIFO for the other reactor sleeper (the mutant `one_passed_word` does).
#[test]
fn i4_doorbell_rings_pass_on_to_threads_and_reactors_apart() {
    check("i4_doorbell_rings_pass_on_to_threads_and_reactors_apart", || {
        sleepers_one_wake(&[Sleeps::OnTheBell, Sleeps::InTheReactor, Sleeps::InTheReactor], 1)
    });
}

#[test]
fn u_untethered_reader_lapped_during_copy() {
    let tally = Tally::default();
    let seen = tally.clone();
    check("u_untethered_reader_lapped_during_copy", move || {
        // Terms of 128 bytes, six messages in frames of 64: the writer, which waits for nobody,
        // cleans partition 0 (term 0's) while in term 2, whenever the reader copies from it.
        let term = 128;
        let (log, region) = new_racy_log(term, 3);
        let slots = slot_region(1);
        new_slots(&slots, 1);
        let mut slot = claimed(&slots, 0, 7);
        slot.set_untethered(true);
        let mut reader = SlotReader::join(&region, &slots, slot, JoinAt::Latest, i64::MAX);
        assert!(reader.reader.is_untethered());
        let sent = layout(&[16; 6], term as i64);
        let end = sent.last().unwrap().end;
        assert_eq!(end, 384);
        let mut writer = writer(log, &slots, 1);
        let payloads: Vec<Vec<u8>> = sent.iter().map(|m| m.payload.clone()).collect();
        let writer = thread::spawn(move || {
            for m in &payloads {
                offer(&mut writer, m);
            }
        });
        let mut losses = Vec::new();
        while reader.reader.position() < end {
            let before = reader.reader.position();
            reader.poll_untethered(1);
            while let Some(loss) = reader.reader.take_loss() {
                losses.push(loss);
            }
            if reader.reader.position() == before {
                thread::yield_now();
            }
        }
        writer.join().unwrap();
        // Every message delivered is the one laid there; every other one lies in a loss, and
        // each loss starts where reading stood.
        for got in &reader.got {
            assert!(sent.contains(got), "delivered {got:?}, which the writer never laid there");
        }
        for m in &sent {
            let lost = losses.iter().any(|l| l.from <= m.start && m.start < l.to);
            let delivered = reader.got.contains(m);
            assert!(
                lost != delivered,
                "message at {} delivered: {delivered}, reported lost: {lost}",
                m.start
            );
        }
        seen.add(if losses.is_empty() { "kept up" } else { "lapped" });
    });
    let outcomes = tally.report("u_untethered_reader_lapped_during_copy");
    assert!(outcomes.contains_key("lapped") && outcomes.contains_key("kept up"), "{outcomes:?}");
}
