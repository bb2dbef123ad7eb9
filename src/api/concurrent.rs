//! Many writers of one stream: the files and lifecycle around the protocol's concurrent writer
//! (`stream::concurrent_writer`).

use super::claim::{sealed, ClaimGuard, ClaimSource};
use super::idle::IdleStrategy;
use super::publication::PublicationBuilder;
use crate::error::{Error, OfferError};
use crate::region::MmapRegion;
use crate::stream::concurrent_files::{self, WriterLog};
use crate::stream::concurrent_writer::ConcurrentWriter;
use crate::stream::doorbell::Rung;
use crate::stream::files::NewLog;
use crate::stream::liveness::{ConcurrentPaced, FileConcurrentWriter, LogWriters, Paced, SlotFile};
use crate::stream::slots::Slots;
use std::cell::Cell;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One of any number of writers, in any processes, of one stream: every offer goes into one log
/// in one order that every reader sees. Obtained from
/// [`PublicationBuilder::open_concurrent`](crate::PublicationBuilder::open_concurrent).
///
/// Writers reserve space with a compare-and-swap on the log's tail. A writer that dies between
/// its reservation and its commit is found dead by the kernel (its lock goes with it), and its
/// hole is padded within the liveness interval by a held-back writer or a waiting reader; a
/// writer that is alive but stopped is never passed over: its message arrives whole when it
/// resumes (see `docs/concurrent.md`).
///
/// `Send`, not `Sync`: one handle per thread. [`ConcurrentPublication::try_clone`] gives another
/// thread its own handle (each takes one of the log's 32 writer slots). The stream ends when the
/// last writer closes.
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<shmlog::ConcurrentPublication>(); // one handle per thread: use try_clone
/// ```
#[derive(Debug)]
pub struct ConcurrentPublication {
    writer: FileConcurrentWriter,
    settings: PublicationBuilder,
    path: PathBuf,
    slot: usize,
    session_id: i32,
    _not_sync: PhantomData<Cell<()>>,
}

impl PublicationBuilder {
    /// Joins the stream as one of any number of writers ([`ConcurrentPublication`]), creating
    /// its log if no writer has one. The log's geometry is its creator's: the term length, MTU
    /// and window set here apply only if this call creates it.
    ///
    /// Fails with [`Error::AlreadyExists`] if an exclusive [`crate::Publication`] owns the stream, and
    /// with [`Error::TooManyWriters`] if all 32 writer slots of the log are taken.
    pub fn open_concurrent(self) -> Result<ConcurrentPublication, Error> {
        ConcurrentPublication::open(self)
    }
}

impl ConcurrentPublication {
    /// Joins the stream's concurrent log, or creates it. The log's geometry is its creator's.
    pub(crate) fn open(settings: PublicationBuilder) -> Result<Self, Error> {
        crate::sys::barrier::asymmetric();
        let geometry = settings.geometry()?;
        let (name, mode, max_readers) = (settings.name(), settings.mode(), settings.reader_slots());
        let dir = crate::stream::prepare(name, settings.dir_setting(), mode, max_readers)?;
        let open_readers = || crate::stream::files::open_readers(&dir, name, max_readers, mode, true);
        let mut readers = open_readers()?;
        // The next session's number if we create the log; the counter is raised to it after (a
        // writer that joins an existing log finds its number already counted).
        let session_seq = readers.1.sessions().wrapping_add(1);
        let new_log =
            NewLog { dir: &dir, name, geometry, mode, concurrent: true, session_seq: &|| session_seq };
        let WriterLog { file, path, log, slot } = concurrent_files::open_concurrent(&new_log)?;
        if !readers.0.is_current().unwrap_or(false) {
            readers = open_readers()?;
        }
        readers.1.raise_sessions(log.session_seq());
        let (slot_file, slots): (SlotFile, Slots<MmapRegion>) = readers;
        let liveness = ConcurrentPaced {
            readers: Paced::new(slot_file, settings.liveness()),
            writers: LogWriters { file, own: Some(slot) },
        };
        let session_id = log.session_id();
        let mut writer = ConcurrentWriter::new(log, slot, slots, liveness).with_doorbell();
        // Readers a crash left behind would count as owed the session: sweep them now.
        writer.check_readers();
        Ok(Self { writer, settings, path, slot, session_id, _not_sync: PhantomData })
    }

    /// Another handle on the same stream, with its own writer slot: for another thread.
    pub fn try_clone(&self) -> Result<Self, Error> {
        Self::open(self.settings.clone())
    }

    /// Appends `message`. Returns the stream position after it.
    #[inline]
    pub fn offer(&mut self, message: &[u8]) -> Result<i64, OfferError> {
        self.writer.offer(message)
    }

    /// Appends one message gathered from several slices, in order.
    pub fn offer_vectored(&mut self, parts: &[&[u8]]) -> Result<i64, OfferError> {
        self.writer.offer_vectored(parts)
    }

    /// Reserves space for a message of `len` bytes (at most
    /// [`ConcurrentPublication::max_payload_len`]) to be written in place. Readers stop at it
    /// (other writers go on, a window past it at most) until it is committed; dropping the
    /// guard turns it into padding.
    pub fn try_claim(&mut self, len: usize) -> Result<ConcurrentClaim<'_>, OfferError> {
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
    /// writers' doorbell only when one sleeps; every sleeping writer wakes), at most `timeout` in
    /// all. Dead readers that hold it back are swept, and dead writers' holes padded, within the
    /// liveness interval. Other errors, `NotConnected` among them, return at once;
    /// `BackPressured` when `timeout` passes.
    pub fn offer_blocking(&mut self, message: &[u8], timeout: Duration) -> Result<i64, OfferError> {
        super::publish::offer_blocking(self, message, timeout)
    }

    /// The log's tail: the position after the last space any writer reserved.
    pub fn position(&self) -> i64 {
        self.writer.position()
    }

    /// This writer's cached limit.
    pub fn limit(&self) -> i64 {
        self.writer.limit()
    }

    /// How many live readers read this session (system calls: for setup and monitoring).
    pub fn connected_readers(&mut self) -> usize {
        let readers = self.writer.check_readers();
        readers.count + readers.untethered
    }

    /// `true` if a live reader reads this session.
    pub fn is_connected(&mut self) -> bool {
        self.connected_readers() > 0
    }

    /// Waits until a reader joins this session (e.g. before the first offer), or `timeout` passes
    /// ([`Error::Timeout`]).
    pub fn wait_connected(&mut self, timeout: Duration) -> Result<(), Error> {
        self.wait_for_readers(1, timeout)
    }

    /// Waits until at least `readers` live readers read this session, or `timeout` passes.
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

    /// Id of the session all the stream's writers share.
    pub fn session_id(&self) -> i32 {
        self.session_id
    }

    /// This handle's writer slot in the log (as `shmlog stat` lists it).
    pub fn writer_slot(&self) -> usize {
        self.slot
    }

    /// Term length of the log.
    pub fn term_length(&self) -> usize {
        self.writer.log().term_length()
    }

    /// Path of the log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Leaves the stream; the last writer to leave marks end of stream and removes the log
    /// (unless the files are kept).
    pub fn close(self) {
        drop(self)
    }
}

impl Drop for ConcurrentPublication {
    fn drop(&mut self) {
        self.writer.abort_claim();
        let liveness = self.writer.liveness();
        if !concurrent_files::leave(&liveness.writers.file, self.slot) {
            return;
        }
        // The last writer: nobody can join until our descriptor closes (we hold the write lock).
        let log = self.writer.log();
        let end = log.producer_position().unwrap_or(0);
        log.set_eos_position(end);
        self.writer.ring_readers_always();
        if !self.settings.keeps_files() {
            let (slots, slot_file) = (self.writer.slots(), &liveness.readers.slot_file);
            crate::stream::files::leave_session_files(
                log,
                &liveness.writers.file,
                &self.path,
                slots,
                slot_file,
            );
        }
    }
}

/// A frame reserved by [`ConcurrentPublication::try_claim`], written in place (see
/// [`ClaimGuard`]). Readers stop in front of it (other writers go on, a window past it at most)
/// until it is committed.
pub type ConcurrentClaim<'a> = ClaimGuard<'a, ConcurrentPublication>;

impl ClaimSource for ConcurrentPublication {}

impl sealed::Claims for ConcurrentPublication {
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

impl super::publish::sealed::Waits for ConcurrentPublication {
    fn wait_for_room(&mut self, timeout: Duration) -> Rung {
        self.writer.wait_for_room(timeout)
    }

    fn liveness_interval(&self) -> Duration {
        self.settings.liveness()
    }

    #[cfg(feature = "async")]
    fn has_room(&mut self) -> bool {
        self.writer.has_room()
    }

    #[cfg(feature = "async")]
    fn map_doorbell(&self) -> Result<crate::stream::doorbell::Doorbell<MmapRegion>, Error> {
        let slot_file = &self.writer.liveness().readers.slot_file;
        slot_file.map_doorbell().map_err(|e| Error::io("map doorbell", &slot_file.path, e))
    }
}
