//! The files of a concurrent stream: joining the log its live writers share, or creating it, and
//! leaving it (the last writer out ends the stream).
//!
//! Every writer holds a read lock on the log's publisher byte, so `publisher_alive` means "some
//! writer lives" and an exclusive publisher (which needs the write lock) cannot take the stream.
//! A creator holds the write lock from creation until its log is published, then downgrades; a
//! leaving writer upgrades to learn whether it is the last. Both windows are short, so a joiner
//! that meets them retries.

use super::concurrent_writer::unblock;
use super::files::{check_owner, create_log, open_existing, NewLog, OwnedLog};
use super::liveness::{held, LogWriters, CLOSE_LOCK, PUBLISHER_LOCK, WRITER_LOCKS};
use crate::error::Error;
use crate::layout::log_meta::{MAX_WRITERS, META_LEN, MODE_CONCURRENT, WRITER_MODE};
use crate::log::Log;
use crate::region::MmapRegion;
use crate::sys::clock::now_ns;
use crate::sys::fs::is_same_file;
use crate::sys::lock::{self, Kind};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A concurrent log this process writes through one writer slot: the writers' read lock and the
/// slot's write lock are held on `file`.
#[derive(Debug)]
pub(crate) struct WriterLog {
    pub file: File,
    pub path: PathBuf,
    pub log: Log<MmapRegion>,
    pub slot: usize,
}

/// What a join attempt found under the stream's name.
enum Found {
    Joined(WriterLog),
    /// No log, or one no live writer holds (or closed): start a new session.
    Stale,
    /// A creator or a leaving last writer holds the write lock for a moment.
    Busy,
}

/// Joins the concurrent log of the stream `opts` names, creating it (a new session) if there is
/// none or its writers are gone. [`Error::AlreadyExists`] if an exclusive publisher owns the stream.
pub(crate) fn open_concurrent(opts: &NewLog<'_>) -> Result<WriterLog, Error> {
    let path = super::name::log_path(opts.dir, opts.name);
    for attempt in 0..1000 {
        match join(&path)? {
            Found::Joined(writer) => return Ok(writer),
            Found::Busy => std::thread::sleep(std::time::Duration::from_micros(50 * attempt.min(20))),
            Found::Stale => match create_log(&NewLog { concurrent: true, ..*opts }) {
                Ok(owned) => return first_writer(owned),
                // Another writer created it first (or an exclusive publisher did): look again.
                Err(Error::AlreadyExists { .. }) => continue,
                Err(e) => return Err(e),
            },
        }
    }
    Err(Error::io("join concurrent log", &path, io::Error::other("the stream's log kept changing")))
}

/// The creator of a fresh concurrent log: downgrades its write lock to the writers' read lock
/// and takes writer slot 0.
fn first_writer(owned: OwnedLog) -> Result<WriterLog, Error> {
    let OwnedLog { file, path, log } = owned;
    lock::try_lock(&file, Kind::Shared, PUBLISHER_LOCK, 1).map_err(|e| Error::io("lock", &path, e))?;
    let slot = claim_slot(&file, &path, &log)?;
    Ok(WriterLog { file, path, log, slot })
}

fn join(path: &Path) -> Result<Found, Error> {
    let file = match open_existing(path, true) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Stale),
        Err(e) => return Err(Error::io("open log", path, e)),
    };
    let len = check_owner(&file, path)?;
    if !lock::try_lock(&file, Kind::Shared, PUBLISHER_LOCK, 1).map_err(|e| Error::io("lock", path, e))? {
        // A write lock: an exclusive publisher's for good, or a concurrent log's creator or
        // last writer for a moment.
        if mode_of(&file, len) == Some(MODE_CONCURRENT) {
            return Ok(Found::Busy);
        }
        return Err(Error::AlreadyExists { path: path.into() });
    }
    // Any other lock on the byte is another writer's (or an exclusive publisher's, which our
    // read lock would have conflicted with).
    let others = held(&file, Kind::Exclusive, PUBLISHER_LOCK, 1);
    let region = MmapRegion::map(&file, 0, len as usize).map_err(|e| Error::io("map", path, e))?;
    let log = match Log::open(region) {
        Ok(log) => log,
        // A dead exclusive publisher's log of an older layout: replaced like any stale log.
        Err(_) if !others => return Ok(Found::Stale),
        Err(e) => return Err(e.at(path)),
    };
    if !log.is_concurrent() {
        // We hold the read lock, so its exclusive publisher is dead: a stale log.
        return Ok(Found::Stale);
    }
    if !others || log.eos_position() != i64::MAX {
        return Ok(Found::Stale); // every writer is gone, or the last one closed it
    }
    if !is_same_file(&file, path).map_err(|e| Error::io("inspect", path, e))? {
        return Ok(Found::Busy); // replaced while we looked
    }
    let slot = claim_slot(&file, path, &log)?;
    Ok(Found::Joined(WriterLog { file, path: path.into(), log, slot }))
}

/// The writer mode a log file's metadata names, read without mapping it.
fn mode_of(file: &File, len: u64) -> Option<i32> {
    let mut word = [0u8; 4];
    let at = len.checked_sub(META_LEN as u64)? + WRITER_MODE as u64;
    file.read_exact_at(&mut word, at).ok()?;
    Some(i32::from_le_bytes(word))
}

/// Takes the first writer slot whose lock is free and whose pending word is clear.
///
/// A slot whose owner died with a message reserved stays taken until that message is padded
/// (its pending word is how the unblocker finds the hole). If only such slots are left, this
/// runs the unblocker (as a held-back writer would) and looks again; if that cannot pad them
/// yet (a live writer's uncommitted message lies before the hole), the error names them.
fn claim_slot(file: &File, path: &Path, log: &Log<MmapRegion>) -> Result<usize, Error> {
    let unpadded = match try_slots(file, path, log)? {
        Ok(slot) => return Ok(slot),
        Err(unpadded) => unpadded,
    };
    if !unpadded.is_empty() {
        let file = file.try_clone().map_err(|e| Error::io("duplicate descriptor", path, e))?;
        unblock(log, &LogWriters { file, own: None });
    }
    match try_slots(file, path, log)? {
        Ok(slot) => Ok(slot),
        Err(awaiting_unblock) => Err(Error::TooManyWriters {
            path: path.into(),
            slots: MAX_WRITERS,
            live: MAX_WRITERS - awaiting_unblock.len(),
            awaiting_unblock,
        }),
    }
}

/// One pass over the writer slots: `Ok(slot)` claimed, or `Err(slots)` whose lock is free (their
/// owner is dead) but whose message is not padded yet; every other slot has a live owner.
fn try_slots(file: &File, path: &Path, log: &Log<MmapRegion>) -> Result<Result<usize, Vec<usize>>, Error> {
    let mut unpadded = Vec::new();
    for slot in 0..MAX_WRITERS {
        let byte = WRITER_LOCKS + slot as u64;
        if !lock::try_lock(file, Kind::Exclusive, byte, 1).map_err(|e| Error::io("lock", path, e))? {
            continue;
        }
        if log.claim_writer_slot(slot, std::process::id() as i64, now_ns()) {
            return Ok(Ok(slot));
        }
        unpadded.push(slot);
        let _ = lock::unlock(file, byte, 1);
    }
    Ok(Err(unpadded))
}

/// Gives up writer slot `slot`; `true` if no other writer holds the log now, in which case the
/// caller holds the publisher byte's write lock and ends the stream.
///
/// Leavers take turns under the closing lock: two writers leaving at once would otherwise each
/// still see the other's read lock, and neither would end the stream. Under it, a leaver that
/// is not the last drops its read lock before the next leaver looks. The lock is held for a few
/// system calls, and goes with a leaver that dies.
pub(crate) fn leave(file: &File, slot: usize) -> bool {
    let _ = lock::unlock(file, WRITER_LOCKS + slot as u64, 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !matches!(lock::try_lock(file, Kind::Exclusive, CLOSE_LOCK, 1), Ok(true)) {
        if std::time::Instant::now() > deadline {
            return false; // a leaver stuck (stopped) in its turn: leave the ending to it
        }
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
    let last = matches!(lock::try_lock(file, Kind::Exclusive, PUBLISHER_LOCK, 1), Ok(true));
    if !last {
        let _ = lock::unlock(file, PUBLISHER_LOCK, 1);
    }
    let _ = lock::unlock(file, CLOSE_LOCK, 1);
    last
}

/// A read-write descriptor and mapping of the concurrent log a reader reads (`current`, open
/// read-only), for padding dead writers' holes. Reopened through `/proc/self/fd`, so it is the
/// same file even when the stream's name leads to a newer session by now (its writers all died,
/// and a new one started): the old session's readers can still read past the holes.
pub(crate) fn open_for_unblock(
    path: &Path,
    current: &File,
) -> Result<Option<(File, Log<MmapRegion>)>, Error> {
    use std::os::unix::io::AsRawFd;
    let same = PathBuf::from(format!("/proc/self/fd/{}", current.as_raw_fd()));
    let file = match std::fs::OpenOptions::new().read(true).write(true).open(&same) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("reopen log read-write", path, e)),
    };
    if !super::files::same_inode(&file, current) {
        return Ok(None);
    }
    let len = check_owner(&file, path)?;
    let region = MmapRegion::map(&file, 0, len as usize).map_err(|e| Error::io("map", path, e))?;
    let log = Log::open(region).map_err(|e| e.at(path))?;
    Ok(Some((file, log)))
}
