//! What every Python object of the bindings that owns a stream end holds around the core's
//! object: one thread at a time, use after `fork()` refused, and `close()` from any thread.
//!
//! - **One thread at a time.** The core's objects take `&mut self`; a call from a second thread
//!   while a first one waits (without the GIL) raises `RuntimeError` instead of deadlocking.
//! - **fork().** A child made by `fork()` shares the parent's mappings and its kernel locks: a
//!   child that offered into the parent's log, moved the parent's reader slot, or closed the
//!   stream when its copy was dropped would lose the parent's messages silently. Every call
//!   checks that no fork happened since the object was made (one load of a counter that the
//!   child's `os.register_at_fork` hook bumps) and raises `UsedAfterFork`; in the child, closing
//!   or dropping the copy leaves the core's object untouched (it is forgotten, not dropped).
//! - **close() from another thread** (or at exit, while a daemon thread waits): blocking calls
//!   wait in slices and look at the closing flag between them, so a close asks the waiter to give
//!   the object up and takes it within a slice.

use crate::errors::{self, Kind};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// Forks of this process's ancestors that reached this process as the child (`os.fork()` runs
/// [`after_fork_in_child`] in the child).
static FORKS: AtomicU64 = AtomicU64::new(0);

/// Registered with `os.register_at_fork(after_in_child=...)` when the module is imported.
#[pyfunction]
pub(crate) fn _after_fork_in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// How long `close()` waits for a blocking call in another thread to give the object up: two
/// of its slices, and the time to take the GIL back.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// A stream end owned by one Python object.
pub(crate) struct Handle<T> {
    inner: Mutex<Option<T>>,
    /// `FORKS` when it was made, and the process it was made in.
    forks: u64,
    pid: u32,
    /// Set by `close()`: a blocking call gives the object up after its current slice.
    closing: AtomicBool,
    /// "publication \"orders\"", for messages.
    what: String,
}

impl<T: Send> Handle<T> {
    pub(crate) fn new(value: T, what: String) -> Self {
        Self {
            inner: Mutex::new(Some(value)),
            forks: FORKS.load(Ordering::Relaxed),
            pid: std::process::id(),
            closing: AtomicBool::new(false),
            what,
        }
    }

    /// `true` in a child made by `fork()` after this object was made.
    pub(crate) fn forked(&self) -> bool {
        FORKS.load(Ordering::Relaxed) != self.forks
    }

    fn fork_error(&self, py: Python<'_>) -> PyErr {
        errors::new_err(
            py,
            Kind::UsedAfterFork,
            format!(
                "{} was made in process {} before os.fork(); this is process {}: the child cannot \
                 use it (its messages and position are the parent's). Make publications and \
                 subscriptions after forking.",
                self.what,
                self.pid,
                std::process::id()
            ),
        )
    }

    pub(crate) fn closed_error(&self, py: Python<'_>) -> PyErr {
        errors::new_err(py, Kind::Closed, format!("{} is closed", self.what))
    }

    /// The object for one call: `UsedAfterFork` in a forked child, `RuntimeError` while another
    /// thread uses it. `None` inside once closed.
    pub(crate) fn lock(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, Option<T>>> {
        if self.forked() {
            return Err(self.fork_error(py));
        }
        match self.inner.try_lock() {
            Ok(g) => Ok(g),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(PyRuntimeError::new_err(format!(
                "{} is in use by another thread (one thread at a time)",
                self.what
            ))),
        }
    }

    /// Runs `f` on the open object (`Closed` once closed).
    #[inline]
    pub(crate) fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&mut T) -> PyResult<R>) -> PyResult<R> {
        let mut g = self.lock(py)?;
        match g.as_mut() {
            Some(v) => f(v),
            None => Err(self.closed_error(py)),
        }
    }

    /// `Closed` if `close()` was called meanwhile: what a blocking call checks between slices.
    pub(crate) fn check_open(&self, py: Python<'_>) -> PyResult<()> {
        if self.closing.load(Ordering::Relaxed) {
            return Err(self.closed_error(py));
        }
        Ok(())
    }

    /// `true` once closed (or being closed).
    pub(crate) fn is_closed(&self) -> bool {
        if self.closing.load(Ordering::Relaxed) {
            return true;
        }
        match self.inner.try_lock() {
            Ok(g) => g.is_none(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().is_none(),
            Err(TryLockError::WouldBlock) => false,
        }
    }

    /// Closes: takes the object (waiting, without the GIL, for a blocking call in another thread
    /// to give it up) and hands it to `close`. Twice does nothing. In a forked child the object
    /// is forgotten, never closed: it is the parent's.
    pub(crate) fn close(&self, py: Python<'_>, close: impl FnOnce(T)) -> PyResult<()> {
        self.closing.store(true, Ordering::Relaxed);
        let taken = match self.inner.try_lock() {
            Ok(mut g) => g.take(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().take(),
            Err(TryLockError::WouldBlock) => {
                let deadline = Instant::now() + CLOSE_WAIT;
                let taken = py.detach(|| loop {
                    match self.inner.try_lock() {
                        Ok(mut g) => return Ok(g.take()),
                        Err(TryLockError::Poisoned(p)) => return Ok(p.into_inner().take()),
                        Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(1))
                        }
                        Err(TryLockError::WouldBlock) => return Err(()),
                    }
                });
                taken.map_err(|()| {
                    PyRuntimeError::new_err(format!(
                        "{} is in use by another thread, which did not give it up within {} s",
                        self.what,
                        CLOSE_WAIT.as_secs()
                    ))
                })?
            }
        };
        if let Some(v) = taken {
            if self.forked() || std::process::id() != self.pid {
                std::mem::forget(v);
            } else {
                close(v);
            }
        }
        Ok(())
    }

    /// The object, for `__repr__` (never waits; `None` while busy).
    pub(crate) fn peek(&self) -> Option<MutexGuard<'_, Option<T>>> {
        match self.inner.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

impl<T> Drop for Handle<T> {
    fn drop(&mut self) {
        // A forked child's copy is the parent's: dropping it would end the parent's stream or
        // release its reader slot. (A fork not made through os.fork() is caught by the pid.)
        if FORKS.load(Ordering::Relaxed) != self.forks || std::process::id() != self.pid {
            let taken = self.inner.get_mut().unwrap_or_else(|e| e.into_inner()).take();
            std::mem::forget(taken);
        }
    }
}
