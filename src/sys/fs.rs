//! File-system calls: space checks, reservation, identity.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Bytes an unprivileged process may still allocate on the file system holding `dir`.
pub(crate) fn available_space(dir: &Path) -> io::Result<u64> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: all-zero bytes are a valid `statvfs`.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a valid out-pointer for the call.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Reserves `len` bytes of real storage for `file`, so a full tmpfs fails here with ENOSPC and
/// never later with SIGBUS. Falls back to `set_len` where the file system cannot reserve.
pub(crate) fn reserve(file: &File, len: u64) -> io::Result<()> {
    // SAFETY: a valid descriptor; posix_fallocate has no memory arguments.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
    match rc {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => file.set_len(len),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// The effective user id of this process.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// `true` if `path` (not following symlinks) is the very file `file` is open on.
pub(crate) fn is_same_file(file: &File, path: &Path) -> io::Result<bool> {
    let a = file.metadata()?;
    match std::fs::symlink_metadata(path) {
        Ok(b) => Ok(a.dev() == b.dev() && a.ino() == b.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}
