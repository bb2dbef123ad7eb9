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
//!   That keeps it out of our partition until it recomputes again, and that recompute sees us.

use super::slots::Slots;
use crate::error::Invalid;
use crate::layout::frame::FRAME_ALIGNMENT;
use crate::log::{reader, Log};
use crate::region::{Region, RegionMut};
use crate::sync::{fence, Ordering};

/// Joins that find no readable position in this many attempts give up (a writer that keeps
/// cleaning ahead of every candidate; in practice a corrupt log).
const ATTEMPTS: usize = 1000;

/// Where a reader starts reading a session: the crate-internal form of the public `JoinAt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JoinRule {
    /// The slowest other reader of the session, or the writer's position if there is none.
    Slowest,
    /// The writer's position.
    Latest,
    /// An exact position, which must be a message boundary the log still holds.
    Position(i64),
}

/// Why [`join`] did not join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JoinRefused {
    /// The explicit position is not readable: not within `[oldest, newest]`, not 32-aligned, or
    /// not where a frame starts.
    NotAvailable { requested: i64, oldest: i64, newest: i64 },
    /// The log's tail counters are inconsistent.
    Corrupt(Invalid),
    /// No readable position was found in [`ATTEMPTS`] attempts.
    GaveUp,
}

/// Activates slot `slot` (claimed by the caller) as a reader of `log`'s session at a position
/// chosen by `rule` that the writer can no longer overwrite or clean; returns that position.
///
/// On refusal the slot is left claimed but not reading (`Slots::deactivate`).
pub(crate) fn join<L: Region, S: RegionMut>(
    log: &Log<L>,
    slots: &Slots<S>,
    slot: usize,
    rule: JoinRule,
) -> Result<i64, JoinRefused> {
    let session = log.session_id();
    let explicit = matches!(rule, JoinRule::Position(_));
    for _ in 0..ATTEMPTS {
        let producer = log.producer_position().map_err(JoinRefused::Corrupt)?;
        let position = match rule {
            // A slowest reader no longer inside the log (dead and not yet evicted, or a forged
            // slot) cannot be joined: start at the writer instead of retrying in vain.
            JoinRule::Slowest => match slots.scan(session, Some(slot)).min {
                Some(min) if (producer - log.term_length() as i64..=producer).contains(&min) => min,
                _ => producer,
            },
            JoinRule::Latest => producer,
            JoinRule::Position(p) => p,
        };
        slots.activate(slot, session, position);
        // Pairs with the fence of `FlowControl::recompute` (see the module docs). The mutant cfg
        // exists only so the loom models can show they catch its absence (`.ci/loom.sh`).
        if !cfg!(shmlog_mutant_no_join_fence) {
            fence(Ordering::SeqCst);
        }
        let newest = match log.producer_position() {
            Ok(newest) => newest,
            Err(e) => {
                slots.deactivate(slot);
                return Err(JoinRefused::Corrupt(e));
            }
        };
        let oldest = (newest - log.term_length() as i64).max(0);
        let available = position >= oldest
            && position <= newest
            && position % FRAME_ALIGNMENT as i64 == 0
            && (position == newest
                || reader::frame_starts_at(log, position)
                // The frame being written where the slowest reader caught up (an open claim,
                // or an offer caught mid-copy): readable once committed, never cleaned (it is
                // in the active term), so as good a join position as a committed one. Only for
                // positions a reader or the writer reached: an explicit position over zero
                // payload bytes would look pending forever.
                || (!explicit && reader::frame_pending_at(log, position)));
        if available {
            return Ok(position);
        }
        slots.deactivate(slot);
        if let JoinRule::Position(requested) = rule {
            return Err(JoinRefused::NotAvailable { requested, oldest, newest });
        }
    }
    Err(JoinRefused::GaveUp)
}

#[cfg(all(test, not(shmlog_loom)))]
mod tests {
    use super::*;
    use crate::layout::log_meta::Geometry;
    use crate::layout::slots::{file_length, STATE_ACTIVE, STATE_WAITING};
    use crate::log::appender::{Appender, Tripped};
    use crate::log::LogInit;
    use crate::region::HeapRegion;
    use std::sync::Arc;

    const T: usize = 64 * 1024;

    type Shared = Arc<HeapRegion>;

    /// A writer, a reader's view of the same log, and a slot table of 4.
    fn setup() -> (Appender<Shared>, Log<Shared>, Slots<HeapRegion>) {
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
        };
        let log = Log::initialize(Arc::clone(&region), &init);
        let reader_log = Log::open(region).unwrap();
        let slots = Slots::initialize(HeapRegion::new(file_length(4)), 4);
        (Appender::new(log).unwrap(), reader_log, slots)
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
        for i in 0..3 {
            slots.claim(i, 1, 0);
        }
        assert_eq!(join(&log, &slots, 0, JoinRule::Slowest), Ok(newest), "no other reader");
        assert_eq!(slots.state(0), (5, STATE_ACTIVE));
        // Messages of 100 bytes take frames of 160.
        slots.set_position(0, 160);
        assert_eq!(join(&log, &slots, 1, JoinRule::Slowest), Ok(160));
        assert_eq!(join(&log, &slots, 2, JoinRule::Latest), Ok(newest));
        assert_eq!(join(&log, &slots, 2, JoinRule::Position(320)), Ok(320));
        assert_eq!(slots.view(2).join_position, 320);
    }

    #[test]
    fn a_slowest_reader_no_longer_in_the_log_is_passed_over_for_the_writer() {
        let (mut app, log, slots) = setup();
        while app.position() < 3 * T as i64 {
            offer(&mut app, 1000);
        }
        slots.claim(0, 1, 0);
        slots.activate(0, 5, 0); // dead, or forged: three terms behind
        slots.claim(1, 1, 0);
        assert_eq!(join(&log, &slots, 1, JoinRule::Slowest), Ok(app.position()));
        slots.set_position(0, i64::MAX); // ahead of the writer: impossible, ignored too
        assert_eq!(join(&log, &slots, 1, JoinRule::Slowest), Ok(app.position()));
    }

    #[test]
    fn explicit_positions_outside_the_log_or_between_frames_are_refused() {
        let (mut app, log, slots) = setup();
        while app.position() < 2 * T as i64 {
            offer(&mut app, 1000);
        }
        let newest = app.position();
        let oldest = newest - T as i64;
        slots.claim(0, 1, 0);
        // Below the oldest position, past the newest, unaligned, and between frame starts.
        for requested in [0, oldest - 32, newest + 32, newest - 1, newest - 32] {
            assert_eq!(
                join(&log, &slots, 0, JoinRule::Position(requested)),
                Err(JoinRefused::NotAvailable { requested, oldest, newest }),
                "position {requested}"
            );
            assert_eq!(slots.state(0), (0, STATE_WAITING), "deactivated after a refusal");
        }
        assert_eq!(join(&log, &slots, 0, JoinRule::Position(newest)), Ok(newest));
    }
}
