//! Reading committed frames from a term, for any number of readers, none of which writes the log.
//!
//! A reader acquire-loads each frame length and stops at a length of zero or less (invariant I1).
//! It never trusts the file: every length is checked against the term before it becomes an
//! offset, and a frame whose header does not name the place it sits in is reported as a fault and
//! never delivered, so a corrupt or hostile log yields a stop, never an out-of-bounds read.

use super::header::Header;
use super::Log;
use crate::layout::align;
use crate::layout::frame::{
    HeaderRest, CURRENT_VERSION, FRAME_ALIGNMENT, HEADER_LEN, REST_LEN, REST_OFFSET, TYPE_DATA, TYPE_PAD,
};
use crate::region::Region;
use crate::sync::Ordering;

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
pub(crate) struct Scan {
    /// Position after the last consumed frame (padding included).
    pub position: i64,
    /// Data fragments consumed.
    pub fragments: usize,
    /// Set when a frame failed validation; the position stays in front of it.
    pub fault: Option<&'static str>,
}

/// A frame that passed validation.
struct Frame {
    len: usize,
    aligned: usize,
    rest: HeaderRest,
}

/// The next frame at `offset` of the term at region offset `base`: `Ok(None)` when nothing is
/// committed there yet.
#[inline(always)]
fn next_frame<R: Region>(
    region: &R,
    base: usize,
    offset: usize,
    term_length: usize,
    term_id: i32,
) -> Result<Option<Frame>, &'static str> {
    let raw = region.load_i32(base + offset, Ordering::Acquire);
    if raw <= 0 {
        return Ok(None);
    }
    let len = raw as usize;
    if len < HEADER_LEN {
        return Err("frame length is shorter than a header");
    }
    let aligned = align(len, FRAME_ALIGNMENT);
    if aligned > term_length - offset {
        return Err("frame runs past the end of its term");
    }
    let mut bytes = [0u8; REST_LEN];
    region.copy_out(base + offset + REST_OFFSET, &mut bytes);
    let rest = HeaderRest::decode(&bytes);
    if rest.term_offset as i64 != offset as i64 || rest.term_id != term_id {
        return Err("frame header does not match its place in the log");
    }
    if rest.version != CURRENT_VERSION {
        return Err("unknown frame version");
    }
    if rest.frame_type != TYPE_DATA && rest.frame_type != TYPE_PAD {
        return Err("unknown frame type");
    }
    Ok(Some(Frame { len, aligned, rest }))
}

/// Reads up to `fragment_limit` data fragments from `position` to the end of its term at most.
///
/// `handler` decides per fragment (see [`Action`]); `commit` is called with the new position
/// whenever the handler returns [`Action::Commit`].
///
/// The caller must hold flow control at `position` (its reader slot shows a position at or before
/// it) for the whole call, so the writer cannot reach the frames handed out.
#[inline]
pub(crate) fn read<R: Region>(
    log: &Log<R>,
    position: i64,
    fragment_limit: usize,
    mut handler: impl FnMut(&[u8], &Header) -> Action,
    mut commit: impl FnMut(i64),
) -> Scan {
    let terms = log.terms();
    let term_length = log.term_length();
    let term_begin = terms.term_begin(position);
    let term_id = terms.term_id(position);
    let base = log.partition_base(terms.partition(position));
    let region = log.region();
    let mut offset = terms.term_offset(position);
    let mut fragments = 0;
    let mut fault = None;
    while fragments < fragment_limit && offset < term_length {
        let frame = match next_frame(region, base, offset, term_length, term_id) {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(what) => {
                fault = Some(what);
                break;
            }
        };
        let next = offset + frame.aligned;
        if frame.rest.frame_type == TYPE_PAD {
            offset = next;
            continue;
        }
        let header =
            Header { frame_length: frame.len as i32, rest: frame.rest, position: term_begin + next as i64 };
        // SAFETY: the frame's positive length was acquire-loaded, so its bytes are fully written
        // (I1); it lies inside the term (checked in `next_frame`); and the caller holds flow
        // control before it, so the writer cannot reach it (I2) or clean it (I3) while the
        // handler runs. The slice does not outlive the closure.
        let action = unsafe {
            region.with_bytes(base + offset + HEADER_LEN, frame.len - HEADER_LEN, |payload| {
                handler(payload, &header)
            })
        };
        match action {
            Action::Abort => break,
            Action::Break => {
                offset = next;
                fragments += 1;
                break;
            }
            Action::Commit => {
                offset = next;
                fragments += 1;
                commit(term_begin + offset as i64);
            }
            Action::Continue => {
                offset = next;
                fragments += 1;
            }
        }
    }
    Scan { position: term_begin + offset as i64, fragments, fault }
}

/// Hands `handler` one contiguous block of whole committed data frames (headers included) from
/// `position`, at most `max_bytes` long unless the first frame alone is longer. Padding ends a
/// block; padding at the start is consumed silently. Returns the bytes consumed in `fragments`.
pub(crate) fn read_block<R: Region>(
    log: &Log<R>,
    position: i64,
    max_bytes: usize,
    handler: impl FnOnce(&[u8], i64),
) -> Scan {
    let terms = log.terms();
    let term_length = log.term_length();
    let term_begin = terms.term_begin(position);
    let term_id = terms.term_id(position);
    let base = log.partition_base(terms.partition(position));
    let region = log.region();
    let mut start = terms.term_offset(position);
    let mut end = start;
    let mut fault = None;
    while end < term_length {
        let frame = match next_frame(region, base, end, term_length, term_id) {
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
        // to lie inside the term; the caller holds flow control before `start` (I2, I3).
        unsafe {
            region.with_bytes(base + start, end - start, |block| handler(block, term_begin + start as i64))
        };
    }
    Scan { position: term_begin + end as i64, fragments: end - (terms.term_offset(position)), fault }
}

/// `true` if nothing is committed at `position` yet (its length word is zero): below the
/// producer position this is the frame the writer is still writing (an open claim, or an offer
/// caught mid-copy), where a reader that caught up stands and waits. `position` must be 32-aligned.
pub(crate) fn frame_pending_at<R: Region>(log: &Log<R>, position: i64) -> bool {
    let terms = log.terms();
    let at = log.partition_base(terms.partition(position)) + terms.term_offset(position);
    log.region().load_i32(at, Ordering::Acquire) <= 0
}

/// `true` if a valid, committed frame (data or padding) starts at `position`.
pub(crate) fn frame_starts_at<R: Region>(log: &Log<R>, position: i64) -> bool {
    let terms = log.terms();
    let offset = terms.term_offset(position);
    let base = log.partition_base(terms.partition(position));
    matches!(next_frame(log.region(), base, offset, log.term_length(), terms.term_id(position)), Ok(Some(_)))
}
