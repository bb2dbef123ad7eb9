//! Durable readers: named readers of a journal's recordings whose positions live on disk, in the
//! journal's `readers` file, so that a reader that restarts goes on where it stopped and
//! retention never purges what it has not read.
//!
//! The file: a 4096-byte header (magic, version, record length, capacity) and 256-byte records,
//! one per registered reader: state, the position's seqlock (`journal::reader_position`), the
//! last update's wall-clock time, the reader's name and its stream's name. A registered reader's
//! process write-locks its record's first byte (an OFD lock) while it holds the registration, so
//! one name has one live reader, and tools can tell a live reader from a stopped one.
//!
//! A reader at `(recording r, position p)` has read every recording of its stream before `r`
//! (ids only grow) and `r` up to `p`; retention keeps the rest. A reader that has read nothing
//! keeps all of its stream.

use super::reader_position::{self, NOTHING_READ};
use crate::error::Error;
use crate::region::{MmapRegion, ReadOnlyRegion, Region, RegionMut};
use crate::stream::files::check_owner;
use crate::sync::Ordering;
use crate::sys::clock::{now_ns, random_u64};
use crate::sys::fs::{create_new, open_existing, reserve};
use crate::sys::lock::{self, Kind};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// File name of the durable readers' positions in a journal directory.
pub(super) const FILE_NAME: &str = "readers";
const HEADER_LEN: usize = 4096;
const RECORD_LEN: usize = 256;
/// Readers a journal can register.
pub(super) const CAPACITY: usize = 256;
const VERSION: i64 = 1;
const MAGIC: i64 = i64::from_le_bytes(*b"SHMLOGR\0");
/// Longest durable reader name.
pub(super) const NAME_MAX: usize = 64;
/// Longest stream name (as in the catalog).
const STREAM_MAX: usize = super::record::NAME_MAX;

mod header {
    pub(super) const MAGIC: usize = 0;
    pub(super) const VERSION: usize = 8;
    pub(super) const RECORD_LEN: usize = 16;
    pub(super) const CAPACITY: usize = 24;
}

/// Record words: the state (0), then `reader_position`'s (1..=3), then these.
mod word {
    pub(super) const UPDATED_NS: usize = 4;
    /// The name's length (bits 0..32) and the stream name's (bits 32..64).
    pub(super) const LENGTHS: usize = 5;
    pub(super) const NAME: usize = 6;
    pub(super) const STREAM: usize = 14;
}

const FREE: i64 = 0;
const REGISTERED: i64 = 1;

fn record_base(slot: usize) -> usize {
    HEADER_LEN + slot * RECORD_LEN
}

const FILE_LEN: usize = HEADER_LEN + CAPACITY * RECORD_LEN;

/// A registered durable reader's position in a journal, held by one process at a time.
///
/// A [`super::PersistentSubscription`] stores its position here after every poll; any process
/// may also register a reader and store a position by hand (`docs/journal.md`, "Retention").
#[derive(Debug)]
pub struct DurableReader {
    path: PathBuf,
    file: File,
    region: MmapRegion,
    slot: usize,
    name: String,
    stream: String,
}

/// What the journal's `readers` file says of one durable reader.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DurableReaderInfo {
    /// Its name.
    pub name: String,
    /// The stream it reads.
    pub stream: String,
    /// The recording it reads and how far it has read it; `None` if it has read nothing yet
    /// (or its position was being stored: it then keeps all of its stream).
    pub position: Option<(u32, i64)>,
    /// When its position was last stored (nanoseconds since the Unix epoch; 0: never).
    pub updated_unix_ns: i64,
    /// `true` if a live process holds the registration.
    pub alive: bool,
}

impl DurableReader {
    /// Registers durable reader `name` of `stream` in the journal directory `journal` (or takes
    /// its registration back where it stopped: same name, same stream). Fails if a live process
    /// holds it, or all 256 records are taken.
    pub fn register(journal: impl AsRef<Path>, name: &str, stream: &str) -> Result<Self, Error> {
        if name.is_empty() || name.len() > NAME_MAX || name.contains('\0') {
            return Err(Error::InvalidConfig("a durable reader's name is 1 to 64 bytes, without NUL"));
        }
        crate::stream::name::validate(stream)?;
        if stream.len() > STREAM_MAX {
            return Err(Error::InvalidConfig("a journal's stream names are at most 128 bytes"));
        }
        let (path, file) = open_or_create(journal.as_ref())?;
        let region = MmapRegion::map(&file, 0, FILE_LEN).map_err(|e| Error::io("map readers", &path, e))?;
        check_header(&path, &region)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !lock::try_lock(&file, Kind::Exclusive, 0, 1)
            .map_err(|e| Error::io("lock readers", &path, e))?
        {
            if Instant::now() >= deadline {
                return Err(Error::Timeout);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let found = (0..CAPACITY).find(|&slot| {
            region.load_i64(record_base(slot), Ordering::Acquire) == REGISTERED
                && read_str(&region, slot, word::NAME, lengths(&region, slot).0) == name
        });
        let result = (|| {
            let slot = match found {
                Some(slot) => {
                    if read_str(&region, slot, word::STREAM, lengths(&region, slot).1) != stream {
                        return Err(Error::InvalidConfig(
                            "a durable reader of that name reads another stream",
                        ));
                    }
                    slot
                }
                None => {
                    let slot = (0..CAPACITY)
                        .find(|&slot| region.load_i64(record_base(slot), Ordering::Acquire) == FREE)
                        .ok_or(Error::InvalidConfig(
                            "the journal's 256 durable readers are all registered",
                        ))?;
                    let base = record_base(slot);
                    let put = |w: usize, v: i64| region.store_i64(base + w * 8, v, Ordering::Relaxed);
                    reader_position::store(&region, base, NOTHING_READ, 0);
                    put(word::UPDATED_NS, 0);
                    put(word::LENGTHS, name.len() as i64 | (stream.len() as i64) << 32);
                    write_str(&region, slot, word::NAME, NAME_MAX, name);
                    write_str(&region, slot, word::STREAM, STREAM_MAX, stream);
                    region.store_i64(base, REGISTERED, Ordering::Release);
                    region.flush(0, FILE_LEN).map_err(|e| Error::io("sync readers", &path, e))?;
                    slot
                }
            };
            let at = record_base(slot) as u64;
            if !lock::try_lock(&file, Kind::Exclusive, at, 1)
                .map_err(|e| Error::io("lock readers", &path, e))?
            {
                return Err(Error::InvalidConfig("a live process holds that durable reader"));
            }
            Ok(slot)
        })();
        let _ = lock::unlock(&file, 0, 1);
        let slot = result?;
        Ok(Self { path, file, region, slot, name: name.into(), stream: stream.into() })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stream it reads.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The recording it reads and how far; `None` if it has read nothing yet.
    pub fn position(&self) -> Option<(u32, i64)> {
        load(&self.region, self.slot)
    }

    /// Stores its position: everything of its stream before `position` of recording
    /// `recording` has been read (retention may purge it). In the page cache: it survives this
    /// process's death; [`DurableReader::sync`] makes it survive a power loss.
    pub fn store(&self, recording: u32, position: i64) {
        let base = record_base(self.slot);
        reader_position::store(&self.region, base, recording as i64, position);
        self.region.store_i64(base + word::UPDATED_NS * 8, now_ns(), Ordering::Relaxed);
    }

    /// Writes its position to the disk and waits.
    pub fn sync(&self) -> Result<(), Error> {
        let base = record_base(self.slot) & !4095;
        self.region
            .flush(base, 4096.min(FILE_LEN - base))
            .map_err(|e| Error::io("sync readers", &self.path, e))
    }

    /// Removes its registration: retention no longer keeps anything for it.
    pub fn unregister(self) -> Result<(), Error> {
        self.region.store_i64(record_base(self.slot), FREE, Ordering::Release);
        self.sync()
    }
}

impl Drop for DurableReader {
    fn drop(&mut self) {
        let _ = lock::unlock(&self.file, record_base(self.slot) as u64, 1);
    }
}

/// Every durable reader registered in the journal directory `journal` (none if it has no
/// `readers` file).
pub fn durable_readers(journal: impl AsRef<Path>) -> Result<Vec<DurableReaderInfo>, Error> {
    let path = journal.as_ref().join(FILE_NAME);
    let file = match open_existing(&path, false) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("open readers", &path, e)),
    };
    if check_owner(&file, &path)? != FILE_LEN as u64 {
        return Err(Error::Corrupt {
            path,
            what: "the readers file's length is not a header and 256 records",
        });
    }
    let region =
        ReadOnlyRegion::map(&file, FILE_LEN, false).map_err(|e| Error::io("map readers", &path, e))?;
    check_header(&path, &region)?;
    Ok((0..CAPACITY)
        .filter(|&slot| region.load_i64(record_base(slot), Ordering::Acquire) == REGISTERED)
        .map(|slot| {
            let (name_len, stream_len) = lengths(&region, slot);
            DurableReaderInfo {
                name: read_str(&region, slot, word::NAME, name_len),
                stream: read_str(&region, slot, word::STREAM, stream_len),
                position: load(&region, slot),
                updated_unix_ns: region.load_i64(record_base(slot) + word::UPDATED_NS * 8, Ordering::Relaxed),
                alive: lock::is_held(&file, Kind::Exclusive, record_base(slot) as u64, 1).unwrap_or(false),
            }
        })
        .collect())
}

/// The position of the reader in record `slot`, its seqlock tried a few times (a writer that
/// died mid-store leaves it odd: read as nothing read, which keeps everything).
fn load<R: Region>(region: &R, slot: usize) -> Option<(u32, i64)> {
    let base = record_base(slot);
    for _ in 0..1000 {
        if let Some((recording, position)) = reader_position::try_load(region, base) {
            return u32::try_from(recording).ok().map(|r| (r, position));
        }
        std::hint::spin_loop();
    }
    None
}

fn lengths<R: Region>(region: &R, slot: usize) -> (usize, usize) {
    let w = region.load_i64(record_base(slot) + word::LENGTHS * 8, Ordering::Acquire);
    (((w & 0xffff_ffff) as usize).min(NAME_MAX), ((w >> 32) as usize).min(STREAM_MAX))
}

fn read_str<R: Region>(region: &R, slot: usize, first: usize, len: usize) -> String {
    let mut bytes = Vec::with_capacity(len.next_multiple_of(8));
    for i in 0..len.div_ceil(8) {
        let at = record_base(slot) + (first + i) * 8;
        bytes.extend_from_slice(&region.load_i64(at, Ordering::Relaxed).to_le_bytes());
    }
    bytes.truncate(len);
    // A damaged name reads with replacement characters, within the same bounds.
    let mut name = String::from_utf8_lossy(&bytes).into_owned();
    while name.len() > len {
        name.pop();
    }
    name
}

fn write_str<R: RegionMut>(region: &R, slot: usize, first: usize, max: usize, s: &str) {
    for i in 0..max / 8 {
        let mut b = [0u8; 8];
        if let Some(chunk) = s.as_bytes().chunks(8).nth(i) {
            b[..chunk.len()].copy_from_slice(chunk);
        }
        region.store_i64(record_base(slot) + (first + i) * 8, i64::from_le_bytes(b), Ordering::Relaxed);
    }
}

fn check_header<R: Region>(path: &Path, region: &R) -> Result<(), Error> {
    let word = |at| region.load_i64(at, Ordering::Acquire);
    if word(header::MAGIC) != MAGIC {
        return Err(Error::Corrupt { path: path.into(), what: "not a shmlog journal's readers file" });
    }
    if word(header::VERSION) != VERSION {
        let found = i32::try_from(word(header::VERSION)).unwrap_or(-1);
        return Err(Error::VersionMismatch { path: path.into(), found, expected: VERSION as i32 });
    }
    if word(header::RECORD_LEN) != RECORD_LEN as i64 || word(header::CAPACITY) != CAPACITY as i64 {
        return Err(Error::Corrupt {
            path: path.into(),
            what: "the readers file's header does not match its length",
        });
    }
    Ok(())
}

/// Opens the journal's `readers` file read-write, creating it (under a temporary name, then
/// linked in place, never over another) if there is none.
fn open_or_create(dir: &Path) -> Result<(PathBuf, File), Error> {
    super::catalog::ensure_dir(dir)?;
    let path = dir.join(FILE_NAME);
    loop {
        match open_existing(&path, true) {
            Ok(file) => {
                if check_owner(&file, &path)? != FILE_LEN as u64 {
                    return Err(Error::Corrupt {
                        path,
                        what: "the readers file's length is not a header and 256 records",
                    });
                }
                return Ok((path, file));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("open readers", &path, e)),
        }
        let temp = dir.join(format!(".{FILE_NAME}.{:016x}.tmp", random_u64()));
        let file = create_new(&temp, 0o600).map_err(|e| Error::io("create readers", &temp, e))?;
        let made = (|| {
            reserve(&file, FILE_LEN as u64)
                .map_err(|e| super::segment::space_error(&temp, FILE_LEN as u64, e))?;
            let region =
                MmapRegion::map(&file, 0, FILE_LEN).map_err(|e| Error::io("map readers", &temp, e))?;
            region.store_i64(header::VERSION, VERSION, Ordering::Relaxed);
            region.store_i64(header::RECORD_LEN, RECORD_LEN as i64, Ordering::Relaxed);
            region.store_i64(header::CAPACITY, CAPACITY as i64, Ordering::Relaxed);
            region.store_i64(header::MAGIC, MAGIC, Ordering::Release);
            region.flush(0, HEADER_LEN).map_err(|e| Error::io("sync readers", &temp, e))?;
            file.sync_all().map_err(|e| Error::io("sync readers", &temp, e))?;
            match fs::hard_link(&temp, &path) {
                Ok(()) => super::segment::sync_dir(dir),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(Error::io("publish readers", &path, e)),
            }
        })();
        let _ = fs::remove_file(&temp);
        made?;
    }
}
