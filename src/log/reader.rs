//! Reading committed frames from a term, for any number of readers, none of which writes the log.
//!
//! A reader acquire-loads each frame length and stops at a length of zero (invariant I1); an
//! exclusive writer never stores a negative one, so that is a fault, while in a concurrent log it
//! is a frame still being written (`log::concurrent`) and the reader waits at it as at a zero. It never trusts the file: every length
//! is checked against the term before it becomes an offset, and a frame whose header does not name
//! the place it sits in is reported as a fault and never delivered, so a corrupt or hostile log
//! yields a stop, never an out-of-bounds read.

use super::frame_loop::{self, FrameSource, Next};
use super::header::Header;
use super::position::{tail_offset, tail_term_id};
use super::Log;
use crate::layout::align;
use crate::layout::frame::{
    self, HeaderRest, BEGIN_FLAG, END_FLAG, HEADER_LEN, REST_LEN, REST_OFFSET, TYPE_PAD,
};
use crate::layout::log_meta::{clean_chunk, PARTITION_COUNT};
use crate::region::{Region, Span, Window};
use crate::sync::protocol;
use crate::sync::{fence, Ordering};

/// What a controlled handler tells the poll loop to do next (Aeron's semantics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Do not consume this fragment; stop. It is delivered again by the next poll.
    Abort,
    /// Consume this fragment and stop polling.
    Break,
    /// Consume this fragment, publish the position now (releasing flow control early), continue.
    Commit,
    /// Consume this fragment and continue.
    Continue,
}

/// Where a read stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Scan {
    /// Position after the last consumed frame (padding included).
    pub position: i64,
    /// Data fragments consumed.
    pub fragments: usize,
    /// Set when a frame failed validation; the position stays in front of it.
    pub fault: Option<&'static str>,
    /// Bytes handed out as a block (`read_block` only).
    pub bytes: usize,
}

/// A frame that passed validation.
struct Frame {
    len: usize,
    aligned: usize,
    rest: HeaderRest,
}

/// Where a reader stands: a position, with the term it falls in worked out once per term rather
/// than on every poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Cursor {
    term_begin: i64,
    term_id: i32,
    partition: Span,
    offset: usize,
}

impl Cursor {
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn new<R: Region>(log: &Log<R>, position: i64) -> Self {
        let terms = log.terms();
        Self {
            term_begin: terms.term_begin(position),
            term_id: terms.term_id(position),
            partition: log.partition(terms.partition(position)),
            offset: terms.term_offset(position),
        }
    }

    #[inline(always)]
    pub(crate) fn position(&self) -> i64 {
        self.term_begin + self.offset as i64
    }

    /// Moves to `position` if it lies in the cursor's term; `false` (and no move) if it does not,
    /// for the caller to make a new cursor there.
    #[inline(always)]
    pub(crate) fn move_within_term(&mut self, position: i64) -> bool {
        match usize::try_from(position - self.term_begin) {
            Ok(offset) if offset < self.partition.len() => {
                self.offset = offset;
                true
            }
            _ => false,
        }
    }
}

/// The next frame at `offset` of `term`: `Ok(None)` when nothing is committed there yet.
#[inline(always)]
fn next_frame<R: Region>(
    log: &Log<R>,
    term: &Window<'_, R>,
    offset: usize,
    term_id: i32,
) -> Result<Option<Frame>, &'static str> {
    let raw = term.load_i32(offset, Ordering::Acquire);
    let checked = match frame::check_length(raw, term.len() - offset) {
        Err(what) if being_written(log, what) => Ok(None),
        checked => checked,
    };
    let Some((len, aligned)) = checked? else { return Ok(None) };
    let mut bytes = [0u8; REST_LEN];
    term.copy_out_cell(offset, REST_OFFSET, &mut bytes);
    let rest = HeaderRest::decode(&bytes);
    frame::check_rest(&rest, offset, term_id)?;
    Ok(Some(Frame { len, aligned, rest }))
}

/// `true` if `what` is a negative length in a concurrent log: a frame still being written (see
/// `log::concurrent`), where a reader waits as at a zero. Off the hot path.
#[cold]
fn being_written<R: Region>(log: &Log<R>, what: &'static str) -> bool {
    what == frame::NEGATIVE_LENGTH && log.is_concurrent()
}

/// How a frame's payload reaches a handler.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub trait Delivery {
    /// Calls `f` with the `len` payload bytes of the committed frame at `offset` of `term`.
    ///
    /// # Safety
    /// For delivery in place: as [`read`] (the caller holds flow control before the frame), and
    /// the frame's positive length was acquire-loaded and checked to fit the term.
    unsafe fn deliver<R: Region, T>(
        &mut self,
        term: &Window<'_, R>,
        offset: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> T,
    ) -> T;

    /// Calls `f` with the `len` bytes of whole committed frames from `offset` of `term`.
    ///
    /// # Safety
    /// As [`Delivery::deliver`], for every frame in the block.
    unsafe fn deliver_block<R: Region, T>(
        &mut self,
        term: &Window<'_, R>,
        offset: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> T,
    ) -> T;
}

/// Lends the handler a slice of the log itself: zero-copy. Sound while every peer keeps to the
/// protocol (see the crate's trust model).
#[derive(Clone, Copy, Debug, Default)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct InPlace;

impl Delivery for InPlace {
    #[inline(always)]
    unsafe fn deliver<R: Region, T>(
        &mut self,
        term: &Window<'_, R>,
        offset: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> T,
    ) -> T {
        // SAFETY: the frame's bytes are fully written (its positive length was acquire-loaded,
        // I1), inside the term (checked by the caller and by the window), and the writer cannot
        // reach or clean them while `f` runs (flow control: the caller's contract, I2, I3). The
        // slice does not outlive the closure.
        unsafe { term.with_body(offset, len, f) }
    }

    #[inline(always)]
    unsafe fn deliver_block<R: Region, T>(
        &mut self,
        term: &Window<'_, R>,
        offset: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> T,
    ) -> T {
        // SAFETY: as in `deliver`, for every frame of the block.
        unsafe { term.with_bytes(offset, len, f) }
    }
}

/// Copies the payload into a buffer of the reader's before the handler sees it, so a peer that
/// breaks the protocol (writes a frame after committing it) can change neither what the handler
/// holds nor the bounds it checked.
#[derive(Debug, Default)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Copied(pub Vec<u8>);

impl Delivery for Copied {
    #[inline]
    unsafe fn deliver<R: Region, T>(
        &mut self,
        term: &Window<'_, R>,
        offset: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> T,
    ) -> T {
        self.0.resize(len, 0);
        term.copy_out_body(offset, &mut self.0);
        f(&self.0)
    }

    unsafe fn deliver_block<R: Region, T>(
        &mut self,
        term: &Window<'_, R>,
        offset: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> T,
    ) -> T {
        self.0.resize(len, 0);
        term.copy_out(offset, &mut self.0);
        f(&self.0)
    }
}

/// The term a cursor stands in, as a bounds-checked window.
#[inline(always)]
fn term_window<'a, R: Region>(log: &'a Log<R>, at: &Cursor) -> Window<'a, R> {
    Window::new(log.region(), at.partition)
}

/// Reads up to `fragment_limit` data fragments from `position` to the end of its term at most.
///
/// `handler` decides per fragment (see [`Action`]); `commit` is called with the new position
/// whenever the handler returns [`Action::Commit`].
///
/// # Safety
/// The caller holds flow control at `position` for the whole call (a reader slot the writer
/// counts shows a position at or before it, or the writer is held back by other means), so the
/// writer can neither overwrite nor clean the frames handed to `handler` while it runs.
#[cfg(test)]
#[inline]
pub(crate) unsafe fn read<R: Region>(
    log: &Log<R>,
    position: i64,
    fragment_limit: usize,
    handler: impl FnMut(&[u8], &Header) -> Action,
    commit: impl FnMut(i64),
) -> Scan {
    // SAFETY: the caller's contract is `read_at`'s.
    unsafe { read_at(log, &Cursor::new(log, position), fragment_limit, &mut InPlace, handler, commit) }
}

/// [`read`] from a cursor, which spares a reader that polls often the position arithmetic, with
/// payloads delivered by `delivery`.
///
/// # Safety
/// As [`read`], at `cursor`'s position.
#[inline]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub unsafe fn read_at<R: Region>(
    log: &Log<R>,
    cursor: &Cursor,
    fragment_limit: usize,
    delivery: &mut impl Delivery,
    handler: impl FnMut(&[u8], &Header) -> Action,
    commit: impl FnMut(i64),
) -> Scan {
    // SAFETY: the caller holds flow control at the cursor for the whole call (this function's
    // contract), and the source lives only in this call.
    let mut source = unsafe { TermFrames::new(log, cursor, delivery, commit) };
    let delivered = frame_loop::deliver(&mut source, fragment_limit, handler);
    Scan { position: source.position(), fragments: delivered.fragments, fault: delivered.fault, bytes: 0 }
}

/// The committed frames of one term of the mapped log, from a cursor on: each length word
/// acquire-loaded and validated with its header ([`next_frame`]) before anything of the frame is
/// used, payloads handed out by a [`Delivery`] (in place or copied), `Commit` passed to `commit`.
struct TermFrames<'a, R: Region, D, C> {
    log: &'a Log<R>,
    term: Window<'a, R>,
    term_id: i32,
    term_begin: i64,
    offset: usize,
    delivery: &'a mut D,
    commit: C,
}

impl<'a, R: Region, D: Delivery, C: FnMut(i64)> TermFrames<'a, R, D, C> {
    /// # Safety
    /// The caller holds flow control at `cursor`'s position while the source lives (as [`read`]).
    #[inline(always)]
    unsafe fn new(log: &'a Log<R>, cursor: &Cursor, delivery: &'a mut D, commit: C) -> Self {
        Self {
            log,
            term: term_window(log, cursor),
            term_id: cursor.term_id,
            term_begin: cursor.term_begin,
            offset: cursor.offset,
            delivery,
            commit,
        }
    }

    #[inline(always)]
    fn position(&self) -> i64 {
        self.term_begin + self.offset as i64
    }
}

impl<R: Region, D: Delivery, C: FnMut(i64)> FrameSource for TermFrames<'_, R, D, C> {
    /// The frame's payload length, and the term offset after it.
    type Frame = (usize, usize);
    type Fault = &'static str;

    #[inline(always)]
    fn next(&mut self) -> Result<Next<(usize, usize)>, &'static str> {
        if self.offset >= self.term.len() {
            return Ok(Next::End);
        }
        let Some(frame) = next_frame(self.log, &self.term, self.offset, self.term_id)? else {
            return Ok(Next::End);
        };
        let next = self.offset + frame.aligned;
        if frame.rest.frame_type == TYPE_PAD {
            return Ok(Next::Pass((0, next)));
        }
        let position = self.term_begin + next as i64;
        let header = Header { frame_length: frame.len as i32, rest: frame.rest, position };
        Ok(Next::Deliver((frame.len - HEADER_LEN, next), header))
    }

    #[inline(always)]
    fn with_payload<T>(&mut self, (len, _): (usize, usize), f: impl FnOnce(&[u8]) -> T) -> T {
        // SAFETY: the frame's positive length was acquire-loaded and checked to fit the term (in
        // `next_frame`, by `next`), and the caller of `new` holds flow control before it.
        unsafe { self.delivery.deliver(&self.term, self.offset, len, f) }
    }

    #[inline(always)]
    fn consume(&mut self, (_, next): (usize, usize)) {
        self.offset = next;
    }

    #[inline(always)]
    fn commit(&mut self) {
        let position = self.position();
        (self.commit)(position);
    }
}

/// Hands `handler` one contiguous block of whole committed data frames (headers included) from
/// `position`, at most `max_bytes` long unless the first frame alone is longer. Padding ends a
/// block; padding at the start is consumed silently. Returns the bytes consumed in `bytes`.
///
/// # Safety
/// As [`read`].
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub unsafe fn read_block<R: Region>(
    log: &Log<R>,
    position: i64,
    max_bytes: usize,
    delivery: &mut impl Delivery,
    handler: impl FnOnce(&[u8], i64),
) -> Scan {
    let at = Cursor::new(log, position);
    let term = term_window(log, &at);
    let mut start = at.offset;
    let mut end = start;
    let mut fault = None;
    while end < term.len() {
        let frame = match next_frame(log, &term, end, at.term_id) {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(what) => {
                fault = Some(what);
                break;
            }
        };
        if frame.rest.frame_type == TYPE_PAD {
            if end == start {
                start += frame.aligned;
                end = start;
                continue;
            }
            break;
        }
        if end > start && end - start + frame.aligned > max_bytes {
            break;
        }
        end += frame.aligned;
    }
    if end > start {
        // SAFETY: every frame in [start, end) had a positive length acquire-loaded and was checked
        // to lie inside the term; the caller holds flow control before `start` (this function's
        // contract: I2, I3).
        unsafe {
            delivery.deliver_block(&term, start, end - start, |block| {
                handler(block, at.term_begin + start as i64)
            })
        };
    }
    Scan { position: at.term_begin + end as i64, fragments: 0, fault, bytes: end - at.offset }
}

/// A frame an untethered reader copied out of the log ([`copy_frames`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CopiedFrame {
    /// Term offset of the frame.
    pub offset: usize,
    /// Frame length (header included), as validated.
    pub len: usize,
    /// The space it takes in the term.
    pub aligned: usize,
    /// Its header after the length word, as validated.
    pub rest: HeaderRest,
    /// Where its bytes (the whole aligned frame, header included) start in the buffer; padding
    /// is not copied.
    pub at: usize,
}

impl CopiedFrame {
    pub(crate) fn is_pad(&self) -> bool {
        self.rest.frame_type == TYPE_PAD
    }
}

/// An untethered reader's copy: the committed frames from `cursor` on (up to the end of its
/// term, `max_data` data frames, and `max_bytes` bytes after the first frame) copied whole into
/// `buf` (from its start), and listed in `frames`. Every word and byte is read racily, since the
/// writer may be reusing the partition meanwhile: nothing copied may be trusted before
/// [`lapped`], called after this, says the writer had not begun to. Every length is validated
/// before it is used, so whatever a lapped read returns yields a stop, never an out-of-bounds
/// access or a panic; and `buf` grows only for a data frame whose header was validated and that
/// fits the log's MTU (padding is listed, not copied), so it never holds more than `max_bytes`
/// and one frame: what a poll may deliver, whatever a garbage length word says.
/// Returns the validation failure that stopped the copy, if any (a fault only if not lapped).
pub(crate) fn copy_frames<R: Region>(
    log: &Log<R>,
    cursor: &Cursor,
    max_data: usize,
    max_bytes: usize,
    buf: &mut Vec<u8>,
    frames: &mut Vec<CopiedFrame>,
) -> Option<&'static str> {
    frames.clear();
    let term = term_window(log, cursor);
    let mtu = log.geometry().mtu;
    let mut offset = cursor.offset;
    let (mut data, mut used) = (0, 0);
    while data < max_data && offset < term.len() && (frames.is_empty() || used < max_bytes) {
        let raw = term.load_i32_racy(offset, Ordering::Acquire);
        let checked = match frame::check_length(raw, term.len() - offset) {
            Err(what) if being_written(log, what) => Ok(None),
            checked => checked,
        };
        let (len, aligned) = match checked {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(what) => return Some(what),
        };
        // The header first, on the stack, with the length as validated: nothing grows before
        // it names this place and a known frame type.
        let mut header = [0u8; HEADER_LEN];
        term.copy_out_racy(offset, &mut header);
        header[..REST_OFFSET].copy_from_slice(&(len as i32).to_le_bytes());
        let mut bytes = [0u8; REST_LEN];
        bytes.copy_from_slice(&header[REST_OFFSET..]);
        let rest = HeaderRest::decode(&bytes);
        if let Err(what) = frame::check_rest(&rest, offset, cursor.term_id) {
            return Some(what);
        }
        // The frame lands at `used`, header first (a pad is listed at `used`, never copied).
        let at = used;
        if rest.frame_type != TYPE_PAD {
            if aligned > mtu {
                // No writer makes a data frame longer than the MTU (it fragments).
                return Some("data frame longer than the log's MTU");
            }
            // The buffer keeps its length from poll to poll (no zeroing per poll).
            if buf.len() < at + aligned {
                buf.resize(at + aligned, 0);
            }
            let frame_bytes = &mut buf[at..at + aligned];
            frame_bytes[..HEADER_LEN].copy_from_slice(&header);
            if aligned > HEADER_LEN {
                // `offset + HEADER_LEN` is a grid point inside the term: the frame fits it.
                term.copy_out_racy(offset + HEADER_LEN, &mut frame_bytes[HEADER_LEN..]);
            }
            used += aligned;
            data += 1;
        }
        frames.push(CopiedFrame { offset, len, aligned, rest, at });
        offset += aligned;
    }
    None
}

/// The check after an untethered reader's copy ([`copy_frames`] from `cursor`): `false` only if
/// the writer had not begun to reuse the bytes of `cursor`'s term from `cursor`'s offset on
/// when the copy ended, so that the copy holds what the writer committed there.
///
/// The partition of term `n` is next written while the writer is in term `n + 2`: it zeroes
/// it for term `n + 3`, in chunks of `clean_chunk(T)` bytes, each zeroed only after the tail of
/// term `n + 2` was stored past the chunk's start, and after a release fence (the exclusive
/// appender's `clean_up_to`, the concurrent writers' `mark_pending`); the writes of term
/// `n + 3` come later still. So after the copy an acquire fence, then a load of the tail
/// counter of term `n + 2`'s partition: if the copy read any byte written by the reuse, the
/// fences make that load see a tail of term `n + 2` at an offset `e` with
/// `align(e, chunk) > offset`, or a later term. A tail of term `n - 1` (the partition's term
/// before) or of term `n + 2` short of that proves the copy intact. Anything else is lapped.
/// (`docs/untethered.md` has the proof.)
#[inline]
pub(crate) fn lapped<R: Region>(log: &Log<R>, cursor: &Cursor) -> bool {
    if !protocol::copy_check() {
        return false; // the mutant: trust the copy
    }
    fence(Ordering::Acquire);
    let terms = log.terms();
    let index = (terms.partition(cursor.term_begin) + 2) % PARTITION_COUNT;
    let raw = log.raw_tail(index);
    let seen = tail_term_id(raw);
    if seen == cursor.term_id.wrapping_sub(1) {
        return false;
    }
    if seen != cursor.term_id.wrapping_add(2) {
        return true;
    }
    let t = log.term_length();
    align(tail_offset(raw, t), clean_chunk(t)) > cursor.offset
}

/// `true` if a frame length word at `position` reads positive, read as an untethered reader
/// reads (racily: a hint, not a proof).
pub(crate) fn frame_committed_racy_at<R: Region>(log: &Log<R>, position: i64) -> bool {
    let at = Cursor::new(log, position);
    term_window(log, &at).load_i32_racy(at.offset, Ordering::Acquire) > 0
}

/// `true` if nothing is committed at `position` yet (its length word is zero, or negative in a
/// concurrent log): below the producer position this is the frame a writer is still writing (an
/// open claim, or an offer caught mid-copy), where a reader that caught up stands and waits.
/// `position` must be 32-aligned.
pub(crate) fn frame_pending_at<R: Region>(log: &Log<R>, position: i64) -> bool {
    let at = Cursor::new(log, position);
    let len = term_window(log, &at).load_i32(at.offset, Ordering::Acquire);
    len == 0 || (len < 0 && log.is_concurrent())
}

/// `true` if a frame is committed at `position` (its length word is positive; not validated).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn frame_committed_at<R: Region>(log: &Log<R>, position: i64) -> bool {
    let at = Cursor::new(log, position);
    term_window(log, &at).load_i32(at.offset, Ordering::Acquire) > 0
}

/// `true` if a valid, committed frame (data or padding) starts at `position`.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn frame_starts_at<R: Region>(log: &Log<R>, position: i64) -> bool {
    let at = Cursor::new(log, position);
    matches!(next_frame(log, &term_window(log, &at), at.offset, at.term_id), Ok(Some(_)))
}

/// `true` if a frame starts at `position`, committed or still being written: walking the
/// committed frames of its term from the term's start lands on it. For a position whose length
/// word is zero, which could as well be inside a frame's payload (a stray reader position): one
/// walk over at most a term, on the cold path of a join.
pub(crate) fn frame_boundary<R: Region>(log: &Log<R>, position: i64) -> bool {
    let mut at = log.terms().term_begin(position);
    while at < position {
        let cursor = Cursor::new(log, at);
        match next_frame(log, &term_window(log, &cursor), cursor.offset, cursor.term_id) {
            Ok(Some(frame)) => at += frame.aligned as i64,
            _ => return false,
        }
    }
    at == position
}

/// `true` if a committed frame that starts a message (the first fragment, or padding between
/// messages) starts at `position`: where an explicit join may land.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn message_starts_at<R: Region>(log: &Log<R>, position: i64) -> bool {
    let at = Cursor::new(log, position);
    match next_frame(log, &term_window(log, &at), at.offset, at.term_id) {
        Ok(Some(frame)) => frame.rest.frame_type == TYPE_PAD || frame.rest.flags & BEGIN_FLAG != 0,
        _ => false,
    }
}

/// The first position at or after `from` (and below `newest`, the writer's position) where a
/// committed message starts, found by walking the frames from the start of `from`'s term;
/// `newest` if there is none. For refused joins: a position a retry at an explicit position can
/// use. Reads only length words and headers, never lends bytes.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn message_start_at_or_after<R: Region>(log: &Log<R>, from: i64, newest: i64) -> i64 {
    first_message_start(log, from, newest, false)
}

/// [`message_start_at_or_after`], but a frame still being written right after a message's end
/// counts too (a message, or padding, starts there once it is committed): where a join at the
/// oldest message lands when the writer is writing it (a session's first message, with its
/// writer held at the start by the readers it is owed to).
pub(crate) fn oldest_message_start<R: Region>(log: &Log<R>, from: i64, newest: i64) -> i64 {
    first_message_start(log, from, newest, true)
}

fn first_message_start<R: Region>(log: &Log<R>, from: i64, newest: i64, pending: bool) -> i64 {
    let terms = log.terms();
    let mut at = terms.term_begin(from.max(0));
    // Whether the frame before `at` ended a message (a term always starts with a message).
    let mut after_end = true;
    while at < newest {
        let cursor = Cursor::new(log, at);
        let term = term_window(log, &cursor);
        let frame = match next_frame(log, &term, cursor.offset, cursor.term_id) {
            Ok(Some(frame)) => frame,
            // Still being written, after a message's end: the next message starts here.
            Ok(None) if pending && at >= from && after_end => return at,
            _ => return newest, // still being written inside a message, or not a valid frame
        };
        let starts = frame.rest.frame_type == TYPE_PAD || frame.rest.flags & BEGIN_FLAG != 0;
        if at >= from && after_end && starts {
            return at;
        }
        after_end = frame.rest.frame_type == TYPE_PAD || frame.rest.flags & END_FLAG != 0;
        at += frame.aligned as i64;
    }
    newest
}
