//! A subscription's receiving state: the core's receiver (blocking or asyncio), the loss reports
//! taken from it, and an answer a batch kept for the next receive.

use crate::util::{AsyncWake, PyBytesCodec};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use shmlog::{AsyncReceiver, Loss, Receiver, RecvError, MAX_LOSSES};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub(super) type Rx = Receiver<Py<PyBytes>, PyBytesCodec>;
pub(super) type AsyncRx = AsyncReceiver<Py<PyBytes>, PyBytesCodec>;

/// The receiver, as blocking calls or asyncio last used it.
pub(super) enum Mode {
    Blocking(Rx),
    Async(AsyncRx),
    /// Lost with an error of the switch to asyncio (the system refused a page or a thread).
    Gone,
}

/// A receive outcome of a newer core than this binding knows (`RecvError` grows): said as a fault.
pub(super) const UNKNOWN_OUTCOME: &str = "a receive outcome this build of the bindings does not know";

/// An answer of the receiver that a batch met after it had messages: the next receive gives it.
#[derive(Clone, Copy)]
pub(super) enum Pending {
    End,
    Fault(&'static str),
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
    pub(super) losses: VecDeque<Loss>,
    pub(super) losses_dropped: u64,
    pub(super) pending: Option<Pending>,
    /// The descriptor asyncio receives wake the loop through (made by the first).
    pub(super) wake: AsyncWake,
}

/// Keeps a loss report for `take_loss`, dropping the oldest past `MAX_LOSSES` (counted).
pub(super) fn report(losses: &mut VecDeque<Loss>, dropped: &mut u64, loss: Loss) {
    if losses.len() >= MAX_LOSSES {
        losses.pop_front();
        *dropped += 1;
    }
    losses.push_back(loss);
}

impl Inner {
    /// `true` if a receive now returns at once without polling the log: a message in the
    /// receiver's queue, or an answer kept for it.
    pub(super) fn has_queued(&self) -> bool {
        self.pending.is_some() || self.decoded.load(Ordering::Relaxed) != self.returned
    }

    pub(super) fn report(&mut self, loss: Loss) {
        report(&mut self.losses, &mut self.losses_dropped, loss);
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
            match rx.try_recv() {
                Ok(m) => {
                    self.returned += 1;
                    return Some(Got::Message(m));
                }
                Err(RecvError::Lost(loss)) => self.report(loss),
                Err(RecvError::Timeout) => return Some(Got::Nothing),
                Err(RecvError::Closed) => return Some(Got::Answer(Pending::End)),
                Err(RecvError::Fault(why)) => return Some(Got::Answer(Pending::Fault(why))),
                Err(RecvError::Decode(never)) => match never {},
                Err(_) => return Some(Got::Answer(Pending::Fault(UNKNOWN_OUTCOME))),
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
        let Self { mode: Mode::Blocking(rx), returned, losses, losses_dropped, .. } = self else {
            return None;
        };
        while out.len() < limit {
            match rx.try_recv() {
                Ok(m) => {
                    *returned += 1;
                    out.push(m);
                }
                Err(RecvError::Lost(loss)) => report(losses, losses_dropped, loss),
                Err(RecvError::Timeout) => break,
                Err(RecvError::Closed) => return Some(Some(Pending::End)),
                Err(RecvError::Fault(why)) => return Some(Some(Pending::Fault(why))),
                Err(RecvError::Decode(never)) => match never {},
                Err(_) => return Some(Some(Pending::Fault(UNKNOWN_OUTCOME))),
            }
        }
        Some(None)
    }
}
