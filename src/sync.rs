//! The one place that names atomics and fences, and the protocol's ordering knobs.
//!
//! Under `--cfg shmlog_loom` the in-process types come from loom so the model checker can explore
//! every interleaving; otherwise they are `std`'s. Code that overlays atomics on raw shared memory
//! (the region layer) always uses `std` directly, because loom cannot place its atomics on memory
//! it does not own; the loom region models the same words with loom atomics instead.

#![allow(clippy::disallowed_types)] // the one module allowed to name std's atomics

#[cfg(shmlog_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicI32, AtomicI64, Ordering};

#[cfg(not(shmlog_loom))]
pub(crate) use std::sync::atomic::{fence, Ordering};

/// Atomics that overlay raw memory (mmap and the std heap backend). Never loom.
#[cfg(not(shmlog_loom))]
pub(crate) mod raw {
    pub(crate) use std::sync::atomic::{AtomicI32, AtomicI64};
}

#[cfg(not(shmlog_loom))]
const _: () = {
    // Shared memory is only sound if these are real lock-free instructions.
    assert!(cfg!(target_has_atomic = "64"));
    assert!(cfg!(target_has_atomic = "32"));
};

/// The hot side's barrier of a doorbell (`stream::doorbell`): after publishing, before looking
/// for sleepers. A compiler barrier where the process registered for asymmetric barriers
/// (`sys::barrier`), a full fence otherwise, and always in the loom model. Decided once (a
/// process registers before it creates a publication), so a hot path can keep the answer in a
/// field it already reads instead of loading it each time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LightBarrier {
    /// A compiler barrier: the process is registered, sleepers' heavy barriers do the rest.
    Compiler,
    /// A full fence.
    Full,
}

impl LightBarrier {
    #[inline(always)]
    pub(crate) fn issue(self) {
        match self {
            LightBarrier::Compiler => std::sync::atomic::compiler_fence(Ordering::SeqCst),
            LightBarrier::Full => fence(Ordering::SeqCst),
        }
    }
}

/// The barrier a hot side issues in this process now (always `Full` in the loom model).
#[inline(always)]
pub(crate) fn light_barrier_kind() -> LightBarrier {
    #[cfg(not(shmlog_loom))]
    if crate::sys::barrier::registered() {
        return LightBarrier::Compiler;
    }
    LightBarrier::Full
}

/// The sleeping side's barrier of a doorbell: after announcing itself, before its last look.
/// `false` if the kernel refused the part that makes a registered hot side's compiler barrier a
/// full one.
pub(crate) fn heavy_barrier() -> bool {
    #[cfg(not(shmlog_loom))]
    return crate::sys::barrier::heavy();
    #[cfg(shmlog_loom)]
    {
        fence(Ordering::SeqCst);
        true
    }
}

/// The orderings and steps the protocol's correctness rests on, each named once.
///
/// Each is a knob with a sound setting and a broken one (a *mutant*). Production builds have only
/// the sound setting: `mutant` is a `const fn` returning `false`, so every knob folds to a
/// constant. Model-checking builds (`--cfg shmlog_loom`, or `--cfg shmlog_mutants` for the TSan
/// check) read the environment variable `SHMLOG_MUTANT` once: `.ci/loom.sh` runs the one loom
/// test binary once per mutant name and asserts that the models aimed at it fail, proving the
/// models can see the bug each knob stands for (one build for all mutants, not one each).
pub(crate) mod protocol {
    use super::Ordering;

    /// Whether the mutant `name` is selected (never in production builds).
    #[cfg(not(any(shmlog_loom, shmlog_mutants)))]
    #[inline(always)]
    const fn mutant(_name: &str) -> bool {
        false
    }

    /// Whether the mutant `name` is selected by `SHMLOG_MUTANT` (model-checking builds only).
    #[cfg(any(shmlog_loom, shmlog_mutants))]
    fn mutant(name: &str) -> bool {
        static SELECTED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let selected = SELECTED.get_or_init(|| std::env::var("SHMLOG_MUTANT").unwrap_or_default());
        if !selected.is_empty() && !NAMES.contains(&selected.as_str()) {
            panic!("SHMLOG_MUTANT={selected}: no such mutant (known: {NAMES:?})");
        }
        selected == name
    }

    /// The store of a frame length that commits a frame (I1).
    /// Mutant: `relaxed_commit`.
    #[inline(always)]
    pub(crate) fn commit() -> Ordering {
        if mutant("relaxed_commit") {
            Ordering::Relaxed
        } else {
            Ordering::Release
        }
    }

    /// The store that publishes a reader's position (I2, I3: the writer may reuse what is behind it).
    /// Mutant: `relaxed_position`.
    #[inline(always)]
    pub(crate) fn position() -> Ordering {
        if mutant("relaxed_position") {
            Ordering::Relaxed
        } else {
            Ordering::Release
        }
    }

    /// The writer zeroes the next partition as it goes (I3).
    /// Mutant: `skip_clean`.
    #[inline(always)]
    pub(crate) fn clean() -> bool {
        !mutant("skip_clean")
    }

    /// A joining reader's SeqCst fence between publishing its slot and re-reading the writer's
    /// position (I5).
    /// Mutant: `no_join_fence`.
    #[inline(always)]
    pub(crate) fn join_fence() -> bool {
        !mutant("no_join_fence")
    }

    /// The writer's SeqCst fence before it reads the reader slots (I5).
    /// Mutant: `no_recompute_fence`.
    #[inline(always)]
    pub(crate) fn recompute_fence() -> bool {
        !mutant("no_recompute_fence")
    }

    /// The sweep frees a dead reader's slot while it holds the slot's lock (I6).
    /// Mutant: `evict_unlocked`.
    #[inline(always)]
    pub(crate) fn evict_under_lock() -> bool {
        !mutant("evict_unlocked")
    }

    /// The writer distrusts slot words: it ignores positions past its own, sets its limit no
    /// further than a window past its own position whatever the slots say, and recomputes its
    /// limit at every rotation whatever the cached one says (any one of them keeps a forged word
    /// from hiding a joiner for good; the mutant drops all three).
    /// Mutant: `trust_slot_words`.
    #[inline(always)]
    pub(crate) fn distrust_slots() -> bool {
        !mutant("trust_slot_words")
    }

    /// Both sides of a doorbell issue their barrier between publishing and looking at the other
    /// side's word (no lost wake-up).
    /// Mutant: `no_doorbell_barrier`.
    #[inline(always)]
    pub(crate) fn doorbell_barrier() -> bool {
        !mutant("no_doorbell_barrier")
    }

    /// A sleeper reads the bell before it arms: a waker that clears its arm then bumps the bell
    /// past the value it sleeps on. (Arming first loses a wake-up when a waker's late clear,
    /// meant for an earlier arm, swallows the new one: loom found it.)
    /// Mutant: `doorbell_arm_first`.
    #[inline(always)]
    pub(crate) fn doorbell_bell_first() -> bool {
        !mutant("doorbell_arm_first")
    }

    /// The writer wakes one sleeping reader; a woken reader that sees other readers asleep wakes
    /// them all (without it, the other sleepers miss the commit).
    /// Mutant: `no_doorbell_pass_on`.
    #[inline(always)]
    pub(crate) fn doorbell_wake_others() -> bool {
        !mutant("no_doorbell_pass_on")
    }

    /// Every reader sleeping on the readers' bell counts itself among its sleepers, whichever
    /// way it sleeps (one bell, several, or through the async waiter thread): the reader the
    /// writer's single wake-up reaches learns from the count whom to pass it on to.
    /// Mutant: `uncounted_sleeper`.
    #[inline(always)]
    pub(crate) fn doorbell_count_sleepers() -> bool {
        !mutant("uncounted_sleeper")
    }

    /// Every reader or writer asleep in an async runtime's reactor counts itself among the bell's
    /// reactor sleepers: whoever rings the bell (or passes a ring on) writes the wake FIFO only
    /// when it sees one counted.
    /// Mutant: `uncounted_reactor_sleeper`.
    #[inline(always)]
    pub(crate) fn doorbell_count_reactor_sleepers() -> bool {
        !mutant("uncounted_reactor_sleeper")
    }

    /// A reactor sleeper, once counted, checks that the bell has not rung since it armed before
    /// it sleeps (a ringer that read the count before it was in it writes no FIFO for it).
    /// Mutant: `reactor_no_rang_check`.
    #[inline(always)]
    #[cfg_attr(not(feature = "async"), allow(dead_code))] // used by the reactor path
    pub(crate) fn doorbell_reactor_rang_check() -> bool {
        !mutant("reactor_no_rang_check")
    }

    /// A ringer fences between bumping a bell and reading the counts of its sleepers (threads
    /// and reactor sleepers), so a sleeper that counted itself in and then read the bell
    /// unchanged is seen counted.
    /// Mutant: `no_count_fence`.
    #[inline(always)]
    pub(crate) fn doorbell_count_fence() -> bool {
        !mutant("no_count_fence")
    }

    /// A ring is passed on to the threads on the bell and to the reactor sleepers (the wake
    /// FIFO) each under a word of its own: a reactor sleeper passing a ring on to the threads
    /// must not stop a thread woken for it from writing the FIFO.
    /// Mutant: `one_passed_word`.
    #[inline(always)]
    pub(crate) fn doorbell_reactor_passed_apart() -> bool {
        !mutant("one_passed_word")
    }

    /// A sleeper looks once more after arming the bell, before it sleeps (no lost wake-up).
    /// Mutant: `no_doorbell_recheck`.
    #[inline(always)]
    pub(crate) fn doorbell_recheck() -> bool {
        !mutant("no_doorbell_recheck")
    }

    /// The store of a catalog record's state that publishes the fields written before it.
    /// Mutant: `relaxed_catalog`.
    #[inline(always)]
    pub(crate) fn catalog_publish() -> Ordering {
        if mutant("relaxed_catalog") {
            Ordering::Relaxed
        } else {
            Ordering::Release
        }
    }

    /// Recovery fences between counting a cut in a catalog record and zeroing the recording's
    /// bytes past it, so a replay that read a zero sees the count (seqlock).
    /// Mutant: `no_cut_fence`.
    #[inline(always)]
    pub(crate) fn cut_fence() -> bool {
        !mutant("no_cut_fence")
    }

    /// A truncation keeps the stop it cuts back from before it lowers the record's positions,
    /// so a reader that loads the lowered stop sees the old one. Mutant: `cut_from_after_cut`.
    #[inline(always)]
    pub(crate) fn cut_from_first() -> bool {
        !mutant("cut_from_after_cut")
    }

    /// Whoever reuses a deleted recording's catalog record fences (release) before writing a
    /// word of it, so a reader that loads one of those words and then fences sees the record
    /// freed (seqlock over the id and state). Mutant: `unfenced_reuse`.
    #[inline(always)]
    pub(crate) fn reuse_fence() -> bool {
        !mutant("unfenced_reuse")
    }

    /// Retention moves a recording's start position up before it removes the segment files
    /// below it (not after). Mutant: `unlink_before_start`.
    #[inline(always)]
    pub(crate) fn start_before_unlink() -> bool {
        !mutant("unlink_before_start")
    }

    /// A durable reader's position record is a seqlock: its writer fences (release) after
    /// making the sequence odd and before writing the position. Mutant: `unfenced_reader_position`.
    #[inline(always)]
    pub(crate) fn reader_position_fence() -> bool {
        !mutant("unfenced_reader_position")
    }

    /// A concurrent writer publishes its pending position before its tail CAS (not after).
    /// Mutant: `pending_after_reserve`.
    #[inline(always)]
    pub(crate) fn pending_before_reserve() -> bool {
        !mutant("pending_after_reserve")
    }

    /// A concurrent writer zeroes its share of the next partition before it clears its pending
    /// position (not after).
    /// Mutant: `release_before_clean`.
    #[inline(always)]
    pub(crate) fn clean_before_release() -> bool {
        !mutant("release_before_clean")
    }

    /// A concurrent writer's recompute compares reader positions with the shared tail re-read
    /// after them, not only with the tail it loaded before its fence (T2 of the 2026-11-27
    /// review: the mutant drops honest readers that a fast read took past the stale tail, and
    /// reports `NotConnected` while they read).
    /// Mutant: `stale_ceiling`.
    #[inline(always)]
    pub(crate) fn fresh_ceiling() -> bool {
        !mutant("stale_ceiling")
    }

    /// A concurrent writer rotating to term `n + 1` resets the next partition's tail only from
    /// the term three back (`n - 2`), the term that partition held; a writer that found term `n`
    /// full after another writer rotated and reserved in `n + 1` leaves that tail alone.
    /// Mutant: `rotate_unchecked`.
    #[inline(always)]
    pub(crate) fn rotate_from_three_back() -> bool {
        !mutant("rotate_unchecked")
    }

    /// One unblocker at a time: the unblocker runs under the log's unblock lock.
    /// Mutant: `unblock_unlocked`.
    #[inline(always)]
    pub(crate) fn unblock_under_lock() -> bool {
        !mutant("unblock_unlocked")
    }

    /// An untethered reader checks, after copying frames out of the log, that the writer had
    /// not begun to reuse their partition (`log::reader::lapped`): the mutant trusts the copy.
    /// Mutant: `skip_copy_check`.
    #[inline(always)]
    pub(crate) fn copy_check() -> bool {
        !mutant("skip_copy_check")
    }

    /// An unblocker waits while a live writer's pending position lies at or before the hole.
    /// Mutant: `unblock_over_live`.
    #[inline(always)]
    pub(crate) fn unblock_spares_live() -> bool {
        !mutant("unblock_over_live")
    }

    /// A writer's scan counts the readers its session is owed to (waiting for a later session, or
    /// still in an older one) at the session's start, until they join.
    /// Mutant: `ignore_owed_readers`.
    #[inline(always)]
    pub(crate) fn count_owed_readers() -> bool {
        !mutant("ignore_owed_readers")
    }

    /// A waiting reader's SeqCst fence between its waiting word and its re-read of the stream's
    /// session counter (pairs with the writer's recompute fence).
    /// Mutant: `no_owed_fence`.
    #[inline(always)]
    pub(crate) fn owed_fence() -> bool {
        !mutant("no_owed_fence")
    }

    /// The unblocker issues a release fence before it writes any byte of a dead writer's hole
    /// or of the next partition, after the tail load that found the hole: an untethered reader
    /// that copied one of those bytes then sees that tail (`log::reader::lapped`).
    /// Mutant: `no_unblock_fence`.
    #[inline(always)]
    pub(crate) fn unblock_fence() -> bool {
        !mutant("no_unblock_fence")
    }

    /// A log's statistics counters are added to with a compare-and-swap, so increments of several
    /// writers at once all count (`Log::count`).
    /// Mutant: `lossy_count` (a load then a store).
    #[inline(always)]
    pub(crate) fn exact_count() -> bool {
        !mutant("lossy_count")
    }

    /// Every mutant name, for `.ci/loom.sh` and for refusing a misspelt one.
    #[cfg(any(shmlog_loom, shmlog_mutants))]
    pub(crate) const NAMES: &[&str] = &[
        "relaxed_commit",
        "relaxed_position",
        "skip_clean",
        "no_join_fence",
        "no_recompute_fence",
        "evict_unlocked",
        "trust_slot_words",
        "no_doorbell_barrier",
        "doorbell_arm_first",
        "no_doorbell_pass_on",
        "uncounted_sleeper",
        "uncounted_reactor_sleeper",
        "reactor_no_rang_check",
        "one_passed_word",
        "no_count_fence",
        "no_doorbell_recheck",
        "relaxed_catalog",
        "no_cut_fence",
        "cut_from_after_cut",
        "unfenced_reuse",
        "unlink_before_start",
        "unfenced_reader_position",
        "pending_after_reserve",
        "release_before_clean",
        "stale_ceiling",
        "rotate_unchecked",
        "unblock_unlocked",
        "unblock_over_live",
        "skip_copy_check",
        "ignore_owed_readers",
        "no_owed_fence",
        "no_unblock_fence",
        "lossy_count",
    ];
}
