//! The writer of one session: everything the protocol decides on the writing side, over any
//! region, so the loom models, the fuzz targets and the ThreadSanitizer test run this very code.
//!
//! Admission below the flow-control limit (recomputed lazily from the reader slots, and at every
//! rotation), the sweep of dead readers when held back or at a checkpoint (`flow`), the pad-rotate-retry of a message that
//! does not fit the term, and the one pending claim live here; the publication around it owns the
//! files.

use super::doorbell::Rung;
use super::slots::{SessionReaders, Slots};
use super::writer_core::WriterCore;
use crate::error::{Invalid, OfferError};
use crate::layout::frame::{framed_length, max_message_len};
use crate::log::appender::{Appender, ClaimedFrame, Tripped};
use crate::log::{Counter, Gauge, Log};
use crate::region::{DirectRegion, RegionMut};
use crate::sync::protocol;

// The trait lives with the writer core that asks it (writer_core.rs), so the two files do not
// import each other; this is its old path.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub use super::writer_core::Liveness;

/// The writer of a log's session, with its flow control over the stream's reader slots.
#[derive(Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Writer<L, S, K> {
    appender: Appender<L>,
    /// The stream's readers: slots, liveness, flow control, doorbell.
    core: WriterCore<S, K>,
    session_id: i32,
    /// Longest message the one-frame fast path takes: the max payload, or the max message
    /// length where that is smaller (terms below 512 bytes, in the models).
    one_frame_max: usize,
    max_position: i64,
    /// The claim not yet committed or aborted: aborted by the next operation if its guard was
    /// leaked, so a forgotten claim never stalls readers for longer than the writer stays idle.
    pending: Option<ClaimedFrame>,
}

impl<L: RegionMut, S: RegionMut, K: Liveness> Writer<L, S, K> {
    /// Takes over `log` (fresh, or where its tail counters say its writer stopped).
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn new(log: Log<L>, slots: Slots<S>, liveness: K) -> Result<Self, Invalid> {
        let geometry = log.geometry();
        let session_id = log.session_id();
        let max_position = log.terms().max_position();
        let seq = log.session_seq();
        let appender = Appender::new(log)?;
        let max_message = max_message_len(geometry.term_length);
        let mut core = WriterCore::new(slots, liveness, geometry.window, appender.position(), max_message);
        core.flow.owe_to_waiting_readers(seq);
        Ok(Self {
            one_frame_max: appender.max_payload().min(max_message),
            core,
            appender,
            session_id,
            max_position,
            pending: None,
        })
    }

    /// Rings the stream's doorbell (in the slot file) after every commit from now on, and at
    /// once: readers waiting for a session (this one) look again.
    pub(crate) fn with_doorbell(mut self) -> Self {
        self.core.start_ringing();
        self
    }

    /// Appends `message`; returns the position after it.
    #[inline(always)]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn offer(&mut self, message: &[u8]) -> Result<i64, OfferError> {
        // The common case in one pass: one frame, no leaked claim, below the cached limit.
        if message.len() <= self.one_frame_max
            && self.pending.is_none()
            && self.appender.position() < self.core.limit()
        {
            if let Ok(position) = self.appender.append_unfragmented(message) {
                self.core.ring();
                return Ok(position);
            }
            // The term is padded to its end: rotate, then admit and append in the new term.
            return self.offer_after_trip(message);
        }
        self.offer_slow(message)
    }

    /// `offer` off its one-frame path (kept out of line, so the path it leaves stays short).
    #[inline(never)]
    fn offer_slow(&mut self, message: &[u8]) -> Result<i64, OfferError> {
        self.offer_parts(&[message], message.len())
    }

    /// `offer` after its one-frame append padded the term to its end.
    #[cold]
    #[inline(never)]
    fn offer_after_trip(&mut self, message: &[u8]) -> Result<i64, OfferError> {
        self.rotate()?;
        self.offer_parts(&[message], message.len())
    }

    /// Appends one message gathered from `parts`, in order.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn offer_vectored(&mut self, parts: &[&[u8]]) -> Result<i64, OfferError> {
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
        loop {
            self.admit(len)?;
            match self.appender.append(parts, len) {
                Ok(position) => {
                    self.core.ring();
                    return Ok(position);
                }
                Err(Tripped) => self.rotate()?,
            }
        }
    }

    /// Reserves a frame of `len` payload bytes (at most the max payload) to be written in place
    /// and committed or aborted later; returns the position after it.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn claim(&mut self, len: usize) -> Result<i64, OfferError> {
        let max = self.appender.max_payload();
        if len > max {
            return Err(OfferError::MessageTooLarge { len, max });
        }
        self.abort_claim();
        loop {
            self.admit(len)?;
            match self.appender.claim(len) {
                Ok(frame) => {
                    let position = frame.position;
                    self.pending = Some(frame);
                    return Ok(position);
                }
                Err(Tripped) => self.rotate()?,
            }
        }
    }

    /// Gives `f` the payload of the pending claim (none: an empty buffer): the closure form of
    /// `claim_buffer`, for backends that cannot lend a slice (loom's).
    #[cfg(any(test, shmlog_fuzz, shmlog_loom))]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn with_claim_buffer<T>(&mut self, f: impl FnOnce(&mut [u8]) -> T) -> T {
        match &self.pending {
            Some(frame) => self.appender.with_claim_payload(frame, f),
            None => f(&mut []),
        }
    }

    /// Sets the reserved value of the pending claim.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn set_claim_reserved_value(&mut self, value: i64) {
        if let Some(frame) = &self.pending {
            self.appender.set_claim_reserved_value(frame, value);
        }
    }

    /// Commits the pending claim; returns the position after it.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn commit_claim(&mut self) -> Option<i64> {
        let frame = self.pending.take()?;
        let position = frame.position;
        self.appender.commit(frame);
        self.core.ring();
        Some(position)
    }

    /// Turns the pending claim, if any, into padding that readers skip.
    #[inline(always)]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn abort_claim(&mut self) {
        if let Some(frame) = self.pending.take() {
            self.appender.abort(frame);
        }
    }

    /// Admits an append of `len` bytes at the current position, or says why not.
    #[inline(always)]
    fn admit(&mut self, len: usize) -> Result<(), OfferError> {
        if self.appender.position() < self.core.limit() {
            return Ok(());
        }
        self.admit_slow(len)
    }

    #[cold]
    fn admit_slow(&mut self, len: usize) -> Result<(), OfferError> {
        let position = self.appender.position();
        let framed = framed_length(len, self.appender.max_payload()) as i64;
        if position.saturating_add(framed) >= self.max_position {
            return Err(OfferError::MaxPositionExceeded);
        }
        // Stopped by the readers' limit (not at a checkpoint short of it): read the slots again.
        if !self.core.flow.at_checkpoint(position) {
            self.recompute_limit();
        }
        // Every stop of a connected writer asks whether a sweep is due, held back or not (not
        // connected: no reader counted, none to sweep).
        if self.core.connected() && self.core.sweep_due() && self.sweep() > 0 {
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

    /// Re-reads the slots: the limit from the slowest reader not ahead of the writer.
    fn recompute_limit(&mut self) -> i64 {
        let core = &mut self.core;
        let limit = core.flow.recompute(&core.slots, self.session_id, self.appender.position());
        core.publish_limit(self.appender.log(), limit)
    }

    /// Frees the slots of dead readers; returns how many.
    fn sweep(&mut self) -> usize {
        self.core.evict_dead(self.appender.log())
    }

    /// Moves to the next term after a trip, and recomputes the limit: a cold path that runs
    /// once a term whatever the cached limit, so a limit computed from a bad slot word heals.
    fn rotate(&mut self) -> Result<(), OfferError> {
        self.appender.rotate().map_err(|_| OfferError::MaxPositionExceeded)?;
        if protocol::distrust_slots() {
            self.recompute_limit();
        }
        Ok(())
    }

    /// Sweeps dead readers and recomputes the limit; returns the readers counted. System calls:
    /// for setup and monitoring, not for every offer.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn check_readers(&mut self) -> SessionReaders {
        self.sweep();
        self.recompute_limit();
        self.core.readers()
    }

    /// Marks end of stream at the current position (after aborting a pending claim): readers
    /// drain to it and stop.
    pub(crate) fn close(&mut self) {
        self.abort_claim();
        let position = self.appender.position();
        let log = self.appender.log();
        log.set_gauge(Gauge::PublisherLimit, position);
        log.set_eos_position(position);
        self.core.ring_readers_always();
    }

    /// Sleeps until a reader moves (rings the doorbell) and the limit may let an append in, at
    /// most `timeout`: for a back-pressured writer that would rather not spin. `Ready` if there
    /// is room now. Without a doorbell, returns `TimedOut` at once.
    pub(crate) fn wait_for_room(&mut self, timeout: std::time::Duration) -> Rung {
        if !self.core.rings() {
            return Rung::TimedOut;
        }
        let (position, session_id) = (self.appender.position(), self.session_id);
        let WriterCore { slots, flow, .. } = &mut self.core;
        slots.doorbell().wait_for_readers(|| position < flow.recompute(slots, session_id, position), timeout)
    }

    /// `true` if the limit, recomputed from the reader positions now, lets an append in: what a
    /// back-pressured writer re-checks after arming its bell (the async sender's).
    #[cfg(any(feature = "async", shmlog_loom))]
    pub(crate) fn has_room(&mut self) -> bool {
        let position = self.appender.position();
        position < self.core.flow.recompute(&self.core.slots, self.session_id, position)
    }

    /// Position after the last message appended (or claimed).
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn position(&self) -> i64 {
        self.appender.position()
    }

    /// The cached limit: appends starting below it are admitted without reading the slots.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn limit(&self) -> i64 {
        self.core.limit()
    }

    pub(crate) fn max_message_len(&self) -> usize {
        self.core.max_message_len()
    }

    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn max_payload_len(&self) -> usize {
        self.appender.max_payload()
    }

    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn log(&self) -> &Log<L> {
        self.appender.log()
    }

    pub(crate) fn liveness(&self) -> &K {
        self.core.liveness()
    }

    /// The stream's reader slots.
    pub(crate) fn slots(&self) -> &Slots<S> {
        self.core.slots()
    }
}

impl<L: DirectRegion, S: RegionMut, K: Liveness> Writer<L, S, K> {
    /// Lends the payload of the pending claim (none: an empty slice).
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn claim_buffer(&mut self) -> &mut [u8] {
        match &self.pending {
            Some(frame) => self.appender.claim_slice(frame),
            None => &mut [],
        }
    }
}
