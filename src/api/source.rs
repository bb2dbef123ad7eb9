//! What a [`crate::Receiver`] (and an `AsyncReceiver`) reads through: a live [`Subscription`],
//! or a `journal::PersistentSubscription` that reads the journal and the live stream in turn.
//! One seam, so the receivers' rules (losses in order with the messages, the end of a session
//! and a fault said once, sleeping rather than spinning) are written once for both.

use super::subscription::Subscription;
use crate::error::Error;
use crate::log::header::Header;
use crate::stream::loss::Loss;
use std::time::Duration;

/// A reader a [`crate::Receiver`] can take messages from: [`Subscription`], or
/// `journal::PersistentSubscription`. Sealed: its methods are the crate's own.
pub trait MessageSource: sealed::Read {}

impl<S: sealed::Read> MessageSource for S {}

#[cfg(feature = "async")]
pub(crate) use sealed::SleepOn;

/// Public items no one outside the crate can name: what seals [`MessageSource`].
pub(crate) mod sealed {
    use super::*;

    /// How an async receiver sleeps when its source has nothing.
    #[cfg(feature = "async")]
    #[derive(Debug)]
    pub enum SleepOn<'a> {
        /// On the doorbell of this live subscription's stream; `generation` changes when the
        /// source opened another subscription (whose stream file may be another one).
        Bell { sub: &'a Subscription, generation: u64 },
        /// Nothing rings for what it waits for (a recording being written): look again after
        /// this (zero: at once, after other tasks ran).
        Nap(Duration),
    }

    /// The reads the receivers make (see [`Subscription`]'s methods of the same names).
    pub trait Read {
        /// Delivers up to `limit` fragments; an error only from a source that reads files.
        fn read(&mut self, handler: impl FnMut(&[u8], &Header), limit: usize) -> Result<usize, Error>;
        fn take_loss(&mut self) -> Option<Loss>;
        /// Once per closed session, which it leaves.
        fn take_closed(&mut self) -> bool;
        /// A fault, once.
        fn take_fault(&mut self) -> Option<&'static str>;
        fn is_closed(&self) -> bool;
        /// Sleeps until a read may find something (`true`) or `timeout` passes (`false`).
        fn wait_readable(&mut self, timeout: Duration) -> bool;
        #[cfg(feature = "async")]
        fn sleep_on(&mut self) -> SleepOn<'_>;
    }
}

impl sealed::Read for Subscription {
    #[inline]
    fn read(&mut self, handler: impl FnMut(&[u8], &Header), limit: usize) -> Result<usize, Error> {
        Ok(self.poll(handler, limit))
    }

    fn take_loss(&mut self) -> Option<Loss> {
        Subscription::take_loss(self)
    }

    fn take_closed(&mut self) -> bool {
        Subscription::take_closed(self)
    }

    fn take_fault(&mut self) -> Option<&'static str> {
        Subscription::take_fault(self)
    }

    fn is_closed(&self) -> bool {
        Subscription::is_closed(self)
    }

    fn wait_readable(&mut self, timeout: Duration) -> bool {
        Subscription::wait_readable(self, timeout)
    }

    #[cfg(feature = "async")]
    fn sleep_on(&mut self) -> SleepOn<'_> {
        SleepOn::Bell { sub: self, generation: 0 }
    }
}
