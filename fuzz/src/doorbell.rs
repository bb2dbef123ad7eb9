//! Fuzz target `doorbell`: the doorbell page's words as a hostile or broken peer may leave them.

use crate::input::Input;
use shmlog::__fuzz::doorbell::{self, Doorbell, Rung, WakeBudget};
use shmlog::__fuzz::slot_layout::{
    file_length, DOORBELL, READERS_ARMED, READERS_BELL, READERS_PASSED, READERS_SLEEPING, WRITER_ARMED,
    WRITER_BELL,
};
use shmlog::__fuzz::{HeapRegion, Ordering, Region, RegionMut};
use std::time::Duration;

const WORDS: [usize; 6] =
    [READERS_ARMED, READERS_BELL, WRITER_ARMED, WRITER_BELL, READERS_SLEEPING, READERS_PASSED];

/// Fuzz target `doorbell`: operations of the writer, of sleepers (the steps one by one, over one or
/// two views of the page) and of a peer that writes any value into any word of the page.
///
/// Properties: no panic (every word is read with wrapping arithmetic), no sleep longer than its
/// timeout; a ring that finds a sleeper armed clears the arm and moves the bell, so the sleeper's
/// [`Doorbell::rang`] is true and its sleep does not sleep; a sleep leaves the sleeper count as it
/// found it; a ring with nobody armed changes nothing; the wake budget naps only after two
/// wake-ups without news in a row.
pub fn doorbell(data: &[u8]) {
    let mut input = Input::new(data);
    let region = HeapRegion::new(file_length(1));
    let bell = Doorbell::new(&region, DOORBELL);
    let word = |w: usize| region.load_i32(DOORBELL + w, Ordering::Relaxed);
    let mut armed = None;
    let mut budget = WakeBudget::default();
    let mut empty_wakes = 0u32;
    while !input.is_empty() {
        match input.below(8) {
            // A peer writes anything anywhere on the page.
            0 => {
                let w = WORDS[input.below(WORDS.len())];
                region.store_i32(DOORBELL + w, input.interesting_i32(), Ordering::Relaxed);
            }
            // The writer rings after a commit.
            1 => {
                let (was_armed, bell_before) = (word(READERS_ARMED), word(READERS_BELL));
                doorbell::ring_readers(&bell);
                if was_armed != 0 {
                    assert_eq!(word(READERS_ARMED), 0, "a ring clears the arm");
                    assert_eq!(word(READERS_BELL), bell_before.wrapping_add(1), "and moves the bell");
                } else {
                    assert_eq!(word(READERS_BELL), bell_before, "nobody armed: no ring");
                }
            }
            2 => bell.ring_readers_always(None),
            3 => bell.ring_writer(),
            // A reader arms (one of the two bells).
            4 => armed = Some(if input.bool() { bell.arm_readers() } else { bell.arm_writer() }),
            // It sleeps on what it armed, briefly.
            5 => {
                let Some(a) = armed.take() else { continue };
                let rang = bell.rang(a);
                let sleeping = word(READERS_SLEEPING);
                let timeout = Duration::from_micros(input.below(50) as u64);
                let start = std::time::Instant::now();
                let rung = doorbell::sleep(&[(&bell, a)], &[], timeout);
                assert!(start.elapsed() < timeout + Duration::from_secs(5), "slept past its timeout");
                if rang {
                    assert_eq!(rung, Rung::Woken, "a rung bell does not let its sleeper sleep");
                }
                assert_eq!(word(READERS_SLEEPING), sleeping, "a sleep leaves the count as it found it");
            }
            // After arming, a ring reaches the sleeper.
            6 => {
                let a = bell.arm_readers();
                doorbell::ring_readers(&bell);
                assert!(bell.rang(a), "an armed sleeper misses no ring");
            }
            _ => {
                let news = input.bool();
                let nap = budget.after_wake(news);
                empty_wakes = if news { 0 } else { empty_wakes + 1 };
                if nap.is_some() {
                    assert!(empty_wakes >= 2, "a nap after a single wake-up without news");
                }
            }
        }
    }
}
