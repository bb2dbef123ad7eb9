//! The wall clock and a cheap random number, for names, session ids and timestamps in files.

/// A random 64-bit value from std's per-process hashing keys, the clock and the pid.
pub(crate) fn random_u64() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u128(now_ns() as u128);
    h.write_u32(std::process::id());
    h.finish()
}

/// Nanoseconds since the Unix epoch.
pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}
