//! Reassembly of fragmented messages.

use super::handler::{ControlledFragmentHandler, FragmentHandler};
use crate::layout::align;
use crate::layout::frame::{FRAME_ALIGNMENT, HEADER_LEN, UNFRAGMENTED};
use crate::log::header::Header;
use crate::log::reader::Action;

/// Wraps a handler (a closure, or any [`FragmentHandler`] / [`ControlledFragmentHandler`]) so it
/// sees whole messages: fragments are copied into a buffer that is reused
/// from message to message (no allocation once it has grown to the largest message seen).
///
/// Unfragmented messages pass straight through without a copy. A fragment that does not continue
/// the message being built (a gap, a new session, a middle or end fragment without a beginning)
/// drops the partial message. The delivered header is the first fragment's, with BEGIN|END flags,
/// the whole message's frame length, and the position after the last fragment.
///
/// ```
/// # use shmlog::{FragmentAssembler, Header};
/// let mut seen = Vec::new();
/// let mut assembler = FragmentAssembler::new(|msg: &[u8], _h: &Header| seen.push(msg.len()));
/// # let _ = &mut assembler;
/// // subscription.poll(&mut assembler, 10);
/// ```
///
/// A loop that must decide per message with state no handler can own across polls takes the
/// assembler without a handler instead: `FragmentAssembler::new(())` and
/// [`FragmentAssembler::assemble`] in its own closure.
#[derive(Debug)]
pub struct FragmentAssembler<F = ()> {
    delegate: F,
    buffer: Vec<u8>,
    /// First fragment's header while a message is being built.
    first: Option<Header>,
    /// Position at which the next fragment of that message must start.
    expected: i64,
    /// Buffer length before the last fragment was appended (to undo an aborted delivery).
    undo_len: usize,
}

impl<F> FragmentAssembler<F> {
    /// Wraps `delegate`.
    pub fn new(delegate: F) -> Self {
        Self::with_capacity(delegate, 0)
    }

    /// Wraps `delegate` with a buffer preallocated for messages of `capacity` bytes.
    pub fn with_capacity(delegate: F, capacity: usize) -> Self {
        Self { delegate, buffer: Vec::with_capacity(capacity), first: None, expected: 0, undo_len: 0 }
    }

    /// The wrapped handler.
    pub fn delegate_mut(&mut self) -> &mut F {
        &mut self.delegate
    }

    /// Unwraps the handler.
    pub fn into_inner(self) -> F {
        self.delegate
    }

    /// Drops any partial message (call when switching sessions by hand).
    pub fn reset(&mut self) {
        self.first = None;
        self.buffer.clear();
    }

    /// Takes in one fragment, calling no handler: the whole message and its header once its last
    /// fragment arrived (an unfragmented one at once, without a copy), with the same gap and
    /// session checks as the handler form. The message stays valid until the next call. A
    /// controlled poll answering [`Action::Abort`] for it must use the handler form instead (this
    /// form does not take the redelivered fragment back).
    pub fn assemble<'a>(&'a mut self, payload: &'a [u8], header: &Header) -> Option<(&'a [u8], Header)> {
        if header.flags() & UNFRAGMENTED == UNFRAGMENTED {
            return Some((payload, *header));
        }
        let whole = self.accept(payload, header)?;
        // Done with this message: a later fragment needs a new beginning (which clears the buffer).
        self.first = None;
        Some((&self.buffer, whole))
    }

    /// Takes in one fragment; returns the complete message's header once the last one arrived.
    fn accept(&mut self, payload: &[u8], header: &Header) -> Option<Header> {
        let start = header.position() - align(header.frame_length() as usize, FRAME_ALIGNMENT) as i64;
        if header.is_begin() {
            self.buffer.clear();
            self.buffer.extend_from_slice(payload);
            self.first = Some(*header);
            self.expected = header.position();
            return None;
        }
        let first = self.first?;
        if start != self.expected || header.session_id() != first.session_id() {
            self.reset();
            return None;
        }
        self.undo_len = self.buffer.len();
        self.buffer.extend_from_slice(payload);
        self.expected = header.position();
        if !header.is_end() {
            return None;
        }
        let mut whole = first;
        whole.rest.flags = UNFRAGMENTED;
        whole.frame_length = (HEADER_LEN + self.buffer.len()).min(i32::MAX as usize) as i32;
        whole.position = header.position();
        Some(whole)
    }
}

impl<F: FragmentHandler> FragmentHandler for FragmentAssembler<F> {
    fn on_fragment(&mut self, payload: &[u8], header: &Header) {
        if header.flags() & UNFRAGMENTED == UNFRAGMENTED {
            self.delegate.on_fragment(payload, header);
            return;
        }
        if let Some(whole) = self.accept(payload, header) {
            self.delegate.on_fragment(&self.buffer, &whole);
            self.reset();
        }
    }
}

impl<F: ControlledFragmentHandler> ControlledFragmentHandler for FragmentAssembler<F> {
    fn on_fragment(&mut self, payload: &[u8], header: &Header) -> Action {
        if header.flags() & UNFRAGMENTED == UNFRAGMENTED {
            return self.delegate.on_fragment(payload, header);
        }
        let Some(whole) = self.accept(payload, header) else { return Action::Continue };
        let action = self.delegate.on_fragment(&self.buffer, &whole);
        if action == Action::Abort {
            // The poll rewinds to the last fragment and delivers it again: undo its append.
            self.buffer.truncate(self.undo_len);
            self.expected = whole.position - align(header.frame_length() as usize, FRAME_ALIGNMENT) as i64;
        } else {
            self.reset();
        }
        action
    }
}

/// Lets `poll(&mut assembler, n)` keep the assembler (and its buffer) across polls.
impl<F: FragmentHandler> FragmentHandler for &mut FragmentAssembler<F> {
    #[inline]
    fn on_fragment(&mut self, payload: &[u8], header: &Header) {
        FragmentHandler::on_fragment(&mut **self, payload, header)
    }
}

/// Lets `controlled_poll(&mut assembler, n)` keep the assembler across polls.
impl<F: ControlledFragmentHandler> ControlledFragmentHandler for &mut FragmentAssembler<F> {
    #[inline]
    fn on_fragment(&mut self, payload: &[u8], header: &Header) -> Action {
        ControlledFragmentHandler::on_fragment(&mut **self, payload, header)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::layout::frame::{HeaderRest, BEGIN_FLAG, END_FLAG};

    /// Fragment `i` of a message made of `sizes` payloads, laid out from position 0.
    pub(crate) fn frames(sizes: &[usize], session: i32) -> Vec<(Vec<u8>, Header)> {
        let mut pos = 0i64;
        let n = sizes.len();
        sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let mut flags = 0;
                if i == 0 {
                    flags |= BEGIN_FLAG;
                }
                if i == n - 1 {
                    flags |= END_FLAG;
                }
                let frame = HEADER_LEN + len;
                let h = Header {
                    frame_length: frame as i32,
                    rest: HeaderRest {
                        flags,
                        frame_type: 1,
                        term_offset: pos as i32,
                        session_id: session,
                        ..Default::default()
                    },
                    position: pos + align(frame, 32) as i64,
                };
                pos = h.position;
                ((0..len).map(|b| (i * 31 + b) as u8).collect(), h)
            })
            .collect()
    }

    pub(crate) fn concat(parts: &[(Vec<u8>, Header)]) -> Vec<u8> {
        parts.iter().flat_map(|(p, _)| p.clone()).collect()
    }

    #[test]
    fn passes_unfragmented_messages_through() {
        let mut got = Vec::new();
        let mut a = FragmentAssembler::new(|m: &[u8], h: &Header| got.push((m.to_vec(), *h)));
        let f = frames(&[5], 1);
        a.on_fragment(&f[0].0, &f[0].1);
        drop(a);
        assert_eq!(got, vec![(f[0].0.clone(), f[0].1)]);
    }

    #[test]
    fn reassembles_two_and_four_fragments_with_the_last_position() {
        for sizes in [&[64usize, 10][..], &[64, 64, 64, 3]] {
            let mut got = Vec::new();
            let mut a = FragmentAssembler::new(|m: &[u8], h: &Header| got.push((m.to_vec(), *h)));
            let f = frames(sizes, 1);
            for (p, h) in &f {
                a.on_fragment(p, h);
            }
            drop(a);
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].0, concat(&f));
            let h = got[0].1;
            assert!(h.is_begin() && h.is_end());
            assert_eq!(h.position(), f.last().unwrap().1.position());
            assert_eq!(h.frame_length() as usize, HEADER_LEN + got[0].0.len());
        }
    }

    #[test]
    fn ignores_middle_or_end_without_begin_and_drops_on_gaps() {
        let mut count = 0;
        let mut a = FragmentAssembler::new(|_: &[u8], _: &Header| count += 1);
        let f = frames(&[64, 64, 8], 1);
        a.on_fragment(&f[1].0, &f[1].1);
        a.on_fragment(&f[2].0, &f[2].1);
        // BEGIN, then END skipping the middle: a gap.
        a.on_fragment(&f[0].0, &f[0].1);
        a.on_fragment(&f[2].0, &f[2].1);
        // BEGIN, then a fragment of another session at the right place.
        let g = frames(&[64, 64, 8], 2);
        a.on_fragment(&f[0].0, &f[0].1);
        a.on_fragment(&g[1].0, &g[1].1);
        a.on_fragment(&f[2].0, &f[2].1);
        drop(a);
        assert_eq!(count, 0);
    }

    #[test]
    fn two_messages_from_four_frames_and_buffer_reuse() {
        let mut got = Vec::new();
        let mut a = FragmentAssembler::with_capacity(|m: &[u8], _: &Header| got.push(m.to_vec()), 256);
        let f = frames(&[40, 2], 1);
        for (p, h) in f.iter().chain(f.iter()) {
            a.on_fragment(p, h);
        }
        assert!(a.buffer.capacity() >= 256);
        drop(a);
        assert_eq!(got, vec![concat(&f), concat(&f)]);
    }

    #[test]
    fn controlled_abort_on_the_whole_message_allows_redelivery() {
        let mut calls = 0;
        let mut a = FragmentAssembler::new(|_: &[u8], _: &Header| {
            calls += 1;
            if calls == 1 {
                Action::Abort
            } else {
                Action::Continue
            }
        });
        let f = frames(&[64, 64, 7], 1);
        let mut actions = Vec::new();
        for (p, h) in &f {
            actions.push(ControlledFragmentHandler::on_fragment(&mut a, p, h));
        }
        assert_eq!(actions, vec![Action::Continue, Action::Continue, Action::Abort]);
        // The poll redelivers the last fragment.
        let again = ControlledFragmentHandler::on_fragment(&mut a, &f[2].0, &f[2].1);
        assert_eq!(again, Action::Continue);
        assert_eq!(a.buffer.len(), 0, "reset after delivery");
        drop(a);
        assert_eq!(calls, 2);
    }

    #[test]
    fn assemble_without_a_handler_checks_gaps_and_sessions_like_the_handler_form() {
        let mut a = FragmentAssembler::new(());
        let f = frames(&[64, 64, 8], 1);
        let one = frames(&[5], 1);
        assert_eq!(a.assemble(&one[0].0, &one[0].1), Some((&one[0].0[..], one[0].1)), "unfragmented at once");
        // A gap (the middle is missing), then a fragment of another session at the right place.
        let g = frames(&[64, 64, 8], 2);
        for (i, (p, h)) in [&f[0], &f[2], &f[0], &g[1], &f[2]].into_iter().enumerate() {
            assert_eq!(a.assemble(p, h).map(|(m, _)| m.len()), None, "fragment {i}");
        }
        for (i, (p, h)) in f.iter().enumerate() {
            let got = a.assemble(p, h).map(|(m, h)| (m.to_vec(), h.position(), h.is_begin() && h.is_end()));
            let want = (i == 2).then(|| (concat(&f), f[2].1.position(), true));
            assert_eq!(got, want);
        }
        // A complete message is not continued by a repeated end fragment.
        assert_eq!(a.assemble(&f[2].0, &f[2].1), None);
    }
}
