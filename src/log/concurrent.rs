//! Many writers appending to one log (Aeron's concurrent publication, without a driver).
//!
//! A writer reserves space with a compare-and-swap on the active partition's tail, so the check
//! against its flow-control limit and the reservation are one step: every reservation starts
//! below the limit of the writer that made it and ends at most one message past it, the same
//! reach as the exclusive writer's, so `Geometry::lapping_margin` covers both. A message that does
//! not fit the term swaps the tail to the term's end instead, pads the rest, and rotates; any
//! writer may rotate (two CASes, each done once, whoever does it).
//!
//! Order of writes for every reservation `[start, end)` (invariant I1 for many writers):
//! 1. the writer's pending word (its slot in the writers table) := the position it will reserve
//!    at, before the CAS: flow control of every writer then stays within a window of it, and no
//!    unblocker pads over it while its owner lives (`log::unblock`);
//! 2. the tail CAS;
//! 3. the first frame's length word := minus the reservation's length: readers wait at it as at a
//!    zero, and an unblocker that finds its writer dead knows how far to pad;
//! 4. the headers and payloads (fragments after the first are committed as they are written:
//!    readers cannot reach them before the first);
//! 5. the reservation's share of the next partition zeroed (see [`clean_next`]), before the
//!    pending word goes: that word is what holds every writer out of this range next term;
//! 6. the first frame's length, positive, with a release store: the commit;
//! 7. the pending word := `NO_PENDING`.

use super::appender::{data_template, rest_from, Gather};
use super::position::{pack_tail, tail_offset, tail_term_id};
use super::Log;
use crate::layout::align;
use crate::layout::frame::BEGIN_FLAG;
use crate::layout::frame::{
    framed_length, rest, END_FLAG, FRAME_ALIGNMENT, HEADER_LEN, REST_LEN, REST_OFFSET, TYPE_DATA, TYPE_PAD,
    UNFRAGMENTED,
};
use crate::layout::log_meta::{self as meta, clean_chunk, PARTITION_COUNT};
use crate::region::{RegionMut, Span, Window};
use crate::sync::protocol;
use crate::sync::{fence, Ordering};

/// Why a reservation was not made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The tail stands at or past the caller's limit: recompute it, or report back pressure.
    Limit { position: i64 },
    /// The stream reached `term_length * 2^31`.
    MaxPosition,
    /// The tail counters never described a position, or one off the frame grid (corruption).
    BadTail,
}

/// Space reserved in the active term and not committed yet: readers wait at its first frame.
///
/// It carries the payload length it was made for, and every write, lend and commit of it takes
/// its lengths from here, never from the caller: no length can reach past the reservation into
/// the next writer's (the shape of the exclusive appender's `ClaimedFrame`).
///
/// Move-only: [`ConcurrentAppender::write`], [`ConcurrentAppender::commit`] and
/// [`ConcurrentAppender::abort`] consume it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    /// The active partition's index, and where it lies.
    index: usize,
    partition: Span,
    next_partition: Span,
    term_id: i32,
    start: usize,
    end: usize,
    /// Payload bytes of the message reserved for (0 for a term's end reserved to pad it).
    payload: usize,
    /// Stream position just after the reservation.
    pub position: i64,
}

impl Reservation {
    /// Log bytes reserved.
    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }
}

/// Tries before a reservation gives up on tail counters that never describe a term.
const BAD_TAIL_TRIES: usize = if cfg!(shmlog_loom) { 64 } else { 1 << 20 };

/// One writer of a concurrent log: its slot in the writers table and the header template.
#[derive(Debug)]
pub(crate) struct ConcurrentAppender<R> {
    log: Log<R>,
    /// This writer's slot in the writers table (its pending word).
    slot: usize,
    active_count_field: usize,
    /// Header bytes after the length word: version, UNFRAGMENTED, DATA, session, stream and the
    /// term id of `template_term`; the term offset is set per frame.
    template: [u8; REST_LEN],
    template_term: i32,
    max_payload: usize,
    /// Bytes of the next partition zeroed at a time (see [`clean_next`]).
    chunk: usize,
    /// The term of our last reservation, for the fast path of the next.
    known: Option<KnownTerm>,
}

/// Where a term lies, worked out once per term by each writer.
#[derive(Clone, Copy, Debug)]
struct KnownTerm {
    term_id: i32,
    index: usize,
    partition: Span,
    next_partition: Span,
    term_begin: i64,
}

impl<R: RegionMut> ConcurrentAppender<R> {
    /// A writer of `log` through writer slot `slot` (claimed by the caller).
    pub(crate) fn new(log: Log<R>, slot: usize) -> Self {
        debug_assert!(log.is_concurrent() && slot < meta::MAX_WRITERS);
        let template = data_template(&log, 0);
        Self {
            slot,
            active_count_field: log.meta_field(meta::ACTIVE_TERM_COUNT),
            max_payload: log.geometry().mtu - HEADER_LEN,
            chunk: clean_chunk(log.term_length()),
            template,
            template_term: 0,
            known: None,
            log,
        }
    }

    pub(crate) fn log(&self) -> &Log<R> {
        &self.log
    }

    pub(crate) fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Log space a message of `len` bytes takes.
    pub(crate) fn framed_length(&self, len: usize) -> usize {
        framed_length(len, self.max_payload)
    }

    /// Reserves the frames of a message of `len` payload bytes (at most a term / 8) at the tail
    /// if the tail stands below `limit`; pads and rotates at a term's end on the way.
    #[inline(always)]
    pub(crate) fn reserve(&mut self, len: usize, limit: i64) -> Result<Reservation, Refused> {
        let framed = self.framed_length(len);
        if let Some(reservation) = self.reserve_in_known_term(len, framed, limit) {
            return Ok(reservation);
        }
        self.reserve_slow(len, framed, limit)
    }

    /// [`ConcurrentAppender::reserve`]'s common case alone (see `reserve_in_known_term`): `None`
    /// where `reserve` goes on to its general loop. Inline in the caller, so the reservation's
    /// payload length is the caller's own `len` to the optimiser.
    #[inline(always)]
    pub(crate) fn reserve_fast(&self, len: usize, limit: i64) -> Option<Reservation> {
        self.reserve_in_known_term(len, self.framed_length(len), limit)
    }

    #[inline(never)]
    fn reserve_slow(&mut self, len: usize, framed: usize, limit: i64) -> Result<Reservation, Refused> {
        let refused = self.reserve_inner(len, framed, limit);
        if refused.is_err() {
            self.set_pending(meta::NO_PENDING);
        }
        refused
    }

    /// The common case in one pass: the term of our last reservation is still the active one
    /// (its tail names it and is short of its end: a term is rotated away only once full), the
    /// tail is below the limit, the message fits, and no other writer moves the tail between our
    /// load and our CAS. `None` sends the caller to the general loop, which starts over.
    #[inline(always)]
    fn reserve_in_known_term(&self, len: usize, framed: usize, limit: i64) -> Option<Reservation> {
        let known = self.known.as_ref()?;
        let raw = self.log.raw_tail(known.index);
        let start = (raw as u32) as usize;
        let end = start + framed;
        let position = known.term_begin + start as i64;
        // Off the grid (`framed` is on it): no writer stores such a tail; the general loop
        // reports it.
        if tail_term_id(raw) != known.term_id
            || end > known.partition.len()
            || position >= limit
            || end % FRAME_ALIGNMENT != 0
        {
            return None;
        }
        if protocol::pending_before_reserve() {
            self.set_pending(position);
        }
        self.log.swap_tail(known.index, raw, pack_tail(known.term_id, end)).ok()?;
        if !protocol::pending_before_reserve() {
            self.set_pending(position);
        }
        let reservation = Reservation {
            index: known.index,
            partition: known.partition,
            next_partition: known.next_partition,
            term_id: known.term_id,
            start,
            end,
            payload: len,
            position: known.term_begin + end as i64,
        };
        self.mark_pending(&reservation);
        Some(reservation)
    }

    fn reserve_inner(&mut self, len: usize, framed: usize, limit: i64) -> Result<Reservation, Refused> {
        let terms = self.log.terms();
        let t = self.log.term_length();
        for _ in 0..BAD_TAIL_TRIES {
            let count = self.log.active_term_count();
            if count < 0 {
                return Err(Refused::BadTail);
            }
            let index = count as usize % PARTITION_COUNT;
            let raw = self.log.raw_tail(index);
            let term_id = terms.initial_term_id.wrapping_add(count);
            if tail_term_id(raw) != term_id {
                continue; // a rotation is under way: the count or the tail is about to change
            }
            let start = tail_offset(raw, t);
            if start % FRAME_ALIGNMENT != 0 {
                // No writer stores a tail off the frame grid: a corrupt or hostile file. Never
                // write at it (the region layer would mask it onto the grid, over a frame).
                return Err(Refused::BadTail);
            }
            let term_begin = (count as i64) << terms.bits;
            let position = term_begin + start as i64;
            if position >= limit {
                return Err(Refused::Limit { position });
            }
            if start >= t {
                self.rotate(count)?;
                continue;
            }
            if protocol::pending_before_reserve() {
                self.set_pending(position);
            }
            let end = start + framed;
            let fits = end <= t;
            let new_tail = pack_tail(term_id, if fits { end } else { t });
            if self.log.swap_tail(index, raw, new_tail).is_err() {
                continue; // another writer reserved first: try again at the new tail
            }
            if !protocol::pending_before_reserve() {
                self.set_pending(position);
            }
            let partition = self.log.partition(index);
            let next_partition = self.log.partition((index + 1) % PARTITION_COUNT);
            self.known = Some(KnownTerm { term_id, index, partition, next_partition, term_begin });
            let reservation = Reservation {
                index,
                partition,
                next_partition,
                term_id,
                start,
                end: if fits { end } else { t },
                payload: if fits { len } else { 0 },
                position: term_begin + if fits { end } else { t } as i64,
            };
            self.mark_pending(&reservation);
            if fits {
                return Ok(reservation);
            }
            // The message does not fit: the rest of the term is ours to pad; then rotate.
            self.pad(reservation);
            self.rotate(count)?;
        }
        Err(Refused::BadTail)
    }

    /// Moves the active term from `count` to `count + 1` if nobody did yet: the next partition's
    /// tail first (only from the term three back that it held), then the term count.
    fn rotate(&self, count: i32) -> Result<(), Refused> {
        let log = &self.log;
        let terms = log.terms();
        let next = count as i64 + 1;
        if next << terms.bits >= terms.max_position() {
            return Err(Refused::MaxPosition);
        }
        let next = next as i32;
        let next_id = terms.initial_term_id.wrapping_add(next);
        let field = log.meta_field(meta::TAIL_COUNTERS + 8 * (next as usize % PARTITION_COUNT));
        let raw = log.region().load_i64(field, Ordering::Acquire);
        // Only from the term three back: a count read a lap ago must not reset a live tail.
        if !protocol::rotate_from_three_back()
            || tail_term_id(raw) == next_id.wrapping_sub(PARTITION_COUNT as i32)
        {
            let _ = log.region().compare_exchange_i64(field, raw, pack_tail(next_id, 0));
        }
        let _ = log.region().compare_exchange_i32(self.active_count_field, count, next);
        Ok(())
    }

    fn set_pending(&self, position: i64) {
        self.log.store_writer_pending(self.slot, position);
    }

    /// Step 3: the first length word says "being written, this long". Then a release fence
    /// before any byte of the reservation or of the next partition is written: an untethered
    /// reader that copied one of those bytes sees, after its acquire fence, the tail this
    /// reservation moved (`log::reader::lapped`). A compiler barrier on x86-64.
    fn mark_pending(&self, r: &Reservation) {
        self.log.term_window(r.index).store_i32(r.start, -(r.len() as i32), Ordering::Release);
        fence(Ordering::Release);
    }

    /// Points the template at `r`'s term (once a term).
    #[inline(always)]
    fn enter_term(&mut self, r: &Reservation) {
        if self.template_term != r.term_id {
            self.template_term = r.term_id;
            self.template[rest::TERM_ID..rest::TERM_ID + 4].copy_from_slice(&r.term_id.to_le_bytes());
        }
    }

    /// The header after the length word of a frame at `offset` of the template's term.
    fn rest_for(&self, offset: usize, flags: u8, frame_type: u16) -> [u8; REST_LEN] {
        rest_from(&self.template, offset, flags, frame_type)
    }

    /// Steps 5 to 7 for a reservation whose first frame's header and payload are written.
    #[inline(always)]
    fn finish(&self, r: Reservation, first_frame_length: usize) {
        let region = self.log.region();
        if protocol::clean_before_release() {
            clean_next(region, &r.next_partition, r.start, r.end, self.chunk);
        }
        self.log.term_window(r.index).store_i32(r.start, first_frame_length as i32, protocol::commit());
        self.set_pending(meta::NO_PENDING);
        if !protocol::clean_before_release() {
            clean_next(region, &r.next_partition, r.start, r.end, self.chunk);
        }
    }

    /// The common case, one slice of at most the max payload in one frame: the template, the
    /// term offset, the payload, then [`ConcurrentAppender::finish`].
    #[inline(always)]
    fn write_one(&mut self, r: Reservation, message: &[u8]) {
        self.enter_term(&r);
        let term = self.log.term_window(r.index);
        // SAFETY: our reservation's only frame, uncommitted (its length is negative), which no
        // other writer reserved and no reader reads yet; no cleaning touches the active term.
        unsafe {
            term.copy_in_cell(r.start, REST_OFFSET, &self.template);
            term.copy_in_cell(r.start, REST_OFFSET + rest::TERM_OFFSET, &(r.start as i32).to_le_bytes());
            term.copy_in_body(r.start, message);
        }
        self.finish(r, message.len() + HEADER_LEN);
    }

    /// Writes the message gathered from `parts` into `r`, fragmenting it above the max payload,
    /// and commits it. `parts` must hold the payload length `r` was reserved for: bytes past it
    /// are not copied, and too few panic (leaving the reservation a hole, as a dead writer's).
    #[inline(always)]
    pub(crate) fn write(&mut self, r: Reservation, parts: &[&[u8]]) {
        match parts {
            // The one slice is exactly the payload reserved for: its length is the copy's.
            [message] if message.len() == r.payload && r.payload <= self.max_payload => {
                self.write_one(r, message)
            }
            _ => self.write_gathered(r, parts),
        }
    }

    #[inline(never)]
    fn write_gathered(&mut self, r: Reservation, parts: &[&[u8]]) {
        let len = r.payload;
        self.enter_term(&r);
        let region = self.log.region();
        let term = Window::new(region, r.partition);
        let mut gather = Gather::new(parts);
        let first_chunk = len.min(self.max_payload);
        // Later fragments first, each committed at once (readers stop at the first frame).
        let mut offset = r.start + align(first_chunk + HEADER_LEN, FRAME_ALIGNMENT);
        gather.skip(first_chunk);
        let mut remaining = len - first_chunk;
        while remaining > 0 {
            let chunk = remaining.min(self.max_payload);
            remaining -= chunk;
            let flags = if remaining == 0 { END_FLAG } else { 0 };
            let rest = self.rest_for(offset, flags, TYPE_DATA);
            // SAFETY: a frame inside our reservation, which no other writer reserved, no reader
            // reads before the first frame is committed (its length is negative until then), and
            // no cleaning touches (it is in the active term).
            unsafe {
                term.copy_in_cell(offset, REST_OFFSET, &rest);
                gather.copy_next(region, r.partition.base() + offset + HEADER_LEN, chunk);
            }
            term.store_i32(offset, (chunk + HEADER_LEN) as i32, protocol::commit());
            offset += align(chunk + HEADER_LEN, FRAME_ALIGNMENT);
        }
        let flags = if len <= self.max_payload { UNFRAGMENTED } else { BEGIN_FLAG };
        let rest = self.rest_for(r.start, flags, TYPE_DATA);
        let mut first = Gather::new(parts);
        // SAFETY: the first frame of our reservation, uncommitted (as above).
        unsafe {
            term.copy_in_cell(r.start, REST_OFFSET, &rest);
            first.copy_next(region, r.partition.base() + r.start + HEADER_LEN, first_chunk);
        }
        self.finish(r, first_chunk + HEADER_LEN);
    }

    /// Writes the header of a one-frame claim (a reservation of at most the max payload); the
    /// caller writes the payload (through [`ConcurrentAppender::claim_payload`]) and commits or
    /// aborts.
    pub(crate) fn start_claim(&mut self, r: &Reservation) {
        debug_assert!(r.payload <= self.max_payload && r.len() == self.framed_length(r.payload));
        self.enter_term(r);
        let rest = self.rest_for(r.start, UNFRAGMENTED, TYPE_DATA);
        let term = Window::new(self.log.region(), r.partition);
        // SAFETY: the header of our uncommitted reservation (as in `write`).
        unsafe { term.copy_in_cell(r.start, REST_OFFSET, &rest) };
    }

    /// Region offset and length of a claim's payload: the payload it was reserved for, which
    /// lies in its first frame.
    pub(crate) fn claim_payload(&self, r: &Reservation) -> (usize, usize) {
        (r.partition.base() + r.start + HEADER_LEN, r.payload.min(r.len() - HEADER_LEN))
    }

    /// Gives `f` the payload of claim `r` (the closure form of `claim_slice`, for backends that
    /// cannot lend a slice: loom's).
    #[cfg(shmlog_loom)]
    pub(crate) fn with_claim_payload<T>(&mut self, r: &Reservation, f: impl FnOnce(&mut [u8]) -> T) -> T {
        let (at, len) = self.claim_payload(r);
        // SAFETY: as in `claim_slice`: our reservation, uncommitted, which nobody else reads or
        // writes while we live; `&mut self` excludes our own commit or abort while `f` runs.
        unsafe { self.log.region().with_bytes_mut(at, len, f) }
    }

    /// Commits a claim: its first frame's length is its payload's plus the header, inside the
    /// reservation.
    pub(crate) fn commit(&self, r: Reservation) {
        let frame = (r.payload + HEADER_LEN).min(r.len());
        self.finish(r, frame);
    }

    /// Turns a claim into padding that readers skip.
    pub(crate) fn abort(&mut self, r: Reservation) {
        self.pad(r);
    }

    /// Writes `r` as one padding frame and commits it.
    fn pad(&mut self, r: Reservation) {
        self.enter_term(&r);
        let rest = self.rest_for(r.start, UNFRAGMENTED, TYPE_PAD);
        let term = Window::new(self.log.region(), r.partition);
        // SAFETY: the header of our uncommitted reservation (as in `write`).
        unsafe { term.copy_in_cell(r.start, REST_OFFSET, &rest) };
        let len = r.len();
        self.finish(r, len);
    }
}

impl<R: crate::region::DirectRegion> ConcurrentAppender<R> {
    /// Lends the payload of claim `r` (the payload length it was reserved for).
    ///
    /// The caller's `Claim` guard owns `r` and borrows this appender mutably while the slice lives.
    pub(crate) fn claim_slice(&mut self, r: &Reservation) -> &mut [u8] {
        let (at, len) = self.claim_payload(r);
        // SAFETY: our reservation, uncommitted (its first length word is negative), so no reader
        // reads it and no other writer or unblocker writes it while we live; the slice borrows
        // `self` mutably, so no commit or abort can happen while it lives.
        unsafe { self.log.region().slice_mut(at, len) }
    }
}

/// Zeroes the share of `next` (the partition after a reservation's) that the reservation
/// `[start, end)` owes: the `chunk` bytes from every multiple of `chunk` in `[start, end)`.
/// Reservations tile a term, so every chunk of the next partition is zeroed by the reservation
/// that holds its first byte, before that reservation commits, like the exclusive writer's
/// chunked cleaning (and within the same `Geometry::lapping_margin`).
///
/// `next` held the term two back, which every reader has finished (the limit keeps them within
/// a window of the writers and the join proof keeps joiners at most a term behind). No writer
/// reaches it there either: while the reservation is uncommitted its writer's pending word holds
/// every writer a window past `start`, that is more than a window short of this range next term.
#[inline(always)]
pub(crate) fn clean_next<R: RegionMut>(region: &R, next: &Span, start: usize, end: usize, chunk: usize) {
    let first = align(start, chunk);
    if first < end {
        clean_chunks(region, next, first, end, chunk);
    }
}

#[inline(never)]
fn clean_chunks<R: RegionMut>(region: &R, next: &Span, first: usize, end: usize, chunk: usize) {
    let to = align(end, chunk).min(next.len());
    // SAFETY: as the function's docs: nobody reads, writes or is lent `[first, to)` of the
    // partition after the active one while the reservation is uncommitted (I3).
    unsafe { region.zero(next.base() + first, to - first) };
}
