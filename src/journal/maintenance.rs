//! Operations on recordings while they are recorded and replayed: purge, detach and attach
//! whole segments, delete detached segments, truncate a stopped recording, delete a recording;
//! and the sweep that finishes whichever of them a crash interrupted.
//!
//! The order is what makes them crash-safe and safe for readers (`docs/journal.md`, "Retention"):
//! the catalog record changes first and is synced (`msync`), then segment files are removed and
//! the directory synced. A record never claims what a file no longer holds, so a kill at any
//! point leaves a journal that opens and replays what it claims; files a record no longer claims
//! (below its purged base, past a stopped recording's end, of a recording being deleted) are
//! removed by the next [`sweep`]: the operation finishes. A replay that already opened a file
//! keeps reading it (an unlinked file lives while it is open); one that finds a file missing
//! loads the start position and reports [`Error::PositionNotAvailable`].
//!
//! Every operation on one recording holds its record's maintenance lock; truncation and deletion
//! also its recorder lock (no recorder may extend what they cut).

use super::catalog::Catalog;
use super::record::Recording;
use super::segment::{self, base_of};
use super::segment_reader::SegmentReader;
use crate::error::Error;
use crate::layout::frame::BEGIN_FLAG;
use crate::region::MmapRegion;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::Path;

/// What an operation did to a recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The recording's start position after it.
    pub start: i64,
    /// Segment files removed.
    pub files_removed: usize,
    /// Bytes those files held on disk.
    pub bytes_removed: u64,
}

/// Opens the catalog of `journal` read-write, finishing any operation a crash interrupted.
pub(crate) fn open(journal: &Path) -> Result<Catalog<MmapRegion>, Error> {
    if !journal.join(super::catalog::FILE_NAME).exists() {
        // Never create a journal for an operation on one.
        return Err(Error::io(
            "open catalog",
            journal.join(super::catalog::FILE_NAME),
            io::ErrorKind::NotFound.into(),
        ));
    }
    let catalog = Catalog::open_or_create(journal, super::catalog::DEFAULT_CAPACITY)?;
    sweep(&catalog)?;
    Ok(catalog)
}

/// The recording `id`, read under its maintenance lock (which the caller keeps).
fn locked(
    catalog: &Catalog<MmapRegion>,
    id: u32,
) -> Result<(Recording, super::catalog::Maintenance<'_>), Error> {
    let slot = catalog.find(id).ok_or(Error::NoSuchRecording { id })?;
    let lock = catalog.maintain(slot, true)?.ok_or(Error::Timeout)?;
    match catalog.read(slot)? {
        Some(r) if r.id == id => Ok((r, lock)),
        _ => Err(Error::NoSuchRecording { id }),
    }
}

/// The first position at or after `from` (a segment base, or the recording's origin) where a
/// message starts, below the recording's stop position; the stop position if none does.
fn first_message_start(dir: &Path, r: &Recording, from: i64) -> Result<i64, Error> {
    let mut reader = SegmentReader::new(dir, r);
    let mut at = from.max(r.origin_position);
    while at < r.stop_position {
        let frame = reader.frame(at, r.stop_position)?;
        if !frame.is_padding() && frame.rest.flags & BEGIN_FLAG != 0 {
            return Ok(at);
        }
        at += frame.aligned as i64;
    }
    Ok(r.stop_position)
}

/// Removes recording `r`'s segment files with bases in `from .. to` (those that exist) and syncs
/// the directory if any went.
fn remove_range(dir: &Path, r: &Recording, from: i64, to: i64) -> Result<(usize, u64), Error> {
    let mut removed = (0, 0);
    let from = base_of(from.max(0), r.segment_length);
    if (to - from) / r.segment_length as i64 > 1024 {
        // Many segments (or a catalog that says so): the files there are, not every name.
        for (base, path) in segment::list(dir, r.id).map_err(|e| Error::io("list segments", dir, e))? {
            if (from..to).contains(&base) {
                removed = add(removed, remove(&path)?);
            }
        }
    } else {
        let mut base = from;
        while base < to {
            removed = add(removed, remove(&segment::path(dir, r.id, base))?);
            base += r.segment_length as i64;
        }
    }
    if removed.0 > 0 {
        segment::sync_dir(dir)?;
    }
    Ok(removed)
}

fn add(a: (usize, u64), b: Option<u64>) -> (usize, u64) {
    b.map_or(a, |bytes| (a.0 + 1, a.1 + bytes))
}

/// Removes one file; `None` if it was not there, else the bytes it held on disk.
fn remove(path: &Path) -> Result<Option<u64>, Error> {
    use std::os::unix::fs::MetadataExt;
    let bytes = match fs::symlink_metadata(path) {
        Ok(m) => m.blocks() * 512,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("inspect segment", path, e)),
    };
    match fs::remove_file(path) {
        Ok(()) => {
            segment::trace::note(|| {
                format!("remove {}", path.file_name().unwrap_or_default().to_string_lossy())
            });
            Ok(Some(bytes))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("remove segment", path, e)),
    }
}

/// Moves the start of recording `r` (read under its maintenance lock) up to the first message
/// start at or after the segment base `keep_from` (at most the base of the segment holding its
/// stop position); with `delete`, removes its segment files below that base, else detaches them.
pub(crate) fn move_start_up(
    catalog: &Catalog<MmapRegion>,
    r: &Recording,
    keep_from: i64,
    delete: bool,
) -> Result<Outcome, Error> {
    let dir = catalog.dir();
    let keep_from = base_of(keep_from, r.segment_length).min(base_of(r.stop_position, r.segment_length));
    let mut outcome = Outcome { start: r.start_position, ..Outcome::default() };
    if keep_from <= base_of(r.start_position, r.segment_length) {
        return Ok(outcome); // nothing below it to let go
    }
    let start = first_message_start(dir, r, keep_from)?;
    let purged = if delete { keep_from } else { r.purged };
    let removed = catalog.move_start(r.slot, start, purged, || -> Result<_, Error> {
        // The record first, on the disk itself: a crash from here on leaves files the record
        // no longer claims, which the next sweep removes.
        catalog.sync(r.slot)?;
        if delete {
            remove_range(dir, r, r.purged, keep_from)
        } else {
            Ok((0, 0))
        }
    })?;
    outcome.start = start;
    (outcome.files_removed, outcome.bytes_removed) = removed;
    Ok(outcome)
}

/// Purges recording `id` of `journal` below `position`: every segment wholly below the one
/// holding `position` (at most the one holding the stop position) is removed, and the recording
/// starts at the first message start of what is kept. Its start position before and after.
pub fn purge(journal: impl AsRef<Path>, id: u32, position: i64) -> Result<Outcome, Error> {
    let catalog = open(journal.as_ref())?;
    let (r, _lock) = locked(&catalog, id)?;
    move_start_up(&catalog, &r, position, true)
}

/// Detaches recording `id`'s segments wholly below the one holding `position`: the recording
/// starts after them, but their files stay (until [`delete_detached`], or [`attach`] takes them
/// back).
pub fn detach(journal: impl AsRef<Path>, id: u32, position: i64) -> Result<Outcome, Error> {
    let catalog = open(journal.as_ref())?;
    let (r, _lock) = locked(&catalog, id)?;
    move_start_up(&catalog, &r, position, false)
}

/// Removes recording `id`'s detached segment files.
pub fn delete_detached(journal: impl AsRef<Path>, id: u32) -> Result<Outcome, Error> {
    let catalog = open(journal.as_ref())?;
    let (r, _lock) = locked(&catalog, id)?;
    let keep_from = base_of(r.start_position, r.segment_length);
    let removed = catalog.move_start(r.slot, r.start_position, keep_from, || -> Result<_, Error> {
        catalog.sync(r.slot)?;
        remove_range(catalog.dir(), &r, r.purged, keep_from)
    })?;
    Ok(Outcome { start: r.start_position, files_removed: removed.0, bytes_removed: removed.1 })
}

/// Attaches recording `id`'s detached segments back: the longest run of segment files still
/// there just below its start (and not purged); the recording then starts at the first message
/// start in them.
pub fn attach(journal: impl AsRef<Path>, id: u32) -> Result<Outcome, Error> {
    let catalog = open(journal.as_ref())?;
    let (r, _lock) = locked(&catalog, id)?;
    let dir = catalog.dir();
    let length = r.segment_length as i64;
    let lowest = r.purged.max(base_of(r.origin_position, r.segment_length));
    let mut from = base_of(r.start_position, r.segment_length);
    while from - length >= lowest && segment::path(dir, r.id, from - length).exists() {
        from -= length;
    }
    let outcome = Outcome { start: r.start_position, ..Outcome::default() };
    if from == base_of(r.start_position, r.segment_length) {
        return Ok(outcome);
    }
    let start = first_message_start(dir, &r, from)?.min(r.start_position);
    catalog.move_start(r.slot, start, r.purged, || catalog.sync(r.slot))?;
    Ok(Outcome { start, ..outcome })
}

/// Truncates stopped recording `id` at `position`, where a message starts (its start position
/// at the lowest): what lies after is removed, and the recording stops there. A replay
/// following it is cut back as after a recovery (it reads again what the recording holds now).
pub fn truncate(journal: impl AsRef<Path>, id: u32, position: i64) -> Result<Outcome, Error> {
    let catalog = open(journal.as_ref())?;
    let (r, _lock) = locked(&catalog, id)?;
    if !r.is_stopped() {
        return Err(Error::InvalidConfig(
            "only a stopped recording can be truncated (stop its recorder first, or let it close the recording)",
        ));
    }
    let outcome = Outcome { start: r.start_position, ..Outcome::default() };
    if position == r.stop_position {
        return Ok(outcome);
    }
    let dir = catalog.dir();
    let mut reader = SegmentReader::new(dir, &r);
    let (exact, nearest) = if (r.start_position..r.stop_position).contains(&position) {
        let walk_start = reader.terms().term_begin(position).max(r.start_position);
        reader.message_start(walk_start, position, r.stop_position)?
    } else {
        (false, position.clamp(r.start_position, r.stop_position))
    };
    if !exact {
        return Err(Error::PositionNotAvailable {
            requested: position,
            oldest: r.start_position,
            newest: r.stop_position,
            nearest,
        });
    }
    if !catalog.take(r.slot)? {
        return Err(Error::InvalidConfig("a recorder holds the recording"));
    }
    let result = (|| {
        // The old stop kept first (a persistent subscription that had not read so far reports
        // the rest lost), then the positions lowered (and a cut counted: replays following it
        // look again), synced before any byte goes.
        catalog.truncate(r.slot, r.stop_position, position);
        catalog.sync(r.slot)?;
        let base = base_of(position, r.segment_length);
        let mut removed = (0, 0);
        let path = segment::path(dir, r.id, base);
        if position == base {
            removed = add(removed, remove(&path)?);
        } else if let Ok(file) = crate::sys::fs::open_existing(&path, true) {
            file.set_len((position - base) as u64).map_err(|e| Error::io("truncate segment", &path, e))?;
            file.sync_data().map_err(|e| Error::io("sync segment", &path, e))?;
        }
        let later = remove_range(dir, &r, base + r.segment_length as i64, r.stop_position)?;
        removed = (removed.0 + later.0, removed.1 + later.1);
        if removed.0 > 0 && later.0 == 0 {
            segment::sync_dir(dir)?;
        }
        Ok(Outcome { files_removed: removed.0, bytes_removed: removed.1, ..outcome })
    })();
    catalog.release(r.slot);
    result
}

/// Deletes recording `id`: its files, then its catalog record, which a later recording reuses.
/// Refused while a recorder extends it.
pub fn delete(journal: impl AsRef<Path>, id: u32) -> Result<Outcome, Error> {
    let catalog = open(journal.as_ref())?;
    let (r, _lock) = locked(&catalog, id)?;
    delete_locked(&catalog, &r)
}

/// Deletes recording `r`, whose maintenance lock the caller holds.
pub(crate) fn delete_locked(catalog: &Catalog<MmapRegion>, r: &Recording) -> Result<Outcome, Error> {
    if !catalog.take(r.slot)? {
        return Err(Error::InvalidConfig("a recorder holds the recording: stop it first"));
    }
    let result = finish_delete(catalog, r.slot, r.id);
    catalog.release(r.slot);
    result
}

/// Marks record `slot` (recording `id`) as being deleted, synced; removes every segment file of
/// the recording and syncs the directory; then frees the record, synced.
fn finish_delete(catalog: &Catalog<MmapRegion>, slot: u32, id: u32) -> Result<Outcome, Error> {
    let dir = catalog.dir();
    catalog.retire(slot);
    catalog.sync(slot)?;
    let mut removed = (0, 0);
    for (_, path) in segment::list(dir, id).map_err(|e| Error::io("list segments", dir, e))? {
        removed = add(removed, remove(&path)?);
    }
    if removed.0 > 0 {
        segment::sync_dir(dir)?;
    }
    catalog.free(slot);
    catalog.sync(slot)?;
    Ok(Outcome { start: 0, files_removed: removed.0, bytes_removed: removed.1 })
}

/// Finishes what a crash interrupted, for every record no one else is working on: deletions
/// (records marked deleting), purges (files below a purged base) and truncations (files past a
/// stopped recording's end). Returns the files removed.
pub(crate) fn sweep(catalog: &Catalog<MmapRegion>) -> Result<usize, Error> {
    let dir = catalog.dir();
    let mut files: HashMap<u32, Vec<(i64, std::path::PathBuf)>> = HashMap::new();
    for entry in fs::read_dir(dir).map_err(|e| Error::io("list journal", dir, e))? {
        let entry = entry.map_err(|e| Error::io("list journal", dir, e))?;
        let name = entry.file_name();
        let Some((id, base)) = name.to_str().and_then(segment::parse_name) else { continue };
        files.entry(id).or_default().push((base, entry.path()));
    }
    let mut removed = 0;
    for slot in catalog.deleting() {
        let Some(_lock) = catalog.maintain(slot, false)? else { continue };
        if catalog.take(slot)? {
            let result =
                finish_delete(catalog, slot, catalog.id_in(slot)).map(|o| removed += o.files_removed);
            catalog.release(slot);
            result?;
        }
    }
    let mut gone = false;
    for r in catalog.list().into_iter().flatten() {
        let Some(segments) = files.get(&r.id) else { continue };
        // A stopped recording never grows again: a segment from its stop on holds nothing.
        if !segments.iter().any(|&(base, _)| base < r.purged || r.is_stopped() && base >= r.stop_position) {
            continue;
        }
        let Some(_lock) = catalog.maintain(r.slot, false)? else { continue };
        let Some(r) = catalog.read(r.slot)?.filter(|now| now.id == r.id) else { continue };
        for (base, path) in segments {
            let past_end = r.is_stopped() && *base >= r.stop_position;
            if (*base < r.purged || past_end) && remove(path)?.is_some() {
                removed += 1;
                gone = true;
            }
        }
    }
    if gone {
        segment::sync_dir(dir)?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::publication::Publication;
    use crate::journal::{Recorder, Replay};
    use crate::testing::TempDir;

    /// Records 6 000 messages of 100 bytes (about ten 64 KiB segments), stopped; its id.
    fn recorded(shm: &Path, journal: &Path) -> u32 {
        let mut recorder =
            Recorder::builder("ops", journal).stream_dir(shm).segment_length(1 << 16).start().unwrap();
        let mut p = Publication::builder("ops").dir(shm).term_length(1 << 16).create().unwrap();
        while !p.is_connected() {
            recorder.poll().unwrap();
        }
        for i in 0..6_000u32 {
            while let Err(e) = p.offer(&[i as u8; 100]) {
                assert!(e.is_retryable(), "{e}");
                recorder.poll().unwrap();
            }
        }
        while recorder.recorded_position() < p.position() {
            recorder.poll().unwrap();
        }
        let id = recorder.recording_id().unwrap();
        recorder.stop().unwrap();
        id
    }

    /// Where each message a replay of recording `id` from its start delivers ends, all of them
    /// checked to be what was offered.
    fn replayed(journal: &Path, id: u32) -> Vec<i64> {
        let mut replay = Replay::builder(journal, id).open().unwrap();
        let mut ends = Vec::new();
        while !replay.is_done() {
            replay
                .poll(
                    |m: &[u8], h: &crate::Header| {
                        assert!(m.len() == 100 && m.iter().all(|&b| b == m[0]));
                        ends.push(h.position());
                    },
                    1000,
                )
                .unwrap();
        }
        ends
    }

    fn bases(journal: &Path, id: u32) -> Vec<i64> {
        segment::list(journal, id).unwrap().into_iter().map(|(b, _)| b).collect()
    }

    /// The crash rows of a purge: killed after the record moved (synced) and before the files
    /// went, the journal replays what the record claims, and the next open removes them.
    #[test]
    fn a_purge_cut_short_after_its_record_moved_is_finished_by_the_next_open() {
        let (shm, dir) = (TempDir::new("purge-crash-shm"), TempDir::new("purge-crash"));
        let id = recorded(shm.path(), dir.path());
        let (all, ends) = (bases(dir.path(), id), replayed(dir.path(), id));
        let catalog = Catalog::open_or_create(dir.path(), 16).unwrap();
        let r = catalog.get(id).unwrap();
        let keep_from = 3 << 16;
        let start = first_message_start(dir.path(), &r, keep_from).unwrap();
        let kept: Vec<i64> = ends.iter().copied().filter(|&end| end > start).collect();
        // What a purge killed between its record's sync and its first unlink leaves.
        catalog.move_start(r.slot, start, keep_from, || catalog.sync(r.slot)).unwrap();
        drop(catalog);
        assert_eq!(bases(dir.path(), id), all, "nothing removed yet");
        assert_eq!(replayed(dir.path(), id), kept, "what the record claims");
        let removed = sweep(&open(dir.path()).unwrap()).unwrap();
        assert_eq!(removed, 0, "the open swept already");
        assert_eq!(bases(dir.path(), id), all[3..]);
        assert_eq!(replayed(dir.path(), id), kept);
    }

    /// The crash rows of a deletion: killed after the record was marked deleting, with some
    /// files gone, the recording is gone for readers, and the next open finishes: files removed,
    /// record freed.
    #[test]
    fn a_deletion_cut_short_is_finished_by_the_next_open() {
        let (shm, dir) = (TempDir::new("delete-crash-shm"), TempDir::new("delete-crash"));
        let id = recorded(shm.path(), dir.path());
        let catalog = Catalog::open_or_create(dir.path(), 16).unwrap();
        let slot = catalog.find(id).unwrap();
        catalog.retire(slot);
        catalog.sync(slot).unwrap();
        fs::remove_file(segment::path(dir.path(), id, 1 << 16)).unwrap();
        drop(catalog);
        assert!(matches!(crate::journal::recording(dir.path(), id), Err(Error::NoSuchRecording { .. })));
        assert!(matches!(Replay::builder(dir.path(), id).open(), Err(Error::NoSuchRecording { .. })));
        let catalog = open(dir.path()).unwrap();
        assert!(bases(dir.path(), id).is_empty());
        assert_eq!(catalog.deleting(), [] as [u32; 0]);
        assert_eq!(catalog.list().len(), 0, "the record is free");
    }

    /// The crash rows of a truncation: killed after the record was cut back (synced) and before
    /// the files past it went, the recording replays to its new stop, and the next open removes
    /// the segments past it.
    #[test]
    fn a_truncation_cut_short_is_finished_by_the_next_open() {
        let (shm, dir) = (TempDir::new("truncate-crash-shm"), TempDir::new("truncate-crash"));
        let id = recorded(shm.path(), dir.path());
        let (all, ends) = (bases(dir.path(), id), replayed(dir.path(), id));
        let catalog = Catalog::open_or_create(dir.path(), 16).unwrap();
        let slot = catalog.find(id).unwrap();
        let at = ends[999]; // a message start in the third segment
        assert_eq!(at >> 16, 2);
        catalog.cut_back(slot, at);
        catalog.sync(slot).unwrap();
        drop(catalog);
        assert_eq!(bases(dir.path(), id), all);
        assert_eq!(replayed(dir.path(), id), ends[..1000]);
        open(dir.path()).unwrap();
        assert_eq!(bases(dir.path(), id), all[..3]);
        assert_eq!(replayed(dir.path(), id), ends[..1000]);
    }
}
