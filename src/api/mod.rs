//! The user-facing types.

pub(crate) mod assembler;
pub(crate) mod handler;
pub(crate) mod idle;
pub mod inspect;
pub(crate) mod publication;
pub(crate) mod subscription;
