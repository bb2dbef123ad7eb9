//! Closing recordings whose recorder died: the recorder updated the recorded position only after
//! each write returned, so the bytes below it are whole frames in the page cache (a process's
//! death loses nothing the kernel accepted). After a reboot only the durable (fsynced) position
//! is trusted. The recording is cut back to its last complete message below that position,
//! anything written after it (a torn block) is zeroed, and segments begun after it are removed.

use super::catalog::Catalog;
use super::record::{Recording, RecordingState, StopReason};
use super::recorder::BLOCK_LEN;
use super::segment;
use super::segment_reader::SegmentReader;
use crate::error::Error;
use crate::layout::frame::HEADER_LEN;
use crate::region::MmapRegion;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// This boot of the machine, as a number (0 where the kernel does not say).
pub fn boot_id() -> i64 {
    let Ok(text) = fs::read_to_string("/proc/sys/kernel/random/boot_id") else { return 0 };
    let hex: String = text.chars().filter(char::is_ascii_hexdigit).take(16).collect();
    u64::from_str_radix(&hex, 16).map_or(0, |v| v as i64)
}

/// Closes the interrupted recordings of `stream` at their last complete message, except the
/// latest, which is cut the same way and returned with its new stop position and its recorder
/// lock held (the caller resumes it, or stops it and releases the lock).
pub fn close_interrupted(
    catalog: &Catalog<MmapRegion>,
    dir: &Path,
    stream: &str,
) -> Result<Option<(Recording, i64)>, Error> {
    let mut latest = None;
    for recording in catalog.list().into_iter().flatten() {
        if recording.stream != stream || recording.state != RecordingState::Interrupted {
            continue;
        }
        if !catalog.take(recording.id)? {
            continue; // its recorder is alive after all (or another recorder is recovering it)
        }
        let stop = cut(dir, &recording)?;
        if let Some((older, older_stop)) = latest.replace((recording, stop)) {
            let older: Recording = older;
            catalog.stop(older.id, older_stop, StopReason::RecorderDied);
            catalog.release(older.id);
        }
    }
    Ok(latest)
}

/// Where an interrupted recording ends: its last complete message at or below the position its
/// recorder finished writing (the durable one after a reboot). Zeroes what lies past it.
pub fn cut(dir: &Path, r: &Recording) -> Result<i64, Error> {
    let trusted = if r.boot_id == boot_id() { r.stop_position } else { r.durable_position };
    let mut reader = SegmentReader::new(dir, r);
    let walk_start = reader.terms().term_begin(trusted).max(r.start_position);
    // Walk the frames of the last term up to `trusted`; a frame that fails validation ends the
    // walk too (the recording is closed before it).
    let mut stop = walk_start;
    let mut at = walk_start;
    while at < trusted {
        match reader.frame(at, trusted) {
            Ok(frame) => {
                at += frame.aligned as i64;
                if frame.ends_message() {
                    stop = at;
                }
            }
            Err(Error::CorruptRecording { .. }) => break,
            Err(e) => return Err(e),
        }
    }
    drop(reader);
    scrub(dir, r, stop, trusted)?;
    Ok(stop)
}

/// Zeroes `stop ..` as far as the last write could have reached past `trusted`, and removes the
/// segment files after `stop`'s.
fn scrub(dir: &Path, r: &Recording, stop: i64, trusted: i64) -> Result<(), Error> {
    let base = segment::base_of(stop, r.segment_length);
    let segment_end = base + r.segment_length as i64;
    // One block and the padding header before it may have been in flight.
    let reach = trusted + (BLOCK_LEN.max(r.mtu) + HEADER_LEN) as i64;
    let end = reach.min(segment_end);
    let path = segment::path(dir, r.id, base);
    if end > stop {
        if let Ok(file) = crate::sys::fs::open_existing(&path, true) {
            let zeros = vec![0u8; (end - stop) as usize];
            file.write_all_at(&zeros, (stop - base) as u64)
                .map_err(|e| Error::io("zero torn tail", &path, e))?;
            file.sync_data().map_err(|e| Error::io("sync segment", &path, e))?;
        }
    }
    let later = segment::list(dir, r.id).map_err(|e| Error::io("list segments", dir, e))?;
    for (later_base, later_path) in later {
        if later_base > base {
            fs::remove_file(&later_path).map_err(|e| Error::io("remove segment", &later_path, e))?;
        }
    }
    Ok(())
}
