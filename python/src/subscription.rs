//! `shmlog.Subscription`: a reader of a stream, blocking (GIL released, Ctrl-C honoured), in
//! batches, or asyncio (woken through the core's async waiter thread and a socket the event loop
//! watches); and `shmlog.wait_any` over several.
//!
//! Every receive goes through the core's `Receiver`, which owns the rules of a stream's sessions
//! (losses in order with the messages, the end of a session reported once, the next session
//! joined by itself): the bindings only turn its answers into Python's shapes. The one thing they
//! keep is an answer a batch met after it had messages to return (the end of a session, a
//! fault): the batch returns its messages, and the next receive reports it.

mod loss;
mod receive;
mod wait;

pub(crate) use loss::PyLoss;
pub(crate) use wait::wait_any;

use crate::errors::{self, Kind};
use crate::handle::Handle;
use crate::outcome::Pending;
use crate::util;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use receive::{Got, Inner};
use shmlog::{JoinAt, Resume, Subscription};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A reader of stream `name`: maps the publisher's log read-only and copies each message into a
/// `bytes` object. It is a reader from the moment it is made: a publisher that starts (before or
/// after it) counts it, and every message of the session is there for it. When a session ends
/// (its publisher closed it or died), a receive says so once (`recv` raises `Closed`, iteration
/// ends); receiving again waits for the next publisher's session and goes on with it.
///
/// One thread uses it at a time: a call from a second thread while a first one waits raises
/// `RuntimeError`. A subscription made before `os.fork()` raises `UsedAfterFork` in the child.
#[pyclass(module = "shmlog._shmlog", name = "Subscription", subclass, frozen)]
pub struct PySubscription {
    handle: Handle<Inner>,
    name: String,
}

fn join_at(py: Python<'_>, join: &Bound<'_, PyAny>) -> PyResult<JoinAt> {
    if let Ok(s) = join.cast::<PyString>() {
        return match &*s.to_cow()? {
            "slowest" => Ok(JoinAt::Slowest),
            "latest" => Ok(JoinAt::Latest),
            "earliest" => Ok(JoinAt::Earliest),
            other => Err(errors::invalid(
                py,
                format!("join must be 'slowest', 'latest', 'earliest' or a stream position, not {other:?}"),
            )),
        };
    }
    if join.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err("join must be a str or an int position, not bool"));
    }
    match join.extract::<i64>() {
        Ok(p) if p >= 0 => Ok(JoinAt::Position(p)),
        Ok(p) => Err(errors::invalid(py, format!("a join position must be >= 0, got {p}"))),
        Err(_) => Err(PyTypeError::new_err(
            "join must be 'slowest', 'latest', 'earliest' or an int stream position",
        )),
    }
}

impl PySubscription {
    fn answer(&self, py: Python<'_>, answer: Pending) -> PyErr {
        match answer {
            Pending::End => errors::new_err(
                py,
                Kind::Closed,
                format!(
                    "stream {:?}: the session is over (its publisher closed it or died) and \
                     everything it sent was read; receiving again waits for the next session",
                    self.name
                ),
            ),
            Pending::Fault(why) => errors::new_err(py, Kind::Fault, format!("stream {:?}: {why}", self.name)),
        }
    }

    /// Runs `f` on the subscription underneath.
    fn with_sub<R>(&self, py: Python<'_>, f: impl FnOnce(&mut Subscription) -> R) -> PyResult<R> {
        self.handle.with(py, |inner| match inner.blocking() {
            Some(rx) => Ok(f(rx.subscription())),
            None => Err(self.handle.closed_error(py)),
        })
    }

    /// Sleeps (without the GIL) until the subscription is readable or `slice` passes, then looks
    /// at Python's signals and at a close from another thread.
    fn wait_slice(&self, py: Python<'_>, inner: &mut Inner, slice: Duration) -> PyResult<()> {
        let Some(rx) = inner.blocking() else { return Err(self.handle.closed_error(py)) };
        let sub = rx.subscription();
        py.detach(|| sub.wait_readable(slice));
        py.check_signals()?;
        self.handle.check_open(py)
    }

    /// The next message, waiting until `deadline` (`None`: forever) in GIL-free slices.
    fn next_message(&self, py: Python<'_>, deadline: Option<Instant>) -> PyResult<Option<Py<PyBytes>>> {
        self.handle.with(py, |inner| loop {
            match inner.take() {
                Some(Got::Message(m)) => return Ok(Some(m)),
                Some(Got::Answer(a)) => return Err(self.answer(py, a)),
                Some(Got::Nothing) => {}
                None => return Err(self.handle.closed_error(py)),
            }
            let Some(slice) = util::slice(deadline) else { return Ok(None) };
            self.wait_slice(py, inner, slice)?;
        })
    }

    /// Up to `limit` messages there now into `out`; an answer met after some is kept for the
    /// next receive, one met first raises.
    fn take_many(
        &self,
        py: Python<'_>,
        inner: &mut Inner,
        out: &mut Vec<Py<PyBytes>>,
        limit: usize,
    ) -> PyResult<()> {
        match inner.take_batch(out, limit) {
            None => Err(self.handle.closed_error(py)),
            Some(None) => Ok(()),
            Some(Some(a)) if out.is_empty() => Err(self.answer(py, a)),
            Some(Some(a)) => {
                inner.pending = Some(a);
                Ok(())
            }
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
    /// `'oldest'` (the oldest message the log still holds, default) or `'live'`. Settings out of
    /// range raise `InvalidConfig` (a `ValueError`).
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
                return Err(errors::invalid(
                    py,
                    format!("on_lapped must be 'oldest' or 'live', not {other:?}"),
                ))
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
            b = b.join_at(join_at(py, join)?);
        }
        if let Some(l) = liveness_interval {
            b = b.liveness_interval(util::setting_seconds(py, "liveness_interval", l)?);
        }
        if let Some(n) = max_readers {
            b = b.max_readers(util::positive(py, "max_readers", n)?);
        }
        let sub = b.open().map_err(|e| errors::error(py, e))?;
        let inner = Inner::new(sub);
        Ok(Self { handle: Handle::new(inner, format!("subscription {name:?}")), name })
    }

    /// The next message as `bytes`, waiting at most `timeout` seconds (`None`: as long as it
    /// takes) without the GIL; `None` at the timeout. Raises `Closed` (an `EOFError`) once when
    /// the session is over (its publisher closed it or died) and everything it sent was read;
    /// receiving again waits for the next publisher's session and goes on with it. Ctrl-C
    /// raises `KeyboardInterrupt` during the wait.
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

    /// The messages there now, at most `limit`, as a list of `bytes`: one call into the
    /// extension for the whole batch. If there are none, waits for the first at most `timeout`
    /// seconds (`None`: as long as it takes; `0`: not at all) and returns `[]` at the timeout.
    /// Raises `Closed` like `recv` when the session is over and nothing is left (the end of a
    /// session met after some messages is raised by the next receive).
    #[pyo3(signature = (limit=1024, timeout=None))]
    fn recv_many<'py>(
        &self,
        py: Python<'py>,
        limit: i64,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let limit = util::positive(py, "limit", limit)?;
        let deadline = match timeout {
            None => None,
            Some(t) => Some(util::deadline("timeout", Some(t))?.unwrap_or_else(far_future)),
        };
        let mut out = Vec::new();
        self.handle.with(py, |inner| loop {
            self.take_many(py, inner, &mut out, limit)?;
            if !out.is_empty() {
                return Ok(());
            }
            let Some(slice) = util::slice(deadline) else { return Ok(()) };
            self.wait_slice(py, inner, slice)?;
        })?;
        PyList::new(py, out)
    }

    /// Calls `handler(message)` for each message there now, at most `limit`; returns how many.
    /// Never waits. Raises `Closed` like `try_recv` when the session is over and nothing was
    /// delivered, and `Fault` when the next frame cannot be read and nothing was delivered. An
    /// exception from the handler propagates; the messages after it stay for the next call.
    #[pyo3(signature = (handler, limit=64))]
    fn poll(&self, py: Python<'_>, handler: &Bound<'_, PyAny>, limit: i64) -> PyResult<usize> {
        let limit = util::positive(py, "limit", limit)?;
        if !handler.is_callable() {
            return Err(PyTypeError::new_err("handler must be callable: handler(message: bytes)"));
        }
        let mut delivered = 0;
        while delivered < limit {
            // Taken one at a time, so that the lock is not held while the handler runs (it may
            // use this subscription).
            let next = self.handle.with(py, |inner| match inner.take() {
                Some(Got::Message(m)) => Ok(Some(m)),
                Some(Got::Nothing) => Ok(None),
                Some(Got::Answer(a)) if delivered == 0 => Err(self.answer(py, a)),
                Some(Got::Answer(a)) => {
                    inner.pending = Some(a);
                    Ok(None)
                }
                None => Err(self.handle.closed_error(py)),
            })?;
            let Some(next) = next else { break };
            delivered += 1;
            handler.call1((next.bind(py),))?;
        }
        Ok(delivered)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next message, waiting as long as it takes; the iteration ends when the session is
    /// over. Iterating again waits for the next session.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        match self.next_message(py, None) {
            Err(e) if errors::is(py, &e, Kind::Closed) && !self.handle.is_closed() => Ok(None),
            other => other,
        }
    }

    /// Waits until connected to a live publisher's session, at most `timeout` seconds; raises
    /// `Timeout` (a `TimeoutError`) then.
    #[pyo3(signature = (timeout=None))]
    fn wait_connected(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let deadline = util::deadline("timeout", timeout)?;
        self.handle.with(py, |inner| {
            let Some(rx) = inner.blocking() else { return Err(self.handle.closed_error(py)) };
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
                    Err(shmlog::Error::Timeout) => {
                        py.check_signals()?;
                        self.handle.check_open(py)?;
                    }
                    Err(e) => return Err(errors::error(py, e)),
                }
            }
        })
    }

    /// asyncio plumbing (see `shmlog.Subscription.wait_connected_async`): `True` if connected to
    /// a live publisher's session now, after one look for a new one (never waits).
    fn _connected_now(&self, py: Python<'_>) -> PyResult<bool> {
        self.with_sub(py, |s| {
            if s.is_connected() {
                return true;
            }
            s.wait_readable(Duration::ZERO);
            s.is_connected()
        })
    }

    /// `True` while reading a session whose publisher is alive and has not closed it.
    #[getter]
    fn is_connected(&self, py: Python<'_>) -> PyResult<bool> {
        self.with_sub(py, |s| s.is_connected())
    }

    /// Stream position after the last message taken from the log (0 before joining). Messages
    /// are taken in batches: this can be ahead of the last one `recv` returned.
    #[getter]
    fn position(&self, py: Python<'_>) -> PyResult<i64> {
        self.with_sub(py, |s| s.position())
    }

    /// Session id of the session read, if any.
    #[getter]
    fn session_id(&self, py: Python<'_>) -> PyResult<Option<i32>> {
        self.with_sub(py, |s| s.session_id())
    }

    /// Where this subscription joined the session it reads, if it reads one.
    #[getter]
    fn join_position(&self, py: Python<'_>) -> PyResult<Option<i64>> {
        self.with_sub(py, |s| s.join_position())
    }

    /// Why reading stopped, if it stopped at a fault (a corrupt frame, a misbehaving publisher).
    #[getter]
    fn fault(&self, py: Python<'_>) -> PyResult<Option<&'static str>> {
        self.with_sub(py, |s| s.fault())
    }

    /// The oldest loss report not taken yet (messages this subscription knows it did not
    /// deliver), or `None`. A loss lies before the message received after it was reported.
    fn take_loss(&self, py: Python<'_>) -> PyResult<Option<PyLoss>> {
        self.handle.with(py, |inner| {
            if inner.losses.is_empty() {
                // Losses the subscription reported since the receiver last looked.
                if let Some(rx) = inner.blocking() {
                    if let Some(loss) = rx.subscription().take_loss() {
                        return Ok(Some(PyLoss(loss)));
                    }
                }
            }
            Ok(inner.losses.take().map(PyLoss))
        })
    }

    /// Loss reports dropped unread because more than 1024 were waiting.
    #[getter]
    fn losses_dropped(&self, py: Python<'_>) -> PyResult<u64> {
        self.handle.with(py, |inner| {
            let own = inner.losses.dropped;
            let core = inner.blocking().map_or(0, |rx| rx.subscription().losses_dropped());
            Ok(own + core)
        })
    }

    /// The stream's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// `True` once closed (with `close()`, its `with` block, or at exit). The end of a session
    /// is not this: it is an event (`Closed` raised once, an iteration that ends), after which
    /// the subscription goes on with the next session.
    #[getter]
    fn closed(&self) -> bool {
        self.handle.is_closed()
    }

    /// Releases the subscription's reader slot (the publisher stops waiting for it). Closing
    /// twice does nothing. From another thread, a blocking receive raises `Closed` within 50 ms
    /// and the close goes on. In a child made by `os.fork()` it only lets go of the parent's
    /// subscription (which goes on).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.handle.close(py, drop)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = match self.handle.peek() {
            Some(_) if self.handle.forked() => "of the parent process (forked)".into(),
            Some(mut g) => match g.as_mut().and_then(Inner::blocking) {
                Some(rx) => {
                    let s = rx.subscription();
                    match s.session_id() {
                        Some(id) => format!("session {id} at position {}", s.position()),
                        None => "waiting for a publisher".into(),
                    }
                }
                None => "closed".into(),
            },
            None => "busy".into(),
        };
        format!("<shmlog.Subscription {:?} {state}>", self.name)
    }

    /// asyncio plumbing (see `shmlog.Subscription.recv_async`): the file descriptor the event
    /// loop watches for wake-ups.
    fn _async_fd(&self, py: Python<'_>) -> PyResult<i32> {
        self.handle.with(py, |inner| inner.wake.fd(py))
    }

    /// asyncio plumbing: takes the wake-ups so far (before a poll).
    fn _drain_wakes(&self, py: Python<'_>) -> PyResult<()> {
        self.handle.with(py, |inner| {
            inner.wake.drain();
            Ok(())
        })
    }

    /// asyncio plumbing: the messages there now (at most `limit`), or `[]` if there are none
    /// yet: then the descriptor becomes readable when the stream's doorbell rings (its wake FIFO
    /// is in it) or the liveness interval passes.
    ///
    /// What is there now is taken as by `recv_many` (so the end of a session raises `Closed`, a
    /// fault `Fault`); only when nothing is does the receiver go to the core's `AsyncReceiver`
    /// (`crate::receive::Inner::poll_async`, shared with `PersistentSubscription`).
    fn _poll_async<'py>(&self, py: Python<'py>, limit: usize) -> PyResult<Bound<'py, PyList>> {
        let mut out = Vec::new();
        let limit = limit.max(1);
        self.handle.with(py, |inner| {
            let take_now = |inner: &mut Inner, out: &mut Vec<_>| self.take_many(py, inner, out, limit);
            match inner.poll_async(py, &mut out, limit, take_now, || self.handle.closed_error(py))? {
                Some(answer) => Err(self.answer(py, answer)),
                None => Ok(()),
            }
        })?;
        PyList::new(py, out)
    }
}

/// A deadline no wait reaches (a timeout too long for the clock).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}
