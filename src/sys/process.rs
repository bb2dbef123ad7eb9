//! Processes: whether a pid still runs, and a child that dies with its parent (the bridge's
//! media driver must not outlive a bridge that was killed).

use std::process::Command;

/// Whether a process with this pid exists (it may be another program if the pid was reused;
/// callers pair this with a timestamp).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 sends nothing; it only checks that the pid exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg_attr(not(feature = "bridge"), allow(dead_code))]
/// Makes the child get SIGTERM when the thread that spawned it exits, so a killed parent
/// leaves no orphan behind.
pub fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl(2) is async-signal-safe and touches no memory of the parent; the closure
    // captures nothing.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
}

#[cfg_attr(not(feature = "bridge"), allow(dead_code))]
/// Sends `signal` to `pid`; false if there is no such process.
pub fn signal(pid: u32, signal: i32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: kill(2) on a pid; no memory is passed.
    pid > 0 && unsafe { libc::kill(pid, signal) } == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_pid_is_alive_and_a_reaped_child_is_not() {
        assert!(pid_alive(std::process::id()));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!pid_alive(pid));
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX));
    }
}
