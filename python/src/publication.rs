//! `shmlog.Publication`: the single writer of a stream.

use crate::errors::{self, Closed};
use crate::util::{self, with_bytes};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use shmlog::{OfferError, Publication};
use std::path::PathBuf;
use std::sync::{Mutex, TryLockError};

/// The single writer of stream `name`: creates its log under `dir` (default
/// `shmlog.default_dir()`: `$SHMLOG_DIR`, else `/dev/shm/shmlog-<uid>`) and appends messages to it.
///
/// One thread uses it at a time: a call from a second thread while a first one waits raises
/// `RuntimeError`. Closing it (or leaving its `with` block) ends the stream: readers read what
/// was committed, then see it closed.
#[pyclass(module = "shmlog._shmlog", name = "Publication")]
pub struct PyPublication {
    inner: Mutex<Option<Publication>>,
    name: String,
}

impl PyPublication {
    /// Runs `f` on the open publication.
    fn with<R>(&self, f: impl FnOnce(&mut Publication) -> PyResult<R>) -> PyResult<R> {
        let mut guard = match self.inner.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return Err(PyRuntimeError::new_err(format!(
                    "publication {:?} is in use by another thread (one thread at a time)",
                    self.name
                )))
            }
        };
        match guard.as_mut() {
            Some(p) => f(p),
            None => Err(Closed::new_err(format!("publication {:?} is closed", self.name))),
        }
    }
}

#[pymethods]
impl PyPublication {
    /// Creates stream `name`'s log in `dir`. `term_length` (bytes, a power of two, default
    /// 16 MiB) bounds how far ahead of the slowest reader the publisher may run;
    /// `liveness_interval` (seconds, default 0.1) is how soon readers notice a dead publisher and
    /// the publisher dead readers.
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
            b = b.term_length(util::positive("term_length", t)?);
        }
        if let Some(l) = liveness_interval {
            b = b.liveness_interval(util::seconds_arg("liveness_interval", l, false)?);
        }
        if let Some(n) = max_readers {
            b = b.max_readers(util::positive("max_readers", n)?);
        }
        let p = b.create().map_err(|e| errors::error(py, e))?;
        Ok(Self { inner: Mutex::new(Some(p)), name })
    }

    /// Appends `data` (bytes, bytearray, memoryview) as one message; returns the stream position
    /// after it. Never waits: raises `BackPressured` when the slowest reader is a window behind,
    /// `NotConnected` when no live reader reads the stream, `MessageTooLarge`, ...
    fn offer(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<i64> {
        self.with(|p| with_bytes(data, |bytes| p.offer(bytes))?.map_err(|e| errors::offer_error(py, e)))
    }

    /// Like `offer`, but while back-pressured sleeps until a reader moves (without the GIL), at
    /// most `timeout` seconds in all (`None`: as long as it takes); then raises `BackPressured`.
    /// `NotConnected` and the other errors raise at once. Ctrl-C interrupts the wait.
    #[pyo3(signature = (data, timeout=None))]
    fn offer_blocking(&self, py: Python<'_>, data: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<i64> {
        let deadline = util::deadline("timeout", timeout)?;
        self.with(|p| {
            with_bytes(data, |bytes| loop {
                match p.offer(bytes) {
                    Err(OfferError::BackPressured) => {}
                    other => return other.map_err(|e| errors::offer_error(py, e)),
                }
                let Some(slice) = util::slice(deadline) else {
                    return Err(errors::offer_error(py, OfferError::BackPressured));
                };
                match py.detach(|| p.offer_blocking(bytes, slice)) {
                    Err(OfferError::BackPressured) => py.check_signals()?,
                    other => return other.map_err(|e| errors::offer_error(py, e)),
                }
            })?
        })
    }

    /// Waits until a live reader reads the stream, at most `timeout` seconds (`None`: forever);
    /// raises `Timeout` then. Ctrl-C interrupts the wait.
    #[pyo3(signature = (timeout=None))]
    fn wait_connected(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        self.wait_for_readers(py, 1, timeout)
    }

    /// Waits until at least `readers` live readers read the stream, at most `timeout` seconds.
    #[pyo3(signature = (readers, timeout=None))]
    fn wait_for_readers(&self, py: Python<'_>, readers: i64, timeout: Option<f64>) -> PyResult<()> {
        let readers = util::positive("readers", readers)?;
        let deadline = util::deadline("timeout", timeout)?;
        self.with(|p| loop {
            if p.connected_readers() >= readers {
                return Ok(());
            }
            let Some(slice) = util::slice(deadline) else {
                return Err(errors::error(py, shmlog::Error::Timeout));
            };
            match py.detach(|| p.wait_for_readers(readers, slice)) {
                Ok(()) => return Ok(()),
                Err(shmlog::Error::Timeout) => py.check_signals()?,
                Err(e) => return Err(errors::error(py, e)),
            }
        })
    }

    /// `True` while at least one live reader reads the stream.
    #[getter]
    fn is_connected(&self) -> PyResult<bool> {
        self.with(|p| Ok(p.is_connected()))
    }

    /// Live readers of the stream.
    #[getter]
    fn connected_readers(&self) -> PyResult<usize> {
        self.with(|p| Ok(p.connected_readers()))
    }

    /// Stream position after the last message appended.
    #[getter]
    fn position(&self) -> PyResult<i64> {
        self.with(|p| Ok(p.position()))
    }

    /// Longest message `offer` accepts, in bytes.
    #[getter]
    fn max_message_len(&self) -> PyResult<usize> {
        self.with(|p| Ok(p.max_message_len()))
    }

    /// This publisher's session id.
    #[getter]
    fn session_id(&self) -> PyResult<i32> {
        self.with(|p| Ok(p.session_id()))
    }

    /// Bytes of each of the log's terms.
    #[getter]
    fn term_length(&self) -> PyResult<usize> {
        self.with(|p| Ok(p.term_length()))
    }

    /// The log file.
    #[getter]
    fn path(&self) -> PyResult<PathBuf> {
        self.with(|p| Ok(p.path().to_path_buf()))
    }

    /// The stream's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// `True` once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }

    /// Ends the stream (readers see it closed once they read everything) and releases the log.
    /// Closing twice does nothing.
    fn close(&self) -> PyResult<()> {
        let taken = match self.inner.try_lock() {
            Ok(mut g) => g.take(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().take(),
            Err(TryLockError::WouldBlock) => {
                return Err(PyRuntimeError::new_err(format!(
                    "publication {:?} is in use by another thread",
                    self.name
                )))
            }
        };
        if let Some(p) = taken {
            p.close();
        }
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
            Ok(g) => match g.as_ref() {
                Some(p) => format!("session {} at position {}", p.session_id(), p.position()),
                None => "closed".into(),
            },
            Err(_) => "busy".into(),
        };
        format!("<shmlog.Publication {:?} {state}>", self.name)
    }
}
