//! The files of one stream: names, the directory, creating and opening logs, reader slots,
//! liveness and flow control.

#[cfg(not(shmlog_loom))]
pub(crate) mod dir;
#[cfg(not(shmlog_loom))]
pub(crate) mod files;
pub(crate) mod flow;
pub(crate) mod join;
#[cfg(all(test, shmlog_loom))]
mod loom_models;
#[cfg(not(shmlog_loom))]
pub(crate) mod name;
pub(crate) mod slots;

#[cfg(not(shmlog_loom))]
use crate::error::Error;
#[cfg(not(shmlog_loom))]
use std::path::PathBuf;

#[cfg(not(shmlog_loom))]
/// Checks the settings every stream participant shares and prepares the directory; returns it.
///
/// `dir: None` means the per-user default directory, which must also belong to us.
pub(crate) fn prepare(
    stream: &str,
    dir: Option<&PathBuf>,
    file_mode: u32,
    max_readers: usize,
) -> Result<PathBuf, Error> {
    name::validate(stream)?;
    if file_mode & 0o002 != 0 || file_mode & !0o777 != 0 {
        return Err(Error::InvalidConfig("file mode must be permission bits without world write"));
    }
    if max_readers == 0 || max_readers > crate::layout::slots::MAX_SLOTS {
        return Err(Error::InvalidConfig("max readers must be from 1 to 4096"));
    }
    let path = dir.cloned().unwrap_or_else(dir::default_dir);
    dir::ensure(&path, dir.is_none())?;
    Ok(path)
}
