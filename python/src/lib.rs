//! Python bindings of shmlog (the extension module `shmlog._shmlog`; the package `shmlog` in
//! `python/shmlog` adds the asyncio methods and the type stubs). Only the core's public API.

mod errors;
mod journal;
mod publication;
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
    m.add_function(wrap_pyfunction!(journal::recordings, m)?)?;
    m.add_function(wrap_pyfunction!(default_dir, m)?)?;
    m.add("DEFAULT_LIVENESS_INTERVAL", shmlog::DEFAULT_LIVENESS_INTERVAL.as_secs_f64())?;
    m.add("DEFAULT_TERM_LENGTH", shmlog::DEFAULT_TERM_LENGTH)?;
    errors::register(m)?;
    Ok(())
}
