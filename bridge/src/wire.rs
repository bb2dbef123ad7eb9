//! What the bridge adds to Aeron's frames: only the 8-byte reserved value of each frame, which
//! carries the source-stream position where its message starts. Source positions are multiples
//! of 32 (frames are 32-byte aligned), so the low five bits are free for flags.

use aeron_rs::concurrent::atomic_buffer::AtomicBuffer;
use aeron_rs::utils::types::Index;
use std::cell::Cell;

/// The out bridge does not continue its previous message here: the first message after a fresh
/// join (no predecessor to resume from) or of a new session of the source (its publisher
/// restarted, positions start again). By itself no gap is implied: a loss the out bridge knows
/// of is marked with [`LOST`] too.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const FRESH_START: i64 = 1;
/// The out bridge dropped messages right before this one (policy `Drop`): the in bridge
/// measures the gap from where it expected this message.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const AFTER_DROP: i64 = 2;
/// The out bridge knows that messages of the source were lost before this one, before it could
/// send them: its reader of the local stream reported a loss (`shmlog::Loss`), or its
/// predecessor's resume position was no longer in the log. Its status holds the sessions and
/// exact positions; the in bridge records an `Upstream` loss from where it expected this message
/// (with [`FRESH_START`]: from this session's start) to this message.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const LOST: i64 = 4;

/// Offered again by an out bridge that lost its media driver: the driver's sender may have sent
/// it before its position counter said so, so the far side may have it already. Said for
/// whoever reads the frames: the in bridge knows what it has by the frame's position in the out
/// bridge's Aeron stream, which the new publication continues (`outbound/stream.rs`,
/// `inbound/sources.rs`).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const SENT_AGAIN: i64 = 8;

const FLAGS: i64 = 31;

/// The reserved value for a message starting at `start` with `flags`.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn encode(start: i64, flags: i64) -> i64 {
    (start & !FLAGS) | (flags & FLAGS)
}

/// (start position, flags) of a reserved value.
pub(crate) fn decode(value: i64) -> (i64, i64) {
    (value & !FLAGS, value & FLAGS)
}

thread_local! {
    static NEXT: Cell<i64> = const { Cell::new(0) };
}

/// The value the next offer on this thread stamps into its frames: aeron-rs takes the supplier
/// as a plain `fn`, so it cannot capture it.
pub(crate) struct Reserved;

impl Reserved {
    pub(crate) fn set(value: i64) {
        NEXT.with(|c| c.set(value));
    }
}

/// The reserved-value supplier given to aeron-rs (called once per frame of the message).
pub(crate) fn reserved_value(_term: AtomicBuffer, _offset: Index, _length: Index) -> i64 {
    NEXT.with(|c| c.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_flags_share_the_value_without_touching_each_other() {
        for start in [0i64, 32, 4096, (1 << 40) + 64, i64::MAX & !31] {
            for flags in
                [0, FRESH_START, AFTER_DROP, LOST, SENT_AGAIN, FRESH_START | AFTER_DROP | LOST | SENT_AGAIN]
            {
                assert_eq!(decode(encode(start, flags)), (start, flags));
            }
        }
    }
}
