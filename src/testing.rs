//! Helpers of the crate's own unit tests and of the fuzz targets (`--cfg shmlog_fuzz`): logs and
//! slot tables over heap memory, the kernel's liveness as a model, temporary directories.
// The fuzz build uses only part of it (claimed slots); the rest serves the unit tests.
#![cfg_attr(not(test), allow(dead_code))]

use crate::layout::log_meta::Geometry;
use crate::layout::slots::{file_length, slot_offset};
use crate::log::{Log, LogInit};
use crate::region::HeapRegion;
use crate::stream::slots::{SlotLocks, SlotMut, Slots};
use crate::stream::writer::Liveness;
use std::sync::Arc;

/// Heap memory shared by a writer and its readers, as a mapped file is.
pub(crate) type Shared = Arc<HeapRegion>;

/// A fresh log of `geometry` over heap memory; readers open views of the same memory with
/// `Log::open_any_term(Arc::clone(&region))`.
pub(crate) fn heap_log(geometry: Geometry, initial_term_id: i32, session_id: i32) -> (Shared, Log<Shared>) {
    let region = Arc::new(HeapRegion::new(geometry.file_length()));
    let init = LogInit {
        geometry,
        initial_term_id,
        session_id,
        stream_id: 0x5eed,
        pid: 1,
        created_ns: 0,
        name: "heap",
        concurrent: false,
        session_seq: 1,
    };
    let log = Log::initialize(Arc::clone(&region), &init);
    (region, log)
}

/// A fresh slot table of `count` slots over heap memory.
pub(crate) fn heap_slots(count: usize) -> (Shared, Slots<Shared>) {
    let region = Arc::new(HeapRegion::new(file_length(count)));
    let slots = Slots::initialize(Arc::clone(&region), count);
    (region, slots)
}

/// Slot `index` of the table in `region`, claimed for `pid` (its lock is the caller's model).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn claimed_slot(region: &Shared, index: usize, pid: i64) -> SlotMut<Shared> {
    let mut slot = SlotMut::new(Arc::clone(region), slot_offset(index), index);
    slot.claim(region, pid, 0);
    slot
}

/// Every reader is alive: no slot lock can be taken, and the writer never sweeps.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AllAlive;

impl SlotLocks for AllAlive {
    type Error = std::convert::Infallible;

    fn try_lock(&self, _index: usize) -> Result<bool, Self::Error> {
        Ok(false)
    }

    fn unlock(&self, _index: usize) {}
}

impl Liveness for AllAlive {
    fn sweep_due(&mut self) -> bool {
        false
    }
}

/// A fresh directory under the system temp dir, removed on drop.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct TempDir(std::path::PathBuf);

#[cfg(test)]
impl TempDir {
    pub(crate) fn new(tag: &str) -> Self {
        #[allow(clippy::disallowed_types)] // a process-wide counter, not protocol state
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("shmlog-unit-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("a temporary directory");
        Self(p)
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        &self.0
    }
}

#[cfg(test)]
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
