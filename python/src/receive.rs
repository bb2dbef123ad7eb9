//! A receiving class's state, whatever it reads (a live `Subscription`, a
//! `journal::PersistentSubscription`): the core's receiver, blocking or asyncio's, the loss
//! reports taken from it, an answer a batch kept for the next receive, and the descriptor
//! asyncio's receives wake the loop through. The switch between blocking and asyncio receives is
//! here once for both classes.

use crate::errors;
use crate::outcome::{Losses, Pending, Step};
use crate::util::{AsyncWake, PyBytesCodec};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use shmlog::{AsyncReceiver, MessageSource, Receiver};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

pub(crate) type Rx<S> = Receiver<Py<PyBytes>, PyBytesCodec, S>;
pub(crate) type AsyncRx<S> = AsyncReceiver<Py<PyBytes>, PyBytesCodec, S>;

/// The receiver, as blocking calls or asyncio last used it.
pub(crate) enum Mode<S: MessageSource> {
    Blocking(Rx<S>),
    Async(AsyncRx<S>),
    /// Lost with an error of the switch to asyncio (the system refused a page or a thread).
    Gone,
}

pub(crate) struct Inner<S: MessageSource> {
    pub(crate) mode: Mode<S>,
    /// Messages the receiver decoded into its queue, and messages taken from it: equal when the
    /// queue is empty.
    pub(crate) decoded: Arc<AtomicU64>,
    pub(crate) returned: u64,
    pub(crate) losses: Losses,
    pub(crate) pending: Option<Pending>,
    /// The descriptor asyncio receives wake the loop through (made by the first).
    pub(crate) wake: AsyncWake,
}

impl<S: MessageSource> Inner<S> {
    /// Receives from `source`, blocking until an asyncio receive asks otherwise.
    pub(crate) fn new(source: S) -> Self {
        let codec = PyBytesCodec::default();
        Self {
            decoded: Arc::clone(&codec.decoded),
            returned: 0,
            mode: Mode::Blocking(Receiver::new(source, codec)),
            losses: Losses::default(),
            pending: None,
            wake: AsyncWake::default(),
        }
    }

    /// `true` if a receive now returns at once without polling the source: a message in the
    /// receiver's queue, or an answer kept for it.
    pub(crate) fn has_queued(&self) -> bool {
        self.pending.is_some() || self.decoded.load(Ordering::Relaxed) != self.returned
    }

    /// The receiver for blocking calls (taking it back from asyncio if it was there).
    #[inline]
    pub(crate) fn blocking(&mut self) -> Option<&mut Rx<S>> {
        if let Mode::Async(_) = self.mode {
            if let Mode::Async(a) = std::mem::replace(&mut self.mode, Mode::Gone) {
                self.mode = Mode::Blocking(a.into_inner());
            }
        }
        match &mut self.mode {
            Mode::Blocking(rx) => Some(rx),
            _ => None,
        }
    }

    /// The source, in whichever mode the receiver is (a look at it does not end asyncio's
    /// sleep).
    pub(crate) fn source(&mut self) -> Option<&mut S> {
        match &mut self.mode {
            Mode::Blocking(rx) => Some(rx.source()),
            Mode::Async(a) => Some(a.source()),
            Mode::Gone => None,
        }
    }

    /// The source back (messages still queued are dropped with the receiver).
    pub(crate) fn into_source(self) -> Option<S> {
        match self.mode {
            Mode::Blocking(rx) => Some(rx.into_source()),
            Mode::Async(a) => Some(a.into_inner().into_source()),
            Mode::Gone => None,
        }
    }

    /// asyncio's receive (`_poll_async`): up to `limit` messages into `out`, or none yet: then
    /// the wake descriptor becomes readable when the stream's doorbell rings, a nap of the
    /// source ends (a recording being written) or the liveness interval passes. Returns the
    /// answer to say now, if any (one met after messages is kept for the next receive); a
    /// journal's error is raised as the blocking receive raises it, and only when nothing was
    /// taken (a batch stops before it: nothing was taken, so the next receive tries again).
    ///
    /// While the receiver is blocking's, what is there now is taken the blocking way
    /// (`take_now`); only when nothing is does the receiver go to the core's `AsyncReceiver`,
    /// whose poll counts it among the stream's reactor sleepers. It stays there for the next
    /// asyncio receive (its sleep set up once, not per message); a blocking receive takes it
    /// back. `gone`: the error of a receiver lost (closed).
    pub(crate) fn poll_async(
        &mut self,
        py: Python<'_>,
        out: &mut Vec<Py<PyBytes>>,
        limit: usize,
        take_now: impl FnOnce(&mut Self, &mut Vec<Py<PyBytes>>) -> PyResult<()>,
        gone: impl FnOnce() -> PyErr,
    ) -> PyResult<Option<Pending>> {
        let waker = self.wake.get()?.waker();
        if !matches!(self.mode, Mode::Async(_)) {
            take_now(self, out)?;
            if !out.is_empty() {
                return Ok(None);
            }
            let Mode::Blocking(rx) = std::mem::replace(&mut self.mode, Mode::Gone) else {
                return Err(gone());
            };
            // On an error the receiver is gone with it: the object is closed.
            let a = AsyncReceiver::with_wake_fd(rx, self.wake.get()?).map_err(|e| errors::error(py, e))?;
            self.mode = Mode::Async(a);
        }
        self.take_async(&mut Context::from_waker(&waker), out, limit).map_err(|e| errors::error(py, e))
    }

    /// Up to `limit` messages the asyncio receiver has now into `out` (its sleep in the reactor
    /// stays set up: each poll ends it before it takes a message), and the answer to say now, if
    /// any: one met after messages is kept for the next receive. A journal's error only with
    /// `out` empty: met after messages it stops the batch, and the next receive meets it again.
    fn take_async(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Vec<Py<PyBytes>>,
        limit: usize,
    ) -> Result<Option<Pending>, shmlog::Error> {
        if let Some(p) = self.pending.take() {
            return Ok(Some(p));
        }
        let Self { mode: Mode::Async(a), returned, losses, pending, .. } = self else {
            return Ok(None);
        };
        while out.len() < limit {
            let Poll::Ready(received) = std::pin::pin!(a.recv()).poll(cx) else { return Ok(None) };
            match Step::of(received) {
                Step::Message(m) => {
                    *returned += 1;
                    out.push(m);
                }
                Step::Lost(loss) => losses.report(loss),
                Step::Nothing => return Ok(None),
                Step::Journal(e) if out.is_empty() => return Err(e),
                Step::Journal(_) => return Ok(None),
                Step::Answer(p) if out.is_empty() => return Ok(Some(p)),
                Step::Answer(p) => {
                    *pending = Some(p);
                    return Ok(None);
                }
            }
        }
        Ok(None)
    }
}
