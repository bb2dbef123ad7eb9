//! Decoding the fuzzer's bytes into scenario choices, and the helpers every target shares.

use shmlog::__fuzz::frame::{max_message_len, FRAME_ALIGNMENT, HEADER_LEN};
use shmlog::__fuzz::meta::{self, Geometry, PAGE_MIN, PARTITION_COUNT, TERM_MIN_LENGTH};
use shmlog::__fuzz::{meta_field, pack_tail, HeapRegion, Log, LogInit, Ordering, Region, RegionMut};
use shmlog::Action;

/// Session id of every log the targets make.
pub(crate) const SESSION: i32 = 0x5e55;
/// Stream id of every log the targets make.
pub(crate) const STREAM: i32 = 0x57e4;

/// Scenario choices read from the fuzzer's bytes; zeros once they run out.
pub(crate) struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub(crate) fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.data.split_at(n.min(self.data.len()));
        self.data = tail;
        head
    }

    pub(crate) fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let got = self.bytes(N);
        out[..got.len()].copy_from_slice(got);
        out
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    pub(crate) fn i64(&mut self) -> i64 {
        i64::from_le_bytes(self.array())
    }

    pub(crate) fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// A value in `0..n` (0 when `n` is 0 or 1), using as few bytes as `n` needs.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        match n {
            0 | 1 => 0,
            2..=256 => self.byte() as usize % n,
            257..=65_536 => self.u16() as usize % n,
            _ => self.u32() as usize % n,
        }
    }

    /// An `i32` that is often an edge value.
    pub(crate) fn interesting_i32(&mut self) -> i32 {
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
    pub(crate) fn interesting_i64(&mut self) -> i64 {
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

    pub(crate) fn action(&mut self) -> Action {
        match self.byte() % 8 {
            0 => Action::Abort,
            1 => Action::Break,
            2 => Action::Commit,
            _ => Action::Continue,
        }
    }
}

/// Deterministic message bytes: different sequence numbers give different bytes.
pub(crate) fn message_bytes(seq: u64, len: usize) -> Vec<u8> {
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
pub(crate) fn small_geometry(input: &mut Input<'_>) -> Geometry {
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
pub(crate) fn file_geometry(input: &mut Input<'_>) -> Geometry {
    let term_length = TERM_MIN_LENGTH << input.below(2);
    let mtu = [64, 1408, 4096, max_message_len(term_length)][input.below(4)];
    let window = [mtu, term_length / 4, term_length / 2][input.below(3)];
    let page_size = PAGE_MIN << input.below(3);
    let g = Geometry { term_length, page_size, mtu, window };
    assert!(g.validate().is_ok(), "harness geometry {g:?} is valid");
    g
}

/// A freshly initialised log whose writer stands at the start of term `term_count`.
pub(crate) fn fresh_log(g: Geometry, initial_term_id: i32, term_count: i32) -> Log<HeapRegion> {
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
            concurrent: false,
            session_seq: 1,
        },
    );
    if term_count > 0 {
        // As if the writer had already filled `term_count` terms (all zero again by now).
        let r = log.region();
        let index = term_count as usize % PARTITION_COUNT;
        let tail = pack_tail(initial_term_id.wrapping_add(term_count), 0);
        r.store_i64(meta_field(&log, meta::TAIL_COUNTERS + 8 * index), tail, Ordering::Relaxed);
        r.store_i32(meta_field(&log, meta::ACTIVE_TERM_COUNT), term_count, Ordering::Release);
    }
    log
}

/// Overwrites `bytes[at..]` with as much of `v` as fits.
pub(crate) fn put(bytes: &mut [u8], at: usize, v: &[u8]) {
    if at < bytes.len() {
        let n = v.len().min(bytes.len() - at);
        bytes[at..at + n].copy_from_slice(&v[..n]);
    }
}

/// `true` if every byte is zero (one `memcmp` per 4 KiB: a byte loop would spend the fuzzer's
/// time in comparison tracing).
pub(crate) fn is_zero(bytes: &[u8]) -> bool {
    const ZERO: [u8; 4096] = [0; 4096];
    bytes.chunks(ZERO.len()).all(|c| c == &ZERO[..c.len()])
}

pub(crate) fn heap_from(bytes: &[u8]) -> HeapRegion {
    let region = HeapRegion::new(bytes.len());
    // SAFETY: a fresh region nobody else can see yet.
    unsafe { region.copy_in(0, bytes) };
    region
}

pub(crate) fn bytes_of(region: &impl Region) -> Vec<u8> {
    let mut out = vec![0u8; region.len()];
    region.copy_out(0, &mut out);
    out
}
