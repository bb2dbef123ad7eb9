//! Byte layout only: where every field lives, and the pure arithmetic on sizes. No I/O, no atomics.
//!
//! All multi-byte fields are little-endian. The log follows Aeron's log-buffer format (three term
//! partitions, then a 4096-byte metadata section; 32-byte frame headers at 32-byte alignment); see
//! `docs/format.md` for the full picture.

pub(crate) mod frame;
pub(crate) mod log_meta;
pub(crate) mod slots;

/// Rounds `value` up to a multiple of `alignment` (a power of two).
#[inline(always)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const fn align(value: usize, alignment: usize) -> usize {
    (value + alignment - 1) & !(alignment - 1)
}
