//! A reader of a stream, in any process, reading the log in place: the builder and the public
//! face of `stream::follow::Follower`, which follows the stream's sessions.

use super::defaults::{DEFAULT_LIVENESS_INTERVAL, DEFAULT_MAX_READERS};
use super::handler::{ControlledFragmentHandler, FragmentHandler};
use super::idle::{Backoff, IdleStrategy};
pub use super::polled::Polled;
use crate::error::Error;
use crate::log::header::Header;
#[cfg(feature = "async")]
use crate::region::MmapRegion;
use crate::region::ReadOnlyRegion;
pub(crate) use crate::stream::follow::Ended;
use crate::stream::follow::{Follower, Rules};
use crate::stream::join::JoinAt;
use crate::stream::loss::Loss;
use crate::stream::reader::Resume;
use crate::stream::wait;
use std::cell::Cell;
use std::marker::PhantomData;
use std::path::PathBuf;
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
    /// The stream's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

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
    /// missed, once per lap, as a [`crate::Loss`] with [`crate::LossCause::Lapped`]
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
    /// joins the first session that appears, from its first message: from the moment it opens it
    /// is a reader the next session's publisher counts (and waits for, if it is tethered), even
    /// before it polls. Until it joins it polls nothing and is not connected.
    pub fn open(self) -> Result<Subscription, Error> {
        if matches!(self.later, JoinAt::Position(_)) {
            return Err(Error::InvalidConfig("later sessions cannot be joined at an explicit position"));
        }
        let dir = crate::stream::prepare(&self.name, self.dir.as_ref(), self.file_mode, self.max_readers)?;
        let rules = Rules {
            join: self.join,
            later: self.later,
            copy_payloads: self.copy_payloads,
            on_lapped: self.on_lapped,
            liveness_interval: self.liveness_interval,
        };
        let follower =
            Follower::open(&dir, &self.name, self.max_readers, self.file_mode, self.tethered, rules)?;
        let mut sub = Subscription { follower, spin: self.spin, _not_sync: PhantomData };
        if let Some(timeout) = self.wait {
            sub.wait_connected(timeout)?;
        }
        Ok(sub)
    }
}

/// Untaken loss reports a subscription keeps (see [`Subscription::take_loss`]).
pub use crate::stream::follow::MAX_LOSSES;

/// A reader of a stream: maps the publisher's log read-only and reads it in place.
///
/// `Send`, not `Sync`: one thread polls it at a time (`&mut self`). Its position lives in a slot of
/// the stream's reader-slot file, where the publisher reads it for flow control. When the
/// publisher closes (end of stream) or dies, the subscription reads what was committed, reports
/// the session closed ([`Subscription::is_closed`], [`Polled::Closed`], `RecvError::Closed`),
/// and then joins the next session a new publisher creates under the same name, from its first
/// message: a publisher counts every subscription that exists when its session begins as a
/// reader at the session's start until it joins, so none loses anything of it.
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<shmlog::Subscription>(); // polled by one thread at a time
/// ```
#[derive(Debug)]
pub struct Subscription {
    follower: Follower,
    spin: Duration,
    _not_sync: PhantomData<Cell<()>>,
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
    /// reads the clock, and every liveness interval it checks the publisher. A poll that finds
    /// the session over delivers nothing and leaves [`Subscription::is_closed`] `true`; the next
    /// poll goes on to the next session.
    #[inline]
    pub fn poll(&mut self, mut handler: impl FragmentHandler, fragment_limit: usize) -> usize {
        let n = match self.follower.reader() {
            Some(reader) => {
                reader.poll(|payload, header| handler.on_fragment(payload, header), fragment_limit)
            }
            None => 0,
        };
        if n == 0 {
            self.follower.empty_poll();
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
        let n = match self.follower.reader() {
            Some(reader) => {
                reader.controlled_poll(|payload, header| handler.on_fragment(payload, header), fragment_limit)
            }
            None => 0,
        };
        if n == 0 {
            self.follower.empty_poll();
        }
        n
    }

    /// Hands `handler` one block of raw committed frames (32-byte headers included), at most
    /// `max_bytes` long unless a single frame is longer, with the stream position of its first
    /// byte: for recording or forwarding without per-message work. Returns the bytes consumed.
    pub fn block_poll(&mut self, handler: impl FnOnce(&[u8], i64), max_bytes: usize) -> usize {
        let n = match self.follower.reader() {
            Some(reader) => reader.block_poll(handler, max_bytes),
            None => 0,
        };
        self.follower.after_block_poll(n);
        n
    }

    /// Like [`Subscription::poll`], but when nothing is there, sleeps until something is (a
    /// message, the end of the stream, a closed session) or `timeout` passes, and polls again.
    /// Says which: [`Polled::Fragments`], [`Polled::TimedOut`], [`Polled::Closed`] (the session
    /// is over and everything it committed was read: once per session, after which polling again
    /// waits for the next session), or [`Polled::Fault`] (once per session).
    ///
    /// The sleep costs no CPU: the subscription waits on the stream's doorbell, a futex the
    /// publisher rings after a commit only when some reader sleeps (see `docs/waiting.md`).
    pub fn poll_blocking(
        &mut self,
        mut handler: impl FragmentHandler,
        fragment_limit: usize,
        timeout: Duration,
    ) -> Polled {
        let n = self.poll(|p: &[u8], h: &Header| handler.on_fragment(p, h), fragment_limit);
        if n > 0 {
            return Polled::Fragments(n);
        }
        if let Some(end) = Polled::news(&mut self.follower) {
            return end;
        }
        if !self.wait_readable(timeout) {
            return Polled::TimedOut;
        }
        if let Some(end) = Polled::news(&mut self.follower) {
            return end;
        }
        match self.poll(handler, fragment_limit) {
            0 => Polled::news(&mut self.follower).unwrap_or(Polled::TimedOut),
            n => Polled::Fragments(n),
        }
    }

    /// Waits until a poll would find something (a message, the end of the stream, a fault not
    /// reported yet) or the session is closed: `true`; or until `timeout` passes: `false`.
    /// Spins first for the builder's [`SubscriptionBuilder::spin_before_sleep`], then sleeps in
    /// the kernel; checks the publisher's liveness every liveness interval meanwhile, and joins
    /// a new session when one starts.
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
        let mut followers: Vec<_> = subscriptions.iter_mut().map(|s| &mut s.follower).collect();
        wait::wait_any(&mut followers, timeout)
    }

    /// `true` if a poll now would deliver or report something, or the session is closed.
    pub(crate) fn readable(&self) -> bool {
        self.follower.readable()
    }

    #[cfg(feature = "async")]
    pub(crate) fn liveness_interval(&self) -> Duration {
        self.follower.liveness_interval()
    }

    /// The stream's doorbell page, mapped on its own (for a thread that sleeps for us).
    #[cfg(feature = "async")]
    pub(crate) fn map_doorbell(&self) -> Result<crate::stream::doorbell::Doorbell<MmapRegion>, Error> {
        self.follower.map_doorbell()
    }

    /// The fault of the session being read, once per session (the receivers' and
    /// [`Subscription::poll_blocking`]'s report); [`Subscription::fault`] keeps saying it.
    pub(crate) fn take_fault(&mut self) -> Option<&'static str> {
        self.follower.take_fault()
    }

    /// `true` once per closed session, which it leaves (the receivers' `Closed`): the next
    /// session is joined from now on.
    pub(crate) fn take_closed(&mut self) -> bool {
        self.follower.settle()
    }

    /// The oldest loss report not taken yet: messages this subscription did not deliver and
    /// knows it did not (a session that began while it waited, joined past its start; whole
    /// sessions that began and ended unseen; a session left at a fault; laps of an untethered
    /// subscription). Reports come in order with the messages: a poll never delivers messages
    /// from after a loss before the loss is reported here, since sessions are only joined by
    /// calls that deliver nothing (a poll that found nothing, a wait). So asking after every poll
    /// that returned 0 (or before every poll) places each loss exactly; [`crate::Receiver`] and
    /// `AsyncReceiver` do it for you.
    pub fn take_loss(&mut self) -> Option<Loss> {
        self.follower.take_loss()
    }

    /// `true` if this subscription is untethered ([`SubscriptionBuilder::tethered`]).
    pub fn is_untethered(&self) -> bool {
        self.follower.is_untethered()
    }

    /// Loss reports dropped unread because more than [`MAX_LOSSES`] were waiting.
    pub fn losses_dropped(&self) -> u64 {
        self.follower.losses_dropped()
    }

    /// Times an untethered subscription was lapped, over its life (each is one loss report).
    pub fn laps(&self) -> u64 {
        self.follower.laps()
    }

    /// How the last session left ended, once.
    pub(crate) fn take_ended(&mut self) -> Option<Ended> {
        self.follower.take_ended()
    }

    /// The log of the session being read.
    pub(crate) fn log(&self) -> Option<&crate::log::Log<ReadOnlyRegion>> {
        self.follower.log()
    }

    /// Waits until connected to a live publisher's session, or `timeout` passes (a closed
    /// session is left first: this waits for the next one).
    pub fn wait_connected(&mut self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        let mut idle = Backoff::default();
        self.follower.settle();
        loop {
            if self.is_connected() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout);
            }
            self.follower.check()?;
            self.follower.settle();
            idle.idle(0);
        }
    }

    /// `true` while reading a session whose publisher is alive and has not closed. Checks the
    /// publisher's lock (a system call) each time.
    pub fn is_connected(&mut self) -> bool {
        self.follower.is_connected()
    }

    /// `true` once every message before the publisher's close has been read.
    pub fn is_end_of_stream(&self) -> bool {
        self.follower.is_end_of_stream()
    }

    /// `true` when the session read last is over and everything it committed was read: its
    /// publisher closed it (end of stream) or died. The one test for "no more messages of this
    /// session are coming" in a read loop. Polls learn that a publisher died within the liveness
    /// interval (at once when a new publisher starts). It stays `true` until the next call that
    /// may move on (a poll or a wait), which goes on with the next session when a new publisher
    /// starts one (`false` again).
    pub fn is_closed(&self) -> bool {
        self.follower.is_closed()
    }

    /// Position after the last fragment consumed (in a closed session, where it ended; 0 before
    /// joining a session).
    pub fn position(&self) -> i64 {
        self.follower.position()
    }

    /// Where this subscription joined its current (or just closed) session.
    pub fn join_position(&self) -> Option<i64> {
        self.follower.join_position()
    }

    /// Session id of the session being read (or just closed).
    pub fn session_id(&self) -> Option<i32> {
        self.follower.session_id()
    }

    /// Why reading stopped, if it did: a frame that failed validation (corrupt or foreign data),
    /// or a publisher that broke a bound flow control keeps. The subscription delivers nothing
    /// more of that session.
    pub fn fault(&self) -> Option<&'static str> {
        self.follower.fault()
    }
}
