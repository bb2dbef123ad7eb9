//! File-backed regions over `memmap2::MmapRaw`, which never hands out references.

use super::raw::{Backing, RawRegion, WritableBacking};
use memmap2::{MmapOptions, MmapRaw};
use std::fs::File;
use std::io;

/// A shared read-write mapping of a file (or of a page-aligned range of it).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub type MmapRegion = RawRegion<SharedMap>;
/// A shared read-only mapping: a reader can never corrupt what it maps, whatever its bugs.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub type ReadOnlyRegion = RawRegion<ReadOnlyMap>;

/// The mapping behind an [`MmapRegion`].
#[derive(Debug)]
#[cfg_attr(not(any(shmlog_fuzz, feature = "async")), allow(unreachable_pub))]
pub struct SharedMap(MmapRaw);

/// The mapping behind a [`ReadOnlyRegion`].
#[derive(Debug)]
#[cfg_attr(not(any(shmlog_fuzz, feature = "async")), allow(unreachable_pub))]
pub struct ReadOnlyMap(MmapRaw);

// SAFETY: a mapping is page-aligned, `len()` bytes long, readable and writable (mapped with
// `map_raw`), and stays where it is until the `MmapRaw` is dropped, wherever that is moved.
unsafe impl Backing for SharedMap {
    const WRITABLE: bool = true;
    #[inline(always)]
    fn base(&self) -> *mut u8 {
        self.0.as_mut_ptr()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}
// SAFETY: mapped read-write (see above).
unsafe impl WritableBacking for SharedMap {}

// SAFETY: as for `SharedMap`, readable only (mapped with `map_raw_read_only`): `WRITABLE` is
// false, so no write and no read-modify-write is ever made through it.
unsafe impl Backing for ReadOnlyMap {
    const WRITABLE: bool = false;
    #[inline(always)]
    fn base(&self) -> *mut u8 {
        self.0.as_ptr() as *mut u8
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

impl MmapRegion {
    /// Maps `len` bytes of `file` from `offset` (a multiple of the page size) read-write and
    /// shared, pre-faulting the pages (`MAP_POPULATE`) so the hot path never page-faults.
    pub(crate) fn map(file: &File, offset: u64, len: usize) -> io::Result<Self> {
        let map = MmapOptions::new().offset(offset).len(len).populate().map_raw(file)?;
        Ok(Self::over(SharedMap(map)))
    }
}

impl MmapRegion {
    /// Writes the mapping's dirty pages of `off..off + len` back to its file and waits
    /// (`msync`), for a file on a disk whose words must survive a power loss.
    pub(crate) fn flush(&self, off: usize, len: usize) -> io::Result<()> {
        self.backing().0.flush_range(off, len)
    }
}

impl MmapRegion {
    /// `len` zeroed bytes of private anonymous memory (a futex word of this process's own).
    #[cfg(feature = "async")]
    pub fn anonymous(len: usize) -> io::Result<Self> {
        let map = MmapOptions::new().len(len).map_anon()?;
        Ok(Self::over(SharedMap(MmapRaw::from(map))))
    }
}

impl ReadOnlyRegion {
    /// Maps the first `len` bytes of `file` read-only, pre-faulting them if `populate`: readers
    /// of a log do, tools reading a few metadata words of a possibly huge log do not
    /// (populating a 3 GiB log costs about a second).
    pub(crate) fn map(file: &File, len: usize, populate: bool) -> io::Result<Self> {
        let mut options = MmapOptions::new();
        options.len(len);
        if populate {
            options.populate();
        }
        Ok(Self::over(ReadOnlyMap(options.map_raw_read_only(file)?)))
    }
}
