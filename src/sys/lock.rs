//! Kernel-held liveness tokens: open-file-description (OFD) byte-range locks.
//!
//! The kernel drops a lock when the last descriptor of its open file description closes, which
//! happens when the owning process dies however it dies (SIGKILL included). Unlike classic POSIX
//! record locks, OFD locks belong to the open file, not the process, so two subscriptions in one
//! process have independent locks and closing an unrelated descriptor drops nothing.
//!
//! Used as: the publisher write-locks byte 0 of its log; every reader read-locks byte 1 of the log
//! it maps; every process with the reader-slot file open read-locks its byte 0; a reader
//! write-locks the byte range of its slot; `clean` write-locks a whole file before removing it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Lock kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Shared,
    Exclusive,
}

fn flock(kind: libc::c_short, start: u64, len: u64) -> libc::flock {
    // SAFETY: `flock` is a plain C struct for which all-zero bytes are a valid value; `l_pid`
    // must be zero for OFD locks.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start as libc::off_t;
    fl.l_len = len as libc::off_t;
    fl
}

fn raw_kind(kind: Kind) -> libc::c_short {
    match kind {
        Kind::Shared => libc::F_RDLCK as libc::c_short,
        Kind::Exclusive => libc::F_WRLCK as libc::c_short,
    }
}

/// Takes a lock on `[start, start + len)` without waiting. `Ok(false)` if someone else holds a
/// conflicting lock.
pub(crate) fn try_lock(file: &File, kind: Kind, start: u64, len: u64) -> io::Result<bool> {
    let mut fl = flock(raw_kind(kind), start, len);
    // SAFETY: a valid descriptor and a properly initialised `flock` that lives across the call.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(err),
    }
}

/// Releases our lock on `[start, start + len)` (closing the file releases it too).
pub(crate) fn unlock(file: &File, start: u64, len: u64) -> io::Result<()> {
    let mut fl = flock(libc::F_UNLCK as libc::c_short, start, len);
    // SAFETY: as in `try_lock`.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `true` if another open file description holds a lock on the range that conflicts with `kind`.
/// Never takes a lock, so it works on read-only descriptors and never disturbs the owner.
pub(crate) fn is_held(file: &File, kind: Kind, start: u64, len: u64) -> io::Result<bool> {
    let mut fl = flock(raw_kind(kind), start, len);
    // SAFETY: as in `try_lock`; F_OFD_GETLK only writes into `fl`.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    if rc == 0 {
        Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;
    use std::fs::OpenOptions;

    fn temp_file() -> (TempDir, File, std::path::PathBuf) {
        let dir = TempDir::new("lock");
        let path = dir.path().join("f");
        let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        f.set_len(128).unwrap();
        (dir, f, path)
    }

    #[test]
    fn locks_are_per_open_file_and_dropped_on_close() {
        let (_dir, a, path) = temp_file();
        let b = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        assert!(try_lock(&a, Kind::Exclusive, 0, 1).unwrap());
        assert!(!try_lock(&b, Kind::Exclusive, 0, 1).unwrap(), "same process, other description");
        assert!(is_held(&b, Kind::Shared, 0, 1).unwrap());
        assert!(!is_held(&b, Kind::Exclusive, 1, 1).unwrap(), "other bytes are free");
        drop(a);
        assert!(!is_held(&b, Kind::Exclusive, 0, 1).unwrap());
        assert!(try_lock(&b, Kind::Exclusive, 0, 1).unwrap());
    }

    #[test]
    fn shared_locks_coexist_and_block_exclusive() {
        let (_dir, a, path) = temp_file();
        let ro = OpenOptions::new().read(true).open(&path).unwrap();
        assert!(try_lock(&ro, Kind::Shared, 1, 1).unwrap());
        assert!(try_lock(&a, Kind::Shared, 1, 1).unwrap());
        let c = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        assert!(!try_lock(&c, Kind::Exclusive, 1, 1).unwrap());
        unlock(&a, 1, 1).unwrap();
        assert!(is_held(&c, Kind::Exclusive, 1, 1).unwrap(), "the read-only reader still holds");
    }
}
