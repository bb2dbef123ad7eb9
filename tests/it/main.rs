//! The core's integration tests, in one test binary: one module per subject, `support` compiled
//! and the library linked once for all of them (`cargo test --release --test it journal::` runs
//! one module's tests).

mod support;

mod api;
mod bad_files;
mod blocking;
mod concurrent;
mod corners;
mod crash;
mod executors;
mod journal;
mod losses;
mod multiprocess;
mod publish;
mod resources;
mod sessions;
mod smoke;
mod soak;
mod threads;
mod typed;
mod untethered;
mod wakeups;

/// Entry point of the peer processes (`support::peer::ENTRY_TEST`, at the binary's root so that
/// `--exact` finds it): plays the role the environment names and exits; does nothing in a normal
/// test run.
#[test]
fn peer_process() {
    support::roles::run_if_peer();
}
