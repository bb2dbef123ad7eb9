//! Creating, publishing and opening the files of a stream.
//!
//! A file is built under a temporary name, fully initialised (ready flag last), and only then
//! made visible under the stream's name with `link` (fails if the name exists) or `rename` over a
//! stale file whose owner provably died (we hold its lock while replacing it). So nobody ever
//! opens a half-initialised file by name, and a live publisher's file is never replaced (I7).

use super::liveness::{publisher_alive, SlotFile, PUBLISHER_LOCK, READER_LOCK, USER_LOCK};
use super::name;
use crate::error::Error;
use crate::layout::log_meta::{self as meta, Geometry, META_LEN};
use crate::layout::slots as s;
use crate::log::{Log, LogInit};
use crate::region::{MmapRegion, ReadOnlyRegion, Region};
use crate::stream::slots::Slots;
use crate::sys::clock::{now_ns, random_u64};
pub(crate) use crate::sys::fs::open_existing;
use crate::sys::fs::{available_space, cause, create_new, euid, is_same_file, reserve, Cause};
use crate::sys::lock::{self, Kind};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Checks the settings every stream participant shares and prepares the directory; returns it.
///
/// `dir: None` means the per-user default directory, which must also belong to us.
pub(crate) fn prepare(
    stream: &str,
    dir: Option<&PathBuf>,
    file_mode: u32,
    max_readers: usize,
) -> Result<PathBuf, Error> {
    name::validate(stream)?;
    if file_mode & 0o022 != 0 || file_mode & !0o777 != 0 {
        return Err(Error::InvalidConfig("file mode must be permission bits that let nobody else write"));
    }
    if max_readers == 0 || max_readers > s::MAX_SLOTS {
        return Err(Error::InvalidConfig("max readers must be from 1 to 4096"));
    }
    let path = dir.cloned().unwrap_or_else(super::dir::default_dir);
    super::dir::ensure(&path, dir.is_none())?;
    Ok(path)
}

/// Largest file we agree to map as a log (1 GiB terms with 1 GiB pages).
pub(crate) const MAX_LOG_FILE: u64 = 4 << 30;

/// Refuses files that are not plain files of ours, or that anyone but us may write (a writer of
/// the log writes every reader's messages, a writer of the slot file moves flow control).
/// Returns the length.
pub(crate) fn check_owner(file: &File, path: &Path) -> Result<u64, Error> {
    let m = file.metadata().map_err(|e| Error::io("inspect file", path, e))?;
    if !m.is_file() {
        return Err(Error::Corrupt { path: path.into(), what: "not a regular file" });
    }
    if m.uid() != euid() {
        return Err(Error::PermissionDenied { path: path.into(), reason: "file belongs to another user" });
    }
    if m.mode() & 0o002 != 0 {
        return Err(Error::PermissionDenied { path: path.into(), reason: "file is writable by any user" });
    }
    if m.mode() & 0o020 != 0 {
        return Err(Error::PermissionDenied { path: path.into(), reason: "file is writable by its group" });
    }
    Ok(m.len())
}

/// Fails early with `InsufficientSpace` when `dir` cannot hold `needed` more bytes.
fn check_space(dir: &Path, needed: u64) -> Result<(), Error> {
    let available = available_space(dir).map_err(|e| Error::io("query free space", dir, e))?;
    if available < needed {
        return Err(Error::InsufficientSpace { path: dir.into(), needed, available });
    }
    Ok(())
}

/// Fails with `InsufficientSpace` unless `dir` can hold a log of `geometry` and, if the stream has
/// none yet, its reader-slot file of `slots` slots. Checked before either is created, so a full
/// file system leaves nothing behind (the slot file, once created, is shared and not ours to
/// remove again).
pub(crate) fn check_space_for_stream(
    dir: &Path,
    stream: &str,
    geometry: Geometry,
    slots: usize,
) -> Result<(), Error> {
    let mut needed = geometry.file_length() as u64;
    if fs::symlink_metadata(name::readers_path(dir, stream)).is_err() {
        needed += s::file_length(slots) as u64;
    }
    check_space(dir, needed)
}

/// Creates the file at a temporary path with reserved storage; removes it on any failure.
fn create_reserved(dir: &Path, tmp: &Path, len: u64, mode: u32) -> Result<File, Error> {
    check_space(dir, len)?;
    let file = create_new(tmp, mode).map_err(|e| Error::io("create file", tmp, e))?;
    if let Err(e) = reserve(&file, len) {
        let _ = fs::remove_file(tmp);
        if cause(&e) == Cause::NoSpace {
            let available = available_space(dir).unwrap_or(0);
            return Err(Error::InsufficientSpace { path: dir.into(), needed: len, available });
        }
        return Err(Error::io("reserve space", tmp, e));
    }
    Ok(file)
}

/// A removable temporary file: deleted on drop unless disarmed.
struct TempGuard<'a>(Option<&'a Path>);

impl Drop for TempGuard<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            let _ = fs::remove_file(p);
        }
    }
}

/// Options for a new log.
#[derive(Clone, Copy)]
pub(crate) struct NewLog<'a> {
    pub dir: &'a Path,
    pub name: &'a str,
    pub geometry: Geometry,
    pub mode: u32,
    /// For a `ConcurrentPublication`: several writers share the log.
    pub concurrent: bool,
    /// Takes the session's number among the stream's (`Slots::next_session`): called once the
    /// file's storage is reserved, just before the log is initialised and published, so that
    /// a reader seeing the stream's counter ahead of every log waits only microseconds for it.
    pub session_seq: &'a dyn Fn() -> i32,
}

impl std::fmt::Debug for NewLog<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewLog")
            .field("dir", &self.dir)
            .field("name", &self.name)
            .field("geometry", &self.geometry)
            .field("concurrent", &self.concurrent)
            .finish_non_exhaustive()
    }
}

/// A log we created and own: the publisher lock is held on `file`.
#[derive(Debug)]
pub(crate) struct OwnedLog {
    pub file: File,
    pub path: PathBuf,
    pub log: Log<MmapRegion>,
}

/// Creates, initialises and publishes a new session's log under the stream's name.
pub(crate) fn create_log(opts: &NewLog<'_>) -> Result<OwnedLog, Error> {
    let g = opts.geometry;
    let len = g.file_length() as u64;
    let nonce = random_u64();
    let tmp = name::temp_path(opts.dir, opts.name, "log", nonce);
    let file = create_reserved(opts.dir, &tmp, len, opts.mode)?;
    let mut guard = TempGuard(Some(&tmp));
    if !lock::try_lock(&file, Kind::Exclusive, PUBLISHER_LOCK, 1).map_err(|e| Error::io("lock", &tmp, e))? {
        return Err(Error::io("lock", &tmp, io::Error::other("fresh file already locked")));
    }
    let region = MmapRegion::map(&file, 0, len as usize).map_err(|e| Error::io("map", &tmp, e))?;
    let session_seq = (opts.session_seq)();
    let log = Log::initialize(
        region,
        &LogInit {
            geometry: g,
            initial_term_id: (nonce >> 32) as i32,
            session_id: nonce as i32,
            stream_id: name::stream_id(opts.name),
            pid: std::process::id() as i32,
            created_ns: now_ns(),
            name: opts.name,
            concurrent: opts.concurrent,
            session_seq,
        },
    );
    let path = name::log_path(opts.dir, opts.name);
    publish(&tmp, &path)?;
    guard.0 = None;
    Ok(OwnedLog { file, path, log })
}

/// Refusals of the old log's publisher lock, a millisecond apart, after which its publisher is
/// taken to be alive.
const TAKEN_AFTER_REFUSALS: u32 = 20;

/// Makes the initialised file at `tmp` visible at `path`, replacing only a stale log.
fn publish(tmp: &Path, path: &Path) -> Result<(), Error> {
    // A live publisher holds the old log's lock for its whole life; `clean` (deciding whether to
    // remove it) and a creator replacing it hold it for moments. Look again for a while before
    // calling the name taken (a clean in a loop made creation fail under load).
    let mut refused = 0;
    for _ in 0..64 {
        match open_existing(path, true) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::hard_link(tmp, path) {
                Ok(()) => {
                    let _ = fs::remove_file(tmp);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Error::io("publish log", path, e)),
            },
            Err(e) => return Err(Error::io("open existing log", path, e)),
            Ok(old) => {
                check_owner(&old, path)?;
                // Holding the old owner's lock proves it dead and keeps racing creators out.
                if !lock::try_lock(&old, Kind::Exclusive, PUBLISHER_LOCK, 1)
                    .map_err(|e| Error::io("lock", path, e))?
                {
                    if refused < TAKEN_AFTER_REFUSALS {
                        refused += 1;
                        std::thread::sleep(std::time::Duration::from_millis(1));
                        continue;
                    }
                    return Err(Error::AlreadyExists { path: path.into() });
                }
                if !looks_like_log(&old) {
                    return Err(Error::Corrupt {
                        path: path.into(),
                        what: "a file that is not a shmlog log holds the stream's name; remove it",
                    });
                }
                if !is_same_file(&old, path).map_err(|e| Error::io("inspect", path, e))? {
                    continue; // replaced while we looked: start over
                }
                fs::rename(tmp, path).map_err(|e| Error::io("replace stale log", path, e))?;
                return Ok(());
            }
        }
    }
    Err(Error::io("publish log", path, io::Error::other("the stream's name kept changing")))
}

/// `true` if `file` carries a log's magic where its metadata would be (any layout version).
fn looks_like_log(file: &File) -> bool {
    let Ok(m) = file.metadata() else { return false };
    if m.len() < META_LEN as u64 {
        return m.len() == 0;
    }
    let mut magic = [0u8; 8];
    let at = m.len() - META_LEN as u64 + meta::MAGIC_OFFSET as u64;
    file.read_exact_at(&mut magic, at).is_ok() && i64::from_le_bytes(magic) == meta::MAGIC
}

/// A log opened for reading: read-only mapping, reader lock held.
#[derive(Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct ReadLog {
    pub file: File,
    pub log: Log<ReadOnlyRegion>,
}

/// What is under the stream's log name for a reader.
#[derive(Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub enum Found {
    /// No log: no publisher has created one, or the last one closed.
    Nothing,
    /// A log whose publisher is gone (closed, or died), not mapped (a crashed publisher's
    /// leftover may be GiBs), with the session number it claims: a reader that owes that session
    /// reads it ([`map_finished`]).
    Dead(DeadLog),
    /// The log a reader reads already (same file).
    Same,
    /// A live publisher's log, mapped read-only and pre-faulted, reader lock held.
    Live(ReadLog),
}

/// Opens the stream's log for reading if its publisher is alive and `current` (the log being
/// read) is not that same file; only then maps it. A log being removed (its reader lock refused:
/// `clean` holds the file) reads as `Nothing` for now.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn open_log(path: &Path, current: Option<&File>) -> Result<Found, Error> {
    let file = match open_existing(path, false) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Nothing),
        Err(e) => return Err(Error::io("open log", path, e)),
    };
    if let Some(current) = current {
        if same_inode(&file, current) {
            return Ok(Found::Same);
        }
    }
    let len = check_owner(&file, path)?;
    log_length_possible(len).map_err(|what| Error::Corrupt { path: path.into(), what })?;
    if !publisher_alive(&file) {
        let mut seq = [0u8; 4];
        let at = len - META_LEN as u64 + meta::SESSION_SEQ as u64;
        file.read_exact_at(&mut seq, at).map_err(|e| Error::io("read log", path, e))?;
        return Ok(Found::Dead(DeadLog { file, len, session_seq: i32::from_le_bytes(seq) }));
    }
    map_for_reading(file, len, path).map(|log| log.map_or(Found::Nothing, Found::Live))
}

/// A log whose publisher is gone, as [`open_log`] found it.
#[derive(Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct DeadLog {
    file: File,
    len: u64,
    /// The session number the log claims (not validated yet).
    pub session_seq: i32,
}

/// Maps a log whose publisher is gone for a reader that owes its session (it began while the
/// reader waited): what it committed is all there is, and stays until the last reader leaves.
/// `None` if it is being removed.
pub(crate) fn map_finished(dead: DeadLog, path: &Path) -> Result<Option<ReadLog>, Error> {
    map_for_reading(dead.file, dead.len, path)
}

/// Takes a reader's lock on the log and maps it read-only, pre-faulted; `None` if the lock is
/// refused (the log is being removed: `clean` holds it).
fn map_for_reading(file: File, len: u64, path: &Path) -> Result<Option<ReadLog>, Error> {
    if !lock::try_lock(&file, Kind::Shared, READER_LOCK, 1).map_err(|e| Error::io("lock", path, e))? {
        return Ok(None);
    }
    let region = ReadOnlyRegion::map(&file, len as usize, true).map_err(|e| Error::io("map", path, e))?;
    let log = Log::open(region).map_err(|e| e.at(path))?;
    Ok(Some(ReadLog { file, log }))
}

/// What the last writer of a session (an exclusive publisher, the last of a concurrent log's
/// writers) does with the stream's files when it leaves and they are not kept: the slot file goes
/// if nobody else uses it; the log goes unless a live reader waits for a session or still reads
/// an earlier one: that reader owes this session, so the log stays, marked for the stream's last
/// user to remove ([`remove_finished_log`]).
pub(crate) fn leave_session_files(
    log: &Log<MmapRegion>,
    log_file: &File,
    path: &Path,
    slots: &Slots<MmapRegion>,
    slot_file: &SlotFile,
) {
    let owed =
        super::liveness::owed_to_live_reader(slots, &slot_file.file, log.session_id(), log.session_seq());
    if owed {
        log.set_left_for_readers();
    }
    slot_file.remove_if_abandoned();
    if !owed && is_same_file(log_file, path).unwrap_or(false) {
        let _ = fs::remove_file(path);
    }
}

/// Removes the stream's log at `path` if its publisher left it for readers that owed its session
/// (`LEFT_FOR_READERS`; a log kept on purpose stays), and it has no live publisher and no reader
/// maps it: the stream's last user leaving. Returns whether it did.
pub(crate) fn remove_finished_log(path: &Path) -> bool {
    let Ok(file) = open_existing(path, true) else { return false };
    if !matches!(super::liveness::lock_log_owners(&file), Ok(true)) {
        return false;
    }
    let Ok(len) = file.metadata().map(|m| m.len()) else { return false };
    let mut flag = [0u8; 4];
    let at = len.saturating_sub(META_LEN as u64) + meta::LEFT_FOR_READERS as u64;
    let left = file.read_exact_at(&mut flag, at).is_ok() && i32::from_le_bytes(flag) == 1;
    left && is_same_file(&file, path).unwrap_or(false) && fs::remove_file(path).is_ok()
}

pub(crate) fn same_inode(a: &File, b: &File) -> bool {
    match (a.metadata(), b.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// `true` if a file of `len` bytes may be a log (the geometry checks the rest).
fn log_length_possible(len: u64) -> Result<(), &'static str> {
    if len < (META_LEN * 2) as u64 {
        return Err("file is truncated (shorter than a log)");
    }
    if len > MAX_LOG_FILE {
        return Err("file is larger than any log");
    }
    Ok(())
}

/// `true` if a file of `len` bytes may be a reader-slot file (the header checks the rest).
fn slots_length_possible(len: u64) -> Result<(), &'static str> {
    if len < s::SLOTS_START as u64 || len > s::file_length(s::MAX_SLOTS) as u64 {
        return Err("reader-slot file has an impossible size");
    }
    Ok(())
}

/// Opens `path` for a tool: `Ok(None)` if absent; a regular file of a possible length; mapped
/// read-only and lazily (a 3 GiB log is not pre-faulted to read a few words). `write` opens the
/// file read-write only so that locks can be taken on it (`clean`).
fn open_for_tools<T>(
    path: &Path,
    write: bool,
    possible: fn(u64) -> Result<(), &'static str>,
    validate: impl FnOnce(ReadOnlyRegion) -> Result<T, crate::error::Invalid>,
) -> Result<Option<(File, T)>, Error> {
    let file = match open_existing(path, write) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open", path, e)),
    };
    let m = file.metadata().map_err(|e| Error::io("inspect file", path, e))?;
    if !m.is_file() {
        return Err(Error::Corrupt { path: path.into(), what: "not a regular file" });
    }
    possible(m.len()).map_err(|what| Error::Corrupt { path: path.into(), what })?;
    let region =
        ReadOnlyRegion::map(&file, m.len() as usize, false).map_err(|e| Error::io("map", path, e))?;
    Ok(Some((file, validate(region).map_err(|e| e.at(path))?)))
}

/// A log as tools see it (see `open_for_tools`).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn inspect_log(path: &Path, write: bool) -> Result<Option<(File, Log<ReadOnlyRegion>)>, Error> {
    open_for_tools(path, write, log_length_possible, Log::open)
}

/// A reader-slot file as tools see it (see `open_for_tools`).
pub(crate) fn inspect_slots(
    path: &Path,
    write: bool,
) -> Result<Option<(File, Slots<ReadOnlyRegion>)>, Error> {
    open_for_tools(path, write, slots_length_possible, Slots::open)
}

/// How a process maps a stream's reader-slot file.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub trait SlotsMapping: Region + Sized {
    fn map_slots(file: &File, len: usize) -> io::Result<Self>;
}

/// The publisher maps it all read-write: it frees dead readers' slots.
impl SlotsMapping for MmapRegion {
    fn map_slots(file: &File, len: usize) -> io::Result<Self> {
        MmapRegion::map(file, 0, len)
    }
}

/// A reader maps it read-only, and its own slot read-write on its own (`SlotFile::claim`).
impl SlotsMapping for ReadOnlyRegion {
    fn map_slots(file: &File, len: usize) -> io::Result<Self> {
        ReadOnlyRegion::map(file, len, false)
    }
}

/// Opens the stream's reader-slot file, creating it with `count` slots if it does not exist, and
/// maps it as `R`. A file with fewer slots than `count` is refused unless `count` only applies to
/// a file this call creates (`at_least: false`).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn open_readers<R: SlotsMapping>(
    dir: &Path,
    stream: &str,
    count: usize,
    mode: u32,
    at_least: bool,
) -> Result<(SlotFile, Slots<R>), Error> {
    let path = name::readers_path(dir, stream);
    for _ in 0..64 {
        match open_existing(&path, true) {
            Ok(file) => {
                let len = check_owner(&file, &path)?;
                if let Err(what) = slots_length_possible(len) {
                    return Err(Error::Corrupt { path, what });
                }
                let region = R::map_slots(&file, len as usize).map_err(|e| Error::io("map", &path, e))?;
                let slots = Slots::open(region).map_err(|e| e.at(&path))?;
                // Announce that we use the file, then check that the name still leads to it: its
                // last user, or `clean`, may have removed it between our open and our lock.
                let announced = lock::try_lock(&file, Kind::Shared, USER_LOCK, 1)
                    .map_err(|e| Error::io("lock", &path, e))?;
                if !announced || !is_same_file(&file, &path).map_err(|e| Error::io("inspect", &path, e))? {
                    std::thread::yield_now();
                    continue;
                }
                if at_least && slots.count() < count {
                    return Err(Error::ReaderSlots { path, slots: slots.count(), wanted: count });
                }
                return Ok((SlotFile::new(file, path), slots));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("open reader slots", &path, e)),
        }
        let len = s::file_length(count);
        let tmp = name::temp_path(dir, stream, "readers", random_u64());
        let file = create_reserved(dir, &tmp, len as u64, mode)?;
        let _guard = TempGuard(Some(&tmp));
        let init = MmapRegion::map(&file, 0, len).map_err(|e| Error::io("map", &tmp, e))?;
        Slots::initialize(init, count);
        let region = R::map_slots(&file, len).map_err(|e| Error::io("map", &tmp, e))?;
        let slots = Slots::open(region).map_err(|e| e.at(&tmp))?;
        lock::try_lock(&file, Kind::Shared, USER_LOCK, 1).map_err(|e| Error::io("lock", &tmp, e))?;
        match fs::hard_link(&tmp, &path) {
            Ok(()) => return Ok((SlotFile::new(file, path), slots)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("publish reader slots", &path, e)),
        }
    }
    Err(Error::io("open reader slots", &path, io::Error::other("the file kept changing")))
}

#[cfg(test)]
mod tests {
    use crate::stream::liveness::lock_log_owners;
    use crate::testing::TempDir;
    use crate::{Error, Publication};

    use std::sync::Barrier;

    /// `clean` holds a stale log's owner locks while it decides; a publisher replacing that log
    /// meanwhile waits it out instead of calling the name taken. A live publisher's name stays
    /// taken.
    #[test]
    fn a_new_publisher_waits_out_a_cleaner_holding_the_stale_log() {
        let tmp = TempDir::new("files");
        let create = || Publication::builder("s").dir(tmp.path()).term_length(64 * 1024).create();
        // A closed publisher's log, kept aside while it removes its name, then put back: stale.
        let (log, kept) = (tmp.path().join("s.log"), tmp.path().join("kept"));
        let first = create().unwrap();
        std::fs::hard_link(&log, &kept).unwrap();
        drop(first);
        std::fs::rename(&kept, &log).unwrap();
        let stale = std::fs::File::options().read(true).write(true).open(&log).unwrap();
        assert!(lock_log_owners(&stale).unwrap(), "nobody holds a closed publisher's log");
        let held = Barrier::new(2);
        let publication = std::thread::scope(|s| {
            s.spawn(|| {
                held.wait();
                // What a cleaner's look at the slots costs under load; then it lets go.
                std::thread::sleep(std::time::Duration::from_millis(3));
                drop(stale);
            });
            held.wait();
            create()
        });
        let publication = publication.expect("the stale log is replaced once the cleaner lets go");
        assert!(matches!(create(), Err(Error::AlreadyExists { .. })), "a live publisher's name is taken");
        drop(publication);
    }
}
