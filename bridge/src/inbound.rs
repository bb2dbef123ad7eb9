//! The in bridge: an Aeron UDP subscription whose messages are published into the local stream.
//!
//! The duty cycle's logic is [`InCore`], which takes fragments as plain values and offers whole
//! messages through a closure: the unit tests and the fuzz target `bridge_in` drive it with no
//! Aeron, and [`carry`] feeds it from the subscription.
//!
//! Everything in a fragment comes from the network and is checked before use: the reserved
//! value (the source position, with checked arithmetic: a position that cannot be one is counted
//! in `bad_positions` and carried as a fresh start), the flags (a BEGIN inside a message drops the
//! unfinished one, counted), and the length of what is assembled (at most the local stream's
//! longest message: a longer one is dropped and counted). Each image (Aeron session) assembles
//! its own message, so images that interleave fragments lose nothing.

use crate::builder::{run_until, BackPressure, BridgeBuilder, BridgeError, Link, ResumeFile, Status};
use crate::client::Client;
use crate::status::{BridgeDirection, BridgeInfo, Loss, LossCause};
use crate::wire;
use aeron_rs::concurrent::atomic_buffer::AtomicBuffer;
use aeron_rs::concurrent::logbuffer::header::Header;
use aeron_rs::image::ControlledPollAction;
use aeron_rs::subscription::Subscription;
use aeron_rs::utils::errors::AeronError;
use aeron_rs::utils::types::Index;
use shmlog::{ConcurrentPublication, OfferError, Publication};
use std::fmt::Display;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Fragments taken from the channel per duty cycle.
const FRAGMENT_LIMIT: i32 = 64;
/// Aeron's BEGIN flag.
pub const BEGIN: u8 = 0x80;
/// Aeron's END flag.
pub const END: u8 = 0x40;
/// Images whose state the in bridge keeps at once, each with at most one message in assembly
/// (at most the local stream's longest message). One more evicts the least recently used; a
/// message it was assembling is dropped and counted. A deployment has one image per far out
/// bridge, and a few more while one is replaced.
pub const MAX_IMAGES: usize = 16;

/// Carries an Aeron UDP channel into a local stream. Drive it with [`BridgeIn::do_work`] in
/// your own loop, or hand it a thread with [`BridgeIn::run`].
pub struct BridgeIn {
    target: Target,
    link: Link,
    subscription: Option<Arc<Mutex<Subscription>>>,
    policy: BackPressure,
    status: Status,
    core: InCore,
    /// The subscription's images (session id, correlation id), refilled each cycle.
    images: Vec<(i32, i64)>,
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

    fn max_message_len(&self) -> usize {
        match self {
            Target::Exclusive(p) => p.max_message_len(),
            Target::Concurrent(p) => p.max_message_len(),
        }
    }
}

impl BridgeBuilder {
    /// Starts a bridge from the channel into the local stream, creating its publication.
    pub fn open_in(self) -> Result<BridgeIn, BridgeError> {
        BridgeIn::open(self)
    }
}

impl BridgeIn {
    pub(super) fn open(b: BridgeBuilder) -> Result<BridgeIn, BridgeError> {
        b.validate()?;
        let link = Link::open(&b)?;
        let (target, status) = open_local(&b, &link.aeron_dir)?;
        let core = InCore::new(target.max_message_len());
        let mut bridge = BridgeIn {
            target,
            link,
            subscription: None,
            policy: b.back_pressure,
            status,
            core,
            images: Vec::new(),
        };
        bridge.link.ensure(&mut bridge.subscription, Instant::now(), Client::add_subscription)?;
        bridge.status.write(Instant::now());
        bridge.status.retire_predecessors();
        Ok(bridge)
    }

    /// One duty cycle: tends the Aeron client, retries a held message, then carries up to 64
    /// fragments. Returns the work done (0: idle).
    pub fn do_work(&mut self) -> usize {
        let now = Instant::now();
        let (subscription, core) = (&mut self.subscription, &mut self.core);
        self.link.tend_for(now, &mut self.status, |_| {
            *subscription = None;
            // The next subscription's images are new ones: their first messages are checked.
            core.sync_images(&[]);
        });
        if let Err(e) = self.link.ensure(&mut self.subscription, now, Client::add_subscription) {
            eprintln!("shmlog bridge in: {e}");
        }
        let work = match &self.subscription {
            Some(s) => {
                let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
                self.images.clear();
                self.images.extend(s.images().iter().map(|i| (i.session_id(), i.correlation_id())));
                self.core.sync_images(&self.images);
                let Status { info, resume, .. } = &mut self.status;
                let n = carry(&mut s, &mut self.target, self.policy, &mut self.core, info, resume);
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
        self.run_with(stop, &mut shmlog::Backoff::default());
    }

    /// [`BridgeIn::run`] with another idle strategy, e.g. [`shmlog::Yielding`] or
    /// [`shmlog::BusySpin`] where a core can be spent on lower latency.
    pub fn run_with(&mut self, stop: &AtomicBool, idle: &mut impl shmlog::IdleStrategy) {
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

/// The local half of an in bridge: its status and resume files (made with the stream's
/// directory if this bridge is its first user), a dead predecessor's resume position taken
/// over, and the local stream's publication.
fn open_local(b: &BridgeBuilder, aeron_dir: &std::path::Path) -> Result<(Target, Status), BridgeError> {
    let mut status = Status::new(b, BridgeDirection::In, aeron_dir)?;
    // A predecessor killed mid-stream left where the next message should start: a gap after
    // this restart is reported against it. It goes into this bridge's own resume file at once,
    // so that a successor still has it if this bridge dies before it carries a message.
    if let Some((position, _)) = status.find_predecessors()? {
        status.info.resume_position = position;
        status.resume.save(position, 0);
    }
    let builder = || {
        let p = Publication::builder(b.stream.clone()).dir(b.dir.clone());
        match b.term_length {
            Some(t) => p.term_length(t),
            None => p,
        }
    };
    let target = if b.concurrent {
        Target::Concurrent(builder().open_concurrent()?)
    } else {
        Target::Exclusive(builder().create()?)
    };
    Ok((target, status))
}

/// Offers a held message again, then polls up to [`FRAGMENT_LIMIT`] fragments into `core`.
fn carry(
    sub: &mut Subscription,
    target: &mut Target,
    policy: BackPressure,
    core: &mut InCore,
    info: &mut BridgeInfo,
    resume: &ResumeFile,
) -> usize {
    let mut offer = |m: &[u8]| target.offer(m);
    if !core.retry_held(&mut offer, info, resume) {
        return 0;
    }
    let n = sub.controlled_poll(
        |buf: &AtomicBuffer, offset: Index, length: Index, header: &Header| {
            let fragment = Fragment {
                session: header.session_id(),
                flags: header.flags(),
                reserved: header.reserved_value(),
                payload: fragment_bytes(buf, offset, length),
            };
            Ok::<_, AeronError>(match core.on_fragment(fragment, &mut offer, policy, info, resume) {
                Next::Continue => ControlledPollAction::Continue,
                Next::Break => ControlledPollAction::Break,
            })
        },
        FRAGMENT_LIMIT,
    );
    n.max(0) as usize
}

/// The payload of a fragment in the driver's term buffer, if its bounds (from the frame header
/// the driver wrote) lie inside the term.
///
/// The slice covers this fragment only, and it is copied out at once (into the assembly or the
/// local stream), never kept. While it lives the Aeron protocol keeps the driver off these
/// bytes: the driver wrote them before it published the frame's length (which is how the poll
/// found the frame), does not write a frame that is already there again (a retransmitted
/// duplicate is dropped), and cleans a term for reuse only once every subscriber's position has
/// passed it; this subscription's position moves past the fragment only after the handler
/// returns. A process that writes the driver's files itself (it needs the driver's user) could
/// change the bytes meanwhile: the copy is then torn, as any copy of shared memory can be, and
/// nothing in it is trusted.
fn fragment_bytes(buf: &AtomicBuffer, offset: Index, length: Index) -> Option<&[u8]> {
    let fits = offset >= 0 && length >= 0 && offset.checked_add(length).is_some_and(|e| e <= buf.capacity());
    fits.then(|| buf.as_sub_slice(offset, length))
}

/// One fragment as the in bridge takes it from an Aeron image: its payload is `None` when its
/// bounds did not check out.
#[derive(Clone, Copy, Debug)]
pub struct Fragment<'a> {
    /// The image's session id.
    pub session: i32,
    /// Aeron's fragment flags (BEGIN, END).
    pub flags: u8,
    /// The frame's reserved value (the out bridge's source position and marks).
    pub reserved: i64,
    /// The payload.
    pub payload: Option<&'a [u8]>,
}

/// What the poll does after a fragment (both consume it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Go on polling.
    Continue,
    /// The local stream pushed back and the message is held: poll no further this cycle.
    Break,
}

/// The local stream's offer, as the core calls it.
pub type Offer<'a> = dyn FnMut(&[u8]) -> Result<i64, OfferError> + 'a;

/// The in bridge's duty cycle apart from Aeron: per-image assembly, gap checks, offers into the
/// local stream, and the accounts of what was carried and lost.
pub(crate) struct InCore {
    /// The local stream's longest message: no assembly grows beyond it.
    max_message_len: usize,
    images: Vec<ImageState>,
    /// Counts image look-ups, to find the least recently used.
    clock: u64,
    /// A message the local stream pushed back (policy `Hold`).
    held: Option<Held>,
    ledger: Ledger,
}

struct ImageState {
    session: i32,
    /// The image's correlation id, once the subscription's image list has named it: a new
    /// image of the same session (Aeron timed the old one out) is a new image.
    correlation: Option<i64>,
    last_used: u64,
    /// Its first message is still to be compared with where the next one was expected.
    unchecked: bool,
    part: Part,
    assembly: Vec<u8>,
}

impl ImageState {
    fn new(session: i32, correlation: Option<i64>, now: u64) -> Self {
        ImageState {
            session,
            correlation,
            last_used: now,
            unchecked: true,
            part: Part::Between,
            assembly: Vec::new(),
        }
    }
}

/// Where an image stands within a fragmented message.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Between messages (or in one it does not hold: its fragments up to the next BEGIN are
    /// skipped).
    Between,
    /// A BEGIN was taken: the fragments so far are in the assembly; the BEGIN's reserved value.
    Assembling { reserved: i64 },
}

struct Held {
    bytes: Vec<u8>,
    span: Option<(i64, i64)>,
}

/// The accounts kept in the status: counters, losses, and the resume position.
struct Ledger {
    /// The last loss in the status is a run of drops still growing (closed by a delivery or by
    /// another loss). Kept in the status as it grows, so a bridge killed meanwhile has it there.
    run_open: bool,
}

impl InCore {
    pub(crate) fn new(max_message_len: usize) -> Self {
        InCore {
            max_message_len,
            images: Vec::new(),
            clock: 0,
            held: None,
            ledger: Ledger { run_open: false },
        }
    }

    /// Offers the held message again; false while the local stream still pushes back (then the
    /// subscription must not be polled: the message keeps its place in the order).
    pub(crate) fn retry_held(
        &mut self,
        offer: &mut Offer<'_>,
        info: &mut BridgeInfo,
        resume: &ResumeFile,
    ) -> bool {
        let Some(h) = self.held.take() else { return true };
        match offer(&h.bytes) {
            Ok(_) => self.ledger.delivered(info, resume, h.bytes.len(), h.span),
            Err(e) if e.is_retryable() => {
                self.held = Some(h);
                return false;
            }
            Err(e) => self.ledger.lost(info, resume, h.span, h.bytes.len(), Some(&e)),
        }
        true
    }

    /// Takes one fragment (never while a message is held: see [`InCore::retry_held`]):
    /// assembles it with the earlier ones of its image, and offers a whole message to the local
    /// stream, after checking it for a gap.
    pub(crate) fn on_fragment(
        &mut self,
        f: Fragment<'_>,
        offer: &mut Offer<'_>,
        policy: BackPressure,
        info: &mut BridgeInfo,
        resume: &ResumeFile,
    ) -> Next {
        debug_assert!(self.held.is_none(), "a fragment taken while a message is held");
        let i = self.image(f.session, info, resume);
        let max = self.max_message_len;
        let InCore { images, held, ledger, .. } = self;
        let img = &mut images[i];
        let (begin, end) = (f.flags & BEGIN != 0, f.flags & END != 0);
        if begin {
            if let Part::Assembling { reserved } = img.part {
                // A BEGIN inside a message: Aeron never sends one (an image is reliable and in
                // order), so the sender broke its framing; the unfinished message is dropped.
                let len = img.assembly.len();
                ledger.settle_lost(
                    &mut img.unchecked,
                    reserved,
                    len,
                    &"a new message began inside it",
                    info,
                    resume,
                );
            }
            img.part = Part::Between;
            img.assembly.clear();
        }
        let reserved = match img.part {
            // A fragment after the start of a message this image does not hold: it joined
            // inside that message (a new image starts where its sender was: the next message's
            // gap check reports the part lost), or dropped it (counted then), or it was evicted
            // (counted then too).
            Part::Between if !begin => return Next::Continue,
            Part::Between => f.reserved,
            Part::Assembling { reserved } => reserved,
        };
        let Some(payload) = f.payload else {
            let len = img.assembly.len();
            ledger.settle_lost(
                &mut img.unchecked,
                reserved,
                len,
                &"a fragment lies outside its term",
                info,
                resume,
            );
            img.part = Part::Between;
            img.assembly.clear();
            return Next::Continue;
        };
        if begin && end {
            return ledger.settle(&mut img.unchecked, reserved, payload, offer, policy, held, info, resume);
        }
        let len = img.assembly.len().saturating_add(payload.len());
        if len > max {
            // Longer than the local stream takes: dropped now rather than assembled further.
            let why = OfferError::MessageTooLarge { len, max };
            ledger.settle_lost(&mut img.unchecked, reserved, len, &why, info, resume);
            img.part = Part::Between;
            img.assembly.clear();
            return Next::Continue;
        }
        reserve_within(&mut img.assembly, len, max);
        img.assembly.extend_from_slice(payload);
        if !end {
            img.part = Part::Assembling { reserved };
            return Next::Continue;
        }
        img.part = Part::Between;
        let next =
            ledger.settle(&mut img.unchecked, reserved, &img.assembly, offer, policy, held, info, resume);
        img.assembly.clear();
        next
    }

    /// Keeps the state of the images in `current` (session id, correlation id: the
    /// subscription's image list, before a poll) and forgets the others: a session whose image
    /// was replaced (another correlation id) starts again as a new image. A message a gone
    /// image was assembling was cut off with it; the next image's first message, checked for a
    /// gap against where the next message was expected, reports it. Images not kept yet are
    /// noted with their correlation id while there is room.
    pub(crate) fn sync_images(&mut self, current: &[(i32, i64)]) {
        self.images.retain_mut(|img| match current.iter().find(|(s, _)| *s == img.session) {
            Some(&(_, c)) => *img.correlation.get_or_insert(c) == c,
            None => false,
        });
        for &(session, correlation) in current {
            if self.images.len() < MAX_IMAGES && self.images.iter().all(|img| img.session != session) {
                self.images.push(ImageState::new(session, Some(correlation), self.clock));
            }
        }
    }

    /// The state of `session`'s image (made if new; the least recently used one evicted if
    /// [`MAX_IMAGES`] are kept).
    fn image(&mut self, session: i32, info: &mut BridgeInfo, resume: &ResumeFile) -> usize {
        self.clock += 1;
        if let Some(i) = self.images.iter().position(|img| img.session == session) {
            self.images[i].last_used = self.clock;
            return i;
        }
        if self.images.len() >= MAX_IMAGES {
            let lru = (0..self.images.len()).min_by_key(|&i| self.images[i].last_used).unwrap_or(0);
            let mut old = self.images.swap_remove(lru);
            if let Part::Assembling { reserved } = old.part {
                let why = format!("more than {MAX_IMAGES} images at once");
                self.ledger.settle_lost(&mut old.unchecked, reserved, old.assembly.len(), &why, info, resume);
            }
        }
        self.images.push(ImageState::new(session, None, self.clock));
        self.images.len() - 1
    }

    /// The longest assembly kept, and the largest buffer behind one (tests and fuzzing).
    #[cfg(any(test, shmlog_fuzz))]
    pub(crate) fn assembly_bytes(&self) -> (usize, usize) {
        let len = self.images.iter().map(|i| i.assembly.len()).max().unwrap_or(0);
        let capacity = self.images.iter().map(|i| i.assembly.capacity()).max().unwrap_or(0);
        (len, capacity)
    }

    /// Images whose state is kept.
    #[cfg(any(test, shmlog_fuzz))]
    pub(crate) fn image_count(&self) -> usize {
        self.images.len()
    }

    /// Whether a message is held.
    #[cfg(any(test, shmlog_fuzz))]
    pub(crate) fn is_holding(&self) -> bool {
        self.held.is_some()
    }
}

/// Grows `v` to hold `needed` bytes (at most `max`), doubling while that stays within `max`.
fn reserve_within(v: &mut Vec<u8>, needed: usize, max: usize) {
    if needed > v.capacity() {
        let target = v.capacity().saturating_mul(2).clamp(needed, max.max(needed));
        v.reserve_exact(target - v.len());
    }
}

/// The source span `[start, end)` of a message of `len` bytes whose frames say it starts at
/// `start`, counting it as one frame of the source (32-byte header, 32-aligned); `None` if
/// `start` cannot be a source position (negative, or too close to `i64::MAX` for its end).
pub fn source_span(start: i64, len: usize) -> Option<(i64, i64)> {
    if start < 0 {
        return None;
    }
    let frame = i64::try_from(len).ok()?.checked_add(32 + 31)? & !31;
    Some((start, start.checked_add(frame)?))
}

/// Whether a message was carried (or dropped) already, and is counted in `duplicates` instead:
/// one the out bridge offered again after losing its driver ([`wire::SENT_AGAIN`]) that starts
/// before where the next message is expected in its session of the source (positions only grow
/// there) had arrived before the driver died. The image's first gap check waits for the first
/// message that is not one.
fn is_duplicate(info: &mut BridgeInfo, span: Option<(i64, i64)>, marks: i64) -> bool {
    let again = match span {
        Some((start, _)) => {
            marks & (wire::SENT_AGAIN | wire::FRESH_START) == wire::SENT_AGAIN && start < info.resume_position
        }
        None => false,
    };
    if again {
        info.duplicates += 1;
    }
    again
}

impl Ledger {
    /// A whole message of an image: checked for a gap, then offered to the local stream.
    #[allow(clippy::too_many_arguments)]
    fn settle(
        &mut self,
        unchecked: &mut bool,
        reserved: i64,
        message: &[u8],
        offer: &mut Offer<'_>,
        policy: BackPressure,
        held: &mut Option<Held>,
        info: &mut BridgeInfo,
        resume: &ResumeFile,
    ) -> Next {
        let (start, marks) = wire::decode(reserved);
        let span = source_span(start, message.len());
        if span.is_none() {
            info.bad_positions += 1;
        }
        if is_duplicate(info, span, marks) {
            return Next::Continue;
        }
        self.check_gap(unchecked, info, span, marks);
        match offer(message) {
            Ok(_) => {
                self.delivered(info, resume, message.len(), span);
                Next::Continue
            }
            Err(e) if e.is_retryable() && policy == BackPressure::Hold => {
                *held = Some(Held { bytes: message.to_vec(), span });
                info.back_pressure += 1;
                Next::Break
            }
            Err(e) => {
                if e.is_retryable() {
                    info.back_pressure += 1;
                }
                let why = (!e.is_retryable()).then_some(&e as &dyn Display);
                self.lost(info, resume, span, message.len(), why);
                Next::Continue
            }
        }
    }

    /// A message of an image dropped before it was whole (`len`: the bytes it had, at least):
    /// checked for a gap like a whole one, then counted and recorded as lost.
    fn settle_lost(
        &mut self,
        unchecked: &mut bool,
        reserved: i64,
        len: usize,
        why: &dyn Display,
        info: &mut BridgeInfo,
        resume: &ResumeFile,
    ) {
        let (start, marks) = wire::decode(reserved);
        let span = source_span(start, len);
        if span.is_none() {
            info.bad_positions += 1;
        }
        if is_duplicate(info, span, marks) {
            return;
        }
        self.check_gap(unchecked, info, span, marks);
        self.lost(info, resume, span, len, Some(why));
    }

    /// Records what was lost before this message:
    /// - marked by the out bridge as following messages it lost (its reader's losses, or its
    ///   drops): an `Upstream` loss from where this message was expected (on a fresh start: from
    ///   its session's start) to where it starts, recorded even when that is empty (the far
    ///   side then knows only that, and the out bridge's status says what);
    /// - otherwise, on an image's first message: the distance from where it was expected to
    ///   where it starts, as a `Gap` (a fresh start implies none).
    ///
    /// A message without a valid position is not compared (a fresh start; a loss it is marked
    /// with is counted, not placed), and leaves an image's first check to its next message.
    fn check_gap(
        &mut self,
        unchecked: &mut bool,
        info: &mut BridgeInfo,
        span: Option<(i64, i64)>,
        marks: i64,
    ) {
        let upstream = marks & (wire::LOST | wire::AFTER_DROP) != 0;
        let Some((start, _)) = span else {
            if upstream {
                info.source_losses = info.source_losses.saturating_add(1);
            }
            return;
        };
        let first = std::mem::take(unchecked);
        let fresh = marks & wire::FRESH_START != 0;
        let expected = info.resume_position;
        if upstream {
            let from = match fresh {
                true => 0,
                false if (0..=start).contains(&expected) => expected,
                false => start,
            };
            self.run_open = false;
            info.source_losses = info.source_losses.saturating_add(1);
            info.push_loss(Loss { from, to: start, messages: None, cause: LossCause::Upstream });
        } else if first && !fresh && expected >= 0 && start > expected {
            self.run_open = false;
            info.push_loss(Loss { from: expected, to: start, messages: None, cause: LossCause::Gap });
        }
    }

    fn delivered(
        &mut self,
        info: &mut BridgeInfo,
        resume: &ResumeFile,
        len: usize,
        span: Option<(i64, i64)>,
    ) {
        self.run_open = false;
        info.messages += 1;
        info.bytes = info.bytes.saturating_add(len as u64);
        // Where the next message starts if this one was a single frame in the source (fragment
        // headers or term padding in between make a gap's `from` early by that much).
        if let Some((start, end)) = span {
            info.source_position = start;
            info.resume_position = end;
            resume.save(end, 0);
        }
    }

    /// A message the local stream could not take (dropped under `Drop`, refused for good, or
    /// dropped before it was whole). Without a valid position it is counted but not placed.
    fn lost(
        &mut self,
        info: &mut BridgeInfo,
        resume: &ResumeFile,
        span: Option<(i64, i64)>,
        len: usize,
        why: Option<&dyn Display>,
    ) {
        if let Some(why) = why {
            let at = span.map_or_else(|| "unknown".to_owned(), |(start, _)| start.to_string());
            eprintln!("shmlog bridge in: message at source position {at} ({len} bytes) dropped: {why}");
        }
        info.dropped += 1;
        let Some((start, end)) = span else { return };
        match info.losses.last_mut() {
            Some(run) if self.run_open && start >= run.to => {
                run.to = end;
                run.messages = run.messages.map(|n| n + 1);
            }
            _ => {
                info.push_loss(Loss { from: start, to: end, messages: Some(1), cause: LossCause::Dropped });
                self.run_open = true;
            }
        }
        info.resume_position = end;
        resume.save(end, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::map_resume;
    use crate::status::{self as bridge_status, BridgeDirection};

    fn info() -> BridgeInfo {
        let mut info = BridgeInfo::new("s", BridgeDirection::In, "aeron:udp?endpoint=x:1", 1, "d");
        info.resume_position = 1024;
        info
    }

    /// The local stream, as the core sees it: takes messages up to `max` bytes, or pushes back.
    struct Sink {
        got: Vec<Vec<u8>>,
        max: usize,
        push_back: bool,
    }

    impl Sink {
        fn new(max: usize) -> Self {
            Sink { got: Vec::new(), max, push_back: false }
        }

        fn offer(&mut self, m: &[u8]) -> Result<i64, OfferError> {
            if m.len() > self.max {
                return Err(OfferError::MessageTooLarge { len: m.len(), max: self.max });
            }
            if self.push_back {
                return Err(OfferError::BackPressured);
            }
            self.got.push(m.to_vec());
            Ok(0)
        }
    }

    fn frag(session: i32, flags: u8, start: i64, payload: &[u8]) -> Fragment<'_> {
        Fragment { session, flags, reserved: wire::encode(start, 0), payload: Some(payload) }
    }

    fn feed(
        core: &mut InCore,
        sink: &mut Sink,
        info: &mut BridgeInfo,
        resume: &ResumeFile,
        f: Fragment,
    ) -> Next {
        core.on_fragment(f, &mut |m: &[u8]| sink.offer(m), BackPressure::Hold, info, resume)
    }

    /// T6: a reserved value whose start cannot be a source position (`i64::MAX & !31` overflowed
    /// the end computed from it: a panic in debug builds, a negative resume position in release,
    /// which turned gap checks off) is carried as a fresh start and counted; the resume file
    /// stays where it was, and the next image's gap is still found.
    #[test]
    fn a_forged_source_position_neither_panics_nor_turns_gap_checks_off() {
        let dir = crate::testing::TempDir::new("bridge-in-forged");
        let path = dir.path().join("s.in.1.resume");
        let resume = ResumeFile(Some(map_resume(&path).unwrap()));
        let (mut core, mut info) = (InCore::new(1 << 20), info());
        resume.save(1024, 0);
        let mut sink = Sink::new(1 << 20);
        for forged in [i64::MAX & !31, (i64::MAX & !31) - 64, i64::MIN, -32] {
            let f = Fragment { session: 1, flags: BEGIN | END, reserved: forged, payload: Some(&[7; 100]) };
            assert_eq!(feed(&mut core, &mut sink, &mut info, &resume, f), Next::Continue);
            let on_file = bridge_status::read_resume(&path).map(|r| r.0);
            assert!(info.resume_position >= 0 && on_file >= Some(0), "{forged}: {info:?}, file {on_file:?}");
        }
        assert_eq!(sink.got.len(), 4, "the messages themselves are carried");
        assert_eq!((info.bad_positions, info.resume_position), (4, 1024));
        feed(&mut core, &mut sink, &mut info, &resume, frag(2, BEGIN | END, 4096, &[1; 10]));
        assert_eq!(info.losses, vec![Loss { from: 1024, to: 4096, messages: None, cause: LossCause::Gap }]);
        assert_eq!(bridge_status::read_resume(&path).map(|r| r.0), Some(4096 + 64));
    }

    /// An out bridge that lost its driver offers again what the driver's sender position did
    /// not count as sent; what had arrived anyway (here the messages at 1024 and 1088, whole or
    /// fragmented) is not carried twice, is counted, and leaves the new image's gap check to the
    /// first message it has not seen. (`a_killed_driver_is_restarted_and_the_bridge_reconnects`
    /// once got a message twice in CI.)
    #[test]
    fn messages_sent_again_after_a_lost_driver_are_carried_once() {
        let (mut core, mut info) = (InCore::new(4096), info());
        let none = ResumeFile::detached();
        let mut sink = Sink::new(4096);
        feed(&mut core, &mut sink, &mut info, &none, frag(1, BEGIN | END, 1024, &[1; 10]));
        feed(&mut core, &mut sink, &mut info, &none, frag(1, BEGIN | END, 1088, &[2; 10]));
        assert_eq!(info.resume_position, 1152);
        // The driver is gone; a new image (session 2) carries the messages sent again.
        core.sync_images(&[(2, 7)]);
        let again = |flags, start, payload| Fragment {
            session: 2,
            flags,
            reserved: wire::encode(start, wire::SENT_AGAIN),
            payload: Some(payload),
        };
        feed(&mut core, &mut sink, &mut info, &none, again(BEGIN | END, 1024, &[1; 10]));
        feed(&mut core, &mut sink, &mut info, &none, again(BEGIN, 1088, &[2; 4]));
        feed(&mut core, &mut sink, &mut info, &none, again(END, 1088, &[2; 6]));
        assert_eq!((sink.got.len(), info.duplicates, info.messages), (2, 2, 2));
        feed(&mut core, &mut sink, &mut info, &none, again(BEGIN | END, 1152, &[3; 10]));
        assert_eq!(sink.got, vec![vec![1; 10], vec![2; 10], vec![3; 10]]);
        assert!(info.losses.is_empty(), "no gap: {:?}", info.losses);
        // Unmarked, an earlier start is another source's (a second publisher): carried.
        feed(&mut core, &mut sink, &mut info, &none, frag(3, BEGIN | END, 0, &[4; 10]));
        assert_eq!((sink.got.len(), info.duplicates, info.resume_position), (4, 2, 64));
    }

    /// T6: a BEGIN and a million middle fragments that never END: the assembly stays within
    /// what the local stream can take, and the message is dropped and reported once.
    #[test]
    fn a_message_that_never_ends_is_dropped_at_the_local_limit_and_reported_once() {
        let (mut core, mut info) = (InCore::new(4096), info());
        info.resume_position = 2048;
        let none = ResumeFile::detached();
        let mut sink = Sink::new(4096);
        feed(&mut core, &mut sink, &mut info, &none, frag(1, BEGIN, 2048, &[0; 64]));
        for i in 0..1_000_000 {
            feed(&mut core, &mut sink, &mut info, &none, frag(1, 0, 2048, &[1; 64]));
            let (len, capacity) = core.assembly_bytes();
            assert!(len <= 4096 && capacity <= 4096, "fragment {i}: {len} bytes assembled in {capacity}");
        }
        assert_eq!(info.dropped, 1);
        feed(&mut core, &mut sink, &mut info, &none, frag(1, END, 2048, &[2; 64]));
        feed(&mut core, &mut sink, &mut info, &none, frag(1, BEGIN | END, 1 << 26, &[3; 8]));
        assert_eq!(sink.got, vec![vec![3; 8]]);
        assert_eq!(info.dropped, 1);
        assert_eq!(info.losses.len(), 1, "{:?}", info.losses);
        let loss = info.losses[0];
        assert_eq!((loss.from, loss.messages, loss.cause), (2048, Some(1), LossCause::Dropped));
        assert!(loss.to > 2048 + 4096, "{loss:?}: at least the bytes seen");
    }

    /// T6: two images interleaving fragmented messages (a second publisher on the channel):
    /// each image has its own assembly, and both messages arrive whole.
    #[test]
    fn two_interleaved_images_both_deliver_their_fragmented_messages() {
        let (mut core, mut info) = (InCore::new(4096), info());
        let none = ResumeFile::detached();
        let mut sink = Sink::new(4096);
        for (session, flags, part) in
            [(1, BEGIN, "a1"), (2, BEGIN, "b1"), (1, 0, "a2"), (2, 0, "b2"), (2, END, "b3"), (1, END, "a3")]
        {
            let start = if session == 1 { 64 } else { 128 };
            feed(&mut core, &mut sink, &mut info, &none, frag(session, flags, start, part.as_bytes()));
        }
        assert_eq!(sink.got, vec![b"b1b2b3".to_vec(), b"a1a2a3".to_vec()]);
        assert_eq!((info.dropped, info.messages), (0, 2));
    }

    /// Framing a sender breaks (a BEGIN inside a message, a fragment out of bounds) and more
    /// images than are kept: each unfinished message is dropped and counted once, and the
    /// others arrive whole.
    #[test]
    fn broken_framing_and_evicted_images_drop_only_their_unfinished_messages() {
        let (mut core, mut info) = (InCore::new(4096), info());
        info.resume_position = -1;
        let none = ResumeFile::detached();
        let mut sink = Sink::new(4096);
        feed(&mut core, &mut sink, &mut info, &none, frag(1, BEGIN, 64, b"x"));
        feed(&mut core, &mut sink, &mut info, &none, frag(1, BEGIN, 128, b"a"));
        feed(&mut core, &mut sink, &mut info, &none, frag(1, END, 128, b"b"));
        assert_eq!((sink.got.len(), info.dropped), (1, 1));
        let bad = Fragment { session: 1, flags: BEGIN, reserved: 256, payload: None };
        feed(&mut core, &mut sink, &mut info, &none, bad);
        feed(&mut core, &mut sink, &mut info, &none, frag(1, END, 256, b"tail"));
        assert_eq!((sink.got.len(), info.dropped), (1, 2), "the rest of the message is skipped");
        // Session 100 starts a message, then MAX_IMAGES other images come: it is evicted.
        feed(&mut core, &mut sink, &mut info, &none, frag(100, BEGIN, 512, b"y"));
        for s in 0..MAX_IMAGES as i32 {
            feed(&mut core, &mut sink, &mut info, &none, frag(200 + s, BEGIN | END, 1024, b"z"));
        }
        assert_eq!(core.image_count(), MAX_IMAGES);
        assert_eq!((sink.got.len(), info.dropped), (1 + MAX_IMAGES, 3));
        feed(&mut core, &mut sink, &mut info, &none, frag(100, END, 512, b"y"));
        assert_eq!((sink.got.len(), info.dropped), (1 + MAX_IMAGES, 3), "an END without its BEGIN");
    }

    /// An image Aeron replaced (same session, new correlation id: the old one timed out) is a
    /// new image: its first message is checked for a gap. Images that are gone are forgotten.
    #[test]
    fn a_replaced_image_is_checked_for_a_gap_again() {
        let (mut core, mut info) = (InCore::new(4096), info());
        let none = ResumeFile::detached();
        let mut sink = Sink::new(4096);
        core.sync_images(&[(1, 10)]);
        feed(&mut core, &mut sink, &mut info, &none, frag(1, BEGIN | END, 1024, &[0; 32]));
        core.sync_images(&[(1, 10)]);
        feed(&mut core, &mut sink, &mut info, &none, frag(1, BEGIN | END, 4096, &[0; 32]));
        assert!(info.losses.is_empty(), "within an image a jump is padding or fragments");
        core.sync_images(&[(1, 11)]);
        assert_eq!(core.image_count(), 1, "the new image, noted");
        feed(&mut core, &mut sink, &mut info, &none, frag(1, BEGIN | END, 8192, &[0; 32]));
        assert_eq!(
            info.losses,
            vec![Loss { from: 4096 + 64, to: 8192, messages: None, cause: LossCause::Gap }]
        );
        core.sync_images(&[]);
        assert_eq!(core.image_count(), 0);
    }

    /// Under `Hold` a pushed-back message is held (the poll breaks) and offered again first;
    /// under `Drop` it is dropped and counted.
    #[test]
    fn a_pushed_back_message_is_held_or_dropped_by_policy() {
        let (mut core, mut info) = (InCore::new(4096), info());
        info.resume_position = -1;
        let none = ResumeFile::detached();
        let mut sink = Sink::new(4096);
        sink.push_back = true;
        assert_eq!(feed(&mut core, &mut sink, &mut info, &none, frag(1, BEGIN | END, 0, b"m")), Next::Break);
        assert!(core.is_holding());
        assert!(!core.retry_held(&mut |m: &[u8]| sink.offer(m), &mut info, &none));
        sink.push_back = false;
        assert!(core.retry_held(&mut |m: &[u8]| sink.offer(m), &mut info, &none));
        assert_eq!((sink.got.len(), info.messages, info.resume_position), (1, 1, 64));
        sink.push_back = true;
        let f = frag(1, BEGIN | END, 64, b"n");
        let next = core.on_fragment(f, &mut |m: &[u8]| sink.offer(m), BackPressure::Drop, &mut info, &none);
        assert_eq!((next, info.dropped, info.back_pressure), (Next::Continue, 1, 2));
        assert_eq!(
            info.losses,
            vec![Loss { from: 64, to: 128, messages: Some(1), cause: LossCause::Dropped }]
        );
    }

    /// Issue 23: an in bridge that is the first user of its directory (the stream and the
    /// directory do not exist yet) keeps its resume file, so a successor started after a
    /// SIGKILL reports the gap. The bridge's local half runs here without Aeron; its "death"
    /// leaves its files as a SIGKILL would, under a pid that is gone.
    #[test]
    fn the_first_user_of_its_directory_leaves_its_successor_a_resume_position() {
        let top = crate::testing::TempDir::new("bridge-in-first");
        let dir = top.path().join("not-made-yet");
        let b = BridgeBuilder::new("s").dir(&dir).channel("aeron:udp?endpoint=127.0.0.1:1");
        let aeron_dir = std::path::Path::new("/nowhere");
        let (mut target, mut status) = open_local(&b, aeron_dir).unwrap();
        let reader = shmlog::Subscription::builder("s").dir(&dir).open().unwrap();
        let mut core = InCore::new(target.max_message_len());
        let mut offer = |m: &[u8]| target.offer(m);
        let f = frag(7, BEGIN | END, 0, &[5; 100]);
        let Status { info, resume, .. } = &mut status;
        let next = core.on_fragment(f, &mut offer, BackPressure::Hold, info, resume);
        assert_eq!((next, info.messages), (Next::Continue, 1));
        status.write(Instant::now());
        // Killed: no destructor runs; its files stay, named by a pid that is gone.
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead = gone.id();
        gone.wait().unwrap();
        let me = std::process::id();
        for (from, to) in [
            (status.info.path(&dir), bridge_status::status_path(&dir, "s", BridgeDirection::In, dead)),
            (
                bridge_status::resume_path(&dir, "s", BridgeDirection::In, me),
                bridge_status::resume_path(&dir, "s", BridgeDirection::In, dead),
            ),
        ] {
            std::fs::rename(from, to).unwrap();
        }
        std::mem::forget(status);
        drop((target, reader));
        let (_target, status) = open_local(&b, aeron_dir).unwrap();
        assert_eq!(status.info.resume_position, 160, "the message ended at 0 + 32 + 100, aligned");
        let own = bridge_status::resume_path(&dir, "s", BridgeDirection::In, me);
        assert_eq!(bridge_status::read_resume(&own), Some((160, 0)), "kept in its own resume file at once");
        let mut info = status.info.clone();
        let mut core = InCore::new(4096);
        let mut sink = Sink::new(4096);
        feed(&mut core, &mut sink, &mut info, &status.resume, frag(8, BEGIN | END, 4096, &[0; 8]));
        assert_eq!(info.losses, vec![Loss { from: 160, to: 4096, messages: None, cause: LossCause::Gap }]);
    }

    /// `BridgeBuilder::term_length` sets the terms of the local stream's sessions the in bridge
    /// creates (the issue-23 test needs small ones far from the source).
    #[test]
    fn the_local_stream_takes_the_term_length_asked_for() {
        let dir = crate::testing::TempDir::new("bridge-in-term");
        for (term, want) in [(None, shmlog::DEFAULT_TERM_LENGTH), (Some(64 << 10), 64 << 10)] {
            let mut b = BridgeBuilder::new("s").dir(dir.path()).channel("aeron:udp?endpoint=127.0.0.1:1");
            if let Some(t) = term {
                b = b.term_length(t);
            }
            let (target, _status) = open_local(&b, std::path::Path::new("/nowhere")).unwrap();
            let Target::Exclusive(p) = &target else { panic!("an exclusive publication") };
            assert_eq!(p.term_length(), want);
        }
    }

    #[test]
    fn a_gap_is_reported_only_where_messages_can_have_been_lost() {
        let at = |start: i64| source_span(start, 0);
        let mut ledger = Ledger { run_open: false };
        let fresh = info;
        // Within one image nothing is lost (Aeron retransmits): a jump is padding or fragments.
        let mut info = fresh();
        ledger.check_gap(&mut false, &mut info, at(4096), 0);
        assert!(info.losses.is_empty());
        // A new image: the jump is a gap, to this start.
        let (mut info, mut unchecked) = (fresh(), true);
        ledger.check_gap(&mut unchecked, &mut info, at(4096), 0);
        assert_eq!(info.losses, vec![Loss { from: 1024, to: 4096, messages: None, cause: LossCause::Gap }]);
        assert!(!unchecked, "checked once per image");
        // Messages the out bridge dropped or lost before this one: upstream, from where it was
        // expected, or from its session's start after a fresh start (`[0, 0)` when it is the
        // session's first: the loss was in an earlier session, which the out bridge's status
        // names); counted in `source_losses` either way.
        for (first, start, marks, from) in [
            (false, 4096, wire::AFTER_DROP, 1024),
            (true, 4096, wire::LOST, 1024),
            (false, 4096, wire::LOST | wire::AFTER_DROP, 1024),
            (false, 4096, wire::FRESH_START | wire::LOST, 0),
            (true, 512, wire::FRESH_START | wire::AFTER_DROP, 0),
            (false, 0, wire::FRESH_START | wire::LOST, 0),
            (false, 512, wire::LOST, 512),
        ] {
            let (mut info, mut unchecked) = (fresh(), first);
            ledger.check_gap(&mut unchecked, &mut info, at(start), marks);
            let upstream = Loss { from, to: start, messages: None, cause: LossCause::Upstream };
            assert_eq!((info.losses, info.source_losses), (vec![upstream], 1), "{start} {marks}");
        }
        // Marked, with no valid position: counted, not placed.
        let mut info = fresh();
        ledger.check_gap(&mut true, &mut info, None, wire::LOST);
        assert_eq!((info.losses.len(), info.source_losses), (0, 1));
        // A restarted source starts its positions again; a message where expected is no gap.
        for (start, marks) in [(64, wire::FRESH_START), (4096, wire::FRESH_START), (1024, 0), (512, 0)] {
            let mut info = fresh();
            ledger.check_gap(&mut true, &mut info, at(start), marks);
            assert!(info.losses.is_empty(), "start {start} marks {marks}");
        }
        // Nothing expected yet (a first bridge): nothing to compare with.
        let mut info = fresh();
        info.resume_position = -1;
        ledger.check_gap(&mut true, &mut info, at(4096), 0);
        assert!(info.losses.is_empty());
        // No valid position: not compared, and the image's first check waits for the next one.
        let (mut info, mut unchecked) = (fresh(), true);
        ledger.check_gap(&mut unchecked, &mut info, None, 0);
        assert!(info.losses.is_empty() && unchecked);
    }

    #[test]
    fn deliveries_move_the_expected_position_and_close_a_run_of_drops() {
        let (mut ledger, mut info) = (Ledger { run_open: false }, info());
        let none = ResumeFile::detached();
        ledger.lost(&mut info, &none, source_span(1024, 10), 10, None);
        ledger.lost(&mut info, &none, source_span(1088, 40), 40, None);
        assert_eq!(info.dropped, 2);
        let run = Loss { from: 1024, to: 1184, messages: Some(2), cause: LossCause::Dropped };
        assert_eq!(info.losses, vec![run], "the run is in the status while it grows");
        ledger.delivered(&mut info, &none, 100, source_span(1184, 100));
        ledger.lost(&mut info, &none, source_span(1344, 10), 10, None);
        let next = Loss { from: 1344, to: 1408, messages: Some(1), cause: LossCause::Dropped };
        assert_eq!(info.losses, vec![run, next], "a delivery closed the first run");
        assert_eq!((info.messages, info.bytes, info.source_position), (1, 100, 1184));
        // A drop that starts before the run's end (another source's positions) opens a new one,
        // so no loss ever has `to < from`.
        ledger.lost(&mut info, &none, source_span(64, 10), 10, None);
        assert_eq!(info.losses.len(), 3);
        assert!(info.losses.iter().all(|l| l.from <= l.to));
    }

    #[test]
    fn source_spans_are_checked() {
        assert_eq!(source_span(0, 0), Some((0, 32)));
        assert_eq!(source_span(1024, 100), Some((1024, 1184)));
        assert_eq!(source_span(-32, 0), None);
        assert_eq!(source_span(i64::MAX & !31, 0), None);
        assert_eq!(source_span((i64::MAX & !31) - 32, 0), Some(((i64::MAX & !31) - 32, i64::MAX & !31)));
        assert_eq!(source_span(0, usize::MAX), None);
    }
}
