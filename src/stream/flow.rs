//! The publisher limit, recomputed lazily by the publication itself (Aeron's driver does this in
//! its conductor; here nobody else runs).
//!
//! The limit is `slowest live reader + window`. The publication compares its position with a
//! cached limit on every offer and only re-reads the reader slots when it reaches it; with a reader
//! keeping up that is once per window of data. So the common offer touches no shared cache line
//! but the term's (and the tail counter, which readers do not read).
//!
//! Join safety (invariant I5): a reader publishes its slot, then issues a SeqCst fence, then reads
//! the producer position (`stream::join`); a recompute issues a SeqCst fence, then reads the
//! slots. Either the recompute sees the reader, or the reader sees a producer position at least
//! as new as the one the recompute used, and refuses join positions more than a term behind it.
//!
//! Dead readers that hold nobody back (untethered ones, or any behind a reader that keeps up)
//! would never stop a writer, and a writer sweeps only when it stops (a sweep costs system
//! calls). So the cached limit also stops at *checkpoints*, a step past the writer's position
//! (paced by its liveness to about an eighth of a liveness interval, at most 32 KiB), where the
//! writer asks whether a sweep is due (one clock read) and, if not, moves to the next checkpoint
//! without reading the slots. The offer's fast path is unchanged: the same comparison with the
//! cached limit.
//!
//! Nothing read from a slot is trusted: a position past the writer's own (a stray or forged word)
//! is ignored and counted, so it can neither move the limit past a live reader nor stick in the
//! consumer position below. For a concurrent log "the writer's own" is the shared tail re-read
//! after the position was loaded, which no honest reader is ever past.

use super::slots::{Owed, SessionReaders, Slots};
use crate::log::Log;
use crate::region::Region;
use crate::sync::protocol;
use crate::sync::{fence, Ordering};

/// Flow-control state private to the publication.
#[derive(Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct FlowControl {
    window: i64,
    /// The cached limit: `allowed`, or the next checkpoint if that comes first.
    limit: i64,
    /// What the readers allowed at the last recompute.
    allowed: i64,
    /// How far past the writer's position the next checkpoint lies.
    step: i64,
    /// Highest reader position ever seen (Aeron's consumer position): with no reader left, the
    /// limit falls back to it so the publisher reports NotConnected rather than running on.
    consumer_max: i64,
    readers: SessionReaders,
    /// The session's number and start, for counting the readers it is owed to (see
    /// [`Slots::scan_rising`]); `None` in models of flow control alone.
    owed: Option<Owed>,
}

impl FlowControl {
    /// Starts with no reader: the limit is the initial position, so offers report NotConnected.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn new(window: usize, position: i64) -> Self {
        Self {
            window: window as i64,
            limit: position,
            allowed: position,
            step: i64::MAX,
            consumer_max: position,
            readers: SessionReaders::default(),
            owed: None,
        }
    }

    /// Counts, from now on, the readers the session numbered `seq` (starting at position 0) is
    /// owed to: tethered readers that wait for a later session or still read an older one hold
    /// the writer at the session's start until they join it.
    pub(crate) fn owe_to_waiting_readers(&mut self, seq: i32) {
        self.owed = Some(Owed { seq, start: 0 });
    }

    /// The cached limit: offers starting below it are admitted.
    #[inline(always)]
    pub(crate) fn limit(&self) -> i64 {
        self.limit
    }

    /// `true` if the cached limit stopped a writer at `position` short of what the readers
    /// allowed at the last recompute: a checkpoint, not back pressure.
    #[inline]
    pub(crate) fn at_checkpoint(&self, position: i64) -> bool {
        position < self.allowed
    }

    /// Sets how far past the writer's position checkpoints lie from now on (positive).
    pub(crate) fn set_step(&mut self, step: i64) {
        self.step = step.max(1);
    }

    /// Moves the cached limit to the next checkpoint past `position`, within what the readers
    /// allowed at the last recompute (no slot is read: positions only rise, and a joiner's
    /// proof holds within the window of that recompute).
    pub(crate) fn next_checkpoint(&mut self, position: i64) {
        self.limit = self.allowed.min(position.saturating_add(self.step));
    }

    /// Readers counted at the last recompute.
    pub(crate) fn readers(&self) -> SessionReaders {
        self.readers
    }

    /// `true` if the last recompute counted a reader, tethered or not.
    pub(crate) fn connected(&self) -> bool {
        self.readers.count > 0 || self.readers.untethered > 0
    }

    /// Re-reads the slots of `session` and sets the limit from the slowest reader that is not
    /// ahead of `producer`, the writer's position.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn recompute<R: Region>(&mut self, slots: &Slots<R>, session: i32, producer: i64) -> i64 {
        self.recompute_with(slots, session, producer, || producer, || None)
    }

    /// [`FlowControl::recompute`] for one of several writers of a concurrent log: the limit also
    /// stays within a window of the oldest frame a writer is still writing. `producer` is the
    /// shared tail, loaded before the call: the join proof needs it read before the fence.
    ///
    /// Other writers move the tail while the slots are read, and a fast reader follows them, so
    /// a reader's position is compared with the tail re-read after it (see
    /// [`Slots::scan_rising`]), not with `producer`: an honest reader always counts. The limit
    /// still stays within a window of `producer` (the join proof bounds the writer by the tail it
    /// loaded before the fence, as it bounds the exclusive writer by its own position).
    pub(crate) fn recompute_concurrent<R: Region, L: Region>(
        &mut self,
        slots: &Slots<R>,
        log: &Log<L>,
        producer: i64,
    ) -> i64 {
        let tail_now =
            || if protocol::fresh_ceiling() { log.producer_position().unwrap_or(producer) } else { producer };
        self.recompute_with(slots, log.session_id(), producer, tail_now, || log.min_writer_pending(producer))
    }

    fn recompute_with<R: Region>(
        &mut self,
        slots: &Slots<R>,
        session: i32,
        producer: i64,
        ceiling: impl FnMut() -> i64,
        oldest_pending: impl FnOnce() -> Option<i64>,
    ) -> i64 {
        // Pairs with the fence of a joining reader (`stream::join`).
        if protocol::recompute_fence() {
            fence(Ordering::SeqCst);
        }
        self.readers = slots.scan_rising(session, None, self.owed, producer, ceiling);
        let hold = oldest_pending().unwrap_or(i64::MAX);
        self.allowed = match (self.readers.min, self.readers.max) {
            (Some(min), Some(max)) => {
                // Readers past `producer` (a concurrent log's tail re-read after the fence) count,
                // but move the limit no further than a window past `producer`: what a joiner
                // that this scan missed relies on (`stream::join`). With one writer no reader is
                // past its own position, and these `min`s change nothing.
                let (min, max) = if protocol::distrust_slots() {
                    (min.min(producer), max.min(producer))
                } else {
                    (min, max)
                };
                self.consumer_max = self.consumer_max.max(max);
                min.min(hold).saturating_add(self.window)
            }
            // Only untethered readers: nobody holds the writer back, so it runs a window past
            // its own position (and recomputes there, to learn of a tethered joiner in time).
            _ if self.readers.untethered > 0 => producer.min(hold).saturating_add(self.window),
            _ => self.consumer_max.min(hold.saturating_add(self.window)),
        };
        self.next_checkpoint(producer);
        self.limit
    }
}

#[cfg(all(test, not(shmlog_loom)))]
mod tests {
    use super::*;
    use crate::layout::slots::{file_length, slot_offset};
    use crate::region::HeapRegion;
    use crate::stream::slots::SlotMut;
    use std::sync::Arc;

    #[test]
    fn limit_follows_the_slowest_reader_and_falls_back_when_none() {
        let region = Arc::new(HeapRegion::new(file_length(4)));
        let slots = Slots::initialize(Arc::clone(&region), 4);
        let slot = |i| {
            let mut mine = SlotMut::new(Arc::clone(&region), slot_offset(i), i);
            mine.claim(&region, 1, 0);
            mine
        };
        let mut fc = FlowControl::new(1024, 0);
        assert_eq!(fc.limit(), 0, "no reader ever: limit stays at the start");
        assert_eq!(fc.recompute(&slots, 9, 0), 0);
        assert!(!fc.connected());
        let a = slot(0);
        a.activate(9, 0);
        assert_eq!(fc.recompute(&slots, 9, 0), 1024);
        let b = slot(1);
        b.activate(9, 512);
        a.set_position(4096);
        assert_eq!(fc.recompute(&slots, 9, 4096), 512 + 1024, "slowest wins");
        assert_eq!(fc.readers().count, 2);
        a.free();
        b.free();
        assert_eq!(fc.recompute(&slots, 9, 4096), 4096, "back to the furthest position ever read");
        assert!(!fc.connected());
    }

    #[test]
    fn untethered_readers_never_hold_the_writer_but_keep_it_connected() {
        let region = Arc::new(HeapRegion::new(file_length(2)));
        let slots = Slots::initialize(Arc::clone(&region), 2);
        let mut far = SlotMut::new(Arc::clone(&region), slot_offset(0), 0);
        far.claim(&region, 1, 0);
        far.set_untethered(true);
        far.activate(9, 0);
        let mut fc = FlowControl::new(1024, 0);
        assert_eq!(fc.recompute(&slots, 9, 1 << 20), (1 << 20) + 1024, "a window past the writer");
        assert!(fc.connected());
        assert_eq!(fc.readers(), SessionReaders { untethered: 1, ..SessionReaders::default() });
        let mut near = SlotMut::new(Arc::clone(&region), slot_offset(1), 1);
        near.claim(&region, 2, 0);
        near.activate(9, 4096);
        assert_eq!(fc.recompute(&slots, 9, 1 << 20), 4096 + 1024, "the tethered reader alone bounds it");
        assert_eq!(fc.readers().count, 1);
        near.free();
        far.free();
        fc.recompute(&slots, 9, 1 << 20);
        assert!(!fc.connected(), "no reader left");
    }

    #[test]
    fn checkpoints_stop_the_writer_short_of_what_the_readers_allow() {
        let region = Arc::new(HeapRegion::new(file_length(1)));
        let slots = Slots::initialize(Arc::clone(&region), 1);
        let mut loose = SlotMut::new(Arc::clone(&region), slot_offset(0), 0);
        loose.claim(&region, 1, 0);
        loose.set_untethered(true);
        loose.activate(9, 0);
        let mut fc = FlowControl::new(1024, 0);
        fc.set_step(256);
        assert_eq!(fc.recompute(&slots, 9, 4096), 4096 + 256, "the first checkpoint");
        assert!(fc.at_checkpoint(4096 + 256), "the readers allow more: a checkpoint, not back pressure");
        fc.next_checkpoint(4096 + 256);
        assert_eq!(fc.limit(), 4096 + 512);
        fc.next_checkpoint(4096 + 900);
        assert_eq!(fc.limit(), 4096 + 1024, "never past what the readers allowed");
        assert!(!fc.at_checkpoint(4096 + 1024), "there it recomputes");
        loose.free();
    }

    #[test]
    fn a_forged_position_cannot_move_the_limit_past_a_live_reader() {
        let region = Arc::new(HeapRegion::new(file_length(2)));
        let slots = Slots::initialize(Arc::clone(&region), 2);
        let (mut live, mut forged) = (
            SlotMut::new(Arc::clone(&region), slot_offset(0), 0),
            SlotMut::new(Arc::clone(&region), slot_offset(1), 1),
        );
        live.claim(&region, 1, 0);
        forged.claim(&region, 2, 0);
        live.activate(9, 256);
        forged.activate(9, 0);
        forged.set_position(i64::MAX - 4);
        let mut fc = FlowControl::new(1024, 0);
        assert_eq!(fc.recompute(&slots, 9, 512), 256 + 1024, "the live reader still bounds the writer");
        assert_eq!(fc.readers().ignored, 1);
        live.free();
        assert_eq!(
            fc.recompute(&slots, 9, 512),
            256,
            "the forged word does not become the consumer position"
        );
        assert!(!fc.connected());
    }

    /// A concurrent log whose shared tail stands at `tail` (one writer's frames of 32 bytes up to
    /// it), and a slot table of two slots over it.
    fn concurrent_log_at(tail: i64) -> (Log<Arc<HeapRegion>>, Slots<Arc<HeapRegion>>, Arc<HeapRegion>) {
        use crate::layout::log_meta::Geometry;
        use crate::log::concurrent::ConcurrentAppender;
        use crate::log::LogInit;
        let geometry = Geometry { term_length: 1024, page_size: 4096, mtu: 128, window: 512 };
        let region = Arc::new(HeapRegion::new(geometry.file_length()));
        let init = LogInit {
            geometry,
            initial_term_id: 5,
            session_id: 9,
            stream_id: 2,
            pid: 3,
            created_ns: 0,
            name: "flow",
            concurrent: true,
            session_seq: 1,
        };
        let log = Log::initialize(Arc::clone(&region), &init);
        let writer_view = Log::open_any_term(Arc::clone(&region)).unwrap();
        assert!(writer_view.claim_writer_slot(0, 10, 0));
        let mut writer = ConcurrentAppender::new(writer_view, 0);
        while log.producer_position().unwrap() < tail {
            let r = writer.reserve(0, i64::MAX).unwrap();
            writer.write(r, &[&[]]);
        }
        assert_eq!(log.producer_position().unwrap(), tail);
        let slot_region = Arc::new(HeapRegion::new(file_length(2)));
        let slots = Slots::initialize(Arc::clone(&slot_region), 2);
        (log, slots, slot_region)
    }

    /// The review's T2: a concurrent writer loads the shared tail, then (after the fence) scans
    /// the slots. Meanwhile other writers reserve and commit, and a fast reader reads past the
    /// tail it loaded. That reader is honest: it must count (connected, a reader), not be
    /// ignored as a forged word. The limit still stays within a window of the tail loaded before
    /// the fence (the join proof, `stream::join`, bounds the writer by that read).
    #[test]
    fn a_concurrent_recompute_counts_an_honest_reader_past_the_tail_it_loaded() {
        let (log, slots, slot_region) = concurrent_log_at(64);
        let mut reader = SlotMut::new(Arc::clone(&slot_region), slot_offset(0), 0);
        reader.claim(&slot_region, 1, 0);
        reader.activate(9, 64);
        let mut fc = FlowControl::new(512, 0);
        let limit = fc.recompute_concurrent(&slots, &log, 0);
        assert_eq!(
            fc.readers(),
            SessionReaders { count: 1, min: Some(64), max: Some(64), ignored: 0, untethered: 0, owed: 0 },
            "the reader at 64 is behind the tail (64) read after its position"
        );
        assert!(fc.connected());
        assert_eq!(limit, 512, "a window past the tail loaded before the fence, not past the reader");
        // A word past the tail re-read after it is still no honest reader's.
        let mut forged = SlotMut::new(Arc::clone(&slot_region), slot_offset(1), 1);
        forged.claim(&slot_region, 2, 0);
        forged.activate(9, 4096);
        assert_eq!(fc.recompute_concurrent(&slots, &log, 64), 64 + 512);
        assert_eq!(
            fc.readers(),
            SessionReaders { count: 1, min: Some(64), max: Some(64), ignored: 1, untethered: 0, owed: 0 }
        );
        reader.free();
        assert_eq!(fc.recompute_concurrent(&slots, &log, 64), 64, "the furthest position read");
        assert!(!fc.connected());
    }
}
