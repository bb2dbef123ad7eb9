//! Following a stream across its sessions: a reader's slot, the session it reads, and the one rule
//! for moving from one session to the next. `api::Subscription` is its builder and public face, as
//! `api::Publication` is `stream::Writer`'s.
//!
//! **The session-change rule.** A session ends when its publisher closes it (end of stream) or
//! dies; the follower reads what it committed, then *closes*: [`Follower::is_closed`] says so,
//! and stays `true` until the next call that may move on ([`Follower::settle`]), so every receive
//! shape reports the end of a session before it delivers anything of the next. Then the follower
//! waits, its slot saying which sessions are owed to it (those after the newest it knows of), and
//! joins the next session as soon as it appears: a publisher counts the readers its session is
//! owed to at the session's start until they join (`Slots::scan_rising`), so a follower that
//! exists when a session begins loses nothing of it, however late it looks.
//!
//! **Learning of a new session.** A new publisher takes its number from the stream's session
//! counter (in the slot file's header) before its log appears, and rings the doorbell once it
//! has. Sleepers wake on the ring; a busy poller compares the counter with what it last saw on
//! every poll that finds nothing (one load of a line that changes once a session), and looks at
//! once when it moved. Otherwise the publisher's liveness is checked once per liveness interval.
//!
//! **Loss is never silent.** Messages the follower cannot deliver (a later session joined past
//! its start, whole sessions that began and ended unseen, a session left at a fault, laps of an
//! untethered reader) are reported, one [`Loss`] each, in order with the messages: sessions are
//! joined only by calls that deliver nothing, so a loss taken after a poll that returned 0 lies
//! after everything delivered before and before everything delivered next.

use super::concurrent_files;
use super::concurrent_writer;
use super::doorbell::Doorbell;
use super::files::{self, Found};
use super::join::{JoinAt, JoinRefused};
use super::liveness::{publisher_alive, LogWriters, SlotFile};
use super::loss::{Loss, LossCause, SessionKind, Sessions};
use super::reader::{Fault, Reader, Resume};
use super::slots::{SlotMut, Slots};
use crate::error::Error;
use crate::log::Log;
use crate::region::{MmapRegion, ReadOnlyRegion};
use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Untaken loss reports a follower keeps; past it the oldest is dropped and counted.
pub const MAX_LOSSES: usize = 1024;

type Table = Slots<ReadOnlyRegion>;
pub(crate) type OwnSlot = SlotMut<MmapRegion>;
/// The reader of one session, as a follower holds it.
pub(crate) type SessionReader = Reader<ReadOnlyRegion, MmapRegion>;

/// How a follower goes on: where to join sessions, how to read them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rules {
    /// The first session joined, if running when the follower opened (or explicit).
    pub join: JoinAt,
    /// Sessions that begin while the follower waits for one.
    pub later: JoinAt,
    pub copy_payloads: bool,
    /// Where an untethered reader goes on after a lap.
    pub on_lapped: Resume,
    /// How often, at most, an idle follower checks its publisher by system call.
    pub liveness_interval: Duration,
}

/// A session a follower left: which, how it ended, and where the follower stood in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ended {
    pub session_id: i32,
    pub end_of_stream: bool,
    pub position: i64,
    pub join_position: i64,
}

/// Where a follower stands.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // the large variant is the usual one: boxing it would add a load to every poll
enum State {
    /// Holds a slot, reads no session (none yet, or a join was refused).
    Waiting(OwnSlot),
    /// Reads a session.
    Reading(Session),
    /// The session read last is over and everything it committed was delivered; reported as
    /// closed until the next call that may move on ([`Follower::settle`]).
    Closed(OwnSlot, Ended),
    /// Between the others, only inside a method.
    Switching,
}

/// The session a follower reads.
#[derive(Debug)]
struct Session {
    /// Holds our reader lock on the log for as long as we map it.
    file: File,
    reader: SessionReader,
    /// The publisher's liveness at the last check.
    publisher_alive: bool,
    /// The fault was handed out once ([`Follower::take_fault`]): waits no longer count it news.
    fault_reported: bool,
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

    /// `true` when the session is over and everything it committed was read.
    fn over(&self) -> bool {
        self.reader.at_end_of_stream() || (!self.publisher_alive && self.reader.drained())
    }
}

/// Loss reports waiting to be taken, oldest first, at most [`MAX_LOSSES`].
#[derive(Debug, Default)]
struct Losses {
    queue: VecDeque<Loss>,
    dropped: u64,
}

impl Losses {
    /// Past [`MAX_LOSSES`] untaken reports the oldest is dropped and counted: a follower whose
    /// owner never asks cannot grow without bound.
    fn report(&mut self, loss: Loss) {
        if self.queue.len() == MAX_LOSSES {
            self.queue.pop_front();
            self.dropped += 1;
        }
        self.queue.push_back(loss);
    }
}

/// A reader of a stream across its sessions: one slot for its life, one session at a time.
#[derive(Debug)]
pub(crate) struct Follower {
    log_path: PathBuf,
    slot_file: SlotFile,
    slots: Table,
    state: State,
    rules: Rules,
    /// The rule for the next join (`rules.join` until a first session is joined).
    next_join: JoinAt,
    /// The newest of the stream's sessions this follower knows of.
    sessions: Sessions,
    /// The number of the session joined last: never joined again.
    last_joined: Option<i32>,
    losses: Losses,
    /// Laps of an untethered reader, over the follower's life.
    laps: u64,
    /// The stream's session counter as a check found it ahead of every log, and since when.
    vanishing: Option<(i32, Instant)>,
    /// The id of the session joined last (for a report of sessions missed after it).
    last_session_id: Option<i32>,
    /// The stream's session counter as the last idle poll saw it.
    counter_seen: i32,
    idle_polls: u32,
    next_check: Instant,
    /// How the last session left ended, until taken (for a recorder closing its recording).
    ended: Option<Ended>,
}

impl Follower {
    /// Takes a slot of stream `name` in `dir` (`max_readers` and `file_mode` if this creates the
    /// slot file) and joins the stream's current session, if a live publisher has one.
    pub(crate) fn open(
        dir: &Path,
        name: &str,
        max_readers: usize,
        file_mode: u32,
        tethered: bool,
        rules: Rules,
    ) -> Result<Self, Error> {
        let (slot_file, slots, mut slot) = claim_slot(dir, name, max_readers, file_mode, !tethered)?;
        // Sessions numbered up to `known` were running before we waited: joined by our own rule.
        // Any later one counts us as owed from its start until we join it.
        let known = slot.owe_sessions_after(&slots);
        let mut follower = Follower {
            log_path: super::name::log_path(dir, name),
            slot_file,
            slots,
            state: State::Waiting(slot),
            rules,
            next_join: rules.join,
            sessions: Sessions::new(known),
            last_joined: None,
            losses: Losses::default(),
            laps: 0,
            vanishing: None,
            last_session_id: None,
            counter_seen: known,
            idle_polls: 0,
            next_check: Instant::now(),
            ended: None,
        };
        follower.try_join()?;
        Ok(follower)
    }

    /// The reader of the session being read, for the polls' fast path.
    #[inline(always)]
    pub(crate) fn reader(&mut self) -> Option<&mut SessionReader> {
        match &mut self.state {
            State::Reading(s) => Some(&mut s.reader),
            _ => None,
        }
    }

    /// After a poll that delivered nothing, or had no session to read: an untethered reader's
    /// lap reports; a closed session left (the call after the one that closed it may move on);
    /// a new session looked for at once when the stream's counter moved; then the idle tick.
    #[inline]
    pub(crate) fn empty_poll(&mut self) {
        if let State::Reading(s) = &self.state {
            if !s.reader.is_untethered() && !s.over() && self.slots.sessions() == self.counter_seen {
                return self.idle_tick();
            }
        }
        self.empty_poll_cold();
    }

    #[cold]
    #[inline(never)]
    fn empty_poll_cold(&mut self) {
        let settled = self.settle();
        self.take_reader_losses();
        let counter = self.slots.sessions();
        let moved = std::mem::replace(&mut self.counter_seen, counter) != counter;
        let over = matches!(&self.state, State::Reading(s) if s.over());
        // A new publisher takes its number just before its log appears: until it does (or the
        // session is given up as vanished), look on every poll.
        let looking = matches!(self.state, State::Waiting(_)) && self.vanishing.is_some();
        if settled || moved || over || looking {
            let _ = self.check();
            return;
        }
        self.idle_tick();
    }

    /// After a `block_poll` of `moved` bytes: an untethered reader's laps move the position
    /// without delivering, so their reports go out now.
    pub(crate) fn after_block_poll(&mut self, moved: usize) {
        if self.is_untethered() {
            self.take_reader_losses();
        }
        if moved == 0 {
            self.empty_poll();
        }
    }

    /// Leaves a closed session, once it was reported: the follower waits for the next one, which
    /// the next poll or wait joins. `true` if it left one.
    pub(crate) fn settle(&mut self) -> bool {
        if !matches!(self.state, State::Closed(..)) {
            return false;
        }
        let State::Closed(slot, _) = std::mem::replace(&mut self.state, State::Switching) else {
            unreachable!("matched above")
        };
        self.state = State::Waiting(slot);
        true
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
            self.next_check = now + self.rules.liveness_interval;
            let _ = self.check();
        }
    }

    /// After a wake-up that brought no news: a new publisher rings the bell when its session
    /// appears, so look at once if the stream's session counter moved (a load, no system call:
    /// a peer that keeps ringing for nothing costs no checks).
    pub(crate) fn after_empty_wake(&mut self) {
        let counter = self.slots.sessions();
        let moved = std::mem::replace(&mut self.counter_seen, counter) != counter;
        // Or it moved before we slept, and the log it announced was not there yet.
        let looking = matches!(self.state, State::Waiting(_)) && self.vanishing.is_some();
        if moved || looking {
            self.next_check = Instant::now();
        }
    }

    /// Checks now if a check is due at `now`; returns when the next is due.
    pub(crate) fn check_if_due(&mut self, now: Instant) -> Instant {
        if now >= self.next_check {
            self.next_check = now + self.rules.liveness_interval;
            let _ = self.check();
        }
        self.next_check
    }

    /// Updates the publisher's liveness and checks the reader's bounds; closes a session that
    /// is over (end of stream, or a dead publisher and nothing committed left to read); joins a
    /// session when waiting for one.
    pub(crate) fn check(&mut self) -> Result<(), Error> {
        match &mut self.state {
            State::Reading(s) => {
                s.reader.idle_check();
                s.publisher_alive = !s.reader.at_end_of_stream() && publisher_alive(&s.file);
                let concurrent = s.reader.log().is_concurrent();
                if concurrent && !s.reader.at_end_of_stream() && (s.reader.held() || !s.publisher_alive) {
                    s.unblock(&self.log_path);
                }
                // Never leave committed messages of a dead session behind (an `Abort`, or a poll
                // of zero fragments, also lands here).
                if s.over() {
                    self.close_session();
                }
                Ok(())
            }
            State::Waiting(_) => self.try_join(),
            State::Closed(..) | State::Switching => Ok(()),
        }
    }

    /// Joins the stream's current session if a live publisher has one that we did not read yet
    /// (or a finished one that began while we waited). Only while waiting.
    fn try_join(&mut self) -> Result<(), Error> {
        if !matches!(self.state, State::Waiting(_)) {
            return Ok(());
        }
        let next = match files::open_log(&self.log_path, None)? {
            Found::Live(next) if !self.joined_before(next.log.session_seq()) => next,
            // A session that began while we waited and is over already: ours to read all the same.
            Found::Dead(dead)
                if self.sessions.classify(dead.session_seq) != SessionKind::Running
                    && !self.joined_before(dead.session_seq) =>
            {
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
        let State::Waiting(slot) = std::mem::replace(&mut self.state, State::Switching) else {
            unreachable!("checked above")
        };
        let seq = next.log.session_seq();
        let kind = self.sessions.classify(seq);
        let asked = std::mem::replace(&mut self.next_join, JoinAt::Slowest);
        let explicit = matches!(asked, JoinAt::Position(_));
        let rule = if explicit || kind == SessionKind::Running { asked } else { self.rules.later };
        match Reader::join(next.log, &self.slots, slot, rule, self.rules.copy_payloads) {
            Ok(mut reader) => {
                reader.set_resume(self.rules.on_lapped);
                self.sessions.joined(seq);
                self.last_joined = Some(seq);
                self.vanishing = None;
                let session_id = reader.log().session_id();
                self.last_session_id = Some(session_id);
                for loss in
                    Sessions::losses(kind, session_id, reader.join_position(), explicit).into_iter().flatten()
                {
                    self.losses.report(loss);
                }
                self.state = State::Reading(Session {
                    publisher_alive: publisher_alive(&next.file),
                    file: next.file,
                    reader,
                    fault_reported: false,
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

    /// `true` if the session numbered `seq` is one we joined already (the last one, or older).
    fn joined_before(&self, seq: i32) -> bool {
        self.last_joined.is_some_and(|last| seq.wrapping_sub(last) <= 0)
    }

    /// With no session to join: sessions the stream's counter says began after every one we
    /// know of, whose logs are gone (replaced by a newer one that is gone too, or removed by
    /// `clean`), are reported missed once the counter has stood ahead for a liveness interval (a
    /// publisher takes its number just before its log appears under the stream's name).
    fn notice_vanished_sessions(&mut self) {
        let counter = self.slots.sessions();
        let now = Instant::now();
        match self.sessions.classify(counter) {
            SessionKind::Later { missed } => match self.vanishing {
                Some((seen, since))
                    if seen == counter
                        && now.saturating_duration_since(since) >= self.rules.liveness_interval =>
                {
                    let session_id = self.last_session_id.unwrap_or(0);
                    let sessions = missed.saturating_add(1);
                    self.losses.report(Loss {
                        session_id,
                        from: 0,
                        to: 0,
                        cause: LossCause::SessionsMissed { sessions },
                    });
                    self.sessions.joined(counter);
                    self.vanishing = None;
                }
                Some((seen, _)) if seen == counter => {}
                _ => self.vanishing = Some((counter, now)),
            },
            SessionKind::Running => self.vanishing = None,
        }
    }

    /// Leaves the session being read, which is over: the follower is closed until settled.
    fn close_session(&mut self) {
        self.take_reader_losses();
        let State::Reading(s) = std::mem::replace(&mut self.state, State::Switching) else {
            unreachable!("only while reading")
        };
        let ended = Ended {
            session_id: s.reader.log().session_id(),
            end_of_stream: s.reader.at_end_of_stream(),
            position: s.reader.position(),
            join_position: s.reader.join_position(),
        };
        self.report_fault_loss(&s);
        self.ended = Some(ended);
        self.state = State::Closed(s.reader.leave(), ended);
    }

    /// Committed messages past a fault were never delivered: one loss for them.
    fn report_fault_loss(&mut self, s: &Session) {
        if s.reader.fault().is_none() {
            return;
        }
        let from = s.reader.position();
        let end = s.reader.log().eos_position();
        let to = s.reader.log().producer_position().unwrap_or(from).min(end);
        if to > from {
            self.losses.report(Loss {
                session_id: s.reader.log().session_id(),
                from,
                to,
                cause: LossCause::Fault,
            });
        }
    }

    /// Moves the reader's lap reports (an untethered reader's) to the queue.
    fn take_reader_losses(&mut self) {
        while let Some(loss) = match &mut self.state {
            State::Reading(s) => s.reader.take_loss(),
            _ => None,
        } {
            self.laps += 1;
            self.losses.report(loss);
        }
    }

    /// The oldest loss report not taken yet.
    pub(crate) fn take_loss(&mut self) -> Option<Loss> {
        self.losses.queue.pop_front()
    }

    /// Loss reports dropped unread because more than [`MAX_LOSSES`] were waiting.
    pub(crate) fn losses_dropped(&self) -> u64 {
        self.losses.dropped
    }

    /// Times an untethered reader was lapped, over the follower's life.
    pub(crate) fn laps(&self) -> u64 {
        self.laps
    }

    /// How the last session left ended, once.
    pub(crate) fn take_ended(&mut self) -> Option<Ended> {
        self.ended.take()
    }

    /// The fault of the session being read, once: later waits do not count it news (nothing
    /// more of the session comes; the follower closes it once its publisher is gone).
    pub(crate) fn take_fault(&mut self) -> Option<Fault> {
        match &mut self.state {
            State::Reading(s) if !s.fault_reported => {
                let fault = s.reader.fault()?;
                s.fault_reported = true;
                Some(fault)
            }
            _ => None,
        }
    }

    /// `true` if a poll now would deliver or report something, or the session is closed.
    pub(crate) fn readable(&self) -> bool {
        match &self.state {
            State::Reading(s) => {
                if s.fault_reported {
                    s.over()
                } else {
                    s.reader.has_news() || s.over()
                }
            }
            State::Closed(..) => true,
            _ => false,
        }
    }

    /// The stream's doorbell, through our slot.
    pub(crate) fn bell(&self) -> Option<&Doorbell<MmapRegion>> {
        match &self.state {
            State::Reading(s) => s.reader.bell(),
            State::Waiting(slot) | State::Closed(slot, _) => slot.bell(),
            State::Switching => None,
        }
    }

    /// The stream's doorbell page, mapped on its own (for a thread that sleeps for us).
    #[cfg(feature = "async")]
    pub(crate) fn map_doorbell(&self) -> Result<Doorbell<MmapRegion>, Error> {
        self.slot_file.map_doorbell().map_err(|e| Error::io("map doorbell", &self.slot_file.path, e))
    }

    /// `true` if this follower's reader is untethered.
    pub(crate) fn is_untethered(&self) -> bool {
        match &self.state {
            State::Reading(s) => s.reader.is_untethered(),
            State::Waiting(slot) | State::Closed(slot, _) => slot.untethered(),
            State::Switching => false,
        }
    }

    /// The log of the session being read.
    pub(crate) fn log(&self) -> Option<&Log<ReadOnlyRegion>> {
        match &self.state {
            State::Reading(s) => Some(s.reader.log()),
            _ => None,
        }
    }

    /// `true` while reading a session whose publisher is alive and has not closed. Checks the
    /// publisher's lock (a system call).
    pub(crate) fn is_connected(&mut self) -> bool {
        match &mut self.state {
            State::Reading(s) => {
                s.publisher_alive = s.reader.log().eos_position() == i64::MAX && publisher_alive(&s.file);
                s.publisher_alive
            }
            _ => false,
        }
    }

    /// `true` once every message before the publisher's close has been read.
    pub(crate) fn is_end_of_stream(&self) -> bool {
        match &self.state {
            State::Reading(s) => s.reader.at_end_of_stream(),
            State::Closed(_, ended) => ended.end_of_stream,
            _ => false,
        }
    }

    /// `true` when the session read last is over, everything it committed was read, and a poll
    /// (or a wait) found it so, until the next call, which moves on: true between exactly two
    /// calls per session, so a loop that asks after every call sees it once.
    pub(crate) fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed(..))
    }

    /// Position after the last fragment consumed (in a closed session: where it ended; 0 before
    /// any session).
    pub(crate) fn position(&self) -> i64 {
        match &self.state {
            State::Reading(s) => s.reader.position(),
            State::Closed(_, ended) => ended.position,
            _ => 0,
        }
    }

    pub(crate) fn join_position(&self) -> Option<i64> {
        match &self.state {
            State::Reading(s) => Some(s.reader.join_position()),
            State::Closed(_, ended) => Some(ended.join_position),
            _ => None,
        }
    }

    pub(crate) fn session_id(&self) -> Option<i32> {
        match &self.state {
            State::Reading(s) => Some(s.reader.log().session_id()),
            State::Closed(_, ended) => Some(ended.session_id),
            _ => None,
        }
    }

    pub(crate) fn fault(&self) -> Option<Fault> {
        match &self.state {
            State::Reading(s) => s.reader.fault(),
            _ => None,
        }
    }

    /// How often, at most, an idle follower checks its publisher.
    #[cfg(feature = "async")]
    pub(crate) fn liveness_interval(&self) -> Duration {
        self.rules.liveness_interval
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let slot = match std::mem::replace(&mut self.state, State::Switching) {
            State::Waiting(slot) | State::Closed(slot, _) => slot,
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

/// Opens (or creates) the slot file and claims a slot, reopening if the file is being removed.
fn claim_slot(
    dir: &Path,
    name: &str,
    max_readers: usize,
    file_mode: u32,
    untethered: bool,
) -> Result<(SlotFile, Table, OwnSlot), Error> {
    let mut full = 0;
    for _ in 0..64 {
        let (slot_file, slots) = files::open_readers(dir, name, max_readers, file_mode, false)?;
        if let Some(slot) = slot_file.claim(&slots, untethered)? {
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
