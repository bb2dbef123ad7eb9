//! Writing recordings: whole committed blocks of a session's frames into segment files, each
//! frame sealed with its checksum, padding written back where the reader passed over it, and the
//! catalog's record of the recording kept up to date (recorded and durable positions, stop).
//!
//! The recorder (`journal::recorder`) owns the subscription and decides when a recording begins
//! and ends; this writes what it is handed. Kept apart so that a block lent by the subscription
//! and the writer's own state are borrowed separately.

use super::catalog::Catalog;
use super::frames::{self, Expect};
use super::policy::Retention;
use super::record::{Checksum, Fields, Recording, StopReason};
use super::segment::{self, Segment, Space};
use crate::error::Error;
use crate::layout::frame::{FRAME_ALIGNMENT, HEADER_LEN};
use crate::log::position::Terms;
use crate::region::MmapRegion;
use crate::sys::clock::now_ns;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Bytes of a block copied, sealed (checksums stored) and written at a time: small enough to
/// stay in the L2 cache from the copy through the checksums to the `pwrite`.
const SEAL_CHUNK: usize = 256 << 10;

/// When recorded bytes are forced from the page cache to the disk.
///
/// Every policy survives the recorder's own crash (kill -9 included): what was written is in the
/// page cache, and the next recorder closes the recording at its last complete message. Only the
/// policy decides what survives a power loss or kernel crash: the recording up to its
/// [`Recording::durable_position`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fsync {
    /// Never: the page cache writes back when the kernel sees fit (~30 s). Fastest; a power loss
    /// may lose the whole recording's unsynced tail (the catalog then trusts only its start).
    Never,
    /// At the end of each segment and when the recording stops: a power loss costs at most the
    /// segment being written.
    PerSegment,
    /// At most this long after bytes were recorded (checked on every poll) and at each segment's
    /// end: a power loss costs at most that interval (plus one poll).
    Every(Duration),
}

/// What a recording needs to know of the session's log.
#[derive(Clone, Copy, Debug)]
pub(super) struct LogFacts {
    expect: Expect,
    mtu: usize,
}

impl LogFacts {
    pub(super) fn of(log: &crate::log::Log<crate::region::ReadOnlyRegion>) -> Self {
        let terms = log.terms();
        Self {
            expect: Expect { terms, session_id: log.session_id(), stream_id: log.stream_id() },
            mtu: log.geometry().mtu,
        }
    }
}

/// The recording being extended.
#[derive(Debug)]
struct Active {
    id: u32,
    /// The catalog record that holds it.
    slot: u32,
    expect: Expect,
    checksum: Checksum,
    segment_length: u64,
    segment: Option<Segment>,
    recorded: i64,
    durable: i64,
    last_sync: Instant,
}

impl Active {
    fn resumed(dir: &Path, r: &Recording, stop: i64, fsync: Fsync, space: Space) -> Result<Self, Error> {
        let expect = Expect {
            terms: Terms::new(r.term_length, r.initial_term_id),
            session_id: r.session_id,
            stream_id: r.stream_id,
        };
        let base = segment::base_of(stop, r.segment_length);
        Ok(Self {
            id: r.id,
            slot: r.slot,
            expect,
            checksum: r.checksum,
            segment_length: r.segment_length,
            segment: Some(Segment::open(dir, r.id, base, r.segment_length, space, fsync != Fsync::Never)?),
            recorded: stop,
            durable: r.durable_position.min(stop),
            last_sync: Instant::now(),
        })
    }
}

/// How recordings are written: the recorder's settings.
#[derive(Clone, Copy, Debug)]
pub(super) struct Settings {
    pub segment_length: u64,
    pub fsync: Fsync,
    pub space: Space,
    /// For recordings begun from now on (a resumed one keeps its own).
    pub checksum: Checksum,
    pub retention: Retention,
    /// Whether any retention policy is set (then a full catalog is worth a retention pass).
    pub retains: bool,
}

/// Writes one stream's recordings, one at a time: the recorder's state apart from its
/// subscription.
#[derive(Debug)]
pub(super) struct SegmentWriter {
    dir: PathBuf,
    stream: String,
    catalog: Catalog<MmapRegion>,
    active: Option<Active>,
    segment_length: u64,
    fsync: Fsync,
    space: Space,
    checksum: Checksum,
    retention: Retention,
    retains: bool,
    /// Where blocks are copied to be sealed, reused.
    scratch: Vec<u8>,
    /// The recording the next one continues, and the position it stopped at.
    previous: Option<(u32, i64)>,
    /// Bytes skipped between recordings, over the recorder's life.
    lost: i64,
    /// Where the last recording closed stopped.
    last_stop: i64,
}

impl SegmentWriter {
    pub(super) fn new(dir: PathBuf, stream: String, catalog: Catalog<MmapRegion>, s: Settings) -> Self {
        Self {
            dir,
            stream,
            catalog,
            active: None,
            segment_length: s.segment_length,
            fsync: s.fsync,
            space: s.space,
            checksum: s.checksum,
            retention: s.retention,
            retains: s.retains,
            scratch: Vec::new(),
            previous: None,
            lost: 0,
            last_stop: 0,
        }
    }

    /// Extends recording `r`, which recovery cut back to `stop`, from there.
    pub(super) fn resume(&mut self, r: &Recording, stop: i64) -> Result<(), Error> {
        self.active = Some(Active::resumed(&self.dir, r, stop, self.fsync, self.space)?);
        Ok(())
    }

    pub(super) fn catalog(&self) -> &Catalog<MmapRegion> {
        &self.catalog
    }

    /// The recording being extended, if any.
    pub(super) fn recording_id(&self) -> Option<u32> {
        self.active.as_ref().map(|a| a.id)
    }

    /// The session of the recording being extended, if any.
    pub(super) fn session_id(&self) -> Option<i32> {
        self.active.as_ref().map(|a| a.expect.session_id)
    }

    /// Position recorded so far in the current recording; between recordings, where the last
    /// one stopped; 0 before the first.
    pub(super) fn recorded_position(&self) -> i64 {
        self.active.as_ref().map_or(self.last_stop, |a| a.recorded)
    }

    /// Bytes skipped between recordings, over the writer's life.
    pub(super) fn lost_bytes(&self) -> i64 {
        self.lost
    }

    /// The session ended (or another was joined): the recording closes, and the next one
    /// continues none.
    pub(super) fn end_session(&mut self, reason: StopReason) -> Result<(), Error> {
        let closed = self.close(reason);
        self.previous = None;
        closed
    }

    /// The subscription was lapped: the recording stops where it is (`Lagged`) and the next one
    /// records the gap. A failed sync of what it recorded is the caller's error, as anywhere
    /// else a recording closes.
    pub(super) fn lagged(&mut self) -> Result<(), Error> {
        if let Some(a) = &self.active {
            let previous = (a.id, a.recorded);
            let closed = self.close(StopReason::Lagged);
            self.previous = Some(previous);
            closed?;
        }
        Ok(())
    }

    /// Writes a block of whole frames that starts at `position` into the current recording
    /// (starting one if there is none).
    pub(super) fn write(&mut self, block: &[u8], position: i64, log: &LogFacts) -> Result<(), Error> {
        let continues = matches!(&self.active, Some(a) if a.expect == log.expect);
        if !continues {
            self.close(StopReason::PublisherDied)?;
            self.begin(position, log)?;
        }
        let a = self.active.as_mut().expect("begun above");
        if position > a.recorded {
            // Padding the reader passed (see `SegmentWriter::pad`): part of the stream, recorded.
            self.pad(position)?;
        } else if position < a.recorded {
            // Behind what was recorded: no reader's position goes back, so the log is not what
            // this recording holds. Start a new recording rather than overwrite this one.
            let previous = (a.id, a.recorded);
            self.close(StopReason::Lagged)?;
            self.previous = Some(previous);
            self.begin(position, log)?;
        }
        let a = self.active.as_mut().expect("begun above");
        let checksum = a.checksum;
        let segment = Self::segment_for(&self.dir, a, position, self.fsync, self.space, &self.catalog)?;
        match checksum {
            Checksum::None => segment.write_at(block, position)?,
            Checksum::Crc32c => write_sealed(segment, &mut self.scratch, block, position)?,
        }
        a.recorded = position + block.len() as i64;
        self.catalog.set_recorded(a.slot, a.recorded);
        Ok(())
    }

    /// Records padding from the recorded position to `to`: what the subscription passed there
    /// without handing it over (reads skip padding: an aborted or dropped claim, an unblocker's
    /// pad, the rest of a term). A subscription's position moves only over committed frames, and
    /// a lap (the one other way it moves) ends the recording before the next block (`Recorder::poll`),
    /// so everything between is padding: one padding frame per term it covers, so that the
    /// recording stays as contiguous as the stream and one aborted claim costs no recording.
    fn pad(&mut self, to: i64) -> Result<(), Error> {
        let Some(a) = self.active.as_mut() else { return Ok(()) };
        let terms = a.expect.terms;
        while a.recorded < to {
            let at = a.recorded;
            let end = to.min(terms.term_begin(at) + terms.term_length as i64);
            let mut pad = frames::padding_header(at, (end - at) as usize, &a.expect);
            if a.checksum == Checksum::Crc32c {
                frames::seal(&mut pad);
            }
            Self::segment_for(&self.dir, a, at, self.fsync, self.space, &self.catalog)?
                .write_padding(&pad, at, end)?;
            a.recorded = end;
        }
        self.catalog.set_recorded(a.slot, a.recorded);
        Ok(())
    }

    /// After a poll: the subscription's position, if past what was recorded of the same session,
    /// passed padding with nothing after it yet. Recorded now, so that the recording ends where
    /// the reader stands (a replay-merge hands over there) and a stop position is never before
    /// padding the stream had.
    pub(super) fn pad_to_reader(&mut self, position: i64, log: &LogFacts) -> Result<(), Error> {
        match &self.active {
            Some(a) if a.expect == log.expect && position > a.recorded => self.pad(position),
            _ => Ok(()),
        }
    }

    /// Starts a recording at `position` (where a message starts).
    fn begin(&mut self, position: i64, log: &LogFacts) -> Result<(), Error> {
        let e = log.expect;
        let segment_length = self.segment_length.max(e.terms.term_length as u64);
        let previous = self.previous.take();
        let gap = previous.map_or(0, |(_, stopped)| (position - stopped).max(0));
        self.lost += gap;
        let fields = Fields {
            stream: &self.stream,
            session_id: e.session_id,
            stream_id: e.stream_id,
            term_length: e.terms.term_length,
            mtu: log.mtu,
            initial_term_id: e.terms.initial_term_id,
            segment_length,
            start_position: position,
            start_unix_ns: now_ns(),
            boot_id: super::recovery::boot_id(),
            pid: std::process::id() as i32,
            gap_before: gap,
            previous: previous.map(|(id, _)| id),
            checksum: self.checksum,
            retention: self.retention,
        };
        let (id, slot) = match self.catalog.allocate(&fields) {
            // Full: retention may free a record now rather than at its next pass.
            Err(Error::InvalidConfig(_)) if self.retains => {
                super::retention::apply(&self.catalog, std::time::SystemTime::now())?;
                self.catalog.allocate(&fields)?
            }
            allocated => allocated?,
        };
        self.active = Some(Active {
            id,
            slot,
            expect: e,
            checksum: self.checksum,
            segment_length,
            segment: None,
            recorded: position,
            durable: position,
            last_sync: Instant::now(),
        });
        Ok(())
    }

    /// The segment holding `position`, rolling to it (syncing the one left) if needed.
    fn segment_for<'a>(
        dir: &Path,
        a: &'a mut Active,
        position: i64,
        fsync: Fsync,
        space: Space,
        catalog: &Catalog<MmapRegion>,
    ) -> Result<&'a mut Segment, Error> {
        let base = segment::base_of(position, a.segment_length);
        if a.segment.as_ref().map(|s| s.base) != Some(base) {
            if let Some(old) = a.segment.take() {
                if fsync != Fsync::Never {
                    old.sync()?;
                    a.durable = a.recorded;
                    catalog.set_durable(a.slot, a.durable);
                    segment::trace::note(|| format!("durable {}", a.durable));
                    catalog.sync(a.slot)?;
                    a.last_sync = Instant::now();
                }
            }
            a.segment = Some(Segment::open(dir, a.id, base, a.segment_length, space, fsync != Fsync::Never)?);
        }
        Ok(a.segment.as_mut().expect("opened above"))
    }

    /// Syncs if the policy says it is time (or `now`, for any policy but `Never`).
    pub(super) fn sync_due(&mut self, now: bool) -> Result<(), Error> {
        let Some(a) = &mut self.active else { return Ok(()) };
        let due = match self.fsync {
            Fsync::Never => false,
            Fsync::PerSegment => now,
            Fsync::Every(interval) => now || a.last_sync.elapsed() >= interval,
        };
        if !due || a.durable == a.recorded {
            return Ok(());
        }
        if let Some(s) = &a.segment {
            s.sync()?;
        }
        a.durable = a.recorded;
        a.last_sync = Instant::now();
        self.catalog.set_durable(a.slot, a.durable);
        segment::trace::note(|| format!("durable {}", a.durable));
        self.catalog.sync(a.slot)
    }

    /// Closes the current recording, if any, at what it recorded.
    pub(super) fn close(&mut self, reason: StopReason) -> Result<(), Error> {
        let synced = if matches!(reason, StopReason::DiskFull | StopReason::WriteFailed) {
            Ok(())
        } else {
            self.sync_due(true)
        };
        let mut stopped = Ok(());
        if let Some(a) = self.active.take() {
            self.last_stop = a.recorded;
            self.catalog.stop(a.slot, a.recorded, reason);
            stopped = self.catalog.sync(a.slot);
            self.catalog.release(a.slot);
            if let Some(s) = a.segment.filter(|s| a.recorded <= s.base) {
                // Begun for a write that failed (a full disk at a segment's start): it holds
                // nothing of the recording, which now stops before it. Leave no stub.
                let _ = std::fs::remove_file(&s.path);
            }
        }
        // The first error: the recording's own sync, else its catalog record's.
        synced.and(stopped)
    }
}

/// Writes `block` (whole committed frames from stream `position` on) with each frame's checksum
/// in its reserved value: copied into `scratch` a chunk at a time, sealed there, written from
/// there. The live log is never written.
fn write_sealed(
    segment: &mut Segment,
    scratch: &mut Vec<u8>,
    block: &[u8],
    position: i64,
) -> Result<(), Error> {
    let mut at = 0;
    while at < block.len() {
        let rest = &block[at..];
        scratch.clear();
        scratch.extend_from_slice(&rest[..rest.len().min(SEAL_CHUNK)]);
        let mut end = 0;
        while let Some((len, aligned)) = frame_extent(&scratch[end..]) {
            frames::seal(&mut scratch[end..end + len]);
            end += aligned;
        }
        if end == 0 {
            // One frame longer than a chunk.
            let Some((len, aligned)) = frame_extent(rest) else {
                // Not a frame where the reader found one: only a writer breaking the protocol
                // changes a committed frame.
                return Err(Error::Corrupt {
                    path: segment.path.clone(),
                    what: "a frame of the live log changed while the recorder copied it",
                });
            };
            scratch.clear();
            scratch.extend_from_slice(&rest[..aligned]);
            frames::seal(&mut scratch[..len]);
            end = aligned;
        }
        segment.write_at(&scratch[..end], position + at as i64)?;
        at += end;
    }
    Ok(())
}

/// The length and the aligned length of the frame at the start of `bytes`, if it lies wholly in
/// them.
fn frame_extent(bytes: &[u8]) -> Option<(usize, usize)> {
    let word: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
    let len = usize::try_from(i32::from_le_bytes(word)).ok().filter(|&len| len >= HEADER_LEN)?;
    let aligned = len.checked_add(FRAME_ALIGNMENT - 1)? & !(FRAME_ALIGNMENT - 1);
    (aligned <= bytes.len()).then_some((len, aligned))
}
