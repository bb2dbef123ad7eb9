//! Loom models of the concurrent log: the shipped [`ConcurrentAppender`] on several writer
//! threads, [`unblock::resolve_dead`] as the unblocker, and the shipped reader, over a log in a
//! [`LoomRegion`] with terms of 128 bytes (MTU 64).
//!
//! The reader checks what every subscriber must see: every committed message once, whole and
//! byte-exact, each writer's in its order, with the header of the place it sits in; never a
//! fault, never a message of a writer that died before committing it. Loom reports data races on
//! payload and header bytes (a pad written over a live writer's frame would be one).
//!
//! Liveness is a flag per writer slot, stored with SeqCst when the modelled writer "dies" (its
//! thread ends without committing), as the kernel drops a dead process's lock.
//!
//! Models:
//! - `k1_two_writers_race_at_a_term_end_vs_poll`: writer A offers a 16-byte and an empty message
//!   (64- and 32-byte frames), writer B a 32-byte one (64 bytes): in some orders B does not fit
//!   after A's two, pads the rest of term 0 and rotates; in others A's second finds the term
//!   full; and in some both rotate at once (the CAS races on the next partition's tail and on the
//!   term count). The reader polls all three.
//! - `k2_dead_writer_hole_vs_unblocker_and_live_writer`: writer D reserves a frame and dies
//!   before committing it; writer L offers a message, possibly after D's hole; the unblocker
//!   pads D's hole. The reader must get L's message, never D's.
//! - `k3_stopped_writer_is_never_unblocked_over`: writer D dies right after announcing the
//!   position it would reserve at (before its CAS), at the same position a live writer S then
//!   reserves; S is slow (yields between every step). The unblocker sees a dead writer's pending
//!   word on a frame that is S's, and must wait for S: the reader gets S's message whole.
//! - `k7_writers_count_exactly`: two writers of a concurrent log add to the same statistics
//!   counter at once (`Log::count`, as their recomputes and refusals do); both increments count.
//!   The mutant `lossy_count` (a load then a store) loses one.
//! - `u2_untethered_reader_beside_the_unblocker`: terms 0 and 1 are full; writer D rotates into
//!   term 2, reserves its first frame and dies before zeroing its share of the next partition
//!   (term 0's); the unblocker pads D's hole and zeroes that share; meanwhile an untethered
//!   reader copies term 0's first frame and checks the copy (`copy_frames`, `lapped`). A copy
//!   the check calls intact must be the message laid there, and both outcomes must occur. The
//!   mutant `no_unblock_fence` (no release fence in the unblocker's pad) fails it: the reader
//!   copies a zeroed payload yet its check reads a tail from before D's reservation.

use super::concurrent::{ConcurrentAppender, Refused, Reservation};
use super::loom_models::{check_place, check_with, message, Shared, Tally, SESSION_ID};
use super::reader::{read, Action};
use super::unblock;
use super::{Log, LogInit};
use crate::layout::frame::{FRAME_ALIGNMENT, HEADER_LEN};
use crate::layout::log_meta::{self as meta, Geometry, NO_PENDING};
use crate::region::{LoomRegion, RegionMut};
use loom::sync::atomic::{fence, AtomicBool, Ordering};
use loom::thread;
use std::sync::Arc;

const TERM: usize = 128;

/// Runs `model` under loom with one preemption (two make k1 take tens of minutes; one already
/// puts a writer's stop anywhere in another's run) and up to 100 000 branches (three threads
/// that wait by yielding).
fn check(name: &str, model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(1);
    builder.max_branches = 100_000;
    check_with(name, builder, model);
}

/// A fresh concurrent log of 128-byte terms and its region.
fn concurrent_log() -> (Log<Shared>, Shared) {
    concurrent_log_with(false)
}

/// [`concurrent_log`], its region modelling racy reads (`racy`) for untethered readers.
fn concurrent_log_with(racy: bool) -> (Log<Shared>, Shared) {
    let geometry = Geometry { term_length: TERM, page_size: 4096, mtu: 64, window: TERM / 2 };
    let region = LoomRegion::for_log(&geometry);
    let region = Arc::new(if racy { region.with_racy_reads() } else { region });
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

/// Writer slot `slot` of the log in `region`, claimed.
fn writer(region: &Shared, slot: usize) -> ConcurrentAppender<Shared> {
    let log = Log::open_any_term(Arc::clone(region)).expect("an initialised log");
    assert!(log.claim_writer_slot(slot, slot as i64 + 100, 0));
    ConcurrentAppender::new(log, slot)
}

/// Reserves as `ConcurrentWriter` does: below a limit a window past the oldest frame a writer is
/// still writing (`FlowControl::recompute_concurrent`: the tail, a SeqCst fence, then the
/// writers' pending words). The reader's position would only hold the writers further back: the
/// models write two terms at most, so no partition is reused under the reader, and leaving it
/// out keeps the writers from spinning on it.
fn reserve(w: &mut ConcurrentAppender<Shared>, len: usize, window: usize) -> Reservation {
    let mut spins = 0;
    loop {
        spins += 1;
        // A writer that waits this long is stuck: a pending word nobody clears.
        if spins > 2000 {
            let log = w.log();
            let pendings: Vec<i64> = (0..2).map(|i| log.writer_pending(i)).collect();
            panic!("writer stuck: producer {:?} pendings {pendings:?}", log.producer_position());
        }
        let log = w.log();
        let producer = log.producer_position().expect("consistent tails");
        fence(Ordering::SeqCst);
        let hold = log.min_writer_pending(producer).unwrap_or(i64::MAX).min(producer);
        match w.reserve(len, hold + window as i64) {
            Ok(r) => return r,
            Err(Refused::Limit { .. }) => thread::yield_now(),
            Err(other) => panic!("reservation refused: {other:?}"),
        }
    }
}

/// Offers `msg` as `ConcurrentWriter` does, with the window of the geometry (`T / 2`).
fn offer(w: &mut ConcurrentAppender<Shared>, msg: &[u8]) -> i64 {
    offer_within(w, msg, TERM / 2)
}

/// Offers `msg` with flow control over `window`.
fn offer_within(w: &mut ConcurrentAppender<Shared>, msg: &[u8], window: usize) -> i64 {
    let r = reserve(w, msg.len(), window);
    let position = r.position;
    w.write(r, &[msg]);
    position
}

/// Reads until `until` returns true for the messages delivered so far, checking every header;
/// returns `(writer tag, payload)` in the order read. A message's first byte names its writer.
fn read_until(log: &Log<Shared>, mut until: impl FnMut(&[Vec<u8>]) -> bool) -> Vec<Vec<u8>> {
    let terms = log.terms();
    let mut position = 0;
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut spins = 0;
    while !until(&got) {
        spins += 1;
        // A reader that waits this long is stuck: a lost message or a hole nobody pads.
        if spins > 2000 {
            let pendings: Vec<i64> = (0..2).map(|i| log.writer_pending(i)).collect();
            let words: Vec<i32> = (0..3 * TERM)
                .step_by(32)
                .map(|o| crate::region::Region::load_i32(log.region(), o, Ordering::Acquire))
                .collect();
            panic!(
                "reader stuck at {position}: producer {:?} count {} pendings {pendings:?} words {words:?} got {}",
                log.producer_position(),
                log.active_term_count(),
                got.len()
            );
        }
        // SAFETY: the models write two terms at most: no partition is reused or cleaned under
        // the reader.
        let scan = unsafe {
            read(
                log,
                position,
                4,
                |payload, header| {
                    check_place(terms, payload, header);
                    got.push(payload.to_vec());
                    Action::Continue
                },
                |_| unreachable!(),
            )
        };
        assert_eq!(scan.fault, None, "reader fault at {position}");
        assert_eq!(scan.position % FRAME_ALIGNMENT as i64, 0);
        if scan.position == position {
            thread::yield_now();
        }
        position = scan.position;
    }
    got
}

#[test]
fn k1_two_writers_race_at_a_term_end_vs_poll() {
    let tally = Tally::default();
    let seen = tally.clone();
    check("k1_two_writers_race_at_a_term_end_vs_poll", move || {
        let (log, region) = concurrent_log();
        let (mut a, mut b) = (writer(&region, 0), writer(&region, 1));
        let (a1, a2, b1) = (message(1, 16), message(2, 0), message(3, 32));
        let (ma1, ma2, mb1) = (a1.clone(), a2.clone(), b1.clone());
        let ta = thread::spawn(move || [offer(&mut a, &ma1), offer(&mut a, &ma2)]);
        let tb = thread::spawn(move || offer(&mut b, &mb1));
        let got = read_until(&log, |got| got.len() == 3);
        let [pa1, pa2] = ta.join().unwrap();
        let pb1 = tb.join().unwrap();
        let a_order: Vec<&Vec<u8>> = got.iter().filter(|m| m.len() != 32).collect();
        assert_eq!(a_order, [&a1, &a2], "writer A's messages in its order");
        assert!(got.contains(&b1));
        let mut by_position = [(pa1, &a1), (pa2, &a2), (pb1, &b1)];
        by_position.sort();
        let expected: Vec<&Vec<u8>> = by_position.iter().map(|(_, m)| *m).collect();
        assert_eq!(got.iter().collect::<Vec<_>>(), expected, "read in the order reserved");
        assert_eq!(log.producer_position().expect("consistent tails"), pa2.max(pb1));
        seen.add(format!("A at {pa1}, {pa2}; B at {pb1}"));
    });
    tally.report("k1");
}

#[test]
fn k2_dead_writer_hole_vs_unblocker_and_live_writer() {
    let tally = Tally::default();
    let seen = tally.clone();
    check("k2_dead_writer_hole_vs_unblocker_and_live_writer", move || {
        let (log, region) = concurrent_log();
        let alive = Arc::new([AtomicBool::new(true), AtomicBool::new(true)]);
        let (mut d, mut l) = (writer(&region, 0), writer(&region, 1));
        let live_msg = message(7, 16);
        let sent = live_msg.clone();
        let dies = Arc::clone(&alive);
        let td = thread::spawn(move || {
            let r = reserve(&mut d, 16, TERM / 2);
            d.start_claim(&r);
            // Dies with the claim open: the kernel drops its lock.
            let _died_with = r;
            dies[0].store(false, Ordering::SeqCst);
        });
        // Both frames fit in term 0 and nothing is cleaned under anyone: a window of a term keeps
        // the live writer from waiting for the unblocker (fewer spinning threads to explore).
        let tl = thread::spawn(move || offer_within(&mut l, &sent, TERM));
        let unblocker_log = Log::open_any_term(Arc::clone(&region)).unwrap();
        let flags = Arc::clone(&alive);
        let tu = thread::spawn(move || {
            // Once the kernel says D is dead (the join), as a held-back writer or reader would,
            // while the live writer writes and the reader reads; again if D's word was at the
            // tail it read (it looks next time).
            td.join().unwrap();
            while unblocker_log.writer_pending(0) != NO_PENDING {
                unblock::resolve_dead(&unblocker_log, |slot| flags[slot].load(Ordering::SeqCst));
                thread::yield_now();
            }
        });
        let got = read_until(&log, |got| !got.is_empty());
        assert_eq!(got, [live_msg], "the live writer's message, never the dead one's");
        let live_position = tl.join().unwrap();
        tu.join().unwrap();
        seen.add(if live_position == 64 { "live writer first" } else { "dead writer first" });
    });
    tally.report("k2");
}

#[test]
fn k3_stopped_writer_is_never_unblocked_over() {
    let tally = Tally::default();
    let seen = tally.clone();
    check("k3_stopped_writer_is_never_unblocked_over", move || {
        let (log, region) = concurrent_log();
        let alive = Arc::new([AtomicBool::new(true), AtomicBool::new(true)]);
        let mut stopped = writer(&region, 1);
        // The dead writer announced position 0 (its pending word) and died before its CAS.
        let field = log.meta_field(meta::writer_field(0, meta::W_PENDING));
        assert!(log.claim_writer_slot(0, 100, 0));
        region.store_i64(field, 0, Ordering::Release);
        alive[0].store(false, Ordering::SeqCst);
        let msg = message(9, 16);
        let sent = msg.clone();
        let ts = thread::spawn(move || {
            let r = reserve(&mut stopped, 16, TERM / 2);
            thread::yield_now(); // stopped (SIGSTOP) for as long as loom likes
            stopped.write(r, &[&sent]);
        });
        let unblocker_log = Log::open_any_term(Arc::clone(&region)).unwrap();
        let flags = Arc::clone(&alive);
        let tu = thread::spawn(move || {
            let done = unblock::resolve_dead(&unblocker_log, |slot| flags[slot].load(Ordering::SeqCst));
            done.padded
        });
        let got = read_until(&log, |got| !got.is_empty());
        assert_eq!(got, [msg], "the stopped writer's message arrives whole");
        ts.join().unwrap();
        let padded = tu.join().unwrap();
        assert_eq!(padded, 0, "nothing was padded over the live writer");
        seen.add(format!(
            "dead pending {}",
            if log.writer_pending(0) == NO_PENDING { "cleared" } else { "kept" }
        ));
    });
    tally.report("k3");
}

#[test]
fn u2_untethered_reader_beside_the_unblocker() {
    use super::reader::{copy_frames, lapped, Cursor};
    let tally = Tally::default();
    let seen = tally.clone();
    // The preemption bound of `LOOM_MAX_PREEMPTIONS` (2 in CI), not this file's 1.
    super::loom_models::check("u2_untethered_reader_beside_the_unblocker", move || {
        let (log, region) = concurrent_log_with(true);
        let alive = Arc::new([AtomicBool::new(true), AtomicBool::new(true)]);
        // Terms 0 and 1 full of 64-byte frames, before anyone else runs.
        let laid: Vec<Vec<u8>> = (0..4).map(|i| message(i, 16)).collect();
        let mut w = writer(&region, 1);
        for (i, m) in laid.iter().enumerate() {
            assert_eq!(offer(&mut w, m), 64 * (i as i64 + 1));
        }
        let mut d = writer(&region, 0);
        let dies = Arc::clone(&alive);
        let td = thread::spawn(move || {
            // Rotates into term 2 and reserves its first frame: the tail of term 2 moves past
            // offset 0, but D dies before zeroing its share of term 0's partition.
            let r = reserve(&mut d, 16, TERM / 2);
            assert_eq!(r.position, 2 * TERM as i64 + 64);
            let _died_with = r;
            dies[0].store(false, Ordering::SeqCst);
        });
        let unblocker_log = Log::open_any_term(Arc::clone(&region)).unwrap();
        let flags = Arc::clone(&alive);
        let tu = thread::spawn(move || {
            td.join().unwrap();
            while unblocker_log.writer_pending(0) != NO_PENDING {
                unblock::resolve_dead(&unblocker_log, |slot| flags[slot].load(Ordering::SeqCst));
                thread::yield_now();
            }
        });
        // The untethered reader, at term 0's first frame: copy, then check.
        let cursor = Cursor::new(&log, 0);
        let (mut buf, mut frames) = (Vec::new(), Vec::new());
        let fault = copy_frames(&log, &cursor, 1, usize::MAX, &mut buf, &mut frames);
        let outcome = if lapped(&log, &cursor) {
            "lapped"
        } else {
            assert_eq!(fault, None, "a copy the check calls intact has a broken frame");
            assert_eq!(frames.len(), 1, "the committed frame, copied");
            let f = frames[0];
            assert_eq!(&buf[f.at + HEADER_LEN..f.at + f.len], &laid[0][..], "a copy the check calls intact");
            "kept up"
        };
        tu.join().unwrap();
        seen.add(outcome);
    });
    let outcomes = tally.report("u2_untethered_reader_beside_the_unblocker");
    assert!(outcomes.contains_key("lapped") && outcomes.contains_key("kept up"), "{outcomes:?}");
}

#[test]
fn k7_writers_count_exactly() {
    use super::Counter;
    check("k7_writers_count_exactly", || {
        let (log, region) = concurrent_log();
        let other = Log::open_any_term(Arc::clone(&region)).unwrap();
        let t = thread::spawn(move || other.count(Counter::BackPressureEvents, 1));
        log.count(Counter::BackPressureEvents, 2);
        t.join().unwrap();
        assert_eq!(log.counter(Counter::BackPressureEvents), 3, "an increment was lost");
    });
}
