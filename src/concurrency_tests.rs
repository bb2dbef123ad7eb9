//! The protocol's writer and readers (`stream::{Writer, Reader}`) on real threads over **one**
//! heap region each for the log and the slot table.
//!
//! The public API cannot give ThreadSanitizer this view: every `Publication` and `Subscription`
//! maps the file on its own, so writer and reader touch the same bytes through different
//! addresses, and TSan (which tracks addresses) sees no sharing at all. Here both sides use the
//! same addresses, so under `-Zsanitizer=thread` (`.ci/sanitizers.sh`) every payload copy is
//! checked against the commit protocol (I1) and flow control (I2, I4); with
//! `--cfg shmlog_mutants` and `SHMLOG_MUTANT=relaxed_commit` TSan must report a race. In plain test runs they are a
//! quick multi-threaded check of the same protocol.

use crate::api::assembler::FragmentAssembler;
use crate::api::handler::FragmentHandler;
use crate::error::OfferError;
use crate::layout::frame::max_message_len;
use crate::layout::log_meta::Geometry;
use crate::log::header::Header;
use crate::log::reader::Action;
use crate::log::Log;
use crate::stream::join::JoinAt;
use crate::stream::reader::Reader;
use crate::stream::writer::Writer;
use crate::testing::{claimed_slot, heap_log, heap_slots, AllAlive, Shared};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

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

/// Retries `op` while back-pressured.
fn retry<T>(mut op: impl FnMut() -> Result<T, OfferError>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match op() {
            Ok(v) => return v,
            Err(OfferError::BackPressured) => {
                assert!(Instant::now() < deadline, "writer held back for good");
                thread::yield_now();
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// Every fourth message goes through a claim, every fourth is preceded by an aborted claim, the
/// others are gathered from two slices.
fn write(mut writer: Writer<Shared, Shared, AllAlive>, n: u64) {
    for seq in 0..n {
        let m = message(seq);
        if seq % 4 == 1 {
            retry(|| writer.claim(3));
            writer.abort_claim();
        }
        if seq % 4 == 0 && m.len() <= writer.max_payload_len() {
            retry(|| writer.claim(m.len()));
            writer.with_claim_buffer(|buf| buf.copy_from_slice(&m));
            writer.commit_claim().expect("a pending claim");
        } else {
            retry(|| writer.offer_vectored(&[&m[..5], &m[5..]]));
        }
    }
    writer.close();
}

/// A subscriber's poll loop; returns how many whole messages it got, in order. Reader 0 polls
/// in place; reader 1 copies payloads and publishes its position fragment by fragment.
fn read(mut reader: Reader<Shared, Shared>, index: usize, n: u64) -> u64 {
    let deadline = Instant::now() + DEADLINE;
    let mut next = 0u64;
    let mut assembler = FragmentAssembler::new(|m: &[u8], _: &Header| {
        assert_eq!(check(m), next, "reader {index}: out of order");
        next += 1;
    });
    while !reader.at_end_of_stream() {
        let got = if index == 0 {
            reader.poll(|p, h| FragmentHandler::on_fragment(&mut assembler, p, h), 16)
        } else {
            reader.controlled_poll(
                |p, h| {
                    FragmentHandler::on_fragment(&mut assembler, p, h);
                    Action::Commit
                },
                16,
            )
        };
        assert_eq!(reader.fault(), None, "reader {index} at {}", reader.position());
        if got == 0 {
            assert!(Instant::now() < deadline, "reader {index} stuck at {}", reader.position());
            thread::yield_now();
        }
    }
    drop(assembler);
    assert_eq!(next, n, "reader {index} got {next} of {n}");
    next
}

#[test]
fn writer_and_readers_on_threads_over_one_region() {
    let geometry = Geometry { term_length: T, page_size: 4096, mtu: MTU, window: T / 2 };
    let (region, log) = heap_log(geometry, i32::MAX - 5, 41);
    let (slot_region, slots) = heap_slots(READERS);
    let readers: Vec<_> = (0..READERS)
        .map(|i| {
            let view = Log::open_any_term(Arc::clone(&region)).expect("a valid log");
            let slot = claimed_slot(&slot_region, i, i as i64);
            Reader::join(view, &slots, slot, JoinAt::Latest, i == 1).expect("joins before the writer starts")
        })
        .collect();
    let writer = Writer::new(log, slots, AllAlive).expect("a fresh log");
    let n = count();
    let readers: Vec<_> =
        readers.into_iter().enumerate().map(|(i, r)| thread::spawn(move || read(r, i, n))).collect();
    let writer = thread::spawn(move || write(writer, n));
    writer.join().unwrap();
    for r in readers {
        assert_eq!(r.join().unwrap(), n);
    }
}
