//! The kept scenarios (`ledger/scenarios/*.txt`), each run through the `shmlog-ledger` binary:
//! one that keeps every promise on today's code, and one regression test per defect the ledger
//! found, ignored until its fix lands (`cargo test --release -p shmlog-ledger -- --ignored` runs
//! them; each must then pass). A regression test counts only the rules its defect breaks
//! (`--only`), so one fix is not held hostage by another.

use std::process::Command;

fn run(scenario: &str, only: &str) {
    let file = format!("{}/scenarios/{scenario}", env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shmlog-ledger"));
    cmd.args(["run", "--scenario", &file]);
    if !only.is_empty() {
        cmd.args(["--only", only]);
    }
    let out = cmd.output().expect("run shmlog-ledger");
    if out.status.code() == Some(shmlog_ledger::cli::SKIPPED) {
        // Said on stderr, which `cargo test` shows for a failure or with --nocapture.
        eprintln!("{scenario}: {}", String::from_utf8_lossy(&out.stdout).trim());
        return;
    }
    assert!(
        out.status.success(),
        "{scenario}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn baseline_every_promise_kept() {
    run("baseline.txt", "");
}

#[test]
fn n1_recorder_splits_at_aborted_claims() {
    run("n1-recorder-splits-at-aborted-claims.txt", "R8.");
}

#[test]
fn n4_receivers_spin_at_a_fault() {
    run("n4-receivers-spin-at-a-fault.txt", "R5.fault-once");
}

#[test]
fn n5_dead_untethered_reader_keeps_publisher_connected() {
    run("n5-dead-untethered-reader-keeps-publisher-connected.txt", "R6.");
}

#[test]
fn n5_found_by_seed_5() {
    run("n5-found-by-seed-5.txt", "R6.");
}

#[test]
fn n6_bad_length_grows_untethered_buffer() {
    run("n6-bad-length-grows-untethered-buffer.txt", "R7.heap");
}

#[test]
fn restart_without_closed() {
    run("restart-without-closed.txt", "R5.closed");
}

#[test]
fn fast_reader_misses_restarted_session() {
    run("fast-reader-misses-restarted-session.txt", "R4.late");
}

#[test]
fn closed_returned_again() {
    run("closed-returned-again.txt", "R5.closed-once");
}

/// The Python roles (issue 34): skipped, saying why, where the Python extension is neither built
/// (`cargo build --release -p shmlog-python`) nor installed.
#[test]
fn python_roles_keep_every_promise() {
    run("python.txt", "");
}

#[test]
fn persistent_readers_killed_lapped_and_purged_under() {
    run("persistent.txt", "");
}

#[test]
fn recordings_detached_attached_deleted_and_truncated_under_their_readers() {
    run("retention.txt", "");
}
