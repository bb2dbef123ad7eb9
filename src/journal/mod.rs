//! A durable journal: record a stream into segment files on disk, replay a recording from any
//! position, and merge a replay into the live stream. No driver: a [`Recorder`] is a reader of
//! the live log in whatever process runs it, and a [`Replay`] reads the files directly.
//!
//! A journal directory (on a real disk, not `/dev/shm`) holds a `catalog` of recordings and
//! their segment files, `<id>-<base position>.seg`, which hold the frames exactly as the log had
//! them, at the file offset `position - base`. One recording is one publisher session, from the
//! position the recorder joined at to where it stopped; a new session, an untethered recorder's
//! gap, or a restart that cannot resume starts the next one.
//!
//! What is durable when (see `docs/journal.md`): everything a recorder wrote survives its own
//! crash (kill -9 included: the next recorder closes the recording at its last complete message,
//! or resumes it); what survives a power loss is what the [`Fsync`] policy synced, up to
//! [`Recording::durable_position`].

#[cfg(all(feature = "async", not(shmlog_loom)))]
mod async_replay;
#[cfg(not(shmlog_loom))]
mod durable;
#[cfg(not(shmlog_loom))]
mod maintenance;
mod policy;
pub(crate) mod reader_position;
pub(crate) mod record;
#[cfg(not(shmlog_loom))]
mod retention;

#[cfg(not(shmlog_loom))]
pub(crate) mod catalog;
#[cfg(not(shmlog_loom))]
pub(crate) mod frames;
#[cfg(not(shmlog_loom))]
mod merge;
#[cfg(not(shmlog_loom))]
mod persistent;
#[cfg(not(shmlog_loom))]
mod recorder;
#[cfg(not(shmlog_loom))]
pub(crate) mod recovery;
#[cfg(not(shmlog_loom))]
mod replay;
#[cfg(not(shmlog_loom))]
pub(crate) mod segment;
#[cfg(not(shmlog_loom))]
pub(crate) mod segment_reader;
#[cfg(not(shmlog_loom))]
mod segment_writer;

#[cfg(all(test, shmlog_loom))]
mod loom_models;

#[cfg(all(feature = "async", not(shmlog_loom)))]
pub use async_replay::{AsyncReplay, ReplayError};
pub use policy::Retention;
pub use record::{Checksum, Recording, RecordingState, StopReason};
#[cfg(not(shmlog_loom))]
pub use {
    durable::{durable_readers, DurableReader, DurableReaderInfo},
    maintenance::{attach, delete as delete_recording, delete_detached, detach, purge, truncate, Outcome},
    merge::ReplayMerge,
    persistent::{PersistentSubscription, PersistentSubscriptionBuilder, Start},
    recorder::{Recorder, RecorderBuilder},
    replay::{Replay, ReplayBuilder},
    retention::{apply_retention, journal_retention, set_journal_retention, Applied},
    segment_writer::Fsync,
};

/// Every recording in the catalog of the journal directory `journal`, by id; a record that
/// fails validation is an error naming it (the others are still listed).
#[cfg(not(shmlog_loom))]
pub fn recordings(
    journal: impl AsRef<std::path::Path>,
) -> Result<Vec<Result<Recording, crate::Error>>, crate::Error> {
    Ok(catalog::Catalog::open(journal.as_ref())?.list())
}

/// Recording `id` of the journal directory `journal`.
#[cfg(not(shmlog_loom))]
pub fn recording(journal: impl AsRef<std::path::Path>, id: u32) -> Result<Recording, crate::Error> {
    catalog::Catalog::open(journal.as_ref())?.get(id)
}
