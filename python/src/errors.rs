//! Every error of the core as a Python exception class, with the core's message.
//!
//! `ShmlogError` is the base of all of them; each variant of `shmlog::Error` and
//! `shmlog::OfferError` has its subclass, so `except shmlog.BackPressured:` catches exactly that.
//! Each class also derives from the builtin exception it stands for (`Timeout` is a
//! `TimeoutError`, `InvalidConfig` a `ValueError`, `IoError` an `OSError` with `errno`, ...), so
//! that code written against the builtins catches shmlog's errors too. A few carry the core's
//! numbers as attributes (`nearest` of `PositionNotAvailable`, ...).
//!
//! `create_exception!` makes a class with one base; these have two, so they are made with
//! `type(name, bases, dict)` when the module is imported, and kept for the interpreter's life.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use shmlog::{Error, OfferError};

/// The exception classes, in the order of [`SPECS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    ShmlogError,
    BackPressured,
    NotConnected,
    MaxPositionExceeded,
    MessageTooLarge,
    CorruptLog,
    InvalidName,
    InvalidConfig,
    AlreadyExists,
    PermissionDenied,
    InsufficientSpace,
    VersionMismatch,
    CorruptFile,
    TooManyReaders,
    TooManyWriters,
    ReaderSlots,
    PositionNotAvailable,
    Timeout,
    NoSuchRecording,
    CorruptRecording,
    IoError,
    Closed,
    Fault,
    UsedAfterFork,
}

/// A class: its name, the builtin it also derives from, the errno its instances carry (for the
/// `OSError` family), and its docstring.
struct Spec {
    kind: Kind,
    name: &'static str,
    builtin: Option<&'static str>,
    errno: Option<i32>,
    doc: &'static str,
}

const fn spec(
    kind: Kind,
    name: &'static str,
    builtin: Option<&'static str>,
    errno: Option<i32>,
    doc: &'static str,
) -> Spec {
    Spec { kind, name, builtin, errno, doc }
}

// errno values of Linux (the only platform of the crate).
const EAGAIN: i32 = 11;
const ENOTCONN: i32 = 107;
const EEXIST: i32 = 17;
const EACCES: i32 = 13;
const ENOSPC: i32 = 28;

use Kind as K;
const SPECS: &[Spec] = &[
    spec(K::ShmlogError, "ShmlogError", None, None, "Base class of every error shmlog raises."),
    spec(
        K::BackPressured,
        "BackPressured",
        Some("BlockingIOError"),
        Some(EAGAIN),
        "The slowest live reader is a window behind: retry later (a BlockingIOError, errno EAGAIN).",
    ),
    spec(
        K::NotConnected,
        "NotConnected",
        Some("ConnectionError"),
        Some(ENOTCONN),
        "No live reader reads this stream: retry later, or drop the message (a ConnectionError).",
    ),
    spec(
        K::MaxPositionExceeded,
        "MaxPositionExceeded",
        None,
        None,
        "The stream reached its largest position; create a new publication.",
    ),
    spec(
        K::MessageTooLarge,
        "MessageTooLarge",
        Some("ValueError"),
        None,
        "The message is longer than the publication's max_message_len (attributes `len`, `max`).",
    ),
    spec(
        K::CorruptLog,
        "CorruptLog",
        None,
        None,
        "The log's counters were written by a process other than its writers.",
    ),
    spec(
        K::InvalidName,
        "InvalidName",
        Some("ValueError"),
        None,
        "The stream name cannot be used as a file name.",
    ),
    spec(
        K::InvalidConfig,
        "InvalidConfig",
        Some("ValueError"),
        None,
        "A setting is out of range (term_length, liveness_interval, max_readers, join, ...).",
    ),
    spec(
        K::AlreadyExists,
        "AlreadyExists",
        Some("FileExistsError"),
        Some(EEXIST),
        "A live publisher already owns this stream.",
    ),
    spec(
        K::PermissionDenied,
        "PermissionDenied",
        Some("PermissionError"),
        Some(EACCES),
        "The file or directory is not ours to use (owner, mode, symlink).",
    ),
    spec(
        K::InsufficientSpace,
        "InsufficientSpace",
        Some("OSError"),
        Some(ENOSPC),
        "The file system cannot hold the log or the recording (errno ENOSPC).",
    ),
    spec(
        K::VersionMismatch,
        "VersionMismatch",
        None,
        None,
        "The file was written by an incompatible version of shmlog.",
    ),
    spec(
        K::CorruptFile,
        "CorruptFile",
        None,
        None,
        "The file is not a valid shmlog file (foreign, truncated or corrupt).",
    ),
    spec(
        K::TooManyReaders,
        "TooManyReaders",
        None,
        None,
        "Every reader slot of the stream is held by a live reader.",
    ),
    spec(
        K::TooManyWriters,
        "TooManyWriters",
        None,
        None,
        "No writer slot of a concurrent stream's log is free.",
    ),
    spec(
        K::ReaderSlots,
        "ReaderSlots",
        Some("ValueError"),
        None,
        "The stream's reader-slot file has fewer slots than asked for.",
    ),
    spec(
        K::PositionNotAvailable,
        "PositionNotAvailable",
        Some("ValueError"),
        None,
        "The position is not where a message starts in the log (attributes `requested`, `oldest`, \
         `newest`, `nearest`).",
    ),
    spec(
        K::Timeout,
        "Timeout",
        Some("TimeoutError"),
        None,
        "Waiting for a publisher or reader did not finish in time (a TimeoutError).",
    ),
    spec(
        K::NoSuchRecording,
        "NoSuchRecording",
        Some("LookupError"),
        None,
        "The journal's catalog has no recording with this id.",
    ),
    spec(
        K::CorruptRecording,
        "CorruptRecording",
        None,
        None,
        "A recording's catalog record or segment fails validation; everything before it was \
         delivered intact (attribute `position`).",
    ),
    spec(
        K::IoError,
        "IoError",
        Some("OSError"),
        None,
        "Another operating-system error (an OSError: `errno`, `strerror`, `filename`), naming \
         what was being done.",
    ),
    spec(
        K::Closed,
        "Closed",
        Some("EOFError"),
        None,
        "The session is over (its publisher closed it or died, and everything it sent was read), \
         or the object was closed. An EOFError, as multiprocessing's Connection.recv raises at \
         the end.",
    ),
    spec(
        K::Fault,
        "Fault",
        None,
        None,
        "The subscription stopped at a corrupt frame or a misbehaving publisher.",
    ),
    spec(
        K::UsedAfterFork,
        "UsedAfterFork",
        Some("RuntimeError"),
        None,
        "A Publication or Subscription made before os.fork() was used in the child: make them \
         after forking (the parent's keep working).",
    ),
];

/// The classes, made once (by `register`, when the module is imported).
static CLASSES: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

fn make_classes(py: Python<'_>) -> PyResult<Vec<Py<PyType>>> {
    let builtins = py.import("builtins")?;
    let type_ = py.get_type::<PyType>();
    let mut classes: Vec<Py<PyType>> = Vec::with_capacity(SPECS.len());
    for (i, s) in SPECS.iter().enumerate() {
        debug_assert_eq!(s.kind as usize, i, "SPECS is in the order of Kind");
        let bases = match (i, s.builtin) {
            (0, _) => PyTuple::new(py, [py.get_type::<PyException>().into_any()])?,
            (_, None) => PyTuple::new(py, [classes[0].bind(py).clone().into_any()])?,
            (_, Some(b)) => PyTuple::new(py, [classes[0].bind(py).clone().into_any(), builtins.getattr(b)?])?,
        };
        let dict = PyDict::new(py);
        dict.set_item("__doc__", s.doc)?;
        dict.set_item("__module__", "shmlog")?;
        let class = type_.call1((s.name, bases, dict))?.cast_into::<PyType>()?;
        classes.push(class.unbind());
    }
    Ok(classes)
}

fn class(py: Python<'_>, kind: Kind) -> Bound<'_, PyType> {
    // `register` made them when the module was imported; nothing raises before that.
    let classes = CLASSES.get(py).expect("the exception classes are made when the module is imported");
    classes[kind as usize].bind(py).clone()
}

/// An exception of class `kind` with `message` (and, for the `OSError` family, its errno).
pub(crate) fn new_err(py: Python<'_>, kind: Kind, message: impl Into<String>) -> PyErr {
    let message = message.into();
    match SPECS[kind as usize].errno {
        Some(errno) => PyErr::from_type(class(py, kind), (errno, message)),
        None => PyErr::from_type(class(py, kind), (message,)),
    }
}

/// `true` if `err` is of class `kind` (or a subclass).
pub(crate) fn is(py: Python<'_>, err: &PyErr, kind: Kind) -> bool {
    err.is_instance(py, class(py, kind).as_any())
}

/// An `OSError`-family exception as Python's own look: `errno`, `strerror` (the core's message
/// without the path it starts with) and `filename`. Without an errno, only the message.
fn os_err(py: Python<'_>, kind: Kind, errno: Option<i32>, message: String, path: &std::path::Path) -> PyErr {
    let Some(errno) = errno.or(SPECS[kind as usize].errno) else {
        return PyErr::from_type(class(py, kind), (message,));
    };
    let path = path.display().to_string();
    let strerror = message.strip_prefix(&format!("{path}: ")).map_or(message.clone(), str::to_owned);
    PyErr::from_type(class(py, kind), (errno, strerror, path))
}

/// The exception for an offer that did not append.
pub(crate) fn offer_error(py: Python<'_>, e: OfferError) -> PyErr {
    let message = e.to_string();
    match e {
        OfferError::BackPressured => new_err(py, K::BackPressured, message),
        OfferError::NotConnected => new_err(py, K::NotConnected, message),
        OfferError::MaxPositionExceeded => new_err(py, K::MaxPositionExceeded, message),
        OfferError::MessageTooLarge { len, max } => with_attrs(
            py,
            new_err(py, K::MessageTooLarge, message),
            &[("len", len as i64), ("max", max as i64)],
        ),
        OfferError::Corrupt => new_err(py, K::CorruptLog, message),
        _ => new_err(py, K::ShmlogError, message),
    }
}

/// The exception for a failed setup, journal or wait.
pub(crate) fn error(py: Python<'_>, e: Error) -> PyErr {
    let message = e.to_string();
    match e {
        Error::InvalidName { .. } => new_err(py, K::InvalidName, message),
        Error::InvalidConfig(_) => new_err(py, K::InvalidConfig, message),
        Error::AlreadyExists { path } => os_err(py, K::AlreadyExists, None, message, &path),
        Error::PermissionDenied { path, .. } => os_err(py, K::PermissionDenied, None, message, &path),
        Error::InsufficientSpace { path, .. } => os_err(py, K::InsufficientSpace, None, message, &path),
        Error::VersionMismatch { .. } => new_err(py, K::VersionMismatch, message),
        Error::Corrupt { .. } => new_err(py, K::CorruptFile, message),
        Error::TooManyReaders { .. } => new_err(py, K::TooManyReaders, message),
        Error::TooManyWriters { .. } => new_err(py, K::TooManyWriters, message),
        Error::ReaderSlots { .. } => new_err(py, K::ReaderSlots, message),
        Error::PositionNotAvailable { requested, oldest, newest, nearest } => with_attrs(
            py,
            new_err(py, K::PositionNotAvailable, message),
            &[("requested", requested), ("oldest", oldest), ("newest", newest), ("nearest", nearest)],
        ),
        Error::Timeout => new_err(py, K::Timeout, message),
        Error::NoSuchRecording { .. } => new_err(py, K::NoSuchRecording, message),
        Error::CorruptRecording { position, .. } => {
            with_attrs(py, new_err(py, K::CorruptRecording, message), &[("position", position)])
        }
        Error::Io { path, source, .. } => os_err(py, K::IoError, source.raw_os_error(), message, &path),
        // `Error` is non-exhaustive: a variant added later is still a ShmlogError.
        _ => new_err(py, K::ShmlogError, message),
    }
}

/// `err` with integer attributes set on its instance.
fn with_attrs(py: Python<'_>, err: PyErr, attrs: &[(&str, i64)]) -> PyErr {
    let value = err.value(py);
    for &(name, v) in attrs {
        // Setting an attribute on a fresh exception instance cannot fail in practice; if it did,
        // the exception still carries the message, which names every number.
        let _ = value.setattr(name, v);
    }
    err
}

/// Makes the exception classes and adds each to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let classes = CLASSES.get_or_try_init(py, || make_classes(py))?;
    for (s, class) in SPECS.iter().zip(classes) {
        m.add(s.name, class.bind(py))?;
    }
    Ok(())
}

/// A setting out of range (an `InvalidConfig`, which is a `ValueError`).
pub(crate) fn invalid(py: Python<'_>, message: impl Into<String>) -> PyErr {
    new_err(py, K::InvalidConfig, message)
}
