//! The bridge's own operating-system helpers, the one file of the crate that names `libc` or
//! holds `unsafe`: whether a pid still runs, a child that dies with its parent (the media driver
//! must not outlive a bridge that was killed), SIGTERM, the wall clock, and the mapped resume
//! file.

/// Whether a process with this pid exists (it may be another program if the pid was reused;
/// callers pair this with a timestamp).
pub(crate) fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 sends nothing; it only checks that the pid exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Milliseconds since the Unix epoch (0 for a clock set before it).
#[cfg(feature = "aeron")]
pub(crate) fn now_ms() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Makes the child get SIGTERM when the thread that spawned it exits, so a killed parent
/// leaves no orphan behind.
#[cfg(feature = "aeron")]
pub(crate) fn die_with_parent(cmd: &mut std::process::Command) {
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

/// Sends SIGTERM to `pid`; false if there is no such process.
#[cfg(feature = "aeron")]
pub(crate) fn terminate(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: kill(2) on a pid; no memory is passed.
    pid > 0 && unsafe { libc::kill(pid, libc::SIGTERM) } == 0
}

/// The resume file mapped shared: two 8-byte words, the position (offset 0) and the source
/// session (offset 8), stored with atomics. Nobody else maps the file while this bridge lives;
/// a successor reads it with read(2) once this process is gone.
#[cfg(feature = "aeron")]
pub(crate) struct ResumeMap(memmap2::MmapRaw);

#[cfg(feature = "aeron")]
impl ResumeMap {
    /// Maps the first `len` bytes of `file` (the status format's `RESUME_LEN`: at least the two
    /// words, and the file at least that long).
    pub(crate) fn map(file: &std::fs::File, len: usize) -> std::io::Result<ResumeMap> {
        let short = |what| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
        if len < 16 {
            return Err(short("a resume map holds two 8-byte words"));
        }
        if file.metadata()?.len() < len as u64 {
            return Err(short("resume file too short"));
        }
        let map = memmap2::MmapOptions::new().len(len).map_raw(file)?;
        Ok(ResumeMap(map))
    }

    fn word(&self, index: usize) -> &std::sync::atomic::AtomicI64 {
        debug_assert!(index < 2);
        // SAFETY: the map is at least 16 bytes (checked in `map`), page-aligned, and lives as long as `self`,
        // so `index * 8` (0 or 8) is an 8-aligned offset of 8 valid bytes for the borrow's
        // lifetime. This process accesses them only through these atomics; other processes only
        // read the file (after this one is gone), which no Rust reference of ours can observe.
        unsafe { std::sync::atomic::AtomicI64::from_ptr(self.0.as_mut_ptr().cast::<i64>().add(index.min(1))) }
    }

    /// Stores the session word, then the position with release.
    pub(crate) fn store(&self, session_word: i64, position: i64) {
        use std::sync::atomic::Ordering;
        self.word(1).store(session_word, Ordering::Relaxed);
        self.word(0).store(position, Ordering::Release);
    }
}

#[cfg(feature = "aeron")]
impl std::fmt::Debug for ResumeMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResumeMap")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_pid_is_alive_and_a_reaped_child_is_not() {
        assert!(pid_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!pid_alive(pid));
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX));
    }
}
