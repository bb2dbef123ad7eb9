//! `shmlog.Publication`: the single writer of a stream, blocking or asyncio.

use crate::errors;
use crate::handle::Handle;
use crate::util::{self, with_bytes, AsyncWake, PyBytesCodec};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PySequence, PyTuple};
use shmlog::{AsyncSender, OfferError, Publication, SendError, Sender};
use std::future::Future;
use std::path::PathBuf;
use std::task::{Context, Poll};
use std::time::Instant;

type AsyncTx = AsyncSender<Py<PyBytes>, PyBytesCodec>;

/// The publication, as blocking calls or an async send last used it.
enum Mode {
    Blocking(Publication),
    /// While an async send awaits room: the core's `AsyncSender` hands the publisher's doorbell to
    /// the process's waiter thread.
    Async(AsyncTx),
    /// Lost with an error of the switch to async (the system refused a page or a thread).
    Gone,
}

struct Inner {
    mode: Mode,
    /// The descriptor asyncio sends wake the loop through (made by the first).
    wake: AsyncWake,
}

impl Inner {
    /// The publication for blocking calls (taking it back from an async send if it was there).
    #[inline]
    fn blocking(&mut self) -> Option<&mut Publication> {
        if let Mode::Async(_) = self.mode {
            if let Mode::Async(a) = std::mem::replace(&mut self.mode, Mode::Gone) {
                self.mode = Mode::Blocking(a.into_inner().into_publication());
            }
        }
        match &mut self.mode {
            Mode::Blocking(p) => Some(p),
            _ => None,
        }
    }
}

/// The single writer of stream `name`: creates its log under `dir` (default
/// `shmlog.default_dir()`: `$SHMLOG_DIR`, else `/dev/shm/shmlog-<uid>`) and appends messages to it.
///
/// One thread uses it at a time: a call from a second thread while a first one waits raises
/// `RuntimeError`. Closing it (or leaving its `with` block, or the interpreter exiting) ends the
/// stream: readers read what was committed, then see it closed. A publication made before
/// `os.fork()` raises `UsedAfterFork` in the child.
#[pyclass(module = "shmlog._shmlog", name = "Publication", subclass, frozen)]
pub struct PyPublication {
    handle: Handle<Inner>,
    name: String,
}

impl PyPublication {
    #[inline]
    fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&mut Publication) -> PyResult<R>) -> PyResult<R> {
        self.handle.with(py, |inner| match inner.blocking() {
            Some(p) => f(p),
            None => Err(self.handle.closed_error(py)),
        })
    }
}

/// How long `offer_many` may wait while back-pressured: not at all, until a deadline, forever.
enum Patience {
    None,
    Until(Option<Instant>),
}

/// Appends `messages` in order; returns how many. Back pressure waits as `patience` allows, then
/// ends the batch; another offer error raises if nothing was appended, else ends the batch (the
/// next call meets it again). Ctrl-C and a close from another thread raise.
fn offer_each(
    py: Python<'_>,
    p: &mut Publication,
    handle: &Handle<Inner>,
    messages: &Bound<'_, PyAny>,
    patience: Patience,
) -> PyResult<usize> {
    let list = messages.cast::<PyList>().ok();
    let tuple = messages.cast::<PyTuple>().ok();
    let seq = messages.cast::<PySequence>().map_err(|_| {
        PyTypeError::new_err("messages must be a sequence (list, tuple) of bytes-like objects")
    })?;
    let len = seq.len()?;
    let mut done = 0;
    while done < len {
        let item = match (list, tuple) {
            (Some(l), _) => l.get_item(done)?,
            (_, Some(t)) => t.get_item(done)?,
            _ => seq.get_item(done)?,
        };
        let offered = with_bytes(&item, |bytes| -> PyResult<Result<i64, OfferError>> {
            loop {
                match p.offer(bytes) {
                    Err(OfferError::BackPressured) => {}
                    other => return Ok(other),
                }
                let Patience::Until(deadline) = patience else { return Ok(Err(OfferError::BackPressured)) };
                let Some(slice) = util::slice(deadline) else { return Ok(Err(OfferError::BackPressured)) };
                match py.detach(|| p.offer_blocking(bytes, slice)) {
                    Err(OfferError::BackPressured) => {
                        py.check_signals()?;
                        handle.check_open(py)?;
                    }
                    other => return Ok(other),
                }
            }
        })??;
        match offered {
            Ok(_) => done += 1,
            Err(_) if done > 0 => break,
            Err(e) => return Err(errors::offer_error(py, e)),
        }
    }
    Ok(done)
}

#[pymethods]
impl PyPublication {
    /// Creates stream `name`'s log in `dir`. `term_length` (bytes, a power of two, default
    /// 16 MiB) bounds how far ahead of the slowest reader the publisher may run;
    /// `liveness_interval` (seconds, default 0.1) is how soon readers notice a dead publisher and
    /// the publisher dead readers. Settings out of range raise `InvalidConfig` (a `ValueError`).
    #[new]
    #[pyo3(signature = (name, dir=None, *, term_length=None, liveness_interval=None, max_readers=None, keep_files=false))]
    fn new(
        py: Python<'_>,
        name: String,
        dir: Option<PathBuf>,
        term_length: Option<i64>,
        liveness_interval: Option<f64>,
        max_readers: Option<i64>,
        keep_files: bool,
    ) -> PyResult<Self> {
        let mut b = Publication::builder(name.clone()).keep_files(keep_files);
        if let Some(dir) = dir {
            b = b.dir(dir);
        }
        if let Some(t) = term_length {
            b = b.term_length(util::positive(py, "term_length", t)?);
        }
        if let Some(l) = liveness_interval {
            b = b.liveness_interval(util::setting_seconds(py, "liveness_interval", l)?);
        }
        if let Some(n) = max_readers {
            b = b.max_readers(util::positive(py, "max_readers", n)?);
        }
        let p = b.create().map_err(|e| errors::error(py, e))?;
        let handle = Handle::new(
            Inner { mode: Mode::Blocking(p), wake: AsyncWake::default() },
            format!("publication {name:?}"),
        );
        Ok(Self { handle, name })
    }

    /// Appends `data` (bytes, bytearray, memoryview) as one message; returns the stream position
    /// after it. Never waits: raises `BackPressured` (a `BlockingIOError`) when the slowest reader
    /// is a window behind, `NotConnected` (a `ConnectionError`) when no live reader reads the
    /// stream, `MessageTooLarge` (a `ValueError`), ...
    fn offer(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<i64> {
        self.with(py, |p| with_bytes(data, |bytes| p.offer(bytes))?.map_err(|e| errors::offer_error(py, e)))
    }

    /// Like `offer`, but while back-pressured sleeps until a reader moves (without the GIL), at
    /// most `timeout` seconds in all (`None`: as long as it takes); then raises `BackPressured`.
    /// `NotConnected` and the other errors raise at once. Ctrl-C interrupts the wait.
    #[pyo3(signature = (data, timeout=None))]
    fn offer_blocking(&self, py: Python<'_>, data: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<i64> {
        let deadline = util::deadline("timeout", timeout)?;
        let handle = &self.handle;
        self.with(py, |p| {
            with_bytes(data, |bytes| loop {
                match p.offer(bytes) {
                    Err(OfferError::BackPressured) => {}
                    other => return other.map_err(|e| errors::offer_error(py, e)),
                }
                let Some(slice) = util::slice(deadline) else {
                    return Err(errors::offer_error(py, OfferError::BackPressured));
                };
                match py.detach(|| p.offer_blocking(bytes, slice)) {
                    Err(OfferError::BackPressured) => {
                        py.check_signals()?;
                        handle.check_open(py)?;
                    }
                    other => return other.map_err(|e| errors::offer_error(py, e)),
                }
            })?
        })
    }

    /// Appends the messages of `messages` (a list or tuple of bytes-like objects) in order, in
    /// one call: the cost of calling into the extension is paid once per batch, not per message.
    /// Returns how many were appended (the first ones), as a non-blocking socket's `send` does.
    /// `timeout=0` (default) never waits: it stops at the first message that is back-pressured.
    /// Otherwise it sleeps while back-pressured, at most `timeout` seconds in all (`None`: as
    /// long as it takes). An error (`BackPressured`, `NotConnected`, `MessageTooLarge`, ...)
    /// raises if no message was appended, else ends the batch early (the next call meets it).
    #[pyo3(signature = (messages, timeout=0.0))]
    fn offer_many(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<usize> {
        let patience = match timeout {
            Some(0.0) => Patience::None,
            t => Patience::Until(util::deadline("timeout", t)?),
        };
        let handle = &self.handle;
        self.with(py, |p| offer_each(py, p, handle, messages, patience))
    }

    /// Waits until a live reader reads the stream, at most `timeout` seconds (`None`: forever);
    /// raises `Timeout` (a `TimeoutError`) then. A `Subscription` counts from the moment it is
    /// made. Ctrl-C interrupts the wait.
    #[pyo3(signature = (timeout=None))]
    fn wait_connected(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        self.wait_for_readers(py, 1, timeout)
    }

    /// Waits until at least `readers` live readers read the stream, at most `timeout` seconds.
    #[pyo3(signature = (readers, timeout=None))]
    fn wait_for_readers(&self, py: Python<'_>, readers: i64, timeout: Option<f64>) -> PyResult<()> {
        let readers = util::positive(py, "readers", readers)?;
        let deadline = util::deadline("timeout", timeout)?;
        let handle = &self.handle;
        self.with(py, |p| loop {
            if p.connected_readers() >= readers {
                return Ok(());
            }
            let Some(slice) = util::slice(deadline) else {
                return Err(errors::error(py, shmlog::Error::Timeout));
            };
            match py.detach(|| p.wait_for_readers(readers, slice)) {
                Ok(()) => return Ok(()),
                Err(shmlog::Error::Timeout) => {
                    py.check_signals()?;
                    handle.check_open(py)?;
                }
                Err(e) => return Err(errors::error(py, e)),
            }
        })
    }

    /// `True` while at least one live reader reads the stream.
    #[getter]
    fn is_connected(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |p| Ok(p.is_connected()))
    }

    /// Live readers of the stream.
    #[getter]
    fn connected_readers(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |p| Ok(p.connected_readers()))
    }

    /// Stream position after the last message appended.
    #[getter]
    fn position(&self, py: Python<'_>) -> PyResult<i64> {
        self.with(py, |p| Ok(p.position()))
    }

    /// Longest message `offer` accepts, in bytes.
    #[getter]
    fn max_message_len(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |p| Ok(p.max_message_len()))
    }

    /// This publisher's session id.
    #[getter]
    fn session_id(&self, py: Python<'_>) -> PyResult<i32> {
        self.with(py, |p| Ok(p.session_id()))
    }

    /// Bytes of each of the log's terms.
    #[getter]
    fn term_length(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |p| Ok(p.term_length()))
    }

    /// The log file.
    #[getter]
    fn path(&self, py: Python<'_>) -> PyResult<PathBuf> {
        self.with(py, |p| Ok(p.path().to_path_buf()))
    }

    /// The stream's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// `True` once closed (with `close()`, its `with` block, or at exit).
    #[getter]
    fn closed(&self) -> bool {
        self.handle.is_closed()
    }

    /// Ends the stream (readers see it closed once they read everything) and releases the log.
    /// Closing twice does nothing. From another thread, a blocking call of this publication
    /// raises `Closed` within 50 ms and the close goes on. In a child made by `os.fork()` it only
    /// lets go of the parent's publication (which goes on).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.handle.close(py, |inner| match inner.mode {
            Mode::Blocking(p) => p.close(),
            Mode::Async(a) => a.into_inner().into_publication().close(),
            Mode::Gone => {}
        })
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
            Some(mut g) => match g.as_mut() {
                Some(_) if self.handle.forked() => "of the parent process (forked)".into(),
                Some(inner) => match inner.blocking() {
                    Some(p) => format!("session {} at position {}", p.session_id(), p.position()),
                    None => "closed".into(),
                },
                None => "closed".into(),
            },
            None => "busy".into(),
        };
        format!("<shmlog.Publication {:?} {state}>", self.name)
    }

    /// asyncio plumbing (see `shmlog.Publication.send`): the file descriptor the event loop
    /// watches for wake-ups.
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

    /// asyncio plumbing: offers `data` (a `bytes`); the stream position after it, or `None` if
    /// back-pressured: then the core's `AsyncSender` sleeps on the stream's wake FIFO through the
    /// descriptor, which a reader that moves writes (the waiter thread wakes it when the liveness
    /// interval passes). Other errors raise.
    fn _poll_send(&self, py: Python<'_>, data: Py<PyBytes>) -> PyResult<Option<i64>> {
        self.handle.with(py, |inner| {
            let waker = inner.wake.get()?.waker();
            let Some(p) = inner.blocking() else { return Err(self.handle.closed_error(py)) };
            match p.offer(data.as_bytes(py)) {
                Err(OfferError::BackPressured) => {}
                other => return other.map(Some).map_err(|e| errors::offer_error(py, e)),
            }
            let Mode::Blocking(p) = std::mem::replace(&mut inner.mode, Mode::Gone) else {
                unreachable!("blocking() above")
            };
            // On an error the publication is gone with it (it was moved into the sender).
            let mut a = AsyncSender::with_wake_fd(Sender::new(p, PyBytesCodec::default()), inner.wake.get()?)
                .map_err(|e| errors::error(py, e))?;
            let polled = std::pin::pin!(a.send(&data)).poll(&mut Context::from_waker(&waker));
            inner.mode = Mode::Async(a);
            match polled {
                Poll::Pending => Ok(None),
                Poll::Ready(Ok(position)) => Ok(Some(position)),
                Poll::Ready(Err(SendError::Offer(e))) => Err(errors::offer_error(py, e)),
                Poll::Ready(Err(SendError::Encode(never))) => match never {},
                Poll::Ready(Err(e)) => Err(errors::new_err(py, errors::Kind::ShmlogError, e.to_string())),
            }
        })
    }
}
