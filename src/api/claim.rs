//! The guard of a frame reserved with `try_claim`, one for both publications: [`crate::Claim`]
//! is a `ClaimGuard` of a [`crate::Publication`], [`crate::ConcurrentClaim`] one of a
//! [`crate::ConcurrentPublication`].

/// What a publication does for its claim guard (sealed: implemented by the two publications).
pub(crate) mod sealed {
    pub trait Claims {
        /// The pending claim's payload (none: an empty slice).
        fn claim_buffer(&mut self) -> &mut [u8];
        /// Commits the pending claim; the position after it.
        fn commit_claim(&mut self) -> Option<i64>;
        /// Turns the pending claim, if any, into padding.
        fn abort_claim(&mut self);
    }
}

/// A publication whose `try_claim` hands out a [`ClaimGuard`]: [`crate::Publication`] and
/// [`crate::ConcurrentPublication`] (sealed).
pub trait ClaimSource: sealed::Claims {}

/// A frame reserved by `try_claim`, written in place.
///
/// Readers stop in front of it until it is committed; [`ClaimGuard::abort`] or dropping it turns
/// it into padding. If the guard is leaked (`mem::forget`), the publication's next operation
/// aborts it, so a forgotten claim never stalls readers for longer than the writer stays idle.
#[derive(Debug)]
pub struct ClaimGuard<'a, P: ClaimSource> {
    publication: &'a mut P,
    position: i64,
}

impl<'a, P: ClaimSource> ClaimGuard<'a, P> {
    pub(super) fn new(publication: &'a mut P, position: i64) -> Self {
        Self { publication, position }
    }

    /// The payload bytes to fill (zeroed when the claim is made).
    pub fn buffer(&mut self) -> &mut [u8] {
        self.publication.claim_buffer()
    }

    /// The stream position just after this frame (what `commit` returns).
    pub fn position(&self) -> i64 {
        self.position
    }

    /// Publishes the frame to readers. Returns the stream position after it.
    pub fn commit(self) -> i64 {
        let mut this = std::mem::ManuallyDrop::new(self);
        this.publication.commit_claim().unwrap_or(this.position)
    }

    /// Turns the frame into padding that readers skip.
    pub fn abort(self) {
        drop(self)
    }

    /// The publication, for what only one kind of claim can do.
    pub(super) fn publication(&mut self) -> &mut P {
        self.publication
    }
}

impl<P: ClaimSource> Drop for ClaimGuard<'_, P> {
    fn drop(&mut self) {
        self.publication.abort_claim();
    }
}
