//! One source's message in assembly: Aeron fragments (BEGIN, middles, END) joined into the
//! whole message the local stream takes.
//!
//! The fragments come in the order of the source's Aeron stream (`sources.rs` sees to that,
//! across the images that carry it in turn), so a message begun on one image may be finished
//! by the next. Everything a fragment says is checked: a BEGIN inside a message, bounds that
//! do not check out, or more bytes than the local stream's longest message drop the unfinished
//! message, and each drop is one event for the accounts.

use shmlog::OfferError;
use std::fmt;

/// Aeron's BEGIN flag.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const BEGIN: u8 = 0x80;
/// Aeron's END flag.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const END: u8 = 0x40;

/// What taking a fragment produced.
#[derive(Debug)]
pub(crate) enum Event<'a> {
    /// A whole message and the reserved value of its first frame.
    Whole { reserved: i64, message: &'a [u8] },
    /// An unfinished message dropped (`len`: the bytes it had, at least), and why.
    Cut { reserved: i64, len: usize, why: Why },
}

/// Why an unfinished message was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// A BEGIN came inside it: Aeron never sends one (an image is reliable and in order), so the
    /// sender broke its framing.
    BeganInside,
    /// A fragment's bounds fell outside its term.
    OutOfBounds,
    /// It grew past the local stream's longest message.
    TooLarge { len: usize, max: usize },
    /// More sources than [`super::cycle::MAX_ASSEMBLIES`] were assembling at once, and this one was
    /// the least recently used.
    Evicted,
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Why::BeganInside => f.write_str("a new message began inside it"),
            Why::OutOfBounds => f.write_str("a fragment lies outside its term"),
            Why::TooLarge { len, max } => OfferError::MessageTooLarge { len, max }.fmt(f),
            Why::Evicted => {
                write!(f, "more than {} messages in assembly at once", super::cycle::MAX_ASSEMBLIES)
            }
        }
    }
}

/// Where a source stands within a fragmented message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    /// Between messages (or in one it does not hold: its fragments up to the next BEGIN are
    /// skipped).
    Between,
    /// A BEGIN was taken: the fragments so far are in the buffer; the BEGIN's reserved value.
    Assembling { reserved: i64 },
}

/// A source's message in assembly.
#[derive(Debug)]
pub(crate) struct Assembly {
    part: Part,
    bytes: Vec<u8>,
    /// The source's Aeron stream position just before the message's first frame: a successor
    /// image that starts at or before it carries the whole message again.
    from: i64,
}

impl Assembly {
    pub(crate) fn new() -> Self {
        Assembly { part: Part::Between, bytes: Vec::new(), from: 0 }
    }

    /// Takes one fragment (`before`: the stream position just before its frame), calling `on`
    /// with what it finished or dropped: at most a `Cut` of the message it interrupted, then a
    /// `Whole` or a `Cut` of its own.
    #[inline]
    pub(crate) fn take(
        &mut self,
        flags: u8,
        reserved: i64,
        payload: Option<&[u8]>,
        max: usize,
        before: i64,
        mut on: impl FnMut(Event<'_>),
    ) {
        let (begin, end) = (flags & BEGIN != 0, flags & END != 0);
        if begin {
            if let Part::Assembling { reserved } = self.part {
                on(Event::Cut { reserved, len: self.bytes.len(), why: Why::BeganInside });
            }
            self.reset();
        }
        let reserved = match self.part {
            // A fragment after the start of a message this source does not hold: it joined
            // inside that message (the next message's gap check reports the part lost), or
            // dropped it (counted then).
            Part::Between if !begin => return,
            Part::Between => {
                self.from = before;
                reserved
            }
            Part::Assembling { reserved } => reserved,
        };
        let Some(payload) = payload else {
            on(Event::Cut { reserved, len: self.bytes.len(), why: Why::OutOfBounds });
            self.reset();
            return;
        };
        if begin && end {
            on(Event::Whole { reserved, message: payload });
            return;
        }
        let len = self.bytes.len().saturating_add(payload.len());
        if len > max {
            // Longer than the local stream takes: dropped now rather than assembled further.
            on(Event::Cut { reserved, len, why: Why::TooLarge { len, max } });
            self.reset();
            return;
        }
        reserve_within(&mut self.bytes, len, max);
        self.bytes.extend_from_slice(payload);
        if !end {
            self.part = Part::Assembling { reserved };
            return;
        }
        self.part = Part::Between;
        on(Event::Whole { reserved, message: &self.bytes });
        self.bytes.clear();
    }

    /// The unfinished message, if one is in assembly: its reserved value and its bytes so far.
    pub(crate) fn unfinished(&self) -> Option<(i64, usize)> {
        match self.part {
            Part::Assembling { reserved } => Some((reserved, self.bytes.len())),
            Part::Between => None,
        }
    }

    /// Drops the unfinished message (the caller accounts for it), skipping its remaining
    /// fragments.
    pub(crate) fn reset(&mut self) {
        self.part = Part::Between;
        self.bytes.clear();
    }

    /// Lets the unfinished message go, and its buffer: the source has no image left. Returns
    /// the stream position to take the source back to, so that a successor image that carries
    /// the message again from its first frame has it whole.
    pub(crate) fn release(&mut self) -> Option<i64> {
        let back = self.unfinished().map(|_| self.from);
        self.part = Part::Between;
        self.bytes = Vec::new();
        back
    }

    /// Bytes in assembly, and the buffer's capacity (tests and fuzzing).
    #[cfg(any(test, shmlog_fuzz))]
    pub(crate) fn bytes(&self) -> (usize, usize) {
        (self.bytes.len(), self.bytes.capacity())
    }
}

/// Grows `v` to hold `needed` bytes (at most `max`), doubling while that stays within `max`.
fn reserve_within(v: &mut Vec<u8>, needed: usize, max: usize) {
    if needed > v.capacity() {
        let target = v.capacity().saturating_mul(2).clamp(needed, max.max(needed));
        v.reserve_exact(target - v.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `(flags, payload)` fragments; returns what came out, as text.
    fn run(a: &mut Assembly, max: usize, frags: &[(u8, Option<&[u8]>)]) -> Vec<String> {
        let mut out = Vec::new();
        for (i, &(flags, payload)) in frags.iter().enumerate() {
            a.take(flags, i as i64, payload, max, 0, |e| {
                out.push(match e {
                    Event::Whole { reserved, message } => {
                        format!("whole {reserved} {}", String::from_utf8_lossy(message))
                    }
                    Event::Cut { reserved, len, why } => format!("cut {reserved} {len} {why:?}"),
                })
            });
        }
        out
    }

    #[test]
    fn fragments_join_into_whole_messages_and_broken_framing_cuts_only_the_unfinished_one() {
        let mut a = Assembly::new();
        let out = run(
            &mut a,
            8,
            &[
                (BEGIN | END, Some(b"one")),
                (BEGIN, Some(b"tw")),
                (END, Some(b"o")),
                (0, Some(b"stray")),
                (BEGIN, Some(b"x")),
                (BEGIN, Some(b"a")),
                (0, None),
                (END, Some(b"tail")),
                (BEGIN, Some(b"12345")),
                (END, Some(b"6789")),
            ],
        );
        assert_eq!(
            out,
            [
                "whole 0 one",
                "whole 1 two",
                "cut 4 1 BeganInside",
                "cut 5 1 OutOfBounds",
                "cut 8 9 TooLarge { len: 9, max: 8 }",
            ]
        );
        assert_eq!(a.bytes(), (0, 8), "within the local stream's longest message");
    }

    /// A source with no image left lets its unfinished message go, and says where a successor
    /// must start to carry it whole: just before its first frame.
    #[test]
    fn a_released_assembly_goes_back_to_its_first_frame() {
        let mut a = Assembly::new();
        a.take(BEGIN, 7, Some(b"ab"), 64, 4096, |_| unreachable!());
        a.take(0, 0, Some(b"cd"), 64, 4160, |_| unreachable!());
        assert_eq!(a.unfinished(), Some((7, 4)));
        assert_eq!(a.release(), Some(4096));
        assert_eq!((a.unfinished(), a.bytes()), (None, (0, 0)));
        assert_eq!(a.release(), None);
    }
}
