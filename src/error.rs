//! Errors: a small `Copy` enum for the hot path, and one for setting up streams.

#[cfg(not(shmlog_loom))]
use crate::sys::fs::{cause, Cause};
use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why an offer or claim did not append. Cheap to return, cheap to match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OfferError {
    /// The slowest live reader is a whole window behind. Retry later (idle first).
    BackPressured,
    /// No live reader is reading this session, so there is nobody to deliver to. Retry later or
    /// drop the message; see `Publication::is_connected`.
    NotConnected,
    /// The stream reached its largest position (`term_length * 2^31`). Create a new publication,
    /// with a bigger term if needed. Never clears.
    MaxPositionExceeded,
    /// The message is longer than `Publication::max_message_len` (or, for `try_claim`, than
    /// `Publication::max_payload_len`). Never clears.
    MessageTooLarge {
        /// Length asked for.
        len: usize,
        /// Largest length accepted for this operation.
        max: usize,
    },
    /// The log's tail counters never described a position while a `ConcurrentPublication`
    /// reserved space: a process other than its writers wrote the log. Never clears.
    Corrupt,
}

impl OfferError {
    /// `true` when the same call may succeed later: back pressure or no reader yet.
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::BackPressured | Self::NotConnected)
    }
}

impl fmt::Display for OfferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BackPressured => f.write_str("back pressured: the slowest reader is a window behind"),
            Self::NotConnected => f.write_str("not connected: no live reader on this stream"),
            Self::MaxPositionExceeded => f.write_str("the stream reached its maximum position"),
            Self::MessageTooLarge { len, max } => {
                write!(f, "message of {len} bytes exceeds the maximum of {max} bytes")
            }
            Self::Corrupt => {
                f.write_str("the log's tail counters are inconsistent (written by a non-writer)")
            }
        }
    }
}

impl std::error::Error for OfferError {}

/// Why creating or opening a stream failed. Every variant names the file involved.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The stream name cannot be used as a file name.
    InvalidName {
        /// The name given.
        name: String,
        /// The rule it breaks.
        reason: &'static str,
    },
    /// A builder setting is out of range.
    InvalidConfig(&'static str),
    /// A live publisher already owns this stream (for a `ConcurrentPublication`: an exclusive
    /// `Publication` does).
    AlreadyExists {
        /// The log file.
        path: PathBuf,
    },
    /// The file or directory is not ours to use (wrong owner, mode, or a symlink).
    PermissionDenied {
        /// The file or directory.
        path: PathBuf,
        /// What was wrong.
        reason: &'static str,
    },
    /// The file system cannot hold the log; nothing was left behind.
    InsufficientSpace {
        /// The directory.
        path: PathBuf,
        /// Bytes the log needs.
        needed: u64,
        /// Bytes available to us.
        available: u64,
    },
    /// The file was written by an incompatible version of shmlog.
    VersionMismatch {
        /// The file.
        path: PathBuf,
        /// Layout version in the file.
        found: i32,
        /// Layout version this build reads.
        expected: i32,
    },
    /// The file is not a valid shmlog file (foreign, truncated, corrupt, or half-initialised).
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What check failed.
        what: &'static str,
    },
    /// Every reader slot of the stream is held by a live reader.
    TooManyReaders {
        /// The reader-slot file.
        path: PathBuf,
        /// Number of slots in it.
        slots: usize,
    },
    /// No writer slot of a concurrent stream's log is free: live writers hold them, or dead
    /// writers whose last message is not padded yet (a live writer's unfinished message before
    /// it, a claim left open or a writer stopped, keeps the unblocker from padding it; it is
    /// padded, and the slot freed, once that writer goes on).
    TooManyWriters {
        /// The log file.
        path: PathBuf,
        /// Writer slots in a log.
        slots: usize,
        /// Slots held by live writers.
        live: usize,
        /// Slots of dead writers whose message is not padded yet.
        awaiting_unblock: Vec<usize>,
    },
    /// The stream's reader-slot file, shared by live processes, has fewer slots than asked for.
    /// It was created by whoever came first (a subscription, with its own `max_readers`); give
    /// every participant the same `max_readers`, or let the file's users close first.
    ReaderSlots {
        /// The reader-slot file.
        path: PathBuf,
        /// Slots it has.
        slots: usize,
        /// Slots asked for.
        wanted: usize,
    },
    /// The requested join position is not one to join at: no longer (or not yet) in the log, or
    /// not where a message starts. `nearest` is one that is, as of the refusal.
    PositionNotAvailable {
        /// Position asked for.
        requested: i64,
        /// Oldest position where a message starts that the log still holds.
        oldest: i64,
        /// Newest position (the publisher's).
        newest: i64,
        /// The first position at or after `requested` (within `oldest..=newest`) where a message
        /// starts: a retry there joins, unless the log moved on meanwhile.
        nearest: i64,
    },
    /// Waiting for a publisher or reader did not finish in time.
    Timeout,
    /// The journal's catalog has no recording with this id.
    NoSuchRecording {
        /// The id asked for.
        id: u32,
    },
    /// A recording's catalog record or segment file fails validation (damaged, truncated, or
    /// foreign): the file, the stream position at which reading stopped (-1 for a catalog
    /// record), and the check that failed. Everything before that position was delivered intact.
    CorruptRecording {
        /// The segment file or catalog.
        path: PathBuf,
        /// Stream position of the bad frame.
        position: i64,
        /// What check failed.
        what: &'static str,
    },
    /// Any other operating-system error, with what we were doing and on which file.
    Io {
        /// What was being done.
        op: &'static str,
        /// On which file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

#[cfg(not(shmlog_loom))]
impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        let path = path.into();
        match cause(&source) {
            Cause::Denied => Self::PermissionDenied { path, reason: "the operating system denied access" },
            Cause::Symlink => Self::PermissionDenied { path, reason: "refusing to follow a symlink" },
            Cause::NoSpace | Cause::TooLarge | Cause::Other => Self::Io { op, path, source },
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidName { name, reason } => write!(f, "invalid stream name {name:?}: {reason}"),
            Self::InvalidConfig(what) => write!(f, "invalid configuration: {what}"),
            Self::AlreadyExists { path } => {
                write!(f, "{}: a live publisher already owns this stream", path.display())
            }
            Self::PermissionDenied { path, reason } => {
                write!(f, "{}: permission denied: {reason}", path.display())
            }
            Self::InsufficientSpace { path, needed, available } if is_journal_file(path) => write!(
                f,
                "{}: insufficient space: {needed} bytes needed, {available} are available (the journal's disk is full)",
                path.display()
            ),
            Self::InsufficientSpace { path, needed, available } => write!(
                f,
                "{}: insufficient space: the log needs {needed} bytes, {available} are available \
                 (enlarge /dev/shm, e.g. docker --shm-size, or use a smaller term length)",
                path.display()
            ),
            Self::VersionMismatch { path, found, expected } => write!(
                f,
                "{}: layout version {found} found, this build of shmlog reads version {expected}",
                path.display()
            ),
            Self::Corrupt { path, what } => write!(f, "{}: not a valid shmlog file: {what}", path.display()),
            Self::TooManyReaders { path, slots } => {
                write!(f, "{}: all {slots} reader slots are in use by live readers", path.display())
            }
            Self::TooManyWriters { path, slots, live, awaiting_unblock } => match awaiting_unblock.as_slice() {
                [] => write!(f, "{}: all {slots} writer slots of the log are held by live writers", path.display()),
                dead => write!(
                    f,
                    "{}: no writer slot of the log is free: {live} of {slots} writer slots are held by live \
                     writers, and {} (slot {}) by dead writers whose last message could not be padded yet: a \
                     live writer's uncommitted message before it (an open claim, a stopped writer) holds it; \
                     retry once that is committed",
                    path.display(),
                    dead.len(),
                    dead.iter().map(|slot| slot.to_string()).collect::<Vec<_>>().join(", slot "),
                ),
            },
            Self::ReaderSlots { path, slots, wanted } => write!(
                f,
                "{}: the stream's reader-slot file has {slots} slots, fewer than the {wanted} asked for, and is \
                 in use; give every participant the same max_readers, or close its users first",
                path.display()
            ),
            Self::PositionNotAvailable { requested, oldest, newest, nearest } => write!(
                f,
                "position {requested} is not where a message starts in the log (messages start in \
                 {oldest}..={newest}); the nearest one is {nearest}"
            ),
            Self::Timeout => f.write_str("timed out"),
            Self::NoSuchRecording { id } => write!(f, "no recording with id {id} in the journal's catalog"),
            Self::CorruptRecording { path, position: -1, what } => {
                write!(f, "{}: damaged catalog record: {what}", path.display())
            }
            Self::CorruptRecording { path, position, what } => {
                write!(f, "{}: damaged recording at stream position {position}: {what}", path.display())
            }
            Self::Io { op, path, source } => write!(f, "{}: {op}: {source}", path.display()),
        }
    }
}

/// A journal's segment or catalog (whose full disk is not a `/dev/shm` matter).
fn is_journal_file(path: &std::path::Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.ends_with(".seg") || name.starts_with("catalog") || name.starts_with(".catalog.")
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Why a file failed validation, before we know which path to blame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub enum Invalid {
    VersionMismatch { found: i32 },
    Corrupt(&'static str),
}

impl Invalid {
    /// Attaches the file the problem was found in.
    pub(crate) fn at(self, path: impl Into<PathBuf>) -> Error {
        let path = path.into();
        match self {
            Self::VersionMismatch { found } => {
                Error::VersionMismatch { path, found, expected: crate::layout::log_meta::LAYOUT_VERSION }
            }
            Self::Corrupt(what) => Error::Corrupt { path, what },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_back_pressure_and_not_connected_are_retryable() {
        assert!(OfferError::BackPressured.is_retryable());
        assert!(OfferError::NotConnected.is_retryable());
        assert!(!OfferError::MaxPositionExceeded.is_retryable());
        assert!(!OfferError::MessageTooLarge { len: 2, max: 1 }.is_retryable());
    }

    #[test]
    fn messages_name_the_file_and_the_cause() {
        let e = Error::InsufficientSpace { path: "/dev/shm/x".into(), needed: 10, available: 5 };
        let s = e.to_string();
        assert!(s.contains("/dev/shm/x") && s.contains("10") && s.contains('5'), "{s}");
        let e = Invalid::VersionMismatch { found: 9 }.at("/f");
        assert!(matches!(
            e,
            Error::VersionMismatch { found: 9, expected: crate::layout::log_meta::LAYOUT_VERSION, .. }
        ));
    }
}
