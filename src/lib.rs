//! shmlog: Aeron-style log buffers in shared memory, with no media driver.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, missing_debug_implementations)]

pub(crate) mod error;
pub(crate) mod layout;
pub(crate) mod log;
pub(crate) mod region;
pub(crate) mod sync;

#[cfg(not(shmlog_loom))]
pub(crate) mod api;
#[cfg(not(shmlog_loom))]
pub(crate) mod stream;
#[cfg(not(shmlog_loom))]
pub(crate) mod sys;

pub use error::{Error, OfferError};
pub use layout::frame::{BEGIN_FLAG, END_FLAG, UNFRAGMENTED};
pub use log::header::Header;
pub use log::reader::Action;

#[cfg(not(shmlog_loom))]
pub use api::{
    assembler::FragmentAssembler,
    handler::{ControlledFragmentHandler, FragmentHandler},
    idle::{Backoff, BusySpin, IdleStrategy, NoOp, Sleeping, Yielding},
    publication::{Claim, Publication, PublicationBuilder, DEFAULT_TERM_LENGTH},
    subscription::{JoinAt, Subscription, SubscriptionBuilder},
};
#[cfg(not(shmlog_loom))]
pub use stream::dir::default_dir;
