//! Shared futexes: sleeping in the kernel on a 32-bit word of a file mapping until another
//! process changes it and wakes us. Shared, never `FUTEX_PRIVATE_FLAG`: the sleepers and the
//! waker are different processes, and the kernel keys the word by (inode, offset).

use std::io;
use std::time::Duration;

/// Why a wait returned. None of them says the awaited thing happened: callers re-check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woke {
    /// Woken (or the word no longer held the expected value, or a signal): look again.
    Maybe,
    /// The timeout passed.
    TimedOut,
}

fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

/// Sleeps while the word at `word` holds `expected`, at most `timeout`.
///
/// # Safety
/// `word` points to 4 readable, 4-aligned bytes for the duration of the call.
pub(crate) unsafe fn wait(word: *const u32, expected: u32, timeout: Duration) -> Woke {
    let ts = timespec(timeout);
    // SAFETY: a futex wait reads the word (valid: the caller's contract) and the timespec (a
    // local that outlives the call); the remaining arguments are unused by FUTEX_WAIT.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        )
    };
    if rc == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT) {
        Woke::TimedOut
    } else {
        Woke::Maybe
    }
}

/// Wakes up to `count` sleepers on the word at `word`; returns how many were woken.
///
/// # Safety
/// `word` points to 4 readable, 4-aligned bytes (the kernel only uses the address as a key).
pub(crate) unsafe fn wake(word: *const u32, count: i32) -> usize {
    // SAFETY: FUTEX_WAKE keys on the address (valid: the caller's contract); no other memory.
    let rc = unsafe { libc::syscall(libc::SYS_futex, word, libc::FUTEX_WAKE, count, 0usize, 0usize, 0u32) };
    rc.max(0) as usize
}

/// One word of a [`wait_any`]: `futex_waitv`'s `struct futex_waitv`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Waiter {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

/// `FUTEX2_SIZE_U32`: a 32-bit futex (shared: no `FUTEX2_PRIVATE`).
const FUTEX2_SIZE_U32: u32 = 0x02;

impl Waiter {
    /// Sleep while `word` holds `expected`.
    pub(crate) fn new(word: *const u32, expected: u32) -> Self {
        Self { val: expected as u64, uaddr: word as u64, flags: FUTEX2_SIZE_U32, reserved: 0 }
    }
}

/// Sleeps until one of the words no longer holds its value or is woken, or `timeout` passes
/// (`futex_waitv`, Linux 5.16 and later). `Err` with `ENOSYS` on older kernels: the caller falls
/// back to waiting on one word with short timeouts.
///
/// # Safety
/// Every waiter's word points to 4 readable, 4-aligned bytes for the duration of the call.
pub(crate) unsafe fn wait_any(waiters: &[Waiter], timeout: Duration) -> io::Result<Woke> {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let deadline = Duration::new(now.tv_sec as u64, now.tv_nsec as u32).saturating_add(timeout);
    let ts = timespec(deadline);
    // SAFETY: `waiters` is a slice of `struct futex_waitv` (repr(C)) whose words are valid (the
    // caller's contract); the timespec is a local; flags 0; the deadline is on CLOCK_MONOTONIC.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            waiters.as_ptr(),
            waiters.len() as u32,
            0u32,
            &ts as *const libc::timespec,
            libc::CLOCK_MONOTONIC,
        )
    };
    if rc >= 0 {
        return Ok(Woke::Maybe);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ETIMEDOUT) => Ok(Woke::TimedOut),
        Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(Woke::Maybe),
        _ => Err(e),
    }
}
