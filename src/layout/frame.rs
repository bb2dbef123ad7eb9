//! The 32-byte data frame header (Aeron's `DataHeaderFlyweight`).
//!
//! | off | size | field          |
//! |----:|-----:|----------------|
//! |   0 |    4 | frame length (header + payload, unaligned; 0 = not written) |
//! |   4 |    1 | version (0)    |
//! |   5 |    1 | flags: BEGIN 0x80, END 0x40 |
//! |   6 |    2 | type: PAD 0, DATA 1 |
//! |   8 |    4 | term offset    |
//! |  12 |    4 | session id     |
//! |  16 |    4 | stream id      |
//! |  20 |    4 | term id        |
//! |  24 |    8 | reserved value |

use super::align;

/// Length of a frame header, and offset of the payload in a frame.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const HEADER_LEN: usize = 32;
/// Every frame starts at a multiple of this.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const FRAME_ALIGNMENT: usize = 32;
/// Bytes after the length word that make up the rest of the header.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const REST_OFFSET: usize = 4;
/// Length of the rest of the header, copied in and out as bytes.
pub(crate) const REST_LEN: usize = HEADER_LEN - REST_OFFSET;

/// First fragment of a message.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const BEGIN_FLAG: u8 = 0x80;
/// Last fragment of a message.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const END_FLAG: u8 = 0x40;
/// A message that fits in one frame.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const UNFRAGMENTED: u8 = BEGIN_FLAG | END_FLAG;

/// Frame type of padding, which readers skip.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const TYPE_PAD: u16 = 0;
/// Frame type of application data.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const TYPE_DATA: u16 = 1;
/// Frame header version written and accepted.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const CURRENT_VERSION: u8 = 0;

/// Aeron caps a message at 16 MiB whatever the term length.
pub(crate) const MAX_MESSAGE_CAP: usize = 16 * 1024 * 1024;

/// What [`check_length`] says of a negative length.
pub(crate) const NEGATIVE_LENGTH: &str = "negative frame length";

/// Largest message for a term length: `min(T / 8, 16 MiB)`.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const fn max_message_len(term_length: usize) -> usize {
    let eighth = term_length / 8;
    if eighth < MAX_MESSAGE_CAP {
        eighth
    } else {
        MAX_MESSAGE_CAP
    }
}

/// Log space taken by a message of `len` bytes cut into fragments of at most `max_payload` bytes.
pub(crate) const fn fragmented_length(len: usize, max_payload: usize) -> usize {
    let full = len / max_payload;
    let rest = len % max_payload;
    let tail = if rest > 0 { align(rest + HEADER_LEN, FRAME_ALIGNMENT) } else { 0 };
    full * (max_payload + HEADER_LEN) + tail
}

/// Log space a message takes: one aligned frame up to `max_payload`, fragments above.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const fn framed_length(len: usize, max_payload: usize) -> usize {
    if len <= max_payload {
        align(len + HEADER_LEN, FRAME_ALIGNMENT)
    } else {
        fragmented_length(len, max_payload)
    }
}

/// Checks a frame's length word against the `room` left in its term: `Ok(None)` if nothing is
/// committed there (zero), else the length and the aligned length it takes.
///
/// A negative length is [`NEGATIVE_LENGTH`]: a fault in an exclusive log, a frame still being
/// written in a concurrent one (the reader tells them apart).
#[inline(always)]
pub(crate) fn check_length(raw: i32, room: usize) -> Result<Option<(usize, usize)>, &'static str> {
    if raw <= 0 {
        return if raw == 0 { Ok(None) } else { Err(NEGATIVE_LENGTH) };
    }
    let len = raw as usize;
    if len < HEADER_LEN {
        return Err("frame length is shorter than a header");
    }
    let aligned = align(len, FRAME_ALIGNMENT);
    if aligned > room {
        return Err("frame runs past the end of its term");
    }
    Ok(Some((len, aligned)))
}

/// Checks that a header names the place it sits in (`offset` of term `term_id`) and is a frame
/// this build knows.
#[inline(always)]
pub(crate) fn check_rest(rest: &HeaderRest, offset: usize, term_id: i32) -> Result<(), &'static str> {
    if rest.term_offset as i64 != offset as i64 || rest.term_id != term_id {
        return Err("frame header does not match its place in the log");
    }
    if rest.version != CURRENT_VERSION {
        return Err("unknown frame version");
    }
    if rest.frame_type != TYPE_DATA && rest.frame_type != TYPE_PAD {
        return Err("unknown frame type");
    }
    Ok(())
}

/// The header fields after the length word, decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct HeaderRest {
    pub version: u8,
    pub flags: u8,
    pub frame_type: u16,
    pub term_offset: i32,
    pub session_id: i32,
    pub stream_id: i32,
    pub term_id: i32,
    pub reserved_value: i64,
}

impl HeaderRest {
    /// Encodes into the 28 bytes that follow the length word.
    #[inline]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn encode(&self) -> [u8; REST_LEN] {
        let mut b = [0u8; REST_LEN];
        b[0] = self.version;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.frame_type.to_le_bytes());
        b[4..8].copy_from_slice(&self.term_offset.to_le_bytes());
        b[8..12].copy_from_slice(&self.session_id.to_le_bytes());
        b[12..16].copy_from_slice(&self.stream_id.to_le_bytes());
        b[16..20].copy_from_slice(&self.term_id.to_le_bytes());
        b[20..28].copy_from_slice(&self.reserved_value.to_le_bytes());
        b
    }

    /// Decodes the 28 bytes that follow the length word.
    #[inline(always)]
    #[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
    pub fn decode(b: &[u8; REST_LEN]) -> Self {
        let i32_at = |o: usize| i32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let mut reserved = [0u8; 8];
        reserved.copy_from_slice(&b[20..28]);
        Self {
            version: b[0],
            flags: b[1],
            frame_type: u16::from_le_bytes([b[2], b[3]]),
            term_offset: i32_at(4),
            session_id: i32_at(8),
            stream_id: i32_at(12),
            term_id: i32_at(16),
            reserved_value: i64::from_le_bytes(reserved),
        }
    }
}

/// Offsets inside the encoded rest (relative to `REST_OFFSET`), for patching a template.
pub(crate) mod rest {
    pub(crate) const FLAGS: usize = 1;
    pub(crate) const TYPE: usize = 2;
    pub(crate) const TERM_OFFSET: usize = 4;
    pub(crate) const TERM_ID: usize = 16;
    pub(crate) const RESERVED_VALUE: usize = 20;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragmented_length_matches_aeron_vectors() {
        assert_eq!(fragmented_length(0, 1376), 0);
        assert_eq!(fragmented_length(10, 1024), 64);
        assert_eq!(fragmented_length(2048, 2048), 2080);
        assert_eq!(fragmented_length(4096, 1024), 4224);
        assert_eq!(fragmented_length(7997, 992), 8288);
    }

    #[test]
    fn framed_length_of_small_messages_is_one_aligned_frame() {
        assert_eq!(framed_length(0, 1376), 32);
        assert_eq!(framed_length(1, 1376), 64);
        assert_eq!(framed_length(32, 1376), 64);
        assert_eq!(framed_length(33, 1376), 96);
        assert_eq!(framed_length(1376, 1376), 1408);
        assert_eq!(framed_length(1377, 1376), 1408 + 64);
    }

    #[test]
    fn max_message_is_an_eighth_of_the_term_capped_at_16_mib() {
        assert_eq!(max_message_len(64 * 1024), 8 * 1024);
        assert_eq!(max_message_len(16 << 20), 2 << 20);
        assert_eq!(max_message_len(128 << 20), 16 << 20);
        assert_eq!(max_message_len(1 << 30), 16 << 20);
    }

    #[test]
    fn header_rest_round_trips_little_endian() {
        let h = HeaderRest {
            version: 0,
            flags: BEGIN_FLAG,
            frame_type: TYPE_DATA,
            term_offset: 0x0102_0304,
            session_id: -7,
            stream_id: 42,
            term_id: i32::MIN,
            reserved_value: -2,
        };
        let b = h.encode();
        assert_eq!(b[1], 0x80);
        assert_eq!(&b[2..4], &[1, 0]);
        assert_eq!(&b[4..8], &[4, 3, 2, 1]);
        assert_eq!(HeaderRest::decode(&b), h);
    }
}
