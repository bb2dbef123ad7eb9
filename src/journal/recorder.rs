//! The recorder: a reader of the live stream that copies whole committed blocks of frames into
//! segment files, and keeps the catalog's record of each recording up to date.
//!
//! It reads through an ordinary subscription (`block_poll`), so the publisher's path is what it
//! is with any reader: the recorder's position holds it back (tethered) like any reader's, and
//! the publisher never touches the disk. An untethered recorder reads through an untethered
//! subscription (`docs/untethered.md`), so it never holds the publisher back at all: when the
//! publisher laps it, it closes its recording as [`StopReason::Lagged`] and starts the next one
//! where its subscription goes on, with the gap in [`Recording::gap_before`].

use super::catalog::{Catalog, DEFAULT_CAPACITY};
use super::policy::Retention;
use super::record::{Checksum, StopReason};
use super::recovery;
use super::retention::RetentionThread;
use super::segment::{Space, BLOCK_LEN};
use super::segment_writer::{Fsync, LogFacts, SegmentWriter, Settings};
use crate::api::subscription::{Subscription, SubscriptionBuilder};
use crate::error::Error;
use crate::stream::join::JoinAt;
use std::path::PathBuf;
use std::time::Duration;

/// Default segment file length.
pub(super) const DEFAULT_SEGMENT_LENGTH: u64 = 128 << 20;

/// Settings for a new recorder. Obtained from [`Recorder::builder`].
#[derive(Clone, Debug)]
pub struct RecorderBuilder {
    stream: String,
    journal: PathBuf,
    live: SubscriptionBuilder,
    segment_length: u64,
    fsync: Fsync,
    tethered: bool,
    join: JoinAt,
    catalog_capacity: usize,
    resume: bool,
    wake_on_commit: bool,
    checksum: Checksum,
    space: Space,
    retention: Retention,
    journal_retention: Option<Retention>,
    retention_interval: Duration,
}

/// How long an idle recorder sleeps between looks unless woken on commit.
pub(super) const IDLE_SLEEP: Duration = Duration::from_millis(1);

impl RecorderBuilder {
    /// Directory of the stream's live files (default: [`crate::default_dir`]).
    pub fn stream_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.live = self.live.dir(dir);
        self
    }

    /// Bytes per segment file: a power of two from 64 KiB to 1 TiB, raised to the stream's term
    /// length if below it (default 128 MiB).
    pub fn segment_length(mut self, length: u64) -> Self {
        self.segment_length = length;
        self
    }

    /// When recorded bytes are forced to the disk (default [`Fsync::Never`]).
    pub fn fsync(mut self, fsync: Fsync) -> Self {
        self.fsync = fsync;
        self
    }

    /// `true` (the default): the recorder holds the publisher back like any reader, so nothing is
    /// ever lost. `false`: it reads through an untethered subscription and never holds the
    /// publisher back; when the publisher laps it (about two terms ahead), it loses messages
    /// (reported as a gap, and as a [`crate::LossCause::Lapped`] loss) rather than slowing the
    /// publisher.
    pub fn tethered(mut self, tethered: bool) -> Self {
        self.tethered = tethered;
        self
    }

    /// Where to start in the first session recorded (default [`JoinAt::Latest`]: from now on;
    /// [`JoinAt::Slowest`] records what the log still holds behind its slowest reader too).
    pub fn join_at(mut self, join: JoinAt) -> Self {
        self.join = join;
        self
    }

    /// `true` (the default): a recording of this stream interrupted by a recorder's death is
    /// extended where it was cut, when the same session is still live and still holds that
    /// position; otherwise it is closed and a new recording starts.
    pub fn resume(mut self, resume: bool) -> Self {
        self.resume = resume;
        self
    }

    /// `false` (the default): an idle recorder ([`Recorder::wait`]) looks again every
    /// millisecond, so the publisher never pays for it. `true`: it sleeps on the stream's
    /// doorbell and is woken by the next commit, which costs the publisher a `FUTEX_WAKE`
    /// (about 2 µs) per commit that finds it asleep: for streams that carry messages seldom.
    pub fn wake_on_commit(mut self, wake: bool) -> Self {
        self.wake_on_commit = wake;
        self
    }

    /// What each recorded frame carries to detect damage (default [`Checksum::Crc32c`]): its
    /// CRC32C in its 8-byte reserved value, computed over the frame as recorded (header with the
    /// reserved value taken as zero, then payload) and checked on replay, so any flipped bit of
    /// a frame's header or payload is [`Error::CorruptRecording`], never a delivered message.
    /// The publisher's reserved values are therefore **not kept** in such a recording.
    /// [`Checksum::None`] keeps them and checks only each frame's structure. Recorded in the
    /// catalog per recording ([`crate::journal::Recording::checksum`]); a resumed recording keeps its own.
    pub fn checksum(mut self, checksum: Checksum) -> Self {
        self.checksum = checksum;
        self
    }

    /// `false` (the default): a segment file grows as it is written, so it costs what it holds
    /// (a short recording takes a few pages, not a segment). `true`: each segment's whole length
    /// is reserved (`posix_fallocate`) when it is begun, so a full disk shows at a segment's
    /// start rather than in the middle of one, and the file system can lay it out in one piece.
    /// A full disk is [`Error::InsufficientSpace`] either way, with everything recorded intact.
    pub fn preallocate(mut self, preallocate: bool) -> Self {
        self.space = if preallocate { Space::Preallocate } else { Space::Grow };
        self
    }

    /// The retention policy of each recording this recorder begins (default
    /// [`Retention::none`]: keep everything), kept in its catalog record: its oldest segments are
    /// purged as the policy says, by a thread of the recorder (never on the publisher's path,
    /// and not on the recorder's own), whoever records the stream later.
    pub fn retention(mut self, policy: Retention) -> Self {
        self.retention = policy;
        self
    }

    /// Sets the whole journal's retention policy (kept in the catalog's header, for every
    /// recorder of the journal to apply, oldest recordings first, deleting a recording once
    /// nothing of it is kept). Default: leave the journal's policy as it is.
    pub fn journal_retention(mut self, policy: Retention) -> Self {
        self.journal_retention = Some(policy);
        self
    }

    /// How often the recorder's retention thread applies the policies (default 1 s). The
    /// thread runs only if a policy is set: this recorder's, the journal's, or a recording's.
    pub fn retention_interval(mut self, interval: Duration) -> Self {
        self.retention_interval = interval;
        self
    }

    /// Records a new catalog gets (default 4096).
    pub fn catalog_capacity(mut self, records: usize) -> Self {
        self.catalog_capacity = records;
        self
    }

    /// Opens (or creates) the journal directory and its catalog, closes this stream's
    /// interrupted recordings at their last complete message (or resumes the latest), and
    /// subscribes to the stream. Records nothing until [`Recorder::poll`].
    pub fn start(self) -> Result<Recorder, Error> {
        crate::stream::name::validate(&self.stream)?;
        if !self.segment_length.is_power_of_two()
            || !(1 << 16..=super::record::SEGMENT_MAX).contains(&self.segment_length)
        {
            return Err(Error::InvalidConfig("segment length must be a power of two from 64 KiB to 1 TiB"));
        }
        let catalog = Catalog::open_or_create(&self.journal, self.catalog_capacity)?;
        if let Some(policy) = self.journal_retention {
            catalog.set_retention(policy)?;
        }
        // Finish what a crash interrupted (a purge, a truncation, a deletion).
        super::maintenance::sweep(&catalog)?;
        let retains = !self.retention.is_none()
            || !catalog.retention().is_none()
            || catalog.list().iter().flatten().any(|r| !r.retention.is_none());
        let retention = match retains {
            true => Some(RetentionThread::spawn(self.journal.clone(), self.retention_interval)?),
            false => None,
        };
        let interrupted = recovery::close_interrupted(&catalog, &self.journal, &self.stream)?;
        let mut resumed = None;
        let mut sub = None;
        if let Some((recording, stop)) = interrupted {
            if self.resume {
                match self.live.clone().tethered(self.tethered).join_at(JoinAt::Position(stop)).open() {
                    Ok(s) if s.session_id() == Some(recording.session_id) && s.position() == stop => {
                        catalog.resume(recording.slot, stop);
                        sub = Some(s);
                    }
                    Ok(_) | Err(Error::PositionNotAvailable { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            if sub.is_some() {
                resumed = Some((recording, stop));
            } else {
                catalog.stop(recording.slot, stop, StopReason::RecorderDied);
                catalog.release(recording.slot);
            }
        }
        let sub = match sub {
            Some(sub) => sub,
            None => self.live.clone().tethered(self.tethered).join_at(self.join).open()?,
        };
        let settings = Settings {
            segment_length: self.segment_length,
            fsync: self.fsync,
            space: self.space,
            checksum: self.checksum,
            retention: self.retention,
            retains: retention.is_some(),
        };
        let mut writer = SegmentWriter::new(self.journal.clone(), self.stream, catalog, settings);
        if let Some((recording, stop)) = resumed {
            writer.resume(&recording, stop)?;
        }
        Ok(Recorder {
            sub: Some(sub),
            w: writer,
            failed: false,
            wake_on_commit: self.wake_on_commit,
            retention,
        })
    }
}

/// Records one stream into a journal directory: every session its publishers create, one
/// recording per session (and per gap).
///
/// ```no_run
/// use shmlog::journal::{Fsync, Recorder};
/// # fn main() -> Result<(), shmlog::Error> {
/// let mut recorder = Recorder::builder("orders", "/var/lib/orders-journal").fsync(Fsync::PerSegment).start()?;
/// loop {
///     if recorder.poll()? == 0 {
///         recorder.wait(std::time::Duration::from_millis(100)); // sleeps a millisecond
///     }
/// #   break;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Recorder {
    /// `None` once an error stopped the recorder.
    sub: Option<Subscription>,
    w: SegmentWriter,
    /// An error stopped the recorder.
    failed: bool,
    wake_on_commit: bool,
    /// Applies retention policies, if any is set (dropped, so stopped, with the recorder).
    retention: Option<RetentionThread>,
}

impl Recorder {
    /// Starts building a recorder of stream `name` into the journal directory `journal` (on a
    /// real disk: not `/dev/shm`, which is memory).
    pub fn builder(name: impl Into<String>, journal: impl Into<PathBuf>) -> RecorderBuilder {
        let stream = name.into();
        RecorderBuilder {
            live: Subscription::builder(stream.clone()),
            stream,
            journal: journal.into(),
            segment_length: DEFAULT_SEGMENT_LENGTH,
            fsync: Fsync::Never,
            tethered: true,
            join: JoinAt::Latest,
            catalog_capacity: DEFAULT_CAPACITY,
            resume: true,
            wake_on_commit: false,
            checksum: Checksum::Crc32c,
            space: Space::Grow,
            retention: Retention::none(),
            journal_retention: None,
            retention_interval: Duration::from_secs(1),
        }
    }

    /// Records what the stream committed since the last call (up to 1 MiB), closes the
    /// recording when its session ends, and syncs as the [`Fsync`] policy says. Returns the
    /// bytes the recorder's position moved.
    ///
    /// An error (a full disk: [`Error::InsufficientSpace`]; any other write failure) closes the
    /// recording at its last whole write, intact, and stops the recorder: it leaves the stream
    /// (holding the publisher back no longer) and records nothing more.
    pub fn poll(&mut self) -> Result<usize, Error> {
        let Some(sub) = &mut self.sub else { return Ok(0) };
        if let Err(e) = follow_session(sub, &mut self.w) {
            self.fail(&e);
            return Err(e);
        }
        let Some(sub) = &mut self.sub else { return Ok(0) };
        let laps = sub.laps();
        let mut result = Ok(());
        let w = &mut self.w;
        let log = sub.log().map(LogFacts::of);
        let moved = sub.block_poll(
            |block, position| {
                if let Some(log) = &log {
                    result = w.write(block, position, log);
                }
            },
            BLOCK_LEN,
        );
        if let Err(e) = result {
            self.fail(&e);
            return Err(e);
        }
        let padded = if sub.laps() != laps {
            // Lapped (an untethered recorder; a lapped poll hands over no block): what follows
            // is not contiguous with what was recorded, even where it starts a term (which the
            // writer would take for padding).
            self.w.lagged()
        } else {
            match log {
                Some(log) => self.w.pad_to_reader(sub.position(), &log),
                None => Ok(()),
            }
        };
        if let Err(e) = padded {
            self.fail(&e);
            return Err(e);
        }
        if let Err(e) = self.w.sync_due(false) {
            self.fail(&e);
            return Err(e);
        }
        Ok(moved)
    }

    /// Waits for something to record, at most `timeout`: a millisecond's sleep, or with
    /// [`RecorderBuilder::wake_on_commit`] until the publisher's next commit (its doorbell). No
    /// spinning either way. `true` if there may be something to record.
    pub fn wait(&mut self, timeout: Duration) -> bool {
        match &mut self.sub {
            Some(sub) if self.wake_on_commit => sub.wait_readable(timeout),
            Some(_) => {
                std::thread::sleep(timeout.min(IDLE_SLEEP));
                true
            }
            // Stopped by an error: nothing will come, but a caller's loop must not spin.
            None => {
                std::thread::sleep(timeout.min(IDLE_SLEEP));
                false
            }
        }
    }

    /// Records until `stop` returns `true`, waiting ([`Recorder::wait`]) when idle and looking at
    /// `stop` at least every 100 ms.
    pub fn run_until(&mut self, mut stop: impl FnMut() -> bool) -> Result<(), Error> {
        while !stop() {
            if self.poll()? == 0 {
                self.wait(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// The recording being extended, if any.
    pub fn recording_id(&self) -> Option<u32> {
        self.w.recording_id()
    }

    /// Position recorded so far in the current recording; between recordings (and once an
    /// error stopped the recorder) the position the last one stopped at; 0 before the first.
    pub fn recorded_position(&self) -> i64 {
        self.w.recorded_position()
    }

    /// Bytes of the stream an untethered recorder skipped, over its life.
    pub fn lost_bytes(&self) -> i64 {
        self.w.lost_bytes()
    }

    /// The oldest report, not taken yet, of messages of the stream the recorder's subscription
    /// missed (see [`crate::Subscription::take_loss`]): a session that began while the recorder
    /// waited and was joined past its start (its recording then starts late), or whole sessions
    /// that began and ended unrecorded.
    pub fn take_loss(&mut self) -> Option<crate::Loss> {
        self.sub.as_mut()?.take_loss()
    }

    /// The last error the retention thread met applying the policies (it goes on), once.
    pub fn take_retention_error(&mut self) -> Option<Error> {
        self.retention.as_ref()?.take_error()
    }

    /// `true` once an error stopped the recorder.
    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// Closes the current recording ([`StopReason::Stopped`]), syncing it unless the policy is
    /// [`Fsync::Never`]; then, if retention policies are set, applies them once more, so that
    /// what the journal keeps after a stop is what they say (the thread's last pass may be up to
    /// an interval old).
    pub fn stop(mut self) -> Result<(), Error> {
        let closed = self.w.close(StopReason::Stopped);
        let retained = match self.retention.take() {
            Some(thread) => {
                drop(thread);
                super::retention::apply(self.w.catalog(), std::time::SystemTime::now()).map(drop)
            }
            None => Ok(()),
        };
        closed.and(retained)
    }

    fn fail(&mut self, e: &Error) {
        let reason = match e {
            Error::InsufficientSpace { .. } => StopReason::DiskFull,
            _ => StopReason::WriteFailed,
        };
        let _ = self.w.close(reason);
        self.failed = true;
        // Leave the stream: a recorder that records nothing must not hold the publisher back.
        self.sub = None;
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.w.close(StopReason::Stopped);
    }
}

/// Closes the recording when its session ended or a new one was joined; an error of the close
/// (its last sync) is the recorder's.
fn follow_session(sub: &mut Subscription, w: &mut SegmentWriter) -> Result<(), Error> {
    let ended = sub.take_ended();
    let Some(recorded) = w.session_id() else { return Ok(()) };
    let live = sub.session_id();
    let reason = match ended {
        Some(e) if e.session_id == recorded => {
            if e.end_of_stream {
                StopReason::EndOfStream
            } else {
                StopReason::PublisherDied
            }
        }
        _ if live != Some(recorded) => StopReason::PublisherDied,
        _ if sub.is_closed() => {
            if sub.is_end_of_stream() {
                StopReason::EndOfStream
            } else {
                StopReason::PublisherDied
            }
        }
        _ => return Ok(()),
    };
    w.end_session(reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::publication::Publication;
    use crate::journal::segment::{self, trace};
    use crate::testing::TempDir;
    use std::path::Path;

    /// Records 3 000 messages of 100 bytes (about six 64 KiB segments) into `journal` and
    /// returns what the journal did to its directory.
    fn record_events(shm: &Path, journal: &Path, fsync: Fsync) -> Vec<String> {
        trace::take();
        let mut recorder = Recorder::builder("dirsync", journal)
            .stream_dir(shm)
            .segment_length(1 << 16)
            .fsync(fsync)
            .start()
            .unwrap();
        let mut p = Publication::builder("dirsync").dir(shm).term_length(1 << 16).create().unwrap();
        while !p.is_connected() {
            recorder.poll().unwrap();
        }
        for i in 0..3_000u32 {
            while let Err(e) = p.offer(&[i as u8; 100]) {
                assert!(e.is_retryable(), "{e}");
                recorder.poll().unwrap();
            }
        }
        while recorder.recorded_position() < p.position() {
            recorder.poll().unwrap();
        }
        recorder.stop().unwrap();
        trace::take()
    }

    /// A session that ends closes its recording; a failed sync of its catalog record there is
    /// the recorder's error, as at every other close, not dropped (it was, with `let _ =`).
    #[test]
    fn a_failed_sync_when_a_session_ends_stops_the_recorder_with_that_error() {
        let (shm, disk) = (TempDir::new("endsync-shm"), TempDir::new("endsync-journal"));
        let mut recorder = Recorder::builder("endsync", disk.path()).stream_dir(shm.path()).start().unwrap();
        let mut p = Publication::builder("endsync").dir(shm.path()).term_length(1 << 16).create().unwrap();
        while !p.is_connected() {
            recorder.poll().unwrap();
        }
        p.offer(&[7; 100]).unwrap();
        while recorder.recorded_position() < p.position() {
            recorder.poll().unwrap();
        }
        p.close();
        trace::fail_next("sync catalog");
        let mut result = Ok(0);
        for _ in 0..10_000 {
            result = recorder.poll();
            if result.is_err() || recorder.recording_id().is_none() {
                break;
            }
        }
        let e = result.expect_err("the failed sync is reported");
        assert!(e.to_string().contains("sync catalog"), "{e}");
        assert!(recorder.is_failed());
    }

    /// A full disk at a growing segment's first write: a typed error, the recording stopped as
    /// `DiskFull` with nothing in it, and no empty segment file left behind.
    #[test]
    fn a_full_disk_at_a_segments_first_write_is_a_typed_error_and_leaves_no_stub() {
        let (shm, disk) = (TempDir::new("stub-shm"), TempDir::new("stub-journal"));
        let mut recorder = Recorder::builder("stub", disk.path()).stream_dir(shm.path()).start().unwrap();
        let mut p = Publication::builder("stub").dir(shm.path()).term_length(1 << 16).create().unwrap();
        while !p.is_connected() {
            recorder.poll().unwrap();
        }
        p.offer(&[7; 100]).unwrap();
        trace::fail_next("write segment");
        let mut result = Ok(0);
        for _ in 0..10_000 {
            result = recorder.poll();
            if result.is_err() {
                break;
            }
        }
        assert!(matches!(result, Err(Error::InsufficientSpace { .. })), "{result:?}");
        assert!(recorder.is_failed());
        let r = crate::journal::recording(disk.path(), 0).unwrap();
        assert_eq!((r.state, r.length()), (crate::journal::RecordingState::Stopped(StopReason::DiskFull), 0));
        assert!(segment::list(disk.path(), 0).unwrap().is_empty(), "an empty segment was left behind");
    }

    #[test]
    fn a_durable_policy_syncs_the_directory_after_each_new_segment_and_the_catalog() {
        let (shm, disk) = (TempDir::new("dirsync-shm"), TempDir::new("dirsync-journal"));
        let events = record_events(shm.path(), &disk.path().join("per-segment"), Fsync::PerSegment);
        assert_eq!(events[..2], ["link catalog", "sync dir"], "{events:?}");
        let creates: Vec<usize> =
            events.iter().enumerate().filter(|(_, e)| e.starts_with("create")).map(|(i, _)| i).collect();
        assert!(creates.len() >= 5, "{events:?}");
        for (k, &i) in creates.iter().enumerate() {
            // The new segment's name is synced before anything after it is called durable, and
            // each segment left was made durable before the next was begun.
            assert_eq!(events[i + 1], "sync dir", "{events:?}");
            if k > 0 {
                assert!(events[i - 1].starts_with("durable"), "{events:?}");
            }
        }
        // Never: nothing is promised, so only the catalog's creation syncs the directory.
        let events = record_events(shm.path(), &disk.path().join("never"), Fsync::Never);
        assert_eq!(events.iter().filter(|e| *e == "sync dir").count(), 1, "{events:?}");
        assert!(events.iter().filter(|e| e.starts_with("create")).count() >= 5, "{events:?}");
        assert!(!events.iter().any(|e| e.starts_with("durable")), "{events:?}");
    }
}
