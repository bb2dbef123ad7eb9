//! The reader-slot file of a stream: a header page, the doorbell page, then one page per reader
//! slot.
//!
//! Positions live outside the log so readers can map the log read-only. A slot is owned by whoever
//! holds the kernel lock on its byte range (see `sys::lock`); the words below only describe it.
//! Each slot has a page of its own so that a reader can map its own slot read-write and every
//! other byte of the file read-only: a stray write in one reader cannot forge another's position.
//!
//! The doorbell page holds the futex words on which readers sleep until the writer commits, and
//! the writer until readers move (`stream::doorbell`). Sleepers must write it (to say they wait),
//! so it is mapped read-write by everyone; a stray write there can cause a spurious or a late
//! wake-up (bounded by the sleepers' timeouts), never a wrong message.

/// `b"SHMLOG\0R"` little-endian.
pub(crate) const MAGIC: i64 = i64::from_le_bytes(*b"SHMLOG\0R");

/// Header fields.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const MAGIC_OFFSET: usize = 0;
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const VERSION: usize = 8;
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const SLOT_COUNT: usize = 12;
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const READY: usize = 16;
/// One past the highest slot index ever claimed (`i64`), so scans stop early.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const HIGH_WATER: usize = 64;
/// Sessions ever created on the stream while this file existed (`i32`, wrapping): each new
/// session's publisher takes the next number (the log's `SESSION_SEQ`). A reader compares it with
/// the sessions it knows of, so that no session begins and ends without it knowing.
pub(crate) const SESSIONS: usize = 72;
/// Bytes of the header: one page.
pub(crate) const HEADER_LEN: usize = 4096;
/// Offset of the doorbell page.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const DOORBELL: usize = HEADER_LEN;
/// Bytes of the doorbell page.
pub(crate) const DOORBELL_LEN: usize = 4096;
/// Bytes before the first slot: the header and the doorbell.
pub(crate) const SLOTS_START: usize = DOORBELL + DOORBELL_LEN;

/// Doorbell fields (`i32`, offsets inside the doorbell page, each on its own 128-byte block).
/// Readers waiting for the writer say so here (1); the writer clears it when it rings.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const READERS_ARMED: usize = 0;
/// The futex word readers sleep on; the writer bumps it when it rings.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const READERS_BELL: usize = 128;
/// A writer waiting for readers to move says so here; a reader that moves clears it and rings.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const WRITER_ARMED: usize = 256;
/// The futex word the writer sleeps on.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const WRITER_BELL: usize = 384;
/// Readers asleep (or about to be) on the readers' bell: the writer wakes one, and a woken
/// reader that sees others asleep wakes them all (so the publisher pays for one wake-up).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const READERS_SLEEPING: usize = 512;
/// The last value of the readers' bell that a woken reader passed on to the others: each ring is
/// passed on once, by the first reader it wakes (readers woken by the pass-on do not pass it on
/// again).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const READERS_PASSED: usize = 640;
/// Readers asleep in an async runtime's reactor (or about to be), waiting on the stream's wake
/// FIFO rather than on the readers' bell: whoever rings the readers with this above zero also
/// writes the FIFO, which wakes them all at once (`stream::doorbell`).
pub(crate) const READERS_FD_SLEEPING: usize = 768;
/// The last value of the readers' bell for which the wake FIFO was written (by the writer or a
/// reader passing a ring on): each ring reaches the reactor sleepers once.
pub(crate) const READERS_FD_PASSED: usize = 896;
/// A writer asleep in an async runtime's reactor, waiting on the wake FIFO for readers to move.
pub(crate) const WRITER_FD_SLEEPING: usize = 1024;
/// Bytes per slot: one page (of 4 KiB), so each can be mapped on its own.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const SLOT_LEN: usize = 4096;

/// Slot fields (offsets inside a slot, all `i64`).
/// `session_id << 32 | state`, written as one word so the pair is always consistent.
pub(crate) const STATE: usize = 0;
/// The reader's position in its session's log.
pub(crate) const POSITION: usize = 8;
/// Where it joined the session.
pub(crate) const JOIN_POSITION: usize = 16;
/// Owner's process id.
pub(crate) const PID: usize = 24;
/// When it claimed the slot, ns since the Unix epoch.
pub(crate) const CLAIMED_NS: usize = 32;
/// Loss reports of an untethered reader (lapped by the writer), over the slot's life: written by
/// its owner alone, for tools.
pub(crate) const LOSSES: usize = 40;
/// Stream bytes those losses skipped, over the slot's life (for tools).
pub(crate) const LOST_BYTES: usize = 48;

/// Slot states (low 32 bits of `STATE`).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const STATE_FREE: i64 = 0;
/// Claimed, not reading any session yet.
pub(crate) const STATE_WAITING: i64 = 1;
/// Reading the session in the high 32 bits; counts for that session's flow control.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const STATE_ACTIVE: i64 = 2;
/// Flag bits of the state word (bits 8..16 of its low half, next to the state): the reader is
/// untethered, the writer's flow control passes over it (`docs/untethered.md`). Part of the
/// state word so that the writer never sees an active slot without knowing which kind it is.
pub(crate) const FLAG_UNTETHERED: i64 = 0x100;
/// The bits of the state word's low half that hold the state.
const STATE_MASK: i64 = 0xFF;
/// The bits that hold flags.
const FLAGS_MASK: i64 = 0xFF00;

/// Most slots a file may declare.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const MAX_SLOTS: usize = 4096;

/// Packs a state word (`state` may carry flag bits).
pub(crate) const fn pack_state(session_id: i32, state: i64) -> i64 {
    ((session_id as i64) << 32) | (state & 0xFFFF_FFFF)
}

/// Unpacks a state word into `(session_id, state)`, the state without its flags.
pub(crate) const fn unpack_state(word: i64) -> (i32, i64) {
    ((word >> 32) as i32, word & STATE_MASK)
}

/// The flag bits of a state word ([`FLAG_UNTETHERED`]).
pub(crate) const fn state_flags(word: i64) -> i64 {
    word & FLAGS_MASK
}

/// Byte offset of slot `index`.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const fn slot_offset(index: usize) -> usize {
    SLOTS_START + index * SLOT_LEN
}

/// Length of a file with `count` slots.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const fn file_length(count: usize) -> usize {
    SLOTS_START + count * SLOT_LEN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_word_round_trips_negative_sessions() {
        for s in [0, 1, -1, i32::MIN, i32::MAX] {
            for st in [STATE_FREE, STATE_WAITING, STATE_ACTIVE] {
                assert_eq!(unpack_state(pack_state(s, st)), (s, st));
                let flagged = pack_state(s, st | FLAG_UNTETHERED);
                assert_eq!(unpack_state(flagged), (s, st));
                assert_eq!(state_flags(flagged), FLAG_UNTETHERED);
                assert_eq!(state_flags(pack_state(s, st)), 0);
            }
        }
    }

    #[test]
    fn slots_are_pages_after_the_header_and_doorbell_pages() {
        assert_eq!(slot_offset(0), 8192);
        assert_eq!(slot_offset(7) % 4096, 0);
        assert_eq!(file_length(64), 66 * 4096);
        const { assert!(WRITER_FD_SLEEPING + 4 <= DOORBELL_LEN) };
    }
}
