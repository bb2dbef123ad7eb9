//! `shmlog.PersistentSubscription`: a durable named reader of a stream that falls back to the
//! journal when the publisher laps it (the core's `journal::PersistentSubscription`). Every
//! receive goes through the core's `Receiver` over it, as `shmlog.Subscription`'s do: the
//! position the name keeps is that of the last message handed to Python.

use crate::errors::{self, Kind};
use crate::handle::Handle;
use crate::outcome::{Pending, Step};
use crate::receive;
use crate::subscription::PyLoss;
use crate::util;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use shmlog::journal::{PersistentSubscription, Start};
use shmlog::Subscription;
use std::path::PathBuf;
use std::time::Instant;

type Inner = receive::Inner<PersistentSubscription>;

/// What the receiver has now that is not a loss (losses go to `take_loss`): an answer a batch
/// kept first; `None` if the receiver is gone.
fn look(inner: &mut Inner) -> Option<Step> {
    if let Some(p) = inner.pending.take() {
        return Some(Step::Answer(p));
    }
    loop {
        match Step::of(inner.blocking()?.try_recv()) {
            Step::Lost(loss) => inner.losses.report(loss),
            Step::Message(m) => {
                inner.returned += 1;
                return Some(Step::Message(m));
            }
            step => return Some(step),
        }
    }
}

/// Durable reader `name` of a stream, falling back to journal directory `journal`: it reads the
/// live stream untethered (it never holds the publisher); when the publisher laps it, it goes
/// back to the recording at the first message it missed and merges into the live stream again
/// once caught up, with no gap and no duplicate. Its position is kept on disk under `name`: a
/// process that opens the same name later (after a crash too) resumes where it stopped, and
/// retention keeps what it has not read. A loss (`take_loss()`) is only what the journal no
/// longer held (cause `'purged'`) or never held (`'not-recorded'`).
///
/// `stream` (default: `name`) in `dir` (default `shmlog.default_dir()`); `start`: where a name
/// that has read nothing yet begins, `'live'` (default) or `'earliest'` (the journal's oldest
/// message). It needs a recorder of the stream in `journal`.
#[pyclass(module = "shmlog._shmlog", name = "PersistentSubscription", subclass, frozen)]
pub struct PyPersistentSubscription {
    handle: Handle<Inner>,
    name: String,
}

impl PyPersistentSubscription {
    /// What a receive says for `answer` (a persistent subscription goes on with the next
    /// session: its end is never said).
    fn answer(&self, py: Python<'_>, answer: Pending) -> PyResult<()> {
        match answer {
            Pending::End => Ok(()),
            Pending::Fault(why) => Err(errors::new_err(
                py,
                Kind::Fault,
                format!("persistent subscription {:?}: {why}", self.name),
            )),
        }
    }

    /// The next message there now (one read of the journal or the live stream at most), or
    /// `None`. Losses go to `take_loss`; a journal's error is raised (nothing was taken).
    fn take(&self, py: Python<'_>, inner: &mut Inner) -> PyResult<Option<Py<PyBytes>>> {
        match look(inner) {
            None => Err(self.handle.closed_error(py)),
            Some(Step::Message(m)) => Ok(Some(m)),
            Some(Step::Journal(e)) => Err(errors::error(py, e)),
            Some(Step::Answer(p)) => self.answer(py, p).map(|()| None),
            Some(Step::Nothing | Step::Lost(_)) => Ok(None),
        }
    }

    /// The next message, waiting until `deadline` (`None`: forever) in GIL-free slices.
    fn next_message(&self, py: Python<'_>, deadline: Option<Instant>) -> PyResult<Option<Py<PyBytes>>> {
        self.handle.with(py, |inner| loop {
            if let Some(m) = self.take(py, inner)? {
                return Ok(Some(m));
            }
            let Some(slice) = util::slice(deadline) else { return Ok(None) };
            let Some(rx) = inner.blocking() else { return Err(self.handle.closed_error(py)) };
            let sub = rx.source();
            py.detach(|| sub.wait_readable(slice));
            py.check_signals()?;
            self.handle.check_open(py)?;
        })
    }
}

#[pymethods]
impl PyPersistentSubscription {
    #[new]
    #[pyo3(signature = (journal, name, *, stream=None, dir=None, start="live", liveness_interval=None))]
    fn new(
        py: Python<'_>,
        journal: PathBuf,
        name: String,
        stream: Option<String>,
        dir: Option<PathBuf>,
        start: &str,
        liveness_interval: Option<f64>,
    ) -> PyResult<Self> {
        let start = match start {
            "live" => Start::Live,
            "earliest" => Start::Earliest,
            other => {
                return Err(errors::invalid(py, format!("start must be 'live' or 'earliest', not {other:?}")))
            }
        };
        let mut live = Subscription::builder(stream.unwrap_or_else(|| name.clone()));
        if let Some(dir) = dir {
            live = live.dir(dir);
        }
        if let Some(l) = liveness_interval {
            live = live.liveness_interval(util::setting_seconds(py, "liveness_interval", l)?);
        }
        let b = PersistentSubscription::builder(journal, name.clone()).live(live).start(start);
        let sub = py.detach(|| b.open()).map_err(|e| errors::error(py, e))?;
        Ok(Self { handle: Handle::new(Inner::new(sub), format!("persistent subscription {name:?}")), name })
    }

    /// The next message as `bytes`, waiting at most `timeout` seconds (`None`: as long as it
    /// takes) without the GIL; `None` at the timeout. Ctrl-C raises `KeyboardInterrupt` during
    /// the wait. A failed read of the journal raises its error (`IoError`, `CorruptRecording`,
    /// ...); receiving again tries again.
    #[pyo3(signature = (timeout=None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Py<PyBytes>>> {
        self.next_message(py, util::deadline("timeout", timeout)?)
    }

    /// The next message if one is there now, else `None`.
    fn try_recv(&self, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        self.next_message(py, Some(Instant::now()))
    }

    /// Calls `handler(message)` for each message there now, at most `limit`; returns how many.
    /// Never waits. An exception from the handler propagates; the messages after it stay for the
    /// next call (and the name's position stays before them).
    #[pyo3(signature = (handler, limit=64))]
    fn poll(&self, py: Python<'_>, handler: &Bound<'_, PyAny>, limit: i64) -> PyResult<usize> {
        let limit = util::positive(py, "limit", limit)?;
        if !handler.is_callable() {
            return Err(PyTypeError::new_err("handler must be callable: handler(message: bytes)"));
        }
        let mut delivered = 0;
        while delivered < limit {
            // One at a time: the lock is not held while the handler runs.
            let Some(next) = self.handle.with(py, |inner| self.take(py, inner))? else { break };
            delivered += 1;
            handler.call1((next.bind(py),))?;
        }
        Ok(delivered)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next message, waiting as long as it takes: a persistent subscription goes on across
    /// sessions, so the iteration ends only when the object is closed from another thread.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        match self.next_message(py, None) {
            Err(e) if errors::is(py, &e, Kind::Closed) && self.handle.is_closed() => Ok(None),
            other => other,
        }
    }

    /// The oldest loss report not taken yet (what the journal no longer held, or never held),
    /// or `None`. A loss lies before the message received after it was reported.
    fn take_loss(&self, py: Python<'_>) -> PyResult<Option<PyLoss>> {
        self.handle.with(py, |inner| {
            if inner.losses.is_empty() {
                if let Some(loss) = inner.source().and_then(|s| s.take_loss()) {
                    return Ok(Some(PyLoss(loss)));
                }
            }
            Ok(inner.losses.take().map(PyLoss))
        })
    }

    /// Loss reports dropped unread because more than 1024 were waiting.
    #[getter]
    fn losses_dropped(&self, py: Python<'_>) -> PyResult<u64> {
        self.handle.with(py, |inner| Ok(inner.losses.dropped))
    }

    /// The durable position: `(recording id, position after the last message handed out)`, or
    /// `None` before the first message the journal holds.
    #[getter]
    fn position(&self, py: Python<'_>) -> PyResult<Option<(u32, i64)>> {
        self.handle.with(py, |inner| {
            inner.source().map(|s| s.position()).ok_or_else(|| self.handle.closed_error(py))
        })
    }

    /// `True` while reading the live stream, `False` while catching up from the journal.
    #[getter]
    fn is_live(&self, py: Python<'_>) -> PyResult<bool> {
        self.handle
            .with(py, |inner| inner.source().map(|s| s.is_live()).ok_or_else(|| self.handle.closed_error(py)))
    }

    /// The durable name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// `True` once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.handle.is_closed()
    }

    /// Writes the durable position to the disk and waits (it survives this process's crash
    /// without; a power loss only with).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.handle.with(py, |inner| match inner.source() {
            Some(s) => s.sync().map_err(|e| errors::error(py, e)),
            None => Err(self.handle.closed_error(py)),
        })
    }

    /// Closes and removes the durable name: retention no longer keeps anything for it.
    fn unregister(&self, py: Python<'_>) -> PyResult<()> {
        let mut result = Ok(());
        self.handle.close(py, |inner| {
            if let Some(s) = inner.into_source() {
                result = s.unregister();
            }
        })?;
        result.map_err(|e| errors::error(py, e))
    }

    /// Releases the live subscription and the name (which keeps its position: a later process
    /// resumes there). Closing twice does nothing.
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
            Some(mut g) => match g.as_mut().and_then(Inner::source) {
                Some(s) => {
                    let at = s
                        .position()
                        .map_or("nothing read".into(), |(id, p)| format!("recording {id} at {p}"));
                    format!("{}, {at}", if s.is_live() { "live" } else { "catching up" })
                }
                None => "closed".into(),
            },
            None => "busy".into(),
        };
        format!("<shmlog.PersistentSubscription {:?} ({state})>", self.name)
    }

    /// asyncio plumbing (see `shmlog.PersistentSubscription.recv_async`): the file descriptor
    /// the event loop watches for wake-ups.
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
    /// yet: then the descriptor becomes readable when the live stream's doorbell rings, the
    /// journal may hold more (a nap while catching up) or the liveness interval passes. A
    /// journal's error raises as `recv` raises it (met after messages, the next call meets it).
    /// The switch to the core's `AsyncReceiver` is `Subscription`'s (`crate::receive`).
    fn _poll_async<'py>(&self, py: Python<'py>, limit: usize) -> PyResult<Bound<'py, PyList>> {
        let mut out = Vec::new();
        let limit = limit.max(1);
        self.handle.with(py, |inner| {
            let take_now = |inner: &mut Inner, out: &mut Vec<_>| {
                // While the receiver is blocking's. After messages, an answer is kept for the
                // next receive and a journal's error left to it (nothing was taken).
                while out.len() < limit {
                    match look(inner) {
                        Some(Step::Message(m)) => {
                            out.push(m);
                            continue;
                        }
                        Some(Step::Answer(p)) if !out.is_empty() => inner.pending = Some(p),
                        Some(Step::Answer(p)) => self.answer(py, p)?,
                        Some(Step::Journal(e)) if out.is_empty() => return Err(errors::error(py, e)),
                        None if out.is_empty() => return Err(self.handle.closed_error(py)),
                        // Nothing now, or what the next receive meets again.
                        _ => {}
                    }
                    break;
                }
                Ok(())
            };
            match inner.poll_async(py, &mut out, limit, take_now, || self.handle.closed_error(py))? {
                Some(answer) => self.answer(py, answer),
                None => Ok(()),
            }
        })?;
        PyList::new(py, out)
    }
}
