//! Entry points of the cargo-fuzz targets in `fuzz/` (compiled only with `--cfg fuzzing`).
//!
//! Each function decodes the fuzzer's bytes into a scenario over the crate's internals and panics
//! when a property breaks: a panic is how libFuzzer learns about a bug. Scenarios run over the heap
//! backend (file validation also over real files), single-threaded and deterministic, so a crash
//! input replays exactly. Nothing here is public API; it does not exist outside fuzz builds.
//!
//! - [`term_reader`]: the term reader and scanner over hostile term bytes.
//! - [`file_validation`]: log and reader-slot validation over hostile bytes, sizes and files.
//! - [`ops_oracle`]: random publisher/subscriber operations checked against a `VecDeque` oracle.
//! - [`assembler`]: `FragmentAssembler` over arbitrary fragment sequences against a reference.

use crate::api::assembler::FragmentAssembler;
use crate::api::handler::{ControlledFragmentHandler, FragmentHandler};
use crate::error::OfferError;
use crate::layout::align;
use crate::layout::frame::{
    framed_length, max_message_len, HeaderRest, BEGIN_FLAG, CURRENT_VERSION, END_FLAG, FRAME_ALIGNMENT,
    HEADER_LEN, REST_OFFSET, TYPE_DATA, TYPE_PAD, UNFRAGMENTED,
};
use crate::layout::log_meta::{self as meta, Geometry, META_LEN, PAGE_MIN, PARTITION_COUNT, TERM_MIN_LENGTH};
use crate::layout::slots as s;
use crate::log::appender::{Appender, ClaimedFrame, Tripped};
use crate::log::position::pack_tail;
use crate::log::reader::{self, Action, Scan};
use crate::log::{Log, LogInit};
use crate::region::{HeapRegion, Region, RegionMut};
use crate::stream::files;
use crate::stream::flow::FlowControl;
use crate::stream::join::{self, JoinRefused};
use crate::stream::slots::{SlotLocks, Slots};
use crate::sync::Ordering;
use crate::Header;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::rc::Rc;

const SESSION: i32 = 0x5e55;
const STREAM: i32 = 0x57e4;

// ---------------------------------------------------------------------------------------------
// Decoding the fuzzer's bytes
// ---------------------------------------------------------------------------------------------

/// Scenario choices read from the fuzzer's bytes; zeros once they run out.
struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.data.split_at(n.min(self.data.len()));
        self.data = tail;
        head
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let got = self.bytes(N);
        out[..got.len()].copy_from_slice(got);
        out
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    fn i64(&mut self) -> i64 {
        i64::from_le_bytes(self.array())
    }

    fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// A value in `0..n` (0 when `n` is 0 or 1), using as few bytes as `n` needs.
    fn below(&mut self, n: usize) -> usize {
        match n {
            0 | 1 => 0,
            2..=256 => self.byte() as usize % n,
            257..=65_536 => self.u16() as usize % n,
            _ => self.u32() as usize % n,
        }
    }

    /// An `i32` that is often an edge value.
    fn interesting_i32(&mut self) -> i32 {
        const EDGES: [i32; 16] = [
            0,
            1,
            -1,
            31,
            32,
            33,
            64,
            4096,
            65_536,
            1 << 30,
            i32::MAX,
            i32::MIN,
            i32::MAX - 1,
            i32::MIN + 1,
            -32,
            1408,
        ];
        let b = self.byte();
        if b < 0x80 {
            EDGES[b as usize % EDGES.len()]
        } else {
            self.u32() as i32
        }
    }

    /// An `i64` that is often an edge value.
    fn interesting_i64(&mut self) -> i64 {
        match self.byte() % 8 {
            0 => 0,
            1 => -1,
            2 => i64::MAX,
            3 => i64::MIN,
            4 => self.interesting_i32() as i64,
            5 => pack_tail(self.interesting_i32(), self.below(1 << 17)),
            _ => self.i64(),
        }
    }

    fn action(&mut self) -> Action {
        match self.byte() % 8 {
            0 => Action::Abort,
            1 => Action::Break,
            2 => Action::Commit,
            _ => Action::Continue,
        }
    }
}

/// Deterministic message bytes: different sequence numbers give different bytes.
fn message_bytes(seq: u64, len: usize) -> Vec<u8> {
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A small valid geometry: terms of 128 B to 4 KiB, so rotations are frequent.
fn small_geometry(input: &mut Input<'_>) -> Geometry {
    let term_length = 128usize << input.below(6);
    let max_mtu = max_message_len(term_length).max(2 * HEADER_LEN);
    let mtu =
        2 * HEADER_LEN + FRAME_ALIGNMENT * input.below((max_mtu - 2 * HEADER_LEN) / FRAME_ALIGNMENT + 1);
    let window = mtu + input.below(term_length / 2 - mtu + 1);
    let g = Geometry { term_length, page_size: PAGE_MIN, mtu, window };
    assert!(g.validate_rest().is_ok(), "harness geometry {g:?} is valid");
    g
}

/// A geometry that passes the file rules (64 or 128 KiB terms).
fn file_geometry(input: &mut Input<'_>) -> Geometry {
    let term_length = TERM_MIN_LENGTH << input.below(2);
    let mtu = [64, 1408, 4096, max_message_len(term_length)][input.below(4)];
    let window = [mtu, term_length / 4, term_length / 2][input.below(3)];
    let page_size = PAGE_MIN << input.below(3);
    let g = Geometry { term_length, page_size, mtu, window };
    assert!(g.validate().is_ok(), "harness geometry {g:?} is valid");
    g
}

/// A freshly initialised log whose writer stands at the start of term `term_count`.
fn fresh_log(g: Geometry, initial_term_id: i32, term_count: i32) -> Log<HeapRegion> {
    let log = Log::initialize(
        HeapRegion::new(g.file_length()),
        &LogInit {
            geometry: g,
            initial_term_id,
            session_id: SESSION,
            stream_id: STREAM,
            pid: 1,
            created_ns: 0,
            name: "fuzz",
        },
    );
    if term_count > 0 {
        // As if the writer had already filled `term_count` terms (all zero again by now).
        let r = log.region();
        let index = term_count as usize % PARTITION_COUNT;
        let tail = pack_tail(initial_term_id.wrapping_add(term_count), 0);
        r.store_i64(log.meta_field(meta::TAIL_COUNTERS + 8 * index), tail, Ordering::Relaxed);
        r.store_i32(log.meta_field(meta::ACTIVE_TERM_COUNT), term_count, Ordering::Release);
    }
    log
}

/// Overwrites `bytes[at..]` with as much of `v` as fits.
fn put(bytes: &mut [u8], at: usize, v: &[u8]) {
    if at < bytes.len() {
        let n = v.len().min(bytes.len() - at);
        bytes[at..at + n].copy_from_slice(&v[..n]);
    }
}

/// `true` if every byte is zero (one `memcmp` per 4 KiB: a byte loop would spend the fuzzer's
/// time in comparison tracing).
fn is_zero(bytes: &[u8]) -> bool {
    const ZERO: [u8; 4096] = [0; 4096];
    bytes.chunks(ZERO.len()).all(|c| c == &ZERO[..c.len()])
}

fn heap_from(bytes: &[u8]) -> HeapRegion {
    let region = HeapRegion::new(bytes.len());
    region.copy_in(0, bytes);
    region
}

fn bytes_of(region: &impl Region) -> Vec<u8> {
    let mut out = vec![0u8; region.len()];
    region.copy_out(0, &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// (a) term_reader
// ---------------------------------------------------------------------------------------------

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
fn run_term_reader(data: &[u8]) -> usize {
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
    log.region().copy_in(0, &image);
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
                delivered += check_read(&log, &image, position, limit, &actions).fragments;
            }
            1 => {
                let max_bytes = [0, 32, 64, 100, t / 2, usize::MAX][input.below(6)];
                check_block(&log, &image, position, max_bytes);
            }
            2 => {
                if reader::frame_starts_at(&log, position) {
                    let scan = reader::read(&log, position, 1, |_, _| Action::Continue, |_| {});
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
                    let scan = check_read(&log, &image, p, usize::MAX, &[Action::Continue]);
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
fn check_read(log: &Log<HeapRegion>, image: &[u8], position: i64, limit: usize, actions: &[Action]) -> Scan {
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
    let scan = reader::read(
        log,
        position,
        limit,
        |payload, h| {
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
        },
        |p| committed.push(p),
    );
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
    let scan = reader::read_block(log, position, max_bytes, |block, at| {
        assert!(at >= position && at % FRAME_ALIGNMENT as i64 == 0, "block at {at} from {position}");
        assert_eq!(terms.term_begin(at), term_begin, "block left the term");
        let start = terms.term_offset(at);
        assert!(!block.is_empty() && block.len() <= t - start, "block of {} at {start}", block.len());
        assert!(block == &image[base + start..base + start + block.len()], "block bytes are not the term's");
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
    });
    assert_eq!(scan.position, position + scan.fragments as i64, "consumed bytes");
    assert!(scan.position <= term_begin + t as i64, "block read left the term");
    if let Some(end) = seen {
        assert_eq!(scan.position, end, "position after the block");
    }
}

// ---------------------------------------------------------------------------------------------
// (b) file_validation
// ---------------------------------------------------------------------------------------------

/// Fuzz target `file_validation`: `Log::open`/`open_any_term` and `Slots::open` over hostile
/// bytes and sizes, and `files::open_log`/`files::open_readers` over real files holding them.
///
/// Properties: validation returns `Ok` or a typed error, never panics or faults; an untouched
/// valid image is accepted; whatever is accepted has a consistent geometry and can be read
/// (metadata, producer position, frames) without a panic.
pub fn file_validation(data: &[u8]) {
    let _ = run_file_validation(data);
}

/// [`file_validation`]; returns whether the file was accepted.
fn run_file_validation(data: &[u8]) -> bool {
    let mut input = Input::new(data);
    match input.below(4) {
        0 => {
            let image = log_image(&mut input);
            check_log_open(&heap_from(&image.bytes), &image)
        }
        1 => {
            let (bytes, pristine) = slots_image(&mut input);
            let region = heap_from(&bytes);
            match Slots::open(&region) {
                Ok(slots) => {
                    exercise_slots(&slots, &mut input);
                    true
                }
                Err(e) => {
                    assert!(!pristine, "a valid reader-slot file was refused: {e:?}");
                    false
                }
            }
        }
        2 => {
            let accepted = log_file(&mut input);
            let _ = std::fs::remove_dir_all(scratch_dir());
            accepted
        }
        _ => {
            let accepted = readers_file(&mut input);
            let _ = std::fs::remove_dir_all(scratch_dir());
            accepted
        }
    }
}

/// Bytes of a (possibly damaged) log file.
struct LogImage {
    bytes: Vec<u8>,
    /// Untouched output of `Log::initialize` (and appends).
    pristine: bool,
    /// Its geometry passes the file rules.
    file_rules: bool,
}

fn log_image(input: &mut Input<'_>) -> LogImage {
    if input.below(4) == 0 {
        let len = match input.below(3) {
            0 => input.below(3 * PAGE_MIN),
            1 => PAGE_MIN * input.below(64),
            _ => meta::file_length(TERM_MIN_LENGTH, PAGE_MIN),
        };
        let mut bytes = vec![0u8; len];
        // The metadata section is what validation reads: fill it first.
        let src = input.bytes(len.min(META_LEN));
        bytes[len - src.len()..].copy_from_slice(src);
        return LogImage { bytes, pristine: false, file_rules: false };
    }
    let file_rules = input.bool();
    let g = if file_rules { file_geometry(input) } else { small_geometry(input) };
    let term_count = [0, 1, 2, 7, i32::MAX - 1][input.below(5)];
    let log = fresh_log(g, input.interesting_i32(), term_count);
    let mut appender = Appender::new(log).expect("a fresh log has a writer position");
    let max = max_message_len(g.term_length);
    for seq in 0..input.below(12) as u64 {
        let len = input.below(max + 1);
        let msg = message_bytes(seq, len);
        loop {
            match appender.append(&[&msg], len) {
                Ok(_) => break,
                Err(Tripped) => {
                    if appender.rotate().is_err() {
                        break;
                    }
                }
            }
        }
    }
    let mut bytes = bytes_of(appender.log().region());
    let patches = input.below(8);
    for _ in 0..patches {
        patch_log(&mut bytes, input);
    }
    LogImage { bytes, pristine: patches == 0, file_rules }
}

/// One damage to a log image: a metadata field, a few raw bytes, or the length.
fn patch_log(bytes: &mut Vec<u8>, input: &mut Input<'_>) {
    const I64_FIELDS: [usize; 6] = [
        meta::TAIL_COUNTERS,
        meta::TAIL_COUNTERS + 8,
        meta::TAIL_COUNTERS + 16,
        meta::EOS_POSITION,
        meta::MAGIC_OFFSET,
        meta::CREATED_NS,
    ];
    let m = bytes.len().saturating_sub(META_LEN);
    match input.below(5) {
        0 | 1 => {
            // Every i32 field, plus the first word of the name.
            let i = input.below(meta::I32_FIELDS.len() + 1);
            let at = m + meta::I32_FIELDS.get(i).copied().unwrap_or(meta::NAME);
            put(bytes, at, &input.interesting_i32().to_le_bytes());
        }
        2 => {
            let at = m + I64_FIELDS[input.below(I64_FIELDS.len())];
            put(bytes, at, &input.interesting_i64().to_le_bytes());
        }
        3 => {
            let at = input.below(bytes.len());
            let n = 1 + input.below(8);
            put(bytes, at, input.bytes(n));
        }
        _ => {
            let len = bytes.len();
            let new_len = match input.below(4) {
                0 => len.saturating_sub(PAGE_MIN),
                1 => len + PAGE_MIN,
                2 => input.below(len + 1),
                _ => len * 2,
            };
            bytes.resize(new_len, 0);
        }
    }
}

fn check_log_open(region: &HeapRegion, image: &LogImage) -> bool {
    let any = Log::open_any_term(region);
    let strict = Log::open(region);
    if image.pristine {
        assert!(any.is_ok(), "a valid log was refused: {:?}", any.err());
        if image.file_rules {
            assert!(strict.is_ok(), "a valid file-sized log was refused: {:?}", strict.err());
        }
    }
    if strict.is_ok() {
        assert!(any.is_ok(), "the file rules accepted what the model rules refused");
    }
    let accepted = any.is_ok();
    for log in [any, strict].into_iter().flatten() {
        exercise_log(&log);
    }
    accepted
}

/// Everything a subscriber does with a log it accepted, checked for panics.
fn exercise_log<R: Region>(log: &Log<R>) {
    let g = log.geometry();
    assert!(g.validate_rest().is_ok(), "accepted a log with geometry {g:?}");
    assert_eq!(g.file_length(), log.region().len(), "accepted a log of the wrong length");
    let _ = log.name();
    let _ = log.eos_position();
    let _ = log.publisher_pid();
    let _ = log.active_term_count();
    for i in 0..PARTITION_COUNT {
        let _ = log.raw_tail(i);
    }
    for field in [meta::PUBLISHER_LIMIT, meta::BACK_PRESSURE_EVENTS, meta::CONNECTED_READERS] {
        let _ = log.counter(field);
    }
    let Ok(producer) = log.producer_position() else { return };
    assert!(producer >= 0, "negative producer position {producer}");
    let terms = log.terms();
    let t = terms.term_length as i64;
    // Subscribers only ever read at 32-aligned positions (a join checks it): do the same.
    for start in [terms.term_begin(producer), producer, producer - t] {
        if start < 0 || start % FRAME_ALIGNMENT as i64 != 0 {
            continue;
        }
        let _ = reader::frame_starts_at(log, start);
        let _ = reader::read_block(log, start, usize::MAX, |_, _| {});
        let mut p = start;
        for _ in 0..PARTITION_COUNT * terms.term_length / FRAME_ALIGNMENT + 3 {
            let scan = reader::read(log, p, usize::MAX, |_, _| Action::Continue, |_| {});
            assert!(scan.position >= p, "read moved back");
            if scan.position == p {
                break;
            }
            p = scan.position;
        }
    }
}

/// Bytes of a (possibly damaged) reader-slot file; `true` if untouched.
fn slots_image(input: &mut Input<'_>) -> (Vec<u8>, bool) {
    if input.below(3) == 0 {
        let len = match input.below(2) {
            0 => input.below(2048),
            _ => s::file_length(1 + input.below(8)),
        };
        let mut bytes = vec![0u8; len];
        let src = input.bytes(len);
        bytes[..src.len()].copy_from_slice(src);
        return (bytes, false);
    }
    let count = if input.below(16) == 0 { s::MAX_SLOTS } else { 1 + input.below(8) };
    let region = HeapRegion::new(s::file_length(count));
    let slots = Slots::initialize(&region, count);
    for _ in 0..input.below(count.min(8) + 1) {
        let i = input.below(count);
        slots.claim(i, input.interesting_i64(), 0);
        if input.bool() {
            let session = if input.bool() { SESSION } else { input.interesting_i32() };
            slots.activate(i, session, input.interesting_i64());
        }
    }
    let mut bytes = bytes_of(&region);
    let patches = input.below(6);
    for _ in 0..patches {
        match input.below(4) {
            0 => {
                let at = [s::VERSION, s::SLOT_COUNT, s::READY][input.below(3)];
                put(&mut bytes, at, &input.interesting_i32().to_le_bytes());
            }
            1 => {
                let at = [s::MAGIC_OFFSET, s::HIGH_WATER][input.below(2)];
                put(&mut bytes, at, &input.interesting_i64().to_le_bytes());
            }
            2 => {
                let at = s::slot_offset(input.below(count)) + 8 * input.below(s::SLOT_LEN / 8);
                put(&mut bytes, at, &input.interesting_i64().to_le_bytes());
            }
            _ => {
                let len = bytes.len();
                let new_len =
                    [len.saturating_sub(1), len + 8, len + s::SLOT_LEN, input.below(len)][input.below(4)];
                bytes.resize(new_len, 0);
            }
        }
    }
    (bytes, patches == 0)
}

/// Everything a publisher or subscriber does with a slot table it accepted.
fn exercise_slots<R: Region>(slots: &Slots<R>, input: &mut Input<'_>) {
    let count = slots.count();
    assert!((1..=s::MAX_SLOTS).contains(&count), "accepted {count} slots");
    assert!(slots.high_water() <= count, "high water past the table");
    for session in [SESSION, 0, input.interesting_i32()] {
        let found = slots.scan(session, Some(input.below(count)));
        assert!(found.count <= count);
        assert_eq!(found.count == 0, found.min.is_none());
        let mut flow = FlowControl::new(input.below(1 << 16), input.interesting_i64());
        let _ = flow.recompute(slots, session);
    }
    for i in 0..slots.high_water().min(64) {
        let _ = slots.view(i);
    }
}

/// A scratch directory of this thread for the file targets (under `/dev/shm` when it exists),
/// created on demand and removed after each run. libFuzzer runs one thread; tests run several.
fn scratch_dir() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
    static THREADS: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static DIR: PathBuf = {
            let base = match std::env::var_os("SHMLOG_FUZZ_DIR") {
                Some(dir) => PathBuf::from(dir),
                None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
                None => std::env::temp_dir(),
            };
            let n = THREADS.fetch_add(1, AtomicOrdering::Relaxed);
            base.join(format!("shmlog-fuzz-{}-{n}", std::process::id()))
        };
    }
    let dir = DIR.with(PathBuf::clone);
    std::fs::create_dir_all(&dir).expect("create the fuzz scratch directory");
    dir
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .expect("create a scratch file");
    f.write_all(bytes).expect("write a scratch file");
    f.set_permissions(std::fs::Permissions::from_mode(mode)).expect("chmod a scratch file");
}

fn remove_any(path: &Path) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_dir(path);
}

/// `files::open_log` over a real file (or a directory, a symlink, nothing) at the log's path.
fn log_file(input: &mut Input<'_>) -> bool {
    let dir = scratch_dir();
    let path = dir.join("f.log");
    remove_any(&path);
    let outcome = match input.below(8) {
        0 => {
            let r = files::open_log(&path);
            assert!(matches!(r, Ok(None)), "a missing log is not an error");
            return false;
        }
        1 => {
            std::fs::create_dir(&path).expect("create a scratch directory");
            files::open_log(&path)
        }
        2 => {
            let target = dir.join("target.log");
            let image = log_image(input);
            write_file(&target, &image.bytes, 0o600);
            std::os::unix::fs::symlink(&target, &path).expect("create a scratch symlink");
            files::open_log(&path)
        }
        3 => {
            let image = log_image(input);
            write_file(&path, &image.bytes, [0o602, 0o666, 0o000, 0o400][input.below(4)]);
            files::open_log(&path)
        }
        _ => {
            let image = log_image(input);
            write_file(&path, &image.bytes, 0o600);
            let mut pristine = image.pristine && image.file_rules;
            if input.below(8) == 0 {
                // Sparse growth or truncation after writing, up to past the largest log.
                let file = std::fs::OpenOptions::new().write(true).open(&path).expect("reopen");
                let len = [0, 1, 8191, 8192, (4u64 << 30) + 4096][input.below(5)];
                file.set_len(len).expect("resize a scratch file");
                pristine = false;
            }
            let r = files::open_log(&path);
            if pristine {
                assert!(matches!(r, Ok(Some(_))), "a valid log file was refused: {:?}", r.as_ref().err());
            }
            r
        }
    };
    let accepted = match outcome {
        Ok(Some(read)) => {
            exercise_log(&read.log);
            true
        }
        Ok(None) => panic!("an existing path reported as missing"),
        Err(e) => {
            let _ = e.to_string();
            false
        }
    };
    remove_any(&path);
    remove_any(&dir.join("target.log"));
    accepted
}

/// `files::open_readers` over a real reader-slot file holding the fuzzed bytes.
fn readers_file(input: &mut Input<'_>) -> bool {
    let dir = scratch_dir();
    let path = dir.join("f.readers");
    remove_any(&path);
    let (bytes, pristine) = slots_image(input);
    write_file(&path, &bytes, 0o600);
    let accepted = match files::open_readers(&dir, "f", 4, 0o600) {
        Ok(readers) => {
            exercise_slots(&readers.slots, input);
            true
        }
        Err(e) => {
            assert!(!pristine, "a valid reader-slot file was refused: {e}");
            false
        }
    };
    remove_any(&path);
    accepted
}

// ---------------------------------------------------------------------------------------------
// (c) ops_oracle
// ---------------------------------------------------------------------------------------------

/// A committed message, as the oracle remembers it.
#[derive(Debug)]
struct Msg {
    /// Position of its first frame.
    start: i64,
    /// Position after its last frame.
    end: i64,
    bytes: Vec<u8>,
    reserved: i64,
}

type Delivered = Rc<RefCell<Vec<(Vec<u8>, Header)>>>;
type Sink = Box<dyn FnMut(&[u8], &Header)>;
type Assembler = FragmentAssembler<Sink>;

/// One subscriber of the model and what it must see next.
struct Reader {
    slot: usize,
    position: i64,
    /// A crashed reader keeps its slot (and holds the writer back) until a sweep frees it.
    alive: bool,
    /// Messages still to be delivered; the front may be partly delivered already.
    expected: VecDeque<Rc<Msg>>,
    /// Payload bytes of the front message already delivered.
    front_offset: usize,
    /// The reader sees the front message from its first fragment (not a mid-message join).
    front_whole: bool,
    /// Whole messages the assembler must still hand out, in order.
    whole_expected: VecDeque<Rc<Msg>>,
    assembled: Delivered,
    assembler: Assembler,
}

impl Reader {
    fn new(slot: usize, position: i64) -> Self {
        let assembled: Delivered = Rc::default();
        let sink = assembled.clone();
        let delegate: Sink = Box::new(move |m: &[u8], h: &Header| sink.borrow_mut().push((m.to_vec(), *h)));
        Self {
            slot,
            position,
            alive: true,
            expected: VecDeque::new(),
            front_offset: 0,
            front_whole: true,
            whole_expected: VecDeque::new(),
            assembled,
            assembler: FragmentAssembler::new(delegate),
        }
    }

    /// Checks that `payload`/`h` is exactly the next fragment the oracle expects; returns its
    /// payload length.
    fn check(&self, payload: &[u8], h: &Header, max_payload: usize) -> usize {
        let Some(msg) = self.expected.front() else {
            panic!(
                "reader in slot {} got a fragment ending at {} that nobody published for it",
                self.slot,
                h.position()
            );
        };
        let off = self.front_offset;
        let chunk = (msg.bytes.len() - off).min(max_payload);
        let frame_start = msg.start + (off / max_payload * (max_payload + HEADER_LEN)) as i64;
        let frame_end = frame_start + align(chunk + HEADER_LEN, FRAME_ALIGNMENT) as i64;
        assert_eq!(h.position(), frame_end, "fragment position (message at {}..{})", msg.start, msg.end);
        assert_eq!(h.frame_length() as usize, chunk + HEADER_LEN, "fragment length");
        assert!(payload == &msg.bytes[off..off + chunk], "fragment bytes differ from the message's");
        assert_eq!(h.is_begin(), off == 0, "BEGIN flag");
        assert_eq!(h.is_end(), off + chunk == msg.bytes.len(), "END flag");
        assert_eq!(h.reserved_value(), msg.reserved, "reserved value");
        assert_eq!((h.session_id(), h.stream_id()), (SESSION, STREAM), "session and stream ids");
        chunk
    }

    /// Takes the fragment just checked: the oracle moves on and the assembler sees it.
    fn consume(&mut self, payload: &[u8], h: &Header, chunk: usize) {
        FragmentHandler::on_fragment(&mut self.assembler, payload, h);
        self.front_offset += chunk;
        let msg = self.expected.front().expect("checked before");
        if self.front_offset == msg.bytes.len() {
            let msg = self.expected.pop_front().expect("checked before");
            if self.front_whole {
                self.whole_expected.push_back(msg);
            }
            self.front_offset = 0;
            self.front_whole = true;
        }
    }

    /// Whole messages from the assembler must be the ones the reader saw from their beginning.
    fn check_assembled(&mut self) {
        for (bytes, h) in self.assembled.borrow_mut().drain(..) {
            let Some(msg) = self.whole_expected.pop_front() else {
                panic!(
                    "the assembler delivered a message ending at {} that was not seen whole",
                    h.position()
                );
            };
            assert!(bytes == msg.bytes, "assembled bytes differ from the message at {}", msg.start);
            assert_eq!(h.position(), msg.end, "assembled position");
            assert!(h.is_begin() && h.is_end(), "assembled flags");
            assert_eq!(h.frame_length() as usize, HEADER_LEN + msg.bytes.len(), "assembled length");
            assert_eq!(h.reserved_value(), msg.reserved, "assembled reserved value");
        }
        assert!(self.whole_expected.is_empty(), "the assembler held back a whole message");
    }

    /// Where the next fragment the oracle expects starts, if any.
    fn next_fragment_start(&self, max_payload: usize) -> Option<i64> {
        let msg = self.expected.front()?;
        Some(msg.start + (self.front_offset / max_payload * (max_payload + HEADER_LEN)) as i64)
    }
}

/// The kernel's slot locks in the model: the slots whose owners are alive.
struct ModelLocks(Vec<usize>);

impl SlotLocks for ModelLocks {
    type Error = std::convert::Infallible;

    fn try_lock(&self, index: usize) -> Result<bool, Self::Error> {
        Ok(!self.0.contains(&index))
    }

    fn unlock(&self, _index: usize) {}
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JoinRule {
    Latest,
    Slowest,
    /// So many 32-byte steps behind the producer.
    Back(usize),
}

/// A publisher with its flow control and any number of subscribers, all in one thread over heap
/// memory, with the oracle's expectations.
struct Model {
    appender: Appender<HeapRegion>,
    slots: Slots<HeapRegion>,
    flow: FlowControl,
    readers: Vec<Reader>,
    /// Committed messages that a joiner might still read.
    history: VecDeque<Rc<Msg>>,
    /// A claim held across operations: its bytes and reserved value.
    pending: Option<(ClaimedFrame, Vec<u8>, i64)>,
    term_length: usize,
    max_message: usize,
    max_position: i64,
    next_seq: u64,
    /// The liveness interval has passed: a back-pressured admission may sweep dead readers.
    sweep_due: bool,
    stats: OpsStats,
}

/// What a run of [`ops_oracle`] did, for tests of the seed corpus.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct OpsStats {
    pub published: usize,
    pub fragments: usize,
    pub joins: usize,
    pub terms: i64,
    pub back_pressured: usize,
    pub max_position: usize,
}

impl Model {
    fn new(input: &mut Input<'_>) -> Self {
        let g = small_geometry(input);
        let initial = input.interesting_i32();
        let start_term = match input.below(8) {
            0 => 2,
            1 => i32::MAX - 1 - input.below(3) as i32,
            _ => 0,
        };
        let log = fresh_log(g, initial, start_term);
        let appender = Appender::new(log).expect("a fresh log has a writer position");
        let slot_count = 1 + input.below(6);
        let slots = Slots::initialize(HeapRegion::new(s::file_length(slot_count)), slot_count);
        let flow = FlowControl::new(g.window, appender.position());
        let max_position = appender.log().terms().max_position();
        Self {
            appender,
            slots,
            flow,
            readers: Vec::new(),
            history: VecDeque::new(),
            pending: None,
            term_length: g.term_length,
            max_message: max_message_len(g.term_length),
            max_position,
            next_seq: 0,
            sweep_due: false,
            stats: OpsStats::default(),
        }
    }

    fn max_payload(&self) -> usize {
        self.appender.max_payload()
    }

    // --- the publisher, as `Publication` does it ------------------------------------------

    /// `Publication::admit`.
    fn admit(&mut self, len: usize) -> Result<(), OfferError> {
        if self.appender.position() < self.flow.limit() {
            return Ok(());
        }
        let position = self.appender.position();
        let framed = framed_length(len, self.appender.max_payload()) as i64;
        if position.saturating_add(framed) >= self.max_position {
            return Err(OfferError::MaxPositionExceeded);
        }
        if position < self.flow.recompute(&self.slots, SESSION) {
            return Ok(());
        }
        if self.flow.connected()
            && self.sweep_due
            && self.sweep() > 0
            && position < self.flow.recompute(&self.slots, SESSION)
        {
            return Ok(());
        }
        Err(if self.flow.connected() { OfferError::BackPressured } else { OfferError::NotConnected })
    }

    /// `Publication::offer_parts`.
    fn offer_parts(&mut self, parts: &[&[u8]], len: usize) -> Result<i64, OfferError> {
        if len > self.max_message {
            return Err(OfferError::MessageTooLarge { len, max: self.max_message });
        }
        self.abort_pending();
        loop {
            self.admit(len)?;
            match self.appender.append(parts, len) {
                Ok(position) => return Ok(position),
                Err(Tripped) => self.appender.rotate().map_err(|_| OfferError::MaxPositionExceeded)?,
            }
        }
    }

    /// `Publication::try_claim`.
    fn try_claim(&mut self, len: usize) -> Result<ClaimedFrame, OfferError> {
        let max = self.appender.max_payload();
        if len > max {
            return Err(OfferError::MessageTooLarge { len, max });
        }
        self.abort_pending();
        loop {
            self.admit(len)?;
            match self.appender.claim(len) {
                Ok(frame) => return Ok(frame),
                Err(Tripped) => self.appender.rotate().map_err(|_| OfferError::MaxPositionExceeded)?,
            }
        }
    }

    fn abort_pending(&mut self) {
        if let Some((frame, _, _)) = self.pending.take() {
            self.appender.abort(frame);
        }
    }

    /// `Slots::evict_dead` with the kernel locks modelled: a live reader holds its slot's lock, a
    /// crashed one's lock is gone. Only crashed readers' slots may be freed.
    fn sweep(&mut self) -> usize {
        self.sweep_due = false;
        let locks = ModelLocks(self.readers.iter().filter(|r| r.alive).map(|r| r.slot).collect());
        let evicted = self.slots.evict_dead(&locks);
        let before = self.readers.len();
        self.readers.retain(|r| r.alive);
        assert_eq!(evicted, before - self.readers.len(), "evicted other slots than the crashed readers'");
        evicted
    }

    /// Checks the outcome of an offer or claim that did not append.
    fn check_refusal(&self, e: OfferError, before: i64, len: usize) {
        match e {
            OfferError::BackPressured => {
                assert!(!self.readers.is_empty(), "back pressured with no reader");
                assert!(self.appender.position() >= self.flow.limit(), "back pressured below the limit");
            }
            OfferError::NotConnected => assert!(self.readers.is_empty(), "not connected with readers"),
            OfferError::MaxPositionExceeded => {
                let framed = framed_length(len, self.max_payload()) as i64;
                assert!(before + framed >= self.max_position, "max position refused at {before} + {framed}");
            }
            OfferError::MessageTooLarge { len: l, max } => {
                assert!(l == len && l > max, "too large: {l} > {max}");
                assert_eq!(self.appender.position(), before, "a refused message moved the writer");
            }
        }
    }

    /// A message became visible: readers at or before it must see it.
    fn publish(&mut self, msg: Msg) {
        let msg = Rc::new(msg);
        self.stats.published += 1;
        for r in self.readers.iter_mut().filter(|r| r.alive && r.position <= msg.start) {
            r.expected.push_back(msg.clone());
        }
        self.history.push_back(msg);
        let horizon = self.appender.position() - 2 * self.term_length as i64;
        while self.history.front().is_some_and(|m| m.end <= horizon) {
            self.history.pop_front();
        }
    }

    fn message_len(&self, input: &mut Input<'_>) -> usize {
        let mp = self.max_payload();
        match input.below(8) {
            0 => 0,
            1..=3 => input.below(mp.min(self.max_message) + 1),
            4 | 5 => input.below(self.max_message + 1),
            6 => (mp * (1 + input.below(self.max_message / mp + 1)) + input.below(3)).saturating_sub(1),
            _ => input.below(2 * self.max_message + 2),
        }
    }

    fn op_offer(&mut self, input: &mut Input<'_>, vectored: bool) {
        let len = self.message_len(input);
        let bytes = message_bytes(self.next_seq, len);
        let mut parts: Vec<&[u8]> = Vec::new();
        if vectored {
            let mut cuts: Vec<usize> = (0..input.below(4)).map(|_| input.below(len + 1)).collect();
            cuts.sort_unstable();
            let mut at = 0;
            for c in cuts {
                parts.push(&bytes[at..c]);
                at = c;
            }
            parts.push(&bytes[at..]);
        } else {
            parts.push(&bytes);
        }
        let before = self.appender.position();
        match self.offer_parts(&parts, len) {
            Ok(end) => {
                self.next_seq += 1;
                assert_eq!(end, self.appender.position(), "offer returned another position");
                let start = end - framed_length(len, self.max_payload()) as i64;
                assert!(start >= before, "message at {start} behind the writer at {before}");
                if start > before {
                    assert_eq!(start % self.term_length as i64, 0, "skipped space other than a term's end");
                }
                self.publish(Msg { start, end, bytes, reserved: 0 });
            }
            Err(e) => {
                self.stats.back_pressured += (e == OfferError::BackPressured) as usize;
                self.stats.max_position += (e == OfferError::MaxPositionExceeded) as usize;
                self.check_refusal(e, before, len);
            }
        }
    }

    /// `try_claim`, fill, then commit, abort or hold (0, 1, 2).
    fn op_claim(&mut self, input: &mut Input<'_>, then: u8) {
        let len = if input.below(8) == 0 {
            self.max_payload() + input.below(3)
        } else {
            input.below(self.max_payload() + 1)
        };
        let reserved = input.interesting_i64();
        let in_place = input.bool();
        let before = self.appender.position();
        let frame = match self.try_claim(len) {
            Ok(frame) => frame,
            Err(e) => return self.check_refusal(e, before, len),
        };
        let bytes = message_bytes(self.next_seq, len);
        self.next_seq += 1;
        let fill = |buf: &mut [u8]| {
            assert_eq!(buf.len(), len, "claim buffer length");
            assert!(is_zero(buf), "claim buffer is not clean (I3)");
            buf.copy_from_slice(&bytes);
        };
        if in_place {
            fill(self.appender.claim_slice(&frame));
        } else {
            self.appender.with_claim_payload(&frame, fill);
        }
        self.appender.set_claim_reserved_value(&frame, reserved);
        match then {
            0 => self.commit(frame, bytes, reserved),
            1 => self.appender.abort(frame),
            _ => self.pending = Some((frame, bytes, reserved)),
        }
    }

    fn commit(&mut self, frame: ClaimedFrame, bytes: Vec<u8>, reserved: i64) {
        let end = frame.position;
        let start = end - align(bytes.len() + HEADER_LEN, FRAME_ALIGNMENT) as i64;
        self.appender.commit(frame);
        self.publish(Msg { start, end, bytes, reserved });
    }

    fn op_pending(&mut self, commit: bool) {
        match self.pending.take() {
            Some((frame, bytes, reserved)) if commit => self.commit(frame, bytes, reserved),
            Some((frame, _, _)) => self.appender.abort(frame),
            None => {}
        }
    }

    /// `Publication::is_connected`: sweep, recompute, report.
    fn op_is_connected(&mut self) {
        self.sweep();
        self.flow.recompute(&self.slots, SESSION);
        assert_eq!(self.flow.connected(), !self.readers.is_empty(), "connected flag");
    }

    // --- subscribers, as `Subscription` does it -------------------------------------------

    /// `Subscription::join`: the crate's `stream::join::join` over the model's log and slots. A
    /// refused join frees its slot (a later op may try again).
    fn op_join(&mut self, rule: JoinRule) {
        let Some(slot) = (0..self.slots.count()).find(|i| self.readers.iter().all(|r| r.slot != *i)) else {
            return;
        };
        self.slots.claim(slot, 100 + slot as i64, 0);
        let log = self.appender.log();
        let producer = log.producer_position().expect("the model's log is valid");
        let crate_rule = match rule {
            JoinRule::Latest => join::JoinRule::Latest,
            JoinRule::Slowest => join::JoinRule::Slowest,
            JoinRule::Back(steps) => join::JoinRule::Position(producer - (steps * FRAME_ALIGNMENT) as i64),
        };
        let position = match join::join(log, &self.slots, slot, crate_rule) {
            Ok(position) => position,
            Err(refused) => {
                let oldest = (producer - self.term_length as i64).max(0);
                let slowest = self.slots.scan(SESSION, Some(slot)).min;
                self.slots.free(slot);
                match (rule, refused) {
                    // The slowest reader can be more than a term back (it joined at an old
                    // position below the others): retried until it catches up.
                    (JoinRule::Slowest, JoinRefused::GaveUp) => assert!(
                        slowest.is_some_and(|m| m < oldest),
                        "join at the slowest reader ({slowest:?}) gave up, oldest joinable {oldest}"
                    ),
                    (JoinRule::Back(_), JoinRefused::NotAvailable { requested, oldest, newest }) => assert!(
                        requested < oldest || requested > newest || self.fragment_offset(requested).is_none(),
                        "join at {requested}, a fragment boundary within [{oldest}, {newest}], refused"
                    ),
                    (rule, refused) => panic!("{rule:?} join refused: {refused:?}"),
                }
                return;
            }
        };
        let mut r = Reader::new(slot, position);
        r.expected = self.history.iter().filter(|m| m.end > position).cloned().collect();
        if let Some(front) = r.expected.front() {
            if front.start < position {
                let Some((_, off)) = self.fragment_offset(position) else {
                    panic!(
                        "join accepted at {position}, inside the message at {}..{} but not at a fragment",
                        front.start, front.end
                    );
                };
                r.front_offset = off;
                r.front_whole = false;
            }
        }
        // A join at the slowest position must expect exactly what the slowest reader expects.
        if let Some(twin) = self.readers.iter().find(|o| o.alive && o.position == position) {
            assert_eq!(twin.front_offset, r.front_offset, "joiner and twin disagree");
            assert!(
                twin.expected.iter().map(|m| m.start).eq(r.expected.iter().map(|m| m.start)),
                "joiner and twin disagree"
            );
        }
        self.readers.push(r);
        self.stats.joins += 1;
    }

    /// If `position` is the start of a fragment of a remembered message (not its first), the
    /// message's start and the payload bytes before that fragment; `Some((start, 0))` for a first.
    fn fragment_offset(&self, position: i64) -> Option<(i64, usize)> {
        let mp = self.max_payload();
        let msg = self.history.iter().find(|m| m.start <= position && position < m.end)?;
        let mut at = msg.start;
        let mut off = 0;
        while at < position {
            let chunk = (msg.bytes.len() - off).min(mp);
            at += align(chunk + HEADER_LEN, FRAME_ALIGNMENT) as i64;
            off += chunk;
        }
        (at == position).then_some((msg.start, off))
    }

    fn op_poll(&mut self, input: &mut Input<'_>) {
        if self.readers.is_empty() {
            return;
        }
        let k = input.below(self.readers.len());
        match input.below(4) {
            0 | 1 => {
                let limit = [0, 1, 2, 3, 5, 8, 64, usize::MAX][input.below(8)];
                self.poll(k, limit, &[Action::Continue]);
            }
            2 => {
                let limit = 1 + input.below(8);
                let actions: Vec<Action> = (0..1 + input.below(4)).map(|_| input.action()).collect();
                self.poll(k, limit, &actions);
            }
            _ => {
                let max_bytes = [0, 32, 64, 200, self.term_length / 2, usize::MAX][input.below(6)];
                self.block_poll(k, max_bytes);
            }
        }
    }

    /// `Subscription::poll`/`controlled_poll` of reader `k`; returns whether it moved.
    fn poll(&mut self, k: usize, limit: usize, actions: &[Action]) -> bool {
        let mp = self.max_payload();
        let Self { appender, slots, readers, stats, .. } = self;
        let r = &mut readers[k];
        if !r.alive {
            return false;
        }
        let (slot, before) = (r.slot, r.position);
        let mut calls = 0;
        let last_end = std::cell::Cell::new(before);
        let scan = reader::read(
            appender.log(),
            before,
            limit,
            |payload, h| {
                let chunk = r.check(payload, h, mp);
                let action = actions[calls % actions.len()];
                calls += 1;
                if action != Action::Abort {
                    r.consume(payload, h, chunk);
                    stats.fragments += 1;
                    last_end.set(h.position());
                }
                action
            },
            |p| {
                assert_eq!(p, last_end.get(), "commit at another position than the fragment's end");
                slots.set_position(slot, p);
            },
        );
        self.after_read(k, before, scan)
    }

    /// `Subscription::block_poll` of reader `k`.
    fn block_poll(&mut self, k: usize, max_bytes: usize) -> bool {
        let mp = self.max_payload();
        let Self { appender, readers, stats, .. } = self;
        let r = &mut readers[k];
        if !r.alive {
            return false;
        }
        let before = r.position;
        let scan = reader::read_block(appender.log(), before, max_bytes, |block, at| {
            assert!(at >= before, "block before the reader");
            let mut o = 0;
            while o < block.len() {
                let len = i32::from_le_bytes(block[o..o + 4].try_into().unwrap()) as usize;
                let rest = HeaderRest::decode(block[o + REST_OFFSET..o + HEADER_LEN].try_into().unwrap());
                let aligned = align(len, FRAME_ALIGNMENT);
                let h = Header { frame_length: len as i32, rest, position: at + (o + aligned) as i64 };
                let payload = &block[o + HEADER_LEN..o + len];
                let chunk = r.check(payload, &h, mp);
                r.consume(payload, &h, chunk);
                stats.fragments += 1;
                o += aligned;
            }
        });
        assert_eq!(scan.position, before + scan.fragments as i64, "block consumed bytes");
        self.after_read(k, before, scan)
    }

    /// `Subscription::finish`, plus the oracle's checks of where the reader stands.
    fn after_read(&mut self, k: usize, before: i64, scan: Scan) -> bool {
        let mp = self.max_payload();
        let writer = self.appender.position();
        let r = &mut self.readers[k];
        assert!(
            scan.fault.is_none(),
            "fault {:?} at {} in a log only this crate wrote",
            scan.fault,
            scan.position
        );
        assert!(scan.position >= before, "reader moved back");
        assert!(scan.position <= writer, "reader passed the writer");
        if scan.position != before {
            r.position = scan.position;
            self.slots.set_position(r.slot, scan.position);
        }
        r.check_assembled();
        match r.next_fragment_start(mp) {
            Some(next) if r.front_offset > 0 => assert_eq!(r.position, next, "reader stopped mid-fragment"),
            Some(next) => assert!(
                r.position <= next,
                "reader at {} passed an undelivered message at {next}",
                r.position
            ),
            None => {}
        }
        scan.position != before
    }

    fn op_leave(&mut self, input: &mut Input<'_>) {
        if self.readers.is_empty() {
            return;
        }
        let k = input.below(self.readers.len());
        if input.bool() {
            // Subscription::drop.
            let r = self.readers.remove(k);
            self.slots.free(r.slot);
        } else {
            // A crash: the slot stays active at its position until a sweep.
            self.readers[k].alive = false;
        }
    }

    /// Every live reader reads everything committed; then nothing may be left over, and an
    /// offer must not be back-pressured by live readers that have caught up.
    fn op_drain(&mut self) {
        let mp = self.max_payload();
        for k in 0..self.readers.len() {
            while self.poll(k, 64, &[Action::Continue]) {}
        }
        let writer = self.appender.position();
        let pending_start = self
            .pending
            .as_ref()
            .map(|(f, b, _)| f.position - align(b.len() + HEADER_LEN, FRAME_ALIGNMENT) as i64);
        for r in self.readers.iter().filter(|r| r.alive) {
            assert!(
                r.expected.is_empty(),
                "reader in slot {} has {} messages left after a drain (next at {:?})",
                r.slot,
                r.expected.len(),
                r.next_fragment_start(mp)
            );
            assert!(
                r.position == writer || Some(r.position) == pending_start,
                "drained reader at {} (writer {writer}, pending claim at {pending_start:?})",
                r.position
            );
        }
        if !self.readers.is_empty() && self.readers.iter().all(|r| r.alive) && pending_start.is_none() {
            match self.admit(self.max_message) {
                Ok(()) | Err(OfferError::MaxPositionExceeded) => {}
                Err(e) => panic!("{e} with every reader caught up"),
            }
        }
    }

    /// Checks that hold between any two operations.
    fn check_invariants(&self) {
        let log = self.appender.log();
        let writer = self.appender.position();
        let t = self.term_length;
        assert_eq!(log.producer_position(), Ok(writer), "published tail");
        for r in &self.readers {
            assert!(
                writer - r.position < 2 * t as i64,
                "writer at {writer} lapped the reader at {}",
                r.position
            );
            assert_eq!(self.slots.position(r.slot), r.position, "slot position");
            assert_eq!(self.slots.state(r.slot), (SESSION, s::STATE_ACTIVE), "slot state");
        }
        let terms = log.terms();
        let last = (writer - 1).max(0);
        assert_eq!(terms.position(terms.term_id(last), terms.term_offset(last)), last, "position round trip");
        // I3: the rest of the active term and the cleaned part of the next partition are zero.
        let offset = terms.term_offset(writer);
        if writer < self.max_position {
            let active = log.partition_base(terms.partition(writer));
            let next = log.partition_base((terms.partition(writer) + 1) % PARTITION_COUNT);
            let mut rest = vec![0u8; t - offset];
            log.region().copy_out(active + offset, &mut rest);
            assert!(is_zero(&rest), "unwritten part of the active term is dirty (I3)");
            let mut cleaned = vec![0u8; offset];
            log.region().copy_out(next, &mut cleaned);
            assert!(is_zero(&cleaned), "the next partition is not cleaned up to the writer (I3)");
        }
    }
}

/// Fuzz target `ops_oracle`: random operation sequences — offers of 0 to several fragments,
/// vectored offers, claims committed, aborted or held, polls with random fragment limits and
/// actions, block polls, readers joining (latest, slowest, back in the log), leaving and
/// crashing, sweeps — on a tiny term so rotations are frequent, with the writer held to the
/// flow-control limit exactly as `Publication` does.
///
/// Properties: every reader gets exactly the bytes of every message committed after its join, in
/// order, once, with the right flags, positions and reserved values; the assembler hands out
/// exactly the messages seen from their first fragment; no fault; positions only move forward;
/// the writer never laps a reader, keeps partitions clean ahead of itself (I3), and is only
/// refused for a reason that holds.
pub fn ops_oracle(data: &[u8]) {
    let _ = run_ops(data);
}

pub(crate) fn run_ops(data: &[u8]) -> OpsStats {
    let mut input = Input::new(data);
    let mut m = Model::new(&mut input);
    let mut ops = 0;
    while !input.is_empty() && ops < 2000 {
        ops += 1;
        let op = input.byte();
        m.sweep_due = op & 0x80 != 0;
        match op & 0x0F {
            0..=3 => m.op_offer(&mut input, false),
            4 => m.op_offer(&mut input, true),
            5 => m.op_claim(&mut input, 0),
            6 => m.op_claim(&mut input, 1),
            7 => m.op_claim(&mut input, 2),
            8 => m.op_pending(op & 0x10 != 0),
            9..=11 => m.op_poll(&mut input),
            12 => {
                let rule = match input.below(4) {
                    0 | 1 => JoinRule::Latest,
                    2 => JoinRule::Slowest,
                    _ => JoinRule::Back(input.below(m.term_length / FRAME_ALIGNMENT + 2)),
                };
                m.op_join(rule);
            }
            13 => m.op_leave(&mut input),
            14 => m.op_is_connected(),
            _ => m.op_drain(),
        }
        m.check_invariants();
    }
    m.op_drain();
    m.check_invariants();
    m.stats.terms = m.appender.position() >> m.appender.log().terms().bits;
    m.stats
}

// ---------------------------------------------------------------------------------------------
// (d) assembler
// ---------------------------------------------------------------------------------------------

/// A fragment the harness feeds to the assembler.
#[derive(Clone, Debug)]
struct Fragment {
    payload: Vec<u8>,
    header: Header,
}

impl Fragment {
    fn start(&self) -> i64 {
        self.header.position() - align(self.header.frame_length() as usize, FRAME_ALIGNMENT) as i64
    }

    fn unfragmented(&self) -> bool {
        self.header.flags() & UNFRAGMENTED == UNFRAGMENTED
    }
}

/// Reference model: a message is delivered when an END fragment closes a chain of fragmented
/// frames going back, contiguous and of one session, to a BEGIN with no END in between.
/// Unfragmented frames pass through and never take part in a chain.
#[derive(Clone, Default)]
struct Reference {
    chain: Vec<Fragment>,
}

impl Reference {
    /// What the assembler must deliver for `f`: its payload and header.
    fn expect(&self, f: &Fragment) -> Option<(Vec<u8>, Header)> {
        if f.unfragmented() {
            return Some((f.payload.clone(), f.header));
        }
        if !f.header.is_end() || f.header.is_begin() {
            return None;
        }
        let mut need = f.start();
        let mut parts = vec![f];
        for g in self.chain.iter().rev() {
            if g.header.position() != need
                || g.header.session_id() != f.header.session_id()
                || g.header.is_end()
            {
                return None;
            }
            parts.push(g);
            if g.header.is_begin() {
                let payload: Vec<u8> = parts.iter().rev().flat_map(|p| p.payload.iter().copied()).collect();
                let mut header = g.header;
                header.rest.flags = UNFRAGMENTED;
                header.frame_length = (HEADER_LEN + payload.len()).min(i32::MAX as usize) as i32;
                header.position = f.header.position();
                return Some((payload, header));
            }
            need = g.start();
        }
        None
    }

    /// The fragment was consumed (not aborted).
    fn take(&mut self, f: &Fragment) {
        if !f.unfragmented() {
            self.chain.push(f.clone());
            if self.chain.len() > 512 {
                self.chain.drain(..256);
            }
        }
    }
}

/// Fuzz target `assembler`: `FragmentAssembler` (plain and controlled) over arbitrary fragment
/// sequences — flags, sizes, positions, sessions — with aborted deliveries redelivered as a poll
/// does.
///
/// Properties: no panic; it delivers exactly what the reference model delivers (bytes and header),
/// that is only messages whose fragments were contiguous BEGIN..END of one session; the controlled
/// handler's action is passed back for deliveries and `Continue` otherwise.
pub fn assembler(data: &[u8]) {
    let mut input = Input::new(data);
    let controlled = input.bool();
    let got: Delivered = Rc::default();
    let actions: Rc<RefCell<VecDeque<Action>>> = Rc::default();
    let sink = got.clone();
    let plain_sink = got.clone();
    let queue = actions.clone();
    let mut controlled_assembler = FragmentAssembler::new(move |m: &[u8], h: &Header| {
        sink.borrow_mut().push((m.to_vec(), *h));
        queue.borrow_mut().pop_front().unwrap_or(Action::Continue)
    });
    let mut plain_assembler = FragmentAssembler::with_capacity(
        move |m: &[u8], h: &Header| plain_sink.borrow_mut().push((m.to_vec(), *h)),
        input.below(256),
    );
    let mut reference = Reference::default();
    let mut next_start: i64 = FRAME_ALIGNMENT as i64 * input.below(64) as i64;
    let mut session = 0;
    let mut frames = 0;
    while !input.is_empty() && frames < 512 {
        frames += 1;
        let ctl = input.byte();
        let flags = match ctl & 7 {
            0 => BEGIN_FLAG,
            1 | 2 => 0,
            3 => END_FLAG,
            4 | 5 => UNFRAGMENTED,
            6 => BEGIN_FLAG | (input.byte() & !UNFRAGMENTED),
            _ => input.byte(),
        };
        if ctl & 0x08 != 0 {
            session = input.below(3) as i32;
        }
        if ctl & 0x10 != 0 {
            next_start = FRAME_ALIGNMENT as i64 * input.u16() as i64;
        }
        let len = match ctl >> 5 {
            0..=3 => input.below(80),
            4 | 5 => 0,
            _ => input.below(3000),
        };
        let frame_length = HEADER_LEN + len;
        let position = next_start + align(frame_length, FRAME_ALIGNMENT) as i64;
        let f = Fragment {
            payload: message_bytes(frames as u64, len),
            header: Header {
                frame_length: frame_length as i32,
                rest: HeaderRest {
                    version: CURRENT_VERSION,
                    flags,
                    frame_type: TYPE_DATA,
                    term_offset: (next_start & 0xFFFF) as i32,
                    session_id: session,
                    stream_id: STREAM,
                    term_id: (next_start >> 16) as i32,
                    reserved_value: frames as i64,
                },
                position,
            },
        };
        next_start = position;
        if !controlled {
            let want = reference.expect(&f);
            FragmentHandler::on_fragment(&mut plain_assembler, &f.payload, &f.header);
            reference.take(&f);
            check_delivery(&got, want);
            continue;
        }
        // A controlled poll redelivers an aborted fragment; give up aborting after a few tries.
        for attempt in 0.. {
            let action = if attempt < 3 { input.action() } else { Action::Continue };
            actions.borrow_mut().clear();
            actions.borrow_mut().push_back(action);
            let want = reference.expect(&f);
            let delivered = want.is_some();
            let returned =
                ControlledFragmentHandler::on_fragment(&mut controlled_assembler, &f.payload, &f.header);
            check_delivery(&got, want);
            if delivered {
                assert_eq!(returned, action, "the assembler did not pass the handler's action back");
            } else {
                assert_eq!(returned, Action::Continue, "a fragment that completes nothing must continue");
            }
            if returned != Action::Abort {
                reference.take(&f);
                break;
            }
        }
    }
}

fn check_delivery(got: &Delivered, want: Option<(Vec<u8>, Header)>) {
    let mut got = got.borrow_mut();
    match (got.pop(), want) {
        (None, None) => {}
        (Some((bytes, h)), Some((want_bytes, want_h))) => {
            assert!(
                bytes == want_bytes,
                "delivered bytes differ from the reference ({} vs {})",
                bytes.len(),
                want_bytes.len()
            );
            assert_eq!(h, want_h, "delivered header differs from the reference");
        }
        (Some((_, h)), None) => {
            panic!("delivered a message ending at {} that the reference does not", h.position())
        }
        (None, Some((_, h))) => {
            panic!("dropped a message ending at {} that the reference delivers", h.position())
        }
    }
    assert!(got.is_empty(), "more than one delivery for one fragment");
}

#[cfg(test)]
mod tests {
    //! Runs the targets in-process (`RUSTFLAGS='--cfg fuzzing' cargo test --lib fuzz::`): on random
    //! inputs, so a harness bug shows up without libFuzzer, and on the seed corpus, which the
    //! builders below write (`... -- --ignored write_seed_corpus`) and which must stay meaningful.

    use super::*;

    type Target = fn(&[u8]);

    const TARGETS: [(&str, Target); 4] = [
        ("term_reader", term_reader),
        ("file_validation", file_validation),
        ("ops_oracle", ops_oracle),
        ("assembler", assembler),
    ];

    /// Bytes of a seed, written in the order the decoders read them.
    #[derive(Default)]
    struct Seed(Vec<u8>);

    impl Seed {
        fn b(&mut self, bytes: &[u8]) -> &mut Self {
            self.0.extend_from_slice(bytes);
            self
        }

        fn u16(&mut self, v: u16) -> &mut Self {
            self.b(&v.to_le_bytes())
        }
    }

    // --- ops_oracle seeds: 1 KiB terms, 64-byte MTU (4 fragments per max message), window T/2.

    fn ops_header(slots: u8, start: u8) -> Seed {
        let mut s = Seed::default();
        // term 1024, mtu choice 0, window 64 + 448, initial term id EDGES[0], start term, slots
        s.b(&[3, 0]).u16(448).b(&[0, start, slots - 1]);
        s
    }

    impl Seed {
        fn join_latest(&mut self) -> &mut Self {
            self.b(&[12, 0])
        }
        fn join_slowest(&mut self) -> &mut Self {
            self.b(&[12, 2])
        }
        fn join_back(&mut self, steps: u8) -> &mut Self {
            self.b(&[12, 3, steps])
        }
        /// Offer of `len` (at most 128 here) bytes.
        fn offer(&mut self, len: u8) -> &mut Self {
            self.b(&[0, 4, len])
        }
        fn offer_vectored(&mut self, len: u8, cut: u8) -> &mut Self {
            self.b(&[4, 4, len, 1, cut])
        }
        /// Claim of `len` (at most 32) bytes: then 5 commit, 6 abort, 7 hold.
        fn claim(&mut self, op: u8, len: u8) -> &mut Self {
            self.b(&[op, 1, len, 4, 1, 1])
        }
        /// Poll reader `k` of `readers` with limit index `limit` (0,1,2,3,5,8,64,MAX).
        fn poll(&mut self, k: u8, readers: u8, limit: u8) -> &mut Self {
            self.b(&[9]);
            if readers > 1 {
                self.b(&[k]);
            }
            self.b(&[0, limit])
        }
        fn controlled(&mut self, k: u8, readers: u8, actions: &[u8]) -> &mut Self {
            self.b(&[10]);
            if readers > 1 {
                self.b(&[k]);
            }
            self.b(&[2, 4, actions.len() as u8 - 1]).b(actions)
        }
        fn block(&mut self, k: u8, readers: u8, max: u8) -> &mut Self {
            self.b(&[11]);
            if readers > 1 {
                self.b(&[k]);
            }
            self.b(&[3, max])
        }
        fn leave(&mut self, k: u8, readers: u8, crash: bool) -> &mut Self {
            self.b(&[13]);
            if readers > 1 {
                self.b(&[k]);
            }
            self.b(&[!crash as u8])
        }
    }

    fn ops_seeds() -> Vec<(&'static str, Vec<u8>)> {
        let mut steady = ops_header(4, 2);
        steady.join_latest().join_latest();
        for i in 0..48u8 {
            steady.offer(i.wrapping_mul(37) % 129).poll(0, 2, 3);
            if i % 3 == 0 {
                steady.poll(1, 2, 7);
            }
        }
        steady.b(&[15]);

        let mut claims = ops_header(4, 2);
        claims.join_latest().offer(100).claim(5, 32).claim(6, 7).offer_vectored(90, 40).poll(0, 1, 7);
        claims.claim(7, 20).poll(0, 1, 7).b(&[8 | 0x10]).join_slowest().poll(0, 2, 7);
        for i in 0..20u8 {
            claims.claim(5 + i % 3, i).offer(i * 6).controlled(i % 2, 2, &[3, 2, 0, 1]);
            claims.block(1 - i % 2, 2, i % 6);
        }
        claims.leave(1, 2, true).offer(128).offer(128).b(&[14]).join_back(6).b(&[15]);

        let mut churn = ops_header(3, 0);
        churn.join_latest();
        for i in 0..16u8 {
            // a second reader at the latest position, a third one message back
            churn.join_latest().offer(64).offer(i + 1).join_back(2).b(&[15]);
            churn.leave(2, 3, false).leave(1, 2, i % 4 == 0).b(&[14]);
        }
        churn.b(&[15]);

        let mut end_of_positions = ops_header(2, 1);
        end_of_positions.b(&[0]).join_latest();
        for _ in 0..40 {
            end_of_positions.offer(120).poll(0, 1, 7);
        }
        end_of_positions.b(&[15]);

        vec![
            ("steady", steady.0),
            ("claims", claims.0),
            ("churn", churn.0),
            ("end-of-positions", end_of_positions.0),
        ]
    }

    // --- term_reader seeds: 512-byte terms, window 256.

    fn term_seeds() -> Vec<(&'static str, Vec<u8>)> {
        fn frames(s: &mut Seed, lens: &[u8], flags: u8) {
            for &len in lens {
                s.b(&[0x00, len, flags]);
            }
            // a padding frame of 96 bytes, then one more data frame, then stop
            s.b(&[0x08, 63, 0, 0x00, 5, flags, 0xFF]);
        }
        fn ops(s: &mut Seed) {
            s.b(&[0, 0, 3]); // walk from the start of the term
            s.b(&[0, 2, 0, 2, 1, 2, 0]); // read at 64, limit 2, actions Commit, Abort
            s.b(&[0, 0, 1, 2]); // block read, max 64 bytes
            s.b(&[4, 0, 2]); // frame_starts_at at the next term
            s.b(&[0, 1, 0, 5, 0, 1]); // read at 32 (mid-frame), no limit, Break
        }
        let mut valid = Seed::default();
        valid.b(&[2, 192, 0, 0, 1, 2]);
        frames(&mut valid, &[0, 10, 32, 33, 1], UNFRAGMENTED);
        valid.b(&[2]);
        frames(&mut valid, &[20, 20], BEGIN_FLAG);
        valid.b(&[1]);
        ops(&mut valid);

        let mut corrupt = Seed::default();
        corrupt.b(&[2, 192, 0, 0, 1, 2]);
        // good frame, length -1, wrong term offset, wrong term id, unknown type, bad version
        corrupt.b(&[0x00, 8, 0xC0, 0x04, 2, 0xC0, 0x00, 8, 0xC0, 0x40, 4, 0xC0, 0]);
        corrupt.b(&[0x00, 8, 0xC0, 0x80, 7, 0xC0, 0x10, 0x00, 9, 0xC0, 0, 2, 0x20, 9, 5, 0xC0, 0xFF]);
        corrupt.b(&[2, 0x04, 0, 10, 0xC0, 0xFF, 1]);
        ops(&mut corrupt);

        let mut wrapped = Seed::default();
        // initial term id i32::MAX, a term count just below 2^31
        wrapped.b(&[2, 192, 10, 2, 1, 2]);
        frames(&mut wrapped, &[3, 4, 5], UNFRAGMENTED);
        wrapped.b(&[2]);
        frames(&mut wrapped, &[6], UNFRAGMENTED);
        wrapped.b(&[0]).b(&[0xAB; 512]);
        ops(&mut wrapped);

        vec![("valid", valid.0), ("corrupt", corrupt.0), ("wrapped", wrapped.0)]
    }

    // --- file_validation seeds.

    fn file_seeds() -> Vec<(&'static str, Vec<u8>)> {
        // A 64 KiB-term log, MTU 1408, window T/2, 4 KiB pages, three appended messages.
        fn valid_log(s: &mut Seed) {
            s.b(&[1, 1, 0, 1, 2, 0, 0, 0, 3]).u16(100).u16(1500).u16(8000);
        }
        let mut heap = Seed::default();
        heap.b(&[0]);
        valid_log(&mut heap);
        heap.b(&[0]);

        let mut patched = Seed::default();
        patched.b(&[0]);
        valid_log(&mut patched);
        // tail counter of partition 0 -> a packed tail; MTU -> 33; one raw byte in the terms
        patched.b(&[3]); // three patches:
        patched.b(&[2, 0, 5, 3]).b(&40u32.to_le_bytes()); // tail of partition 0 = (31, 40)
        patched.b(&[0, 3, 5]); // MTU = 33
        patched.b(&[3]).b(&1000u32.to_le_bytes()).b(&[0, 0xFF]); // one byte in term 0

        let mut file = Seed::default();
        file.b(&[2, 4]);
        valid_log(&mut file);
        file.b(&[0, 1]);

        let mut tiny_file = Seed::default();
        tiny_file.b(&[2, 5, 1, 0, 2, 192, 0, 1, 2, 10, 20, 30, 0, 1]);

        let mut slots = Seed::default();
        // four slots, two claimed, one of them reading our session at an edge position
        slots.b(&[1, 1, 1, 3, 2, 0, 1, 0, 2, 0, 1, 0, 0, 2, 0]);

        let mut readers = Seed::default();
        // four slots, slot 1 claimed by pid 1 and reading our session at 0
        readers.b(&[3, 1, 1, 3, 1, 1, 4, 1, 1, 1, 0, 0]);

        let mut raw = Seed::default();
        raw.b(&[0, 0, 2]).b(&[0; 512]).b(b"SHMLOG\0L\x01\0\0\0\x01\0\0\0");

        vec![
            ("heap-log", heap.0),
            ("patched-log", patched.0),
            ("log-file", file.0),
            ("tiny-log-file", tiny_file.0),
            ("slots", slots.0),
            ("readers-file", readers.0),
            ("raw", raw.0),
        ]
    }

    // --- assembler seeds.

    fn assembler_seeds() -> Vec<(&'static str, Vec<u8>)> {
        // ctl: low 3 bits pick flags (0 B, 1 M, 3 E, 4 U), 0x08 new session, 0x10 jump.
        let mut plain = Seed::default();
        plain.b(&[0, 64, 0]);
        plain.b(&[0, 10, 1, 20, 1, 30, 3, 5, 4, 7]); // B M M E, U
        plain.b(&[0, 10, 0x08 | 3, 1, 5]); // B, E of another session
        plain.b(&[0, 10, 0x10 | 3]).u16(9).b(&[5]); // B, E after a gap
        plain.b(&[1, 3, 3, 3, 0xA0, 0x80, 3, 4]); // M E without B, empty B, empty E
        plain.b(&[0xC0]).u16(2000).b(&[1, 9, 3, 1]);

        let mut controlled = Seed::default();
        controlled.b(&[1, 0, 0]);
        controlled.b(&[0, 10, 7, 1, 20, 7, 3, 5, 0, 3, 3]); // B M E aborted once, then Continue
        controlled.b(&[4, 7, 0, 0, 2]); // U aborted twice, then Commit
        controlled.b(&[0, 4, 7, 3, 4, 0, 0, 0, 0]); // B E aborted three times
        controlled.b(&[0, 4, 7, 1, 4, 7, 3, 4, 1]); // B M E, Break

        vec![("plain", plain.0), ("controlled", controlled.0)]
    }

    fn seeds(target: &str) -> Vec<(&'static str, Vec<u8>)> {
        match target {
            "term_reader" => term_seeds(),
            "file_validation" => file_seeds(),
            "ops_oracle" => ops_seeds(),
            "assembler" => assembler_seeds(),
            _ => unreachable!(),
        }
    }

    fn corpus_dir(target: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target)
    }

    #[test]
    fn ops_seeds_publish_rotate_and_deliver() {
        for (name, bytes) in ops_seeds() {
            let stats = run_ops(&bytes);
            assert!(stats.published >= 8 && stats.fragments >= 20, "{name}: {stats:?}");
            assert!(stats.terms >= 3, "{name}: {stats:?}");
            match name {
                "steady" => assert!(stats.published >= 30 && stats.joins == 2, "{name}: {stats:?}"),
                "claims" => assert!(stats.published >= 20 && stats.joins >= 3, "{name}: {stats:?}"),
                "churn" => assert!(stats.joins >= 30, "{name}: {stats:?}"),
                _ => assert!(stats.max_position > 0, "{name}: {stats:?}"),
            }
        }
    }

    #[test]
    fn term_and_file_seeds_reach_the_code_under_test() {
        for (name, bytes) in term_seeds() {
            let delivered = run_term_reader(&bytes);
            assert!(delivered >= 3 || name == "corrupt", "{name}: {delivered} fragments");
        }
        for (name, bytes) in file_seeds() {
            let accepted = run_file_validation(&bytes);
            assert_eq!(accepted, !matches!(name, "patched-log" | "tiny-log-file" | "raw"), "{name}");
        }
    }

    #[test]
    fn seeds_run_clean() {
        for (target, run) in TARGETS {
            for (_, bytes) in seeds(target) {
                run(&bytes);
            }
        }
    }

    /// The seeds that stay in memory (heap regions only), for Miri: the appender, the reader,
    /// claims, rotation, reader slots, flow control and the assembler with every unsafe access
    /// checked. `.ci/sanitizers.sh` runs it under `cargo miri test` with `--cfg fuzzing`.
    #[test]
    fn miri_in_memory_seeds() {
        for (name, bytes) in term_seeds() {
            let delivered = run_term_reader(&bytes);
            assert!(delivered >= 3 || name == "corrupt", "{name}: {delivered} fragments");
        }
        for (name, bytes) in ops_seeds() {
            if name != "churn" {
                let stats = run_ops(&bytes);
                assert!(stats.published >= 8 && stats.terms >= 3, "{name}: {stats:?}");
            }
        }
        for (_, bytes) in assembler_seeds() {
            assembler(&bytes);
        }
        for (name, bytes) in file_seeds() {
            if name == "slots" {
                file_validation(&bytes);
            }
        }
    }

    #[test]
    fn committed_corpus_runs_clean() {
        for (target, run) in TARGETS {
            let Ok(dir) = std::fs::read_dir(corpus_dir(target)) else { continue };
            for entry in dir {
                let path = entry.unwrap().path();
                run(&std::fs::read(&path).unwrap());
            }
        }
    }

    /// Replays the file named by `SHMLOG_FUZZ_REPLAY` through the target `SHMLOG_FUZZ_TARGET`.
    #[test]
    fn replay() {
        let (Some(target), Some(file)) =
            (std::env::var_os("SHMLOG_FUZZ_TARGET"), std::env::var_os("SHMLOG_FUZZ_REPLAY"))
        else {
            return;
        };
        let run = TARGETS.iter().find(|(t, _)| *t == target).expect("a target name").1;
        run(&std::fs::read(file).unwrap());
    }

    #[test]
    fn harness_survives_random_inputs() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for (_, run) in TARGETS {
            for i in 0..300 {
                let len = (next() % [16, 200, 4000][i % 3]) as usize;
                let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                run(&bytes);
            }
        }
    }

    /// Writes the seed corpus: `cargo test --lib fuzz:: -- --ignored write_seed_corpus`.
    #[test]
    #[ignore]
    fn write_seed_corpus() {
        for (target, _) in TARGETS {
            let dir = corpus_dir(target);
            std::fs::create_dir_all(&dir).unwrap();
            for (name, bytes) in seeds(target) {
                std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
            }
        }
    }
}
