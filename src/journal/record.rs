//! One catalog record in memory: how a recorder publishes a recording's description and moves
//! its positions, and how any process reads a consistent snapshot. Pure memory over any region,
//! so the loom model runs this very code.
//!
//! Every word is an atomic `i64`. The recorder writes the fields that never change, then
//! release-stores the state; a reader acquire-loads the state first, so it sees those fields
//! whole. The positions only grow while the recording runs; `durable` is stored after the
//! `recorded` it trails and `stopped` after the final `recorded`, and readers load them in the
//! opposite order, so a snapshot always has `start <= durable <= recorded`.
//!
//! A recording cut back by recovery (its recorder died) is the one case where bytes below a
//! recorded position change: recovery zeroes what lies past the cut. It lowers the positions and
//! counts the cut in `CUTS` first, then fences ([`cut_back`]); a replay that read recorded bytes
//! re-reads `CUTS` after an acquire fence ([`uncut`]) and trusts the bytes only if no cut began
//! since it last looked (a seqlock; loom model `j2`).
//!
//! Version 3 gave a record its recording's id (no longer its index) so that the record of a
//! deleted recording can be reused: the deleter marks it `DELETING` before anything of it goes,
//! fences, zeroes what a new recording does not write, and marks it `FREE` ([`retire`],
//! [`free`]); whoever reuses it fences before writing a word of it ([`publish`]). A reader that
//! loads the state and the id before and after what it reads ([`progress`], [`same_recording`])
//! sees either the recording it asked for, whole, or that it is gone (loom model `j3`). Retention moves the start position up (`START`, then `PURGED`) before it
//! removes any segment file ([`move_start`]), so a replay that finds a file missing and then
//! loads the start knows whether it was purged (loom model `j4`).

use super::policy::Retention;
use crate::layout::frame::{max_message_len, FRAME_ALIGNMENT, HEADER_LEN};
use crate::layout::log_meta::{TERM_MAX_LENGTH, TERM_MIN_LENGTH};
use crate::region::{Region, RegionMut};
use crate::sync::protocol;
use crate::sync::{fence, Ordering};

/// Bytes of one record.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const RECORD_LEN: usize = 512;
/// Words of one record.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const WORDS: usize = RECORD_LEN / 8;
/// Longest stream name a record holds.
pub(crate) const NAME_MAX: usize = 128;
/// Largest segment file.
pub(crate) const SEGMENT_MAX: u64 = 1 << 40;

/// Word indices. Loaded in index order but for four: the state first, then `PURGED`, `START` and
/// `ORIGIN` (which retention stores in the opposite order) before the positions, and `durable`
/// before `recorded`. Catalog version 2 added the checksum kind (bits 32..40 of `NAME_LEN`,
/// beside the name's length, so a snapshot loads no more words than before: each word loom may
/// read either way doubles model j) and `CUTS`; both are zero in a version 1 record: no
/// checksum, never cut. Version 3 added the recording's id (bits 32..64 of `PID`, for the same
/// reason) and `ORIGIN` to `RETAIN_SEGMENTS`, which only retention writes (zero in a record that
/// no purge touched, and in older records: no id bits means the id is the record's index).
/// `CUT_FROM` came later without a new version: zero, as in every older record, means never
/// truncated, and a library that does not know it leaves it alone.
pub(crate) mod word {
    pub(crate) const STATE: usize = 0;
    pub(crate) const STOP_REASON: usize = 1;
    pub(crate) const STOP_NS: usize = 2;
    pub(crate) const DURABLE: usize = 3;
    pub(crate) const RECORDED: usize = 4;
    pub(crate) const START: usize = 5;
    pub(crate) const SESSION_ID: usize = 6;
    pub(crate) const STREAM_ID: usize = 7;
    pub(crate) const TERM_LENGTH: usize = 8;
    pub(crate) const SEGMENT_LENGTH: usize = 9;
    pub(crate) const MTU: usize = 10;
    pub(crate) const INITIAL_TERM_ID: usize = 11;
    pub(crate) const START_NS: usize = 12;
    pub(crate) const BOOT_ID: usize = 13;
    pub(crate) const PID: usize = 14;
    pub(crate) const GAP_BEFORE: usize = 15;
    pub(crate) const PREVIOUS: usize = 16;
    /// The name's length (bits 0..32) and the checksum kind (bits 32..40).
    pub(crate) const NAME_LEN: usize = 17;
    pub(crate) const NAME: usize = 18;
    /// After the 16 words of the name: how many times recovery cut the recording back.
    pub(crate) const CUTS: usize = 34;
    /// Where the recording began, with bit 0 set, once retention first moved `START` (zero
    /// before: the origin is the start).
    pub(crate) const ORIGIN: usize = 35;
    /// A segment base: the recording's segment files below it are removed, or being removed.
    pub(crate) const PURGED: usize = 36;
    /// The recording's own retention policy (`policy::Retention`'s three words).
    pub(crate) const RETAIN_AGE_NS: usize = 37;
    pub(crate) const RETAIN_BYTES: usize = 38;
    pub(crate) const RETAIN_SEGMENTS: usize = 39;
    /// The highest stop position a truncation ever cut the recording back from (zero: never
    /// truncated): what lay between the stop and it is gone, and a persistent subscription that
    /// had not read it reports it lost. Zero in records older than it, which read as never cut.
    pub(crate) const CUT_FROM: usize = 40;
}

/// The `PID` word's bits 32..64 for recording `id`: `id + 1` (0 in an older record, whose id is
/// its index). Ids are below `u32::MAX`.
pub(crate) fn id_bits(id: u32) -> i64 {
    ((u64::from(id) + 1) << 32) as i64
}

/// The id of the recording a record at index `slot` whose `PID` word is `pid_word` holds.
pub(crate) fn id_in(pid_word: i64, slot: u32) -> u32 {
    match (pid_word as u64 >> 32) as u32 {
        0 => slot,
        bits => bits - 1,
    }
}

/// The bits of the `NAME_LEN` word that hold the name's length.
const NAME_LEN_MASK: i64 = 0xffff_ffff;

/// Record states.
pub(crate) const FREE: i64 = 0;
pub(crate) const RECORDING: i64 = 1;
pub(crate) const STOPPED: i64 = 2;
/// Its recording is being deleted: its files go, then the record is freed.
pub(crate) const DELETING: i64 = 3;

/// Why a recording stopped. The discriminant is the code stored in the catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub enum StopReason {
    /// The publisher closed its session (end of stream): everything it offered is recorded.
    EndOfStream = 1,
    /// The publisher died; everything it committed is recorded.
    PublisherDied = 2,
    /// The recorder was stopped (or dropped) by its owner.
    Stopped = 3,
    /// An untethered recorder was lapped by the publisher: the next recording of the stream
    /// starts where its subscription went on, after the gap it reports in
    /// [`Recording::gap_before`].
    Lagged = 4,
    /// The disk was full: the recording holds everything before its stop position, intact.
    DiskFull = 5,
    /// Writing failed for another reason (the error was returned to the recorder's owner).
    WriteFailed = 6,
    /// The recorder died; a later recorder closed the recording at its last complete message.
    RecorderDied = 7,
}

/// Every reason with its name for tools, in code order.
const REASONS: [(StopReason, &str); 7] = [
    (StopReason::EndOfStream, "end-of-stream"),
    (StopReason::PublisherDied, "publisher-died"),
    (StopReason::Stopped, "stopped"),
    (StopReason::Lagged, "lagged"),
    (StopReason::DiskFull, "disk-full"),
    (StopReason::WriteFailed, "write-failed"),
    (StopReason::RecorderDied, "recorder-died"),
];

impl StopReason {
    fn code(self) -> i64 {
        self as i64
    }

    fn from_code(code: i64) -> Option<Self> {
        REASONS.iter().map(|&(r, _)| r).find(|&r| r.code() == code)
    }

    /// A short name for tools.
    pub fn as_str(self) -> &'static str {
        REASONS.iter().find(|&&(r, _)| r == self).map_or("unknown", |&(_, name)| name)
    }
}

/// Where a recording stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RecordingState {
    /// A live recorder is extending it.
    Recording,
    /// Its recorder died; the next recorder of the directory (or `shmlog recordings --recover`)
    /// closes it at its last complete message. Replays read it up to its stop position meanwhile.
    Interrupted,
    /// Closed, for the reason given.
    Stopped(StopReason),
}

/// What a recording's frames carry to detect damage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub enum Checksum {
    /// Nothing: only the structural checks of every frame (length, place, type, session). A
    /// flipped payload bit, or a length that still fits its term, replays as data. Frames keep
    /// the reserved value the publisher gave them.
    None,
    /// Each recorded frame's 8-byte reserved value holds the CRC32C of the frame as recorded
    /// (its header with the reserved value taken as zero, then its payload; the upper 32 bits
    /// zero), checked on replay and by recovery. The publisher's reserved values are not kept.
    Crc32c,
}

impl Checksum {
    fn code(self) -> i64 {
        match self {
            Checksum::None => 0,
            Checksum::Crc32c => 1,
        }
    }

    fn from_code(code: i64) -> Option<Self> {
        match code {
            0 => Some(Checksum::None),
            1 => Some(Checksum::Crc32c),
            _ => None,
        }
    }

    /// A short name for tools.
    pub fn as_str(self) -> &'static str {
        match self {
            Checksum::None => "none",
            Checksum::Crc32c => "crc32c",
        }
    }
}

/// The catalog's description of one recording: which stream and session, which positions, in
/// which segment files, in what state.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recording {
    /// Its id in the catalog (part of its segment files' names).
    pub id: u32,
    /// Stream name.
    pub stream: String,
    /// Session recorded (one publisher's session; a new publisher starts a new recording).
    pub session_id: i32,
    /// Stream id in the frames.
    pub stream_id: i32,
    /// Term length of the session's log (frames never cross a term).
    pub term_length: usize,
    /// MTU of the session's log.
    pub mtu: usize,
    /// Term id at position 0.
    pub initial_term_id: i32,
    /// Bytes of each segment file (a power of two, a multiple of the term length).
    pub segment_length: u64,
    /// First position recorded (where a message starts).
    pub start_position: i64,
    /// Position after the last recorded frame: what has been written (and is in the page cache).
    pub stop_position: i64,
    /// Position up to which the recording is on the disk itself (fsynced); `start_position`
    /// with the `Fsync::Never` policy.
    pub durable_position: i64,
    /// Wall-clock start, nanoseconds since the Unix epoch.
    pub start_unix_ns: i64,
    /// Wall-clock stop, once stopped.
    pub stop_unix_ns: Option<i64>,
    /// Recording, interrupted or stopped.
    pub state: RecordingState,
    /// Process id of the recorder that started (or last resumed) it.
    pub recorder_pid: i32,
    /// Bytes of the stream lost just before `start_position` (an untethered recorder that
    /// skipped ahead): 0 for a recording that continues its `previous` one without a gap.
    pub gap_before: i64,
    /// The recording of the same stream and session this one continues, if any.
    pub previous: Option<u32>,
    /// What its frames carry to detect damage ([`Checksum::None`] in catalogs of version 1).
    pub checksum: Checksum,
    /// Where the recording began. `start_position` is where it begins now: the same until its
    /// oldest segments are purged or detached.
    pub origin_position: i64,
    /// Its own retention policy ([`Retention::none`] if it has none).
    pub retention: Retention,
    /// The highest stop position [`truncate`](crate::journal::truncate) cut it back from, if it
    /// was ever truncated: the messages from `stop_position` up to it are gone.
    pub cut_from: Option<i64>,
    pub(crate) boot_id: i64,
    /// The catalog record that holds it.
    pub(crate) slot: u32,
    /// Segment files below this base are removed (or being removed).
    pub(crate) purged: i64,
}

impl Recording {
    /// Bytes recorded.
    pub fn length(&self) -> i64 {
        self.stop_position - self.start_position
    }

    /// `true` once stopped: its stop position no longer moves.
    pub fn is_stopped(&self) -> bool {
        matches!(self.state, RecordingState::Stopped(_))
    }
}

/// What a recorder writes once when it starts a recording.
#[derive(Clone, Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Fields<'a> {
    pub stream: &'a str,
    pub session_id: i32,
    pub stream_id: i32,
    pub term_length: usize,
    pub mtu: usize,
    pub initial_term_id: i32,
    pub segment_length: u64,
    pub start_position: i64,
    pub start_unix_ns: i64,
    pub boot_id: i64,
    pub pid: i32,
    pub gap_before: i64,
    pub previous: Option<u32>,
    pub checksum: Checksum,
    pub retention: Retention,
}

fn at(base: usize, word: usize) -> usize {
    base + word * 8
}

/// Writes recording `id`'s fields into the free record at `base` (one never used, or one whose
/// last recording was deleted: every word is written), then publishes it.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn publish<R: RegionMut>(region: &R, base: usize, id: u32, f: &Fields<'_>) {
    // Readers of the record's last recording may still load its words: one that loads any word
    // written from here on, and then fences, sees the state that freed the record, not the
    // recording's (a mutant drops the fence and loom model j3 fails).
    if protocol::reuse_fence() {
        fence(Ordering::Release);
    }
    // Words not written here are zero: in a record never used, and in one freed (`free`).
    let put = |w: usize, v: i64| region.store_i64(at(base, w), v, Ordering::Relaxed);
    put(word::STOP_REASON, 0);
    put(word::STOP_NS, 0);
    put(word::DURABLE, f.start_position);
    put(word::RECORDED, f.start_position);
    put(word::START, f.start_position);
    put(word::SESSION_ID, f.session_id as i64);
    put(word::STREAM_ID, f.stream_id as i64);
    put(word::TERM_LENGTH, f.term_length as i64);
    put(word::SEGMENT_LENGTH, f.segment_length as i64);
    put(word::MTU, f.mtu as i64);
    put(word::INITIAL_TERM_ID, f.initial_term_id as i64);
    put(word::START_NS, f.start_unix_ns);
    put(word::BOOT_ID, f.boot_id);
    put(word::PID, (f.pid as u32 as i64) | id_bits(id));
    put(word::GAP_BEFORE, f.gap_before);
    put(word::PREVIOUS, f.previous.map_or(-1, i64::from));
    let name = f.stream.as_bytes();
    debug_assert!(name.len() <= NAME_MAX);
    put(word::NAME_LEN, name.len() as i64 | f.checksum.code() << 32);
    for (i, chunk) in name.chunks(8).enumerate() {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        put(word::NAME + i, i64::from_le_bytes(b));
    }
    if !f.retention.is_none() {
        let [age, bytes, segments] = f.retention.to_words();
        put(word::RETAIN_AGE_NS, age);
        put(word::RETAIN_BYTES, bytes);
        put(word::RETAIN_SEGMENTS, segments);
    }
    // The fields above become visible with the state (protocol::catalog_publish() is Release; a mutant
    // makes it Relaxed, and loom model j fails).
    region.store_i64(at(base, word::STATE), RECORDING, protocol::catalog_publish());
}

/// Moves the recorded position (after the bytes before it were written).
pub(crate) fn set_recorded<R: RegionMut>(region: &R, base: usize, position: i64) {
    region.store_i64(at(base, word::RECORDED), position, Ordering::Release);
}

/// Moves the durable position (after the bytes before it were synced to the disk).
pub(crate) fn set_durable<R: RegionMut>(region: &R, base: usize, position: i64) {
    region.store_i64(at(base, word::DURABLE), position, Ordering::Release);
}

/// Closes the recording at `stop` (at or below its recorded position).
pub(crate) fn stop<R: RegionMut>(region: &R, base: usize, stop: i64, reason: StopReason, unix_ns: i64) {
    let durable = region.load_i64(at(base, word::DURABLE), Ordering::Relaxed);
    // Lowered in the order readers load them (durable, then recorded): never durable > recorded.
    region.store_i64(at(base, word::DURABLE), durable.min(stop), Ordering::Release);
    region.store_i64(at(base, word::RECORDED), stop, Ordering::Release);
    region.store_i64(at(base, word::STOP_REASON), reason.code(), Ordering::Relaxed);
    region.store_i64(at(base, word::STOP_NS), unix_ns, Ordering::Relaxed);
    region.store_i64(at(base, word::STATE), STOPPED, Ordering::Release);
}

/// Takes an interrupted recording over to extend it (a resumed recorder), cut back to `stop`.
pub(crate) fn resume<R: RegionMut>(region: &R, base: usize, stop: i64, pid: i32) {
    let durable = region.load_i64(at(base, word::DURABLE), Ordering::Relaxed);
    region.store_i64(at(base, word::DURABLE), durable.min(stop), Ordering::Release);
    region.store_i64(at(base, word::RECORDED), stop, Ordering::Release);
    let id = region.load_i64(at(base, word::PID), Ordering::Relaxed) & !0xffff_ffff;
    region.store_i64(at(base, word::PID), id | pid as u32 as i64, Ordering::Release);
}

/// Lowers the recorded (and durable) position to `stop` and counts a cut, then fences: called by
/// recovery before it zeroes anything past `stop`, so a replay that read bytes being zeroed sees
/// the count move ([`uncut`]).
pub(crate) fn cut_back<R: RegionMut>(region: &R, base: usize, stop: i64) {
    let durable = region.load_i64(at(base, word::DURABLE), Ordering::Relaxed);
    let recorded = region.load_i64(at(base, word::RECORDED), Ordering::Relaxed);
    region.store_i64(at(base, word::DURABLE), durable.min(stop), Ordering::Release);
    region.store_i64(at(base, word::RECORDED), recorded.min(stop), Ordering::Release);
    // Only the holder of the record's lock cuts: a load and a store count.
    let cuts = region.load_i64(at(base, word::CUTS), Ordering::Relaxed);
    region.store_i64(at(base, word::CUTS), cuts.wrapping_add(1), Ordering::Release);
    // The zeroes written next must not be seen before the count (a mutant drops the fence and
    // loom model j2 fails).
    if protocol::cut_fence() {
        fence(Ordering::SeqCst);
    }
}

/// A truncation of a stopped recording from `old_stop` down to `stop`: keeps `old_stop` as the
/// stop it cut back from (if higher than one an earlier truncation kept), then lowers the
/// positions and counts a cut ([`cut_back`]). In that order, each store release: a reader that
/// loads the lowered stop sees the old one kept (a mutant keeps it after, and loom model j6
/// fails).
pub(crate) fn truncate<R: RegionMut>(region: &R, base: usize, old_stop: i64, stop: i64) {
    let keep = || {
        let kept = region.load_i64(at(base, word::CUT_FROM), Ordering::Relaxed);
        region.store_i64(at(base, word::CUT_FROM), kept.max(old_stop), Ordering::Release);
    };
    if protocol::cut_from_first() {
        keep();
        cut_back(region, base, stop);
    } else {
        cut_back(region, base, stop);
        keep();
    }
}

/// Where a recording stands for a replay following it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Progress {
    /// Cuts so far: bytes read while this stays the same are recorded bytes.
    pub cuts: i64,
    /// `true` once stopped: `recorded` is final.
    pub stopped: bool,
    pub recorded: i64,
    /// The oldest position it holds now (retention moves it up).
    pub start: i64,
    /// `false` if the record no longer holds the recording (deleted; maybe reused), or changed
    /// state under the loads: the other fields mean nothing then (load again, or give up).
    pub valid: bool,
}

/// `true` if the record at index `slot` whose `PID` word is `pid_word` holds recording `id`.
pub(crate) fn holds(pid_word: i64, slot: u32, id: u32) -> bool {
    id_in(pid_word, slot) == id
}

/// Recording `id`'s progress in record `slot` at `base`: the id and state, the cut count, the
/// start and recorded positions (each acquire: a count seen comes with the positions lowered
/// before it), then, after an acquire fence, the id and state again: a record deleted or reused
/// under the loads is seen.
pub(crate) fn progress<R: Region>(region: &R, base: usize, slot: u32, id: u32) -> Progress {
    let pid_word = region.load_i64(at(base, word::PID), Ordering::Acquire);
    let state = region.load_i64(at(base, word::STATE), Ordering::Acquire);
    let cuts = region.load_i64(at(base, word::CUTS), Ordering::Acquire);
    let start = region.load_i64(at(base, word::START), Ordering::Acquire);
    let recorded = region.load_i64(at(base, word::RECORDED), Ordering::Acquire);
    let valid = holds(pid_word, slot, id)
        && matches!(state, RECORDING | STOPPED)
        && same_recording(region, base, slot, id, state);
    Progress { cuts, stopped: state == STOPPED, recorded, start, valid }
}

/// After loading words of record `slot` while it held recording `id` in `state`: `true` if it
/// still does, in that state, so the words loaded were that recording's (an acquire fence, then
/// the id and state again: a seqlock whose sequence is the pair; the deleter changes the state
/// before anything else, and whoever reuses the record fences before writing it).
pub(crate) fn same_recording<R: Region>(region: &R, base: usize, slot: u32, id: u32, state: i64) -> bool {
    fence(Ordering::Acquire);
    holds(region.load_i64(at(base, word::PID), Ordering::Relaxed), slot, id)
        && region.load_i64(at(base, word::STATE), Ordering::Relaxed) == state
}

/// After reading bytes below a recorded position loaded with `cuts`: `true` if no cut began
/// since, so they are the bytes recorded there (none was zeroed under the read), and record
/// `slot` still holds recording `id`.
pub(crate) fn uncut<R: Region>(region: &R, base: usize, cuts: i64, slot: u32, id: u32) -> bool {
    fence(Ordering::Acquire);
    region.load_i64(at(base, word::CUTS), Ordering::Relaxed) == cuts
        && holds(region.load_i64(at(base, word::PID), Ordering::Relaxed), slot, id)
        && matches!(region.load_i64(at(base, word::STATE), Ordering::Relaxed), RECORDING | STOPPED)
}

/// Moves the record's start position to `start` (a message start at or below the recorded
/// position, and at or above its origin) and its purged base up to `purged` (a segment base at
/// or below `start`): the origin first (if the start never moved), then `START`, then `PURGED`,
/// each release (a reader loads them the other way round). Then calls `then`, which removes
/// segment files: a replay that finds one missing and then loads the start ([`start`]) sees it
/// past what was removed (a mutant removes first and loom model j4 fails).
pub(crate) fn move_start<R: RegionMut, T>(
    region: &R,
    base: usize,
    start: i64,
    purged: i64,
    then: impl FnOnce() -> T,
) -> T {
    let store = || {
        if region.load_i64(at(base, word::ORIGIN), Ordering::Relaxed) == 0 {
            let origin = region.load_i64(at(base, word::START), Ordering::Relaxed);
            region.store_i64(at(base, word::ORIGIN), origin | 1, Ordering::Release);
        }
        region.store_i64(at(base, word::START), start, Ordering::Release);
        let old = region.load_i64(at(base, word::PURGED), Ordering::Relaxed);
        region.store_i64(at(base, word::PURGED), old.max(purged), Ordering::Release);
    };
    if protocol::start_before_unlink() {
        store();
        then()
    } else {
        let done = then();
        store();
        done
    }
}

/// The start position (acquire): after finding a segment file missing, whether it was purged.
pub(crate) fn start<R: Region>(region: &R, base: usize) -> i64 {
    region.load_i64(at(base, word::START), Ordering::Acquire)
}

/// Marks the record's recording as being deleted, before any of its files goes (a replay that
/// finds one missing then sees the recording gone, not damaged).
pub(crate) fn retire<R: RegionMut>(region: &R, base: usize) {
    region.store_i64(at(base, word::STATE), DELETING, Ordering::Release);
}

/// Frees the record once its recording's files are gone (it is marked deleting): zeroes the
/// words a new recording does not write, then marks it free. It may be reused from then on.
pub(crate) fn free<R: RegionMut>(region: &R, base: usize) {
    // As the reuser does: a reader that loads a zero written here and then fences sees the
    // record marked deleting, at least.
    if protocol::reuse_fence() {
        fence(Ordering::Release);
    }
    let zero = |w: usize| region.store_i64(at(base, w), 0, Ordering::Relaxed);
    for w in (word::NAME..word::NAME + NAME_MAX / 8).chain(word::CUTS..=word::CUT_FROM) {
        zero(w);
    }
    region.store_i64(at(base, word::STATE), FREE, Ordering::Release);
}

/// The record's words, state first (acquire), then the purged base and the start position,
/// then each other word acquire-loaded in index order, as far as the name's length says (the rest
/// of the name reads as zero), then the words version 3 added. The cut count is read by
/// [`progress`]. A caller that must know the words are one recording's checks
/// [`same_recording`] after.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn snapshot<R: Region>(region: &R, base: usize) -> [i64; WORDS] {
    let mut words = [0i64; WORDS];
    let load =
        |words: &mut [i64; WORDS], i: usize| words[i] = region.load_i64(at(base, i), Ordering::Acquire);
    for i in [word::STATE, word::PURGED, word::START, word::ORIGIN] {
        load(&mut words, i);
    }
    for i in (1..word::NAME).filter(|&i| i != word::START) {
        load(&mut words, i);
    }
    let name_words = ((words[word::NAME_LEN] & NAME_LEN_MASK).min(NAME_MAX as i64) as usize).div_ceil(8);
    for i in (word::NAME..word::NAME + name_words).chain(word::RETAIN_AGE_NS..=word::CUT_FROM) {
        load(&mut words, i);
    }
    words
}

/// Decodes the words of record `slot`: `Ok(None)` for a free record (or one being deleted),
/// an error naming the first field that cannot be true. `alive` says whether a recorder holds
/// the record. A record without an id (catalog version 2 or older) is recording `slot`.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn decode(slot: u32, w: &[i64; WORDS], alive: bool) -> Result<Option<Recording>, &'static str> {
    let state = match w[word::STATE] {
        FREE | DELETING => return Ok(None),
        RECORDING if alive => RecordingState::Recording,
        RECORDING => RecordingState::Interrupted,
        STOPPED => {
            RecordingState::Stopped(StopReason::from_code(w[word::STOP_REASON]).ok_or("unknown stop reason")?)
        }
        _ => return Err("unknown record state"),
    };
    let term_length = w[word::TERM_LENGTH];
    if term_length < TERM_MIN_LENGTH as i64
        || term_length > TERM_MAX_LENGTH as i64
        || !(term_length as u64).is_power_of_two()
    {
        return Err("term length is not a power of two from 64 KiB to 1 GiB");
    }
    let term_length = term_length as usize;
    let segment_length = w[word::SEGMENT_LENGTH];
    if segment_length < term_length as i64
        || segment_length as u64 > SEGMENT_MAX
        || !(segment_length as u64).is_power_of_two()
    {
        return Err("segment length is not a power of two from the term length to 1 TiB");
    }
    let mtu = w[word::MTU];
    if mtu <= HEADER_LEN as i64
        || mtu % FRAME_ALIGNMENT as i64 != 0
        || mtu > max_message_len(term_length).max(2 * HEADER_LEN) as i64
    {
        return Err("MTU is not a multiple of 32 between 64 bytes and the largest message");
    }
    let id = id_in(w[word::PID], slot);
    let (start, durable, recorded) = (w[word::START], w[word::DURABLE], w[word::RECORDED]);
    let origin = match w[word::ORIGIN] {
        0 => start,
        o if o & 1 == 1 => o & !1,
        _ => return Err("the origin word is not an origin"),
    };
    let purged = w[word::PURGED];
    let max_position = (term_length as i64) << 31;
    // Retention moves the start up past a durable position that fsync never moved.
    if origin < 0
        || !(origin <= start && start <= recorded && durable <= recorded && recorded <= max_position)
    {
        return Err(
            "positions are not ordered origin <= start <= recorded, durable <= recorded <= the largest",
        );
    }
    if !(0..=start).contains(&purged) || purged % segment_length != 0 {
        return Err("the purged base is not a segment base at or below the start");
    }
    if [origin, start, durable, recorded].iter().any(|p| p % FRAME_ALIGNMENT as i64 != 0) {
        return Err("a position is not 32-byte aligned");
    }
    let cut_from = match w[word::CUT_FROM] {
        0 => None,
        // At the stop while a truncation is between its two steps (the old stop kept, the
        // positions not lowered yet: `truncate`).
        c if c >= recorded && c <= max_position && c % FRAME_ALIGNMENT as i64 == 0 => Some(c),
        _ => return Err("the truncation's old stop is not an aligned position at or past the stop"),
    };
    let retention =
        Retention::from_words([w[word::RETAIN_AGE_NS], w[word::RETAIN_BYTES], w[word::RETAIN_SEGMENTS]])
            .ok_or("negative retention limit")?;
    let i32_field = |i: usize, what: &'static str| i32::try_from(w[i]).map_err(|_| what);
    let session_id = i32_field(word::SESSION_ID, "session id out of range")?;
    let stream_id = i32_field(word::STREAM_ID, "stream id out of range")?;
    let initial_term_id = i32_field(word::INITIAL_TERM_ID, "initial term id out of range")?;
    let recorder_pid = w[word::PID] as i32;
    if recorder_pid <= 0 {
        return Err("recorder pid out of range");
    }
    let gap_before = w[word::GAP_BEFORE];
    if gap_before < 0 {
        return Err("negative gap");
    }
    let previous = match w[word::PREVIOUS] {
        -1 => None,
        p => Some(u32::try_from(p).map_err(|_| "previous recording id out of range")?),
    };
    let checksum = Checksum::from_code(w[word::NAME_LEN] >> 32).ok_or("unknown checksum kind")?;
    let name_len = w[word::NAME_LEN] & NAME_LEN_MASK;
    if !(1..=NAME_MAX as i64).contains(&name_len) {
        return Err("stream name length out of range");
    }
    let mut name = Vec::with_capacity(NAME_MAX);
    for i in 0..NAME_MAX / 8 {
        name.extend_from_slice(&w[word::NAME + i].to_le_bytes());
    }
    name.truncate(name_len as usize);
    let stream = String::from_utf8(name).map_err(|_| "stream name is not UTF-8")?;
    if stream.contains(['/', '\0']) {
        return Err("stream name contains '/' or NUL");
    }
    let stop_ns = w[word::STOP_NS];
    Ok(Some(Recording {
        id,
        stream,
        session_id,
        stream_id,
        term_length,
        mtu: mtu as usize,
        initial_term_id,
        segment_length: segment_length as u64,
        start_position: start,
        stop_position: recorded,
        durable_position: durable.max(start),
        start_unix_ns: w[word::START_NS],
        stop_unix_ns: matches!(state, RecordingState::Stopped(_)).then_some(stop_ns),
        state,
        recorder_pid,
        gap_before,
        previous,
        checksum,
        origin_position: origin,
        retention,
        cut_from,
        boot_id: w[word::BOOT_ID],
        slot,
        purged,
    }))
}

#[cfg(all(test, not(shmlog_loom)))]
mod tests {
    use super::*;
    use crate::region::HeapRegion;

    pub(crate) fn fields(stream: &str) -> Fields<'_> {
        Fields {
            stream,
            session_id: -5,
            stream_id: 77,
            term_length: 1 << 16,
            mtu: 1408,
            initial_term_id: 9,
            segment_length: 1 << 20,
            start_position: 4096,
            start_unix_ns: 123,
            boot_id: 42,
            pid: 1000,
            gap_before: 0,
            previous: Some(3),
            checksum: Checksum::Crc32c,
            retention: Retention::none(),
        }
    }

    #[test]
    fn a_published_record_decodes_to_its_fields_and_moves_as_recorded() {
        let region = HeapRegion::new(RECORD_LEN);
        assert_eq!(decode(0, &snapshot(&region, 0), true), Ok(None));
        let name = "orders.eu-1";
        publish(&region, 0, 7, &fields(name));
        // Record 2 holds recording 7 (ids are the recordings', since catalog version 3).
        let r = decode(2, &snapshot(&region, 0), true).unwrap().unwrap();
        assert_eq!((r.id, r.slot, r.stream.as_str(), r.session_id, r.stream_id), (7, 2, name, -5, 77));
        assert_eq!((r.origin_position, r.purged, r.retention), (4096, 0, Retention::none()));
        assert!(holds(id_bits(7) | 5, 2, 7) && !holds(id_bits(2), 2, 7) && holds(5, 7, 7) && !holds(5, 2, 7));
        assert_eq!(
            (id_in(id_bits(u32::MAX - 1), 0), id_in(id_bits(0) | 9, 3), id_in(9, 3)),
            (u32::MAX - 1, 0, 3)
        );
        assert_eq!((r.start_position, r.stop_position, r.durable_position), (4096, 4096, 4096));
        assert_eq!((r.previous, r.state, r.stop_unix_ns), (Some(3), RecordingState::Recording, None));
        assert_eq!(r.checksum, Checksum::Crc32c);
        set_recorded(&region, 0, 8192);
        set_durable(&region, 0, 6144);
        let r = decode(7, &snapshot(&region, 0), false).unwrap().unwrap();
        assert_eq!((r.stop_position, r.durable_position, r.state), (8192, 6144, RecordingState::Interrupted));
        stop(&region, 0, 5120, StopReason::RecorderDied, 99);
        let r = decode(7, &snapshot(&region, 0), false).unwrap().unwrap();
        assert_eq!((r.stop_position, r.durable_position), (5120, 5120));
        for (code, &(reason, name)) in REASONS.iter().enumerate() {
            assert_eq!(
                (reason.code(), StopReason::from_code(code as i64 + 1)),
                (code as i64 + 1, Some(reason))
            );
            assert_eq!(reason.as_str(), name);
        }
        assert_eq!((r.state, r.stop_unix_ns), (RecordingState::Stopped(StopReason::RecorderDied), Some(99)));
        let p = progress(&region, 0, 2, 7);
        assert!(p.valid && p.stopped && (p.start, p.recorded) == (4096, 5120));
        let removed = move_start(&region, 0, 4160, 0, || "files removed");
        assert_eq!(removed, "files removed");
        let r = decode(2, &snapshot(&region, 0), false).unwrap().unwrap();
        assert_eq!((r.origin_position, r.start_position, r.durable_position), (4096, 4160, 5120));
        // Retention moves the start up past a durable position fsync never moved: the durable
        // position reads as the start.
        set_durable(&region, 0, 4096);
        move_start(&region, 0, 4192, 0, || ());
        let r = decode(2, &snapshot(&region, 0), false).unwrap().unwrap();
        assert_eq!((r.start_position, r.durable_position), (4192, 4192));
        // Deleted, then reused for recording 9: every word is the new recording's.
        cut_back(&region, 0, 5120);
        retire(&region, 0);
        assert!(!progress(&region, 0, 2, 7).valid, "a recording being deleted is gone");
        assert_eq!(decode(2, &snapshot(&region, 0), false), Ok(None));
        free(&region, 0);
        publish(&region, 0, 9, &Fields { retention: Retention::none().max_segments(3), ..fields("o") });
        assert!(!progress(&region, 0, 2, 7).valid, "a reused record does not hold the old recording");
        let p = progress(&region, 0, 2, 9);
        assert!(p.valid && p.cuts == 0 && p.start == 4096);
        let r = decode(2, &snapshot(&region, 0), true).unwrap().unwrap();
        assert_eq!((r.id, r.stream.as_str(), r.previous, r.start_position), (9, "o", Some(3), 4096));
        assert_eq!(r.retention, Retention::none().max_segments(3));
    }

    #[test]
    fn decode_refuses_every_field_that_cannot_be_true() {
        let region = HeapRegion::new(RECORD_LEN);
        publish(&region, 0, 0, &fields("s"));
        let good = snapshot(&region, 0);
        let cases: &[(usize, i64)] = &[
            (word::STATE, 9),
            (word::TERM_LENGTH, 3 << 16),
            (word::SEGMENT_LENGTH, 1 << 15),
            (word::MTU, 100),
            (word::RECORDED, 32),
            (word::DURABLE, 1 << 40),
            (word::START, -32),
            (word::START, 4100),
            (word::SESSION_ID, 1 << 40),
            (word::PID, 0),
            (word::GAP_BEFORE, -1),
            (word::PREVIOUS, -2),
            (word::NAME_LEN, 0),
            (word::NAME_LEN, 129),
            (word::NAME, i64::from_le_bytes(*b"/\0\0\0\0\0\0\0")),
            (word::NAME, 0xff),
            (word::NAME_LEN, 2 << 32 | 1),
            (word::NAME_LEN, -1),
            (word::PID, -1),
            (word::ORIGIN, 4128 | 1),
            (word::ORIGIN, 4096),
            (word::ORIGIN, -31),
            (word::PURGED, 8192),
            (word::PURGED, 32),
            (word::RETAIN_BYTES, -1),
            (word::CUT_FROM, good[word::RECORDED] - 32),
            (word::CUT_FROM, good[word::RECORDED] + 33),
            (word::CUT_FROM, -32),
        ];
        for &(w, v) in cases {
            let mut bad = good;
            bad[w] = v;
            assert!(decode(0, &bad, true).is_err(), "word {w} = {v} was accepted");
        }
        let mut stopped = good;
        stopped[word::STATE] = STOPPED;
        assert!(decode(0, &stopped, true).is_err(), "stopped without a reason");
        // A truncation's old stop: none while zero, else at or past the stop.
        assert_eq!(decode(0, &good, true).unwrap().unwrap().cut_from, None);
        let mut cut = good;
        cut[word::CUT_FROM] = good[word::RECORDED] + 64;
        assert_eq!(decode(0, &cut, true).unwrap().unwrap().cut_from, Some(good[word::RECORDED] + 64));
    }
}
