//! Region operations over a raw pointer and a length, shared by the heap and mmap backends.

use super::check_range;
use crate::sync::raw::{AtomicI32, AtomicI64};
use crate::sync::{fence, Ordering};
use std::ptr;

/// A pointer and a length. Holds no ownership: the backend that owns the memory keeps it alive
/// and only constructs a view over memory that is valid for `len` bytes and 8-byte aligned.
#[derive(Clone, Copy, Debug)]
pub(super) struct RawView {
    base: *mut u8,
    len: usize,
}

impl RawView {
    /// # Safety
    /// `base` must be valid for reads of `len` bytes (and for writes if any write method is used)
    /// for as long as the view is used, and aligned to 8 bytes.
    pub(super) unsafe fn new(base: *mut u8, len: usize) -> Self {
        debug_assert!(base as usize % 8 == 0);
        Self { base, len }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn atomic_i32(&self, off: usize) -> &AtomicI32 {
        check_range(self.len, off, 4, 4);
        // SAFETY: in bounds and 4-aligned, checked above.
        unsafe { self.atomic_i32_unchecked(off) }
    }

    /// # Safety
    /// `off..off + 4` lies inside the view and `off` is 4-aligned.
    #[inline(always)]
    unsafe fn atomic_i32_unchecked(&self, off: usize) -> &AtomicI32 {
        debug_assert!(off <= self.len.saturating_sub(4) && off % 4 == 0);
        // SAFETY: in bounds and 4-aligned (the caller's contract; base is 8-aligned); the memory
        // is valid for the view's lifetime (constructor contract) and only accessed atomically at
        // this offset (region contract), so an `AtomicI32` may overlay it.
        unsafe { AtomicI32::from_ptr(self.base.add(off).cast()) }
    }

    #[inline(always)]
    fn atomic_i64(&self, off: usize) -> &AtomicI64 {
        check_range(self.len, off, 8, 8);
        // SAFETY: as in `atomic_i32_unchecked`, with 8-byte alignment checked.
        unsafe { AtomicI64::from_ptr(self.base.add(off).cast()) }
    }

    #[inline(always)]
    pub(super) fn load_i32(&self, off: usize, order: Ordering) -> i32 {
        load_i32_from(self.atomic_i32(off), order)
    }

    /// # Safety
    /// See [`super::Region::load_i32_unchecked`].
    #[inline(always)]
    pub(super) unsafe fn load_i32_unchecked(&self, off: usize, order: Ordering) -> i32 {
        // SAFETY: the caller's contract is `atomic_i32_unchecked`'s.
        load_i32_from(unsafe { self.atomic_i32_unchecked(off) }, order)
    }

    #[inline(always)]
    pub(super) fn load_i64(&self, off: usize, order: Ordering) -> i64 {
        // As `load_i32_from`.
        if order == Ordering::Acquire && !cfg!(shmlog_tsan) {
            let v = self.atomic_i64(off).load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            v
        } else {
            self.atomic_i64(off).load(order)
        }
    }

    #[inline(always)]
    pub(super) fn store_i32(&self, off: usize, value: i32, order: Ordering) {
        self.atomic_i32(off).store(value, order);
    }

    /// # Safety
    /// See [`super::RegionMut::store_i32_unchecked`].
    #[inline(always)]
    pub(super) unsafe fn store_i32_unchecked(&self, off: usize, value: i32, order: Ordering) {
        // SAFETY: the caller's contract is `atomic_i32_unchecked`'s.
        unsafe { self.atomic_i32_unchecked(off) }.store(value, order);
    }

    #[inline(always)]
    pub(super) fn store_i64(&self, off: usize, value: i64, order: Ordering) {
        self.atomic_i64(off).store(value, order);
    }

    #[allow(dead_code)] // see RegionMut::fetch_add_i64
    pub(super) fn fetch_add_i64(&self, off: usize, delta: i64, order: Ordering) -> i64 {
        self.atomic_i64(off).fetch_add(delta, order)
    }

    pub(super) fn compare_exchange_i64(&self, off: usize, current: i64, new: i64) -> Result<i64, i64> {
        self.atomic_i64(off).compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
    }

    #[inline(always)]
    pub(super) fn copy_out(&self, off: usize, dst: &mut [u8]) {
        check_range(self.len, off, dst.len(), 1);
        // SAFETY: in bounds, checked above.
        unsafe { self.copy_out_unchecked(off, dst) }
    }

    /// # Safety
    /// See [`super::Region::copy_out_unchecked`].
    #[inline(always)]
    pub(super) unsafe fn copy_out_unchecked(&self, off: usize, dst: &mut [u8]) {
        debug_assert!(dst.len() <= self.len && off <= self.len - dst.len());
        // SAFETY: the source range is in bounds (the caller's contract) and valid for reads;
        // `dst` is a distinct local buffer, so the ranges cannot overlap.
        unsafe { ptr::copy_nonoverlapping(self.base.add(off), dst.as_mut_ptr(), dst.len()) }
    }

    #[inline(always)]
    pub(super) fn copy_in(&self, off: usize, src: &[u8]) {
        check_range(self.len, off, src.len(), 1);
        // SAFETY: in bounds, checked above.
        unsafe { self.copy_in_unchecked(off, src) }
    }

    /// # Safety
    /// See [`super::RegionMut::copy_in_unchecked`].
    #[inline(always)]
    pub(super) unsafe fn copy_in_unchecked(&self, off: usize, src: &[u8]) {
        debug_assert!(src.len() <= self.len && off <= self.len - src.len());
        // SAFETY: the destination range is in bounds (the caller's contract) and writable (only
        // writable backends call this); `src` is caller memory outside the region.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(off), src.len()) }
    }

    pub(super) fn zero(&self, off: usize, len: usize) {
        check_range(self.len, off, len, 1);
        // SAFETY: in bounds (checked) and writable (only writable backends call this).
        unsafe { ptr::write_bytes(self.base.add(off), 0, len) }
    }

    /// # Safety
    /// See [`super::Region::with_bytes`].
    #[inline(always)]
    pub(super) unsafe fn with_bytes<T>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> T) -> T {
        check_range(self.len, off, len, 1);
        // SAFETY: in bounds (checked); the rest is the caller's contract.
        unsafe { self.with_bytes_unchecked(off, len, f) }
    }

    /// # Safety
    /// See [`super::Region::with_bytes_unchecked`].
    #[inline(always)]
    pub(super) unsafe fn with_bytes_unchecked<T>(
        &self,
        off: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> T,
    ) -> T {
        debug_assert!(len <= self.len && off <= self.len - len);
        // SAFETY: in bounds (the caller's contract); the caller guarantees no concurrent writes
        // while `f` runs, and the slice does not escape `f`.
        let bytes = unsafe { std::slice::from_raw_parts(self.base.add(off), len) };
        f(bytes)
    }

    /// # Safety
    /// See [`super::RegionMut::with_bytes_mut`].
    #[inline(always)]
    #[cfg_attr(not(any(test, fuzzing)), allow(dead_code))]
    pub(super) unsafe fn with_bytes_mut<T>(
        &self,
        off: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> T,
    ) -> T {
        check_range(self.len, off, len, 1);
        // SAFETY: in bounds (checked), writable, and the caller guarantees exclusive access while
        // `f` runs; the slice does not escape `f`.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.base.add(off), len) };
        f(bytes)
    }
}

impl RawView {
    /// # Safety
    /// See [`super::DirectRegion::slice_mut`]; the caller also bounds the lifetime `'a` by the
    /// backend that owns the memory.
    pub(super) unsafe fn slice_mut<'a>(&self, off: usize, len: usize) -> &'a mut [u8] {
        check_range(self.len, off, len, 1);
        // SAFETY: in bounds (checked) and writable; exclusivity and lifetime are the caller's
        // contract.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(off), len) }
    }
}

/// An `i32` load with `order`; `Acquire` is a relaxed load and a fence, the form documented as
/// sound on read-only mappings.
#[inline(always)]
fn load_i32_from(word: &AtomicI32, order: Ordering) -> i32 {
    // Under ThreadSanitizer (`--cfg shmlog_tsan`, `.ci/sanitizers.sh`) a real acquire load:
    // TSan does not model a standalone fence and would report every frame as a race. On
    // x86-64 both forms are the same plain load.
    if order == Ordering::Acquire && !cfg!(shmlog_tsan) {
        let v = word.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        v
    } else {
        word.load(order)
    }
}

/// Implements `Region` (and optionally `RegionMut`) for a backend with a `view()` method.
macro_rules! delegate_region {
    ($ty:ty) => {
        impl $crate::region::Region for $ty {
            #[inline(always)]
            fn len(&self) -> usize {
                self.view().len()
            }
            #[inline(always)]
            fn load_i32(&self, off: usize, order: $crate::sync::Ordering) -> i32 {
                self.view().load_i32(off, order)
            }
            #[inline(always)]
            fn load_i64(&self, off: usize, order: $crate::sync::Ordering) -> i64 {
                self.view().load_i64(off, order)
            }
            #[inline(always)]
            fn copy_out(&self, off: usize, dst: &mut [u8]) {
                self.view().copy_out(off, dst)
            }
            #[inline(always)]
            unsafe fn with_bytes<T>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> T) -> T {
                // SAFETY: contract forwarded to the caller.
                unsafe { self.view().with_bytes(off, len, f) }
            }
            #[inline(always)]
            unsafe fn load_i32_unchecked(&self, off: usize, order: $crate::sync::Ordering) -> i32 {
                // SAFETY: contract forwarded to the caller.
                unsafe { self.view().load_i32_unchecked(off, order) }
            }
            #[inline(always)]
            unsafe fn copy_out_unchecked(&self, off: usize, dst: &mut [u8]) {
                // SAFETY: contract forwarded to the caller.
                unsafe { self.view().copy_out_unchecked(off, dst) }
            }
            #[inline(always)]
            unsafe fn with_bytes_unchecked<T>(
                &self,
                off: usize,
                len: usize,
                f: impl FnOnce(&[u8]) -> T,
            ) -> T {
                // SAFETY: contract forwarded to the caller.
                unsafe { self.view().with_bytes_unchecked(off, len, f) }
            }
        }
    };
    ($ty:ty, mut) => {
        $crate::region::raw::delegate_region!($ty);
        impl $crate::region::RegionMut for $ty {
            #[inline(always)]
            fn store_i32(&self, off: usize, value: i32, order: $crate::sync::Ordering) {
                self.view().store_i32(off, value, order)
            }
            #[inline(always)]
            fn store_i64(&self, off: usize, value: i64, order: $crate::sync::Ordering) {
                self.view().store_i64(off, value, order)
            }
            fn fetch_add_i64(&self, off: usize, delta: i64, order: $crate::sync::Ordering) -> i64 {
                self.view().fetch_add_i64(off, delta, order)
            }
            fn compare_exchange_i64(&self, off: usize, current: i64, new: i64) -> Result<i64, i64> {
                self.view().compare_exchange_i64(off, current, new)
            }
            #[inline(always)]
            fn copy_in(&self, off: usize, src: &[u8]) {
                self.view().copy_in(off, src)
            }
            fn zero(&self, off: usize, len: usize) {
                self.view().zero(off, len)
            }
            #[inline(always)]
            unsafe fn with_bytes_mut<T>(&self, off: usize, len: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
                // SAFETY: contract forwarded to the caller.
                unsafe { self.view().with_bytes_mut(off, len, f) }
            }
            #[inline(always)]
            unsafe fn store_i32_unchecked(&self, off: usize, value: i32, order: $crate::sync::Ordering) {
                // SAFETY: contract forwarded to the caller.
                unsafe { self.view().store_i32_unchecked(off, value, order) }
            }
            #[inline(always)]
            unsafe fn copy_in_unchecked(&self, off: usize, src: &[u8]) {
                // SAFETY: contract forwarded to the caller.
                unsafe { self.view().copy_in_unchecked(off, src) }
            }
        }
    };
}
pub(super) use delegate_region;
