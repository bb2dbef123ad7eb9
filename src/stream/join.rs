//! Joining a session: choosing where a reader starts and proving the writer cannot overwrite it
//! (invariant I5). Pure memory over any region, so the loom models run this very code.
//!
//! The reader publishes its slot (position, then state) before it reads anything, issues a
//! SeqCst fence, and only then re-reads the writer's position. The writer's limit recompute
//! (`FlowControl::recompute`) issues a SeqCst fence and then reads the slots. Of the two fences,
//! one comes first in the single total order of SeqCst fences:
//! - the recompute's comes second: it sees our slot, and the new limit holds the writer back;
//! - ours comes second: we see at least the writer position of that recompute, so our check
//!   below (at most a term behind what we saw) bounds how far past us the writer can run on the
//!   limit it cached: a window plus one message past a position no further than what we saw.
//!   That keeps it out of our partition until it recomputes again, and that recompute sees us
//!   (`Geometry::lapping_margin` checks the arithmetic).

use super::slots::{SlotMut, Slots};
use crate::error::Invalid;
use crate::layout::frame::FRAME_ALIGNMENT;
use crate::log::{reader, Log};
use crate::region::{Region, RegionMut};
use crate::sync::protocol;
use crate::sync::{fence, Ordering};

/// Joins that find no readable position in this many attempts give up (a writer that keeps
/// cleaning ahead of every candidate; in practice a corrupt log).
const ATTEMPTS: usize = 1000;

/// Where a subscription starts reading a session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum JoinAt {
    /// At the slowest live reader of the session, or at the publisher's position if there is
    /// none (Aeron's rule): a new reader sees everything not yet passed by every other reader.
    /// If that reader stands inside a fragmented message, delivery starts with the next message.
    #[default]
    Slowest,
    /// At the publisher's current position: only messages offered from now on.
    Latest,
    /// At the oldest message the log still holds: the session's first message while the
    /// publisher is less than a term ahead of it, otherwise the first message start of the
    /// term before the publisher's. The default for sessions that begin while a subscription
    /// waits for them (`SubscriptionBuilder::later_sessions`).
    Earliest,
    /// At an exact position where a message starts (a position returned by this crate) that the
    /// log still holds (at most one term behind the publisher); applies to the first session
    /// joined. Anything else is refused with `Error::PositionNotAvailable`, which names the
    /// nearest usable position.
    Position(i64),
}

/// Why [`join`] did not join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub enum JoinRefused {
    /// The explicit position is not readable: not within `[oldest, newest]`, or not where a
    /// message starts. `oldest` is the oldest message start the log holds, `newest` the writer's
    /// position and `nearest` the first message start at or after the request (clamped to them).
    NotAvailable { requested: i64, oldest: i64, newest: i64, nearest: i64 },
    /// The log's tail counters are inconsistent.
    Corrupt(Invalid),
    /// No readable position was found in [`ATTEMPTS`] attempts.
    GaveUp,
}

/// Activates `slot` (claimed by the caller) as a reader of `log`'s session at a position chosen
/// by `rule` that the writer can no longer overwrite or clean; returns that position. `slots` is
/// the stream's table (read for the slowest reader).
///
/// A position chosen by `Slowest` may stand inside a fragmented message; the reader then skips to
/// the next message start (`stream::Reader`). On refusal the slot is left claimed but not reading.
pub(crate) fn join<L: Region, R: Region, S: RegionMut>(
    log: &Log<L>,
    slots: &Slots<R>,
    slot: &SlotMut<S>,
    rule: JoinAt,
) -> Result<i64, JoinRefused> {
    let session = log.session_id();
    let term = log.term_length() as i64;
    let mut rule = rule;
    for _ in 0..ATTEMPTS {
        let producer = log.producer_position().map_err(JoinRefused::Corrupt)?;
        let position = match rule {
            // A slowest reader no longer inside the log (dead and not yet evicted, or a forged
            // slot) cannot be joined: start at the writer instead of retrying in vain.
            JoinAt::Slowest => match slots.scan(session, Some(slot.index()), producer).min {
                Some(min) if min >= producer - term && min % FRAME_ALIGNMENT as i64 == 0 => min,
                _ => producer,
            },
            JoinAt::Latest => producer,
            JoinAt::Earliest => reader::oldest_message_start(log, (producer - term).max(0), producer),
            JoinAt::Position(p) => p,
        };
        slot.activate(session, position);
        // Pairs with the fence of `FlowControl::recompute` (see the module docs).
        if protocol::join_fence() {
            fence(Ordering::SeqCst);
        }
        let newest = match log.producer_position() {
            Ok(newest) => newest,
            Err(e) => {
                slot.deactivate();
                return Err(JoinRefused::Corrupt(e));
            }
        };
        let oldest = (newest - term).max(0);
        let in_log = position >= oldest && position <= newest && position % FRAME_ALIGNMENT as i64 == 0;
        let available = in_log
            && match rule {
                JoinAt::Position(_) => position == newest || reader::message_starts_at(log, position),
                // The oldest message may still be being written (a session's first, with the
                // writer held at its start by readers it is owed to): a message starts there once
                // it is committed, in the active term, never cleaned before we pass it.
                JoinAt::Earliest => {
                    position == newest
                        || reader::message_starts_at(log, position)
                        || (reader::frame_pending_at(log, position) && reader::frame_boundary(log, position))
                }
                // The frame being written where the slowest reader caught up (an open claim, or an
                // offer caught mid-copy) is readable once committed and never cleaned (it is in the
                // active term), so as good a join position as a committed one, if it is one: a
                // zero length word is also what the inside of a frame holds (a stray position).
                _ => {
                    position == newest
                        || reader::frame_starts_at(log, position)
                        || (reader::frame_pending_at(log, position) && reader::frame_boundary(log, position))
                }
            };
        if available {
            return Ok(position);
        }
        slot.deactivate();
        if rule == JoinAt::Slowest {
            // The slowest reader's position is not one to join at (cleaned since it was read, or a
            // stray word inside a frame): the writer's is, and retrying the same one would not do.
            rule = JoinAt::Latest;
        }
        if let JoinAt::Position(requested) = rule {
            let oldest = reader::message_start_at_or_after(log, oldest, newest);
            let nearest = reader::message_start_at_or_after(log, requested.clamp(oldest, newest), newest);
            return Err(JoinRefused::NotAvailable { requested, oldest, newest, nearest });
        }
    }
    Err(JoinRefused::GaveUp)
}

#[cfg(all(test, not(shmlog_loom)))]
mod tests {
    use super::*;
    use crate::layout::log_meta::Geometry;
    use crate::layout::slots::{file_length, slot_offset, STATE_ACTIVE, STATE_WAITING};
    use crate::log::appender::{Appender, Tripped};
    use crate::log::LogInit;
    use crate::region::HeapRegion;
    use std::sync::Arc;

    const T: usize = 64 * 1024;

    type Shared = Arc<HeapRegion>;

    /// A writer with an MTU of 1 KiB, a reader's view of the same log, and a slot table of 4.
    fn setup() -> (Appender<Shared>, Log<Shared>, Table) {
        let geometry = Geometry { term_length: T, page_size: 4096, mtu: 1024, window: T / 2 };
        let region = Arc::new(HeapRegion::new(geometry.file_length()));
        let init = LogInit {
            geometry,
            initial_term_id: 7,
            session_id: 5,
            stream_id: 6,
            pid: 1,
            created_ns: 0,
            name: "join",
            concurrent: false,
            session_seq: 1,
        };
        let log = Log::initialize(Arc::clone(&region), &init);
        let reader_log = Log::open(region).unwrap();
        let slot_file = Arc::new(HeapRegion::new(file_length(4)));
        let slots = Slots::initialize(Arc::clone(&slot_file), 4);
        (Appender::new(log).unwrap(), reader_log, Table { slots, file: slot_file })
    }

    /// A slot table and the memory it lives in, as a reader sees both.
    struct Table {
        slots: Slots<Shared>,
        file: Shared,
    }

    impl std::ops::Deref for Table {
        type Target = Slots<Shared>;
        fn deref(&self) -> &Slots<Shared> {
            &self.slots
        }
    }

    fn slot(table: &Table, index: usize) -> SlotMut<Shared> {
        let mut mine = SlotMut::new(Arc::clone(&table.file), slot_offset(index), index);
        mine.claim(&table.file, 1, 0);
        mine
    }

    fn offer(app: &mut Appender<Shared>, len: usize) -> i64 {
        let msg = vec![1u8; len];
        loop {
            match app.append(&[&msg], len) {
                Ok(p) => return p,
                Err(Tripped) => app.rotate().unwrap(),
            }
        }
    }

    #[test]
    fn rules_pick_the_slowest_reader_the_writer_or_an_exact_boundary() {
        let (mut app, log, slots) = setup();
        for _ in 0..10 {
            offer(&mut app, 100);
        }
        let newest = app.position();
        let (a, b, c) = (slot(&slots, 0), slot(&slots, 1), slot(&slots, 2));
        assert_eq!(join(&log, &slots, &a, JoinAt::Slowest), Ok(newest), "no other reader");
        assert_eq!(slots.state(0), (5, STATE_ACTIVE));
        // Messages of 100 bytes take frames of 160.
        a.set_position(160);
        assert_eq!(join(&log, &slots, &b, JoinAt::Slowest), Ok(160));
        assert_eq!(join(&log, &slots, &c, JoinAt::Latest), Ok(newest));
        assert_eq!(join(&log, &slots, &c, JoinAt::Position(320)), Ok(320));
        assert_eq!(slots.view(2).join_position, 320);
        assert_eq!(join(&log, &slots, &c, JoinAt::Earliest), Ok(0), "the session's start, still held");
    }

    #[test]
    fn earliest_is_the_oldest_message_start_the_log_still_holds() {
        let (mut app, log, slots) = setup();
        // Messages of 2000 bytes: three frames each (1024, 1024, 64), so most positions a term
        // behind the writer are inside a message.
        while app.position() < 2 * T as i64 + 5000 {
            offer(&mut app, 2000);
        }
        let newest = app.position();
        let s = slot(&slots, 0);
        let at = join(&log, &slots, &s, JoinAt::Earliest).unwrap();
        assert!(at >= newest - T as i64 && at < newest - T as i64 + 2112, "{at} vs {newest}");
        assert!(reader::message_starts_at(&log, at));
        assert_eq!(slots.view(0).join_position, at);
    }

    #[test]
    fn a_slowest_reader_no_longer_in_the_log_is_passed_over_for_the_writer() {
        let (mut app, log, slots) = setup();
        while app.position() < 3 * T as i64 {
            offer(&mut app, 1000);
        }
        let (dead, joiner) = (slot(&slots, 0), slot(&slots, 1));
        dead.activate(5, 0); // dead, or forged: three terms behind
        assert_eq!(join(&log, &slots, &joiner, JoinAt::Slowest), Ok(app.position()));
        dead.set_position(i64::MAX); // ahead of the writer: impossible, ignored too
        assert_eq!(join(&log, &slots, &joiner, JoinAt::Slowest), Ok(app.position()));
    }

    /// Found by the `ops_oracle` fuzz target: a stray position inside a frame (its length word is
    /// zero there, as at a frame still being written) was joined, and the reader stood there for
    /// good. Now only a real frame boundary counts as a frame being written.
    #[test]
    fn a_slowest_position_inside_a_frame_is_not_joined() {
        let (mut app, log, slots) = setup();
        app.append(&[&[0u8; 200]], 200).unwrap(); // one frame of zeros: [0, 256)
        let (stray, joiner) = (slot(&slots, 0), slot(&slots, 1));
        stray.activate(5, 64);
        assert!(reader::frame_pending_at(&log, 64) && !reader::frame_boundary(&log, 64));
        assert_eq!(join(&log, &slots, &joiner, JoinAt::Slowest), Ok(256), "joined at the writer instead");
        // A real frame being written is joined: a claim open at 256.
        let _claim = app.claim(10).unwrap();
        stray.set_position(256);
        assert!(reader::frame_boundary(&log, 256));
        assert_eq!(join(&log, &slots, &joiner, JoinAt::Slowest), Ok(256));
    }

    #[test]
    fn explicit_positions_outside_the_log_or_inside_messages_are_refused_with_a_usable_one() {
        let (mut app, log, slots) = setup();
        // Messages of 2000 bytes: two fragments of 992 and one of 16 (frames 1024, 1024, 64).
        while app.position() < 2 * T as i64 {
            offer(&mut app, 2000);
        }
        let newest = app.position();
        let s = slot(&slots, 0);
        let refused = |requested| match join(&log, &slots, &s, JoinAt::Position(requested)) {
            Err(JoinRefused::NotAvailable { requested: r, oldest, newest: n, nearest }) => {
                assert_eq!((r, n), (requested, newest));
                assert_eq!(slots.state(0), (0, STATE_WAITING), "deactivated after a refusal");
                (oldest, nearest)
            }
            other => panic!("position {requested}: {other:?}"),
        };
        // Below the oldest position, past the newest, unaligned, between frames, and at the
        // second fragment of a message.
        let (oldest, _) = refused(0);
        assert!(oldest >= newest - T as i64 && reader::message_starts_at(&log, oldest), "{oldest}");
        let message = 2112; // 1024 + 1024 + 64
        let start = oldest + message * 3;
        for requested in [oldest - 32, newest + 32, start + 1, start + 32, start + 1024] {
            let (again, nearest) = refused(requested);
            assert_eq!(again, oldest);
            let want = if requested > newest {
                newest
            } else if requested < oldest {
                oldest
            } else {
                start + message
            };
            assert_eq!(nearest, want, "nearest to {requested}");
            assert_eq!(
                join(&log, &slots, &s, JoinAt::Position(nearest)),
                Ok(nearest),
                "a retry at the nearest"
            );
            s.deactivate();
        }
        assert_eq!(join(&log, &slots, &s, JoinAt::Position(newest)), Ok(newest));
        assert_eq!(join(&log, &slots, &s, JoinAt::Position(start)), Ok(start));
    }
}
