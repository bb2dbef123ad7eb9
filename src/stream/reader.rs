//! The reader of one session: everything the protocol decides on the reading side, over any
//! region, so the loom models, the fuzz targets and the ThreadSanitizer test run this very code.
//!
//! A reader joins at a position the writer can no longer overwrite (`stream::join`), reads frames
//! in place or copied (`log::reader`), and publishes its position in its own slot after the
//! handler returned (I4), which is what keeps the writer away from the frames it lends (I2, I3).
//! It also decides when a session is over (end of stream, or nothing committed left) and reports
//! what flow control should have made impossible as a fault instead of delivering it.

use super::doorbell::Doorbell;
#[cfg(shmlog_loom)]
use super::doorbell::Rung;
use super::join::{self, JoinAt, JoinRefused};
use super::loss::{Loss, LossCause};
use super::slots::{SlotMut, Slots};
use crate::layout::frame::{framed_length, max_message_len, BEGIN_FLAG, END_FLAG, HEADER_LEN};
use crate::log::frame_loop::{self, FrameSource, Next};
use crate::log::header::Header;
use crate::log::reader::{self, Action, Copied, CopiedFrame, Cursor, InPlace, Scan};
use crate::log::Log;
use crate::region::{Region, RegionMut};

/// Why a reader stopped delivering: a frame failed validation, or the writer broke a bound that
/// flow control keeps. Never cleared within a session.
pub(crate) type Fault = &'static str;

/// Fault: the writer is further ahead than flow control allows any reader to trail it.
pub(crate) const OVERRUN: Fault =
    "overrun: the publisher ran further ahead of this reader than flow control allows (a forged \
     reader slot or a misbehaving publisher); frames delivered since the last check may be damaged";

/// Fault: a frame stays uncommitted although the writer has reserved space after it since.
pub(crate) const NEVER_COMMITTED: Fault =
    "a frame was never committed although the publisher has moved past it since";

/// Fault: the tail counters do not describe a position.
pub(crate) const BAD_TAIL: Fault = "the log's tail counters are inconsistent";

/// Where an untethered reader goes on after the writer lapped it
/// (`SubscriptionBuilder::on_lapped`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Resume {
    /// At the oldest message the log still holds: the start of the term before the writer's.
    /// Loses the least, but a reader that lags for good is lapped again soon.
    #[default]
    Oldest,
    /// At the writer's position: only messages offered from then on.
    Live,
}

/// Bytes an untethered reader copies before it checks them (at least one frame): a bound on
/// its buffer and on how far a check lags its copy.
pub(crate) const UNTETHERED_BATCH_BYTES: usize = 64 * 1024;

/// What an untethered reader keeps: its buffer, where to go when lapped, and its losses.
#[derive(Debug, Default)]
struct Untethered {
    resume: Resume,
    /// The frames of the last copy, and their bytes.
    buf: Vec<u8>,
    frames: Vec<CopiedFrame>,
    /// Start of a fragmented message whose first fragments were delivered and whose last was
    /// not yet: a lap loses the whole message.
    partial_from: Option<i64>,
    /// Loss reports not taken yet, oldest first.
    losses: std::collections::VecDeque<Loss>,
}

/// Untaken lap reports a reader keeps; past it the oldest are merged into one.
const MAX_LAP_REPORTS: usize = 64;

/// A reader of one session of a log, through its own slot.
#[derive(Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Reader<L, S> {
    log: Log<L>,
    cursor: Cursor,
    slot: SlotMut<S>,
    join_position: i64,
    /// Delivery leaves the fast path: a fault stops it, it skips to the next message start, or
    /// it copies payloads (one flag, so the fast path tests one word).
    detour: bool,
    /// Consumes fragments without delivering them until a message starts (after a join that may
    /// have landed inside a fragmented message).
    skipping: bool,
    fault: Option<Fault>,
    /// Payloads are copied out of the log before handlers see them.
    copy: Option<Copied>,
    /// The furthest the writer may be ahead of this reader: a term (a joiner the writer has not
    /// counted yet), a window, and a message.
    overrun_bound: i64,
    /// A frame found uncommitted at our position, and the writer's position then.
    stall: Option<(i64, i64)>,
    /// In a concurrent log: the last idle check found the frame at our position uncommitted
    /// while writers had reserved past it (its writer may be dead: see `log::unblock`).
    held: bool,
    /// An untethered reader (its slot says so): the writer does not wait for it, so it copies
    /// frames out, checks after the copy that the writer had not begun to reuse them, and
    /// reports a loss when it had (`docs/untethered.md`).
    untethered: Option<Box<Untethered>>,
}

/// An untethered reader's checked copy (`reader::copy_frames`, then not `reader::lapped`) as the
/// frames of a poll: payloads are lent from the copy, never from the log; the rest of a message
/// joined inside of is passed over; a frame consumed records where a message that the next lap
/// would cut began.
struct CopiedFrames<'a, S> {
    frames: &'a [CopiedFrame],
    buf: &'a [u8],
    /// The next frame to look at.
    at: usize,
    term_begin: i64,
    /// Term offset after the frames consumed.
    offset: usize,
    /// Why the copy stopped early: a fault once every frame before it is consumed.
    copy_fault: Option<Fault>,
    skipping: &'a mut bool,
    partial_from: &'a mut Option<i64>,
    slot: &'a SlotMut<S>,
}

impl<S: RegionMut> CopiedFrames<'_, S> {
    fn position(&self) -> i64 {
        self.term_begin + self.offset as i64
    }
}

impl<S: RegionMut> FrameSource for CopiedFrames<'_, S> {
    type Frame = CopiedFrame;
    type Fault = Fault;

    fn next(&mut self) -> Result<Next<CopiedFrame>, Fault> {
        let Some(&f) = self.frames.get(self.at) else {
            return self.copy_fault.map_or(Ok(Next::End), Err);
        };
        if f.is_pad() {
            return Ok(Next::Pass(f));
        }
        let position = self.term_begin + (f.offset + f.aligned) as i64;
        let header = Header { frame_length: f.len as i32, rest: f.rest, position };
        if *self.skipping {
            if !header.is_begin() {
                return Ok(Next::Pass(f));
            }
            *self.skipping = false;
        }
        Ok(Next::Deliver(f, header))
    }

    fn with_payload<T>(&mut self, frame: CopiedFrame, f: impl FnOnce(&[u8]) -> T) -> T {
        f(&self.buf[frame.at + HEADER_LEN..frame.at + frame.len])
    }

    fn consume(&mut self, f: CopiedFrame) {
        *self.partial_from = match (f.rest.flags & BEGIN_FLAG != 0, f.rest.flags & END_FLAG != 0) {
            (_, true) => None,
            (true, false) => Some(self.term_begin + f.offset as i64),
            (false, false) => *self.partial_from,
        };
        self.pass(f);
    }

    fn pass(&mut self, f: CopiedFrame) {
        self.offset = f.offset + f.aligned;
        self.at += 1;
    }

    fn commit(&mut self) {
        self.slot.set_position(self.position());
    }
}

impl<L: Region, S: RegionMut> Reader<L, S> {
    /// Joins `log`'s session through `slot` by `rule` (see [`join::join`]); on refusal the slot
    /// comes back, claimed but not reading. `copy` makes every delivery a copy (see
    /// [`Reader::poll`]).
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn join<R: Region>(
        log: Log<L>,
        slots: &Slots<R>,
        mut slot: SlotMut<S>,
        rule: JoinAt,
        copy: bool,
    ) -> Result<Self, (SlotMut<S>, JoinRefused)> {
        let position = match join::join(&log, slots, &slot, rule) {
            Ok(position) => position,
            Err(refused) => return Err((slot, refused)),
        };
        // Leaving this session later, the slot waits for the sessions after it.
        slot.knows_sessions_to(log.session_seq());
        // A writer that counted us as owed at the session's start (and sleeps, held there) may
        // go on from where we joined.
        slot.ring_writer();
        let g = log.geometry();
        let largest = framed_length(max_message_len(g.term_length), g.mtu - HEADER_LEN) as i64;
        Ok(Self {
            cursor: Cursor::new(&log, position),
            overrun_bound: (g.term_length + g.window) as i64 + largest,
            log,
            join_position: position,
            detour: true,
            skipping: true,
            fault: None,
            copy: copy.then(Copied::default),
            stall: None,
            held: false,
            untethered: slot.untethered().then(Box::default),
            slot,
        })
    }

    /// `true` if this reader is untethered (its slot was, when it joined).
    pub(crate) fn is_untethered(&self) -> bool {
        self.untethered.is_some()
    }

    /// Where an untethered reader goes on after a lap (default [`Resume::Oldest`]).
    pub(crate) fn set_resume(&mut self, resume: Resume) {
        if let Some(u) = &mut self.untethered {
            u.resume = resume;
        }
    }

    /// The oldest loss report an untethered reader has not handed out yet (each lap is one).
    /// Reports come in order with the messages: a poll that finds it was lapped delivers
    /// nothing, so asking after every poll that returned 0 places each exactly.
    pub(crate) fn take_loss(&mut self) -> Option<Loss> {
        self.untethered.as_mut()?.losses.pop_front()
    }

    /// Leaves the session: the slot stops counting for its writer and comes back for the next.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn leave(self) -> SlotMut<S> {
        self.slot.deactivate();
        // A writer held back by us may go on now.
        self.slot.ring_writer();
        self.slot
    }

    /// Delivers up to `fragment_limit` fragments to `handler`; returns how many.
    #[inline]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn poll(&mut self, mut handler: impl FnMut(&[u8], &Header), fragment_limit: usize) -> usize {
        self.controlled_poll(
            |payload: &[u8], header: &Header| {
                handler(payload, header);
                Action::Continue
            },
            fragment_limit,
        )
    }

    /// Like [`Reader::poll`], the handler steering with an [`Action`]; `Commit` publishes the
    /// position at once.
    #[inline]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn controlled_poll(
        &mut self,
        handler: impl FnMut(&[u8], &Header) -> Action,
        fragment_limit: usize,
    ) -> usize {
        if self.detour {
            return self.controlled_poll_detour(handler, fragment_limit);
        }
        let (log, cursor, slot) = (&self.log, &self.cursor, &self.slot);
        let commit = |position| slot.set_position(position);
        // SAFETY: our slot shows the cursor's position (published at the join and after every
        // move, only once the handler that saw the frames before it returned), so the writer,
        // which counts our slot or is bounded by the join proof until it does, can neither
        // overwrite nor clean anything from the cursor on while this call runs (I2, I3, I5);
        // `Commit` publishes only past frames whose handler returned.
        let scan = unsafe { reader::read_at(log, cursor, fragment_limit, &mut InPlace, handler, commit) };
        self.finish(scan)
    }

    /// `controlled_poll` off the fast path: after a fault, while skipping to a message start,
    /// and for every poll that copies payloads.
    #[cold]
    #[inline(never)]
    fn controlled_poll_detour(
        &mut self,
        handler: impl FnMut(&[u8], &Header) -> Action,
        fragment_limit: usize,
    ) -> usize {
        if self.untethered.is_some() {
            return self.poll_untethered(handler, fragment_limit);
        }
        if !self.take_detour() {
            return 0;
        }
        let (log, cursor, slot) = (&self.log, &self.cursor, &self.slot);
        let commit = |position| slot.set_position(position);
        // SAFETY: as in `controlled_poll`.
        let scan = unsafe {
            match &mut self.copy {
                None => reader::read_at(log, cursor, fragment_limit, &mut InPlace, handler, commit),
                Some(copied) => reader::read_at(log, cursor, fragment_limit, copied, handler, commit),
            }
        };
        self.finish(scan)
    }

    /// Hands `handler` one block of raw committed frames (headers included) and the position of
    /// its first byte; returns the bytes the position moved (the block, padding before it, and
    /// the rest of a message a new reader joined inside of). A call in which an untethered
    /// reader is lapped hands over no block.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn block_poll(&mut self, handler: impl FnOnce(&[u8], i64), max_bytes: usize) -> usize {
        if self.untethered.is_some() {
            return self.block_poll_untethered(handler, max_bytes);
        }
        let before = self.cursor.position();
        if self.detour && !self.take_detour() {
            return (self.cursor.position() - before) as usize;
        }
        let (log, position) = (&self.log, self.cursor.position());
        // SAFETY: as in `controlled_poll`.
        let scan = unsafe {
            match &mut self.copy {
                None => reader::read_block(log, position, max_bytes, &mut InPlace, handler),
                Some(copied) => reader::read_block(log, position, max_bytes, copied, handler),
            }
        };
        self.finish(scan);
        (self.cursor.position() - before) as usize
    }

    /// An untethered reader's poll: copy, check, then deliver from the copy (or report a lap).
    /// Every byte the handler sees was copied out of the log and then proven to be what the
    /// writer committed (`log::reader::lapped`); nothing is lent out of the log.
    fn poll_untethered(
        &mut self,
        handler: impl FnMut(&[u8], &Header) -> Action,
        fragment_limit: usize,
    ) -> usize {
        if self.fault.is_some() {
            return 0;
        }
        let cursor = self.cursor;
        let start = self.cursor_offset();
        let Some(u) = self.untethered.as_deref_mut() else { return 0 };
        let fault = reader::copy_frames(
            &self.log,
            &cursor,
            fragment_limit,
            UNTETHERED_BATCH_BYTES,
            &mut u.buf,
            &mut u.frames,
        );
        if reader::lapped(&self.log, &cursor) {
            self.lapped();
            return 0;
        }
        let mut source = CopiedFrames {
            frames: &u.frames,
            buf: &u.buf,
            at: 0,
            term_begin: self.log.terms().term_begin(cursor.position()),
            offset: start,
            copy_fault: fault,
            skipping: &mut self.skipping,
            partial_from: &mut u.partial_from,
            slot: &self.slot,
        };
        let delivered = frame_loop::deliver(&mut source, fragment_limit, handler);
        let position = source.position();
        self.finish(Scan { position, fragments: delivered.fragments, fault: delivered.fault, bytes: 0 })
    }

    /// [`Reader::block_poll`] of an untethered reader: the block is copied and checked first.
    fn block_poll_untethered(&mut self, handler: impl FnOnce(&[u8], i64), max_bytes: usize) -> usize {
        let before = self.cursor.position();
        if self.skipping {
            // Pass the rest of a message joined in the middle; stop in front of the next one.
            self.poll_untethered(|_: &[u8], _: &Header| Action::Abort, usize::MAX);
            // A lap ends skipping too; then no block in this call either: a poll that reports a
            // lap hands over nothing, so a caller (the recorder) knows every block it is handed
            // follows what it was handed before, or padding, since the last lap it learnt of.
            if self.skipping || self.untethered.as_ref().is_some_and(|u| !u.losses.is_empty()) {
                return (self.cursor.position() - before) as usize;
            }
        }
        if self.fault.is_some() {
            return (self.cursor.position() - before) as usize;
        }
        let cursor = self.cursor;
        let mut end = self.cursor_offset();
        let Some(u) = self.untethered.as_deref_mut() else { return 0 };
        let fault = reader::copy_frames(&self.log, &cursor, usize::MAX, max_bytes, &mut u.buf, &mut u.frames);
        if reader::lapped(&self.log, &cursor) {
            self.lapped();
            return (self.cursor.position() - before) as usize;
        }
        let term_begin = self.log.terms().term_begin(cursor.position());
        // Leading padding is consumed; then whole data frames up to padding or `max_bytes`.
        let mut block: Option<(usize, usize)> = None; // (buffer start, buffer end)
        let mut whole = true;
        for f in &u.frames {
            match block {
                None if f.is_pad() => end = f.offset + f.aligned,
                None => {
                    block = Some((f.at, f.at + f.aligned));
                    end = f.offset + f.aligned;
                }
                Some(_) if f.is_pad() => {
                    whole = false;
                    break;
                }
                Some((start, stop)) => {
                    if stop - start + f.aligned > max_bytes {
                        whole = false;
                        break;
                    }
                    block = Some((start, stop + f.aligned));
                    end = f.offset + f.aligned;
                }
            }
        }
        if let Some((start, stop)) = block {
            let first = end - (stop - start);
            handler(&u.buf[start..stop], term_begin + first as i64);
        }
        let fault = if whole { fault } else { None };
        self.finish(Scan { position: term_begin + end as i64, fragments: 0, fault, bytes: 0 });
        (self.cursor.position() - before) as usize
    }

    /// The cursor's offset in its term.
    fn cursor_offset(&self) -> usize {
        self.log.terms().term_offset(self.cursor.position())
    }

    /// The writer lapped this untethered reader: one loss report, from the start of what it had
    /// not delivered whole to where it goes on (`Resume`).
    #[cold]
    fn lapped(&mut self) {
        let position = self.cursor.position();
        let producer = match self.log.producer_position() {
            Ok(producer) => producer,
            Err(_) => return self.stop(BAD_TAIL),
        };
        let Some(u) = self.untethered.as_deref_mut() else { return };
        let t = self.log.term_length() as i64;
        let to = match u.resume {
            Resume::Live => producer,
            // Term starts are message starts, and the writer is not in the term after this one
            // yet (the term before its own is intact until it is).
            Resume::Oldest => (self.log.terms().term_begin(producer) - t).max(0),
        };
        if to <= position {
            // A lap says the writer is two terms on; a tail that says otherwise is no log's.
            return self.stop(BAD_TAIL);
        }
        let from = u.partial_from.take().unwrap_or(position);
        let loss = Loss { session_id: self.log.session_id(), from, to, cause: LossCause::Lapped };
        if u.losses.len() == MAX_LAP_REPORTS {
            // Nobody takes them: fold the oldest two into one, still covering both.
            if let (Some(a), Some(b)) = (u.losses.pop_front(), u.losses.pop_front()) {
                u.losses.push_front(Loss { to: b.to, ..a });
            }
        }
        u.losses.push_back(loss);
        self.slot.count_loss(to - from);
        self.skipping = false;
        self.cursor = Cursor::new(&self.log, to);
        self.slot.set_position(to);
    }

    /// `true` if the writer has begun to reuse what an untethered reader has not read yet.
    fn is_lapped(&self) -> bool {
        self.untethered.is_some() && reader::lapped(&self.log, &self.cursor)
    }

    #[inline(always)]
    fn finish(&mut self, scan: Scan) -> usize {
        if scan.position != self.cursor.position() {
            if !self.cursor.move_within_term(scan.position) {
                self.enter_term(scan.position);
            }
            self.slot.set_position(scan.position);
            self.slot.ring_writer();
        } else if let Some(fault) = scan.fault {
            self.stop(fault);
        }
        scan.fragments
    }

    /// Moves the cursor into the next term (once a term): where the bounds are checked.
    #[cold]
    #[inline(never)]
    fn enter_term(&mut self, position: i64) {
        self.cursor = Cursor::new(&self.log, position);
        self.check_bounds();
    }

    /// The cold path in front of delivery: `false` if nothing may be delivered now.
    #[cold]
    fn take_detour(&mut self) -> bool {
        if self.fault.is_some() {
            return false;
        }
        while self.skipping {
            let mut found = false;
            let handler = |_: &[u8], header: &Header| {
                found = header.is_begin();
                if found {
                    Action::Abort
                } else {
                    Action::Continue
                }
            };
            let before = self.cursor.position();
            // SAFETY: as in `controlled_poll` (the handler does not even look at the bytes).
            let scan = unsafe {
                reader::read_at(&self.log, &self.cursor, usize::MAX, &mut InPlace, handler, |_| {})
            };
            self.finish(Scan { fragments: 0, ..scan });
            if self.fault.is_some() {
                return false;
            }
            if found {
                self.skipping = false;
            } else if scan.position == before {
                return false; // nothing more committed yet
            }
        }
        // Copying readers stay on the detour for good.
        self.detour = self.copy.is_some();
        true
    }

    fn stop(&mut self, fault: Fault) {
        self.fault = Some(fault);
        self.detour = true;
    }

    /// Checks, once per term and when idle, that the writer kept the bounds flow control puts on
    /// it; past them, the frames lent since may have changed under their handlers.
    fn check_bounds(&mut self) {
        if self.untethered.is_some() {
            return; // the writer may be anywhere: laps are losses (checked at every copy)
        }
        match self.log.producer_position() {
            Ok(producer) if producer - self.cursor.position() > self.overrun_bound => self.stop(OVERRUN),
            Ok(_) => {}
            Err(_) => self.stop(BAD_TAIL),
        }
    }

    /// The reader's cold check after polls that found nothing: the bounds, and a frame that
    /// stays uncommitted although the writer has reserved space after it since. With one writer
    /// its commit happened before that reservation was published, so it is not coming: a fault.
    /// With several, it is another writer's, which may be slow or dead: [`Reader::held`].
    pub(crate) fn idle_check(&mut self) {
        self.check_bounds();
        self.held = false;
        if self.is_lapped() {
            self.stall = None; // the next poll reports it
            return;
        }
        let position = self.cursor.position();
        let producer = match self.log.producer_position() {
            Ok(producer) => producer,
            Err(_) => return,
        };
        if producer <= position || !reader::frame_pending_at(&self.log, position) {
            self.stall = None;
            return;
        }
        if self.log.is_concurrent() {
            self.held = true;
            return;
        }
        match self.stall {
            Some((at, seen)) if at == position && producer > seen => self.stop(NEVER_COMMITTED),
            Some((at, _)) if at == position => {}
            _ => self.stall = Some((position, producer)),
        }
    }

    /// `true` if the last idle check found us at an uncommitted frame of a concurrent log with
    /// writers' reservations after it: time to ask whether its writer lives.
    pub(crate) fn held(&self) -> bool {
        self.held
    }

    /// `true` once everything before the writer's end of stream has been read.
    pub(crate) fn at_end_of_stream(&self) -> bool {
        self.cursor.position() >= self.log.eos_position()
    }

    /// `true` if a poll now would find something: a committed frame at our position, the end of
    /// the stream, or a fault to report. What a sleeping reader re-checks before it sleeps.
    pub(crate) fn has_news(&self) -> bool {
        // The frame first: after a wake-up it is on the page the poll reads next, while the end
        // of stream is on the metadata page (each page touched after a sleep costs a TLB miss).
        if self.untethered.is_some() {
            return self.fault.is_some()
                || reader::frame_committed_racy_at(&self.log, self.cursor.position())
                || self.is_lapped()
                || self.at_end_of_stream();
        }
        self.fault.is_some()
            || reader::frame_committed_at(&self.log, self.cursor.position())
            || self.at_end_of_stream()
    }

    /// Sleeps on the stream's doorbell until the writer commits, ends the stream or starts a new
    /// session, at most `timeout` (does not sleep if [`Reader::has_news`] already). Without a
    /// doorbell, returns `TimedOut` at once.
    #[cfg(shmlog_loom)]
    pub(crate) fn wait_for_news(&self, timeout: std::time::Duration) -> Rung {
        match self.slot.bell() {
            Some(bell) => bell.wait_for_writer(|| self.has_news(), timeout),
            None => Rung::TimedOut,
        }
    }

    /// `true` if nothing committed is left to read at our position (or reading has stopped at a
    /// fault): with a dead writer, the session is over. Frames are committed in order, so an
    /// uncommitted one here means none after it is either.
    pub(crate) fn drained(&self) -> bool {
        if self.untethered.is_some() {
            return self.fault.is_some()
                || self.at_end_of_stream()
                || (!reader::frame_committed_racy_at(&self.log, self.cursor.position())
                    && !self.is_lapped());
        }
        self.fault.is_some()
            || self.at_end_of_stream()
            || !reader::frame_committed_at(&self.log, self.cursor.position())
    }

    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn position(&self) -> i64 {
        self.cursor.position()
    }

    /// The stream's doorbell, if the slot has one.
    pub(crate) fn bell(&self) -> Option<&Doorbell<S>> {
        self.slot.bell()
    }

    pub(crate) fn join_position(&self) -> i64 {
        self.join_position
    }

    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn fault(&self) -> Option<Fault> {
        self.fault
    }

    pub(crate) fn log(&self) -> &Log<L> {
        &self.log
    }

    /// Bytes allocated for an untethered reader's copies (`None`: tethered), for the tests of
    /// its bound (the review's N6).
    #[cfg(test)]
    pub(crate) fn untethered_buffer_capacity(&self) -> Option<usize> {
        self.untethered.as_ref().map(|u| u.buf.capacity())
    }
}

#[cfg(all(test, not(shmlog_loom)))]
mod tests {
    use super::*;
    use crate::layout::frame::{HeaderRest, CURRENT_VERSION, TYPE_DATA, UNFRAGMENTED};
    use crate::layout::log_meta::Geometry;
    use crate::stream::writer::Writer;
    use crate::sync::Ordering;
    use crate::testing::{claimed_slot, heap_log, heap_slots, AllAlive, Shared};
    use std::sync::Arc;

    const T: usize = 64 * 1024;
    const TERM_ID: i32 = 7;

    /// A writer over a fresh log of 64 KiB terms, and an untethered reader joined at its start.
    fn untethered_pair() -> (Shared, Writer<Shared, Shared, AllAlive>, Reader<Shared, Shared>) {
        let geometry = Geometry { term_length: T, page_size: 4096, mtu: 1408, window: T / 2 };
        let (region, log) = heap_log(geometry, TERM_ID, 41);
        let (slot_region, slots) = heap_slots(1);
        let mut slot = claimed_slot(&slot_region, 0, 1);
        slot.set_untethered(true);
        let view = Log::open_any_term(Arc::clone(&region)).expect("a valid log");
        let reader = Reader::join(view, &slots, slot, JoinAt::Earliest, false).expect("joins");
        assert!(reader.is_untethered());
        let writer = Writer::new(log, slots, AllAlive).expect("a fresh log");
        (region, writer, reader)
    }

    /// Polls one fragment at a time until nothing more comes; returns the fragments delivered.
    fn drain(reader: &mut Reader<Shared, Shared>) -> usize {
        let mut got = 0;
        while reader.poll(|_, _| got += 1, 1) > 0 {}
        got
    }

    /// The review's N6: one garbage length word (a lapped read, or a hostile writer of the log)
    /// grew the buffer to the length it named, before the header was checked, for good. Now the
    /// header is checked first, and a data frame must fit the MTU: the buffer keeps the size of
    /// what was delivered, and the reader reports a fault.
    #[test]
    fn a_garbage_length_word_does_not_grow_the_untethered_buffer() {
        for hostile_header in [false, true] {
            let (region, mut writer, mut reader) = untethered_pair();
            for _ in 0..4 {
                writer.offer(&[5u8; 32]).unwrap();
            }
            assert_eq!(drain(&mut reader), 4);
            let at = writer.position() as usize;
            let base = writer.log().partition_base(0);
            if hostile_header {
                // A header that names its place, as a writer of the log could forge.
                let rest = HeaderRest {
                    version: CURRENT_VERSION,
                    flags: UNFRAGMENTED,
                    frame_type: TYPE_DATA,
                    term_offset: at as i32,
                    session_id: 41,
                    stream_id: writer.log().stream_id(),
                    term_id: TERM_ID,
                    reserved_value: 0,
                };
                // SAFETY: a heap region only this thread touches.
                unsafe { region.copy_in(base + at + 4, &rest.encode()) };
            }
            region.store_i32(base + at, (T - at) as i32, Ordering::Release);
            assert_eq!(drain(&mut reader), 0);
            assert!(reader.fault().is_some(), "a frame no writer makes is a fault");
            let capacity = reader.untethered_buffer_capacity().unwrap();
            assert!(capacity <= 256, "the buffer grew to {capacity} bytes for a garbage length word");
        }
    }

    /// Honest padding at the end of a term is listed, not copied: it does not grow the buffer
    /// either (a pad of nearly 8 KiB here, the frames delivered 64 bytes each).
    #[test]
    fn end_of_term_padding_does_not_grow_the_untethered_buffer() {
        let (_region, mut writer, mut reader) = untethered_pair();
        while writer.position() < (T - 7 * 1024) as i64 {
            writer.offer(&[6u8; 32]).unwrap();
            assert_eq!(drain(&mut reader), 1);
        }
        // Does not fit the rest of the term: padded to its end, then written in the next.
        writer.offer(&[7u8; 8000]).unwrap();
        assert_eq!(drain(&mut reader), 0, "one poll over the pad (the next term's frames follow)");
        assert_eq!(reader.position(), T as i64, "the pad was consumed");
        let capacity = reader.untethered_buffer_capacity().unwrap();
        assert!(capacity <= 256, "the buffer grew to {capacity} bytes over a pad");
        assert!(drain(&mut reader) > 0 && reader.fault().is_none());
    }
}
