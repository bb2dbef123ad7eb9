//! Thin, safe wrappers over the few system calls std does not offer: OFD locks, fallocate,
//! statvfs, the effective uid. With `region` and `sync`, the only home of `unsafe`.

pub(crate) mod fs;
pub(crate) mod lock;
