//! The directory that holds a user's streams.

use crate::error::Error;
use crate::sys::fs::euid;
use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// `$SHMLOG_DIR` if set, else `/dev/shm/shmlog-<uid>`, else `<temp dir>/shmlog-<uid>`.
///
/// Each user gets a directory of their own (mode 0700), so other users can neither read the
/// streams nor plant files in it.
pub fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SHMLOG_DIR") {
        return PathBuf::from(dir);
    }
    let leaf = format!("shmlog-{}", euid());
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.join(leaf)
    } else {
        std::env::temp_dir().join(leaf)
    }
}

/// Makes sure `dir` exists as a stream directory, as every builder does before it creates a
/// stream's files there: creates it (mode 0700, and its parents) if it is missing, and refuses a
/// symlink or a file. The per-user [`default_dir`] must also belong to this user and be
/// writable by nobody else ([`Error::PermissionDenied`] otherwise); a directory named by the
/// caller is the caller's choice (e.g. a group's shared directory).
///
/// For programs that keep files of their own beside a user's streams (the bridge's status
/// files), or that want a bad directory reported at start rather than at the first open.
pub fn ensure_dir(dir: impl AsRef<Path>) -> Result<(), Error> {
    let dir = dir.as_ref();
    ensure(dir, dir == default_dir())
}

/// Makes sure `dir` exists as a real directory (never a symlink), creating it 0700.
///
/// The per-user default directory must also belong to us and let nobody else write it: someone
/// else's directory with our name in a world-writable `/dev/shm` is a trap, not a home. A
/// directory named by the caller is the caller's choice (e.g. a group's shared directory).
pub(crate) fn ensure(dir: &Path, must_own: bool) -> Result<(), Error> {
    match DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::io("create directory", dir, e)),
    }
    let meta = fs::symlink_metadata(dir).map_err(|e| Error::io("inspect directory", dir, e))?;
    if meta.file_type().is_symlink() {
        return Err(Error::PermissionDenied { path: dir.into(), reason: "directory is a symlink" });
    }
    if !meta.is_dir() {
        return Err(Error::PermissionDenied { path: dir.into(), reason: "not a directory" });
    }
    if must_own && meta.uid() != euid() {
        return Err(Error::PermissionDenied {
            path: dir.into(),
            reason: "the default directory belongs to another user",
        });
    }
    // Anyone who may write the directory may unlink and replace a stream's files.
    if must_own && meta.mode() & 0o022 != 0 {
        return Err(Error::PermissionDenied {
            path: dir.into(),
            reason: "the default directory is writable by other users (chmod 700 it)",
        });
    }
    Ok(())
}
