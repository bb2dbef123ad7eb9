//! File-backed backends over `memmap2::MmapRaw`, which never hands out references.

use super::raw::{delegate_region, RawView};
use memmap2::{MmapOptions, MmapRaw};
use std::fs::File;
use std::io;

/// A shared read-write mapping of a whole file. Pages are pre-faulted (`MAP_POPULATE`).
#[derive(Debug)]
pub(crate) struct MmapRegion {
    map: MmapRaw,
    view: RawView,
}

// SAFETY: `view` is a pointer into `map`, which is itself `Send + Sync`; all access through the
// view is atomic or covered by the region contract, exactly as through `map`.
unsafe impl Send for MmapRegion {}
// SAFETY: as above.
unsafe impl Sync for MmapRegion {}

impl MmapRegion {
    /// Maps the first `len` bytes of `file` read-write and shared.
    pub(crate) fn map(file: &File, len: usize) -> io::Result<Self> {
        let map = MmapOptions::new().len(len).populate().map_raw(file)?;
        // SAFETY: the mapping is page-aligned, `map.len()` bytes long, readable and writable, and
        // lives as long as `self` (the view is never handed out beyond a borrow of `self`).
        let view = unsafe { RawView::new(map.as_mut_ptr(), map.len()) };
        Ok(Self { map, view })
    }

    #[inline(always)]
    fn view(&self) -> RawView {
        debug_assert_eq!(self.view.len(), self.map.len());
        self.view
    }
}

/// A shared read-only mapping: a reader can never corrupt the log, whatever its bugs.
#[derive(Debug)]
pub(crate) struct ReadOnlyRegion {
    map: MmapRaw,
    view: RawView,
}

// SAFETY: as for `MmapRegion`.
unsafe impl Send for ReadOnlyRegion {}
// SAFETY: as for `MmapRegion`.
unsafe impl Sync for ReadOnlyRegion {}

impl ReadOnlyRegion {
    /// Maps the first `len` bytes of `file` read-only.
    pub(crate) fn map(file: &File, len: usize) -> io::Result<Self> {
        let map = MmapOptions::new().len(len).populate().map_raw_read_only(file)?;
        // SAFETY: page-aligned, `map.len()` readable bytes that live as long as `self`. Only the
        // read methods of the view are reachable through `Region`, never the write ones.
        let view = unsafe { RawView::new(map.as_ptr() as *mut u8, map.len()) };
        Ok(Self { map, view })
    }

    /// Like [`ReadOnlyRegion::map`] without pre-faulting, for tools that read a few metadata
    /// words of a possibly huge log (`inspect`): populating a 3 GiB log costs ~1 s.
    pub(crate) fn map_lazy(file: &File, len: usize) -> io::Result<Self> {
        let map = MmapOptions::new().len(len).map_raw_read_only(file)?;
        // SAFETY: as in `map`.
        let view = unsafe { RawView::new(map.as_ptr() as *mut u8, map.len()) };
        Ok(Self { map, view })
    }

    #[inline(always)]
    fn view(&self) -> RawView {
        debug_assert_eq!(self.view.len(), self.map.len());
        self.view
    }
}

delegate_region!(MmapRegion, mut);

impl MmapRegion {
    /// # Safety
    /// See [`super::DirectRegion::slice_mut`].
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn slice_mut(&self, off: usize, len: usize) -> &mut [u8] {
        // SAFETY: the view's memory lives as long as `self`, which bounds the returned lifetime;
        // the rest of the contract is forwarded to the caller.
        unsafe { self.view().slice_mut(off, len) }
    }
}
delegate_region!(ReadOnlyRegion);
