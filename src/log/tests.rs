//! Unit tests of the log protocol over heap memory: Aeron's term reader, appender, rotation,
//! claim and controlled-poll catalogue (digest §15), re-created in our own words.

use super::appender::{Appender, Tripped};
use super::reader::{self, read, read_block, Action, InPlace};
use super::{Log, LogInit};
use crate::layout::frame::{HEADER_LEN, TYPE_PAD};
use crate::layout::log_meta::Geometry;
use crate::region::{HeapRegion, Region, RegionMut};
use crate::sync::Ordering;
use crate::Header;
use std::sync::Arc;

const T: usize = 64 * 1024;

fn new_log(
    term_length: usize,
    mtu: usize,
    initial_term_id: i32,
) -> (Arc<HeapRegion>, Appender<Arc<HeapRegion>>) {
    let geometry = Geometry { term_length, page_size: 4096, mtu, window: term_length / 2 };
    let region = Arc::new(HeapRegion::new(geometry.file_length()));
    let log = Log::initialize(
        region.clone(),
        &LogInit {
            geometry,
            initial_term_id,
            session_id: 77,
            stream_id: 5,
            pid: 1,
            created_ns: 0,
            name: "t",
            concurrent: false,
            session_seq: 1,
        },
    );
    (region, Appender::new(log).unwrap())
}

fn reader_log(region: &Arc<HeapRegion>) -> Log<Arc<HeapRegion>> {
    Log::open_any_term(region.clone()).unwrap()
}

/// Polls everything from `position` in one term; returns (messages, scan).
fn poll_all(
    log: &Log<Arc<HeapRegion>>,
    position: i64,
    limit: usize,
) -> (Vec<(Vec<u8>, Header)>, reader::Scan) {
    let mut got = Vec::new();
    // SAFETY: no writer runs while the tests read.
    let scan = unsafe {
        read(
            log,
            position,
            limit,
            |p, h| {
                got.push((p.to_vec(), *h));
                Action::Continue
            },
            |_| {},
        )
    };
    (got, scan)
}

#[test]
fn reads_first_message_with_its_header() {
    let (region, mut w) = new_log(T, 1408, 3);
    assert_eq!(w.append(&[b"hello"], 5), Ok(64));
    let log = reader_log(&region);
    let (got, scan) = poll_all(&log, 0, 10);
    assert_eq!(got.len(), 1);
    let (payload, h) = &got[0];
    assert_eq!(payload, b"hello");
    assert_eq!((h.frame_length(), h.term_offset(), h.term_id()), (37, 0, 3));
    assert_eq!((h.session_id(), h.stream_id(), h.reserved_value()), (77, 5, 0));
    assert!(h.is_begin() && h.is_end());
    assert_eq!(h.position(), 64);
    assert_eq!(scan, reader::Scan { position: 64, fragments: 1, fault: None, bytes: 0 });
}

#[test]
fn does_not_read_past_the_tail() {
    let (region, mut w) = new_log(T, 1408, 0);
    let log = reader_log(&region);
    let (got, scan) = poll_all(&log, 0, 10);
    assert!(got.is_empty());
    assert_eq!(scan.position, 0);
    w.append(&[b"x"], 1).unwrap();
    let (_, scan) = poll_all(&log, 64, 10);
    assert_eq!((scan.position, scan.fragments), (64, 0));
}

#[test]
fn fragment_limit_bounds_a_read_and_padding_does_not_count() {
    let (region, mut w) = new_log(T, 1408, 0);
    for i in 0..5u8 {
        w.append(&[&[i; 10]], 10).unwrap();
    }
    let log = reader_log(&region);
    let (got, scan) = poll_all(&log, 0, 2);
    assert_eq!(got.len(), 2);
    assert_eq!(scan.position, 128);
    let (got, scan) = poll_all(&log, scan.position, 10);
    assert_eq!(got.iter().map(|g| g.0[0]).collect::<Vec<_>>(), vec![2, 3, 4]);
    assert_eq!(scan.position, 5 * 64);
}

#[test]
fn message_ending_exactly_at_term_end_moves_to_the_next_term() {
    let (region, mut w) = new_log(T, 1408, 0);
    // Fill the term with 1376-byte payloads (1408-byte frames) and a last one that ends at T.
    let full = T / 1408;
    for _ in 0..full {
        w.append(&[&[1; 1376]], 1376).unwrap();
    }
    let rest = T - full * 1408 - HEADER_LEN;
    assert_eq!(w.append(&[&vec![2; rest]], rest), Ok(T as i64));
    // The next append trips with nothing to pad, rotates, and lands in term 1.
    assert_eq!(w.append(&[b"n"], 1), Err(Tripped));
    w.rotate().unwrap();
    assert_eq!(w.append(&[b"n"], 1), Ok(T as i64 + 64));
    let log = reader_log(&region);
    let mut position = 0;
    let mut count = 0;
    while position < T as i64 {
        let (got, scan) = poll_all(&log, position, 1000);
        count += got.len();
        position = scan.position;
    }
    assert_eq!((count, position), (full + 1, T as i64));
    let (got, _) = poll_all(&log, position, 10);
    assert_eq!(got[0].0, b"n");
    assert_eq!(got[0].1.term_id(), 1);
}

#[test]
fn trip_at_t_minus_32_pads_with_a_bare_header_and_rotates() {
    let (region, mut w) = new_log(T, 1408, 10);
    // Leave exactly 32 bytes in the term.
    let mut left = T;
    while left > 32 + 1408 {
        w.append(&[&[0; 1376]], 1376).unwrap();
        left -= 1408;
    }
    let last = left - 32 - HEADER_LEN;
    w.append(&[&vec![0; last]], last).unwrap();
    assert_eq!(w.position(), (T - 32) as i64);
    assert_eq!(w.append(&[b"abc"], 3), Err(Tripped));
    let log = reader_log(&region);
    let pad_at = T - 32;
    assert_eq!(region.load_i32(pad_at, Ordering::Acquire), 32);
    let mut t = [0u8; 2];
    region.copy_out(pad_at + 6, &mut t);
    assert_eq!(u16::from_le_bytes(t), TYPE_PAD);
    // Rotation: term count 1, next tail (id + 1, 0), and the retry succeeds there.
    w.rotate().unwrap();
    assert_eq!(log.active_term_count(), 1);
    assert_eq!(log.raw_tail(1), (11i64 << 32));
    assert_eq!(w.append(&[b"abc"], 3), Ok(T as i64 + 64));
    // A reader at the padding skips it without delivering and lands on the next term.
    let (got, scan) = poll_all(&log, pad_at as i64, 10);
    assert!(got.is_empty());
    assert_eq!(scan.position, T as i64);
    assert_eq!(log.producer_position(), Ok(T as i64 + 64));
}

#[test]
fn a_message_that_does_not_fit_pads_the_rest_of_the_term() {
    let (region, mut w) = new_log(T, 4096, 0);
    let mut n = 0;
    while w.position() < (T - 2000) as i64 {
        w.append(&[&[7; 1000]], 1000).unwrap();
        n += 1;
    }
    let before = w.position();
    assert_eq!(w.append(&[&[9; 3000]], 3000), Err(Tripped));
    let log = reader_log(&region);
    let pad = region.load_i32(before as usize, Ordering::Acquire) as i64;
    assert_eq!(before + pad, T as i64, "padding covers the rest of the term");
    assert_eq!(log.producer_position(), Ok(T as i64));
    let (got, scan) = poll_all(&log, 0, 1000);
    assert_eq!(got.len(), n);
    assert_eq!(scan.position, T as i64);
}

#[test]
fn fragments_carry_begin_and_end_flags_and_reassemble_in_order() {
    let (region, mut w) = new_log(T, 128, 0);
    let msg: Vec<u8> = (0..500u32).map(|i| i as u8).collect();
    // 96-byte max payload: 5 full fragments and a 20-byte tail.
    let end = w.append(&[&msg[..100], &msg[100..]], 500).unwrap();
    assert_eq!(end, crate::layout::frame::fragmented_length(500, 96) as i64);
    let log = reader_log(&region);
    let (got, _) = poll_all(&log, 0, 100);
    assert_eq!(got.len(), 6);
    let flags: Vec<u8> = got.iter().map(|g| g.1.flags()).collect();
    assert_eq!(flags, vec![0x80, 0, 0, 0, 0, 0x40]);
    let joined: Vec<u8> = got.iter().flat_map(|g| g.0.clone()).collect();
    assert_eq!(joined, msg);
}

#[test]
fn claim_is_invisible_until_commit_and_abort_becomes_padding() {
    let (region, mut w) = new_log(T, 1408, 0);
    let log = reader_log(&region);
    let c = w.claim(8).unwrap();
    w.with_claim_payload(&c, |b| b.copy_from_slice(b"claimed!"));
    w.set_claim_reserved_value(&c, -42);
    let (got, scan) = poll_all(&log, 0, 10);
    assert!(got.is_empty() && scan.position == 0, "uncommitted frames stop readers");
    w.commit(c);
    let a = w.claim(3).unwrap();
    w.abort(a);
    w.append(&[b"after"], 5).unwrap();
    let (got, scan) = poll_all(&log, 0, 10);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].0, b"claimed!");
    assert_eq!(got[0].1.reserved_value(), -42);
    assert_eq!(got[1].0, b"after");
    assert_eq!(scan.position, 3 * 64);
}

#[test]
fn controlled_poll_actions_follow_aerons_semantics() {
    let (region, mut w) = new_log(T, 1408, 0);
    for i in 0..4u8 {
        w.append(&[&[i; 4]], 4).unwrap();
    }
    let log = reader_log(&region);
    let run = |position: i64, actions: &[Action]| {
        let mut i = 0;
        let mut seen = Vec::new();
        let mut commits = Vec::new();
        // SAFETY: no writer runs while the tests read.
        let scan = unsafe {
            read(
                &log,
                position,
                10,
                |p, _| {
                    seen.push(p[0]);
                    i += 1;
                    actions.get(i - 1).copied().unwrap_or(Action::Continue)
                },
                |pos| commits.push(pos),
            )
        };
        (seen, commits, scan)
    };
    let (seen, _, scan) = run(0, &[Action::Abort]);
    assert_eq!((seen, scan.position, scan.fragments), (vec![0], 0, 0), "abort: not consumed");
    let (seen, _, scan) = run(0, &[Action::Break]);
    assert_eq!((seen, scan.position, scan.fragments), (vec![0], 64, 1), "break: consumed, stop");
    let (seen, commits, scan) = run(0, &[Action::Commit, Action::Commit, Action::Abort]);
    assert_eq!(seen, vec![0, 1, 2]);
    assert_eq!(commits, vec![64, 128], "commit publishes at once");
    assert_eq!((scan.position, scan.fragments), (128, 2), "abort after commits rewinds to them");
    let (seen, _, scan) = run(0, &[]);
    assert_eq!((seen.len(), scan.position), (4, 256), "continue reads all");
}

#[test]
fn block_read_hands_whole_frames_and_stops_at_padding() {
    let (region, mut w) = new_log(T, 1408, 0);
    for i in 0..3u8 {
        w.append(&[&[i; 40]], 40).unwrap();
    }
    let log = reader_log(&region);
    let mut block = Vec::new();
    // SAFETY: no writer runs while the tests read (both reads).
    let scan = unsafe {
        read_block(&log, 0, 200, &mut InPlace, |b: &[u8], start| {
            assert_eq!(start, 0);
            block = b.to_vec();
        })
    };
    assert_eq!(block.len(), 192, "two 96-byte frames fit in 200 bytes, the third does not");
    assert_eq!(scan.position, 192);
    assert_eq!(i32::from_le_bytes(block[96..100].try_into().unwrap()), 72);
    let mut called = false;
    // SAFETY: as above.
    let scan = unsafe {
        read_block(&log, 192, 10, &mut InPlace, |b: &[u8], _| {
            called = true;
            assert_eq!(b.len(), 96, "a first frame larger than the limit is still handed over");
        })
    };
    assert!(called);
    assert_eq!(scan.position, 288);
}

#[test]
fn reused_partitions_are_clean_ahead_of_the_writer() {
    // Small term so the writer re-enters every partition several times.
    let (region, mut w) = new_log(T, 1408, 0);
    let log = reader_log(&region);
    let mut position = 0i64;
    let mut expected = 0u32;
    for seq in 0..20_000u32 {
        let len = (seq as usize * 7) % 1300;
        let mut msg = vec![(seq % 251) as u8; len.max(4)];
        msg[..4].copy_from_slice(&seq.to_le_bytes());
        loop {
            match w.append(&[&msg], msg.len()) {
                Ok(_) => break,
                Err(Tripped) => w.rotate().unwrap(),
            }
        }
        // Read everything (a reader that keeps up), checking order.
        loop {
            let (got, scan) = poll_all(&log, position, 1000);
            for (p, _) in &got {
                assert_eq!(u32::from_le_bytes(p[..4].try_into().unwrap()), expected);
                expected += 1;
            }
            if scan.position == position {
                break;
            }
            position = scan.position;
        }
        // Everything after the writer's position in its term is zero (I3).
        let terms = log.terms();
        let base = log.partition_base(terms.partition(w.position()));
        let off = terms.term_offset(w.position());
        if off > 0 && seq % 97 == 0 {
            let mut rest = vec![1u8; T - off];
            region.copy_out(base + off, &mut rest);
            assert!(rest.iter().all(|b| *b == 0), "dirty bytes ahead of the writer at seq {seq}");
        }
    }
    assert_eq!(expected, 20_000);
    assert!(log.active_term_count() >= 6, "the test must rotate through every partition twice");
}

#[test]
fn corrupt_frames_stop_the_reader_without_delivery() {
    for (what, corrupt) in [("short length", 8i32), ("overrun", (T + 64) as i32)] {
        let (region, mut w) = new_log(T, 1408, 0);
        w.append(&[b"ok"], 2).unwrap();
        region.store_i32(64, corrupt, Ordering::Release);
        let log = reader_log(&region);
        let (got, scan) = poll_all(&log, 0, 10);
        assert_eq!(got.len(), 1, "{what}");
        assert_eq!(scan.position, 64, "{what}");
        assert!(scan.fault.is_some(), "{what}");
    }
    // A frame whose header names another place (stale or foreign data).
    let (region, mut w) = new_log(T, 1408, 0);
    w.append(&[b"ok"], 2).unwrap();
    // SAFETY: nobody reads while the test writes.
    unsafe { region.copy_in(8, &128i32.to_le_bytes()) };
    let (got, scan) = poll_all(&reader_log(&region), 0, 10);
    assert!(got.is_empty() && scan.fault.is_some());
    assert!(!reader::frame_starts_at(&reader_log(&region), 0));
}

#[test]
fn open_rejects_what_is_not_a_ready_log_of_this_version() {
    use crate::error::Invalid;
    use crate::layout::log_meta as m;
    let (region, _w) = new_log(T, 1408, 0);
    let meta = region.len() - m::META_LEN;
    assert!(Log::open(region.clone()).is_ok());
    region.store_i32(meta + m::VERSION, 99, Ordering::Relaxed);
    assert_eq!(Log::open(region.clone()).unwrap_err(), Invalid::VersionMismatch { found: 99 });
    region.store_i32(meta + m::VERSION, m::LAYOUT_VERSION, Ordering::Relaxed);
    region.store_i32(meta + m::TERM_LENGTH, 3 * 1024 * 64, Ordering::Relaxed);
    assert!(matches!(Log::open(region.clone()), Err(Invalid::Corrupt(_))));
    region.store_i32(meta + m::TERM_LENGTH, T as i32, Ordering::Relaxed);
    region.store_i32(meta + m::READY, 0, Ordering::Relaxed);
    assert!(matches!(Log::open(region.clone()), Err(Invalid::Corrupt(_))));
    let zeros = HeapRegion::new(region.len());
    assert_eq!(Log::open(&zeros).unwrap_err(), Invalid::Corrupt("bad magic: not a shmlog log file"));
    assert!(Log::open(&HeapRegion::new(4096)).is_err());
}

#[test]
fn initial_tails_name_the_term_each_partition_held_one_cycle_earlier() {
    let (region, _w) = new_log(T, 1408, 100);
    let log = reader_log(&region);
    assert_eq!(log.raw_tail(0) >> 32, 100);
    assert_eq!(log.raw_tail(1) >> 32, 98);
    assert_eq!(log.raw_tail(2) >> 32, 99);
    assert_eq!(log.eos_position(), i64::MAX);
    assert_eq!(log.name(), "t");
}

#[test]
fn term_ids_wrap_around_i32() {
    let (region, mut w) = new_log(T, 1408, i32::MAX);
    let log = reader_log(&region);
    let big = vec![0u8; 8000];
    let mut position = 0;
    while log.active_term_count() < 2 {
        match w.append(&[&big], big.len()) {
            Ok(_) => {}
            Err(Tripped) => w.rotate().unwrap(),
        }
        loop {
            let (_, scan) = poll_all(&log, position, 100);
            assert!(scan.fault.is_none());
            if scan.position == position {
                break;
            }
            position = scan.position;
        }
    }
    assert_eq!(w.position(), position);
}

/// An untethered reader's copy over a term full of garbage (what a lapped read may return): every
/// length is validated before use, so it stops or copies frames inside the term, never panics;
/// and over the writer's own frames it copies exactly what was committed, intact by the check.
#[test]
fn untethered_copy_survives_garbage_and_copies_what_was_committed() {
    use super::reader::{copy_frames, lapped, Cursor};
    let (region, mut app) = new_log(T, 1024, 9);
    for i in 0..100u32 {
        app.append(&[&i.to_le_bytes().repeat(10 + i as usize % 50)], 4 * (10 + i as usize % 50)).unwrap();
    }
    let log = reader_log(&region);
    let (mut buf, mut frames) = (Vec::new(), Vec::new());
    let cursor = Cursor::new(&log, 0);
    assert_eq!(copy_frames(&log, &cursor, usize::MAX, usize::MAX, &mut buf, &mut frames), None);
    assert!(!lapped(&log, &cursor), "the writer is in term 0: nothing reused");
    assert_eq!(frames.len(), 100);
    for (i, f) in frames.iter().enumerate() {
        let payload = &buf[f.at + HEADER_LEN..f.at + f.len];
        assert_eq!(payload, &(i as u32).to_le_bytes().repeat(10 + i % 50)[..]);
    }
    // Garbage: a xorshift stream over term 1, read at every frame offset.
    let base = log.partition_base(1);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let garbage: Vec<u8> = (0..T)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    // SAFETY: a heap region nobody else touches in this test.
    unsafe { region.copy_in(base, &garbage) };
    for at in (0..T).step_by(32 * 7) {
        let cursor = Cursor::new(&log, T as i64 + at as i64);
        let _ = copy_frames(&log, &cursor, usize::MAX, 1 << 16, &mut buf, &mut frames);
        for f in &frames {
            assert!(f.offset + f.aligned <= T && f.at + f.aligned <= buf.len() || f.is_pad());
        }
    }
}

/// The review's N7 c: several writers of a concurrent log count in the same words, and a load
/// then a store lost increments. Four threads started together, counting 1 000 000 each, must
/// leave exactly 4 000 000. (Whether the old code loses any here depends on the threads running
/// at once, which a loaded 2-core machine may not give; loom model `k7` shows it every time.)
#[test]
fn counters_are_exact_under_concurrent_writers() {
    use super::Counter;
    const EACH: i64 = 1_000_000;
    let geometry = Geometry { term_length: T, page_size: 4096, mtu: 1408, window: T / 2 };
    let region = Arc::new(HeapRegion::new(geometry.file_length()));
    let init = LogInit {
        geometry,
        initial_term_id: 0,
        session_id: 77,
        stream_id: 5,
        pid: 1,
        created_ns: 0,
        name: "t",
        concurrent: true,
        session_seq: 1,
    };
    Log::initialize(Arc::clone(&region), &init);
    let start = Arc::new(std::sync::Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (log, start) = (reader_log(&region), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                for _ in 0..EACH {
                    log.count(Counter::BackPressureEvents, 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(reader_log(&region).counter(Counter::BackPressureEvents), 4 * EACH);
}
