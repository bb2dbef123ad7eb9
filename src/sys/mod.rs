//! Thin, safe wrappers over the few system calls std does not offer: OFD locks, fallocate,
//! statvfs, the effective uid; and CRC32C with the CPU's instruction. With `region` and `sync`,
//! the only home of `unsafe`.

#[cfg(not(target_os = "linux"))]
compile_error!(
    "shmlog needs Linux: open-file-description locks (F_OFD_SETLK) are its liveness tokens, and \
     /dev/shm its default home"
);

pub(crate) mod barrier;
pub(crate) mod clock;
pub(crate) mod fanout;
pub(crate) mod fs;
pub(crate) mod futex;
pub(crate) mod lock;
#[cfg(all(feature = "async", not(shmlog_loom)))]
pub(crate) mod reactor;
