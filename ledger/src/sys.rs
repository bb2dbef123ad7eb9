//! The system calls the harness needs beyond the library: the host's monotonic clock (one
//! timeline for every process's events), dying with the controller, signals, and a heap meter.
//! Every `unsafe` block of the crate is here.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

/// `CLOCK_MONOTONIC` in microseconds: the same clock in every process of the host, so events of
/// different processes can be put on one timeline.
pub fn mono_us() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call; CLOCK_MONOTONIC
    // always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000 + ts.tv_nsec / 1000
}

/// Makes the kernel SIGKILL this process when its parent dies; `false` if the parent is not
/// `parent` any more (it died before the call), in which case the caller should exit.
pub fn die_with_parent(parent: u32) -> bool {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes plain integers and touches no memory of ours.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    // SAFETY: getppid has no arguments and cannot fail.
    let ppid = unsafe { libc::getppid() };
    ppid as u32 == parent
}

/// Sends `signal` to process `pid` (a child of ours, not yet reaped); `false` if it failed.
pub fn signal(pid: u32, signal: i32) -> bool {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
}

pub use libc::{SIGCONT, SIGKILL, SIGSTOP};

/// Heap bytes allocated and not freed, process-wide (when [`Meter`] is the global allocator).
static LIVE: AtomicI64 = AtomicI64::new(0);

/// The system allocator, counting the bytes it holds: lets a reader say at exit how much heap
/// it keeps, so a buffer that only grows shows up in the ledger (review N6).
#[derive(Debug)]
pub struct Meter;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so `System`'s
// guarantees are ours; the counter is only arithmetic on the sizes.
unsafe impl GlobalAlloc for Meter {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` came from this allocator (hence `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` came from this allocator with `layout`; the caller's contract is
        // `System.realloc`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Heap bytes held now (0 unless [`Meter`] is the global allocator).
pub fn heap_bytes() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

/// Resident set size in KiB and open descriptors, from `/proc/self`.
pub fn rss_kb_and_fds() -> (i64, i64) {
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        })
        .unwrap_or(-1);
    let fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as i64).unwrap_or(-1);
    (rss, fds)
}
