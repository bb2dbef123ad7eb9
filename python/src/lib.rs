//! Python bindings of shmlog (the extension module `shmlog._shmlog`; the package `shmlog` in
//! `python/shmlog` adds the asyncio methods and the type stubs). Only the core's public API.

#![warn(unreachable_pub)]

mod clean;
mod errors;
mod handle;
mod journal;
mod outcome;
mod persistent;
mod publication;
mod receive;
mod subscription;
mod util;

use pyo3::prelude::*;

/// The directory streams live in unless a `dir` is given: `$SHMLOG_DIR`, else
/// `/dev/shm/shmlog-<uid>` (a directory of the user's own, mode 0700).
#[pyfunction]
fn default_dir() -> std::path::PathBuf {
    shmlog::default_dir()
}

#[pymodule]
fn _shmlog(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<publication::PyPublication>()?;
    m.add_class::<subscription::PySubscription>()?;
    m.add_class::<subscription::PyLoss>()?;
    m.add_class::<journal::PyRecording>()?;
    m.add_class::<journal::PyReplay>()?;
    m.add_class::<journal::PyRecorder>()?;
    m.add_class::<persistent::PyPersistentSubscription>()?;
    m.add_class::<clean::PyCleanReport>()?;
    m.add_function(wrap_pyfunction!(journal::recordings, m)?)?;
    m.add_function(wrap_pyfunction!(subscription::wait_any, m)?)?;
    m.add_function(wrap_pyfunction!(clean::clean, m)?)?;
    m.add_function(wrap_pyfunction!(handle::_after_fork_in_child, m)?)?;
    m.add_function(wrap_pyfunction!(default_dir, m)?)?;
    m.add("DEFAULT_LIVENESS_INTERVAL", shmlog::DEFAULT_LIVENESS_INTERVAL.as_secs_f64())?;
    m.add("DEFAULT_TERM_LENGTH", shmlog::DEFAULT_TERM_LENGTH)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    // A child made by os.fork() learns that it is one (see `handle`).
    let hook = m.getattr("_after_fork_in_child")?;
    let kwargs = pyo3::types::PyDict::new(m.py());
    kwargs.set_item("after_in_child", hook)?;
    m.py().import("os")?.getattr("register_at_fork")?.call((), Some(&kwargs))?;
    Ok(())
}
