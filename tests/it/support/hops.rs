//! How many hops a wake-up takes to an awaiting task (issue 33), whatever runs the task: a
//! tokio runtime, async-io's `block_on`, a plain `block_on`, an event loop over a `WakeFd`. Each
//! harness drives a publisher (or a reader) on a thread of its own so that every message (or
//! every round of room) is one wake-up of a task that sleeps, and counts how often the process's
//! async waiter thread woke meanwhile: about once per wake-up when the task sleeps through it,
//! close to never when the task sleeps in a reactor (the waiter then only keeps its 1 s tick).

use super::{await_word, raw, ShmDir};
use shmlog::{Header, Publication, Subscription};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const T30: Duration = Duration::from_secs(30);

/// Voluntary context switches of this process's async waiter thread so far (its name cut to the
/// kernel's 15 characters; a thread just started names itself soon after).
pub fn waiter_switches() -> u64 {
    let deadline = Instant::now() + T30;
    loop {
        for task in std::fs::read_dir("/proc/self/task").unwrap() {
            let task = task.unwrap().path();
            if std::fs::read_to_string(task.join("comm")).is_ok_and(|c| c.trim() == "shmlog-async-wa") {
                let status = std::fs::read_to_string(task.join("status")).unwrap();
                let line = status.lines().find(|l| l.starts_with("voluntary_ctxt_switches:")).unwrap();
                return line.split_whitespace().nth(1).unwrap().parse().unwrap();
            }
        }
        assert!(Instant::now() < deadline, "no async waiter thread");
        std::thread::yield_now();
    }
}

/// The stream `name` in `dir`: a publication with terms of `term` bytes and a subscription.
pub fn stream(dir: &ShmDir, name: &str, term: usize) -> (Publication, Subscription) {
    let p = Publication::builder(name).dir(dir.path()).term_length(term).create().unwrap();
    let s =
        Subscription::builder(name).dir(dir.path()).liveness_interval(Duration::from_secs(5)).open().unwrap();
    (p, s)
}

/// `count` messages (each its sequence number), every one offered only once the receiver took
/// the one before (`receive` stores how many it took in the counter it is given, checking the
/// order itself) and armed its bell again: each is a wake-up. Returns the waiter thread's
/// switches while `receive` ran (the waiter must exist before: make the receiver first).
pub fn paced_messages(
    dir: &ShmDir,
    name: &str,
    mut p: Publication,
    count: u64,
    receive: impl FnOnce(&AtomicU64),
) -> u64 {
    let got = Arc::new(AtomicU64::new(0));
    let path = raw::readers_path(dir.path(), name);
    let sender = {
        let got = Arc::clone(&got);
        std::thread::spawn(move || {
            for seq in 0..count {
                let deadline = Instant::now() + T30;
                while got.load(Ordering::Acquire) < seq {
                    assert!(Instant::now() < deadline, "message {seq} never taken");
                    std::thread::yield_now();
                }
                await_word(&path, raw::slots::READERS_ARMED, |v| v == 1, "the receiver never waited again");
                p.offer(&seq.to_le_bytes()).unwrap();
            }
            p
        })
    };
    let before = waiter_switches();
    receive(&got);
    let switches = waiter_switches() - before;
    drop(sender.join().unwrap());
    assert_eq!(got.load(Ordering::Acquire), count, "every message received");
    switches
}

/// Checks a received message against the next sequence number and counts it.
pub fn took(got: &AtomicU64, m: &[u8]) {
    let seq = got.load(Ordering::Relaxed);
    assert_eq!(u64::from_le_bytes(m[..8].try_into().unwrap()), seq);
    got.store(seq + 1, Ordering::Release);
}

/// A message of 1000 bytes beginning with `seq`.
pub fn message(seq: u64) -> Vec<u8> {
    let mut m = seq.to_le_bytes().to_vec();
    m.resize(1000, 0);
    m
}

/// `send` sends `count` messages of [`message`] (storing how many it sent in the counter it is
/// given) on a stream whose window holds 31 of them (terms of 64 KiB); the reader frees room in
/// rounds: each time the sender has sent more since the last round and armed the writer's bell
/// again (back-pressured: asleep, or about to be), it drains everything committed, which rings
/// the sender awake. Returns (rounds, the waiter thread's switches while `send` ran); at least
/// 50 rounds, or the sender was seldom back-pressured.
pub fn rounds_of_room(
    dir: &ShmDir,
    name: &str,
    mut sub: Subscription,
    count: u64,
    send: impl FnOnce(&AtomicU64),
) -> (u64, u64) {
    let sent = Arc::new(AtomicU64::new(0));
    let path = raw::readers_path(dir.path(), name);
    let reader = {
        let sent = Arc::clone(&sent);
        std::thread::spawn(move || {
            let (mut next, mut rounds, mut last) = (0u64, 0u64, 0u64);
            while next < count {
                let deadline = Instant::now() + T30;
                while sent.load(Ordering::Acquire) <= last && sent.load(Ordering::Acquire) < count {
                    assert!(Instant::now() < deadline, "the sender never sent after {last}");
                    std::thread::yield_now();
                }
                if sent.load(Ordering::Acquire) < count {
                    // The last round may fit in the window: the sender then ends without waiting.
                    let done = || sent.load(Ordering::Acquire) >= count;
                    await_word(
                        &path,
                        raw::slots::WRITER_ARMED,
                        |v| v == 1 || done(),
                        "the sender never waited for room",
                    );
                    if raw::file_i32(&path, raw::slots::WRITER_ARMED) == 1 {
                        rounds += 1;
                    }
                }
                last = sent.load(Ordering::Acquire);
                // Everything it sent until it waited (not what it sends once woken: that is the
                // next round's).
                while next < last {
                    let limit = (last - next) as usize;
                    let mut took = |m: &[u8], _: &Header| {
                        assert_eq!(u64::from_le_bytes(m[..8].try_into().unwrap()), next);
                        next += 1;
                    };
                    let polled = sub.poll_blocking(&mut took, limit, T30);
                    assert!(matches!(polled, shmlog::Polled::Fragments(_)), "{polled:?}");
                }
            }
            rounds
        })
    };
    let before = waiter_switches();
    send(&sent);
    let switches = waiter_switches() - before;
    let rounds = reader.join().unwrap();
    assert_eq!(sent.load(Ordering::Acquire), count, "every message sent");
    assert!(rounds >= 50, "only {rounds} rounds: the sender was seldom back-pressured");
    (rounds, switches)
}
