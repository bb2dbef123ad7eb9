//! The catalog file of a journal directory: a 4096-byte header and fixed 512-byte records, one
//! per recording, mapped by every process that records or reads (`journal::record` is the memory
//! protocol of one record).
//!
//! A recorder write-locks the first byte of its record (an OFD lock, `sys::lock`) for as long as
//! it extends the recording: the kernel drops the lock when the recorder dies, so anyone can tell
//! a running recording from an interrupted one. Allocating a record takes a lock on the header.

use super::record::{self, Fields, Recording, RECORD_LEN};
use super::segment::space_error;
use crate::error::Error;
use crate::region::{MmapRegion, ReadOnlyRegion, Region, RegionMut};
use crate::stream::files::check_owner;
use crate::sys::clock::random_u64;
use crate::sys::fs::{create_new, open_existing, reserve};
use crate::sys::lock::{self, Kind};
use std::fs::{self, DirBuilder, File};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// File name of the catalog in a journal directory.
pub const FILE_NAME: &str = "catalog";
/// Bytes before the first record.
pub const HEADER_LEN: usize = 4096;
/// Records of a new catalog (2 MiB).
pub const DEFAULT_CAPACITY: usize = 4096;
/// Catalog layout version written. Version 2 added two record words (checksum kind, cut
/// count); a version 1 catalog is the same with those words zero, so it still opens: read-only
/// as it is, and a recorder that opens it read-write marks it version 2 (older builds then refuse
/// it with `VersionMismatch`).
pub const VERSION: i64 = 2;
/// Oldest catalog version read.
pub const OLDEST_VERSION: i64 = 1;
const MAGIC: i64 = i64::from_le_bytes(*b"SHMLOGJ\0");

/// Header words.
mod header {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const RECORD_LEN: usize = 16;
    pub const CAPACITY: usize = 24;
}

/// Byte locked (exclusively) while a record is being allocated.
const ALLOCATION_LOCK: u64 = 0;

/// A mapped catalog: read-write for recorders, read-only for replays and tools.
#[derive(Debug)]
pub struct Catalog<R> {
    path: PathBuf,
    file: File,
    region: R,
    capacity: usize,
}

/// Offset of record `id`.
fn record_base(id: u32) -> usize {
    HEADER_LEN + id as usize * RECORD_LEN
}

fn file_length(capacity: usize) -> usize {
    HEADER_LEN + capacity * RECORD_LEN
}

/// Creates `dir` (0700) if missing; refuses a symlink or a non-directory.
pub fn ensure_dir(dir: &Path) -> Result<(), Error> {
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
        region.store_i64(header::VERSION, VERSION, crate::sync::Ordering::Relaxed);
        region.store_i64(header::RECORD_LEN, RECORD_LEN as i64, crate::sync::Ordering::Relaxed);
        region.store_i64(header::CAPACITY, capacity as i64, crate::sync::Ordering::Relaxed);
        region.store_i64(header::MAGIC, MAGIC, crate::sync::Ordering::Release);
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
        if catalog.region.load_i64(header::VERSION, crate::sync::Ordering::Acquire) != VERSION {
            // A version 1 catalog: its records are version 2 records without checksums.
            catalog.region.store_i64(header::VERSION, VERSION, crate::sync::Ordering::Release);
            catalog.region.flush(0, HEADER_LEN).map_err(|e| Error::io("sync catalog", &catalog.path, e))?;
        }
        Ok(catalog)
    }

    /// Allocates a record for a new recording, publishes `fields` in it and takes its
    /// recorder lock (released by [`Catalog::release`] or by our death). Returns its id.
    pub fn allocate(&self, fields: &Fields<'_>) -> Result<u32, Error> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !lock::try_lock(&self.file, Kind::Exclusive, ALLOCATION_LOCK, 1)
            .map_err(|e| Error::io("lock catalog", &self.path, e))?
        {
            if Instant::now() >= deadline {
                return Err(Error::Timeout);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let found = (0..self.capacity as u32).find(|&id| {
            self.region.load_i64(record_base(id), crate::sync::Ordering::Acquire) == record::FREE
        });
        let result = match found {
            None => Err(Error::InvalidConfig("the journal's catalog is full (no free record left)")),
            Some(id) => self.take(id).and_then(|taken| {
                if taken {
                    record::publish(&self.region, record_base(id), fields);
                    Ok(id)
                } else {
                    Err(Error::Corrupt { path: self.path.clone(), what: "a free catalog record is locked" })
                }
            }),
        };
        let _ = lock::unlock(&self.file, ALLOCATION_LOCK, 1);
        result
    }

    /// Takes record `id`'s recorder lock: `false` if a live recorder holds it.
    pub fn take(&self, id: u32) -> Result<bool, Error> {
        lock::try_lock(&self.file, Kind::Exclusive, record_base(id) as u64, 1)
            .map_err(|e| Error::io("lock catalog record", &self.path, e))
    }

    /// Releases record `id`'s recorder lock.
    pub fn release(&self, id: u32) {
        let _ = lock::unlock(&self.file, record_base(id) as u64, 1);
    }

    pub fn set_recorded(&self, id: u32, position: i64) {
        record::set_recorded(&self.region, record_base(id), position);
    }

    pub fn set_durable(&self, id: u32, position: i64) {
        record::set_durable(&self.region, record_base(id), position);
    }

    pub fn stop(&self, id: u32, stop: i64, reason: record::StopReason) {
        record::stop(&self.region, record_base(id), stop, reason, crate::sys::clock::now_ns());
    }

    /// Lowers record `id`'s positions to `stop` and counts a cut: before recovery zeroes past it.
    pub fn cut_back(&self, id: u32, stop: i64) {
        record::cut_back(&self.region, record_base(id), stop);
    }

    pub fn resume(&self, id: u32, stop: i64) {
        record::resume(&self.region, record_base(id), stop, std::process::id() as i32);
    }

    /// Writes record `id` back to the disk and waits.
    pub fn sync(&self, id: u32) -> Result<(), Error> {
        if super::segment::trace::failing("sync catalog") {
            return Err(Error::io("sync catalog", &self.path, std::io::Error::other("injected by a test")));
        }
        // msync wants a page-aligned start.
        let base = record_base(id) & !4095;
        self.region
            .flush(base, 4096.min(file_length(self.capacity) - base))
            .map_err(|e| Error::io("sync catalog", &self.path, e))
    }
}

impl Catalog<ReadOnlyRegion> {
    /// Opens the catalog of `dir` read-only.
    pub fn open(dir: &Path) -> Result<Self, Error> {
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
    fn checked(path: PathBuf, file: File, region: R, capacity: usize) -> Result<Self, Error> {
        let word = |off| region.load_i64(off, crate::sync::Ordering::Acquire);
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

    /// `true` if a live recorder holds record `id`.
    pub fn recorder_alive(&self, id: u32) -> bool {
        lock::is_held(&self.file, Kind::Exclusive, record_base(id) as u64, 1).unwrap_or(false)
    }

    /// Recording `id`, or [`Error::NoSuchRecording`].
    pub fn get(&self, id: u32) -> Result<Recording, Error> {
        if id as usize >= self.capacity {
            return Err(Error::NoSuchRecording { id });
        }
        let words = record::snapshot(&self.region, record_base(id));
        let alive = words[record::word::STATE] == record::RECORDING && self.recorder_alive(id);
        match record::decode(id, &words, alive) {
            Ok(Some(recording)) => Ok(recording),
            Ok(None) => Err(Error::NoSuchRecording { id }),
            Err(what) => Err(Error::CorruptRecording { path: self.path.clone(), position: -1, what }),
        }
    }

    /// Recording `id`'s cut count, recorded position and whether it has stopped: three loads,
    /// for a replay following a recording as it grows. `id` must be below the capacity (a
    /// recording [`Catalog::get`] returned).
    pub fn progress(&self, id: u32) -> record::Progress {
        record::progress(&self.region, record_base(id))
    }

    /// After reading bytes of recording `id` below a position [`Catalog::progress`] gave with
    /// `cuts`: `true` if recovery began no cut since, so the bytes are the recorded ones.
    pub fn uncut(&self, id: u32, cuts: i64) -> bool {
        record::uncut(&self.region, record_base(id), cuts)
    }

    /// Every recording in the catalog, by id; a record that fails validation is an error naming it.
    pub fn list(&self) -> Vec<Result<Recording, Error>> {
        (0..self.capacity as u32)
            .take_while(|&id| {
                self.region.load_i64(record_base(id), crate::sync::Ordering::Acquire) != record::FREE
            })
            .map(|id| self.get(id))
            .collect()
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

    #[test]
    fn a_version_1_catalog_opens_and_a_recorder_marks_it_version_2_and_a_later_one_is_refused() {
        let dir = TempDir::new("catalog-v1");
        let catalog = Catalog::open_or_create(dir.path(), 4).unwrap();
        // A version 1 record: the checksum kind and the cut count are zero.
        let id = catalog.allocate(&fields(Checksum::None)).unwrap();
        catalog.release(id);
        drop(catalog);
        set_version(dir.path(), 1);
        let read = Catalog::open(dir.path()).unwrap();
        assert_eq!(read.get(id).unwrap().checksum, Checksum::None);
        assert_eq!(version(dir.path()), 1, "a reader changes nothing");
        drop(Catalog::open_or_create(dir.path(), 4).unwrap());
        assert_eq!(version(dir.path()), 2, "a recorder marks it version 2");
        set_version(dir.path(), 3);
        match Catalog::open(dir.path()) {
            Err(Error::VersionMismatch { found: 3, expected: 2, .. }) => {}
            other => panic!("a version 3 catalog was not refused: {other:?}"),
        }
    }
}
