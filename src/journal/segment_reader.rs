//! Reading a recording's frames back: segment bytes are copied (`pread`) into a buffer of ours
//! and every frame is validated before anything of it is used, so a damaged, truncated or
//! foreign segment yields an error naming the file and the position, never a wrong delivery.
//! Frames of a checksummed recording must also match their CRC32C (`frames::sealed`).

use super::frames::{self, Expect, Frame};
use super::record::{Checksum, Recording};
use super::segment;
use crate::error::Error;
use crate::layout::frame::HEADER_LEN;
use crate::log::position::Terms;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes read from a segment at a time (more for a longer frame): small enough to stay in the L2
/// cache until the frames' checksums and the handler have read them.
const READ_LEN: usize = 256 << 10;

/// Reads frames of one recording from its segment files.
#[derive(Debug)]
pub(crate) struct SegmentReader {
    dir: PathBuf,
    id: u32,
    segment_length: u64,
    expect: Expect,
    checksum: Checksum,
    file: Option<(i64, File, PathBuf)>,
    buf: Vec<u8>,
    /// Stream position of `buf[0]`, and how many bytes of `buf` are valid.
    buf_position: i64,
    buf_len: usize,
    /// Set by every read from a file: the caller checks that no cut overlapped it.
    fresh: bool,
}

impl SegmentReader {
    pub(crate) fn new(dir: &Path, r: &Recording) -> Self {
        Self {
            dir: dir.to_path_buf(),
            id: r.id,
            segment_length: r.segment_length,
            expect: Expect {
                terms: Terms::new(r.term_length, r.initial_term_id),
                session_id: r.session_id,
                stream_id: r.stream_id,
            },
            checksum: r.checksum,
            file: None,
            buf: Vec::new(),
            buf_position: 0,
            buf_len: 0,
            fresh: false,
        }
    }

    pub(crate) fn terms(&self) -> Terms {
        self.expect.terms
    }

    /// The valid frame at `position` (below `limit`, the recorded end), its bytes in the buffer.
    pub(crate) fn frame(&mut self, position: i64, limit: i64) -> Result<Frame, Error> {
        self.cover(position, HEADER_LEN, limit)?;
        let at = (position - self.buf_position) as usize;
        let frame = match frames::frame_at(&self.buf[at..self.buf_len], position, &self.expect) {
            Ok(Some(frame)) => frame,
            Ok(None) => return Err(self.corrupt(position, "no frame where the recording has one")),
            Err(what) => return Err(self.corrupt(position, what)),
        };
        if position + frame.aligned as i64 > limit {
            return Err(self.corrupt(position, "a frame runs past the recording's stop position"));
        }
        let covered = if frame.is_padding() { HEADER_LEN } else { frame.len };
        self.cover(position, covered, limit)?;
        if self.checksum == Checksum::Crc32c {
            let at = (position - self.buf_position) as usize;
            if !frames::sealed(&self.buf[at..at + covered], &frame.rest) {
                return Err(self.corrupt(position, "the frame does not match its checksum"));
            }
        }
        Ok(frame)
    }

    /// `true` if the buffer was read from a file since the last call.
    pub(crate) fn take_fresh(&mut self) -> bool {
        std::mem::take(&mut self.fresh)
    }

    /// Drops what the buffer holds: the next frame is read from the file again.
    pub(crate) fn forget(&mut self) {
        self.buf_len = 0;
    }

    /// The `len` bytes at `position`, which [`SegmentReader::frame`] just covered.
    pub(crate) fn bytes(&self, position: i64, len: usize) -> &[u8] {
        let at = (position - self.buf_position) as usize;
        &self.buf[at..at + len]
    }

    /// Makes the buffer hold `position .. position + len` (all below `limit`).
    fn cover(&mut self, position: i64, len: usize, limit: i64) -> Result<(), Error> {
        let end = self.buf_position + self.buf_len as i64;
        if position >= self.buf_position && position + len as i64 <= end {
            return Ok(());
        }
        let base = segment::base_of(position, self.segment_length);
        let want = (limit.min(base + self.segment_length as i64) - position).min(READ_LEN.max(len) as i64);
        if want < len as i64 {
            return Err(self.corrupt(position, "a frame runs past the recording's stop position"));
        }
        let want = want as usize;
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        self.open_segment(base)?;
        let (_, file, path) = self.file.as_ref().expect("opened above");
        let mut got = 0;
        while got < want {
            match file.read_at(&mut self.buf[got..want], (position - base) as u64 + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("read segment", path.clone(), e)),
            }
        }
        self.buf_position = position;
        self.buf_len = got;
        self.fresh = true;
        if got < want {
            return Err(self.corrupt(position + got as i64, "the segment file is shorter than the recording"));
        }
        Ok(())
    }

    /// Opens the segment file at `base` unless it is the open one.
    fn open_segment(&mut self, base: i64) -> Result<(), Error> {
        if self.file.as_ref().map(|f| f.0) != Some(base) {
            let path = segment::path(&self.dir, self.id, base);
            let file = crate::sys::fs::open_existing(&path, false).map_err(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    Error::CorruptRecording {
                        path: path.clone(),
                        position: base,
                        what: "a segment file is missing",
                    }
                } else {
                    Error::io("open segment", path.clone(), e)
                }
            })?;
            crate::stream::files::check_owner(&file, &path)?;
            self.file = Some((base, file, path));
        }
        Ok(())
    }

    fn corrupt(&self, position: i64, what: &'static str) -> Error {
        let base = segment::base_of(position, self.segment_length);
        Error::CorruptRecording { path: segment::path(&self.dir, self.id, base), position, what }
    }

    /// Walks the frames from `walk_start` (where a message starts) to the first message start at
    /// or after `from` (or `to`, the recorded end): whether `from` is one, and the one found.
    pub(crate) fn message_start(
        &mut self,
        walk_start: i64,
        from: i64,
        to: i64,
    ) -> Result<(bool, i64), Error> {
        let mut at = walk_start;
        let mut boundary = true;
        while at < to {
            if at >= from && boundary {
                return Ok((at == from, at));
            }
            let frame = self.frame(at, to)?;
            boundary = frame.ends_message();
            at += frame.aligned as i64;
        }
        Ok((at == from && boundary, to))
    }
}
