//! Closing the hole a dead writer of a concurrent log left behind (Aeron's unblocker, with the
//! kernel's word on liveness instead of a timeout).
//!
//! A writer that dies between its tail CAS and its commit leaves a reservation whose first length
//! word is zero or negative: readers stop there, and flow control stops every writer a window
//! later. Its pending word in the writers table still names the position, and its slot's kernel
//! lock is gone. The unblocker pads the reservation so readers skip it, zeroes the same range of
//! the next partition (the dead writer may not have), and clears the pending word.
//!
//! It never pads over a live writer: a frame is padded only when no live writer's pending word
//! lies at or before it while that writer's frame is still uncommitted. A live writer's pending
//! word is set before its CAS and cleared after its commit, so any uncommitted frame of a live
//! writer is covered, however long the writer is stopped (SIGSTOP): its message arrives whole
//! when it resumes.
//!
//! How far to pad: a negative length says it. A zero length means the dead writer died between
//! its CAS and its first store, so it wrote nothing and its whole reservation is still zero (the
//! term was cleaned before anyone could reserve in it); the pad runs to the next non-zero length
//! word, bounded by the tail and by the first live writer's pending position after it.
//!
//! One unblocker at a time: the caller holds the log's unblock lock (`stream::liveness`).

use super::appender::{data_template, rest_from};
use super::concurrent::clean_next;
use super::Log;
use crate::layout::frame::{FRAME_ALIGNMENT, HEADER_LEN, REST_OFFSET, TYPE_PAD, UNFRAGMENTED};
use crate::layout::log_meta::{self as meta, clean_chunk, PARTITION_COUNT};
use crate::region::{Region, RegionMut, Window};
use crate::sync::protocol;
use crate::sync::{fence, Ordering};

/// What an unblocker did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Unblocked {
    /// Holes padded.
    pub padded: usize,
    /// Bytes of log padded.
    pub bytes: usize,
    /// Pending words of dead writers cleared.
    pub cleared: usize,
}

/// The length word at `position`, if the position is one a pending word may hold (at most a
/// term behind `producer`, not past it).
pub(crate) fn length_at<R: Region>(log: &Log<R>, position: i64, producer: i64) -> Option<i32> {
    if position > producer || position < producer - log.term_length() as i64 || position < 0 {
        return None;
    }
    if position % FRAME_ALIGNMENT as i64 != 0 {
        return None;
    }
    let terms = log.terms();
    let term = Window::new(log.region(), log.partition(terms.partition(position)));
    Some(term.load_i32(terms.term_offset(position), Ordering::Acquire))
}

/// `true` if a writer whose pending word is `pending` may still own an uncommitted frame there:
/// the word is a position in the log and the frame there is not committed. A committed frame
/// there means the writer's CAS at that position failed or its commit is done, and its next
/// reservation will be at the tail.
pub(crate) fn pending_holds<R: Region>(log: &Log<R>, pending: i64, producer: i64) -> bool {
    pending != meta::NO_PENDING && length_at(log, pending, producer).is_some_and(|len| len <= 0)
}

/// Pads the holes of dead writers: `alive(slot)` tells whether writer slot `slot`'s owner lives.
/// The caller holds the log's unblock lock.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn resolve_dead<R: RegionMut>(log: &Log<R>, alive: impl Fn(usize) -> bool) -> Unblocked {
    let mut done = Unblocked::default();
    // The tail first: every reservation below it has its pending word visible to the loads
    // below (the word is stored before the CAS that the tail load read or read past).
    let Ok(producer) = log.producer_position() else { return done };
    let mut live = Vec::new();
    let mut dead = Vec::new();
    for slot in 0..log.writers_high_water() {
        let pending = log.writer_pending(slot);
        if pending == meta::NO_PENDING {
            continue;
        }
        if alive(slot) {
            live.push(pending);
        } else {
            dead.push((slot, pending));
        }
    }
    dead.sort_by_key(|&(_, p)| p);
    let live: Vec<i64> = live.into_iter().filter(|&p| pending_holds(log, p, producer)).collect();
    for &(slot, at) in &dead {
        // At or past the tail we read, nothing was reserved as far as we know: the dead writer
        // may still have reserved there after our read (and died since), so look next time.
        if log.writer_pending(slot) != at || at >= producer {
            continue;
        }
        let Some(len) = length_at(log, at, producer) else {
            done.cleared += clear(log, slot, at) as usize; // older than the log holds
            continue;
        };
        if protocol::unblock_spares_live() && live.iter().any(|&p| p <= at) {
            continue; // a live writer may own it: it commits when it resumes
        }
        let extent = match len {
            1.. => None,
            ..0 => Some(-(len as i64) as usize),
            0 => zero_extent(log, at, producer, &live),
        };
        match extent {
            None => done.cleared += clear(log, slot, at) as usize,
            Some(extent) => {
                if !pad(log, at, extent) {
                    continue; // a length no writer stores: leave it for the readers to report
                }
                done.padded += 1;
                done.bytes += extent;
                for &(other, p) in &dead {
                    if p >= at && p < at + extent as i64 {
                        done.cleared += clear(log, other, p) as usize;
                    }
                }
            }
        }
    }
    done
}

/// How far a hole whose first length word is zero runs: to the next non-zero length word, the
/// tail, or the first live writer's pending position after it (`None`: nothing reserved there).
fn zero_extent<R: Region>(log: &Log<R>, at: i64, producer: i64, live: &[i64]) -> Option<usize> {
    let terms = log.terms();
    let term_end = terms.term_begin(at) + log.term_length() as i64;
    let bound = live.iter().copied().filter(|&p| p > at).fold(term_end.min(producer), i64::min);
    if at >= bound {
        return None;
    }
    let term = Window::new(log.region(), log.partition(terms.partition(at)));
    let start = terms.term_offset(at);
    let mut end = start + FRAME_ALIGNMENT;
    while at + ((end - start) as i64) < bound && term.load_i32(end, Ordering::Acquire) == 0 {
        end += FRAME_ALIGNMENT;
    }
    Some(end - start)
}

/// Writes one padding frame of `extent` bytes at `at` (which no live writer owns), after zeroing
/// the same range of the next partition. `false` if `extent` is not a frame length that fits.
fn pad<R: RegionMut>(log: &Log<R>, at: i64, extent: usize) -> bool {
    let terms = log.terms();
    let offset = terms.term_offset(at);
    if extent < HEADER_LEN || extent % FRAME_ALIGNMENT != 0 || offset + extent > log.term_length() {
        return false;
    }
    let index = terms.partition(at);
    let term = Window::new(log.region(), log.partition(index));
    let rest = rest_from(&data_template(log, terms.term_id(at)), offset, UNFRAGMENTED, TYPE_PAD);
    // Every write below may reuse a partition an untethered reader copies from: the header in
    // the term of the hole, the zeroes in the next partition (the term two before the hole's).
    // The dead writer's tail CAS reached us through the acquire load of the tail that found
    // the hole (`resolve_dead`); this fence passes it on to a reader that copies one of the
    // bytes written below and then issues its acquire fence (`log::reader::lapped`,
    // `docs/untethered.md`). A compiler barrier on x86-64.
    if protocol::unblock_fence() {
        fence(Ordering::Release);
    }
    // SAFETY: the frame's writer is dead (its kernel lock is gone) and no live writer owns it
    // (checked by the caller), so nobody else writes it; we are the only unblocker (the caller
    // holds the unblock lock); readers read nothing of it until the positive length below.
    unsafe { term.copy_in_cell(offset, REST_OFFSET, &rest) };
    let chunk = clean_chunk(log.term_length());
    clean_next(log.region(), &log.partition((index + 1) % PARTITION_COUNT), offset, offset + extent, chunk);
    term.store_i32(offset, extent as i32, protocol::commit());
    true
}

/// Clears a dead writer's pending word if it still holds `at`.
fn clear<R: RegionMut>(log: &Log<R>, slot: usize, at: i64) -> bool {
    let field = log.meta_field(meta::writer_field(slot, meta::W_PENDING));
    log.region().compare_exchange_i64(field, at, meta::NO_PENDING).is_ok()
}

#[cfg(all(test, not(shmlog_loom)))]
mod tests {
    use super::*;
    use crate::layout::log_meta::Geometry;
    use crate::log::concurrent::ConcurrentAppender;
    use crate::log::reader::{read, Action};
    use crate::log::LogInit;
    use crate::region::HeapRegion;
    use std::sync::Arc;

    type Shared = Arc<HeapRegion>;

    /// A concurrent log of 1 KiB terms (MTU 128) and a writer on each of two slots.
    fn two_writers() -> (Log<Shared>, ConcurrentAppender<Shared>, ConcurrentAppender<Shared>) {
        let geometry = Geometry { term_length: 1024, page_size: 4096, mtu: 128, window: 512 };
        let region = Arc::new(HeapRegion::new(geometry.file_length()));
        let init = LogInit {
            geometry,
            initial_term_id: 5,
            session_id: 1,
            stream_id: 2,
            pid: 3,
            created_ns: 0,
            name: "unblock",
            concurrent: true,
            session_seq: 1,
        };
        let log = Log::initialize(Arc::clone(&region), &init);
        let writer = |slot| {
            let view = Log::open_any_term(Arc::clone(&region)).unwrap();
            assert!(view.claim_writer_slot(slot, 10 + slot as i64, 0));
            ConcurrentAppender::new(view, slot)
        };
        let (a, b) = (writer(0), writer(1));
        (log, a, b)
    }

    /// Every payload a reader gets from position 0, and where it stops.
    fn read_all(log: &Log<Shared>) -> (Vec<Vec<u8>>, i64) {
        let mut got = Vec::new();
        // SAFETY: single-threaded: nothing writes the log while it is read.
        let scan = unsafe {
            read(
                log,
                0,
                100,
                |p, _| {
                    got.push(p.to_vec());
                    Action::Continue
                },
                |_| {},
            )
        };
        assert_eq!(scan.fault, None);
        (got, scan.position)
    }

    #[test]
    fn a_writer_dead_before_its_first_store_is_padded_up_to_the_next_frame() {
        let (log, mut dead, mut live) = two_writers();
        let r = dead.reserve(90, i64::MAX).unwrap();
        // Died between its CAS and its first store: its reservation is all zero.
        log.region().store_i32(0, 0, Ordering::Relaxed);
        let _died_with = r;
        let after = live.reserve(5, i64::MAX).unwrap();
        live.write(after, &[b"alive"]);
        assert_eq!(read_all(&log), (vec![], 0), "readers wait at the hole");
        let done = resolve_dead(&log, |slot| slot == 1);
        assert_eq!((done.padded, done.bytes, done.cleared), (1, 128, 1));
        assert_eq!(read_all(&log), (vec![b"alive".to_vec()], 128 + 64));
        assert_eq!(log.writer_pending(0), meta::NO_PENDING);
    }

    #[test]
    fn a_dead_writers_fragments_are_padded_over_never_delivered() {
        let (log, mut dead, mut live) = two_writers();
        let message = vec![9u8; 300];
        let r = dead.reserve(300, i64::MAX).unwrap();
        let extent = r.len();
        // Died after its later fragments, before the first: simulated by writing a copy of the
        // reservation with the first frame's length put back to minus the reservation.
        dead.write(r, &[&message]);
        log.region().store_i32(0, -(extent as i32), Ordering::Relaxed);
        log.region().store_i64(log.meta_field(meta::writer_field(0, meta::W_PENDING)), 0, Ordering::Relaxed);
        let after = live.reserve(5, i64::MAX).unwrap();
        live.write(after, &[b"alive"]);
        assert_eq!(read_all(&log).0.len(), 0, "nothing of the dead message, and nothing after it yet");
        let done = resolve_dead(&log, |slot| slot == 1);
        assert_eq!((done.padded, done.bytes), (1, extent));
        assert_eq!(read_all(&log).0, vec![b"alive".to_vec()]);
    }

    #[test]
    fn a_live_writers_frame_is_never_padded() {
        let (log, mut stopped, mut other) = two_writers();
        let r = stopped.reserve(8, i64::MAX).unwrap();
        let after = other.reserve(5, i64::MAX).unwrap();
        other.write(after, &[b"after"]);
        for _ in 0..3 {
            assert_eq!(resolve_dead(&log, |_| true), Unblocked::default());
        }
        stopped.write(r, &[b"whole!!!"]);
        assert_eq!(read_all(&log).0, vec![b"whole!!!".to_vec(), b"after".to_vec()]);
    }

    /// The review's T9: a claim's lent payload and its committed length come from the
    /// reservation, not from the caller. With the old `claim_slice(&r, len)` a length of 100 for
    /// an 8-byte claim lent 100 bytes of a 64-byte reservation, over the next writer's.
    #[test]
    fn a_claim_lends_and_commits_exactly_its_reservation() {
        let (log, mut a, mut b) = two_writers();
        let r = a.reserve(8, i64::MAX).unwrap();
        assert_eq!(r.len(), 64);
        a.start_claim(&r);
        let next = b.reserve(5, i64::MAX).unwrap();
        let lent = a.claim_slice(&r);
        assert_eq!(lent.len(), 8, "the claim's payload, not a byte more");
        lent.copy_from_slice(b"claimed!");
        b.write(next, &[b"after"]);
        a.commit(r);
        assert_eq!(read_all(&log), (vec![b"claimed!".to_vec(), b"after".to_vec()], 128));
    }
}
