//! A live subscription's blocking receives over the shared receiving state
//! (`crate::receive::Inner`): one message, or a batch, and the answer that stops them.

use crate::outcome::{Pending, Step};
use crate::receive::{self, Mode};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use shmlog::Subscription;

pub(super) type Inner = receive::Inner<Subscription>;

/// What one look at the receiver found.
pub(super) enum Got {
    Message(Py<PyBytes>),
    Nothing,
    Answer(Pending),
}

impl receive::Inner<Subscription> {
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
}
