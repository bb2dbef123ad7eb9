//! The one place that names atomics and fences.
//!
//! Under `--cfg shmlog_loom` the in-process types come from loom so the model checker can explore
//! every interleaving; otherwise they are `std`'s. Code that overlays atomics on raw shared memory
//! (the region layer) always uses `std` directly, because loom cannot place its atomics on memory
//! it does not own; the loom heap region models the same words with loom atomics instead.

#[cfg(shmlog_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicI32, AtomicI64, AtomicU64, Ordering};

#[cfg(not(shmlog_loom))]
pub(crate) use std::sync::atomic::{fence, Ordering};

/// Atomics that overlay raw memory (mmap and the std heap backend). Never loom.
#[cfg(not(shmlog_loom))]
pub(crate) mod raw {
    pub(crate) use std::sync::atomic::{AtomicI32, AtomicI64};
}

#[cfg(not(shmlog_loom))]
const _: () = {
    // Shared memory is only sound if these are real lock-free instructions.
    assert!(cfg!(target_has_atomic = "64"));
    assert!(cfg!(target_has_atomic = "32"));
};
