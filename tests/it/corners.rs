//! Corners a new user hits: the end of a read loop when the publisher dies, joins that land inside
//! a message, a frame that never completes, waiting for several readers, what is left behind, a
//! slot file too small, a dead session's tail, and copying delivery.

use crate::support;

use shmlog::{Action, Error, Header, JoinAt, OfferError, Publication, Subscription};
use std::time::{Duration, Instant};
use support::peer::{Cfg, Peer};
use support::spawns::no_spawns;
use support::{raw, ShmDir};

const T10: Duration = Duration::from_secs(10);
const TERM: usize = 64 << 10;

fn publication(dir: &ShmDir, name: &str) -> Publication {
    Publication::builder(name).dir(dir.path()).term_length(TERM).mtu(1024).create().unwrap()
}

fn subscription(dir: &ShmDir, name: &str) -> Subscription {
    Subscription::builder(name).dir(dir.path()).liveness_interval(Duration::from_millis(10)).open().unwrap()
}

/// A publisher process on `name` that publishes `count` messages and then SIGKILLs itself.
fn doomed_publisher(dir: &ShmDir, name: &str, count: u64) -> Peer {
    let cfg = Cfg::new()
        .set("dir", dir.path().display())
        .set("name", name)
        .set("term", TERM)
        .set("mtu", 1024)
        .set("max_len", 2000)
        .set("kill", format!("before:{count}"))
        .set("wait_go", 1);
    let mut p = Peer::spawn("doomed", "publisher", &cfg);
    p.expect("ready", T10);
    p
}

/// The README's read loop, `while !is_closed()`, ends when the publisher is killed, after every
/// message it committed was delivered.
#[test]
fn a_read_loop_ends_when_the_publisher_is_killed() {
    let dir = ShmDir::new("closed");
    let mut publisher = doomed_publisher(&dir, "k", 500);
    let mut sub = subscription(&dir, "k");
    sub.wait_connected(T10).unwrap();
    publisher.send("go");
    let deadline = Instant::now() + T10;
    let mut got = 0;
    while !sub.is_closed() {
        assert!(Instant::now() < deadline, "the loop did not end ({got} messages)");
        got += sub.poll(shmlog::FragmentAssembler::new(|_: &[u8], _: &Header| {}), 64);
    }
    publisher.wait_exit(T10);
    assert!(!sub.is_end_of_stream(), "killed, not closed");
    assert!(!sub.is_connected());
    assert_eq!(sub.fault(), None);
    assert!(got >= 500, "every committed message (and fragment) was delivered first: {got}");
}

/// A closed publisher ends the loop too, and a new publisher's session opens it again.
#[test]
fn is_closed_follows_end_of_stream_and_new_sessions() {
    let dir = ShmDir::new("closed2");
    let mut p = publication(&dir, "c");
    let mut sub = subscription(&dir, "c");
    assert!(!sub.is_closed());
    p.offer(b"last").unwrap();
    p.close();
    let deadline = Instant::now() + T10;
    while !sub.is_closed() && Instant::now() < deadline {
        sub.poll(|_: &[u8], _: &Header| {}, 10);
    }
    assert!(sub.is_closed() && sub.is_end_of_stream());
    let next = publication(&dir, "c");
    while sub.session_id() != Some(next.session_id()) && Instant::now() < deadline {
        sub.poll(|_: &[u8], _: &Header| {}, 10);
    }
    assert_eq!(sub.session_id(), Some(next.session_id()));
    assert!(!sub.is_closed(), "a new session is open");
}

/// A reader joining at the slowest reader, who stands inside a fragmented message, gets no
/// fragment of that message, not even with raw `poll`: delivery starts with the next message.
#[test]
fn a_late_joiner_never_sees_the_middle_of_a_message() {
    let dir = ShmDir::new("midjoin");
    let mut p = publication(&dir, "m");
    let mut first = subscription(&dir, "m");
    let big = vec![7u8; 3000]; // four fragments of at most 992 bytes
    p.offer(&big).unwrap();
    p.offer(b"next").unwrap();
    // The first reader takes two fragments and stands inside the message.
    let mut flags = Vec::new();
    assert_eq!(first.poll(|_: &[u8], h: &Header| flags.push(h.is_begin()), 2), 2);
    assert_eq!(flags, [true, false]);
    let mut late = subscription(&dir, "m");
    assert_eq!(late.join_position(), Some(first.position()), "joined at the slowest reader");
    let mut seen = Vec::new();
    let deadline = Instant::now() + T10;
    while seen.is_empty() && Instant::now() < deadline {
        late.poll(|m: &[u8], h: &Header| seen.push((m.to_vec(), h.is_begin(), h.is_end())), 10);
    }
    assert_eq!(seen, [(b"next".to_vec(), true, true)], "only whole messages from the next one on");
}

/// An explicit join inside a message is refused with the nearest position where a message
/// starts, and a retry there joins.
#[test]
fn position_not_available_names_a_position_that_joins() {
    let dir = ShmDir::new("nearest");
    let mut p = publication(&dir, "n");
    let _holder = subscription(&dir, "n");
    let big = vec![1u8; 2500];
    let first_end = p.offer(&big).unwrap();
    let second_end = p.offer(b"small").unwrap();
    let inside = 1024; // the second fragment of the first message
    let open_at =
        |position| Subscription::builder("n").dir(dir.path()).join_at(JoinAt::Position(position)).open();
    match open_at(inside) {
        Err(Error::PositionNotAvailable { requested, oldest, newest, nearest }) => {
            assert_eq!((requested, oldest, newest, nearest), (inside, 0, second_end, first_end));
            let retry = open_at(nearest).unwrap();
            assert_eq!(retry.join_position(), Some(first_end));
        }
        other => panic!("expected PositionNotAvailable, got {other:?}"),
    }
    assert!(
        matches!(open_at(second_end + 32), Err(Error::PositionNotAvailable { nearest, .. }) if nearest == second_end)
    );
}

/// A frame whose length word stays zero although the publisher has reserved space after it
/// (a peer wrote over a committed frame) becomes a fault within the liveness interval instead of
/// a silent stall.
#[test]
fn a_frame_that_never_completes_becomes_a_fault() {
    let dir = ShmDir::new("stall");
    let mut p = publication(&dir, "s");
    let mut sub = subscription(&dir, "s");
    p.offer(b"one").unwrap();
    p.offer(b"two").unwrap();
    assert_eq!(sub.poll(|_: &[u8], _: &Header| {}, 1), 1);
    let stuck = sub.position();
    raw::write_at(&raw::log_path(dir.path(), "s"), stuck as u64, &0i32.to_le_bytes());
    let start = Instant::now();
    let mut offered = false;
    while sub.fault().is_none() && start.elapsed() < T10 {
        assert_eq!(sub.poll(|_: &[u8], _: &Header| panic!("delivered past a stall"), 10), 0);
        if !offered && start.elapsed() > Duration::from_millis(50) {
            // Before this, the stall is a frame being written; now the publisher moves on, so
            // the frame at `stuck` can no longer be on its way.
            assert!(sub.fault().is_none(), "a frame in the making is no fault");
            p.offer(b"three").unwrap();
            offered = true;
        }
    }
    assert!(sub.fault().is_some_and(|f| f.contains("never committed")), "{:?}", sub.fault());
    assert_eq!(sub.position(), stuck);
}

/// `wait_for_readers(n)` returns once n readers read the session, not at the first.
#[test]
fn wait_for_readers_waits_for_all_of_them() {
    let dir = ShmDir::new("waitn");
    let mut p = publication(&dir, "w");
    let _a = subscription(&dir, "w");
    let _b = subscription(&dir, "w");
    assert!(matches!(p.wait_for_readers(3, Duration::from_millis(50)), Err(Error::Timeout)));
    assert_eq!(p.connected_readers(), 2);
    let path = dir.path().to_path_buf();
    let third = std::thread::spawn(move || Subscription::builder("w").dir(&path).open().unwrap());
    p.wait_for_readers(3, T10).unwrap();
    assert_eq!(p.connected_readers(), 3);
    drop(third.join().unwrap());
    assert_eq!(p.connected_readers(), 2);
}

/// A subscription with no publisher creates the stream's slot file and, as its last user,
/// removes it when it goes: nothing is left behind.
#[test]
fn a_subscription_without_a_publisher_leaves_nothing_behind() {
    // The last user knows it is last when no one else holds a lock on the file. A spawn by a
    // parallel test between two drops keeps the first subscription's open file (and its lock)
    // alive in the child until it execs, so spawns wait for this test (CI saw it).
    let _quiet = no_spawns();
    let dir = ShmDir::new("leftover");
    let a = subscription(&dir, "x");
    let b = subscription(&dir, "x");
    assert_eq!(dir.entries(), ["x.readers"]);
    drop(a);
    assert_eq!(dir.entries(), ["x.readers"], "still used by the other subscription");
    drop(b);
    assert_eq!(dir.entries(), Vec::<String>::new());
    // With a publisher that keeps its files, the file stays for the next session.
    let p = Publication::builder("x").dir(dir.path()).term_length(TERM).keep_files(true).create().unwrap();
    drop(subscription(&dir, "x"));
    assert_eq!(dir.entries(), ["x.log", "x.readers"]);
    drop(p);
    assert_eq!(dir.entries(), ["x.log", "x.readers"]);
}

/// A slot file created by a subscription with fewer slots than a later publisher asks for is
/// refused with a typed error while in use, and replaced once its users are gone.
#[test]
fn a_slot_file_with_fewer_slots_than_asked_is_a_typed_error() {
    let dir = ShmDir::new("fewslots");
    let sub = Subscription::builder("f").dir(dir.path()).max_readers(2).open().unwrap();
    let create = || Publication::builder("f").dir(dir.path()).term_length(TERM).max_readers(8).create();
    match create() {
        Err(Error::ReaderSlots { slots: 2, wanted: 8, .. }) => {}
        other => panic!("expected ReaderSlots, got {other:?}"),
    }
    assert_eq!(dir.entries(), ["f.readers"], "no log published on failure");
    drop(sub);
    let mut p = create().unwrap();
    let subs: Vec<_> = (0..8).map(|_| subscription(&dir, "f")).collect();
    assert_eq!(p.connected_readers(), 8);
    drop(subs);
}

/// `controlled_poll` returning `Abort` (or a poll of zero fragments) never makes a subscription
/// leave a dead publisher's session while committed messages remain; it switches to the new
/// session only once they were all delivered.
#[test]
fn abort_never_drops_a_dead_sessions_tail() {
    let dir = ShmDir::new("aborttail");
    let mut doomed = doomed_publisher(&dir, "a", 20);
    let mut sub = subscription(&dir, "a");
    sub.wait_connected(T10).unwrap();
    let old = sub.session_id();
    doomed.send("go");
    doomed.wait_exit(T10);
    let next = publication(&dir, "a");
    // Abort everything for longer than many liveness intervals: the subscription must stay.
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        assert_eq!(sub.controlled_poll(|_: &[u8], _: &Header| Action::Abort, 10), 0);
        assert_eq!(sub.poll(|_: &[u8], _: &Header| {}, 0), 0);
        assert_eq!(sub.session_id(), old, "left a dead session with committed messages unread");
    }
    let mut got = 0;
    let deadline = Instant::now() + T10;
    while sub.session_id() == old && Instant::now() < deadline {
        got += sub.poll(shmlog::FragmentAssembler::new(|_: &[u8], _: &Header| {}), 100);
    }
    assert!(got >= 20, "the dead session's messages came first: {got}");
    assert_eq!(sub.session_id(), Some(next.session_id()));
}

/// With `copy_payloads(true)` handlers see the same messages, from a buffer of the subscription.
#[test]
fn copied_delivery_hands_out_the_same_messages() {
    let dir = ShmDir::new("copied");
    let mut p = publication(&dir, "k");
    let mut plain = subscription(&dir, "k");
    let mut copied = Subscription::builder("k").dir(dir.path()).copy_payloads(true).open().unwrap();
    let messages: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 10 + 97 * i as usize]).collect();
    let (mut got_plain, mut got_copied) = (Vec::new(), Vec::new());
    let mut plain_in = shmlog::FragmentAssembler::new(|m: &[u8], _: &Header| got_plain.push(m.to_vec()));
    let mut copied_in = shmlog::FragmentAssembler::new(|m: &[u8], _: &Header| got_copied.push(m.to_vec()));
    let deadline = Instant::now() + T10;
    let mut next = 0;
    while (next < messages.len() || copied.position() < p.position() || plain.position() < p.position())
        && Instant::now() < deadline
    {
        if next < messages.len() {
            match p.offer(&messages[next]) {
                Ok(_) => next += 1,
                Err(OfferError::BackPressured) => {}
                Err(e) => panic!("{e}"),
            }
        }
        plain.poll(&mut plain_in, 7);
        copied.poll(&mut copied_in, 7);
    }
    drop((plain_in, copied_in));
    assert_eq!(got_plain, messages);
    assert_eq!(got_copied, messages);
    // Raw blocks are copied too.
    p.offer(b"block").unwrap();
    let mut block = Vec::new();
    copied.block_poll(|b: &[u8], _| block = b.to_vec(), 1 << 16);
    assert_eq!(&block[32..37], b"block");
}
