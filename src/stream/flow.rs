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

use super::slots::{SessionReaders, Slots};
use crate::region::Region;
use crate::sync::{fence, Ordering};

/// Flow-control state private to the publication.
#[derive(Debug)]
pub(crate) struct FlowControl {
    window: i64,
    limit: i64,
    /// Highest reader position ever seen (Aeron's consumer position): with no reader left, the
    /// limit falls back to it so the publisher reports NotConnected rather than running on.
    consumer_max: i64,
    readers: SessionReaders,
}

impl FlowControl {
    /// Starts with no reader: the limit is the initial position, so offers report NotConnected.
    pub(crate) fn new(window: usize, position: i64) -> Self {
        Self {
            window: window as i64,
            limit: position,
            consumer_max: position,
            readers: SessionReaders::default(),
        }
    }

    /// The cached limit: offers starting below it are admitted.
    #[inline(always)]
    pub(crate) fn limit(&self) -> i64 {
        self.limit
    }

    /// Readers counted at the last recompute.
    pub(crate) fn readers(&self) -> SessionReaders {
        self.readers
    }

    /// `true` if the last recompute counted a reader.
    pub(crate) fn connected(&self) -> bool {
        self.readers.count > 0
    }

    /// Re-reads the slots of `session` and sets the limit from the slowest reader.
    pub(crate) fn recompute<R: Region>(&mut self, slots: &Slots<R>, session: i32) -> i64 {
        // Pairs with the fence of a joining reader (`stream::join`); the mutant cfg exists only so
        // the loom models can show they catch its absence (`.ci/loom.sh`).
        if !cfg!(shmlog_mutant_no_recompute_fence) {
            fence(Ordering::SeqCst);
        }
        self.readers = slots.scan(session, None);
        match (self.readers.min, self.readers.max) {
            (Some(min), Some(max)) => {
                self.consumer_max = self.consumer_max.max(max);
                self.limit = min.saturating_add(self.window);
            }
            _ => self.limit = self.consumer_max,
        }
        self.limit
    }
}

#[cfg(all(test, not(shmlog_loom)))]
mod tests {
    use super::*;
    use crate::layout::slots::file_length;
    use crate::region::HeapRegion;

    #[test]
    fn limit_follows_the_slowest_reader_and_falls_back_when_none() {
        let slots = Slots::initialize(HeapRegion::new(file_length(4)), 4);
        let mut fc = FlowControl::new(1024, 0);
        assert_eq!(fc.limit(), 0, "no reader ever: limit stays at the start");
        assert_eq!(fc.recompute(&slots, 9), 0);
        assert!(!fc.connected());
        slots.claim(0, 1, 0);
        slots.activate(0, 9, 0);
        assert_eq!(fc.recompute(&slots, 9), 1024);
        slots.claim(1, 1, 0);
        slots.activate(1, 9, 512);
        slots.set_position(0, 4096);
        assert_eq!(fc.recompute(&slots, 9), 512 + 1024, "slowest wins");
        assert_eq!(fc.readers().count, 2);
        slots.free(0);
        slots.free(1);
        assert_eq!(fc.recompute(&slots, 9), 4096, "back to the furthest position ever read");
        assert!(!fc.connected());
    }
}
