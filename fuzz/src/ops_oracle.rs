//! Fuzz target `ops_oracle`: random operations on the protocol's own writer and readers
//! (`shmlog`'s `stream::Writer` and `stream::Reader`), all in one thread over heap memory,
//! checked against a `VecDeque` oracle of what every reader must see.
//!
//! Nothing of the protocol is re-stated here: offers, claims, rotation, admission, sweeps, joins
//! and polls are the shipped code. The model only decides what happens next, keeps the oracle,
//! plays the kernel (which readers are alive), and writes stray words into slots nobody owns.

use crate::input::{fresh_log, is_zero, message_bytes, small_geometry, Input, SESSION, STREAM};
use shmlog::__fuzz::frame::{
    framed_length, max_message_len, HeaderRest, FRAME_ALIGNMENT, HEADER_LEN, REST_OFFSET,
};
use shmlog::__fuzz::meta::PARTITION_COUNT;
use shmlog::__fuzz::reader;
use shmlog::__fuzz::slot_layout::{self as s, file_length, slot_offset};
use shmlog::__fuzz::{
    align, header, HeapRegion, JoinAt, JoinRefused, Liveness, Log, Reader, Region, SlotLocks, SlotMut, Slots,
    Writer,
};
use shmlog::{Action, FragmentAssembler, FragmentHandler, Header, OfferError};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, VecDeque};
use std::rc::Rc;
use std::sync::Arc;

type Shared = Arc<HeapRegion>;

/// A committed message, as the oracle remembers it.
#[derive(Debug)]
struct Msg {
    /// Position of its first frame.
    start: i64,
    /// Position after its last frame.
    end: i64,
    bytes: Vec<u8>,
    reserved: i64,
}

type Delivered = Rc<RefCell<Vec<(Vec<u8>, Header)>>>;
type Sink = Box<dyn FnMut(&[u8], &Header)>;

/// What one reader must see next.
struct Oracle {
    slot: usize,
    /// Messages still to be delivered; the front may be partly delivered already.
    expected: VecDeque<Rc<Msg>>,
    /// Payload bytes of the front message already delivered.
    front_offset: usize,
    /// Whole messages the assembler must still hand out, in order.
    whole_expected: VecDeque<Rc<Msg>>,
    assembled: Delivered,
    assembler: FragmentAssembler<Sink>,
}

impl Oracle {
    fn new(slot: usize) -> Self {
        let assembled: Delivered = Rc::default();
        let sink = assembled.clone();
        let delegate: Sink = Box::new(move |m: &[u8], h: &Header| sink.borrow_mut().push((m.to_vec(), *h)));
        Self {
            slot,
            expected: VecDeque::new(),
            front_offset: 0,
            whole_expected: VecDeque::new(),
            assembled,
            assembler: FragmentAssembler::new(delegate),
        }
    }

    /// Checks that `payload`/`h` is exactly the next fragment the oracle expects; returns its
    /// payload length.
    fn check(&self, payload: &[u8], h: &Header, max_payload: usize) -> usize {
        let Some(msg) = self.expected.front() else {
            panic!(
                "reader in slot {} got a fragment ending at {} that nobody published for it",
                self.slot,
                h.position()
            );
        };
        let off = self.front_offset;
        let chunk = (msg.bytes.len() - off).min(max_payload);
        let frame_start = msg.start + (off / max_payload * (max_payload + HEADER_LEN)) as i64;
        let frame_end = frame_start + align(chunk + HEADER_LEN, FRAME_ALIGNMENT) as i64;
        assert_eq!(h.position(), frame_end, "fragment position (message at {}..{})", msg.start, msg.end);
        assert_eq!(h.frame_length() as usize, chunk + HEADER_LEN, "fragment length");
        assert!(payload == &msg.bytes[off..off + chunk], "fragment bytes differ from the message's");
        assert_eq!(h.is_begin(), off == 0, "BEGIN flag");
        assert_eq!(h.is_end(), off + chunk == msg.bytes.len(), "END flag");
        assert_eq!(h.reserved_value(), msg.reserved, "reserved value");
        assert_eq!((h.session_id(), h.stream_id()), (SESSION, STREAM), "session and stream ids");
        chunk
    }

    /// Takes the fragment just checked: the oracle moves on and the assembler sees it.
    fn consume(&mut self, payload: &[u8], h: &Header, chunk: usize) {
        FragmentHandler::on_fragment(&mut self.assembler, payload, h);
        self.front_offset += chunk;
        let msg = self.expected.front().expect("checked before");
        if self.front_offset == msg.bytes.len() {
            let msg = self.expected.pop_front().expect("checked before");
            self.whole_expected.push_back(msg);
            self.front_offset = 0;
        }
    }

    /// Whole messages from the assembler must be the ones delivered, in order.
    fn check_assembled(&mut self) {
        for (bytes, h) in self.assembled.borrow_mut().drain(..) {
            let Some(msg) = self.whole_expected.pop_front() else {
                panic!(
                    "the assembler delivered a message ending at {} that was not delivered whole",
                    h.position()
                );
            };
            assert!(bytes == msg.bytes, "assembled bytes differ from the message at {}", msg.start);
            assert_eq!(h.position(), msg.end, "assembled position");
            assert!(h.is_begin() && h.is_end(), "assembled flags");
            assert_eq!(h.frame_length() as usize, HEADER_LEN + msg.bytes.len(), "assembled length");
            assert_eq!(h.reserved_value(), msg.reserved, "assembled reserved value");
        }
        assert!(self.whole_expected.is_empty(), "the assembler held back a whole message");
    }

    /// Where the next fragment the oracle expects starts, if any.
    fn next_fragment_start(&self, max_payload: usize) -> Option<i64> {
        let msg = self.expected.front()?;
        Some(msg.start + (self.front_offset / max_payload * (max_payload + HEADER_LEN)) as i64)
    }
}

/// One subscriber: the protocol's reader and its oracle.
struct ModelReader {
    reader: Reader<Shared, Shared>,
    oracle: Oracle,
}

/// The kernel in the model: which slots a live reader holds, and whether the liveness interval
/// has passed (the writer may then sweep).
#[derive(Clone, Default)]
struct Kernel {
    alive: Rc<RefCell<BTreeSet<usize>>>,
    sweep_due: Rc<Cell<bool>>,
}

impl SlotLocks for Kernel {
    type Error = std::convert::Infallible;

    fn try_lock(&self, index: usize) -> Result<bool, Self::Error> {
        Ok(!self.alive.borrow().contains(&index))
    }

    fn unlock(&self, _index: usize) {}
}

impl Liveness for Kernel {
    fn sweep_due(&mut self) -> bool {
        self.sweep_due.replace(false)
    }
}

/// What a run of [`ops_oracle`] did, for tests of the seed corpus.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct OpsStats {
    pub published: usize,
    pub fragments: usize,
    pub joins: usize,
    pub refused_joins: usize,
    pub terms: i64,
    pub back_pressured: usize,
    pub max_position: usize,
    pub forged: usize,
    pub evicted: usize,
    pub copied_readers: usize,
}

/// A held claim: its bytes, reserved value and place.
struct Held {
    bytes: Vec<u8>,
    reserved: i64,
    start: i64,
    end: i64,
}

/// The writer, its readers, and the oracle, over heap memory.
struct Model {
    writer: Writer<Shared, Shared, Kernel>,
    kernel: Kernel,
    log_region: Shared,
    slot_region: Shared,
    /// The slot table as readers see it (for joins and checks).
    slots: Slots<Shared>,
    /// Live readers.
    readers: Vec<ModelReader>,
    /// Slots of readers that crashed: active at their last position until a sweep frees them.
    crashed: BTreeSet<usize>,
    /// Slots holding a stray word nobody owns (freed by a sweep).
    forged: BTreeSet<usize>,
    /// Committed messages a joiner might still read.
    history: VecDeque<Rc<Msg>>,
    held: Option<Held>,
    term_length: usize,
    window: i64,
    largest_framed: i64,
    max_message: usize,
    max_payload: usize,
    max_position: i64,
    next_seq: u64,
    stats: OpsStats,
    /// `SHMLOG_FUZZ_TRACE` set: print every operation (to replay a failure by hand).
    trace: bool,
}

impl Model {
    fn new(input: &mut Input<'_>) -> Self {
        let g = small_geometry(input);
        let initial = input.interesting_i32();
        let start_term = match input.below(8) {
            0 => 2,
            1 => i32::MAX - 1 - input.below(3) as i32,
            _ => 0,
        };
        let log = fresh_log(g, initial, start_term);
        let log_region: Shared = Arc::new(HeapRegion::new(g.file_length()));
        // The fresh log, copied into shared memory so readers can view the same bytes.
        let mut image = vec![0u8; g.file_length()];
        log.region().copy_out(0, &mut image);
        // SAFETY: a fresh region nobody else can see yet.
        unsafe { shmlog::__fuzz::RegionMut::copy_in(&*log_region, 0, &image) };
        let log = Log::open_any_term(Arc::clone(&log_region)).expect("a fresh log");
        let slot_count = 1 + input.below(6);
        let slot_region: Shared = Arc::new(HeapRegion::new(file_length(slot_count)));
        let table = Slots::initialize(Arc::clone(&slot_region), slot_count);
        let kernel = Kernel::default();
        let writer = Writer::new(log, table, kernel.clone()).expect("a fresh log has a writer position");
        let slots = Slots::open(Arc::clone(&slot_region)).expect("an initialised slot table");
        let max_payload = writer.max_payload_len();
        let max_message = max_message_len(g.term_length);
        Self {
            max_position: writer.log().terms().max_position(),
            writer,
            kernel,
            log_region,
            slot_region,
            slots,
            readers: Vec::new(),
            crashed: BTreeSet::new(),
            forged: BTreeSet::new(),
            history: VecDeque::new(),
            held: None,
            term_length: g.term_length,
            window: g.window as i64,
            largest_framed: framed_length(max_message, max_payload) as i64,
            max_message,
            max_payload,
            next_seq: 0,
            stats: OpsStats::default(),
            trace: std::env::var_os("SHMLOG_FUZZ_TRACE").is_some(),
        }
    }

    /// A claim held across operations is aborted by the next offer or claim, unless that one is
    /// refused as too large before it starts.
    fn forget_held(&mut self, outcome: Result<i64, OfferError>) {
        if !matches!(outcome, Err(OfferError::MessageTooLarge { .. })) {
            self.held = None;
        }
    }

    /// Checks the outcome of an offer or claim that did not append.
    fn check_refusal(&self, e: OfferError, before: i64, len: usize) {
        // A message that did not fit the term padded it and rotated before being refused.
        let after = self.writer.position();
        let t = self.term_length as i64;
        assert!(
            after == before || (after % t == 0 && after > before && after - before < t),
            "a refused operation moved the writer from {before} to {after}"
        );
        match e {
            OfferError::BackPressured => {
                assert!(self.writer.position() >= self.writer.limit(), "back pressured below the limit")
            }
            OfferError::NotConnected => assert!(self.readers.is_empty(), "not connected with live readers"),
            OfferError::MaxPositionExceeded => {
                let framed = framed_length(len, self.max_payload) as i64;
                assert!(before + framed >= self.max_position, "max position refused at {before} + {framed}");
            }
            OfferError::MessageTooLarge { len: l, max } => {
                assert!(l == len && l > max, "too large: {l} > {max}");
                assert_eq!(after, before, "a message too large moved the writer");
            }
            OfferError::Corrupt => panic!("the exclusive writer reported corrupt tail counters"),
            other => panic!("an outcome the oracle does not know: {other:?}"),
        }
    }

    /// A message became visible: live readers at or before it must see it.
    fn publish(&mut self, msg: Msg) {
        let msg = Rc::new(msg);
        self.stats.published += 1;
        for r in &mut self.readers {
            if r.reader.position() <= msg.start {
                r.oracle.expected.push_back(msg.clone());
            }
        }
        self.history.push_back(msg);
        let horizon = self.writer.position() - 2 * self.term_length as i64;
        while self.history.front().is_some_and(|m| m.end <= horizon) {
            self.history.pop_front();
        }
    }

    fn message_len(&self, input: &mut Input<'_>) -> usize {
        let mp = self.max_payload;
        match input.below(8) {
            0 => 0,
            1..=3 => input.below(mp.min(self.max_message) + 1),
            4 | 5 => input.below(self.max_message + 1),
            6 => (mp * (1 + input.below(self.max_message / mp + 1)) + input.below(3)).saturating_sub(1),
            _ => input.below(2 * self.max_message + 2),
        }
    }

    fn op_offer(&mut self, input: &mut Input<'_>, vectored: bool) {
        let len = self.message_len(input);
        let bytes = message_bytes(self.next_seq, len);
        let mut parts: Vec<&[u8]> = Vec::new();
        if vectored {
            let mut cuts: Vec<usize> = (0..input.below(4)).map(|_| input.below(len + 1)).collect();
            cuts.sort_unstable();
            let mut at = 0;
            for c in cuts {
                parts.push(&bytes[at..c]);
                at = c;
            }
            parts.push(&bytes[at..]);
        }
        let before = self.writer.position();
        let result = if vectored { self.writer.offer_vectored(&parts) } else { self.writer.offer(&bytes) };
        self.forget_held(result);
        match result {
            Ok(end) => {
                self.next_seq += 1;
                assert_eq!(end, self.writer.position(), "offer returned another position");
                let start = end - framed_length(len, self.max_payload) as i64;
                assert!(start >= before, "message at {start} behind the writer at {before}");
                if start > before {
                    assert_eq!(start % self.term_length as i64, 0, "skipped space other than a term's end");
                }
                self.publish(Msg { start, end, bytes, reserved: 0 });
            }
            Err(e) => {
                self.stats.back_pressured += (e == OfferError::BackPressured) as usize;
                self.stats.max_position += (e == OfferError::MaxPositionExceeded) as usize;
                self.check_refusal(e, before, len);
            }
        }
    }

    /// A claim, filled in place (as a slice or through the closure form), then committed,
    /// aborted, or held (0, 1, 2).
    fn op_claim(&mut self, input: &mut Input<'_>, then: u8) {
        let len = if input.below(8) == 0 {
            self.max_payload + input.below(3)
        } else {
            input.below(self.max_payload + 1)
        };
        let reserved = input.interesting_i64();
        let as_slice = input.bool();
        let before = self.writer.position();
        let result = self.writer.claim(len);
        self.forget_held(result);
        let end = match result {
            Ok(end) => end,
            Err(e) => return self.check_refusal(e, before, len),
        };
        let start = end - align(len + HEADER_LEN, FRAME_ALIGNMENT) as i64;
        if self.trace {
            eprintln!(
                "  claim of {len} bytes at {start}..{end}, then {}",
                ["commit", "abort", "hold"][then.min(2) as usize]
            );
        }
        assert!(start >= before, "claim at {start} behind the writer at {before}");
        let bytes = message_bytes(self.next_seq, len);
        self.next_seq += 1;
        let fill = |buf: &mut [u8]| {
            assert_eq!(buf.len(), len, "claim buffer length");
            assert!(is_zero(buf), "claim buffer is not clean (I3)");
            buf.copy_from_slice(&bytes);
        };
        if as_slice {
            fill(self.writer.claim_buffer());
        } else {
            self.writer.with_claim_buffer(fill);
        }
        self.writer.set_claim_reserved_value(reserved);
        match then {
            0 => self.commit(Held { bytes, reserved, start, end }),
            1 => self.writer.abort_claim(),
            _ => self.held = Some(Held { bytes, reserved, start, end }),
        }
    }

    fn commit(&mut self, claim: Held) {
        assert_eq!(self.writer.commit_claim(), Some(claim.end), "commit of a pending claim");
        self.publish(Msg {
            start: claim.start,
            end: claim.end,
            bytes: claim.bytes,
            reserved: claim.reserved,
        });
    }

    fn op_held(&mut self, commit: bool) {
        match self.held.take() {
            Some(claim) if commit => self.commit(claim),
            Some(_) => self.writer.abort_claim(),
            None => {
                assert_eq!(self.writer.commit_claim(), None, "a claim pending that the model did not hold")
            }
        }
    }

    /// `Publication::connected_readers`: sweep, recompute, report.
    fn op_check_readers(&mut self) {
        self.kernel.sweep_due.set(true);
        let counted = self.writer.check_readers();
        self.note_evictions();
        let live = self.readers.len();
        let unowned = self.crashed.len() + self.forged.len();
        assert!(counted.count >= live, "{} readers counted, {live} alive", counted.count);
        assert!(counted.count <= live + unowned, "counted more readers than slots in use");
    }

    /// Slots a sweep freed: crashed readers' and forged ones, never a live reader's.
    fn note_evictions(&mut self) {
        let before = self.crashed.len() + self.forged.len();
        let slots = &self.slots;
        self.crashed.retain(|&i| slots.state(i).1 != s::STATE_FREE);
        self.forged.retain(|&i| slots.state(i).1 != s::STATE_FREE);
        self.stats.evicted += before - self.crashed.len() - self.forged.len();
    }

    /// A slot no live reader holds, if any.
    fn free_slot(&self, input: &mut Input<'_>) -> Option<usize> {
        let alive = self.kernel.alive.borrow();
        let free: Vec<usize> = (0..self.slots.count()).filter(|i| !alive.contains(i)).collect();
        (!free.is_empty()).then(|| free[input.below(free.len())])
    }

    /// A reader joins through `Reader::join`, into a slot whose lock is free (the kernel lets a
    /// claimer take over a dead owner's slot); in place or copying.
    fn op_join(&mut self, input: &mut Input<'_>) {
        let producer = self.writer.position();
        let rule = match input.below(4) {
            0 | 1 => JoinAt::Latest,
            2 => JoinAt::Slowest,
            _ => JoinAt::Position(
                producer - (FRAME_ALIGNMENT * input.below(self.term_length / FRAME_ALIGNMENT + 2)) as i64,
            ),
        };
        let copy = input.bool();
        // The first slot whose lock is free, as `Slots::lock_free` takes it.
        let Some(slot) = (0..self.slots.count()).find(|i| !self.kernel.alive.borrow().contains(i)) else {
            return;
        };
        self.crashed.remove(&slot);
        self.forged.remove(&slot);
        self.kernel.alive.borrow_mut().insert(slot);
        let mut mine = SlotMut::new(Arc::clone(&self.slot_region), slot_offset(slot), slot);
        mine.claim(&*self.slot_region, 100 + slot as i64, 0);
        let view = Log::open_any_term(Arc::clone(&self.log_region)).expect("the model's log is valid");
        let reader = match Reader::join(view, &self.slots, mine, rule, copy) {
            Ok(reader) => reader,
            Err((mine, refused)) => {
                mine.free();
                self.kernel.alive.borrow_mut().remove(&slot);
                self.stats.refused_joins += 1;
                self.check_refused_join(rule, refused, slot, input);
                return;
            }
        };
        let position = reader.position();
        if self.trace {
            let states: Vec<_> =
                (0..self.slots.count()).map(|i| (self.slots.state(i), self.slots.position(i))).collect();
            eprintln!("  {rule:?} join into slot {slot} at {position} (copy {copy}); slots {states:?}");
        }
        assert!(position <= producer && position % FRAME_ALIGNMENT as i64 == 0, "joined at {position}");
        if let JoinAt::Position(p) = rule {
            assert_eq!(position, p, "an explicit join landed elsewhere");
        }
        // Delivery starts where a message starts: the reader skips the rest of a message it
        // joined inside of (possible at the slowest reader).
        let mut oracle = Oracle::new(slot);
        oracle.expected = self.history.iter().filter(|m| m.start >= position).cloned().collect();
        self.stats.joins += 1;
        self.stats.copied_readers += copy as usize;
        self.readers.push(ModelReader { reader, oracle });
    }

    /// A refused join must have a true reason, and name a position where a retry joins.
    fn check_refused_join(&mut self, rule: JoinAt, refused: JoinRefused, slot: usize, input: &mut Input<'_>) {
        let producer = self.writer.position();
        match (rule, refused) {
            (
                JoinAt::Position(requested),
                JoinRefused::NotAvailable { requested: r, oldest, newest, nearest },
            ) => {
                assert_eq!((r, newest), (requested, producer));
                let log = self.writer.log();
                let starts = |p: i64| p == newest || reader::message_starts_at(log, p);
                let in_log = requested >= oldest && requested <= newest;
                assert!(
                    !in_log || !starts(requested),
                    "join at a message start {requested} in [{oldest}, {newest}] refused"
                );
                assert!(
                    oldest >= newest - self.term_length as i64 && starts(oldest),
                    "oldest {oldest} is no message start"
                );
                assert!(
                    nearest >= oldest && nearest <= newest && starts(nearest),
                    "nearest {nearest} is no message start"
                );
                assert!(
                    nearest >= requested.clamp(oldest, newest),
                    "nearest {nearest} before the request {requested}"
                );
                // A retry at the nearest position joins (the log has not moved meanwhile).
                if input.bool() {
                    self.kernel.alive.borrow_mut().insert(slot);
                    let mut mine = SlotMut::new(Arc::clone(&self.slot_region), slot_offset(slot), slot);
                    mine.claim(&*self.slot_region, 100 + slot as i64, 0);
                    let view = Log::open_any_term(Arc::clone(&self.log_region)).expect("valid");
                    match Reader::join(view, &self.slots, mine, JoinAt::Position(nearest), false) {
                        Ok(reader) => reader.leave().free(),
                        Err((_, e)) => panic!("a retry at the nearest position {nearest} was refused: {e:?}"),
                    }
                    self.kernel.alive.borrow_mut().remove(&slot);
                }
            }
            (JoinAt::Slowest, JoinRefused::GaveUp) => {
                // The slowest reader can be more than a term back (a crashed or forged slot, or a
                // reader that joined at an old position): retried until it gave up.
                let slowest = self.slots.scan(SESSION, Some(slot), producer).min;
                assert!(slowest.is_some(), "join at the slowest reader gave up without one");
            }
            (rule, refused) => panic!("{rule:?} join refused: {refused:?}"),
        }
    }

    fn op_poll(&mut self, input: &mut Input<'_>) {
        if self.readers.is_empty() {
            return;
        }
        let k = input.below(self.readers.len());
        match input.below(4) {
            0 | 1 => {
                let limit = [0, 1, 2, 3, 5, 8, 64, usize::MAX][input.below(8)];
                self.poll(k, limit, &[Action::Continue]);
            }
            2 => {
                let limit = 1 + input.below(8);
                let actions: Vec<Action> = (0..1 + input.below(4)).map(|_| input.action()).collect();
                self.poll(k, limit, &actions);
            }
            _ => {
                let max_bytes = [0, 32, 64, 200, self.term_length / 2, usize::MAX][input.below(6)];
                self.block_poll(k, max_bytes);
            }
        }
    }

    /// `Reader::poll` (plain when `actions` is just `Continue`) or `Reader::controlled_poll`;
    /// returns whether the reader moved.
    fn poll(&mut self, k: usize, limit: usize, actions: &[Action]) -> bool {
        let mp = self.max_payload;
        let ModelReader { reader, oracle } = &mut self.readers[k];
        let before = reader.position();
        let mut calls = 0;
        let last_end = Cell::new(before);
        let fragments = Cell::new(0);
        let mut handle = |payload: &[u8], h: &Header, action: Action| {
            let chunk = oracle.check(payload, h, mp);
            if action != Action::Abort {
                oracle.consume(payload, h, chunk);
                fragments.set(fragments.get() + 1);
                last_end.set(h.position());
            }
            action
        };
        let got = if actions == [Action::Continue] {
            reader.poll(
                |p, h| {
                    handle(p, h, Action::Continue);
                },
                limit,
            )
        } else {
            reader.controlled_poll(
                |p, h| {
                    let action = actions[calls % actions.len()];
                    calls += 1;
                    handle(p, h, action)
                },
                limit,
            )
        };
        assert_eq!(got, fragments.get(), "fragments counted");
        self.stats.fragments += got;
        self.after_read(k, before)
    }

    /// `Reader::block_poll`: the block's frames, length words included, decoded and checked.
    fn block_poll(&mut self, k: usize, max_bytes: usize) -> bool {
        let mp = self.max_payload;
        let ModelReader { reader, oracle } = &mut self.readers[k];
        let before = reader.position();
        let mut frames = 0;
        let consumed = reader.block_poll(
            |block, at| {
                assert!(at >= before, "block before the reader");
                let mut o = 0;
                while o < block.len() {
                    let len = i32::from_le_bytes(block[o..o + 4].try_into().unwrap()) as usize;
                    let rest = HeaderRest::decode(block[o + REST_OFFSET..o + HEADER_LEN].try_into().unwrap());
                    let aligned = align(len, FRAME_ALIGNMENT);
                    let h = header(len as i32, rest, at + (o + aligned) as i64);
                    let payload = &block[o + HEADER_LEN..o + len];
                    let chunk = oracle.check(payload, &h, mp);
                    oracle.consume(payload, &h, chunk);
                    frames += 1;
                    o += aligned;
                }
            },
            max_bytes,
        );
        self.stats.fragments += frames;
        assert_eq!(self.readers[k].reader.position(), before + consumed as i64, "block consumed bytes");
        self.after_read(k, before)
    }

    /// The oracle's checks of where a reader stands after a read.
    fn after_read(&mut self, k: usize, before: i64) -> bool {
        let mp = self.max_payload;
        let writer = self.writer.position();
        let ModelReader { reader, oracle } = &mut self.readers[k];
        assert_eq!(reader.fault(), None, "fault at {} in a log only this crate wrote", reader.position());
        let position = reader.position();
        assert!(position >= before, "reader moved back");
        assert!(position <= writer, "reader passed the writer");
        assert_eq!(self.slots.position(oracle.slot), position, "published position");
        oracle.check_assembled();
        match oracle.next_fragment_start(mp) {
            Some(next) if oracle.front_offset > 0 => {
                assert_eq!(position, next, "reader stopped mid-fragment")
            }
            Some(next) => {
                assert!(position <= next, "reader at {position} passed an undelivered message at {next}")
            }
            None => {}
        }
        position != before
    }

    fn op_leave(&mut self, input: &mut Input<'_>) {
        if self.readers.is_empty() {
            return;
        }
        let k = input.below(self.readers.len());
        let r = self.readers.remove(k);
        let slot = r.oracle.slot;
        self.kernel.alive.borrow_mut().remove(&slot);
        if input.bool() {
            // Subscription::drop.
            r.reader.leave().free();
        } else {
            // A crash: the slot stays active at its position until a sweep frees it (a reader
            // that is dropped without `leave` writes nothing).
            drop(r.reader);
            self.crashed.insert(slot);
        }
    }

    /// A stray word in a slot no live reader holds: a position past the writer, far behind it,
    /// or anything, in a slot that may look active in our session. Nobody holds its lock, so a
    /// sweep frees it. Live readers must not notice.
    fn op_forge(&mut self, input: &mut Input<'_>) {
        let Some(slot) = self.free_slot(input) else { return };
        let producer = self.writer.position();
        let position = match input.below(4) {
            0 => producer + FRAME_ALIGNMENT as i64 * (1 + input.below(1 << 16)) as i64,
            1 => i64::MAX - input.below(4) as i64,
            2 => producer - (2 + input.below(4)) as i64 * self.term_length as i64,
            _ => input.interesting_i64(),
        };
        let mut stray = SlotMut::new(Arc::clone(&self.slot_region), slot_offset(slot), slot);
        stray.claim(&*self.slot_region, -1, 0);
        stray.activate(if input.below(4) == 0 { input.interesting_i32() } else { SESSION }, position);
        self.crashed.remove(&slot);
        self.forged.insert(slot);
        self.stats.forged += 1;
    }

    /// Every live reader reads everything committed; then nothing may be left over, and once
    /// nothing but live readers holds the writer, an offer is admitted.
    fn op_drain(&mut self) {
        let mp = self.max_payload;
        for k in 0..self.readers.len() {
            while self.poll(k, 64, &[Action::Continue]) {}
        }
        let writer = self.writer.position();
        let held_start = self.held.as_ref().map(|h| h.start);
        for r in &self.readers {
            if self.trace && !r.oracle.expected.is_empty() {
                let p = r.reader.position();
                let log = self.writer.log();
                eprintln!(
                    "stuck reader {}: term {} committed {} starts {} message {}",
                    r.oracle.slot,
                    self.term_length,
                    reader::frame_committed_at(log, p),
                    reader::frame_starts_at(log, p),
                    reader::message_starts_at(log, p)
                );
            }
            assert!(
                r.oracle.expected.is_empty(),
                "reader in slot {} has {} messages left after a drain (next at {:?})",
                r.oracle.slot,
                r.oracle.expected.len(),
                r.oracle.next_fragment_start(mp)
            );
            let position = r.reader.position();
            assert!(
                position == writer || Some(position) == held_start,
                "drained reader at {position} (writer {writer}, held claim at {held_start:?}, committed there: {}, fault {:?})",
                reader::frame_committed_at(self.writer.log(), position),
                r.reader.fault()
            );
        }
        self.kernel.sweep_due.set(true);
        self.writer.check_readers();
        self.note_evictions();
        if !self.readers.is_empty()
            && self.crashed.is_empty()
            && self.forged.is_empty()
            && held_start.is_none()
        {
            let framed = self.largest_framed;
            assert!(
                writer < self.writer.limit() || writer + framed >= self.max_position,
                "held back at {writer} (limit {}) with every reader caught up",
                self.writer.limit()
            );
        }
    }

    /// Checks that hold between any two operations.
    fn check_invariants(&self) {
        let log = self.writer.log();
        let writer = self.writer.position();
        let t = self.term_length as i64;
        assert_eq!(log.producer_position(), Ok(writer), "published tail");
        // A reader the writer counts trails it by at most a window and a message; one it has
        // not counted yet (it joined after the last recompute) by a term more.
        let bound = t + self.window + self.largest_framed;
        for r in &self.readers {
            let position = r.reader.position();
            assert!(writer - position <= bound, "writer at {writer} lapped the reader at {position}");
            assert_eq!(self.slots.position(r.oracle.slot), position, "slot position");
            assert_eq!(self.slots.state(r.oracle.slot), (SESSION, s::STATE_ACTIVE), "a live reader's slot");
        }
        let terms = log.terms();
        let last = (writer - 1).max(0);
        assert_eq!(terms.position(terms.term_id(last), terms.term_offset(last)), last, "position round trip");
        // I3: the rest of the active term and the cleaned part of the next partition are zero.
        let offset = terms.term_offset(writer);
        if writer < self.max_position {
            let active = log.partition_base(terms.partition(writer));
            let next = log.partition_base((terms.partition(writer) + 1) % PARTITION_COUNT);
            let mut rest = vec![0u8; self.term_length - offset];
            log.region().copy_out(active + offset, &mut rest);
            assert!(is_zero(&rest), "unwritten part of the active term is dirty (I3)");
            let mut cleaned = vec![0u8; offset];
            log.region().copy_out(next, &mut cleaned);
            assert!(is_zero(&cleaned), "the next partition is not cleaned up to the writer (I3)");
        }
    }
}

/// Fuzz target `ops_oracle`: random operation sequences — offers of 0 to several fragments,
/// vectored offers, claims committed, aborted or held, polls with random fragment limits and
/// actions, block polls, readers joining (latest, slowest, at positions back in the log; in
/// place or copying), leaving and crashing, stray words in unowned slots, sweeps — on a tiny term
/// so rotations are frequent, all through the shipped `Writer` and `Reader`.
///
/// Properties: every live reader gets exactly the bytes of every message committed after its
/// join position, in order, once, with the right flags, positions and reserved values; the
/// assembler hands out exactly the messages delivered whole; no fault; positions only move
/// forward and match the slot; the writer never laps a live reader, whatever stray words say;
/// it keeps partitions clean ahead of itself (I3) and is refused only for a reason that holds;
/// refused joins name a position where a retry joins; sweeps free only unowned slots.
pub fn ops_oracle(data: &[u8]) {
    let _ = run_ops(data);
}

/// [`ops_oracle`]; returns what the run did.
pub(crate) fn run_ops(data: &[u8]) -> OpsStats {
    let mut input = Input::new(data);
    let mut m = Model::new(&mut input);
    let mut ops = 0;
    while !input.is_empty() && ops < 2000 {
        ops += 1;
        let op = input.byte();
        if m.trace {
            let readers: Vec<(usize, i64)> =
                m.readers.iter().map(|r| (r.oracle.slot, r.reader.position())).collect();
            eprintln!(
                "op {op:#04x}: writer {} limit {} readers {readers:?}",
                m.writer.position(),
                m.writer.limit()
            );
        }
        m.kernel.sweep_due.set(op & 0x80 != 0);
        match op & 0x0F {
            0..=3 => m.op_offer(&mut input, false),
            4 => m.op_offer(&mut input, true),
            5 => m.op_claim(&mut input, 0),
            6 => m.op_claim(&mut input, 1),
            7 => m.op_claim(&mut input, 2),
            8 => m.op_held(op & 0x10 != 0),
            9..=11 => m.op_poll(&mut input),
            12 => m.op_join(&mut input),
            13 if op & 0x40 != 0 => m.op_forge(&mut input),
            13 => m.op_leave(&mut input),
            14 => m.op_check_readers(),
            _ => m.op_drain(),
        }
        m.note_evictions();
        m.check_invariants();
    }
    m.op_drain();
    m.check_invariants();
    m.stats.terms = m.writer.position() >> m.writer.log().terms().bits;
    m.stats
}
