//! A replay as an async `Stream` of whole typed messages (feature `async`): the live
//! [`crate::AsyncReceiver`]'s shape over a recording. Reading a segment never blocks for long (the
//! page cache, or one `pread` of at most 1 MiB); a replay that caught up with a recording still
//! being recorded is woken a millisecond later by the process's async waiter thread.

use super::replay::Replay;
use crate::api::assembler::FragmentAssembler;
use crate::api::async_rx::{waiter, Waiter};
use crate::api::channel::whole_messages;
use crate::api::codec::{Bytes, Codec};
use crate::error::Error;
use futures_core::Stream;
use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How long a caught-up replay waits before it looks for more of a growing recording.
const FOLLOW: Duration = Duration::from_millis(1);

/// Why an [`AsyncReplay`] item is not a message.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReplayError<E> {
    /// Reading the recording failed (a damaged segment, ...): the stream ends after this item.
    Journal(Error),
    /// A message did not decode; the stream goes on.
    Decode(E),
}

impl<E: fmt::Display> fmt::Display for ReplayError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Journal(e) => write!(f, "replay: {e}"),
            Self::Decode(e) => write!(f, "decode: {e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for ReplayError<E> {}

/// A [`Replay`] as a `Stream` of whole messages decoded by a [`Codec`]; ends when the recording
/// has stopped and all of it was delivered (or at the replay's `to` position).
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use shmlog::journal::{AsyncReplay, Replay};
/// use shmlog::Bytes;
/// let replay = AsyncReplay::new(Replay::builder("/var/lib/orders-journal", 0).open()?, Bytes)?;
/// // with futures::StreamExt or tokio_stream::StreamExt: while let Some(m) = replay.next().await { .. }
/// # let _ = replay; Ok(()) }
/// ```
#[derive(Debug)]
pub struct AsyncReplay<T = Vec<u8>, C: Codec<T> = Bytes> {
    replay: Replay,
    codec: C,
    assembler: FragmentAssembler,
    ready: VecDeque<Result<T, C::Error>>,
    failed: bool,
    waiter: &'static Waiter,
}

impl<T, C: Codec<T>> AsyncReplay<T, C> {
    /// Wraps `replay` (starting the process's async waiter thread if needed).
    pub fn new(replay: Replay, codec: C) -> Result<Self, Error> {
        Ok(Self {
            replay,
            codec,
            assembler: FragmentAssembler::new(()),
            ready: VecDeque::new(),
            failed: false,
            waiter: waiter()?,
        })
    }

    /// The replay back.
    pub fn into_inner(self) -> Replay {
        self.replay
    }

    /// Reads up to 64 fragments into `ready`.
    fn fill(&mut self) -> Result<usize, Error> {
        let Self { replay, codec, assembler, ready, .. } = self;
        replay.poll(whole_messages(codec, assembler, ready), 64)
    }
}

impl<T, C: Codec<T>> Stream for AsyncReplay<T, C>
where
    Self: Unpin,
{
    type Item = Result<T, ReplayError<C::Error>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(next) = this.ready.pop_front() {
                return Poll::Ready(Some(next.map_err(ReplayError::Decode)));
            }
            if this.failed {
                return Poll::Ready(None);
            }
            match this.fill() {
                Ok(0) => {}
                Ok(_) => continue,
                Err(e) => {
                    this.failed = true;
                    return Poll::Ready(Some(Err(ReplayError::Journal(e))));
                }
            }
            if this.replay.is_done() {
                return Poll::Ready(None);
            }
            this.waiter.wake_at(cx.waker().clone(), Instant::now() + FOLLOW);
            return Poll::Pending;
        }
    }
}
