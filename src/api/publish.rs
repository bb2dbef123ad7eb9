//! One writer interface over the two publications: [`Publish`], so that a [`crate::Sender`], an
//! async sender or a bridge takes either an exclusive [`Publication`] or a
//! [`ConcurrentPublication`]. Both keep their inherent methods (no import needed to call them);
//! the trait forwards to them, and generic code is monomorphised, so an offer through it is the
//! inherent offer.

use super::claim::{ClaimGuard, ClaimSource};
use super::concurrent::ConcurrentPublication;
use super::idle::IdleStrategy;
use super::publication::Publication;
use crate::error::{Error, OfferError};
use crate::stream::doorbell::Rung;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the waits need of a publication (sealed: implemented by the two publications only).
pub(crate) mod sealed {
    use std::time::Duration;

    pub trait Waits {
        /// Sleeps until a reader moves and there may be room, at most `timeout`.
        fn wait_for_room(&mut self, timeout: Duration) -> super::Rung;
        /// How often a back-pressured writer looks for dead readers (and writers).
        fn liveness_interval(&self) -> Duration;
        /// `true` if an offer now would not be back-pressured (reads the reader positions).
        #[cfg(feature = "async")]
        fn has_room(&mut self) -> bool;
        /// The stream's doorbell page, mapped on its own (for a thread that sleeps for us).
        #[cfg(feature = "async")]
        fn map_doorbell(
            &self,
        ) -> Result<crate::stream::doorbell::Doorbell<crate::region::MmapRegion>, crate::Error>;
    }
}

/// A writer of a stream: the exclusive [`Publication`] or one [`ConcurrentPublication`] handle.
///
/// Sealed: the two publications are its only implementations. Each method is the publication's
/// inherent method of the same name (see there); take `P: Publish` to write code that works with
/// either, e.g. `Sender<T, C, P>`. The trait is dyn-compatible apart from `try_claim` and
/// `offer_with`, so `Box<dyn Publish + Send>` holds a writer chosen at run time.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use shmlog::{Publication, Publish};
/// fn announce(p: &mut impl Publish) -> Result<i64, shmlog::OfferError> {
///     p.offer(b"hello")
/// }
/// let mut exclusive = Publication::builder("news").create()?;
/// let mut shared = Publication::builder("chat").open_concurrent()?;
/// announce(&mut exclusive)?;
/// announce(&mut shared)?;
/// # Ok(()) }
/// ```
pub trait Publish: ClaimSource + sealed::Waits {
    /// Appends `message`. Returns the stream position after it.
    fn offer(&mut self, message: &[u8]) -> Result<i64, OfferError>;

    /// Appends one message gathered from several slices, in order.
    fn offer_vectored(&mut self, parts: &[&[u8]]) -> Result<i64, OfferError>;

    /// Reserves space for a message of `len` bytes to be written in place.
    fn try_claim(&mut self, len: usize) -> Result<ClaimGuard<'_, Self>, OfferError>
    where
        Self: Sized;

    /// Offers `message`, idling with `idle` while back-pressured or not connected, until
    /// `deadline`.
    fn offer_with(
        &mut self,
        message: &[u8],
        idle: &mut impl IdleStrategy,
        deadline: Instant,
    ) -> Result<i64, OfferError>
    where
        Self: Sized,
    {
        super::idle::offer_retrying(|| self.offer(message), idle, deadline)
    }

    /// Offers `message`; while back-pressured, sleeps until a reader moves, at most `timeout`.
    fn offer_blocking(&mut self, message: &[u8], timeout: Duration) -> Result<i64, OfferError> {
        offer_blocking(self, message, timeout)
    }

    /// Waits until a reader joins this session, or `timeout` passes ([`Error::Timeout`]).
    fn wait_connected(&mut self, timeout: Duration) -> Result<(), Error> {
        self.wait_for_readers(1, timeout)
    }

    /// Waits until at least `readers` live readers read this session, or `timeout` passes.
    fn wait_for_readers(&mut self, readers: usize, timeout: Duration) -> Result<(), Error> {
        super::idle::wait_for_count(|| self.connected_readers(), readers, timeout)
    }

    /// How many live readers read this session (system calls: for setup and monitoring).
    fn connected_readers(&mut self) -> usize;

    /// `true` if a live reader reads this session (system calls).
    fn is_connected(&mut self) -> bool {
        self.connected_readers() > 0
    }

    /// Position after the last message appended (a concurrent log: after the last reservation
    /// of any writer).
    fn position(&self) -> i64;

    /// This writer's cached limit.
    fn limit(&self) -> i64;

    /// Largest message `offer` accepts: `min(term_length / 8, 16 MiB)`.
    fn max_message_len(&self) -> usize;

    /// Largest unfragmented message and largest claim: `mtu - 32`.
    fn max_payload_len(&self) -> usize;

    /// Id of the session this writer writes.
    fn session_id(&self) -> i32;

    /// Term length of the log.
    fn term_length(&self) -> usize;

    /// Path of the log file.
    fn path(&self) -> &Path;
}

/// Offers `message`; while back-pressured, sleeps on the writer's bell until a reader moves, at
/// most `timeout` in all and at most a liveness interval at a time (the next offer sweeps dead
/// readers, and pads dead writers' holes). The one loop of both publications.
pub(crate) fn offer_blocking<P: Publish + ?Sized>(
    p: &mut P,
    message: &[u8],
    timeout: Duration,
) -> Result<i64, OfferError> {
    let deadline = Instant::now().checked_add(timeout);
    loop {
        match p.offer(message) {
            Err(OfferError::BackPressured) => {}
            other => return other,
        }
        let remaining = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
        if remaining.is_zero() {
            return Err(OfferError::BackPressured);
        }
        let interval = p.liveness_interval();
        p.wait_for_room(remaining.min(interval));
    }
}

/// The trait's methods are the inherent ones (which inherent-first lookup would pick anyway;
/// spelled out so that no reader wonders about recursion).
macro_rules! publish_by_inherent_methods {
    ($t:ty) => {
        impl Publish for $t {
            // Always: the forwarding call vanishes, and the inherent method meets the inliner as
            // a direct call would (left to itself, LLVM kept this wrapper out of line: +16
            // instructions per offer in `scripts/instructions.sh`).
            #[inline(always)]
            fn offer(&mut self, message: &[u8]) -> Result<i64, OfferError> {
                <$t>::offer(self, message)
            }

            #[inline(always)]
            fn offer_vectored(&mut self, parts: &[&[u8]]) -> Result<i64, OfferError> {
                <$t>::offer_vectored(self, parts)
            }

            #[inline(always)]
            fn try_claim(&mut self, len: usize) -> Result<ClaimGuard<'_, Self>, OfferError> {
                <$t>::try_claim(self, len)
            }

            fn connected_readers(&mut self) -> usize {
                <$t>::connected_readers(self)
            }

            fn position(&self) -> i64 {
                <$t>::position(self)
            }

            fn limit(&self) -> i64 {
                <$t>::limit(self)
            }

            fn max_message_len(&self) -> usize {
                <$t>::max_message_len(self)
            }

            fn max_payload_len(&self) -> usize {
                <$t>::max_payload_len(self)
            }

            fn session_id(&self) -> i32 {
                <$t>::session_id(self)
            }

            fn term_length(&self) -> usize {
                <$t>::term_length(self)
            }

            fn path(&self) -> &Path {
                <$t>::path(self)
            }
        }
    };
}

publish_by_inherent_methods!(Publication);
publish_by_inherent_methods!(ConcurrentPublication);
