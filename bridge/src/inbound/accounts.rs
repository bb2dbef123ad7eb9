//! The in bridge's accounts of what it carried and lost: the counters and losses of its status,
//! the resume position, and the rule that places a loss before a message (an `Upstream` loss
//! the out bridge marked, or a `Gap` where frames of a source's Aeron stream never arrived).
//!
//! Everything here reads source positions from the frames' reserved values, checked first
//! ([`source_span`]): a value that cannot be a source position is counted in `bad_positions`
//! and its message is carried as a fresh start.

use crate::builder::{BackPressure, ResumeFile};
use crate::status::{BridgeInfo, Loss, LossCause};
use crate::wire;
use shmlog::OfferError;
use std::fmt::Display;

use super::cycle::{Next, Offer};

/// What one source expects of its next message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Expect {
    /// Source position where its next message should start (the end of its last message
    /// carried or dropped); -1 before the first.
    pub(crate) at: i64,
    /// The next message with a valid position is checked for a gap.
    pub(crate) check: Check,
}

/// Which gap check a source's next message gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// None: within a source's Aeron stream nothing is lost (Aeron retransmits), so a jump in
    /// source positions is padding or fragments of the source's log.
    Within,
    /// The first message of a source the bridge did not know (a new out bridge, or a restarted
    /// one, or any source after this bridge restarted): compared with where the bridge's last
    /// message ended, the resume position (a second source makes this a guess).
    New,
    /// The first message after a hole in the source's Aeron stream (frames its lost driver
    /// counted as sent never arrived, or an image replaced after a timeout): compared with the
    /// source's own last message.
    AfterHole,
}

impl Expect {
    /// A source seen for the first time.
    pub(crate) fn new() -> Self {
        Expect { at: -1, check: Check::New }
    }
}

/// A message the local stream pushed back (policy `Hold`), offered again first.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) bytes: Vec<u8>,
    pub(crate) span: Option<(i64, i64)>,
}

/// The accounts kept in the status: counters, losses, and the resume position.
#[derive(Debug, Default)]
pub(crate) struct Accounts {
    /// The last loss in the status is a run of drops still growing (closed by a delivery or by
    /// another loss). Kept in the status as it grows, so a bridge killed meanwhile has it there.
    run_open: bool,
}

/// The source span `[start, end)` of a message of `len` bytes whose frames say it starts at
/// `start`, counting it as one frame of the source (32-byte header, 32-aligned); `None` if
/// `start` cannot be a source position (negative, or too close to `i64::MAX` for its end).
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub fn source_span(start: i64, len: usize) -> Option<(i64, i64)> {
    if start < 0 {
        return None;
    }
    let frame = i64::try_from(len).ok()?.checked_add(32 + 31)? & !31;
    Some((start, start.checked_add(frame)?))
}

/// A message's source span and marks, from its first frame's reserved value; a span that cannot
/// be one is counted.
fn span_of(reserved: i64, len: usize, info: &mut BridgeInfo) -> (Option<(i64, i64)>, i64) {
    let (start, marks) = wire::decode(reserved);
    let span = source_span(start, len);
    if span.is_none() {
        info.bad_positions += 1;
    }
    (span, marks)
}

impl Accounts {
    /// A whole message of a source: checked for a gap, then offered to the local stream.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn settle(
        &mut self,
        expect: &mut Expect,
        reserved: i64,
        message: &[u8],
        offer: &mut Offer<'_>,
        policy: BackPressure,
        held: &mut Option<Held>,
        info: &mut BridgeInfo,
        resume: &ResumeFile,
    ) -> Next {
        let (span, marks) = span_of(reserved, message.len(), info);
        self.check_gap(expect, info, span, marks);
        match offer(message) {
            Ok(_) => {
                self.delivered(info, resume, message.len(), span);
                Next::Continue
            }
            Err(e) if e.is_retryable() && policy == BackPressure::Hold => {
                *held = Some(Held { bytes: message.to_vec(), span });
                info.back_pressure += 1;
                Next::Break
            }
            Err(e) => {
                if e.is_retryable() {
                    info.back_pressure += 1;
                }
                let why = (!e.is_retryable()).then_some(&e as &dyn Display);
                self.lost(info, resume, span, message.len(), why);
                Next::Continue
            }
        }
    }

    /// A message of a source dropped before it was whole (`len`: the bytes it had, at least):
    /// checked for a gap like a whole one, then counted and recorded as lost.
    pub(crate) fn settle_lost(
        &mut self,
        expect: &mut Expect,
        reserved: i64,
        len: usize,
        why: &dyn Display,
        info: &mut BridgeInfo,
        resume: &ResumeFile,
    ) {
        let (span, marks) = span_of(reserved, len, info);
        self.check_gap(expect, info, span, marks);
        self.lost(info, resume, span, len, Some(why));
    }

    /// Records what was lost before this message, and moves the source's expectation past it:
    /// - marked by the out bridge as following messages it lost (its reader's losses, or its
    ///   drops): an `Upstream` loss from where this message was expected (on a fresh start: from
    ///   its session's start) to where it starts, recorded even when that is empty (the far
    ///   side then knows only that, and the out bridge's status says what);
    /// - otherwise, when the source's [`Check`] asks for it: the distance from where the message
    ///   was expected to where it starts, as a `Gap` (a fresh start implies none). After a hole,
    ///   a start below the expected one means the source's publisher began a new session in
    ///   what was lost (its first message, marked as a fresh start, among it): the gap is then
    ///   that session's part before this message, `[0, start)`.
    ///
    /// A message without a valid position is not compared (a fresh start; a loss it is marked
    /// with is counted, not placed), and leaves a pending check to the source's next message.
    #[inline]
    pub(crate) fn check_gap(
        &mut self,
        expect: &mut Expect,
        info: &mut BridgeInfo,
        span: Option<(i64, i64)>,
        marks: i64,
    ) {
        let upstream = marks & (wire::LOST | wire::AFTER_DROP) != 0;
        let Some((start, end)) = span else {
            if upstream {
                info.source_losses = info.source_losses.saturating_add(1);
            }
            return;
        };
        let check = std::mem::replace(&mut expect.check, Check::Within);
        let fresh = marks & wire::FRESH_START != 0;
        let expected = match check {
            Check::New => info.resume_position,
            _ if expect.at < 0 => info.resume_position,
            _ => expect.at,
        };
        expect.at = end;
        if upstream {
            let from = match fresh {
                true => 0,
                false if (0..=start).contains(&expected) => expected,
                false => start,
            };
            self.run_open = false;
            info.source_losses = info.source_losses.saturating_add(1);
            info.push_loss(Loss { from, to: start, messages: None, cause: LossCause::Upstream });
            return;
        }
        if fresh || expected < 0 {
            return;
        }
        let gap = match check {
            Check::Within => None,
            _ if start > expected => Some(expected),
            Check::AfterHole if start < expected => Some(0),
            _ => None,
        };
        if let Some(from) = gap {
            self.run_open = false;
            info.push_loss(Loss { from, to: start, messages: None, cause: LossCause::Gap });
        }
    }

    /// A message the local stream took.
    pub(crate) fn delivered(
        &mut self,
        info: &mut BridgeInfo,
        resume: &ResumeFile,
        len: usize,
        span: Option<(i64, i64)>,
    ) {
        self.run_open = false;
        info.messages += 1;
        info.bytes = info.bytes.saturating_add(len as u64);
        // Where the next message starts if this one was a single frame in the source (fragment
        // headers or term padding in between make a gap's `from` early by that much).
        if let Some((start, end)) = span {
            info.source_position = start;
            info.resume_position = end;
            resume.save(end, 0);
        }
    }

    /// A message the local stream could not take (dropped under `Drop`, refused for good, or
    /// dropped before it was whole). Without a valid position it is counted but not placed.
    pub(crate) fn lost(
        &mut self,
        info: &mut BridgeInfo,
        resume: &ResumeFile,
        span: Option<(i64, i64)>,
        len: usize,
        why: Option<&dyn Display>,
    ) {
        if let Some(why) = why {
            let at = span.map_or_else(|| "unknown".to_owned(), |(start, _)| start.to_string());
            eprintln!("shmlog bridge in: message at source position {at} ({len} bytes) dropped: {why}");
        }
        info.dropped += 1;
        let Some((start, end)) = span else { return };
        match info.losses.last_mut() {
            Some(run) if self.run_open && start >= run.to => {
                run.to = end;
                run.messages = run.messages.map(|n| n + 1);
            }
            _ => {
                info.push_loss(Loss { from: start, to: end, messages: Some(1), cause: LossCause::Dropped });
                self.run_open = true;
            }
        }
        info.resume_position = end;
        resume.save(end, 0);
    }

    /// A message the local stream refused for good, offered again from [`Held`].
    pub(crate) fn refused(&mut self, info: &mut BridgeInfo, resume: &ResumeFile, h: &Held, why: &OfferError) {
        self.lost(info, resume, h.span, h.bytes.len(), Some(why));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::BridgeDirection;

    fn info() -> BridgeInfo {
        let mut info = BridgeInfo::new("s", BridgeDirection::In, "aeron:udp?endpoint=x:1", 1, "d");
        info.resume_position = 1024;
        info
    }

    fn expect(at: i64, check: Check) -> Expect {
        Expect { at, check }
    }

    #[test]
    fn a_gap_is_reported_only_where_messages_can_have_been_lost() {
        let at = |start: i64| source_span(start, 0);
        let mut acc = Accounts::default();
        let fresh = info;
        // Within a source's stream nothing is lost (Aeron retransmits): a jump is padding or
        // fragments.
        let mut info = fresh();
        acc.check_gap(&mut expect(1024, Check::Within), &mut info, at(4096), 0);
        assert!(info.losses.is_empty());
        // A new source: the jump from the bridge's resume position is a gap, to this start.
        let (mut info, mut e) = (fresh(), Expect::new());
        acc.check_gap(&mut e, &mut info, at(4096), 0);
        assert_eq!(info.losses, vec![Loss { from: 1024, to: 4096, messages: None, cause: LossCause::Gap }]);
        assert_eq!(e, expect(4128, Check::Within), "checked once per source");
        // After a hole in its stream: from the source's own last message, not the bridge's
        // (another source's); back to 0 when its positions went back (a new session of its
        // publisher began in what was lost).
        for (start, loss) in [(4096, Some((2048, 4096))), (2048, None), (512, Some((0, 512)))] {
            let mut info = fresh();
            acc.check_gap(&mut expect(2048, Check::AfterHole), &mut info, at(start), 0);
            let want: Vec<Loss> = loss
                .map(|(from, to)| Loss { from, to, messages: None, cause: LossCause::Gap })
                .into_iter()
                .collect();
            assert_eq!(info.losses, want, "start {start}");
        }
        // Messages the out bridge dropped or lost before this one: upstream, from where it was
        // expected, or from its session's start after a fresh start (`[0, 0)` when it is the
        // session's first: the loss was in an earlier session, which the out bridge's status
        // names); counted in `source_losses` either way.
        for (check, start, marks, from) in [
            (Check::Within, 4096, wire::AFTER_DROP, 1024),
            (Check::New, 4096, wire::LOST, 1024),
            (Check::Within, 4096, wire::LOST | wire::AFTER_DROP, 1024),
            (Check::Within, 4096, wire::FRESH_START | wire::LOST, 0),
            (Check::New, 512, wire::FRESH_START | wire::AFTER_DROP, 0),
            (Check::Within, 0, wire::FRESH_START | wire::LOST, 0),
            (Check::Within, 512, wire::LOST, 512),
        ] {
            let mut info = fresh();
            acc.check_gap(&mut expect(1024, check), &mut info, at(start), marks);
            let upstream = Loss { from, to: start, messages: None, cause: LossCause::Upstream };
            assert_eq!((info.losses, info.source_losses), (vec![upstream], 1), "{start} {marks}");
        }
        // Marked, with no valid position: counted, not placed.
        let mut info = fresh();
        acc.check_gap(&mut Expect::new(), &mut info, None, wire::LOST);
        assert_eq!((info.losses.len(), info.source_losses), (0, 1));
        // A restarted source starts its positions again; a message where expected is no gap.
        for (start, marks) in [(64, wire::FRESH_START), (4096, wire::FRESH_START), (1024, 0), (512, 0)] {
            let mut info = fresh();
            acc.check_gap(&mut Expect::new(), &mut info, at(start), marks);
            assert!(info.losses.is_empty(), "start {start} marks {marks}");
        }
        // Nothing expected yet (a first bridge): nothing to compare with.
        let mut info = fresh();
        info.resume_position = -1;
        acc.check_gap(&mut Expect::new(), &mut info, at(4096), 0);
        assert!(info.losses.is_empty());
        // No valid position: not compared, and the check waits for the source's next message.
        let (mut info, mut e) = (fresh(), Expect::new());
        acc.check_gap(&mut e, &mut info, None, 0);
        assert!(info.losses.is_empty());
        assert_eq!(e, Expect::new());
    }

    #[test]
    fn deliveries_move_the_expected_position_and_close_a_run_of_drops() {
        let (mut acc, mut info) = (Accounts::default(), info());
        let none = ResumeFile::detached();
        acc.lost(&mut info, &none, source_span(1024, 10), 10, None);
        acc.lost(&mut info, &none, source_span(1088, 40), 40, None);
        assert_eq!(info.dropped, 2);
        let run = Loss { from: 1024, to: 1184, messages: Some(2), cause: LossCause::Dropped };
        assert_eq!(info.losses, vec![run], "the run is in the status while it grows");
        acc.delivered(&mut info, &none, 100, source_span(1184, 100));
        acc.lost(&mut info, &none, source_span(1344, 10), 10, None);
        let next = Loss { from: 1344, to: 1408, messages: Some(1), cause: LossCause::Dropped };
        assert_eq!(info.losses, vec![run, next], "a delivery closed the first run");
        assert_eq!((info.messages, info.bytes, info.source_position), (1, 100, 1184));
        // A drop that starts before the run's end (another source's positions) opens a new one,
        // so no loss ever has `to < from`.
        acc.lost(&mut info, &none, source_span(64, 10), 10, None);
        assert_eq!(info.losses.len(), 3);
        assert!(info.losses.iter().all(|l| l.from <= l.to));
    }

    #[test]
    fn source_spans_are_checked() {
        assert_eq!(source_span(0, 0), Some((0, 32)));
        assert_eq!(source_span(1024, 100), Some((1024, 1184)));
        assert_eq!(source_span(-32, 0), None);
        assert_eq!(source_span(i64::MAX & !31, 0), None);
        assert_eq!(source_span((i64::MAX & !31) - 32, 0), Some(((i64::MAX & !31) - 32, i64::MAX & !31)));
        assert_eq!(source_span(0, usize::MAX), None);
    }
}
