//! What a writer of either kind ([`super::writer::Writer`], the one writer of an exclusive log;
//! [`super::concurrent_writer::ConcurrentWriter`], one of several) keeps of the stream's readers:
//! their slots and liveness, the flow control over them, and the doorbell it rings for them.
//! Written once, so the two writers differ only in how they take space in the log.

use super::doorbell::Fanout;
use super::flow::FlowControl;
use super::slots::{SessionReaders, SlotLocks, Slots};
use crate::log::{Counter, Gauge, Log};
use crate::region::RegionMut;
use crate::sync::LightBarrier;

/// Who of the readers is alive, as the kernel knows it, and how often the writer may ask.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub trait Liveness: SlotLocks {
    /// Whether the writer may sweep dead readers now: a sweep costs system calls, so it runs at
    /// most once per liveness interval.
    fn sweep_due(&mut self) -> bool;

    /// How many bytes of log a writer that nothing holds back may append before it asks
    /// [`Liveness::sweep_due`] again (its next checkpoint, `flow`): what bounds the time a dead
    /// reader that holds nobody back (an untethered one) stays counted. The default, no
    /// checkpoints, is for models whose liveness never changes.
    fn checkpoint_step(&self) -> i64 {
        i64::MAX
    }

    /// The stream's wake FIFO, which the writer writes when it rings reactor sleepers (none in
    /// models without them).
    fn fanout(&self) -> Option<&Fanout> {
        None
    }
}

/// The reader-facing half of a writer.
#[derive(Debug)]
pub(crate) struct WriterCore<S, K> {
    pub(super) flow: FlowControl,
    pub(super) slots: Slots<S>,
    pub(super) liveness: K,
    /// Largest message an offer takes (`layout::frame::max_message_len`).
    pub(super) max_message: usize,
    /// Rings the doorbell page of the slot file after every commit (a barrier and a load unless
    /// a reader sleeps), with the barrier this process needs (decided once); `None` in models of
    /// flow control alone.
    ring: Option<LightBarrier>,
}

impl<S: RegionMut, K: Liveness> WriterCore<S, K> {
    /// Flow control with a window of `window` bytes from position `start`, over `slots`.
    pub(crate) fn new(slots: Slots<S>, liveness: K, window: usize, start: i64, max_message: usize) -> Self {
        let mut flow = FlowControl::new(window, start);
        flow.set_step(liveness.checkpoint_step());
        Self { flow, slots, liveness, max_message, ring: None }
    }

    /// Rings the stream's doorbell after every commit from now on, and once at once: readers
    /// waiting for a session (this one) look again.
    pub(crate) fn start_ringing(&mut self) {
        self.slots.doorbell().ring_readers_always(self.liveness.fanout());
        self.ring = Some(crate::sync::light_barrier_kind());
    }

    /// Wakes readers sleeping on the doorbell, if any: after every commit.
    #[inline(always)]
    pub(crate) fn ring(&self) {
        if let Some(barrier) = self.ring {
            self.slots.ring_readers(barrier, || self.liveness.fanout());
        }
    }

    /// Wakes every sleeping reader whatever the doorbell says (end of stream), if ringing.
    pub(crate) fn ring_readers_always(&self) {
        if self.ring.is_some() {
            self.slots.doorbell().ring_readers_always(self.liveness.fanout());
        }
    }

    /// `true` once the writer rings the doorbell (only then may it sleep on it).
    pub(crate) fn rings(&self) -> bool {
        self.ring.is_some()
    }

    /// Frees the slots of dead readers, counting them in `log`; returns how many.
    pub(crate) fn evict_dead<L: RegionMut>(&self, log: &Log<L>) -> usize {
        let evicted = self.slots.evict_dead(&self.liveness);
        if evicted > 0 {
            log.count(Counter::ReadersEvicted, evicted as u64);
        }
        evicted
    }

    /// Whether a writer the cached limit stopped should sweep now: asked at every stop, held
    /// back or at a checkpoint (`flow`), so a dead reader is swept within a bounded time whatever
    /// holds the writer. Paces the next checkpoints.
    pub(crate) fn sweep_due(&mut self) -> bool {
        let due = self.liveness.sweep_due();
        self.flow.set_step(self.liveness.checkpoint_step());
        due
    }

    /// Publishes a recomputed `limit` and the readers it counted in `log`'s gauges and counters
    /// (what `shmlog stat` shows); returns the limit.
    pub(crate) fn publish_limit<L: RegionMut>(&self, log: &Log<L>, limit: i64) -> i64 {
        let readers = self.flow.readers();
        log.set_gauge(Gauge::PublisherLimit, limit);
        log.set_gauge(Gauge::ConnectedReaders, readers.count as i64);
        log.count(Counter::LimitRecomputes, 1);
        if readers.ignored > 0 {
            // Past the writer's position: no honest reader's.
            log.count(Counter::IgnoredPositions, readers.ignored as u64);
        }
        limit
    }

    /// The cached limit: appends starting below it are admitted without reading the slots.
    #[inline(always)]
    pub(crate) fn limit(&self) -> i64 {
        self.flow.limit()
    }

    /// The readers the last recompute counted.
    pub(crate) fn readers(&self) -> SessionReaders {
        self.flow.readers()
    }

    /// `true` if the last recompute counted a reader.
    pub(crate) fn connected(&self) -> bool {
        self.flow.connected()
    }

    pub(crate) fn max_message_len(&self) -> usize {
        self.max_message
    }

    pub(crate) fn liveness(&self) -> &K {
        &self.liveness
    }

    /// The stream's reader slots.
    pub(crate) fn slots(&self) -> &Slots<S> {
        &self.slots
    }
}
