//! The system calls the tool needs beyond the library and std: the monotonic clock shared by
//! all processes of a host, a Ctrl-C flag, and a bounded wait for a listening socket.

use std::sync::atomic::{AtomicBool, Ordering};

/// `CLOCK_MONOTONIC` in nanoseconds: the same clock in every process on the host, so a timestamp
/// taken by a publisher can be compared with one taken by a subscriber in another process.
#[inline]
pub(crate) fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call; CLOCK_MONOTONIC is
    // always available on Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::Relaxed);
}

/// Makes the first SIGINT (Ctrl-C) or SIGTERM set the stop flag instead of killing the process,
/// so a run can end cleanly and print what it has. A second signal kills as usual.
pub(crate) fn install_stop_handler() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: an all-zero `sigaction` is a valid value (empty mask, no flags) that we then fill
        // in; the handler only performs an atomic store, which is async-signal-safe; the struct
        // outlives the call and the old-action pointer may be null.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Lets a closed output pipe (`shmlog stat | head`) end the process quietly, as it does for other
/// command-line tools, instead of making every later `println!` panic.
pub(crate) fn default_sigpipe() {
    // SAFETY: restoring the default disposition of SIGPIPE installs no handler and touches no
    // memory of ours.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// `true` once Ctrl-C (or SIGTERM) was received.
#[inline]
pub(crate) fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Waits until `fd` is readable (a listening socket: a connection is waiting), `timeout`
/// passes, or a signal arrives (Ctrl-C: the caller looks at [`stop_requested`]). `true` if
/// readable (or in error: the caller's next call on it says which).
pub(crate) fn wait_readable(fd: std::os::fd::BorrowedFd<'_>, timeout: std::time::Duration) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `p` is one valid, writable pollfd for the duration of the call (count 1); the
    // borrowed descriptor stays open while it is borrowed. poll(2) only writes `revents`.
    let rc = unsafe { libc::poll(&mut p, 1, ms) };
    rc > 0
}

/// The flag the stop handler sets, for loops that take one.
#[cfg(feature = "bridge")]
pub(crate) fn stop_flag() -> &'static AtomicBool {
    &STOP
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_readable_sees_a_waiting_connection_and_times_out_without_one() {
        use std::os::fd::AsFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let short = std::time::Duration::from_millis(10);
        assert!(!wait_readable(listener.as_fd(), short));
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert!(wait_readable(listener.as_fd(), std::time::Duration::from_secs(10)));
    }

    #[test]
    fn monotonic_clock_moves_forward() {
        let a = mono_ns();
        let b = mono_ns();
        assert!(a > 0 && b >= a);
    }
}
