//! Every error of the core as a Python exception class, with the core's message.
//!
//! `ShmlogError` is the base of all of them; each variant of `shmlog::Error` and
//! `shmlog::OfferError` has its subclass, so `except shmlog.BackPressured:` catches exactly that.
//! A few carry the core's numbers as attributes (`nearest` of `PositionNotAvailable`, ...).

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use shmlog::{Error, OfferError};

create_exception!(shmlog, ShmlogError, PyException, "Base class of every error shmlog raises.");
create_exception!(
    shmlog,
    BackPressured,
    ShmlogError,
    "The slowest live reader is a window behind: retry later."
);
create_exception!(
    shmlog,
    NotConnected,
    ShmlogError,
    "No live reader reads this stream: retry later, or drop the message."
);
create_exception!(
    shmlog,
    MaxPositionExceeded,
    ShmlogError,
    "The stream reached its largest position; create a new publication."
);
create_exception!(
    shmlog,
    MessageTooLarge,
    ShmlogError,
    "The message is longer than the publication's max_message_len (attributes `len`, `max`)."
);
create_exception!(
    shmlog,
    CorruptLog,
    ShmlogError,
    "The log's counters were written by a process other than its writers."
);
create_exception!(shmlog, InvalidName, ShmlogError, "The stream name cannot be used as a file name.");
create_exception!(shmlog, InvalidConfig, ShmlogError, "A setting is out of range.");
create_exception!(shmlog, AlreadyExists, ShmlogError, "A live publisher already owns this stream.");
create_exception!(
    shmlog,
    PermissionDenied,
    ShmlogError,
    "The file or directory is not ours to use (owner, mode, symlink)."
);
create_exception!(
    shmlog,
    InsufficientSpace,
    ShmlogError,
    "The file system cannot hold the log or the recording."
);
create_exception!(
    shmlog,
    VersionMismatch,
    ShmlogError,
    "The file was written by an incompatible version of shmlog."
);
create_exception!(
    shmlog,
    CorruptFile,
    ShmlogError,
    "The file is not a valid shmlog file (foreign, truncated or corrupt)."
);
create_exception!(
    shmlog,
    TooManyReaders,
    ShmlogError,
    "Every reader slot of the stream is held by a live reader."
);
create_exception!(
    shmlog,
    TooManyWriters,
    ShmlogError,
    "No writer slot of a concurrent stream's log is free."
);
create_exception!(
    shmlog,
    ReaderSlots,
    ShmlogError,
    "The stream's reader-slot file has fewer slots than asked for."
);
create_exception!(shmlog, PositionNotAvailable, ShmlogError, "The position is not where a message starts in the log (attributes `requested`, `oldest`, `newest`, `nearest`).");
create_exception!(shmlog, Timeout, ShmlogError, "Waiting for a publisher or reader did not finish in time.");
create_exception!(
    shmlog,
    NoSuchRecording,
    ShmlogError,
    "The journal's catalog has no recording with this id."
);
create_exception!(
    shmlog,
    CorruptRecording,
    ShmlogError,
    "A recording's catalog record or segment fails validation; everything before it was delivered intact."
);
create_exception!(
    shmlog,
    IoError,
    ShmlogError,
    "Another operating-system error, naming the file and what was being done."
);
create_exception!(shmlog, Closed, ShmlogError, "The stream is closed (its publisher closed it or died, and everything it sent was read), or the object was closed.");
create_exception!(
    shmlog,
    Fault,
    ShmlogError,
    "The subscription stopped at a corrupt frame or a misbehaving publisher."
);

/// The exception for an offer that did not append.
pub fn offer_error(py: Python<'_>, e: OfferError) -> PyErr {
    let message = e.to_string();
    match e {
        OfferError::BackPressured => BackPressured::new_err(message),
        OfferError::NotConnected => NotConnected::new_err(message),
        OfferError::MaxPositionExceeded => MaxPositionExceeded::new_err(message),
        OfferError::MessageTooLarge { len, max } => {
            with_attrs(py, MessageTooLarge::new_err(message), &[("len", len as i64), ("max", max as i64)])
        }
        OfferError::Corrupt => CorruptLog::new_err(message),
    }
}

/// The exception for a failed setup, journal or wait.
pub fn error(py: Python<'_>, e: Error) -> PyErr {
    let message = e.to_string();
    match e {
        Error::InvalidName { .. } => InvalidName::new_err(message),
        Error::InvalidConfig(_) => InvalidConfig::new_err(message),
        Error::AlreadyExists { .. } => AlreadyExists::new_err(message),
        Error::PermissionDenied { .. } => PermissionDenied::new_err(message),
        Error::InsufficientSpace { .. } => InsufficientSpace::new_err(message),
        Error::VersionMismatch { .. } => VersionMismatch::new_err(message),
        Error::Corrupt { .. } => CorruptFile::new_err(message),
        Error::TooManyReaders { .. } => TooManyReaders::new_err(message),
        Error::TooManyWriters { .. } => TooManyWriters::new_err(message),
        Error::ReaderSlots { .. } => ReaderSlots::new_err(message),
        Error::PositionNotAvailable { requested, oldest, newest, nearest } => with_attrs(
            py,
            PositionNotAvailable::new_err(message),
            &[("requested", requested), ("oldest", oldest), ("newest", newest), ("nearest", nearest)],
        ),
        Error::Timeout => Timeout::new_err(message),
        Error::NoSuchRecording { .. } => NoSuchRecording::new_err(message),
        Error::CorruptRecording { position, .. } => {
            with_attrs(py, CorruptRecording::new_err(message), &[("position", position)])
        }
        Error::Io { .. } => IoError::new_err(message),
        // `Error` is non-exhaustive: a variant added later is still a ShmlogError.
        _ => ShmlogError::new_err(message),
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

/// Adds every exception class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    macro_rules! add {
        ($($t:ident),*) => { $( m.add(stringify!($t), py.get_type::<$t>())?; )* };
    }
    add!(
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
        Fault
    );
    Ok(())
}

/// An operating-system error of the bindings' own (the asyncio wake-up socket).
pub fn io_error(op: &str, e: std::io::Error) -> PyErr {
    IoError::new_err(format!("{op}: {e}"))
}
