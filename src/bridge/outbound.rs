//! The out bridge: a reader of the local stream that offers every message to an Aeron UDP
//! publication.

use super::client::Client;
use super::wire::{self, Reserved};
use super::{BackPressure, BridgeBuilder, BridgeError, Link, ResumeFile, Status};
use crate::api::bridge_status::{BridgeDirection, BridgeInfo, Loss, LossCause};
use crate::IdleStrategy;
use crate::{Action, Header, JoinAt, Subscription};
use aeron_rs::publication::Publication;
use aeron_rs::utils::errors::AeronError;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Fragments read from the local stream per duty cycle.
const FRAGMENT_LIMIT: usize = 64;

/// Carries a local stream to an Aeron UDP channel. Drive it with [`BridgeOut::do_work`] in your
/// own loop, or hand it a thread with [`BridgeOut::run`].
pub struct BridgeOut {
    sub: Subscription,
    link: Link,
    publication: Option<Arc<Mutex<Publication>>>,
    policy: BackPressure,
    status: Status,
    state: OutState,
}

/// What the duty cycle carries from one fragment to the next.
struct OutState {
    /// Reassembly of a fragmented message: its bytes and source start position.
    assembly: Vec<u8>,
    assembly_start: Option<i64>,
    /// Messages taken from the stream and not yet offered, in order: one the publication pushed
    /// back (policy `Hold`), and those a lost driver had taken but not sent.
    pending: VecDeque<Msg>,
    /// Flags for the next message sent.
    flags: i64,
    /// The source session being read.
    session: Option<i32>,
    /// The source session of the last message sent (the one the resume position belongs to).
    sent_session: i32,
    /// The run of messages being dropped (policy `Drop`), closed by the next message sent.
    drop_run: Option<Loss>,
    /// Copies of the messages the current publication took within its last term of stream
    /// (it never holds more unsent), with their ends in the Aeron stream: what a lost driver
    /// had taken but not sent is offered again from here.
    offered: VecDeque<(i64, Msg)>,
    /// Buffers to copy messages into, reused.
    pool: Vec<Vec<u8>>,
}

/// A message taken from the source: a copy of its bytes (aeron-rs offers from a mutable
/// buffer), and where it starts and ends in the source stream.
struct Msg {
    bytes: Vec<u8>,
    start: i64,
    end: i64,
}

/// Buffers kept for reuse at most.
const POOL: usize = 1024;

impl BridgeOut {
    pub(super) fn open(b: BridgeBuilder) -> Result<BridgeOut, BridgeError> {
        b.validate()?;
        let link = Link::open(&b)?;
        let mut status = Status::new(&b, BridgeDirection::Out, &link.aeron_dir)?;
        // A predecessor killed mid-stream left where it stopped: resume there if the log still
        // holds it, so a quick restart loses nothing.
        let resume = status.find_predecessors()?;
        let builder = |join| {
            Subscription::builder(b.stream.clone())
                .dir(b.dir.clone())
                .join_at(join)
                .spin_before_sleep(b.spin_before_sleep)
                .wait_for_publisher(b.connect_timeout)
                .open()
        };
        // Resumed: joined at the predecessor's position in the same session of the source.
        let mut resumed = None;
        let sub = match resume {
            Some((r, session)) => match builder(JoinAt::Position(r)) {
                Ok(s) if s.session_id() == Some(session) => {
                    resumed = Some((r, session));
                    s
                }
                // A new session of the source (its publisher restarted): start afresh.
                Ok(s) => {
                    drop(s);
                    builder(JoinAt::Slowest)?
                }
                Err(crate::Error::PositionNotAvailable { .. }) => {
                    let s = builder(JoinAt::Slowest)?;
                    let join = s.join_position().filter(|&j| j > r && s.session_id() == Some(session));
                    if let Some(join) = join {
                        status.info.push_loss(Loss {
                            from: r,
                            to: join,
                            messages: None,
                            cause: LossCause::Gap,
                        });
                    }
                    s
                }
                Err(e) => return Err(e.into()),
            },
            None => builder(JoinAt::Slowest)?,
        };
        if let Some((position, session)) = resumed {
            // Kept in this bridge's own resume file at once: a successor still has it if this
            // bridge dies before it sends a message.
            status.info.resume_position = position;
            status.resume.save(position, session);
        }
        let mut out = BridgeOut {
            sub,
            link,
            publication: None,
            policy: b.back_pressure,
            status,
            state: OutState {
                assembly: Vec::new(),
                assembly_start: None,
                pending: VecDeque::new(),
                // Only a resumed stream continues what the far side saw before.
                flags: if resumed.is_some() { 0 } else { wire::FRESH_START },
                session: resumed.map(|r| r.1),
                sent_session: resumed.map_or(0, |r| r.1),
                drop_run: None,
                offered: VecDeque::new(),
                pool: Vec::new(),
            },
        };
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
            self.send_again_after(sent_to);
        }
        if let Err(e) = self.link.ensure(&mut self.publication, now, Client::add_publication) {
            eprintln!("shmlog bridge out: {e}");
        }
        let work = match &self.publication {
            Some(p) => {
                let p = p.lock().unwrap_or_else(|e| e.into_inner());
                self.status.info.connected = p.is_connected();
                let Status { info, resume, .. } = &mut self.status;
                carry(&mut self.sub, &p, self.policy, &mut self.state, info, resume)
            }
            None => 0,
        };
        self.status.end_cycle(now);
        work
    }

    /// After the driver was lost: offers again, first thing on the next publication, every
    /// message its sender had not sent in full (it had reached Aeron stream position `sent_to`,
    /// if its counter could be read). Without that, the messages the dead driver held would be
    /// lost; with no position, what it held is lost and the far side reports the gap.
    fn send_again_after(&mut self, sent_to: Option<i64>) {
        let (st, info) = (&mut self.state, &mut self.status.info);
        let first = match sent_to {
            Some(sent_to) => {
                st.offered.iter().position(|(end, _)| *end > sent_to).unwrap_or(st.offered.len())
            }
            None => st.offered.len(),
        };
        let unsent: Vec<Msg> = st.offered.drain(first..).map(|(_, m)| m).collect();
        for (_, m) in st.offered.drain(..) {
            recycle(&mut st.pool, m.bytes);
        }
        let Some(from) = unsent.first().map(|m| m.start) else { return };
        let bytes: u64 = unsent.iter().map(|m| m.bytes.len() as u64).sum();
        info.messages -= unsent.len() as u64;
        info.bytes -= bytes;
        info.resume_position = from;
        self.status.resume.save(from, st.sent_session);
        eprintln!(
            "shmlog bridge out: offering again {} messages from source position {from} that the lost driver had not sent",
            unsent.len()
        );
        for m in unsent.into_iter().rev() {
            st.pending.push_front(m);
        }
    }

    /// Runs [`BridgeOut::do_work`] until `stop` is set. With nothing to carry it sleeps on the
    /// stream's doorbell (woken the moment the publisher writes, or after 1 ms to tend the Aeron
    /// client); while the publication pushes back it backs off.
    pub fn run(&mut self, stop: &AtomicBool) {
        let mut backoff = crate::Backoff::default();
        while !stop.load(Ordering::Relaxed) {
            let work = self.do_work();
            if work > 0 {
                backoff.idle(work);
            } else if !self.state.pending.is_empty() || self.publication.is_none() {
                backoff.idle(0);
            } else {
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

/// Offers the pending messages, then reads and offers up to [`FRAGMENT_LIMIT`] fragments.
fn carry(
    sub: &mut Subscription,
    p: &Publication,
    policy: BackPressure,
    st: &mut OutState,
    info: &mut BridgeInfo,
    resume: &ResumeFile,
) -> usize {
    let mut work = 0;
    while let Some(mut m) = st.pending.pop_front() {
        match offer(p, &mut m.bytes, wire::encode(m.start, st.flags)) {
            Ok(aeron_end) => {
                sent(st, info, resume, m.bytes.len(), m.start, m.end);
                remember(st, p, aeron_end, m);
                work += 1;
            }
            Err(Refused::Busy) if policy == BackPressure::Hold => {
                st.pending.push_front(m);
                return work;
            }
            Err(why) => {
                dropped(st, info, m.start, m.end, why);
                recycle(&mut st.pool, m.bytes);
            }
        }
    }
    work + sub.controlled_poll(
        |payload: &[u8], header: &Header| {
            if st.session != Some(header.session_id()) {
                if st.session.is_some() {
                    st.flags |= wire::FRESH_START;
                }
                st.session = Some(header.session_id());
                st.assembly_start = None;
            }
            let end = header.position();
            let start = if header.is_begin() {
                end - align32(header.frame_length() as i64)
            } else {
                match st.assembly_start {
                    Some(s) => s,
                    None => return Action::Continue, // joined inside a message
                }
            };
            if !header.is_end() {
                if header.is_begin() {
                    st.assembly.clear();
                    st.assembly_start = Some(start);
                }
                st.assembly.extend_from_slice(payload);
                return Action::Continue;
            }
            let message = if header.is_begin() {
                payload
            } else {
                st.assembly.extend_from_slice(payload);
                st.assembly_start = None;
                &st.assembly[..]
            };
            let mut bytes = st.pool.pop().unwrap_or_default();
            bytes.clear();
            bytes.extend_from_slice(message);
            let mut m = Msg { bytes, start, end };
            match offer(p, &mut m.bytes, wire::encode(start, st.flags)) {
                Ok(aeron_end) => {
                    sent(st, info, resume, m.bytes.len(), start, end);
                    remember(st, p, aeron_end, m);
                    Action::Continue
                }
                Err(Refused::Busy) if policy == BackPressure::Hold => {
                    st.pending.push_back(m);
                    info.back_pressure += 1;
                    Action::Break
                }
                Err(why) => {
                    recycle(&mut st.pool, m.bytes);
                    dropped(st, info, start, end, why);
                    Action::Continue
                }
            }
        },
        FRAGMENT_LIMIT,
    )
}

/// Counts a message dropped (policy `Drop`, or one that can never be sent) into the current run
/// of drops, and marks the next message sent as following a drop.
fn dropped(st: &mut OutState, info: &mut BridgeInfo, start: i64, end: i64, why: Refused) {
    match why {
        Refused::Never(e) => eprintln!("shmlog bridge out: message at position {start} cannot be sent: {e}"),
        Refused::Busy => info.back_pressure += 1,
    }
    info.dropped += 1;
    st.flags |= wire::AFTER_DROP;
    match &mut st.drop_run {
        Some(run) if start >= run.to => {
            run.to = end;
            run.messages = run.messages.map(|n| n + 1);
        }
        // No run yet, or this drop starts before the run's end (a new session of the source,
        // whose positions start again): a run of its own, so no loss ever has `to < from` (a
        // status with one does not parse).
        _ => {
            let run = Loss { from: start, to: end, messages: Some(1), cause: LossCause::Dropped };
            if let Some(old) = st.drop_run.replace(run) {
                info.push_loss(old);
            }
        }
    }
}

/// Counts a message sent, closes a run of drops before it, and records the resume position.
fn sent(st: &mut OutState, info: &mut BridgeInfo, resume: &ResumeFile, len: usize, start: i64, end: i64) {
    st.flags = 0;
    st.sent_session = st.session.unwrap_or(0);
    if let Some(run) = st.drop_run.take() {
        info.push_loss(run);
    }
    info.messages += 1;
    info.bytes += len as u64;
    info.source_position = start;
    info.resume_position = end;
    resume.save(end, st.sent_session);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refused {
    /// Back pressure, not connected, or an administrative pause: try again later.
    Busy,
    /// This message can never be sent (longer than the channel's maximum message).
    Never(&'static str),
}

/// Keeps the copy of a message the publication took, and lets go of those more than a term
/// behind it (a publication never holds more unsent).
fn remember(st: &mut OutState, p: &Publication, aeron_end: i64, m: Msg) {
    let term = i64::from(p.term_buffer_length());
    while st.offered.front().is_some_and(|(end, _)| end + term < aeron_end) {
        if let Some((_, old)) = st.offered.pop_front() {
            recycle(&mut st.pool, old.bytes);
        }
    }
    st.offered.push_back((aeron_end, m));
}

fn recycle(pool: &mut Vec<Vec<u8>>, bytes: Vec<u8>) {
    if pool.len() < POOL {
        pool.push(bytes);
    }
}

/// Offers `message`; its end position in the Aeron stream if taken.
fn offer(p: &Publication, message: &mut [u8], reserved: i64) -> Result<i64, Refused> {
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
            Ok(position) => return Ok(position as i64),
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

    fn state() -> OutState {
        OutState {
            assembly: Vec::new(),
            assembly_start: None,
            pending: VecDeque::new(),
            flags: 0,
            session: Some(1),
            sent_session: 1,
            drop_run: None,
            offered: VecDeque::new(),
            pool: Vec::new(),
        }
    }

    /// A run of drops that continues into a new session of the source (positions from 0 again)
    /// is closed there: it once grew a `to` below its `from`, and the status file holding it
    /// no longer parsed (`shmlog stat` called it malformed, and a successor ignored it).
    #[test]
    fn a_run_of_drops_never_ends_before_it_starts() {
        let (mut st, none) = (state(), ResumeFile::detached());
        let mut info = BridgeInfo::new("s", BridgeDirection::Out, "aeron:udp?endpoint=x:1", 1, "d");
        dropped(&mut st, &mut info, 4096, 4160, Refused::Busy);
        dropped(&mut st, &mut info, 4160, 4224, Refused::Busy);
        st.session = Some(2);
        dropped(&mut st, &mut info, 0, 64, Refused::Busy);
        sent(&mut st, &mut info, &none, 10, 64, 128);
        assert_eq!(
            info.losses,
            vec![
                Loss { from: 4096, to: 4224, messages: Some(2), cause: LossCause::Dropped },
                Loss { from: 0, to: 64, messages: Some(1), cause: LossCause::Dropped },
            ]
        );
        let text = info.to_text();
        assert!(BridgeInfo::parse("s", BridgeDirection::Out, 1, &text).is_some(), "{text}");
        assert_eq!(info.dropped, 3);
    }
}
