//! [`streams`]: what a stream directory holds and who uses it, read-only.

use super::list;
use crate::error::Error;
use crate::layout::slots as s;
use crate::log::{Counter, Gauge, Log};
use crate::region::ReadOnlyRegion;
use crate::stream::files::{inspect_log, inspect_slots};
use crate::stream::liveness::{log_mapped_by_readers, publisher_alive, slot_owner_alive};
use crate::stream::name;
use crate::stream::slots::Slots;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

/// One stream of a directory: its current log (if any) and its readers.
#[derive(Debug)]
#[non_exhaustive]
pub struct StreamInfo {
    /// The stream's name (the file name without `.log` / `.readers`).
    pub name: String,
    /// The current session's log, if the file exists and is valid.
    pub log: Option<LogInfo>,
    /// The reader-slot file, if it exists.
    pub readers_path: Option<PathBuf>,
    /// Number of slots in the reader-slot file (0 when there is none or it is invalid).
    pub slot_count: usize,
    /// Every claimed slot, in slot order.
    pub readers: Vec<ReaderInfo>,
    /// Files of this stream that could not be read or validated (foreign, corrupt, another
    /// layout version, permission denied). The rest of the report is still filled in.
    pub problems: Vec<Error>,
}

/// The log of a stream's current session, as its metadata says.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogInfo {
    /// The log file.
    pub path: PathBuf,
    /// Length of the file in bytes (three terms plus metadata, page-aligned).
    pub file_length: u64,
    /// The name stored in the metadata.
    pub name: String,
    /// Process id the publisher wrote when it created the log.
    pub publisher_pid: i32,
    /// `true` while a process holds the publisher's lock on the log.
    pub publisher_alive: bool,
    /// `true` while at least one reader maps the log (holds a reader lock on it).
    pub mapped_by_readers: bool,
    /// Random id of the session.
    pub session_id: i32,
    /// Id written in every frame header, derived from the name.
    pub stream_id: i32,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_ns: i64,
    /// Term length in bytes.
    pub term_length: usize,
    /// How far the publisher may run ahead of the slowest reader, in bytes.
    pub window: usize,
    /// Largest frame, header included, in bytes.
    pub mtu: usize,
    /// Page size the file length is rounded to.
    pub page_size: usize,
    /// The publisher's position: bytes appended since the session began.
    pub position: i64,
    /// The publisher's limit as of its last recomputation (0 before the first one).
    pub limit: i64,
    /// End-of-stream position, once the publisher has closed.
    pub eos_position: Option<i64>,
    /// Offers refused for back pressure or for want of a reader.
    pub back_pressure_events: i64,
    /// Term rotations so far (the active term count).
    pub rotations: i64,
    /// Times the publisher re-read the reader slots to move its limit.
    pub limit_recomputes: i64,
    /// Dead readers whose slots the publisher freed.
    pub readers_evicted: i64,
    /// Readers counted at the publisher's last limit recomputation.
    pub connected_readers: i64,
    /// Reader positions found past the publisher's own (impossible for an honest reader: a stray
    /// or forged word) and ignored by flow control.
    pub ignored_positions: i64,
    /// `true` for the log of a `ConcurrentPublication` (any number of writers).
    pub concurrent: bool,
    /// The writer slots of a concurrent log that were ever claimed (empty for an exclusive log).
    pub writers: Vec<WriterInfo>,
}

/// A writer slot of a concurrent log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriterInfo {
    /// Index of the slot.
    pub slot: usize,
    /// Process id its last owner wrote.
    pub pid: i64,
    /// `true` while a process holds the slot's lock.
    pub alive: bool,
    /// Where the writer is reserving or writing a frame (`None` between messages). On a dead
    /// writer: a hole that the next held-back writer or waiting reader pads.
    pub pending: Option<i64>,
}

/// What a claimed reader slot says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReaderState {
    /// Claimed, not reading any session (waiting for a publisher, or between sessions).
    Waiting,
    /// Reading a session; counted by that session's flow control.
    Active,
    /// A state word this version does not know (corrupt or foreign slot file).
    Unknown(i64),
}

impl fmt::Display for ReaderState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Waiting => f.write_str("waiting"),
            Self::Active => f.write_str("active"),
            Self::Unknown(v) => write!(f, "unknown({v})"),
        }
    }
}

/// One claimed reader slot.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReaderInfo {
    /// Slot index in the reader-slot file.
    pub slot: usize,
    /// Process id of the reader that claimed the slot.
    pub pid: i64,
    /// `true` while a process holds the slot's lock. A dead reader's slot stays claimed until a
    /// publisher frees it.
    pub alive: bool,
    /// What the slot says the reader does.
    pub state: ReaderState,
    /// The session it reads, when active.
    pub session_id: Option<i32>,
    /// Its position in that session.
    pub position: i64,
    /// Where it joined that session.
    pub join_position: i64,
    /// When it claimed the slot, nanoseconds since the Unix epoch.
    pub claimed_ns: i64,
    /// Bytes between the publisher's position and this reader's, when it reads the current
    /// session.
    pub lag: Option<i64>,
    /// `true` for the slowest live reader of the current session: the one whose position sets
    /// the publisher's limit.
    pub slowest: bool,
    /// `true` when this is the slowest reader and it is a whole window behind, so the publisher
    /// is back-pressured until it moves.
    pub holds_back: bool,
    /// `true` for an untethered reader (`SubscriptionBuilder::tethered(false)`): the publisher
    /// never waits for it, and it is never the slowest reader.
    pub untethered: bool,
    /// Times the publisher lapped this untethered reader, over the slot's life (each one loss
    /// report). Kept in the slot, so tools see it.
    pub losses: i64,
    /// Stream bytes those losses skipped.
    pub lost_bytes: i64,
}

/// Lists the streams in `dir` with their publisher, counters and readers. Read-only.
///
/// Fails only when the directory itself cannot be read; a file that cannot be read or validated
/// is reported in [`StreamInfo::problems`]. Streams come sorted by name.
pub fn streams(dir: impl AsRef<Path>) -> Result<Vec<StreamInfo>, Error> {
    let dir = dir.as_ref();
    let listing = list(dir)?;
    Ok(listing.stream_names().into_iter().map(|name| inspect_stream(dir, name)).collect())
}

fn inspect_stream(dir: &Path, name: String) -> StreamInfo {
    let mut info = StreamInfo {
        log: None,
        readers_path: None,
        slot_count: 0,
        readers: Vec::new(),
        problems: Vec::new(),
        name,
    };
    let log_path = name::log_path(dir, &info.name);
    let mut current = None;
    match inspect_log(&log_path, false) {
        Ok(Some((file, log))) => match log_info(&log_path, &file, &log) {
            Ok(l) => {
                current = Some((l.session_id, l.position, l.window as i64));
                info.log = Some(l);
            }
            Err(e) => info.problems.push(e),
        },
        Ok(None) => {}
        Err(e) => info.problems.push(e),
    }
    let readers_path = name::readers_path(dir, &info.name);
    match inspect_slots(&readers_path, false) {
        Ok(Some((file, slots))) => {
            info.slot_count = slots.count();
            info.readers = reader_infos(&file, &slots, current);
            info.readers_path = Some(readers_path);
        }
        Ok(None) => {}
        Err(e) => {
            info.readers_path = Some(readers_path);
            info.problems.push(e);
        }
    }
    info
}

fn log_info(path: &Path, file: &File, log: &Log<ReadOnlyRegion>) -> Result<LogInfo, Error> {
    let g = log.geometry();
    let position = log.producer_position().map_err(|e| e.at(path))?;
    let eos = log.eos_position();
    Ok(LogInfo {
        path: path.to_path_buf(),
        file_length: g.file_length() as u64,
        name: log.name(),
        publisher_pid: log.publisher_pid(),
        publisher_alive: publisher_alive(file),
        mapped_by_readers: log_mapped_by_readers(file),
        session_id: log.session_id(),
        stream_id: log.stream_id(),
        created_ns: log.created_ns(),
        term_length: g.term_length,
        window: g.window,
        mtu: g.mtu,
        page_size: g.page_size,
        position,
        limit: log.gauge(Gauge::PublisherLimit),
        eos_position: (eos != i64::MAX).then_some(eos),
        back_pressure_events: log.counter(Counter::BackPressureEvents),
        rotations: i64::from(log.active_term_count()),
        limit_recomputes: log.counter(Counter::LimitRecomputes),
        readers_evicted: log.counter(Counter::ReadersEvicted),
        connected_readers: log.gauge(Gauge::ConnectedReaders),
        ignored_positions: log.counter(Counter::IgnoredPositions),
        concurrent: log.is_concurrent(),
        writers: (0..log.writers_high_water())
            .map(|slot| WriterInfo {
                slot,
                pid: log.writer_pid(slot),
                alive: crate::stream::liveness::writer_alive(file, slot),
                pending: Some(log.writer_pending(slot)).filter(|&p| p != crate::layout::log_meta::NO_PENDING),
            })
            .collect(),
    })
}

/// Claimed slots, with lag and the slowest reader of `current = (session, position, window)`.
fn reader_infos(
    file: &File,
    slots: &Slots<ReadOnlyRegion>,
    current: Option<(i32, i64, i64)>,
) -> Vec<ReaderInfo> {
    let mut out: Vec<ReaderInfo> = Vec::new();
    for i in 0..slots.high_water() {
        let v = slots.view(i);
        let state = match v.state {
            s::STATE_FREE => continue,
            s::STATE_WAITING => ReaderState::Waiting,
            s::STATE_ACTIVE => ReaderState::Active,
            other => ReaderState::Unknown(other),
        };
        let session_id = (state == ReaderState::Active).then_some(v.session_id);
        let lag = match current {
            // Saturating: both words come from shared memory (a forged one must not panic a
            // debug build).
            Some((session, producer, _)) if session_id == Some(session) => {
                Some(producer.saturating_sub(v.position))
            }
            _ => None,
        };
        out.push(ReaderInfo {
            slot: i,
            pid: v.pid,
            alive: slot_owner_alive(file, i),
            state,
            session_id,
            position: v.position,
            join_position: v.join_position,
            claimed_ns: v.claimed_ns,
            lag,
            slowest: false,
            holds_back: false,
            untethered: v.untethered,
            losses: v.losses,
            lost_bytes: v.lost_bytes,
        });
    }
    if let Some((_, _, window)) = current {
        let slowest = out
            .iter_mut()
            .filter(|r| r.alive && !r.untethered && r.lag.is_some())
            .min_by_key(|r| (r.position, r.slot));
        if let Some(r) = slowest {
            r.slowest = true;
            r.holds_back = r.lag.is_some_and(|lag| lag >= window);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::inspect::tests::publication;
    use crate::testing::TempDir;
    use crate::Subscription;
    use std::fs;

    #[test]
    fn streams_reports_publisher_readers_and_lag() {
        let dir = TempDir::new("inspect");
        let mut publication = publication(dir.path(), "s");
        let mut fast = Subscription::builder("s").dir(dir.path()).open().unwrap();
        let slow = Subscription::builder("s").dir(dir.path()).open().unwrap();
        assert!(publication.is_connected());
        for _ in 0..100 {
            publication.offer(&[7u8; 100]).unwrap();
        }
        while fast.poll(|_: &[u8], _: &crate::Header| {}, 1000) > 0 {}
        let list = streams(dir.path()).unwrap();
        assert_eq!(list.len(), 1);
        let st = &list[0];
        assert_eq!(st.name, "s");
        assert!(st.problems.is_empty(), "{:?}", st.problems);
        let log = st.log.as_ref().unwrap();
        assert_eq!(log.position, publication.position());
        assert_eq!(log.publisher_pid, std::process::id() as i32);
        assert!(log.publisher_alive && log.mapped_by_readers);
        assert_eq!(log.session_id, publication.session_id());
        assert_eq!((log.term_length, log.window), (64 * 1024, 32 * 1024));
        assert_eq!(log.eos_position, None);
        assert_eq!(st.readers.len(), 2);
        let r_fast = &st.readers[0];
        let r_slow = &st.readers[1];
        assert_eq!((r_fast.lag, r_slow.lag), (Some(0), Some(publication.position())));
        assert!(r_fast.alive && r_slow.alive);
        assert_eq!(r_fast.state, ReaderState::Active);
        assert!(r_slow.slowest && !r_fast.slowest);
        assert!(!r_slow.holds_back, "16 KB behind, window 32 KiB");
        assert_eq!(slow.position(), 0);

        drop(publication);
        let st = streams(dir.path()).unwrap().pop().unwrap();
        // The log is removed on close; the readers remain.
        assert!(st.log.is_none());
        assert_eq!(st.readers.len(), 2);
        assert!(st.readers.iter().all(|r| r.lag.is_none() && !r.slowest));
    }

    /// The review's N7 d: a slot's position word is whatever a process wrote there, and the lag
    /// was `producer - position`, which a forged word overflowed (a panic in debug builds,
    /// where this test runs with `cargo test`).
    #[test]
    fn a_forged_position_word_does_not_overflow_the_lag() {
        use std::os::unix::fs::FileExt;
        let dir = TempDir::new("inspect");
        let mut publication = publication(dir.path(), "s");
        let _sub = Subscription::builder("s").dir(dir.path()).open().unwrap();
        assert!(publication.is_connected());
        publication.offer(&[1u8; 100]).unwrap();
        let slots = fs::OpenOptions::new().write(true).open(dir.path().join("s.readers")).unwrap();
        let word = (crate::layout::slots::slot_offset(0) + s::POSITION) as u64;
        slots.write_at(&i64::MIN.to_le_bytes(), word).unwrap();
        let st = streams(dir.path()).unwrap().pop().unwrap();
        assert_eq!(st.readers[0].position, i64::MIN);
        assert_eq!(st.readers[0].lag, Some(i64::MAX), "saturated, not wrapped or a panic");
        assert!(st.readers[0].holds_back);
    }

    #[test]
    fn holds_back_is_flagged_when_a_window_behind() {
        let dir = TempDir::new("inspect");
        let mut publication = publication(dir.path(), "s");
        let _sub = Subscription::builder("s").dir(dir.path()).open().unwrap();
        assert!(publication.is_connected());
        while publication.offer(&[1u8; 1000]).is_ok() {}
        let st = streams(dir.path()).unwrap().pop().unwrap();
        assert!(st.log.as_ref().unwrap().back_pressure_events >= 1);
        assert!(st.readers[0].holds_back && st.readers[0].slowest);
    }
}
