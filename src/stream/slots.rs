//! Reader slots over any region: who reads which session, and where. Pure memory, so the same
//! code runs over the mmapped reader-slot file and in the in-process models.
//!
//! Protocol (invariants I4–I6):
//! - a slot belongs to whoever holds the kernel lock on its byte range (see `sys::lock`);
//! - its owner writes it through a [`SlotMut`] (in a process, a read-write mapping of that slot's
//!   page alone), publishes position (release) before the state word names a session, and only
//!   moves the position forward within a session;
//! - the writer counts a slot for flow control while its state word says ACTIVE in the writer's
//!   session and its position is not past the writer's; only a writer that took the dead owner's
//!   lock frees it.
//!
//! The kernel locks themselves are behind [`SlotLocks`] (OFD locks on the slot file in
//! `stream::files`, a model of them in the loom models and the fuzz targets), so the claim and
//! eviction logic here is the code all of them run.

use super::doorbell::{self, Doorbell, Fanout};
use crate::error::Invalid;
use crate::layout::log_meta::LAYOUT_VERSION;
use crate::layout::slots::{self as s, pack_state, slot_offset, state_flags, unpack_state};
use crate::region::{Region, RegionMut};
use crate::sync::protocol;
use crate::sync::{LightBarrier, Ordering};

/// The kernel-held token of each slot: a lock the kernel drops when its holder dies. Holding
/// it is owning the slot; taking it proves that no live process owns the slot.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub trait SlotLocks {
    /// Why a lock could not be tried (a system call failed).
    type Error;

    /// Takes slot `index`'s lock without waiting: `Ok(true)` if taken, `Ok(false)` if another
    /// holder (a live reader, or a writer sweeping) has it.
    fn try_lock(&self, index: usize) -> Result<bool, Self::Error>;

    /// Drops slot `index`'s lock taken with [`SlotLocks::try_lock`].
    fn unlock(&self, index: usize);
}

/// The slot table of one stream, as the writer and joining readers read it.
#[derive(Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Slots<R> {
    region: R,
    count: usize,
}

/// What one scan of the slots found for a session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct SessionReaders {
    /// Readers counted.
    pub count: usize,
    /// Slowest position among them.
    pub min: Option<i64>,
    /// Fastest position among them.
    pub max: Option<i64>,
    /// Active slots of the session whose position was past the ceiling: not counted.
    pub ignored: usize,
    /// Active untethered readers of the session: never in `count`, `min` or `max` (flow control
    /// passes over them), but the writer is connected while it has one.
    pub untethered: usize,
    /// Tethered readers the session is owed to that have not joined it yet (waiting for a
    /// session, or still reading an older one): in `count`, and in `min` at the session's start
    /// (see [`Slots::scan_rising`]).
    pub owed: usize,
}

/// Who a writer's scan counts beside its session's readers: the readers owed the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Owed {
    /// The session's number among the stream's (the log's `SESSION_SEQ`).
    pub seq: i32,
    /// The session's first position, where an owed reader will join.
    pub start: i64,
}

/// A snapshot of one slot, for tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct SlotView {
    pub index: usize,
    pub session_id: i32,
    pub state: i64,
    pub position: i64,
    pub join_position: i64,
    pub pid: i64,
    pub claimed_ns: i64,
    /// The reader is untethered (the state word's flag).
    pub untethered: bool,
    /// Loss reports of an untethered reader, over the slot's life.
    pub losses: i64,
    /// Stream bytes those losses skipped.
    pub lost_bytes: i64,
}

fn store_state<R: RegionMut>(region: &R, base: usize, session: i32, state: i64, order: Ordering) {
    region.store_i64(base + s::STATE, pack_state(session, state), order);
}

impl<R: RegionMut> Slots<R> {
    /// Writes the header of a fresh, zeroed slot file and marks it ready (release, last).
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn initialize(region: R, count: usize) -> Self {
        assert!(count > 0 && count <= s::MAX_SLOTS && region.len() == s::file_length(count));
        region.store_i64(s::MAGIC_OFFSET, s::MAGIC, Ordering::Relaxed);
        region.store_i32(s::VERSION, LAYOUT_VERSION, Ordering::Relaxed);
        region.store_i32(s::SLOT_COUNT, count as i32, Ordering::Relaxed);
        region.store_i32(s::READY, 1, Ordering::Release);
        Self { region, count }
    }

    /// Frees slot `index` of an owner proven dead (the caller holds its lock).
    fn free(&self, index: usize) {
        store_state(&self.region, slot_offset(index), 0, s::STATE_FREE, Ordering::Release);
    }

    /// Frees every used slot whose owner is provably gone: the writer's sweep (I6). For each
    /// non-free slot below the high-water mark it tries the slot's lock; taking it proves the
    /// owner dead, and the slot is freed under the lock (after re-reading its state: an owner
    /// may have claimed it and left meanwhile), so a reader claiming it concurrently, which
    /// must take the same lock first, is never freed. Returns how many were freed.
    pub(crate) fn evict_dead<L: SlotLocks>(&self, locks: &L) -> usize {
        let mut evicted = 0;
        for i in 0..self.high_water() {
            if self.state(i).1 == s::STATE_FREE {
                continue;
            }
            // An error reads as "held": never free a slot whose owner may be alive.
            if let Ok(true) = locks.try_lock(i) {
                if !protocol::evict_under_lock() {
                    locks.unlock(i); // the loom models' mutant: a check-then-act race
                }
                if self.state(i).1 != s::STATE_FREE {
                    self.free(i);
                    evicted += 1;
                }
                if protocol::evict_under_lock() {
                    locks.unlock(i);
                }
            }
        }
        evicted
    }
}

impl<R: RegionMut> Slots<R> {
    /// Takes the number of a new session of the stream (its publisher, before it creates the
    /// log): one more than any session before it.
    pub(crate) fn next_session(&self) -> i32 {
        self.region.fetch_add_i32(s::SESSIONS, 1).wrapping_add(1)
    }

    /// Raises the session counter to at least `seq` (a publisher whose slot file was replaced
    /// between taking its number and publishing its log: readers of the new file must not count
    /// its session as several).
    pub(crate) fn raise_sessions(&self, seq: i32) {
        let mut now = self.sessions();
        while seq.wrapping_sub(now) > 0 {
            match self.region.compare_exchange_i32(s::SESSIONS, now, seq) {
                Ok(_) => return,
                Err(found) => now = found,
            }
        }
    }

    /// The writer, after a commit: wakes sleeping readers, if any (`doorbell::ring_readers_at`),
    /// straight on the region, so that no view of the doorbell page is built per commit.
    /// `fanout` is asked only when a reader is armed.
    #[inline(always)]
    pub(crate) fn ring_readers<'f>(
        &self,
        barrier: LightBarrier,
        fanout: impl FnOnce() -> Option<&'f Fanout>,
    ) {
        // SAFETY: `open` and `initialize` checked that the region holds the header, the doorbell
        // page and the slots; a region's length never changes; DOORBELL is page-aligned.
        unsafe { doorbell::ring_readers_at(&self.region, s::DOORBELL, barrier, fanout) }
    }

    /// The doorbell page of the file (every valid slot file has one: `open` checks the length).
    #[inline(always)]
    pub(crate) fn doorbell(&self) -> Doorbell<&R> {
        // SAFETY: `open` and `initialize` checked that the region holds the header, the doorbell
        // page and the slots; a region's length never changes; DOORBELL is page-aligned.
        unsafe { Doorbell::new_unchecked(&self.region, s::DOORBELL) }
    }
}

impl<R: Region> Slots<R> {
    /// Validates a slot file's bytes.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn open(region: R) -> Result<Self, Invalid> {
        use Invalid::Corrupt;
        if region.len() < s::SLOTS_START {
            return Err(Corrupt("reader-slot file is shorter than its header"));
        }
        if region.load_i64(s::MAGIC_OFFSET, Ordering::Relaxed) != s::MAGIC {
            return Err(Corrupt("bad magic: not a shmlog reader-slot file"));
        }
        let found = region.load_i32(s::VERSION, Ordering::Relaxed);
        if found != LAYOUT_VERSION {
            return Err(Invalid::VersionMismatch { found });
        }
        if region.load_i32(s::READY, Ordering::Acquire) != 1 {
            return Err(Corrupt("reader-slot file is not initialised"));
        }
        let count = region.load_i32(s::SLOT_COUNT, Ordering::Relaxed);
        let count = usize::try_from(count).map_err(|_| Corrupt("negative slot count"))?;
        if count == 0 || count > s::MAX_SLOTS {
            return Err(Corrupt("slot count out of range"));
        }
        if region.len() != s::file_length(count) {
            return Err(Corrupt("reader-slot file length does not match its slot count"));
        }
        Ok(Self { region, count })
    }

    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn count(&self) -> usize {
        self.count
    }

    /// Sessions the stream has had while this file existed (see [`Slots::next_session`]).
    pub(crate) fn sessions(&self) -> i32 {
        self.region.load_i32(s::SESSIONS, Ordering::Acquire)
    }

    /// Slots ever claimed, clamped to the table (a peer may have written anything there).
    #[inline]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn high_water(&self) -> usize {
        let hw = self.region.load_i64(s::HIGH_WATER, Ordering::Acquire);
        usize::try_from(hw).unwrap_or(0).min(self.count)
    }

    /// Locks the first slot whose lock is free and returns its index; `Ok(None)` if every lock
    /// is held. A slot left non-free by a dead owner is taken over as it is: the lock, not the
    /// state word, says who owns it. The caller then marks it with [`SlotMut::claim`].
    pub(crate) fn lock_free<L: SlotLocks>(&self, locks: &L) -> Result<Option<usize>, L::Error> {
        for i in 0..self.count {
            if locks.try_lock(i)? {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// `(session, state)` of slot `index`.
    #[inline]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn state(&self, index: usize) -> (i32, i64) {
        unpack_state(self.state_word(index))
    }

    /// Slot `index`'s raw state word (state and flags).
    #[inline]
    fn state_word(&self, index: usize) -> i64 {
        self.region.load_i64(slot_offset(index) + s::STATE, Ordering::Acquire)
    }

    /// Position of slot `index`.
    #[inline]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn position(&self, index: usize) -> i64 {
        self.region.load_i64(slot_offset(index) + s::POSITION, Ordering::Acquire)
    }

    /// Readers of `session`: how many, the slowest and the fastest, skipping `exclude`. A
    /// position past `ceiling` (the writer's own position: no honest reader is ahead of the
    /// writer) is a stray or forged word; it is counted in `ignored` and nowhere else.
    ///
    /// Liveness is not checked here (that costs system calls); a dead reader counts until a sweep
    /// frees its slot.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn scan(&self, session: i32, exclude: Option<usize>, ceiling: i64) -> SessionReaders {
        self.scan_rising(session, exclude, None, ceiling, || ceiling)
    }

    /// [`Slots::scan`] with a ceiling that may rise while the scan runs: a position past
    /// `ceiling` is compared again with `raise()`, called after that position was loaded. For a
    /// concurrent log, whose tail other writers move, `raise` re-reads the shared tail: an honest
    /// reader's position is only ever behind a tail read after it (the reader read frames reserved
    /// below that tail before it published the position, and the acquire load of the position
    /// carries that), so a reader that a fast read took past the tail loaded before the scan still
    /// counts, and a word past the tail re-read is still ignored.
    ///
    /// With `owed`, a writer's scan also counts the live readers its session is owed to: a
    /// tethered slot waiting for a session numbered after the one its state word names, or still
    /// reading another (an older) session, counts as a reader at `owed.start` until it joins. A
    /// subscription that exists when a session begins thus holds that session's publisher at the
    /// start until it joins there, and loses nothing of it (`stream::follow`). Which slots are
    /// owed the session is settled by the order of two steps on each side: a reader stores its
    /// waiting word, fences, and re-reads the stream's session counter
    /// ([`SlotMut::owe_sessions_after`]); a publisher takes its number from that counter, and its
    /// scans fence before they read the slots (`FlowControl::recompute`). Either the scan sees
    /// the waiting word, or the reader sees the new number and does not take the session as owed.
    pub(crate) fn scan_rising(
        &self,
        session: i32,
        exclude: Option<usize>,
        owed: Option<Owed>,
        mut ceiling: i64,
        mut raise: impl FnMut() -> i64,
    ) -> SessionReaders {
        let mut found = SessionReaders::default();
        for i in 0..self.high_water() {
            if Some(i) == exclude {
                continue;
            }
            let word = self.state_word(i);
            let (sid, state) = unpack_state(word);
            let untethered = state_flags(word) & s::FLAG_UNTETHERED != 0;
            if state != s::STATE_ACTIVE || sid != session {
                let Some(owed) = owed else { continue };
                let owes = match state {
                    // A waiting slot's word names the newest session its reader knows of.
                    s::STATE_WAITING => owed.seq.wrapping_sub(sid) > 0,
                    // Another session's reader: of an older one (a live writer's session is
                    // the stream's newest), and every later session is owed to it.
                    s::STATE_ACTIVE => protocol::count_owed_readers(),
                    _ => false,
                };
                if owes && untethered {
                    found.untethered += 1;
                } else if owes && protocol::count_owed_readers() {
                    found.owed += 1;
                    found.count += 1;
                    found.min = Some(found.min.map_or(owed.start, |m| m.min(owed.start)));
                    found.max = Some(found.max.map_or(owed.start, |m| m.max(owed.start)));
                }
                continue;
            }
            if untethered {
                // Flow control passes over it: its position is neither read nor trusted.
                found.untethered += 1;
                continue;
            }
            let p = self.position(i);
            if protocol::distrust_slots() && p > ceiling {
                ceiling = ceiling.max(raise());
                if p > ceiling {
                    found.ignored += 1;
                    continue;
                }
            }
            found.count += 1;
            found.min = Some(found.min.map_or(p, |m| m.min(p)));
            found.max = Some(found.max.map_or(p, |m| m.max(p)));
        }
        found
    }

    /// Slots (below the high-water mark) whose readers the session `session` (numbered `seq`)
    /// is owed to: waiting for a session numbered after the newest they know of, or still
    /// reading another (an older) one. Tethered or not; liveness is not checked.
    pub(crate) fn owed_readers(&self, session: i32, seq: i32) -> impl Iterator<Item = usize> + '_ {
        (0..self.high_water()).filter(move |&i| match self.state(i) {
            (known, s::STATE_WAITING) => seq.wrapping_sub(known) > 0,
            (sid, s::STATE_ACTIVE) => sid != session,
            _ => false,
        })
    }

    /// A snapshot of slot `index`.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn view(&self, index: usize) -> SlotView {
        let base = slot_offset(index);
        let r = &self.region;
        let word = self.state_word(index);
        let (session_id, state) = unpack_state(word);
        SlotView {
            index,
            session_id,
            state,
            position: self.position(index),
            join_position: r.load_i64(base + s::JOIN_POSITION, Ordering::Relaxed),
            pid: r.load_i64(base + s::PID, Ordering::Relaxed),
            claimed_ns: r.load_i64(base + s::CLAIMED_NS, Ordering::Relaxed),
            untethered: state_flags(word) & s::FLAG_UNTETHERED != 0,
            losses: r.load_i64(base + s::LOSSES, Ordering::Relaxed),
            lost_bytes: r.load_i64(base + s::LOST_BYTES, Ordering::Relaxed),
        }
    }
}

/// Raises the file's high-water mark of claimed slots to at least `to`, through `header`: a
/// writable view of the file's header (a claimer maps it only for this).
pub(crate) fn raise_high_water<H: RegionMut>(header: &H, to: usize) {
    let mut seen = header.load_i64(s::HIGH_WATER, Ordering::Acquire);
    while seen < to as i64 {
        match header.compare_exchange_i64(s::HIGH_WATER, seen, to as i64) {
            Ok(_) => break,
            Err(now) => seen = now,
        }
    }
}

/// One reader's own slot, written by its owner only: in a process, a read-write mapping of that
/// slot's page alone, while the rest of the file is mapped read-only, so no stray write of one
/// reader reaches another's slot or the header.
#[derive(Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct SlotMut<S> {
    region: S,
    /// Offset of the slot in `region` (0 for a mapping of the slot alone).
    base: usize,
    index: usize,
    /// The stream's doorbell, where the reader rings a waiting writer and sleeps itself; none
    /// in tests of the slots alone. Boxed: the doorbell carries the stream's wake FIFO, and the
    /// reader's struct, which every poll works on, stays the size it was without it.
    bell: Option<Box<Doorbell<S>>>,
    /// Flag bits every activation puts in the state word ([`s::FLAG_UNTETHERED`]).
    flags: i64,
    /// The newest of the stream's sessions its reader knows of: what its waiting word names, so
    /// that a publisher of a later session counts it as owed ([`Slots::scan_rising`]).
    known: i32,
}

impl<S: RegionMut> SlotMut<S> {
    /// Slot `index` of a file, at offset `base` of `region`. The caller holds the slot's lock.
    ///
    /// Panics unless the whole slot lies in `region` at an 8-aligned offset: checked once here,
    /// so that publishing a position, once per poll, needs no check.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn new(region: S, base: usize, index: usize) -> Self {
        assert!(region.len() >= base && region.len() - base >= s::SLOT_LEN && base % 8 == 0, "a whole slot");
        Self { region, base, index, bell: None, flags: 0, known: 0 }
    }

    /// Makes every later activation untethered (or tethered again): the writer's flow control
    /// passes over an untethered reader, which must then read by copying and checking
    /// (`stream::Reader`).
    pub(crate) fn set_untethered(&mut self, untethered: bool) {
        self.flags = if untethered { s::FLAG_UNTETHERED } else { 0 };
    }

    /// `true` if activations are untethered.
    pub(crate) fn untethered(&self) -> bool {
        self.flags & s::FLAG_UNTETHERED != 0
    }

    /// Counts one loss of `bytes` stream bytes in the slot, for tools (the owner alone writes
    /// these words).
    pub(crate) fn count_loss(&self, bytes: i64) {
        let r = &self.region;
        let losses = r.load_i64(self.base + s::LOSSES, Ordering::Relaxed);
        let lost = r.load_i64(self.base + s::LOST_BYTES, Ordering::Relaxed);
        r.store_i64(self.base + s::LOSSES, losses.wrapping_add(1), Ordering::Relaxed);
        r.store_i64(self.base + s::LOST_BYTES, lost.wrapping_add(bytes), Ordering::Relaxed);
    }

    /// The slot with the stream's doorbell attached.
    pub(crate) fn with_bell(mut self, bell: Doorbell<S>) -> Self {
        self.bell = Some(Box::new(bell));
        self
    }

    pub(crate) fn bell(&self) -> Option<&Doorbell<S>> {
        self.bell.as_deref()
    }

    /// Wakes a writer waiting for readers to move, if one waits (after a new position).
    #[inline(always)]
    pub(crate) fn ring_writer(&self) {
        if let Some(bell) = &self.bell {
            bell.ring_writer();
        }
    }

    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Marks the slot claimed by `pid` and not yet reading, waiting for sessions after the one
    /// the stream's counter (in `header`) names now, then raises the high-water mark through
    /// `header` so the writer's scans reach it. The caller then settles which sessions are owed
    /// to it with [`SlotMut::owe_sessions_after`].
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn claim<H: RegionMut>(&mut self, header: &H, pid: i64, now_ns: i64) {
        let r = &self.region;
        self.known = header.load_i32(s::SESSIONS, Ordering::Acquire);
        store_state(r, self.base, self.known, s::STATE_WAITING | self.flags, Ordering::Release);
        r.store_i64(self.base + s::PID, pid, Ordering::Relaxed);
        r.store_i64(self.base + s::CLAIMED_NS, now_ns, Ordering::Relaxed);
        r.store_i64(self.base + s::LOSSES, 0, Ordering::Relaxed);
        r.store_i64(self.base + s::LOST_BYTES, 0, Ordering::Relaxed);
        raise_high_water(header, self.index + 1);
    }

    /// Publishes that this slot reads `session` from `position` (position first, then state,
    /// which carries the untethered flag: the writer learns both in one load).
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn activate(&self, session: i32, position: i64) {
        let r = &self.region;
        r.store_i64(self.base + s::POSITION, position, Ordering::Release);
        r.store_i64(self.base + s::JOIN_POSITION, position, Ordering::Relaxed);
        store_state(r, self.base, session, s::STATE_ACTIVE | self.flags, Ordering::SeqCst);
    }

    /// Back to claimed-but-not-reading (a join that must be retried, or a finished session),
    /// owed every session after the newest it knows of.
    pub(crate) fn deactivate(&self) {
        store_state(&self.region, self.base, self.known, s::STATE_WAITING | self.flags, Ordering::Release);
    }

    /// Notes that its reader knows of the stream's sessions up to number `seq` (it joined that
    /// one): the next [`SlotMut::deactivate`] says so.
    pub(crate) fn knows_sessions_to(&mut self, seq: i32) {
        if seq.wrapping_sub(self.known) > 0 {
            self.known = seq;
        }
    }

    /// A reader that waits for a session: says in its (waiting) state word which sessions are
    /// owed to it — those numbered after the stream's counter now — and returns that number.
    /// The reader's half of the order that [`Slots::scan_rising`] describes: store, fence,
    /// re-read the counter, until the counter stands still across the fence. A session numbered
    /// up to the returned one was running before the reader waited (joined by the reader's own
    /// rule); any later one finds this slot waiting and counts it.
    pub(crate) fn owe_sessions_after<R: Region>(&mut self, slots: &Slots<R>) -> i32 {
        let mut seen = slots.sessions();
        loop {
            self.known = seen;
            store_state(&self.region, self.base, seen, s::STATE_WAITING | self.flags, Ordering::SeqCst);
            if protocol::owed_fence() {
                crate::sync::fence(Ordering::SeqCst);
            }
            let now = slots.sessions();
            if now == seen {
                return seen;
            }
            seen = now;
        }
    }

    /// Frees the slot: its owner leaves (and then drops its lock).
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn free(&self) {
        store_state(&self.region, self.base, 0, s::STATE_FREE, Ordering::Release);
    }

    /// Publishes the reader's new position (only forward). Release: the writer that acquires it
    /// may reuse what the reader read before it (I2, I3).
    #[inline(always)]
    pub(crate) fn set_position(&self, position: i64) {
        const { assert!(s::POSITION % 8 == 0 && s::POSITION + 8 <= s::SLOT_LEN) };
        // SAFETY: the slot lies in the region at an 8-aligned offset (checked in `new`, and a
        // region's length never changes), and so does its position word.
        unsafe { self.region.store_i64_unchecked(self.base + s::POSITION, position, protocol::position()) };
    }
}

#[cfg(all(test, not(shmlog_loom)))]
mod tests {
    use super::*;
    use crate::region::HeapRegion;
    use std::sync::Arc;

    type Table = Slots<Arc<HeapRegion>>;

    fn slots(n: usize) -> Table {
        Slots::initialize(Arc::new(HeapRegion::new(s::file_length(n))), n)
    }

    fn slot(t: &Table, index: usize) -> SlotMut<Arc<HeapRegion>> {
        SlotMut::new(Arc::clone(&t.region), slot_offset(index), index)
    }

    fn claimed(t: &Table, index: usize, pid: i64) -> SlotMut<Arc<HeapRegion>> {
        let mut mine = slot(t, index);
        mine.claim(&t.region, pid, 0);
        mine
    }

    #[test]
    fn scan_counts_only_active_readers_of_the_session_not_ahead_of_the_writer() {
        let t = slots(8);
        let a = claimed(&t, 0, 1);
        let b = claimed(&t, 1, 2);
        let c = claimed(&t, 2, 3);
        let _waiting = claimed(&t, 5, 4);
        a.activate(7, 4096);
        b.activate(7, 1024);
        c.activate(8, 0); // another session
                          // slot 5 waits, slot 3 never claimed
        let r = t.scan(7, None, 4096);
        assert_eq!(
            r,
            SessionReaders { count: 2, min: Some(1024), max: Some(4096), ignored: 0, untethered: 0, owed: 0 }
        );
        assert_eq!(t.scan(7, Some(1), 4096).min, Some(4096));
        assert_eq!(t.high_water(), 6);
        // A position past the writer's is impossible for an honest reader: ignored, and counted.
        assert_eq!(
            t.scan(7, None, 4000),
            SessionReaders { count: 1, min: Some(1024), max: Some(1024), ignored: 1, untethered: 0, owed: 0 }
        );
        b.free();
        assert_eq!(t.scan(7, None, 4096).count, 1);
        a.deactivate();
        assert_eq!(t.scan(7, None, 4096), SessionReaders::default());
        assert_eq!(t.view(1).pid, 2);
    }

    /// Kernel locks as a table of flags: `true` = held by someone else, or by us.
    struct Flags(std::cell::RefCell<Vec<bool>>);

    impl SlotLocks for Flags {
        type Error = &'static str;
        fn try_lock(&self, index: usize) -> Result<bool, &'static str> {
            let mut held = self.0.borrow_mut();
            if index == 3 {
                return Err("lock call failed");
            }
            Ok(!std::mem::replace(&mut held[index], true))
        }
        fn unlock(&self, index: usize) {
            self.0.borrow_mut()[index] = false;
        }
    }

    #[test]
    fn locking_takes_the_first_free_lock_and_eviction_frees_only_unlocked_used_slots() {
        let t = slots(5);
        let locks = Flags(std::cell::RefCell::new(vec![false; 5]));
        assert_eq!(t.lock_free(&locks), Ok(Some(0)));
        let a = claimed(&t, 0, 10);
        assert_eq!(t.lock_free(&locks), Ok(Some(1)));
        let b = claimed(&t, 1, 11);
        assert_eq!(t.lock_free(&locks), Ok(Some(2)));
        let _c = claimed(&t, 2, 12);
        assert_eq!(t.lock_free(&locks), Err("lock call failed"), "errors propagate");
        a.activate(7, 64);
        b.activate(7, 32);
        // The owner of slot 1 dies: the kernel drops its lock, its state stays ACTIVE.
        locks.unlock(1);
        assert_eq!(t.evict_dead(&locks), 1);
        assert_eq!(t.state(1).1, s::STATE_FREE);
        assert_eq!(t.state(0), (7, s::STATE_ACTIVE), "a live reader is never evicted");
        assert_eq!(t.state(2).1, s::STATE_WAITING);
        assert_eq!(*locks.0.borrow(), [true, false, true, false, false], "eviction drops the locks it took");
        assert_eq!(t.evict_dead(&locks), 0, "free slots are skipped");
        // A dead owner's slot is taken over by the next claim even before a sweep frees it.
        locks.unlock(2);
        assert_eq!(t.lock_free(&locks), Ok(Some(1)));
        assert_eq!(t.lock_free(&locks), Ok(Some(2)));
        claimed(&t, 2, 15);
        assert_eq!(t.view(2).pid, 15);
        assert_eq!(t.evict_dead(&locks), 0, "every used slot is locked");
    }

    #[test]
    fn open_rejects_garbage() {
        let r = HeapRegion::new(s::file_length(4));
        assert!(matches!(Slots::open(&r), Err(Invalid::Corrupt(_))));
        let t = slots(4);
        assert!(Slots::open(&t.region).is_ok());
        t.region.store_i32(s::VERSION, 99, Ordering::Relaxed);
        assert_eq!(Slots::open(&t.region).unwrap_err(), Invalid::VersionMismatch { found: 99 });
        t.region.store_i32(s::VERSION, LAYOUT_VERSION, Ordering::Relaxed);
        t.region.store_i32(s::SLOT_COUNT, 5, Ordering::Relaxed);
        assert!(Slots::open(&t.region).is_err());
        t.region.store_i32(s::SLOT_COUNT, 4, Ordering::Relaxed);
        t.region.store_i64(s::HIGH_WATER, i64::MAX, Ordering::Relaxed);
        assert_eq!(Slots::open(&t.region).unwrap().high_water(), 4);
    }
}
