//! A subscription's receiving state: the core's receiver (blocking or asyncio), the loss reports
//! taken from it, and an answer a batch kept for the next receive.

use crate::outcome::{Losses, Pending, Step};
use crate::util::{AsyncWake, PyBytesCodec};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use shmlog::{AsyncReceiver, Receiver};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

pub(super) type Rx = Receiver<Py<PyBytes>, PyBytesCodec>;
pub(super) type AsyncRx = AsyncReceiver<Py<PyBytes>, PyBytesCodec>;

/// The receiver, as blocking calls or asyncio last used it.
pub(super) enum Mode {
    Blocking(Rx),
    Async(AsyncRx),
    /// Lost with an error of the switch to asyncio (the system refused a page or a thread).
    Gone,
}

/// What one look at the receiver found.
pub(super) enum Got {
    Message(Py<PyBytes>),
    Nothing,
    Answer(Pending),
}

pub(super) struct Inner {
    pub(super) mode: Mode,
    /// Messages the receiver decoded into its queue, and messages taken from it: equal when the
    /// queue is empty.
    pub(super) decoded: Arc<AtomicU64>,
    pub(super) returned: u64,
    pub(super) losses: Losses,
    pub(super) pending: Option<Pending>,
    /// The descriptor asyncio receives wake the loop through (made by the first).
    pub(super) wake: AsyncWake,
}

impl Inner {
    /// `true` if a receive now returns at once without polling the log: a message in the
    /// receiver's queue, or an answer kept for it.
    pub(super) fn has_queued(&self) -> bool {
        self.pending.is_some() || self.decoded.load(Ordering::Relaxed) != self.returned
    }

    /// The receiver for blocking calls (taking it back from asyncio if it was there).
    #[inline]
    pub(super) fn blocking(&mut self) -> Option<&mut Rx> {
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

    /// The next message if the receiver has one now (its queue, or one poll of the log), what
    /// it answered instead, or `None` if the receiver is gone. Losses go to `take_loss`.
    #[inline]
    pub(super) fn take(&mut self) -> Option<Got> {
        if let Some(p) = self.pending.take() {
            return Some(Got::Answer(p));
        }
        loop {
            let rx = self.blocking()?;
            match Step::live(rx.try_recv()) {
                Step::Message(m) => {
                    self.returned += 1;
                    return Some(Got::Message(m));
                }
                Step::Lost(loss) => self.losses.report(loss),
                Step::Nothing | Step::Journal(_) => return Some(Got::Nothing),
                Step::Answer(p) => return Some(Got::Answer(p)),
            }
        }
    }

    /// Up to `limit` messages the receiver has now into `out`, and the answer that stopped the
    /// batch, if any; `None` if the receiver is gone. (`take` in a loop, with one look at the
    /// mode per batch instead of per message.)
    pub(super) fn take_batch(&mut self, out: &mut Vec<Py<PyBytes>>, limit: usize) -> Option<Option<Pending>> {
        if let Some(p) = self.pending.take() {
            return Some(Some(p));
        }
        self.blocking()?;
        let Self { mode: Mode::Blocking(rx), returned, losses, .. } = self else {
            return None;
        };
        while out.len() < limit {
            match Step::live(rx.try_recv()) {
                Step::Message(m) => {
                    *returned += 1;
                    out.push(m);
                }
                Step::Lost(loss) => losses.report(loss),
                Step::Nothing | Step::Journal(_) => break,
                Step::Answer(p) => return Some(Some(p)),
            }
        }
        Some(None)
    }

    /// Up to `limit` messages the asyncio receiver has now into `out` (its sleep in the reactor
    /// stays set up: each poll ends it before it takes a message), and the answer to say now, if
    /// any: one met after messages is kept for the next receive. `None` too if the receiver is
    /// not asyncio's.
    pub(super) fn take_async(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Vec<Py<PyBytes>>,
        limit: usize,
    ) -> Option<Pending> {
        if let Some(p) = self.pending.take() {
            return Some(p);
        }
        let Self { mode: Mode::Async(a), returned, losses, pending, .. } = self else {
            return None;
        };
        while out.len() < limit {
            let Poll::Ready(received) = std::pin::pin!(a.recv()).poll(cx) else { return None };
            match Step::live(received) {
                Step::Message(m) => {
                    *returned += 1;
                    out.push(m);
                }
                Step::Lost(loss) => losses.report(loss),
                Step::Nothing | Step::Journal(_) => return None,
                Step::Answer(p) if out.is_empty() => return Some(p),
                Step::Answer(p) => {
                    *pending = Some(p);
                    return None;
                }
            }
        }
        None
    }
}
