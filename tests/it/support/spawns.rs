//! Spawning processes from the one test binary that every test of the core shares (`tests/it`).
//!
//! A spawn forks this process, and until the child execs it holds a copy of every descriptor
//! open here, with the open-file-description locks that are the streams' liveness tokens
//! (`docs/reliability.md`, `fork()`). A test that lets a stream handle go and at once depends on
//! its locks being gone (the last user removing a file, a reader taking a dropped publisher for
//! dead, the last writer ending the stream) would, in that moment, see the handle still alive.
//! So every spawn holds [`spawning`], and such a test holds [`no_spawns`] while it runs (briefly:
//! the other tests' spawns wait for it).

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static SPAWNS: RwLock<()> = RwLock::new(());

/// Held across every spawn (until the child has exec'd): spawns run side by side, never while a
/// test holds [`no_spawns`].
pub fn spawning() -> RwLockReadGuard<'static, ()> {
    SPAWNS.read().unwrap_or_else(|e| e.into_inner())
}

/// Held by a test that must not lend its descriptors to a child: no process is being spawned
/// by this binary while it lives, and every child spawned before has exec'd.
pub fn no_spawns() -> RwLockWriteGuard<'static, ()> {
    SPAWNS.write().unwrap_or_else(|e| e.into_inner())
}
