//! The crate's internals for the cargo-fuzz targets in `fuzz/`, which hold the scenarios. Built
//! only with `--cfg shmlog_fuzz` (`.ci/fuzz.sh` sets it); not API, no stability promised.

pub use crate::error::Error;
pub use crate::layout::align;
/// Frame header layout, flags and message sizes.
pub mod frame {
    pub use crate::layout::frame::{
        framed_length, max_message_len, HeaderRest, BEGIN_FLAG, CURRENT_VERSION, END_FLAG, FRAME_ALIGNMENT,
        HEADER_LEN, REST_OFFSET, TYPE_DATA, TYPE_PAD, UNFRAGMENTED,
    };
}
/// Log metadata layout and geometry.
pub mod meta {
    pub use crate::layout::log_meta::{
        file_length, writer_field, Geometry, ACTIVE_TERM_COUNT, CREATED_NS, EOS_POSITION, I32_FIELDS,
        MAGIC_OFFSET, MAX_WRITERS, META_LEN, NAME, NO_PENDING, PAGE_MIN, PARTITION_COUNT, TAIL_COUNTERS,
        TERM_MIN_LENGTH, WRITERS_HIGH_WATER, W_PENDING,
    };
}
/// Reader-slot file layout.
pub mod slot_layout {
    pub use crate::layout::slots::{
        file_length, slot_offset, DOORBELL, HIGH_WATER, MAGIC_OFFSET, MAX_SLOTS, READERS_ARMED, READERS_BELL,
        READERS_PASSED, READERS_SLEEPING, READY, SLOT_COUNT, SLOT_LEN, STATE_ACTIVE, STATE_FREE, VERSION,
        WRITER_ARMED, WRITER_BELL,
    };
}
/// The term reader.
pub mod reader {
    pub use crate::log::reader::{
        frame_committed_at, frame_starts_at, message_start_at_or_after, message_starts_at, read_at,
        read_block, Copied, Cursor, InPlace, Scan,
    };
}
/// The journal's catalog records, segment frames and recovery.
pub mod journal {
    pub use crate::journal::catalog::Catalog;
    pub use crate::journal::frames::{checksum, frame_at, padding_header, seal, Expect};
    pub use crate::journal::record::{Checksum, Fields, StopReason, WORDS};
    pub use crate::journal::recovery::{boot_id, cut};
    pub use crate::journal::segment::path as segment_path;
    pub use crate::journal::Retention;
    /// One catalog record's memory protocol.
    pub mod record {
        pub use crate::journal::record::{decode, publish, snapshot, RECORD_LEN};
    }
}
/// The doorbell: its ring, its sleep in steps, and the wake budget.
pub mod doorbell {
    pub use crate::stream::doorbell::{sleep, Doorbell, Rung, WakeBudget};

    /// [`Doorbell::ring_readers`] with a full fence (the barrier kind is the crate's own type).
    pub fn ring_readers<R: crate::region::RegionMut>(bell: &Doorbell<R>) {
        bell.ring_readers(crate::sync::LightBarrier::Full, None);
    }
}
/// Creating and opening a stream's files.
pub mod files {
    pub use crate::stream::files::{inspect_log, open_log, open_readers, Found};
}
pub use crate::log::appender::{Appender, Tripped};
pub use crate::log::header::Header;
pub use crate::log::position::{pack_tail, Terms};
pub use crate::log::unblock::resolve_dead;
pub use crate::log::{Counter, Gauge, Log, LogInit};
pub use crate::region::{HeapRegion, MmapRegion, ReadOnlyRegion, Region, RegionMut};
pub use crate::stream::flow::FlowControl;
pub use crate::stream::join::{JoinAt, JoinRefused};
pub use crate::stream::reader::Reader;
pub use crate::stream::slots::{SlotLocks, SlotMut, Slots};
pub use crate::stream::writer::{Liveness, Writer};
pub use crate::testing::claimed_slot;
pub use std::sync::atomic::Ordering;

/// A header as a frame at `position` (the position after it) would give it.
pub fn header(frame_length: i32, rest: frame::HeaderRest, position: i64) -> Header {
    Header { frame_length, rest, position }
}

/// The header fields after the length word.
pub fn header_rest(header: &Header) -> frame::HeaderRest {
    header.rest
}

/// The log's metadata section, for the fuzz targets' writes to fields the writer does not own.
pub fn meta_field<R: Region>(log: &Log<R>, field: usize) -> usize {
    log.meta_field(field)
}

/// Takes the publisher's lock of a log file on this open file, as its publisher would: the file
/// then has a live publisher for every other open of it.
pub fn hold_publisher_lock(file: &std::fs::File) -> std::io::Result<bool> {
    use crate::sys::lock::{try_lock, Kind};
    try_lock(file, Kind::Exclusive, crate::stream::liveness::PUBLISHER_LOCK, 1)
}
