//! `shmlog-ledger`: the controller and every role of the whole-system randomized test (see the
//! library's docs and `docs/verification.md`).

#![warn(unreachable_pub)]

/// Counts heap bytes, so a reader can say at exit how much it keeps (`sys::Meter`).
#[global_allocator]
static METER: shmlog_ledger::sys::Meter = shmlog_ledger::sys::Meter;

fn main() {
    std::process::exit(shmlog_ledger::cli::main(std::env::args().collect()));
}
