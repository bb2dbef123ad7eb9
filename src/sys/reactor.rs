//! A descriptor watched by the tokio runtime's reactor (feature `tokio`): the stream's wake FIFO,
//! so that a write to it wakes the runtime's own thread, with no thread of ours in between.

use std::fs::File;
use std::io;
use std::task::{Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A file registered with a tokio runtime's reactor, for read readiness (edge-triggered).
#[derive(Debug)]
pub(crate) struct TokioFd(AsyncFd<File>);

impl TokioFd {
    /// Registers `file` with the reactor of the tokio runtime the calling thread runs in; `None`
    /// outside one, or in one built without its IO driver (tokio has no way to ask, and panics
    /// when a descriptor is registered there: the panic is caught; the panic hook still prints it).
    pub(crate) fn in_current_runtime(file: File) -> Option<io::Result<Self>> {
        tokio::runtime::Handle::try_current().ok()?;
        let register = std::panic::AssertUnwindSafe(move || {
            // SAFETY: the `AsyncFd` owns `file`, whose descriptor therefore stays open and refers
            // to the same open file description until the `AsyncFd` is dropped; `File::as_raw_fd`
            // always returns that descriptor.
            unsafe { AsyncFd::register_with_interest(file, Interest::READABLE) }
        });
        let fd = std::panic::catch_unwind(register).ok()?;
        Some(fd.map(TokioFd).map_err(|e| e.into_parts().1))
    }

    /// Forgets every event reported so far and stores `cx`'s waker for the next one: after
    /// `Ok`, any write to the file wakes the task. An error means the reactor is gone (its
    /// runtime shut down): the caller sleeps another way.
    pub(crate) fn await_next_event(&self, cx: &mut Context<'_>) -> io::Result<()> {
        loop {
            match self.0.poll_read_ready(cx) {
                Poll::Ready(Ok(mut seen)) => seen.clear_ready(),
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(()),
            }
        }
    }
}
