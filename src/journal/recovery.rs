//! Closing recordings whose recorder died: the recorder updated the recorded position only after
//! each write returned, so the bytes below it are whole frames in the page cache (a process's
//! death loses nothing the kernel accepted). After a reboot only the durable (fsynced) position
//! is trusted. The recording is cut back to its last complete message below that position,
//! anything written after it (a torn block) is zeroed, and segments begun after it are removed.
//! Frames of a checksummed recording must match their checksum to count as written.

use super::catalog::Catalog;
use super::record::{Recording, RecordingState, StopReason};
use super::segment;
use super::segment::BLOCK_LEN;
use super::segment_reader::SegmentReader;
use crate::error::Error;
use crate::layout::frame::HEADER_LEN;
use crate::region::MmapRegion;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// This boot of the machine, as a number (0 where the kernel does not say).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn boot_id() -> i64 {
    let Ok(text) = fs::read_to_string("/proc/sys/kernel/random/boot_id") else { return 0 };
    let hex: String = text.chars().filter(char::is_ascii_hexdigit).take(16).collect();
    u64::from_str_radix(&hex, 16).map_or(0, |v| v as i64)
}

/// Closes the interrupted recordings of `stream` at their last complete message, except the
/// latest, which is cut the same way and returned with its new stop position and its recorder
/// lock held (the caller resumes it, or stops it and releases the lock).
pub(crate) fn close_interrupted(
    catalog: &Catalog<MmapRegion>,
    dir: &Path,
    stream: &str,
) -> Result<Option<(Recording, i64)>, Error> {
    let mut latest = None;
    for recording in catalog.list().into_iter().flatten() {
        if recording.stream != stream || recording.state != RecordingState::Interrupted {
            continue;
        }
        if !catalog.take(recording.slot)? {
            continue; // its recorder is alive after all (or another recorder is recovering it)
        }
        // Not while an operator moves its start (whose walk reads what a cut zeroes); read
        // again under the locks, since the start may have moved since the list.
        let maintenance = catalog.maintain(recording.slot, true)?.ok_or(Error::Timeout)?;
        let recording = catalog.read(recording.slot)?.unwrap_or(recording);
        let stop = cut(dir, &recording, |stop| catalog.cut_back(recording.slot, stop))?;
        drop(maintenance);
        if let Some((older, older_stop)) = latest.replace((recording, stop)) {
            catalog.stop(older.slot, older_stop, StopReason::RecorderDied);
            catalog.release(older.slot);
        }
    }
    Ok(latest)
}

/// Where an interrupted recording ends: its last complete message at or below the position its
/// recorder finished writing (the durable one after a reboot). Calls `lower` with it (the
/// catalog lowers the record's positions and counts the cut, so replays following the
/// recording stop trusting what they read past it), then zeroes what lies past it.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn cut(dir: &Path, r: &Recording, lower: impl FnOnce(i64)) -> Result<i64, Error> {
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
    lower(stop);
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
            // A growing segment holds nothing past its length: zero only what it has (writing
            // zeroes past it would grow it for nothing).
            let len = file.metadata().map_err(|e| Error::io("inspect segment", &path, e))?.len() as i64;
            let end = end.min(base + len);
            let zeros = vec![0u8; (end - stop).max(0) as usize];
            file.write_all_at(&zeros, (stop - base) as u64)
                .map_err(|e| Error::io("zero torn tail", &path, e))?;
            file.sync_data().map_err(|e| Error::io("sync segment", &path, e))?;
        }
    }
    let later = segment::list(dir, r.id).map_err(|e| Error::io("list segments", dir, e))?;
    let mut removed = false;
    for (later_base, later_path) in later {
        if later_base > base {
            fs::remove_file(&later_path).map_err(|e| Error::io("remove segment", &later_path, e))?;
            segment::trace::note(|| format!("remove {}-{later_base}.seg", r.id));
            removed = true;
        }
    }
    if removed {
        // Or a power loss brings them back, with bytes after the cut (whatever the fsync policy:
        // recovery is rare and the sync cheap).
        segment::sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::record::Checksum;
    use crate::layout::frame::{HeaderRest, BEGIN_FLAG, END_FLAG, TYPE_DATA, UNFRAGMENTED};
    use crate::log::position::Terms;
    use crate::testing::TempDir;

    const T: usize = 1 << 16;

    fn recording(stop: i64) -> Recording {
        Recording {
            id: 3,
            stream: "s".into(),
            session_id: 5,
            stream_id: 6,
            term_length: T,
            mtu: 1024,
            initial_term_id: 0,
            segment_length: 1 << 20,
            start_position: 0,
            stop_position: stop,
            durable_position: 0,
            start_unix_ns: 0,
            stop_unix_ns: None,
            state: RecordingState::Interrupted,
            recorder_pid: 1,
            gap_before: 0,
            previous: None,
            checksum: Checksum::None,
            origin_position: 0,
            retention: crate::journal::Retention::none(),
            cut_from: None,
            boot_id: boot_id(),
            slot: 3,
            purged: 0,
        }
    }

    /// Appends a data frame of `len` bytes with `flags` at the end of `seg`.
    fn frame(seg: &mut Vec<u8>, len: usize, flags: u8) {
        let position = seg.len() as i64;
        let terms = Terms::new(T, 0);
        let rest = HeaderRest {
            flags,
            frame_type: TYPE_DATA,
            term_offset: terms.term_offset(position) as i32,
            session_id: 5,
            stream_id: 6,
            term_id: terms.term_id(position),
            ..Default::default()
        };
        let start = seg.len();
        seg.resize(start + crate::layout::align(len, 32), 0x77);
        seg[start..start + 4].copy_from_slice(&(len as i32).to_le_bytes());
        seg[start + 4..start + 32].copy_from_slice(&rest.encode());
    }

    #[test]
    fn an_interrupted_recording_is_cut_at_its_last_complete_message_and_its_tail_zeroed() {
        let dir = TempDir::new("recovery");
        let mut seg = Vec::new();
        frame(&mut seg, 100, UNFRAGMENTED);
        frame(&mut seg, 64, UNFRAGMENTED);
        let whole = seg.len() as i64;
        frame(&mut seg, 1024, BEGIN_FLAG);
        frame(&mut seg, 1024, 0);
        let recorded = seg.len() as i64; // the recorder wrote up to here, mid-message
        seg.extend_from_slice(&[0xEE; 200]); // and a write cut short after it
        let path = segment::path(dir.path(), 3, 0);
        fs::write(&path, &seg).unwrap();
        let r = recording(recorded);
        assert_eq!(cut(dir.path(), &r, |_| {}).unwrap(), whole);
        let after = fs::read(&path).unwrap();
        assert_eq!(&after[..whole as usize], &seg[..whole as usize]);
        assert!(
            after[whole as usize..].iter().all(|&b| b == 0),
            "the unfinished message and torn tail were left"
        );
    }

    #[test]
    fn a_message_whose_last_fragment_was_written_is_kept() {
        let dir = TempDir::new("recovery-whole");
        let mut seg = Vec::new();
        frame(&mut seg, 1024, BEGIN_FLAG);
        frame(&mut seg, 40, END_FLAG);
        fs::write(segment::path(dir.path(), 3, 0), &seg).unwrap();
        assert_eq!(cut(dir.path(), &recording(seg.len() as i64), |_| {}).unwrap(), seg.len() as i64);
    }

    #[test]
    fn a_damaged_frame_ends_the_recording_before_it_and_later_segments_go() {
        let dir = TempDir::new("recovery-damage");
        let mut seg = Vec::new();
        frame(&mut seg, 100, UNFRAGMENTED);
        let good = seg.len() as i64;
        frame(&mut seg, 100, UNFRAGMENTED);
        seg[good as usize + 12] ^= 1; // another session's frame
        frame(&mut seg, 100, UNFRAGMENTED);
        fs::write(segment::path(dir.path(), 3, 0), &seg).unwrap();
        fs::write(segment::path(dir.path(), 3, 1 << 20), [1u8; 64]).unwrap();
        let r = recording(seg.len() as i64);
        segment::trace::take();
        assert_eq!(cut(dir.path(), &r, |_| {}).unwrap(), good);
        assert!(!segment::path(dir.path(), 3, 1 << 20).exists(), "a segment begun after the cut was kept");
        // The removal is made durable (T4).
        assert_eq!(segment::trace::take(), ["remove 3-1048576.seg", "sync dir"]);
        // After a reboot only the durable position is trusted.
        let rebooted =
            Recording { boot_id: boot_id().wrapping_add(1), durable_position: 0, ..recording(good) };
        assert_eq!(cut(dir.path(), &rebooted, |_| {}).unwrap(), 0);
    }
}
