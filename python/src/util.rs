//! Argument checks, bytes-like arguments, waiting without the GIL in slices, messages as
//! `bytes`, and the descriptor that wakes an asyncio loop.

use crate::errors;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};
use shmlog::Codec;
use shmlog::WakeFd;
use std::convert::Infallible;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a blocking call sleeps without the GIL before it looks at Python's signals: a
/// Ctrl-C raises `KeyboardInterrupt` within this (and within the default liveness interval,
/// 100 ms).
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// A timeout argument in seconds: `None` is forever, else a finite number >= 0.
pub(crate) fn deadline(what: &str, seconds: Option<f64>) -> PyResult<Option<Instant>> {
    let Some(seconds) = seconds else { return Ok(None) };
    let duration = seconds_arg(what, seconds, true)?;
    // A deadline past what the clock can hold is forever.
    Ok(Instant::now().checked_add(duration))
}

/// A duration argument in seconds: finite and >= 0 (> 0 unless `zero_ok`).
pub(crate) fn seconds_arg(what: &str, seconds: f64, zero_ok: bool) -> PyResult<Duration> {
    let ok = seconds.is_finite() && (seconds > 0.0 || (zero_ok && seconds == 0.0));
    if !ok {
        let rule = if zero_ok { ">= 0" } else { "> 0" };
        return Err(PyValueError::new_err(format!(
            "{what} must be a finite number of seconds {rule}, got {seconds}"
        )));
    }
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| PyValueError::new_err(format!("{what} of {seconds} seconds is too long")))
}

/// A setting in seconds (a liveness interval, an fsync period): finite and > 0, else
/// `InvalidConfig` (a `ValueError`), as the core's own range checks raise.
pub(crate) fn setting_seconds(py: Python<'_>, what: &str, seconds: f64) -> PyResult<Duration> {
    seconds_arg(what, seconds, false).map_err(|e| errors::invalid(py, e.value(py).to_string()))
}

/// A positive integer setting that must fit a `usize`, else `InvalidConfig` (a `ValueError`).
pub(crate) fn positive(py: Python<'_>, what: &str, n: i64) -> PyResult<usize> {
    usize::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| errors::invalid(py, format!("{what} must be a positive integer, got {n}")))
}

/// Time left before `deadline` for one slice of waiting; `None` once it passed.
pub(crate) fn slice(deadline: Option<Instant>) -> Option<Duration> {
    match deadline {
        None => Some(SLICE),
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            (!left.is_zero()).then_some(left.min(SLICE))
        }
    }
}

/// Calls `f` with the bytes of a bytes-like object. `bytes` is read in place (the one copy is
/// the one into the log); a `bytearray`, `memoryview` or other buffer is copied once first (the
/// buffer protocol is not part of the stable ABI before Python 3.11, and a mutable buffer could
/// change under a wait that released the GIL).
pub(crate) fn with_bytes<R>(data: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(b) = data.cast::<PyBytes>() {
        return Ok(f(b.as_bytes()));
    }
    if let Ok(b) = data.cast::<PyByteArray>() {
        return Ok(f(&b.to_vec()));
    }
    let view = PyMemoryView::from(data).map_err(|_| {
        let kind = data.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
        PyTypeError::new_err(format!(
            "a message must be a bytes-like object (bytes, bytearray, memoryview), not {kind}"
        ))
    })?;
    let copy = view.call_method0("tobytes")?;
    let copy = copy.cast::<PyBytes>()?;
    Ok(f(copy.as_bytes()))
}

/// Messages as Python `bytes`, made straight from the log's payload (the one copy on receive),
/// and `bytes` encoded for an async send. Decoding runs where the receiver polls, which is always
/// with the GIL held (polls never run inside the waits that release it), so `attach` only counts
/// the GIL. Counts what it decoded, so that the subscription knows when the receiver's queue is
/// empty.
#[derive(Clone, Debug, Default)]
pub(crate) struct PyBytesCodec {
    pub decoded: Arc<AtomicU64>,
}

impl Codec<Py<PyBytes>> for PyBytesCodec {
    type Error = Infallible;

    fn encode(&self, value: &Py<PyBytes>, out: &mut Vec<u8>) -> Result<(), Infallible> {
        Python::attach(|py| out.extend_from_slice(value.as_bytes(py)));
        Ok(())
    }

    #[inline]
    fn decode(&self, bytes: &[u8]) -> Result<Py<PyBytes>, Infallible> {
        // One thread decodes at a time (the subscription's lock): a plain increment, no lock
        // prefix.
        self.decoded.store(self.decoded.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        Ok(Python::attach(|py| PyBytes::new(py, bytes).unbind()))
    }
}

/// asyncio plumbing of a publication or a subscription: the descriptor its event loop watches
/// (`loop.add_reader`), made by the first async call. It is the core's `WakeFd`: the stream's
/// wake FIFO is in it, so a commit (or a reader's move, for a sender) wakes the loop's thread
/// itself, with no thread of ours in between; the core's waiter thread only writes to it for a
/// liveness check (or on a kernel without the reactor path).
#[derive(Default)]
pub(crate) struct AsyncWake(Option<WakeFd>);

impl AsyncWake {
    /// The descriptor to watch (`_async_fd()`), made on first use.
    pub(crate) fn fd(&mut self, py: Python<'_>) -> PyResult<i32> {
        if self.0.is_none() {
            self.0 = Some(WakeFd::new().map_err(|e| errors::error(py, e))?);
        }
        Ok(self.0.as_ref().map_or(-1, AsRawFd::as_raw_fd))
    }

    /// Takes the wake-ups so far (`_drain_wakes()`, before a poll: a wake-up after it leaves the
    /// descriptor readable).
    pub(crate) fn drain(&self) {
        if let Some(w) = &self.0 {
            w.clear();
        }
    }

    /// The `WakeFd` the core's async receiver or sender sleeps through.
    pub(crate) fn get(&self) -> PyResult<&WakeFd> {
        self.0.as_ref().ok_or_else(|| PyRuntimeError::new_err("_async_fd() must be called first"))
    }
}
