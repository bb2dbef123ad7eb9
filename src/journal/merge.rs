//! Replay-merge: replay a recording from a position, then hand over to the live stream at a
//! message start both hold, with no gap and no duplicate, while the publisher keeps writing.
//!
//! The handover joins the live log at the replay's own position (`JoinAt::Position`, whose join
//! proof keeps the publisher from overwriting it), and only in the recording's session, so the
//! live subscription's first fragment is the one after the replay's last. It is tried when the
//! replay has caught up with the recording and stands between messages; a tethered recorder
//! trails the publisher by at most a window, so the live log still holds that position then.

use super::replay::{Replay, ReplayBuilder};
use crate::api::handler::FragmentHandler;
use crate::api::subscription::{Subscription, SubscriptionBuilder};
use crate::error::Error;
use crate::log::header::Header;
use crate::stream::join::JoinAt;
use std::time::{Duration, Instant};

/// How often a caught-up replay tries to join the live stream.
const RETRY: Duration = Duration::from_millis(1);

/// A replay that turns into a live subscription. See the module docs of `shmlog::journal`.
///
/// ```no_run
/// use shmlog::journal::{Replay, ReplayMerge};
/// use shmlog::{Header, Subscription};
/// # fn main() -> Result<(), shmlog::Error> {
/// let replay = Replay::builder("/var/lib/orders-journal", 0).from(0);
/// let mut merge = ReplayMerge::new(replay, Subscription::builder("orders"))?;
/// loop {
///     merge.poll(|msg: &[u8], h: &Header| println!("{} bytes at {}", msg.len(), h.position()), 100)?;
/// #   break;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ReplayMerge {
    replay: Option<Replay>,
    live: Option<Subscription>,
    builder: SubscriptionBuilder,
    session_id: i32,
    next_try: Instant,
    merged_at: Option<i64>,
}

impl ReplayMerge {
    /// Opens the replay; `live` is the subscription to hand over to (its `join_at` is replaced
    /// by the handover position).
    pub fn new(replay: ReplayBuilder, live: SubscriptionBuilder) -> Result<Self, Error> {
        let replay = replay.open()?;
        Ok(Self {
            session_id: replay.recording().session_id,
            replay: Some(replay),
            live: None,
            builder: live,
            next_try: Instant::now(),
            merged_at: None,
        })
    }

    /// Delivers up to `fragment_limit` fragments, from the recording and then from the live
    /// stream; returns how many.
    pub fn poll(&mut self, mut handler: impl FragmentHandler, fragment_limit: usize) -> Result<usize, Error> {
        if let Some(live) = &mut self.live {
            return Ok(live.poll(handler, fragment_limit));
        }
        let replay = self.replay.as_mut().expect("replaying until merged");
        let n = replay.poll(|p: &[u8], h: &Header| handler.on_fragment(p, h), fragment_limit)?;
        if n < fragment_limit && replay.at_message_boundary() && Instant::now() >= self.next_try {
            self.try_merge()?;
            if let Some(live) = &mut self.live {
                return Ok(n + live.poll(handler, fragment_limit - n));
            }
        }
        Ok(n)
    }

    /// Joins the live stream at the replay's position, if its session still holds it.
    fn try_merge(&mut self) -> Result<(), Error> {
        let replay = self.replay.as_mut().expect("replaying until merged");
        if replay.position() < replay.recorded_position() {
            return Ok(()); // not caught up with the recording yet
        }
        self.next_try = Instant::now() + RETRY;
        let position = replay.position();
        match self.builder.clone().join_at(JoinAt::Position(position)).open() {
            Ok(live) if live.session_id() == Some(self.session_id) && live.position() == position => {
                self.live = Some(live);
                self.replay = None;
                self.merged_at = Some(position);
                Ok(())
            }
            // Another session (or none) is live, or the log no longer holds the position:
            // replay on (a stopped recording's replay simply ends).
            Ok(_) | Err(Error::PositionNotAvailable { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The position the handover happened at, once merged.
    pub fn merged_at(&self) -> Option<i64> {
        self.merged_at
    }

    /// Position after the last fragment delivered.
    pub fn position(&self) -> i64 {
        match (&self.live, &self.replay) {
            (Some(live), _) => live.position(),
            (None, Some(replay)) => replay.position(),
            (None, None) => 0,
        }
    }

    /// The live subscription, once merged.
    pub fn live(&mut self) -> Option<&mut Subscription> {
        self.live.as_mut()
    }

    /// The replay, until merged.
    pub fn replay(&mut self) -> Option<&mut Replay> {
        self.replay.as_mut()
    }
}
