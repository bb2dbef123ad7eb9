//! One of several writers of a concurrent log: everything the protocol decides on its side, over
//! any region, so the loom models and the mmapped files run this very code.
//!
//! Each writer keeps its own cached limit (recomputed from the reader slots and the writers'
//! pending words when it reaches it); the reservation itself checks the shared tail against it
//! (`log::concurrent`). A held-back writer, or one at a checkpoint (`stream::flow`), sweeps dead
//! readers and pads dead writers' holes at most once per liveness interval (`log::unblock`).

use super::doorbell::Rung;
use super::flow::FlowControl;
use super::slots::{SessionReaders, Slots};
use super::writer::Liveness;
use super::writer_core::WriterCore;
use crate::error::OfferError;
use crate::layout::frame::max_message_len;
use crate::log::concurrent::{ConcurrentAppender, Refused, Reservation};
use crate::log::unblock::{self, Unblocked};
use crate::log::{Counter, Log};
use crate::region::{DirectRegion, RegionMut};
use crate::sync::protocol;

/// Who of the writers is alive, and the one-at-a-time lock of the unblocker.
pub(crate) trait WriterLiveness {
    /// `true` while writer slot `slot`'s owner lives (an error reads as alive: never call a live
    /// owner dead).
    fn writer_alive(&self, slot: usize) -> bool;

    /// Runs `f` holding the log's unblock lock, if nobody else holds it (`None` then).
    fn with_unblock_lock<T>(&self, f: impl FnOnce() -> T) -> Option<T>;
}

/// Pads the holes of dead writers of `log`, if no other unblocker is at it.
pub(crate) fn unblock<R: RegionMut>(log: &Log<R>, liveness: &impl WriterLiveness) -> Unblocked {
    let resolve = || unblock::resolve_dead(log, |slot| liveness.writer_alive(slot));
    if !protocol::unblock_under_lock() {
        return resolve(); // the loom models' mutant: two unblockers pad one hole at once
    }
    liveness.with_unblock_lock(resolve).unwrap_or_default()
}

/// `true` if the limit recomputed now lies past the shared tail.
fn room_now<S: RegionMut, L: RegionMut>(flow: &mut FlowControl, slots: &Slots<S>, log: &Log<L>) -> bool {
    let tail = log.producer_position().unwrap_or(0);
    tail < flow.recompute_concurrent(slots, log, tail)
}

/// A writer of a concurrent log, with its flow control over the stream's reader slots.
#[derive(Debug)]
pub(crate) struct ConcurrentWriter<L, S, K> {
    appender: ConcurrentAppender<L>,
    /// The stream's readers: slots, liveness, flow control, doorbell.
    core: WriterCore<S, K>,
    /// The claim not yet committed or aborted (it carries its payload length).
    claim: Option<Reservation>,
}

impl<L: RegionMut, S: RegionMut, K: Liveness + WriterLiveness> ConcurrentWriter<L, S, K> {
    /// A writer of `log` through writer slot `slot` (claimed by the caller).
    pub(crate) fn new(log: Log<L>, slot: usize, slots: Slots<S>, liveness: K) -> Self {
        let window = log.geometry().window;
        let max_message = max_message_len(log.term_length());
        let start = log.producer_position().unwrap_or(0);
        let mut core = WriterCore::new(slots, liveness, window, start, max_message);
        core.flow.owe_to_waiting_readers(log.session_seq());
        Self { appender: ConcurrentAppender::new(log, slot), core, claim: None }
    }

    /// Rings the stream's doorbell after every commit from now on, and at once.
    pub(crate) fn with_doorbell(mut self) -> Self {
        self.core.start_ringing();
        self
    }

    /// Appends `message`; returns the position after it.
    #[inline(always)]
    pub(crate) fn offer(&mut self, message: &[u8]) -> Result<i64, OfferError> {
        // The common case in one pass: one frame, no leaked claim, a reservation in the known term
        // (anything else, a refusal included, takes the general path, which tries again).
        if message.len() <= self.appender.max_payload()
            && message.len() <= self.core.max_message
            && self.claim.is_none()
        {
            if let Some(reservation) = self.appender.reserve_fast(message.len(), self.core.limit()) {
                let position = reservation.position;
                self.appender.write(reservation, &[message]);
                self.core.ring();
                return Ok(position);
            }
        }
        self.offer_slow(message)
    }

    /// `offer` off its one-frame path (kept out of line, so the path it leaves stays short).
    #[inline(never)]
    fn offer_slow(&mut self, message: &[u8]) -> Result<i64, OfferError> {
        self.offer_parts(&[message], message.len())
    }

    /// Appends one message gathered from `parts`, in order.
    pub(crate) fn offer_vectored(&mut self, parts: &[&[u8]]) -> Result<i64, OfferError> {
        let len = parts.iter().try_fold(0usize, |sum, p| sum.checked_add(p.len()));
        let len = len.ok_or(OfferError::MessageTooLarge { len: usize::MAX, max: self.core.max_message })?;
        self.offer_parts(parts, len)
    }

    #[inline]
    fn offer_parts(&mut self, parts: &[&[u8]], len: usize) -> Result<i64, OfferError> {
        if len > self.core.max_message {
            return Err(OfferError::MessageTooLarge { len, max: self.core.max_message });
        }
        self.abort_claim();
        let reservation = self.reserve(len)?;
        let position = reservation.position;
        self.appender.write(reservation, parts);
        self.core.ring();
        Ok(position)
    }

    /// Reserves a frame of `len` payload bytes (at most the max payload) to be written in place
    /// and committed or aborted later; returns the position after it.
    pub(crate) fn claim(&mut self, len: usize) -> Result<i64, OfferError> {
        let max = self.appender.max_payload();
        if len > max {
            return Err(OfferError::MessageTooLarge { len, max });
        }
        self.abort_claim();
        let reservation = self.reserve(len)?;
        self.appender.start_claim(&reservation);
        let position = reservation.position;
        self.claim = Some(reservation);
        Ok(position)
    }

    /// Commits the pending claim; returns the position after it.
    pub(crate) fn commit_claim(&mut self) -> Option<i64> {
        let reservation = self.claim.take()?;
        let position = reservation.position;
        self.appender.commit(reservation);
        self.core.ring();
        Some(position)
    }

    /// Turns the pending claim, if any, into padding that readers skip.
    pub(crate) fn abort_claim(&mut self) {
        if let Some(reservation) = self.claim.take() {
            self.appender.abort(reservation);
        }
    }

    /// Reserves a message of `len` bytes below the limit, recomputing it (and sweeping) when
    /// reached.
    #[inline]
    fn reserve(&mut self, len: usize) -> Result<Reservation, OfferError> {
        loop {
            match self.appender.reserve(len, self.core.limit()) {
                Ok(reservation) => return Ok(reservation),
                Err(Refused::Limit { position }) => self.admit_slow(position)?,
                Err(Refused::MaxPosition) => return Err(OfferError::MaxPositionExceeded),
                Err(Refused::BadTail) => return Err(OfferError::Corrupt),
            }
        }
    }

    /// The tail stood at `position`, at or past the cached limit: `Ok` if a recompute (or a sweep
    /// of dead readers and writers) lets it on.
    #[cold]
    fn admit_slow(&mut self, position: i64) -> Result<(), OfferError> {
        // Stopped by the readers' limit (not at a checkpoint short of it): read the slots again.
        if !self.core.flow.at_checkpoint(position) {
            self.recompute_limit();
        }
        // Every stop asks whether a sweep is due, held back or not.
        if self.core.sweep_due() && self.sweep() {
            self.recompute_limit();
        }
        if self.core.flow.at_checkpoint(position) {
            // The readers let it on: on to the next checkpoint (without reading the slots).
            self.core.flow.next_checkpoint(position);
            return Ok(());
        }
        self.appender.log().count(Counter::BackPressureEvents, 1);
        Err(if self.core.connected() { OfferError::BackPressured } else { OfferError::NotConnected })
    }

    /// Re-reads the tail, then (after the fence) the reader slots and the writers' pending words;
    /// a reader's position is compared with the tail re-read after it (see
    /// `FlowControl::recompute_concurrent`).
    fn recompute_limit(&mut self) -> i64 {
        let log = self.appender.log();
        let producer = log.producer_position().unwrap_or(0);
        let core = &mut self.core;
        // A position past a tail read after it is no honest reader's (counted as ignored).
        let limit = core.flow.recompute_concurrent(&core.slots, log, producer);
        core.publish_limit(log, limit)
    }

    /// Gives `f` the payload of the pending claim (none: an empty buffer): the closure form of
    /// `claim_buffer`, for backends that cannot lend a slice (loom's).
    #[cfg(shmlog_loom)]
    pub(crate) fn with_claim_buffer<T>(&mut self, f: impl FnOnce(&mut [u8]) -> T) -> T {
        match &self.claim {
            Some(reservation) => self.appender.with_claim_payload(reservation, f),
            None => f(&mut []),
        }
    }

    /// Frees dead readers' slots and pads dead writers' holes; `true` if anything changed.
    fn sweep(&mut self) -> bool {
        let log = self.appender.log();
        let evicted = self.core.evict_dead(log);
        let unblocked = unblock(log, self.core.liveness());
        evicted > 0 || unblocked.padded > 0 || unblocked.cleared > 0
    }

    /// Sweeps and recomputes the limit; returns the readers counted.
    pub(crate) fn check_readers(&mut self) -> SessionReaders {
        self.sweep();
        self.recompute_limit();
        self.core.readers()
    }

    /// Sleeps until a reader moves (rings the doorbell) and the limit, recomputed against the
    /// shared tail, may let a reservation in, at most `timeout`: for a back-pressured writer that
    /// would rather not spin. `Ready` if there is room now; without a doorbell, `TimedOut` at
    /// once. A dead writer's hole is not a reader's move: the caller's next offer, within the
    /// liveness interval, pads it.
    pub(crate) fn wait_for_room(&mut self, timeout: std::time::Duration) -> Rung {
        if !self.core.rings() {
            return Rung::TimedOut;
        }
        let log = self.appender.log();
        let WriterCore { slots, flow, .. } = &mut self.core;
        slots.doorbell().wait_for_readers(|| room_now(flow, slots, log), timeout)
    }

    /// `true` if the limit, recomputed from the reader positions now, lets a reservation at the
    /// shared tail in: what a back-pressured writer re-checks after arming its bell (the async
    /// sender's).
    #[cfg(feature = "async")]
    pub(crate) fn has_room(&mut self) -> bool {
        let WriterCore { slots, flow, .. } = &mut self.core;
        room_now(flow, slots, self.appender.log())
    }

    /// The shared tail: the position after the last space any writer reserved.
    pub(crate) fn position(&self) -> i64 {
        self.appender.log().producer_position().unwrap_or(0)
    }

    pub(crate) fn limit(&self) -> i64 {
        self.core.limit()
    }

    pub(crate) fn max_message_len(&self) -> usize {
        self.core.max_message_len()
    }

    pub(crate) fn max_payload_len(&self) -> usize {
        self.appender.max_payload()
    }

    pub(crate) fn log(&self) -> &Log<L> {
        self.appender.log()
    }

    pub(crate) fn liveness(&self) -> &K {
        self.core.liveness()
    }

    /// The stream's reader slots.
    pub(crate) fn slots(&self) -> &Slots<S> {
        self.core.slots()
    }

    /// Rings the readers' doorbell unconditionally (after end of stream).
    pub(crate) fn ring_readers_always(&self) {
        self.core.ring_readers_always();
    }
}

impl<L: DirectRegion, S: RegionMut, K: Liveness + WriterLiveness> ConcurrentWriter<L, S, K> {
    /// Lends the payload of the pending claim (none: an empty slice).
    pub(crate) fn claim_buffer(&mut self) -> &mut [u8] {
        match &self.claim {
            Some(reservation) => self.appender.claim_slice(reservation),
            None => &mut [],
        }
    }
}
