//! What a blocking poll found: fragments, a timeout, the end of the session, or a fault.

use crate::stream::follow::Follower;

/// What [`Subscription::poll_blocking`](crate::Subscription::poll_blocking) found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Polled {
    /// This many fragments were delivered (at least one).
    Fragments(usize),
    /// Nothing arrived in time; the session goes on.
    TimedOut,
    /// The session is over (its publisher closed it or died) and everything it committed was
    /// read; said once per session. The subscription joins the next session by itself: polling
    /// again waits for it.
    Closed,
    /// Reading stopped at a fault (see [`Subscription::fault`](crate::Subscription::fault)); said once per session. Nothing
    /// more of this session is delivered: polling again waits until its publisher is gone (then
    /// [`Polled::Closed`], with the undelivered part reported as a [`crate::Loss`]) or a new
    /// session starts.
    Fault(&'static str),
}

impl Polled {
    /// The fragments delivered (0 unless [`Polled::Fragments`]): for an idle strategy.
    pub fn fragments(self) -> usize {
        match self {
            Polled::Fragments(n) => n,
            _ => 0,
        }
    }

    /// After a poll that delivered nothing: a fault not reported yet, or the end of the session.
    pub(crate) fn news(follower: &mut Follower) -> Option<Polled> {
        if let Some(fault) = follower.take_fault() {
            return Some(Polled::Fault(fault));
        }
        follower.is_closed().then_some(Polled::Closed)
    }
}
