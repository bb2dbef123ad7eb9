//! Fuzz target `unblock`: the unblocker of a concurrent log over hostile words.

use crate::input::{small_geometry, Input, SESSION, STREAM};
use shmlog::__fuzz::meta::{self, MAX_WRITERS, NO_PENDING, PARTITION_COUNT};
use shmlog::__fuzz::reader::{self, InPlace};
use shmlog::__fuzz::{
    meta_field, pack_tail, resolve_dead, HeapRegion, Log, LogInit, Ordering, Region, RegionMut,
};
use shmlog::Action;

/// Fuzz target `unblock`: a concurrent log whose terms, tail counters, term count and writers
/// table hold fuzzed words (negative lengths, pending positions anywhere, a high-water mark past
/// the table), unblocked with a fuzzed set of live writers, then read.
///
/// Properties: no panic; the unblocker changes nothing but frames it pads, the next partition it
/// zeroes with them, and pending words it clears; every frame it pads had a zero or negative length, and is a padding frame of a
/// 32-aligned length that fits its term; it never clears a live writer's pending word, nor pads
/// at or after a live writer's pending position while that writer's frame is uncommitted; the
/// reader then reads the terms without a panic.
pub fn unblock(data: &[u8]) {
    let mut input = Input::new(data);
    let g = small_geometry(&mut input);
    let t = g.term_length;
    let initial = input.interesting_i32();
    let log = Log::initialize(
        HeapRegion::new(g.file_length()),
        &LogInit {
            geometry: g,
            initial_term_id: initial,
            session_id: SESSION,
            stream_id: STREAM,
            pid: 1,
            created_ns: 0,
            name: "fuzz",
            concurrent: true,
            session_seq: 1,
        },
    );
    let r = log.region();
    // Term bytes: raw, or length words only (zero, negative, positive).
    let mut image = vec![0u8; PARTITION_COUNT * t];
    for at in (0..image.len()).step_by(32) {
        match input.below(4) {
            0 => {}
            1 => image[at..at + 4].copy_from_slice(&(-(32 * (1 + input.below(8)) as i32)).to_le_bytes()),
            2 => image[at..at + 4].copy_from_slice(&(input.u32() as i32).to_le_bytes()),
            _ => {
                let src = input.bytes(32);
                image[at..at + src.len()].copy_from_slice(src);
            }
        }
    }
    // SAFETY: single-threaded; nothing reads the region while it is written.
    unsafe { r.copy_in(0, &image) };
    let count = input.below(5) as i32;
    let index = count as usize % PARTITION_COUNT;
    let tail = pack_tail(initial.wrapping_add(count), input.below(t + 64));
    r.store_i64(meta_field(&log, meta::TAIL_COUNTERS + 8 * index), tail, Ordering::Relaxed);
    r.store_i32(meta_field(&log, meta::ACTIVE_TERM_COUNT), count, Ordering::Relaxed);
    let writers = input.below(MAX_WRITERS + 8);
    r.store_i32(meta_field(&log, meta::WRITERS_HIGH_WATER), writers as i32, Ordering::Relaxed);
    let producer = log.producer_position().unwrap_or(0);
    for slot in 0..writers.min(MAX_WRITERS) {
        let pending = match input.below(4) {
            0 => NO_PENDING,
            1 => (producer - input.below(t) as i64) & !31,
            2 => producer - input.below(2 * t) as i64,
            _ => input.u32() as i64 - (1 << 31),
        };
        r.store_i64(meta_field(&log, meta::writer_field(slot, meta::W_PENDING)), pending, Ordering::Relaxed);
    }
    let alive: Vec<bool> = (0..MAX_WRITERS).map(|_| input.below(2) == 1).collect();
    let before_words: Vec<i64> = (0..MAX_WRITERS).map(|i| log.writer_pending(i)).collect();
    let mut before = vec![0u8; PARTITION_COUNT * t];
    r.copy_out(0, &mut before);

    let done = resolve_dead(&log, |slot| alive[slot]);

    let mut after = vec![0u8; PARTITION_COUNT * t];
    r.copy_out(0, &mut after);
    for slot in 0..MAX_WRITERS {
        let now = log.writer_pending(slot);
        if now != before_words[slot] {
            assert!(!alive[slot], "a live writer's pending word was cleared");
            assert_eq!(now, NO_PENDING, "a pending word changed to anything but clear");
        }
    }
    let live_holds: Vec<i64> = (0..writers.min(MAX_WRITERS))
        .filter(|&s| alive[s] && before_words[s] != NO_PENDING)
        .map(|s| before_words[s])
        .filter(|&p| p <= producer && p >= producer - t as i64 && p >= 0 && p % 32 == 0)
        .filter(|&p| {
            let terms = log.terms();
            let at = terms.partition(p) * t + terms.term_offset(p);
            i32::from_le_bytes(before[at..at + 4].try_into().unwrap()) <= 0
        })
        .collect();
    let mut padded = 0;
    for part in 0..PARTITION_COUNT {
        let mut at = 0;
        while at < t {
            let base = part * t + at;
            let was = i32::from_le_bytes(before[base..base + 4].try_into().unwrap());
            let now = i32::from_le_bytes(after[base..base + 4].try_into().unwrap());
            // A word zeroed is the next partition's cleaning, which a pad brings with it.
            if was != now && now != 0 {
                padded += 1;
                assert!(was <= 0, "a committed frame was padded over");
                assert!(now > 0 && now % 32 == 0 && at + now as usize <= t, "a pad of {now} bytes at {at}");
                assert_eq!(u16::from_le_bytes([after[base + 6], after[base + 7]]), 0, "not a padding frame");
                let position = log.producer_position().unwrap_or(0);
                let terms = log.terms();
                // The pad's own position: in the term of the producer or the one before.
                for term in [terms.term_begin(position), terms.term_begin(position) - t as i64] {
                    if term >= 0 && terms.partition(term) == part {
                        let p = term + at as i64;
                        assert!(!live_holds.iter().any(|&h| h <= p), "padded at {p}, over a live writer");
                    }
                }
            }
            at += 32;
        }
    }
    assert_eq!(padded, done.padded, "the pads counted are the pads written");
    // Whatever the words, reading does not panic.
    for start in [0, producer - producer % t as i64] {
        // SAFETY: single-threaded: nothing writes the region while it is read.
        let _ = unsafe {
            reader::read_at(
                &log,
                &reader::Cursor::new(&log, start.max(0)),
                64,
                &mut InPlace,
                |_, _| Action::Continue,
                |_| {},
            )
        };
    }
}
