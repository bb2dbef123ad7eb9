//! Argument checks, bytes-like arguments, and waiting without the GIL in slices.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};
use std::time::{Duration, Instant};

/// The longest a blocking call sleeps without the GIL before it looks at Python's signals: a
/// Ctrl-C raises `KeyboardInterrupt` within this (and within the default liveness interval,
/// 100 ms).
pub const SLICE: Duration = Duration::from_millis(50);

/// A timeout argument in seconds: `None` is forever, else a finite number >= 0.
pub fn deadline(what: &str, seconds: Option<f64>) -> PyResult<Option<Instant>> {
    let Some(seconds) = seconds else { return Ok(None) };
    let duration = seconds_arg(what, seconds, true)?;
    // A deadline past what the clock can hold is forever.
    Ok(Instant::now().checked_add(duration))
}

/// A duration argument in seconds: finite and >= 0 (> 0 unless `zero_ok`).
pub fn seconds_arg(what: &str, seconds: f64, zero_ok: bool) -> PyResult<Duration> {
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

/// A positive integer argument that must fit a `usize`.
pub fn positive(what: &str, n: i64) -> PyResult<usize> {
    usize::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| PyValueError::new_err(format!("{what} must be a positive integer, got {n}")))
}

/// Time left before `deadline` for one slice of waiting; `None` once it passed.
pub fn slice(deadline: Option<Instant>) -> Option<Duration> {
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
pub fn with_bytes<R>(data: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
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
