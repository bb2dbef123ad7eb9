//! [`clean`]: removing what dead processes left behind, only when its owners are provably gone.

use super::list;
use crate::error::Error;
use crate::stream::files::{inspect_log, inspect_slots, open_existing};
use crate::stream::liveness::{
    in_use, lock_log_owners, lock_whole, log_mapped_by_readers, publisher_alive, slots_held,
};
use crate::stream::name::Entry;
use crate::sys::fs::is_same_file;
use std::fmt;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Temporary files younger than this are assumed to be still under construction.
pub(crate) const TEMP_MIN_AGE: Duration = Duration::from_secs(10);

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
    /// Kept: a temporary file changed less than 10 seconds ago (it may still be under
    /// construction).
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
///   on it and it has not changed for 10 seconds.
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
            Entry::Wake(name) => clean_wake(dir, path, name, dry_run, &mut report),
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

/// Removes a stream's wake FIFO once its slot file is gone (the last user of a stream removes
/// both; a killed one, or `clean` removing the slot file above, leaves the FIFO). While the
/// slot file exists its reactor sleepers may be watching the FIFO: it stays.
fn clean_wake(dir: &Path, path: &Path, name: &str, dry_run: bool, report: &mut CleanReport) {
    if fs::symlink_metadata(dir.join(format!("{name}.readers"))).is_ok() {
        return report.kept(path, CleanReason::InUse);
    }
    if dry_run {
        return report.removed(path, CleanReason::NoReaders);
    }
    match fs::remove_file(path) {
        Ok(()) => report.removed(path, CleanReason::NoReaders),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => report.kept(path, CleanReason::Invalid(Error::io("remove", path, e).to_string())),
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
    use crate::api::inspect::tests::publication;
    use crate::testing::TempDir;
    use crate::{Publication, Subscription};
    use std::sync::atomic::Ordering;

    #[test]
    fn a_wake_fifo_goes_with_its_slot_file() {
        let dir = TempDir::new("inspect-wake");
        let _live = publication(dir.path(), "live");
        // What a killed stream's reactor sleepers leave: the FIFO (its kind does not matter to
        // clean), with no slot file beside it; and a live stream's, which stays.
        fs::write(dir.path().join("gone.wake"), b"").unwrap();
        fs::write(dir.path().join("live.wake"), b"").unwrap();
        let dry = clean(dir.path(), true).unwrap();
        assert!(dry.removed.iter().any(|e| e.path.ends_with("gone.wake")), "{dry:?}");
        assert!(dir.path().join("gone.wake").exists(), "dry run removes nothing");
        let report = clean(dir.path(), false).unwrap();
        assert!(report.removed.iter().any(|e| e.path.ends_with("gone.wake")), "{report:?}");
        assert!(report.kept.iter().any(|e| e.path.ends_with("live.wake") && e.reason == CleanReason::InUse));
        assert!(!dir.path().join("gone.wake").exists() && dir.path().join("live.wake").exists());
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
