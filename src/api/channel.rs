//! Whole messages as owned values, one at a time: [`Sender`] over a publication and [`Receiver`]
//! over a subscription (live, or a journal's persistent one: any [`MessageSource`]), typed
//! through a [`Codec`]. For code that today forwards messages into a channel and calls
//! `recv_timeout`: the receiver sleeps on the stream's doorbell, so it costs no CPU while idle.

use super::assembler::FragmentAssembler;
use super::codec::{Bytes, Codec};
use super::publication::Publication;
use super::publish::Publish;
use super::source::MessageSource;
use super::subscription::Subscription;
use crate::error::{Error, OfferError};
use crate::log::header::Header;
use crate::stream::loss::Loss;
use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

/// Why [`Sender::send`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum SendError<E> {
    /// The publication refused the message (back pressure, no reader, too large, ...).
    Offer(OfferError),
    /// The codec could not encode the value.
    Encode(E),
}

impl<E: fmt::Display> fmt::Display for SendError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Offer(e) => write!(f, "offer: {e}"),
            SendError::Encode(e) => write!(f, "encode: {e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for SendError<E> {}

/// Why [`Receiver::recv_timeout`] returned no value.
#[derive(Debug)]
#[non_exhaustive]
pub enum RecvError<E> {
    /// Nothing arrived in time; the session goes on.
    Timeout,
    /// The session is over (its publisher closed it or died) and everything it sent was
    /// received; said once per session. A new publisher's session is joined by itself:
    /// receiving again waits for it (sleeping).
    Closed,
    /// A message arrived that the codec could not decode (it is dropped; the next one follows).
    Decode(E),
    /// Messages were missed before the next one (see [`crate::Loss`]); reported once, in order.
    Lost(Loss),
    /// The session's next frame failed validation (corrupt or foreign data, see
    /// [`Subscription::fault`]): nothing more of this session will come. Said once; receiving
    /// again waits (never spins) until the session closes (`Closed`, after a `Lost` for what was
    /// committed past the fault, once its publisher is gone) or a new session starts.
    Fault(&'static str),
    /// Reading the journal failed (a persistent subscription's fall-back: a file it could not
    /// open or read). Nothing was taken: receiving again tries again.
    Journal(Error),
}

/// Equal if the same outcome; two journal errors are equal if they say the same.
impl<E: PartialEq> PartialEq for RecvError<E> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Timeout, Self::Timeout) | (Self::Closed, Self::Closed) => true,
            (Self::Decode(a), Self::Decode(b)) => a == b,
            (Self::Lost(a), Self::Lost(b)) => a == b,
            (Self::Fault(a), Self::Fault(b)) => a == b,
            (Self::Journal(a), Self::Journal(b)) => a.to_string() == b.to_string(),
            _ => false,
        }
    }
}

impl<E: Eq> Eq for RecvError<E> {}

impl<E: fmt::Display> fmt::Display for RecvError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvError::Timeout => f.write_str("timed out"),
            RecvError::Closed => f.write_str("the session is closed"),
            RecvError::Decode(e) => write!(f, "decode: {e}"),
            RecvError::Lost(loss) => write!(f, "lost: {loss}"),
            RecvError::Fault(why) => write!(f, "the stream is damaged: {why}"),
            RecvError::Journal(e) => write!(f, "journal: {e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for RecvError<E> {}

/// Sends values of `T` as whole messages through a publication: an exclusive [`Publication`]
/// (the default) or a [`crate::ConcurrentPublication`], one of several writers of the stream
/// (any [`Publish`]).
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use shmlog::{PodCodec, Publication, Sender};
/// let mut tx = Sender::new(Publication::builder("prices").create()?, PodCodec);
/// tx.send_timeout(&[101.5f64, 101.7], std::time::Duration::from_secs(1))?;
/// // One of several writers, in this process or others:
/// let mut tx = Sender::new(Publication::builder("quotes").open_concurrent()?, PodCodec);
/// tx.send_timeout(&[99.0f64], std::time::Duration::from_secs(1))?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Sender<T, C = Bytes, P = Publication> {
    publication: P,
    codec: C,
    scratch: Vec<u8>,
    _values: PhantomData<fn(&T)>,
}

impl<T, C: Codec<T>, P: Publish> Sender<T, C, P> {
    /// Sends through `publication`, encoding with `codec`.
    pub fn new(publication: P, codec: C) -> Self {
        Self { publication, codec, scratch: Vec::new(), _values: PhantomData }
    }

    /// Offers `value` once; returns the stream position after it.
    pub fn send(&mut self, value: &T) -> Result<i64, SendError<C::Error>> {
        let p = &mut self.publication;
        self.codec
            .with_encoded(value, &mut self.scratch, |bytes| p.offer(bytes))
            .map_err(SendError::Encode)?
            .map_err(SendError::Offer)
    }

    /// Offers `value`, sleeping while back-pressured (see [`Publication::offer_blocking`]).
    pub fn send_timeout(&mut self, value: &T, timeout: Duration) -> Result<i64, SendError<C::Error>> {
        let p = &mut self.publication;
        self.codec
            .with_encoded(value, &mut self.scratch, |bytes| p.offer_blocking(bytes, timeout))
            .map_err(SendError::Encode)?
            .map_err(SendError::Offer)
    }

    #[cfg(feature = "async")]
    pub(crate) fn codec(&self) -> &C {
        &self.codec
    }

    /// The publication underneath (position, readers, ...).
    pub fn publication(&mut self) -> &mut P {
        &mut self.publication
    }

    /// The publication back.
    pub fn into_publication(self) -> P {
        self.publication
    }
}

/// Receives whole messages from a [`Subscription`] as values of `T`, reassembling fragmented ones.
/// Over a `journal::PersistentSubscription` (any [`MessageSource`]) it receives the same way,
/// from the journal and the live stream in turn: its sessions never close (no `Closed`), a loss
/// is only what the journal no longer held, and a failed read of the journal is
/// [`RecvError::Journal`].
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use shmlog::{Bytes, Receiver, RecvError, Subscription};
/// use std::time::Duration;
/// let mut rx = Receiver::new(Subscription::builder("orders").open()?, Bytes);
/// loop {
///     match rx.recv_timeout(Duration::from_millis(500)) {
///         Ok(message) => println!("{} bytes", message.len()),
///         Err(RecvError::Timeout) => println!("quiet"),
///         Err(RecvError::Closed) => break,
///         Err(e) => eprintln!("{e}"),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Receiver<T = Vec<u8>, C: Codec<T> = Bytes, S: MessageSource = Subscription> {
    subscription: S,
    codec: C,
    /// The fragments of a message so far.
    assembler: FragmentAssembler,
    ready: VecDeque<Result<T, C::Error>>,
}

/// Messages taken per poll into the receiver's queue.
const BATCH: usize = 64;

/// A fragment handler that decodes whole messages with `codec` into `ready`, rebuilding fragmented
/// ones in `assembler` (a live receiver and an async replay share it): a message cut by a gap or
/// a session change is dropped, never spliced.
pub(crate) fn whole_messages<'a, T, C: Codec<T>>(
    codec: &'a C,
    assembler: &'a mut FragmentAssembler,
    ready: &'a mut VecDeque<Result<T, C::Error>>,
) -> impl FnMut(&[u8], &Header) + 'a {
    move |payload: &[u8], header: &Header| {
        if let Some((message, _)) = assembler.assemble(payload, header) {
            ready.push_back(codec.decode(message));
        }
    }
}

impl<T, C: Codec<T>, S: MessageSource> Receiver<T, C, S> {
    /// Receives from `subscription`, decoding with `codec`.
    pub fn new(subscription: S, codec: C) -> Self {
        Self { subscription, codec, assembler: FragmentAssembler::new(()), ready: VecDeque::new() }
    }

    /// The next message, waiting for it at most `timeout` (sleeping, not spinning).
    /// `Err(RecvError::Lost)` comes first if messages were missed before it (once per loss).
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<T, RecvError<C::Error>> {
        // Read the clock only once a wait is needed: a queued message costs no system call.
        let mut deadline: Option<Option<Instant>> = None;
        loop {
            if let Some(next) = self.ready.pop_front() {
                return next.map_err(RecvError::Decode);
            }
            // Sessions are joined only by polls that deliver nothing and by waits, so a loss
            // taken here lies after every message queued before and before every one polled next.
            if let Some(loss) = self.subscription.take_loss() {
                // A message begun before the loss is not finished after it.
                self.assembler.reset();
                return Err(RecvError::Lost(loss));
            }
            // Once per session, after its last message and its losses; the next receive waits
            // for the next session.
            if self.subscription.take_closed() {
                self.assembler.reset();
                return Err(RecvError::Closed);
            }
            match self.fill() {
                Ok(0) => {}
                Ok(_) => continue,
                Err(e) => return Err(RecvError::Journal(e)),
            }
            // A fault is news once: said here, then waits sleep until the session closes (its
            // publisher gone) or a new one starts.
            if let Some(why) = self.subscription.take_fault() {
                self.assembler.reset();
                return Err(RecvError::Fault(why));
            }
            if self.subscription.is_closed() {
                continue; // its losses first, then `Closed`
            }
            let now = Instant::now();
            let deadline = *deadline.get_or_insert_with(|| now.checked_add(timeout));
            let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
            if !self.subscription.wait_readable(left) {
                return Err(RecvError::Timeout);
            }
        }
    }

    /// The next message if one is there now.
    pub fn try_recv(&mut self) -> Result<T, RecvError<C::Error>> {
        self.recv_timeout(Duration::ZERO)
    }

    /// The next message, waiting as long as it takes; `Closed` when the session ends (once: the
    /// call after it waits for the next session).
    pub fn recv(&mut self) -> Result<T, RecvError<C::Error>> {
        self.recv_timeout(Duration::MAX)
    }

    /// Polls once, decoding whole messages into the queue; returns the fragments taken.
    fn fill(&mut self) -> Result<usize, Error> {
        let Self { subscription, codec, assembler, ready } = self;
        subscription.read(whole_messages(codec, assembler, ready), BATCH)
    }

    /// The source underneath (a persistent subscription's position, ...).
    pub fn source(&mut self) -> &mut S {
        &mut self.subscription
    }

    /// The source back (messages already taken from it stay in the receiver).
    pub fn into_source(self) -> S {
        self.subscription
    }
}

impl<T, C: Codec<T>> Receiver<T, C> {
    /// The subscription underneath (position, session, ...).
    pub fn subscription(&mut self) -> &mut Subscription {
        &mut self.subscription
    }

    /// The subscription back (messages already taken from it stay in the receiver).
    pub fn into_subscription(self) -> Subscription {
        self.subscription
    }
}

/// Every message until the session closes, each as it arrives (blocking); a message the codec
/// cannot decode comes as `Err(RecvError::Decode)`, missed messages as `Err(RecvError::Lost)`, a
/// damaged session once as `Err(RecvError::Fault)`. Iterating again after the end waits for the
/// next session and goes on with it (`loop { for m in &mut rx { .. } }` follows every session).
impl<T, C: Codec<T>, S: MessageSource> Iterator for Receiver<T, C, S> {
    type Item = Result<T, RecvError<C::Error>>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.recv() {
            Err(RecvError::Closed | RecvError::Timeout) => None,
            other => Some(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::assembler::tests::{concat, frames};

    fn decode_all(fragments: &[&(Vec<u8>, Header)]) -> Vec<Vec<u8>> {
        let (mut assembler, mut ready) = (FragmentAssembler::new(()), VecDeque::new());
        {
            let mut handler = whole_messages(&Bytes, &mut assembler, &mut ready);
            for (payload, header) in fragments {
                handler(payload, header);
            }
        }
        ready.into_iter().map(|m| m.unwrap()).collect()
    }

    #[test]
    fn whole_messages_never_splices_across_a_gap_or_a_session_change() {
        let (f, g, one) = (frames(&[64, 64, 8], 1), frames(&[64, 64, 8], 2), frames(&[5], 1));
        assert_eq!(decode_all(&[&one[0], &f[0], &f[1], &f[2]]), vec![one[0].0.clone(), concat(&f)]);
        // The middle is missing: a gap.
        assert_eq!(decode_all(&[&f[0], &f[2]]), Vec::<Vec<u8>>::new());
        // Another session's middle and end at the right places.
        assert_eq!(decode_all(&[&f[0], &g[1], &g[2]]), Vec::<Vec<u8>>::new());
        // An end without its beginning, then a whole message.
        assert_eq!(decode_all(&[&f[2], &one[0]]), vec![one[0].0.clone()]);
    }
}
