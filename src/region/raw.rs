//! One region type over raw memory, shared by the heap and mmap backends: an owner that keeps the
//! memory alive (a [`Backing`]) and the pointer and length it lends.
//!
//! It overlays std's atomics on that memory (`sync::raw`): loom cannot place its atomics on memory
//! it does not own, so the loom build models the same words with its own (`region::loom`).

#![allow(clippy::disallowed_types)]

use super::{check_range, DirectRegion, Region, RegionMut};
use crate::sync::raw::{AtomicI32, AtomicI64};
use crate::sync::{fence, Ordering};
use crate::sys::futex;
use std::fmt;
use std::ptr;

/// Memory a [`RawRegion`] views.
///
/// # Safety
/// `base()` is 8-aligned and valid for reads of `len()` bytes (and for writes if `WRITABLE`) for
/// as long as the value lives, wherever it is moved to; both return the same values every time.
#[cfg_attr(not(any(shmlog_fuzz, feature = "async")), allow(unreachable_pub))]
pub unsafe trait Backing {
    /// Whether the memory may be written: [`RegionMut`] exists only for writable backings, and
    /// loads from the others take the form std allows on read-only memory.
    const WRITABLE: bool;
    fn base(&self) -> *mut u8;
    fn len(&self) -> usize;
}

/// Backing memory that may be written: [`RegionMut`] and [`DirectRegion`] exist only for these.
///
/// # Safety
/// `Backing::WRITABLE` is `true` (checked at compile time), and `base()` is valid
/// for writes of `len()` bytes for as long as the value lives.
#[cfg_attr(not(any(shmlog_fuzz, feature = "async")), allow(unreachable_pub))]
pub unsafe trait WritableBacking: Backing {}

/// A region over backing memory `B`. The base pointer is asked of the backing at every access
/// rather than kept: a pointer derived before the backing moved (a `Box` moved into the region
/// is retagged as unique) would no longer be valid for it (Miri, stacked borrows).
#[cfg_attr(not(any(shmlog_fuzz, feature = "async")), allow(unreachable_pub))]
pub struct RawRegion<B> {
    len: usize,
    backing: B,
}

impl<B: fmt::Debug> fmt::Debug for RawRegion<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawRegion").field("len", &self.len).field("backing", &self.backing).finish()
    }
}

// SAFETY: the pointer is into memory the backing owns (its contract); moving the region moves
// the owner along, and the owner is `Send` itself (the bound).
unsafe impl<B: Backing + Send> Send for RawRegion<B> {}
// SAFETY: every safe method through `&self` is an atomic access or a copy out of the region; the
// methods that write bytes non-atomically or lend slices are `unsafe fn`s whose contracts exclude
// any other access to those bytes meanwhile, from this process or another.
unsafe impl<B: Backing + Sync> Sync for RawRegion<B> {}

impl<B: Backing> RawRegion<B> {
    pub(super) fn over(backing: B) -> Self {
        assert!(backing.base() as usize % 8 == 0, "region memory must be 8-aligned");
        Self { len: backing.len(), backing }
    }

    #[inline(always)]
    fn base(&self) -> *mut u8 {
        self.backing.base()
    }

    /// The memory's owner.
    pub(super) fn backing(&self) -> &B {
        &self.backing
    }

    #[inline(always)]
    fn atomic_i32(&self, off: usize) -> &AtomicI32 {
        check_range(self.len, off, 4, 4);
        // SAFETY: in bounds and 4-aligned, checked above.
        unsafe { self.atomic_i32_unchecked(off) }
    }

    /// # Safety
    /// `off..off + 4` lies inside the region and `off` is 4-aligned.
    #[inline(always)]
    unsafe fn atomic_i32_unchecked(&self, off: usize) -> &AtomicI32 {
        debug_assert!(off <= self.len.saturating_sub(4) && off % 4 == 0);
        // SAFETY: in bounds and 4-aligned (the caller's contract; base is 8-aligned); the memory
        // is valid while `self` lives (the backing's contract) and only accessed atomically at
        // this offset (region contract), so an `AtomicI32` may overlay it. On read-only memory
        // only relaxed loads are made through it (`load`), which std's section "Atomic accesses
        // to read-only memory" allows.
        unsafe { AtomicI32::from_ptr(self.base().add(off).cast()) }
    }

    #[inline(always)]
    fn atomic_i64(&self, off: usize) -> &AtomicI64 {
        check_range(self.len, off, 8, 8);
        // SAFETY: in bounds and 8-aligned, checked above.
        unsafe { self.atomic_i64_unchecked(off) }
    }

    /// # Safety
    /// `off..off + 8` lies inside the region and `off` is 8-aligned.
    #[inline(always)]
    unsafe fn atomic_i64_unchecked(&self, off: usize) -> &AtomicI64 {
        debug_assert!(off <= self.len.saturating_sub(8) && off % 8 == 0);
        // SAFETY: in bounds and 8-aligned (the caller's contract; base is 8-aligned); otherwise
        // as in `atomic_i32_unchecked`.
        unsafe { AtomicI64::from_ptr(self.base().add(off).cast()) }
    }
}

/// A load with `order`. On read-only memory it is always a relaxed load followed by a fence of
/// the order asked for (the form std documents as sound there). On writable memory `Acquire` takes
/// the same form, except under ThreadSanitizer (`--cfg shmlog_tsan`, `.ci/sanitizers.sh`), which
/// does not model standalone fences. On x86-64 every form is the same plain load.
macro_rules! load {
    ($word:expr, $order:expr, $writable:expr) => {{
        let (word, order) = ($word, $order);
        let direct =
            order == Ordering::Relaxed || ($writable && (order == Ordering::SeqCst || cfg!(shmlog_tsan)));
        if direct {
            word.load(order)
        } else {
            let v = word.load(Ordering::Relaxed);
            fence(order);
            v
        }
    }};
}

// SAFETY: every access checks its range against `len` (the `_unchecked` ones have callers that
// did), and `base..base + len` is valid memory for as long as `self` lives (backing contract).
unsafe impl<B: Backing> Region for RawRegion<B> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn load_i32(&self, off: usize, order: Ordering) -> i32 {
        load!(self.atomic_i32(off), order, B::WRITABLE)
    }

    #[inline(always)]
    fn load_i64(&self, off: usize, order: Ordering) -> i64 {
        load!(self.atomic_i64(off), order, B::WRITABLE)
    }

    #[inline(always)]
    fn copy_out(&self, off: usize, dst: &mut [u8]) {
        check_range(self.len, off, dst.len(), 1);
        // SAFETY: in bounds, checked above.
        unsafe { self.copy_out_unchecked(off, dst) }
    }

    #[inline(always)]
    unsafe fn with_bytes<T>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> T) -> T {
        check_range(self.len, off, len, 1);
        // SAFETY: in bounds (checked); the rest is the caller's contract.
        unsafe { self.with_bytes_unchecked(off, len, f) }
    }

    #[inline(always)]
    unsafe fn load_i32_unchecked(&self, off: usize, order: Ordering) -> i32 {
        // SAFETY: the caller's contract is `atomic_i32_unchecked`'s.
        load!(unsafe { self.atomic_i32_unchecked(off) }, order, B::WRITABLE)
    }

    #[inline(always)]
    unsafe fn load_i64_unchecked(&self, off: usize, order: Ordering) -> i64 {
        // SAFETY: the caller's contract is `atomic_i64_unchecked`'s.
        load!(unsafe { self.atomic_i64_unchecked(off) }, order, B::WRITABLE)
    }

    #[inline(always)]
    unsafe fn copy_out_unchecked(&self, off: usize, dst: &mut [u8]) {
        debug_assert!(dst.len() <= self.len && off <= self.len - dst.len());
        // SAFETY: the source range is in bounds (the caller's contract) and valid for reads;
        // `dst` is a distinct local buffer, so the ranges cannot overlap.
        unsafe { ptr::copy_nonoverlapping(self.base().add(off), dst.as_mut_ptr(), dst.len()) }
    }

    /// Relaxed atomic loads, a word at a time where aligned: no data race on this side whatever
    /// the writer does meanwhile (the crate's rule for words another process writes), never
    /// elided or repeated, and on x86-64 and aarch64 the same plain loads a volatile copy makes.
    /// What they return may be torn across words; the caller proves it was not (see the trait)
    /// before it trusts a byte.
    #[inline(always)]
    unsafe fn copy_out_racy_unchecked(&self, off: usize, dst: &mut [u8]) {
        debug_assert!(dst.len() <= self.len && off <= self.len - dst.len());
        // SAFETY: in bounds (the caller's contract), so the pointer stays inside the backing.
        let src = unsafe { self.base().add(off) };
        let mut i = 0;
        if src as usize % 8 == 0 {
            for word in dst.chunks_exact_mut(8) {
                // SAFETY: `src + i .. src + i + 8` is inside the source range and 8-aligned (src
                // is, and `i` steps by 8), valid for as long as `self` lives; an atomic load of
                // a word another party may write is the crate's rule for such words, and a
                // relaxed load is a plain load, fine on a read-only mapping.
                let v = unsafe { std::sync::atomic::AtomicU64::from_ptr(src.add(i).cast::<u64>()) }
                    .load(Ordering::Relaxed);
                word.copy_from_slice(&v.to_ne_bytes());
                i += 8;
            }
        }
        for byte in &mut dst[i..] {
            // SAFETY: `src + i` is inside the source range (`i < dst.len()`); as above.
            *byte = unsafe { std::sync::atomic::AtomicU8::from_ptr(src.add(i)) }.load(Ordering::Relaxed);
            i += 1;
        }
    }

    #[inline(always)]
    unsafe fn with_bytes_unchecked<T>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> T) -> T {
        debug_assert!(len <= self.len && off <= self.len - len);
        // SAFETY: in bounds (the caller's contract); the caller guarantees no concurrent writes
        // while `f` runs, and the slice does not escape `f`.
        let bytes = unsafe { std::slice::from_raw_parts(self.base().add(off), len) };
        f(bytes)
    }
}

impl<B: WritableBacking> RegionMut for RawRegion<B> {
    #[inline(always)]
    fn store_i32(&self, off: usize, value: i32, order: Ordering) {
        self.atomic_i32(off).store(value, order);
    }

    #[inline(always)]
    fn store_i64(&self, off: usize, value: i64, order: Ordering) {
        // The marker trait and the flag must agree; checked once, where every writer passes.
        const { assert!(B::WRITABLE) };
        self.atomic_i64(off).store(value, order);
    }

    fn compare_exchange_i64(&self, off: usize, current: i64, new: i64) -> Result<i64, i64> {
        self.atomic_i64(off).compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
    }

    fn compare_exchange_i32(&self, off: usize, current: i32, new: i32) -> Result<i32, i32> {
        self.atomic_i32(off).compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
    }

    fn swap_i32(&self, off: usize, value: i32) -> i32 {
        self.atomic_i32(off).swap(value, Ordering::SeqCst)
    }

    fn fetch_add_i32(&self, off: usize, delta: i32) -> i32 {
        self.atomic_i32(off).fetch_add(delta, Ordering::SeqCst)
    }

    fn wait_i32(&self, off: usize, expected: i32, timeout: std::time::Duration) -> bool {
        let word = self.atomic_i32(off).as_ptr() as *const u32;
        // SAFETY: the word is in bounds and 4-aligned (checked by `atomic_i32`) and lives as long
        // as `self`, which outlives the call.
        unsafe { futex::wait(word, expected as u32, timeout) == futex::Woke::Maybe }
    }

    fn wake_i32(&self, off: usize, count: i32) -> usize {
        let word = self.atomic_i32(off).as_ptr() as *const u32;
        // SAFETY: as in `wait_i32`; the kernel only uses the address as a key.
        unsafe { futex::wake(word, count) }
    }

    fn wait_any_i32(words: &[(&Self, usize, i32)], timeout: std::time::Duration) -> std::io::Result<bool> {
        let waiters: Vec<futex::Waiter> = words
            .iter()
            .map(|(region, off, expected)| {
                futex::Waiter::new(region.atomic_i32(*off).as_ptr() as *const u32, *expected as u32)
            })
            .collect();
        // SAFETY: every word is in bounds and 4-aligned (checked by `atomic_i32`) in a region that
        // `words` borrows for the whole call.
        unsafe { futex::wait_any(&waiters, timeout) }.map(|woke| woke == futex::Woke::Maybe)
    }

    #[inline(always)]
    unsafe fn copy_in(&self, off: usize, src: &[u8]) {
        check_range(self.len, off, src.len(), 1);
        // SAFETY: in bounds (checked); the rest is the caller's contract.
        unsafe { self.copy_in_unchecked(off, src) }
    }

    unsafe fn zero(&self, off: usize, len: usize) {
        check_range(self.len, off, len, 1);
        // SAFETY: in bounds (checked) and writable (the backing's contract); nobody else accesses the bytes
        // meanwhile (the caller's contract).
        unsafe { ptr::write_bytes(self.base().add(off), 0, len) }
    }

    #[cfg(any(test, shmlog_fuzz))]
    unsafe fn with_bytes_mut<T>(&self, off: usize, len: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
        check_range(self.len, off, len, 1);
        // SAFETY: in bounds (checked); exclusivity is the caller's contract; the slice does not
        // escape `f`.
        f(unsafe { self.slice_mut(off, len) })
    }

    #[inline(always)]
    unsafe fn store_i32_unchecked(&self, off: usize, value: i32, order: Ordering) {
        // SAFETY: the caller's contract is `atomic_i32_unchecked`'s.
        unsafe { self.atomic_i32_unchecked(off) }.store(value, order);
    }

    #[inline(always)]
    unsafe fn store_i64_unchecked(&self, off: usize, value: i64, order: Ordering) {
        // SAFETY: the caller's contract is `atomic_i64_unchecked`'s.
        unsafe { self.atomic_i64_unchecked(off) }.store(value, order);
    }

    #[inline(always)]
    unsafe fn compare_exchange_i64_unchecked(&self, off: usize, current: i64, new: i64) -> Result<i64, i64> {
        // SAFETY: the caller's contract is `atomic_i64_unchecked`'s.
        unsafe { self.atomic_i64_unchecked(off) }.compare_exchange(
            current,
            new,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
    }

    #[inline(always)]
    unsafe fn copy_in_unchecked(&self, off: usize, src: &[u8]) {
        debug_assert!(src.len() <= self.len && off <= self.len - src.len());
        // SAFETY: the destination range is in bounds (the caller's contract) and writable
        // (asserted); `src` is caller memory outside the region, so they cannot overlap.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), self.base().add(off), src.len()) }
    }
}

impl<B: WritableBacking> DirectRegion for RawRegion<B> {
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice_mut(&self, off: usize, len: usize) -> &mut [u8] {
        check_range(self.len, off, len, 1);
        // SAFETY: in bounds (checked) and writable (the backing's contract); the memory lives as long as
        // `self`, which bounds the slice's lifetime; exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.base().add(off), len) }
    }
}
