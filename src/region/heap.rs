//! Heap backend: the same raw-pointer code as the mmap backend, over process memory. Used by
//! unit tests, miri and in-process models, so the code they check is the code that runs on files.

use super::raw::{delegate_region, RawView};
use std::sync::atomic::AtomicU64;

/// Zeroed, 8-byte aligned heap memory that can be shared between threads (e.g. in an `Arc`).
#[derive(Debug)]
pub(crate) struct HeapRegion {
    words: Box<[AtomicU64]>,
    len: usize,
}

impl HeapRegion {
    /// A zeroed region of `len` bytes (`len` is rounded up to 8 internally, not visibly).
    pub(crate) fn new(len: usize) -> Self {
        let words = (0..len.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        Self { words, len }
    }

    #[inline(always)]
    fn view(&self) -> RawView {
        // SAFETY: the boxed words are 8-aligned, at least `len` bytes long, live as long as
        // `self`, and `AtomicU64` has interior mutability, so writing through the pointer is
        // allowed; views never outlive the borrow of `self` they are made from.
        unsafe { RawView::new(self.words.as_ptr() as *mut u8, self.len) }
    }
}

delegate_region!(HeapRegion, mut);

impl HeapRegion {
    /// # Safety
    /// See [`super::DirectRegion::slice_mut`].
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn slice_mut(&self, off: usize, len: usize) -> &mut [u8] {
        // SAFETY: the view's memory lives as long as `self`, which bounds the returned lifetime;
        // the rest of the contract is forwarded to the caller.
        unsafe { self.view().slice_mut(off, len) }
    }
}
