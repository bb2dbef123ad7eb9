//! shmlog: Aeron-style log buffers in shared memory, with no media driver.
//!
//! (Crate documentation is completed in the api layer commit.)

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_debug_implementations)]

pub(crate) mod error;
pub(crate) mod layout;
pub(crate) mod log;
pub(crate) mod region;
pub(crate) mod sync;

pub use error::{Error, OfferError};
pub use layout::frame::{BEGIN_FLAG, END_FLAG, UNFRAGMENTED};
pub use log::header::Header;
pub use log::reader::Action;
