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
//!
//! **One wake-up, passed on.** The writer wakes one sleeping reader per ring, so a publisher with
//! N sleepers pays for one wake-up. Every reader that sleeps on the readers' bell counts itself
//! in `READERS_SLEEPING` around its sleep, and one that finds the bell rung while others sleep
//! wakes them all (once per ring: `READERS_PASSED`). That holds only if *every* sleeper counts
//! itself and passes on: a sleeper that skipped it (a second way to sleep written beside this
//! one) could take the single wake-up and keep it. So every way to sleep on a stream goes
//! through this module, in two steps that may run on two threads: [`Doorbell::arm_readers`] (or
//! [`Doorbell::arm_writer`]) then [`barrier`], the caller's re-check, then [`sleep`] on one or
//! several armed bells (blocking calls, `Subscription::wait_any`, and the async waiter thread,
//! which sleeps on behalf of tasks that armed their bells themselves).
//!
//! **Misbehaving peers.** The doorbell page is writable by every reader. A forged word can only
//! delay a wake-up (every sleep has a timeout) or cause spurious ones; counts are read with
//! wrapping arithmetic, so no value panics. A peer that keeps changing a bell would wake its
//! sleepers as fast as it writes: [`WakeBudget`] turns a run of wake-ups without news into naps
//! of [`NAP`], so such a peer costs a sleeper at most about a thousand polls a second and a
//! millisecond of delay.

use crate::layout::slots::{
    DOORBELL_LEN, READERS_ARMED, READERS_BELL, READERS_FD_PASSED, READERS_FD_SLEEPING, READERS_PASSED,
    READERS_SLEEPING, WRITER_ARMED, WRITER_BELL, WRITER_FD_SLEEPING,
};
use crate::region::RegionMut;
use crate::sync::protocol;
use crate::sync::{LightBarrier, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use fanout::Fanout;

/// How a wait on a bell ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub enum Rung {
    /// What the caller waits for was there when it checked after arming: it did not sleep.
    Ready,
    /// It slept and was woken (or the bell changed, or a signal): look again.
    Woken,
    /// It slept for the whole timeout.
    TimedOut,
}

/// The longest a sleeper sleeps when the kernel refused its half of the barrier (a hot side that
/// relies on it may miss the sleeper), when it cannot sleep on several bells at once, and the nap
/// of a [`WakeBudget`] spent.
pub(crate) const NAP: Duration = Duration::from_millis(1);

/// The most reactor sleepers a ring wakes through the wake FIFO itself when no thread sleeps on
/// the bell: past it, the ring wakes one thread (a reactor process's waiter, if one keeps the
/// door) and leaves the FIFO to it, so the ringer does not pay for many wake-ups.
pub(crate) const DIRECT_FD_WAKE: i32 = 8;

/// One side's view of a stream's doorbell page, at offset `base` of `region`, with the stream's
/// wake FIFO where this side may have to ring it (see [`Fanout`]).
#[derive(Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Doorbell<R> {
    region: R,
    base: usize,
    fanout: Option<Arc<Fanout>>,
}

/// A bell a sleeper armed: which one, and the value its sleep must expect. Made by
/// [`Doorbell::arm_readers`] or [`Doorbell::arm_writer`], spent by [`sleep`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Armed {
    bell: usize,
    seen: i32,
}

/// A bell a reactor sleeper armed and counted itself on ([`prepare_reactor_sleep`]); handed back
/// to [`finish_reactor_sleep`] once the task runs again (or is dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "async"), allow(dead_code))] // used by the reactor path
pub(crate) struct ReactorArmed(Armed);

impl<R: RegionMut> Doorbell<R> {
    /// The doorbell page at `base` of `region` (the whole slot file: `layout::slots::DOORBELL`; a
    /// mapping of the page alone: 0).
    #[inline(always)]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn new(region: R, base: usize) -> Self {
        assert!(
            region.len() >= base && region.len() - base >= DOORBELL_LEN && base % 4 == 0,
            "a whole doorbell"
        );
        Self { region, base, fanout: None }
    }

    /// This doorbell with the stream's wake FIFO, which it rings (passing a ring on, waking a
    /// back-pressured writer) when reactor sleepers are counted.
    pub(crate) fn with_fanout(mut self, fanout: Arc<Fanout>) -> Self {
        self.fanout = Some(fanout);
        self
    }

    /// The stream's wake FIFO, if this doorbell was given it.
    #[cfg_attr(not(feature = "async"), allow(dead_code))] // used by the reactor path
    pub(crate) fn fanout(&self) -> Option<&Arc<Fanout>> {
        self.fanout.as_ref()
    }

    /// [`Doorbell::new`] without the check, for a view built on every commit.
    ///
    /// # Safety
    /// `region` holds a whole doorbell page at `base`, and `base` is 4-aligned.
    #[inline(always)]
    pub(crate) unsafe fn new_unchecked(region: R, base: usize) -> Self {
        debug_assert!(region.len() >= base + DOORBELL_LEN && base % 4 == 0);
        Self { region, base, fanout: None }
    }

    /// The writer, after a commit, through a doorbell it holds (tests): wakes sleeping readers,
    /// if any. The writer's own path is [`ring_readers_at`], which needs no view of the page.
    #[cfg(any(test, shmlog_loom, shmlog_fuzz))]
    pub(crate) fn ring_readers(&self, barrier: LightBarrier, fanout: Option<&Fanout>) {
        // SAFETY: the doorbell lies in the region, 4-aligned (`new`'s check or `new_unchecked`'s
        // contract).
        unsafe {
            ring_at(&self.region, self.base, barrier, &READERS_SIDE, || fanout.or(self.fanout.as_deref()))
        }
    }

    /// A reader, after publishing a new position: wakes a writer waiting for room, if any.
    #[inline(always)]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn ring_writer(&self) {
        let barrier = crate::sync::light_barrier_kind();
        // SAFETY: as in `ring_readers`.
        unsafe { ring_at(&self.region, self.base, barrier, &WRITER_SIDE, || self.fanout.as_deref()) }
    }

    /// Wakes the readers whatever *armed* says (end of stream, a new session): cold paths.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn ring_readers_always(&self, fanout: Option<&Fanout>) {
        self.region.store_i32(self.base + READERS_ARMED, 0, Ordering::SeqCst);
        let now = self.region.fetch_add_i32(self.base + READERS_BELL, 1).wrapping_add(1);
        self.region.wake_i32(self.base + READERS_BELL, i32::MAX);
        count_fence();
        if fd_sleepers(&self.region, self.base, &READERS_SIDE) > 0 {
            pass_to_reactors(&self.region, self.base, &READERS_SIDE, now, fanout.or(self.fanout.as_deref()));
        }
    }

    /// A reader: sleeps until `ready()` (is a frame committed at my position? did the session
    /// end?) or the writer rings, at most `timeout` ([`sleep_until`] on this bell alone).
    #[cfg(any(test, shmlog_loom))]
    pub(crate) fn wait_for_writer(&self, ready: impl FnOnce() -> bool, timeout: Duration) -> Rung {
        sleep_until(&[Some(self)], ready, timeout).rung
    }

    /// The writer: sleeps until `ready()` (is there room now?) or a reader rings, at most
    /// `timeout`.
    pub(crate) fn wait_for_readers(&self, ready: impl FnOnce() -> bool, timeout: Duration) -> Rung {
        match prepare_sleep(self, Doorbell::arm_writer, ready, timeout) {
            Some((armed, timeout)) => sleep(&[(self, armed)], &[], timeout),
            None => Rung::Ready,
        }
    }

    /// A reader's first step of a sleep: arms the readers' bell for the writer's next ring. Then
    /// [`barrier`], a last look at what the reader waits for, and [`sleep`].
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn arm_readers(&self) -> Armed {
        self.arm(READERS_ARMED, READERS_BELL)
    }

    /// The writer's first step of a sleep: arms the writer's bell for the next reader that moves.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn arm_writer(&self) -> Armed {
        self.arm(WRITER_ARMED, WRITER_BELL)
    }

    /// Reads the bell, then says somebody sleeps on it. Returns the value read, which the sleep
    /// must expect.
    fn arm(&self, armed: usize, bell: usize) -> Armed {
        let r = &self.region;
        // The bell first: a waker that clears our `armed` below has read our store, so its bump
        // comes after this load, and the futex wait below sees the word changed.
        let seen = if protocol::doorbell_bell_first() {
            let seen = r.load_i32(self.base + bell, Ordering::Acquire);
            r.store_i32(self.base + armed, 1, Ordering::SeqCst);
            seen
        } else {
            r.store_i32(self.base + armed, 1, Ordering::SeqCst);
            r.load_i32(self.base + bell, Ordering::Acquire)
        };
        Armed { bell, seen }
    }

    /// `true` if the bell `armed` was armed on rang since (its sleep would not sleep).
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn rang(&self, armed: Armed) -> bool {
        self.region.load_i32(self.base + armed.bell, Ordering::Acquire) != armed.seen
    }

    /// The futex word of `armed` and the value to expect, for a sleep on several words.
    pub(crate) fn word(&self, armed: Armed) -> (&R, usize, i32) {
        (&self.region, self.base + armed.bell, armed.seen)
    }

    /// Counts a reader in among the readers' bell's sleepers.
    fn count_in(&self) {
        self.region.fetch_add_i32(self.base + READERS_SLEEPING, 1);
    }

    /// Counts a reader out again; returns how many others are counted. Wrapping: the word is
    /// writable by every reader, and no value of it may panic us (a forged count at worst skips
    /// or adds a pass-on).
    fn count_out(&self) -> i32 {
        self.region.fetch_add_i32(self.base + READERS_SLEEPING, -1).wrapping_sub(1)
    }

    /// After a sleep on the readers' bell that found it rung: wakes the other sleepers, once per
    /// ring (the first reader woken for a ring wakes the rest; the others, woken by it, find the
    /// ring already passed on, or they would wake each other for ever). `threads`: wake the
    /// threads asleep on the bell; `reactors`: write the wake FIFO. The two are passed on apart
    /// (`READERS_PASSED`, `READERS_FD_PASSED`): a reactor sleeper passes a ring on only to the
    /// threads (the FIFO write that woke it woke every reactor sleeper), and must not stop a
    /// thread woken for the same ring from writing the FIFO when that ring woke no reactor.
    fn pass_on(&self, threads: bool, reactors: bool) {
        let now = self.region.load_i32(self.base + READERS_BELL, Ordering::Acquire);
        if threads && self.region.swap_i32(self.base + READERS_PASSED, now) != now {
            self.region.wake_i32(self.base + READERS_BELL, i32::MAX);
        }
        if reactors {
            pass_to_reactors(&self.region, self.base, &READERS_SIDE, now, self.fanout.as_deref());
        }
    }

    /// Threads counted asleep on the readers' bell.
    fn thread_sleepers(&self) -> i32 {
        self.region.load_i32(self.base + READERS_SLEEPING, Ordering::SeqCst)
    }
}

/// The writer, after a commit: wakes sleeping readers, if any. One barrier and one load when
/// nobody sleeps. Takes the slot file's region itself (no view of the doorbell is built per
/// commit) and the stream's wake FIFO as a function, asked only when a reader is armed.
///
/// # Safety
/// `region` holds a whole doorbell page at `base`, and `base` is 4-aligned.
#[inline(always)]
pub(crate) unsafe fn ring_readers_at<'f, R: RegionMut>(
    region: &R,
    base: usize,
    barrier: LightBarrier,
    fanout: impl FnOnce() -> Option<&'f Fanout>,
) {
    // SAFETY: the caller's contract.
    unsafe { ring_at(region, base, barrier, &READERS_SIDE, fanout) }
}

/// A ring of `side`'s bell: the barrier, one load of *armed*, and the cold [`wake`] if set.
///
/// # Safety
/// As [`ring_readers_at`].
#[inline(always)]
unsafe fn ring_at<'f, R: RegionMut>(
    region: &R,
    base: usize,
    barrier: LightBarrier,
    side: &'static Side,
    fanout: impl FnOnce() -> Option<&'f Fanout>,
) {
    if protocol::doorbell_barrier() {
        barrier.issue();
    }
    // SAFETY: the doorbell lies in the region, 4-aligned (the caller's contract), and so does
    // each of its words.
    if unsafe { region.load_i32_unchecked(base + side.armed, Ordering::Relaxed) } != 0 {
        wake(region, base, side, fanout);
    }
}

/// Someone armed `side`'s bell: bumps it and wakes one sleeper, who passes the ring on. With
/// no thread asleep on the bell and only a few reactor sleepers, the wake FIFO wakes those
/// directly (one hop each); with more, a thread on the bell (a waiter keeping the door) is
/// woken and writes the FIFO, so a publisher with N sleepers pays for one wake-up, not N;
/// with nobody on the bell the FIFO is written all the same (a wake-up is never skipped).
/// `fanout` is asked here, off the hot path.
#[cold]
#[inline(never)]
fn wake<'f, R: RegionMut>(
    region: &R,
    base: usize,
    side: &'static Side,
    fanout: impl FnOnce() -> Option<&'f Fanout>,
) {
    if region.swap_i32(base + side.armed, 0) == 0 {
        return;
    }
    let now = region.fetch_add_i32(base + side.bell, 1).wrapping_add(1);
    // The bump before the counts: a sleeper counts itself in, fences (the kernel's futex
    // barrier, or `barrier`), then reads the bell; we bump, fence, then read its count.
    // One fence precedes the other, so it sees our bump or we see it counted.
    count_fence();
    let reactors = fd_sleepers(region, base, side);
    let threads = side.sleeping.map_or(1, |w| region.load_i32(base + w, Ordering::SeqCst));
    let fanout = if reactors > 0 { fanout() } else { None };
    if reactors > 0
        && reactors <= DIRECT_FD_WAKE
        && threads <= 0
        && pass_to_reactors(region, base, side, now, fanout)
    {
        return;
    }
    // The writers' bell counts no thread sleepers and passes no ring on, and several writers of
    // a concurrent log may sleep on it: a ring wakes them all (one futex call either way), and
    // its reactor sleepers too, the FIFO first: a reactor's wake-up is the longer way, so it
    // starts before the futex call, which finds no thread asleep when only a reactor waits.
    if side.sleeping.is_none() {
        if reactors > 0 {
            pass_to_reactors(region, base, side, now, fanout);
        }
        region.wake_i32(base + side.bell, i32::MAX);
        return;
    }
    let woken = region.wake_i32(base + side.bell, 1);
    if reactors > 0 && woken == 0 {
        pass_to_reactors(region, base, side, now, fanout);
    }
}

/// Reactor sleepers counted on `side`'s bell (a forged count is harmless: at worst a FIFO
/// write too many, or the liveness timeout of the sleepers it hid).
fn fd_sleepers<R: RegionMut>(region: &R, base: usize, side: &Side) -> i32 {
    if !protocol::doorbell_count_reactor_sleepers() {
        return 0;
    }
    region.load_i32(base + side.fd_sleeping, Ordering::SeqCst)
}

/// Writes the wake FIFO for ring `now` of `side`'s bell, unless that ring of the readers'
/// bell was written already (each ring reaches the reactor sleepers once; the writer's bell
/// has one sleeper, and its values are not the readers'). `false` if there is no FIFO to
/// write (then the caller wakes a thread instead).
fn pass_to_reactors<R: RegionMut>(
    region: &R,
    base: usize,
    side: &Side,
    now: i32,
    fanout: Option<&Fanout>,
) -> bool {
    let Some(fanout) = fanout else { return false };
    if side.sleeping.is_none() {
        return fanout.ring();
    }
    if protocol::doorbell_reactor_passed_apart() {
        if region.swap_i32(base + READERS_FD_PASSED, now) == now {
            return true;
        }
    } else if region.swap_i32(base + READERS_PASSED, now) == now {
        return true;
    }
    fanout.ring()
}

/// The words of one bell.
#[derive(Debug)]
struct Side {
    armed: usize,
    bell: usize,
    /// The count of threads asleep on it (the readers' bell counts them; the writers' bell does
    /// not: each ring wakes all of its sleepers, the writers of a concurrent log).
    sleeping: Option<usize>,
    fd_sleeping: usize,
}

static READERS_SIDE: Side = Side {
    armed: READERS_ARMED,
    bell: READERS_BELL,
    sleeping: Some(READERS_SLEEPING),
    fd_sleeping: READERS_FD_SLEEPING,
};
static WRITER_SIDE: Side =
    Side { armed: WRITER_ARMED, bell: WRITER_BELL, sleeping: None, fd_sleeping: WRITER_FD_SLEEPING };

impl Armed {
    #[cfg_attr(not(feature = "async"), allow(dead_code))] // used by the reactor path
    fn side(self) -> &'static Side {
        if self.bell == WRITER_BELL {
            &WRITER_SIDE
        } else {
            &READERS_SIDE
        }
    }
}

/// How a [`sleep_until`] ended, and which bells rang.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slept {
    pub rung: Rung,
    /// Bit `i` for bell `i` that rang while armed (bit 63 also stands for every bell past it).
    pub rang: u64,
}

/// A reader's sleep on the readers' bells of `bells` (`None`: a stream with no bell to sleep
/// on), in the steps of the module docs: arms each, issues the [`barrier`], looks once more
/// (`ready`), and only then [`sleep`]s, at most `timeout` (at most [`NAP`] if the barrier was
/// refused, or if no bell is there at all). Every blocking way for a reader to wait goes
/// through here; the async receiver takes the same first steps ([`prepare_sleep`]) and leaves
/// the sleep to its waiter thread.
pub(crate) fn sleep_until<R: RegionMut>(
    bells: &[Option<&Doorbell<R>>],
    ready: impl FnOnce() -> bool,
    timeout: Duration,
) -> Slept {
    let bit = |i: usize| 1u64 << i.min(63);
    match bells {
        [Some(bell)] => {
            let Some((armed, timeout)) = prepare_sleep(bell, Doorbell::arm_readers, ready, timeout) else {
                return Slept { rung: Rung::Ready, rang: 0 };
            };
            let rung = sleep(&[(*bell, armed)], &[], timeout);
            Slept { rung, rang: if bell.rang(armed) { 1 } else { 0 } }
        }
        _ if bells.iter().all(Option::is_none) => {
            std::thread::sleep(timeout.min(NAP));
            Slept { rung: Rung::TimedOut, rang: 0 }
        }
        _ => {
            let armed: Vec<_> = bells
                .iter()
                .enumerate()
                .filter_map(|(i, b)| b.map(|bell| (i, bell, bell.arm_readers())))
                .collect();
            let timeout = if barrier() { timeout } else { timeout.min(NAP) };
            if protocol::doorbell_recheck() && ready() {
                return Slept { rung: Rung::Ready, rang: 0 };
            }
            let words: Vec<_> = armed.iter().map(|&(_, bell, a)| (bell, a)).collect();
            let rung = sleep(&words, &[], timeout);
            let rang = armed.iter().filter(|(_, bell, a)| bell.rang(*a)).fold(0, |m, &(i, ..)| m | bit(i));
            Slept { rung, rang }
        }
    }
}

/// The first steps of a sleep on `bell`: arms it with `arm` ([`Doorbell::arm_readers`] or
/// [`Doorbell::arm_writer`]), issues the [`barrier`] and looks once more. `None` if `ready`
/// (do not sleep); otherwise the armed bell and how long the sleep may last (`timeout`, or
/// [`NAP`] if the barrier was refused). The caller then [`sleep`]s, or hands the armed bell to
/// a thread that sleeps for it.
pub(crate) fn prepare_sleep<R: RegionMut>(
    bell: &Doorbell<R>,
    arm: impl FnOnce(&Doorbell<R>) -> Armed,
    ready: impl FnOnce() -> bool,
    timeout: Duration,
) -> Option<(Armed, Duration)> {
    let armed = arm(bell);
    let timeout = if barrier() { timeout } else { timeout.min(NAP) };
    if protocol::doorbell_recheck() && ready() {
        return None;
    }
    Some((armed, timeout))
}

/// The first steps of a sleep in an async runtime's reactor on `bell` (the readers' bell with
/// [`Doorbell::arm_readers`], the writer's with [`Doorbell::arm_writer`]): arms it, counts the
/// sleeper among the bell's reactor sleepers, issues the [`barrier`], looks once more, and checks
/// that the bell has not rung since it armed. `None` if it need not sleep (then it is counted out
/// again, and a ring it found is passed on). Otherwise the armed bell and how long the sleep may
/// last; the task then sleeps until the stream's wake FIFO is written (a ringer that sees it
/// counted writes the FIFO, or wakes a thread that does), and calls [`finish_reactor_sleep`] when
/// it runs again. The caller must have registered its interest in the FIFO (its readiness
/// cleared, its waker stored) before this: a write after the count is then an event it sees.
#[cfg_attr(not(feature = "async"), allow(dead_code))] // used by the reactor path
pub(crate) fn prepare_reactor_sleep<R: RegionMut>(
    bell: &Doorbell<R>,
    arm: impl FnOnce(&Doorbell<R>) -> Armed,
    ready: impl FnOnce() -> bool,
    timeout: Duration,
) -> Option<(ReactorArmed, Duration)> {
    let armed = ReactorArmed(arm(bell));
    if protocol::doorbell_count_reactor_sleepers() {
        bell.region.fetch_add_i32(bell.base + armed.0.side().fd_sleeping, 1);
    }
    let timeout = if barrier() { timeout } else { timeout.min(NAP) };
    // Rung since we armed: a ringer may have read the reactor count before we were in it, so no
    // FIFO write of its may come (a thread's futex wait fails on the changed word instead).
    if (protocol::doorbell_recheck() && ready())
        || (protocol::doorbell_reactor_rang_check() && bell.rang(armed.0))
    {
        finish_reactor_sleep(bell, armed);
        return None;
    }
    Some((armed, timeout))
}

/// After a reactor sleep (the task runs again, or is dropped): counts the sleeper out and, if
/// the readers' bell rang since it armed, passes the ring on to the threads asleep on the bell
/// (the ringer may have written only the FIFO). Returns whether the bell rang.
#[cfg_attr(not(feature = "async"), allow(dead_code))] // used by the reactor path
pub(crate) fn finish_reactor_sleep<R: RegionMut>(bell: &Doorbell<R>, armed: ReactorArmed) -> bool {
    let armed = armed.0;
    if protocol::doorbell_count_reactor_sleepers() {
        bell.region.fetch_add_i32(bell.base + armed.side().fd_sleeping, -1);
    }
    let rang = bell.rang(armed);
    if rang && armed.bell == READERS_BELL && protocol::doorbell_wake_others() && bell.thread_sleepers() > 0 {
        bell.pass_on(true, false);
    }
    rang
}

/// A thread keeping the door of `bell` for its process's reactor sleepers: it sleeps on the
/// readers' bell uncounted ([`keep_door`]), so a ringer with many reactor sleepers wakes it (one
/// wake-up) and leaves the FIFO write, which wakes them all, to it. Returns the bell's value, to
/// sleep on.
#[cfg_attr(not(feature = "async"), allow(dead_code))] // used by the reactor path
pub(crate) fn door<R: RegionMut>(bell: &Doorbell<R>) -> Armed {
    Armed { bell: READERS_BELL, seen: bell.region.load_i32(bell.base + READERS_BELL, Ordering::Acquire) }
}

/// After a doorkeeper's sleep: if the bell rang since `door` was read, passes the ring on to the
/// reactor sleepers (and to threads asleep on the bell, which a ring reaching a doorkeeper
/// did not reach). Returns the value to sleep on next.
#[cfg_attr(not(feature = "async"), allow(dead_code))] // used by the reactor path
pub(crate) fn keep_door<R: RegionMut>(bell: &Doorbell<R>, door: Armed) -> Armed {
    if bell.rang(door) {
        let threads = bell.thread_sleepers() > 0;
        let reactors = fd_sleepers(&bell.region, bell.base, &READERS_SIDE) > 0;
        if threads || reactors {
            bell.pass_on(threads, reactors);
        }
    }
    self::door(bell)
}

/// A ringer's full fence between bumping a bell and reading who is counted asleep on it (cold:
/// only a ring that found the bell armed pays it). A SeqCst read-modify-write then a SeqCst
/// load are ordered by the language already; the fence says so where the protocol relies on it,
/// and is what the loom model checks (loom takes SeqCst accesses for AcqRel).
#[inline(always)]
fn count_fence() {
    if protocol::doorbell_count_fence() {
        crate::sync::fence(Ordering::SeqCst);
    }
}

/// The sleeper's barrier, after arming every bell it will sleep on and before its last look at
/// what it waits for. `false` if the kernel refused the part that makes a hot side's light
/// barrier enough: then the caller sleeps at most [`NAP`] and looks again.
pub(crate) fn barrier() -> bool {
    !protocol::doorbell_barrier() || crate::sync::heavy_barrier()
}

/// The last step of a sleep: sleeps on every armed bell of `bells` (and on the words of `extra`,
/// uncounted: a word of the caller's that another thread bumps to interrupt it, the doors the
/// async waiter keeps) until one rings or `timeout` passes. A sleeper on a readers' bell counts itself in while it sleeps
/// and, if the bell rang, passes the ring on to the other sleepers (see the module docs). The
/// caller armed each bell, issued [`barrier`] and looked once more before calling this.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn sleep<R: RegionMut>(
    bells: &[(&Doorbell<R>, Armed)],
    extra: &[(&R, usize, i32)],
    timeout: Duration,
) -> Rung {
    let counted = |a: &Armed| protocol::doorbell_count_sleepers() && a.bell == READERS_BELL;
    for (bell, armed) in bells {
        if counted(armed) {
            bell.count_in();
        }
    }
    let woken = match (bells, extra) {
        ([(bell, armed)], []) => {
            let (region, off, seen) = bell.word(*armed);
            region.wait_i32(off, seen, timeout)
        }
        _ => {
            let words: Vec<(&R, usize, i32)> =
                extra.iter().copied().chain(bells.iter().map(|(bell, armed)| bell.word(*armed))).collect();
            R::wait_any_i32(&words, timeout).unwrap_or_else(|_| {
                // No sleep on several words: the first, briefly; the caller looks again.
                let (region, off, seen) = words[0];
                region.wait_i32(off, seen, timeout.min(NAP))
            })
        }
    };
    for (bell, armed) in bells {
        if counted(armed) {
            let others = bell.count_out();
            // Rung since we armed: the writer's single wake-up may have been ours.
            if protocol::doorbell_wake_others() && bell.rang(*armed) {
                let reactors = fd_sleepers(&bell.region, bell.base, &READERS_SIDE) > 0;
                if others > 0 || reactors {
                    bell.pass_on(others > 0, reactors);
                }
            }
        }
    }
    if woken {
        Rung::Woken
    } else {
        Rung::TimedOut
    }
}

/// The stream's wake FIFO as a ringer holds it: the file beside the slot file, opened the first
/// time it is rung (a stream nobody awaits in a reactor never opens it).
#[cfg(not(shmlog_loom))]
mod fanout {
    use std::fs::File;
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    #[derive(Debug)]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub struct Fanout {
        #[cfg_attr(not(feature = "async"), allow(dead_code))] // used by the reactor path
        slot_file: PathBuf,
        path: PathBuf,
        fifo: Mutex<Option<File>>,
    }

    impl Fanout {
        /// The wake FIFO of the stream whose slot file is `slot_file`: `NAME.wake` beside
        /// `NAME.readers`.
        pub(crate) fn of(slot_file: &Path) -> Self {
            Self {
                slot_file: slot_file.into(),
                path: slot_file.with_extension("wake"),
                fifo: Mutex::new(None),
            }
        }

        pub(crate) fn path(&self) -> &Path {
            &self.path
        }

        /// The stream's slot file, whose permissions the FIFO takes.
        #[cfg_attr(not(feature = "async"), allow(dead_code))] // used by the reactor path
        pub(crate) fn slot_file(&self) -> &Path {
            &self.slot_file
        }

        /// Writes the FIFO (opening it first if need be): every reactor watching it wakes.
        /// `false` if there is none or it cannot be written.
        pub(crate) fn ring(&self) -> bool {
            let mut fifo = self.fifo.lock().unwrap_or_else(|e| e.into_inner());
            if fifo.is_none() {
                *fifo = crate::sys::fanout::open(&self.path).ok();
            }
            fifo.as_ref().is_some_and(crate::sys::fanout::ring)
        }
    }
}

/// The loom model of the wake FIFO: a count of writes and a condition variable. A reactor
/// sleeper takes the count when it registers its interest ([`Fanout::token`]) and sleeps until a
/// write past it ([`Fanout::wait_past`]): an edge-triggered registration, which sees every write
/// made after it.
#[cfg(shmlog_loom)]
mod fanout {
    use loom::sync::{Condvar, Mutex};

    #[derive(Debug, Default)]
    pub(crate) struct Fanout {
        writes: Mutex<u64>,
        written: Condvar,
    }

    impl Fanout {
        pub(crate) fn ring(&self) -> bool {
            *self.writes.lock().unwrap() += 1;
            self.written.notify_all();
            true
        }

        pub(crate) fn token(&self) -> u64 {
            *self.writes.lock().unwrap()
        }

        pub(crate) fn wait_past(&self, token: u64) {
            let mut writes = self.writes.lock().unwrap();
            while *writes == token {
                writes = self.written.wait(writes).unwrap();
            }
        }
    }
}

/// Bounds what a peer that keeps changing a bell can cost a sleeper: a wake-up that brings no
/// news within [`NAP`] of another such wake-up means the next sleep is a plain nap of [`NAP`]
/// (the bell is not watched meanwhile). Honest wake-ups without news (a new session, a ring
/// passed on to a reader on another session) are rare and single.
#[derive(Clone, Copy, Debug, Default)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct WakeBudget {
    last_empty: Option<Instant>,
}

impl WakeBudget {
    /// After a wake-up: `news` says whether it brought any. Returns how long to nap instead of
    /// sleeping on the bell next time (or `None`).
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn after_wake(&mut self, news: bool) -> Option<Duration> {
        if news {
            self.last_empty = None;
            return None;
        }
        let now = Instant::now();
        let nap = self.last_empty.is_some_and(|t| now.saturating_duration_since(t) < NAP);
        self.last_empty = Some(now);
        nap.then_some(NAP)
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
        bell.ring_readers(LightBarrier::Full, None);
        assert_eq!(region.load_i32(DOORBELL + READERS_ARMED, Ordering::Relaxed), 0);
        assert_eq!(region.load_i32(DOORBELL + READERS_BELL, Ordering::Relaxed), 1);
        bell.ring_readers(LightBarrier::Full, None);
        assert_eq!(region.load_i32(DOORBELL + READERS_BELL, Ordering::Relaxed), 1, "nobody armed: no ring");
        let start = Instant::now();
        assert_eq!(bell.wait_for_readers(|| false, Duration::from_millis(20)), Rung::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    /// The sleeper count is writable by every reader: no value of it may panic a sleeper (the
    /// review's T7: `fetch_add(-1) - 1` overflowed in debug builds at `i32::MIN`).
    #[test]
    fn a_forged_sleeper_count_panics_nobody() {
        let (region, bell) = bell();
        for forged in [i32::MAX, i32::MIN, -1, 0] {
            region.store_i32(DOORBELL + READERS_SLEEPING, forged, Ordering::Relaxed);
            let armed = bell.arm_readers();
            region.fetch_add_i32(DOORBELL + READERS_BELL, 1); // rung: the pass-on runs too
            assert_eq!(sleep(&[(&bell, armed)], &[], Duration::from_millis(1)), Rung::Woken);
            assert_eq!(region.load_i32(DOORBELL + READERS_SLEEPING, Ordering::Relaxed), forged);
        }
    }

    #[test]
    fn every_wake_without_news_after_the_first_in_a_millisecond_is_a_nap() {
        let mut budget = WakeBudget::default();
        assert_eq!(budget.after_wake(false), None, "a single wake-up without news is honest");
        assert_eq!(budget.after_wake(false), Some(NAP), "two in a row within a millisecond");
        assert_eq!(budget.after_wake(true), None);
        assert_eq!(budget.after_wake(false), None, "news resets the budget");
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
        bell.ring_readers(LightBarrier::Full, None);
        let slept = sleeper.join().unwrap();
        assert!(slept < Duration::from_secs(30), "woken, not timed out");
    }
}
