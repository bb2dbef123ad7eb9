//! The whole-system randomized test of shmlog (issue 31): real processes drive every feature
//! through the public API, each writes what it did and saw to an event file (the *ledger*), and
//! an oracle checks the ledger against the project's promises.
//!
//! - [`plan`]: a run's streams and timeline, drawn from a seed or read from a scenario file.
//! - [`controller`]: starts the roles as child processes, acts on them (kill, stop, close,
//!   `clean`, corrupt), then replays the recordings and runs the oracle.
//! - [`persistent_plan`]: persistent readers, purges and the other retention operations
//!   (detach, attach, delete detached, truncate) added to a drawn run.
//! - [`roles`]: writers, readers of every receive shape, recorders; [`python`]: the same roles
//!   through the Python package (`ledger/python/role.py`), when it is installed.
//! - [`oracle`]: the rules (`docs/reliability.md` lists them as promises).

#![warn(unreachable_pub)]

pub mod body;
pub mod cli;
pub mod controller;
pub mod event;
pub mod oracle;
pub mod persistent_plan;
pub mod plan;
pub mod prng;
pub mod python;
pub mod roles;
pub mod shrink;
pub mod sys;
