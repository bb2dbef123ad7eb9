//! A window onto one term partition of a region, bounds-checked once when made, in which the
//! per-frame accesses need no check of their own.
//!
//! Frames start on a 32-byte grid. A window masks every grid offset it is given into itself
//! (`offset & (len - 1)`, rounded down to the grid), so a word or a header access at a grid point
//! is in bounds by construction, whatever the offset: no compare, no panic path on the hot path.
//! For the offsets the log computes (on the grid, below the term length) the mask changes nothing;
//! debug builds assert that. Only accesses past a grid cell (a frame's body) compare a length.

use super::{range_violation, Region, RegionMut};
use crate::sync::Ordering;

/// Grid of frame starts, and the bytes at each grid point that accesses reach without a check.
pub(super) const GRID: usize = 32;

/// Where a window lies: `[base, base + len)` with `len` a power of two of at least [`GRID`] bytes
/// and `base` on the grid. Validated once when made (a log makes its three when it opens), so
/// that laying it over a region costs a single compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    base: usize,
    mask: usize,
}

impl Span {
    /// `None` unless `len` is a power of two of at least `GRID` bytes, `base` is on the grid and
    /// the end is representable.
    pub(crate) fn new(base: usize, len: usize) -> Option<Self> {
        let valid =
            len.is_power_of_two() && len >= GRID && base % GRID == 0 && base.checked_add(len).is_some();
        valid.then_some(Self { base, mask: len - 1 })
    }

    /// Offset of the first byte.
    #[inline(always)]
    pub(crate) fn base(&self) -> usize {
        self.base
    }

    /// Length in bytes.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.mask + 1
    }
}

/// A [`Span`] laid over a region whose length it was checked against.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Window<'r, R> {
    region: &'r R,
    base: usize,
    mask: usize,
}

impl<'r, R: Region> Window<'r, R> {
    /// `span` of `region`. Panics (a bug in this crate, as for any out-of-bounds access) if the
    /// span runs past the region.
    #[inline(always)]
    pub(crate) fn new(region: &'r R, span: Span) -> Self {
        if span.len() > region.len() || span.base > region.len() - span.len() {
            range_violation(region.len(), span.base, span.len());
        }
        Self { region, base: span.base, mask: span.mask }
    }

    /// `span` of `region`, without the compare: for a caller that checked the span against the
    /// region once (a log, when it opened, for its three partitions), since a region's length
    /// never changes.
    ///
    /// # Safety
    /// `span` lies inside `region`.
    #[inline(always)]
    pub(crate) unsafe fn new_unchecked(region: &'r R, span: Span) -> Self {
        debug_assert!(span.len() <= region.len() && span.base <= region.len() - span.len());
        Self { region, base: span.base, mask: span.mask }
    }

    /// Length in bytes.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.mask + 1
    }

    /// Region offset of the grid point `at`; callers pass grid offsets inside the window (an
    /// offset that comes from a shared word is checked before it gets here: a concurrent
    /// writer's tail, `log::concurrent`). The mask keeps even a caller's bug inside the window.
    #[inline(always)]
    fn point(&self, at: usize) -> usize {
        debug_assert!(
            at % GRID == 0 && at <= self.mask,
            "grid offset {at} outside a window of {}",
            self.len()
        );
        // At most `len - GRID`: the GRID bytes from here are inside the window.
        self.base + (at & self.mask & !(GRID - 1))
    }

    /// Checks that `len` bytes from `rel` past a grid point stay inside its cell; free when both
    /// are constants, as at every call site.
    #[inline(always)]
    fn check_cell(&self, rel: usize, len: usize) {
        if rel > GRID || len > GRID - rel {
            range_violation(GRID, rel, len);
        }
    }

    /// `start` (a region offset inside the window, or its end), checked to have `len` bytes
    /// after it inside the window.
    #[inline(always)]
    fn run_of(&self, start: usize, len: usize) -> usize {
        let end = self.base + self.len();
        if len > end - start {
            range_violation(end, start, len);
        }
        start
    }

    /// Region offset of `len` bytes after the cell at grid point `at`, checked to end inside the
    /// window.
    #[inline(always)]
    fn body(&self, at: usize, len: usize) -> usize {
        self.run_of(self.point(at) + GRID, len)
    }

    /// Atomic load of the `i32` at grid point `at`.
    #[inline(always)]
    pub(crate) fn load_i32(&self, at: usize, order: Ordering) -> i32 {
        // SAFETY: `point` is inside the window with GRID bytes after it, the window inside the
        // region (checked in `new`); grid points are 4-aligned.
        unsafe { self.region.load_i32_unchecked(self.point(at), order) }
    }

    /// Copies `dst.len()` bytes from `rel` bytes past grid point `at`, inside its cell.
    #[inline(always)]
    pub(crate) fn copy_out_cell(&self, at: usize, rel: usize, dst: &mut [u8]) {
        self.check_cell(rel, dst.len());
        // SAFETY: within the GRID bytes after a point inside the window (checked above).
        unsafe { self.region.copy_out_unchecked(self.point(at) + rel, dst) }
    }

    /// Copies the `dst.len()` bytes after the cell at grid point `at` (a frame's body), checked
    /// to end inside the window.
    #[inline(always)]
    pub(crate) fn copy_out_body(&self, at: usize, dst: &mut [u8]) {
        let start = self.body(at, dst.len());
        // SAFETY: in bounds (checked in `body`).
        unsafe { self.region.copy_out_unchecked(start, dst) }
    }

    /// Copies `dst.len()` bytes from grid point `at`, checked to end inside the window.
    #[inline(always)]
    pub(crate) fn copy_out(&self, at: usize, dst: &mut [u8]) {
        let start = self.run_of(self.point(at), dst.len());
        // SAFETY: in bounds (checked in `run_of`).
        unsafe { self.region.copy_out_unchecked(start, dst) }
    }

    /// [`Window::load_i32`] of a word the writer may be zeroing meanwhile (see
    /// [`Region::load_i32_racy_unchecked`]): an untethered reader's.
    #[inline(always)]
    pub(crate) fn load_i32_racy(&self, at: usize, order: Ordering) -> i32 {
        // SAFETY: as in `load_i32`.
        unsafe { self.region.load_i32_racy_unchecked(self.point(at), order) }
    }

    /// [`Window::copy_out`] of bytes the writer may be writing meanwhile (see
    /// [`Region::copy_out_racy_unchecked`]): an untethered reader's.
    #[inline(always)]
    pub(crate) fn copy_out_racy(&self, at: usize, dst: &mut [u8]) {
        let start = self.run_of(self.point(at), dst.len());
        // SAFETY: in bounds (checked in `run_of`).
        unsafe { self.region.copy_out_racy_unchecked(start, dst) }
    }

    /// Calls `f` with `len` bytes from grid point `at`, checked to end inside the window.
    ///
    /// # Safety
    /// As [`Region::with_bytes`].
    #[inline(always)]
    pub(crate) unsafe fn with_bytes<T>(&self, at: usize, len: usize, f: impl FnOnce(&[u8]) -> T) -> T {
        let start = self.run_of(self.point(at), len);
        // SAFETY: in bounds (checked in `run_of`); the rest is the caller's contract.
        unsafe { self.region.with_bytes_unchecked(start, len, f) }
    }

    /// Calls `f` with the `len` bytes after the cell at grid point `at` (a frame's body).
    ///
    /// # Safety
    /// As [`Region::with_bytes`].
    #[inline(always)]
    pub(crate) unsafe fn with_body<T>(&self, at: usize, len: usize, f: impl FnOnce(&[u8]) -> T) -> T {
        let start = self.body(at, len);
        // SAFETY: in bounds (checked in `body`); the rest is the caller's contract.
        unsafe { self.region.with_bytes_unchecked(start, len, f) }
    }
}

impl<R: RegionMut> Window<'_, R> {
    /// Atomic store of the `i32` at grid point `at`.
    #[inline(always)]
    pub(crate) fn store_i32(&self, at: usize, value: i32, order: Ordering) {
        // SAFETY: as in `load_i32`.
        unsafe { self.region.store_i32_unchecked(self.point(at), value, order) }
    }

    /// Copies `src` to `rel` bytes past grid point `at`, inside its cell.
    ///
    /// # Safety
    /// As [`RegionMut::copy_in`].
    #[inline(always)]
    pub(crate) unsafe fn copy_in_cell(&self, at: usize, rel: usize, src: &[u8]) {
        self.check_cell(rel, src.len());
        // SAFETY: in bounds as in `copy_out_cell`; the rest is the caller's contract.
        unsafe { self.region.copy_in_unchecked(self.point(at) + rel, src) }
    }

    /// Copies `src` to the bytes after the cell at grid point `at` (a frame's body).
    ///
    /// # Safety
    /// As [`RegionMut::copy_in`].
    #[inline(always)]
    pub(crate) unsafe fn copy_in_body(&self, at: usize, src: &[u8]) {
        let start = self.body(at, src.len());
        // SAFETY: in bounds (checked in `body`); the rest is the caller's contract.
        unsafe { self.region.copy_in_unchecked(start, src) }
    }
}

#[cfg(all(test, not(shmlog_loom)))]
mod tests {
    use super::*;
    use crate::region::HeapRegion;

    #[test]
    fn accesses_land_at_the_grid_offsets_given() {
        let r = HeapRegion::new(4 * 256);
        let w = Window::new(&r, span(512, 256));
        w.store_i32(224, 7, Ordering::Release);
        // SAFETY: nothing else accesses the region.
        unsafe {
            w.copy_in_cell(224, 8, &[1, 2, 3]);
            w.copy_in_body(32, &[9; 96]);
        }
        assert_eq!(r.load_i32(512 + 224, Ordering::Acquire), 7);
        let mut head = [0u8; 3];
        w.copy_out_cell(224, 8, &mut head);
        assert_eq!(head, [1, 2, 3]);
        let mut body = [0u8; 96];
        r.copy_out(512 + 64, &mut body);
        assert_eq!(body, [9; 96]);
        // SAFETY: nothing writes the region concurrently.
        let all = unsafe { w.with_bytes(0, 256, |b| b.to_vec()) };
        assert_eq!(all.len(), 256);
    }

    fn span(base: usize, len: usize) -> Span {
        Span::new(base, len).unwrap()
    }

    #[test]
    fn spans_are_powers_of_two_on_the_grid() {
        assert_eq!(span(64, 128).len(), 128);
        assert_eq!(Span::new(16, 256), None, "off the grid");
        assert_eq!(Span::new(0, 96), None, "not a power of two");
        assert_eq!(Span::new(0, 16), None, "shorter than a cell");
        assert_eq!(Span::new(usize::MAX - 31, 64), None, "end not representable");
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn a_window_past_the_region_is_refused() {
        let r = HeapRegion::new(1024);
        Window::new(&r, span(1024 - 128, 256));
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn a_body_past_the_window_is_refused() {
        let r = HeapRegion::new(1024);
        // SAFETY: nothing else accesses the region (and the copy is refused anyway).
        unsafe { Window::new(&r, span(0, 256)).copy_in_body(192, &[0; 64]) };
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn a_cell_access_past_its_cell_is_refused() {
        let r = HeapRegion::new(1024);
        // SAFETY: as above.
        unsafe { Window::new(&r, span(0, 256)).copy_in_cell(0, 24, &[0; 9]) };
    }

    /// Release builds mask a stray offset into the window instead of checking it.
    #[test]
    #[cfg(not(debug_assertions))]
    fn a_stray_offset_stays_inside_the_window() {
        let r = HeapRegion::new(1024);
        let w = Window::new(&r, span(256, 256));
        w.store_i32(256 + 64 + 3, 5, Ordering::Release);
        assert_eq!(r.load_i32(256 + 64, Ordering::Acquire), 5);
        assert_eq!(r.load_i32(512 + 64, Ordering::Acquire), 0);
    }
}
