//! The files of one stream: names, the directory, creating and opening logs, reader slots,
//! liveness and flow control.

pub(crate) mod dir;
pub(crate) mod files;
pub(crate) mod flow;
pub(crate) mod name;
pub(crate) mod slots;
