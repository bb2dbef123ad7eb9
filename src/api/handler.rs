//! The traits `poll` and `controlled_poll` accept: closures, or a [`crate::FragmentAssembler`].

use crate::log::header::Header;
use crate::log::reader::Action;

/// Receives each fragment delivered by `Subscription::poll`.
pub trait FragmentHandler {
    /// One fragment: its payload (valid only during the call) and a copy of its header.
    fn on_fragment(&mut self, payload: &[u8], header: &Header);
}

impl<F: FnMut(&[u8], &Header)> FragmentHandler for F {
    #[inline(always)]
    fn on_fragment(&mut self, payload: &[u8], header: &Header) {
        self(payload, header)
    }
}

/// Receives each fragment delivered by `Subscription::controlled_poll` and steers the poll.
pub trait ControlledFragmentHandler {
    /// One fragment; the returned [`Action`] decides whether it is consumed and what comes next.
    fn on_fragment(&mut self, payload: &[u8], header: &Header) -> Action;
}

impl<F: FnMut(&[u8], &Header) -> Action> ControlledFragmentHandler for F {
    #[inline(always)]
    fn on_fragment(&mut self, payload: &[u8], header: &Header) -> Action {
        self(payload, header)
    }
}
