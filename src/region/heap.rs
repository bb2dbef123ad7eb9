//! Heap backend: the same raw-pointer code as the mmap backend, over process memory. Used by
//! unit tests, the fuzz targets and the ThreadSanitizer test, so the code they check is the code
//! that runs on files.

use super::raw::{Backing, RawRegion, WritableBacking};
// The one std atomic named outside `sync`: the heap's words are memory, not protocol state.
#[allow(clippy::disallowed_types)]
use std::sync::atomic::AtomicU64;

/// Zeroed, 8-byte aligned heap memory that threads may share (e.g. in an `Arc`).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub type HeapRegion = RawRegion<HeapMemory>;

/// The words behind a [`HeapRegion`].
#[derive(Debug)]
pub struct HeapMemory {
    #[allow(clippy::disallowed_types)]
    words: Box<[AtomicU64]>,
    len: usize,
}

// SAFETY: the boxed words are 8-aligned, at least `len` bytes long, do not move when the box does,
// and live as long as `self`; `AtomicU64` has interior mutability, so writing through the pointer
// is allowed.
unsafe impl Backing for HeapMemory {
    const WRITABLE: bool = true;
    #[inline(always)]
    fn base(&self) -> *mut u8 {
        self.words.as_ptr() as *mut u8
    }
    fn len(&self) -> usize {
        self.len
    }
}
// SAFETY: see above.
unsafe impl WritableBacking for HeapMemory {}

impl HeapRegion {
    /// A zeroed region of `len` bytes (`len` is rounded up to 8 internally, not visibly).
    pub fn new(len: usize) -> Self {
        #[allow(clippy::disallowed_types)]
        let words = (0..len.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        Self::over(HeapMemory { words, len })
    }
}
