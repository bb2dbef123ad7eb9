//! The single writer: appends frames to the active term, pads and rotates at term end, and zeroes
//! the next partition as it goes so that it is clean before the writer enters it (invariant I3)
//! with no memset spike at rotation.
//!
//! Order of writes for every frame (invariant I1): the tail counter (release), the cleaning of the
//! same range in the next partition, the header bytes after the length word, the payload, and last
//! the frame length with a release store. Readers acquire-load the length and read nothing of a
//! frame whose length is zero.

use super::position::pack_tail;
use super::Log;
use crate::layout::align;
use crate::layout::frame::{
    framed_length, rest, HeaderRest, CURRENT_VERSION, FRAME_ALIGNMENT, HEADER_LEN, REST_LEN, REST_OFFSET,
    TYPE_DATA, TYPE_PAD, UNFRAGMENTED,
};
use crate::layout::frame::{BEGIN_FLAG, END_FLAG};
use crate::layout::log_meta::{self as meta, clean_chunk, PARTITION_COUNT};
use crate::region::{DirectRegion, RegionMut, Span, Window};
use crate::sync::protocol;
use crate::sync::{fence, Ordering};

/// The message does not fit in the rest of the term: the term was padded to its end and the
/// caller must [`Appender::rotate`] and retry.
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Tripped;

/// The stream reached `term_length * 2^31`.
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct MaxPosition;

/// A reserved, uncommitted frame: readers stop at it until it is committed or aborted.
///
/// Move-only: [`Appender::commit`] and [`Appender::abort`] consume it, so no copy can lend the
/// payload of a frame after it was committed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ClaimedFrame {
    /// Region offset of the frame.
    base: usize,
    /// Header plus payload bytes.
    frame_length: usize,
    /// Stream position just after the frame.
    pub position: i64,
}

impl ClaimedFrame {
    pub(crate) fn payload_len(&self) -> usize {
        self.frame_length - HEADER_LEN
    }
}

/// Reads a message gathered from several slices, fragment by fragment.
pub(crate) struct Gather<'a> {
    parts: &'a [&'a [u8]],
    part: usize,
    at: usize,
}

impl Gather<'_> {
    /// Copies the next `n` bytes of the message into the region at `dst`.
    ///
    /// # Safety
    /// As [`RegionMut::copy_in`] for `dst..dst + n`.
    #[inline(always)]
    pub(crate) unsafe fn copy_next<R: RegionMut>(&mut self, region: &R, mut dst: usize, mut n: usize) {
        while n > 0 {
            let part = self.parts[self.part];
            let take = n.min(part.len() - self.at);
            // SAFETY: within `dst..dst + n` (the caller's contract).
            unsafe { region.copy_in(dst, &part[self.at..self.at + take]) };
            dst += take;
            n -= take;
            self.at += take;
            if self.at == part.len() {
                self.part += 1;
                self.at = 0;
            }
        }
    }

    /// `parts` must hold at least as many bytes as will be copied out of it.
    pub(crate) fn new<'a>(parts: &'a [&'a [u8]]) -> Gather<'a> {
        Gather { parts, part: 0, at: 0 }
    }

    /// Passes over the next `n` bytes.
    pub(crate) fn skip(&mut self, mut n: usize) {
        while n > 0 {
            let take = n.min(self.parts[self.part].len() - self.at);
            n -= take;
            self.at += take;
            if self.at == self.parts[self.part].len() {
                self.part += 1;
                self.at = 0;
            }
        }
    }
}

/// The header after the length word of an unfragmented data frame of `log`'s session in term
/// `term_id`, at term offset 0: the writers' template, which [`rest_from`] adapts per frame.
pub(crate) fn data_template<R: crate::region::Region>(log: &Log<R>, term_id: i32) -> [u8; REST_LEN] {
    HeaderRest {
        version: CURRENT_VERSION,
        flags: UNFRAGMENTED,
        frame_type: TYPE_DATA,
        term_offset: 0,
        session_id: log.session_id(),
        stream_id: log.stream_id(),
        term_id,
        reserved_value: 0,
    }
    .encode()
}

/// The header after the length word of a frame at `offset` of `template`'s term, with `flags`
/// and `frame_type` (the writers' templates hold the rest).
#[inline(always)]
pub(crate) fn rest_from(
    template: &[u8; REST_LEN],
    offset: usize,
    flags: u8,
    frame_type: u16,
) -> [u8; REST_LEN] {
    let mut rest = *template;
    rest[rest::FLAGS] = flags;
    rest[rest::TYPE..rest::TYPE + 2].copy_from_slice(&frame_type.to_le_bytes());
    rest[rest::TERM_OFFSET..rest::TERM_OFFSET + 4].copy_from_slice(&(offset as i32).to_le_bytes());
    rest
}

/// The writer's private state over a log it owns.
#[derive(Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Appender<R> {
    log: Log<R>,
    term_length: usize,
    term_offset: usize,
    term_id: i32,
    index: usize,
    term_begin: i64,
    /// The active partition (follows `index`).
    partition: Span,
    /// The next partition still holds an old term that must be zeroed before it is reused.
    clean_next: bool,
    /// Offset up to which the next partition is already zeroed for the coming term.
    cleaned_to: usize,
    /// Header bytes after the length word, with this term's id, built with flags UNFRAGMENTED
    /// and type DATA (which `append_unfragmented` relies on); per frame only the flags, type and
    /// term offset change, in copies (`rest_for`), and per term the term id (`rotate`).
    template: [u8; REST_LEN],
    max_payload: usize,
}

impl<R: RegionMut> Appender<R> {
    /// Takes over a log where its tail counters say the writer stopped (a fresh log: position 0).
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn new(log: Log<R>) -> Result<Self, crate::error::Invalid> {
        let terms = log.terms();
        let count = log.active_term_count();
        if count < 0 {
            return Err(crate::error::Invalid::Corrupt("negative active term count"));
        }
        let index = count as usize % PARTITION_COUNT;
        let raw = log.raw_tail(index);
        let term_id = terms.initial_term_id.wrapping_add(count);
        if super::position::tail_term_id(raw) != term_id {
            return Err(crate::error::Invalid::Corrupt("tail counter does not match the active term"));
        }
        let template = data_template(&log, term_id);
        Ok(Self {
            partition: log.partition(index),
            term_length: log.term_length(),
            max_payload: log.geometry().mtu - HEADER_LEN,
            term_offset: super::position::tail_offset(raw, log.term_length()),
            term_id,
            index,
            term_begin: (count as i64) << terms.bits,
            clean_next: count >= 2,
            cleaned_to: 0,
            template,
            log,
        })
    }

    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn log(&self) -> &Log<R> {
        &self.log
    }

    /// Position after the last reserved frame.
    #[inline(always)]
    pub(crate) fn position(&self) -> i64 {
        self.term_begin + self.term_offset as i64
    }

    pub(crate) fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Appends a message of `len` bytes gathered from `parts` (whose lengths sum to `len`),
    /// fragmenting it above the max payload. Returns the position after it.
    ///
    /// The caller checked `len` against the max message length and admission against the limit.
    #[inline(always)]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn append(&mut self, parts: &[&[u8]], len: usize) -> Result<i64, Tripped> {
        debug_assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), len);
        match parts {
            [message] if len <= self.max_payload => self.append_unfragmented(message),
            _ => self.append_gathered(parts, len),
        }
    }

    /// The common case, one slice of at most the max payload in one frame: a header copy, a
    /// payload copy, one commit, then this frame's share of zeroing the next partition (as in
    /// `reserve`, but behind the commit). Admission is the caller's, as for `append`.
    #[inline(always)]
    pub(crate) fn append_unfragmented(&mut self, message: &[u8]) -> Result<i64, Tripped> {
        let start = self.term_offset;
        let end = start + align(message.len() + HEADER_LEN, FRAME_ALIGNMENT);
        if end > self.term_length {
            self.pad_to_end();
            return Err(Tripped);
        }
        self.publish_tail(end);
        let term = self.active_term();
        // The template already says version 0, UNFRAGMENTED, DATA: only the offset changes.
        // SAFETY: (all three copies) `[start, end)` is the frame just reserved past every
        // committed one in the active partition. Its length word is still zero, so no reader reads
        // or is lent any of it (I1); cleaning never touches the active partition; and flow control
        // admitted this position, so no reader still reads this place's previous term (I2).
        unsafe {
            term.copy_in_cell(start, REST_OFFSET, &self.template);
            term.copy_in_cell(start, REST_OFFSET + rest::TERM_OFFSET, &(start as i32).to_le_bytes());
            term.copy_in_body(start, message);
        }
        term.store_i32(start, (message.len() + HEADER_LEN) as i32, protocol::commit());
        self.term_offset = end;
        // After the commit: the message is out before the chunk of zeroing it may trigger, so
        // a reader waiting for it does not wait for that too. The next partition is as clean
        // when this call returns, and before any later commit, as if zeroed first.
        self.clean_ahead(end);
        Ok(self.term_begin + end as i64)
    }

    /// The active partition, bounds-checked once here instead of at every access in it.
    #[inline(always)]
    fn active_term(&self) -> Window<'_, R> {
        self.log.term_window(self.index)
    }

    #[inline(never)]
    fn append_gathered(&mut self, parts: &[&[u8]], len: usize) -> Result<i64, Tripped> {
        let start = self.term_offset;
        let end = start + framed_length(len, self.max_payload);
        if end > self.term_length {
            self.pad_to_end();
            return Err(Tripped);
        }
        self.reserve(start, end);
        let mut gather = Gather::new(parts);
        let mut offset = start;
        let mut remaining = len;
        let mut flags = if len <= self.max_payload { UNFRAGMENTED } else { BEGIN_FLAG };
        loop {
            let chunk = remaining.min(self.max_payload);
            remaining -= chunk;
            if remaining == 0 {
                flags |= END_FLAG;
            }
            self.write_frame(offset, flags, TYPE_DATA, chunk, &mut gather);
            offset += align(chunk + HEADER_LEN, FRAME_ALIGNMENT);
            flags = 0;
            if remaining == 0 {
                break;
            }
        }
        self.term_offset = end;
        Ok(self.term_begin + end as i64)
    }

    /// Reserves one frame of `len` payload bytes (at most the max payload) and writes its header;
    /// the length word stays zero until [`Appender::commit`] or [`Appender::abort`].
    pub(crate) fn claim(&mut self, len: usize) -> Result<ClaimedFrame, Tripped> {
        debug_assert!(len <= self.max_payload);
        let start = self.term_offset;
        let end = start + align(len + HEADER_LEN, FRAME_ALIGNMENT);
        if end > self.term_length {
            self.pad_to_end();
            return Err(Tripped);
        }
        self.reserve(start, end);
        let rest = self.rest_for(start, UNFRAGMENTED, TYPE_DATA);
        let base = self.partition.base() + start;
        // SAFETY: the header of the frame just reserved, uncommitted (as in `append_unfragmented`).
        unsafe { self.log.region().copy_in(base + REST_OFFSET, &rest) };
        self.term_offset = end;
        Ok(ClaimedFrame { base, frame_length: len + HEADER_LEN, position: self.term_begin + end as i64 })
    }

    /// Gives `f` the payload bytes of a claimed frame (the closure form works on every backend,
    /// loom's included; `claim_slice` lends them for longer on real memory).
    #[cfg(any(test, shmlog_fuzz, shmlog_loom))]
    pub(crate) fn with_claim_payload<T>(&self, frame: &ClaimedFrame, f: impl FnOnce(&mut [u8]) -> T) -> T {
        // SAFETY: the frame was reserved by this single writer and its length word is still zero
        // (a `ClaimedFrame` exists only until `commit` or `abort` consumes it), so no reader reads
        // these bytes (readers stop at a zero length, I1), cleaning never touches the active
        // partition, and `&self` on the only writer excludes other writes while `f` runs.
        unsafe { self.log.region().with_bytes_mut(frame.base + HEADER_LEN, frame.payload_len(), f) }
    }

    /// Sets the reserved value of a claimed frame.
    pub(crate) fn set_claim_reserved_value(&self, frame: &ClaimedFrame, value: i64) {
        let at = frame.base + REST_OFFSET + rest::RESERVED_VALUE;
        // SAFETY: the header of an uncommitted frame (as in `with_claim_payload`).
        unsafe { self.log.region().copy_in(at, &value.to_le_bytes()) };
    }

    /// Publishes a claimed frame to readers.
    pub(crate) fn commit(&self, frame: ClaimedFrame) {
        let r = self.log.region();
        r.store_i32(frame.base, frame.frame_length as i32, protocol::commit());
    }

    /// Turns a claimed frame into padding that readers skip.
    pub(crate) fn abort(&self, frame: ClaimedFrame) {
        let r = self.log.region();
        // SAFETY: the header of an uncommitted frame (as in `with_claim_payload`).
        unsafe { r.copy_in(frame.base + REST_OFFSET + rest::TYPE, &TYPE_PAD.to_le_bytes()) };
        r.store_i32(frame.base, frame.frame_length as i32, protocol::commit());
    }

    /// Moves to the next partition after a trip. Fails at the stream's maximum position.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn rotate(&mut self) -> Result<(), MaxPosition> {
        let next_begin = self.term_begin + self.term_length as i64;
        if next_begin >= self.log.terms().max_position() {
            return Err(MaxPosition);
        }
        self.index = (self.index + 1) % PARTITION_COUNT;
        self.partition = self.log.partition(self.index);
        self.term_id = self.term_id.wrapping_add(1);
        self.term_begin = next_begin;
        self.term_offset = 0;
        self.template[rest::TERM_ID..rest::TERM_ID + 4].copy_from_slice(&self.term_id.to_le_bytes());
        let count = self.log.terms().term_count(self.term_id);
        // The partition after the new one last held term `count - 2`, if that term existed.
        self.clean_next = count >= 2;
        self.cleaned_to = 0;
        let r = self.log.region();
        self.log.store_tail(self.index, pack_tail(self.term_id, 0));
        let field = self.log.meta_field(meta::ACTIVE_TERM_COUNT);
        r.store_i32(field, count as i32, Ordering::Release);
        Ok(())
    }

    /// Pads `[term_offset, T)` so readers move on to the next term.
    fn pad_to_end(&mut self) {
        let start = self.term_offset;
        if start < self.term_length {
            let end = self.term_length;
            self.reserve(start, end);
            let rest = self.rest_for(start, UNFRAGMENTED, TYPE_PAD);
            let base = self.partition.base() + start;
            let r = self.log.region();
            // SAFETY: the header of the padding frame just reserved (as in `append_unfragmented`).
            unsafe { r.copy_in(base + REST_OFFSET, &rest) };
            r.store_i32(base, (end - start) as i32, protocol::commit());
            self.term_offset = end;
        }
    }

    /// Publishes the tail and zeroes the next partition up to (at least) the same offset. That
    /// partition holds the term two behind this one, which every live reader has finished (the
    /// limit keeps readers within a window, at most T/2, of the writer) and which no joining
    /// reader may pick (joins are at most one term behind the writer). Zeroing in chunks of
    /// `clean_chunk(T)` keeps the cost per message small and free of spikes.
    #[inline(always)]
    fn reserve(&mut self, start: usize, end: usize) {
        debug_assert!(start <= end && end <= self.term_length);
        self.publish_tail(end);
        self.clean_ahead(end);
    }

    #[inline(always)]
    fn publish_tail(&self, end: usize) {
        self.log.store_tail(self.index, pack_tail(self.term_id, end));
    }

    #[inline(always)]
    fn clean_ahead(&mut self, end: usize) {
        if protocol::clean() && self.clean_next && end > self.cleaned_to {
            self.clean_up_to(end);
        }
    }

    #[inline(never)]
    fn clean_up_to(&mut self, end: usize) {
        let chunk = clean_chunk(self.term_length);
        let to = align(end, chunk).min(self.term_length);
        // The run-ahead that `Geometry::lapping_margin` accounts for: never more than a chunk
        // past the grid point the writer reached.
        debug_assert!(to <= end + chunk.saturating_sub(FRAME_ALIGNMENT));
        let next = (self.index + 1) % PARTITION_COUNT;
        let base = self.log.partition_base(next);
        // The tail stored before this (`publish_tail`) is seen by an untethered reader that
        // copied any byte zeroed here, once it issues its acquire fence (`log::reader::lapped`);
        // so is every write of the terms after this one, which come later still. A compiler
        // barrier on x86-64, once per chunk.
        fence(Ordering::Release);
        // SAFETY: the next partition last held the term two behind this one. Every reader the
        // writer counts is within a window of it, so in this term or the one before (I2); a
        // reader it does not count yet joined at most a term behind the writer, and the writer
        // stays `Geometry::lapping_margin` short of reaching its bytes here (validated with the
        // geometry). Nobody reads or is lent `[cleaned_to, to)` of that partition (I3).
        unsafe { self.log.region().zero(base + self.cleaned_to, to - self.cleaned_to) };
        self.cleaned_to = to;
    }

    #[inline(always)]
    fn rest_for(&self, offset: usize, flags: u8, frame_type: u16) -> [u8; REST_LEN] {
        rest_from(&self.template, offset, flags, frame_type)
    }

    #[inline(always)]
    fn write_frame(&self, offset: usize, flags: u8, frame_type: u16, len: usize, src: &mut Gather<'_>) {
        let base = self.partition.base() + offset;
        let r = self.log.region();
        // SAFETY: a frame of the message just reserved, not committed yet (as in
        // `append_unfragmented`).
        unsafe {
            r.copy_in(base + REST_OFFSET, &self.rest_for(offset, flags, frame_type));
            src.copy_next(r, base + HEADER_LEN, len);
        }
        r.store_i32(base, (len + HEADER_LEN) as i32, protocol::commit());
    }
}

impl<R: DirectRegion> Appender<R> {
    /// Lends the payload of the pending claim `frame` as a slice.
    ///
    /// `frame` must be the claim most recently made and neither committed nor aborted; the
    /// publication's `Claim` guard guarantees it by owning the frame.
    pub(crate) fn claim_slice(&mut self, frame: &ClaimedFrame) -> &mut [u8] {
        // SAFETY: as in `with_claim_payload`: the frame is reserved and uncommitted, so no reader
        // touches it; the slice borrows `self` mutably, so no append, commit or abort (the only
        // writes near it) can happen while it lives, and it cannot outlive the mapping.
        unsafe { self.log.region().slice_mut(frame.base + HEADER_LEN, frame.payload_len()) }
    }
}

#[cfg(all(test, not(shmlog_loom)))]
mod tests {
    use super::*;
    use crate::layout::log_meta::Geometry;
    use crate::log::{reader, LogInit};
    use crate::region::HeapRegion;

    /// Found by the `ops_oracle` fuzz target. A reader may join up to one term behind the
    /// writer, and the writer only counts it at its next limit recompute, so it may run on up to
    /// its cached limit (one window past the slowest reader it knew of) plus one message. Chunked
    /// cleaning must not reach the joiner's frames two partitions back: with 1 KiB chunks on a
    /// 1 KiB term, the first frame of term 6 zeroed all of term 4 under a reader at 5056.
    #[test]
    fn cleaning_ahead_spares_a_reader_that_joined_a_term_behind() {
        let (t, window) = (1024usize, 512i64);
        let geometry = Geometry { term_length: t, page_size: 4096, mtu: 64, window: t / 2 };
        let init = LogInit {
            geometry,
            initial_term_id: 0,
            session_id: 1,
            stream_id: 2,
            pid: 3,
            created_ns: 0,
            name: "clean",
            concurrent: false,
            session_seq: 1,
        };
        let mut w = Appender::new(Log::initialize(HeapRegion::new(geometry.file_length()), &init)).unwrap();
        let append = |w: &mut Appender<HeapRegion>| loop {
            match w.append(&[&[7u8; 32]], 32) {
                Ok(end) => return end,
                Err(Tripped) => w.rotate().unwrap(),
            }
        };
        // The reader joins at 5056 (term 4, offset 960) when the writer is at 6080, one term on.
        let joined = 5056;
        while w.position() < joined + t as i64 {
            append(&mut w);
        }
        assert!(reader::frame_starts_at(w.log(), joined));
        // The writer's cached limit is at most 6080 + window; it starts messages below it.
        while w.position() < joined + t as i64 + window {
            append(&mut w);
        }
        assert!(w.position() > 6144, "the writer is in term 6, which cleans term 4's partition");
        assert!(reader::frame_starts_at(w.log(), joined), "the joiner's frame was cleaned under it");
    }
}
