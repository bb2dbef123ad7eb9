//! The one loop that hands frames to a handler steering with an [`Action`], for every way a
//! reader gets its frames: in place from the mapped log (`log::reader::read_at`), from an
//! untethered reader's checked copy (`stream::reader`), and from a recording's segments
//! (`journal::replay`). What `Abort`, `Break`, `Commit` and `Continue` mean is decided here once;
//! where the bytes come from, how they are validated and what "consumed" moves is the
//! [`FrameSource`]'s. Generic, so each source gets its own copy of the loop with nothing left
//! to call through: the in-place poll costs what its hand-written loop did.

use super::header::Header;
use super::reader::Action;

/// What a source has at its position; `F` is what the source needs to know of the frame again to
/// hand out its payload and move past it.
pub(crate) enum Next<F> {
    /// A data frame, validated, for the handler; its header as the handler sees it.
    Deliver(F, Header),
    /// A frame consumed without delivery: padding, or the rest of a message a reader joined
    /// inside of.
    Pass(F),
    /// Nothing more for now (nothing committed yet, the end of a term, of a copy, of a recording).
    End,
}

/// Where the frames come from, one at a time, in order.
pub(crate) trait FrameSource {
    /// A frame found by [`FrameSource::next`], as the source needs it again.
    type Frame: Copy;
    /// Why a source stops in front of a frame it may not deliver.
    type Fault;

    /// Looks at the frame at the source's position. Nothing of a frame is used before the
    /// source validated it; a frame that fails is a fault, and the position stays in front of it.
    fn next(&mut self) -> Result<Next<Self::Frame>, Self::Fault>;

    /// Calls `f` with the payload of `frame`, which [`FrameSource::next`] just announced for
    /// delivery.
    fn with_payload<T>(&mut self, frame: Self::Frame, f: impl FnOnce(&[u8]) -> T) -> T;

    /// Moves the position past `frame`, which the handler just consumed.
    fn consume(&mut self, frame: Self::Frame);

    /// Moves the position past `frame`, announced as [`Next::Pass`].
    #[inline(always)]
    fn pass(&mut self, frame: Self::Frame) {
        self.consume(frame);
    }

    /// The handler answered [`Action::Commit`]: publish the position now, if the source has one
    /// that others read (a replay's is its own: nothing to do).
    fn commit(&mut self);
}

/// What one run of the loop did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Delivered<F> {
    /// Data fragments consumed.
    pub(crate) fragments: usize,
    /// Set when the source stopped at a frame it may not deliver.
    pub(crate) fault: Option<F>,
}

/// Delivers up to `fragment_limit` fragments of `source` to `handler`, which decides per
/// fragment ([`Action`]): `Abort` leaves the fragment where it is (the next run delivers it
/// again), `Break` consumes it and stops, `Commit` consumes it and has the source publish its
/// position, `Continue` consumes it. Frames passed over (padding) do not count.
#[inline(always)]
pub(crate) fn deliver<S: FrameSource>(
    source: &mut S,
    fragment_limit: usize,
    mut handler: impl FnMut(&[u8], &Header) -> Action,
) -> Delivered<S::Fault> {
    let mut fragments = 0;
    while fragments < fragment_limit {
        let (frame, header) = match source.next() {
            Ok(Next::Deliver(frame, header)) => (frame, header),
            Ok(Next::Pass(frame)) => {
                source.pass(frame);
                continue;
            }
            Ok(Next::End) => break,
            Err(fault) => return Delivered { fragments, fault: Some(fault) },
        };
        let action = source.with_payload(frame, |payload| handler(payload, &header));
        if action == Action::Abort {
            break;
        }
        source.consume(frame);
        fragments += 1;
        match action {
            Action::Break => break,
            Action::Commit => source.commit(),
            Action::Abort | Action::Continue => {}
        }
    }
    Delivered { fragments, fault: None }
}
