//! One writer interface (`Publish`): a `Sender`, an `AsyncSender` and generic code take either
//! publication, and the blocking calls of the exclusive one (`offer_blocking`, `wait_connected`)
//! work on a concurrent log's writers too, every back-pressured writer woken when a reader moves.
//! Positions and bounded waits, never sleeps, synchronise the tests.

use crate::support;

use shmlog::{
    AsyncSender, Bytes, ConcurrentPublication, Publication, Publish, Receiver, Sender, Subscription,
};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::ShmDir;

const T20: Duration = Duration::from_secs(20);
/// Longer than any wait here: a writer left asleep by a lost wake-up sleeps through its timeout.
const LIVENESS: Duration = Duration::from_secs(60);

fn writer(dir: &ShmDir, name: &str) -> ConcurrentPublication {
    Publication::builder(name)
        .dir(dir.path())
        .term_length(64 * 1024) // a window of 32 KiB
        .liveness_interval(LIVENESS)
        .open_concurrent()
        .unwrap()
}

fn reader(dir: &ShmDir, name: &str) -> Subscription {
    Subscription::builder(name).dir(dir.path()).open().unwrap()
}

/// Code written once for any writer.
fn hello<P: Publish>(p: &mut P) -> Result<i64, shmlog::OfferError> {
    p.wait_connected(T20).unwrap();
    p.offer_blocking(b"hello", T20)
}

/// Writer `w`'s message `seq`, `len` bytes.
fn message(w: u64, seq: u64, len: usize) -> Vec<u8> {
    let mut m = [w.to_le_bytes(), seq.to_le_bytes()].concat();
    m.resize(len, w as u8);
    m
}

/// The same generic code drives an exclusive publication and a concurrent writer.
#[test]
fn generic_code_takes_either_publication() {
    let dir = ShmDir::new("publish-generic");
    let mut exclusive = Publication::builder("x").dir(dir.path()).create().unwrap();
    let mut concurrent = writer(&dir, "c");
    let (mut rx, mut rc) = (reader(&dir, "x"), reader(&dir, "c"));
    let (px, pc) = (hello(&mut exclusive).unwrap(), hello(&mut concurrent).unwrap());
    assert_eq!((px, pc), (64, 64), "one 5-byte message each: a 32-byte header, aligned to 32");
    // Chosen at run time: the trait is dyn-compatible.
    let mut either: Vec<Box<dyn Publish + Send>> = vec![Box::new(exclusive), Box::new(concurrent)];
    for p in &mut either {
        p.offer(b"again").unwrap();
    }
    for r in [&mut rx, &mut rc] {
        let mut got = Vec::new();
        let deadline = Instant::now() + T20;
        while got.len() < 2 && Instant::now() < deadline {
            r.poll(|m: &[u8], _: &shmlog::Header| got.push(m.to_vec()), 8);
        }
        assert_eq!(got, [b"hello".to_vec(), b"again".to_vec()]);
    }
}

/// Three threads, each a `Sender` over its own `ConcurrentPublication` handle, send through a
/// window far smaller than what they send, so each sleeps in `send_timeout` again and again: the
/// receiver gets every message once, each writer's in order. A writer left asleep by a lost
/// wake-up would sleep through its liveness interval (60 s) and its send's timeout (20 s).
#[test]
fn senders_over_concurrent_writers_on_threads_deliver_every_message_in_each_writers_order() {
    let dir = ShmDir::new("publish-senders");
    let (writers, count, len) = (3u64, 600u64, 1000);
    let mut rx = Receiver::new(reader(&dir, "s"), Bytes);
    let first = writer(&dir, "s");
    let mut handles = vec![first.try_clone().unwrap(), first.try_clone().unwrap(), first];
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let p = handles.pop().unwrap();
            std::thread::spawn(move || {
                let mut tx: Sender<Vec<u8>, Bytes, ConcurrentPublication> = Sender::new(p, Bytes);
                tx.publication().wait_connected(T20).unwrap();
                for seq in 0..count {
                    tx.send_timeout(&message(w, seq, len), T20).unwrap();
                }
                tx.into_publication()
            })
        })
        .collect();
    let mut next: BTreeMap<u64, u64> = BTreeMap::new();
    for _ in 0..writers * count {
        let m = rx.recv_timeout(T20).unwrap();
        let w = u64::from_le_bytes(m[..8].try_into().unwrap());
        let seq = u64::from_le_bytes(m[8..16].try_into().unwrap());
        let expected = next.entry(w).or_default();
        assert_eq!(seq, *expected, "writer {w}'s messages in its order, none twice");
        *expected += 1;
    }
    assert_eq!(next, (0..writers).map(|w| (w, count)).collect());
    // Keep the writers until the receiver has everything: the last one to leave ends the stream.
    let writers: Vec<ConcurrentPublication> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    drop(writers);
}

/// `true` while thread `tid` of this process sleeps in a futex wait (the doorbell's sleep).
fn in_futex_wait(tid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/wchan")).is_ok_and(|w| w.starts_with("futex"))
}

/// Two concurrent writers back-pressured, both asleep on the writers' bell: the reader's one
/// move wakes them both. Before, the bell woke one sleeper (one publication wrote a stream), and
/// the other slept through its timeout (20 s).
#[test]
fn every_sleeping_concurrent_writer_wakes_when_the_reader_moves() {
    let dir = ShmDir::new("publish-wake-all");
    let mut sub = reader(&dir, "s");
    let mut fill = writer(&dir, "s");
    fill.wait_connected(T20).unwrap();
    let mut filled = 0;
    let refused = loop {
        match fill.offer(&[7; 1000]) {
            Ok(_) => filled += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(refused, shmlog::OfferError::BackPressured);
    let sleepers: Vec<_> = (0..2)
        .map(|_| {
            let mut p = fill.try_clone().unwrap();
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            let t = std::thread::spawn(move || {
                let me = std::fs::read_link("/proc/thread-self").unwrap();
                tid_tx.send(me.file_name().unwrap().to_string_lossy().into_owned()).unwrap();
                let started = Instant::now();
                let r = p.offer_blocking(b"room at last", T20);
                (r, started.elapsed())
            });
            (tid_rx.recv().unwrap(), t)
        })
        .collect();
    // Both asleep on the bell (bounded wait on what the kernel says of each thread).
    let deadline = Instant::now() + T20;
    while !sleepers.iter().all(|(tid, _)| in_futex_wait(tid)) {
        assert!(Instant::now() < deadline, "the writers never slept");
        std::thread::yield_now();
    }
    // The reader drains the window: its move rings the writers' bell once.
    let mut taken = 0;
    while taken < filled {
        assert!(Instant::now() < deadline, "the reader took {taken} of {filled}");
        sub.poll(|_: &[u8], _: &shmlog::Header| taken += 1, 64);
    }
    for (_, t) in sleepers {
        let (r, waited) = t.join().unwrap();
        // Woken by the move, not by its timeout (after which its next offer finds room).
        assert!(
            r.is_ok() && waited < T20 / 2,
            "a writer slept through the reader's move: {r:?} after {waited:?}"
        );
    }
}

/// An `AsyncSender` over a concurrent writer awaits room like one over the exclusive publication,
/// made outside a runtime (through the waiter thread; in async-io's reactor with the feature
/// `async-io`) and in a tokio reactor (made inside one).
#[test]
fn an_async_sender_over_a_concurrent_writer_awaits_room() {
    for in_reactor in [false, true] {
        let dir = ShmDir::new("publish-async");
        let mut rx = Receiver::new(reader(&dir, "s"), Bytes);
        let mut p = writer(&dir, "s");
        p.wait_connected(T20).unwrap();
        let count = 200u64; // 32 messages of 1000 bytes fill the window
        let sender = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let mut tx = if in_reactor {
                runtime.block_on(async { AsyncSender::new(Sender::new(p, Bytes)) }).unwrap()
            } else {
                AsyncSender::new(Sender::new(p, Bytes)).unwrap()
            };
            assert_eq!(tx.in_reactor(), in_reactor || cfg!(feature = "async-io"));
            runtime.block_on(async {
                for seq in 0..count {
                    tx.send(&message(0, seq, 1000)).await.unwrap();
                }
            });
            tx.into_inner().into_publication()
        });
        for seq in 0..count {
            let m = rx.recv_timeout(T20).unwrap();
            assert_eq!(m, message(0, seq, 1000));
        }
        drop(sender.join().unwrap());
    }
}
