//! Replaying a recording: its fragments, in order, through the same handler shapes as a live
//! subscription, from any position where a message starts, at full speed or paced. A recording
//! still being recorded is followed as it grows.

use super::catalog::Catalog;
use super::frames::Frame;
use super::record::Recording;
use super::segment_reader::SegmentReader;
use crate::api::handler::{ControlledFragmentHandler, FragmentHandler};
use crate::error::Error;
use crate::layout::frame::HEADER_LEN;
use crate::log::frame_loop::{self, FrameSource, Next};
use crate::log::header::Header;
use crate::log::reader::Action;
use crate::region::ReadOnlyRegion;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Settings for a replay. Obtained from [`Replay::builder`].
#[derive(Clone, Debug)]
pub struct ReplayBuilder {
    journal: PathBuf,
    id: u32,
    from: Option<i64>,
    to: Option<i64>,
    rate: Option<f64>,
}

impl ReplayBuilder {
    /// Start at `position`, where a message starts in the recording (default: its start).
    /// Anything else is refused with [`Error::PositionNotAvailable`], naming the nearest one.
    pub fn from(mut self, position: i64) -> Self {
        self.from = Some(position);
        self
    }

    /// Stop at `position` (default: follow the recording to its stop position); a position
    /// inside a frame stops the replay before that frame.
    pub fn to(mut self, position: i64) -> Self {
        self.to = Some(position);
        self
    }

    /// Deliver at most `messages_per_second` fragments a second (default: as fast as the disk
    /// and the handler go).
    pub fn pace(mut self, messages_per_second: f64) -> Self {
        self.rate = Some(messages_per_second);
        self
    }

    /// Opens the recording and checks the start position.
    pub fn open(self) -> Result<Replay, Error> {
        if matches!(self.rate, Some(r) if !(r > 0.0 && r.is_finite())) {
            return Err(Error::InvalidConfig(
                "a replay's pace must be a positive number of messages a second",
            ));
        }
        let catalog = Catalog::open(&self.journal)?;
        let mut attempts = 0;
        loop {
            let recording = catalog.get(self.id)?;
            let (slot, id) = (recording.slot, recording.id);
            let progress = catalog.progress(slot, id);
            if !progress.valid {
                attempts += 1;
                if attempts < 100 {
                    continue; // stopped (or deleted) under the loads: look again
                }
                return Err(Error::NoSuchRecording { id });
            }
            let mut reader = SegmentReader::new(&self.journal, &recording);
            let (start, stop) = (progress.start, progress.recorded);
            let from = self.from.unwrap_or(start);
            let found = if from == start {
                Ok((true, from))
            } else if (start..=stop).contains(&from) {
                let walk_start = reader.terms().term_begin(from).max(start);
                reader.message_start(walk_start, from, stop)
            } else {
                Ok((false, from.clamp(start, stop)))
            };
            // Recovery cut the recording back, or retention purged what we walked, meanwhile:
            // walk again what it holds now.
            let purged =
                matches!(found, Err(Error::CorruptRecording { .. })) && catalog.start_of(slot) > start;
            if (!catalog.uncut(slot, id, progress.cuts) || purged) && attempts < 100 {
                attempts += 1;
                continue;
            }
            let (exact, nearest) = found?;
            if !exact {
                return Err(Error::PositionNotAvailable {
                    requested: from,
                    oldest: start,
                    newest: stop,
                    nearest,
                });
            }
            reader.take_fresh();
            return Ok(Replay {
                catalog,
                limit: stop,
                stopped: progress.stopped,
                gone: false,
                cuts: progress.cuts,
                recording,
                reader,
                position: from,
                to: self.to.unwrap_or(i64::MAX),
                boundary: true,
                pacing: self.rate.map(|rate| Pacing { rate, start: Instant::now(), delivered: 0 }),
            });
        }
    }
}

#[derive(Debug)]
struct Pacing {
    rate: f64,
    start: Instant,
    delivered: u64,
}

impl Pacing {
    fn budget(&self) -> usize {
        let allowed = (self.start.elapsed().as_secs_f64() * self.rate) as u64 + 1;
        allowed.saturating_sub(self.delivered) as usize
    }
}

/// Reads one recording back.
///
/// ```no_run
/// use shmlog::journal::Replay;
/// use shmlog::{FragmentAssembler, Header};
/// # fn main() -> Result<(), shmlog::Error> {
/// let mut replay = Replay::builder("/var/lib/orders-journal", 0).open()?;
/// let mut assembler = FragmentAssembler::new(|msg: &[u8], h: &Header| println!("{} bytes at {}", msg.len(), h.position()));
/// while !replay.is_done() {
///     replay.poll(&mut assembler, 100)?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Replay {
    catalog: Catalog<ReadOnlyRegion>,
    recording: Recording,
    reader: SegmentReader,
    position: i64,
    to: i64,
    /// The recorded end as last seen, and whether the recording had stopped then.
    limit: i64,
    stopped: bool,
    /// The recording was deleted (seen at the last look at the catalog).
    gone: bool,
    /// The record's cut count when `limit` was read: bytes below `limit` read while it holds
    /// are recorded bytes (see `journal::record`).
    cuts: i64,
    /// Whether `position` is where a message starts.
    boundary: bool,
    pacing: Option<Pacing>,
}

impl Replay {
    /// Starts building a replay of recording `id` of the journal directory `journal`.
    pub fn builder(journal: impl AsRef<Path>, id: u32) -> ReplayBuilder {
        ReplayBuilder { journal: journal.as_ref().to_path_buf(), id, from: None, to: None, rate: None }
    }

    /// Delivers up to `fragment_limit` fragments to `handler`; returns how many (0 at the
    /// recorded end: a recording still recording may grow, see [`Replay::is_done`]). Wrap the
    /// handler in a [`crate::FragmentAssembler`] for whole messages.
    pub fn poll(&mut self, mut handler: impl FragmentHandler, fragment_limit: usize) -> Result<usize, Error> {
        self.controlled_poll(
            |payload: &[u8], header: &Header| {
                handler.on_fragment(payload, header);
                Action::Continue
            },
            fragment_limit,
        )
    }

    /// Like [`Replay::poll`], the handler steering with an [`Action`] (`Abort` leaves the
    /// fragment for the next poll, `Break` stops after it).
    pub fn controlled_poll(
        &mut self,
        mut handler: impl ControlledFragmentHandler,
        fragment_limit: usize,
    ) -> Result<usize, Error> {
        let mut limit = fragment_limit;
        if let Some(p) = &self.pacing {
            limit = limit.min(p.budget());
        }
        let delivered = frame_loop::deliver(&mut RecordedFrames(self), limit, |payload, header| {
            handler.on_fragment(payload, header)
        });
        if let Some(p) = &mut self.pacing {
            p.delivered += delivered.fragments as u64;
        }
        match delivered.fault {
            Some(e) => Err(e),
            None => Ok(delivered.fragments),
        }
    }

    /// The frame at our position, validated (or an error explained), with what the recording
    /// holds now: `None` at the end of what may be read now (the recorded end, or `to`, which a
    /// frame that crosses it moves back to its start).
    fn next_frame(&mut self) -> Result<Option<Frame>, Error> {
        loop {
            let end = self.end();
            if self.position >= end {
                if self.stopped || self.position >= self.to {
                    return Ok(None);
                }
                if !self.refresh() {
                    if self.gone {
                        return Err(Error::NoSuchRecording { id: self.recording.id });
                    }
                    return Ok(None);
                }
                continue;
            }
            let frame = self.reader.frame(self.position, self.limit);
            // Bytes read from a file while recovery cut the recording back may be half zeroed:
            // neither delivered nor reported as damage. Read again what the recording holds now.
            if self.reader.take_fresh()
                && !self.catalog.uncut(self.recording.slot, self.recording.id, self.cuts)
            {
                self.follow_cut()?;
                continue;
            }
            let frame = frame.map_err(|e| self.explain(e))?;
            if self.position + frame.aligned as i64 > self.to {
                // `to` falls inside this frame: the replay ends before it.
                self.to = self.position;
                return Ok(None);
            }
            return Ok(Some(frame));
        }
    }

    /// Where reading must stop for now.
    fn end(&self) -> i64 {
        self.limit.min(self.to)
    }

    /// An error reading the recording at our position, explained by what the catalog says now:
    /// a segment file missing because retention purged it is [`Error::PositionNotAvailable`]
    /// (with the oldest position kept), a recording deleted is [`Error::NoSuchRecording`].
    fn explain(&self, e: Error) -> Error {
        if !matches!(e, Error::CorruptRecording { .. }) {
            return e;
        }
        let (slot, id) = (self.recording.slot, self.recording.id);
        // The start is moved (and the recording marked deleted) before any file goes: loaded
        // after the file was found missing, it says whether it was purged (loom model j4).
        let start = self.catalog.start_of(slot);
        let p = self.progress();
        if !p.valid {
            return Error::NoSuchRecording { id };
        }
        if self.position < start {
            return Error::PositionNotAvailable {
                requested: self.position,
                oldest: start,
                newest: p.recorded,
                nearest: start,
            };
        }
        e
    }

    /// The recording's progress, loaded again while it changes state under the loads.
    fn progress(&self) -> super::record::Progress {
        let mut p = self.catalog.progress(self.recording.slot, self.recording.id);
        for _ in 0..100 {
            if p.valid {
                break;
            }
            p = self.catalog.progress(self.recording.slot, self.recording.id);
        }
        p
    }

    /// Looks at the catalog for more recorded bytes; `true` if there are.
    fn refresh(&mut self) -> bool {
        let p = self.progress();
        if !p.valid {
            self.gone = true; // deleted: the poll says so
            return false;
        }
        if p.cuts != self.cuts {
            self.cut_to(p);
            return self.position < self.end();
        }
        let grew = p.recorded > self.limit;
        // A stopped recording's end is final (a recovered one may have been cut back).
        self.limit = if p.stopped { p.recorded } else { p.recorded.max(self.limit) };
        self.stopped = p.stopped;
        grew
    }

    /// Recovery cut the recording back: its recorded end is what the catalog says now (lower
    /// than what this replay saw; a resumed recorder writes the same frames there again).
    fn follow_cut(&mut self) -> Result<(), Error> {
        let p = self.progress();
        if !p.valid {
            return Err(Error::NoSuchRecording { id: self.recording.id });
        }
        self.cut_to(p);
        Ok(())
    }

    fn cut_to(&mut self, p: super::record::Progress) {
        self.cuts = p.cuts;
        self.limit = p.recorded;
        self.stopped = p.stopped;
        self.reader.forget();
    }

    /// `true` once everything up to the stop position (or the `to` position) was delivered.
    pub fn is_done(&mut self) -> bool {
        if self.position >= self.to {
            return true;
        }
        if !self.stopped {
            self.refresh();
        }
        self.stopped && self.position >= self.limit
    }

    /// Position after the last fragment delivered.
    pub fn position(&self) -> i64 {
        self.position
    }

    /// `true` if the next fragment starts a message (a handover point).
    pub fn at_message_boundary(&self) -> bool {
        self.boundary
    }

    /// Position up to which the recording is recorded, as of the last look.
    pub fn recorded_position(&mut self) -> i64 {
        self.refresh();
        self.limit
    }

    /// The recording, as described when the replay opened.
    pub fn recording(&self) -> &Recording {
        &self.recording
    }
}

/// A replay's recording as the frames of a poll: read from the segments into a buffer of the
/// reader's and validated there (`SegmentReader::frame`); the position is the replay's own, so
/// `Commit` has nothing to publish.
struct RecordedFrames<'a>(&'a mut Replay);

impl FrameSource for RecordedFrames<'_> {
    type Frame = Frame;
    type Fault = Error;

    fn next(&mut self) -> Result<Next<Frame>, Error> {
        let Some(frame) = self.0.next_frame()? else { return Ok(Next::End) };
        if frame.is_padding() {
            return Ok(Next::Pass(frame));
        }
        let position = self.0.position + frame.aligned as i64;
        Ok(Next::Deliver(frame, Header { frame_length: frame.len as i32, rest: frame.rest, position }))
    }

    fn with_payload<T>(&mut self, frame: Frame, f: impl FnOnce(&[u8]) -> T) -> T {
        f(self.0.reader.bytes(self.0.position + HEADER_LEN as i64, frame.len - HEADER_LEN))
    }

    fn consume(&mut self, frame: Frame) {
        self.0.position += frame.aligned as i64;
        self.0.boundary = frame.ends_message();
    }

    fn commit(&mut self) {}
}
