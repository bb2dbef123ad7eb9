//! The journal: `Recorder` (record a stream to disk), `recordings` (the catalog) and `Replay`
//! (a recording's messages as an iterator).

use crate::errors::{self, Kind};
use crate::handle::Handle;
use crate::subscription::PyLoss;
use crate::util;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use shmlog::journal::{Fsync, Recorder, Recording, RecordingState, Replay};
use shmlog::{FragmentAssembler, Header};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Duration;

fn lock<'a, T>(m: &'a Mutex<T>, what: &str) -> PyResult<MutexGuard<'a, T>> {
    match m.try_lock() {
        Ok(g) => Ok(g),
        Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
        Err(TryLockError::WouldBlock) => {
            Err(PyRuntimeError::new_err(format!("{what} is in use by another thread (one thread at a time)")))
        }
    }
}

/// A recording as the journal's catalog describes it.
#[pyclass(module = "shmlog._shmlog", name = "Recording", frozen)]
pub struct PyRecording(Recording);

#[pymethods]
impl PyRecording {
    /// Its id in the catalog (what `Replay` takes).
    #[getter]
    fn id(&self) -> u32 {
        self.0.id
    }
    /// The stream's name.
    #[getter]
    fn stream(&self) -> &str {
        &self.0.stream
    }
    /// The publisher's session recorded.
    #[getter]
    fn session_id(&self) -> i32 {
        self.0.session_id
    }
    /// First position recorded (where a message starts).
    #[getter]
    fn start_position(&self) -> i64 {
        self.0.start_position
    }
    /// Position after the last recorded frame.
    #[getter]
    fn stop_position(&self) -> i64 {
        self.0.stop_position
    }
    /// Position up to which the recording is on the disk itself (fsynced).
    #[getter]
    fn durable_position(&self) -> i64 {
        self.0.durable_position
    }
    /// Bytes recorded.
    #[getter]
    fn length(&self) -> i64 {
        self.0.length()
    }
    /// `'recording'`, `'interrupted'` (its recorder died) or `'stopped'`.
    #[getter]
    fn state(&self) -> &'static str {
        match self.0.state {
            RecordingState::Recording => "recording",
            RecordingState::Interrupted => "interrupted",
            RecordingState::Stopped(_) => "stopped",
            _ => "unknown",
        }
    }
    /// Why it stopped (`'end-of-stream'`, `'publisher-died'`, `'stopped'`, ...), or `None`.
    #[getter]
    fn stop_reason(&self) -> Option<&'static str> {
        match self.0.state {
            RecordingState::Stopped(r) => Some(r.as_str()),
            _ => None,
        }
    }
    /// Wall-clock start, nanoseconds since the Unix epoch.
    #[getter]
    fn start_unix_ns(&self) -> i64 {
        self.0.start_unix_ns
    }
    /// Bytes of the stream lost just before `start_position` (an untethered recorder).
    #[getter]
    fn gap_before(&self) -> i64 {
        self.0.gap_before
    }
    fn __repr__(&self) -> String {
        format!(
            "<shmlog.Recording {} of {:?} session {} [{}, {}) {}>",
            self.0.id,
            self.0.stream,
            self.0.session_id,
            self.0.start_position,
            self.0.stop_position,
            self.stop_reason().unwrap_or(self.state())
        )
    }
}

/// Every recording in the catalog of journal directory `journal`, by id. A damaged catalog
/// record raises `CorruptRecording`.
#[pyfunction]
pub(crate) fn recordings(py: Python<'_>, journal: PathBuf) -> PyResult<Vec<PyRecording>> {
    let all = shmlog::journal::recordings(&journal).map_err(|e| errors::error(py, e))?;
    all.into_iter().map(|r| r.map(PyRecording).map_err(|e| errors::error(py, e))).collect()
}

fn replay_closed(py: Python<'_>) -> PyErr {
    errors::new_err(py, Kind::Closed, "the replay is closed")
}

struct ReplayState {
    replay: Replay,
    /// Rebuilds fragmented messages (one cut by a gap is dropped, never spliced).
    assembler: FragmentAssembler,
    ready: VecDeque<Py<PyBytes>>,
}

/// The messages of recording `id` of journal directory `journal`, from position `from_` (where a
/// message starts; default the recording's start) to `to` (default its stop position), as an
/// iterator of `bytes`. A recording still being recorded: with `follow=False` (default) the
/// iteration ends at what is recorded now; with `follow=True` it waits for more until the
/// recording stops. A damaged segment raises `CorruptRecording` naming the file and position.
#[pyclass(module = "shmlog._shmlog", name = "Replay")]
pub struct PyReplay {
    state: Mutex<Option<ReplayState>>,
    follow: bool,
}

#[pymethods]
impl PyReplay {
    #[new]
    #[pyo3(signature = (journal, id, *, from_=None, to=None, follow=false))]
    fn new(
        py: Python<'_>,
        journal: PathBuf,
        id: i64,
        from_: Option<i64>,
        to: Option<i64>,
        follow: bool,
    ) -> PyResult<Self> {
        let id = u32::try_from(id).map_err(|_| {
            PyValueError::new_err(format!("a recording id is from 0 to {}, got {id}", u32::MAX))
        })?;
        let mut b = Replay::builder(journal, id);
        if let Some(p) = from_ {
            b = b.from(p);
        }
        if let Some(p) = to {
            b = b.to(p);
        }
        let replay = b.open().map_err(|e| errors::error(py, e))?;
        let state = ReplayState { replay, assembler: FragmentAssembler::new(()), ready: VecDeque::new() };
        Ok(Self { state: Mutex::new(Some(state)), follow })
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        let mut g = lock(&self.state, "the replay")?;
        let Some(s) = g.as_mut() else { return Err(replay_closed(py)) };
        loop {
            if let Some(m) = s.ready.pop_front() {
                return Ok(Some(m));
            }
            let ReplayState { replay, assembler, ready } = s;
            let n = replay
                .poll(
                    |payload: &[u8], h: &Header| {
                        if let Some((message, _)) = assembler.assemble(payload, h) {
                            ready.push_back(PyBytes::new(py, message).unbind());
                        }
                    },
                    64,
                )
                .map_err(|e| errors::error(py, e))?;
            if n > 0 {
                continue;
            }
            if replay.is_done() || !self.follow {
                return Ok(None);
            }
            // Following a recording that is still recorded: look again in a millisecond (the
            // catalog has no doorbell), without the GIL.
            py.detach(|| std::thread::sleep(Duration::from_millis(1)));
            py.check_signals()?;
        }
    }

    /// Position after the last fragment read from the recording.
    #[getter]
    fn position(&self, py: Python<'_>) -> PyResult<i64> {
        let g = lock(&self.state, "the replay")?;
        g.as_ref().map(|s| s.replay.position()).ok_or_else(|| replay_closed(py))
    }

    /// The recording, as described when the replay opened.
    #[getter]
    fn recording(&self, py: Python<'_>) -> PyResult<PyRecording> {
        let g = lock(&self.state, "the replay")?;
        g.as_ref().map(|s| PyRecording(s.replay.recording().clone())).ok_or_else(|| replay_closed(py))
    }

    /// Releases the recording's files.
    fn close(&self) -> PyResult<()> {
        lock(&self.state, "the replay")?.take();
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
}

/// Records stream `name` into journal directory `journal` (a real disk, not `/dev/shm`): a
/// reader of the stream that copies whole committed blocks into segment files. Drive it with
/// `poll()` / `wait()` (or `run(stop)`), and `stop()` it to close the recording.
///
/// `fsync`: `'never'` (default), `'segment'`, or a number of seconds (sync at most that long
/// after bytes were recorded).
#[pyclass(module = "shmlog._shmlog", name = "Recorder")]
pub struct PyRecorder {
    handle: Handle<Recorder>,
}

fn fsync_arg(py: Python<'_>, fsync: &Bound<'_, PyAny>) -> PyResult<Fsync> {
    if let Ok(s) = fsync.extract::<String>() {
        return match s.as_str() {
            "never" => Ok(Fsync::Never),
            "segment" => Ok(Fsync::PerSegment),
            other => Err(errors::invalid(
                py,
                format!("fsync must be 'never', 'segment' or a number of seconds, not {other:?}"),
            )),
        };
    }
    let seconds: f64 = fsync
        .extract()
        .map_err(|_| PyTypeError::new_err("fsync must be 'never', 'segment' or a number of seconds"))?;
    Ok(Fsync::Every(util::setting_seconds(py, "fsync", seconds)?))
}

#[pymethods]
impl PyRecorder {
    #[new]
    #[pyo3(signature = (name, journal, *, dir=None, fsync=None, tethered=true))]
    fn new(
        py: Python<'_>,
        name: String,
        journal: PathBuf,
        dir: Option<PathBuf>,
        fsync: Option<&Bound<'_, PyAny>>,
        tethered: bool,
    ) -> PyResult<Self> {
        let mut b = Recorder::builder(name.clone(), journal).tethered(tethered);
        if let Some(dir) = dir {
            b = b.stream_dir(dir);
        }
        if let Some(f) = fsync {
            b = b.fsync(fsync_arg(py, f)?);
        }
        let what = format!("the recorder of {name:?}");
        let r = b.start().map_err(|e| errors::error(py, e))?;
        Ok(Self { handle: Handle::new(r, what) })
    }

    /// Records what the stream committed since the last call; returns the bytes recorded.
    fn poll(&self, py: Python<'_>) -> PyResult<usize> {
        self.handle.with(py, |r| r.poll().map_err(|e| errors::error(py, e)))
    }

    /// Waits (without the GIL) for something to record, at most `timeout` seconds; `True` if
    /// there may be something.
    #[pyo3(signature = (timeout=0.1))]
    fn wait(&self, py: Python<'_>, timeout: f64) -> PyResult<bool> {
        let deadline = util::deadline("timeout", Some(timeout))?;
        let handle = &self.handle;
        handle.with(py, |r| loop {
            let Some(slice) = util::slice(deadline) else { return Ok(false) };
            if py.detach(|| r.wait(slice)) {
                return Ok(true);
            }
            py.check_signals()?;
            handle.check_open(py)?;
        })
    }

    /// The recording being extended, if any.
    #[getter]
    fn recording_id(&self, py: Python<'_>) -> PyResult<Option<u32>> {
        self.handle.with(py, |r| Ok(r.recording_id()))
    }

    /// Position recorded so far in the current recording.
    #[getter]
    fn recorded_position(&self, py: Python<'_>) -> PyResult<i64> {
        self.handle.with(py, |r| Ok(r.recorded_position()))
    }

    /// The oldest loss report of the recorder's subscription not taken yet, or `None`.
    fn take_loss(&self, py: Python<'_>) -> PyResult<Option<PyLoss>> {
        self.handle.with(py, |r| Ok(r.take_loss().map(PyLoss)))
    }

    /// Closes the current recording (stop reason `'stopped'`). Stopping twice does nothing.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let mut result = Ok(());
        self.handle.close(py, |r| result = r.stop().map_err(|e| errors::error(py, e)))?;
        result
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.stop(py)?;
        Ok(false)
    }
}
