//! An async receiver (feature `async`): a `futures_core::Stream` of messages that never blocks the
//! executor's threads. A task that finds nothing arms the stream's doorbell, re-checks, and hands
//! the bell to the process's one waiter thread, which sleeps on every registered bell at once
//! (`futex_waitv`) and wakes the tasks whose bell rang. Works with any executor (tokio, smol, ...).

use super::channel::{Receiver, RecvError};
use super::codec::{Bytes, Codec};
use crate::error::Error;
use crate::region::{MmapRegion, Region, RegionMut};
use crate::stream::doorbell::Doorbell;
use futures_core::Stream;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A [`Receiver`] as a `Stream`: yields each message (or a decode error) and ends when the session
/// is closed.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use futures_core::Stream;
/// use shmlog::{AsyncReceiver, Bytes, Receiver, Subscription};
/// let rx = AsyncReceiver::new(Receiver::new(Subscription::builder("orders").open()?, Bytes))?;
/// // with futures::StreamExt or tokio_stream::StreamExt: while let Some(m) = rx.next().await { .. }
/// # let _ = rx; Ok(()) }
/// ```
#[derive(Debug)]
pub struct AsyncReceiver<T = Vec<u8>, C: Codec<T> = Bytes> {
    rx: Receiver<T, C>,
    /// The stream's doorbell page, mapped for the waiter thread (which may outlive a poll).
    bell: Arc<Doorbell<MmapRegion>>,
    waiter: &'static Waiter,
}

impl<T, C: Codec<T>> AsyncReceiver<T, C> {
    /// Wraps `rx`; maps the stream's doorbell page once more, for the waiter thread (started
    /// with the first receiver of the process).
    pub fn new(mut rx: Receiver<T, C>) -> Result<Self, Error> {
        let bell = rx.subscription().map_doorbell()?;
        Ok(Self { rx, bell: Arc::new(bell), waiter: waiter()? })
    }

    /// The receiver back (e.g. to read on blocking).
    pub fn into_inner(self) -> Receiver<T, C> {
        self.rx
    }
}

impl<T, C: Codec<T>> Stream for AsyncReceiver<T, C>
where
    Self: Unpin,
{
    type Item = Result<T, C::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            match this.rx.try_recv() {
                Ok(value) => return Poll::Ready(Some(Ok(value))),
                Err(RecvError::Decode(e)) => return Poll::Ready(Some(Err(e))),
                Err(RecvError::Closed) => return Poll::Ready(None),
                Err(RecvError::Timeout) => {}
            }
            // The steps of a doorbell sleep, the sleep itself left to the waiter thread.
            let (_, off, seen) = this.bell.arm_for_writer();
            let exact = crate::sync::heavy_barrier();
            if this.rx.subscription().readable_now() {
                continue;
            }
            // Wake the task at the latest at its next liveness check (or soon, if the barrier
            // was refused): polls notice a dead publisher only when they run.
            let wait =
                if exact { this.rx.subscription().liveness_interval() } else { Duration::from_millis(1) };
            this.waiter.register(Sleeper {
                bell: Some(Arc::clone(&this.bell)),
                off,
                seen,
                waker: cx.waker().clone(),
                until: Instant::now() + wait,
            });
            return Poll::Pending;
        }
    }
}

/// A task waiting for a bell (or, without one, for its time to come).
#[derive(Debug)]
struct Sleeper {
    bell: Option<Arc<Doorbell<MmapRegion>>>,
    off: usize,
    seen: i32,
    waker: Waker,
    until: Instant,
}

/// The process's waiter thread: sleeps on every registered bell and on its own control word
/// (bumped by each registration so that it rebuilds its list).
#[derive(Debug)]
pub(crate) struct Waiter {
    sleepers: Mutex<Vec<Sleeper>>,
    control: MmapRegion,
}

/// The process's waiter, started by the first `AsyncReceiver` (an error, not a panic, if the
/// system refuses the page or the thread; the next receiver tries again).
pub(crate) fn waiter() -> Result<&'static Waiter, Error> {
    static WAITER: Mutex<Option<&'static Waiter>> = Mutex::new(None);
    let mut slot = WAITER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(w) = *slot {
        return Ok(w);
    }
    let here = "shmlog async waiter";
    let control = MmapRegion::anonymous(4096).map_err(|e| Error::io("map the control page of", here, e))?;
    let w: &'static Waiter = Box::leak(Box::new(Waiter { sleepers: Mutex::new(Vec::new()), control }));
    std::thread::Builder::new()
        .name("shmlog-async-waiter".into())
        .spawn(move || w.run())
        .map_err(|e| Error::io("start the thread of", here, e))?;
    *slot = Some(w);
    Ok(w)
}

impl Waiter {
    /// Wakes `waker` at `until` (a task with nothing to sleep on but time: a replay that caught
    /// up with a recording still being recorded).
    pub(crate) fn wake_at(&self, waker: Waker, until: Instant) {
        self.register(Sleeper { bell: None, off: 0, seen: 0, waker, until });
    }

    fn register(&self, sleeper: Sleeper) {
        self.sleepers.lock().unwrap_or_else(|e| e.into_inner()).push(sleeper);
        self.control.fetch_add_i32(0, 1);
        self.control.wake_i32(0, 1);
    }

    fn run(&self) {
        loop {
            let control = self.control.load_i32(0, crate::sync::Ordering::Acquire);
            // Wake the tasks whose bell rang or whose time is up; keep the others.
            let now = Instant::now();
            let mut next = now + Duration::from_secs(1);
            let mut sleepers = std::mem::take(&mut *self.sleepers.lock().unwrap_or_else(|e| e.into_inner()));
            sleepers.retain(|s| {
                let rang = s
                    .bell
                    .as_ref()
                    .is_some_and(|b| b.region().load_i32(s.off, crate::sync::Ordering::Acquire) != s.seen);
                if rang || now >= s.until {
                    s.waker.wake_by_ref();
                    return false;
                }
                next = next.min(s.until);
                true
            });
            let mut words: Vec<(&MmapRegion, usize, i32)> = vec![(&self.control, 0, control)];
            words
                .extend(sleepers.iter().filter_map(|s| s.bell.as_ref().map(|b| (b.region(), s.off, s.seen))));
            let timeout = next.saturating_duration_since(now);
            if crate::region::wait_any_i32(&words, timeout).is_err() {
                // No futex_waitv: look again every millisecond.
                self.control.wait_i32(0, control, timeout.min(Duration::from_millis(1)));
            }
            drop(words);
            self.sleepers.lock().unwrap_or_else(|e| e.into_inner()).extend(sleepers);
        }
    }
}
