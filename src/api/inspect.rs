//! Looking into a stream directory from the outside: what streams it holds and who uses them
//! ([`streams`]), and removing what dead processes left behind ([`clean`]).
//!
//! These are the library half of the `shmlog stat` and `shmlog clean` commands (the tool is the
//! crate `shmlog-tools`); nothing here prints. A bridge's status and resume files
//! (`<stream>.<out|in>.<pid>.bridge|resume`, crate `shmlog-bridge`) are not the core's: they are
//! listed as [`CleanReason::NotOurs`] here, and `shmlog_bridge::status` reads and cleans them.
//!
//! [`streams`] is strictly read-only: it opens every file read-only, maps it read-only, and learns
//! who is alive only by asking the kernel which locks are held (`F_OFD_GETLK`). It never takes a
//! lock, so it can neither disturb nor be mistaken for a publisher or a reader. Everything it
//! reports is a snapshot: counters and positions move while it reads them.
//!
//! [`clean`] removes a stream's files only when their owners are provably gone: the log when its
//! publisher's lock is free and no reader maps it, the reader-slot file when no process has it
//! open and the stream has no live publisher. It takes the same locks the owners would hold while
//! it checks and unlinks, so it is safe to run while other processes use the directory. Files it
//! cannot validate (foreign, corrupt, another layout version) are reported and left alone.
//!
//! ```no_run
//! let dir = shmlog::default_dir();
//! for stream in shmlog::inspect::streams(&dir)? {
//!     if let Some(log) = &stream.log {
//!         let lagging = stream.readers.iter().filter(|r| r.holds_back).count();
//!         println!("{}: position {} ({} reader(s) holding it back)", stream.name, log.position, lagging);
//!     }
//! }
//! let report = shmlog::inspect::clean(&dir, true)?; // dry run
//! for entry in &report.removed {
//!     println!("would remove {}: {}", entry.path.display(), entry.reason);
//! }
//! # Ok::<(), shmlog::Error>(())
//! ```

use crate::error::Error;
use crate::layout::slots as s;
use crate::log::{Counter, Gauge, Log};
use crate::region::ReadOnlyRegion;
use crate::stream::files::{inspect_log, inspect_slots, open_existing};
use crate::stream::liveness::{
    in_use, lock_log_owners, lock_whole, log_mapped_by_readers, publisher_alive, slot_owner_alive, slots_held,
};
use crate::stream::name::{self, classify, Entry};
use crate::stream::slots::Slots;
use crate::sys::fs::is_same_file;
use std::collections::BTreeSet;
use std::fmt;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Temporary files younger than this are assumed to be still under construction.
pub const TEMP_MIN_AGE: Duration = Duration::from_secs(10);

/// One stream of a directory: its current log (if any) and its readers.
#[derive(Debug)]
#[non_exhaustive]
pub struct StreamInfo {
    /// The stream's name (the file name without `.log` / `.readers`).
    pub name: String,
    /// The current session's log, if the file exists and is valid.
    pub log: Option<LogInfo>,
    /// The reader-slot file, if it exists.
    pub readers_path: Option<PathBuf>,
    /// Number of slots in the reader-slot file (0 when there is none or it is invalid).
    pub slot_count: usize,
    /// Every claimed slot, in slot order.
    pub readers: Vec<ReaderInfo>,
    /// Files of this stream that could not be read or validated (foreign, corrupt, another
    /// layout version, permission denied). The rest of the report is still filled in.
    pub problems: Vec<Error>,
}

/// The log of a stream's current session, as its metadata says.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogInfo {
    /// The log file.
    pub path: PathBuf,
    /// Length of the file in bytes (three terms plus metadata, page-aligned).
    pub file_length: u64,
    /// The name stored in the metadata.
    pub name: String,
    /// Process id the publisher wrote when it created the log.
    pub publisher_pid: i32,
    /// `true` while a process holds the publisher's lock on the log.
    pub publisher_alive: bool,
    /// `true` while at least one reader maps the log (holds a reader lock on it).
    pub mapped_by_readers: bool,
    /// Random id of the session.
    pub session_id: i32,
    /// Id written in every frame header, derived from the name.
    pub stream_id: i32,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_ns: i64,
    /// Term length in bytes.
    pub term_length: usize,
    /// How far the publisher may run ahead of the slowest reader, in bytes.
    pub window: usize,
    /// Largest frame, header included, in bytes.
    pub mtu: usize,
    /// Page size the file length is rounded to.
    pub page_size: usize,
    /// The publisher's position: bytes appended since the session began.
    pub position: i64,
    /// The publisher's limit as of its last recomputation (0 before the first one).
    pub limit: i64,
    /// End-of-stream position, once the publisher has closed.
    pub eos_position: Option<i64>,
    /// Offers refused for back pressure or for want of a reader.
    pub back_pressure_events: i64,
    /// Term rotations so far (the active term count).
    pub rotations: i64,
    /// Times the publisher re-read the reader slots to move its limit.
    pub limit_recomputes: i64,
    /// Dead readers whose slots the publisher freed.
    pub readers_evicted: i64,
    /// Readers counted at the publisher's last limit recomputation.
    pub connected_readers: i64,
    /// Reader positions found past the publisher's own (impossible for an honest reader: a stray
    /// or forged word) and ignored by flow control.
    pub ignored_positions: i64,
    /// `true` for the log of a `ConcurrentPublication` (any number of writers).
    pub concurrent: bool,
    /// The writer slots of a concurrent log that were ever claimed (empty for an exclusive log).
    pub writers: Vec<WriterInfo>,
}

/// A writer slot of a concurrent log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriterInfo {
    /// Index of the slot.
    pub slot: usize,
    /// Process id its last owner wrote.
    pub pid: i64,
    /// `true` while a process holds the slot's lock.
    pub alive: bool,
    /// Where the writer is reserving or writing a frame (`None` between messages). On a dead
    /// writer: a hole that the next held-back writer or waiting reader pads.
    pub pending: Option<i64>,
}

/// What a claimed reader slot says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReaderState {
    /// Claimed, not reading any session (waiting for a publisher, or between sessions).
    Waiting,
    /// Reading a session; counted by that session's flow control.
    Active,
    /// A state word this version does not know (corrupt or foreign slot file).
    Unknown(i64),
}

impl fmt::Display for ReaderState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Waiting => f.write_str("waiting"),
            Self::Active => f.write_str("active"),
            Self::Unknown(v) => write!(f, "unknown({v})"),
        }
    }
}

/// One claimed reader slot.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReaderInfo {
    /// Slot index in the reader-slot file.
    pub slot: usize,
    /// Process id of the reader that claimed the slot.
    pub pid: i64,
    /// `true` while a process holds the slot's lock. A dead reader's slot stays claimed until a
    /// publisher frees it.
    pub alive: bool,
    /// What the slot says the reader does.
    pub state: ReaderState,
    /// The session it reads, when active.
    pub session_id: Option<i32>,
    /// Its position in that session.
    pub position: i64,
    /// Where it joined that session.
    pub join_position: i64,
    /// When it claimed the slot, nanoseconds since the Unix epoch.
    pub claimed_ns: i64,
    /// Bytes between the publisher's position and this reader's, when it reads the current
    /// session.
    pub lag: Option<i64>,
    /// `true` for the slowest live reader of the current session: the one whose position sets
    /// the publisher's limit.
    pub slowest: bool,
    /// `true` when this is the slowest reader and it is a whole window behind, so the publisher
    /// is back-pressured until it moves.
    pub holds_back: bool,
    /// `true` for an untethered reader (`SubscriptionBuilder::tethered(false)`): the publisher
    /// never waits for it, and it is never the slowest reader.
    pub untethered: bool,
    /// Times the publisher lapped this untethered reader, over the slot's life (each one loss
    /// report). Kept in the slot, so tools see it.
    pub losses: i64,
    /// Stream bytes those losses skipped.
    pub lost_bytes: i64,
}

/// Lists the streams in `dir` with their publisher, counters and readers. Read-only.
///
/// Fails only when the directory itself cannot be read; a file that cannot be read or validated
/// is reported in [`StreamInfo::problems`]. Streams come sorted by name.
pub fn streams(dir: impl AsRef<Path>) -> Result<Vec<StreamInfo>, Error> {
    let dir = dir.as_ref();
    let listing = list(dir)?;
    Ok(listing.stream_names().into_iter().map(|name| inspect_stream(dir, name)).collect())
}

fn inspect_stream(dir: &Path, name: String) -> StreamInfo {
    let mut info = StreamInfo {
        log: None,
        readers_path: None,
        slot_count: 0,
        readers: Vec::new(),
        problems: Vec::new(),
        name,
    };
    let log_path = name::log_path(dir, &info.name);
    let mut current = None;
    match inspect_log(&log_path, false) {
        Ok(Some((file, log))) => match log_info(&log_path, &file, &log) {
            Ok(l) => {
                current = Some((l.session_id, l.position, l.window as i64));
                info.log = Some(l);
            }
            Err(e) => info.problems.push(e),
        },
        Ok(None) => {}
        Err(e) => info.problems.push(e),
    }
    let readers_path = name::readers_path(dir, &info.name);
    match inspect_slots(&readers_path, false) {
        Ok(Some((file, slots))) => {
            info.slot_count = slots.count();
            info.readers = reader_infos(&file, &slots, current);
            info.readers_path = Some(readers_path);
        }
        Ok(None) => {}
        Err(e) => {
            info.readers_path = Some(readers_path);
            info.problems.push(e);
        }
    }
    info
}

fn log_info(path: &Path, file: &File, log: &Log<ReadOnlyRegion>) -> Result<LogInfo, Error> {
    let g = log.geometry();
    let position = log.producer_position().map_err(|e| e.at(path))?;
    let eos = log.eos_position();
    Ok(LogInfo {
        path: path.to_path_buf(),
        file_length: g.file_length() as u64,
        name: log.name(),
        publisher_pid: log.publisher_pid(),
        publisher_alive: publisher_alive(file),
        mapped_by_readers: log_mapped_by_readers(file),
        session_id: log.session_id(),
        stream_id: log.stream_id(),
        created_ns: log.created_ns(),
        term_length: g.term_length,
        window: g.window,
        mtu: g.mtu,
        page_size: g.page_size,
        position,
        limit: log.gauge(Gauge::PublisherLimit),
        eos_position: (eos != i64::MAX).then_some(eos),
        back_pressure_events: log.counter(Counter::BackPressureEvents),
        rotations: i64::from(log.active_term_count()),
        limit_recomputes: log.counter(Counter::LimitRecomputes),
        readers_evicted: log.counter(Counter::ReadersEvicted),
        connected_readers: log.gauge(Gauge::ConnectedReaders),
        ignored_positions: log.counter(Counter::IgnoredPositions),
        concurrent: log.is_concurrent(),
        writers: (0..log.writers_high_water())
            .map(|slot| WriterInfo {
                slot,
                pid: log.writer_pid(slot),
                alive: crate::stream::liveness::writer_alive(file, slot),
                pending: Some(log.writer_pending(slot)).filter(|&p| p != crate::layout::log_meta::NO_PENDING),
            })
            .collect(),
    })
}

/// Claimed slots, with lag and the slowest reader of `current = (session, position, window)`.
fn reader_infos(
    file: &File,
    slots: &Slots<ReadOnlyRegion>,
    current: Option<(i32, i64, i64)>,
) -> Vec<ReaderInfo> {
    let mut out: Vec<ReaderInfo> = Vec::new();
    for i in 0..slots.high_water() {
        let v = slots.view(i);
        let state = match v.state {
            s::STATE_FREE => continue,
            s::STATE_WAITING => ReaderState::Waiting,
            s::STATE_ACTIVE => ReaderState::Active,
            other => ReaderState::Unknown(other),
        };
        let session_id = (state == ReaderState::Active).then_some(v.session_id);
        let lag = match current {
            // Saturating: both words come from shared memory (a forged one must not panic a
            // debug build).
            Some((session, producer, _)) if session_id == Some(session) => {
                Some(producer.saturating_sub(v.position))
            }
            _ => None,
        };
        out.push(ReaderInfo {
            slot: i,
            pid: v.pid,
            alive: slot_owner_alive(file, i),
            state,
            session_id,
            position: v.position,
            join_position: v.join_position,
            claimed_ns: v.claimed_ns,
            lag,
            slowest: false,
            holds_back: false,
            untethered: v.untethered,
            losses: v.losses,
            lost_bytes: v.lost_bytes,
        });
    }
    if let Some((_, _, window)) = current {
        let slowest = out
            .iter_mut()
            .filter(|r| r.alive && !r.untethered && r.lag.is_some())
            .min_by_key(|r| (r.position, r.slot));
        if let Some(r) = slowest {
            r.slowest = true;
            r.holds_back = r.lag.is_some_and(|lag| lag >= window);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Directory listing

struct Listing {
    entries: Vec<(PathBuf, Entry)>,
}

impl Listing {
    fn stream_names(&self) -> BTreeSet<String> {
        self.entries
            .iter()
            .filter_map(|(_, e)| match e {
                Entry::Log(n) | Entry::Readers(n) => Some(n.clone()),
                _ => None,
            })
            .collect()
    }
}

fn list(dir: &Path) -> Result<Listing, Error> {
    let read = fs::read_dir(dir).map_err(|e| Error::io("read directory", dir, e))?;
    let mut entries = Vec::new();
    for entry in read {
        let entry = entry.map_err(|e| Error::io("read directory", dir, e))?;
        let name = entry.file_name();
        let kind = name.to_str().map_or(Entry::Other, classify);
        entries.push((entry.path(), kind));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Listing { entries })
}

// ---------------------------------------------------------------------------------------------
// Cleaning

/// Why [`clean`] removed or kept a file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CleanReason {
    /// Removed: a log whose publisher is gone and that no reader maps.
    PublisherDead {
        /// The publisher's process id, as it wrote it.
        pid: i32,
    },
    /// Removed: a reader-slot file that no process has open, of a stream without a live publisher.
    NoReaders,
    /// Removed: a temporary file nobody holds, left by a creator that died.
    StaleTemporary {
        /// How long ago it was last changed.
        age: Duration,
    },
    /// Kept: the stream's publisher is alive.
    PublisherAlive {
        /// Its process id.
        pid: i32,
    },
    /// Kept: the publisher is gone but a live reader still maps the log (it may be draining it).
    MappedByReader,
    /// Kept: the publisher is gone and no reader maps the log yet, but a live reader is owed its
    /// session (it waits for it, or still reads an earlier one) and will read it.
    OwedToReader,
    /// Kept: a live reader holds a slot.
    SlotHeld,
    /// Kept: a live process (a publisher, or a reader between slots) has the file open.
    InUse,
    /// Kept: the stream's log could not be validated, so whether a publisher uses the slot file
    /// is unknown.
    LogUnknown,
    /// Kept: a temporary file that a live process holds a lock on.
    TemporaryInUse,
    /// Kept: a temporary file changed less than [`TEMP_MIN_AGE`] ago.
    TemporaryTooYoung {
        /// How long ago it was last changed.
        age: Duration,
    },
    /// Kept: not a file name of a stream (a log, a reader-slot file, their temporaries); a
    /// bridge's files too (`shmlog_bridge::status::clean` handles those).
    NotOurs,
    /// Kept: the file could not be opened or validated (foreign, corrupt, another layout
    /// version, permission denied); the message says why.
    Invalid(String),
    /// Kept: the file changed while being examined (replaced or removed by someone else).
    Changed,
}

impl fmt::Display for CleanReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PublisherDead { pid } => {
                write!(f, "publisher (pid {pid}) is gone and no reader maps the log")
            }
            Self::NoReaders => f.write_str("no process uses it and the stream has no live publisher"),
            Self::StaleTemporary { age } => {
                write!(f, "temporary file nobody holds, unchanged for {} s", age.as_secs())
            }
            Self::PublisherAlive { pid } => write!(f, "publisher (pid {pid}) is alive"),
            Self::MappedByReader => f.write_str("publisher is gone but a live reader still maps the log"),
            Self::OwedToReader => {
                f.write_str("publisher is gone but a live reader waits to read this session")
            }
            Self::SlotHeld => f.write_str("a live reader holds a slot"),
            Self::InUse => f.write_str("a live publisher or reader has it open"),
            Self::LogUnknown => f.write_str("the stream's log could not be validated"),
            Self::TemporaryInUse => f.write_str("temporary file held by a live process"),
            Self::TemporaryTooYoung { age } => {
                write!(f, "temporary file changed {} ms ago (may be under construction)", age.as_millis())
            }
            Self::NotOurs => f.write_str("not a shmlog file name"),
            Self::Invalid(why) => write!(f, "cannot validate: {why}"),
            Self::Changed => f.write_str("the file changed while being examined"),
        }
    }
}

/// One file [`clean`] removed or kept, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CleanEntry {
    /// The file.
    pub path: PathBuf,
    /// Why it was removed or kept.
    pub reason: CleanReason,
}

/// What [`clean`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CleanReport {
    /// `true` if nothing was removed: `removed` lists what would have been.
    pub dry_run: bool,
    /// Files removed (or that would be, in a dry run).
    pub removed: Vec<CleanEntry>,
    /// Files left in place.
    pub kept: Vec<CleanEntry>,
}

impl CleanReport {
    fn removed(&mut self, path: &Path, reason: CleanReason) {
        self.removed.push(CleanEntry { path: path.into(), reason });
    }

    fn kept(&mut self, path: &Path, reason: CleanReason) {
        self.kept.push(CleanEntry { path: path.into(), reason });
    }
}

/// Removes the files in `dir` that dead processes left behind; with `dry_run`, only says which.
///
/// - A log is removed when no process holds its publisher lock and no reader maps it.
/// - A reader-slot file is removed when no process has it open (publishers and readers announce
///   themselves with a read lock on its first byte, readers also hold their slot's lock) and the
///   stream has no live publisher. The whole file is write-locked while it is unlinked, so a
///   process opening it at the same time either keeps it alive or finds it gone and opens the
///   stream's new one.
/// - A temporary file (`.<name>.<nonce>.<log|readers>.tmp`) is removed when nobody holds a lock
///   on it and it has not changed for [`TEMP_MIN_AGE`].
///
/// Everything else is kept and reported with the reason. Idempotent: a second run removes nothing
/// new. Fails only when the directory cannot be read.
///
/// A publisher that replaces a dead publisher's log in the very instant `clean` holds that log's
/// lock fails with [`Error::AlreadyExists`]; retrying succeeds.
pub fn clean(dir: impl AsRef<Path>, dry_run: bool) -> Result<CleanReport, Error> {
    let dir = dir.as_ref();
    let listing = list(dir)?;
    let mut report = CleanReport { dry_run, ..CleanReport::default() };
    for name in listing.stream_names() {
        clean_stream(dir, &name, dry_run, &mut report);
    }
    for (path, entry) in &listing.entries {
        match entry {
            Entry::Log(_) | Entry::Readers(_) => {}
            Entry::Temp => clean_temp(path, dry_run, &mut report),
            Entry::Other => report.kept(path, CleanReason::NotOurs),
        }
    }
    Ok(report)
}

/// How a stream's log was found, for deciding about its slot file.
enum LogVerdict {
    /// No log file.
    Absent,
    /// A live publisher owns the stream.
    Alive { pid: i32 },
    /// Publisher gone; `held` is our lock on bytes 0..2 (publisher and reader bytes), if taken;
    /// the session's id and number.
    Dead { held: Option<File>, pid: i32, mapped: bool, session: (i32, i32) },
    /// Could not be validated.
    Unknown,
}

fn clean_stream(dir: &Path, name: &str, dry_run: bool, report: &mut CleanReport) {
    let log_path = dir.join(format!("{name}.log"));
    let readers_path = dir.join(format!("{name}.readers"));
    let verdict = judge_log(&log_path, dry_run, report);
    match &verdict {
        LogVerdict::Alive { pid } => {
            if fs::symlink_metadata(&readers_path).is_ok() {
                report.kept(&readers_path, CleanReason::PublisherAlive { pid: *pid });
            }
        }
        LogVerdict::Unknown => {
            if fs::symlink_metadata(&readers_path).is_ok() {
                report.kept(&readers_path, CleanReason::LogUnknown);
            }
        }
        // Slot file first, while we hold the dead log's locks: nobody can replace the log (a new
        // publisher needs that lock) while we decide about the slot file it would use.
        LogVerdict::Dead { .. } => clean_readers(&readers_path, None, dry_run, report),
        LogVerdict::Absent => clean_readers(&readers_path, Some(&log_path), dry_run, report),
    }
    if let LogVerdict::Dead { held, pid, mapped, session } = verdict {
        if mapped {
            report.kept(&log_path, CleanReason::MappedByReader);
        } else if owed_to_reader(&readers_path, session) {
            report.kept(&log_path, CleanReason::OwedToReader);
        } else if dry_run {
            report.removed(&log_path, CleanReason::PublisherDead { pid });
        } else if let Some(file) = held {
            remove_locked(&file, &log_path, CleanReason::PublisherDead { pid }, report);
        }
    }
}

/// Decides about a stream's log. Outside a dry run, takes the publisher and reader bytes' lock
/// when both are free, so the log cannot gain an owner or a reader while we act on it.
fn judge_log(path: &Path, dry_run: bool, report: &mut CleanReport) -> LogVerdict {
    let (file, log) = match inspect_log(path, !dry_run) {
        Ok(Some(pair)) => pair,
        Ok(None) => return LogVerdict::Absent,
        Err(e) => {
            report.kept(path, CleanReason::Invalid(e.to_string()));
            return LogVerdict::Unknown;
        }
    };
    let pid = log.publisher_pid();
    let session = (log.session_id(), log.session_seq());
    if !dry_run {
        match lock_log_owners(&file) {
            Ok(true) => return LogVerdict::Dead { held: Some(file), pid, mapped: false, session },
            Ok(false) => {}
            Err(e) => {
                report.kept(path, CleanReason::Invalid(Error::io("lock", path, e).to_string()));
                return LogVerdict::Unknown;
            }
        }
    }
    if publisher_alive(&file) {
        report.kept(path, CleanReason::PublisherAlive { pid });
        return LogVerdict::Alive { pid };
    }
    let mapped = log_mapped_by_readers(&file);
    if !dry_run && !mapped {
        // The lock was refused, yet nobody holds it now: someone took and dropped it meanwhile
        // (a publisher came and went, or another `clean`). Judge again next run.
        report.kept(path, CleanReason::Changed);
        return LogVerdict::Unknown;
    }
    LogVerdict::Dead { held: None, pid, mapped, session }
}

/// `true` if the session `(id, number)` is owed to a live reader of the stream whose slot file is
/// at `path` (a subscription that waits for it will read its log: removing it would lose it).
fn owed_to_reader(path: &Path, (session, seq): (i32, i32)) -> bool {
    match inspect_slots(path, false) {
        Ok(Some((file, slots))) => crate::stream::liveness::owed_to_live_reader(&slots, &file, session, seq),
        _ => false,
    }
}

/// Removes the slot file if no process uses it: every publisher and reader holding it open keeps
/// a read lock on its first byte, and every reader a write lock on its slot, so one write lock
/// over the whole file proves nobody does, and keeps everyone out while we unlink. `absent_log`
/// is the stream's log path when there was no log: it is checked again just before unlinking.
fn clean_readers(path: &Path, absent_log: Option<&Path>, dry_run: bool, report: &mut CleanReport) {
    let (file, slots) = match inspect_slots(path, !dry_run) {
        Ok(Some(pair)) => pair,
        Ok(None) => return,
        Err(e) => return report.kept(path, CleanReason::Invalid(e.to_string())),
    };
    let busy = |file: &File| {
        if slots_held(file, slots.count()) {
            CleanReason::SlotHeld
        } else {
            CleanReason::InUse
        }
    };
    if dry_run {
        if in_use(&file) {
            report.kept(path, busy(&file));
        } else {
            report.removed(path, CleanReason::NoReaders);
        }
        return;
    }
    match lock_whole(&file) {
        // A process opening the file now fails to take its read lock or finds the name gone,
        // and opens (or creates) the stream's current slot file instead.
        Ok(true) => {
            if absent_log.is_some_and(|log| fs::symlink_metadata(log).is_ok()) {
                return report.kept(path, CleanReason::Changed);
            }
            remove_locked(&file, path, CleanReason::NoReaders, report)
        }
        Ok(false) => report.kept(path, busy(&file)),
        Err(e) => report.kept(path, CleanReason::Invalid(Error::io("lock", path, e).to_string())),
    }
}

/// Unlinks `path` if it is still the file we hold locked (`file`); the lock drops when the
/// caller closes `file`.
fn remove_locked(file: &File, path: &Path, reason: CleanReason, report: &mut CleanReport) {
    match is_same_file(file, path) {
        Ok(true) => match fs::remove_file(path) {
            Ok(()) => report.removed(path, reason),
            Err(e) if e.kind() == io::ErrorKind::NotFound => report.kept(path, CleanReason::Changed),
            Err(e) => report.kept(path, CleanReason::Invalid(Error::io("remove", path, e).to_string())),
        },
        Ok(false) => report.kept(path, CleanReason::Changed),
        Err(e) => report.kept(path, CleanReason::Invalid(Error::io("inspect", path, e).to_string())),
    }
}

fn clean_temp(path: &Path, dry_run: bool, report: &mut CleanReport) {
    let file = match open_existing(path, !dry_run) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return, // its creator finished meanwhile
        Err(e) => return report.kept(path, CleanReason::Invalid(Error::io("open", path, e).to_string())),
    };
    let meta = match file.metadata() {
        Ok(m) if m.is_file() => m,
        Ok(_) => return report.kept(path, CleanReason::Invalid("not a regular file".into())),
        Err(e) => return report.kept(path, CleanReason::Invalid(Error::io("inspect", path, e).to_string())),
    };
    // The modification time, not the change time: linking a finished file to its final name
    // touches the latter.
    let changed = meta.mtime();
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let age = Duration::from_secs(now.saturating_sub(changed).max(0) as u64);
    if age < TEMP_MIN_AGE {
        return report.kept(path, CleanReason::TemporaryTooYoung { age });
    }
    if dry_run {
        if in_use(&file) {
            report.kept(path, CleanReason::TemporaryInUse);
        } else {
            report.removed(path, CleanReason::StaleTemporary { age });
        }
        return;
    }
    match lock_whole(&file) {
        Ok(true) => remove_locked(&file, path, CleanReason::StaleTemporary { age }, report),
        Ok(false) => report.kept(path, CleanReason::TemporaryInUse),
        Err(e) => report.kept(path, CleanReason::Invalid(Error::io("lock", path, e).to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;
    use crate::{Publication, Subscription};
    use std::sync::atomic::Ordering;

    fn publication(dir: &Path, name: &str) -> Publication {
        Publication::builder(name).dir(dir).term_length(64 * 1024).create().unwrap()
    }

    #[test]
    fn streams_reports_publisher_readers_and_lag() {
        let dir = TempDir::new("inspect");
        let mut publication = publication(dir.path(), "s");
        let mut fast = Subscription::builder("s").dir(dir.path()).open().unwrap();
        let slow = Subscription::builder("s").dir(dir.path()).open().unwrap();
        assert!(publication.is_connected());
        for _ in 0..100 {
            publication.offer(&[7u8; 100]).unwrap();
        }
        while fast.poll(|_: &[u8], _: &crate::Header| {}, 1000) > 0 {}
        let list = streams(dir.path()).unwrap();
        assert_eq!(list.len(), 1);
        let st = &list[0];
        assert_eq!(st.name, "s");
        assert!(st.problems.is_empty(), "{:?}", st.problems);
        let log = st.log.as_ref().unwrap();
        assert_eq!(log.position, publication.position());
        assert_eq!(log.publisher_pid, std::process::id() as i32);
        assert!(log.publisher_alive && log.mapped_by_readers);
        assert_eq!(log.session_id, publication.session_id());
        assert_eq!((log.term_length, log.window), (64 * 1024, 32 * 1024));
        assert_eq!(log.eos_position, None);
        assert_eq!(st.readers.len(), 2);
        let r_fast = &st.readers[0];
        let r_slow = &st.readers[1];
        assert_eq!((r_fast.lag, r_slow.lag), (Some(0), Some(publication.position())));
        assert!(r_fast.alive && r_slow.alive);
        assert_eq!(r_fast.state, ReaderState::Active);
        assert!(r_slow.slowest && !r_fast.slowest);
        assert!(!r_slow.holds_back, "16 KB behind, window 32 KiB");
        assert_eq!(slow.position(), 0);

        drop(publication);
        let st = streams(dir.path()).unwrap().pop().unwrap();
        // The log is removed on close; the readers remain.
        assert!(st.log.is_none());
        assert_eq!(st.readers.len(), 2);
        assert!(st.readers.iter().all(|r| r.lag.is_none() && !r.slowest));
    }

    /// The review's N7 d: a slot's position word is whatever a process wrote there, and the lag
    /// was `producer - position`, which a forged word overflowed (a panic in debug builds,
    /// where this test runs with `cargo test`).
    #[test]
    fn a_forged_position_word_does_not_overflow_the_lag() {
        use std::os::unix::fs::FileExt;
        let dir = TempDir::new("inspect");
        let mut publication = publication(dir.path(), "s");
        let _sub = Subscription::builder("s").dir(dir.path()).open().unwrap();
        assert!(publication.is_connected());
        publication.offer(&[1u8; 100]).unwrap();
        let slots = fs::OpenOptions::new().write(true).open(dir.path().join("s.readers")).unwrap();
        let word = (crate::layout::slots::slot_offset(0) + s::POSITION) as u64;
        slots.write_at(&i64::MIN.to_le_bytes(), word).unwrap();
        let st = streams(dir.path()).unwrap().pop().unwrap();
        assert_eq!(st.readers[0].position, i64::MIN);
        assert_eq!(st.readers[0].lag, Some(i64::MAX), "saturated, not wrapped or a panic");
        assert!(st.readers[0].holds_back);
    }

    #[test]
    fn holds_back_is_flagged_when_a_window_behind() {
        let dir = TempDir::new("inspect");
        let mut publication = publication(dir.path(), "s");
        let _sub = Subscription::builder("s").dir(dir.path()).open().unwrap();
        assert!(publication.is_connected());
        while publication.offer(&[1u8; 1000]).is_ok() {}
        let st = streams(dir.path()).unwrap().pop().unwrap();
        assert!(st.log.as_ref().unwrap().back_pressure_events >= 1);
        assert!(st.readers[0].holds_back && st.readers[0].slowest);
    }

    #[test]
    fn foreign_and_corrupt_files_are_reported_not_fatal() {
        let dir = TempDir::new("inspect");
        fs::write(dir.path().join("junk.log"), b"hello").unwrap();
        fs::write(dir.path().join("junk.readers"), vec![0u8; 4096]).unwrap();
        fs::write(dir.path().join("big.log"), vec![0u8; 3 * 65536 + 4096]).unwrap();
        let list = streams(dir.path()).unwrap();
        assert_eq!(list.len(), 2);
        assert!(list.iter().all(|s| s.log.is_none() && !s.problems.is_empty()));
        assert!(matches!(list[0].problems[0], Error::Corrupt { .. }), "{:?}", list[0].problems);
        let report = clean(dir.path(), false).unwrap();
        assert!(report.removed.is_empty(), "{report:?}");
        assert_eq!(report.kept.len(), 3);
        assert!(dir.path().join("junk.log").exists() && dir.path().join("junk.readers").exists());
    }

    #[test]
    fn clean_keeps_live_streams_and_removes_dead_leftovers() {
        let dir = TempDir::new("inspect");
        let _live = publication(dir.path(), "live");
        let _reader = Subscription::builder("live").dir(dir.path()).open().unwrap();
        // A stream whose publisher is gone: keep_files leaves the log; its only reader, the last
        // user of the slot file, removes that when it leaves.
        let dead = Publication::builder("dead").dir(dir.path()).term_length(64 * 1024).keep_files(true);
        let dead = dead.create().unwrap();
        let sub = Subscription::builder("dead").dir(dir.path()).open().unwrap();
        drop(dead);
        let dry = clean(dir.path(), true).unwrap();
        assert!(dry.removed.is_empty(), "a reader still maps the dead log: {dry:?}");
        assert!(dry.kept.iter().any(|e| e.reason == CleanReason::MappedByReader));
        assert!(dry.kept.iter().any(|e| e.reason == CleanReason::SlotHeld));
        drop(sub);
        assert!(!dir.path().join("dead.readers").exists(), "the last user removes the slot file");
        let dry = clean(dir.path(), true).unwrap();
        assert_eq!(dry.removed.len(), 1, "{dry:?}");
        assert!(dir.path().join("dead.log").exists(), "dry run removes nothing");
        let report = clean(dir.path(), false).unwrap();
        assert_eq!(report.removed, dry.removed);
        assert!(!dir.path().join("dead.log").exists() && !dir.path().join("dead.readers").exists());
        assert!(dir.path().join("live.log").exists() && dir.path().join("live.readers").exists());
        let pid = std::process::id() as i32;
        assert!(report.kept.iter().any(|e| e.reason == CleanReason::PublisherAlive { pid }));
        let again = clean(dir.path(), false).unwrap();
        assert!(again.removed.is_empty(), "idempotent: {again:?}");
    }

    /// A session that began and ended while a subscription waited for it (its publisher closed
    /// before the subscription polled): its log stays for that reader, whom `clean` must not rob
    /// (it did: the reader then reported the session missed). Found by the Python client's tests.
    #[test]
    fn clean_keeps_a_finished_log_a_waiting_reader_is_owed() {
        let dir = TempDir::new("inspect-owed");
        let mut waiting = Subscription::builder("s").dir(dir.path()).open().unwrap();
        let mut p = publication(dir.path(), "s");
        p.offer(b"owed").unwrap();
        p.close();
        let report = clean(dir.path(), false).unwrap();
        assert!(report.kept.iter().any(|e| e.reason == CleanReason::OwedToReader), "{report:?}");
        assert!(dir.path().join("s.log").exists());
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while got.is_empty() && std::time::Instant::now() < deadline {
            waiting.poll(|m: &[u8], _: &crate::Header| got.push(m.to_vec()), 10);
        }
        assert_eq!(got, [b"owed".to_vec()]);
        assert_eq!(waiting.take_loss(), None, "nothing missed");
    }

    #[test]
    fn clean_removes_old_unheld_temporaries_only() {
        let dir = TempDir::new("inspect");
        let old = dir.path().join(".s.0123456789abcdef.log.tmp");
        let young = dir.path().join(".s.fedcba9876543210.readers.tmp");
        let held = dir.path().join(".s.00000000000000aa.log.tmp");
        for p in [&old, &young, &held] {
            fs::write(p, b"x").unwrap();
        }
        let past = SystemTime::now() - Duration::from_secs(3600);
        for p in [&old, &held] {
            File::options().write(true).open(p).unwrap().set_modified(past).unwrap();
        }
        let holder = File::options().read(true).write(true).open(&held).unwrap();
        assert!(crate::sys::lock::try_lock(&holder, crate::sys::lock::Kind::Exclusive, 0, 1).unwrap());
        let report = clean(dir.path(), false).unwrap();
        assert_eq!(report.removed.len(), 1, "{report:?}");
        assert_eq!(report.removed[0].path, old);
        assert!(matches!(report.removed[0].reason, CleanReason::StaleTemporary { .. }));
        assert!(!old.exists() && young.exists() && held.exists());
    }

    /// Streams come and go while `clean` runs in a loop: every session must still reach its reader.
    /// Runs 2 s by default (`STRESS_SECS=60` for a longer run).
    #[test]
    fn clean_in_a_loop_never_breaks_live_streams() {
        let tmp = TempDir::new("inspect");
        let dir = tmp.path().to_path_buf();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let secs: u64 = std::env::var("STRESS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
        struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let (rounds, cleaned) = std::thread::scope(|s| {
            let _stop = StopOnDrop(&stop);
            let cleaner = s.spawn(|| {
                let mut removed = 0;
                while !stop.load(Ordering::Relaxed) {
                    removed += clean(&dir, false).unwrap().removed.len();
                }
                removed
            });
            let deadline = std::time::Instant::now() + Duration::from_secs(secs);
            let mut rounds = 0;
            while std::time::Instant::now() < deadline {
                // Half the rounds create the publisher first: its slot file then exists with no
                // slot held and no log yet, which is the case `clean` must not get wrong.
                let create = || Publication::builder("s").dir(&dir).term_length(64 * 1024).create().unwrap();
                let early = (rounds % 2 == 1).then(create);
                let mut sub = Subscription::builder("s").dir(&dir).open().unwrap();
                let mut publication = early.unwrap_or_else(create);
                let t = std::time::Instant::now();
                while !publication.is_connected() {
                    assert!(t.elapsed() < Duration::from_secs(10), "round {rounds}: reader never seen");
                    sub.poll(|_: &[u8], _: &crate::Header| {}, 10);
                }
                publication.offer(b"x").unwrap();
                if rounds % 3 == 2 {
                    // The reader outlives the publisher: the slot file is left for `clean`, while
                    // the next round opens it again.
                    drop(publication);
                    drop(sub);
                } else {
                    drop(sub);
                    drop(publication);
                }
                rounds += 1;
            }
            stop.store(true, Ordering::Relaxed);
            (rounds, cleaner.join().unwrap())
        });
        eprintln!("{rounds} rounds, {cleaned} files cleaned");
    }
}
