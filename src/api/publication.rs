//! The single writer of a stream.

use super::idle::IdleStrategy;
use crate::error::{Error, OfferError};
use crate::layout::frame::{framed_length, max_message_len};
use crate::layout::log_meta::{self as meta, Geometry};
use crate::log::appender::{Appender, ClaimedFrame, Tripped};
use crate::region::MmapRegion;
use crate::stream::files::{self, OwnedLog, ReadersFile};
use crate::stream::flow::FlowControl;
use crate::stream::name;
use crate::sys::fs::is_same_file;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Default term length: 16 MiB (a 48 MiB log file; max message 2 MiB).
pub const DEFAULT_TERM_LENGTH: usize = 16 << 20;
/// Default reader slots per stream.
pub const DEFAULT_MAX_READERS: usize = 128;
/// Default interval between liveness checks of readers holding the publisher back.
pub const DEFAULT_LIVENESS_INTERVAL: Duration = Duration::from_millis(100);

/// Settings for a new publication. Obtained from [`Publication::builder`].
#[derive(Clone, Debug)]
pub struct PublicationBuilder {
    name: String,
    dir: Option<PathBuf>,
    term_length: usize,
    mtu: Option<usize>,
    window: Option<usize>,
    page_size: usize,
    file_mode: u32,
    max_readers: usize,
    keep_files: bool,
    liveness_interval: Duration,
}

impl PublicationBuilder {
    /// Directory of the stream's files (default: [`crate::default_dir`]).
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Term length: a power of two from 64 KiB to 1 GiB (default 16 MiB). The log file holds
    /// three terms; the largest message is an eighth of a term (at most 16 MiB).
    pub fn term_length(mut self, bytes: usize) -> Self {
        self.term_length = bytes;
        self
    }

    /// Largest frame, header included: a multiple of 32 above 32, at most the max message length.
    /// Messages longer than `mtu - 32` are fragmented; `try_claim` is limited to `mtu - 32`.
    /// Default: 64 KiB, or the max message length if smaller.
    pub fn mtu(mut self, bytes: usize) -> Self {
        self.mtu = Some(bytes);
        self
    }

    /// How far the publisher may run ahead of the slowest reader (default and maximum: half a
    /// term).
    pub fn window(mut self, bytes: usize) -> Self {
        self.window = Some(bytes);
        self
    }

    /// Page size the file length is rounded to (default 4096; e.g. 2 MiB on hugetlbfs).
    pub fn page_size(mut self, bytes: usize) -> Self {
        self.page_size = bytes;
        self
    }

    /// Permission bits of the files (default `0o600`; world-writable modes are refused).
    pub fn file_mode(mut self, mode: u32) -> Self {
        self.file_mode = mode;
        self
    }

    /// Reader slots when this publication creates the stream's reader-slot file (default 128).
    pub fn max_readers(mut self, n: usize) -> Self {
        self.max_readers = n;
        self
    }

    /// Keep the log file after close, e.g. for post-mortem inspection (default: remove it).
    pub fn keep_files(mut self, keep: bool) -> Self {
        self.keep_files = keep;
        self
    }

    /// How often, at most, a back-pressured publisher checks whether the readers holding it back
    /// are still alive (default 100 ms). A dead reader stops holding it back within about this
    /// long; a live reader is never evicted, however long it does not poll.
    pub fn liveness_interval(mut self, interval: Duration) -> Self {
        self.liveness_interval = interval;
        self
    }

    fn geometry(&self) -> Result<Geometry, Error> {
        let t = self.term_length;
        let mtu = self.mtu.unwrap_or_else(|| (64 * 1024).min(max_message_len(t)));
        let g =
            Geometry { term_length: t, page_size: self.page_size, mtu, window: self.window.unwrap_or(t / 2) };
        g.validate().map_err(Error::InvalidConfig)?;
        Ok(g)
    }

    /// Creates the stream's log as a new session and takes the writer's role.
    ///
    /// Fails with [`Error::AlreadyExists`] if a live publisher owns the stream; a log left by a
    /// dead one is replaced. Subscribers of the old session move to the new one when they have
    /// drained it.
    pub fn create(self) -> Result<Publication, Error> {
        name::validate(&self.name)?;
        let geometry = self.geometry()?;
        let dir = crate::stream::prepare(&self.name, self.dir.as_ref(), self.file_mode, self.max_readers)?;
        files::check_space_for_stream(&dir, &self.name, geometry, self.max_readers)?;
        let readers = files::open_readers(&dir, &self.name, self.max_readers, self.file_mode)?;
        let owned = files::create_log(&files::NewLog {
            dir: &dir,
            name: &self.name,
            geometry,
            mode: self.file_mode,
        })?;
        // A previous owner may have removed the slot file between our open and our publish.
        let readers = if is_same_file(&readers.file, &readers.path).unwrap_or(false) {
            readers
        } else {
            files::open_readers(&dir, &self.name, self.max_readers, self.file_mode)?
        };
        Publication::new(owned, readers, self)
    }
}

/// The single writer of a stream: appends messages to the log that subscribers read in place.
///
/// `Send` but not `Sync` or `Clone`, and every method takes `&mut self`: single-writer by type,
/// with no lock on any path. The hot path (`offer`, `try_claim` + `commit`) allocates nothing and
/// makes no system call; it reads reader positions only when it reaches its cached limit.
///
/// Rotation to the next term happens inside the call that trips it (the message is then written
/// in the new term), so there is no `AdminAction` to retry. Closing consumes the publication, so
/// there is no `Closed` either.
#[derive(Debug)]
pub struct Publication {
    appender: Appender<MmapRegion>,
    flow: FlowControl,
    readers: ReadersFile,
    /// Holds the publisher's lock for as long as the publication lives.
    file: File,
    path: PathBuf,
    session_id: i32,
    max_message: usize,
    max_position: i64,
    /// A claim whose guard was leaked with `mem::forget`: aborted by the next operation.
    pending: Option<ClaimedFrame>,
    keep_files: bool,
    liveness_interval: Duration,
    last_sweep: Option<Instant>,
}

impl Publication {
    /// Starts building a publication of stream `name` (a file name: no `/`, no NUL, no leading
    /// dot, at most 200 bytes).
    pub fn builder(name: impl Into<String>) -> PublicationBuilder {
        PublicationBuilder {
            name: name.into(),
            dir: None,
            term_length: DEFAULT_TERM_LENGTH,
            mtu: None,
            window: None,
            page_size: 4096,
            file_mode: 0o600,
            max_readers: DEFAULT_MAX_READERS,
            keep_files: false,
            liveness_interval: DEFAULT_LIVENESS_INTERVAL,
        }
    }

    fn new(owned: OwnedLog, readers: ReadersFile, b: PublicationBuilder) -> Result<Self, Error> {
        let OwnedLog { file, path, log } = owned;
        let geometry = log.geometry();
        let session_id = log.session_id();
        let max_position = log.terms().max_position();
        let appender = Appender::new(log).map_err(|e| e.at(&path))?;
        let flow = FlowControl::new(geometry.window, appender.position());
        Ok(Self {
            appender,
            flow,
            readers,
            file,
            path,
            session_id,
            max_message: max_message_len(geometry.term_length),
            max_position,
            pending: None,
            keep_files: b.keep_files,
            liveness_interval: b.liveness_interval,
            last_sweep: None,
        })
    }

    /// Appends `message`. Returns the stream position after it.
    #[inline]
    pub fn offer(&mut self, message: &[u8]) -> Result<i64, OfferError> {
        // The common case in one pass: one frame, no leaked claim, below the cached limit.
        if message.len() <= self.appender.max_payload()
            && self.pending.is_none()
            && self.appender.position() < self.flow.limit()
        {
            if let Ok(position) = self.appender.append_unfragmented(message) {
                return Ok(position);
            }
            // Tripped: the term is padded to its end; the general path rotates and retries.
        }
        self.offer_parts(&[message], message.len())
    }

    /// Appends one message gathered from several slices, in order (e.g. a header and a body).
    pub fn offer_vectored(&mut self, parts: &[&[u8]]) -> Result<i64, OfferError> {
        let len = parts.iter().try_fold(0usize, |sum, p| sum.checked_add(p.len()));
        let len = len.ok_or(OfferError::MessageTooLarge { len: usize::MAX, max: self.max_message })?;
        self.offer_parts(parts, len)
    }

    #[inline]
    fn offer_parts(&mut self, parts: &[&[u8]], len: usize) -> Result<i64, OfferError> {
        if len > self.max_message {
            return Err(OfferError::MessageTooLarge { len, max: self.max_message });
        }
        self.abort_pending();
        loop {
            self.admit(len)?;
            match self.appender.append(parts, len) {
                Ok(position) => return Ok(position),
                Err(Tripped) => self.rotate()?,
            }
        }
    }

    /// Reserves space for a message of `len` bytes (at most [`Publication::max_payload_len`]) to
    /// be written in place. Commit it with [`Claim::commit`]; dropping or aborting it turns it into
    /// padding that readers skip.
    pub fn try_claim(&mut self, len: usize) -> Result<Claim<'_>, OfferError> {
        let max = self.appender.max_payload();
        if len > max {
            return Err(OfferError::MessageTooLarge { len, max });
        }
        self.abort_pending();
        loop {
            self.admit(len)?;
            match self.appender.claim(len) {
                Ok(frame) => {
                    self.pending = Some(frame);
                    return Ok(Claim { publication: self, frame });
                }
                Err(Tripped) => self.rotate()?,
            }
        }
    }

    /// Offers `message`, idling with `idle` while back-pressured or not connected, until
    /// `deadline`. Other errors return at once.
    pub fn offer_with(
        &mut self,
        message: &[u8],
        idle: &mut impl IdleStrategy,
        deadline: Instant,
    ) -> Result<i64, OfferError> {
        idle.reset();
        loop {
            match self.offer(message) {
                Err(e) if e.is_retryable() && Instant::now() < deadline => idle.idle(0),
                other => return other,
            }
        }
    }

    /// Admits an append of `len` bytes at the current position, or says why not.
    #[inline(always)]
    fn admit(&mut self, len: usize) -> Result<(), OfferError> {
        if self.appender.position() < self.flow.limit() {
            return Ok(());
        }
        self.admit_slow(len)
    }

    #[cold]
    fn admit_slow(&mut self, len: usize) -> Result<(), OfferError> {
        let position = self.appender.position();
        let framed = framed_length(len, self.appender.max_payload()) as i64;
        if position.saturating_add(framed) >= self.max_position {
            return Err(OfferError::MaxPositionExceeded);
        }
        if position < self.recompute_limit() {
            return Ok(());
        }
        if self.flow.connected() && self.sweep_due() && self.sweep() > 0 && position < self.recompute_limit()
        {
            return Ok(());
        }
        self.appender.log().bump_counter(meta::BACK_PRESSURE_EVENTS);
        Err(if self.flow.connected() { OfferError::BackPressured } else { OfferError::NotConnected })
    }

    fn recompute_limit(&mut self) -> i64 {
        let limit = self.flow.recompute(&self.readers.slots, self.session_id);
        let log = self.appender.log();
        log.set_counter(meta::PUBLISHER_LIMIT, limit);
        log.set_counter(meta::CONNECTED_READERS, self.flow.readers().count as i64);
        log.bump_counter(meta::LIMIT_RECOMPUTES);
        limit
    }

    fn sweep_due(&self) -> bool {
        self.last_sweep.is_none_or(|t| t.elapsed() >= self.liveness_interval)
    }

    /// Frees the slots of dead readers; returns how many.
    fn sweep(&mut self) -> usize {
        self.last_sweep = Some(Instant::now());
        let evicted = self.readers.evict_dead();
        if evicted > 0 {
            let log = self.appender.log();
            let total = log.counter(meta::READERS_EVICTED) + evicted as i64;
            log.set_counter(meta::READERS_EVICTED, total);
        }
        evicted
    }

    fn rotate(&mut self) -> Result<(), OfferError> {
        self.appender.rotate().map_err(|_| OfferError::MaxPositionExceeded)
    }

    #[inline(always)]
    fn abort_pending(&mut self) {
        if let Some(frame) = self.pending.take() {
            self.appender.abort(frame);
        }
    }

    /// Position after the last message appended.
    pub fn position(&self) -> i64 {
        self.appender.position()
    }

    /// The cached limit: offers starting below it are admitted without reading reader positions.
    pub fn limit(&self) -> i64 {
        self.flow.limit()
    }

    /// `true` if a live reader reads this session. Checks reader liveness (system calls): meant
    /// for setup and monitoring, not for every offer.
    pub fn is_connected(&mut self) -> bool {
        self.sweep();
        self.recompute_limit();
        self.flow.connected()
    }

    /// Waits until a reader joins this session (e.g. before the first offer), or `timeout` passes.
    pub fn wait_connected(&mut self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        let mut idle = super::idle::Backoff::default();
        while !self.is_connected() {
            if Instant::now() >= deadline {
                return Err(Error::Timeout);
            }
            idle.idle(0);
        }
        Ok(())
    }

    /// Largest message `offer` accepts: `min(term_length / 8, 16 MiB)`.
    pub fn max_message_len(&self) -> usize {
        self.max_message
    }

    /// Largest unfragmented message and largest claim: `mtu - 32`.
    pub fn max_payload_len(&self) -> usize {
        self.appender.max_payload()
    }

    /// Random id of this publication's session; a new publisher of the stream has a new one.
    pub fn session_id(&self) -> i32 {
        self.session_id
    }

    /// Term length of the log.
    pub fn term_length(&self) -> usize {
        self.appender.log().term_length()
    }

    /// Path of the log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Marks end of stream at the current position and removes the log file (unless kept).
    /// Subscribers read everything before it, then report `is_end_of_stream()`.
    pub fn close(self) {
        drop(self)
    }
}

impl Drop for Publication {
    fn drop(&mut self) {
        self.abort_pending();
        let position = self.appender.position();
        let log = self.appender.log();
        log.set_counter(meta::PUBLISHER_LIMIT, position);
        log.set_eos_position(position);
        if !self.keep_files {
            // Slot file first, while we still own the stream (see `ReadersFile::remove_if_unused`).
            self.readers.remove_if_unused();
            if is_same_file(&self.file, &self.path).unwrap_or(false) {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// A frame reserved by [`Publication::try_claim`], written in place.
///
/// Readers stop in front of it until it is committed; [`Claim::abort`] or dropping it turns it into
/// padding. If the guard is leaked (`mem::forget`), the publication's next operation aborts it, so a
/// forgotten claim never stalls readers for longer than the writer stays idle.
#[derive(Debug)]
pub struct Claim<'a> {
    publication: &'a mut Publication,
    frame: ClaimedFrame,
}

impl Claim<'_> {
    /// The payload bytes to fill (zeroed when the claim is made).
    pub fn buffer(&mut self) -> &mut [u8] {
        self.publication.appender.claim_slice(&self.frame)
    }

    /// Sets the frame's 8-byte reserved value (e.g. a timestamp), which readers see in the header.
    pub fn set_reserved_value(&mut self, value: i64) {
        self.publication.appender.set_claim_reserved_value(&self.frame, value);
    }

    /// Publishes the frame to readers. Returns the stream position after it.
    pub fn commit(self) -> i64 {
        let position = self.frame.position;
        self.publication.appender.commit(self.frame);
        self.publication.pending = None;
        std::mem::forget(self);
        position
    }

    /// Turns the frame into padding that readers skip.
    pub fn abort(self) {
        drop(self)
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.publication.abort_pending();
    }
}
