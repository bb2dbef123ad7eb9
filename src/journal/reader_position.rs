//! One durable reader's position in memory: which recording it reads and how far, a pair of
//! words written by the reader and read by retention in other processes. Pure memory over any
//! region, so the loom model runs this very code.
//!
//! A seqlock: the writer makes the sequence odd, fences (release), writes the pair, and makes
//! the sequence even again (release); a reader loads the sequence (acquire), the pair, fences
//! (acquire) and loads the sequence again, and keeps the pair only if both loads saw the same
//! even number. A pair torn between two stores (a new recording with the old position) would let
//! retention purge what the reader has not read (loom model `j5`; its mutant drops the writer's
//! fence and fails it).

use crate::region::{Region, RegionMut};
use crate::sync::protocol;
use crate::sync::{fence, Ordering};

/// Word indices within a reader's record.
pub(crate) mod word {
    pub(crate) const SEQUENCE: usize = 1;
    pub(crate) const RECORDING: usize = 2;
    pub(crate) const POSITION: usize = 3;
}

/// The recording word of a reader that has read nothing yet.
pub(crate) const NOTHING_READ: i64 = -1;

fn at(base: usize, word: usize) -> usize {
    base + word * 8
}

/// Stores the reader's position: `position` in recording `recording` (only its one writer
/// calls this).
pub(crate) fn store<R: RegionMut>(region: &R, base: usize, recording: i64, position: i64) {
    // The next odd number (a writer that died mid-store left one: never reused).
    let sequence = region.load_i64(at(base, word::SEQUENCE), Ordering::Relaxed);
    let odd = sequence.wrapping_add(if sequence & 1 == 1 { 2 } else { 1 });
    region.store_i64(at(base, word::SEQUENCE), odd, Ordering::Relaxed);
    if protocol::reader_position_fence() {
        fence(Ordering::Release);
    }
    region.store_i64(at(base, word::RECORDING), recording, Ordering::Relaxed);
    region.store_i64(at(base, word::POSITION), position, Ordering::Relaxed);
    region.store_i64(at(base, word::SEQUENCE), odd.wrapping_add(1), Ordering::Release);
}

/// One attempt at loading the reader's position: `None` if its writer was storing it meanwhile.
pub(crate) fn try_load<R: Region>(region: &R, base: usize) -> Option<(i64, i64)> {
    let before = region.load_i64(at(base, word::SEQUENCE), Ordering::Acquire);
    let recording = region.load_i64(at(base, word::RECORDING), Ordering::Relaxed);
    let position = region.load_i64(at(base, word::POSITION), Ordering::Relaxed);
    fence(Ordering::Acquire);
    let after = region.load_i64(at(base, word::SEQUENCE), Ordering::Relaxed);
    (before == after && before & 1 == 0).then_some((recording, position))
}

#[cfg(all(test, not(shmlog_loom)))]
mod tests {
    use super::*;
    use crate::region::HeapRegion;

    #[test]
    fn a_stored_position_loads_whole() {
        let region = HeapRegion::new(64);
        assert_eq!(try_load(&region, 0), Some((0, 0)));
        store(&region, 0, 3, 4096);
        assert_eq!(try_load(&region, 0), Some((3, 4096)));
        store(&region, 0, NOTHING_READ, 0);
        assert_eq!(try_load(&region, 0), Some((NOTHING_READ, 0)));
        // A writer that died mid-store leaves an odd sequence: never a torn pair.
        region.store_i64(8, 5, Ordering::Relaxed);
        assert_eq!(try_load(&region, 0), None);
        store(&region, 0, 4, 64);
        assert_eq!(try_load(&region, 0), Some((4, 64)));
    }
}
