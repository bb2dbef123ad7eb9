//! The only layer that touches raw memory.
//!
//! A region is a bounds-checked view of bytes that other threads or processes may access at the
//! same time. It never hands out a reference into that memory except through the two `unsafe`
//! scoped accessors, whose callers prove (by the log protocol) that nobody writes the bytes while
//! the reference lives. Everything else is an atomic load/store of a control word or a copy.
//!
//! Contract shared by all backends, relied on (and checked) by the loom model backend:
//! - an offset used for atomic `i32` access is never used for atomic `i64` access;
//! - an offset switches between control word and plain bytes only through [`RegionMut::zero`]
//!   (a reused partition's old frame-length words become payload after cleaning), and plain
//!   reads may cover a control word only after acquiring its last store (as `read_block` does);
//! - offsets are aligned to the width of the access.
//!
//! Every operation checks bounds and alignment and panics on a violation: that is a bug in this
//! crate (values read from shared memory are validated before they become offsets), and a panic is
//! the safe outcome where the alternative would be an out-of-bounds access. The one exception is
//! a [`Window`] (one term partition): it is checked once when made and keeps the frame accesses
//! inside it in bounds by masking their offsets, so the per-frame hot path carries no checks.

use crate::sync::Ordering;

#[cfg(not(shmlog_loom))]
#[cfg_attr(not(any(test, fuzzing)), allow(dead_code))] // the in-process backend of tests and fuzzing
mod heap;
#[cfg(shmlog_loom)]
mod loom;
#[cfg(not(shmlog_loom))]
mod mmap;
#[cfg(not(shmlog_loom))]
mod raw;
mod window;

#[cfg(not(shmlog_loom))]
#[cfg_attr(not(any(test, fuzzing)), allow(unused_imports))]
pub(crate) use heap::HeapRegion;
#[cfg(shmlog_loom)]
#[cfg_attr(not(test), allow(unused_imports))] // used by the loom models only
pub(crate) use loom::LoomRegion;
#[cfg(not(shmlog_loom))]
pub(crate) use mmap::{MmapRegion, ReadOnlyRegion};
pub(crate) use window::{Span, Window};

#[cfg(not(shmlog_loom))]
impl DirectRegion for MmapRegion {
    unsafe fn slice_mut(&self, off: usize, len: usize) -> &mut [u8] {
        // SAFETY: contract forwarded to the caller.
        unsafe { self.slice_mut(off, len) }
    }
}

#[cfg(not(shmlog_loom))]
impl DirectRegion for HeapRegion {
    unsafe fn slice_mut(&self, off: usize, len: usize) -> &mut [u8] {
        // SAFETY: contract forwarded to the caller.
        unsafe { self.slice_mut(off, len) }
    }
}

/// Read access to a region of possibly shared memory.
pub(crate) trait Region {
    /// Length in bytes.
    fn len(&self) -> usize;

    /// Atomic load of the `i32` at `off`. `Acquire` loads stay valid on read-only mappings (they
    /// are done as a relaxed load followed by an acquire fence).
    fn load_i32(&self, off: usize, order: Ordering) -> i32;

    /// Atomic load of the `i64` at `off`.
    fn load_i64(&self, off: usize, order: Ordering) -> i64;

    /// Copies `dst.len()` bytes starting at `off` out of the region.
    fn copy_out(&self, off: usize, dst: &mut [u8]);

    /// Calls `f` with a shared slice of `len` bytes at `off`.
    ///
    /// # Safety
    /// Nobody (thread or process) may write those bytes while `f` runs: the caller has acquired a
    /// committed frame and holds flow control so the writer cannot reach it.
    unsafe fn with_bytes<T>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> T) -> T;

    /// [`Region::load_i32`] without the bounds check, for [`Window`]. Backends over real memory
    /// skip the check; the default (the loom backend's) keeps it.
    ///
    /// # Safety
    /// `off..off + 4` lies inside the region and `off` is 4-aligned.
    #[inline(always)]
    unsafe fn load_i32_unchecked(&self, off: usize, order: Ordering) -> i32 {
        self.load_i32(off, order)
    }

    /// [`Region::copy_out`] without the bounds check, for [`Window`].
    ///
    /// # Safety
    /// `off..off + dst.len()` lies inside the region.
    #[inline(always)]
    unsafe fn copy_out_unchecked(&self, off: usize, dst: &mut [u8]) {
        self.copy_out(off, dst)
    }

    /// [`Region::with_bytes`] without the bounds check, for [`Window`].
    ///
    /// # Safety
    /// As [`Region::with_bytes`], and `off..off + len` lies inside the region.
    #[inline(always)]
    unsafe fn with_bytes_unchecked<T>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> T) -> T {
        // SAFETY: the caller's contract includes `with_bytes`'s.
        unsafe { self.with_bytes(off, len, f) }
    }
}

/// Write access to a region. Only the single writer of a log, or a reader on its own slot, has it.
pub(crate) trait RegionMut: Region {
    /// Atomic store of the `i32` at `off`.
    fn store_i32(&self, off: usize, value: i32, order: Ordering);

    /// Atomic store of the `i64` at `off`.
    fn store_i64(&self, off: usize, value: i64, order: Ordering);

    /// Atomic add to the `i64` at `off`; returns the previous value.
    #[allow(dead_code)] // part of the backend contract; kept for counters shared by processes
    fn fetch_add_i64(&self, off: usize, delta: i64, order: Ordering) -> i64;

    /// Atomic compare-and-exchange of the `i64` at `off` (AcqRel on success, Acquire on failure).
    fn compare_exchange_i64(&self, off: usize, current: i64, new: i64) -> Result<i64, i64>;

    /// Copies `src` into the region at `off`.
    fn copy_in(&self, off: usize, src: &[u8]);

    /// Writes `len` zero bytes at `off`.
    fn zero(&self, off: usize, len: usize);

    /// Calls `f` with an exclusive slice of `len` bytes at `off`.
    ///
    /// Used through `Appender::with_claim_payload` (models and tests).
    /// # Safety
    /// Nobody else may read or write those bytes while `f` runs: the caller is the single writer
    /// and the bytes belong to a frame whose length word is not yet committed.
    #[cfg_attr(not(any(test, fuzzing, shmlog_loom)), allow(dead_code))]
    unsafe fn with_bytes_mut<T>(&self, off: usize, len: usize, f: impl FnOnce(&mut [u8]) -> T) -> T;

    /// [`RegionMut::store_i32`] without the bounds check, for [`Window`].
    ///
    /// # Safety
    /// `off..off + 4` lies inside the region and `off` is 4-aligned.
    #[inline(always)]
    unsafe fn store_i32_unchecked(&self, off: usize, value: i32, order: Ordering) {
        self.store_i32(off, value, order)
    }

    /// [`RegionMut::copy_in`] without the bounds check, for [`Window`].
    ///
    /// # Safety
    /// `off..off + src.len()` lies inside the region.
    #[inline(always)]
    unsafe fn copy_in_unchecked(&self, off: usize, src: &[u8]) {
        self.copy_in(off, src)
    }
}

/// Backends whose bytes are real memory, so a claimed frame can be lent out as a slice whose
/// lifetime the borrow checker tracks (the loom backend cannot, and does not implement this).
pub(crate) trait DirectRegion: RegionMut {
    /// An exclusive slice of `len` bytes at `off`, borrowed from `self`.
    ///
    /// # Safety
    /// As [`RegionMut::with_bytes_mut`], for as long as the returned slice lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice_mut(&self, off: usize, len: usize) -> &mut [u8];
}

/// Panics unless `[off, off + size)` lies inside `len` and `off` is a multiple of `align`.
#[inline(always)]
pub(crate) fn check_range(len: usize, off: usize, size: usize, align: usize) {
    debug_assert!(align.is_power_of_two());
    if size > len || off > len - size || off & (align - 1) != 0 {
        range_violation(len, off, size);
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn range_violation(len: usize, off: usize, size: usize) -> ! {
    panic!("region access out of bounds or misaligned: off={off} size={size} len={len}")
}

macro_rules! forward_region {
    ($($wrapper:ty),*) => {$(
        impl<T: Region> Region for $wrapper {
            #[inline(always)]
            fn len(&self) -> usize {
                (**self).len()
            }
            #[inline(always)]
            fn load_i32(&self, off: usize, order: Ordering) -> i32 {
                (**self).load_i32(off, order)
            }
            #[inline(always)]
            fn load_i64(&self, off: usize, order: Ordering) -> i64 {
                (**self).load_i64(off, order)
            }
            #[inline(always)]
            fn copy_out(&self, off: usize, dst: &mut [u8]) {
                (**self).copy_out(off, dst)
            }
            #[inline(always)]
            unsafe fn with_bytes<U>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> U) -> U {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).with_bytes(off, len, f) }
            }
            #[inline(always)]
            unsafe fn load_i32_unchecked(&self, off: usize, order: Ordering) -> i32 {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).load_i32_unchecked(off, order) }
            }
            #[inline(always)]
            unsafe fn copy_out_unchecked(&self, off: usize, dst: &mut [u8]) {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).copy_out_unchecked(off, dst) }
            }
            #[inline(always)]
            unsafe fn with_bytes_unchecked<U>(
                &self,
                off: usize,
                len: usize,
                f: impl FnOnce(&[u8]) -> U,
            ) -> U {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).with_bytes_unchecked(off, len, f) }
            }
        }
        impl<T: RegionMut> RegionMut for $wrapper {
            #[inline(always)]
            fn store_i32(&self, off: usize, value: i32, order: Ordering) {
                (**self).store_i32(off, value, order)
            }
            #[inline(always)]
            fn store_i64(&self, off: usize, value: i64, order: Ordering) {
                (**self).store_i64(off, value, order)
            }
            fn fetch_add_i64(&self, off: usize, delta: i64, order: Ordering) -> i64 {
                (**self).fetch_add_i64(off, delta, order)
            }
            fn compare_exchange_i64(&self, off: usize, current: i64, new: i64) -> Result<i64, i64> {
                (**self).compare_exchange_i64(off, current, new)
            }
            #[inline(always)]
            fn copy_in(&self, off: usize, src: &[u8]) {
                (**self).copy_in(off, src)
            }
            fn zero(&self, off: usize, len: usize) {
                (**self).zero(off, len)
            }
            #[inline(always)]
            unsafe fn with_bytes_mut<U>(
                &self,
                off: usize,
                len: usize,
                f: impl FnOnce(&mut [u8]) -> U,
            ) -> U {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).with_bytes_mut(off, len, f) }
            }
            #[inline(always)]
            unsafe fn store_i32_unchecked(&self, off: usize, value: i32, order: Ordering) {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).store_i32_unchecked(off, value, order) }
            }
            #[inline(always)]
            unsafe fn copy_in_unchecked(&self, off: usize, src: &[u8]) {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).copy_in_unchecked(off, src) }
            }
        }
    )*};
}
forward_region!(&T, std::sync::Arc<T>);
