//! Persistent subscriptions: a named reader that never holds the publisher and never loses what
//! the journal holds. It reads the live stream untethered; when it is lapped (or misses a
//! session) it goes back to the recording at the first message it did not finish, replays the
//! journal from there and merges back into the live stream when it catches up (as
//! [`super::ReplayMerge`] does), with no gap and no duplicate. Its position is a
//! [`DurableReader`]'s, stored after every poll, so a restarted process resumes where the last
//! one stopped and retention keeps what it has not read.
//!
//! It needs a recorder of the stream in the journal (tethered, or nothing is lost only up to the
//! recorder's own gaps): the journal is what it falls back to. A loss is reported only for what
//! the journal no longer holds ([`LossCause::Purged`]) or never held ([`LossCause::NotRecorded`]).

use super::durable::DurableReader;
use super::replay::Replay;
use super::Recording;
use crate::api::handler::{ControlledFragmentHandler, FragmentHandler};
use crate::api::polled::Polled;
use crate::api::source::sealed::Read;
use crate::api::subscription::{Subscription, SubscriptionBuilder};
use crate::error::Error;
use crate::layout::frame::FRAME_ALIGNMENT;
use crate::log::header::Header;
use crate::log::reader::Action;
use crate::stream::join::JoinAt;
use crate::stream::loss::{Loss, LossCause};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often a caught-up replay tries to join the live stream, and how often the catalog is
/// looked at for a recording not found yet.
const RETRY: Duration = Duration::from_millis(1);

/// Where a durable name that has read nothing yet starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Start {
    /// At the live stream's newest message (the default).
    #[default]
    Live,
    /// At the oldest message the journal holds of the stream.
    Earliest,
}

/// Settings for a persistent subscription. Obtained from [`PersistentSubscription::builder`].
#[derive(Clone, Debug)]
pub struct PersistentSubscriptionBuilder {
    journal: PathBuf,
    name: String,
    live: SubscriptionBuilder,
    start: Start,
}

impl PersistentSubscriptionBuilder {
    /// The live subscription's settings (its stream directory, liveness, ...): it is always
    /// untethered, and where it joins is the persistent subscription's choice.
    pub fn live(mut self, live: SubscriptionBuilder) -> Self {
        self.live = live;
        self
    }

    /// Where a name that has read nothing yet starts (default [`Start::Live`]).
    pub fn start(mut self, start: Start) -> Self {
        self.start = start;
        self
    }

    /// Registers the durable name (or takes it back: one live process per name) and opens the
    /// stream where the name stopped.
    pub fn open(self) -> Result<PersistentSubscription, Error> {
        let stream = self.live.name().to_owned();
        let reader = DurableReader::register(&self.journal, &self.name, &stream)?;
        let mut sub = PersistentSubscription {
            reader,
            journal: self.journal,
            stream,
            live_builder: self.live.tethered(false),
            mode: Mode::Waiting,
            recording: None,
            session: None,
            delivered: 0,
            boundary: 0,
            losses: VecDeque::new(),
            next_try: Instant::now(),
            fault: None,
            generation: 0,
        };
        match sub.reader.position() {
            Some((id, position)) => sub.replay_from(id, position)?,
            None => match self.start {
                Start::Live => sub.go_live(JoinAt::Latest)?,
                Start::Earliest => match sub.recording_after(None)? {
                    Some(r) => sub.replay_from(r.id, r.start_position)?,
                    None => sub.go_live(JoinAt::Earliest)?,
                },
            },
        }
        Ok(sub)
    }
}

#[derive(Debug)]
enum Mode {
    /// Reading the journal, and merging into the live stream once caught up (boxed, as the
    /// subscription is: entered once per fall-back or merge).
    Replay(Box<Replay>),
    /// Reading the live stream, untethered; `laps` as of the last poll.
    Live { sub: Box<Subscription>, laps: u64 },
    /// Done with the recordings there are and not merged: the catalog is looked at again.
    Waiting,
    /// Resumed at a position the recording has not reached yet (this reader read the live
    /// stream ahead of the recorder): tried again, live and from the journal.
    Ahead { id: u32, position: i64 },
}

/// A durable named reader of a stream: see the module docs of `shmlog::journal` and
/// `docs/journal.md`, "Persistent subscriptions".
///
/// ```no_run
/// use shmlog::journal::PersistentSubscription;
/// use shmlog::{Header, Subscription};
/// # fn main() -> Result<(), shmlog::Error> {
/// let mut reports = PersistentSubscription::builder("/var/lib/orders-journal", "reports")
///     .live(Subscription::builder("orders"))
///     .open()?;
/// loop {
///     reports.poll(|msg: &[u8], h: &Header| println!("{} bytes at {}", msg.len(), h.position()), 100)?;
///     while let Some(loss) = reports.take_loss() {
///         eprintln!("{loss}");
///     }
/// #   break;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PersistentSubscription {
    reader: DurableReader,
    journal: PathBuf,
    stream: String,
    live_builder: SubscriptionBuilder,
    mode: Mode,
    /// The recording that holds `boundary`, and its session.
    recording: Option<(u32, i32)>,
    /// The session of the last fragment delivered.
    session: Option<i32>,
    /// Position after the last fragment delivered (skipped on a replay of the same session).
    delivered: i64,
    /// Position after the last whole message delivered: where a replay goes on from.
    boundary: i64,
    losses: VecDeque<Loss>,
    next_try: Instant,
    /// A fault of the live session, not taken yet.
    fault: Option<&'static str>,
    /// Live subscriptions opened so far (an async receiver maps the newest one's doorbell).
    generation: u64,
}

impl PersistentSubscription {
    /// Starts building durable reader `name` of the stream given by
    /// [`PersistentSubscriptionBuilder::live`] (by default: a stream also called `name`), falling
    /// back to the journal directory `journal`.
    pub fn builder(journal: impl Into<PathBuf>, name: impl Into<String>) -> PersistentSubscriptionBuilder {
        let name = name.into();
        PersistentSubscriptionBuilder {
            journal: journal.into(),
            live: Subscription::builder(name.clone()),
            name,
            start: Start::Live,
        }
    }

    /// Delivers up to `fragment_limit` fragments, from the journal or the live stream, and
    /// stores the position after them. A crash (kill -9 included) delivers again at most what
    /// the last poll delivered, and a message of which only some fragments were delivered.
    pub fn poll(&mut self, handler: impl FragmentHandler, fragment_limit: usize) -> Result<usize, Error> {
        let n = self.deliver(continuing(handler), fragment_limit)?;
        self.store()?;
        Ok(n)
    }

    /// Like [`PersistentSubscription::poll`], the handler steering with an [`Action`], live or
    /// from the journal alike (the core's frame loop decides what each means):
    ///
    /// - `Abort` leaves the fragment for the next poll and stops. It does not count as delivered:
    ///   the position stored after the poll stays in front of it, so the next poll, a fall-back
    ///   to the journal, a merge into the live stream or a process resuming the name delivers it
    ///   again (with the first fragments of its message, for a resumed process).
    /// - `Break` delivers the fragment and stops.
    /// - `Commit` delivers the fragment and stores the durable position at once, before the next
    ///   fragment: a crash later in the poll delivers again only what came after the last whole
    ///   message (if the recording of the session is not known yet, the store waits for the
    ///   poll's end, as `poll`'s does). The live subscription's position is its own (untethered,
    ///   it holds no one back), so there is nothing else to publish.
    /// - `Continue` delivers the fragment.
    ///
    /// There is no `block_poll`: a replay has no block read, and the durable position is a
    /// message boundary that a block of raw frames would have to be parsed again to find.
    pub fn controlled_poll(
        &mut self,
        handler: impl ControlledFragmentHandler,
        fragment_limit: usize,
    ) -> Result<usize, Error> {
        let n = self.deliver(handler, fragment_limit)?;
        self.store()?;
        Ok(n)
    }

    /// A controlled poll without the store of the position after it (a `Commit` stores).
    fn deliver(
        &mut self,
        mut handler: impl ControlledFragmentHandler,
        fragment_limit: usize,
    ) -> Result<usize, Error> {
        let n = match &mut self.mode {
            Mode::Live { sub, laps } => 'live: {
                if let Some(loss) = sub.take_loss() {
                    // A wait joined a session past its start (and queued the loss): go to the
                    // journal before delivering anything of it, as after a poll that joined it.
                    while sub.take_loss().is_some() {}
                    self.fall_back(Some(loss))?;
                    break 'live 0;
                }
                let mut at = Delivery::of(&mut self.delivered, &mut self.boundary, &mut self.session);
                let (reader, recording) = (&self.reader, self.recording);
                let n = sub.controlled_poll(
                    |payload: &[u8], h: &Header| {
                        at.handled(h, handler.on_fragment(payload, h), reader, recording)
                    },
                    fragment_limit,
                );
                if n == 0 {
                    // Said once; the live subscription then sleeps until its session ends.
                    self.fault = self.fault.or(sub.take_fault());
                }
                let lapped = sub.laps() != *laps;
                let loss = sub.take_loss();
                if lapped || loss.is_some() {
                    while sub.take_loss().is_some() {}
                    self.fall_back(loss)?;
                }
                n
            }
            Mode::Replay(replay) => {
                let skip_to = self.delivered;
                let same = self.session == Some(replay.recording().session_id);
                let mut at = Delivery::of(&mut self.delivered, &mut self.boundary, &mut self.session);
                let (reader, recording) = (&self.reader, self.recording);
                let polled = replay.controlled_poll(
                    |payload: &[u8], h: &Header| {
                        if same && h.position() <= skip_to {
                            // Delivered live before the lap: a message's first fragments.
                            return Action::Continue;
                        }
                        at.handled(h, handler.on_fragment(payload, h), reader, recording)
                    },
                    fragment_limit,
                );
                let stopped = at.stopped;
                match polled {
                    Ok(n) => {
                        // A poll the handler stopped says nothing of the recorded end.
                        if n < fragment_limit && !stopped {
                            self.caught_up()?;
                        }
                        n
                    }
                    Err(Error::PositionNotAvailable { oldest, .. }) => {
                        let (id, session_id) = self.recording.expect("replaying a recording");
                        self.lost(session_id, self.boundary, oldest, LossCause::Purged);
                        self.open_replay(id, oldest)?;
                        0
                    }
                    Err(e) => return Err(e),
                }
            }
            Mode::Waiting => {
                if Instant::now() >= self.next_try {
                    self.next_try = Instant::now() + RETRY;
                    self.after_recording()?;
                }
                0
            }
            &mut Mode::Ahead { id, position } => {
                if Instant::now() >= self.next_try {
                    self.next_try = Instant::now() + RETRY;
                    self.replay_from(id, position)?;
                }
                0
            }
        };
        Ok(n)
    }

    /// Like [`PersistentSubscription::poll`], but when nothing is there, waits (see
    /// [`PersistentSubscription::wait_readable`]) and polls again: [`Polled::Fragments`],
    /// [`Polled::TimedOut`], or [`Polled::Fault`] (once, for a damaged live session: the journal
    /// goes on past it when its publisher is gone). Never [`Polled::Closed`]: a persistent
    /// subscription goes on with the next session, from the journal or live.
    pub fn poll_blocking(
        &mut self,
        mut handler: impl FragmentHandler,
        fragment_limit: usize,
        timeout: Duration,
    ) -> Result<Polled, Error> {
        let mut handler = |p: &[u8], h: &Header| handler.on_fragment(p, h);
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let n = self.poll(&mut handler, fragment_limit)?;
            if n > 0 {
                return Ok(Polled::Fragments(n));
            }
            if let Some(why) = self.fault.take() {
                return Ok(Polled::Fault(why));
            }
            let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
            if left.is_zero() || !self.wait_readable(left) {
                return Ok(Polled::TimedOut);
            }
        }
    }

    /// Waits until a poll may find something (`true`) or `timeout` passes (`false`). Reading the
    /// live stream, it sleeps on the stream's doorbell as a live subscription does. Catching up
    /// from the journal it does not wait while the recording holds more; once caught up, it
    /// naps until the next look at the recording or the live stream (a millisecond at most: the
    /// recorder rings no bell), so it never spins.
    pub fn wait_readable(&mut self, timeout: Duration) -> bool {
        if let Mode::Live { sub, .. } = &mut self.mode {
            return sub.wait_readable(timeout);
        }
        if self.recorded_ahead() {
            return true;
        }
        let nap = self.nap();
        std::thread::sleep(nap.min(timeout));
        nap <= timeout
    }

    /// `true` if replaying and the recording holds more than was read.
    fn recorded_ahead(&mut self) -> bool {
        match &mut self.mode {
            Mode::Replay(replay) => replay.position() < replay.recorded_position(),
            _ => false,
        }
    }

    /// How long a poll that found nothing while not live has nothing to do: until its next look,
    /// or a millisecond if that is due (the poll just looked).
    fn nap(&self) -> Duration {
        match self.next_try.saturating_duration_since(Instant::now()) {
            Duration::ZERO => RETRY,
            left => left,
        }
    }

    /// The oldest loss not taken yet: what the journal no longer held (purged) or never held
    /// when this reader went back to it.
    pub fn take_loss(&mut self) -> Option<Loss> {
        self.losses.pop_front()
    }

    /// `true` while reading the live stream (merged), `false` while catching up from the journal.
    pub fn is_live(&self) -> bool {
        matches!(self.mode, Mode::Live { .. })
    }

    /// The durable position: the recording this reader reads and the position after the last
    /// whole message it delivered (`None` before the first message the journal holds).
    pub fn position(&self) -> Option<(u32, i64)> {
        self.reader.position()
    }

    /// Writes the durable position to the disk and waits (it survives this process's crash
    /// without; a power loss only with).
    pub fn sync(&self) -> Result<(), Error> {
        self.reader.sync()
    }

    /// Removes the durable name: retention no longer keeps anything for it.
    pub fn unregister(self) -> Result<(), Error> {
        self.reader.unregister()
    }

    /// Stores `(recording, boundary)` if the recording of the boundary's session is known
    /// (looked up in the catalog at most once a millisecond). A recording still recording holds
    /// the boundary also past what it has recorded: a reader reading live may be ahead of the
    /// recorder (a resume there is [`Mode::Ahead`]'s), and a fast one would otherwise store
    /// nothing of a new session while it stays ahead.
    fn store(&mut self) -> Result<(), Error> {
        let Some(session) = self.session else { return Ok(()) };
        if self.recording.map(|(_, s)| s) != Some(session) {
            if Instant::now() < self.next_try {
                return Ok(());
            }
            self.next_try = Instant::now() + RETRY;
            let found = self.recordings()?.into_iter().rev().find(|r| {
                r.session_id == session
                    && r.start_position <= self.boundary
                    && (self.boundary <= r.stop_position || !r.is_stopped())
            });
            match found {
                Some(r) => self.recording = Some((r.id, session)),
                None => return Ok(()),
            }
        }
        let (id, _) = self.recording.expect("found above");
        if self.reader.position() != Some((id, self.boundary)) {
            self.reader.store(id, self.boundary);
        }
        Ok(())
    }

    /// The live stream lost messages: go on from the journal at the last whole message, or, if
    /// no recording is known to hold it, where the loss began.
    fn fall_back(&mut self, loss: Option<Loss>) -> Result<(), Error> {
        if let Some((id, session)) = self.recording {
            if self.session == Some(session) {
                return self.replay_from(id, self.boundary);
            }
        }
        let Some(loss) = loss.filter(|l| l.to > l.from) else {
            self.losses.extend(loss);
            return Ok(());
        };
        let holder = self
            .recordings()?
            .into_iter()
            .find(|r| r.session_id == loss.session_id && r.stop_position > loss.from);
        match holder {
            Some(r) => {
                let from = loss.from.max(r.start_position);
                self.lost(loss.session_id, loss.from, from, LossCause::NotRecorded);
                self.replay_from(r.id, from)
            }
            None => {
                // Nothing in the journal to go back to.
                self.losses.push_back(loss);
                Ok(())
            }
        }
    }

    /// Replays recording `id` from `position` (a message start it holds, or a purged one).
    fn replay_from(&mut self, id: u32, position: i64) -> Result<(), Error> {
        let recording = match super::recording(&self.journal, id) {
            Ok(r) => r,
            Err(Error::NoSuchRecording { .. }) => {
                // Deleted whole by retention: go on with the next one.
                self.recording = None;
                return self.next_recording(Some(id));
            }
            Err(e) => return Err(e),
        };
        self.recording = Some((id, recording.session_id));
        self.boundary = position;
        if self.session != Some(recording.session_id) {
            self.session = Some(recording.session_id);
            self.delivered = position;
        }
        match self.open_replay(id, position) {
            Err(Error::PositionNotAvailable { oldest, .. }) if oldest > position => {
                self.lost(recording.session_id, position, oldest, LossCause::Purged);
                self.open_replay(id, oldest)
            }
            Err(Error::PositionNotAvailable { newest, .. }) if position > newest => {
                // Read live ahead of the recorder before a restart: the live log may still hold
                // the position; else the recorder gets there, or stopped short of it.
                if self.join_live(position, recording.session_id)? {
                    Ok(())
                } else if recording.is_stopped() {
                    self.lost_past_cut(&recording);
                    self.next_recording(Some(id))
                } else {
                    self.mode = Mode::Ahead { id, position };
                    Ok(())
                }
            }
            opened => opened,
        }
    }

    fn open_replay(&mut self, id: u32, position: i64) -> Result<(), Error> {
        self.mode = Mode::Replay(Box::new(Replay::builder(&self.journal, id).from(position).open()?));
        self.boundary = position;
        self.delivered = self.delivered.max(position);
        Ok(())
    }

    /// The replay delivered what the recording holds: merge into the live stream if its session
    /// is live at the replay's position, else go on with the next recording once this one is done.
    fn caught_up(&mut self) -> Result<(), Error> {
        let Mode::Replay(replay) = &mut self.mode else { return Ok(()) };
        if !replay.at_message_boundary() || Instant::now() < self.next_try {
            return Ok(());
        }
        self.next_try = Instant::now() + RETRY;
        if replay.position() < replay.recorded_position() {
            return Ok(());
        }
        let position = replay.position();
        let session = replay.recording().session_id;
        let done = replay.is_done();
        if !self.join_live(position, session)? && done {
            if let Some((id, _)) = self.recording {
                // The record as it is now: a truncation may have cut it since the replay opened.
                match super::recording(&self.journal, id) {
                    Ok(recording) => self.lost_past_cut(&recording),
                    Err(Error::NoSuchRecording { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            self.after_recording()?;
        }
        Ok(())
    }

    /// Before leaving stopped `recording` for the next: if a truncation cut it back from past
    /// where this name got in it, the messages from there to the old stop are gone (`Purged`).
    fn lost_past_cut(&mut self, recording: &Recording) {
        let Some(cut_from) = recording.cut_from else { return };
        let got_to = match self.session == Some(recording.session_id) {
            true => self.boundary,
            false => recording.start_position,
        };
        let from = got_to.max(recording.stop_position);
        if cut_from > from {
            self.lost(recording.session_id, from, cut_from, LossCause::Purged);
        }
    }

    /// Reads on from the live stream at `position`, if the log of `session` is live and holds
    /// a message start there (the join proof then keeps it until joined).
    fn join_live(&mut self, position: i64, session: i32) -> Result<bool, Error> {
        match self.live_builder.clone().join_at(JoinAt::Position(position)).open() {
            Ok(sub) if sub.session_id() == Some(session) && sub.position() == position => {
                self.generation += 1;
                self.mode = Mode::Live { laps: sub.laps(), sub: Box::new(sub) };
                Ok(true)
            }
            Ok(_) | Err(Error::PositionNotAvailable { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The current recording was read to its stop: the next one of the stream, or wait for one.
    fn after_recording(&mut self) -> Result<(), Error> {
        let current = self.recording.map(|(id, _)| id);
        self.next_recording(current)
    }

    fn next_recording(&mut self, after: Option<u32>) -> Result<(), Error> {
        match self.recording_after(after)? {
            Some(next) => {
                let origin = next.origin_position;
                let from = next.start_position;
                if next.gap_before > 0 {
                    self.lost(next.session_id, origin - next.gap_before, origin, LossCause::NotRecorded);
                }
                if from > origin {
                    self.lost(next.session_id, origin, from, LossCause::Purged);
                }
                self.session = Some(next.session_id);
                self.delivered = from;
                self.replay_from(next.id, from)
            }
            None => {
                self.mode = Mode::Waiting;
                Ok(())
            }
        }
    }

    /// The stream's oldest recording after `after` (any, if `None`).
    fn recording_after(&self, after: Option<u32>) -> Result<Option<Recording>, Error> {
        Ok(self.recordings()?.into_iter().find(|r| after.is_none_or(|a| r.id > a)))
    }

    /// The stream's recordings, by id (damaged records left out: a replay of one would fail).
    fn recordings(&self) -> Result<Vec<Recording>, Error> {
        let all = match super::recordings(&self.journal) {
            Ok(all) => all,
            // No recorder has created the catalog yet.
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(all.into_iter().filter_map(Result::ok).filter(|r| r.stream == self.stream).collect())
    }

    fn go_live(&mut self, join: JoinAt) -> Result<(), Error> {
        let sub = self.live_builder.clone().join_at(join).open()?;
        self.generation += 1;
        self.mode = Mode::Live { laps: sub.laps(), sub: Box::new(sub) };
        Ok(())
    }

    fn lost(&mut self, session_id: i32, from: i64, to: i64, cause: LossCause) {
        if to > from {
            self.losses.push_back(Loss { session_id, from, to, cause });
        }
    }
}

/// The receivers' reads ([`crate::Receiver`], `AsyncReceiver`): a persistent subscription never
/// closes; its faults are the live sessions'.
impl Read for PersistentSubscription {
    /// Stores the position *before* it reads: a receiver queues what a read decoded and reads
    /// again only once it handed every queued message out, so the position stored is that of
    /// the last message handed out, never of one still queued (a crash would lose it). A crash
    /// delivers again at most the last read's messages, as after a poll.
    fn read(&mut self, handler: impl FnMut(&[u8], &Header), limit: usize) -> Result<usize, Error> {
        self.store()?;
        self.deliver(continuing(handler), limit)
    }

    fn take_loss(&mut self) -> Option<Loss> {
        PersistentSubscription::take_loss(self)
    }

    fn take_closed(&mut self) -> bool {
        false
    }

    fn take_fault(&mut self) -> Option<&'static str> {
        self.fault.take()
    }

    fn is_closed(&self) -> bool {
        false
    }

    fn wait_readable(&mut self, timeout: Duration) -> bool {
        PersistentSubscription::wait_readable(self, timeout)
    }

    #[cfg(feature = "async")]
    fn sleep_on(&mut self) -> crate::api::source::SleepOn<'_> {
        use crate::api::source::SleepOn;
        let nap = if self.recorded_ahead() { Duration::ZERO } else { self.nap() };
        match &mut self.mode {
            Mode::Live { sub, .. } => SleepOn::Bell { sub, generation: self.generation },
            _ => SleepOn::Nap(nap),
        }
    }
}

/// A [`FragmentHandler`] as a controlled one that takes every fragment.
fn continuing(mut handler: impl FragmentHandler) -> impl FnMut(&[u8], &Header) -> Action {
    move |payload: &[u8], h: &Header| {
        handler.on_fragment(payload, h);
        Action::Continue
    }
}

/// What one poll delivered, kept as the handler answers: the fields of the subscription that
/// say where it stands in the stream, and whether the handler stopped the poll.
struct Delivery<'a> {
    delivered: &'a mut i64,
    boundary: &'a mut i64,
    session: &'a mut Option<i32>,
    stopped: bool,
}

impl<'a> Delivery<'a> {
    fn of(delivered: &'a mut i64, boundary: &'a mut i64, session: &'a mut Option<i32>) -> Self {
        Self { delivered, boundary, session, stopped: false }
    }

    /// The handler answered `action` to the fragment of `h`: an aborted fragment is not
    /// delivered (nothing moves past it); a committed one stores the durable position now, if
    /// `recording` is known to hold its session.
    fn handled(
        &mut self,
        h: &Header,
        action: Action,
        reader: &DurableReader,
        recording: Option<(u32, i32)>,
    ) -> Action {
        self.stopped |= matches!(action, Action::Abort | Action::Break);
        if action == Action::Abort {
            return action;
        }
        self.note(h);
        if action == Action::Commit {
            if let Some((id, session)) = recording {
                if *self.session == Some(session) && reader.position() != Some((id, *self.boundary)) {
                    reader.store(id, *self.boundary);
                }
            }
        }
        action
    }

    /// Notes a fragment delivered.
    fn note(&mut self, h: &Header) {
        if *self.session != Some(h.session_id()) {
            // A new session: its first message starts where this fragment does.
            let aligned =
                (h.frame_length() as i64 + FRAME_ALIGNMENT as i64 - 1) & !(FRAME_ALIGNMENT as i64 - 1);
            *self.boundary = h.position() - aligned;
            *self.session = Some(h.session_id());
        }
        *self.delivered = h.position();
        if h.is_end() {
            *self.boundary = h.position();
        }
    }
}
