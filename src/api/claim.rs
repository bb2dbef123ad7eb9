//! The guard of a frame reserved with `Publication::try_claim`.

use crate::stream::liveness::FileWriter;

/// A frame reserved by [`crate::Publication::try_claim`], written in place.
///
/// Readers stop in front of it until it is committed; [`Claim::abort`] or dropping it turns it into
/// padding. If the guard is leaked (`mem::forget`), the publication's next operation aborts it, so a
/// forgotten claim never stalls readers for longer than the writer stays idle.
#[derive(Debug)]
pub struct Claim<'a> {
    writer: &'a mut FileWriter,
    position: i64,
}

impl<'a> Claim<'a> {
    pub(super) fn new(writer: &'a mut FileWriter, position: i64) -> Self {
        Self { writer, position }
    }

    /// The payload bytes to fill (zeroed when the claim is made).
    pub fn buffer(&mut self) -> &mut [u8] {
        self.writer.claim_buffer()
    }

    /// Sets the frame's 8-byte reserved value (e.g. a timestamp), which readers see in the header.
    pub fn set_reserved_value(&mut self, value: i64) {
        self.writer.set_claim_reserved_value(value);
    }

    /// The stream position just after this frame (what `commit` returns).
    pub fn position(&self) -> i64 {
        self.position
    }

    /// Publishes the frame to readers. Returns the stream position after it.
    pub fn commit(self) -> i64 {
        let mut this = std::mem::ManuallyDrop::new(self);
        this.writer.commit_claim().unwrap_or(this.position)
    }

    /// Turns the frame into padding that readers skip.
    pub fn abort(self) {
        drop(self)
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.writer.abort_claim();
    }
}
