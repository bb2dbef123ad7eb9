//! The doorbell: sleeping until the other side has something for us, without costing that side a
//! system call unless somebody sleeps. Pure memory plus the futex calls of the region, so the
//! loom models run this very code (the loom region models a futex with a condition variable).
//!
//! Two bells in the doorbell page of the slot file (`layout::slots`): readers sleep on one until
//! the writer commits, the writer sleeps on the other until readers move. Each bell has an
//! *armed* word and a futex word. The protocol, the same both ways (Dekker's):
//!
//! - a sleeper reads the futex word, stores 1 in *armed*, issues the heavy barrier, then checks
//!   once more whether what it waits for is there; only if not does it sleep on the futex word,
//!   expecting the value it read;
//! - the hot side, after publishing (a commit, a new position), issues the light barrier and
//!   loads *armed*: zero (the common case) costs it nothing more; otherwise it swaps *armed* to
//!   zero, bumps the futex word and wakes every sleeper.
//!
//! Of the two barriers, one comes first: either the hot side sees the sleeper armed, or the
//! sleeper sees what was published and does not sleep. A waker that clears an *armed* has read
//! the sleeper's store, so its bump follows the sleeper's read of the futex word, and the sleep
//! (which only starts while the word still holds the value read) ends at once. The order
//! matters: a sleeper that armed before reading the word could read a bump made by a waker
//! whose clear (meant for an earlier arm) swallowed the new one, and sleep through the next
//! commit; the loom model found that. The waker clears *armed*, so a sleeper that died armed
//! costs one extra wake-up, not one per message; every woken sleeper that must sleep again arms
//! again. All sleeps have timeouts (liveness checks), so even a broken peer only ever delays a
//! wake-up, never loses one for good.
//!
//! The barriers are `sys::barrier`'s asymmetric pair outside the model (a compiler barrier on the
//! hot side, `membarrier` on the sleeping side), SeqCst fences in the loom build.

use crate::layout::slots::{
    DOORBELL_LEN, READERS_ARMED, READERS_BELL, READERS_PASSED, READERS_SLEEPING, WRITER_ARMED, WRITER_BELL,
};
use crate::region::RegionMut;
use crate::sync::protocol::{DOORBELL_BARRIER, DOORBELL_BELL_FIRST, DOORBELL_RECHECK, DOORBELL_WAKE_OTHERS};
use crate::sync::{LightBarrier, Ordering};
use std::time::Duration;

/// How a wait on a bell ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rung {
    /// What the caller waits for was there when it checked after arming: it did not sleep.
    Ready,
    /// It slept and was woken (or the bell changed, or a signal): look again.
    Woken,
    /// It slept for the whole timeout.
    TimedOut,
}

/// One side's view of a stream's doorbell page, at offset `base` of `region`.
#[derive(Debug)]
pub struct Doorbell<R> {
    region: R,
    base: usize,
}

impl<R: RegionMut> Doorbell<R> {
    /// The doorbell page at `base` of `region` (the whole slot file: `layout::slots::DOORBELL`; a
    /// mapping of the page alone: 0).
    #[inline(always)]
    pub fn new(region: R, base: usize) -> Self {
        assert!(
            region.len() >= base && region.len() - base >= DOORBELL_LEN && base % 4 == 0,
            "a whole doorbell"
        );
        Self { region, base }
    }

    /// [`Doorbell::new`] without the check, for a view built on every commit.
    ///
    /// # Safety
    /// `region` holds a whole doorbell page at `base`, and `base` is 4-aligned.
    #[inline(always)]
    pub unsafe fn new_unchecked(region: R, base: usize) -> Self {
        debug_assert!(region.len() >= base + DOORBELL_LEN && base % 4 == 0);
        Self { region, base }
    }

    /// The writer, after a commit: wakes sleeping readers, if any. One barrier and one load when
    /// nobody sleeps.
    #[inline(always)]
    pub fn ring_readers(&self, barrier: LightBarrier) {
        self.ring(barrier, READERS_ARMED, READERS_BELL);
    }

    /// A reader, after publishing a new position: wakes a writer waiting for room, if any.
    #[inline(always)]
    pub fn ring_writer(&self) {
        self.ring(crate::sync::light_barrier_kind(), WRITER_ARMED, WRITER_BELL);
    }

    /// Wakes the readers whatever *armed* says (end of stream, a new session): cold paths.
    pub fn ring_readers_always(&self) {
        self.region.store_i32(self.base + READERS_ARMED, 0, Ordering::SeqCst);
        self.bump(READERS_BELL, i32::MAX);
    }

    #[inline(always)]
    fn ring(&self, barrier: LightBarrier, armed: usize, bell: usize) {
        if DOORBELL_BARRIER {
            barrier.issue();
        }
        // SAFETY: the doorbell lies in the region, 4-aligned (`new`'s check or `new_unchecked`'s
        // contract), and so does each of its words.
        if unsafe { self.region.load_i32_unchecked(self.base + armed, Ordering::Relaxed) } != 0 {
            self.wake(armed, bell);
        }
    }

    #[cold]
    #[inline(never)]
    fn wake(&self, armed: usize, bell: usize) {
        if self.region.swap_i32(self.base + armed, 0) != 0 {
            // One reader: it wakes the others itself (see `wait`), so a publisher with N
            // sleeping readers pays for one wake-up, not N. The writer's bell has one sleeper.
            self.bump(bell, 1);
        }
    }

    /// Bumps `bell` and wakes up to `count` of its sleepers.
    fn bump(&self, bell: usize, count: i32) {
        self.region.fetch_add_i32(self.base + bell, 1);
        self.region.wake_i32(self.base + bell, count);
    }

    /// A reader: sleeps until `ready()` (is a frame committed at my position? did the session
    /// end?) or the writer rings, at most `timeout`.
    pub fn wait_for_writer(&self, ready: impl FnMut() -> bool, timeout: Duration) -> Rung {
        self.wait(READERS_ARMED, READERS_BELL, ready, timeout)
    }

    /// The writer: sleeps until `ready()` (is there room now?) or a reader rings, at most
    /// `timeout`.
    pub fn wait_for_readers(&self, ready: impl FnMut() -> bool, timeout: Duration) -> Rung {
        self.wait(WRITER_ARMED, WRITER_BELL, ready, timeout)
    }

    /// A sleeper's first steps: reads the bell, then says it sleeps. Returns the value read,
    /// which the sleep must expect.
    fn arm(&self, armed: usize, bell: usize) -> i32 {
        let r = &self.region;
        // The bell first: a waker that clears our `armed` below has read our store, so its bump
        // comes after this load, and the futex wait below sees the word changed.
        if DOORBELL_BELL_FIRST {
            let seen = r.load_i32(self.base + bell, Ordering::Acquire);
            r.store_i32(self.base + armed, 1, Ordering::SeqCst);
            seen
        } else {
            r.store_i32(self.base + armed, 1, Ordering::SeqCst);
            r.load_i32(self.base + bell, Ordering::Acquire)
        }
    }

    #[cfg(feature = "async")]
    pub fn region(&self) -> &R {
        &self.region
    }

    /// For a reader that sleeps on several doorbells at once: arms this one for the writer's
    /// ring and returns the readers' bell as `(region, offset, value to expect)`. The caller
    /// then issues `sync::heavy_barrier` once, re-checks every stream, and only then sleeps on
    /// all the bells (the steps of [`Doorbell::wait_for_writer`], spread over several bells).
    pub fn arm_for_writer(&self) -> (&R, usize, i32) {
        let seen = self.arm(READERS_ARMED, READERS_BELL);
        (&self.region, self.base + READERS_BELL, seen)
    }

    fn wait(&self, armed: usize, bell: usize, mut ready: impl FnMut() -> bool, timeout: Duration) -> Rung {
        let seen = self.arm(armed, bell);
        let mut timeout = timeout;
        if DOORBELL_BARRIER && !crate::sync::heavy_barrier() {
            // The kernel refused the sleeper's half of the barrier: a hot side that relies on it
            // may miss us, so sleep briefly and look again rather than for long.
            timeout = timeout.min(Duration::from_millis(1));
        }
        if DOORBELL_RECHECK && ready() {
            return Rung::Ready;
        }
        if bell != READERS_BELL {
            return self.sleep(bell, seen, timeout);
        }
        // Readers count themselves in, so the first one woken knows whether to pass it on.
        let sleeping = self.base + READERS_SLEEPING;
        self.region.fetch_add_i32(sleeping, 1);
        let rung = self.sleep(bell, seen, timeout);
        let others = self.region.fetch_add_i32(sleeping, -1) - 1;
        if DOORBELL_WAKE_OTHERS && rung == Rung::Woken && others > 0 {
            // The first reader woken for a ring wakes the rest, once: the others, woken by us,
            // find the ring already passed on (or they would wake each other for ever).
            let now = self.region.load_i32(self.base + bell, Ordering::Acquire);
            if self.region.swap_i32(self.base + READERS_PASSED, now) != now {
                self.region.wake_i32(self.base + bell, i32::MAX);
            }
        }
        rung
    }

    fn sleep(&self, bell: usize, seen: i32, timeout: Duration) -> Rung {
        if self.region.wait_i32(self.base + bell, seen, timeout) {
            Rung::Woken
        } else {
            Rung::TimedOut
        }
    }
}

#[cfg(all(test, not(shmlog_loom)))]
mod tests {
    use super::*;
    use crate::layout::slots::{file_length, DOORBELL};
    use crate::region::{HeapRegion, Region};
    use std::sync::atomic::{AtomicBool, Ordering as O};
    use std::sync::Arc;
    use std::time::Instant;

    fn bell() -> (Arc<HeapRegion>, Doorbell<Arc<HeapRegion>>) {
        let region = Arc::new(HeapRegion::new(file_length(1)));
        let bell = Doorbell::new(Arc::clone(&region), DOORBELL);
        (region, bell)
    }

    #[test]
    fn a_ready_sleeper_does_not_sleep_and_nobody_rings_for_nobody() {
        let (region, bell) = bell();
        assert_eq!(bell.wait_for_writer(|| true, Duration::from_secs(10)), Rung::Ready);
        // It armed itself; the next ring clears that and bumps the bell once.
        bell.ring_readers(LightBarrier::Full);
        assert_eq!(region.load_i32(DOORBELL + READERS_ARMED, Ordering::Relaxed), 0);
        assert_eq!(region.load_i32(DOORBELL + READERS_BELL, Ordering::Relaxed), 1);
        bell.ring_readers(LightBarrier::Full);
        assert_eq!(region.load_i32(DOORBELL + READERS_BELL, Ordering::Relaxed), 1, "nobody armed: no ring");
        let start = Instant::now();
        assert_eq!(bell.wait_for_readers(|| false, Duration::from_millis(20)), Rung::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn a_sleeping_thread_is_woken_by_a_ring() {
        let (region, bell) = bell();
        let published = Arc::new(AtomicBool::new(false));
        let (p, r) = (Arc::clone(&published), Arc::clone(&region));
        let sleeper = std::thread::spawn(move || {
            let bell = Doorbell::new(r, DOORBELL);
            let start = Instant::now();
            while !p.load(O::Acquire) {
                bell.wait_for_writer(|| p.load(O::Acquire), Duration::from_secs(30));
            }
            start.elapsed()
        });
        // Wait (bounded) until the sleeper armed, then publish and ring.
        let deadline = Instant::now() + Duration::from_secs(30);
        while region.load_i32(DOORBELL + READERS_ARMED, Ordering::Acquire) == 0 {
            assert!(Instant::now() < deadline, "the sleeper never armed");
            std::thread::yield_now();
        }
        published.store(true, O::Release);
        bell.ring_readers(LightBarrier::Full);
        let slept = sleeper.join().unwrap();
        assert!(slept < Duration::from_secs(30), "woken, not timed out");
    }
}
