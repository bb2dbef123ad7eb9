//! Default settings shared by publications and subscriptions.

use std::time::Duration;

/// Default term length: 16 MiB (a 48 MiB log file; max message 2 MiB).
pub const DEFAULT_TERM_LENGTH: usize = 16 << 20;
/// Default reader slots per stream.
pub const DEFAULT_MAX_READERS: usize = 128;
/// Default interval between liveness checks: of readers holding the publisher back, and of the
/// publisher by idle subscriptions.
pub const DEFAULT_LIVENESS_INTERVAL: Duration = Duration::from_millis(100);
