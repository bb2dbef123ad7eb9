//! Carry a [`shmlog`] stream to other hosts over Aeron's UDP transport.
//!
//! A [`BridgeOut`] is a reader of a local stream that offers every message to an Aeron UDP
//! publication (a unicast endpoint or a multicast group); a [`BridgeIn`] subscribes to that
//! channel on the far host and publishes every message into a local stream there, so readers on
//! both hosts use the plain shmlog API. The network part is Aeron's own: a real media driver
//! (the Java one, started by the bridge or already running) does Setup, Status Messages, NAKs and
//! retransmission; the bridge never invents a protocol.
//!
//! - **Boundaries and order** are kept: one shmlog message is one Aeron message, fragmented and
//!   reassembled by each side as needed.
//! - **Back pressure** passes through under [`BackPressure::Hold`] (the default): a slow or absent
//!   far side stops the out bridge, whose reader position then holds the local publisher within
//!   its window. Under [`BackPressure::Drop`] the bridge drops instead and records what it lost,
//!   by source position. Never silently.
//! - **Positions**: every Aeron frame carries, in its reserved value, the source-stream position
//!   where its message starts. The in bridge uses it to report gaps after a reconnection (the
//!   far bridge killed with messages in flight); a restarted out bridge resumes reading where
//!   its predecessor's resume file says it stopped.
//! - **Losses before the bridge**: what the out bridge's reader of the local stream reports it
//!   could not read ([`shmlog::Loss`]) goes into the out bridge's status and marks the next
//!   message on the wire, so the in bridge records it too: a loss is never a silent jump.
//! - **State** is published for `shmlog stat` in a status file beside the stream's log
//!   ([`status`]: the format, and how a tool reads and cleans those files).
//! - **Failures**: the driver lost is reconnected (and an embedded one restarted); the far side
//!   gone is Aeron's "not connected", handled as back pressure; the local publisher restarting
//!   is followed to its new session.
//!
//! The crate stands on shmlog's public API only. Feature `aeron` (on by default) is the bridge
//! itself and its Aeron client (`aeron-rs`); without it the crate is only [`status`], for tools
//! that show bridges without running one.
//!
//! See `README.md` and `docs/bridge.md` for deployment across two hosts.

// A loom build of the core (`--cfg shmlog_loom`, .ci/loom.sh) compiles only its memory protocol,
// without the public API this crate stands on; the bridge has no protocol memory of its own for
// loom to check, so under that cfg the crate is empty (the root's `cargo test --lib` builds every
// default member).
#![cfg(not(shmlog_loom))]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
// `pub` means reachable by users; what only the fuzz door (`__fuzz`) re-exports is `pub` for it
// and marked `#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]`.
// Only flags between threads of this process (stop, driver lost) and the resume file's words:
// no protocol memory, nothing for a loom build to swap.
#![allow(clippy::disallowed_types)]
// Without `aeron` the crate docs still name the bridge's types, which are not built then.
#![cfg_attr(not(feature = "aeron"), allow(rustdoc::broken_intra_doc_links))]
// The fuzz build re-exports internals (`__fuzz`), which are documented for this crate, not users.
#![cfg_attr(shmlog_fuzz, allow(missing_docs))]

pub mod status;
mod sys;

#[cfg(feature = "aeron")]
mod builder;
#[cfg(feature = "aeron")]
mod client;
#[cfg(feature = "aeron")]
mod driver;
#[cfg(feature = "aeron")]
mod inbound;
#[cfg(feature = "aeron")]
mod outbound;
#[cfg(feature = "aeron")]
mod wire;

/// Entry points of the cargo-fuzz target `bridge_in` (`fuzz/`): the in bridge's duty cycle,
/// re-exported only in fuzz builds (`--cfg shmlog_fuzz`, which only `.ci/fuzz.sh` sets).
#[cfg(all(shmlog_fuzz, feature = "aeron"))]
#[doc(hidden)]
pub mod __fuzz;

/// Temporary directories for the unit tests.
#[cfg(test)]
mod testing;

#[cfg(feature = "aeron")]
pub use builder::{default_aeron_dir, BackPressure, BridgeBuilder, BridgeError, Driver};
#[cfg(feature = "aeron")]
pub use driver::{DriverConfig, MediaDriver, AERON_VERSION};
#[cfg(feature = "aeron")]
pub use inbound::BridgeIn;
#[cfg(feature = "aeron")]
pub use outbound::BridgeOut;
pub use status::{BridgeDirection, BridgeInfo, Loss, LossCause};
