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
use crate::stream::doorbell::{self, Rung, WakeBudget};
use crate::stream::files::{self, Found};
use crate::stream::join::{JoinAt, JoinRefused};
use crate::stream::liveness::{publisher_alive, LogWriters, SlotFile};
use crate::stream::loss::{Loss, LossCause, SessionKind, Sessions};
use crate::stream::name;
use crate::stream::reader::{Reader, Resume};
use crate::stream::slots::{SlotMut, Slots};
use std::cell::Cell;
use std::collections::VecDeque;
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
    later: JoinAt,
    max_readers: usize,
    file_mode: u32,
    liveness_interval: Duration,
    wait: Option<Duration>,
    copy_payloads: bool,
    spin: Duration,
    tethered: bool,
    on_lapped: Resume,
}

impl SubscriptionBuilder {
    /// Directory of the stream's files (default: [`crate::default_dir`]).
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Where to start reading a session that is running when the subscription opens (default
    /// [`JoinAt::Slowest`]); an explicit [`JoinAt::Position`] applies to the first session joined,
    /// whenever it began.
    pub fn join_at(mut self, join: JoinAt) -> Self {
        self.join = join;
        self
    }

    /// Where to start reading a session that begins while the subscription waits for one: after
    /// it opened, or after the session it read before (a publisher restarted). Default
    /// [`JoinAt::Earliest`]: from the session's first message, or, if the log no longer holds it
    /// (the publisher ran more than a term ahead before the subscription looked), from the oldest
    /// it holds. Whatever the rule, the messages of such a session before the join position are
    /// reported as a [`crate::Loss`] ([`Subscription::take_loss`]), and so are whole sessions
    /// that began and ended unseen. [`JoinAt::Position`] makes no sense here and is refused.
    pub fn later_sessions(mut self, rule: JoinAt) -> Self {
        self.later = rule;
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

    /// `false` makes the subscription untethered: the publisher's flow control passes over it,
    /// so it never holds the publisher back, whatever it does (a slow handler, a stop in a
    /// debugger, `SIGSTOP`, page faults). Default `true`: the slowest tethered reader holds the
    /// publisher back, and no message is ever lost to it.
    ///
    /// An untethered subscription that falls behind by about two terms is *lapped*: the
    /// publisher reuses the part of the log it had not read. It then reports exactly what it
    /// missed, once per lap, as a [`crate::Loss`] with [`LossCause::Lapped`]
    /// ([`Subscription::take_loss`], `RecvError::Lost` from the receivers), and goes on where
    /// [`SubscriptionBuilder::on_lapped`] says. It never delivers a torn or overwritten message:
    /// it copies frames out of the log, then proves that the publisher had not begun to reuse
    /// them during the copy, and only then hands the copies to the handler (so
    /// [`SubscriptionBuilder::copy_payloads`] is implied). A fragmented message is delivered
    /// whole or reported lost. See `docs/untethered.md`.
    pub fn tethered(mut self, tethered: bool) -> Self {
        self.tethered = tethered;
        self
    }

    /// Where an untethered subscription goes on after it was lapped (default
    /// [`Resume::Oldest`]: the oldest message the log still holds; [`Resume::Live`]: the
    /// publisher's position). No effect on a tethered subscription.
    pub fn on_lapped(mut self, resume: Resume) -> Self {
        self.on_lapped = resume;
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
        if matches!(self.later, JoinAt::Position(_)) {
            return Err(Error::InvalidConfig("later sessions cannot be joined at an explicit position"));
        }
        let dir = crate::stream::prepare(&self.name, self.dir.as_ref(), self.file_mode, self.max_readers)?;
        let (slot_file, slots, mut slot) = claim_slot(&dir, &self)?;
        slot.set_untethered(!self.tethered);
        let mut sub = Subscription {
            sessions: Sessions::new(slots.sessions()),
            later: self.later,
            losses: VecDeque::new(),
            losses_dropped: 0,
            laps: 0,
            vanishing: None,
            log_path: name::log_path(&dir, &self.name),
            slot_file,
            slots,
            state: State::Waiting(slot),
            next_join: self.join,
            copy_payloads: self.copy_payloads,
            on_lapped: self.on_lapped,
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

/// What [`Subscription::poll_blocking`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polled {
    /// This many fragments were delivered (at least one).
    Fragments(usize),
    /// Nothing arrived in time; the session goes on.
    TimedOut,
    /// The session is over (its publisher closed it or died) and everything it committed was
    /// read. The subscription joins the next session by itself: polling again waits for it.
    Closed,
    /// Reading stopped at a fault (see [`Subscription::fault`]): nothing more of this session is
    /// delivered, and a wait returns at once until its publisher is gone. Stop, or back off.
    Fault(&'static str),
}

impl Polled {
    /// The fragments delivered (0 unless [`Polled::Fragments`]): for an idle strategy.
    pub fn fragments(self) -> usize {
        match self {
            Polled::Fragments(n) => n,
            _ => 0,
        }
    }
}

/// Untaken loss reports a subscription keeps (see [`Subscription::take_loss`]).
pub const MAX_LOSSES: usize = 1024;

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
    /// The newest of the stream's sessions this subscription knows of.
    sessions: Sessions,
    /// The rule for sessions that begin while we wait (`SubscriptionBuilder::later_sessions`).
    later: JoinAt,
    /// Losses not yet taken (`take_loss`), oldest first, at most [`MAX_LOSSES`].
    losses: VecDeque<Loss>,
    losses_dropped: u64,
    /// Laps of an untethered subscription, over its life.
    laps: u64,
    /// The stream's session counter as the last check found it ahead of every log.
    vanishing: Option<i32>,
    copy_payloads: bool,
    /// Where an untethered reader goes on after a lap.
    on_lapped: Resume,
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
            later: JoinAt::Earliest,
            max_readers: DEFAULT_MAX_READERS,
            file_mode: 0o600,
            liveness_interval: DEFAULT_LIVENESS_INTERVAL,
            wait: None,
            copy_payloads: false,
            spin: Duration::ZERO,
            tethered: true,
            on_lapped: Resume::Oldest,
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
            self.empty_poll();
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
            self.empty_poll();
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
        if s.reader.is_untethered() {
            // A lap moves the position without delivering: its report goes out now.
            self.take_reader_losses();
        }
        if n == 0 {
            self.idle_tick();
        }
        n
    }

    /// Like [`Subscription::poll`], but when nothing is there, sleeps until something is (a
    /// message, the end of the stream, a closed session) or `timeout` passes, and polls again.
    /// Says which: [`Polled::Fragments`], [`Polled::TimedOut`], [`Polled::Closed`] (the session
    /// is over and everything it committed was read), or [`Polled::Fault`].
    ///
    /// The sleep costs no CPU: the subscription waits on the stream's doorbell, a futex the
    /// publisher rings after a commit only when some reader sleeps (see `docs/waiting.md`).
    pub fn poll_blocking(
        &mut self,
        mut handler: impl FragmentHandler,
        fragment_limit: usize,
        timeout: Duration,
    ) -> Polled {
        let mut n = self.poll(|p: &[u8], h: &Header| handler.on_fragment(p, h), fragment_limit);
        if n == 0 {
            if !self.wait_readable(timeout) {
                return Polled::TimedOut;
            }
            n = self.poll(handler, fragment_limit);
        }
        match (n, self.fault()) {
            (0, Some(fault)) => Polled::Fault(fault),
            (0, None) if self.is_closed() => Polled::Closed,
            (0, None) => Polled::TimedOut,
            (n, _) => Polled::Fragments(n),
        }
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
                if self.readable() {
                    return true;
                }
                if Instant::now() >= spin_end {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
        Self::wait_any(&mut [self], left)
    }

    /// Waits until one of `subscriptions` is readable (see [`Subscription::wait_readable`]) or
    /// `timeout` passes; `true` if one is. One thread, several streams, no spinning: it sleeps
    /// on all their doorbells at once (`futex_waitv`, Linux 5.16 and later; on older kernels it
    /// sleeps on the first and looks at the others every millisecond).
    pub fn wait_any(subscriptions: &mut [&mut Subscription], timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut budget = WakeBudget::default();
        loop {
            if subscriptions.iter().any(|s| s.readable()) {
                return true;
            }
            let now = Instant::now();
            let mut chunk = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
            let timed_out = chunk.is_zero();
            for s in subscriptions.iter_mut() {
                if now >= s.next_check {
                    // Before the timeout: a zero timeout still learns that a publisher died.
                    s.next_check = now + s.liveness_interval;
                    let _ = s.check();
                }
                chunk = chunk.min(s.next_check.saturating_duration_since(now));
            }
            if subscriptions.iter().any(|s| s.readable()) {
                return true;
            }
            if timed_out {
                return false;
            }
            let (rung, rang) = match &*subscriptions {
                [one] => Self::sleep_on_one(one, chunk),
                _ => Self::sleep_on_all(subscriptions, chunk),
            };
            if rung != Rung::Woken {
                continue;
            }
            let news = subscriptions.iter().any(|s| s.readable());
            if !news {
                // Rung without news for us: a new session (look now), or a spurious wake-up.
                let now = Instant::now();
                for (i, s) in subscriptions.iter_mut().enumerate() {
                    if rang & (1 << i.min(63)) != 0 {
                        s.next_check = now;
                    }
                }
            }
            if let Some(nap) = budget.after_wake(news) {
                std::thread::sleep(nap);
            }
        }
    }

    /// The steps of a doorbell sleep (`stream::doorbell`) on one subscription's bell, without an
    /// allocation (`wait_readable`'s). Returns how it ended and whether the bell rang (bit 0).
    fn sleep_on_one(s: &Subscription, chunk: Duration) -> (Rung, u64) {
        let Some(bell) = s.bell() else {
            std::thread::sleep(chunk.min(doorbell::NAP));
            return (Rung::TimedOut, 0);
        };
        let armed = bell.arm_readers();
        let chunk = if doorbell::barrier() { chunk } else { chunk.min(doorbell::NAP) };
        if s.readable() {
            return (Rung::Ready, 0);
        }
        let rung = doorbell::sleep(&[(bell, armed)], None, chunk);
        (rung, u64::from(bell.rang(armed)))
    }

    /// The same steps over every subscription's bell at once. Returns how it ended and which
    /// bells rang (bit `i` for subscription `i`; bit 63 also stands for all beyond it).
    fn sleep_on_all(subscriptions: &[&mut Subscription], chunk: Duration) -> (Rung, u64) {
        let armed: Vec<_> = subscriptions
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.bell().map(|bell| (i, bell, bell.arm_readers())))
            .collect();
        let chunk = if doorbell::barrier() { chunk } else { chunk.min(doorbell::NAP) };
        if subscriptions.iter().any(|s| s.readable()) {
            return (Rung::Ready, 0);
        }
        let bells: Vec<_> = armed.iter().map(|&(_, bell, a)| (bell, a)).collect();
        let rung = if bells.is_empty() {
            std::thread::sleep(chunk.min(doorbell::NAP));
            Rung::TimedOut
        } else {
            doorbell::sleep(&bells, None, chunk)
        };
        let rang =
            armed.iter().filter(|(_, bell, a)| bell.rang(*a)).fold(0, |m, &(i, ..)| m | 1 << i.min(63));
        (rung, rang)
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
    pub(crate) fn readable(&self) -> bool {
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

    /// After a poll that delivered nothing: an untethered reader's lap reports, then the idle
    /// tick.
    #[inline(always)]
    fn empty_poll(&mut self) {
        self.take_reader_losses();
        self.idle_tick();
    }

    /// Moves the reader's lap reports (an untethered reader's) to the queue.
    fn take_reader_losses(&mut self) {
        while let Some(loss) = match &mut self.state {
            State::Reading(s) => s.reader.take_loss(),
            _ => None,
        } {
            self.laps += 1;
            self.report(loss);
        }
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
        let next = match files::open_log(&self.log_path, current)? {
            Found::Live(next) => next,
            // A session that began while we waited and is over already: ours to read all the same.
            Found::Dead(dead) if self.sessions.classify(dead.session_seq) != SessionKind::Running => {
                match files::map_finished(dead, &self.log_path)? {
                    Some(next) => next,
                    None => return Ok(()),
                }
            }
            _ => {
                self.notice_vanished_sessions();
                return Ok(());
            }
        };
        let slot = self.leave_session();
        let seq = next.log.session_seq();
        let kind = self.sessions.classify(seq);
        let asked = std::mem::replace(&mut self.next_join, JoinAt::Slowest);
        let explicit = matches!(asked, JoinAt::Position(_));
        let rule = if explicit || kind == SessionKind::Running { asked } else { self.later };
        match Reader::join(next.log, &self.slots, slot, rule, self.copy_payloads) {
            Ok(mut reader) => {
                reader.set_resume(self.on_lapped);
                self.sessions.joined(seq);
                let session_id = reader.log().session_id();
                for loss in
                    Sessions::losses(kind, session_id, reader.join_position(), explicit).into_iter().flatten()
                {
                    self.report(loss);
                }
                self.state = State::Reading(Session {
                    publisher_alive: publisher_alive(&next.file),
                    file: next.file,
                    reader,
                    unblocker: None,
                });
                Ok(())
            }
            Err((slot, refused)) => {
                self.state = State::Waiting(slot);
                self.next_join = asked;
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

    /// With no session to join: sessions the stream's counter says began after every one we
    /// know of, whose logs are gone (replaced by a newer one that is gone too, or removed by
    /// `clean`), are reported missed once the counter has stood ahead for a whole check (a
    /// publisher takes its number just before its log appears under the stream's name).
    fn notice_vanished_sessions(&mut self) {
        let counter = self.slots.sessions();
        match self.sessions.classify(counter) {
            SessionKind::Later { missed } if self.vanishing == Some(counter) => {
                let session_id = self.session_id().or(self.ended.map(|e| e.session_id)).unwrap_or(0);
                let sessions = missed.saturating_add(1);
                self.report(Loss {
                    session_id,
                    from: 0,
                    to: 0,
                    cause: LossCause::SessionsMissed { sessions },
                });
                self.sessions.joined(counter);
                self.vanishing = None;
            }
            SessionKind::Later { .. } => self.vanishing = Some(counter),
            SessionKind::Running => self.vanishing = None,
        }
    }

    /// Leaves the session being read (noting how it ended); returns the slot.
    fn leave_session(&mut self) -> OwnSlot {
        self.take_reader_losses();
        match std::mem::replace(&mut self.state, State::Switching) {
            State::Waiting(slot) => slot,
            State::Reading(s) => {
                let session_id = s.reader.log().session_id();
                self.ended = Some(Ended { session_id, end_of_stream: s.reader.at_end_of_stream() });
                if s.reader.fault().is_some() {
                    // Committed messages past a fault were never delivered.
                    let from = s.reader.position();
                    let end = s.reader.log().eos_position();
                    let to = s.reader.log().producer_position().unwrap_or(from).min(end);
                    if to > from {
                        self.report(Loss { session_id, from, to, cause: LossCause::Fault });
                    }
                }
                s.reader.leave()
            }
            State::Switching => unreachable!("only inside a method"),
        }
    }

    /// Queues a loss report for `take_loss` (and the receivers), oldest first. Past
    /// [`MAX_LOSSES`] untaken reports, the oldest is dropped and counted in the next one kept: a
    /// subscription whose owner never asks cannot grow without bound.
    fn report(&mut self, loss: Loss) {
        if self.losses.len() == MAX_LOSSES {
            self.losses.pop_front();
            self.losses_dropped += 1;
        }
        self.losses.push_back(loss);
    }

    /// The oldest loss report not taken yet: messages this subscription did not deliver and
    /// knows it did not (a session that began while it waited, joined past its start; whole
    /// sessions that began and ended unseen; a session left at a fault). Reports come in order
    /// with the messages: a poll never delivers messages from after a loss before the loss is
    /// reported here, since sessions are only joined by calls that deliver nothing (a poll that
    /// found nothing, a wait). So asking after every poll that returned 0 (or before every poll)
    /// places each loss exactly; [`crate::Receiver`] and `AsyncReceiver` do it for you.
    pub fn take_loss(&mut self) -> Option<Loss> {
        self.losses.pop_front()
    }

    /// `true` if this subscription is untethered ([`SubscriptionBuilder::tethered`]).
    pub fn is_untethered(&self) -> bool {
        match &self.state {
            State::Reading(s) => s.reader.is_untethered(),
            State::Waiting(slot) => slot.untethered(),
            State::Switching => false,
        }
    }

    /// Loss reports dropped unread because more than [`MAX_LOSSES`] were waiting.
    pub fn losses_dropped(&self) -> u64 {
        self.losses_dropped
    }

    /// Times an untethered subscription was lapped, over its life (each is one loss report).
    pub fn laps(&self) -> u64 {
        self.laps
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
        // The last user of a stream's slot file removes it (no publisher, no other reader), and
        // a finished log a publisher left for readers that owed it.
        if self.slot_file.remove_if_abandoned() {
            files::remove_finished_log(&self.log_path);
        }
    }
}
