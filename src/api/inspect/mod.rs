//! Looking into a stream directory from the outside: what streams it holds and who uses them
//! ([`streams`]), and removing what dead processes left behind ([`clean`]).
//!
//! These are the library half of the `shmlog stat` and `shmlog clean` commands (the tool is the
//! crate `shmlog-tools`); nothing here prints. A bridge's status and resume files
//! (`<stream>.<out|in>.<pid>.bridge|resume`, crate `shmlog-bridge`) are not the core's: they are
//! listed as [`CleanReason::NotOurs`] here, and `shmlog_bridge::status` reads and cleans them.
//!
//! [`streams`] is strictly read-only: it opens every file read-only, maps it read-only, and learns
//! who is alive only by asking the kernel which locks are held (`F_OFD_GETLK`). It never takes a
//! lock, so it can neither disturb nor be mistaken for a publisher or a reader. Everything it
//! reports is a snapshot: counters and positions move while it reads them.
//!
//! [`clean`] removes a stream's files only when their owners are provably gone: the log when its
//! publisher's lock is free and no reader maps it, the reader-slot file when no process has it
//! open and the stream has no live publisher. It takes the same locks the owners would hold while
//! it checks and unlinks, so it is safe to run while other processes use the directory. Files it
//! cannot validate (foreign, corrupt, another layout version) are reported and left alone.
//!
//! ```no_run
//! let dir = shmlog::default_dir();
//! for stream in shmlog::inspect::streams(&dir)? {
//!     if let Some(log) = &stream.log {
//!         let lagging = stream.readers.iter().filter(|r| r.holds_back).count();
//!         println!("{}: position {} ({} reader(s) holding it back)", stream.name, log.position, lagging);
//!     }
//! }
//! let report = shmlog::inspect::clean(&dir, true)?; // dry run
//! for entry in &report.removed {
//!     println!("would remove {}: {}", entry.path.display(), entry.reason);
//! }
//! # Ok::<(), shmlog::Error>(())
//! ```

mod clean;
mod streams;

pub use clean::{clean, CleanEntry, CleanReason, CleanReport};
pub use streams::{streams, LogInfo, ReaderInfo, ReaderState, StreamInfo, WriterInfo};

use crate::error::Error;
use crate::stream::name::{classify, Entry};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The stream directory's entries, sorted by path, each classified by its name.
struct Listing {
    entries: Vec<(PathBuf, Entry)>,
}

impl Listing {
    fn stream_names(&self) -> BTreeSet<String> {
        self.entries
            .iter()
            .filter_map(|(_, e)| match e {
                Entry::Log(n) | Entry::Readers(n) => Some(n.clone()),
                _ => None,
            })
            .collect()
    }
}

fn list(dir: &Path) -> Result<Listing, Error> {
    let read = fs::read_dir(dir).map_err(|e| Error::io("read directory", dir, e))?;
    let mut entries = Vec::new();
    for entry in read {
        let entry = entry.map_err(|e| Error::io("read directory", dir, e))?;
        let name = entry.file_name();
        let kind = name.to_str().map_or(Entry::Other, classify);
        entries.push((entry.path(), kind));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Listing { entries })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;
    use crate::Publication;

    pub(super) fn publication(dir: &Path, name: &str) -> Publication {
        Publication::builder(name).dir(dir).term_length(64 * 1024).create().unwrap()
    }

    #[test]
    fn foreign_and_corrupt_files_are_reported_not_fatal() {
        let dir = TempDir::new("inspect");
        fs::write(dir.path().join("junk.log"), b"hello").unwrap();
        fs::write(dir.path().join("junk.readers"), vec![0u8; 4096]).unwrap();
        fs::write(dir.path().join("big.log"), vec![0u8; 3 * 65536 + 4096]).unwrap();
        let list = streams(dir.path()).unwrap();
        assert_eq!(list.len(), 2);
        assert!(list.iter().all(|s| s.log.is_none() && !s.problems.is_empty()));
        assert!(matches!(list[0].problems[0], Error::Corrupt { .. }), "{:?}", list[0].problems);
        let report = clean(dir.path(), false).unwrap();
        assert!(report.removed.is_empty(), "{report:?}");
        assert_eq!(report.kept.len(), 3);
        assert!(dir.path().join("junk.log").exists() && dir.path().join("junk.readers").exists());
    }
}
