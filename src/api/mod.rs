//! The user-facing types.

pub(crate) mod assembler;
pub(crate) mod handler;
pub(crate) mod idle;
#[cfg(not(shmlog_loom))]
pub mod inspect;
#[cfg(not(shmlog_loom))]
pub(crate) mod publication;
#[cfg(not(shmlog_loom))]
pub(crate) mod subscription;
