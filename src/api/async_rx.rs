//! Async receive and send (feature `async`), for any executor (tokio, smol, ...), never blocking
//! its threads. A task that finds nothing to receive (or no room to send) takes the first steps
//! of a doorbell sleep (`stream::doorbell`: arm, barrier, a last look) and then sleeps one of two
//! ways:
//!
//! - **in a reactor** (`api::reactor`: a tokio runtime's with the feature `tokio`, async-io's with
//!   `async-io`, or a caller's event loop through a [`WakeFd`]): the task counts itself among the
//!   bell's reactor sleepers and awaits the stream's wake FIFO, which whoever rings the bell
//!   writes when it sees one counted. The write wakes the thread that waits in the reactor: one
//!   hop from a commit to the task, as for a blocking reader. With many such sleepers, the ringer
//!   wakes one waiter thread that keeps the door (below) and leaves the FIFO write to it.
//! - **through the process's waiter thread** (any executor): the task hands the armed bell to the
//!   thread, which sleeps on every registered bell at once (`doorbell::sleep`, the sleep every
//!   blocking call uses) and wakes the tasks whose bell rang: two hops.
//!
//! The waiter thread also keeps the tasks' liveness timers (a reactor sleeper is woken at its
//! next liveness check even if nothing rings), and, for every stream with reactor sleepers in
//! this process, keeps the door: it sleeps on the readers' bell uncounted, so that a publisher
//! with many reactor sleepers wakes one thread and not all of them (`doorbell::keep_door`).

use super::channel::{Receiver, RecvError, SendError, Sender};
use super::codec::{Bytes, Codec};
use super::publication::Publication;
use super::publish::Publish;
use super::reactor::{Reactor, WakeFd};
use super::source::{MessageSource, SleepOn};
use super::subscription::Subscription;
use crate::error::{Error, OfferError};
use crate::region::{MmapRegion, Region, RegionMut};
use crate::stream::doorbell::{self, Armed, Doorbell, ReactorArmed, WakeBudget};
use futures_core::Stream;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A [`Receiver`] for async code: [`AsyncReceiver::recv`] awaits the next message, and the
/// receiver is also a `futures_core::Stream` of them that ends when the session is closed. Over
/// a `journal::PersistentSubscription` it sleeps on the live stream's doorbell while merged, and
/// naps through the waiter thread while catching up from a recording being written.
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
pub struct AsyncReceiver<T = Vec<u8>, C: Codec<T> = Bytes, S: MessageSource = Subscription> {
    rx: Receiver<T, C, S>,
    /// The doorbell sleep of the source's live subscription, and which one it was
    /// ([`SleepOn::Bell`]'s generation); `None` before the source first read live.
    sleep: Option<(u64, Sleeping)>,
    waiter: &'static Waiter,
    /// The caller's event loop's descriptor, if it sleeps through one ([`Self::with_wake_fd`]).
    wake: Option<WakeFd>,
    budget: WakeBudget,
}

impl<T, C: Codec<T>, S: MessageSource> AsyncReceiver<T, C, S> {
    /// Wraps `rx`; maps the stream's doorbell page once more, for the waiter thread (started
    /// with the first async receiver or sender of the process).
    ///
    /// With the feature `tokio`, called inside a tokio runtime, the receiver awaits the stream's
    /// wake FIFO in the runtime's reactor (one hop from a commit to the task) if the runtime has
    /// its IO driver (`enable_io`, or `enable_all`: on in `#[tokio::main]` and `Runtime::new`),
    /// and the receiver stays with that runtime. Otherwise, with the feature `async-io`, it
    /// awaits the FIFO in async-io's reactor (smol's): one hop when the executor's thread waits
    /// in that reactor itself (`async_io::block_on`, `smol::block_on`), two (async-io's thread,
    /// then the executor's) under any other executor. Elsewhere (a plain `block_on` without
    /// `async-io`, a runtime without its IO driver, whose refusal tokio prints as a caught panic,
    /// or a FIFO that cannot be made) it sleeps through the waiter thread: two hops.
    pub fn new(rx: Receiver<T, C, S>) -> Result<Self, Error> {
        Self::sleeping_in(rx, None)
    }

    /// Wraps `rx` for an event loop that watches `wake`'s descriptor itself (see [`WakeFd`]):
    /// poll [`AsyncReceiver::recv`] with [`WakeFd::waker`], and again when the descriptor is
    /// readable. Where the reactor path is off (see [`AsyncReceiver::new`]) the waiter thread
    /// wakes the task, through the same descriptor.
    pub fn with_wake_fd(rx: Receiver<T, C, S>, wake: &WakeFd) -> Result<Self, Error> {
        Self::sleeping_in(rx, Some(wake.share()))
    }

    fn sleeping_in(mut rx: Receiver<T, C, S>, wake: Option<WakeFd>) -> Result<Self, Error> {
        let waiter = waiter()?;
        let sleep = match rx.source().sleep_on() {
            SleepOn::Bell { sub, generation } => {
                Some((generation, Sleeping::new(sub.map_doorbell()?, true, wake.as_ref())?))
            }
            SleepOn::Nap(_) => None,
        };
        Ok(Self { rx, sleep, waiter, wake, budget: WakeBudget::default() })
    }

    /// The next message: `Err(RecvError::Lost)` first if messages were missed before it (once
    /// per loss), `Err(RecvError::Closed)` once the session is closed and everything it sent was
    /// received, once per session (a new publisher's session is joined by itself: receiving again
    /// waits for it).
    pub async fn recv(&mut self) -> Result<T, RecvError<C::Error>> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The receiver back (e.g. to read on blocking).
    pub fn into_inner(self) -> Receiver<T, C, S> {
        let Self { rx, sleep, .. } = self;
        drop(sleep);
        rx
    }

    /// The source underneath (a persistent subscription's position, ...).
    pub fn source(&mut self) -> &mut S {
        self.rx.source()
    }

    /// `true` if the receiver awaits the stream in a runtime's reactor (rather than through the
    /// waiter thread).
    pub fn in_reactor(&self) -> bool {
        self.sleep.as_ref().is_some_and(|(_, s)| s.in_reactor())
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, RecvError<C::Error>>> {
        // Woken by our bell (not by the executor for another reason) and nothing for us: a
        // wake-up without news, which the budget bounds.
        let bell_woke = self.sleep.as_mut().is_some_and(|(_, s)| s.woke());
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
                if let (Some(nap), Some((_, sleep))) = (self.budget.after_wake(false), &mut self.sleep) {
                    sleep.nap(cx, nap);
                    return Poll::Pending;
                }
            }
            let Self { rx, sleep, waiter, wake, .. } = self;
            let (sub, generation) = match rx.source().sleep_on() {
                SleepOn::Bell { sub, generation } => (sub, generation),
                SleepOn::Nap(Duration::ZERO) => {
                    // More is there, but not as whole messages yet: yield, then look again.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                SleepOn::Nap(nap) => {
                    waiter.wake_at(cx.waker().clone(), Instant::now() + nap);
                    return Poll::Pending;
                }
            };
            // Wake the task at the latest at its next liveness check (or soon, if the barrier was
            // refused): polls notice a dead publisher only when they run.
            let interval = sub.liveness_interval();
            if sleep.as_ref().is_none_or(|(g, _)| *g != generation) {
                // Another live subscription of the source (its stream's file may be a new one).
                *sleep = None;
                match sub.map_doorbell().and_then(|bell| Sleeping::new(bell, true, wake.as_ref())) {
                    Ok(s) => *sleep = Some((generation, s)),
                    Err(_) => {
                        // No page for the bell now: look again at the next liveness check.
                        waiter.wake_at(cx.waker().clone(), Instant::now() + interval);
                        return Poll::Pending;
                    }
                }
            }
            let Some((_, sleep)) = sleep else { unreachable!("set above") };
            if sleep.prepare(cx, Doorbell::arm_readers, || sub.readable(), interval) {
                return Poll::Pending;
            }
        }
    }
}

/// Each message (or a decode error, a loss report, a fault: [`RecvError::Decode`],
/// [`RecvError::Lost`], [`RecvError::Fault`]) until the session is closed. Polled again after its
/// end, the stream goes on with the next session.
impl<T, C: Codec<T>, S: MessageSource> Stream for AsyncReceiver<T, C, S>
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
    sleep: Sleeping,
    encoded: Vec<u8>,
}

impl<T, C: Codec<T>, P: Publish> AsyncSender<T, C, P> {
    /// Wraps `tx`; maps the stream's doorbell page once more, for the waiter thread. Awaits room
    /// in a tokio runtime's reactor or in async-io's, as [`AsyncReceiver::new`] says.
    pub fn new(tx: Sender<T, C, P>) -> Result<Self, Error> {
        Self::sleeping_in(tx, None)
    }

    /// Wraps `tx` for an event loop that watches `wake`'s descriptor (see
    /// [`AsyncReceiver::with_wake_fd`]).
    pub fn with_wake_fd(tx: Sender<T, C, P>, wake: &WakeFd) -> Result<Self, Error> {
        Self::sleeping_in(tx, Some(wake))
    }

    fn sleeping_in(mut tx: Sender<T, C, P>, wake: Option<&WakeFd>) -> Result<Self, Error> {
        let bell = tx.publication().map_doorbell()?;
        Ok(Self { tx, sleep: Sleeping::new(bell, false, wake)?, encoded: Vec::new() })
    }

    /// Offers `value`, awaiting room while back-pressured (readers that hold the publisher back
    /// wake it when they move; dead ones are swept within the liveness interval). Other errors,
    /// `NotConnected` among them, return at once. Cancel-safe: a send dropped while it waits
    /// has appended nothing.
    pub async fn send(&mut self, value: &T) -> Result<i64, SendError<C::Error>> {
        self.encoded.clear();
        self.tx.codec().encode(value, &mut self.encoded).map_err(SendError::Encode)?;
        let Self { tx, sleep, encoded } = self;
        poll_fn(|cx| loop {
            sleep.woke();
            let publication = tx.publication();
            match publication.offer(encoded) {
                Err(OfferError::BackPressured) => {}
                other => return Poll::Ready(other.map_err(SendError::Offer)),
            }
            let interval = publication.liveness_interval();
            if sleep.prepare(cx, Doorbell::arm_writer, || publication.has_room(), interval) {
                return Poll::Pending;
            }
        })
        .await
    }

    /// The sender back.
    pub fn into_inner(self) -> Sender<T, C, P> {
        let Self { tx, sleep, .. } = self;
        drop(sleep);
        tx
    }

    /// `true` if the sender awaits room in a runtime's reactor (rather than through the waiter
    /// thread).
    pub fn in_reactor(&self) -> bool {
        self.sleep.in_reactor()
    }
}

/// How one async receiver or sender sleeps: its view of the doorbell page, its registration
/// with a reactor (if any), its liveness timer, and the sleep it is in.
#[derive(Debug)]
struct Sleeping {
    /// The stream's doorbell page, mapped for the waiter thread (which may outlive a poll).
    bell: Arc<Doorbell<MmapRegion>>,
    waiter: &'static Waiter,
    /// The stream's wake FIFO in a reactor.
    reactor: Option<Reactor>,
    /// Keeps the door of the readers' bell while this reactor sleeper lives.
    door: Option<DoorKey>,
    timer: TimerKey,
    asleep: Option<Asleep>,
}

/// The sleep a task is in, until it runs again.
#[derive(Clone, Copy, Debug)]
enum Asleep {
    /// Its armed bell handed to the waiter thread.
    Thread(Armed),
    /// Counted among the bell's reactor sleepers, awaiting the wake FIFO.
    Reactor(ReactorArmed),
}

impl Sleeping {
    /// `wake`: the caller's event loop waits for the FIFO through it (else the runtime's
    /// reactor, if any: [`Reactor::for_bell`]).
    fn new(bell: Doorbell<MmapRegion>, reader: bool, wake: Option<&WakeFd>) -> Result<Self, Error> {
        let waiter = waiter()?;
        let bell = Arc::new(bell);
        let reactor = Reactor::for_bell(&bell, wake);
        let door = (reactor.is_some() && reader).then(|| waiter.keep_door(&bell));
        Ok(Self { timer: waiter.timer(), bell, waiter, reactor, door, asleep: None })
    }

    fn in_reactor(&self) -> bool {
        self.reactor.is_some()
    }

    /// The task runs again: ends the sleep it was in. `true` if its bell rang meanwhile.
    fn woke(&mut self) -> bool {
        match self.asleep.take() {
            Some(Asleep::Thread(armed)) => self.bell.rang(armed),
            Some(Asleep::Reactor(armed)) => doorbell::finish_reactor_sleep(&self.bell, armed),
            None => false,
        }
    }

    /// Wakes the task in `nap` (a wake budget spent), without the bell.
    fn nap(&mut self, cx: &Context<'_>, nap: Duration) {
        self.waiter.set_timer(self.timer, cx.waker(), Instant::now() + nap);
    }

    /// The steps of a doorbell sleep, the sleep itself left to the reactor or the waiter thread.
    /// `true` if the task is to return `Pending`; `false` if what it waits for may be there (look
    /// again).
    fn prepare(
        &mut self,
        cx: &Context<'_>,
        arm: impl FnOnce(&Doorbell<MmapRegion>) -> Armed,
        ready: impl FnOnce() -> bool,
        interval: Duration,
    ) -> bool {
        if let Some(reactor) = &self.reactor {
            // Interest first: a FIFO write after the count below is an event we see.
            if reactor.await_next_event(&mut Context::from_waker(cx.waker())).is_ok() {
                let Some((armed, wait)) = doorbell::prepare_reactor_sleep(&self.bell, arm, ready, interval)
                else {
                    return false;
                };
                self.asleep = Some(Asleep::Reactor(armed));
                self.waiter.set_timer(self.timer, cx.waker(), Instant::now() + wait);
                return true;
            }
            // The runtime is gone: the waiter thread from now on.
            self.reactor = None;
            self.door = None;
        }
        let Some((armed, wait)) = doorbell::prepare_sleep(&self.bell, arm, ready, interval) else {
            return false;
        };
        self.asleep = Some(Asleep::Thread(armed));
        self.waiter.register(Sleeper {
            bell: Some((Arc::clone(&self.bell), armed)),
            waker: cx.waker().clone(),
            until: Instant::now() + wait,
        });
        true
    }
}

impl Drop for Sleeping {
    fn drop(&mut self) {
        // A reactor sleeper dropped asleep is counted out (no ringer writes the FIFO for it).
        self.woke();
        self.waiter.drop_timer(self.timer);
    }
}

/// A task waiting for a bell (or, without one, for its time to come).
#[derive(Debug)]
struct Sleeper {
    bell: Option<(Arc<Doorbell<MmapRegion>>, Armed)>,
    waker: Waker,
    until: Instant,
}

/// A liveness timer of the waiter's (see [`Waiter::timer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TimerKey(usize);

/// A door the waiter keeps (see [`Waiter::keep_door`]).
#[derive(Debug)]
struct DoorKey {
    waiter: &'static Waiter,
    id: u64,
}

impl Drop for DoorKey {
    fn drop(&mut self) {
        let mut state = self.waiter.lock();
        state.doors.retain(|d| d.id != self.id);
    }
}

/// A readers' bell the waiter sleeps on for the reactor sleepers of its process.
#[derive(Debug)]
struct Door {
    id: u64,
    bell: Arc<Doorbell<MmapRegion>>,
}

/// What the waiter thread keeps, under its lock.
#[derive(Debug, Default)]
struct WaiterState {
    sleepers: Vec<Sleeper>,
    /// Timers by key: when, and whom to wake (`None`: free, or not set).
    timers: Vec<Option<(Option<Instant>, Option<Waker>)>>,
    doors: Vec<Door>,
    next_door: u64,
    /// When the thread's current sleep ends at the latest (a timer set earlier interrupts it).
    sleeps_until: Option<Instant>,
}

/// The process's waiter thread: sleeps on every registered bell, every kept door and its own
/// control word (bumped to make it look again), until the earliest timer.
#[derive(Debug)]
pub(crate) struct Waiter {
    state: Mutex<WaiterState>,
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
    let w: &'static Waiter = Box::leak(Box::new(Waiter { state: Mutex::default(), control }));
    std::thread::Builder::new()
        .name("shmlog-async-waiter".into())
        .spawn(move || w.run())
        .map_err(|e| Error::io("start the thread of", here, e))?;
    *slot = Some(w);
    Ok(w)
}

impl Waiter {
    fn lock(&self) -> std::sync::MutexGuard<'_, WaiterState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the thread look again (its list or its timers changed).
    fn interrupt(&self) {
        self.control.fetch_add_i32(0, 1);
        self.control.wake_i32(0, 1);
    }

    /// Wakes `waker` at `until` (a task with nothing to sleep on but time: a replay that caught
    /// up with a recording still being recorded, a receiver napping).
    pub(crate) fn wake_at(&self, waker: Waker, until: Instant) {
        self.register(Sleeper { bell: None, waker, until });
    }

    fn register(&self, sleeper: Sleeper) {
        self.lock().sleepers.push(sleeper);
        self.interrupt();
    }

    /// A timer of one's own, set again at every sleep without waking the thread unless it is due
    /// before the thread's sleep ends.
    fn timer(&self) -> TimerKey {
        let mut state = self.lock();
        let free = state.timers.iter().position(Option::is_none);
        let key = free.unwrap_or(state.timers.len());
        if free.is_none() {
            state.timers.push(None);
        }
        state.timers[key] = Some((None, None));
        TimerKey(key)
    }

    /// Wakes `waker` at `at` (replacing what the timer held).
    fn set_timer(&self, key: TimerKey, waker: &Waker, at: Instant) {
        let mut state = self.lock();
        let Some(Some((when, held))) = state.timers.get_mut(key.0) else { return };
        *when = Some(at);
        if !held.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *held = Some(waker.clone());
        }
        let interrupt = state.sleeps_until.is_none_or(|end| at < end);
        drop(state);
        if interrupt {
            self.interrupt();
        }
    }

    fn drop_timer(&self, key: TimerKey) {
        if let Some(slot) = self.lock().timers.get_mut(key.0) {
            *slot = None;
        }
    }

    /// Keeps the door of `bell`'s readers' bell until the key is dropped. Neither this nor the
    /// key's drop interrupts the thread: it takes the change at its next wake-up (at the latest
    /// the earliest liveness timer, which a new sleeper's interrupts if it is the earliest), and
    /// a door it does not keep yet costs nothing but a publisher's FIFO write (a ring that woke no
    /// thread writes the FIFO itself). So a receiver made for every wait (the Python bindings')
    /// does not wake the thread for every message.
    fn keep_door(&'static self, bell: &Arc<Doorbell<MmapRegion>>) -> DoorKey {
        let mut state = self.lock();
        let id = state.next_door;
        state.next_door += 1;
        state.doors.push(Door { id, bell: Arc::clone(bell) });
        DoorKey { waiter: self, id }
    }

    fn run(&self) {
        let mut wake = Vec::new();
        loop {
            let (control, sleepers, doors, until) = {
                let mut state = self.lock();
                let control = self.control.load_i32(0, crate::sync::Ordering::Acquire);
                let now = Instant::now();
                let mut next = now + Duration::from_secs(1);
                // Wake the tasks whose bell rang or whose time is up; keep the others.
                let mut sleepers = std::mem::take(&mut state.sleepers);
                sleepers.retain(|s| {
                    let rang = s.bell.as_ref().is_some_and(|(bell, armed)| bell.rang(*armed));
                    if rang || now >= s.until {
                        wake.push(s.waker.clone());
                        return false;
                    }
                    next = next.min(s.until);
                    true
                });
                for (at, waker) in state.timers.iter_mut().flatten() {
                    match *at {
                        Some(t) if t <= now => {
                            *at = None;
                            wake.extend(waker.take());
                        }
                        Some(t) => next = next.min(t),
                        None => {}
                    }
                }
                // Each door's bell as it stands now: a ring after this wakes us.
                let doors: Vec<(Arc<Doorbell<MmapRegion>>, Armed)> =
                    state.doors.iter().map(|d| (Arc::clone(&d.bell), doorbell::door(&d.bell))).collect();
                state.sleeps_until = Some(next);
                (control, sleepers, doors, next)
            };
            wake.drain(..).for_each(Waker::wake);
            let bells: Vec<(&Doorbell<MmapRegion>, Armed)> = sleepers
                .iter()
                .filter_map(|s| s.bell.as_ref().map(|(bell, armed)| (&**bell, *armed)))
                .collect();
            let mut words = vec![(&self.control, 0, control)];
            words.extend(doors.iter().map(|(bell, door)| bell.word(*door)));
            // The one sleep of `stream::doorbell`: counted among each readers' bell's sleepers,
            // and a ring passed on to the others if the writer's single wake-up reached us.
            doorbell::sleep(&bells, &words, until.saturating_duration_since(Instant::now()));
            // A door that rang: pass the ring on to the reactor sleepers (the writer left the
            // FIFO write to us).
            for (bell, door) in &doors {
                doorbell::keep_door(bell, *door);
            }
            drop(bells);
            let mut state = self.lock();
            state.sleeps_until = None;
            state.sleepers.extend(sleepers);
        }
    }
}
