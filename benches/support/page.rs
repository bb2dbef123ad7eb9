//! A shared read-write page of a small file, mapped by each process of an example that needs a
//! word or two beside the stream (the futex floors, a time stamp): the examples' own, to stay
//! off the crate's internals.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64};

const LEN: usize = 4096;

pub struct Page {
    ptr: *mut u8,
}

impl Page {
    /// Maps the first page of the file at `path` (made, and sized, if `create`).
    pub fn open(path: &Path, create: bool) -> Page {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)
            .unwrap();
        file.set_len(LEN as u64).unwrap();
        // SAFETY: mapping LEN bytes of a file of that length, shared, read-write.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Page { ptr: ptr as *mut u8 }
    }

    /// The futex word at offset 0.
    pub fn word(&self) -> &AtomicU32 {
        // SAFETY: offset 0 of a live shared mapping of LEN bytes, 4-aligned; other processes
        // touch it only atomically.
        unsafe { &*(self.ptr as *const AtomicU32) }
    }

    /// The `i`th of the 8-byte slots from offset 64 (`i` < 8).
    pub fn slot(&self, i: usize) -> &AtomicU64 {
        assert!(i < 8);
        // SAFETY: offset 64 + 8i < LEN of the live mapping, 8-aligned; touched only atomically.
        unsafe { &*(self.ptr.add(64 + 8 * i) as *const AtomicU64) }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: our own mapping, not used after this.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, LEN) };
    }
}
