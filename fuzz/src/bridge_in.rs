//! Target `bridge_in`: the in bridge's duty cycle (`InCore`) as its Aeron poll loop drives it,
//! with no Aeron: honest out bridges and forgers feed one in bridge.
//!
//! **Honest sources** (1 to 3) behave as out bridges do: each lays its messages into its Aeron
//! stream (frames of at most an MTU's payload, padding at term ends, source positions and marks
//! in the reserved values, new sessions of its publisher), and its frames arrive, in order, on
//! its current image. Its media driver can die: frames still in flight arrive or not, its
//! counter says some prefix was sent (never more than a term behind), and its successor image
//! (session + 1, its initial term id where the stream stands) offers again every message from
//! the first one not counted as sent, at the same stream positions, marked "sent again". An
//! image can also be replaced by Aeron (same session, joined where the sender stands). An old
//! image stays listed with what it holds until the harness lets it go, drained, as Aeron does.
//!
//! **Forgers** have images of their own (never an honest session id or its successor's) and
//! send anything: any flags, reserved values (honest-looking positions and marks included),
//! lengths, bad bounds, positions that jump or go back, term lengths that are no power of two.
//!
//! **The poll** is `inbound::carry`'s: a held message first (nothing is polled while it is
//! held), then the images in a rotating order, each only if the core lets it be polled, up to a
//! fragment limit; or one image chosen by the fuzzer. The local stream takes, pushes back or
//! refuses, under the hold or the drop policy. At the end everything in flight arrives and the
//! bridge is polled until it has nothing left.
//!
//! Properties:
//! - no panic (debug assertions on: no overflow anywhere);
//! - bounded: at most [`MAX_ASSEMBLIES`] messages in assembly, none beyond the local stream's
//!   longest message (nor the buffer behind it); at most the listed images plus
//!   [`MAX_RETIRED`] sources kept;
//! - **exact delivery, per honest source**: every message whose frames all arrived on one of
//!   its images is offered to the local stream and taken exactly once, in the source's order,
//!   unless the local stream refused it for good (or pushed it back under `drop`), or it is
//!   longer than the local stream takes; a message that did not arrive whole is never
//!   delivered. Forgers lose only what they forge;
//! - the counters agree with the local stream; the status stays readable: positions >= -1, at
//!   most 16 losses, each with 0 <= from <= to.

use crate::input::{message_bytes, Input};
use shmlog::OfferError;
use shmlog_bridge::__fuzz::bridge_in::{
    encode, BackPressure, BridgeDirection, BridgeInfo, Core, Fragment, ImageInfo, Next, AFTER_DROP, BEGIN,
    END, FRESH_START, LOST, MAX_ASSEMBLIES, MAX_LOSSES, MAX_RETIRED, SENT_AGAIN,
};
use std::collections::VecDeque;

/// The first bytes of every honest message: then its source and sequence number.
const MAGIC: [u8; 4] = *b"hon\xb5";
/// Honest sessions start here, a million apart (forgers' are below the first).
const HONEST_SESSIONS: i32 = 1_000_000;
/// Forged images made at most (more would push honest sources out of the retired ones kept).
const MAX_FORGED_IMAGES: usize = 40;
/// Forged images listed at once at most (with the honest ones, fewer than `MAX_ASSEMBLIES`
/// sources assemble at once).
const MAX_FORGED_LISTED: usize = 8;

/// What the local stream does with an offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Take,
    PushBack,
    Refuse,
}

/// The local stream: takes messages up to `max` bytes; every offer is logged.
struct Sink {
    mode: Mode,
    max: usize,
    got: Vec<Vec<u8>>,
    /// Every offer of an honest message: (source, sequence number, taken, refused for good).
    offers: Vec<(usize, u32, bool, bool)>,
    policy: BackPressure,
}

impl Sink {
    fn offer(&mut self, m: &[u8]) -> Result<i64, OfferError> {
        let result = if m.len() > self.max {
            Err(OfferError::MessageTooLarge { len: m.len(), max: self.max })
        } else {
            match self.mode {
                Mode::Take => Ok(0),
                Mode::PushBack => Err(OfferError::BackPressured),
                Mode::Refuse => Err(OfferError::MaxPositionExceeded),
            }
        };
        if let Some((source, seq)) = honest_id(m) {
            let final_refusal = match &result {
                Ok(_) => false,
                Err(e) => !e.is_retryable() || self.policy == BackPressure::Drop,
            };
            self.offers.push((source, seq, result.is_ok(), final_refusal));
        }
        if result.is_ok() {
            self.got.push(m.to_vec());
        }
        result
    }
}

/// (source, sequence number) of an honest message.
fn honest_id(m: &[u8]) -> Option<(usize, u32)> {
    (m.len() >= 9 && m[..4] == MAGIC).then(|| (m[4] as usize, u32::from_le_bytes([m[5], m[6], m[7], m[8]])))
}

/// A frame of an Aeron stream: where it ends (in the stream's positions), its flags, reserved
/// value and payload; `message`: the honest message it belongs to.
#[derive(Clone, Debug)]
struct Frame {
    end: i64,
    flags: u8,
    reserved: i64,
    payload: Option<Vec<u8>>,
    message: Option<usize>,
}

/// An image of the subscription, as the harness keeps it.
struct Image {
    info: ImageInfo,
    /// Add to a stream position to get the image's own.
    base: i64,
    /// Frames arrived at the in bridge's driver and not yet polled.
    arrived: VecDeque<Frame>,
    /// Frames sent and not yet arrived (honest live images only).
    in_flight: VecDeque<Frame>,
    /// Its source (honest index), or `None` for a forger's.
    honest: Option<usize>,
    /// Its driver died: nothing more arrives.
    dead: bool,
    /// Listed in the subscription (a successor is listed once its predecessor was polled
    /// after its driver died: seconds pass before the successor exists).
    listed: bool,
    /// Polled since it died.
    polled_dead: bool,
    /// A forger's: its last frame's end.
    forged_end: i64,
    /// Honest images: frames arrived per message.
    got: std::collections::HashMap<usize, usize>,
    /// Honest images: the stream position up to which the bridge polled it (from its join):
    /// Aeron's flow control keeps its sender within a window of it.
    polled_to: i64,
}

/// An honest message.
struct Message {
    /// Where it starts in the stream (before any padding it needed) and ends.
    start: i64,
    end: i64,
    frames: std::ops::Range<usize>,
    len: usize,
    /// Its frames all arrived on one image.
    arrived: bool,
}

/// An honest out bridge and its Aeron stream.
struct Source {
    term: i64,
    chunk: usize,
    initial_term_id: i32,
    session: i32,
    frames: Vec<Frame>,
    messages: Vec<Message>,
    /// Where the next message begins.
    tail: i64,
    /// Its publisher's next source position.
    src: i64,
    /// The least its sender position can be: where the current publication started, or where
    /// its image was last replaced (joined at the sender position).
    sent_at_least: i64,
    /// Its live image (an index into the images).
    live: usize,
}

impl Source {
    /// Lays message `bytes` into the stream with `marks`; returns its index.
    fn lay(&mut self, bytes: Vec<u8>, marks: i64) -> usize {
        let len = bytes.len();
        let framed: i64 = framed_len(len, self.chunk);
        let start = self.tail;
        if self.tail % self.term + framed > self.term {
            self.tail += self.term - self.tail % self.term; // padding to the term's end
        }
        let reserved = encode(self.src, marks);
        self.src += ((len as i64 + 32 + 31) & !31).max(32);
        let first = self.frames.len();
        let chunks: Vec<&[u8]> = bytes.chunks(self.chunk).collect();
        let index = self.messages.len();
        for (i, c) in chunks.iter().enumerate() {
            let mut flags = 0;
            if i == 0 {
                flags |= BEGIN;
            }
            if i + 1 == chunks.len() {
                flags |= END;
            }
            self.tail += (c.len() as i64 + 32 + 31) & !31;
            self.frames.push(Frame {
                end: self.tail,
                flags,
                reserved,
                payload: Some(c.to_vec()),
                message: Some(index),
            });
        }
        self.messages.push(Message {
            start,
            end: self.tail,
            frames: first..self.frames.len(),
            len,
            arrived: false,
        });
        index
    }
}

/// Bytes a message of `len` takes in frames of at most `chunk` payload bytes.
fn framed_len(len: usize, chunk: usize) -> i64 {
    let full = len / chunk;
    let rest = len % chunk;
    let last = if rest > 0 || len == 0 { (rest as i64 + 32 + 31) & !31 } else { 0 };
    full as i64 * ((chunk as i64 + 32 + 31) & !31) + last
}

fn check_status(info: &BridgeInfo, core: &mut Core, max: usize, listed: usize) {
    let (assembling, len, capacity) = core.assembly_bytes();
    assert!(assembling <= MAX_ASSEMBLIES, "{assembling} messages in assembly");
    assert!(len <= max && capacity <= max, "assembly {len} bytes in {capacity}, max {max}");
    assert!(core.source_count() <= listed + MAX_RETIRED, "{} sources kept", core.source_count());
    assert!(info.resume_position >= -1 && info.source_position >= -1, "{info:?}");
    assert!(info.losses.len() <= MAX_LOSSES, "{} losses", info.losses.len());
    for l in &info.losses {
        assert!(0 <= l.from && l.from <= l.to, "{l:?}");
    }
}

pub fn bridge_in(data: &[u8]) {
    run_bridge_in(data);
}

/// What a run did, for the seeds' depth checks.
#[derive(Debug, Default)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct InStats {
    pub delivered: u64,
    pub dropped: u64,
    pub duplicates: u64,
    pub back_pressure: u64,
    pub bad_positions: u64,
    pub losses: usize,
    /// Driver losses and replaced images of honest sources.
    pub successors: usize,
    /// Honest messages that did not arrive whole.
    pub lost_on_the_wire: usize,
    /// Forged fragments fed.
    pub forged: usize,
    /// The most images listed at once.
    pub images: usize,
}

/// The harness's state: the sources, the images, the core and the local stream.
struct Run {
    core: Core,
    info: BridgeInfo,
    sink: Sink,
    policy: BackPressure,
    sources: Vec<Source>,
    images: Vec<Image>,
    correlation: i64,
    rotation: usize,
    stats: InStats,
}

impl Run {
    /// The listed images' indexes, in the subscription's order.
    fn listed(&self) -> Vec<usize> {
        (0..self.images.len()).filter(|&i| self.images[i].listed).collect()
    }

    /// A poll of the images in `order` (indexes into the listed ones), as `inbound::carry`
    /// does: the held message first, then each image the core lets be polled, up to `limit`
    /// fragments in all. Returns the fragments taken.
    fn poll(&mut self, order: &[usize], limit: usize) -> usize {
        let listed = self.listed();
        let infos: Vec<ImageInfo> = listed.iter().map(|&i| self.images[i].info).collect();
        self.core.sync_images(&infos);
        let Run { core, info, sink, .. } = self;
        if !core.retry_held(&mut |m: &[u8]| sink.offer(m), info) {
            return 0;
        }
        let (mut left, mut work) = (limit, 0);
        for &k in order {
            let Some(&i) = listed.get(k) else { continue };
            if left == 0 || self.core.is_holding() {
                break;
            }
            if !self.core.may_poll(k) {
                continue;
            }
            let mut n = 0;
            while n < left {
                let Some(f) = self.images[i].arrived.pop_front() else { break };
                n += 1;
                let position = f.end.wrapping_sub(self.images[i].base);
                let fragment = Fragment {
                    flags: f.flags,
                    reserved: f.reserved,
                    position,
                    payload: f.payload.as_deref(),
                };
                if std::env::var_os("SHMLOG_FUZZ_TRACE").is_some() {
                    eprintln!(
                        "  image {i} (session {}) frame end {} flags {:#x} message {:?} may {}",
                        self.images[i].info.session,
                        f.end,
                        f.flags,
                        f.message,
                        self.core.may_poll(k)
                    );
                }
                if self.images[i].honest.is_some() {
                    self.images[i].polled_to = self.images[i].polled_to.max(f.end);
                }
                let Run { core, info, sink, policy, .. } = self;
                let next = core.on_fragment(k, fragment, &mut |m: &[u8]| sink.offer(m), *policy, info);
                assert_eq!(next == Next::Break, core.is_holding(), "Break exactly when a message is held");
                if next == Next::Break {
                    break;
                }
            }
            self.core.polled(k, n);
            if self.images[i].dead {
                self.images[i].polled_dead = true;
            }
            (left, work) = (left - n, work + n);
        }
        // A successor exists once its predecessor was polled after its driver died.
        for s in 0..self.sources.len() {
            let live = self.sources[s].live;
            let ready = self
                .images
                .iter()
                .all(|img| img.honest != Some(s) || !img.dead || img.polled_dead || !img.listed);
            if ready {
                self.images[live].listed = true;
            }
        }
        work
    }

    /// A rotating poll over every listed image.
    fn poll_round(&mut self, limit: usize) -> usize {
        let n = self.listed().len().max(1);
        self.rotation = self.rotation.wrapping_add(1);
        let order: Vec<usize> = (0..n).map(|k| (self.rotation + k) % n).collect();
        self.poll(&order, limit)
    }

    /// Source `s` sends its next message, if its publication is connected (its image is listed:
    /// an offer to a publication no receiver has fails) and its flow control lets it: within half
    /// a term (the receiver window) of where the bridge polled that image to.
    fn send(&mut self, s: usize, input: &mut Input<'_>, seq: &mut u32) {
        let live = &self.images[self.sources[s].live];
        if !live.listed {
            return;
        }
        let polled_to = live.polled_to;
        let src = &mut self.sources[s];
        let max_len = (src.term / 8) as usize;
        let len = match input.byte() % 8 {
            0..=4 => 9 + input.below(64),
            5 | 6 => 9 + input.below(512),
            _ => 9 + input.below(max_len.saturating_sub(9).max(1)),
        }
        .min(max_len);
        let framed = framed_len(len, src.chunk);
        let start = match src.tail % src.term + framed > src.term {
            true => src.tail + src.term - src.tail % src.term,
            false => src.tail,
        };
        if start + framed > polled_to + src.term / 2 {
            return;
        }
        *seq += 1;
        let mut bytes = MAGIC.to_vec();
        bytes.push(s as u8);
        bytes.extend(seq.to_le_bytes());
        bytes.extend(message_bytes((s as u64) << 32 | u64::from(*seq), len - 9));
        let marks = match input.byte() % 16 {
            0 => {
                src.src = 32 * input.below(64) as i64; // a new session of its publisher
                FRESH_START
            }
            1 => {
                src.src += 32 * input.below(1000) as i64;
                LOST
            }
            2 => AFTER_DROP,
            3 => {
                src.src = 0;
                FRESH_START | LOST
            }
            _ => 0,
        };
        let m = src.lay(bytes, marks);
        let frames: Vec<Frame> = src.frames[src.messages[m].frames.clone()].to_vec();
        let live = src.live;
        self.images[live].in_flight.extend(frames);
    }

    /// Up to `n` frames in flight on source `s`'s live image arrive.
    fn arrive(&mut self, s: usize, n: usize) {
        let live = self.sources[s].live;
        for _ in 0..n {
            if !self.land(live) {
                break;
            }
        }
    }

    /// The next frame in flight on image `i` arrives (once the image is listed); false if there
    /// is none. A message whose frames have all arrived on one image is marked so.
    fn land(&mut self, i: usize) -> bool {
        let img = &mut self.images[i];
        // An image the subscription does not list yet has no frames to give.
        if !img.listed {
            return false;
        }
        let Some(f) = img.in_flight.pop_front() else { return false };
        if let (Some(m), Some(s)) = (f.message, img.honest) {
            let got = img.got.entry(m).or_insert(0);
            *got += 1;
            let msg = &mut self.sources[s].messages[m];
            if *got == msg.frames.len() {
                msg.arrived = true;
            }
        }
        img.arrived.push_back(f);
        true
    }

    /// Source `s`'s driver dies: frames in flight arrive (the first `late`) or are lost, its
    /// counter says the stream was sent up to a frame end `counted` frames back from the newest
    /// (never more than a term back, nor below where it is known to stand), and a successor
    /// continues the stream from the first message not counted as sent.
    fn driver_lost(&mut self, s: usize, late: usize, counted: usize) {
        let live = self.sources[s].live;
        for _ in 0..late {
            if !self.land(live) {
                break;
            }
        }
        let img = &mut self.images[live];
        img.in_flight.clear();
        img.dead = true;
        img.polled_dead = false;
        let src = &self.sources[s];
        // The counter: a frame end at or after the publication's start and at most a term behind.
        let floor = src.sent_at_least.max(src.tail - src.term);
        let ends: Vec<i64> =
            src.frames.iter().map(|f| f.end).filter(|&e| e >= floor && e <= src.tail).collect();
        // `counted` frames back from the newest (0: everything was counted as sent).
        let counter = match ends.len() {
            0 => src.tail,
            n => ends[n - 1 - counted % n],
        };
        let counter = counter.max(floor);
        let first = src.messages.iter().position(|m| m.end > counter).unwrap_or(src.messages.len());
        let at = src.messages.get(first).map_or(src.tail, |m| m.start);
        let again: Vec<Frame> = src.messages[first..]
            .iter()
            .flat_map(|m| src.frames[m.frames.clone()].iter().cloned())
            .map(|mut f| {
                let (pos, marks) = (f.reserved & !31, f.reserved & 31);
                f.reserved = encode(pos, marks | SENT_AGAIN);
                f
            })
            .collect();
        let bits = src.term.trailing_zeros();
        let terms = at >> bits;
        let initial_term_id = src.initial_term_id.wrapping_add(terms as i32);
        let session = src.session.wrapping_add(1);
        let term_length = src.term as i32;
        let base = terms << bits;
        self.correlation += 1;
        let info = ImageInfo {
            session,
            correlation: self.correlation,
            initial_term_id,
            term_length,
            join_position: at - base,
        };
        self.images.push(Image {
            info,
            base,
            arrived: VecDeque::new(),
            in_flight: again.into(),
            honest: Some(s),
            dead: false,
            listed: false,
            polled_dead: false,
            forged_end: 0,
            got: Default::default(),
            polled_to: at,
        });
        let src = &mut self.sources[s];
        src.session = session;
        src.sent_at_least = at;
        src.live = self.images.len() - 1;
        self.stats.successors += 1;
    }

    /// Aeron replaces source `s`'s image (it timed out): the old one, drained, goes; what was in
    /// flight is lost; the new one, of the same session, joins where the sender stands.
    fn replace(&mut self, s: usize) {
        let live = self.sources[s].live;
        if !self.images[live].arrived.is_empty() || !self.images[live].listed {
            return;
        }
        self.images[live].in_flight.clear();
        self.images[live].listed = false;
        self.images[live].dead = true;
        let old = self.images[live].info;
        let tail = self.sources[s].tail;
        let base = self.images[live].base;
        self.correlation += 1;
        let info = ImageInfo { correlation: self.correlation, join_position: tail - base, ..old };
        self.images.push(Image {
            info,
            base,
            arrived: VecDeque::new(),
            in_flight: VecDeque::new(),
            honest: Some(s),
            dead: false,
            listed: true,
            polled_dead: false,
            forged_end: 0,
            got: Default::default(),
            polled_to: tail,
        });
        self.sources[s].live = self.images.len() - 1;
        self.sources[s].sent_at_least = tail;
        self.stats.successors += 1;
    }
}

pub(crate) fn run_bridge_in(data: &[u8]) -> InStats {
    let mut input = Input::new(data);
    let max = 1 + input.below(2048);
    let policy = if input.bool() { BackPressure::Hold } else { BackPressure::Drop };
    let mut info = BridgeInfo::new("s", BridgeDirection::In, "aeron:udp?endpoint=x:1", 1, "d");
    if input.bool() {
        info.resume_position = 32 * input.u16() as i64; // a predecessor's resume position
    }
    let term = 2048i64 << input.below(4);
    let chunk = 32 * (1 + input.below(16));
    let honest = 1 + input.below(3);
    let mut run = Run {
        core: Core::new(max),
        info,
        sink: Sink { mode: Mode::Take, max, got: Vec::new(), offers: Vec::new(), policy },
        policy,
        sources: Vec::new(),
        images: Vec::new(),
        correlation: 0,
        rotation: 0,
        stats: InStats::default(),
    };
    for s in 0..honest {
        let initial_term_id = input.interesting_i32();
        let session = HONEST_SESSIONS.wrapping_mul(s as i32 + 1);
        let start = term * input.below(3) as i64;
        run.correlation += 1;
        let info = ImageInfo {
            session,
            correlation: run.correlation,
            initial_term_id,
            term_length: term as i32,
            join_position: start,
        };
        run.images.push(Image {
            info,
            base: 0,
            arrived: VecDeque::new(),
            in_flight: VecDeque::new(),
            honest: Some(s),
            dead: false,
            listed: true,
            polled_dead: false,
            forged_end: start,
            got: Default::default(),
            polled_to: start,
        });
        run.sources.push(Source {
            term,
            chunk,
            initial_term_id,
            session,
            frames: Vec::new(),
            messages: Vec::new(),
            tail: start,
            src: 32 * input.below(100) as i64,
            sent_at_least: start,
            live: run.images.len() - 1,
        });
    }
    let mut seq = 0u32;
    let mut forged_images = 0;
    let trace = std::env::var_os("SHMLOG_FUZZ_TRACE").is_some();
    let mut ops = 0u64;
    while !input.is_empty() && ops < 4096 {
        ops += 1;
        let ctl = input.byte();
        let s = input.below(honest);
        match ctl % 16 {
            0..=3 => run.send(s, &mut input, &mut seq),
            4 | 5 => {
                let n = 1 + input.below(16);
                run.arrive(s, n);
            }
            6 | 7 => {
                let limit = 1 + input.below(64);
                run.poll_round(limit);
            }
            8 => {
                let (late, counted) = (input.below(8), input.below(1 << 16));
                run.driver_lost(s, late, counted);
            }
            9 => run.replace(s),
            // A dead honest image, drained, goes away.
            10 => {
                if let Some(i) = (0..run.images.len())
                    .find(|&i| run.images[i].honest == Some(s) && run.images[i].dead && run.images[i].listed)
                {
                    if run.images[i].arrived.is_empty() {
                        run.images[i].listed = false;
                    }
                }
            }
            // A forger's image comes (a new session, or its own successor) or goes.
            11 => {
                let forged: Vec<usize> = (0..run.images.len())
                    .filter(|&i| run.images[i].honest.is_none() && run.images[i].listed)
                    .collect();
                if !forged.is_empty() && (input.bool() || forged.len() >= MAX_FORGED_LISTED) {
                    let i = forged[input.below(forged.len())];
                    run.images[i].listed = false;
                } else if forged_images < MAX_FORGED_IMAGES {
                    forged_images += 1;
                    let session = match forged.first() {
                        Some(&i) if input.bool() => run.images[i].info.session.wrapping_add(1),
                        _ => 1 + input.below(10_000) as i32,
                    };
                    let term_length = if input.bool() { term as i32 } else { input.interesting_i32() };
                    let join_position =
                        if input.bool() { 32 * input.below(1 << 12) as i64 } else { input.interesting_i64() };
                    run.correlation += 1;
                    let info = ImageInfo {
                        session,
                        correlation: run.correlation,
                        initial_term_id: input.interesting_i32(),
                        term_length,
                        join_position,
                    };
                    run.images.push(Image {
                        info,
                        base: 0,
                        arrived: VecDeque::new(),
                        in_flight: VecDeque::new(),
                        honest: None,
                        dead: false,
                        listed: true,
                        polled_dead: false,
                        forged_end: join_position,
                        got: Default::default(),
                        polled_to: 0,
                    });
                }
            }
            // A forged fragment, on a forger's image.
            12 => {
                let forged: Vec<usize> = (0..run.images.len())
                    .filter(|&i| run.images[i].honest.is_none() && run.images[i].listed)
                    .collect();
                if forged.is_empty() {
                    continue;
                }
                let i = forged[input.below(forged.len())];
                let flags = input.byte();
                let reserved = match input.byte() % 4 {
                    0 => input.interesting_i64(),
                    1 => input.i64(),
                    // Any of the marks, "sent again" included, at honest-looking positions.
                    _ => encode(32 * input.u16() as i64, input.byte() as i64 & 31),
                };
                let len = input.below(300);
                let payload = (!input.byte().is_multiple_of(8)).then(|| message_bytes(1 << 40 | ops, len));
                let img = &mut run.images[i];
                img.forged_end = match input.byte() % 8 {
                    0 => input.interesting_i64(),
                    1 => img.forged_end.wrapping_sub(32 * input.below(64) as i64),
                    _ => img.forged_end.wrapping_add((len as i64 + 32 + 31) & !31),
                };
                img.arrived.push_back(Frame { end: img.forged_end, flags, reserved, payload, message: None });
                run.stats.forged += 1;
            }
            13 => {
                run.sink.mode = match input.byte() % 4 {
                    0 => Mode::PushBack,
                    1 => Mode::Refuse,
                    _ => Mode::Take,
                }
            }
            14 => {
                let Run { core, info, sink, .. } = &mut run;
                core.retry_held(&mut |m: &[u8]| sink.offer(m), info);
            }
            // One listed image polled alone (an order the fuzzer picks).
            _ => {
                let k = input.below(run.listed().len().max(1));
                let limit = 1 + input.below(64);
                run.poll(&[k], limit);
            }
        }
        if trace {
            let (messages, dropped, held) = (run.info.messages, run.info.dropped, run.core.is_holding());
            let images: Vec<String> = run
                .images
                .iter()
                .filter(|i| i.listed)
                .map(|i| {
                    format!(
                        "{}{}:{}/{}",
                        i.info.session,
                        if i.dead { "x" } else { "" },
                        i.arrived.len(),
                        i.in_flight.len()
                    )
                })
                .collect();
            eprintln!(
                "op {ops} {} s{s}: delivered {messages} dropped {dropped} dup {} held {held} images {images:?}",
                ctl % 16,
                run.info.duplicates
            );
        }
        let listed = run.listed().len();
        run.stats.images = run.stats.images.max(listed);
        check_status(&run.info, &mut run.core, max, listed);
    }
    // The end: everything in flight arrives, the local stream takes again, and the bridge is
    // polled until it has nothing left.
    for s in 0..honest {
        run.arrive(s, usize::MAX);
    }
    run.sink.mode = Mode::Take;
    for _ in 0..10_000 {
        let work = run.poll_round(64);
        if work == 0 && !run.core.is_holding() && run.images.iter().all(|i| !i.listed || i.arrived.is_empty())
        {
            break;
        }
    }
    let listed = run.listed().len();
    check_status(&run.info, &mut run.core, max, listed);
    assert!(!run.core.is_holding(), "the local stream takes again");
    for (i, img) in run.images.iter().enumerate() {
        if img.listed && img.honest.is_some() {
            assert!(img.arrived.is_empty(), "honest image {i} kept frames the bridge never polled");
        }
    }
    check_exact_delivery(&mut run, max);
    run.stats.delivered = run.info.messages;
    run.stats.dropped = run.info.dropped;
    run.stats.duplicates = run.info.duplicates;
    run.stats.back_pressure = run.info.back_pressure;
    run.stats.bad_positions = run.info.bad_positions;
    run.stats.losses = run.info.losses.len();
    run.stats
}

/// Every honest message whose frames all arrived on one image was offered and taken exactly
/// once, in its source's order, or refused for good, or is longer than the local stream takes;
/// none that did not arrive whole was delivered.
fn check_exact_delivery(run: &mut Run, max: usize) {
    assert_eq!(run.info.messages, run.sink.got.len() as u64);
    let got: Vec<(usize, u32)> = run.sink.got.iter().filter_map(|m| honest_id(m)).collect();
    for s in 0..run.sources.len() {
        let seqs: Vec<u32> = got.iter().filter(|g| g.0 == s).map(|g| g.1).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "source {s}: out of order or twice: {seqs:?}");
        for (k, m) in run.sources[s].messages.iter().enumerate() {
            let seq = seq_of(&run.sources[s], k);
            let offers: Vec<&(usize, u32, bool, bool)> =
                run.sink.offers.iter().filter(|o| o.0 == s && o.1 == seq).collect();
            let taken = offers.iter().filter(|o| o.2).count();
            let refused = offers.last().is_some_and(|o| o.3);
            if !m.arrived {
                assert_eq!(
                    taken, 0,
                    "source {s} message {k} (seq {seq}) did not arrive whole, yet was delivered"
                );
                run.stats.lost_on_the_wire += 1;
            } else if m.len > max {
                assert_eq!(taken, 0, "source {s} message {k} is longer than the local stream takes");
            } else {
                if !(taken == 1 || (taken == 0 && refused)) {
                    let images: Vec<String> = run
                        .images
                        .iter()
                        .enumerate()
                        .filter(|(_, img)| img.honest == Some(s))
                        .map(|(i, img)| {
                            format!(
                                "image {i} session {} join {} base {} listed {} dead {} frames of it {:?}",
                                img.info.session,
                                img.info.join_position,
                                img.base,
                                img.listed,
                                img.dead,
                                img.got.get(&k)
                            )
                        })
                        .collect();
                    let ends: Vec<i64> =
                        run.sources[s].frames[m.frames.clone()].iter().map(|f| f.end).collect();
                    panic!(
                        "source {s} message {k} (seq {seq}, {} bytes, start {} frames ending {ends:?}): taken {taken} \
                         times, offers {offers:?}; images {images:#?}",
                        m.len, m.start
                    );
                }
            }
        }
    }
}

/// The sequence number of source `s`'s message `k`, from its first frame.
fn seq_of(src: &Source, k: usize) -> u32 {
    let f = &src.frames[src.messages[k].frames.start];
    let p = f.payload.as_deref().unwrap_or_default();
    honest_id(p).map_or(u32::MAX, |(_, seq)| seq)
}
