//! The in bridge: an Aeron UDP subscription whose messages are published into the local stream.
//!
//! This file is the bridge's loop over Aeron: the subscription, its images polled one by one,
//! and the local stream's publication. What it does with each fragment is the duty cycle
//! apart from Aeron, in `inbound/`:
//! - `cycle.rs`: [`InCore`], which the unit tests and the fuzz target `bridge_in` drive
//!   without Aeron;
//! - `sources.rs`: which images carry which far out bridge (a source), across lost drivers;
//!   which frames are new and which were carried already; when an image may be polled;
//! - `assembly.rs`: each source's fragmented message;
//! - `accounts.rs`: counters, losses, gap checks and the resume position.
//!
//! Everything in a fragment comes from the network and is checked before use: the reserved
//! value (the source position, with checked arithmetic: a position that cannot be one is counted
//! in `bad_positions` and carried as a fresh start), the flags (a BEGIN inside a message drops the
//! unfinished one, counted), and the length of what is assembled (at most the local stream's
//! longest message: a longer one is dropped and counted). Each source assembles its own message,
//! so images that interleave fragments lose nothing.

mod accounts;
mod assembly;
mod cycle;
mod sources;

pub(crate) use cycle::InCore;
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub use cycle::{Fragment, Next};
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub use sources::ImageInfo;
// What only the fuzz target reaches (through `crate::__fuzz`).
#[cfg(shmlog_fuzz)]
pub use {
    accounts::source_span,
    assembly::{BEGIN, END},
    cycle::{Offer, MAX_ASSEMBLIES},
    sources::MAX_RETIRED,
};

use crate::builder::{run_until, BackPressure, BridgeBuilder, BridgeError, Link, ResumeFile, Status};
use crate::client::Client;
use crate::status::{BridgeDirection, BridgeInfo};
use aeron_rs::concurrent::atomic_buffer::AtomicBuffer;
use aeron_rs::concurrent::logbuffer::header::Header;
use aeron_rs::image::ControlledPollAction;
use aeron_rs::subscription::Subscription;
use aeron_rs::utils::errors::AeronError;
use aeron_rs::utils::types::Index;
use shmlog::{Publication, Publish};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Fragments taken from the channel per duty cycle.
const FRAGMENT_LIMIT: i32 = 64;

/// Carries an Aeron UDP channel into a local stream. Drive it with [`BridgeIn::do_work`] in
/// your own loop, or hand it a thread with [`BridgeIn::run`].
pub struct BridgeIn {
    target: Target,
    link: Link,
    subscription: Option<Arc<Mutex<Subscription>>>,
    policy: BackPressure,
    status: Status,
    core: InCore,
    /// The subscription's images, refilled each cycle.
    images: Vec<ImageInfo>,
    /// Where the next cycle starts polling the images (round robin).
    next_image: usize,
}

/// The local stream's writer: an exclusive publication, or one of a concurrent log's writers
/// ([`BridgeBuilder::concurrent`]), chosen when the bridge opens.
type Target = Box<dyn Publish + Send>;

impl BridgeBuilder {
    /// Starts a bridge from the channel into the local stream, creating its publication.
    pub fn open_in(self) -> Result<BridgeIn, BridgeError> {
        BridgeIn::open(self)
    }
}

impl BridgeIn {
    pub(super) fn open(b: BridgeBuilder) -> Result<BridgeIn, BridgeError> {
        b.validate()?;
        let link = Link::open(&b)?;
        let (target, status) = open_local(&b, &link.aeron_dir)?;
        let core = InCore::new(target.max_message_len());
        let mut bridge = BridgeIn {
            target,
            link,
            subscription: None,
            policy: b.back_pressure,
            status,
            core,
            images: Vec::new(),
            next_image: 0,
        };
        bridge.link.ensure(&mut bridge.subscription, Instant::now(), Client::add_subscription)?;
        bridge.status.write(Instant::now());
        bridge.status.retire_predecessors();
        Ok(bridge)
    }

    /// One duty cycle: tends the Aeron client, retries a held message, then carries up to 64
    /// fragments. Returns the work done (0: idle).
    pub fn do_work(&mut self) -> usize {
        let now = Instant::now();
        let (subscription, core) = (&mut self.subscription, &mut self.core);
        self.link.tend_for(now, &mut self.status, |_| {
            *subscription = None;
            // The next subscription's images are new ones: their first messages are checked.
            core.sync_images(&[]);
        });
        if let Err(e) = self.link.ensure(&mut self.subscription, now, Client::add_subscription) {
            eprintln!("shmlog bridge in: {e}");
        }
        let work = match &self.subscription {
            Some(s) => {
                let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
                self.images.clear();
                self.images.extend(s.images().iter().map(|i| ImageInfo {
                    session: i.session_id(),
                    correlation: i.correlation_id(),
                    initial_term_id: i.initial_term_id(),
                    term_length: i.term_buffer_length(),
                    join_position: i.join_position(),
                }));
                self.core.sync_images(&self.images);
                self.next_image = self.next_image.wrapping_add(1);
                let Status { info, resume, .. } = &mut self.status;
                let (target, policy, core, first) =
                    (&mut self.target, self.policy, &mut self.core, self.next_image);
                let n = carry(&mut s, target, policy, core, first, info, resume);
                self.status.info.connected = s.image_count() > 0;
                n
            }
            None => 0,
        };
        self.status.end_cycle(now);
        work
    }

    /// Runs [`BridgeIn::do_work`] until `stop` is set, backing off (spin, yield, sleeps of up
    /// to 1 ms) while there is nothing to carry: an Aeron subscription has no doorbell.
    pub fn run(&mut self, stop: &AtomicBool) {
        self.run_with(stop, &mut shmlog::Backoff::default());
    }

    /// [`BridgeIn::run`] with another idle strategy, e.g. [`shmlog::Yielding`] or
    /// [`shmlog::BusySpin`] where a core can be spent on lower latency.
    pub fn run_with(&mut self, stop: &AtomicBool, idle: &mut impl shmlog::IdleStrategy) {
        run_until(stop, idle, || self.do_work());
    }

    /// The bridge's counters and losses so far.
    pub fn status(&self) -> &BridgeInfo {
        &self.status.info
    }

    /// Whether a far out bridge is there (the subscription has an image).
    pub fn is_connected(&self) -> bool {
        self.status.info.connected
    }
}

impl std::fmt::Debug for BridgeIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeIn").field("status", &self.status.info).finish_non_exhaustive()
    }
}

/// The local half of an in bridge: its status and resume files (made with the stream's
/// directory if this bridge is its first user), a dead predecessor's resume position taken
/// over, and the local stream's publication.
fn open_local(b: &BridgeBuilder, aeron_dir: &std::path::Path) -> Result<(Target, Status), BridgeError> {
    let mut status = Status::new(b, BridgeDirection::In, aeron_dir)?;
    // A predecessor killed mid-stream left where the next message should start: a gap after
    // this restart is reported against it. It goes into this bridge's own resume file at once,
    // so that a successor still has it if this bridge dies before it carries a message.
    if let Some((position, _)) = status.find_predecessors()? {
        status.info.resume_position = position;
        status.resume.save(position, 0);
    }
    let builder = || {
        let p = Publication::builder(b.stream.clone()).dir(b.dir.clone());
        match b.term_length {
            Some(t) => p.term_length(t),
            None => p,
        }
    };
    let target: Target =
        if b.concurrent { Box::new(builder().open_concurrent()?) } else { Box::new(builder().create()?) };
    Ok((target, status))
}

/// Offers a held message again, then polls up to [`FRAGMENT_LIMIT`] fragments into `core`,
/// image by image from the `first`-th (modulo their number), each only when the core lets it
/// be polled (an image that starts past a hole in its source waits for the older ones).
fn carry(
    sub: &mut Subscription,
    target: &mut Target,
    policy: BackPressure,
    core: &mut InCore,
    first: usize,
    info: &mut BridgeInfo,
    resume: &ResumeFile,
) -> usize {
    let mut offer = |m: &[u8]| target.offer(m);
    if !core.retry_held(&mut offer, info, resume) {
        return 0;
    }
    let count = sub.image_count();
    let (mut left, mut work) = (FRAGMENT_LIMIT, 0);
    for k in 0..count {
        let i = first.wrapping_add(k) % count;
        if !core.may_poll(i) {
            continue;
        }
        let Some(image) = sub.image_by_index(i) else { continue };
        let n = image.controlled_poll(
            |buf: &AtomicBuffer, offset: Index, length: Index, header: &Header| {
                let fragment = Fragment {
                    flags: header.flags(),
                    reserved: header.reserved_value(),
                    position: header.position(),
                    payload: fragment_bytes(buf, offset, length),
                };
                Ok::<_, AeronError>(match core.on_fragment(i, fragment, &mut offer, policy, info, resume) {
                    Next::Continue => ControlledPollAction::Continue,
                    Next::Break => ControlledPollAction::Break,
                })
            },
            left,
        );
        let n = n.max(0);
        core.polled(i, n as usize);
        (left, work) = (left - n, work + n as usize);
        if left <= 0 || core.is_holding() {
            break;
        }
    }
    work
}

/// The payload of a fragment in the driver's term buffer, if its bounds (from the frame header
/// the driver wrote) lie inside the term.
///
/// The slice covers this fragment only, and it is copied out at once (into the assembly or the
/// local stream), never kept. While it lives the Aeron protocol keeps the driver off these
/// bytes: the driver wrote them before it published the frame's length (which is how the poll
/// found the frame), does not write a frame that is already there again (a retransmitted
/// duplicate is dropped), and cleans a term for reuse only once every subscriber's position has
/// passed it; this subscription's position moves past the fragment only after the handler
/// returns. A process that writes the driver's files itself (it needs the driver's user) could
/// change the bytes meanwhile: the copy is then torn, as any copy of shared memory can be, and
/// nothing in it is trusted.
fn fragment_bytes(buf: &AtomicBuffer, offset: Index, length: Index) -> Option<&[u8]> {
    let fits = offset >= 0 && length >= 0 && offset.checked_add(length).is_some_and(|e| e <= buf.capacity());
    fits.then(|| buf.as_sub_slice(offset, length))
}

#[cfg(test)]
mod tests {
    use super::assembly::{BEGIN, END};
    use super::cycle::Offer;
    use super::*;
    use crate::status::{self as bridge_status, Loss, LossCause};

    /// Offers one whole message of image 0 (session `session`, joined at 0) at source position
    /// `start`, its frame ending at `position`, into `offer`.
    #[allow(clippy::too_many_arguments)]
    fn one(
        core: &mut InCore,
        offer: &mut Offer<'_>,
        session: i32,
        start: i64,
        position: i64,
        payload: &[u8],
        info: &mut BridgeInfo,
        resume: &ResumeFile,
    ) -> Next {
        let image = ImageInfo {
            session,
            correlation: session.into(),
            initial_term_id: 0,
            term_length: 1 << 16,
            join_position: 0,
        };
        core.sync_images(&[image]);
        let f = Fragment {
            flags: BEGIN | END,
            reserved: crate::wire::encode(start, 0),
            position,
            payload: Some(payload),
        };
        core.on_fragment(0, f, offer, BackPressure::Hold, info, resume)
    }

    /// Issue 23: an in bridge that is the first user of its directory (the stream and the
    /// directory do not exist yet) keeps its resume file, so a successor started after a
    /// SIGKILL reports the gap. The bridge's local half runs here without Aeron; its "death"
    /// leaves its files as a SIGKILL would, under a pid that is gone.
    #[test]
    fn the_first_user_of_its_directory_leaves_its_successor_a_resume_position() {
        let top = crate::testing::TempDir::new("bridge-in-first");
        let dir = top.path().join("not-made-yet");
        let b = BridgeBuilder::new("s").dir(&dir).channel("aeron:udp?endpoint=127.0.0.1:1");
        let aeron_dir = std::path::Path::new("/nowhere");
        let (mut target, mut status) = open_local(&b, aeron_dir).unwrap();
        let reader = shmlog::Subscription::builder("s").dir(&dir).open().unwrap();
        let mut core = InCore::new(target.max_message_len());
        let mut offer = |m: &[u8]| target.offer(m);
        let Status { info, resume, .. } = &mut status;
        let next = one(&mut core, &mut offer, 7, 0, 160, &[5; 100], info, resume);
        assert_eq!((next, info.messages), (Next::Continue, 1));
        status.write(Instant::now());
        // Killed: no destructor runs; its files stay, named by a pid that is gone.
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead = gone.id();
        gone.wait().unwrap();
        let me = std::process::id();
        for (from, to) in [
            (status.info.path(&dir), bridge_status::status_path(&dir, "s", BridgeDirection::In, dead)),
            (
                bridge_status::resume_path(&dir, "s", BridgeDirection::In, me),
                bridge_status::resume_path(&dir, "s", BridgeDirection::In, dead),
            ),
        ] {
            std::fs::rename(from, to).unwrap();
        }
        std::mem::forget(status);
        drop((target, reader));
        let (_target, status) = open_local(&b, aeron_dir).unwrap();
        assert_eq!(status.info.resume_position, 160, "the message ended at 0 + 32 + 100, aligned");
        let own = bridge_status::resume_path(&dir, "s", BridgeDirection::In, me);
        assert_eq!(bridge_status::read_resume(&own), Some((160, 0)), "kept in its own resume file at once");
        let mut info = status.info.clone();
        let mut core = InCore::new(4096);
        let mut offer = |_: &[u8]| Ok(0);
        one(&mut core, &mut offer, 8, 4096, 64, &[0; 8], &mut info, &status.resume);
        assert_eq!(info.losses, vec![Loss { from: 160, to: 4096, messages: None, cause: LossCause::Gap }]);
    }

    /// `BridgeBuilder::term_length` sets the terms of the local stream's sessions the in bridge
    /// creates (the issue-23 test needs small ones far from the source).
    #[test]
    fn the_local_stream_takes_the_term_length_asked_for() {
        let dir = crate::testing::TempDir::new("bridge-in-term");
        for (term, want) in [(None, shmlog::DEFAULT_TERM_LENGTH), (Some(64 << 10), 64 << 10)] {
            let mut b = BridgeBuilder::new("s").dir(dir.path()).channel("aeron:udp?endpoint=127.0.0.1:1");
            if let Some(t) = term {
                b = b.term_length(t);
            }
            let (target, _status) = open_local(&b, std::path::Path::new("/nowhere")).unwrap();
            assert_eq!(target.term_length(), want);
        }
    }

    /// With `concurrent(true)` the in bridge is one of the local stream's writers: a
    /// `ConcurrentPublication` of this process writes the same stream beside it, and a reader
    /// gets both writers' messages from one session.
    #[test]
    fn a_concurrent_in_bridge_shares_its_stream_with_other_writers() {
        let dir = crate::testing::TempDir::new("bridge-in-concurrent");
        let b = BridgeBuilder::new("s")
            .dir(dir.path())
            .channel("aeron:udp?endpoint=127.0.0.1:1")
            .concurrent(true);
        let (mut target, _status) = open_local(&b, std::path::Path::new("/nowhere")).unwrap();
        let mut other = Publication::builder("s").dir(dir.path()).open_concurrent().unwrap();
        assert_eq!(target.session_id(), other.session_id(), "one log, one session");
        let mut reader = shmlog::Subscription::builder("s").dir(dir.path()).open().unwrap();
        target.wait_connected(std::time::Duration::from_secs(5)).unwrap();
        target.offer(b"bridged").unwrap();
        other.offer(b"local").unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while got.len() < 2 && Instant::now() < deadline {
            reader.poll(|m: &[u8], _: &shmlog::Header| got.push(m.to_vec()), 8);
        }
        assert_eq!(got, [b"bridged".to_vec(), b"local".to_vec()]);
    }
}
