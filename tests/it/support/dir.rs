//! The one temporary-directory helper of the tests and benches (benches include this file alone
//! with `#[path]`, not the rest of `tests/it/support`).

#![allow(clippy::disallowed_types)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh directory, removed on drop: under `/dev/shm` (where streams live by default) when it
/// exists, else under the temp dir. Unique per process, call and time.
#[derive(Debug)]
pub struct ShmDir {
    path: PathBuf,
    owned: bool,
}

impl ShmDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let base =
            if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let path = base.join(format!(
            "shmlog-it-{tag}-{}-{}-{nanos:x}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create a temporary directory");
        Self { path, owned: true }
    }

    /// A directory another process made (a child re-executed by a bench): not removed here.
    pub fn borrowed(path: PathBuf) -> Self {
        Self { path, owned: false }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Names in the directory (sorted), for "nothing left behind" checks.
    pub fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.path)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for ShmDir {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
