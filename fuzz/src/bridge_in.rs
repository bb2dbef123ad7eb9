//! Target `bridge_in`: the in bridge's fragment input, as a network could send it, through the
//! duty cycle the bridge runs (`InCore`), with no Aeron.
//!
//! The scenario: up to 20 sessions (more than the 16 images the bridge keeps) send messages cut
//! into fragments, interleaved; forged fragments with arbitrary flags, sessions, reserved values
//! and lengths (or bounds that do not check out) come in between; images are replaced or go
//! away (the subscription's image list); the local stream takes messages, pushes back, or
//! refuses them, under the hold or the drop policy.
//!
//! Properties:
//! - no panic (debug assertions on: no overflow anywhere);
//! - the assembly is bounded: no image assembles more than the local stream's longest message,
//!   in a buffer no larger, and at most 16 images are kept;
//! - every message delivered is one that was sent whole: a BEGIN..END run of one session's
//!   fragments as the bridge received them, with every fragment's bounds good, in order;
//! - every drop is counted: each run that ended (delivered, refused, too long, cut by a BEGIN or a
//!   bad fragment) is counted once, in `messages`, `dropped` or `duplicates` (or held); a run
//!   still open, or cut off by its image going away, at most once;
//! - the status stays readable: positions >= -1, at most 16 losses, each with 0 <= from <= to,
//!   and no more bad positions, nor losses marked upstream, than messages settled.

use crate::input::{message_bytes, Input};
use shmlog_bridge::__fuzz::bridge_in::{
    encode, BackPressure, BridgeDirection, BridgeInfo, Core, Fragment, Next, AFTER_DROP, BEGIN, END,
    FRESH_START, LOST, MAX_IMAGES, MAX_LOSSES, SENT_AGAIN,
};
use shmlog::OfferError;

/// Sessions the scenario sends on.
const SESSIONS: usize = 20;

/// What the local stream does with an offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Take,
    PushBack,
    Refuse,
}

struct Sink {
    mode: Mode,
    max: usize,
    got: Vec<Vec<u8>>,
}

impl Sink {
    fn offer(&mut self, m: &[u8]) -> Result<i64, OfferError> {
        if m.len() > self.max {
            return Err(OfferError::MessageTooLarge { len: m.len(), max: self.max });
        }
        match self.mode {
            Mode::Take => {
                self.got.push(m.to_vec());
                Ok(0)
            }
            Mode::PushBack => Err(OfferError::BackPressured),
            Mode::Refuse => Err(OfferError::MaxPositionExceeded),
        }
    }
}

/// One session's sender: the message it is sending, cut into fragments.
#[derive(Default)]
struct Sender {
    next_start: i64,
    seq: u64,
    /// The message being sent, its fragment ends, the next fragment, its reserved value.
    current: Option<(Vec<u8>, Vec<usize>, usize, i64)>,
}

/// A run of one session's fragments since a BEGIN, as the bridge received them.
#[derive(Default, Clone)]
struct Run {
    bytes: Vec<u8>,
    /// A fragment of it had bad bounds, or it grew past the local stream's longest message: the
    /// bridge has counted it already (when that happened, or when it evicted the image).
    counted: bool,
}

/// What the bridge must have delivered and counted, from the fragments it received.
#[derive(Default)]
struct Reference {
    runs: Vec<Option<Run>>,
    /// Runs that ended whole, in order, as they must be delivered (a subsequence of them is).
    whole: Vec<Vec<u8>>,
    /// Runs the bridge must have settled exactly once.
    settled: u64,
    /// Runs it may have settled once (cut off with their image: evicted first, or not).
    maybe: u64,
}

impl Reference {
    fn take(&mut self, s: usize, flags: u8, payload: Option<&[u8]>, max: usize) {
        let (begin, end) = (flags & BEGIN != 0, flags & END != 0);
        if begin {
            if self.runs[s].take().is_some() {
                self.settled += 1; // cut by a BEGIN
            }
            self.runs[s] = Some(Run::default());
        }
        let Some(run) = self.runs[s].as_mut() else { return };
        if !run.counted {
            match payload {
                Some(p) if run.bytes.len() + p.len() <= max => run.bytes.extend_from_slice(p),
                _ => {
                    run.counted = true;
                    run.bytes = Vec::new();
                }
            }
        }
        if end {
            let run = self.runs[s].take().unwrap_or_default();
            self.settled += 1;
            if !run.counted {
                self.whole.push(run.bytes);
            }
        }
    }

    /// The session's image went away (or was replaced): the bridge forgets its run.
    fn forget(&mut self, s: usize) {
        if let Some(run) = self.runs[s].take() {
            match run.counted {
                true => self.settled += 1,
                false => self.maybe += 1,
            }
        }
    }

    fn open(&self) -> u64 {
        self.runs.iter().filter(|r| r.is_some()).count() as u64
    }
}

fn check_status(info: &BridgeInfo, core: &Core, max: usize) {
    let (len, capacity) = core.assembly_bytes();
    assert!(len <= max && capacity <= max, "assembly {len} bytes in {capacity}, max {max}");
    assert!(core.image_count() <= MAX_IMAGES, "{} images", core.image_count());
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
pub struct InStats {
    pub delivered: u64,
    pub dropped: u64,
    pub back_pressure: u64,
    pub bad_positions: u64,
    pub losses: usize,
    /// The most images kept at once.
    pub images: usize,
}

pub fn run_bridge_in(data: &[u8]) -> InStats {
    let mut images_kept = 0;
    let mut input = Input::new(data);
    let max = 1 + input.below(2048);
    let policy = if input.bool() { BackPressure::Hold } else { BackPressure::Drop };
    let mut core = Core::new(max);
    let mut info = BridgeInfo::new("s", BridgeDirection::In, "aeron:udp?endpoint=x:1", 1, "d");
    if input.bool() {
        info.resume_position = 32 * input.u16() as i64; // a predecessor's resume position
    }
    let mut sink = Sink { mode: Mode::Take, max, got: Vec::new() };
    let mut senders: Vec<Sender> = (0..SESSIONS).map(|_| Sender::default()).collect();
    let mut reference = Reference { runs: vec![None; SESSIONS], ..Reference::default() };
    // The subscription's image list: (session, correlation id) of the images there now.
    let mut images: Vec<(i32, i64)> = Vec::new();
    let mut correlation = 0i64;
    // `SHMLOG_FUZZ_TRACE` set: print every operation (to replay a failure by hand).
    let trace = std::env::var_os("SHMLOG_FUZZ_TRACE").is_some();
    let mut ops = 0;
    while !input.is_empty() && ops < 4096 {
        ops += 1;
        let ctl = input.byte();
        match ctl % 16 {
            // A fragment, sent (0..=9) or forged (10, 11), on a session whose image is listed.
            kind @ 0..=11 => {
                // A poll: the held message first; while it is held, nothing is polled.
                if core.is_holding() && !core.retry_held(&mut |m: &[u8]| sink.offer(m), &mut info) {
                    continue;
                }
                let s = if ctl & 0x10 != 0 { input.below(SESSIONS) } else { input.below(3) };
                if !images.iter().any(|&(x, _)| x == s as i32) {
                    correlation += 1;
                    images.push((s as i32, correlation));
                    core.sync_images(&images);
                }
                let (flags, reserved, payload) = if kind < 10 {
                    let (flags, reserved, payload) = next_fragment(&mut senders[s], s, &mut input, max);
                    (flags, reserved, Some(payload))
                } else {
                    let flags = input.byte();
                    let reserved = match input.byte() % 4 {
                        0 => input.interesting_i64(),
                        1 => input.i64(),
                        // Any of the four marks, "sent again" included (duplicates dropped).
                        _ => encode(32 * input.u16() as i64, input.byte() as i64 & 15),
                    };
                    let len = input.below(300);
                    let payload =
                        (!input.byte().is_multiple_of(8)).then(|| message_bytes(1 << 40 | ops, len));
                    (flags, reserved, payload)
                };
                reference.take(s, flags, payload.as_deref(), max);
                let f = Fragment { session: s as i32, flags, reserved, payload: payload.as_deref() };
                let next = core.on_fragment(f, &mut |m: &[u8]| sink.offer(m), policy, &mut info);
                assert_eq!(next == Next::Break, core.is_holding(), "Break exactly when a message is held");
            }
            12 | 13 => {
                sink.mode = match input.byte() % 4 {
                    0 => Mode::PushBack,
                    1 => Mode::Refuse,
                    _ => Mode::Take,
                }
            }
            // An image goes away, or is replaced by a new one of the same session.
            14 => {
                if !images.is_empty() {
                    let i = input.below(images.len());
                    let s = images[i].0 as usize;
                    if input.bool() {
                        images.swap_remove(i);
                    } else {
                        correlation += 1;
                        images[i].1 = correlation;
                    }
                    reference.forget(s);
                    senders[s].current = None; // a new image joins where its sender is
                    core.sync_images(&images);
                }
            }
            _ => {
                core.retry_held(&mut |m: &[u8]| sink.offer(m), &mut info);
            }
        }
        if trace {
            let (messages, dropped, held) = (info.messages, info.dropped, core.is_holding());
            eprintln!(
                "op {ops} ctl {ctl}: delivered {messages} dropped {dropped} held {held} {:?}",
                info.losses.last()
            );
        }
        check_status(&info, &core, max);
        images_kept = images_kept.max(core.image_count());
    }
    let held = core.is_holding() as u64;
    assert_eq!(info.messages, sink.got.len() as u64);
    // A message marked sent again that starts before where the next one was expected is
    // settled without being carried: counted in `duplicates`.
    let counted = info.messages + info.dropped + info.duplicates + held;
    assert!(
        reference.settled <= counted && counted <= reference.settled + reference.open() + reference.maybe,
        "settled {} open {} maybe {}: delivered {} dropped {} held {held}",
        reference.settled,
        reference.open(),
        reference.maybe,
        info.messages,
        info.dropped
    );
    assert!(info.bad_positions <= counted, "{} bad positions of {counted}", info.bad_positions);
    assert!(info.duplicates <= counted, "{} duplicates of {counted}", info.duplicates);
    // Each message marked as following a loss upstream is counted once, when it is settled.
    assert!(info.source_losses <= counted, "{} upstream losses of {counted}", info.source_losses);
    // Every message delivered was sent whole, in order.
    let mut whole = reference.whole.iter();
    for (i, m) in sink.got.iter().enumerate() {
        assert!(
            whole.any(|w| w == m),
            "delivered message {i} ({} bytes) was not sent whole, or out of order",
            m.len()
        );
    }
    InStats {
        delivered: info.messages,
        dropped: info.dropped,
        back_pressure: info.back_pressure,
        bad_positions: info.bad_positions,
        losses: info.losses.len(),
        images: images_kept,
    }
}

/// The next fragment of session `s`'s sender (a new message when none is in progress):
/// (flags, reserved value, payload).
fn next_fragment(sender: &mut Sender, s: usize, input: &mut Input<'_>, max: usize) -> (u8, i64, Vec<u8>) {
    if sender.current.is_none() {
        let len = match input.byte() % 8 {
            0 => 0,
            1..=4 => input.below(200),
            5 | 6 => input.below(max + 64),
            _ => input.below(3 * max + 1),
        };
        let chunk = 1 + input.below(512);
        sender.seq += 1;
        let bytes = message_bytes((s as u64) << 32 | sender.seq, len);
        let mut ends: Vec<usize> = (1..=len.div_ceil(chunk)).map(|i| (i * chunk).min(len)).collect();
        if ends.is_empty() {
            ends.push(0);
        }
        let marks = match input.byte() % 16 {
            0 => FRESH_START,
            1 => AFTER_DROP,
            2 => LOST,
            3 => FRESH_START | LOST,
            4 | 5 => SENT_AGAIN,
            _ => 0,
        };
        if marks == SENT_AGAIN && input.bool() {
            // Offered again after a lost driver: from where the bridge may have carried it already.
            sender.next_start = (sender.next_start - 32 * input.below(100) as i64).max(0);
        } else if input.byte().is_multiple_of(8) {
            sender.next_start += 32 * input.below(1000) as i64; // a jump: a gap, or padding
        }
        let reserved = encode(sender.next_start, marks);
        sender.next_start += ((len as i64 + 32 + 31) & !31).max(32);
        sender.current = Some((bytes, ends, 0, reserved));
    }
    let (bytes, ends, next, reserved) = sender.current.as_mut().expect("a message in progress");
    let from = if *next == 0 { 0 } else { ends[*next - 1] };
    let to = ends[*next];
    let mut flags = 0;
    if *next == 0 {
        flags |= BEGIN;
    }
    if *next + 1 == ends.len() {
        flags |= END;
    }
    *next += 1;
    let (payload, reserved) = (bytes[from..to].to_vec(), *reserved);
    if flags & END != 0 {
        sender.current = None;
    }
    (flags, reserved, payload)
}
