//! Loss reports: the one type for every way a reader can miss messages and know it, and the rule
//! that decides, when a reader moves to another session of its stream, what it missed.
//!
//! A stream has sessions one after another (a publisher restarted, an in-bridge restarted), each
//! numbered by the stream's reader-slot file (`layout::slots::SESSIONS`, the log's
//! `SESSION_SEQ`). A subscription remembers the newest number it knows of: the counter when it
//! opened, then each session it joined. A session numbered past that began after the
//! subscription was waiting for it (a *later* session), so every message of it is owed: the
//! subscription starts at the session's first message if the log still holds it, and otherwise
//! reports what it skipped. Numbers it never saw in between are whole sessions that began and
//! ended unseen.

use std::fmt;

/// Messages a subscription did not deliver and knows it did not: one report per loss, in order
/// with the messages (`Subscription::take_loss`, `RecvError::Lost`). A message whose start
/// position lies in `[from, to)` of `session_id` was not delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Loss {
    /// The session whose messages were missed.
    pub session_id: i32,
    /// Stream position of the first byte missed.
    pub from: i64,
    /// Position at which delivery resumed (a message that began before it and ends after it was
    /// skipped too: its start lies in the range).
    pub to: i64,
    /// Why.
    pub cause: LossCause,
}

/// Why a [`Loss`] happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossCause {
    /// The subscription joined a session that began while it was waiting for one (after it
    /// opened, or after the session it read before) past the session's first message: the log no
    /// longer held `[from, to)` (its publisher ran more than a term ahead before the subscription
    /// looked), or the rule for later sessions skips them
    /// (`SubscriptionBuilder::later_sessions`).
    JoinedLate,
    /// Whole sessions of the stream began and ended while the subscription waited, and their
    /// logs were gone before it looked (replaced by a newer session's, or removed by `clean`):
    /// `sessions` of them at most (a publisher that failed while starting counts too). Their ids
    /// and lengths are unknown: `session_id` is the session joined right after them, or, with
    /// none left to join, the one read before them (0 if none), and `from` and `to` are 0.
    SessionsMissed {
        /// How many (at most).
        sessions: u32,
    },
    /// An untethered subscription (`SubscriptionBuilder::tethered(false)`) fell so far behind
    /// that the publisher began to reuse the part of the log it had not read: `[from, to)` was
    /// not delivered (a fragmented message begun before `from` and not finished is in it too:
    /// `from` is its start), and reading went on at `to` (`SubscriptionBuilder::on_lapped`).
    Lapped,
    /// The subscription stopped at a fault (see `Subscription::fault`) and left the session once
    /// its publisher was gone: `[from, to)` was committed but not delivered.
    Fault,
    /// A persistent subscription (`journal::PersistentSubscription`) went back to the journal
    /// for `[from, to)` and retention had already purged (or an operator detached) it; or an
    /// operator truncated the recording at `from`, and it had not read up to `to`, the old stop.
    Purged,
    /// A persistent subscription went back to the journal for `[from, to)` and no recording
    /// holds it: its recorder skipped it (untethered and lapped) or was not recording then.
    NotRecorded,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cause {
            LossCause::SessionsMissed { sessions } => {
                write!(f, "up to {sessions} whole session(s) missed before session {}", self.session_id)
            }
            LossCause::JoinedLate => write!(
                f,
                "session {}: positions {}..{} missed (joined past the session's start)",
                self.session_id, self.from, self.to
            ),
            LossCause::Lapped => write!(
                f,
                "session {}: positions {}..{} missed (lapped by the publisher)",
                self.session_id, self.from, self.to
            ),
            LossCause::Fault => write!(
                f,
                "session {}: positions {}..{} not delivered (stopped at a fault)",
                self.session_id, self.from, self.to
            ),
            LossCause::Purged => write!(
                f,
                "session {}: positions {}..{} missed (purged from the journal)",
                self.session_id, self.from, self.to
            ),
            LossCause::NotRecorded => write!(
                f,
                "session {}: positions {}..{} missed (not in the journal)",
                self.session_id, self.from, self.to
            ),
        }
    }
}

/// What a subscription knows of its stream's sessions: the newest session number it knows of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sessions {
    newest: i32,
}

/// How to join a session, decided by [`Sessions::classify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SessionKind {
    /// A session that was running when the subscription opened: joined by the subscription's
    /// own rule, and what it holds before the join position is not owed.
    Running,
    /// A session that began while the subscription waited for one: every message is owed.
    /// `missed` whole sessions began and ended unseen before it.
    Later { missed: u32 },
}

impl Sessions {
    /// A subscription that opened when the stream's counter stood at `counter`.
    pub(crate) fn new(counter: i32) -> Self {
        Self { newest: counter }
    }

    /// The kind of the session numbered `seq` (read from a log: any value, handled with wrapping
    /// arithmetic).
    pub(crate) fn classify(&self, seq: i32) -> SessionKind {
        let ahead = seq.wrapping_sub(self.newest);
        if ahead <= 0 {
            return SessionKind::Running;
        }
        SessionKind::Later { missed: (ahead - 1) as u32 }
    }

    /// The subscription joined the session numbered `seq`.
    pub(crate) fn joined(&mut self, seq: i32) {
        if seq.wrapping_sub(self.newest) > 0 {
            self.newest = seq;
        }
    }

    /// The losses of joining session `session_id` of kind `kind` at `position` (`explicit`: at a
    /// position the user asked for, whose skipped part is not a loss). The missed sessions come
    /// first.
    pub(crate) fn losses(
        kind: SessionKind,
        session_id: i32,
        position: i64,
        explicit: bool,
    ) -> [Option<Loss>; 2] {
        let SessionKind::Later { missed } = kind else { return [None, None] };
        let sessions = (missed > 0).then_some(Loss {
            session_id,
            from: 0,
            to: 0,
            cause: LossCause::SessionsMissed { sessions: missed },
        });
        let late = (position > 0 && !explicit).then_some(Loss {
            session_id,
            from: 0,
            to: position,
            cause: LossCause::JoinedLate,
        });
        [sessions, late]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_past_the_newest_known_are_later_and_gaps_are_whole_sessions_missed() {
        let mut known = Sessions::new(5);
        assert_eq!(known.classify(5), SessionKind::Running, "running at open");
        assert_eq!(known.classify(3), SessionKind::Running);
        assert_eq!(known.classify(6), SessionKind::Later { missed: 0 });
        assert_eq!(known.classify(9), SessionKind::Later { missed: 3 });
        known.joined(9);
        assert_eq!(known.classify(9), SessionKind::Running, "the session being read");
        assert_eq!(known.classify(10), SessionKind::Later { missed: 0 });
        known.joined(7); // never backwards
        assert_eq!(known.classify(10), SessionKind::Later { missed: 0 });
        // Wrapping counters and hostile numbers: no panic, a number behind is never later.
        let known = Sessions::new(i32::MAX);
        assert_eq!(known.classify(i32::MIN), SessionKind::Later { missed: 0 });
        assert_eq!(Sessions::new(0).classify(i32::MIN), SessionKind::Running);
        assert_eq!(Sessions::new(0).classify(i32::MAX), SessionKind::Later { missed: i32::MAX as u32 - 1 });
    }

    #[test]
    fn a_later_session_joined_past_its_start_reports_what_was_skipped() {
        let later = SessionKind::Later { missed: 2 };
        let [sessions, late] = Sessions::losses(later, 7, 4096, false);
        assert_eq!(
            sessions,
            Some(Loss { session_id: 7, from: 0, to: 0, cause: LossCause::SessionsMissed { sessions: 2 } })
        );
        assert_eq!(late, Some(Loss { session_id: 7, from: 0, to: 4096, cause: LossCause::JoinedLate }));
        assert_eq!(
            Sessions::losses(SessionKind::Later { missed: 0 }, 7, 0, false),
            [None, None],
            "from its start"
        );
        assert_eq!(
            Sessions::losses(SessionKind::Later { missed: 0 }, 7, 64, true),
            [None, None],
            "asked for"
        );
        assert_eq!(Sessions::losses(SessionKind::Running, 7, 4096, false), [None, None]);
        assert!(late.unwrap().to_string().contains("0..4096"));
    }
}
