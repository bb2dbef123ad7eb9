//! The catalog file of a journal directory: a 4096-byte header and fixed 512-byte records, one
//! per recording, mapped by every process that records or reads (`journal::record` is the memory
//! protocol of one record).
//!
//! A recorder write-locks the first byte of its record (an OFD lock, `sys::lock`) for as long as
//! it extends the recording: the kernel drops the lock when the recorder dies, so anyone can tell
//! a running recording from an interrupted one. Allocating a record takes a lock on the header;
//! whoever moves a recording's start, truncates, deletes or recovers it takes its record's second
//! byte (maintenance), so those never run at once on one recording.
//!
//! A recording's id is its own (version 3): ids only grow (the header's `NEXT_ID`), and the
//! record of a deleted recording is reused for a later one, so a catalog of fixed size serves a
//! recorder that runs for years as long as retention deletes what it no longer keeps.

use super::policy::Retention;
use super::record::{self, Fields, Recording, RECORD_LEN};
use super::segment::space_error;
use crate::error::Error;
use crate::region::{MmapRegion, ReadOnlyRegion, Region, RegionMut};
use crate::stream::files::check_owner;
use crate::sync::Ordering;
use crate::sys::clock::random_u64;
use crate::sys::fs::{create_new, open_existing, reserve};
use crate::sys::lock::{self, Kind};
use std::fs::{self, DirBuilder, File};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// File name of the catalog in a journal directory.
pub(crate) const FILE_NAME: &str = "catalog";
/// Bytes before the first record.
pub(crate) const HEADER_LEN: usize = 4096;
/// Records of a new catalog (2 MiB).
pub(crate) const DEFAULT_CAPACITY: usize = 4096;
/// Catalog layout version written. Version 2 added two record words (checksum kind, cut
/// count); version 3 the recording's id (records are reused), its origin, its purged base and
/// retention policy, the `DELETING` state, and in the header the next id and the journal's
/// retention policy. An older catalog is the same with those words zero (a record without an id
/// is the recording of its index), so it still opens: read-only as it is, and a process that
/// opens it read-write (a recorder, an operation) upgrades it: the next id past its records,
/// synced, then the version. Older builds then refuse it with `VersionMismatch`.
pub(crate) const VERSION: i64 = 3;
/// Oldest catalog version read.
pub(crate) const OLDEST_VERSION: i64 = 1;
const MAGIC: i64 = i64::from_le_bytes(*b"SHMLOGJ\0");

/// Header words.
mod header {
    pub(super) const MAGIC: usize = 0;
    pub(super) const VERSION: usize = 8;
    pub(super) const RECORD_LEN: usize = 16;
    pub(super) const CAPACITY: usize = 24;
    /// Version 3: the id the next recording gets (ids are never reused).
    pub(super) const NEXT_ID: usize = 32;
    /// Version 3: the journal's retention policy (`policy::Retention`'s three words).
    pub(super) const RETAIN: usize = 40;
}

/// Byte locked (exclusively) while a record is being allocated (or the catalog upgraded).
const ALLOCATION_LOCK: u64 = 0;
/// Offset in a record of the byte locked while its recording's start moves, or it is truncated,
/// deleted or recovered.
const MAINTENANCE_LOCK: u64 = 1;
/// How long an operator's operation waits for another one on the same recording.
const MAINTENANCE_WAIT: Duration = Duration::from_secs(10);

/// A mapped catalog: read-write for recorders, read-only for replays and tools.
#[derive(Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Catalog<R> {
    path: PathBuf,
    file: File,
    region: R,
    capacity: usize,
}

/// Offset of record `slot`.
fn record_base(slot: u32) -> usize {
    HEADER_LEN + slot as usize * RECORD_LEN
}

/// Takes the exclusive lock on byte `at` of `file`, retrying until `deadline`: `false` on time out.
fn lock_until(file: &File, path: &Path, at: u64, deadline: Instant) -> Result<bool, Error> {
    loop {
        if lock::try_lock(file, Kind::Exclusive, at, 1).map_err(|e| Error::io("lock catalog", path, e))? {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The maintenance lock of one record, released on drop.
#[derive(Debug)]
pub(crate) struct Maintenance<'a> {
    file: &'a File,
    at: u64,
}

impl Drop for Maintenance<'_> {
    fn drop(&mut self) {
        let _ = lock::unlock(self.file, self.at, 1);
    }
}

fn file_length(capacity: usize) -> usize {
    HEADER_LEN + capacity * RECORD_LEN
}

/// Creates `dir` (0700) if missing; refuses a symlink or a non-directory.
pub(crate) fn ensure_dir(dir: &Path) -> Result<(), Error> {
    match DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::io("create journal directory", dir, e)),
    }
    let meta = fs::symlink_metadata(dir).map_err(|e| Error::io("inspect journal directory", dir, e))?;
    if !meta.is_dir() {
        return Err(Error::PermissionDenied { path: dir.into(), reason: "not a directory (or a symlink)" });
    }
    Ok(())
}

impl Catalog<MmapRegion> {
    /// Opens the catalog of `dir` read-write, creating the directory and a catalog of
    /// `capacity` records if there is none.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn open_or_create(dir: &Path, capacity: usize) -> Result<Self, Error> {
        ensure_dir(dir)?;
        let path = dir.join(FILE_NAME);
        loop {
            match open_existing(&path, true) {
                Ok(file) => return Self::map(path, file),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("open catalog", &path, e)),
            }
            // Ours or a racing creator's: open whichever won.
            Self::create(dir, &path, capacity)?;
        }
    }

    /// Builds a catalog under a temporary name and links it in place (never over another).
    fn create(dir: &Path, path: &Path, capacity: usize) -> Result<(), Error> {
        if capacity == 0 || capacity > u32::MAX as usize / 2 {
            return Err(Error::InvalidConfig("catalog capacity must be from 1 to 2^31 records"));
        }
        let temp = dir.join(format!(".{FILE_NAME}.{:016x}.tmp", random_u64()));
        let file = create_new(&temp, 0o600).map_err(|e| Error::io("create catalog", &temp, e))?;
        let guard = RemoveOnDrop(&temp);
        let len = file_length(capacity);
        reserve(&file, len as u64).map_err(|e| space_error(&temp, len as u64, e))?;
        let region = MmapRegion::map(&file, 0, len).map_err(|e| Error::io("map catalog", &temp, e))?;
        region.store_i64(header::VERSION, VERSION, Ordering::Relaxed);
        region.store_i64(header::RECORD_LEN, RECORD_LEN as i64, Ordering::Relaxed);
        region.store_i64(header::CAPACITY, capacity as i64, Ordering::Relaxed);
        region.store_i64(header::MAGIC, MAGIC, Ordering::Release);
        region.flush(0, HEADER_LEN).map_err(|e| Error::io("sync catalog", &temp, e))?;
        file.sync_all().map_err(|e| Error::io("sync catalog", &temp, e))?;
        let linked = match fs::hard_link(&temp, path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(Error::io("publish catalog", path, e)),
        };
        drop(guard);
        linked?;
        super::segment::trace::note(|| "link catalog".into());
        // The catalog's name (and the temporary one's removal) must survive a power loss too.
        super::segment::sync_dir(dir)
    }

    fn map(path: PathBuf, file: File) -> Result<Self, Error> {
        let capacity = check_file(&path, &file)?;
        let region = MmapRegion::map(&file, 0, file_length(capacity))
            .map_err(|e| Error::io("map catalog", &path, e))?;
        let catalog = Self::checked(path, file, region, capacity)?;
        if catalog.version() < VERSION {
            catalog.upgrade()?;
        }
        Ok(catalog)
    }

    /// Makes an older catalog version 3: the next id past its records (each keeps the id it
    /// had, its index), synced, then the version, synced. Under the allocation lock; a crash
    /// before the version is stored leaves an older catalog, upgraded again at the next open.
    fn upgrade(&self) -> Result<(), Error> {
        let deadline = Instant::now() + Duration::from_secs(10);
        if !lock_until(&self.file, &self.path, ALLOCATION_LOCK, deadline)? {
            return Err(Error::Timeout);
        }
        let result = (|| {
            if self.version() >= VERSION {
                return Ok(()); // another process did it meanwhile
            }
            let next = (0..self.capacity as u32)
                .filter(|&slot| self.region.load_i64(record_base(slot), Ordering::Acquire) != record::FREE)
                .map(|slot| slot as i64 + 1)
                .max()
                .unwrap_or(0);
            self.region.store_i64(header::NEXT_ID, next, Ordering::Relaxed);
            self.region
                .flush(0, file_length(self.capacity))
                .map_err(|e| Error::io("sync catalog", &self.path, e))?;
            self.region.store_i64(header::VERSION, VERSION, Ordering::Release);
            self.region.flush(0, HEADER_LEN).map_err(|e| Error::io("sync catalog", &self.path, e))
        })();
        let _ = lock::unlock(&self.file, ALLOCATION_LOCK, 1);
        result
    }

    /// Allocates a record for a new recording (a free one: never used, or its recording
    /// deleted), gives the recording the next id, publishes `fields` and takes the record's
    /// recorder lock (released by [`Catalog::release`] or by our death). Returns the id and the
    /// record's index.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn allocate(&self, fields: &Fields<'_>) -> Result<(u32, u32), Error> {
        let deadline = Instant::now() + Duration::from_secs(10);
        if !lock_until(&self.file, &self.path, ALLOCATION_LOCK, deadline)? {
            return Err(Error::Timeout);
        }
        // The next id: past the header's, and past every id in use (a header word lost to a
        // power loss while a record that used it survived must not hand the id out again).
        let mut next = self.region.load_i64(header::NEXT_ID, Ordering::Relaxed).max(0);
        let mut free = None;
        for slot in 0..self.capacity as u32 {
            match self.region.load_i64(record_base(slot), Ordering::Acquire) {
                record::FREE => free = free.or(Some(slot)),
                _ => next = next.max(i64::from(self.id_in(slot)) + 1),
            }
        }
        let result = match (free, u32::try_from(next).ok().filter(|&id| id < u32::MAX).ok_or(())) {
            (None, _) => Err(Error::InvalidConfig(
                "the journal's catalog is full: every record holds a recording (delete or purge old ones, or \
                 set a retention policy)",
            )),
            (_, Err(_)) => Err(Error::InvalidConfig("the journal's catalog ran out of recording ids")),
            (Some(slot), Ok(id)) => self.take(slot).and_then(|taken| {
                if !taken {
                    return Err(Error::Corrupt { path: self.path.clone(), what: "a free catalog record is locked" });
                }
                record::publish(&self.region, record_base(slot), id, fields);
                self.region.store_i64(header::NEXT_ID, next + 1, Ordering::Relaxed);
                self.region.flush(0, HEADER_LEN).map_err(|e| Error::io("sync catalog", &self.path, e))?;
                Ok((id, slot))
            }),
        };
        let _ = lock::unlock(&self.file, ALLOCATION_LOCK, 1);
        result
    }

    /// Takes record `slot`'s recorder lock: `false` if a live recorder holds it.
    pub(crate) fn take(&self, slot: u32) -> Result<bool, Error> {
        lock::try_lock(&self.file, Kind::Exclusive, record_base(slot) as u64, 1)
            .map_err(|e| Error::io("lock catalog record", &self.path, e))
    }

    /// Releases record `slot`'s recorder lock.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn release(&self, slot: u32) {
        let _ = lock::unlock(&self.file, record_base(slot) as u64, 1);
    }

    /// Takes record `slot`'s maintenance lock, waiting up to 10 s for another holder (`wait`),
    /// or not at all: `None` if it is held.
    pub(crate) fn maintain(&self, slot: u32, wait: bool) -> Result<Option<Maintenance<'_>>, Error> {
        let at = record_base(slot) as u64 + MAINTENANCE_LOCK;
        let deadline = if wait { Instant::now() + MAINTENANCE_WAIT } else { Instant::now() };
        Ok(lock_until(&self.file, &self.path, at, deadline)?.then_some(Maintenance { file: &self.file, at }))
    }

    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn set_recorded(&self, slot: u32, position: i64) {
        record::set_recorded(&self.region, record_base(slot), position);
    }

    pub(crate) fn set_durable(&self, slot: u32, position: i64) {
        record::set_durable(&self.region, record_base(slot), position);
    }

    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn stop(&self, slot: u32, stop: i64, reason: record::StopReason) {
        record::stop(&self.region, record_base(slot), stop, reason, crate::sys::clock::now_ns());
    }

    /// Lowers record `slot`'s positions to `stop` and counts a cut: before recovery zeroes past
    /// it.
    pub(crate) fn cut_back(&self, slot: u32, stop: i64) {
        record::cut_back(&self.region, record_base(slot), stop);
    }

    /// Truncates record `slot`'s recording from `old_stop` down to `stop`: see
    /// `record::truncate`.
    pub(crate) fn truncate(&self, slot: u32, old_stop: i64, stop: i64) {
        record::truncate(&self.region, record_base(slot), old_stop, stop);
    }

    pub(crate) fn resume(&self, slot: u32, stop: i64) {
        record::resume(&self.region, record_base(slot), stop, std::process::id() as i32);
    }

    /// Moves record `slot`'s start up to `start` and its purged base to `purged`, then calls
    /// `then` (which removes files below them): see `record::move_start`.
    pub(crate) fn move_start<T>(&self, slot: u32, start: i64, purged: i64, then: impl FnOnce() -> T) -> T {
        record::move_start(&self.region, record_base(slot), start, purged, then)
    }

    /// Marks record `slot`'s recording as being deleted.
    pub(crate) fn retire(&self, slot: u32) {
        record::retire(&self.region, record_base(slot));
    }

    /// Frees record `slot` for reuse (its recording's files are gone).
    pub(crate) fn free(&self, slot: u32) {
        record::free(&self.region, record_base(slot));
    }

    /// Sets the journal's retention policy, synced.
    pub(crate) fn set_retention(&self, policy: Retention) -> Result<(), Error> {
        for (i, w) in policy.to_words().into_iter().enumerate() {
            self.region.store_i64(header::RETAIN + i * 8, w, Ordering::Release);
        }
        self.region.flush(0, HEADER_LEN).map_err(|e| Error::io("sync catalog", &self.path, e))
    }

    /// Writes record `slot` back to the disk and waits.
    pub(crate) fn sync(&self, slot: u32) -> Result<(), Error> {
        if super::segment::trace::failing("sync catalog") {
            return Err(Error::io("sync catalog", &self.path, std::io::Error::other("injected by a test")));
        }
        // msync wants a page-aligned start.
        let base = record_base(slot) & !4095;
        self.region
            .flush(base, 4096.min(file_length(self.capacity) - base))
            .map_err(|e| Error::io("sync catalog", &self.path, e))
    }
}

impl Catalog<ReadOnlyRegion> {
    /// Opens the catalog of `dir` read-only.
    pub(crate) fn open(dir: &Path) -> Result<Self, Error> {
        let path = dir.join(FILE_NAME);
        let file = open_existing(&path, false).map_err(|e| Error::io("open catalog", &path, e))?;
        let capacity = check_file(&path, &file)?;
        let region = ReadOnlyRegion::map(&file, file_length(capacity), false)
            .map_err(|e| Error::io("map catalog", &path, e))?;
        Self::checked(path, file, region, capacity)
    }
}

/// Checks owner and length; returns the capacity the length implies.
fn check_file(path: &Path, file: &File) -> Result<usize, Error> {
    let len = check_owner(file, path)?;
    let corrupt = |what| Error::Corrupt { path: path.into(), what };
    if len < HEADER_LEN as u64 || (len - HEADER_LEN as u64) % RECORD_LEN as u64 != 0 {
        return Err(corrupt("the catalog's length is not a header plus whole records"));
    }
    let capacity = (len - HEADER_LEN as u64) / RECORD_LEN as u64;
    if capacity == 0 || capacity > u32::MAX as u64 / 2 {
        return Err(corrupt("the catalog's record count is out of range"));
    }
    Ok(capacity as usize)
}

impl<R: Region> Catalog<R> {
    /// The catalog's layout version now (an older one may be upgraded while we have it open).
    pub(crate) fn version(&self) -> i64 {
        self.region.load_i64(header::VERSION, Ordering::Acquire)
    }

    /// The journal's retention policy ([`Retention::none`] in a catalog older than version 3, or
    /// if the words are not a policy).
    pub(crate) fn retention(&self) -> Retention {
        if self.version() < 3 {
            return Retention::none();
        }
        let w = |i: usize| self.region.load_i64(header::RETAIN + i * 8, Ordering::Acquire);
        Retention::from_words([w(0), w(1), w(2)]).unwrap_or_default()
    }

    /// The directory the catalog is in (the journal's).
    pub(crate) fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    fn checked(path: PathBuf, file: File, region: R, capacity: usize) -> Result<Self, Error> {
        let word = |off| region.load_i64(off, Ordering::Acquire);
        let corrupt = |what| Error::Corrupt { path: path.clone(), what };
        if word(header::MAGIC) != MAGIC {
            return Err(corrupt("not a shmlog journal catalog"));
        }
        if !(OLDEST_VERSION..=VERSION).contains(&word(header::VERSION)) {
            let found = i32::try_from(word(header::VERSION)).unwrap_or(-1);
            return Err(Error::VersionMismatch { path, found, expected: VERSION as i32 });
        }
        if word(header::RECORD_LEN) != RECORD_LEN as i64 || word(header::CAPACITY) != capacity as i64 {
            return Err(corrupt("the catalog's header does not match its length"));
        }
        Ok(Self { path, file, region, capacity })
    }

    /// `true` if a live recorder holds record `slot`.
    pub(crate) fn recorder_alive(&self, slot: u32) -> bool {
        lock::is_held(&self.file, Kind::Exclusive, record_base(slot) as u64, 1).unwrap_or(false)
    }

    /// The record that holds recording `id`, if any.
    pub(crate) fn find(&self, id: u32) -> Option<u32> {
        if self.version() < 3 {
            return ((id as usize) < self.capacity).then_some(id);
        }
        (0..self.capacity as u32).find(|&slot| {
            let base = record_base(slot);
            self.region.load_i64(base, Ordering::Acquire) != record::FREE && self.id_in(slot) == id
        })
    }

    /// Recording `id`, or [`Error::NoSuchRecording`].
    pub(crate) fn get(&self, id: u32) -> Result<Recording, Error> {
        let Some(slot) = self.find(id) else { return Err(Error::NoSuchRecording { id }) };
        match self.read(slot) {
            Ok(Some(recording)) if recording.id == id => Ok(recording),
            Ok(_) => Err(Error::NoSuchRecording { id }),
            Err(e) => Err(e),
        }
    }

    /// The recording record `slot` holds (`None` if free or being deleted): a snapshot whose id
    /// and state are loaded again after it, taken again if either moved meanwhile.
    pub(crate) fn read(&self, slot: u32) -> Result<Option<Recording>, Error> {
        let base = record_base(slot);
        let mut attempts = 0;
        loop {
            let words = record::snapshot(&self.region, base);
            let state = words[record::word::STATE];
            let alive = state == record::RECORDING && self.recorder_alive(slot);
            let decoded = record::decode(slot, &words, alive);
            let same = match &decoded {
                Ok(Some(r)) => record::same_recording(&self.region, base, slot, r.id, state),
                _ => true,
            };
            attempts += 1;
            if !same && attempts < 100 {
                continue; // stopped, or deleted, under the snapshot: look again
            }
            return match decoded {
                Ok(found) if same => Ok(found),
                Ok(_) => Ok(None),
                Err(what) => Err(Error::CorruptRecording { path: self.path.clone(), position: -1, what }),
            };
        }
    }

    /// Recording `id`'s progress in record `slot` (a recording [`Catalog::get`] returned): for
    /// a replay following it as it grows, and noticing a cut, a purge or its deletion.
    pub(crate) fn progress(&self, slot: u32, id: u32) -> record::Progress {
        record::progress(&self.region, record_base(slot), slot, id)
    }

    /// After reading bytes of recording `id` below a position [`Catalog::progress`] gave with
    /// `cuts`: `true` if recovery began no cut since (and the recording is still there), so the
    /// bytes are the recorded ones.
    pub(crate) fn uncut(&self, slot: u32, id: u32, cuts: i64) -> bool {
        record::uncut(&self.region, record_base(slot), cuts, slot, id)
    }

    /// The records whose recording is being deleted.
    pub(crate) fn deleting(&self) -> Vec<u32> {
        (0..self.capacity as u32)
            .filter(|&slot| self.region.load_i64(record_base(slot), Ordering::Acquire) == record::DELETING)
            .collect()
    }

    /// The id of the recording record `slot` holds (or held, while being deleted).
    pub(crate) fn id_in(&self, slot: u32) -> u32 {
        record::id_in(
            self.region.load_i64(record_base(slot) + record::word::PID * 8, Ordering::Acquire),
            slot,
        )
    }

    /// Record `slot`'s start position, loaded after finding a segment file missing.
    pub(crate) fn start_of(&self, slot: u32) -> i64 {
        record::start(&self.region, record_base(slot))
    }

    /// Every recording in the catalog, by id; a record that fails validation is an error naming
    /// it (listed where its index falls among the ids).
    pub(crate) fn list(&self) -> Vec<Result<Recording, Error>> {
        let mut found: Vec<(u32, Result<Recording, Error>)> = (0..self.capacity as u32)
            .filter(|&slot| self.region.load_i64(record_base(slot), Ordering::Acquire) != record::FREE)
            .filter_map(|slot| match self.read(slot) {
                Ok(Some(r)) => Some((r.id, Ok(r))),
                Ok(None) => None,
                Err(e) => Some((slot, Err(e))),
            })
            .collect();
        found.sort_by_key(|(key, _)| *key);
        found.into_iter().map(|(_, r)| r).collect()
    }
}

struct RemoveOnDrop<'a>(&'a Path);

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        let _ = fs::remove_file(self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::record::{Checksum, Fields};
    use crate::testing::TempDir;
    use std::os::unix::fs::FileExt;

    fn fields(checksum: Checksum) -> Fields<'static> {
        Fields {
            stream: "s",
            session_id: 1,
            stream_id: 2,
            term_length: 1 << 16,
            mtu: 1408,
            initial_term_id: 0,
            segment_length: 1 << 20,
            start_position: 0,
            start_unix_ns: 1,
            boot_id: 0,
            pid: 1,
            gap_before: 0,
            previous: None,
            checksum,
            retention: Retention::none(),
        }
    }

    fn set_version(dir: &Path, version: i64) {
        let file = fs::OpenOptions::new().write(true).open(dir.join(FILE_NAME)).unwrap();
        file.write_all_at(&version.to_le_bytes(), header::VERSION as u64).unwrap();
    }

    fn version(dir: &Path) -> i64 {
        let mut b = [0u8; 8];
        File::open(dir.join(FILE_NAME)).unwrap().read_exact_at(&mut b, header::VERSION as u64).unwrap();
        i64::from_le_bytes(b)
    }

    /// Makes the catalog of `dir` look written by an older version: the words version 3 added
    /// zeroed (records' ids, the next id), and `version`.
    fn make_old(dir: &Path, version: i64, records: usize) {
        let file = fs::OpenOptions::new().write(true).open(dir.join(FILE_NAME)).unwrap();
        for slot in 0..records as u32 {
            // The id's half of the pid word.
            file.write_all_at(&0i32.to_le_bytes(), (record_base(slot) + record::word::PID * 8 + 4) as u64)
                .unwrap();
        }
        file.write_all_at(&0i64.to_le_bytes(), header::NEXT_ID as u64).unwrap();
        set_version(dir, version);
    }

    #[test]
    fn an_older_catalog_opens_with_its_ids_and_a_writer_upgrades_it_and_a_later_one_is_refused() {
        for old in [1, 2] {
            let dir = TempDir::new("catalog-old");
            let catalog = Catalog::open_or_create(dir.path(), 4).unwrap();
            for _ in 0..2 {
                let (_, slot) = catalog.allocate(&fields(Checksum::None)).unwrap();
                catalog.release(slot);
            }
            drop(catalog);
            make_old(dir.path(), old, 2);
            let read = Catalog::open(dir.path()).unwrap();
            assert_eq!(read.get(1).unwrap().checksum, Checksum::None);
            assert_eq!(read.list().len(), 2);
            assert_eq!(version(dir.path()), old, "a reader changes nothing");
            // A writer upgrades it: the same ids, and the next one after them.
            let catalog = Catalog::open_or_create(dir.path(), 4).unwrap();
            assert_eq!(version(dir.path()), 3);
            assert_eq!(
                (read.get(1).unwrap().id, read.get(1).unwrap().slot),
                (1, 1),
                "a reader opened before"
            );
            let (id, slot) = catalog.allocate(&fields(Checksum::Crc32c)).unwrap();
            assert_eq!((id, slot), (2, 2));
            catalog.release(slot);
            let ids: Vec<u32> = catalog.list().into_iter().map(|r| r.unwrap().id).collect();
            assert_eq!(ids, [0, 1, 2]);
        }
        let dir = TempDir::new("catalog-later");
        drop(Catalog::open_or_create(dir.path(), 4).unwrap());
        set_version(dir.path(), 4);
        match Catalog::open(dir.path()) {
            Err(Error::VersionMismatch { found: 4, expected: 3, .. }) => {}
            other => panic!("a version 4 catalog was not refused: {other:?}"),
        }
    }

    /// The record of a deleted recording is reused by a later one with a new id: a catalog of
    /// two records serves any number of recordings, one at a time.
    #[test]
    fn a_deleted_recordings_record_is_reused_with_a_new_id() {
        let dir = TempDir::new("catalog-reuse");
        let catalog = Catalog::open_or_create(dir.path(), 2).unwrap();
        let reader = Catalog::open(dir.path()).unwrap();
        let mut live = Vec::new();
        for _ in 0..2 {
            let (id, slot) = catalog.allocate(&fields(Checksum::None)).unwrap();
            catalog.release(slot);
            live.push((id, slot));
        }
        assert!(matches!(catalog.allocate(&fields(Checksum::None)), Err(Error::InvalidConfig(_))), "full");
        for round in 0..10u32 {
            let (old, slot) = live.remove(0);
            let before = reader.progress(slot, old);
            assert!(before.valid);
            catalog.retire(slot);
            assert!(!reader.progress(slot, old).valid, "being deleted");
            catalog.free(slot);
            let (id, again) = catalog.allocate(&fields(Checksum::None)).unwrap();
            catalog.release(again);
            assert_eq!((id, again), (round + 2, slot), "the freed record, a new id");
            assert!(!reader.progress(slot, old).valid, "the old recording is gone");
            assert!(matches!(reader.get(old), Err(Error::NoSuchRecording { .. })));
            assert_eq!(reader.get(id).unwrap().slot, slot);
            live.push((id, again));
        }
        let ids: Vec<u32> = reader.list().into_iter().map(|r| r.unwrap().id).collect();
        assert_eq!(ids, [10, 11], "listed by id");
    }
}
