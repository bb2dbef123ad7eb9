//! `shmlog.clean()`: removes the files dead processes left in a stream directory (the core's
//! `inspect::clean`, which the `shmlog clean` command runs too).

use crate::errors;
use pyo3::prelude::*;
use std::path::PathBuf;

/// What `shmlog.clean()` did: `removed` and `kept` list `(path, reason)` pairs.
#[pyclass(module = "shmlog._shmlog", name = "CleanReport", frozen, get_all)]
pub struct PyCleanReport {
    /// `True` if nothing was removed: `removed` lists what would have been.
    dry_run: bool,
    /// Files removed (or that would be, in a dry run), with why.
    removed: Vec<(PathBuf, String)>,
    /// Files left in place, with why (a live publisher or reader uses them, not a stream's file, ...).
    kept: Vec<(PathBuf, String)>,
}

#[pymethods]
impl PyCleanReport {
    fn __repr__(&self) -> String {
        let verb = if self.dry_run { "would remove" } else { "removed" };
        format!("<shmlog.CleanReport {verb} {} files, kept {}>", self.removed.len(), self.kept.len())
    }
}

/// Removes the files in `dir` (default `shmlog.default_dir()`) that dead processes left behind:
/// logs whose publisher is gone and that no reader maps, reader-slot files nobody has open,
/// temporaries of a creator that died. What a live process uses is kept, and so is anything not
/// a stream's file. With `dry_run=True`, only says what it would remove. Safe while other
/// processes use the directory: a file is locked while it is judged and removed.
///
/// A publisher killed by SIGKILL (or a Python process ended by SIGTERM, which skips `atexit`)
/// leaves its log behind: its size in RAM for a `/dev/shm` directory, until the next publisher
/// of the same name replaces it or this removes it. A log its publisher closed but left for a
/// subscription that had not begun reading it yet is removed too (that subscription reports the
/// session as missed): clean while such readers are quiet, or at startup.
#[pyfunction]
#[pyo3(signature = (dir=None, *, dry_run=false))]
pub(crate) fn clean(py: Python<'_>, dir: Option<PathBuf>, dry_run: bool) -> PyResult<PyCleanReport> {
    let dir = dir.unwrap_or_else(shmlog::default_dir);
    let report = py.detach(|| shmlog::inspect::clean(&dir, dry_run)).map_err(|e| errors::error(py, e))?;
    let pairs = |entries: Vec<shmlog::inspect::CleanEntry>| {
        entries.into_iter().map(|e| (e.path, e.reason.to_string())).collect()
    };
    Ok(PyCleanReport { dry_run: report.dry_run, removed: pairs(report.removed), kept: pairs(report.kept) })
}
