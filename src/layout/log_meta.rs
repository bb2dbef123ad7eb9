//! The log file: three term partitions followed by a 4096-byte metadata section.
//!
//! Offsets 0..496 of the metadata follow Aeron's `LogBufferDescriptor`; shmlog's own fields start at
//! 512. Hot words written by the publisher sit on their own 128-byte blocks.

use super::align;
use super::frame::{framed_length, max_message_len, FRAME_ALIGNMENT, HEADER_LEN};

/// Number of term partitions in a log.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const PARTITION_COUNT: usize = 3;
/// Size of the metadata section at the end of the file.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const META_LEN: usize = 4096;
/// Smallest term length accepted in files (64 KiB).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const TERM_MIN_LENGTH: usize = 64 * 1024;
/// Largest term length (1 GiB).
pub(crate) const TERM_MAX_LENGTH: usize = 1 << 30;
/// Smallest and largest file page size.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const PAGE_MIN: usize = 4096;
pub(crate) const PAGE_MAX: usize = 1 << 30;

/// `b"SHMLOG\0L"` little-endian: the first thing checked when a file is opened as a log.
pub(crate) const MAGIC: i64 = i64::from_le_bytes(*b"SHMLOG\0L");
/// Bumped whenever the layout of the log or reader-slot file changes incompatibly.
pub(crate) const LAYOUT_VERSION: i32 = 7;

// Aeron-compatible fields (offsets inside the metadata section).
/// Three packed tail counters, `termId << 32 | offset`, one per partition.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const TAIL_COUNTERS: usize = 0;
/// Terms since the initial one (`i32`).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const ACTIVE_TERM_COUNT: usize = 24;
/// End-of-stream position, `i64::MAX` while open.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const EOS_POSITION: usize = 128;
/// Creation time, ns since the Unix epoch (Aeron's correlation id slot).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const CREATED_NS: usize = 256;
pub(crate) const INITIAL_TERM_ID: usize = 264;
pub(crate) const HEADER_LENGTH: usize = 268;
pub(crate) const MTU: usize = 272;
pub(crate) const TERM_LENGTH: usize = 276;
pub(crate) const PAGE_SIZE: usize = 280;
pub(crate) const WINDOW: usize = 284;

// shmlog fields.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const MAGIC_OFFSET: usize = 512;
pub(crate) const VERSION: usize = 520;
/// Written last, with release: 1 once every other field is valid.
pub(crate) const READY: usize = 524;
pub(crate) const PUBLISHER_PID: usize = 528;
pub(crate) const SESSION_ID: usize = 532;
pub(crate) const STREAM_ID: usize = 536;
pub(crate) const NAME_LEN: usize = 540;
/// [`MODE_EXCLUSIVE`] or [`MODE_CONCURRENT`]: who may write the log.
pub(crate) const WRITER_MODE: usize = 544;
/// One past the highest writer slot ever claimed (`i32`), so scans stop early.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const WRITERS_HIGH_WATER: usize = 548;
/// The session's number among the stream's sessions (`i32`, from the reader-slot file's
/// `SESSIONS` counter when the publisher created it): a reader that moves from session `n` to
/// `n + 3` knows that two whole sessions began and ended unseen.
pub(crate) const SESSION_SEQ: usize = 552;
/// 1 if the publisher left its closed log in place for readers that still owed its session
/// (`i32`): the stream's last user removes it (a log kept on purpose, `keep_files`, stays).
pub(crate) const LEFT_FOR_READERS: usize = 556;

/// One publication writes the log (`Publication`); a negative frame length is a fault.
pub(crate) const MODE_EXCLUSIVE: i32 = 0;
/// Any number of writers share the log (`ConcurrentPublication`): space is reserved with a CAS on
/// the tail, and a negative frame length is a frame whose writer is still writing it.
pub(crate) const MODE_CONCURRENT: i32 = 1;

/// Every metadata field accessed as an `i32` (the others are `i64`, or the name's bytes).
#[cfg(any(shmlog_fuzz, shmlog_loom))]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const I32_FIELDS: [usize; 17] = [
    ACTIVE_TERM_COUNT,
    INITIAL_TERM_ID,
    HEADER_LENGTH,
    MTU,
    TERM_LENGTH,
    PAGE_SIZE,
    WINDOW,
    VERSION,
    READY,
    PUBLISHER_PID,
    SESSION_ID,
    STREAM_ID,
    NAME_LEN,
    WRITER_MODE,
    WRITERS_HIGH_WATER,
    SESSION_SEQ,
    LEFT_FOR_READERS,
];

// Counters the publisher keeps for `stat`, on their own block (i64 each).
pub(crate) const PUBLISHER_LIMIT: usize = 640;
pub(crate) const BACK_PRESSURE_EVENTS: usize = 648;
pub(crate) const LIMIT_RECOMPUTES: usize = 656;
pub(crate) const READERS_EVICTED: usize = 664;
pub(crate) const CONNECTED_READERS: usize = 672;
/// Reader positions found ahead of the writer (impossible for an honest reader) and ignored by
/// flow control.
pub(crate) const IGNORED_POSITIONS: usize = 680;

/// Every counter and gauge field (`i64`s), for the loom region.
#[cfg(shmlog_loom)]
pub(crate) const COUNTERS: [usize; 6] = [
    PUBLISHER_LIMIT,
    BACK_PRESSURE_EVENTS,
    LIMIT_RECOMPUTES,
    READERS_EVICTED,
    CONNECTED_READERS,
    IGNORED_POSITIONS,
];

/// The stream's name, `NAME_LEN` bytes, for tools.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const NAME: usize = 768;
/// Longest name the metadata holds.
pub(crate) const NAME_MAX: usize = 255;

const _: () = assert!(NAME + NAME_MAX <= WRITERS);

/// The writers table of a concurrent log: one slot per writer handle, each on its own 64-byte
/// line (a writer stores into its slot twice per message). Whoever holds the kernel lock on the
/// slot's byte (`stream::liveness`) owns it; the words only describe it.
pub(crate) const WRITERS: usize = 2048;
/// Bytes per writer slot.
pub(crate) const WRITER_SLOT_LEN: usize = 64;
/// Writer handles a concurrent log holds at once.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const MAX_WRITERS: usize = 32;
/// Writer slot field (`i64`): the position at which the writer is reserving or writing a frame,
/// [`NO_PENDING`] between messages. Set before the reservation, cleared after the commit: flow
/// control holds every writer within a window of it, and nobody pads over it while its owner lives.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const W_PENDING: usize = 0;
/// Writer slot field (`i64`): the owner's process id (0: never claimed).
pub(crate) const W_PID: usize = 8;
/// Writer slot field (`i64`): when the owner claimed the slot, ns since the Unix epoch.
pub(crate) const W_CLAIMED_NS: usize = 16;
/// A writer slot's pending word between messages.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const NO_PENDING: i64 = i64::MAX;

const _: () = assert!(WRITERS + MAX_WRITERS * WRITER_SLOT_LEN <= META_LEN);

/// Offset (in the metadata) of `field` of writer slot `index`.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const fn writer_field(index: usize, field: usize) -> usize {
    WRITERS + index * WRITER_SLOT_LEN + field
}

/// Bytes of the next partition the writer zeroes at a time: at most 1 KiB, and at most `T / 8`
/// so that the lapping margin below holds on small terms.
pub(crate) const fn clean_chunk(term_length: usize) -> usize {
    let eighth = term_length / 8;
    if eighth < 1024 {
        eighth
    } else {
        1024
    }
}

/// Length of a log file with terms of `term_length` on pages of `page_size`.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const fn file_length(term_length: usize, page_size: usize) -> usize {
    align(PARTITION_COUNT * term_length + META_LEN, page_size)
}

/// The parameters that fix a log's geometry, as stored in its metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Geometry {
    pub term_length: usize,
    pub page_size: usize,
    pub mtu: usize,
    pub window: usize,
}

impl Geometry {
    /// Checks every rule a log must satisfy; names the first broken one.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn validate(&self) -> Result<(), &'static str> {
        let t = self.term_length;
        if !t.is_power_of_two() || !(TERM_MIN_LENGTH..=TERM_MAX_LENGTH).contains(&t) {
            return Err("term length must be a power of two from 64 KiB to 1 GiB");
        }
        self.validate_rest()
    }

    /// The rules other than the term-length range (the in-process models use tiny terms).
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn validate_rest(&self) -> Result<(), &'static str> {
        let t = self.term_length;
        if !t.is_power_of_two() || t < 4 * FRAME_ALIGNMENT {
            return Err("term length must be a power of two");
        }
        if !self.page_size.is_power_of_two() || !(PAGE_MIN..=PAGE_MAX).contains(&self.page_size) {
            return Err("page size must be a power of two from 4 KiB to 1 GiB");
        }
        if self.mtu <= HEADER_LEN || self.mtu % FRAME_ALIGNMENT != 0 {
            return Err("MTU must be a multiple of 32 above 32");
        }
        if self.mtu > max_message_len(t).max(2 * HEADER_LEN) {
            return Err("MTU must not exceed the max message length (term length / 8)");
        }
        if self.window < self.mtu || self.window > t / 2 {
            return Err("window must be at least the MTU and at most half the term length");
        }
        if self.lapping_margin().is_none() {
            return Err("window, largest message and cleaning chunk together exceed the term length");
        }
        Ok(())
    }

    /// What is left of a term once the writer's furthest reach past a reader it has not counted
    /// yet is taken away, or `None` if that reach is more than a term.
    ///
    /// A reader may join up to a term behind the writer just after a limit recompute. The writer
    /// then runs on to its cached limit (a window past a position at most a term past the
    /// joiner's), finishes one more message, and zeroes the partition after its own up to one
    /// cleaning chunk ahead of itself. Once two terms on, that partition is the joiner's, so the
    /// joiner's frames are never cleaned under it only while
    /// `window + largest framed message + cleaning run-ahead <= T + 1` (a message starts below
    /// the limit; the run-ahead is what rounding up to a chunk adds to the 32-byte grid). With the
    /// limits on each (`T/2`, `T/4` at the smallest MTU, `T/8`) file geometries keep at least
    /// `T/8`; checking the sum here means a new default or rule cannot silently reopen the hole
    /// (the `ops_oracle` fuzz target once found one).
    pub(crate) fn lapping_margin(&self) -> Option<usize> {
        let t = self.term_length;
        let largest = framed_length(max_message_len(t), self.mtu.checked_sub(HEADER_LEN)?.max(1));
        let run_ahead = clean_chunk(t).saturating_sub(FRAME_ALIGNMENT);
        (t + 1).checked_sub(self.window.checked_add(largest)?.checked_add(run_ahead)?)
    }

    /// Bytes of the whole file.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn file_length(&self) -> usize {
        file_length(self.term_length, self.page_size)
    }

    /// Offset of the metadata section: the last 4096 bytes of the file.
    pub(crate) fn meta_offset(&self) -> usize {
        self.file_length() - META_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo(term_length: usize) -> Geometry {
        Geometry { term_length, page_size: 4096, mtu: 1408, window: term_length / 2 }
    }

    #[test]
    fn file_length_is_three_terms_plus_metadata_page_aligned() {
        assert_eq!(file_length(64 * 1024, 4096), 3 * 64 * 1024 + 4096);
        assert_eq!(file_length(64 * 1024, 2 << 20), 2 << 20);
    }

    #[test]
    fn rejects_bad_geometry() {
        assert!(geo(64 * 1024).validate().is_ok());
        assert!(geo(96 * 1024).validate().is_err());
        assert!(geo(32 * 1024).validate().is_err());
        assert!(Geometry { page_size: 1000, ..geo(1 << 16) }.validate().is_err());
        assert!(Geometry { mtu: 1000, ..geo(1 << 16) }.validate().is_err());
        assert!(Geometry { mtu: 16 * 1024, ..geo(1 << 16) }.validate().is_err());
        assert!(Geometry { window: (1 << 15) + 32, ..geo(1 << 16) }.validate().is_err());
        assert!(Geometry { window: 64, ..geo(1 << 16) }.validate().is_err());
    }

    #[test]
    fn the_lapping_margin_holds_for_every_valid_geometry_and_is_checked() {
        for bits in 7..=30 {
            let t = 1usize << bits;
            for mtu in [64, 1408.min(max_message_len(t)) / 32 * 32, max_message_len(t).max(64)] {
                let g = Geometry { term_length: t, page_size: 4096, mtu, window: t / 2 };
                if g.validate_rest().is_ok() {
                    let margin = g.lapping_margin().expect("validated");
                    assert!(t < TERM_MIN_LENGTH || margin >= t / 8, "{g:?}: margin {margin}");
                }
            }
        }
        assert!(clean_chunk(128) == 16 && clean_chunk(1 << 20) == 1024);
    }

    #[test]
    fn magic_spells_the_name() {
        assert_eq!(&MAGIC.to_le_bytes(), b"SHMLOG\0L");
    }
}
