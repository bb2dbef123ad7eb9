//! Model-checker backend: the region contract over loom's atomics and cells, so that loom runs
//! the real appender and reader code, explores their interleavings and reports data races on
//! payload bytes. Compiled only under `--cfg shmlog_loom`.
//!
//! Loom cannot overlay its atomics on raw memory, so memory is modelled by two kinds of objects:
//!
//! - **words**: one loom atomic per control word, `i32` or `i64`, at offsets fixed when the
//!   region is built (for a log: every frame-aligned offset of the terms, where a frame length
//!   may live, and the metadata fields of `layout::log_meta`);
//! - **chunks**: one `loom::cell::UnsafeCell<[u8; 32]>` per 32 bytes of the byte ranges (for a
//!   log: the terms and the stream name). Frames are 32-byte aligned and a multiple of 32 long,
//!   so two frames never share a chunk, and loom reports any copy into a frame that is not
//!   ordered (happens-before) with a copy out of it as a causality violation.
//!
//! A log reuses memory: an offset that held a frame length in one cycle of a partition may hold
//! payload in the next, with the partition zeroed in between (invariant I3). So a word's bytes
//! also lie inside a chunk. The model keeps the two views of such bytes exact by holding, for
//! every byte under a word, at most one non-zero value (in the word or in the chunk), and checks
//! it on every write: bytes copied over a word that is not zero, or a word stored over copied
//! bytes that are not zero, panic as a broken contract (reuse without zeroing). Reads merge
//! both (`chunk | word`), so a block copied out across frame headers (`read_block`) sees the
//! length words too. A word's current value is read for this with loom's `unsync_load`: it adds
//! no scheduling point, and loom tracks it as the non-atomic read it stands for, reporting any
//! atomic store to the word that it is not ordered with.
//!
//! Races loom reports through this backend:
//! - a copy out of (or into) a frame not ordered after a copy into it: the chunk cells;
//! - [`RegionMut::zero`] not ordered with an atomic access of a word it covers (cleaning a
//!   length word a reader may still load): a `guard` cell per word, that atomic accesses read
//!   and `zero` writes;
//! - bytes copied out across a word (a block with frame headers, a payload over an old length
//!   word) not ordered with an atomic store to it: loom's `unsync_load` tracking.
//!
//! Every loom object is created when the region is built, before the model spawns threads:
//! loom counts creating an object as a write by the creating thread, so an object created
//! lazily by one thread and touched by another would be reported as a race that real memory
//! (zeroed from the start) does not have. An access to an offset that was not modelled panics
//! and names it.

// Only the loom models (unit tests) build regions; the loom build of the library alone has no user.
#![cfg_attr(not(test), allow(dead_code))]

use super::{check_range, Region, RegionMut};
use crate::layout::frame::FRAME_ALIGNMENT;
use crate::layout::log_meta::{self as meta, Geometry, PARTITION_COUNT};
use crate::sync::{AtomicI32, AtomicI64, Ordering};
use loom::cell::{ConstPtr, MutPtr, UnsafeCell};
use std::fmt;
use std::ops::Range;

/// Bytes per modelled cell: the frame alignment, so frames never share a cell.
const CHUNK: usize = FRAME_ALIGNMENT;

/// Metadata words accessed as `i64` besides the counters (the tail counters are added by
/// [`LoomRegion::for_log`]).
const META_I64: [usize; 3] = [meta::EOS_POSITION, meta::CREATED_NS, meta::MAGIC_OFFSET];

#[derive(Debug)]
enum Atom {
    I32(AtomicI32),
    I64(AtomicI64),
}

/// One modelled control word.
#[derive(Debug)]
struct Word {
    off: usize,
    atom: Atom,
    /// Stands for the word's memory as non-atomic writes see it: atomic accesses read it,
    /// [`RegionMut::zero`] writes it, so loom orders cleaning against every atomic access.
    guard: UnsafeCell<()>,
}

impl Word {
    fn width(&self) -> usize {
        match self.atom {
            Atom::I32(_) => 4,
            Atom::I64(_) => 8,
        }
    }

    fn i32(&self) -> &AtomicI32 {
        match &self.atom {
            Atom::I32(a) => a,
            Atom::I64(_) => panic!("LoomRegion: word at {} is an i64, accessed as i32", self.off),
        }
    }

    fn i64(&self) -> &AtomicI64 {
        match &self.atom {
            Atom::I64(a) => a,
            Atom::I32(_) => panic!("LoomRegion: word at {} is an i32, accessed as i64", self.off),
        }
    }

    /// The latest value stored, little-endian, padded to 8 bytes. Adds no scheduling point.
    fn latest_bytes(&self) -> [u8; 8] {
        match &self.atom {
            // SAFETY: a loom atomic is a model object whose value lives in loom's execution state,
            // not in memory shared with another OS thread (loom runs every model thread on one OS
            // thread), so this load cannot race at the machine level. It returns the last value
            // in modification order; see the module docs for why that is the right one here.
            Atom::I32(a) => (unsafe { a.unsync_load() } as i64).to_le_bytes(),
            // SAFETY: as above.
            Atom::I64(a) => unsafe { a.unsync_load() }.to_le_bytes(),
        }
    }

    /// Bytes of this word that fall in `range`, as `(byte index in the word, region offset)`.
    fn covered(&self, range: &Range<usize>) -> impl Iterator<Item = (usize, usize)> + '_ {
        let (off, range) = (self.off, range.clone());
        (0..self.width()).map(move |k| (k, off + k)).filter(move |(_, at)| range.contains(at))
    }
}

/// A zeroed region modelled with loom objects; see the module docs.
pub(crate) struct LoomRegion {
    len: usize,
    /// One cell per 32 bytes; `None` where bytes are not modelled.
    chunks: Box<[Option<UnsafeCell<[u8; CHUNK]>>]>,
    /// Sorted by offset, never overlapping.
    words: Box<[Word]>,
    /// The words used as futexes, each with the lock and condition variable that model the
    /// kernel's wait queue (see [`LoomRegion::with_futexes`]).
    futexes: Box<[Futex]>,
    /// Racy reads of the chunks, if modelled (see [`LoomRegion::with_racy_reads`]).
    racy: Option<Racy>,
}

/// Every version each chunk has held, and a relaxed atomic per chunk naming the latest: a racy
/// read (an untethered reader's copy, [`Region::copy_out_racy_unchecked`]) loads the atomic and
/// returns the version it names, so it may see any version loom's memory model lets a relaxed
/// load see: the one a happens-before edge makes visible, or any newer one, torn across chunks.
/// Unlike a copy out of the cells it is no data race for loom, and, like a relaxed atomic load,
/// it synchronises through fences: a reader that read a version written after the writer's
/// release fence, then issues an acquire fence, sees everything before that release fence.
struct Racy {
    stamps: Box<[AtomicI64]>,
    /// Per chunk, its versions, oldest first (the zeroed start at index 0). Model bookkeeping:
    /// loom runs every model thread on one OS thread, and a version is pushed before the stamp
    /// naming it is stored, so every stamp a load returns names a version already there.
    versions: std::sync::Mutex<Vec<Vec<[u8; CHUNK]>>>,
}

/// A futex word's wait queue: the kernel checks the word and queues the sleeper under one lock,
/// and a waker takes that lock to wake; so does the model.
#[derive(Debug)]
struct Futex {
    off: usize,
    /// How many wait on the condition variable and were not woken yet.
    queue: loom::sync::Mutex<usize>,
    woken: loom::sync::Condvar,
}

// SAFETY: the only non-`Sync` parts are the loom cells. Every access to their data goes through
// loom's tracked accessors (`with`, `with_mut`, `get`, `get_mut`), which check that any two
// accesses from different threads are ordered by happens-before (at least one being a write)
// and panic before the data is touched otherwise; and loom runs all model threads on one OS
// thread, switching only at its own scheduling points, so no two accesses ever overlap in time.
unsafe impl Sync for LoomRegion {}

impl fmt::Debug for LoomRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoomRegion")
            .field("len", &self.len)
            .field("chunks", &self.chunks.iter().filter(|c| c.is_some()).count())
            .field("words", &self.words.len())
            .finish()
    }
}

impl LoomRegion {
    /// A zeroed region of `len` bytes whose bytes in `byte_ranges` (widened to 32-byte chunks)
    /// and words at `i32_words`/`i64_words` are modelled.
    ///
    /// Create it inside the loom model, before spawning the threads that share it.
    pub(crate) fn new(
        len: usize,
        byte_ranges: &[Range<usize>],
        i32_words: &[usize],
        i64_words: &[usize],
    ) -> Self {
        let mut chunks: Vec<Option<UnsafeCell<[u8; CHUNK]>>> =
            (0..len.div_ceil(CHUNK)).map(|_| None).collect();
        for r in byte_ranges {
            check_range(len, r.start, r.len(), 1);
            for slot in &mut chunks[r.start / CHUNK..r.end.div_ceil(CHUNK)] {
                slot.get_or_insert_with(|| UnsafeCell::new([0; CHUNK]));
            }
        }
        let i32s = i32_words.iter().map(|&off| (off, Atom::I32(AtomicI32::new(0))));
        let i64s = i64_words.iter().map(|&off| (off, Atom::I64(AtomicI64::new(0))));
        let mut words: Vec<Word> =
            i32s.chain(i64s).map(|(off, atom)| Word { off, atom, guard: UnsafeCell::new(()) }).collect();
        words.sort_by_key(|w| w.off);
        for w in &words {
            check_range(len, w.off, w.width(), w.width());
        }
        for pair in words.windows(2) {
            assert!(
                pair[0].off + pair[0].width() <= pair[1].off,
                "LoomRegion: words at {} and {} overlap",
                pair[0].off,
                pair[1].off
            );
        }
        Self {
            len,
            chunks: chunks.into_boxed_slice(),
            words: words.into_boxed_slice(),
            futexes: Box::new([]),
            racy: None,
        }
    }

    /// Models racy reads of the chunks (see [`Racy`]): every write to a chunk then also stores
    /// a relaxed stamp, a scheduling point, so only the models of untethered readers turn it on.
    pub(crate) fn with_racy_reads(mut self) -> Self {
        let n = self.chunks.len();
        self.racy = Some(Racy {
            stamps: (0..n).map(|_| AtomicI64::new(0)).collect(),
            versions: std::sync::Mutex::new(vec![vec![[0; CHUNK]]; n]),
        });
        self
    }

    /// Records the new contents of the chunks under `[off, off + len)` after a write, if racy
    /// reads are modelled.
    fn publish_versions(&self, off: usize, len: usize) {
        let Some(racy) = &self.racy else { return };
        for (i, _, _) in pieces(off, len) {
            let now = self.chunk(i).with(|p| {
                // SAFETY: `p` points at the cell's live array; the writer reads what it just wrote.
                unsafe { *p }
            });
            let at = {
                let mut versions = racy.versions.lock().unwrap();
                versions[i].push(now);
                versions[i].len() - 1
            };
            racy.stamps[i].store(at as i64, Ordering::Relaxed);
        }
    }

    /// Makes the `i32` words at `offsets` usable as futexes. A modelled wait ignores its timeout
    /// (sleeps until woken), so a lost wake-up shows as a deadlock, which loom reports.
    pub(crate) fn with_futexes(mut self, offsets: &[usize]) -> Self {
        for &off in offsets {
            let _ = self.word(off, 4).i32();
        }
        self.futexes = offsets
            .iter()
            .map(|&off| Futex { off, queue: loom::sync::Mutex::new(0), woken: loom::sync::Condvar::new() })
            .collect();
        self
    }

    fn futex(&self, off: usize) -> &Futex {
        self.futexes.iter().find(|f| f.off == off).unwrap_or_else(|| {
            panic!("LoomRegion: no futex is modelled at offset {off} (add it with `with_futexes`)")
        })
    }

    /// The region of a log with geometry `g`: the terms as bytes with an `i32` word at every
    /// frame-aligned offset, the stream name as bytes, and the metadata fields as words.
    pub(crate) fn for_log(g: &Geometry) -> Self {
        let terms = PARTITION_COUNT * g.term_length;
        let m = g.meta_offset();
        let bytes = [0..terms, m + meta::NAME..m + meta::NAME + meta::NAME_MAX];
        let i32_words: Vec<usize> =
            (0..terms).step_by(FRAME_ALIGNMENT).chain(meta::I32_FIELDS.iter().map(|f| m + f)).collect();
        let tails = (0..PARTITION_COUNT).map(|i| meta::TAIL_COUNTERS + 8 * i);
        let writers = (0..meta::MAX_WRITERS).flat_map(|i| {
            [meta::W_PENDING, meta::W_PID, meta::W_CLAIMED_NS].map(|f| meta::writer_field(i, f))
        });
        let i64_words: Vec<usize> = META_I64
            .iter()
            .chain(&meta::COUNTERS)
            .copied()
            .chain(tails)
            .chain(writers)
            .map(|f| m + f)
            .collect();
        Self::new(g.file_length(), &bytes, &i32_words, &i64_words)
    }

    fn word(&self, off: usize, width: usize) -> &Word {
        check_range(self.len, off, width, width);
        match self.words.binary_search_by_key(&off, |w| w.off) {
            Ok(i) => &self.words[i],
            Err(_) => panic!(
                "LoomRegion: no atomic word is modelled at offset {off} (add it where the region \
                 is built, e.g. `LoomRegion::for_log`)"
            ),
        }
    }

    /// The words that overlap `range`.
    fn words_in(&self, range: &Range<usize>) -> &[Word] {
        let lo = self.words.partition_point(|w| w.off + w.width() <= range.start);
        let hi = self.words.partition_point(|w| w.off < range.end);
        &self.words[lo..hi.max(lo)]
    }

    fn chunk(&self, index: usize) -> &UnsafeCell<[u8; CHUNK]> {
        match &self.chunks[index] {
            Some(cell) => cell,
            None => panic!(
                "LoomRegion: bytes at offset {} are not modelled (add them where the region is \
                 built, e.g. `LoomRegion::for_log`)",
                index * CHUNK
            ),
        }
    }

    /// Panics if a word overlapping `range` holds a non-zero byte inside it: copying bytes
    /// there would overwrite a live control word, which the contract forbids (zero first).
    fn assert_words_clear(&self, range: &Range<usize>) {
        for w in self.words_in(range) {
            let bytes = w.latest_bytes();
            if w.covered(range).any(|(k, _)| bytes[k] != 0) {
                panic!(
                    "LoomRegion: bytes copied over the live atomic word at offset {} (value {:?}): \
                     it was not zeroed before its memory was reused (invariant I3)",
                    w.off,
                    &bytes[..w.width()]
                );
            }
        }
    }

    /// Panics if bytes under `w` were copied in and not zeroed since (see `assert_words_clear`).
    fn assert_bytes_clear(&self, w: &Word) {
        let Some(cell) = &self.chunks[w.off / CHUNK] else { return };
        let at = w.off % CHUNK;
        let dirty = cell.with(|p| {
            // SAFETY: `p` points at the cell's live array; loom tracks this read for the duration
            // of the closure, and the reference does not escape it.
            let chunk = unsafe { &*p };
            chunk[at..at + w.width()].iter().any(|&b| b != 0)
        });
        assert!(
            !dirty,
            "LoomRegion: atomic word stored at offset {} over copied bytes that were not zeroed \
             (invariant I3)",
            w.off
        );
    }

    /// ORs the words overlapping `[off, off + buf.len())` into `buf` (see the module docs).
    fn merge_words(&self, off: usize, buf: &mut [u8]) {
        let range = off..off + buf.len();
        for w in self.words_in(&range) {
            let bytes = w.latest_bytes();
            for (k, at) in w.covered(&range) {
                buf[at - off] |= bytes[k];
            }
        }
    }

    fn pre_store(&self, w: &Word) {
        w.guard.with(|_| ());
        self.assert_bytes_clear(w);
    }
}

/// The pieces of `[off, off + len)` per chunk: `(chunk index, range in the chunk, offset in the
/// caller's buffer)`. Empty when `len` is zero.
fn pieces(off: usize, len: usize) -> impl Iterator<Item = (usize, Range<usize>, usize)> {
    let end = off + len;
    let chunks = if len == 0 { 0..0 } else { off / CHUNK..end.div_ceil(CHUNK) };
    chunks.map(move |i| {
        let lo = (i * CHUNK).max(off);
        let hi = ((i + 1) * CHUNK).min(end);
        (i, lo - i * CHUNK..hi - i * CHUNK, lo - off)
    })
}

// SAFETY: every access is checked against `len` (the `_unchecked` defaults call the checked
// methods), and the loom objects live as long as `self`.
unsafe impl Region for LoomRegion {
    fn len(&self) -> usize {
        self.len
    }

    fn load_i32(&self, off: usize, order: Ordering) -> i32 {
        let w = self.word(off, 4);
        let v = w.i32().load(order);
        // After the load, so that a zero ordered before the store this load acquires is seen as
        // ordered before this access.
        w.guard.with(|_| ());
        v
    }

    fn load_i64(&self, off: usize, order: Ordering) -> i64 {
        let w = self.word(off, 8);
        let v = w.i64().load(order);
        w.guard.with(|_| ());
        v
    }

    fn copy_out(&self, off: usize, dst: &mut [u8]) {
        check_range(self.len, off, dst.len(), 1);
        for (i, r, at) in pieces(off, dst.len()) {
            let n = r.len();
            self.chunk(i).with(|p| {
                // SAFETY: `p` points at the cell's live array; loom tracks this read for the
                // duration of the closure, and the reference does not escape it.
                let chunk = unsafe { &*p };
                dst[at..at + n].copy_from_slice(&chunk[r]);
            });
        }
        self.merge_words(off, dst);
    }

    unsafe fn load_i32_racy_unchecked(&self, off: usize, order: Ordering) -> i32 {
        // No guard access: the zeroing this load may race with is what the caller checks for.
        self.word(off, 4).i32().load(order)
    }

    unsafe fn copy_out_racy_unchecked(&self, off: usize, dst: &mut [u8]) {
        check_range(self.len, off, dst.len(), 1);
        let racy = self
            .racy
            .as_ref()
            .unwrap_or_else(|| panic!("LoomRegion: a racy read of a region built without `with_racy_reads`"));
        for (i, r, at) in pieces(off, dst.len()) {
            let _ = self.chunk(i);
            let stamp = racy.stamps[i].load(Ordering::Relaxed);
            let version = racy.versions.lock().unwrap()[i][stamp as usize];
            dst[at..at + r.len()].copy_from_slice(&version[r]);
        }
        let range = off..off + dst.len();
        for w in self.words_in(&range) {
            let bytes = match &w.atom {
                Atom::I32(a) => (a.load(Ordering::Relaxed) as i64).to_le_bytes(),
                Atom::I64(a) => a.load(Ordering::Relaxed).to_le_bytes(),
            };
            for (k, at) in w.covered(&range) {
                dst[at - off] |= bytes[k];
            }
        }
    }

    unsafe fn with_bytes<T>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> T) -> T {
        check_range(self.len, off, len, 1);
        let mut scratch = vec![0u8; len];
        // The read accesses stay open while `f` runs, as a slice into real memory would.
        let guards: Vec<ConstPtr<[u8; CHUNK]>> =
            pieces(off, len).map(|(i, _, _)| self.chunk(i).get()).collect();
        for ((_, r, at), guard) in pieces(off, len).zip(&guards) {
            // SAFETY: the guard keeps loom's read access to the cell open; the cell outlives it
            // (both borrow `self`), so the reference is valid and ends within this statement.
            let chunk = unsafe { guard.deref() };
            scratch[at..at + r.len()].copy_from_slice(&chunk[r]);
        }
        self.merge_words(off, &mut scratch);
        let out = f(&scratch);
        drop(guards);
        out
    }
}

impl RegionMut for LoomRegion {
    fn store_i32(&self, off: usize, value: i32, order: Ordering) {
        let w = self.word(off, 4);
        self.pre_store(w);
        w.i32().store(value, order);
    }

    fn store_i64(&self, off: usize, value: i64, order: Ordering) {
        let w = self.word(off, 8);
        self.pre_store(w);
        w.i64().store(value, order);
    }

    fn compare_exchange_i64(&self, off: usize, current: i64, new: i64) -> Result<i64, i64> {
        let w = self.word(off, 8);
        self.pre_store(w);
        w.i64().compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
    }

    fn compare_exchange_i32(&self, off: usize, current: i32, new: i32) -> Result<i32, i32> {
        let w = self.word(off, 4);
        self.pre_store(w);
        w.i32().compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
    }

    fn swap_i32(&self, off: usize, value: i32) -> i32 {
        let w = self.word(off, 4);
        self.pre_store(w);
        w.i32().swap(value, Ordering::SeqCst)
    }

    fn fetch_add_i32(&self, off: usize, delta: i32) -> i32 {
        let w = self.word(off, 4);
        self.pre_store(w);
        w.i32().fetch_add(delta, Ordering::SeqCst)
    }

    fn wait_i32(&self, off: usize, expected: i32, _timeout: std::time::Duration) -> bool {
        let futex = self.futex(off);
        let mut queued = futex.queue.lock().unwrap();
        // The kernel issues a full barrier between queueing a waiter and reading the word
        // (futex_wait's barrier A), so the read is ordered after the sleeper's earlier stores
        // (its count on the bell), which a ringer that wakes nobody relies on. A fence, not a
        // SeqCst load: loom takes SeqCst accesses for AcqRel, and a SeqCst load alone let the
        // read miss a bump made before the ringer read the count (a false deadlock of i3).
        crate::sync::fence(Ordering::SeqCst);
        if self.load_i32(off, Ordering::SeqCst) == expected {
            *queued += 1;
            drop(futex.woken.wait(queued).unwrap());
        }
        true
    }

    /// One word only: loom has no wait on several condition variables, and the doorbell's sleep
    /// on several bells is the sleep on one, repeated per bell (the models use one).
    fn wait_any_i32(words: &[(&Self, usize, i32)], timeout: std::time::Duration) -> std::io::Result<bool> {
        match words {
            [(region, off, expected)] => Ok(region.wait_i32(*off, *expected, timeout)),
            _ => panic!("LoomRegion: a sleep on {} words is not modelled", words.len()),
        }
    }

    fn wake_i32(&self, off: usize, count: i32) -> usize {
        let futex = self.futex(off);
        let mut waiting = futex.queue.lock().unwrap();
        // A loom condition variable wakes no waiter spuriously: the count is exact.
        let woken = (*waiting).min(count.max(0) as usize);
        *waiting -= woken;
        if count == 1 {
            futex.woken.notify_one();
        } else {
            futex.woken.notify_all();
        }
        woken
    }

    unsafe fn copy_in(&self, off: usize, src: &[u8]) {
        check_range(self.len, off, src.len(), 1);
        self.assert_words_clear(&(off..off + src.len()));
        for (i, r, at) in pieces(off, src.len()) {
            let n = r.len();
            self.chunk(i).with_mut(|p| {
                // SAFETY: `p` points at the cell's live array; loom tracks this write for the
                // duration of the closure, and the reference does not escape it.
                let chunk = unsafe { &mut *p };
                chunk[r].copy_from_slice(&src[at..at + n]);
            });
        }
        self.publish_versions(off, src.len());
    }

    unsafe fn zero(&self, off: usize, len: usize) {
        check_range(self.len, off, len, 1);
        for (i, r, _) in pieces(off, len) {
            self.chunk(i).with_mut(|p| {
                // SAFETY: as in `copy_in`.
                let chunk = unsafe { &mut *p };
                chunk[r].fill(0);
            });
        }
        self.publish_versions(off, len);
        let range = off..off + len;
        for w in self.words_in(&range) {
            w.guard.with_mut(|_| ());
            let mut bytes = w.latest_bytes();
            let mut changed = false;
            for (k, _) in w.covered(&range) {
                changed |= bytes[k] != 0;
                bytes[k] = 0;
            }
            // A word that already reads zero needs no store: every value a load could return
            // stays the same, and skipping it keeps loom's scheduling points to the real ones.
            if changed {
                let v = i64::from_le_bytes(bytes);
                match &w.atom {
                    Atom::I32(a) => a.store(v as i32, Ordering::Relaxed),
                    Atom::I64(a) => a.store(v, Ordering::Relaxed),
                }
            }
        }
    }

    unsafe fn with_bytes_mut<T>(&self, off: usize, len: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
        check_range(self.len, off, len, 1);
        // The bytes are handed out writable: no live word may lie under them.
        self.assert_words_clear(&(off..off + len));
        let mut scratch = vec![0u8; len];
        // The write accesses stay open while `f` runs, as a slice into real memory would.
        let guards: Vec<MutPtr<[u8; CHUNK]>> =
            pieces(off, len).map(|(i, _, _)| self.chunk(i).get_mut()).collect();
        for ((_, r, at), guard) in pieces(off, len).zip(&guards) {
            // SAFETY: the guard keeps loom's write access to the cell open; the cell outlives it,
            // and the reference ends within this statement.
            let chunk = unsafe { guard.deref() };
            scratch[at..at + r.len()].copy_from_slice(&chunk[r]);
        }
        let out = f(&mut scratch);
        for ((_, r, at), guard) in pieces(off, len).zip(&guards) {
            let n = r.len();
            // SAFETY: as above.
            let chunk = unsafe { guard.deref() };
            chunk[r].copy_from_slice(&scratch[at..at + n]);
        }
        drop(guards);
        self.publish_versions(off, len);
        out
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // a list of modelled ranges that happens to hold one
mod tests {
    use super::*;
    use loom::thread;
    use std::sync::Arc;

    /// 256 bytes, all modelled, with `i32` words at 0, 32 and 64 and an `i64` word at 128.
    fn region() -> LoomRegion {
        LoomRegion::new(256, &[0..256], &[0, 32, 64], &[128])
    }

    #[test]
    fn words_and_bytes_read_as_one_memory() {
        loom::model(|| {
            let r = region();
            // SAFETY: one thread; the model object checks every use.
            unsafe { r.copy_in(36, b"abc") };
            r.store_i32(32, 0x0102_0304, Ordering::Release);
            let mut b = [0u8; 8];
            r.copy_out(32, &mut b);
            assert_eq!(b, [4, 3, 2, 1, b'a', b'b', b'c', 0]);
            // SAFETY: one thread, nobody writes while the closure runs.
            let block = unsafe { r.with_bytes(30, 8, |s| s.to_vec()) };
            assert_eq!(block, [0, 0, 4, 3, 2, 1, b'a', b'b']);
            r.store_i64(128, -2, Ordering::Relaxed);
            assert_eq!(r.load_i64(128, Ordering::Acquire), -2);
            assert_eq!(r.compare_exchange_i64(128, -2, 1), Ok(-2));
            assert_eq!(r.compare_exchange_i64(128, 1, 7), Ok(1));
            assert_eq!(r.compare_exchange_i64(128, 1, 8), Err(7));
        });
    }

    #[test]
    fn zero_clears_bytes_and_words_so_the_memory_can_change_use() {
        loom::model(|| {
            let r = region();
            r.store_i32(32, -1, Ordering::Release);
            // SAFETY: one thread; the model object checks every use.
            unsafe { r.copy_in(40, &[9; 8]) };
            // SAFETY: one thread; the model object checks every use.
            unsafe { r.zero(34, 30) }; // covers half of the word at 32
            assert_eq!(r.load_i32(32, Ordering::Acquire), 0x0000_ffff);
            // SAFETY: one thread; the model object checks every use.
            unsafe { r.zero(32, 2) };
            assert_eq!(r.load_i32(32, Ordering::Acquire), 0);
            // The word's memory now holds payload, and then a word again.
            // SAFETY: one thread, nobody reads or writes while the closure runs.
            unsafe { r.with_bytes_mut(32, 8, |s| s.copy_from_slice(&[5; 8])) };
            let mut b = [0u8; 8];
            r.copy_out(32, &mut b);
            assert_eq!(b, [5; 8]);
            // SAFETY: one thread; the model object checks every use.
            unsafe { r.zero(32, 8) };
            r.store_i32(32, 48, Ordering::Release);
            assert_eq!(r.load_i32(32, Ordering::Acquire), 48);
        });
    }

    #[test]
    #[should_panic(expected = "not zeroed")]
    fn copying_over_a_live_word_is_a_broken_contract() {
        loom::model(|| {
            let r = region();
            r.store_i32(64, 1, Ordering::Release);
            // SAFETY: one thread; the model object checks every use.
            unsafe { r.copy_in(62, &[0; 4]) };
        });
    }

    #[test]
    #[should_panic(expected = "not zeroed")]
    fn storing_a_word_over_copied_bytes_is_a_broken_contract() {
        loom::model(|| {
            let r = region();
            // SAFETY: one thread; the model object checks every use.
            unsafe { r.copy_in(64, &[1]) };
            r.store_i32(64, 1, Ordering::Release);
        });
    }

    #[test]
    #[should_panic(expected = "not modelled")]
    fn unmodelled_bytes_are_named() {
        loom::model(|| {
            let r = LoomRegion::new(256, &[0..64], &[], &[]);
            // SAFETY: one thread; the model object checks every use.
            unsafe { r.copy_in(64, &[1]) };
        });
    }

    #[test]
    #[should_panic(expected = "Causality violation")]
    fn a_copy_not_ordered_by_a_release_store_is_a_race() {
        loom::model(|| {
            let r = Arc::new(region());
            let w = Arc::clone(&r);
            let writer = thread::spawn(move || {
                // SAFETY: deliberately unordered: the model must see loom report it.
                unsafe { w.copy_in(36, b"abc") };
                w.store_i32(32, 35, Ordering::Relaxed);
            });
            if r.load_i32(32, Ordering::Acquire) != 0 {
                r.copy_out(36, &mut [0; 3]);
            }
            writer.join().unwrap();
        });
    }

    #[test]
    #[should_panic(expected = "Causality violation")]
    fn zeroing_a_word_another_thread_may_load_is_a_race() {
        loom::model(|| {
            let r = Arc::new(region());
            let w = Arc::clone(&r);
            // SAFETY: deliberately unordered: the model must see loom report it.
            let writer = thread::spawn(move || unsafe { w.zero(0, 64) });
            r.load_i32(32, Ordering::Acquire);
            writer.join().unwrap();
        });
    }

    #[test]
    fn the_log_region_models_every_metadata_field_the_log_touches() {
        use crate::log::{Counter, Gauge};
        loom::model(|| {
            let g = Geometry { term_length: 128, page_size: 4096, mtu: 64, window: 64 };
            let r = LoomRegion::for_log(&g);
            assert_eq!(r.len(), g.file_length());
            let init = crate::log::LogInit {
                geometry: g,
                initial_term_id: 3,
                session_id: 1,
                stream_id: 2,
                pid: 4,
                created_ns: 5,
                name: "loom",
                concurrent: false,
                session_seq: 1,
            };
            let log = crate::log::Log::initialize(&r, &init);
            log.set_eos_position(64);
            for counter in [
                Counter::BackPressureEvents,
                Counter::LimitRecomputes,
                Counter::ReadersEvicted,
                Counter::IgnoredPositions,
            ] {
                log.count(counter, 1);
                log.count(counter, 2);
                assert_eq!(log.counter(counter), 3);
            }
            for gauge in [Gauge::PublisherLimit, Gauge::ConnectedReaders] {
                log.set_gauge(gauge, 5);
                assert_eq!(log.gauge(gauge), 5);
            }
            let opened = crate::log::Log::open_any_term(&r).expect("a valid log");
            assert_eq!(opened.name(), "loom");
            assert_eq!(opened.producer_position(), Ok(0));
            assert_eq!((opened.eos_position(), opened.publisher_pid()), (64, 4));
        });
    }
}
