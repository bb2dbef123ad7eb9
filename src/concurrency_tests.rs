//! A writer and readers on real threads over **one** heap region, with the crate's own appender,
//! reader, reader slots and flow control.
//!
//! The public API cannot give ThreadSanitizer this view: every `Publication` and `Subscription`
//! maps the file on its own, so writer and reader touch the same bytes through different
//! addresses, and TSan (which tracks addresses) sees no sharing at all. Here both sides use the
//! same addresses, so under `-Zsanitizer=thread` (`.ci/sanitizers.sh`) every payload copy is
//! checked against the commit protocol (I1) and flow control (I2, I4); with
//! `--cfg shmlog_mutant_relaxed_commit` TSan must report a race. In plain test runs they are a
//! quick multi-threaded check of the same protocol.

use crate::api::assembler::FragmentAssembler;
use crate::api::handler::FragmentHandler;
use crate::layout::frame::max_message_len;
use crate::layout::log_meta::Geometry;
use crate::layout::slots::file_length;
use crate::log::appender::{Appender, Tripped};
use crate::log::reader::{self, Action};
use crate::log::{Log, LogInit};
use crate::region::HeapRegion;
use crate::stream::flow::FlowControl;
use crate::stream::slots::Slots;
use crate::Header;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const SESSION: i32 = 41;
const T: usize = 4096;
const MTU: usize = 256;
const READERS: usize = 2;
const DEADLINE: Duration = Duration::from_secs(120);

fn count() -> u64 {
    std::env::var("SHMLOG_THREADS_COUNT").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000)
}

/// Message `seq`: its number, then bytes derived from it; one to three fragments.
fn message(seq: u64) -> Vec<u8> {
    let len = 8 + (seq.wrapping_mul(2_654_435_761) % (max_message_len(T) as u64 - 8)) as usize;
    let mut m = seq.to_le_bytes().to_vec();
    m.extend((8..len).map(|i| (seq as usize * 31 + i) as u8));
    m
}

fn check(m: &[u8]) -> u64 {
    let seq = u64::from_le_bytes(m[..8].try_into().expect("a sequence number"));
    assert!(m == message(seq).as_slice(), "message {seq} is corrupt");
    seq
}

/// The publication's loop over the appender: admission below the flow-control limit,
/// recomputed from the shared slots when reached, rotation on a trip. Every fourth message goes
/// through a claim, every fourth is preceded by an aborted claim, the others are gathered.
fn write(mut app: Appender<Arc<HeapRegion>>, slots: &Slots<HeapRegion>, n: u64) {
    let mut flow = FlowControl::new(T / 2, 0);
    let deadline = Instant::now() + DEADLINE;
    let mut admit = |app: &Appender<Arc<HeapRegion>>| {
        while app.position() >= flow.limit() && app.position() >= flow.recompute(slots, SESSION) {
            assert!(Instant::now() < deadline, "writer held back for good at {}", app.position());
            thread::yield_now();
        }
    };
    for seq in 0..n {
        let m = message(seq);
        if seq % 4 == 1 {
            loop {
                admit(&app);
                match app.claim(3) {
                    Ok(frame) => break app.abort(frame),
                    Err(Tripped) => app.rotate().expect("far from the last position"),
                }
            }
        }
        loop {
            admit(&app);
            let done = if seq % 4 == 0 && m.len() <= app.max_payload() {
                app.claim(m.len()).map(|frame| {
                    app.with_claim_payload(&frame, |buf| buf.copy_from_slice(&m));
                    app.commit(frame);
                })
            } else {
                app.append(&[&m[..5], &m[5..]], m.len()).map(drop)
            };
            match done {
                Ok(()) => break,
                Err(Tripped) => app.rotate().expect("far from the last position"),
            }
        }
    }
    app.log().set_eos_position(app.position());
}

/// A subscriber's poll loop over slot `slot`; returns how many whole messages it got, in order.
fn read(log: Log<Arc<HeapRegion>>, slots: &Slots<HeapRegion>, slot: usize, n: u64) -> u64 {
    let deadline = Instant::now() + DEADLINE;
    let mut next = 0u64;
    let mut assembler = FragmentAssembler::new(|m: &[u8], _: &Header| {
        assert_eq!(check(m), next, "reader {slot}: out of order");
        next += 1;
    });
    let mut position = 0;
    while position < log.eos_position() {
        let scan = reader::read(
            &log,
            position,
            16,
            |payload, header| {
                FragmentHandler::on_fragment(&mut assembler, payload, header);
                // The second reader publishes its position fragment by fragment.
                if slot == 1 {
                    Action::Commit
                } else {
                    Action::Continue
                }
            },
            |p| slots.set_position(slot, p),
        );
        assert_eq!(scan.fault, None, "reader {slot} at {position}");
        if scan.position == position {
            assert!(Instant::now() < deadline, "reader {slot} stuck at {position}");
            thread::yield_now();
        } else {
            position = scan.position;
            slots.set_position(slot, position);
        }
    }
    drop(assembler);
    assert_eq!(next, n, "reader {slot} got {next} of {n}");
    next
}

#[test]
fn writer_and_readers_on_threads_over_one_region() {
    let geometry = Geometry { term_length: T, page_size: 4096, mtu: MTU, window: T / 2 };
    let region = Arc::new(HeapRegion::new(geometry.file_length()));
    let init = LogInit {
        geometry,
        initial_term_id: i32::MAX - 5,
        session_id: SESSION,
        stream_id: 1,
        pid: 1,
        created_ns: 0,
        name: "threads",
    };
    let app = Appender::new(Log::initialize(Arc::clone(&region), &init)).unwrap();
    let slots = Arc::new(Slots::initialize(HeapRegion::new(file_length(READERS)), READERS));
    for slot in 0..READERS {
        slots.claim(slot, slot as i64, 0);
        slots.activate(slot, SESSION, 0);
    }
    let n = count();
    let readers: Vec<_> = (0..READERS)
        .map(|slot| {
            let (log, slots) = (Log::open_any_term(Arc::clone(&region)).unwrap(), Arc::clone(&slots));
            thread::spawn(move || read(log, &slots, slot, n))
        })
        .collect();
    let writer = {
        let slots = Arc::clone(&slots);
        thread::spawn(move || write(app, &slots, n))
    };
    writer.join().unwrap();
    for r in readers {
        assert_eq!(r.join().unwrap(), n);
    }
}
