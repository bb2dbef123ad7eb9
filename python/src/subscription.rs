//! `shmlog.Subscription`: a reader of a stream, blocking (GIL released, Ctrl-C honoured) or
//! asyncio (woken through the core's async waiter thread and a socket the event loop watches).

use crate::errors::{self, Closed, Fault};
use crate::util;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use shmlog::{
    Action, AsyncReceiver, Codec, Header, JoinAt, Loss, LossCause, Receiver, RecvError, Resume, Subscription,
    MAX_LOSSES,
};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

/// Messages as Python `bytes`, made straight from the log's payload (the one copy on receive).
/// Decoding runs where the receiver polls, which is always with the GIL held (polls never run
/// inside the waits that release it), so `attach` only counts the GIL. Counts what it decoded,
/// so that the subscription knows when the receiver's queue is empty.
#[derive(Clone, Debug, Default)]
pub struct PyBytesCodec {
    decoded: Arc<AtomicU64>,
}

impl Codec<Py<PyBytes>> for PyBytesCodec {
    type Error = Infallible;

    fn encode(&self, value: &Py<PyBytes>, out: &mut Vec<u8>) -> Result<(), Infallible> {
        Python::attach(|py| out.extend_from_slice(value.as_bytes(py)));
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<Py<PyBytes>, Infallible> {
        self.decoded.fetch_add(1, Ordering::Relaxed);
        Ok(Python::attach(|py| PyBytes::new(py, bytes).unbind()))
    }
}

type Rx = Receiver<Py<PyBytes>, PyBytesCodec>;
type AsyncRx = AsyncReceiver<Py<PyBytes>, PyBytesCodec>;

/// The receiver, as blocking calls or asyncio last used it.
enum Mode {
    Blocking(Rx),
    Async(AsyncRx),
}

/// Wakes an asyncio loop from the core's waiter thread without the GIL: one byte into a socket
/// whose other end the loop watches (`loop.add_reader`).
struct SocketWaker(UnixStream);

impl Wake for SocketWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Non-blocking: a full socket already holds a wake-up the loop has not read.
        let _ = (&self.0).write(&[1]);
    }
}

struct Inner {
    mode: Option<Mode>,
    /// Messages the receiver decoded into its queue, and messages taken from it: equal when the
    /// queue is empty, and the next receive polls the log.
    decoded: Arc<AtomicU64>,
    returned: u64,
    losses: VecDeque<Loss>,
    losses_dropped: u64,
    /// The loop's end of the wake-up socket, and the waker that writes to the other end.
    wake: Option<(UnixStream, Waker)>,
}

impl Inner {
    /// `true` when the receiver's queue is empty (its next receive polls the log).
    fn queue_empty(&self) -> bool {
        self.decoded.load(Ordering::Relaxed) == self.returned
    }

    fn report(&mut self, loss: Loss) {
        if self.losses.len() >= MAX_LOSSES {
            self.losses.pop_front();
            self.losses_dropped += 1;
        }
        self.losses.push_back(loss);
    }

    /// The receiver for blocking calls (taking it back from asyncio if it was there).
    fn blocking(&mut self) -> Option<&mut Rx> {
        if let Some(Mode::Async(_)) = self.mode {
            if let Some(Mode::Async(a)) = self.mode.take() {
                self.mode = Some(Mode::Blocking(a.into_inner()));
            }
        }
        match self.mode.as_mut() {
            Some(Mode::Blocking(rx)) => Some(rx),
            _ => None,
        }
    }
}

/// A reader of stream `name`: maps the publisher's log read-only and copies each message into a
/// `bytes` object. Joins the stream's publisher whenever it starts (before or after this), and
/// the next publisher's session once one closes.
///
/// One thread uses it at a time: a call from a second thread while a first one waits raises
/// `RuntimeError`.
#[pyclass(module = "shmlog._shmlog", name = "Subscription", subclass)]
pub struct PySubscription {
    inner: Mutex<Inner>,
    name: String,
}

fn join_at(join: &Bound<'_, PyAny>) -> PyResult<JoinAt> {
    if let Ok(s) = join.cast::<PyString>() {
        return match &*s.to_cow()? {
            "slowest" => Ok(JoinAt::Slowest),
            "latest" => Ok(JoinAt::Latest),
            "earliest" => Ok(JoinAt::Earliest),
            other => Err(PyValueError::new_err(format!(
                "join must be 'slowest', 'latest', 'earliest' or a stream position, not {other:?}"
            ))),
        };
    }
    if join.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err("join must be a str or an int position, not bool"));
    }
    match join.extract::<i64>() {
        Ok(p) if p >= 0 => Ok(JoinAt::Position(p)),
        Ok(p) => Err(PyValueError::new_err(format!("a join position must be >= 0, got {p}"))),
        Err(_) => Err(PyTypeError::new_err(
            "join must be 'slowest', 'latest', 'earliest' or an int stream position",
        )),
    }
}

impl PySubscription {
    fn lock(&self) -> PyResult<MutexGuard<'_, Inner>> {
        match self.inner.try_lock() {
            Ok(g) => Ok(g),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(PyRuntimeError::new_err(format!(
                "subscription {:?} is in use by another thread (one thread at a time)",
                self.name
            ))),
        }
    }

    fn closed_err(&self) -> PyErr {
        Closed::new_err(format!("subscription {:?} is closed", self.name))
    }

    fn stream_closed(&self) -> PyErr {
        Closed::new_err(format!(
            "stream {:?}: the session is closed (its publisher closed it or died) and everything it sent was read",
            self.name
        ))
    }

    /// Runs `f` on the subscription underneath.
    fn with_sub<R>(&self, f: impl FnOnce(&mut Subscription) -> R) -> PyResult<R> {
        let mut g = self.lock()?;
        match g.blocking() {
            Some(rx) => Ok(f(rx.subscription())),
            None => Err(self.closed_err()),
        }
    }

    /// The next message, waiting until `deadline` (`None`: forever) in GIL-free slices.
    fn next_message(&self, py: Python<'_>, deadline: Option<Instant>) -> PyResult<Option<Py<PyBytes>>> {
        let mut g = self.lock()?;
        self.next_in(py, &mut g, deadline)
    }

    fn next_in(
        &self,
        py: Python<'_>,
        inner: &mut Inner,
        deadline: Option<Instant>,
    ) -> PyResult<Option<Py<PyBytes>>> {
        loop {
            let empty = inner.queue_empty();
            let Some(rx) = inner.blocking() else { return Err(self.closed_err()) };
            if empty {
                self.check_fault(rx.subscription())?;
            }
            match rx.try_recv() {
                Ok(m) => {
                    inner.returned += 1;
                    return Ok(Some(m));
                }
                Err(RecvError::Lost(loss)) => {
                    inner.report(loss);
                    continue;
                }
                Err(RecvError::Closed) => return Err(self.stream_closed()),
                Err(RecvError::Fault(why)) => {
                    return Err(Fault::new_err(format!("stream {:?}: {why}", self.name)))
                }
                Err(RecvError::Decode(never)) => match never {},
                Err(RecvError::Timeout) => {}
            }
            let Some(slice) = util::slice(deadline) else { return Ok(None) };
            let sub = rx.subscription();
            py.detach(|| sub.wait_readable(slice));
            py.check_signals()?;
        }
    }

    /// Raises `Fault` if the next frame of the session is one the subscription cannot read.
    ///
    /// Looked at before every receive that polls the log (the receiver's queue is empty), with a
    /// poll that validates the next frame and leaves it (`Action::Abort`): at a fault the core's
    /// `Receiver::try_recv` would find the subscription readable (a fault is news to a wait) but
    /// nothing to deliver, and loop until the publisher is gone, ignoring its timeout and holding
    /// the GIL. The messages before the fault are delivered first.
    fn check_fault(&self, sub: &mut Subscription) -> PyResult<()> {
        sub.controlled_poll(|_: &[u8], _: &Header| Action::Abort, 1);
        match sub.fault() {
            Some(why) => Err(Fault::new_err(format!("stream {:?}: {why}", self.name))),
            None => Ok(()),
        }
    }
}

#[pymethods]
impl PySubscription {
    /// Subscribes to stream `name` in `dir` (default `shmlog.default_dir()`). `join`:
    /// where to start in a session already running: `'slowest'` (the slowest live reader's
    /// position, default), `'latest'`, `'earliest'`, or a stream position. `copy_payloads=True`
    /// for a publisher you do not trust (see the trust model in the README). `tethered=False`:
    /// the publisher never waits for this reader; when it laps the reader, the messages missed
    /// are reported (`take_loss()`, cause `'lapped'`) and reading goes on at `on_lapped`:
    /// `'oldest'` (the oldest message the log still holds, default) or `'live'`.
    #[new]
    #[pyo3(signature = (name, dir=None, *, join=None, liveness_interval=None, max_readers=None, copy_payloads=false, tethered=true, on_lapped="oldest"))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments, one parameter each
    fn new(
        py: Python<'_>,
        name: String,
        dir: Option<PathBuf>,
        join: Option<&Bound<'_, PyAny>>,
        liveness_interval: Option<f64>,
        max_readers: Option<i64>,
        copy_payloads: bool,
        tethered: bool,
        on_lapped: &str,
    ) -> PyResult<Self> {
        let resume = match on_lapped {
            "oldest" => Resume::Oldest,
            "live" => Resume::Live,
            other => {
                return Err(PyValueError::new_err(format!(
                    "on_lapped must be 'oldest' or 'live', not {other:?}"
                )))
            }
        };
        let mut b = Subscription::builder(name.clone())
            .copy_payloads(copy_payloads)
            .tethered(tethered)
            .on_lapped(resume);
        if let Some(dir) = dir {
            b = b.dir(dir);
        }
        if let Some(join) = join {
            b = b.join_at(join_at(join)?);
        }
        if let Some(l) = liveness_interval {
            b = b.liveness_interval(util::seconds_arg("liveness_interval", l, false)?);
        }
        if let Some(n) = max_readers {
            b = b.max_readers(util::positive("max_readers", n)?);
        }
        let sub = b.open().map_err(|e| errors::error(py, e))?;
        let codec = PyBytesCodec::default();
        let inner = Inner {
            decoded: Arc::clone(&codec.decoded),
            returned: 0,
            mode: Some(Mode::Blocking(Receiver::new(sub, codec))),
            losses: VecDeque::new(),
            losses_dropped: 0,
            wake: None,
        };
        Ok(Self { inner: Mutex::new(inner), name })
    }

    /// The next message as `bytes`, waiting at most `timeout` seconds (`None`: as long as it
    /// takes) without the GIL; `None` at the timeout. Raises `Closed` once the session is closed
    /// (publisher closed or died) and everything it sent was read; receiving again waits for the
    /// next publisher's session. Ctrl-C raises `KeyboardInterrupt` during the wait.
    #[pyo3(signature = (timeout=None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Py<PyBytes>>> {
        let deadline = match timeout {
            None => None,
            Some(t) => Some(util::deadline("timeout", Some(t))?.unwrap_or_else(far_future)),
        };
        self.next_message(py, deadline)
    }

    /// The next message if one is there now, else `None` (raises `Closed` like `recv`).
    fn try_recv(&self, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        self.next_message(py, Some(Instant::now()))
    }

    /// Calls `handler(message)` for each message there now, at most `limit`; returns how many.
    /// Never waits and never raises `Closed` (see `is_closed`); raises `Fault` when the next
    /// frame cannot be read and nothing was delivered. An exception from the handler
    /// propagates; the messages after it stay for the next call.
    #[pyo3(signature = (handler, limit=64))]
    fn poll(&self, py: Python<'_>, handler: &Bound<'_, PyAny>, limit: i64) -> PyResult<usize> {
        let limit = util::positive("limit", limit)?;
        if !handler.is_callable() {
            return Err(PyTypeError::new_err("handler must be callable: handler(message: bytes)"));
        }
        let mut delivered = 0;
        while delivered < limit {
            // Taken one at a time, so that the lock is not held while the handler runs (it may
            // use this subscription).
            let next = {
                let mut g = self.lock()?;
                let inner = &mut *g;
                let empty = inner.queue_empty();
                let Some(rx) = inner.blocking() else { return Err(self.closed_err()) };
                // A fault raises (as in `recv`) once the messages before it were delivered.
                if empty {
                    if let Err(fault) = self.check_fault(rx.subscription()) {
                        if delivered == 0 {
                            return Err(fault);
                        }
                        break;
                    }
                }
                match rx.try_recv() {
                    Ok(m) => {
                        inner.returned += 1;
                        m
                    }
                    Err(RecvError::Lost(loss)) => {
                        inner.report(loss);
                        continue;
                    }
                    Err(RecvError::Decode(never)) => match never {},
                    Err(RecvError::Fault(why)) => {
                        return Err(Fault::new_err(format!("stream {:?}: {why}", self.name)))
                    }
                    Err(RecvError::Closed | RecvError::Timeout) => break,
                }
            };
            delivered += 1;
            handler.call1((next.bind(py),))?;
        }
        Ok(delivered)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next message, waiting as long as it takes; the iteration ends when the session is
    /// closed.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        match self.next_message(py, None) {
            Err(e) if e.is_instance_of::<Closed>(py) && !self.is_closed_handle() => Ok(None),
            other => other,
        }
    }

    /// Waits until connected to a live publisher's session, at most `timeout` seconds; raises
    /// `Timeout` then.
    #[pyo3(signature = (timeout=None))]
    fn wait_connected(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let deadline = util::deadline("timeout", timeout)?;
        let mut g = self.lock()?;
        let Some(rx) = g.blocking() else { return Err(self.closed_err()) };
        let sub = rx.subscription();
        loop {
            if sub.is_connected() {
                return Ok(());
            }
            let Some(slice) = util::slice(deadline) else {
                return Err(errors::error(py, shmlog::Error::Timeout));
            };
            match py.detach(|| sub.wait_connected(slice)) {
                Ok(()) => return Ok(()),
                Err(shmlog::Error::Timeout) => py.check_signals()?,
                Err(e) => return Err(errors::error(py, e)),
            }
        }
    }

    /// `True` when the session read is over (its publisher closed it or died, noticed within the
    /// liveness interval) and everything it committed was read.
    #[getter]
    fn is_closed(&self) -> PyResult<bool> {
        self.with_sub(|s| s.is_closed())
    }

    /// `True` while reading a session whose publisher is alive and has not closed it.
    #[getter]
    fn is_connected(&self) -> PyResult<bool> {
        self.with_sub(|s| s.is_connected())
    }

    /// Stream position after the last message taken from the log (0 before joining). Messages
    /// are taken in batches: this can be ahead of the last one `recv` returned.
    #[getter]
    fn position(&self) -> PyResult<i64> {
        self.with_sub(|s| s.position())
    }

    /// Session id of the session read, if any.
    #[getter]
    fn session_id(&self) -> PyResult<Option<i32>> {
        self.with_sub(|s| s.session_id())
    }

    /// Where this subscription joined the session it reads, if it reads one.
    #[getter]
    fn join_position(&self) -> PyResult<Option<i64>> {
        self.with_sub(|s| s.join_position())
    }

    /// Why reading stopped, if it stopped at a fault (a corrupt frame, a misbehaving publisher).
    #[getter]
    fn fault(&self) -> PyResult<Option<&'static str>> {
        self.with_sub(|s| s.fault())
    }

    /// The oldest loss report not taken yet (messages this subscription knows it did not
    /// deliver), or `None`. A loss lies before the message received after it was reported.
    fn take_loss(&self) -> PyResult<Option<PyLoss>> {
        let mut g = self.lock()?;
        if g.losses.is_empty() {
            // Losses the subscription reported since the receiver last looked.
            if let Some(rx) = g.blocking() {
                if let Some(loss) = rx.subscription().take_loss() {
                    return Ok(Some(PyLoss(loss)));
                }
            }
        }
        Ok(g.losses.pop_front().map(PyLoss))
    }

    /// Loss reports dropped unread because more than 1024 were waiting.
    #[getter]
    fn losses_dropped(&self) -> PyResult<u64> {
        let mut g = self.lock()?;
        let own = g.losses_dropped;
        let core = g.blocking().map_or(0, |rx| rx.subscription().losses_dropped());
        Ok(own + core)
    }

    /// The stream's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// `True` once closed with `close()`.
    #[getter]
    fn closed(&self) -> bool {
        self.is_closed_handle()
    }

    /// Releases the subscription's reader slot (the publisher stops waiting for it). Closing
    /// twice does nothing.
    fn close(&self) -> PyResult<()> {
        let mut g = self.lock()?;
        g.mode = None;
        g.wake = None;
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = match self.inner.try_lock() {
            Ok(mut g) => match g.blocking() {
                Some(rx) => {
                    let s = rx.subscription();
                    match s.session_id() {
                        Some(id) => format!("session {id} at position {}", s.position()),
                        None => "waiting for a publisher".into(),
                    }
                }
                None => "closed".into(),
            },
            Err(_) => "busy".into(),
        };
        format!("<shmlog.Subscription {:?} {state}>", self.name)
    }

    /// asyncio plumbing (see `shmlog.Subscription.recv_async`): the file descriptor the event
    /// loop watches for wake-ups.
    fn _async_fd(&self) -> PyResult<i32> {
        let mut g = self.lock()?;
        if g.mode.is_none() {
            return Err(self.closed_err());
        }
        if g.wake.is_none() {
            let (ours, theirs) = UnixStream::pair().map_err(|e| errors::io_error("socketpair", e))?;
            ours.set_nonblocking(true).map_err(|e| errors::io_error("socketpair", e))?;
            theirs.set_nonblocking(true).map_err(|e| errors::io_error("socketpair", e))?;
            let waker = Waker::from(Arc::new(SocketWaker(theirs)));
            g.wake = Some((ours, waker));
        }
        Ok(g.wake.as_ref().map_or(-1, |(ours, _)| ours.as_raw_fd()))
    }

    /// asyncio plumbing: reads the wake-ups the socket holds.
    fn _drain_wakes(&self) -> PyResult<()> {
        let g = self.lock()?;
        if let Some((ours, _)) = &g.wake {
            let mut buf = [0u8; 64];
            while matches!((&*ours).read(&mut buf), Ok(n) if n > 0) {}
        }
        Ok(())
    }

    /// asyncio plumbing: the next message, or `None` if there is none yet (the waker then
    /// writes to the socket when the stream's doorbell rings or the liveness interval passes).
    ///
    /// What is there now is taken as by `try_recv` (so a fault raises `Fault`, as in `recv`);
    /// only when nothing is does the receiver go to the core's `AsyncReceiver`, whose poll hands
    /// the armed doorbell to the process's waiter thread. The next call takes it back.
    fn _poll_async(&self, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        let mut g = self.lock()?;
        let inner = &mut *g;
        let Some((_, waker)) = &inner.wake else {
            return Err(PyRuntimeError::new_err("_async_fd() must be called first"));
        };
        let waker = waker.clone();
        loop {
            if let Some(m) = self.next_in(py, inner, Some(Instant::now()))? {
                return Ok(Some(m));
            }
            let Some(Mode::Blocking(rx)) = inner.mode.take() else { return Err(self.closed_err()) };
            // On an error the receiver is gone with it: the subscription is closed.
            let mut a = AsyncReceiver::new(rx).map_err(|e| errors::error(py, e))?;
            let polled = std::pin::pin!(a.recv()).poll(&mut Context::from_waker(&waker));
            inner.mode = Some(Mode::Async(a));
            match polled {
                Poll::Pending | Poll::Ready(Err(RecvError::Timeout)) => return Ok(None),
                Poll::Ready(Ok(m)) => {
                    inner.returned += 1;
                    return Ok(Some(m));
                }
                Poll::Ready(Err(RecvError::Lost(loss))) => inner.report(loss),
                Poll::Ready(Err(RecvError::Closed)) => return Err(self.stream_closed()),
                Poll::Ready(Err(RecvError::Fault(why))) => {
                    return Err(Fault::new_err(format!("stream {:?}: {why}", self.name)))
                }
                Poll::Ready(Err(RecvError::Decode(never))) => match never {},
            }
        }
    }
}

impl PySubscription {
    fn is_closed_handle(&self) -> bool {
        match self.inner.try_lock() {
            Ok(g) => g.mode.is_none(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().mode.is_none(),
            Err(TryLockError::WouldBlock) => false,
        }
    }
}

/// A deadline no wait reaches (a timeout too long for the clock).
fn far_future() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(100 * 365 * 24 * 3600)
}

/// Messages a subscription did not deliver and knows it did not: a message whose start position
/// lies in `[from_, to)` of session `session_id` was not delivered.
#[pyclass(module = "shmlog._shmlog", name = "Loss", frozen)]
pub struct PyLoss(pub Loss);

#[pymethods]
impl PyLoss {
    /// The session whose messages were missed.
    #[getter]
    fn session_id(&self) -> i32 {
        self.0.session_id
    }

    /// Stream position of the first byte missed.
    #[getter]
    fn from_(&self) -> i64 {
        self.0.from
    }

    /// Position at which delivery resumed.
    #[getter]
    fn to(&self) -> i64 {
        self.0.to
    }

    /// Why: `'joined-late'`, `'sessions-missed'`, `'fault'` or `'lapped'` (an untethered
    /// subscription the publisher overtook).
    #[getter]
    fn cause(&self) -> &'static str {
        match self.0.cause {
            LossCause::JoinedLate => "joined-late",
            LossCause::SessionsMissed { .. } => "sessions-missed",
            LossCause::Fault => "fault",
            LossCause::Lapped => "lapped",
            _ => "other",
        }
    }

    /// For `'sessions-missed'`: how many whole sessions at most; else `None`.
    #[getter]
    fn sessions(&self) -> Option<u32> {
        match self.0.cause {
            LossCause::SessionsMissed { sessions } => Some(sessions),
            _ => None,
        }
    }

    fn __str__(&self) -> String {
        self.0.to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "<shmlog.Loss session {} [{}, {}) {}>",
            self.0.session_id,
            self.0.from,
            self.0.to,
            self.cause()
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyLoss>().is_ok_and(|o| o.get().0 == self.0)
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.0.hash(&mut h);
        h.finish()
    }
}
