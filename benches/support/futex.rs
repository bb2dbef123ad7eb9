//! A bare futex word: the floor lanes of the `idle` bench and `examples/lowrate.rs`, which
//! measure what any kernel wake-up costs beside shmlog's doorbell.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Bumps `word` and wakes every waiter on it (a shared futex: waiters may be other processes).
pub fn bump_and_wake_all(word: &AtomicU32) {
    word.fetch_add(1, Ordering::SeqCst);
    // SAFETY: FUTEX_WAKE on a live word; the kernel uses its address as a key and reads nothing
    // else.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32)
    };
}

/// Sleeps while `word` holds `seen`, at most `timeout` (`None`: until woken).
pub fn wait(word: &AtomicU32, seen: u32, timeout: Option<Duration>) {
    let ts = timeout
        .map(|t| libc::timespec { tv_sec: t.as_secs() as libc::time_t, tv_nsec: t.subsec_nanos() as _ });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: FUTEX_WAIT reads the live word and the timespec (null, or a local that outlives
    // the call).
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, seen, ts_ptr, 0usize, 0u32) };
}
