//! File-system calls: opening without following links, space checks, reservation, identity,
//! and what an OS error means.

use std::ffi::CString;
use std::fs::File;
use std::fs::{OpenOptions, Permissions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
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

/// Creates `path` (never an existing file, never through a symlink), read-write, with exactly
/// `mode` whatever the umask.
pub(crate) fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    f.set_permissions(Permissions::from_mode(mode))?;
    Ok(f)
}

/// Opens an existing `path` without following a symlink. A FIFO planted under the name does not
/// block the open (`O_NONBLOCK`, which changes nothing on regular files); the caller refuses it
/// as not a regular file.
pub(crate) fn open_existing(path: &Path, write: bool) -> io::Result<File> {
    let flags = libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
    OpenOptions::new().read(true).write(write).custom_flags(flags).open(path)
}

/// What an OS error means for the files of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The file system is full.
    NoSpace,
    /// Access was denied.
    Denied,
    /// A symlink was in the way (we never follow one).
    Symlink,
    /// The file would grow past what the process may write (`RLIMIT_FSIZE`): to a recorder, a
    /// full disk all the same.
    TooLarge,
    /// Anything else.
    Other,
}

/// Classifies an OS error.
pub(crate) fn cause(e: &io::Error) -> Cause {
    match e.raw_os_error() {
        Some(libc::ENOSPC) => Cause::NoSpace,
        Some(libc::EACCES) | Some(libc::EPERM) => Cause::Denied,
        Some(libc::ELOOP) => Cause::Symlink,
        Some(libc::EFBIG) => Cause::TooLarge,
        _ => Cause::Other,
    }
}
