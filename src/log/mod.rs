//! The log protocol over any region: metadata, append, read. Written once and run over mmapped
//! files, heap memory and (under `--cfg shmlog_loom`) the model checker's memory.

pub(crate) mod appender;
pub(crate) mod concurrent;
pub(crate) mod frame_loop;
pub(crate) mod header;
#[cfg(all(test, shmlog_loom))]
mod loom_concurrent;
#[cfg(all(test, shmlog_loom))]
pub(crate) mod loom_models;
pub(crate) mod position;
pub(crate) mod reader;
#[cfg(all(test, not(shmlog_loom)))]
mod tests;
pub(crate) mod unblock;

use crate::error::Invalid;
use crate::layout::frame::HEADER_LEN;
use crate::layout::log_meta::{self as meta, Geometry, META_LEN, PAGE_MIN, PARTITION_COUNT};
use crate::region::{Region, RegionMut, Span, Window};
use crate::sync::Ordering;
use position::{pack_tail, tail_offset, tail_term_id, Terms};

/// Events the writer counts in the metadata, for tools (`stat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub enum Counter {
    /// Offers refused because the slowest reader was a window behind or nobody read.
    BackPressureEvents,
    /// Times the writer re-read the reader slots.
    LimitRecomputes,
    /// Dead readers' slots freed.
    ReadersEvicted,
    /// Reader positions found ahead of the writer, which flow control ignored.
    IgnoredPositions,
}

impl Counter {
    fn field(self) -> usize {
        match self {
            Self::BackPressureEvents => meta::BACK_PRESSURE_EVENTS,
            Self::LimitRecomputes => meta::LIMIT_RECOMPUTES,
            Self::ReadersEvicted => meta::READERS_EVICTED,
            Self::IgnoredPositions => meta::IGNORED_POSITIONS,
        }
    }
}

/// Values the writer keeps up to date in the metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub enum Gauge {
    /// The limit of the last recompute: the writer starts no message at or past it.
    PublisherLimit,
    /// Readers counted at the last recompute.
    ConnectedReaders,
}

impl Gauge {
    fn field(self) -> usize {
        match self {
            Self::PublisherLimit => meta::PUBLISHER_LIMIT,
            Self::ConnectedReaders => meta::CONNECTED_READERS,
        }
    }
}

/// What a publisher writes into a fresh log's metadata.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct LogInit<'a> {
    pub geometry: Geometry,
    pub initial_term_id: i32,
    pub session_id: i32,
    pub stream_id: i32,
    pub pid: i32,
    pub created_ns: i64,
    pub name: &'a str,
    /// Several writers share the log (see `log::concurrent`).
    pub concurrent: bool,
    /// The session's number among its stream's (`layout::log_meta::SESSION_SEQ`).
    pub session_seq: i32,
}

/// A log buffer in a region: the three partitions and the metadata after them.
#[derive(Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Log<R> {
    region: R,
    geometry: Geometry,
    terms: Terms,
    meta: usize,
    /// Where the three partitions lie.
    partitions: [Span; PARTITION_COUNT],
    session_id: i32,
    stream_id: i32,
    /// Several writers share the log: a negative frame length is a frame still being written.
    concurrent: bool,
}

/// The partitions of a log with a validated geometry (power-of-two terms of at least 128 bytes).
fn partition_spans(g: &Geometry) -> Option<[Span; PARTITION_COUNT]> {
    let t = g.term_length;
    Some([Span::new(0, t)?, Span::new(t, t)?, Span::new(2 * t, t)?])
}

impl<R: RegionMut> Log<R> {
    /// Publishes partition `index`'s tail counter (release). The writer's per-message store.
    #[inline(always)]
    pub(crate) fn store_tail(&self, index: usize, raw: i64) {
        let at = self.tail_field(index);
        // SAFETY: in bounds and 8-aligned (`tail_field`).
        unsafe { self.region.store_i64_unchecked(at, raw, Ordering::Release) }
    }

    /// Swaps partition `index`'s tail counter from `current` to `new` (AcqRel): a concurrent
    /// writer's reservation.
    #[inline(always)]
    pub(crate) fn swap_tail(&self, index: usize, current: i64, new: i64) -> Result<i64, i64> {
        let at = self.tail_field(index);
        // SAFETY: in bounds and 8-aligned (`tail_field`).
        unsafe { self.region.compare_exchange_i64_unchecked(at, current, new) }
    }

    /// Stores concurrent writer `slot`'s pending word (release).
    #[inline(always)]
    pub(crate) fn store_writer_pending(&self, slot: usize, position: i64) {
        const { assert!(meta::W_PENDING % 8 == 0 && meta::WRITERS % 8 == 0) };
        const { assert!(meta::writer_field(meta::MAX_WRITERS - 1, meta::W_PENDING) + 8 <= META_LEN) };
        if slot >= meta::MAX_WRITERS {
            crate::region::range_violation(meta::MAX_WRITERS, slot, 1);
        }
        let at = self.meta + meta::writer_field(slot, meta::W_PENDING);
        // SAFETY: inside the metadata (the asserts above), which lies in the region at an 8-aligned
        // offset (see `tail_field`); the writer slots are 8-aligned.
        unsafe { self.region.store_i64_unchecked(at, position, Ordering::Release) }
    }

    /// Writes the metadata of a fresh, zeroed log and marks it ready (release, last).
    ///
    /// Panics if the region is not exactly `geometry.file_length()` bytes: the caller sized it.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn initialize(region: R, init: &LogInit<'_>) -> Self {
        let g = init.geometry;
        assert_eq!(region.len(), g.file_length(), "region sized for this geometry");
        let m = g.meta_offset();
        // What the unchecked accessors (`tail_field`, `store_writer_pending`) rely on, as `open`
        // checks it for files.
        assert_eq!(m % PAGE_MIN, 0, "metadata on a 4 KiB boundary");
        let r = &region;
        r.store_i64(m + meta::MAGIC_OFFSET, meta::MAGIC, Ordering::Relaxed);
        r.store_i32(m + meta::VERSION, meta::LAYOUT_VERSION, Ordering::Relaxed);
        r.store_i64(m + meta::CREATED_NS, init.created_ns, Ordering::Relaxed);
        r.store_i32(m + meta::INITIAL_TERM_ID, init.initial_term_id, Ordering::Relaxed);
        r.store_i32(m + meta::HEADER_LENGTH, HEADER_LEN as i32, Ordering::Relaxed);
        r.store_i32(m + meta::MTU, g.mtu as i32, Ordering::Relaxed);
        r.store_i32(m + meta::TERM_LENGTH, g.term_length as i32, Ordering::Relaxed);
        r.store_i32(m + meta::PAGE_SIZE, g.page_size as i32, Ordering::Relaxed);
        r.store_i32(m + meta::WINDOW, g.window as i32, Ordering::Relaxed);
        r.store_i32(m + meta::PUBLISHER_PID, init.pid, Ordering::Relaxed);
        r.store_i32(m + meta::SESSION_ID, init.session_id, Ordering::Relaxed);
        r.store_i32(m + meta::STREAM_ID, init.stream_id, Ordering::Relaxed);
        r.store_i32(m + meta::SESSION_SEQ, init.session_seq, Ordering::Relaxed);
        let name = &init.name.as_bytes()[..init.name.len().min(meta::NAME_MAX)];
        r.store_i32(m + meta::NAME_LEN, name.len() as i32, Ordering::Relaxed);
        // SAFETY: a fresh log that nobody else has opened yet: readers only open it by name once
        // it is published, and validate the ready flag stored last (below) before reading.
        unsafe { r.copy_in(m + meta::NAME, name) };
        // Partition 0 starts the stream; the others hold the term id they had "one cycle
        // earlier", as Aeron does, so a tail always names the term its partition last held.
        let id = init.initial_term_id;
        r.store_i64(m + meta::TAIL_COUNTERS, pack_tail(id, 0), Ordering::Relaxed);
        for i in 1..PARTITION_COUNT {
            let earlier = id.wrapping_add(i as i32).wrapping_sub(PARTITION_COUNT as i32);
            r.store_i64(m + meta::TAIL_COUNTERS + 8 * i, pack_tail(earlier, 0), Ordering::Relaxed);
        }
        r.store_i32(m + meta::ACTIVE_TERM_COUNT, 0, Ordering::Relaxed);
        r.store_i64(m + meta::EOS_POSITION, i64::MAX, Ordering::Relaxed);
        let mode = if init.concurrent { meta::MODE_CONCURRENT } else { meta::MODE_EXCLUSIVE };
        r.store_i32(m + meta::WRITER_MODE, mode, Ordering::Relaxed);
        if init.concurrent {
            for i in 0..meta::MAX_WRITERS {
                r.store_i64(m + meta::writer_field(i, meta::W_PENDING), meta::NO_PENDING, Ordering::Relaxed);
            }
        }
        r.store_i32(m + meta::READY, 1, Ordering::Release);
        Self {
            region,
            geometry: g,
            terms: Terms::new(g.term_length, id),
            meta: m,
            partitions: partition_spans(&g).expect("a validated geometry"),
            session_id: init.session_id,
            stream_id: init.stream_id,
            concurrent: init.concurrent,
        }
    }

    /// Stores the end-of-stream position: readers drain to it and then report end of stream.
    pub(crate) fn set_eos_position(&self, position: i64) {
        self.region.store_i64(self.meta + meta::EOS_POSITION, position, Ordering::Release);
    }

    /// Marks a closed log as left in place for readers that owe its session (see
    /// `layout::log_meta::LEFT_FOR_READERS`).
    pub(crate) fn set_left_for_readers(&self) {
        self.region.store_i32(self.meta + meta::LEFT_FOR_READERS, 1, Ordering::Release);
    }

    /// Stores a gauge (release: a reader that acquires a later frame sees at least this value).
    pub(crate) fn set_gauge(&self, gauge: Gauge, value: i64) {
        self.region.store_i64(self.meta + gauge.field(), value, Ordering::Release);
    }

    /// Claims writer slot `index` for process `pid` (the caller holds its kernel lock): a slot
    /// whose previous owner died with a frame pending is not claimable until that frame is
    /// resolved (`log::unblock`), so its pending word stays where the unblocker finds it.
    pub(crate) fn claim_writer_slot(&self, index: usize, pid: i64, now_ns: i64) -> bool {
        let r = &self.region;
        if index >= meta::MAX_WRITERS || self.writer_pending(index) != meta::NO_PENDING {
            return false;
        }
        r.store_i64(self.meta + meta::writer_field(index, meta::W_PID), pid, Ordering::Relaxed);
        r.store_i64(self.meta + meta::writer_field(index, meta::W_CLAIMED_NS), now_ns, Ordering::Relaxed);
        let hw = self.meta + meta::WRITERS_HIGH_WATER;
        let mut seen = r.load_i32(hw, Ordering::Acquire);
        while seen < index as i32 + 1 {
            match r.compare_exchange_i32(hw, seen, index as i32 + 1) {
                Ok(_) => break,
                Err(now) => seen = now,
            }
        }
        true
    }

    /// Adds `n` to a counter, exactly: with a compare-and-swap in a concurrent log, whose writers
    /// count in the same words at once (a load then a store lost increments); with a load and a
    /// store in an exclusive one, whose one writer is the only process that counts. Never on an
    /// offer's fast path: the counters count recomputes, sweeps and refusals.
    pub(crate) fn count(&self, counter: Counter, n: u64) {
        let (r, at) = (&self.region, self.meta + counter.field());
        let mut v = r.load_i64(at, Ordering::Relaxed);
        if !self.concurrent || !crate::sync::protocol::exact_count() {
            return r.store_i64(at, v.wrapping_add(n as i64), Ordering::Relaxed);
        }
        while let Err(now) = r.compare_exchange_i64(at, v, v.wrapping_add(n as i64)) {
            v = now;
        }
    }
}

impl<R: Region> Log<R> {
    /// Validates a log file's bytes; term lengths must be the file range (64 KiB..1 GiB).
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn open(region: R) -> Result<Self, Invalid> {
        Self::open_checked(region, true)
    }

    /// Like [`Log::open`], but accepts any power-of-two term length (in-process models).
    #[cfg(any(test, shmlog_fuzz, shmlog_loom))]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn open_any_term(region: R) -> Result<Self, Invalid> {
        Self::open_checked(region, false)
    }

    fn open_checked(region: R, file_rules: bool) -> Result<Self, Invalid> {
        use Invalid::Corrupt;
        let len = region.len();
        if len < META_LEN + PARTITION_COUNT * 4 * HEADER_LEN {
            return Err(Corrupt("file is shorter than a log's metadata and terms"));
        }
        if len % PAGE_MIN != 0 {
            return Err(Corrupt("file length is not a multiple of 4 KiB"));
        }
        let m = len - META_LEN;
        if region.load_i64(m + meta::MAGIC_OFFSET, Ordering::Relaxed) != meta::MAGIC {
            return Err(Corrupt("bad magic: not a shmlog log file"));
        }
        let found = region.load_i32(m + meta::VERSION, Ordering::Relaxed);
        if found != meta::LAYOUT_VERSION {
            return Err(Invalid::VersionMismatch { found });
        }
        if region.load_i32(m + meta::READY, Ordering::Acquire) != 1 {
            return Err(Corrupt("log is not initialised (ready flag not set)"));
        }
        let field = |off: usize| region.load_i32(m + off, Ordering::Relaxed);
        let non_negative = |v: i32| usize::try_from(v).map_err(|_| Corrupt("negative size field"));
        let geometry = Geometry {
            term_length: non_negative(field(meta::TERM_LENGTH))?,
            page_size: non_negative(field(meta::PAGE_SIZE))?,
            mtu: non_negative(field(meta::MTU))?,
            window: non_negative(field(meta::WINDOW))?,
        };
        if file_rules { geometry.validate() } else { geometry.validate_rest() }.map_err(Corrupt)?;
        if geometry.file_length() != len {
            return Err(Corrupt("file length does not match its term length and page size"));
        }
        if field(meta::HEADER_LENGTH) != HEADER_LEN as i32 {
            return Err(Corrupt("frame header length is not 32"));
        }
        if !(0..=meta::NAME_MAX as i32).contains(&field(meta::NAME_LEN)) {
            return Err(Corrupt("stream name length out of range"));
        }
        let concurrent = match field(meta::WRITER_MODE) {
            meta::MODE_EXCLUSIVE => false,
            meta::MODE_CONCURRENT => true,
            _ => return Err(Corrupt("unknown writer mode")),
        };
        let initial_term_id = field(meta::INITIAL_TERM_ID);
        let partitions = partition_spans(&geometry).ok_or(Corrupt("term length must be a power of two"))?;
        Ok(Self {
            partitions,
            terms: Terms::new(geometry.term_length, initial_term_id),
            geometry,
            meta: m,
            session_id: field(meta::SESSION_ID),
            stream_id: field(meta::STREAM_ID),
            concurrent,
            region,
        })
    }

    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn region(&self) -> &R {
        &self.region
    }

    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn terms(&self) -> Terms {
        self.terms
    }

    pub(crate) fn term_length(&self) -> usize {
        self.geometry.term_length
    }

    pub(crate) fn session_id(&self) -> i32 {
        self.session_id
    }

    pub(crate) fn stream_id(&self) -> i32 {
        self.stream_id
    }

    /// `true` if several writers share the log (`ConcurrentPublication`).
    #[inline(always)]
    pub(crate) fn is_concurrent(&self) -> bool {
        self.concurrent
    }

    /// Writer slot `index`'s pending word: where its owner reserves or writes a frame, or
    /// `NO_PENDING`. Untrusted: callers bound it.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn writer_pending(&self, index: usize) -> i64 {
        self.region.load_i64(self.meta + meta::writer_field(index, meta::W_PENDING), Ordering::Acquire)
    }

    /// Writer slot `index`'s process id as its owner wrote it (0: never claimed).
    pub(crate) fn writer_pid(&self, index: usize) -> i64 {
        self.region.load_i64(self.meta + meta::writer_field(index, meta::W_PID), Ordering::Relaxed)
    }

    /// Writer slots that were ever claimed: `0..writers_high_water()` (clamped to the table).
    pub(crate) fn writers_high_water(&self) -> usize {
        let hw = self.region.load_i32(self.meta + meta::WRITERS_HIGH_WATER, Ordering::Acquire);
        usize::try_from(hw).unwrap_or(0).min(if self.concurrent { meta::MAX_WRITERS } else { 0 })
    }

    /// The lowest pending word of the writer slots whose frame there is still uncommitted: what
    /// flow control holds every writer within a window of (see `unblock::pending_holds` for the
    /// words it passes over).
    pub(crate) fn min_writer_pending(&self, producer: i64) -> Option<i64> {
        (0..self.writers_high_water())
            .map(|i| self.writer_pending(i))
            .filter(|&p| unblock::pending_holds(self, p, producer))
            .min()
    }

    /// Where partition `index` lies.
    #[inline(always)]
    pub(crate) fn partition(&self, index: usize) -> Span {
        self.partitions[index]
    }

    /// Partition `index` as a window, with no compare: a `Log` exists only over a region of
    /// exactly its geometry's length (checked in `open` and `initialize`, and a region's length
    /// never changes), which holds all three partitions. The writer's per-message path.
    #[inline(always)]
    pub(crate) fn term_window(&self, index: usize) -> Window<'_, R> {
        let span = self.partitions[index];
        // SAFETY: `span` is one of this log's partitions, inside the region (above).
        unsafe { Window::new_unchecked(&self.region, span) }
    }

    /// Byte offset of partition `index` in the region.
    #[inline(always)]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn partition_base(&self, index: usize) -> usize {
        index * self.geometry.term_length
    }

    /// Byte offset of a metadata field.
    #[inline(always)]
    pub(crate) fn meta_field(&self, field: usize) -> usize {
        self.meta + field
    }

    /// End-of-stream position; `i64::MAX` while the publisher has not closed.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn eos_position(&self) -> i64 {
        self.region.load_i64(self.meta + meta::EOS_POSITION, Ordering::Acquire)
    }

    /// A writer's counter.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn counter(&self, counter: Counter) -> i64 {
        self.region.load_i64(self.meta + counter.field(), Ordering::Relaxed)
    }

    /// A writer's gauge.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn gauge(&self, gauge: Gauge) -> i64 {
        self.region.load_i64(self.meta + gauge.field(), Ordering::Acquire)
    }

    /// Creation time, ns since the Unix epoch.
    /// The session's number among its stream's sessions, as the publisher wrote it.
    pub(crate) fn session_seq(&self) -> i32 {
        self.region.load_i32(self.meta + meta::SESSION_SEQ, Ordering::Relaxed)
    }

    pub(crate) fn created_ns(&self) -> i64 {
        self.region.load_i64(self.meta + meta::CREATED_NS, Ordering::Relaxed)
    }

    /// The publisher's process id as it wrote it.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn publisher_pid(&self) -> i32 {
        self.region.load_i32(self.meta + meta::PUBLISHER_PID, Ordering::Relaxed)
    }

    /// The stream name stored in the metadata (lossy if a peer wrote invalid UTF-8).
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn name(&self) -> String {
        let len = self.region.load_i32(self.meta + meta::NAME_LEN, Ordering::Relaxed);
        let len = usize::try_from(len).unwrap_or(0).min(meta::NAME_MAX);
        let mut buf = vec![0u8; len];
        self.region.copy_out(self.meta + meta::NAME, &mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// The raw tail counter of partition `index`.
    #[inline(always)]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn raw_tail(&self, index: usize) -> i64 {
        let at = self.tail_field(index);
        // SAFETY: in bounds and 8-aligned (`tail_field`).
        unsafe { self.region.load_i64_unchecked(at, Ordering::Acquire) }
    }

    /// Region offset of partition `index`'s tail counter, in bounds and 8-aligned with one compare
    /// (on the index): the metadata fills the region's last `META_LEN` bytes (checked when the log
    /// was made) and starts at a multiple of 4096; the tail counters are its first words.
    #[inline(always)]
    fn tail_field(&self, index: usize) -> usize {
        const { assert!(meta::TAIL_COUNTERS % 8 == 0 && meta::TAIL_COUNTERS + 8 * PARTITION_COUNT <= META_LEN) };
        if index >= PARTITION_COUNT {
            crate::region::range_violation(PARTITION_COUNT, index, 1);
        }
        self.meta + meta::TAIL_COUNTERS + 8 * index
    }

    /// Terms since the initial one, as the writer last published it.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn active_term_count(&self) -> i32 {
        self.region.load_i32(self.meta + meta::ACTIVE_TERM_COUNT, Ordering::Acquire)
    }

    /// The writer's position (including space reserved for a message still being written).
    ///
    /// Retries when a rotation races with the read; a tail that never matches its term count is
    /// corruption.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn producer_position(&self) -> Result<i64, Invalid> {
        for _ in 0..16 {
            let count = self.active_term_count();
            if count < 0 {
                return Err(Invalid::Corrupt("negative active term count"));
            }
            let raw = self.raw_tail(count as usize % PARTITION_COUNT);
            if tail_term_id(raw) == self.terms.initial_term_id.wrapping_add(count) {
                let offset = tail_offset(raw, self.geometry.term_length);
                return Ok(((count as i64) << self.terms.bits) + offset as i64);
            }
        }
        Err(Invalid::Corrupt("tail counter does not match the active term"))
    }
}
