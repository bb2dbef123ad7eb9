//! Frames of a recording, read back from a private copy of segment bytes: the same checks a live
//! reader makes (`layout::frame`), plus the recording's session and stream. Nothing read from a
//! segment file becomes an offset before it passed them.

use crate::layout::frame::{self, HeaderRest, END_FLAG, HEADER_LEN, REST_LEN, REST_OFFSET, TYPE_PAD};
use crate::log::position::Terms;

/// What every frame of one recording must say about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Expect {
    pub terms: Terms,
    pub session_id: i32,
    pub stream_id: i32,
}

/// A frame that passed the checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Frame {
    /// Header plus payload.
    pub len: usize,
    /// Bytes it takes in the log (32-byte aligned).
    pub aligned: usize,
    pub rest: HeaderRest,
}

impl Frame {
    pub(crate) fn is_padding(&self) -> bool {
        self.rest.frame_type == TYPE_PAD
    }

    /// `true` if a message ends with this frame (a last fragment, or padding).
    pub(crate) fn ends_message(&self) -> bool {
        self.is_padding() || self.rest.flags & END_FLAG != 0
    }
}

/// The frame at the start of `bytes`, which hold the recording from stream `position` on:
/// `Ok(None)` if nothing was written there (a zero length word). `bytes` may end before the
/// frame does; the caller compares `aligned` with what it holds.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn frame_at(bytes: &[u8], position: i64, expect: &Expect) -> Result<Option<Frame>, &'static str> {
    let Some(header) = bytes.get(..HEADER_LEN) else { return Err("a frame header is cut short") };
    let raw = i32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let offset = expect.terms.term_offset(position);
    let Some((len, aligned)) = frame::check_length(raw, expect.terms.term_length - offset)? else {
        return Ok(None);
    };
    let mut rest = [0u8; REST_LEN];
    rest.copy_from_slice(&header[REST_OFFSET..]);
    let rest = HeaderRest::decode(&rest);
    frame::check_rest(&rest, offset, expect.terms.term_id(position))?;
    if rest.session_id != expect.session_id || rest.stream_id != expect.stream_id {
        return Err("frame of another session or stream");
    }
    Ok(Some(Frame { len, aligned, rest }))
}

/// Offset of the reserved value in a frame header: where a recorded frame's checksum goes.
pub(crate) const RESERVED_OFFSET: usize = 24;

/// The CRC32C of a recorded frame, `frame` being exactly the bytes it covers: the header with
/// its reserved value taken as zero, then the payload (`frame_length` bytes in all for a data
/// frame; the 32-byte header alone for padding, whose body is not data). The alignment bytes
/// after a frame are not covered: nobody reads them.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn checksum(frame: &[u8]) -> u32 {
    use crc32c::{crc32c, crc32c_append};
    let (head, rest) = frame.split_at(RESERVED_OFFSET.min(frame.len()));
    let crc = crc32c_append(crc32c(head), &[0u8; 8]);
    crc32c_append(crc, rest.get(8..).unwrap_or(&[]))
}

/// Stores the checksum of `frame` (the bytes [`checksum`] covers) in its reserved value.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn seal(frame: &mut [u8]) {
    let crc = checksum(frame) as u64;
    if let Some(reserved) = frame.get_mut(RESERVED_OFFSET..HEADER_LEN) {
        reserved.copy_from_slice(&crc.to_le_bytes());
    }
}

/// `true` if `frame`'s reserved value is the checksum of the bytes it covers.
pub(crate) fn sealed(frame: &[u8], rest: &HeaderRest) -> bool {
    rest.reserved_value == checksum(frame) as i64
}

/// The 32 bytes of a padding frame of `len` bytes (32-aligned, within the term) at `position`,
/// as a recorder writes it where the log had padding (which live reads skip and so never hand
/// over). Its body is not data: nothing is written there.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn padding_header(position: i64, len: usize, expect: &Expect) -> [u8; HEADER_LEN] {
    let offset = expect.terms.term_offset(position);
    let rest = HeaderRest {
        version: frame::CURRENT_VERSION,
        flags: frame::UNFRAGMENTED,
        frame_type: TYPE_PAD,
        term_offset: offset as i32,
        session_id: expect.session_id,
        stream_id: expect.stream_id,
        term_id: expect.terms.term_id(position),
        reserved_value: 0,
    };
    let mut out = [0u8; HEADER_LEN];
    debug_assert!(
        len >= HEADER_LEN && len % frame::FRAME_ALIGNMENT == 0 && offset + len <= expect.terms.term_length
    );
    out[..REST_OFFSET].copy_from_slice(&(len as i32).to_le_bytes());
    out[REST_OFFSET..].copy_from_slice(&rest.encode());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::frame::{BEGIN_FLAG, TYPE_DATA, UNFRAGMENTED};

    fn expect() -> Expect {
        Expect { terms: Terms::new(1 << 16, 100), session_id: 7, stream_id: 8 }
    }

    fn data(position: i64, len: usize, flags: u8) -> Vec<u8> {
        let e = expect();
        let rest = HeaderRest {
            flags,
            frame_type: TYPE_DATA,
            term_offset: e.terms.term_offset(position) as i32,
            session_id: 7,
            stream_id: 8,
            term_id: e.terms.term_id(position),
            ..Default::default()
        };
        let mut b = vec![0u8; len];
        b[..4].copy_from_slice(&(len as i32).to_le_bytes());
        b[4..32].copy_from_slice(&rest.encode());
        b
    }

    #[test]
    fn a_frame_that_names_its_place_passes_and_one_that_does_not_is_refused() {
        let at = (1 << 16) * 3 + 64;
        let f = frame_at(&data(at, 40, UNFRAGMENTED), at, &expect()).unwrap().unwrap();
        assert_eq!(
            (f.len, f.aligned, f.rest.flags & BEGIN_FLAG != 0, f.ends_message()),
            (40, 64, true, true)
        );
        assert_eq!(frame_at(&[0u8; 32], at, &expect()), Ok(None));
        assert!(frame_at(&data(at, 40, 0), at + 32, &expect()).is_err(), "wrong offset");
        assert!(frame_at(&data(at, 40, 0), at + (1 << 16), &expect()).is_err(), "wrong term");
        let mut other = data(at, 40, 0);
        other[12] ^= 1;
        assert!(frame_at(&other, at, &expect()).is_err(), "other session");
        assert!(frame_at(&data(at, 40, 0)[..31], at, &expect()).is_err(), "short header");
        let end = (1 << 16) - 32;
        assert!(frame_at(&data(end, 64, 0), end, &expect()).is_err(), "past the term's end");
    }

    #[test]
    fn a_sealed_frame_checks_and_any_flipped_bit_of_it_does_not() {
        let at = (1 << 16) * 2 + 96;
        let mut f = data(at, 90, UNFRAGMENTED);
        f.resize(96, 0);
        for (i, b) in f[32..].iter_mut().enumerate() {
            *b = i as u8;
        }
        seal(&mut f[..90]);
        let rest = frame_at(&f, at, &expect()).unwrap().unwrap().rest;
        assert!(sealed(&f[..90], &rest));
        assert_eq!(rest.reserved_value >> 32, 0, "the upper half of the reserved value is zero");
        for bit in 0..90 * 8 {
            let mut bad = f.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let rest = HeaderRest::decode(bad[REST_OFFSET..HEADER_LEN].try_into().unwrap());
            assert!(!sealed(&bad[..90], &rest), "bit {bit} flipped went unseen");
        }
        // The alignment bytes after the frame are not covered.
        f[95] ^= 1;
        assert!(sealed(&f[..90], &rest));
    }

    #[test]
    fn the_padding_header_parses_as_padding_of_its_length() {
        let at = (1 << 16) * 5 - 96;
        let f = frame_at(&padding_header(at, 96, &expect()), at, &expect()).unwrap().unwrap();
        assert!(f.is_padding() && f.ends_message());
        assert_eq!(at + f.aligned as i64, (1 << 16) * 5);
        // Inside a term (an aborted claim).
        let at = (1 << 16) * 5 + 64;
        let f = frame_at(&padding_header(at, 480, &expect()), at, &expect()).unwrap().unwrap();
        assert!(f.is_padding() && f.ends_message());
        assert_eq!((f.len, f.aligned), (480, 480));
    }
}
