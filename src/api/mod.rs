//! The user-facing types. The protocol itself is `stream::{writer, reader}`; these own the files
//! and the lifecycle around it.

pub(crate) mod assembler;
#[cfg(all(feature = "async", not(shmlog_loom)))]
pub(crate) mod async_rx;
#[cfg(not(shmlog_loom))]
pub(crate) mod channel;
#[cfg(not(shmlog_loom))]
pub(crate) mod claim;
#[cfg(not(shmlog_loom))]
pub mod codec;
#[cfg(not(shmlog_loom))]
pub(crate) mod concurrent;
#[cfg(not(shmlog_loom))]
pub(crate) mod defaults;
pub(crate) mod handler;
pub mod idle;
#[cfg(not(shmlog_loom))]
pub mod inspect;
#[cfg(not(shmlog_loom))]
pub(crate) mod polled;
#[cfg(not(shmlog_loom))]
pub(crate) mod publication;
#[cfg(not(shmlog_loom))]
pub(crate) mod publish;
#[cfg(all(feature = "async", not(shmlog_loom)))]
pub(crate) mod reactor;
#[cfg(not(shmlog_loom))]
pub(crate) mod source;
#[cfg(not(shmlog_loom))]
pub(crate) mod subscription;
