//! Segment files: `<recording id>-<base position>.seg`, each covering the stream positions
//! `base .. base + segment_length`, frames at the file offset `position - base` exactly as they
//! were in the log. A segment costs what it holds: the file grows as frames are written (padding
//! bodies are holes), unless the recorder was asked to preallocate, in which case each segment's
//! whole length is reserved (`posix_fallocate`) when it is created and a full disk shows there.
//! Either way a full disk is a typed error ([`Error::InsufficientSpace`]) and the recorded
//! position never covers a write that did not complete.
//!
//! A new file's name is durable only once its directory is synced (POSIX; ext4 in its default
//! mode commits it with the file, XFS and btrfs may not): [`sync_dir`] follows the creation of a
//! segment where the fsync policy promises durability, the linking of a catalog, and recovery's
//! removal of segments.

use crate::error::Error;
use crate::sys::fs::{create_new, open_existing, reserve, Cause};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Largest block written at once (Aeron Archive's default file I/O length).
pub(crate) const BLOCK_LEN: usize = 1 << 20;

/// The path of recording `id`'s segment starting at stream position `base`.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn path(dir: &Path, id: u32, base: i64) -> PathBuf {
    dir.join(format!("{id}-{base}.seg"))
}

/// Base position of the segment holding `position`.
pub(crate) fn base_of(position: i64, segment_length: u64) -> i64 {
    position & !(segment_length as i64 - 1)
}

/// The recording id and base position a segment file's name says, if it is one's.
pub(crate) fn parse_name(name: &str) -> Option<(u32, i64)> {
    let (id, base) = name.strip_suffix(".seg")?.split_once('-')?;
    Some((id.parse().ok()?, base.parse().ok()?))
}

/// The segment files of recording `id` in `dir`, as (base, path), sorted by base.
pub(crate) fn list(dir: &Path, id: u32) -> io::Result<Vec<(i64, PathBuf)>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        match name.to_str().and_then(parse_name) {
            Some((of, base)) if of == id => found.push((base, entry.path())),
            _ => {}
        }
    }
    found.sort();
    Ok(found)
}

/// Syncs the directory `dir` itself (`fsync` of the directory), so the names created in or
/// removed from it survive a power loss.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io("sync journal directory", dir, e))?;
    trace::note(|| "sync dir".into());
    Ok(())
}

/// An allocation failure that means "the disk is full" as a typed error.
pub(crate) fn space_error(path: &Path, needed: u64, e: io::Error) -> Error {
    if matches!(crate::sys::fs::cause(&e), Cause::NoSpace | Cause::TooLarge) {
        let dir = path.parent().unwrap_or(path);
        let available = crate::sys::fs::available_space(dir).unwrap_or(0);
        Error::InsufficientSpace { path: path.into(), needed, available }
    } else {
        Error::io("reserve space", path, e)
    }
}

/// What the journal did to its directory, in order, for the unit tests that check the order of
/// directory syncs (per thread; nothing outside tests).
pub(crate) mod trace {
    #[cfg(test)]
    thread_local! {
        static EVENTS: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    /// Notes an event (compiled away outside tests).
    #[inline(always)]
    pub(crate) fn note(event: impl FnOnce() -> String) {
        #[cfg(test)]
        EVENTS.with(|e| e.borrow_mut().push(event()));
        #[cfg(not(test))]
        let _ = event;
    }

    /// The events noted on this thread since the last call.
    #[cfg(test)]
    pub(crate) fn take() -> Vec<String> {
        EVENTS.with(|e| std::mem::take(&mut *e.borrow_mut()))
    }

    #[cfg(test)]
    thread_local! {
        static FAIL: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
    }

    /// Makes the next `what` on this thread fail (tests of errors the OS rarely gives).
    #[cfg(test)]
    pub(crate) fn fail_next(what: &'static str) {
        FAIL.with(|f| f.set(Some(what)));
    }

    /// `true` once, for the `what` a test asked to fail (always `false` outside tests).
    #[inline(always)]
    pub(crate) fn failing(what: &'static str) -> bool {
        #[cfg(test)]
        return FAIL.with(|f| f.get() == Some(what) && f.take().is_some());
        #[cfg(not(test))]
        {
            let _ = what;
            false
        }
    }
}

/// How a new segment file gets its space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Space {
    /// The file grows as it is written: a segment costs what it holds.
    Grow,
    /// The segment's whole length is reserved when it is created (`posix_fallocate`): a full
    /// disk shows there, and the file's blocks are contiguous where the file system can.
    Preallocate,
}

/// A segment open for writing.
#[derive(Debug)]
pub(crate) struct Segment {
    pub base: i64,
    pub file: File,
    pub path: PathBuf,
    /// The file's length as far as we know (it only grows while we write it).
    len: u64,
}

impl Segment {
    /// Creates the segment of recording `id` at `base` (its whole `length` reserved if `space`
    /// says so), or opens it if it exists (a resumed recording). `durable`: sync the directory
    /// after creating it.
    pub(crate) fn open(
        dir: &Path,
        id: u32,
        base: i64,
        length: u64,
        space: Space,
        durable: bool,
    ) -> Result<Self, Error> {
        let path = path(dir, id, base);
        let (file, created) = match create_new(&path, 0o600) {
            Ok(file) => (file, true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                (open_existing(&path, true).map_err(|e| Error::io("open segment", &path, e))?, false)
            }
            Err(e) => return Err(Error::io("create segment", &path, e)),
        };
        if space == Space::Preallocate {
            if let Err(e) = reserve(&file, length) {
                let error = space_error(&path, length, e);
                // A segment that could not be sized holds nothing: leave no stub behind.
                if created && file.metadata().map(|m| m.len() < length).unwrap_or(false) {
                    let _ = fs::remove_file(&path);
                }
                return Err(error);
            }
        }
        let len = file.metadata().map_err(|e| Error::io("inspect segment", &path, e))?.len();
        if created {
            trace::note(|| format!("create {id}-{base}.seg"));
            if durable {
                sync_dir(dir)?;
            }
        }
        Ok(Self { base, file, path, len })
    }

    /// Writes `bytes` at stream `position`. A full disk (or file size limit) is
    /// [`Error::InsufficientSpace`]; a write cut short leaves bytes past the recorded position,
    /// which nothing reads.
    pub(crate) fn write_at(&mut self, bytes: &[u8], position: i64) -> Result<(), Error> {
        let offset = (position - self.base) as u64;
        if trace::failing("write segment") {
            let e = io::Error::from_raw_os_error(libc::ENOSPC);
            return Err(space_error(&self.path, bytes.len() as u64, e));
        }
        self.file.write_all_at(bytes, offset).map_err(|e| space_error(&self.path, bytes.len() as u64, e))?;
        self.len = self.len.max(offset + bytes.len() as u64);
        Ok(())
    }

    /// Writes the padding header `pad` at stream `position`, for a padding frame that ends at
    /// `end`. Its body is not data and is not written: if the file ends before `end`, it is
    /// extended there (a hole), so that the file holds every position below the recorded one.
    pub(crate) fn write_padding(&mut self, pad: &[u8], position: i64, end: i64) -> Result<(), Error> {
        debug_assert!(position + pad.len() as i64 <= end);
        self.write_at(pad, position)?;
        let end = (end - self.base) as u64;
        if self.len < end {
            self.file.set_len(end).map_err(|e| space_error(&self.path, end - self.len, e))?;
            self.len = end;
        }
        Ok(())
    }

    /// Writes the segment's data to the disk itself and waits (`fdatasync`).
    pub(crate) fn sync(&self) -> Result<(), Error> {
        self.file.sync_data().map_err(|e| Error::io("sync segment", &self.path, e))
    }
}
