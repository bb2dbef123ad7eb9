//! Stream names and the files they map to.

use crate::error::Error;
use std::path::{Path, PathBuf};

/// Longest stream name, in bytes: leaves room for suffixes within NAME_MAX (255).
pub const MAX_NAME_LEN: usize = 200;

/// Checks that `name` can name a stream (exported as `shmlog::validate_name`): 1 to
/// [`MAX_NAME_LEN`] bytes, usable as one file-name component on every Unix (no `/`, NUL or
/// control character), not starting with `.` (reserved for temporary files). Every builder checks
/// it; [`Error::InvalidName`] says which rule a name breaks. For programs that derive file names
/// of their own from a stream's name (the bridge's status files) or check names given to them.
pub fn validate(name: &str) -> Result<(), Error> {
    let bad = |reason| Err(Error::InvalidName { name: name.to_owned(), reason });
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("longer than 200 bytes");
    }
    if name.contains('/') {
        return bad("contains '/'");
    }
    if name.contains('\0') {
        return bad("contains NUL");
    }
    if name.starts_with('.') {
        return bad("starts with '.' (reserved for temporary files; also rules out '.' and '..')");
    }
    if name.chars().any(char::is_control) {
        return bad("contains a control character");
    }
    Ok(())
}

/// The log of the stream's current session.
pub(crate) fn log_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.log"))
}

/// The stream's reader-slot file, shared by all its sessions.
pub(crate) fn readers_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.readers"))
}

/// A file being initialised, invisible under the stream's name until it is complete.
pub(crate) fn temp_path(dir: &Path, name: &str, suffix: &str, nonce: u64) -> PathBuf {
    dir.join(format!(".{name}.{nonce:016x}.{suffix}.tmp"))
}

/// What a directory entry's name says it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// `<name>.log`: the log of stream `name`.
    Log(String),
    /// `<name>.readers`: the reader-slot file of stream `name`.
    Readers(String),
    /// `<name>.wake`: the wake FIFO of stream `name` (async sleepers in a reactor).
    Wake(String),
    /// `.<name>.<16 hex digits>.<log|readers>.tmp` ([`temp_path`]): a file being initialised, or
    /// a crash's leftover.
    Temp,
    /// Anything else.
    Other,
}

/// Reads a file name the way [`log_path`], [`readers_path`] and [`temp_path`] write them.
pub(crate) fn classify(file_name: &str) -> Entry {
    if let Some(rest) = file_name.strip_prefix('.') {
        let Some(body) = rest.strip_suffix(".log.tmp").or_else(|| rest.strip_suffix(".readers.tmp")) else {
            return Entry::Other;
        };
        return match body.rsplit_once('.') {
            Some((name, nonce))
                if !name.is_empty() && nonce.len() == 16 && nonce.bytes().all(|b| b.is_ascii_hexdigit()) =>
            {
                Entry::Temp
            }
            _ => Entry::Other,
        };
    }
    if let Some(name) = file_name.strip_suffix(".log").filter(|n| !n.is_empty()) {
        return Entry::Log(name.to_owned());
    }
    if let Some(name) = file_name.strip_suffix(".readers").filter(|n| !n.is_empty()) {
        return Entry::Readers(name.to_owned());
    }
    if let Some(name) = file_name.strip_suffix(".wake").filter(|n| !n.is_empty()) {
        return Entry::Wake(name.to_owned());
    }
    Entry::Other
}

/// A 32-bit id for the stream (FNV-1a of its name), written in every frame header.
pub(crate) fn stream_id(name: &str) -> i32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_names_that_are_not_one_plain_file_name() {
        for bad in ["", ".", "..", "../x", "a/b", "a\0b", ".hidden", "tab\there", &"x".repeat(201)] {
            assert!(matches!(validate(bad), Err(Error::InvalidName { .. })), "{bad:?}");
        }
        for good in ["orders", "md.eurusd", "a-b_c", "ünïcode", &"x".repeat(200)] {
            assert!(validate(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn names_are_classified_as_they_are_written() {
        let d = Path::new("/d");
        let name = |p: PathBuf| p.file_name().unwrap().to_str().unwrap().to_owned();
        assert_eq!(classify(&name(log_path(d, "a"))), Entry::Log("a".into()));
        assert_eq!(classify(&name(readers_path(d, "a.b"))), Entry::Readers("a.b".into()));
        assert_eq!(classify(&name(temp_path(d, "a", "log", 0x0123_4567_89ab_cdef))), Entry::Temp);
        assert_eq!(classify(".a.b.0123456789ABCDEF.readers.tmp"), Entry::Temp);
        for other in [".log", ".readers", "a.txt", ".a.123.log.tmp", ".0123456789abcdef.log.tmp", "a.log.tmp"]
        {
            assert_eq!(classify(other), Entry::Other, "{other}");
        }
    }

    #[test]
    fn paths_and_ids_are_stable() {
        let d = Path::new("/d");
        assert_eq!(log_path(d, "s"), Path::new("/d/s.log"));
        assert_eq!(readers_path(d, "s"), Path::new("/d/s.readers"));
        assert_eq!(stream_id("orders"), stream_id("orders"));
        assert_ne!(stream_id("orders"), stream_id("orderz"));
    }
}
