//! The single writer of a stream: the builder, the files, and the lifecycle around the protocol's
//! writer (`stream::writer`).

use super::claim::{sealed, ClaimGuard, ClaimSource};
use super::defaults::{DEFAULT_LIVENESS_INTERVAL, DEFAULT_MAX_READERS, DEFAULT_TERM_LENGTH};
use super::idle::IdleStrategy;
use crate::error::{Error, OfferError};
use crate::layout::frame::max_message_len;
use crate::layout::log_meta::Geometry;
use crate::region::MmapRegion;
use crate::stream::doorbell::Rung;
use crate::stream::files::{self, OwnedLog};
use crate::stream::liveness::{FileWriter, Paced, SlotFile};
use crate::stream::slots::Slots;
use crate::stream::writer::Writer;
use std::cell::Cell;
use std::fs::File;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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

    /// Reader slots of the stream (default 128). The stream's reader-slot file is shared by
    /// every session and created by its first user; if live processes use one with fewer slots,
    /// `create` fails with [`Error::ReaderSlots`].
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

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn dir_setting(&self) -> Option<&PathBuf> {
        self.dir.as_ref()
    }

    pub(crate) fn mode(&self) -> u32 {
        self.file_mode
    }

    pub(crate) fn reader_slots(&self) -> usize {
        self.max_readers
    }

    pub(crate) fn liveness(&self) -> Duration {
        self.liveness_interval
    }

    pub(crate) fn keeps_files(&self) -> bool {
        self.keep_files
    }

    pub(crate) fn geometry(&self) -> Result<Geometry, Error> {
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
        crate::sys::barrier::asymmetric();
        let geometry = self.geometry()?;
        let dir = crate::stream::prepare(&self.name, self.dir.as_ref(), self.file_mode, self.max_readers)?;
        files::check_space_for_stream(&dir, &self.name, geometry, self.max_readers)?;
        let open_readers = || files::open_readers(&dir, &self.name, self.max_readers, self.file_mode, true);
        let mut readers = open_readers()?;
        let owned = files::create_log(&files::NewLog {
            dir: &dir,
            name: &self.name,
            geometry,
            mode: self.file_mode,
            concurrent: false,
            session_seq: &|| readers.1.next_session(),
        })?;
        // The slot file's last user may have removed it between our open and our publish.
        if !readers.0.is_current().unwrap_or(false) {
            readers = open_readers()?;
            readers.1.raise_sessions(owned.log.session_seq());
        }
        Publication::new(owned, readers, &self)
    }
}

/// The single writer of a stream: appends messages to the log that subscribers read in place.
///
/// `Send` but not `Sync` or `Clone`, and every method takes `&mut self`: single-writer by type,
/// with no lock on any path. The hot path (`offer`, `try_claim` + `commit`) allocates nothing and
/// makes no system call; it reads reader positions only when it reaches its cached limit, and
/// once per term.
///
/// Rotation to the next term happens inside the call that trips it (the message is then written
/// in the new term), so there is no `AdminAction` to retry. Closing consumes the publication, so
/// there is no `Closed` either.
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<shmlog::Publication>(); // one writer: a publication is not shared between threads
/// ```
#[derive(Debug)]
pub struct Publication {
    writer: FileWriter,
    /// Holds the publisher's lock for as long as the publication lives.
    file: File,
    path: PathBuf,
    session_id: i32,
    keep_files: bool,
    liveness_interval: Duration,
    _not_sync: PhantomData<Cell<()>>,
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

    fn new(
        owned: OwnedLog,
        readers: (SlotFile, Slots<MmapRegion>),
        b: &PublicationBuilder,
    ) -> Result<Self, Error> {
        let OwnedLog { file, path, log } = owned;
        let session_id = log.session_id();
        let (slot_file, slots) = readers;
        let liveness = Paced::new(slot_file, b.liveness_interval);
        let mut writer = Writer::new(log, slots, liveness).map_err(|e| e.at(&path))?.with_doorbell();
        // Readers the last session's crash left behind would count as owed this one: sweep them
        // now, so that only live readers are waited for.
        writer.check_readers();
        Ok(Self {
            writer,
            file,
            path,
            session_id,
            keep_files: b.keep_files,
            liveness_interval: b.liveness_interval,
            _not_sync: PhantomData,
        })
    }

    /// Appends `message`. Returns the stream position after it.
    #[inline]
    pub fn offer(&mut self, message: &[u8]) -> Result<i64, OfferError> {
        self.writer.offer(message)
    }

    /// Appends one message gathered from several slices, in order (e.g. a header and a body).
    pub fn offer_vectored(&mut self, parts: &[&[u8]]) -> Result<i64, OfferError> {
        self.writer.offer_vectored(parts)
    }

    /// Reserves space for a message of `len` bytes (at most [`Publication::max_payload_len`]) to
    /// be written in place. Commit it with [`Claim::commit`]; dropping or aborting it turns it into
    /// padding that readers skip.
    pub fn try_claim(&mut self, len: usize) -> Result<Claim<'_>, OfferError> {
        let position = self.writer.claim(len)?;
        Ok(ClaimGuard::new(self, position))
    }

    /// Offers `message`, idling with `idle` while back-pressured or not connected, until
    /// `deadline`. Other errors return at once.
    pub fn offer_with(
        &mut self,
        message: &[u8],
        idle: &mut impl IdleStrategy,
        deadline: Instant,
    ) -> Result<i64, OfferError> {
        super::idle::offer_retrying(|| self.offer(message), idle, deadline)
    }

    /// Offers `message`; while back-pressured, sleeps until a reader moves (readers ring the
    /// publisher's doorbell only when it sleeps), at most `timeout` in all. Dead readers that
    /// hold it back are swept within the liveness interval. Other errors, `NotConnected` among
    /// them, return at once; `BackPressured` when `timeout` passes.
    pub fn offer_blocking(&mut self, message: &[u8], timeout: Duration) -> Result<i64, OfferError> {
        super::publish::offer_blocking(self, message, timeout)
    }

    /// Position after the last message appended.
    pub fn position(&self) -> i64 {
        self.writer.position()
    }

    /// The cached limit: offers starting below it are admitted without reading reader positions.
    /// The publisher's position stays below it plus one message.
    pub fn limit(&self) -> i64 {
        self.writer.limit()
    }

    /// `true` if a live reader reads this session. Checks reader liveness (system calls): meant
    /// for setup and monitoring, not for every offer.
    pub fn is_connected(&mut self) -> bool {
        self.connected_readers() > 0
    }

    /// How many live readers read this session, tethered or not (system calls, as
    /// [`Publication::is_connected`]).
    pub fn connected_readers(&mut self) -> usize {
        let readers = self.writer.check_readers();
        readers.count + readers.untethered
    }

    /// Waits until a reader joins this session (e.g. before the first offer), or `timeout` passes.
    pub fn wait_connected(&mut self, timeout: Duration) -> Result<(), Error> {
        self.wait_for_readers(1, timeout)
    }

    /// Waits until at least `readers` live readers read this session, or `timeout` passes
    /// ([`Error::Timeout`]): e.g. before a test or a fan-out starts.
    pub fn wait_for_readers(&mut self, readers: usize, timeout: Duration) -> Result<(), Error> {
        super::idle::wait_for_count(|| self.connected_readers(), readers, timeout)
    }

    /// Largest message `offer` accepts: `min(term_length / 8, 16 MiB)`.
    pub fn max_message_len(&self) -> usize {
        self.writer.max_message_len()
    }

    /// Largest unfragmented message and largest claim: `mtu - 32`.
    pub fn max_payload_len(&self) -> usize {
        self.writer.max_payload_len()
    }

    /// Random id of this publication's session; a new publisher of the stream has a new one.
    pub fn session_id(&self) -> i32 {
        self.session_id
    }

    /// Term length of the log.
    pub fn term_length(&self) -> usize {
        self.writer.log().term_length()
    }

    /// Path of the log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Marks end of stream at the current position and removes the log file (unless kept, or
    /// a live subscriber waits for a session or still reads an earlier one: it owes this one,
    /// so the log stays until the stream's last user leaves). Subscribers read everything
    /// before the end, then report `is_end_of_stream()`.
    pub fn close(self) {
        drop(self)
    }
}

/// A frame reserved by [`Publication::try_claim`], written in place (see [`ClaimGuard`]).
pub type Claim<'a> = ClaimGuard<'a, Publication>;

impl ClaimSource for Publication {}

impl sealed::Claims for Publication {
    #[inline]
    fn claim_buffer(&mut self) -> &mut [u8] {
        self.writer.claim_buffer()
    }

    #[inline]
    fn commit_claim(&mut self) -> Option<i64> {
        self.writer.commit_claim()
    }

    #[inline]
    fn abort_claim(&mut self) {
        self.writer.abort_claim()
    }
}

impl super::publish::sealed::Waits for Publication {
    fn wait_for_room(&mut self, timeout: Duration) -> Rung {
        self.writer.wait_for_room(timeout)
    }

    fn liveness_interval(&self) -> Duration {
        self.liveness_interval
    }

    #[cfg(feature = "async")]
    fn has_room(&mut self) -> bool {
        self.writer.has_room()
    }

    #[cfg(feature = "async")]
    fn map_doorbell(&self) -> Result<crate::stream::doorbell::Doorbell<MmapRegion>, Error> {
        let slot_file = &self.writer.liveness().slot_file;
        slot_file.map_doorbell().map_err(|e| Error::io("map doorbell", &slot_file.path, e))
    }
}

impl Claim<'_> {
    /// Sets the frame's 8-byte reserved value (e.g. a timestamp), which readers see in the header.
    pub fn set_reserved_value(&mut self, value: i64) {
        self.publication().writer.set_claim_reserved_value(value);
    }
}

impl Drop for Publication {
    fn drop(&mut self) {
        self.writer.close();
        if !self.keep_files {
            let w = &self.writer;
            files::leave_session_files(w.log(), &self.file, &self.path, w.slots(), &w.liveness().slot_file);
        }
    }
}
