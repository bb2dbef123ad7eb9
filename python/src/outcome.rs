//! One receive's outcome as the bindings act on it, for every receiving class (a subscription's
//! blocking and asyncio receives, a persistent subscription's), and the loss reports they keep
//! for `take_loss()`.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use shmlog::{Loss, RecvError, MAX_LOSSES};
use std::collections::VecDeque;
use std::convert::Infallible;

/// A receive outcome of a newer core than this binding knows (`RecvError` grows): said as a fault.
pub(crate) const UNKNOWN_OUTCOME: &str = "a receive outcome this build of the bindings does not know";

/// An answer said in place of a message: once, by the receive that meets it (or, if a batch met
/// it after messages, by the next receive).
#[derive(Clone, Copy)]
pub(crate) enum Pending {
    End,
    Fault(&'static str),
}

/// What one look at a receiver found.
pub(crate) enum Step {
    Message(Py<PyBytes>),
    /// Keep it for `take_loss()` and look again.
    Lost(Loss),
    Nothing,
    Answer(Pending),
    /// The journal could not be read (a persistent subscription's); nothing was taken.
    Journal(shmlog::Error),
}

impl Step {
    pub(crate) fn of(received: Result<Py<PyBytes>, RecvError<Infallible>>) -> Self {
        match received {
            Ok(m) => Self::Message(m),
            Err(RecvError::Lost(loss)) => Self::Lost(loss),
            Err(RecvError::Timeout) => Self::Nothing,
            Err(RecvError::Closed) => Self::Answer(Pending::End),
            Err(RecvError::Fault(why)) => Self::Answer(Pending::Fault(why)),
            Err(RecvError::Journal(e)) => Self::Journal(e),
            Err(RecvError::Decode(never)) => match never {},
            Err(_) => Self::Answer(Pending::Fault(UNKNOWN_OUTCOME)),
        }
    }

    /// [`Step::of`] a live subscription's receiver, which reads no journal.
    pub(crate) fn live(received: Result<Py<PyBytes>, RecvError<Infallible>>) -> Self {
        match Self::of(received) {
            Self::Journal(_) => Self::Answer(Pending::Fault(UNKNOWN_OUTCOME)),
            step => step,
        }
    }
}

/// Loss reports not taken yet: at most `MAX_LOSSES`, the oldest dropped (and counted) past that.
#[derive(Default)]
pub(crate) struct Losses {
    queue: VecDeque<Loss>,
    pub(crate) dropped: u64,
}

impl Losses {
    pub(crate) fn report(&mut self, loss: Loss) {
        if self.queue.len() >= MAX_LOSSES {
            self.queue.pop_front();
            self.dropped += 1;
        }
        self.queue.push_back(loss);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub(crate) fn take(&mut self) -> Option<Loss> {
        self.queue.pop_front()
    }
}
