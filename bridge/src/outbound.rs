//! The out bridge: a reader of the local stream that offers every message to an Aeron UDP
//! publication, one Aeron stream across lost media drivers (`outbound/stream.rs`).

mod stream;

use crate::builder::{BackPressure, BridgeBuilder, BridgeError, Link, ResumeFile, Status};
use crate::client::Client;
use crate::status::{BridgeDirection, BridgeInfo, Loss, LossCause};
use crate::wire::{self, Reserved};
use aeron_rs::exclusive_publication::ExclusivePublication;
use aeron_rs::utils::errors::AeronError;
use shmlog::IdleStrategy;
use shmlog::{Action, FragmentAssembler, Header, JoinAt, Subscription};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stream::AeronStream;

/// Fragments read from the local stream per duty cycle.
const FRAGMENT_LIMIT: usize = 64;

/// Carries a local stream to an Aeron UDP channel. Drive it with [`BridgeOut::do_work`] in your
/// own loop, or hand it a thread with [`BridgeOut::run`].
pub struct BridgeOut {
    sub: Subscription,
    link: Link,
    publication: Option<Arc<Mutex<ExclusivePublication>>>,
    policy: BackPressure,
    status: Status,
    state: OutState,
}

/// What the duty cycle carries from one fragment to the next.
struct OutState {
    /// Reassembly of a fragmented message (one cut by a gap or a new session is dropped), and
    /// the source position where the last message begun starts.
    assembler: FragmentAssembler,
    message_start: i64,
    /// Messages taken from the stream and not yet offered, in order: one the publication pushed
    /// back (policy `Hold`), and those a lost driver had taken but not sent.
    pending: VecDeque<Msg>,
    /// Marks (`wire`) for the next message read from the source: a new session, a loss its
    /// reader reported before it, messages dropped before it. A message keeps the marks it was
    /// read with (held, or offered again after a lost driver); a dropped one passes them on.
    flags: i64,
    /// The source session being read.
    session: Option<i32>,
    /// The source session of the last message sent (the one the resume position belongs to).
    sent_session: i32,
    /// The run of messages being dropped (policy `Drop`) and its source session, closed by the
    /// next message sent (or a loss reported after it).
    drop_run: Option<(i32, Loss)>,
    /// The Aeron stream, and copies of the messages its current publication took: what a lost
    /// driver had taken but not sent is offered again from there, at the same positions.
    stream: AeronStream,
    /// Buffers to copy messages into, reused.
    pool: Vec<Vec<u8>>,
    /// The reader's `losses_dropped()` counted so far.
    reports_dropped: u64,
}

impl OutState {
    fn new(flags: i64) -> Self {
        OutState {
            assembler: FragmentAssembler::new(()),
            message_start: 0,
            pending: VecDeque::new(),
            flags,
            session: None,
            sent_session: 0,
            drop_run: None,
            stream: AeronStream::new(),
            pool: Vec::new(),
            reports_dropped: 0,
        }
    }
}

/// A message taken from the source: a copy of its bytes (aeron-rs offers from a mutable
/// buffer), where it starts and ends in its source session, and the marks it carries.
struct Msg {
    bytes: Vec<u8>,
    start: i64,
    end: i64,
    session: i32,
    flags: i64,
}

/// Buffers kept for reuse at most.
const POOL: usize = 1024;

impl BridgeBuilder {
    /// Starts a bridge from the local stream to the channel. The local stream must have a
    /// publisher (it is waited for up to the connect timeout).
    pub fn open_out(self) -> Result<BridgeOut, BridgeError> {
        BridgeOut::open(self)
    }
}

impl BridgeOut {
    pub(super) fn open(b: BridgeBuilder) -> Result<BridgeOut, BridgeError> {
        b.validate()?;
        let link = Link::open(&b)?;
        let mut status = Status::new(&b, BridgeDirection::Out, &link.aeron_dir)?;
        let (sub, state) = open_source(&b, &mut status)?;
        let mut out = BridgeOut { sub, link, publication: None, policy: b.back_pressure, status, state };
        out.link.ensure(&mut out.publication, Instant::now(), Client::add_publication)?;
        out.status.write(Instant::now());
        out.status.retire_predecessors();
        Ok(out)
    }

    /// One duty cycle: tends the Aeron client, offers the messages taken but not yet offered,
    /// then carries up to 64 fragments. Returns the work done (0: idle).
    pub fn do_work(&mut self) -> usize {
        let now = Instant::now();
        let (publication, mut sent_to, mut lost) = (&mut self.publication, None, false);
        self.link.tend_for(now, &mut self.status, |client| {
            lost = true;
            if let Some(p) = publication.take() {
                let registration = p.lock().unwrap_or_else(|e| e.into_inner()).original_registration_id();
                sent_to = client.sender_position(registration);
            }
        });
        if lost {
            let Status { info, resume, .. } = &mut self.status;
            send_again_after(&mut self.state, info, resume, sent_to);
        }
        let made = self.publication.is_none();
        let pinned = self.state.stream.channel_for(&self.link.channel);
        let add = |c: &mut Client, channel: &str, id, timeout| {
            c.add_publication(pinned.as_deref().unwrap_or(channel), id, timeout)
        };
        if let Err(e) = self.link.ensure(&mut self.publication, now, add) {
            eprintln!("shmlog bridge out: {e}");
            if pinned.is_some() {
                self.state.stream.give_up_continuing();
            }
        }
        if let Some(p) = self.publication.as_ref().filter(|_| made) {
            self.state.stream.adopt(&p.lock().unwrap_or_else(|e| e.into_inner()));
        }
        let work = match &self.publication {
            Some(p) => {
                let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
                self.status.info.connected = p.is_connected();
                let Status { info, resume, .. } = &mut self.status;
                carry(&mut self.sub, &mut AeronOut(&mut p), self.policy, &mut self.state, info, resume)
            }
            None => 0,
        };
        self.status.end_cycle(now);
        work
    }

    /// Runs [`BridgeOut::do_work`] until `stop` is set. With nothing to carry it sleeps on the
    /// stream's doorbell (woken the moment the publisher writes, or after 1 ms to tend the Aeron
    /// client); while the publication pushes back it backs off.
    pub fn run(&mut self, stop: &AtomicBool) {
        let mut backoff = shmlog::Backoff::default();
        while !stop.load(Ordering::Relaxed) {
            let work = self.do_work();
            if work > 0 {
                backoff.idle(work);
            } else if !self.state.pending.is_empty() || self.publication.is_none() {
                backoff.idle(0);
            } else {
                // May join a new session of the source: its loss reports wait in the
                // subscription for the next cycle's poll.
                self.sub.wait_readable(Duration::from_millis(1));
            }
        }
    }

    /// The bridge's counters and losses so far.
    pub fn status(&self) -> &BridgeInfo {
        &self.status.info
    }

    /// Whether the far side is there (the publication is connected).
    pub fn is_connected(&self) -> bool {
        self.status.info.connected
    }
}

impl std::fmt::Debug for BridgeOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeOut").field("status", &self.status.info).finish_non_exhaustive()
    }
}

/// Opens the bridge's reader of the local stream: where a dead predecessor stopped if it left a
/// resume position (the same message, if the log still holds it, so a quick restart loses
/// nothing), else at the slowest reader (Aeron's rule for a new reader). Returns it with the
/// duty cycle's first state: the marks for the first message sent, and any loss the join
/// found, in the status and marked [`wire::LOST`] (never only a fresh start: the far side would
/// see a jump and report nothing).
fn open_source(b: &BridgeBuilder, status: &mut Status) -> Result<(Subscription, OutState), BridgeError> {
    let resume = status.find_predecessors()?;
    let open = |join| {
        Subscription::builder(b.stream.clone())
            .dir(b.dir.clone())
            .join_at(join)
            .spin_before_sleep(b.spin_before_sleep)
            .wait_for_publisher(b.connect_timeout)
            .open()
    };
    let Some((r, session)) = resume else {
        return Ok((open(JoinAt::Slowest)?, OutState::new(wire::FRESH_START)));
    };
    // Kept in this bridge's own resume file at once, until it carries a message: a successor
    // still has it (and finds what this bridge found) if this bridge dies first.
    status.info.resume_position = r;
    status.resume.save(r, session);
    let info = &mut status.info;
    let mut st = OutState::new(0);
    let mut sub = match open(JoinAt::Position(r)) {
        // Not held any more (or not in this session): the nearest message the log holds, or,
        // if the log moved on meanwhile, its oldest.
        Err(shmlog::Error::PositionNotAvailable { nearest, .. }) => match open(JoinAt::Position(nearest)) {
            Err(shmlog::Error::PositionNotAvailable { .. }) => open(JoinAt::Earliest)?,
            other => other?,
        },
        other => other?,
    };
    if sub.session_id() != Some(session) {
        // A new session of the source (its publisher restarted): every message of it came after
        // the last one carried, so it is read from its first message. Whatever this
        // subscription reported is kept before it is let go.
        take_source_losses(&mut sub, &mut st, info);
        drop(sub);
        let sub = open(JoinAt::Earliest)?;
        st.flags |= wire::FRESH_START;
        if let (Some(id), Some(at)) = (sub.session_id(), sub.join_position()) {
            joined_late(&mut st, info, id, 0, at);
        }
        return Ok((sub, st));
    }
    // The same session: where the predecessor stopped, or past it if the log no longer held
    // that (then the skipped part is a loss; the far side measures it from where it stands).
    if let Some(at) = sub.join_position() {
        joined_late(&mut st, info, session, r, at);
    }
    st.session = Some(session);
    st.sent_session = session;
    Ok((sub, st))
}

/// The out bridge joined source session `session` at `at` where it owed it from `from`: the
/// skipped part is a loss (status, counter, and the mark on the next message).
fn joined_late(st: &mut OutState, info: &mut BridgeInfo, session: i32, from: i64, at: i64) {
    if at > from {
        let loss = shmlog::Loss { session_id: session, from, to: at, cause: shmlog::LossCause::JoinedLate };
        eprintln!("shmlog bridge out: could not resume: {loss}");
        record_source_loss(st, info, loss);
    }
}

/// Takes the losses the bridge's reader of the local stream reported into the status and
/// marks the next message read with them. Called before every poll, and a subscription joins
/// sessions only in calls that deliver nothing: each loss precedes the messages read after it.
fn take_source_losses(sub: &mut Subscription, st: &mut OutState, info: &mut BridgeInfo) {
    while let Some(loss) = sub.take_loss() {
        eprintln!("shmlog bridge out: the local stream's reader reports {loss}");
        record_source_loss(st, info, loss);
    }
    // Reports the subscription let go unread (more than it keeps between two polls): counted
    // and marked, though their positions are unknown.
    let unread = sub.losses_dropped();
    if unread != st.reports_dropped {
        let more = unread.wrapping_sub(st.reports_dropped);
        eprintln!("shmlog bridge out: {more} loss reports of the local stream's reader were let go unread");
        st.reports_dropped = unread;
        info.source_losses = info.source_losses.saturating_add(more);
        st.flags |= wire::LOST;
    }
}

/// A loss before the bridge: in the status (closing a run of drops first, so the list stays in
/// order), counted, and marked on the next message read.
fn record_source_loss(st: &mut OutState, info: &mut BridgeInfo, loss: shmlog::Loss) {
    if let Some((_, run)) = st.drop_run.take() {
        info.push_loss(run);
    }
    // The positions come from a log another process writes: kept valid for the status file.
    let from = loss.from.max(0);
    let to = loss.to.max(from);
    let cause = LossCause::Source { session: loss.session_id, cause: loss.cause };
    info.push_loss(Loss { from, to, messages: None, cause });
    info.source_losses = info.source_losses.saturating_add(1);
    st.flags |= wire::LOST;
}

/// After the driver was lost: offers again, first thing on the next publication (which
/// continues the Aeron stream, see `outbound/stream.rs`), every message its sender had not sent
/// in full (it had reached the publication's position `sent_to`, if its counter could be read),
/// each with the marks it was read with and [`wire::SENT_AGAIN`]. Without that, the messages
/// the dead driver held would be lost; at the same stream positions as before, what had
/// arrived after all is known to the in bridge and skipped, not carried twice.
fn send_again_after(st: &mut OutState, info: &mut BridgeInfo, resume: &ResumeFile, sent_to: Option<i64>) {
    let unsent = st.stream.lost(&mut st.pool, sent_to);
    let Some((from, session)) = unsent.first().map(|m| (m.start, m.session)) else { return };
    let bytes: u64 = unsent.iter().map(|m| m.bytes.len() as u64).sum();
    info.messages = info.messages.saturating_sub(unsent.len() as u64);
    info.bytes = info.bytes.saturating_sub(bytes);
    info.resume_position = from;
    resume.save(from, session);
    eprintln!(
        "shmlog bridge out: offering again {} messages from source position {from} that the lost driver had not sent",
        unsent.len()
    );
    for mut m in unsent.into_iter().rev() {
        m.flags |= wire::SENT_AGAIN;
        st.pending.push_front(m);
    }
}

/// The Aeron publication as the duty cycle uses it (a trait, so that the unit tests can stand
/// in for Aeron).
trait Outlet {
    /// Offers `message` with the reserved value `reserved`; its end position in the Aeron
    /// stream if taken.
    fn offer(&mut self, message: &mut [u8], reserved: i64) -> Result<i64, Refused>;
    /// The publication's term length: it never holds more unsent.
    fn term_length(&self) -> i64;
}

struct AeronOut<'a>(&'a mut ExclusivePublication);

impl Outlet for AeronOut<'_> {
    fn offer(&mut self, message: &mut [u8], reserved: i64) -> Result<i64, Refused> {
        offer(&mut *self.0, message, reserved)
    }

    fn term_length(&self) -> i64 {
        i64::from(self.0.term_buffer_length())
    }
}

/// Offers the pending messages, takes the losses the reader reported, then reads and offers up
/// to [`FRAGMENT_LIMIT`] fragments.
fn carry(
    sub: &mut Subscription,
    out: &mut impl Outlet,
    policy: BackPressure,
    st: &mut OutState,
    info: &mut BridgeInfo,
    resume: &ResumeFile,
) -> usize {
    let mut work = 0;
    // The marks of a message dropped here pass to the next one in source order.
    let mut passed = 0;
    while let Some(mut m) = st.pending.pop_front() {
        m.flags |= std::mem::take(&mut passed);
        match out.offer(&mut m.bytes, wire::encode(m.start, m.flags)) {
            Ok(aeron_end) => {
                sent(st, info, resume, &m);
                st.stream.taken(&mut st.pool, out.term_length(), aeron_end, m);
                work += 1;
            }
            Err(Refused::Busy) if policy == BackPressure::Hold => {
                st.pending.push_front(m);
                return work;
            }
            // Offered again after a lost driver: never dropped, whatever the policy, or the
            // messages after it would take other positions in the Aeron stream than before
            // and the far side could no longer tell what it has. Under `Drop` the source is
            // still read meanwhile, and what is read is dropped (below).
            Err(Refused::Busy) if m.flags & wire::SENT_AGAIN != 0 => {
                st.pending.push_front(m);
                break;
            }
            Err(why) => {
                passed = dropped(st, info, &m, why);
                recycle(&mut st.pool, m.bytes);
            }
        }
    }
    st.flags |= passed;
    take_source_losses(sub, st, info);
    work + sub.controlled_poll(
        |payload: &[u8], header: &Header| {
            let Some((start, bytes)) = whole_message(st, payload, header) else {
                return Action::Continue;
            };
            let end = header.position();
            let flags = std::mem::take(&mut st.flags);
            let mut m = Msg { bytes, start, end, session: header.session_id(), flags };
            // Messages offered again are still waiting (policy `Drop`): this one cannot go
            // before them, and is dropped.
            let offered = match st.pending.is_empty() {
                true => out.offer(&mut m.bytes, wire::encode(start, flags)),
                false => Err(Refused::Busy),
            };
            match offered {
                Ok(aeron_end) => {
                    sent(st, info, resume, &m);
                    st.stream.taken(&mut st.pool, out.term_length(), aeron_end, m);
                    Action::Continue
                }
                Err(Refused::Busy) if policy == BackPressure::Hold => {
                    st.pending.push_back(m);
                    info.back_pressure += 1;
                    Action::Break
                }
                Err(why) => {
                    st.flags |= dropped(st, info, &m, why);
                    recycle(&mut st.pool, m.bytes);
                    Action::Continue
                }
            }
        },
        FRAGMENT_LIMIT,
    )
}

/// Takes in one fragment of the source: marks a new session, and once a message is whole, its
/// source start position and a copy of it in a pooled buffer.
fn whole_message(st: &mut OutState, payload: &[u8], header: &Header) -> Option<(i64, Vec<u8>)> {
    if st.session != Some(header.session_id()) {
        if st.session.is_some() {
            st.flags |= wire::FRESH_START;
        }
        st.session = Some(header.session_id());
    }
    if header.is_begin() {
        st.message_start = header.position() - align32(header.frame_length() as i64);
    }
    // A message the reader joined inside of, or cut by a gap, never becomes whole.
    let (message, _) = st.assembler.assemble(payload, header)?;
    let mut bytes = st.pool.pop().unwrap_or_default();
    bytes.clear();
    bytes.extend_from_slice(message);
    Some((st.message_start, bytes))
}

/// Counts a message dropped (policy `Drop`, or one that can never be sent) into the current run
/// of drops; returns the marks for the next message in source order (the dropped one's, and
/// "after a drop").
fn dropped(st: &mut OutState, info: &mut BridgeInfo, m: &Msg, why: Refused) -> i64 {
    match why {
        Refused::Never(e) => {
            eprintln!("shmlog bridge out: message at position {} cannot be sent: {e}", m.start)
        }
        Refused::Busy => info.back_pressure += 1,
    }
    info.dropped += 1;
    match &mut st.drop_run {
        Some((session, run)) if *session == m.session && m.start >= run.to => {
            run.to = m.end;
            run.messages = run.messages.map(|n| n + 1);
        }
        // No run yet, or this drop is in another session of the source (whose positions start
        // again): a run of its own, so no loss ever has `to < from` (a status with one does not
        // parse).
        _ => {
            let run = Loss { from: m.start, to: m.end, messages: Some(1), cause: LossCause::Dropped };
            if let Some((_, old)) = st.drop_run.replace((m.session, run)) {
                info.push_loss(old);
            }
        }
    }
    (m.flags & !wire::SENT_AGAIN) | wire::AFTER_DROP
}

/// Counts a message sent, closes a run of drops before it, and records the resume position.
fn sent(st: &mut OutState, info: &mut BridgeInfo, resume: &ResumeFile, m: &Msg) {
    st.sent_session = m.session;
    if let Some((_, run)) = st.drop_run.take() {
        info.push_loss(run);
    }
    info.messages += 1;
    info.bytes += m.bytes.len() as u64;
    info.source_position = m.start;
    info.resume_position = m.end;
    resume.save(m.end, m.session);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refused {
    /// Back pressure, not connected, or an administrative pause: try again later.
    Busy,
    /// This message can never be sent (longer than the channel's maximum message).
    Never(&'static str),
}

fn recycle(pool: &mut Vec<Vec<u8>>, bytes: Vec<u8>) {
    if pool.len() < POOL {
        pool.push(bytes);
    }
}

/// Offers `message`; its end position in the publication if taken.
fn offer(p: &mut ExclusivePublication, message: &mut [u8], reserved: i64) -> Result<i64, Refused> {
    // A negative maximum (never from a driver) refuses every message: each is then counted and
    // reported as dropped, never lost silently.
    let max = usize::try_from(p.max_message_length()).unwrap_or(0);
    if message.len() > max {
        return Err(Refused::Never("longer than the channel's maximum message (its term length / 8)"));
    }
    let len = message.len() as i32;
    let buffer = aeron_rs::concurrent::atomic_buffer::AtomicBuffer::wrap_slice(message);
    Reserved::set(reserved);
    // An administrative pause (term rotation) clears at once: one immediate retry.
    for _ in 0..2 {
        match p.offer_opt(buffer, 0, len, wire::reserved_value) {
            Ok(position) => return Ok(position),
            Err(AeronError::AdminAction) => continue,
            Err(_) => return Err(Refused::Busy),
        }
    }
    Err(Refused::Busy)
}

fn align32(n: i64) -> i64 {
    (n + 31) & !31
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status as bridge_status;
    use shmlog::Publication;
    use std::path::Path;

    fn info() -> BridgeInfo {
        BridgeInfo::new("s", BridgeDirection::Out, "aeron:udp?endpoint=x:1", 1, "d")
    }

    fn msg(session: i32, start: i64, end: i64, flags: i64) -> Msg {
        Msg { bytes: vec![1; 10], start, end, session, flags }
    }

    /// The Aeron publication, as the duty cycle sees it: takes messages (or pushes back the
    /// next `refuse` offers) and keeps them with their reserved values.
    #[derive(Default)]
    struct FakeOut {
        sent: Vec<(Vec<u8>, i64)>,
        refuse: usize,
        position: i64,
    }

    impl Outlet for FakeOut {
        fn offer(&mut self, message: &mut [u8], reserved: i64) -> Result<i64, Refused> {
            if self.refuse > 0 {
                self.refuse -= 1;
                return Err(Refused::Busy);
            }
            self.sent.push((message.to_vec(), reserved));
            self.position += align32(message.len() as i64 + 32);
            Ok(self.position)
        }

        fn term_length(&self) -> i64 {
            1 << 16
        }
    }

    const TERM: usize = 64 * 1024;

    fn builder(dir: &std::path::Path) -> BridgeBuilder {
        BridgeBuilder::new("s")
            .dir(dir)
            .channel("aeron:udp?endpoint=127.0.0.1:1")
            .connect_timeout(Duration::from_secs(5))
    }

    /// A publisher of the local stream with 64 KiB terms.
    fn publisher(dir: &std::path::Path) -> Publication {
        Publication::builder("s").dir(dir).term_length(TERM).create().unwrap()
    }

    /// Offers `n` messages of 64 bytes, polling `reader` whenever the stream pushes back.
    fn publish(p: &mut Publication, reader: &mut Subscription, n: usize) {
        for _ in 0..n {
            let deadline = Instant::now() + Duration::from_secs(10);
            while p.offer(&[7; 64]).is_err() {
                reader.poll(|_: &[u8], _: &Header| {}, 64);
                assert!(Instant::now() < deadline, "the stream stayed full");
            }
        }
    }

    /// The files a predecessor out bridge killed with SIGKILL leaves: its status (under a pid
    /// that is gone) and its resume file, at `position` in source session `session`.
    fn predecessor(dir: &std::path::Path, b: &BridgeBuilder, position: i64, session: i32) {
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let pid = gone.id();
        gone.wait().unwrap();
        let mut old = BridgeInfo::new("s", BridgeDirection::Out, &b.channel, b.aeron_stream_id, "d");
        old.pid = pid;
        old.resume_position = position;
        bridge_status::write(dir, &old).unwrap();
        let mut bytes = position.to_le_bytes().to_vec();
        bytes.extend(session.to_le_bytes());
        bytes.extend([0; 4]);
        std::fs::write(bridge_status::resume_path(dir, "s", BridgeDirection::Out, pid), bytes).unwrap();
    }

    /// Runs the duty cycle (with the doorbell wait `run` uses) until `done`, at most 10 s.
    fn cycle_until(
        sub: &mut Subscription,
        out: &mut FakeOut,
        st: &mut OutState,
        status: &mut Status,
        mut done: impl FnMut(&FakeOut) -> bool,
    ) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done(out) {
            assert!(Instant::now() < deadline, "the bridge carried {} messages", out.sent.len());
            let Status { info, resume, .. } = status;
            if carry(sub, out, BackPressure::Hold, st, info, resume) == 0 {
                sub.wait_readable(Duration::from_millis(10));
            }
        }
    }

    /// The local stream's publisher restarts while the out bridge lags: the new session counts
    /// the bridge's reader, which waits for it, as owed from the session's start, so the session
    /// runs no further than a window before the bridge looks, and the bridge carries it whole
    /// from its first message, marked a fresh start and nothing lost. (Issue 23's case, a new
    /// session run two terms ahead of a reader that never looked, needs a reader that does not
    /// hold its publisher; a resume position the log no longer holds is the next test's.)
    #[test]
    fn a_new_session_while_the_bridge_lags_is_carried_whole_from_its_start() {
        let dir = crate::testing::TempDir::new("bridge-out-loss");
        let b = builder(dir.path());
        let mut p1 = publisher(dir.path());
        let mut status = Status::new(&b, BridgeDirection::Out, Path::new("/nowhere")).unwrap();
        let (mut sub, mut st) = open_source(&b, &mut status).unwrap();
        let mut out = FakeOut::default();
        for _ in 0..3 {
            p1.offer(&[1; 64]).unwrap();
        }
        cycle_until(&mut sub, &mut out, &mut st, &mut status, |o| o.sent.len() == 3);
        let marks: Vec<i64> = out.sent.iter().map(|(_, r)| wire::decode(*r).1).collect();
        assert_eq!(marks, [wire::FRESH_START, 0, 0], "a fresh join: no loss implied");
        drop(p1);
        let mut p2 = publisher(dir.path());
        let mut other = Subscription::builder("s").dir(dir.path()).open().unwrap();
        let mut held = 0;
        for _ in 0..4 * TERM / 96 {
            while p2.offer(&[2; 64]).is_err() {
                held += 1;
                other.poll(|_: &[u8], _: &Header| {}, 64);
                let Status { info, resume, .. } = &mut status;
                carry(&mut sub, &mut out, BackPressure::Hold, &mut st, info, resume);
            }
        }
        assert!(held > 0, "the lagging bridge held the new session");
        let sent = 3 + 4 * TERM / 96;
        cycle_until(&mut sub, &mut out, &mut st, &mut status, |o| o.sent.len() >= sent);
        let (at, marks) = wire::decode(out.sent[3].1);
        assert_eq!((at, marks), (0, wire::FRESH_START), "the new session from its first message");
        assert!(out.sent[4..].iter().all(|(_, r)| wire::decode(*r).1 == 0), "nothing lost");
        assert_eq!((&status.info.losses, status.info.source_losses), (&vec![], 0));
    }

    /// A restarted out bridge whose predecessor's resume position the log no longer holds
    /// joins at the nearest message and reports the skipped part as a loss of that session
    /// (`Source`, `JoinedLate`), marked `LOST` but not a fresh start: the far side measures it
    /// from where it stands. Before, it joined at the slowest reader, recorded a `Gap` in its
    /// own status only, and marked the first message a fresh start (no loss at the far side).
    #[test]
    fn a_resume_position_the_log_no_longer_holds_is_a_loss_the_far_side_sees() {
        let dir = crate::testing::TempDir::new("bridge-out-gone");
        let b = builder(dir.path());
        let mut p = publisher(dir.path());
        let mut other = Subscription::builder("s").dir(dir.path()).open().unwrap();
        publish(&mut p, &mut other, 4 * TERM / 96);
        predecessor(dir.path(), &b, 960, p.session_id());
        let mut status = Status::new(&b, BridgeDirection::Out, Path::new("/nowhere")).unwrap();
        let (sub, st) = open_source(&b, &mut status).unwrap();
        let at = sub.join_position().unwrap();
        assert!(at > 960, "{at}");
        assert_eq!((st.flags, st.session), (wire::LOST, Some(p.session_id())));
        let cause = LossCause::Source { session: p.session_id(), cause: shmlog::LossCause::JoinedLate };
        assert_eq!(status.info.losses, vec![Loss { from: 960, to: at, messages: None, cause }]);
        assert_eq!(status.info.source_losses, 1);
        let own = bridge_status::resume_path(dir.path(), "s", BridgeDirection::Out, std::process::id());
        assert_eq!(
            bridge_status::read_resume(&own),
            Some((960, p.session_id())),
            "kept until a message is carried: a successor finds the same loss"
        );
    }

    /// A restarted out bridge whose predecessor read an earlier session of the source (its
    /// publisher restarted meanwhile) owes the new session from its first message: it joins
    /// there (`Earliest`) and marks it a fresh start; what the log no longer holds of it is a
    /// loss. Before, it joined at the slowest reader (or the publisher's position): the
    /// messages before that were lost without a report.
    #[test]
    fn a_new_session_after_a_restart_is_read_from_its_first_message() {
        for (messages, lost) in [(10, false), (4 * TERM / 96, true)] {
            let dir = crate::testing::TempDir::new("bridge-out-new");
            let b = builder(dir.path());
            let mut p = publisher(dir.path());
            let mut other = Subscription::builder("s").dir(dir.path()).open().unwrap();
            publish(&mut p, &mut other, messages);
            // Another reader ahead: the slowest reader's position is past the first messages.
            other.poll(|_: &[u8], _: &Header| {}, usize::MAX);
            predecessor(dir.path(), &b, 4096, p.session_id().wrapping_add(1));
            let mut status = Status::new(&b, BridgeDirection::Out, Path::new("/nowhere")).unwrap();
            let (sub, st) = open_source(&b, &mut status).unwrap();
            let at = sub.join_position().unwrap();
            assert_eq!(st.session, None, "a new session: its first message is a fresh start");
            if lost {
                let cause =
                    LossCause::Source { session: p.session_id(), cause: shmlog::LossCause::JoinedLate };
                assert!(at > 0);
                assert_eq!(st.flags, wire::FRESH_START | wire::LOST);
                assert_eq!(status.info.losses, vec![Loss { from: 0, to: at, messages: None, cause }]);
            } else {
                assert_eq!((at, st.flags), (0, wire::FRESH_START));
                assert!(status.info.losses.is_empty(), "{:?}", status.info.losses);
            }
        }
    }

    /// Messages offered again after a lost driver keep the marks they were read with, and a
    /// dropped one passes its marks on: a loss's mark stays on the message right after the
    /// loss. Before, every message offered again took the marks meant for the next message
    /// read (a `LOST` could move, or vanish).
    #[test]
    fn marks_stay_with_their_messages_when_offered_again_or_dropped() {
        let dir = crate::testing::TempDir::new("bridge-out-marks");
        let mut sub = Subscription::builder("s").dir(dir.path()).open().unwrap();
        let (mut st, mut info, none) = (OutState::new(0), info(), ResumeFile::detached());
        let marked = wire::FRESH_START | wire::LOST;
        for (end, m) in [(100, msg(2, 0, 64, marked)), (200, msg(2, 64, 128, 0)), (300, msg(2, 128, 192, 0))]
        {
            st.stream.taken(&mut st.pool, 1 << 16, end, m);
        }
        info.messages = 3;
        send_again_after(&mut st, &mut info, &none, Some(50));
        assert_eq!((st.pending.len(), info.messages, info.resume_position), (3, 0, 0));
        // The next message read would carry other marks: they are not theirs.
        st.flags = wire::AFTER_DROP;
        let mut out = FakeOut::default();
        carry(&mut sub, &mut out, BackPressure::Hold, &mut st, &mut info, &none);
        let sent: Vec<(i64, i64)> = out.sent.iter().map(|(_, r)| wire::decode(*r)).collect();
        let again = wire::SENT_AGAIN;
        assert_eq!(sent, [(0, marked | again), (64, again), (128, again)]);
        assert_eq!(st.flags, wire::AFTER_DROP, "still for the next message read");
        // Under `Drop`, a marked message dropped passes its marks to the next one.
        st.flags = 0;
        st.pending.extend([msg(3, 0, 64, marked), msg(3, 64, 128, 0)]);
        let mut out = FakeOut { refuse: 1, ..FakeOut::default() };
        carry(&mut sub, &mut out, BackPressure::Drop, &mut st, &mut info, &none);
        assert_eq!(out.sent.len(), 1);
        assert_eq!(wire::decode(out.sent[0].1), (64, marked | wire::AFTER_DROP));
        assert_eq!(info.losses, vec![Loss { from: 0, to: 64, messages: Some(1), cause: LossCause::Dropped }]);
    }

    /// A message offered again after a lost driver is never dropped, under `Drop` either: it
    /// waits, and what the source gives meanwhile is dropped (counted, and marked on the next
    /// message sent). Dropping it would move every later message to other positions of the
    /// Aeron stream than before, and the far side could no longer tell which it has.
    #[test]
    fn a_message_offered_again_waits_and_what_comes_meanwhile_is_dropped() {
        let dir = crate::testing::TempDir::new("bridge-out-again");
        let mut p = publisher(dir.path());
        let mut sub = Subscription::builder("s").dir(dir.path()).open().unwrap();
        let (mut st, mut info, none) = (OutState::new(0), info(), ResumeFile::detached());
        st.session = Some(p.session_id());
        st.pending.push_back(msg(p.session_id(), 0, 64, wire::SENT_AGAIN));
        for _ in 0..2 {
            p.offer(&[5; 16]).unwrap();
        }
        let mut out = FakeOut { refuse: usize::MAX, ..FakeOut::default() };
        let deadline = Instant::now() + Duration::from_secs(10);
        while info.dropped < 2 {
            carry(&mut sub, &mut out, BackPressure::Drop, &mut st, &mut info, &none);
            assert!(Instant::now() < deadline, "{info:?}");
        }
        assert_eq!((st.pending.len(), out.sent.len()), (1, 0), "still waiting");
        out.refuse = 0;
        p.offer(&[6; 16]).unwrap();
        while out.sent.len() < 2 {
            carry(&mut sub, &mut out, BackPressure::Drop, &mut st, &mut info, &none);
            assert!(Instant::now() < deadline, "{info:?}");
        }
        let sent: Vec<(i64, i64)> = out.sent.iter().map(|(_, r)| wire::decode(*r)).collect();
        assert_eq!(sent, [(0, wire::SENT_AGAIN), (128, wire::AFTER_DROP)]);
        assert_eq!(
            info.losses,
            vec![Loss { from: 0, to: 128, messages: Some(2), cause: LossCause::Dropped }]
        );
    }

    /// A run of drops that continues into a new session of the source (positions from 0 again)
    /// is closed there: it once grew a `to` below its `from`, and the status file holding it
    /// no longer parsed (`shmlog stat` called it malformed, and a successor ignored it).
    #[test]
    fn a_run_of_drops_never_ends_before_it_starts() {
        let (mut st, none, mut info) = (OutState::new(0), ResumeFile::detached(), info());
        dropped(&mut st, &mut info, &msg(1, 4096, 4160, 0), Refused::Busy);
        dropped(&mut st, &mut info, &msg(1, 4160, 4224, 0), Refused::Busy);
        dropped(&mut st, &mut info, &msg(2, 4224, 4288, 0), Refused::Busy);
        dropped(&mut st, &mut info, &msg(2, 0, 64, 0), Refused::Busy);
        sent(&mut st, &mut info, &none, &msg(2, 64, 128, 0));
        assert_eq!(
            info.losses,
            vec![
                Loss { from: 4096, to: 4224, messages: Some(2), cause: LossCause::Dropped },
                Loss { from: 4224, to: 4288, messages: Some(1), cause: LossCause::Dropped },
                Loss { from: 0, to: 64, messages: Some(1), cause: LossCause::Dropped },
            ]
        );
        let text = info.to_text();
        assert!(BridgeInfo::parse("s", BridgeDirection::Out, 1, &text).is_some(), "{text}");
        assert_eq!(info.dropped, 4);
    }
}
