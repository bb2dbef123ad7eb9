//! Spawning processes from the one test binary that every test of the core shares (`tests/it`).
//!
//! A spawn forks this process, and until the child execs it holds a copy of every descriptor
//! open here, with the open-file-description locks that are the streams' liveness tokens
//! (`docs/reliability.md`, `fork()`). A test that lets a stream handle go and at once depends on
//! its locks being gone (the last user removing a file, a reader taking a dropped publisher for
//! dead, the last writer ending the stream) would, in that moment, see the handle still alive.
//! So every spawn holds [`spawning`], and such a test holds [`no_spawns`] while it runs (briefly:
//! the other tests' spawns wait for it).
//!
//! [`ran_in_own_process`] is for tests that measure what the whole process shares (the async
//! waiter thread's wake-ups, which other tests' async receivers and senders add to).

use std::process::{Command, Stdio};
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

/// Environment variable naming the test a child process runs alone.
const ALONE_VAR: &str = "SHMLOG_TEST_ALONE";
/// What the child prints as the test starts: a filter that matched no test would pass too.
const ALONE_STARTED: &str = "@@ alone-started";

/// Runs the calling test in a process of its own: this binary again, running only that test.
/// In the parent, returns `true` once the child passed (panicking with its output if it did
/// not): the test returns. In the child, returns `false`: the test goes on with its body.
/// Call it first thing (after `exclusive()`, which the parent then holds for the child).
pub fn ran_in_own_process() -> bool {
    let thread = std::thread::current();
    // The harness names each test's thread after the test's path.
    let test = thread.name().filter(|n| n.contains("::")).expect("called from a test's own thread");
    match std::env::var(ALONE_VAR) {
        Ok(alone) if alone == test => {
            println!("{ALONE_STARTED}");
            return false;
        }
        Ok(other) => panic!("{test} called from the child process of {other}"),
        Err(_) => {}
    }
    let exe = std::env::current_exe().expect("test executable path");
    let child = {
        let _spawn = spawning();
        Command::new(exe)
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(ALONE_VAR, test)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run the test in a process of its own")
    };
    // The child's own deadlines bound the wait.
    let out = child.wait_with_output().expect("the test's own process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && stdout.contains(ALONE_STARTED),
        "{test} in its own process: {}",
        out.status
    );
    true
}
