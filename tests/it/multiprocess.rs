//! Publisher and subscribers in separate processes (issue 2).
//!
//! Each test starts this very test binary again as peers (`support::roles`): a publisher that
//! numbers its messages, and subscribers that check every message through a `FragmentAssembler`
//! (`support::wire::Verifier`: nothing lost, duplicated, reordered or corrupted). Peers report
//! events on stdout; the test waits for them with deadlines, never with sleeps.

use crate::support;

use std::time::{Duration, Instant};
use support::peer::{Cfg, Peer};
use support::wire::{fill, seed_of, Shape, Verifier};
use support::{exclusive, raw, secs, ShmDir};

const T10: Duration = Duration::from_secs(10);
const ONE_SECOND: Duration = Duration::from_secs(1);

fn stream(dir: &ShmDir, name: &str, term: usize, mtu: usize) -> Cfg {
    Cfg::new().set("dir", dir.path().display()).set("name", name).set("term", term).set("mtu", mtu)
}

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Starts `n` subscribers and waits until each has its slot.
fn subscribers(n: usize, cfg: &Cfg) -> Vec<Peer> {
    let mut subs: Vec<Peer> = (0..n).map(|i| Peer::spawn(&format!("sub{i}"), "subscriber", cfg)).collect();
    for s in &mut subs {
        s.expect("opened", T10);
    }
    subs
}

/// Starts a publisher that waits for `go`; returns it and its session id.
fn publisher(name: &str, cfg: &Cfg) -> (Peer, i64) {
    let mut p = Peer::spawn(name, "publisher", &cfg.clone().set("wait_go", 1));
    let session = p.expect("ready", T10).num("session");
    (p, session)
}

/// Waits until every subscriber reports it joined `session` at position 0.
fn joined_from_start(subs: &mut [Peer], session: i64) {
    for s in subs {
        let j = s.expect_where("joined", |e| e.num("session") == session, T10);
        assert_eq!(j.num("position"), 0, "{} should join the new session at its start", s.name);
    }
}

/// The checker itself must catch what the tests look for, or every test here proves nothing.
#[test]
fn verifier_catches_loss_duplication_reordering_and_corruption() {
    let shape = Shape::new(1024, 4 * 992);
    let seed = seed_of(7);
    let msg = |seq: u64| {
        let mut b = Vec::new();
        fill(seed, seq, shape.len(seed, seq), &mut b);
        b
    };
    let run = |seqs: &[u64], damage: Option<(usize, usize)>| {
        let mut v = Verifier::new(shape);
        v.begin_session(7, true);
        for (i, &s) in seqs.iter().enumerate() {
            let mut m = msg(s);
            if let Some((at, byte)) = damage {
                if at == i && !m.is_empty() {
                    let k = byte % m.len();
                    m[k] ^= 0x01;
                }
            }
            v.on_message(&m, 7);
        }
        v.failure
    };
    assert_eq!(run(&[0, 1, 2, 3, 4], None), None);
    assert!(run(&[0, 1, 3], None).is_some(), "a lost message");
    assert!(run(&[0, 1, 1, 2], None).is_some(), "a duplicate");
    assert!(run(&[0, 2, 1], None).is_some(), "reordering");
    for byte in [0, 5, 77, 1000] {
        let seqs: Vec<u64> = (0..40).collect();
        // Damage a message that has bytes (the distribution has some 0-byte messages).
        let at = (0..40).find(|&s| shape.len(seed, s) > byte % 64).unwrap() as usize;
        assert!(run(&seqs, Some((at, byte))).is_some(), "a flipped bit at {byte}");
    }
    // A 0-byte message that goes missing is noticed too.
    let zero = (0..100_000u64).find(|&s| shape.len(seed, s) == 0).expect("0-byte messages occur");
    let skip: Vec<u64> = (0..zero + 3).filter(|&s| s != zero).collect();
    assert!(run(&skip, None).is_some(), "a lost 0-byte message");
    // Messages of another session are refused.
    let mut v = Verifier::new(shape);
    v.begin_session(8, true);
    v.on_message(&msg(0), 7);
    assert!(v.failure.is_some());
    // A reader joining mid-stream synchronises on the first numbered message and checks the
    // short ones before it.
    let mut v = Verifier::new(shape);
    v.begin_session(7, false);
    let start = (10..1000u64).find(|&s| shape.len(seed, s) < 16 && shape.len(seed, s + 1) >= 16).unwrap();
    for s in start..start + 50 {
        v.on_message(&msg(s), 7);
    }
    assert_eq!(v.failure, None);
    assert_eq!((v.first_seq, v.count, v.next_seq), (Some(start), 50, start + 50));
}

/// A1: one publisher, three subscribers, 1 000 000 messages of 0 bytes to 4 fragments.
#[test]
fn million_messages_from_one_publisher_to_three_subscriber_processes() {
    let _x = exclusive();
    let n = env_u64("SHMLOG_MP_COUNT", 1_000_000);
    let dir = ShmDir::new("fanout");
    // 256 KiB terms (rotation every ~500 messages), MTU 1 KiB: ~10% of messages span 2-4 frames.
    let base = stream(&dir, "fanout", 256 << 10, 1024).set("max_len", 4 * 992);
    let started = Instant::now();
    // The subscribers start first: they open without a publisher and join its session. Two idle
    // with `Backoff`, one with `Yielding`, so four processes share two cores.
    let mut subs = subscribers(2, &base.clone().set("progress", n / 4));
    let mut yielding = Peer::spawn("sub-yielding", "subscriber", &base.clone().set("idle", "yield"));
    yielding.expect("opened", T10);
    subs.push(yielding);
    let (mut publisher, session) = publisher("pub", &base.clone().set("count", n));
    joined_from_start(&mut subs, session);
    let t0 = Instant::now();
    publisher.send("go");
    let done = publisher.expect("done", Duration::from_secs(240));
    assert_eq!(done.num("count"), n as i64);
    let closed = publisher.expect("closed", T10);
    for s in &mut subs {
        let eos = s.expect("eos", Duration::from_secs(60));
        assert_eq!(eos.num("session"), session);
        assert_eq!((eos.get("first"), eos.num("count"), eos.num("next")), (Some("0"), n as i64, n as i64));
        assert_eq!(eos.num("position"), closed.num("position"), "{} stopped at end of stream", s.name);
    }
    let elapsed = t0.elapsed();
    publisher.wait_success(T10);
    for s in &mut subs {
        s.wait_success(T10);
    }
    println!(
        "[fanout] {n} messages, {} bytes of log, to 3 subscriber processes in {} ({} with start-up); \
         publisher's longest back-pressure stall {} µs",
        done.num("position"),
        secs(elapsed),
        secs(started.elapsed()),
        done.num("max_stall_us")
    );
    // The log goes with its publisher; the reader-slot file is shared by sessions and stays while
    // readers held slots when the publisher closed (the next publisher reuses it).
    assert!(!raw::log_path(dir.path(), "fanout").exists(), "closing removes the log: {:?}", dir.entries());
}

/// A2: a subscriber SIGKILLed mid-stream stops holding the publisher back within the liveness
/// interval (default 100 ms); the other subscribers lose nothing.
#[test]
fn killed_subscriber_releases_the_publisher_and_the_others_lose_nothing() {
    let _x = exclusive();
    let n = 300_000;
    let dir = ShmDir::new("killsub");
    let base = stream(&dir, "ks", 128 << 10, 1024);
    let mut subs = subscribers(3, &base.clone().set("progress", 10_000));
    // Lingers after its last message until told to close, so the slot file is still there when
    // it is read below (its last user removes it).
    let (mut publisher, session) = publisher("pub", &base.clone().set("count", n).set("linger", 1));
    joined_from_start(&mut subs, session);
    publisher.send("go");
    subs[0].expect_where("progress", |e| e.num("count") >= 50_000, Duration::from_secs(30));
    let victim = subs[0].pid() as i64;
    subs[0].kill();
    let done = publisher.expect("done", Duration::from_secs(60));
    let stall = Duration::from_micros(done.num("max_stall_us") as u64);
    assert!(stall < ONE_SECOND, "the dead reader held the publisher back for {stall:?}");
    // The publisher ran far past where the dead reader's slot held it (position + window), so it
    // must have freed that slot.
    let slots = raw::read_slots(&raw::readers_path(dir.path(), "ks"));
    let dead: Vec<_> =
        slots.iter().filter(|s| s.pid == victim && s.state != raw::slots::STATE_FREE).collect();
    assert!(dead.is_empty(), "the dead reader's slot is still held: {dead:?}");
    publisher.send("close");
    publisher.expect("closed", T10);
    for s in &mut subs[1..] {
        let eos = s.expect("eos", T10);
        assert_eq!((eos.num("session"), eos.num("count"), eos.num("next")), (session, n as i64, n as i64));
        s.wait_success(T10);
    }
    println!("[killed subscriber] publisher's longest stall {stall:?}; survivors got all {n} messages");
}

/// A3: the publisher SIGKILLed: subscribers see `is_connected() == false` within 1 s, and all
/// of them delivered the same gap-free prefix of its messages.
#[test]
fn killed_publisher_is_seen_disconnected_within_a_second() {
    let _x = exclusive();
    let dir = ShmDir::new("killpub");
    let base = stream(&dir, "kp", 128 << 10, 1024);
    let mut subs = subscribers(3, &base.clone().set("progress", 10_000));
    let (mut publisher, session) = publisher("pub", &base);
    joined_from_start(&mut subs, session);
    publisher.send("go");
    subs[2].expect_where("progress", |e| e.num("count") >= 30_000, Duration::from_secs(30));
    let killed = Instant::now();
    publisher.kill();
    let mut worst = Duration::ZERO;
    for s in &mut subs {
        let d = s.expect("disconnected", Duration::from_secs(5));
        let after = d.at.duration_since(killed);
        assert_eq!((d.num("session"), d.num("eos")), (session, 0), "{}", s.name);
        assert!(after < ONE_SECOND, "{} saw the publisher gone after {after:?}", s.name);
        worst = worst.max(after);
    }
    let mut counts = Vec::new();
    for s in &mut subs {
        s.send("quit");
        let done = s.expect("done", T10);
        counts.push(done.num("total"));
        s.wait_success(T10);
    }
    assert!(counts[0] >= 30_000 && counts.iter().all(|&c| c == counts[0]), "delivered counts {counts:?}");
    println!(
        "[killed publisher] disconnection seen after at most {worst:?}; each reader delivered {}",
        counts[0]
    );
}

/// A4: a late joiner starts at the slowest reader by default: exactly the messages that reader
/// has not consumed yet.
#[test]
fn late_joiner_starts_at_the_slowest_reader() {
    let _x = exclusive();
    let (n, k) = (100_000i64, 30_000i64);
    let dir = ShmDir::new("slowest");
    let base = stream(&dir, "sl", 128 << 10, 1024);
    let mut a = Peer::spawn("slow", "subscriber", &base.clone().set("pause_after", k));
    a.expect("opened", T10);
    let (mut publisher, session) = publisher("pub", &base.clone().set("count", n));
    joined_from_start(std::slice::from_mut(&mut a), session);
    publisher.send("go");
    let paused = a.expect("paused", Duration::from_secs(30));
    assert_eq!(paused.num("seq"), k);
    let mut b = Peer::spawn("late", "subscriber", &base);
    let joined = b.expect("joined", T10);
    assert_eq!(joined.num("session"), session);
    assert_eq!(joined.num("position"), paused.num("position"), "joins where the slowest reader stands");
    a.send("resume");
    publisher.expect("closed", Duration::from_secs(30));
    let eos_a = a.expect("eos", T10);
    assert_eq!((eos_a.num("first"), eos_a.num("next")), (0, n));
    let eos_b = b.expect("eos", T10);
    assert_eq!((eos_b.num("first"), eos_b.num("next"), eos_b.num("count")), (k + 1, n, n - k - 1));
    for p in [&mut a, &mut b, &mut publisher] {
        p.wait_success(T10);
    }
}

/// A4: `JoinAt::Latest` starts at the publisher's position: only messages offered after it.
#[test]
fn late_joiner_at_latest_sees_only_newer_messages() {
    let _x = exclusive();
    let (n, n1) = (60_000i64, 20_000i64);
    let dir = ShmDir::new("latest");
    let base = stream(&dir, "la", 128 << 10, 1024);
    let mut subs = subscribers(1, &base);
    let (mut publisher, session) = publisher("pub", &base.clone().set("count", n).set("pause_at", n1));
    joined_from_start(&mut subs, session);
    publisher.send("go");
    let paused = publisher.expect("paused", Duration::from_secs(30));
    let mut b = Peer::spawn("latest", "subscriber", &base.clone().set("join", "latest"));
    let joined = b.expect("joined", T10);
    assert_eq!(joined.num("position"), paused.num("position"), "joins at the publisher's position");
    publisher.send("go");
    publisher.expect("closed", Duration::from_secs(30));
    let eos = subs[0].expect("eos", T10);
    assert_eq!((eos.num("first"), eos.num("next")), (0, n));
    let eos = b.expect("eos", T10);
    assert_eq!((eos.num("first"), eos.num("next"), eos.num("count")), (n1, n, n - n1));
    for p in subs.iter_mut().chain([&mut b, &mut publisher]) {
        p.wait_success(T10);
    }
}

/// A4: a subscriber opened before any publisher exists joins the first session from its start,
/// and the publisher (which does not wait for it) loses nothing: offers report NotConnected
/// until the reader is there.
#[test]
fn subscriber_started_before_the_publisher_gets_everything() {
    let _x = exclusive();
    let n = 20_000i64;
    let dir = ShmDir::new("early");
    let base = stream(&dir, "ea", 64 << 10, 512).set("max_len", 4 * 480);
    let mut subs = subscribers(1, &base);
    let mut publisher = Peer::spawn("pub", "publisher", &base.clone().set("count", n));
    let session = publisher.expect("ready", T10).num("session");
    let joined = subs[0].expect("joined", T10);
    assert_eq!((joined.num("session"), joined.num("position")), (session, 0));
    publisher.expect("closed", Duration::from_secs(30));
    let eos = subs[0].expect("eos", T10);
    assert_eq!((eos.num("first"), eos.num("next")), (0, n));
    subs[0].wait_success(T10);
    publisher.wait_success(T10);
}

/// A5: after the publisher closes, a new publisher of the same name starts a new session; open
/// subscriptions drain the old one first, then move over and receive all of the new one.
#[test]
fn new_publisher_after_close_takes_over_open_subscriptions() {
    let _x = exclusive();
    let (n1, n2) = (40_000i64, 30_000i64);
    let dir = ShmDir::new("reopen");
    let base = stream(&dir, "ro", 128 << 10, 1024);
    let mut subs = subscribers(2, &base.clone().set("sessions", 2));
    let (mut first, s1) = publisher("pub1", &base.clone().set("count", n1));
    joined_from_start(&mut subs, s1);
    first.send("go");
    first.expect("closed", Duration::from_secs(30));
    first.wait_success(T10);
    // At once, while the readers may still be draining the first session.
    let (mut second, s2) = publisher("pub2", &base.clone().set("count", n2));
    assert_ne!(s1, s2);
    joined_from_start(&mut subs, s2);
    for s in &mut subs {
        let end = s.expect("session_end", T10);
        assert_eq!((end.num("session"), end.num("first"), end.num("next")), (s1, 0, n1), "{}", s.name);
    }
    second.send("go");
    second.expect("closed", Duration::from_secs(30));
    for s in &mut subs {
        let eos = s.expect_where("eos", |e| e.num("session") == s2, T10);
        assert_eq!((eos.num("first"), eos.num("next")), (0, n2));
        s.wait_success(T10);
    }
    second.wait_success(T10);
}

/// A5: after the publisher is SIGKILLed (its log left behind), a new publisher replaces the
/// stale log and open subscriptions move to the new session.
#[test]
fn new_publisher_after_kill_takes_over_open_subscriptions() {
    let _x = exclusive();
    let n2 = 30_000i64;
    let dir = ShmDir::new("restart");
    let base = stream(&dir, "rs", 128 << 10, 1024);
    let mut subs = subscribers(2, &base.clone().set("sessions", 2).set("progress", 5_000));
    let (mut first, s1) = publisher("pub1", &base);
    joined_from_start(&mut subs, s1);
    first.send("go");
    subs[0].expect_where("progress", |e| e.num("count") >= 20_000, Duration::from_secs(30));
    first.kill();
    assert!(raw::log_path(dir.path(), "rs").exists(), "a killed publisher leaves its log");
    for s in &mut subs {
        s.expect("disconnected", Duration::from_secs(2));
    }
    let (mut second, s2) = publisher("pub2", &base.clone().set("count", n2));
    assert_ne!(s1, s2);
    joined_from_start(&mut subs, s2);
    let mut firsts = Vec::new();
    for s in &mut subs {
        let end = s.expect("session_end", T10);
        assert_eq!((end.num("session"), end.num("first")), (s1, 0));
        firsts.push(end.num("next"));
    }
    assert!(firsts[0] >= 20_000 && firsts[0] == firsts[1], "both drained the same prefix: {firsts:?}");
    second.send("go");
    second.expect("closed", Duration::from_secs(30));
    for s in &mut subs {
        let eos = s.expect_where("eos", |e| e.num("session") == s2, T10);
        assert_eq!((eos.num("first"), eos.num("next")), (0, n2));
        s.wait_success(T10);
    }
    second.wait_success(T10);
}

/// A4: joining at the slowest reader while the publisher holds a claim right where that reader
/// stands (reserved, not yet committed) is a normal state of a live stream, not corruption.
#[test]
fn late_joiner_at_slowest_while_a_claim_is_open_where_the_reader_stands() {
    use shmlog::{Header, Publication, Subscription};
    let dir = ShmDir::new("claimjoin");
    let mut p = Publication::builder("cj").dir(dir.path()).term_length(64 << 10).create().unwrap();
    let mut a = Subscription::builder("cj").dir(dir.path()).open().unwrap();
    p.offer(b"first").unwrap();
    let mut got = Vec::new();
    while got.is_empty() {
        a.poll(|m: &[u8], _: &Header| got.push(m.to_vec()), 10);
    }
    let mut claim = p.try_claim(5).unwrap();
    claim.buffer().copy_from_slice(b"claim");
    let mut b = Subscription::builder("cj").dir(dir.path()).open().expect("join while a claim is open");
    assert_eq!(b.join_position(), Some(a.position()));
    claim.commit();
    let mut seen = Vec::new();
    let deadline = Instant::now() + T10;
    while seen.is_empty() && Instant::now() < deadline {
        b.poll(|m: &[u8], _: &Header| seen.push(m.to_vec()), 10);
    }
    assert_eq!(seen, vec![b"claim".to_vec()]);
}
