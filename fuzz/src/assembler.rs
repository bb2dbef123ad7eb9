//! Fuzz target `assembler`: `FragmentAssembler` over arbitrary fragment sequences against a
//! reference model.

use crate::input::{message_bytes, Input, STREAM};
use shmlog::__fuzz::frame::{
    HeaderRest, BEGIN_FLAG, CURRENT_VERSION, END_FLAG, FRAME_ALIGNMENT, HEADER_LEN, TYPE_DATA, UNFRAGMENTED,
};
use shmlog::__fuzz::{align, header, header_rest};
use shmlog::{Action, ControlledFragmentHandler, FragmentAssembler, FragmentHandler, Header};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

type Delivered = Rc<RefCell<Vec<(Vec<u8>, Header)>>>;

/// A fragment the harness feeds to the assembler.
#[derive(Clone, Debug)]
struct Fragment {
    payload: Vec<u8>,
    header: Header,
}

impl Fragment {
    fn start(&self) -> i64 {
        self.header.position() - align(self.header.frame_length() as usize, FRAME_ALIGNMENT) as i64
    }

    fn unfragmented(&self) -> bool {
        self.header.flags() & UNFRAGMENTED == UNFRAGMENTED
    }
}

/// Reference model: a message is delivered when an END fragment closes a chain of fragmented
/// frames going back, contiguous and of one session, to a BEGIN with no END in between.
/// Unfragmented frames pass through and never take part in a chain.
#[derive(Clone, Default)]
struct Reference {
    chain: Vec<Fragment>,
}

impl Reference {
    /// What the assembler must deliver for `f`: its payload and header.
    fn expect(&self, f: &Fragment) -> Option<(Vec<u8>, Header)> {
        if f.unfragmented() {
            return Some((f.payload.clone(), f.header));
        }
        if !f.header.is_end() || f.header.is_begin() {
            return None;
        }
        let mut need = f.start();
        let mut parts = vec![f];
        for g in self.chain.iter().rev() {
            if g.header.position() != need
                || g.header.session_id() != f.header.session_id()
                || g.header.is_end()
            {
                return None;
            }
            parts.push(g);
            if g.header.is_begin() {
                let payload: Vec<u8> = parts.iter().rev().flat_map(|p| p.payload.iter().copied()).collect();
                let mut rest = header_rest(&g.header);
                rest.flags = UNFRAGMENTED;
                let frame_length = (HEADER_LEN + payload.len()).min(i32::MAX as usize) as i32;
                return Some((payload, header(frame_length, rest, f.header.position())));
            }
            need = g.start();
        }
        None
    }

    /// The fragment was consumed (not aborted).
    fn take(&mut self, f: &Fragment) {
        if !f.unfragmented() {
            self.chain.push(f.clone());
            if self.chain.len() > 512 {
                self.chain.drain(..256);
            }
        }
    }
}

/// Fuzz target `assembler`: `FragmentAssembler` (plain and controlled) over arbitrary fragment
/// sequences — flags, sizes, positions, sessions — with aborted deliveries redelivered as a poll
/// does.
///
/// Properties: no panic; it delivers exactly what the reference model delivers (bytes and header),
/// that is only messages whose fragments were contiguous BEGIN..END of one session; the controlled
/// handler's action is passed back for deliveries and `Continue` otherwise.
pub fn assembler(data: &[u8]) {
    let mut input = Input::new(data);
    let controlled = input.bool();
    let got: Delivered = Rc::default();
    let actions: Rc<RefCell<VecDeque<Action>>> = Rc::default();
    let sink = got.clone();
    let plain_sink = got.clone();
    let queue = actions.clone();
    let mut controlled_assembler = FragmentAssembler::new(move |m: &[u8], h: &Header| {
        sink.borrow_mut().push((m.to_vec(), *h));
        queue.borrow_mut().pop_front().unwrap_or(Action::Continue)
    });
    let mut plain_assembler = FragmentAssembler::with_capacity(
        move |m: &[u8], h: &Header| plain_sink.borrow_mut().push((m.to_vec(), *h)),
        input.below(256),
    );
    let mut reference = Reference::default();
    let mut next_start: i64 = FRAME_ALIGNMENT as i64 * input.below(64) as i64;
    let mut session = 0;
    let mut frames = 0;
    while !input.is_empty() && frames < 512 {
        frames += 1;
        let ctl = input.byte();
        let flags = match ctl & 7 {
            0 => BEGIN_FLAG,
            1 | 2 => 0,
            3 => END_FLAG,
            4 | 5 => UNFRAGMENTED,
            6 => BEGIN_FLAG | (input.byte() & !UNFRAGMENTED),
            _ => input.byte(),
        };
        if ctl & 0x08 != 0 {
            session = input.below(3) as i32;
        }
        if ctl & 0x10 != 0 {
            next_start = FRAME_ALIGNMENT as i64 * input.u16() as i64;
        }
        let len = match ctl >> 5 {
            0..=3 => input.below(80),
            4 | 5 => 0,
            _ => input.below(3000),
        };
        let frame_length = HEADER_LEN + len;
        let position = next_start + align(frame_length, FRAME_ALIGNMENT) as i64;
        let f = Fragment {
            payload: message_bytes(frames as u64, len),
            header: header(
                frame_length as i32,
                HeaderRest {
                    version: CURRENT_VERSION,
                    flags,
                    frame_type: TYPE_DATA,
                    term_offset: (next_start & 0xFFFF) as i32,
                    session_id: session,
                    stream_id: STREAM,
                    term_id: (next_start >> 16) as i32,
                    reserved_value: frames as i64,
                },
                position,
            ),
        };
        next_start = position;
        if !controlled {
            let want = reference.expect(&f);
            FragmentHandler::on_fragment(&mut plain_assembler, &f.payload, &f.header);
            reference.take(&f);
            check_delivery(&got, want);
            continue;
        }
        // A controlled poll redelivers an aborted fragment; give up aborting after a few tries.
        for attempt in 0.. {
            let action = if attempt < 3 { input.action() } else { Action::Continue };
            actions.borrow_mut().clear();
            actions.borrow_mut().push_back(action);
            let want = reference.expect(&f);
            let delivered = want.is_some();
            let returned =
                ControlledFragmentHandler::on_fragment(&mut controlled_assembler, &f.payload, &f.header);
            check_delivery(&got, want);
            if delivered {
                assert_eq!(returned, action, "the assembler did not pass the handler's action back");
            } else {
                assert_eq!(returned, Action::Continue, "a fragment that completes nothing must continue");
            }
            if returned != Action::Abort {
                reference.take(&f);
                break;
            }
        }
    }
}

fn check_delivery(got: &Delivered, want: Option<(Vec<u8>, Header)>) {
    let mut got = got.borrow_mut();
    match (got.pop(), want) {
        (None, None) => {}
        (Some((bytes, h)), Some((want_bytes, want_h))) => {
            assert!(
                bytes == want_bytes,
                "delivered bytes differ from the reference ({} vs {})",
                bytes.len(),
                want_bytes.len()
            );
            assert_eq!(h, want_h, "delivered header differs from the reference");
        }
        (Some((_, h)), None) => {
            panic!("delivered a message ending at {} that the reference does not", h.position())
        }
        (None, Some((_, h))) => {
            panic!("dropped a message ending at {} that the reference delivers", h.position())
        }
    }
    assert!(got.is_empty(), "more than one delivery for one fragment");
}
