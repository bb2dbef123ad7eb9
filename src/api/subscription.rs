//! A reader of a stream, in any process, reading the log in place.

use super::handler::{ControlledFragmentHandler, FragmentHandler};
use super::idle::{Backoff, IdleStrategy};
use crate::error::Error;
use crate::log::reader::{self, Cursor, Scan};
use crate::log::Log;
use crate::region::ReadOnlyRegion;
use crate::stream::files::{self, ReadLog, ReadersFile};
use crate::stream::join::{self, JoinRefused, JoinRule};
use crate::stream::name;
use crate::sys::fs::is_same_file;
use crate::Action;
use std::cell::Cell;
use std::fs::File;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where a subscription starts reading a session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JoinAt {
    /// At the slowest live reader of the session, or at the publisher's position if there is
    /// none (Aeron's rule): a new reader sees everything not yet passed by every other reader.
    #[default]
    Slowest,
    /// At the publisher's current position: only messages offered from now on.
    Latest,
    /// At an exact position returned by this crate (a message boundary) that the log still
    /// holds (at most one term behind the publisher); applies to the first session joined.
    Position(i64),
}

/// Settings for a new subscription. Obtained from [`Subscription::builder`].
#[derive(Clone, Debug)]
pub struct SubscriptionBuilder {
    name: String,
    dir: Option<PathBuf>,
    join: JoinAt,
    max_readers: usize,
    file_mode: u32,
    liveness_interval: Duration,
    wait: Option<Duration>,
}

impl SubscriptionBuilder {
    /// Directory of the stream's files (default: [`crate::default_dir`]).
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Where to start reading (default [`JoinAt::Slowest`]).
    pub fn join_at(mut self, join: JoinAt) -> Self {
        self.join = join;
        self
    }

    /// Reader slots if this subscription creates the stream's reader-slot file (default 128).
    pub fn max_readers(mut self, n: usize) -> Self {
        self.max_readers = n;
        self
    }

    /// Permission bits of files this subscription creates (default `0o600`).
    pub fn file_mode(mut self, mode: u32) -> Self {
        self.file_mode = mode;
        self
    }

    /// How often, at most, an idle subscription checks that its publisher lives and looks for a
    /// new session (default 100 ms).
    pub fn liveness_interval(mut self, interval: Duration) -> Self {
        self.liveness_interval = interval;
        self
    }

    /// Makes `open` wait up to `timeout` for a live publisher, failing with [`Error::Timeout`].
    pub fn wait_for_publisher(mut self, timeout: Duration) -> Self {
        self.wait = Some(timeout);
        self
    }

    /// Takes a reader slot and joins the stream's current session, if a live publisher has one.
    ///
    /// Without a publisher the subscription still opens (unless `wait_for_publisher` was set) and
    /// joins the first session that appears; until then it polls nothing and is not connected.
    pub fn open(self) -> Result<Subscription, Error> {
        let dir = crate::stream::prepare(&self.name, self.dir.as_ref(), self.file_mode, self.max_readers)?;
        let (readers, slot) = claim_slot(&dir, &self)?;
        let mut sub = Subscription {
            log_path: name::log_path(&dir, &self.name),
            readers,
            slot,
            session: None,
            next_join: self.join,
            idle_polls: 0,
            next_check: Instant::now(),
            liveness_interval: self.liveness_interval,
            fault: None,
            _not_sync: PhantomData,
        };
        sub.try_join()?;
        if let Some(timeout) = self.wait {
            sub.wait_connected(timeout)?;
        }
        Ok(sub)
    }
}

/// Opens (or creates) the slot file and claims a slot, reopening if the file is being removed.
fn claim_slot(dir: &std::path::Path, b: &SubscriptionBuilder) -> Result<(ReadersFile, usize), Error> {
    let mut full = 0;
    for _ in 0..64 {
        let readers = files::open_readers(dir, &b.name, b.max_readers, b.file_mode)?;
        if let Some(slot) = readers.claim_slot()? {
            return Ok((readers, slot));
        }
        if is_same_file(&readers.file, &readers.path).unwrap_or(false) {
            // Every slot was locked: by live readers, or for an instant by a closing publisher or
            // `inspect::clean`, which lock them all while they remove an unused file. Look again
            // a few times before calling the table full.
            full += 1;
            if full == 8 {
                return Err(Error::TooManyReaders {
                    path: readers.path.clone(),
                    slots: readers.slots.count(),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Err(Error::io("claim reader slot", dir, std::io::Error::other("the slot file kept changing")))
}

/// The session a subscription reads.
#[derive(Debug)]
struct Session {
    /// Holds our reader lock on the log for as long as we map it.
    file: File,
    log: Log<ReadOnlyRegion>,
    /// Our position in the log.
    cursor: Cursor,
    join_position: i64,
    publisher_alive: bool,
}

/// A reader of a stream: maps the publisher's log read-only and reads it in place.
///
/// `Send`, not `Sync`: one thread polls it at a time (`&mut self`). Its position lives in a slot of
/// the stream's reader-slot file, where the publisher reads it for flow control. When the
/// publisher closes (end of stream) or dies, the subscription reads what was committed, then
/// joins the next session a new publisher creates under the same name.
#[derive(Debug)]
pub struct Subscription {
    log_path: PathBuf,
    readers: ReadersFile,
    slot: usize,
    session: Option<Session>,
    next_join: JoinAt,
    idle_polls: u32,
    next_check: Instant,
    liveness_interval: Duration,
    fault: Option<&'static str>,
    _not_sync: PhantomData<Cell<()>>,
}

impl Subscription {
    /// Starts building a subscription to stream `name`.
    pub fn builder(name: impl Into<String>) -> SubscriptionBuilder {
        SubscriptionBuilder {
            name: name.into(),
            dir: None,
            join: JoinAt::Slowest,
            max_readers: crate::api::publication::DEFAULT_MAX_READERS,
            file_mode: 0o600,
            liveness_interval: crate::api::publication::DEFAULT_LIVENESS_INTERVAL,
            wait: None,
        }
    }

    /// Delivers up to `fragment_limit` fragments to `handler`; returns how many. Wrap the handler
    /// in a [`crate::FragmentAssembler`] to receive fragmented messages whole.
    ///
    /// Allocation-free and system-call-free while there are messages; every 64 empty polls it
    /// reads the clock, and every liveness interval it checks the publisher.
    #[inline]
    pub fn poll(&mut self, mut handler: impl FragmentHandler, fragment_limit: usize) -> usize {
        let Some(s) = self.session.as_ref() else {
            self.idle_tick();
            return 0;
        };
        let scan = reader::read_at(
            &s.log,
            &s.cursor,
            fragment_limit,
            |payload, header| {
                handler.on_fragment(payload, header);
                Action::Continue
            },
            |_| {},
        );
        self.finish(scan)
    }

    /// Like [`Subscription::poll`], but the handler steers with an [`Action`]: `Abort` leaves the
    /// fragment for the next poll, `Break` stops after it, `Commit` publishes the position at once.
    pub fn controlled_poll(
        &mut self,
        mut handler: impl ControlledFragmentHandler,
        fragment_limit: usize,
    ) -> usize {
        let Some(s) = self.session.as_ref() else {
            self.idle_tick();
            return 0;
        };
        let (slots, slot) = (&self.readers.slots, self.slot);
        let scan = reader::read_at(
            &s.log,
            &s.cursor,
            fragment_limit,
            |payload, header| handler.on_fragment(payload, header),
            |position| slots.set_position(slot, position),
        );
        self.finish(scan)
    }

    /// Hands `handler` one block of raw committed frames (32-byte headers included), at most
    /// `max_bytes` long unless a single frame is longer, with the stream position of its first
    /// byte: for recording or forwarding without per-message work. Returns the bytes consumed.
    pub fn block_poll(&mut self, handler: impl FnOnce(&[u8], i64), max_bytes: usize) -> usize {
        let Some(s) = self.session.as_ref() else {
            self.idle_tick();
            return 0;
        };
        let scan = reader::read_block(&s.log, s.cursor.position(), max_bytes, handler);
        let consumed = scan.fragments;
        self.finish(Scan { fragments: 0, ..scan });
        consumed
    }

    #[inline(always)]
    fn finish(&mut self, scan: Scan) -> usize {
        let s = self.session.as_mut().expect("finish follows a read of the session");
        if scan.position != s.cursor.position() {
            s.cursor.move_to(&s.log, scan.position);
            self.readers.slots.set_position(self.slot, scan.position);
        } else if scan.fragments == 0 {
            if scan.fault.is_some() {
                self.fault = scan.fault;
            }
            self.idle_tick();
        }
        scan.fragments
    }

    /// Counts an empty poll; now and then, checks the publisher and looks for a new session.
    #[inline(always)]
    fn idle_tick(&mut self) {
        self.idle_polls = self.idle_polls.wrapping_add(1);
        if self.idle_polls % 64 == 0 {
            self.maybe_check();
        }
    }

    #[cold]
    fn maybe_check(&mut self) {
        let now = Instant::now();
        if now >= self.next_check {
            self.next_check = now + self.liveness_interval;
            let _ = self.check();
        }
    }

    /// Updates the publisher's liveness; when our session is over (end of stream, or a dead
    /// publisher and nothing left to read), joins a newer session if there is one.
    fn check(&mut self) -> Result<(), Error> {
        if let Some(s) = self.session.as_mut() {
            let ended = s.cursor.position() >= s.log.eos_position();
            s.publisher_alive = !ended && files::publisher_alive(&s.file);
            if s.publisher_alive || is_same_file(&s.file, &self.log_path).unwrap_or(false) {
                return Ok(());
            }
        }
        self.try_join()
    }

    /// Joins the stream's current session if a live publisher has one that we do not read yet.
    fn try_join(&mut self) -> Result<(), Error> {
        let Some(next) = files::open_log(&self.log_path)? else { return Ok(()) };
        if !files::publisher_alive(&next.file) {
            return Ok(()); // a dead publisher's leftover: wait for a live one
        }
        if let Some(s) = &self.session {
            if s.log.session_id() == next.log.session_id() {
                return Ok(());
            }
        }
        let join = std::mem::replace(&mut self.next_join, JoinAt::Slowest);
        match self.join(next, join) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.next_join = join;
                Err(e)
            }
        }
    }

    /// Publishes our slot at a join position, then confirms the position is still readable (I5):
    /// `stream::join::join`, the code the loom models check.
    fn join(&mut self, next: ReadLog, rule: JoinAt) -> Result<(), Error> {
        let rule = match rule {
            JoinAt::Slowest => JoinRule::Slowest,
            JoinAt::Latest => JoinRule::Latest,
            JoinAt::Position(p) => JoinRule::Position(p),
        };
        match join::join(&next.log, &self.readers.slots, self.slot, rule) {
            Ok(position) => {
                self.session = Some(Session {
                    file: next.file,
                    cursor: Cursor::new(&next.log, position),
                    log: next.log,
                    join_position: position,
                    publisher_alive: true,
                });
                self.fault = None;
                Ok(())
            }
            Err(JoinRefused::NotAvailable { requested, oldest, newest }) => {
                Err(Error::PositionNotAvailable { requested, oldest, newest })
            }
            Err(JoinRefused::Corrupt(e)) => Err(e.at(&self.log_path)),
            Err(JoinRefused::GaveUp) => Err(Error::Corrupt {
                path: self.log_path.clone(),
                what: "could not find a joinable position",
            }),
        }
    }

    /// Waits until connected to a live publisher's session, or `timeout` passes.
    pub fn wait_connected(&mut self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        let mut idle = Backoff::default();
        loop {
            if self.is_connected() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout);
            }
            self.try_join()?;
            idle.idle(0);
        }
    }

    /// `true` while reading a session whose publisher is alive and has not closed. Checks the
    /// publisher's lock (a system call) each time.
    pub fn is_connected(&mut self) -> bool {
        match self.session.as_mut() {
            Some(s) => {
                s.publisher_alive = s.log.eos_position() == i64::MAX && files::publisher_alive(&s.file);
                s.publisher_alive
            }
            None => false,
        }
    }

    /// `true` once every message before the publisher's close has been read.
    pub fn is_end_of_stream(&self) -> bool {
        self.session.as_ref().is_some_and(|s| s.cursor.position() >= s.log.eos_position())
    }

    /// Position after the last fragment consumed (0 before joining a session).
    pub fn position(&self) -> i64 {
        self.session.as_ref().map_or(0, |s| s.cursor.position())
    }

    /// Where this subscription joined its current session.
    pub fn join_position(&self) -> Option<i64> {
        self.session.as_ref().map(|s| s.join_position)
    }

    /// Session id of the session being read.
    pub fn session_id(&self) -> Option<i32> {
        self.session.as_ref().map(|s| s.log.session_id())
    }

    /// Why reading stopped, if the log holds a frame that failed validation (corrupt or foreign
    /// data). The subscription never reads past such a frame.
    pub fn fault(&self) -> Option<&'static str> {
        self.fault
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.readers.release_slot(self.slot);
    }
}
