//! One stream: its files and names, the reader slots, flow control and joining, and the two
//! protocol objects, [`writer::Writer`] and [`reader::Reader`], which hold everything the protocol
//! decides. They are generic over the region backend, so the loom models, the fuzz targets, the
//! ThreadSanitizer test and the mmapped files all run the same code; `api` owns the files and the
//! lifecycle around them.

pub(crate) mod concurrent_writer;
pub(crate) mod doorbell;
pub(crate) mod flow;
pub(crate) mod join;
pub(crate) mod loss;
pub(crate) mod reader;
pub(crate) mod slots;
pub(crate) mod writer;
pub(crate) mod writer_core;

#[cfg(not(shmlog_loom))]
pub(crate) mod concurrent_files;
#[cfg(not(shmlog_loom))]
pub(crate) mod dir;
#[cfg(not(shmlog_loom))]
pub(crate) mod files;
#[cfg(not(shmlog_loom))]
pub(crate) mod follow;
#[cfg(not(shmlog_loom))]
pub(crate) mod liveness;
#[cfg(not(shmlog_loom))]
pub(crate) mod name;
#[cfg(not(shmlog_loom))]
pub(crate) mod wait;

#[cfg(all(test, shmlog_loom))]
mod loom_concurrent_models;
#[cfg(all(test, shmlog_loom))]
mod loom_models;

#[cfg(not(shmlog_loom))]
pub(crate) use self::files::prepare;
