//! A reader of a stream, in any process, reading the log in place: the builder, the files, and
//! the switching between sessions around the protocol's reader (`stream::reader`).

use super::defaults::{DEFAULT_LIVENESS_INTERVAL, DEFAULT_MAX_READERS};
use super::handler::{ControlledFragmentHandler, FragmentHandler};
use super::idle::{Backoff, IdleStrategy};
use crate::error::Error;
use crate::log::header::Header;
use crate::log::Log;
use crate::region::{MmapRegion, ReadOnlyRegion};
use crate::stream::concurrent_files;
use crate::stream::concurrent_writer;
use crate::stream::doorbell::Rung;
use crate::stream::files::{self, Found};
use crate::stream::join::{JoinAt, JoinRefused};
use crate::stream::liveness::{publisher_alive, LogWriters, SlotFile};
use crate::stream::name;
use crate::stream::reader::Reader;
use crate::stream::slots::{SlotMut, Slots};
use std::cell::Cell;
use std::fs::File;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    copy_payloads: bool,
    spin: Duration,
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

    /// Reader slots if this subscription creates the stream's reader-slot file (default 128;
    /// an existing file keeps its own count). Give every participant of a stream the same value.
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

    /// Copies every payload out of the log into a buffer of the subscription's before the handler
    /// sees it (default: off, handlers get a slice of the log itself).
    ///
    /// Zero-copy delivery is sound while every process that can write the log keeps to the
    /// protocol. A buggy or hostile process of the same user that writes a frame while a handler
    /// holds it can make the handler see bytes change under it, which safe Rust assumes never
    /// happens (for example a length checked once and read again). With copies, a handler only
    /// ever sees a private buffer: such a peer can corrupt messages, but not this process's
    /// memory safety. Costs one copy per fragment.
    pub fn copy_payloads(mut self, copy: bool) -> Self {
        self.copy_payloads = copy;
        self
    }

    /// How long the blocking calls ([`Subscription::poll_blocking`], [`Subscription::wait_readable`])
    /// poll before they sleep in the kernel (default: zero, sleep at once). Spinning catches the
    /// next message of a burst a wake-up sooner, at the cost of a core while it spins.
    pub fn spin_before_sleep(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// Takes a reader slot and joins the stream's current session, if a live publisher has one.
    ///
    /// Without a publisher the subscription still opens (unless `wait_for_publisher` was set) and
    /// joins the first session that appears; until then it polls nothing and is not connected.
    pub fn open(self) -> Result<Subscription, Error> {
        let dir = crate::stream::prepare(&self.name, self.dir.as_ref(), self.file_mode, self.max_readers)?;
        let (slot_file, slots, slot) = claim_slot(&dir, &self)?;
        let mut sub = Subscription {
            log_path: name::log_path(&dir, &self.name),
            slot_file,
            slots,
            state: State::Waiting(slot),
            next_join: self.join,
            copy_payloads: self.copy_payloads,
            spin: self.spin,
            idle_polls: 0,
            next_check: Instant::now(),
            liveness_interval: self.liveness_interval,
            ended: None,
            _not_sync: PhantomData,
        };
        sub.try_join()?;
        if let Some(timeout) = self.wait {
            sub.wait_connected(timeout)?;
        }
        Ok(sub)
    }
}

type Table = Slots<ReadOnlyRegion>;
type OwnSlot = SlotMut<MmapRegion>;

/// Opens (or creates) the slot file and claims a slot, reopening if the file is being removed.
fn claim_slot(dir: &Path, b: &SubscriptionBuilder) -> Result<(SlotFile, Table, OwnSlot), Error> {
    let mut full = 0;
    for _ in 0..64 {
        let (slot_file, slots) = files::open_readers(dir, &b.name, b.max_readers, b.file_mode, false)?;
        if let Some(slot) = slot_file.claim(&slots)? {
            return Ok((slot_file, slots, slot));
        }
        if slot_file.is_current().unwrap_or(false) {
            // Every slot was locked: by live readers, or for an instant by a process removing the
            // file, which locks it all. Look again a few times before calling the table full.
            full += 1;
            if full == 8 {
                return Err(Error::TooManyReaders { path: slot_file.path.clone(), slots: slots.count() });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Err(Error::io("claim reader slot", dir, std::io::Error::other("the slot file kept changing")))
}

/// Where a subscription stands.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // the large variant is the usual one: boxing it would add a load to every poll
enum State {
    /// Holds a slot, reads no session (no live publisher yet, or a join was refused).
    Waiting(OwnSlot),
    /// Reads a session.
    Reading(Session),
    /// Between the two, only inside a method.
    Switching,
}

/// The session a subscription reads.
#[derive(Debug)]
struct Session {
    /// Holds our reader lock on the log for as long as we map it.
    file: File,
    reader: Reader<ReadOnlyRegion, MmapRegion>,
    /// The publisher's liveness at the last check.
    publisher_alive: bool,
    /// A concurrent log mapped read-write, opened the first time a dead writer's hole may hold
    /// us (see `log::unblock`).
    unblocker: Option<(LogWriters, Log<MmapRegion>)>,
}

impl Session {
    /// Pads the holes of the log's dead writers, if any (a concurrent log whose writer may have
    /// died with a frame reserved, or whose writers are all gone).
    fn unblock(&mut self, path: &Path) {
        if self.unblocker.is_none() {
            if let Ok(Some((file, log))) = concurrent_files::open_for_unblock(path, &self.file) {
                self.unblocker = Some((LogWriters { file, own: None }, log));
            }
        }
        if let Some((writers, log)) = &self.unblocker {
            concurrent_writer::unblock(log, writers);
        }
    }
}

/// A reader of a stream: maps the publisher's log read-only and reads it in place.
///
/// `Send`, not `Sync`: one thread polls it at a time (`&mut self`). Its position lives in a slot of
/// the stream's reader-slot file, where the publisher reads it for flow control. When the
/// publisher closes (end of stream) or dies, the subscription reads what was committed, then
/// joins the next session a new publisher creates under the same name.
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<shmlog::Subscription>(); // polled by one thread at a time
/// ```
#[derive(Debug)]
pub struct Subscription {
    log_path: PathBuf,
    slot_file: SlotFile,
    slots: Table,
    state: State,
    next_join: JoinAt,
    copy_payloads: bool,
    spin: Duration,
    idle_polls: u32,
    next_check: Instant,
    liveness_interval: Duration,
    /// How the last session this subscription left ended (for a recorder closing its recording).
    ended: Option<Ended>,
    _not_sync: PhantomData<Cell<()>>,
}

/// A session a subscription left: which, and whether its publisher had closed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ended {
    pub session_id: i32,
    pub end_of_stream: bool,
}

impl Subscription {
    /// Starts building a subscription to stream `name`.
    pub fn builder(name: impl Into<String>) -> SubscriptionBuilder {
        SubscriptionBuilder {
            name: name.into(),
            dir: None,
            join: JoinAt::Slowest,
            max_readers: DEFAULT_MAX_READERS,
            file_mode: 0o600,
            liveness_interval: DEFAULT_LIVENESS_INTERVAL,
            wait: None,
            copy_payloads: false,
            spin: Duration::ZERO,
        }
    }

    /// Delivers up to `fragment_limit` fragments to `handler`; returns how many. Wrap the handler
    /// in a [`crate::FragmentAssembler`] to receive fragmented messages whole.
    ///
    /// Allocation-free and system-call-free while there are messages; every 64 empty polls it
    /// reads the clock, and every liveness interval it checks the publisher.
    #[inline]
    pub fn poll(&mut self, mut handler: impl FragmentHandler, fragment_limit: usize) -> usize {
        let State::Reading(s) = &mut self.state else {
            self.idle_tick();
            return 0;
        };
        let n = s.reader.poll(|payload, header| handler.on_fragment(payload, header), fragment_limit);
        if n == 0 {
            self.idle_tick();
        }
        n
    }

    /// Like [`Subscription::poll`], but the handler steers with an [`crate::Action`]: `Abort`
    /// leaves the fragment for the next poll, `Break` stops after it, `Commit` publishes the
    /// position at once.
    pub fn controlled_poll(
        &mut self,
        mut handler: impl ControlledFragmentHandler,
        fragment_limit: usize,
    ) -> usize {
        let State::Reading(s) = &mut self.state else {
            self.idle_tick();
            return 0;
        };
        let n =
            s.reader.controlled_poll(|payload, header| handler.on_fragment(payload, header), fragment_limit);
        if n == 0 {
            self.idle_tick();
        }
        n
    }

    /// Hands `handler` one block of raw committed frames (32-byte headers included), at most
    /// `max_bytes` long unless a single frame is longer, with the stream position of its first
    /// byte: for recording or forwarding without per-message work. Returns the bytes consumed.
    pub fn block_poll(&mut self, handler: impl FnOnce(&[u8], i64), max_bytes: usize) -> usize {
        let State::Reading(s) = &mut self.state else {
            self.idle_tick();
            return 0;
        };
        let n = s.reader.block_poll(handler, max_bytes);
        if n == 0 {
            self.idle_tick();
        }
        n
    }

    /// Like [`Subscription::poll`], but when nothing is there, sleeps until something is (a
    /// message, the end of the stream, a closed session) or `timeout` passes, and polls again.
    /// Returns the fragments delivered: 0 on timeout and once the session is closed (see
    /// [`Subscription::is_closed`]).
    ///
    /// The sleep costs no CPU: the subscription waits on the stream's doorbell, a futex the
    /// publisher rings after a commit only when some reader sleeps (see `docs/tuning.md`).
    pub fn poll_blocking(
        &mut self,
        mut handler: impl FragmentHandler,
        fragment_limit: usize,
        timeout: Duration,
    ) -> usize {
        let n = self.poll(|p: &[u8], h: &Header| handler.on_fragment(p, h), fragment_limit);
        if n > 0 || !self.wait_readable(timeout) {
            return n;
        }
        self.poll(handler, fragment_limit)
    }

    /// Waits until a poll would find something (a message, the end of the stream, a fault) or
    /// the session is closed: `true`; or until `timeout` passes: `false`. Spins first for the
    /// builder's [`SubscriptionBuilder::spin_before_sleep`], then sleeps in the kernel; checks
    /// the publisher's liveness every liveness interval meanwhile, and joins a new session when
    /// one starts.
    pub fn wait_readable(&mut self, timeout: Duration) -> bool {
        let start = Instant::now();
        let deadline = start.checked_add(timeout);
        if !self.spin.is_zero() {
            let spin_end = start + self.spin.min(timeout);
            loop {
                if self.has_news() || self.is_closed() {
                    return true;
                }
                if Instant::now() >= spin_end {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        loop {
            if self.has_news() || self.is_closed() {
                return true;
            }
            let now = Instant::now();
            if now >= self.next_check {
                // Before the timeout: a zero timeout still learns that a publisher died.
                self.next_check = now + self.liveness_interval;
                let _ = self.check();
                if self.has_news() || self.is_closed() {
                    return true;
                }
            }
            let remaining = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
            if remaining.is_zero() {
                return false;
            }
            let chunk = remaining.min(self.next_check - now);
            let rung = match &self.state {
                State::Reading(s) => s.reader.wait_for_news(chunk),
                _ => self.bell().map_or(Rung::TimedOut, |bell| bell.wait_for_writer(|| false, chunk)),
            };
            if rung == Rung::Woken && !self.has_news() {
                // Rung without news for us: a new session, or a sleeper's spurious wake-up.
                self.next_check = Instant::now();
            }
        }
    }

    /// Waits until one of `subscriptions` is readable (see [`Subscription::wait_readable`]) or
    /// `timeout` passes; `true` if one is. One thread, several streams, no spinning: it sleeps
    /// on all their doorbells at once (`futex_waitv`, Linux 5.16 and later; on older kernels it
    /// sleeps on the first and looks at the others every millisecond; so it does beyond 127
    /// streams, `futex_waitv`'s limit).
    pub fn wait_any(subscriptions: &mut [&mut Subscription], timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if subscriptions.iter().any(|s| s.has_news() || s.is_closed()) {
                return true;
            }
            let now = Instant::now();
            let remaining = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
            if remaining.is_zero() {
                return false;
            }
            let mut chunk = remaining;
            for s in subscriptions.iter_mut() {
                if now >= s.next_check {
                    s.next_check = now + s.liveness_interval;
                    let _ = s.check();
                }
                chunk = chunk.min(s.next_check.saturating_duration_since(now));
            }
            let bells: Vec<_> =
                subscriptions.iter().filter_map(|s| s.bell()).map(|b| b.arm_for_writer()).collect();
            if !crate::sync::heavy_barrier() {
                chunk = chunk.min(Duration::from_millis(1));
            }
            if subscriptions.iter().any(|s| s.has_news() || s.is_closed()) {
                return true;
            }
            if crate::region::wait_any_i32(&bells, chunk).is_err() {
                // No futex_waitv: the first bell, briefly.
                if let Some(&(region, off, seen)) = bells.first() {
                    crate::region::RegionMut::wait_i32(
                        region,
                        off,
                        seen,
                        chunk.min(Duration::from_millis(1)),
                    );
                }
            }
        }
    }

    /// The stream's doorbell, through our slot.
    fn bell(&self) -> Option<&crate::stream::doorbell::Doorbell<MmapRegion>> {
        match &self.state {
            State::Reading(s) => s.reader.bell(),
            State::Waiting(slot) => slot.bell(),
            State::Switching => None,
        }
    }

    /// `true` if a poll now would deliver or report something, or the session is closed.
    #[cfg(feature = "async")]
    pub(crate) fn readable_now(&self) -> bool {
        self.has_news() || self.is_closed()
    }

    #[cfg(feature = "async")]
    pub(crate) fn liveness_interval(&self) -> Duration {
        self.liveness_interval
    }

    /// The stream's doorbell page, mapped on its own (for a thread that sleeps for us).
    #[cfg(feature = "async")]
    pub(crate) fn map_doorbell(&self) -> Result<crate::stream::doorbell::Doorbell<MmapRegion>, Error> {
        self.slot_file.map_doorbell().map_err(|e| Error::io("map doorbell", &self.slot_file.path, e))
    }

    /// `true` if a poll now would find something to deliver or report.
    fn has_news(&self) -> bool {
        matches!(&self.state, State::Reading(s) if s.reader.has_news())
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

    /// Updates the publisher's liveness and checks the reader's bounds; when the session is over
    /// (end of stream, or a dead publisher and nothing committed left to read), joins a newer
    /// session if there is one.
    fn check(&mut self) -> Result<(), Error> {
        if let State::Reading(s) = &mut self.state {
            s.reader.idle_check();
            s.publisher_alive = !s.reader.at_end_of_stream() && publisher_alive(&s.file);
            let concurrent = s.reader.log().is_concurrent();
            if concurrent && !s.reader.at_end_of_stream() && (s.reader.held() || !s.publisher_alive) {
                s.unblock(&self.log_path);
            }
            // Never leave committed messages of a dead session behind (an `Abort`, or a poll of
            // zero fragments, also lands here).
            if s.publisher_alive || !s.reader.drained() {
                return Ok(());
            }
        }
        self.try_join()
    }

    /// Joins the stream's current session if a live publisher has one that we do not read yet.
    fn try_join(&mut self) -> Result<(), Error> {
        let current = match &self.state {
            State::Reading(s) => Some(&s.file),
            _ => None,
        };
        let Found::Live(next) = files::open_log(&self.log_path, current)? else { return Ok(()) };
        let slot = self.leave_session();
        let rule = std::mem::replace(&mut self.next_join, JoinAt::Slowest);
        match Reader::join(next.log, &self.slots, slot, rule, self.copy_payloads) {
            Ok(reader) => {
                self.state = State::Reading(Session {
                    file: next.file,
                    reader,
                    publisher_alive: true,
                    unblocker: None,
                });
                Ok(())
            }
            Err((slot, refused)) => {
                self.state = State::Waiting(slot);
                self.next_join = rule;
                Err(match refused {
                    JoinRefused::NotAvailable { requested, oldest, newest, nearest } => {
                        Error::PositionNotAvailable { requested, oldest, newest, nearest }
                    }
                    JoinRefused::Corrupt(e) => e.at(&self.log_path),
                    JoinRefused::GaveUp => Error::Corrupt {
                        path: self.log_path.clone(),
                        what: "could not find a joinable position",
                    },
                })
            }
        }
    }

    /// Leaves the session being read (noting how it ended); returns the slot.
    fn leave_session(&mut self) -> OwnSlot {
        match std::mem::replace(&mut self.state, State::Switching) {
            State::Waiting(slot) => slot,
            State::Reading(s) => {
                self.ended = Some(Ended {
                    session_id: s.reader.log().session_id(),
                    end_of_stream: s.reader.at_end_of_stream(),
                });
                s.reader.leave()
            }
            State::Switching => unreachable!("only inside a method"),
        }
    }

    /// How the last session left ended, once.
    pub(crate) fn take_ended(&mut self) -> Option<Ended> {
        self.ended.take()
    }

    /// The log of the session being read.
    pub(crate) fn log(&self) -> Option<&crate::log::Log<ReadOnlyRegion>> {
        match &self.state {
            State::Reading(s) => Some(s.reader.log()),
            _ => None,
        }
    }

    /// Leaves the session and joins the stream again at its publisher's position: a reader that
    /// would rather lose messages than hold the publisher back (an untethered recorder).
    pub(crate) fn skip_to_latest(&mut self) -> Result<(), Error> {
        let slot = self.leave_session();
        self.state = State::Waiting(slot);
        self.next_join = JoinAt::Latest;
        self.try_join()
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
            self.check()?;
            idle.idle(0);
        }
    }

    /// `true` while reading a session whose publisher is alive and has not closed. Checks the
    /// publisher's lock (a system call) each time.
    pub fn is_connected(&mut self) -> bool {
        match &mut self.state {
            State::Reading(s) => {
                s.publisher_alive = s.reader.log().eos_position() == i64::MAX && publisher_alive(&s.file);
                s.publisher_alive
            }
            _ => false,
        }
    }

    /// `true` once every message before the publisher's close has been read.
    pub fn is_end_of_stream(&self) -> bool {
        matches!(&self.state, State::Reading(s) if s.reader.at_end_of_stream())
    }

    /// `true` when the session being read is over and everything it committed was read: its
    /// publisher closed it (end of stream) or died. The one test for "no more messages are coming"
    /// in a read loop. Polls learn that a publisher died within the liveness interval; they also
    /// keep looking for a new publisher, whose session is joined by itself (and this is `false`
    /// again).
    pub fn is_closed(&self) -> bool {
        match &self.state {
            State::Reading(s) => s.reader.at_end_of_stream() || (!s.publisher_alive && s.reader.drained()),
            _ => false,
        }
    }

    /// Position after the last fragment consumed (0 before joining a session).
    pub fn position(&self) -> i64 {
        match &self.state {
            State::Reading(s) => s.reader.position(),
            _ => 0,
        }
    }

    /// Where this subscription joined its current session.
    pub fn join_position(&self) -> Option<i64> {
        match &self.state {
            State::Reading(s) => Some(s.reader.join_position()),
            _ => None,
        }
    }

    /// Session id of the session being read.
    pub fn session_id(&self) -> Option<i32> {
        match &self.state {
            State::Reading(s) => Some(s.reader.log().session_id()),
            _ => None,
        }
    }

    /// Why reading stopped, if it did: a frame that failed validation (corrupt or foreign data),
    /// or a publisher that broke a bound flow control keeps. The subscription delivers nothing
    /// more of that session.
    pub fn fault(&self) -> Option<&'static str> {
        match &self.state {
            State::Reading(s) => s.reader.fault(),
            _ => None,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let slot = match std::mem::replace(&mut self.state, State::Switching) {
            State::Waiting(slot) => slot,
            State::Reading(s) => s.reader.leave(),
            State::Switching => return,
        };
        self.slot_file.release(slot);
        // The last user of a stream's slot file removes it (no publisher, no other reader).
        self.slot_file.remove_if_abandoned();
    }
}
