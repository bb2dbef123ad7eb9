//! The in bridge: an Aeron UDP subscription whose messages are published into the local stream.

use super::client::Client;
use super::wire;
use super::{run_until, BackPressure, BridgeBuilder, BridgeError, Link, ResumeFile, Status};
use crate::api::bridge_status::{BridgeDirection, BridgeInfo, Loss, LossCause};
use crate::{ConcurrentPublication, OfferError, Publication};
use aeron_rs::concurrent::atomic_buffer::AtomicBuffer;
use aeron_rs::concurrent::logbuffer::header::Header;
use aeron_rs::image::ControlledPollAction;
use aeron_rs::subscription::Subscription;
use aeron_rs::utils::errors::AeronError;
use aeron_rs::utils::types::Index;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Fragments taken from the channel per duty cycle.
const FRAGMENT_LIMIT: i32 = 64;
/// Aeron's fragment flags.
const BEGIN: u8 = 0x80;
const END: u8 = 0x40;

/// Carries an Aeron UDP channel into a local stream. Drive it with [`BridgeIn::do_work`] in
/// your own loop, or hand it a thread with [`BridgeIn::run`].
pub struct BridgeIn {
    target: Target,
    link: Link,
    subscription: Option<Arc<Mutex<Subscription>>>,
    policy: BackPressure,
    status: Status,
    state: InState,
}

/// The local stream's writer.
enum Target {
    Exclusive(Publication),
    Concurrent(ConcurrentPublication),
}

impl Target {
    fn offer(&mut self, message: &[u8]) -> Result<i64, OfferError> {
        match self {
            Target::Exclusive(p) => p.offer(message),
            Target::Concurrent(p) => p.offer(message),
        }
    }
}

struct InState {
    /// Reassembly of a fragmented Aeron message.
    assembly: Vec<u8>,
    assembling: bool,
    /// The Aeron session (the far out bridge's publication) last read from.
    session: Option<i32>,
    /// Set when a new session appears: its first message is checked for a gap.
    new_image: bool,
    /// A message the local stream pushed back (policy `Hold`), with its source start.
    held: Option<(Vec<u8>, i64)>,
    drop_run: Option<Loss>,
}

impl BridgeIn {
    pub(super) fn open(b: BridgeBuilder) -> Result<BridgeIn, BridgeError> {
        b.validate()?;
        let link = Link::open(&b)?;
        let mut status = Status::new(&b, BridgeDirection::In, &link.aeron_dir);
        // A predecessor killed mid-stream left where the next message should start: a gap
        // after this restart is then reported against it.
        status.info.resume_position = status.adopt_predecessors().map_or(-1, |r| r.0);
        let builder = || Publication::builder(b.stream.clone()).dir(b.dir.clone());
        let target = if b.concurrent {
            Target::Concurrent(builder().open_concurrent()?)
        } else {
            Target::Exclusive(builder().create()?)
        };
        let mut bridge = BridgeIn {
            target,
            link,
            subscription: None,
            policy: b.back_pressure,
            status,
            state: InState {
                assembly: Vec::new(),
                assembling: false,
                session: None,
                new_image: true,
                held: None,
                drop_run: None,
            },
        };
        bridge.link.ensure(&mut bridge.subscription, Instant::now(), Client::add_subscription)?;
        bridge.status.write(Instant::now());
        Ok(bridge)
    }

    /// One duty cycle: tends the Aeron client, retries a held message, then carries up to 64
    /// fragments. Returns the work done (0: idle).
    pub fn do_work(&mut self) -> usize {
        let now = Instant::now();
        let (subscription, state) = (&mut self.subscription, &mut self.state);
        self.link.tend_for(now, &mut self.status, |_| {
            *subscription = None;
            state.session = None;
        });
        if let Err(e) = self.link.ensure(&mut self.subscription, now, Client::add_subscription) {
            eprintln!("shmlog bridge in: {e}");
        }
        let work = match &self.subscription {
            Some(s) => {
                let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
                let Status { info, resume, .. } = &mut self.status;
                let n = carry(&mut s, &mut self.target, self.policy, &mut self.state, info, resume);
                self.status.info.connected = s.image_count() > 0;
                n
            }
            None => 0,
        };
        self.status.end_cycle(now);
        work
    }

    /// Runs [`BridgeIn::do_work`] until `stop` is set, backing off (spin, yield, sleeps of up
    /// to 1 ms) while there is nothing to carry: an Aeron subscription has no doorbell.
    pub fn run(&mut self, stop: &AtomicBool) {
        self.run_with(stop, &mut crate::Backoff::default());
    }

    /// [`BridgeIn::run`] with another idle strategy, e.g. [`crate::Yielding`] or
    /// [`crate::BusySpin`] where a core can be spent on lower latency.
    pub fn run_with(&mut self, stop: &AtomicBool, idle: &mut impl crate::IdleStrategy) {
        run_until(stop, idle, || self.do_work());
    }

    /// The bridge's counters and losses so far.
    pub fn status(&self) -> &BridgeInfo {
        &self.status.info
    }

    /// Whether a far out bridge is there (the subscription has an image).
    pub fn is_connected(&self) -> bool {
        self.status.info.connected
    }
}

impl std::fmt::Debug for BridgeIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeIn").field("status", &self.status.info).finish_non_exhaustive()
    }
}

impl Drop for BridgeIn {
    fn drop(&mut self) {
        self.status.remove();
    }
}

fn carry(
    sub: &mut Subscription,
    target: &mut Target,
    policy: BackPressure,
    st: &mut InState,
    info: &mut BridgeInfo,
    resume: &ResumeFile,
) -> usize {
    if let Some((bytes, start)) = st.held.take() {
        match target.offer(&bytes) {
            Ok(_) => delivered(st, info, resume, bytes.len(), start),
            Err(e) if e.is_retryable() => {
                st.held = Some((bytes, start));
                return 0;
            }
            Err(e) => lost(st, info, resume, start, bytes.len(), Some(e)),
        }
    }
    let n = sub.controlled_poll(
        |buf: &AtomicBuffer, offset: Index, length: Index, header: &Header| {
            if st.session != Some(header.session_id()) {
                st.session = Some(header.session_id());
                st.new_image = true;
                st.assembling = false;
            }
            // The fragment is copied out at once (into the assembly or the local stream). Its
            // bounds come from the driver's frame header: checked, never trusted.
            let bounds = usize::try_from(offset).ok().zip(usize::try_from(length).ok());
            let Some(payload) = bounds.and_then(|(o, l)| buf.as_slice().get(o..o.checked_add(l)?)) else {
                return Ok(ControlledPollAction::Continue);
            };
            let flags = header.flags();
            if flags & BEGIN != 0 && flags & END == 0 {
                st.assembly.clear();
                st.assembly.extend_from_slice(payload);
                st.assembling = true;
                return Ok(ControlledPollAction::Continue);
            }
            if flags & BEGIN == 0 {
                if !st.assembling {
                    return Ok(ControlledPollAction::Continue); // joined inside a message
                }
                st.assembly.extend_from_slice(payload);
                if flags & END == 0 {
                    return Ok(ControlledPollAction::Continue);
                }
                st.assembling = false;
            }
            let (start, marks) = wire::decode(header.reserved_value());
            check_gap(st, info, start, marks);
            let message: &[u8] = if flags & BEGIN != 0 { payload } else { &st.assembly };
            let len = message.len();
            match target.offer(message) {
                Ok(_) => {
                    delivered(st, info, resume, len, start);
                    Ok(ControlledPollAction::Continue)
                }
                Err(e) if e.is_retryable() && policy == BackPressure::Hold => {
                    st.held = Some((message.to_vec(), start));
                    info.back_pressure += 1;
                    Ok(ControlledPollAction::Break)
                }
                Err(e) => {
                    if e.is_retryable() {
                        info.back_pressure += 1;
                    }
                    lost(st, info, resume, start, len, (!e.is_retryable()).then_some(e));
                    Ok::<_, AeronError>(ControlledPollAction::Continue)
                }
            }
        },
        FRAGMENT_LIMIT,
    );
    n.max(0) as usize
}

/// On a new image, or after the out bridge dropped messages, compares where this message
/// starts with where the next one was expected and records the difference as a gap.
fn check_gap(st: &mut InState, info: &mut BridgeInfo, start: i64, marks: i64) {
    let check = std::mem::take(&mut st.new_image) || marks & wire::AFTER_DROP != 0;
    let expected = info.resume_position;
    if check && marks & wire::FRESH_START == 0 && expected >= 0 && start > expected {
        info.push_loss(Loss { from: expected, to: start, messages: None, cause: LossCause::Gap });
    }
}

fn delivered(st: &mut InState, info: &mut BridgeInfo, resume: &ResumeFile, len: usize, start: i64) {
    if let Some(run) = st.drop_run.take() {
        info.push_loss(run);
    }
    info.messages += 1;
    info.bytes += len as u64;
    info.source_position = start;
    // Where the next message starts if this one was a single frame in the source (fragment
    // headers or term padding in between make a gap's `from` early by that much).
    info.resume_position = start + ((len as i64 + 32 + 31) & !31);
    resume.save(info.resume_position, 0);
}

/// A message the local stream could not take (dropped under `Drop`, or refused for good).
fn lost(
    st: &mut InState,
    info: &mut BridgeInfo,
    resume: &ResumeFile,
    start: i64,
    len: usize,
    why: Option<OfferError>,
) {
    if let Some(e) = why {
        eprintln!("shmlog bridge in: message at source position {start} ({len} bytes) dropped: {e}");
    }
    info.dropped += 1;
    let end = start + ((len as i64 + 32 + 31) & !31);
    match &mut st.drop_run {
        Some(run) => {
            run.to = end;
            run.messages = run.messages.map(|n| n + 1);
        }
        None => {
            st.drop_run = Some(Loss { from: start, to: end, messages: Some(1), cause: LossCause::Dropped })
        }
    }
    info.resume_position = end;
    resume.save(end, 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::bridge_status::BridgeDirection;

    fn state() -> (InState, BridgeInfo) {
        let st = InState {
            assembly: Vec::new(),
            assembling: false,
            session: Some(1),
            new_image: false,
            held: None,
            drop_run: None,
        };
        let mut info = BridgeInfo::new("s", BridgeDirection::In, "aeron:udp?endpoint=x:1", 1, "d");
        info.resume_position = 1024;
        (st, info)
    }

    #[test]
    fn a_gap_is_reported_only_where_messages_can_have_been_lost() {
        // Within one image nothing is lost (Aeron retransmits): a jump is padding or fragments.
        let (mut st, mut info) = state();
        check_gap(&mut st, &mut info, 4096, 0);
        assert!(info.losses.is_empty());
        // A new image, or messages dropped before this one: the jump is a gap, to this start.
        for (new_image, marks) in [(true, 0), (false, wire::AFTER_DROP)] {
            let (mut st, mut info) = state();
            st.new_image = new_image;
            check_gap(&mut st, &mut info, 4096, marks);
            assert_eq!(
                info.losses,
                vec![Loss { from: 1024, to: 4096, messages: None, cause: LossCause::Gap }]
            );
            assert!(!st.new_image, "checked once per image");
        }
        // A restarted source starts its positions again; a message where expected is no gap.
        for (start, marks) in [(64, wire::FRESH_START), (4096, wire::FRESH_START), (1024, 0), (512, 0)] {
            let (mut st, mut info) = state();
            st.new_image = true;
            check_gap(&mut st, &mut info, start, marks);
            assert!(info.losses.is_empty(), "start {start} marks {marks}");
        }
        // Nothing expected yet (a first bridge): nothing to compare with.
        let (mut st, mut info) = state();
        info.resume_position = -1;
        st.new_image = true;
        check_gap(&mut st, &mut info, 4096, 0);
        assert!(info.losses.is_empty());
    }

    #[test]
    fn deliveries_move_the_expected_position_and_close_a_run_of_drops() {
        let (mut st, mut info) = state();
        let none = ResumeFile(None);
        lost(&mut st, &mut info, &none, 1024, 10, None);
        lost(&mut st, &mut info, &none, 1088, 40, None);
        assert_eq!(info.dropped, 2);
        assert!(info.losses.is_empty(), "the run stays open until a delivery");
        delivered(&mut st, &mut info, &none, 100, 1184);
        assert_eq!(
            info.losses,
            vec![Loss { from: 1024, to: 1184, messages: Some(2), cause: LossCause::Dropped }]
        );
        assert_eq!((info.messages, info.bytes, info.source_position), (1, 100, 1184));
        assert_eq!(info.resume_position, 1184 + 160, "one frame: 32 + 100 bytes, aligned to 32");
    }
}
