//! The only layer that touches raw memory.
//!
//! A region is a bounds-checked view of bytes that other threads or processes may access at the
//! same time. Control words are accessed atomically and payload is copied in and out. The
//! operations whose soundness rests on the log protocol are `unsafe fn`s, so the protocol's proof
//! sits in a `// SAFETY:` comment at each call: lending a slice of the region
//! ([`Region::with_bytes`], [`RegionMut::with_bytes_mut`], [`DirectRegion::slice_mut`]) and
//! writing bytes non-atomically ([`RegionMut::copy_in`], [`RegionMut::zero`]), which would race
//! with a slice lent elsewhere.
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

#[cfg(all(any(test, shmlog_fuzz), not(shmlog_loom)))]
mod heap;
#[cfg(shmlog_loom)]
mod loom;
#[cfg(not(shmlog_loom))]
mod mmap;
#[cfg(not(shmlog_loom))]
pub(crate) mod pod;
#[cfg(not(shmlog_loom))]
mod raw;
mod window;

#[cfg(all(any(test, shmlog_fuzz), not(shmlog_loom)))]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub use heap::HeapRegion;
#[cfg(shmlog_loom)]
pub(crate) use loom::LoomRegion;
#[cfg(not(shmlog_loom))]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub use mmap::{MmapRegion, ReadOnlyRegion};
pub(crate) use window::{Span, Window};

/// Read access to a region of possibly shared memory.
///
/// # Safety
/// `len()` bytes from offset 0 stay valid for the accesses below for as long as `&self` lives,
/// and `len()` returns the same value every time: [`Window`] checks a span against it once and
/// then accesses the region without checks.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub unsafe trait Region {
    /// Length in bytes.
    fn len(&self) -> usize;

    /// Atomic load of the `i32` at `off`. Loads stay valid on read-only mappings (they are done
    /// there as a relaxed load followed by a fence of the order asked for).
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

    /// [`Region::load_i64`] without the bounds check, for words a log proved in bounds once (its
    /// tail counters).
    ///
    /// # Safety
    /// `off..off + 8` lies inside the region and `off` is 8-aligned.
    #[inline(always)]
    unsafe fn load_i64_unchecked(&self, off: usize, order: Ordering) -> i64 {
        self.load_i64(off, order)
    }

    /// [`Region::copy_out`] without the bounds check, for [`Window`].
    ///
    /// # Safety
    /// `off..off + dst.len()` lies inside the region.
    #[inline(always)]
    unsafe fn copy_out_unchecked(&self, off: usize, dst: &mut [u8]) {
        self.copy_out(off, dst)
    }

    /// [`Region::load_i32_unchecked`] of a word the writer may be zeroing (cleaning a partition
    /// for reuse) at the same time: an untethered reader's load of a frame length, which it
    /// trusts only once a check after it proves the writer had not begun to reuse the partition
    /// (`log::reader::lapped`). Over real memory it is the same load; the loom backend leaves
    /// out its check that the load is ordered with the zeroing (the race is the point).
    ///
    /// # Safety
    /// As [`Region::load_i32_unchecked`].
    #[inline(always)]
    unsafe fn load_i32_racy_unchecked(&self, off: usize, order: Ordering) -> i32 {
        // SAFETY: the caller's contract is `load_i32_unchecked`'s.
        unsafe { self.load_i32_unchecked(off, order) }
    }

    /// Copies bytes the writer may be writing at the same time (an untethered reader's copy of
    /// frames it has no flow control over): the result may be anything, torn or new, and is
    /// trusted only once a check after the copy proves no write overlapped it
    /// (`log::reader::lapped`). Never lends a reference into the region.
    ///
    /// # Safety
    /// `off..off + dst.len()` lies inside the region.
    #[inline(always)]
    unsafe fn copy_out_racy_unchecked(&self, off: usize, dst: &mut [u8]) {
        // SAFETY: the caller's contract is `copy_out_unchecked`'s.
        unsafe { self.copy_out_unchecked(off, dst) }
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
/// Atomic stores are safe; non-atomic writes are `unsafe fn`s, because a reader in this process
/// or another may hold a slice over the bytes they write unless the protocol rules that out.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub trait RegionMut: Region {
    /// Atomic store of the `i32` at `off`.
    fn store_i32(&self, off: usize, value: i32, order: Ordering);

    /// Atomic store of the `i64` at `off`.
    fn store_i64(&self, off: usize, value: i64, order: Ordering);

    /// Atomic compare-and-exchange of the `i64` at `off` (AcqRel on success, Acquire on failure).
    fn compare_exchange_i64(&self, off: usize, current: i64, new: i64) -> Result<i64, i64>;

    /// Atomic compare-and-exchange of the `i32` at `off` (AcqRel, Acquire on failure).
    fn compare_exchange_i32(&self, off: usize, current: i32, new: i32) -> Result<i32, i32>;

    /// Atomic swap of the `i32` at `off` (SeqCst); returns the previous value.
    fn swap_i32(&self, off: usize, value: i32) -> i32;

    /// Atomic add to the `i32` at `off` (SeqCst, wrapping); returns the previous value.
    fn fetch_add_i32(&self, off: usize, delta: i32) -> i32;

    /// Sleeps while the `i32` at `off` holds `expected` (a shared futex: sleepers and wakers may
    /// be other processes), at most `timeout`. `true` if woken (or the value had changed, or a
    /// signal); `false` on timeout. Callers re-check what they wait for either way.
    fn wait_i32(&self, off: usize, expected: i32, timeout: std::time::Duration) -> bool;

    /// Wakes up to `count` sleepers on the `i32` at `off` (`i32::MAX`: all); returns how many
    /// were asleep there and woken.
    fn wake_i32(&self, off: usize, count: i32) -> usize;

    /// Sleeps until one of `words` (a region, the offset of an `i32` in it, the value it is
    /// expected to hold) no longer holds its value or is woken, or `timeout` passes: `Ok(true)`
    /// unless it timed out. `Err` where the system cannot sleep on several words at once
    /// (`futex_waitv` came with Linux 5.16): callers then wait on one word with short timeouts.
    fn wait_any_i32(words: &[(&Self, usize, i32)], timeout: std::time::Duration) -> std::io::Result<bool>
    where
        Self: Sized;

    /// Copies `src` into the region at `off`.
    ///
    /// # Safety
    /// Nobody (thread or process) reads or writes those bytes meanwhile other than by copying
    /// them out, and no slice of them is lent out: the caller is the single writer of a frame not
    /// yet committed (I1), or of a range no reader may reach (flow control, I2).
    unsafe fn copy_in(&self, off: usize, src: &[u8]);

    /// Writes `len` zero bytes at `off`.
    ///
    /// # Safety
    /// As [`RegionMut::copy_in`]: the bytes are the writer's alone (cleaning a partition every
    /// live reader has left, I3).
    unsafe fn zero(&self, off: usize, len: usize);

    /// Calls `f` with an exclusive slice of `len` bytes at `off` (the closure form of
    /// [`DirectRegion::slice_mut`], which the loom backend can model).
    ///
    /// # Safety
    /// Nobody else may read or write those bytes while `f` runs: the caller is the single writer
    /// and the bytes belong to a frame whose length word is not yet committed.
    #[cfg(any(test, shmlog_fuzz, shmlog_loom))]
    unsafe fn with_bytes_mut<T>(&self, off: usize, len: usize, f: impl FnOnce(&mut [u8]) -> T) -> T;

    /// [`RegionMut::store_i32`] without the bounds check, for [`Window`].
    ///
    /// # Safety
    /// `off..off + 4` lies inside the region and `off` is 4-aligned.
    #[inline(always)]
    unsafe fn store_i32_unchecked(&self, off: usize, value: i32, order: Ordering) {
        self.store_i32(off, value, order)
    }

    /// [`RegionMut::store_i64`] without the bounds check, for offsets checked once for many
    /// stores (a reader's own slot).
    ///
    /// # Safety
    /// `off..off + 8` lies inside the region and `off` is 8-aligned.
    #[inline(always)]
    unsafe fn store_i64_unchecked(&self, off: usize, value: i64, order: Ordering) {
        self.store_i64(off, value, order)
    }

    /// [`RegionMut::compare_exchange_i64`] without the bounds check (a concurrent log's tail
    /// counters, proved in bounds once).
    ///
    /// # Safety
    /// `off..off + 8` lies inside the region and `off` is 8-aligned.
    #[inline(always)]
    unsafe fn compare_exchange_i64_unchecked(&self, off: usize, current: i64, new: i64) -> Result<i64, i64> {
        self.compare_exchange_i64(off, current, new)
    }

    /// [`RegionMut::copy_in`] without the bounds check, for [`Window`].
    ///
    /// # Safety
    /// As [`RegionMut::copy_in`], and `off..off + src.len()` lies inside the region.
    #[inline(always)]
    unsafe fn copy_in_unchecked(&self, off: usize, src: &[u8]) {
        // SAFETY: the caller's contract includes `copy_in`'s.
        unsafe { self.copy_in(off, src) }
    }
}

/// Backends whose bytes are real memory, so a claimed frame can be lent out as a slice whose
/// lifetime the borrow checker tracks (the loom backend cannot, and does not implement this).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub trait DirectRegion: RegionMut {
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
pub(crate) fn range_violation(len: usize, off: usize, size: usize) -> ! {
    panic!("region access out of bounds or misaligned: off={off} size={size} len={len}")
}

macro_rules! forward_region {
    ($($wrapper:ty),*) => {$(
        // SAFETY: forwards to `T`, whose contract covers every access made through it.
        unsafe impl<T: Region> Region for $wrapper {
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
            unsafe fn load_i64_unchecked(&self, off: usize, order: Ordering) -> i64 {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).load_i64_unchecked(off, order) }
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
            #[inline(always)]
            unsafe fn load_i32_racy_unchecked(&self, off: usize, order: Ordering) -> i32 {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).load_i32_racy_unchecked(off, order) }
            }
            #[inline(always)]
            unsafe fn copy_out_racy_unchecked(&self, off: usize, dst: &mut [u8]) {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).copy_out_racy_unchecked(off, dst) }
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
            fn compare_exchange_i64(&self, off: usize, current: i64, new: i64) -> Result<i64, i64> {
                (**self).compare_exchange_i64(off, current, new)
            }
            fn compare_exchange_i32(&self, off: usize, current: i32, new: i32) -> Result<i32, i32> {
                (**self).compare_exchange_i32(off, current, new)
            }
            fn swap_i32(&self, off: usize, value: i32) -> i32 {
                (**self).swap_i32(off, value)
            }
            fn fetch_add_i32(&self, off: usize, delta: i32) -> i32 {
                (**self).fetch_add_i32(off, delta)
            }
            fn wait_i32(&self, off: usize, expected: i32, timeout: std::time::Duration) -> bool {
                (**self).wait_i32(off, expected, timeout)
            }
            fn wake_i32(&self, off: usize, count: i32) -> usize {
                (**self).wake_i32(off, count)
            }
            fn wait_any_i32(
                words: &[(&Self, usize, i32)],
                timeout: std::time::Duration,
            ) -> std::io::Result<bool> {
                let inner: Vec<(&T, usize, i32)> = words.iter().map(|&(r, off, v)| (&**r, off, v)).collect();
                T::wait_any_i32(&inner, timeout)
            }
            #[inline(always)]
            unsafe fn copy_in(&self, off: usize, src: &[u8]) {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).copy_in(off, src) }
            }
            unsafe fn zero(&self, off: usize, len: usize) {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).zero(off, len) }
            }
            #[cfg(any(test, shmlog_fuzz, shmlog_loom))]
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
            unsafe fn store_i64_unchecked(&self, off: usize, value: i64, order: Ordering) {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).store_i64_unchecked(off, value, order) }
            }
            #[inline(always)]
            unsafe fn compare_exchange_i64_unchecked(&self, off: usize, current: i64, new: i64) -> Result<i64, i64> {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).compare_exchange_i64_unchecked(off, current, new) }
            }
            #[inline(always)]
            unsafe fn copy_in_unchecked(&self, off: usize, src: &[u8]) {
                // SAFETY: contract forwarded to the caller.
                unsafe { (**self).copy_in_unchecked(off, src) }
            }
        }
        impl<T: DirectRegion> DirectRegion for $wrapper {
            #[allow(clippy::mut_from_ref)]
            unsafe fn slice_mut(&self, off: usize, len: usize) -> &mut [u8] {
                // SAFETY: contract forwarded to the caller; the slice borrows `self`.
                unsafe { (**self).slice_mut(off, len) }
            }
        }
    )*};
}
forward_region!(&T, std::sync::Arc<T>);
