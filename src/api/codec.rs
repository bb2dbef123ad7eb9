//! How typed messages become bytes and back: the [`Codec`] trait, [`Bytes`] (no conversion),
//! [`PodCodec`] (plain-old-data types as their own bytes) and, with the `serde` feature,
//! [`Postcard`] (any serde type).

use crate::region::pod::{self, Pod};
use std::convert::Infallible;
use std::fmt;

/// Turns values of `T` into message bytes and back.
pub trait Codec<T> {
    /// Why a value could not be encoded or a message decoded.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Appends the encoding of `value` to `out`.
    fn encode(&self, value: &T, out: &mut Vec<u8>) -> Result<(), Self::Error>;

    /// The value a message holds.
    fn decode(&self, bytes: &[u8]) -> Result<T, Self::Error>;

    /// Calls `f` with the encoding of `value`; `scratch` is a buffer the codec may use. Codecs
    /// whose values already are bytes hand them over without a copy ([`PodCodec`]).
    fn with_encoded<R>(
        &self,
        value: &T,
        scratch: &mut Vec<u8>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, Self::Error> {
        scratch.clear();
        self.encode(value, scratch)?;
        Ok(f(scratch))
    }
}

/// Messages as bytes: `Vec<u8>` in, `Vec<u8>` out.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bytes;

impl Codec<Vec<u8>> for Bytes {
    type Error = Infallible;

    fn encode(&self, value: &Vec<u8>, out: &mut Vec<u8>) -> Result<(), Infallible> {
        out.extend_from_slice(value);
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<Vec<u8>, Infallible> {
        Ok(bytes.to_vec())
    }

    fn with_encoded<R>(
        &self,
        value: &Vec<u8>,
        _: &mut Vec<u8>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, Infallible> {
        Ok(f(value))
    }
}

/// Plain-old-data values ([`Pod`]) as their own bytes: sent straight from the value into the
/// log, received by one copy out of it into the value (never a reference into the log, which
/// another process writes).
#[derive(Clone, Copy, Debug, Default)]
pub struct PodCodec;

/// A message whose length is not the size of the type it should hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrongSize {
    /// The message's length.
    pub len: usize,
    /// The size of the type.
    pub expected: usize,
}

impl fmt::Display for WrongSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a message of {} bytes cannot hold a value of {} bytes", self.len, self.expected)
    }
}

impl std::error::Error for WrongSize {}

impl<T: Pod> Codec<T> for PodCodec {
    type Error = WrongSize;

    fn encode(&self, value: &T, out: &mut Vec<u8>) -> Result<(), WrongSize> {
        out.extend_from_slice(pod::as_bytes(value));
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<T, WrongSize> {
        pod::read(bytes).ok_or(WrongSize { len: bytes.len(), expected: std::mem::size_of::<T>() })
    }

    fn with_encoded<R>(
        &self,
        value: &T,
        _: &mut Vec<u8>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, WrongSize> {
        Ok(f(pod::as_bytes(value)))
    }
}

/// Any serde type, in postcard's compact format (feature `serde`).
#[cfg(feature = "serde")]
#[derive(Clone, Copy, Debug, Default)]
pub struct Postcard;

#[cfg(feature = "serde")]
impl<T: serde::Serialize + serde::de::DeserializeOwned> Codec<T> for Postcard {
    type Error = postcard::Error;

    fn encode(&self, value: &T, out: &mut Vec<u8>) -> Result<(), postcard::Error> {
        // Straight into `out` (a `Vec` is an `io::Write` that appends).
        postcard::to_io(value, out).map(drop)
    }

    fn decode(&self, bytes: &[u8]) -> Result<T, postcard::Error> {
        postcard::from_bytes(bytes)
    }
}
