//! The header a handler sees with each fragment: a copy, never a view of shared memory.

use crate::layout::frame::{HeaderRest, BEGIN_FLAG, END_FLAG};

/// Metadata of a delivered fragment (or of a whole reassembled message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub(crate) frame_length: i32,
    pub(crate) rest: HeaderRest,
    pub(crate) position: i64,
}

impl Header {
    /// Stream position just after this fragment (after the whole message once reassembled).
    pub fn position(&self) -> i64 {
        self.position
    }

    /// Length of the frame: 32 header bytes plus the payload.
    pub fn frame_length(&self) -> i32 {
        self.frame_length
    }

    /// Fragment flags as Aeron's format has them: `0x80` begins a message, `0x40` ends it, both
    /// for a whole message ([`Header::is_begin`], [`Header::is_end`] test them).
    pub fn flags(&self) -> u8 {
        self.rest.flags
    }

    /// `true` for the first fragment of a message (and for unfragmented messages).
    pub fn is_begin(&self) -> bool {
        self.rest.flags & BEGIN_FLAG != 0
    }

    /// `true` for the last fragment of a message (and for unfragmented messages).
    pub fn is_end(&self) -> bool {
        self.rest.flags & END_FLAG != 0
    }

    /// Offset of the frame in its term.
    pub fn term_offset(&self) -> i32 {
        self.rest.term_offset
    }

    /// Term id of the frame.
    pub fn term_id(&self) -> i32 {
        self.rest.term_id
    }

    /// The publication session that wrote the frame; a new publisher means a new session.
    pub fn session_id(&self) -> i32 {
        self.rest.session_id
    }

    /// A 32-bit id derived from the stream name.
    pub fn stream_id(&self) -> i32 {
        self.rest.stream_id
    }

    /// The 8-byte value a claimer may set (`Claim::set_reserved_value`); 0 otherwise.
    pub fn reserved_value(&self) -> i64 {
        self.rest.reserved_value
    }
}
