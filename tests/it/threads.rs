//! Publisher and subscribers on threads of one process, over real mappings.
//!
//! The multi-process tests cover the same protocol across processes, where ThreadSanitizer cannot
//! see; these are what `.ci/sanitizers.sh` runs under TSan (and ASan) to check the memory-ordering
//! protocol (I1, I4, I5) with every access instrumented. Sizes are small so an instrumented run
//! stays in seconds; `SHMLOG_THREADS_COUNT` raises the message count.

use crate::support;
use shmlog::{Action, FragmentAssembler, Header, JoinAt, OfferError, Publication, Subscription};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use support::ShmDir;

const T: usize = 64 * 1024;
const MTU: usize = 1024;
const DEADLINE: Duration = Duration::from_secs(120);

fn count() -> u64 {
    std::env::var("SHMLOG_THREADS_COUNT").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000)
}

/// Message `seq`: its number, then bytes derived from it; 0 to 3 fragments long.
fn message(seq: u64) -> Vec<u8> {
    let len = match seq % 7 {
        0 => 8,
        1..=3 => 8 + (seq % 200) as usize,
        4 | 5 => 8 + (seq % 1000) as usize,
        _ => 8 + (seq % (3 * (MTU as u64 - 32))) as usize,
    };
    let mut m = seq.to_le_bytes().to_vec();
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    m.extend((8..len).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    }));
    m
}

/// The sequence number of a whole message, after checking its bytes.
fn check(m: &[u8]) -> u64 {
    assert!(m.len() >= 8, "short message of {} bytes", m.len());
    let seq = u64::from_le_bytes(m[..8].try_into().unwrap());
    assert!(m == message(seq).as_slice(), "message {seq} is corrupt");
    seq
}

fn publication(dir: &ShmDir, name: &str) -> Publication {
    Publication::builder(name).dir(dir.path()).term_length(T).mtu(MTU).create().unwrap()
}

/// Offers `n` messages (half of them through `try_claim` when they fit), retrying while
/// back-pressured, then closes.
fn publish(mut p: Publication, n: u64) {
    let deadline = Instant::now() + DEADLINE;
    for seq in 0..n {
        let m = message(seq);
        loop {
            let r = if seq % 2 == 0 && m.len() <= p.max_payload_len() {
                p.try_claim(m.len()).map(|mut claim| {
                    claim.buffer().copy_from_slice(&m);
                    claim.set_reserved_value(seq as i64);
                    claim.commit()
                })
            } else {
                p.offer(&m)
            };
            match r {
                Ok(_) => break,
                Err(OfferError::BackPressured | OfferError::NotConnected) => {
                    assert!(Instant::now() < deadline, "publisher stuck at message {seq}");
                    thread::yield_now();
                }
                Err(e) => panic!("offer {seq}: {e}"),
            }
        }
    }
    p.close();
}

/// Reads whole messages until end of stream; returns how many, checking they come in order.
fn consume(mut sub: Subscription, controlled: bool) -> u64 {
    let deadline = Instant::now() + DEADLINE;
    let mut next = 0u64;
    let mut on_message = |m: &[u8]| {
        assert_eq!(check(m), next, "out of order");
        next += 1;
    };
    if controlled {
        let mut assembler = FragmentAssembler::new(|m: &[u8], _: &Header| {
            on_message(m);
            Action::Commit
        });
        while !sub.is_end_of_stream() {
            if sub.controlled_poll(&mut assembler, 7) == 0 {
                assert!(Instant::now() < deadline, "subscriber stuck");
                thread::yield_now();
            }
        }
    } else {
        let mut assembler = FragmentAssembler::new(|m: &[u8], _: &Header| on_message(m));
        while !sub.is_end_of_stream() {
            if sub.poll(&mut assembler, 64) == 0 {
                assert!(Instant::now() < deadline, "subscriber stuck");
                thread::yield_now();
            }
        }
    }
    next
}

#[test]
fn one_publisher_two_subscriber_threads_get_everything_in_order() {
    let dir = ShmDir::new("threads");
    let p = publication(&dir, "fan");
    let subs: Vec<Subscription> =
        (0..2).map(|_| Subscription::builder("fan").dir(dir.path()).open().unwrap()).collect();
    let n = count();
    let readers: Vec<_> =
        subs.into_iter().enumerate().map(|(i, sub)| thread::spawn(move || consume(sub, i == 1))).collect();
    let writer = thread::spawn(move || publish(p, n));
    writer.join().unwrap();
    for r in readers {
        assert_eq!(r.join().unwrap(), n);
    }
}

#[test]
fn subscribers_join_and_leave_while_the_publisher_runs() {
    let dir = ShmDir::new("threads");
    let p = publication(&dir, "churn");
    // One reader from the start keeps the publisher connected and checks the whole stream.
    let steady = Subscription::builder("churn").dir(dir.path()).open().unwrap();
    let n = count();
    let steady = thread::spawn(move || consume(steady, false));
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (stop, path) = (stop.clone(), dir.path().to_path_buf());
        thread::spawn(move || {
            let mut joins = 0;
            while !stop.load(Ordering::Relaxed) {
                let join = if joins % 2 == 0 { JoinAt::Latest } else { JoinAt::Slowest };
                let mut sub = Subscription::builder("churn").dir(&path).join_at(join).open().unwrap();
                joins += 1;
                // Whatever a late joiner reads must be whole, uncorrupted and in order.
                let mut last = None;
                let mut assembler = FragmentAssembler::new(|m: &[u8], _: &Header| {
                    let seq = check(m);
                    assert!(last.is_none_or(|l| seq > l), "{seq} after {last:?}");
                    last = Some(seq);
                });
                for _ in 0..50 {
                    sub.poll(&mut assembler, 16);
                    thread::yield_now();
                }
                let mut raw = 0;
                sub.block_poll(|block, _| raw = block.len(), 4096);
                drop(sub);
            }
            joins
        })
    };
    publish(p, n);
    stop.store(true, Ordering::Relaxed);
    assert!(churn.join().unwrap() > 0);
    assert_eq!(steady.join().unwrap(), n);
}
