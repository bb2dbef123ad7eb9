//! Fuzz target `term_reader`: the term reader and scanner over hostile term bytes.

use crate::input::{fresh_log, small_geometry, Input, SESSION, STREAM};
use shmlog::__fuzz::frame::{
    HeaderRest, CURRENT_VERSION, FRAME_ALIGNMENT, HEADER_LEN, REST_OFFSET, TYPE_DATA, TYPE_PAD,
};
use shmlog::__fuzz::meta::PARTITION_COUNT;
use shmlog::__fuzz::reader::{self, Copied, InPlace, Scan};
use shmlog::__fuzz::{align, HeapRegion, Log, RegionMut};
use shmlog::Action;
use shmlog::Header;

/// Fuzz target `term_reader`: a valid log whose three partitions hold fuzzed frames (or raw
/// bytes), read with `read`, `read_block` and `frame_starts_at` at fuzz-chosen positions,
/// fragment limits and handler actions.
///
/// Properties: no panic; every delivered payload is the bytes of a frame inside the term, after
/// the read position and after the previous delivery; positions only move forward, stay 32-aligned
/// and within the term; fragment counts respect the limit; a fault stops in front of an invalid
/// frame; a block holds only whole data frames.
pub fn term_reader(data: &[u8]) {
    let _ = run_term_reader(data);
}

/// [`term_reader`]; returns how many fragments were delivered.
pub(crate) fn run_term_reader(data: &[u8]) -> usize {
    let mut delivered = 0;
    let mut input = Input::new(data);
    let g = small_geometry(&mut input);
    let t = g.term_length;
    let initial = input.interesting_i32();
    let count: i64 = match input.below(4) {
        0 | 1 => input.below(6) as i64,
        2 => i32::MAX as i64 - input.below(3) as i64,
        _ => input.u32() as i64 & 0x7FFF_FFFF,
    };
    let log = fresh_log(g, initial, 0);
    let terms = log.terms();
    let mut image = vec![0u8; PARTITION_COUNT * t];
    for k in 0..PARTITION_COUNT as i64 {
        // Partitions hold the term being read, the next one, and the one before it.
        let term = if k == 2 && count > 0 { count - 1 } else { count + k };
        let part = terms.partition(term << terms.bits);
        let id = initial.wrapping_add(term as i32);
        let dst = &mut image[part * t..(part + 1) * t];
        match input.below(4) {
            0 => {
                let src = input.bytes(t);
                dst[..src.len()].copy_from_slice(src);
            }
            1 => {}
            _ => write_frames(dst, id, &mut input),
        }
    }
    // SAFETY: single-threaded; nothing reads the region while it is written.
    unsafe { log.region().copy_in(0, &image) };
    let mut ops = 0;
    loop {
        let term = match input.below(8) {
            0..=3 => count,
            4 | 5 => count + 1,
            6 => count + 2,
            _ => input.u32() as i64 & 0x7FFF_FFFF,
        };
        let position = (term << terms.bits) + (FRAME_ALIGNMENT * input.below(t / FRAME_ALIGNMENT)) as i64;
        match input.below(4) {
            0 => {
                let limit = [0, 1, 2, 3, 7, usize::MAX][input.below(6)];
                let actions: Vec<Action> = (0..1 + input.below(4)).map(|_| input.action()).collect();
                let copied = input.bool();
                delivered += check_read(&log, &image, position, limit, &actions, copied).fragments;
            }
            1 => {
                let max_bytes = [0, 32, 64, 100, t / 2, usize::MAX][input.below(6)];
                check_block(&log, &image, position, max_bytes);
            }
            2 => {
                if reader::frame_starts_at(&log, position) {
                    let cursor = reader::Cursor::new(&log, position);
                    // SAFETY: single-threaded: no writer runs while the handler holds a frame.
                    let scan = unsafe {
                        reader::read_at(&log, &cursor, 1, &mut InPlace, |_, _| Action::Continue, |_| {})
                    };
                    assert!(
                        scan.position > position,
                        "a valid frame starts at {position} but nothing was consumed"
                    );
                }
            }
            _ => {
                // Read on, term after term, until nothing moves.
                let mut p = position;
                for _ in 0..3 * t / FRAME_ALIGNMENT + 3 {
                    let scan = check_read(&log, &image, p, usize::MAX, &[Action::Continue], false);
                    delivered += scan.fragments;
                    if scan.position == p {
                        break;
                    }
                    p = scan.position;
                }
            }
        }
        ops += 1;
        if input.is_empty() || ops >= 64 {
            break;
        }
    }
    delivered
}

/// Writes frames into one term image: mostly well-formed, with fuzz-chosen corruptions.
fn write_frames(dst: &mut [u8], term_id: i32, input: &mut Input<'_>) {
    let t = dst.len();
    let mut off = 0;
    while off < t && !input.is_empty() {
        let ctl = input.byte();
        if ctl == 0xFF {
            break;
        }
        let payload = match ctl & 3 {
            0 => input.below(2 * FRAME_ALIGNMENT),
            1 => input.below(t),
            2 => 0,
            _ => input.u16() as usize,
        };
        let length = if ctl & 0x04 != 0 {
            input.interesting_i32()
        } else {
            (HEADER_LEN + payload).min(i32::MAX as usize) as i32
        };
        let rest = HeaderRest {
            version: if ctl & 0x20 != 0 { input.byte() } else { CURRENT_VERSION },
            flags: input.byte(),
            frame_type: match ctl & 0x18 {
                0x08 => TYPE_PAD,
                0x10 => input.u16(),
                _ => TYPE_DATA,
            },
            term_offset: if ctl & 0x40 != 0 { input.interesting_i32() } else { off as i32 },
            session_id: SESSION,
            stream_id: STREAM,
            term_id: if ctl & 0x80 != 0 { input.interesting_i32() } else { term_id },
            reserved_value: off as i64,
        };
        dst[off..off + 4].copy_from_slice(&length.to_le_bytes());
        dst[off + REST_OFFSET..off + HEADER_LEN].copy_from_slice(&rest.encode());
        let end = (off + HEADER_LEN + payload).min(t);
        for (i, b) in dst[off + HEADER_LEN..end].iter_mut().enumerate() {
            *b = (off + i) as u8 ^ 0x5A;
        }
        let advance = if length >= HEADER_LEN as i32 {
            align(length as usize, FRAME_ALIGNMENT)
        } else {
            FRAME_ALIGNMENT
        };
        off = off.saturating_add(advance);
    }
}

/// Runs `reader::read` and checks every delivery against the term image.
pub(crate) fn check_read(
    log: &Log<HeapRegion>,
    image: &[u8],
    position: i64,
    limit: usize,
    actions: &[Action],
    copied: bool,
) -> Scan {
    let terms = log.terms();
    let t = terms.term_length;
    let term_begin = terms.term_begin(position);
    let base = terms.partition(position) * t;
    let term_id = terms.term_id(position);
    let mut next_free = terms.term_offset(position);
    let mut consumed = 0usize;
    let mut calls = 0usize;
    let mut stopped_by_handler = None;
    let mut committed = Vec::new();
    let cursor = reader::Cursor::new(log, position);
    let mut copy = Copied::default();
    let handler = |payload: &[u8], h: &Header| {
        let off = usize::try_from(h.term_offset()).expect("delivered term offset is not negative");
        let len = usize::try_from(h.frame_length()).expect("delivered frame length is not negative");
        assert!(off >= next_free && off % FRAME_ALIGNMENT == 0, "delivery at {off} behind {next_free}");
        assert!(len >= HEADER_LEN && len <= t - off, "frame of {len} at {off} leaves the term of {t}");
        assert_eq!(payload.len(), len - HEADER_LEN, "payload length");
        assert!(
            payload == &image[base + off + HEADER_LEN..base + off + len],
            "payload bytes are not the frame's"
        );
        assert_eq!(h.term_id(), term_id);
        let end = off + align(len, FRAME_ALIGNMENT);
        assert_eq!(h.position(), term_begin + end as i64, "header position");
        let action = actions[calls % actions.len()];
        calls += 1;
        match action {
            Action::Abort => stopped_by_handler = Some(off),
            Action::Break => {
                consumed += 1;
                next_free = end;
                stopped_by_handler = Some(end);
            }
            Action::Commit | Action::Continue => {
                consumed += 1;
                next_free = end;
            }
        }
        action
    };
    let commit = |p| committed.push(p);
    // SAFETY: single-threaded: no writer runs while the handler holds a frame.
    let scan = unsafe {
        if copied {
            reader::read_at(log, &cursor, limit, &mut copy, handler, commit)
        } else {
            reader::read_at(log, &cursor, limit, &mut InPlace, handler, commit)
        }
    };
    assert_eq!(scan.fragments, consumed, "fragment count");
    assert!(consumed <= limit, "{consumed} fragments over a limit of {limit}");
    assert!(scan.position >= position, "position moved back");
    assert!(scan.position <= term_begin + t as i64, "position left the term");
    assert_eq!(scan.position % FRAME_ALIGNMENT as i64, 0, "position misaligned");
    assert!(committed.windows(2).all(|w| w[0] < w[1]), "commits not increasing: {committed:?}");
    assert!(committed.iter().all(|&p| p > position && p <= scan.position), "commit out of range");
    match stopped_by_handler {
        Some(off) => assert_eq!(scan.position, term_begin + off as i64, "stop after the handler's action"),
        None => {
            assert!(scan.position >= term_begin + next_free as i64);
            let at_end = scan.position == term_begin + t as i64;
            if !at_end && (consumed < limit || scan.fault.is_some()) {
                assert!(
                    !reader::frame_starts_at(log, scan.position),
                    "the read stopped at {} in front of a valid frame (fault {:?})",
                    scan.position,
                    scan.fault
                );
            }
        }
    }
    scan
}

/// Runs `reader::read_block` and checks the block against the term image.
fn check_block(log: &Log<HeapRegion>, image: &[u8], position: i64, max_bytes: usize) {
    let terms = log.terms();
    let t = terms.term_length;
    let term_begin = terms.term_begin(position);
    let base = terms.partition(position) * t;
    let mut seen = None;
    // SAFETY: single-threaded: no writer runs while the handler holds the block.
    let scan = unsafe {
        reader::read_block(log, position, max_bytes, &mut InPlace, |block: &[u8], at| {
            assert!(at >= position && at % FRAME_ALIGNMENT as i64 == 0, "block at {at} from {position}");
            assert_eq!(terms.term_begin(at), term_begin, "block left the term");
            let start = terms.term_offset(at);
            assert!(!block.is_empty() && block.len() <= t - start, "block of {} at {start}", block.len());
            assert!(
                block == &image[base + start..base + start + block.len()],
                "block bytes are not the term's"
            );
            let mut o = 0;
            let mut first = 0;
            while o < block.len() {
                assert!(block.len() - o >= HEADER_LEN, "partial header in a block");
                let len = i32::from_le_bytes(block[o..o + 4].try_into().unwrap());
                assert!(len >= HEADER_LEN as i32, "bad length {len} in a block");
                let rest = HeaderRest::decode(block[o + REST_OFFSET..o + HEADER_LEN].try_into().unwrap());
                assert_eq!(rest.frame_type, TYPE_DATA, "non-data frame inside a block");
                assert_eq!(rest.term_offset as i64, (start + o) as i64, "frame header offset in a block");
                let aligned = align(len as usize, FRAME_ALIGNMENT);
                if o == 0 {
                    first = aligned;
                }
                o += aligned;
            }
            assert_eq!(o, block.len(), "block does not end on a frame boundary");
            assert!(block.len() <= max_bytes.max(first), "block of {} over {max_bytes}", block.len());
            seen = Some(at + block.len() as i64);
        })
    };
    assert_eq!(scan.position, position + scan.bytes as i64, "consumed bytes");
    assert!(scan.position <= term_begin + t as i64, "block read left the term");
    if let Some(end) = seen {
        assert_eq!(scan.position, end, "position after the block");
    }
}
