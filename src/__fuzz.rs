//! The crate's internals for the cargo-fuzz targets in `fuzz/`, which hold the scenarios. Built
//! only with `--cfg shmlog_fuzz` (`.ci/fuzz.sh` sets it); not API, no stability promised.

pub use crate::api::assembler::FragmentAssembler;
pub use crate::api::handler::{ControlledFragmentHandler, FragmentHandler};
pub use crate::error::{Error, Invalid, OfferError};
pub use crate::layout::align;
/// Frame header layout and message sizes.
pub mod frame {
    pub use crate::layout::frame::*;
}
/// Log metadata layout and geometry.
pub mod meta {
    pub use crate::layout::log_meta::*;
}
/// Reader-slot file layout.
pub mod slot_layout {
    pub use crate::layout::slots::*;
}
/// The term reader.
pub mod reader {
    pub use crate::log::reader::*;
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
    pub use crate::stream::doorbell::*;

    /// [`Doorbell::ring_readers`] with a full fence (the barrier kind is the crate's own type).
    pub fn ring_readers<R: crate::region::RegionMut>(bell: &Doorbell<R>) {
        bell.ring_readers(crate::sync::LightBarrier::Full, None);
    }
}
/// Creating and opening a stream's files.
pub mod files {
    pub use crate::stream::files::*;
}
pub use crate::log::appender::{Appender, ClaimedFrame, MaxPosition, Tripped};
pub use crate::log::concurrent::{ConcurrentAppender, Refused, Reservation};
pub use crate::log::header::Header;
pub use crate::log::position::{pack_tail, Terms};
pub use crate::log::unblock::{resolve_dead, Unblocked};
pub use crate::log::{Counter, Gauge, Log, LogInit};
pub use crate::region::{HeapRegion, Region, RegionMut};
pub use crate::stream::flow::FlowControl;
pub use crate::stream::join::{join, JoinAt, JoinRefused};
pub use crate::stream::reader::Reader;
pub use crate::stream::slots::{SessionReaders, SlotLocks, SlotMut, SlotView, Slots};
pub use crate::stream::writer::{Liveness, Writer};
pub use crate::testing::{claimed_slot, heap_log, heap_slots, AllAlive, Shared};
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

pub use crate::region::{MmapRegion, ReadOnlyRegion};

/// Takes the publisher's lock of a log file on this open file, as its publisher would: the file
/// then has a live publisher for every other open of it.
pub fn hold_publisher_lock(file: &std::fs::File) -> std::io::Result<bool> {
    use crate::sys::lock::{try_lock, Kind};
    try_lock(file, Kind::Exclusive, crate::stream::liveness::PUBLISHER_LOCK, 1)
}
