//! The in bridge's duty cycle apart from Aeron: [`InCore`] takes the subscription's image list
//! and fragments as plain values, and offers whole messages through a closure. The unit tests
//! and the fuzz target `bridge_in` drive it with no Aeron; `inbound.rs` feeds it from the
//! subscription.
//!
//! A fragment goes through three hands: the sources ledger (`sources.rs`: which source, new or
//! a duplicate, after a hole or not), the source's assembly (`assembly.rs`: whole messages),
//! and the accounts (`accounts.rs`: gap checks, counters, losses, the resume position), which
//! offer the message to the local stream.

use super::accounts::{Accounts, Check, Held};
use super::assembly::{Event, Why, BEGIN, END};
use super::sources::{Arrival, ImageInfo, Sources};
use crate::builder::{BackPressure, ResumeFile};
use crate::status::BridgeInfo;

/// Sources whose message is in assembly at once, each at most the local stream's longest
/// message. One more evicts the least recently used one's message, which is dropped and
/// counted. A deployment has one source per far out bridge.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const MAX_ASSEMBLIES: usize = 16;

/// One fragment as the in bridge takes it from an Aeron image: its payload is `None` when its
/// bounds did not check out.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct Fragment<'a> {
    /// Aeron's fragment flags (BEGIN, END).
    pub flags: u8,
    /// The frame's reserved value (the out bridge's source position and marks).
    pub reserved: i64,
    /// The image's position at the end of the frame (Aeron's `Header::position`).
    pub position: i64,
    /// The payload.
    pub payload: Option<&'a [u8]>,
}

/// What the poll does after a fragment (both consume it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub enum Next {
    /// Go on polling.
    Continue,
    /// The local stream pushed back and the message is held: poll no further this cycle.
    Break,
}

/// The local stream's offer, as the core calls it.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub type Offer<'a> = dyn FnMut(&[u8]) -> Result<i64, shmlog::OfferError> + 'a;

/// The in bridge's duty cycle apart from Aeron: sources and their images, assembly, gap checks,
/// offers into the local stream, and the accounts of what was carried and lost.
pub(crate) struct InCore {
    /// The local stream's longest message: no assembly grows beyond it.
    max_message_len: usize,
    sources: Sources,
    /// A message the local stream pushed back (policy `Hold`).
    held: Option<Held>,
    accounts: Accounts,
}

impl InCore {
    pub(crate) fn new(max_message_len: usize) -> Self {
        InCore { max_message_len, sources: Sources::default(), held: None, accounts: Accounts::default() }
    }

    /// Takes the subscription's image list, before a poll (see [`Sources::sync`]).
    pub(crate) fn sync_images(&mut self, list: &[ImageInfo]) {
        self.sources.sync(list);
    }

    /// Whether image `i` of the list may be polled now (see [`Sources::may_poll`]).
    pub(crate) fn may_poll(&self, i: usize) -> bool {
        self.sources.may_poll(i)
    }

    /// Image `i` was polled and gave `fragments`.
    pub(crate) fn polled(&mut self, i: usize, fragments: usize) {
        self.sources.polled(i, fragments);
    }

    /// Offers the held message again; false while the local stream still pushes back (then the
    /// subscription must not be polled: the message keeps its place in the order).
    pub(crate) fn retry_held(
        &mut self,
        offer: &mut Offer<'_>,
        info: &mut BridgeInfo,
        resume: &ResumeFile,
    ) -> bool {
        let Some(h) = self.held.take() else { return true };
        match offer(&h.bytes) {
            Ok(_) => self.accounts.delivered(info, resume, h.bytes.len(), h.span),
            Err(e) if e.is_retryable() => {
                self.held = Some(h);
                return false;
            }
            Err(e) => self.accounts.refused(info, resume, &h, &e),
        }
        true
    }

    /// Takes one fragment of image `image` of the list (never while a message is held: see
    /// [`InCore::retry_held`]): skips it if its source had it already, else assembles it with
    /// the source's earlier ones, and offers a whole message to the local stream after checking
    /// it for a gap.
    pub(crate) fn on_fragment(
        &mut self,
        image: usize,
        f: Fragment<'_>,
        offer: &mut Offer<'_>,
        policy: BackPressure,
        info: &mut BridgeInfo,
        resume: &ResumeFile,
    ) -> Next {
        debug_assert!(self.held.is_none(), "a fragment taken while a message is held");
        let (source, before) = match self.sources.arrive(image, f.position) {
            // Not a listed image's, or a position that overflows: no source to put it in.
            None => return Next::Continue,
            Some(Arrival::Duplicate) => {
                if f.flags & BEGIN != 0 {
                    info.duplicates += 1;
                }
                return Next::Continue;
            }
            Some(Arrival::New { source, before, hole }) => {
                if hole {
                    // What the source was assembling lay partly in the hole: gone, and the gap
                    // its next message is checked for covers it.
                    let s = self.sources.get_mut(source);
                    s.assembly.reset();
                    s.expect.check = Check::AfterHole;
                }
                (source, before)
            }
        };
        // A message in more than one frame needs an assembly (a single frame never does).
        if f.flags & (BEGIN | END) == BEGIN && self.sources.get_mut(source).assembly.unfinished().is_none() {
            self.make_room(source, info, resume);
        }
        let max = self.max_message_len;
        let InCore { sources, held, accounts, .. } = self;
        let s = sources.get_mut(source);
        let mut next = Next::Continue;
        let (assembly, expect) = (&mut s.assembly, &mut s.expect);
        assembly.take(f.flags, f.reserved, f.payload, max, before, |event| match event {
            Event::Whole { reserved, message } => {
                next = accounts.settle(expect, reserved, message, offer, policy, held, info, resume);
            }
            Event::Cut { reserved, len, why } => {
                accounts.settle_lost(expect, reserved, len, &why, info, resume)
            }
        });
        next
    }

    /// Before source `at` begins a message: if [`MAX_ASSEMBLIES`] others are assembling, the
    /// least recently used one's message is dropped and counted.
    fn make_room(&mut self, at: usize, info: &mut BridgeInfo, resume: &ResumeFile) {
        let (mut busy, mut lru) = (0, None::<(u64, usize)>);
        for (i, s) in self.sources.iter_mut().enumerate() {
            if i != at && s.assembly.unfinished().is_some() {
                busy += 1;
                if lru.is_none_or(|(used, _)| s.last_used() < used) {
                    lru = Some((s.last_used(), i));
                }
            }
        }
        let Some((_, lru)) = lru.filter(|_| busy >= MAX_ASSEMBLIES) else { return };
        let s = self.sources.get_mut(lru);
        if let Some((reserved, len)) = s.assembly.unfinished() {
            s.assembly.reset();
            self.accounts.settle_lost(&mut s.expect, reserved, len, &Why::Evicted, info, resume);
        }
    }

    /// Images listed.
    #[cfg(any(test, shmlog_fuzz))]
    pub(crate) fn image_count(&self) -> usize {
        self.sources.image_count()
    }

    /// Sources kept (listed, and retired ones kept for a successor).
    #[cfg(any(test, shmlog_fuzz))]
    pub(crate) fn source_count(&self) -> usize {
        self.sources.source_count()
    }

    /// Messages in assembly, the longest one, and the largest buffer behind one (tests and
    /// fuzzing).
    #[cfg(any(test, shmlog_fuzz))]
    pub(crate) fn assembly_bytes(&mut self) -> (usize, usize, usize) {
        let (mut count, mut len, mut capacity) = (0, 0, 0);
        for s in self.sources.iter_mut() {
            let (l, c) = s.assembly.bytes();
            count += s.assembly.unfinished().is_some() as usize;
            len = len.max(l);
            capacity = capacity.max(c);
        }
        (count, len, capacity)
    }

    /// Whether a message is held (then nothing more is polled this cycle).
    pub(crate) fn is_holding(&self) -> bool {
        self.held.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::map_resume;
    use crate::status::{self as bridge_status, BridgeDirection, Loss, LossCause};
    use crate::wire;
    use shmlog::OfferError;

    const TERM: i32 = 1 << 16;

    fn info() -> BridgeInfo {
        let mut info = BridgeInfo::new("s", BridgeDirection::In, "aeron:udp?endpoint=x:1", 1, "d");
        info.resume_position = 1024;
        info
    }

    fn image(session: i32, correlation: i64, initial_term_id: i32, join_position: i64) -> ImageInfo {
        ImageInfo { session, correlation, initial_term_id, term_length: TERM, join_position }
    }

    /// The local stream, as the core sees it: takes messages up to `max` bytes, or pushes back.
    pub(crate) struct Sink {
        pub(crate) got: Vec<Vec<u8>>,
        max: usize,
        pub(crate) push_back: bool,
    }

    impl Sink {
        pub(crate) fn new(max: usize) -> Self {
            Sink { got: Vec::new(), max, push_back: false }
        }

        fn offer(&mut self, m: &[u8]) -> Result<i64, OfferError> {
            if m.len() > self.max {
                return Err(OfferError::MessageTooLarge { len: m.len(), max: self.max });
            }
            if self.push_back {
                return Err(OfferError::BackPressured);
            }
            self.got.push(m.to_vec());
            Ok(0)
        }
    }

    /// A frame of a source's Aeron stream: where it ends (in the stream's positions), its
    /// flags, reserved value and payload.
    #[derive(Clone, Debug)]
    struct Frame {
        end: i64,
        flags: u8,
        reserved: i64,
        bytes: Vec<u8>,
    }

    /// An out bridge's Aeron stream: messages laid one after another from `at`, cut into
    /// frames of at most `chunk` payload bytes, as an Aeron publication lays them.
    struct Stream {
        at: i64,
        chunk: usize,
        frames: Vec<Frame>,
    }

    impl Stream {
        fn new(at: i64, chunk: usize) -> Self {
            Stream { at, chunk, frames: Vec::new() }
        }

        /// Appends a message at source position `start` with `marks`; returns its frames' range.
        fn message(&mut self, start: i64, marks: i64, payload: &[u8]) -> std::ops::Range<usize> {
            let first = self.frames.len();
            let reserved = wire::encode(start, marks);
            let chunks: Vec<&[u8]> =
                if payload.is_empty() { vec![payload] } else { payload.chunks(self.chunk).collect() };
            for (i, c) in chunks.iter().enumerate() {
                let mut flags = 0;
                if i == 0 {
                    flags |= BEGIN;
                }
                if i + 1 == chunks.len() {
                    flags |= END;
                }
                self.at += (c.len() as i64 + 32 + 31) & !31;
                self.frames.push(Frame { end: self.at, flags, reserved, bytes: c.to_vec() });
            }
            first..self.frames.len()
        }

        /// The same frames, sent again after a lost driver: marked so, at the same positions.
        fn again(&self, range: std::ops::Range<usize>) -> Vec<Frame> {
            let mut v = self.frames[range].to_vec();
            for f in &mut v {
                let (start, marks) = wire::decode(f.reserved);
                f.reserved = wire::encode(start, marks | wire::SENT_AGAIN);
            }
            v
        }
    }

    struct Rig {
        core: InCore,
        sink: Sink,
        info: BridgeInfo,
        resume: ResumeFile,
        /// Each listed image's base: its position + base = the stream's.
        bases: Vec<i64>,
    }

    impl Rig {
        fn new(max: usize) -> Self {
            Rig {
                core: InCore::new(max),
                sink: Sink::new(max),
                info: info(),
                resume: ResumeFile::detached(),
                bases: Vec::new(),
            }
        }

        /// Lists `images`, with each one's base.
        fn list(&mut self, images: &[(ImageInfo, i64)]) {
            let infos: Vec<ImageInfo> = images.iter().map(|i| i.0).collect();
            self.bases = images.iter().map(|i| i.1).collect();
            self.core.sync_images(&infos);
        }

        /// Polls image `i` for `frames`, as `inbound::carry` does (if it may be polled).
        fn poll(&mut self, i: usize, frames: &[Frame]) -> usize {
            if !self.core.may_poll(i) {
                return 0;
            }
            let mut n = 0;
            for f in frames {
                n += 1;
                if self.feed(i, f) == Next::Break {
                    break;
                }
            }
            self.core.polled(i, n);
            n
        }

        fn feed(&mut self, i: usize, f: &Frame) -> Next {
            let fragment = Fragment {
                flags: f.flags,
                reserved: f.reserved,
                position: f.end - self.bases[i],
                payload: Some(&f.bytes),
            };
            self.raw(i, fragment)
        }

        fn raw(&mut self, i: usize, f: Fragment<'_>) -> Next {
            let Rig { core, sink, info, resume, .. } = self;
            core.on_fragment(i, f, &mut |m: &[u8]| sink.offer(m), BackPressure::Hold, info, resume)
        }

        fn retry(&mut self) -> bool {
            let Rig { core, sink, info, resume, .. } = self;
            core.retry_held(&mut |m: &[u8]| sink.offer(m), info, resume)
        }
    }

    /// N2: two out bridges feed one in bridge; B loses its driver and offers again from below
    /// where A stands in source positions. B's successor image continues B's stream: what it
    /// had carried already is skipped (one duplicate), and everything else of B is carried
    /// once, in order. Before, B's messages sent again were compared with the in bridge's one
    /// resume position (A's) and dropped as duplicates, with no loss recorded.
    #[test]
    fn a_second_source_that_loses_its_driver_loses_nothing_to_the_first() {
        let mut rig = Rig::new(4096);
        rig.info.resume_position = -1;
        let (mut a, mut b) = (Stream::new(0, 1024), Stream::new(0, 1024));
        let a1 = a.message(8192, 0, b"a1");
        let b1 = b.message(4096, 0, b"b1");
        let b2 = b.message(4160, 0, b"b2");
        let b3 = b.message(4224, 0, b"b3");
        let (ia, ib) = (image(10, 1, 500, 0), image(5_000_000, 2, 900, 0));
        rig.list(&[(ia, 0), (ib, 0)]);
        rig.poll(1, &b.frames[b1.clone()]);
        rig.poll(0, &a.frames[a1]);
        assert_eq!(rig.info.resume_position, 8192 + 64, "A's");
        // B's driver is gone; its counter said b1 was not sent in full: offered again from b1
        // on the successor (session 5 000 001), which starts where b1 starts.
        let next = image(5_000_001, 3, 900, 0);
        rig.list(&[(ia, 0), (ib, 0), (next, 0)]);
        rig.poll(1, &[]);
        rig.poll(2, &b.again(b1.start..b3.end));
        let want: Vec<Vec<u8>> = vec![b"b1".to_vec(), b"a1".to_vec(), b"b2".to_vec(), b"b3".to_vec()];
        assert_eq!(rig.sink.got, want);
        assert_eq!((rig.info.duplicates, rig.info.dropped, rig.core.source_count()), (1, 0, 2));
        // A's first message was compared with where B's ended (a new source is compared with
        // the bridge's resume position: the one guess two sources make); nothing else.
        let gap = Loss { from: 4160, to: 8192, messages: None, cause: LossCause::Gap };
        assert_eq!(rig.info.losses, vec![gap]);
        let _ = b2;
    }

    /// N2: one source whose publisher began a new session (positions from 0 again) just before
    /// its out bridge lost the driver, and whose first message of that session (marked a fresh
    /// start) died with the driver: the successor offers again from the next message, unmarked
    /// but for "sent again", far below where the old session stood. It is new by its stream
    /// position, so it is carried, and the message that died lies in a reported gap. Before, it
    /// was taken for a duplicate of the old session's and dropped, unreported.
    #[test]
    fn a_new_session_whose_first_message_died_with_the_driver_is_carried() {
        let mut rig = Rig::new(4096);
        rig.info.resume_position = -1;
        let mut s = Stream::new(0, 1024);
        let old = s.message(4992, 0, b"old");
        let fresh = s.message(0, wire::FRESH_START, b"new0");
        let rest = s.message(64, 0, b"new1");
        let (first, next) = (image(10, 1, 7, 0), image(11, 2, 7, s.frames[fresh.start].end));
        rig.list(&[(first, 0)]);
        rig.poll(0, &s.frames[old]);
        assert_eq!(rig.info.resume_position, 5056);
        // The fresh start was counted as sent, but never arrived; the driver died.
        rig.list(&[(next, 0)]);
        rig.poll(0, &s.again(rest));
        assert_eq!(rig.sink.got, vec![b"old".to_vec(), b"new1".to_vec()]);
        assert_eq!(rig.info.duplicates, 0);
        assert_eq!(rig.info.losses, vec![Loss { from: 0, to: 64, messages: None, cause: LossCause::Gap }]);
    }

    /// N3 (a): a window offered again that starts at a fresh start (a new session of the
    /// source) had arrived already: skipped, by its stream position, not carried twice. Before,
    /// a message marked both "fresh start" and "sent again" was exempt from the duplicate rule
    /// and delivered again (`[1, 2, 1, 2]`).
    #[test]
    fn a_window_sent_again_from_a_fresh_start_is_carried_once() {
        let mut rig = Rig::new(4096);
        let mut s = Stream::new(4096, 1024);
        let window = s.message(0, wire::FRESH_START, b"1").start..s.message(64, 0, b"2").end;
        let first = image(10, 1, 7, 4096);
        rig.list(&[(first, 0)]);
        rig.poll(0, &s.frames[window.clone()]);
        rig.list(&[(image(11, 2, 7, 4096), 0)]);
        rig.poll(0, &s.again(window));
        assert_eq!(rig.sink.got, vec![b"1".to_vec(), b"2".to_vec()]);
        assert_eq!(rig.info.duplicates, 2);
    }

    /// N3 (b): the old image still holds frames the bridge had no time for (held by its local
    /// stream) when the successor comes, and the client polls images round robin, the
    /// successor first. Each message is carried once, in the source's order, and the resume
    /// position never goes back. Before, the successor's messages were carried first and the
    /// old image's after them (`[1, 2, 3, 2]`, the resume position back from 1216 to 1152).
    #[test]
    fn an_old_image_and_its_successor_polled_round_robin_keep_the_sources_order() {
        let mut rig = Rig::new(4096);
        let mut s = Stream::new(0, 1024);
        let m: Vec<_> = (0..4).map(|k| s.message(1024 + 64 * k, 0, &[b'1' + k as u8])).collect();
        let (old, next) = (image(10, 1, 7, 0), image(11, 2, 7, s.frames[m[1].start - 1].end));
        rig.list(&[(old, 0)]);
        rig.sink.push_back = true;
        assert_eq!(rig.poll(0, &s.frames[m[0].clone()]), 1, "1 taken, and held");
        rig.sink.push_back = false;
        assert!(rig.retry());
        // 2 and 3 wait in the old image; its driver died, and the successor offers 2..4 again.
        rig.list(&[(old, 0), (next, 0)]);
        let mut resume = vec![rig.info.resume_position];
        rig.poll(1, &s.again(m[1].start..m[3].end));
        resume.push(rig.info.resume_position);
        rig.poll(0, &s.frames[m[1].start..m[2].end]);
        resume.push(rig.info.resume_position);
        assert_eq!(rig.sink.got, vec![b"1".to_vec(), b"2".to_vec(), b"3".to_vec(), b"4".to_vec()]);
        assert_eq!(rig.info.duplicates, 2);
        assert!(resume.windows(2).all(|w| w[0] <= w[1]), "{resume:?}");
    }

    /// N3 (b), with a hole: the successor starts past what was taken (its predecessor's
    /// counter said more was sent than the bridge had polled, and the old image still holds
    /// it). It waits until the old image gives nothing more, so the old frames come first; only
    /// what never arrived is a gap.
    #[test]
    fn a_successor_that_starts_past_a_hole_waits_for_its_predecessor() {
        let mut rig = Rig::new(4096);
        let mut s = Stream::new(0, 1024);
        let m: Vec<_> = (0..5).map(|k| s.message(64 * k, 0, &[b'0' + k as u8])).collect();
        let (old, next) = (image(10, 1, 7, 0), image(11, 2, 7, s.frames[m[3].start].end));
        rig.list(&[(old, 0)]);
        rig.poll(0, &s.frames[m[0].clone()]);
        rig.list(&[(old, 0), (next, 0)]);
        assert_eq!(rig.poll(1, &s.again(m[4].clone())), 0, "message 4 waits");
        rig.poll(0, &s.frames[m[1].start..m[2].end]);
        assert_eq!(rig.poll(1, &s.again(m[4].clone())), 0, "the old image gave frames last time");
        assert_eq!(rig.poll(0, &[]), 0);
        assert_eq!(rig.poll(1, &s.again(m[4].clone())), 1);
        let got: Vec<&[u8]> = rig.sink.got.iter().map(|m| &m[..]).collect();
        assert_eq!(got, [b"0", b"1", b"2", b"4"]);
        assert_eq!(rig.info.losses, vec![Loss { from: 192, to: 256, messages: None, cause: LossCause::Gap }]);
    }

    /// A message half carried by the old image is finished by its successor, which continues
    /// the source's stream; one whose old image went away before its successor came is
    /// carried whole by the successor.
    #[test]
    fn a_message_begun_on_one_image_is_finished_on_its_successor() {
        for gone in [false, true] {
            let mut rig = Rig::new(4096);
            let mut s = Stream::new(0, 4);
            let m = s.message(0, 0, b"abcdefghij");
            let (old, next) = (image(10, 1, 7, 0), image(11, 2, 7, 0));
            rig.list(&[(old, 0)]);
            rig.poll(0, &s.frames[m.start..m.start + 2]);
            if gone {
                rig.list(&[]);
            }
            rig.list(&[(next, 0)]);
            rig.poll(0, &s.again(m.clone()));
            assert_eq!(rig.sink.got, vec![b"abcdefghij".to_vec()], "gone {gone}");
            assert_eq!((rig.info.duplicates, rig.info.dropped), (u64::from(!gone), 0));
        }
    }

    /// T6: a reserved value whose start cannot be a source position (`i64::MAX & !31` overflowed
    /// the end computed from it: a panic in debug builds, a negative resume position in release,
    /// which turned gap checks off) is carried as a fresh start and counted; the resume file
    /// stays where it was, and the next source's gap is still found.
    #[test]
    fn a_forged_source_position_neither_panics_nor_turns_gap_checks_off() {
        let dir = crate::testing::TempDir::new("bridge-in-forged");
        let path = dir.path().join("s.in.1.resume");
        let mut rig = Rig::new(1 << 20);
        rig.resume = ResumeFile(Some(map_resume(&path).unwrap()));
        rig.resume.save(1024, 0);
        rig.list(&[(image(1, 1, 0, 0), 0), (image(1_000_000, 2, 0, 0), 0)]);
        for (k, forged) in [i64::MAX & !31, (i64::MAX & !31) - 64, i64::MIN, -32].into_iter().enumerate() {
            let f = Fragment {
                flags: BEGIN | END,
                reserved: forged,
                position: 160 * (k as i64 + 1),
                payload: Some(&[7; 100]),
            };
            assert_eq!(rig.raw(0, f), Next::Continue);
            let on_file = bridge_status::read_resume(&path).map(|r| r.0);
            assert!(
                rig.info.resume_position >= 0 && on_file >= Some(0),
                "{forged}: {:?}, file {on_file:?}",
                rig.info
            );
        }
        assert_eq!(rig.sink.got.len(), 4, "the messages themselves are carried");
        assert_eq!((rig.info.bad_positions, rig.info.resume_position), (4, 1024));
        let f = Fragment { flags: BEGIN | END, reserved: 4096, position: 64, payload: Some(&[1; 10]) };
        rig.raw(1, f);
        assert_eq!(
            rig.info.losses,
            vec![Loss { from: 1024, to: 4096, messages: None, cause: LossCause::Gap }]
        );
        assert_eq!(bridge_status::read_resume(&path).map(|r| r.0), Some(4096 + 64));
    }

    /// T6: a BEGIN and a million middle fragments that never END: the assembly stays within
    /// what the local stream can take, and the message is dropped and reported once.
    #[test]
    fn a_message_that_never_ends_is_dropped_at_the_local_limit_and_reported_once() {
        let mut rig = Rig::new(4096);
        rig.info.resume_position = 2048;
        rig.list(&[(image(1, 1, 0, 0), 0)]);
        let mut at = 0;
        let mut frag = |rig: &mut Rig, flags: u8, reserved: i64, payload: &[u8]| {
            at += 96;
            rig.raw(0, Fragment { flags, reserved, position: at, payload: Some(payload) });
        };
        frag(&mut rig, BEGIN, 2048, &[0; 64]);
        for i in 0..1_000_000 {
            frag(&mut rig, 0, 2048, &[1; 64]);
            let (_, len, capacity) = rig.core.assembly_bytes();
            assert!(len <= 4096 && capacity <= 4096, "fragment {i}: {len} bytes assembled in {capacity}");
        }
        assert_eq!(rig.info.dropped, 1);
        frag(&mut rig, END, 2048, &[2; 64]);
        frag(&mut rig, BEGIN | END, 1 << 26, &[3; 8]);
        assert_eq!(rig.sink.got, vec![vec![3; 8]]);
        assert_eq!(rig.info.dropped, 1);
        assert_eq!(rig.info.losses.len(), 1, "{:?}", rig.info.losses);
        let loss = rig.info.losses[0];
        assert_eq!((loss.from, loss.messages, loss.cause), (2048, Some(1), LossCause::Dropped));
        assert!(loss.to > 2048 + 4096, "{loss:?}: at least the bytes seen");
    }

    /// T6: two images interleaving fragmented messages (a second publisher on the channel):
    /// each source has its own assembly, and both messages arrive whole.
    #[test]
    fn two_interleaved_images_both_deliver_their_fragmented_messages() {
        let mut rig = Rig::new(4096);
        let (mut a, mut b) = (Stream::new(0, 2), Stream::new(0, 2));
        a.message(64, 0, b"a1a2a3");
        b.message(128, 0, b"b1b2b3");
        rig.list(&[(image(1, 1, 0, 0), 0), (image(1_000_000, 2, 0, 0), 0)]);
        for (i, k) in [(0, 0), (1, 0), (0, 1), (1, 1), (1, 2), (0, 2)] {
            let f = if i == 0 { a.frames[k].clone() } else { b.frames[k].clone() };
            rig.feed(i, &f);
        }
        assert_eq!(rig.sink.got, vec![b"b1b2b3".to_vec(), b"a1a2a3".to_vec()]);
        assert_eq!((rig.info.dropped, rig.info.messages), (0, 2));
    }

    /// Framing a sender breaks (a BEGIN inside a message, a fragment out of bounds) and more
    /// sources assembling than are kept: each unfinished message is dropped and counted once,
    /// and the others arrive whole.
    #[test]
    fn broken_framing_and_evicted_assemblies_drop_only_their_unfinished_messages() {
        let mut rig = Rig::new(4096);
        rig.info.resume_position = -1;
        let n = MAX_ASSEMBLIES as i32 + 2;
        let list: Vec<(ImageInfo, i64)> = (0..n).map(|s| (image(100_000 * s, s.into(), 0, 0), 0)).collect();
        rig.list(&list);
        let mut at = vec![0i64; n as usize];
        let mut frag = |rig: &mut Rig, i: usize, flags: u8, reserved: i64, payload: Option<&[u8]>| {
            at[i] += 64;
            rig.raw(i, Fragment { flags, reserved, position: at[i], payload })
        };
        frag(&mut rig, 0, BEGIN, 64, Some(b"x"));
        frag(&mut rig, 0, BEGIN, 128, Some(b"a"));
        frag(&mut rig, 0, END, 128, Some(b"b"));
        assert_eq!((rig.sink.got.len(), rig.info.dropped), (1, 1));
        frag(&mut rig, 0, BEGIN, 256, None);
        frag(&mut rig, 0, END, 256, Some(b"tail"));
        assert_eq!((rig.sink.got.len(), rig.info.dropped), (1, 2), "the rest of the message is skipped");
        // Source 1 starts a message, then MAX_ASSEMBLIES others do: it is evicted.
        frag(&mut rig, 1, BEGIN, 512, Some(b"y"));
        for i in 2..n as usize {
            frag(&mut rig, i, BEGIN, 1024, Some(b"z"));
        }
        assert_eq!(rig.core.assembly_bytes().0, MAX_ASSEMBLIES);
        assert_eq!((rig.sink.got.len(), rig.info.dropped), (1, 3));
        frag(&mut rig, 1, END, 512, Some(b"y"));
        assert_eq!((rig.sink.got.len(), rig.info.dropped), (1, 3), "an END without its BEGIN");
        for i in 2..n as usize {
            frag(&mut rig, i, END, 1024, Some(b"z"));
        }
        assert_eq!((rig.sink.got.len(), rig.info.dropped), (1 + MAX_ASSEMBLIES, 3));
    }

    /// An image Aeron replaced (same session, new correlation id: the old one timed out) joins
    /// where its sender stands: what lay between is a gap of its source, measured from that
    /// source's last message. Images that are gone are forgotten.
    #[test]
    fn a_replaced_image_reports_what_lay_between_as_a_gap() {
        let mut rig = Rig::new(4096);
        let mut s = Stream::new(0, 1024);
        s.message(1024, 0, &[0; 32]);
        let lost = s.message(1088, 0, &[0; 32]);
        let after = s.message(4096, 0, &[0; 32]);
        rig.list(&[(image(1, 10, 3, 0), 0)]);
        rig.poll(0, &s.frames[..1]);
        // Another source moves the bridge's resume position: the gap is still the source's own.
        rig.list(&[(image(1, 10, 3, 0), 0), (image(50, 20, 0, 0), 0)]);
        rig.raw(1, Fragment { flags: BEGIN | END, reserved: 0, position: 64, payload: Some(b"x") });
        assert_eq!(rig.info.resume_position, 64);
        rig.list(&[(image(1, 11, 3, s.frames[lost.end - 1].end), 0)]);
        assert_eq!(rig.core.image_count(), 1);
        rig.poll(0, &s.frames[after]);
        assert_eq!(
            rig.info.losses,
            vec![Loss { from: 1088, to: 4096, messages: None, cause: LossCause::Gap }]
        );
        rig.list(&[]);
        assert_eq!(rig.core.image_count(), 0);
    }

    /// Under `Hold` a pushed-back message is held (the poll breaks) and offered again first;
    /// under `Drop` it is dropped and counted.
    #[test]
    fn a_pushed_back_message_is_held_or_dropped_by_policy() {
        let mut rig = Rig::new(4096);
        rig.info.resume_position = -1;
        rig.list(&[(image(1, 1, 0, 0), 0)]);
        rig.sink.push_back = true;
        let f = Fragment { flags: BEGIN | END, reserved: 0, position: 64, payload: Some(b"m") };
        assert_eq!(rig.raw(0, f), Next::Break);
        assert!(rig.core.is_holding());
        assert!(!rig.retry());
        rig.sink.push_back = false;
        assert!(rig.retry());
        assert_eq!((rig.sink.got.len(), rig.info.messages, rig.info.resume_position), (1, 1, 64));
        rig.sink.push_back = true;
        let f = Fragment { flags: BEGIN | END, reserved: 64, position: 128, payload: Some(b"n") };
        let Rig { core, sink, info, resume, .. } = &mut rig;
        let next = core.on_fragment(0, f, &mut |m: &[u8]| sink.offer(m), BackPressure::Drop, info, resume);
        assert_eq!((next, info.dropped, info.back_pressure), (Next::Continue, 1, 2));
        assert_eq!(
            info.losses,
            vec![Loss { from: 64, to: 128, messages: Some(1), cause: LossCause::Dropped }]
        );
    }
}
