//! Position arithmetic: a position is the byte count from the start of the stream; the term it
//! falls in and the offset inside that term follow from the term length (a power of two).

use crate::layout::log_meta::PARTITION_COUNT;

/// The constants that turn positions into (term, offset, partition) and back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Terms {
    pub term_length: usize,
    pub bits: u32,
    pub initial_term_id: i32,
}

impl Terms {
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn new(term_length: usize, initial_term_id: i32) -> Self {
        debug_assert!(term_length.is_power_of_two());
        Self { term_length, bits: term_length.trailing_zeros(), initial_term_id }
    }

    /// Terms since the initial one; wrapping `i32` arithmetic as in Aeron.
    #[inline(always)]
    pub(crate) fn term_count(&self, term_id: i32) -> i64 {
        term_id.wrapping_sub(self.initial_term_id) as i64
    }

    /// Position of `offset` inside term `term_id`.
    #[cfg(any(test, shmlog_fuzz, shmlog_loom))]
    #[inline(always)]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn position(&self, term_id: i32, offset: usize) -> i64 {
        (self.term_count(term_id) << self.bits) + offset as i64
    }

    /// Position at which the term holding `position` begins.
    #[inline(always)]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn term_begin(&self, position: i64) -> i64 {
        position & !(self.term_length as i64 - 1)
    }

    /// Offset of `position` inside its term.
    #[inline(always)]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn term_offset(&self, position: i64) -> usize {
        (position & (self.term_length as i64 - 1)) as usize
    }

    /// Term id of the term holding `position`.
    #[inline(always)]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn term_id(&self, position: i64) -> i32 {
        self.initial_term_id.wrapping_add((position >> self.bits) as i32)
    }

    /// Partition index of the term holding `position`.
    #[inline(always)]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn partition(&self, position: i64) -> usize {
        ((position >> self.bits) as u64 % PARTITION_COUNT as u64) as usize
    }

    /// Positions stop at `T * 2^31`: the term count is a non-negative `i32`.
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn max_position(&self) -> i64 {
        (self.term_length as i64) << 31
    }
}

/// Packs a tail counter: `term_id << 32 | offset`.
#[inline(always)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn pack_tail(term_id: i32, offset: usize) -> i64 {
    ((term_id as i64) << 32) | (offset as u32 as i64)
}

/// Term id of a raw tail counter.
#[inline(always)]
pub(crate) fn tail_term_id(raw: i64) -> i32 {
    (raw >> 32) as i32
}

/// Offset of a raw tail counter, clamped to the term length.
#[inline(always)]
pub(crate) fn tail_offset(raw: i64, term_length: usize) -> usize {
    ((raw & 0xFFFF_FFFF) as usize).min(term_length)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_example_from_the_digest() {
        let t = Terms::new(64 * 1024, 7);
        assert_eq!(t.bits, 16);
        let p = t.position(9, 4096);
        assert_eq!(p, 135_168);
        assert_eq!(t.partition(p), 2);
        assert_eq!(t.term_id(p), 9);
        assert_eq!(t.term_offset(p), 4096);
        assert_eq!(t.term_begin(p), 131_072);
    }

    #[test]
    fn term_ids_wrap() {
        let t = Terms::new(64 * 1024, i32::MAX);
        let next = i32::MAX.wrapping_add(1);
        assert_eq!(t.term_count(next), 1);
        assert_eq!(t.position(next, 32), 65_536 + 32);
        assert_eq!(t.term_id(65_536), next);
    }

    #[test]
    fn tails_pack_and_clamp() {
        let raw = pack_tail(-5, 70_000);
        assert_eq!(tail_term_id(raw), -5);
        assert_eq!(tail_offset(raw, 65_536), 65_536);
        assert_eq!(tail_offset(pack_tail(3, 96), 65_536), 96);
    }

    #[test]
    fn max_position_is_term_length_times_two_to_the_31() {
        assert_eq!(Terms::new(1 << 16, 0).max_position(), 1 << 47);
    }
}
