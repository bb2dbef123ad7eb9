//! Async receive and send (feature `async`), for any executor (tokio, smol, ...), never blocking
//! its threads. A task that finds nothing to receive (or no room to send) arms the stream's
//! doorbell, looks once more, and hands the armed bell to the process's one waiter thread, which
//! sleeps on every registered bell at once (`stream::doorbell::sleep`, the same sleep every other
//! way of waiting uses) and wakes the tasks whose bell rang.

use super::channel::{Receiver, RecvError, SendError, Sender};
use super::codec::{Bytes, Codec};
use super::publication::Publication;
use super::publish::Publish;
use crate::error::{Error, OfferError};
use crate::region::{MmapRegion, Region, RegionMut};
use crate::stream::doorbell::{self, Armed, Doorbell, WakeBudget};
use futures_core::Stream;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A [`Receiver`] for async code: [`AsyncReceiver::recv`] awaits the next message, and the
/// receiver is also a `futures_core::Stream` of them that ends when the session is closed.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use shmlog::{AsyncReceiver, Bytes, Receiver, RecvError, Subscription};
/// let mut rx = AsyncReceiver::new(Receiver::new(Subscription::builder("orders").open()?, Bytes))?;
/// loop {
///     match rx.recv().await {
///         Ok(message) => println!("{} bytes", message.len()),
///         Err(RecvError::Lost(loss)) => eprintln!("missed {loss}"),
///         Err(RecvError::Closed) => break,
///         Err(e) => eprintln!("{e}"),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AsyncReceiver<T = Vec<u8>, C: Codec<T> = Bytes> {
    rx: Receiver<T, C>,
    /// The stream's doorbell page, mapped for the waiter thread (which may outlive a poll).
    bell: Arc<Doorbell<MmapRegion>>,
    waiter: &'static Waiter,
    /// The bell handed to the waiter by the last poll that found nothing.
    armed: Option<Armed>,
    budget: WakeBudget,
}

impl<T, C: Codec<T>> AsyncReceiver<T, C> {
    /// Wraps `rx`; maps the stream's doorbell page once more, for the waiter thread (started
    /// with the first async receiver or sender of the process).
    pub fn new(mut rx: Receiver<T, C>) -> Result<Self, Error> {
        let bell = rx.subscription().map_doorbell()?;
        Ok(Self { rx, bell: Arc::new(bell), waiter: waiter()?, armed: None, budget: WakeBudget::default() })
    }

    /// The next message: `Err(RecvError::Lost)` first if messages were missed before it (once
    /// per loss), `Err(RecvError::Closed)` once the session is closed and everything it sent was
    /// received, once per session (a new publisher's session is joined by itself: receiving again
    /// waits for it).
    pub async fn recv(&mut self) -> Result<T, RecvError<C::Error>> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The receiver back (e.g. to read on blocking).
    pub fn into_inner(self) -> Receiver<T, C> {
        self.rx
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, RecvError<C::Error>>> {
        // Woken by our bell (not by the executor for another reason) and nothing for us: a
        // wake-up without news, which the budget bounds.
        let bell_woke = self.armed.take().is_some_and(|a| self.bell.rang(a));
        let mut first = true;
        loop {
            match self.rx.try_recv() {
                Err(RecvError::Timeout) => {}
                other => {
                    if bell_woke {
                        self.budget.after_wake(true);
                    }
                    return Poll::Ready(other);
                }
            }
            if std::mem::take(&mut first) && bell_woke {
                if let Some(nap) = self.budget.after_wake(false) {
                    self.waiter.wake_at(cx.waker().clone(), Instant::now() + nap);
                    return Poll::Pending;
                }
            }
            // The steps of a doorbell sleep, the sleep itself left to the waiter thread. Wake
            // the task at the latest at its next liveness check (or soon, if the barrier was
            // refused): polls notice a dead publisher only when they run.
            let sub = self.rx.subscription();
            let interval = sub.liveness_interval();
            let Some((armed, wait)) =
                doorbell::prepare_sleep(&self.bell, Doorbell::arm_readers, || sub.readable(), interval)
            else {
                continue;
            };
            self.armed = Some(armed);
            self.waiter.register(Sleeper {
                bell: Some((Arc::clone(&self.bell), armed)),
                waker: cx.waker().clone(),
                until: Instant::now() + wait,
            });
            return Poll::Pending;
        }
    }
}

/// Each message (or a decode error, a loss report, a fault: [`RecvError::Decode`],
/// [`RecvError::Lost`], [`RecvError::Fault`]) until the session is closed. Polled again after its
/// end, the stream goes on with the next session.
impl<T, C: Codec<T>> Stream for AsyncReceiver<T, C>
where
    Self: Unpin,
{
    type Item = Result<T, RecvError<C::Error>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_recv(cx).map(|r| match r {
            Err(RecvError::Closed) => None,
            other => Some(other),
        })
    }
}

/// A [`Sender`] for async code: [`AsyncSender::send`] awaits room while the stream is
/// back-pressured instead of blocking the executor's thread or spinning. The publisher's doorbell
/// is rung by a reader that moves only while somebody waits on it, so waiting costs readers
/// nothing otherwise.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use shmlog::{AsyncSender, Bytes, Publication, Sender};
/// let mut tx = AsyncSender::new(Sender::new(Publication::builder("orders").create()?, Bytes))?;
/// tx.send(&b"buy 100 @ 42".to_vec()).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AsyncSender<T, C: Codec<T> = Bytes, P: Publish = Publication> {
    tx: Sender<T, C, P>,
    /// The stream's doorbell page, mapped for the waiter thread.
    bell: Arc<Doorbell<MmapRegion>>,
    waiter: &'static Waiter,
    encoded: Vec<u8>,
}

impl<T, C: Codec<T>, P: Publish> AsyncSender<T, C, P> {
    /// Wraps `tx`; maps the stream's doorbell page once more, for the waiter thread.
    pub fn new(mut tx: Sender<T, C, P>) -> Result<Self, Error> {
        let bell = tx.publication().map_doorbell()?;
        Ok(Self { tx, bell: Arc::new(bell), waiter: waiter()?, encoded: Vec::new() })
    }

    /// Offers `value`, awaiting room while back-pressured (readers that hold the publisher back
    /// wake it when they move; dead ones are swept within the liveness interval). Other errors,
    /// `NotConnected` among them, return at once. Cancel-safe: a send dropped while it waits
    /// has appended nothing.
    pub async fn send(&mut self, value: &T) -> Result<i64, SendError<C::Error>> {
        self.encoded.clear();
        self.tx.codec().encode(value, &mut self.encoded).map_err(SendError::Encode)?;
        let Self { tx, bell, waiter, encoded } = self;
        poll_fn(|cx| loop {
            let publication = tx.publication();
            match publication.offer(encoded) {
                Err(OfferError::BackPressured) => {}
                other => return Poll::Ready(other.map_err(SendError::Offer)),
            }
            let interval = publication.liveness_interval();
            let Some((armed, wait)) =
                doorbell::prepare_sleep(bell, Doorbell::arm_writer, || publication.has_room(), interval)
            else {
                continue;
            };
            waiter.register(Sleeper {
                bell: Some((Arc::clone(bell), armed)),
                waker: cx.waker().clone(),
                until: Instant::now() + wait,
            });
            return Poll::Pending;
        })
        .await
    }

    /// The sender back.
    pub fn into_inner(self) -> Sender<T, C, P> {
        self.tx
    }
}

/// A task waiting for a bell (or, without one, for its time to come).
#[derive(Debug)]
struct Sleeper {
    bell: Option<(Arc<Doorbell<MmapRegion>>, Armed)>,
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

/// The process's waiter, started by the first async receiver or sender (an error, not a panic,
/// if the system refuses the page or the thread; the next one tries again).
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
    /// up with a recording still being recorded, a receiver napping).
    pub(crate) fn wake_at(&self, waker: Waker, until: Instant) {
        self.register(Sleeper { bell: None, waker, until });
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
                let rang = s.bell.as_ref().is_some_and(|(bell, armed)| bell.rang(*armed));
                if rang || now >= s.until {
                    s.waker.wake_by_ref();
                    return false;
                }
                next = next.min(s.until);
                true
            });
            let bells: Vec<(&Doorbell<MmapRegion>, Armed)> = sleepers
                .iter()
                .filter_map(|s| s.bell.as_ref().map(|(bell, armed)| (&**bell, *armed)))
                .collect();
            // The one sleep of `stream::doorbell`: counted among each readers' bell's sleepers,
            // and a ring passed on to the others if the writer's single wake-up reached us.
            doorbell::sleep(&bells, Some((&self.control, 0, control)), next.saturating_duration_since(now));
            drop(bells);
            self.sleepers.lock().unwrap_or_else(|e| e.into_inner()).extend(sleepers);
        }
    }
}
