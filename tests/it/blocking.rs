//! Blocking receive and the doorbell with real processes (issue 13): sleepers that never spin get
//! every message, are woken by the end of the stream, a new session, or (within the liveness
//! interval) the death of their publisher; a killed sleeper leaves nothing armed for good; a
//! back-pressured publisher sleeps too. Peers report events on stdout (`support::roles`); the
//! test waits for them with deadlines, never with sleeps.

use crate::support;

use shmlog::{Header, OfferError, Polled, Publication, Subscription};
use std::time::{Duration, Instant};
use support::peer::{Cfg, Peer};
use support::{await_word, exclusive, raw, thread_cpu, ShmDir};

const T30: Duration = Duration::from_secs(30);

fn stream(dir: &ShmDir, name: &str) -> Cfg {
    Cfg::new().set("dir", dir.path().display()).set("name", name)
}

fn sleepers(n: usize, cfg: &Cfg) -> Vec<Peer> {
    let mut peers: Vec<Peer> = (0..n).map(|i| Peer::spawn(&format!("sleeper{i}"), "sleeper", cfg)).collect();
    for p in &mut peers {
        p.expect("ready", T30);
    }
    peers
}

fn publication(dir: &ShmDir, name: &str) -> Publication {
    Publication::builder(name).dir(dir.path()).term_length(64 * 1024).create().unwrap()
}

/// 64 subscriber processes sleeping in `poll_blocking` (none spins) each receive every message in
/// order; the publisher sleeps in `offer_blocking` whenever the slowest holds it back (a 64 KiB
/// term: the window is 32 KiB, 1 000 messages of 8 bytes fill it), and its close wakes them all.
#[test]
fn sixty_four_blocking_subscribers_get_every_message() {
    let _x = exclusive();
    let dir = ShmDir::new("blocking-64");
    let cfg = stream(&dir, "fan");
    let mut peers = sleepers(64, &cfg);
    let mut p = publication(&dir, "fan");
    p.wait_for_readers(64, T30).unwrap();
    let count = 5_000u64;
    for seq in 0..count {
        p.offer_blocking(&seq.to_le_bytes(), T30).unwrap_or_else(|e| panic!("offer {seq}: {e}"));
    }
    p.close();
    for peer in &mut peers {
        let closed = peer.expect("closed", T30);
        assert_eq!(closed.num("n"), count as i64, "{} missed messages", peer.name);
    }
}

/// A publisher killed with SIGKILL cannot ring: sleepers notice within their liveness interval
/// (100 ms here), though their own timeout is a minute.
#[test]
fn a_killed_publisher_wakes_every_sleeper_within_the_liveness_interval() {
    let _x = exclusive();
    let dir = ShmDir::new("blocking-kill");
    let cfg = stream(&dir, "k");
    let mut publisher =
        Peer::spawn("publisher", "idle_publisher", &cfg.clone().set("count", 10).set("readers", 4));
    let mut peers = sleepers(4, &cfg);
    publisher.expect("published", T30);
    let killed = Instant::now();
    publisher.kill();
    for peer in &mut peers {
        let closed = peer.expect("closed", T30);
        assert_eq!(closed.num("n"), 10);
        let after = closed.at.duration_since(killed);
        // The interval, one more for the check that finds the lock free, and a 2-core machine's
        // scheduling; far from the minute-long timeout.
        assert!(after < Duration::from_secs(2), "{} woke {after:?} after the kill", peer.name);
    }
}

/// The end of the stream wakes sleepers at once: their liveness interval and timeout are a
/// minute, so only the ring can wake them in time.
#[test]
fn end_of_stream_wakes_every_sleeper() {
    let _x = exclusive();
    let dir = ShmDir::new("blocking-eos");
    let cfg = stream(&dir, "eos").set("liveness_ms", 60_000);
    let mut p = publication(&dir, "eos");
    let mut peers = sleepers(8, &cfg);
    p.wait_for_readers(8, T30).unwrap();
    p.offer(&0u64.to_le_bytes()).unwrap();
    p.close();
    for peer in &mut peers {
        assert_eq!(peer.expect("closed", Duration::from_secs(10)).num("n"), 1);
    }
}

/// A sleeper that opened before any publisher existed is woken by the new session's ring (its
/// liveness interval is a minute), joins it and reads it.
#[test]
fn a_new_session_wakes_sleepers_waiting_for_a_publisher() {
    let _x = exclusive();
    let dir = ShmDir::new("blocking-new");
    let cfg = stream(&dir, "new").set("liveness_ms", 60_000);
    let mut peers = sleepers(2, &cfg);
    let mut p = publication(&dir, "new");
    p.wait_for_readers(2, Duration::from_secs(10)).expect("the sleepers joined the new session at once");
    for seq in 0..3u64 {
        p.offer(&seq.to_le_bytes()).unwrap();
    }
    p.close();
    for peer in &mut peers {
        assert_eq!(peer.expect("closed", Duration::from_secs(10)).num("n"), 3);
    }
}

/// A sleeper killed while it sleeps leaves its bell armed; the next commit rings once and
/// disarms it, and commits after that cost no wake-up.
#[test]
fn a_killed_sleeper_leaves_nothing_armed() {
    let _x = exclusive();
    let dir = ShmDir::new("blocking-heal");
    let cfg = stream(&dir, "heal");
    let mut p = publication(&dir, "heal");
    let mut peers = sleepers(1, &cfg);
    p.wait_connected(T30).unwrap();
    let slots = raw::readers_path(dir.path(), "heal");
    await_word(&slots, raw::slots::READERS_ARMED, |armed| armed != 0, "the sleeper never armed the bell");
    peers[0].kill();
    let bell = raw::file_i32(&slots, raw::slots::READERS_BELL);
    p.offer(b"12345678").unwrap();
    assert_eq!(raw::file_i32(&slots, raw::slots::READERS_ARMED), 0, "the commit disarmed the bell");
    assert_eq!(raw::file_i32(&slots, raw::slots::READERS_BELL), bell.wrapping_add(1), "and rang once");
    for _ in 0..100 {
        // The dead reader holds 100 * 8 + headers well inside the window.
        p.offer(b"12345678").unwrap();
    }
    assert_eq!(
        raw::file_i32(&slots, raw::slots::READERS_BELL),
        bell.wrapping_add(1),
        "nobody sleeps: no ring"
    );
}

/// A sleeper's own timeout ends the call with nothing delivered and the session still open.
#[test]
fn a_sleepers_timeout_fires() {
    let dir = ShmDir::new("blocking-timeout");
    let _p = publication(&dir, "t");
    let mut sub = Subscription::builder("t").dir(dir.path()).open().unwrap();
    let start = Instant::now();
    let n = sub.poll_blocking(
        |_: &[u8], _: &Header| panic!("nothing was offered"),
        10,
        Duration::from_millis(50),
    );
    let slept = start.elapsed();
    assert_eq!(n, Polled::TimedOut);
    assert!(slept >= Duration::from_millis(50), "returned early: {slept:?}");
    assert!(slept < Duration::from_secs(10), "overslept: {slept:?}");
    assert!(!sub.is_closed(), "the publisher lives");
    assert!(!sub.wait_readable(Duration::ZERO), "nothing to read");
}

/// A back-pressured publisher in `offer_blocking` sleeps (little CPU while it waits) until the
/// reader moves, then goes on; with nobody reading, it gives up at its timeout.
#[test]
fn a_back_pressured_publisher_sleeps_until_the_reader_moves() {
    let dir = ShmDir::new("blocking-writer");
    let mut p = publication(&dir, "w");
    let mut sub = Subscription::builder("w").dir(dir.path()).open().unwrap();
    let message = [7u8; 1000];
    let mut offered = 0u64;
    while p.offer(&message).is_ok() {
        offered += 1;
    }
    assert_eq!(p.offer(&message), Err(OfferError::BackPressured));
    assert_eq!(
        p.offer_blocking(&message, Duration::from_millis(30)),
        Err(OfferError::BackPressured),
        "nobody moved: timeout"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let writer = std::thread::spawn(move || {
        let cpu = thread_cpu();
        let started = Instant::now();
        tx.send(()).unwrap();
        let result = p.offer_blocking(&message, T30);
        (result, thread_cpu() - cpu, started.elapsed(), p)
    });
    rx.recv().unwrap();
    // Let the writer go to sleep: wait (bounded) until it armed its bell, then read.
    let slots = raw::readers_path(dir.path(), "w");
    await_word(&slots, raw::slots::WRITER_ARMED, |armed| armed != 0, "the writer never armed its bell");
    let mut read = 0u64;
    while read < offered {
        read += sub.poll(|_: &[u8], _: &Header| {}, 100) as u64;
    }
    let (result, cpu, waited, _p) = writer.join().unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert!(cpu < waited / 2 + Duration::from_millis(5), "spun: {cpu:?} of CPU in {waited:?}");
}

/// One thread sleeps on two streams at once and wakes for a message on either (a minute-long
/// liveness interval: only the ring can wake it in time).
#[test]
fn one_thread_waits_on_two_streams() {
    let dir = ShmDir::new("blocking-any");
    let mut a = publication(&dir, "a");
    let mut b = publication(&dir, "b");
    let open = |name| {
        Subscription::builder(name).dir(dir.path()).liveness_interval(Duration::from_secs(60)).open().unwrap()
    };
    let (mut sa, mut sb) = (open("a"), open("b"));
    assert!(!Subscription::wait_any(&mut [&mut sa, &mut sb], Duration::from_millis(20)), "nothing yet");
    let slots_b = raw::readers_path(dir.path(), "b");
    let waiter = std::thread::spawn(move || {
        let woke = Subscription::wait_any(&mut [&mut sa, &mut sb], T30);
        let mut got = Vec::new();
        sb.poll(|m: &[u8], _: &Header| got.push(m.to_vec()), 10);
        (woke, got, sa, sb)
    });
    // Once the waiter armed b's bell (it arms both), ring b only.
    await_word(&slots_b, raw::slots::READERS_ARMED, |armed| armed != 0, "the waiter never armed");
    let started = Instant::now();
    b.offer(b"on b").unwrap();
    let (woke, got, _sa, _sb) = waiter.join().unwrap();
    assert!(woke);
    assert_eq!(got, vec![b"on b".to_vec()]);
    assert!(started.elapsed() < Duration::from_secs(10), "woken by the ring, not a timeout");
    a.offer(b"keep a alive").unwrap();
}

/// CPU ticks (user + system) a process has used, from /proc.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
    rest[11].parse::<u64>().unwrap() + rest[12].parse::<u64>().unwrap()
}

/// Sleepers that have read everything stay asleep: after a burst, eight of them use (nearly) no
/// CPU over half a second. Woken readers pass one ring on to the others once; passing it on
/// again would have them wake each other for ever.
#[test]
fn idle_sleepers_use_no_cpu() {
    let _x = exclusive();
    let dir = ShmDir::new("blocking-idle");
    let cfg = stream(&dir, "idle");
    let mut p = publication(&dir, "idle");
    let mut peers = sleepers(8, &cfg);
    p.wait_for_readers(8, T30).unwrap();
    let slots = raw::readers_path(dir.path(), "idle");
    for seq in 0..100u64 {
        p.offer(&seq.to_le_bytes()).unwrap();
        // Every reader asleep again before the next message (bounded wait).
        let all_asleep = |sleeping| sleeping >= 8;
        await_word(
            &slots,
            raw::slots::READERS_SLEEPING,
            all_asleep,
            "the sleepers did not all go back to sleep",
        );
    }
    let pids: Vec<u32> = peers.iter().map(|p| p.pid()).collect();
    let before: u64 = pids.iter().map(|&pid| cpu_ticks(pid)).sum();
    let window = Instant::now();
    while window.elapsed() < Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(50)); // a measuring window, not synchronisation
    }
    let used: u64 = pids.iter().map(|&pid| cpu_ticks(pid)).sum::<u64>() - before;
    // Clock ticks are 10 ms: a reader spinning on wake-ups would use ~50 per process.
    assert!(used <= 5, "8 idle sleepers used {used} ticks of CPU in 0.5 s");
    p.close();
    for peer in &mut peers {
        assert_eq!(peer.expect("closed", T30).num("n"), 100);
    }
}

/// A doorbell page full of garbage (every reader may write it) costs at most spurious or late
/// wake-ups: a blocking reader still gets every message, and its timeout still fires.
#[test]
fn a_garbage_doorbell_page_loses_nothing() {
    let dir = ShmDir::new("blocking-garbage");
    let mut p = publication(&dir, "g");
    let sub = Subscription::builder("g")
        .dir(dir.path())
        .liveness_interval(Duration::from_millis(20))
        .open()
        .unwrap();
    let slots = raw::readers_path(dir.path(), "g");
    let mut rng = support::Rng::new("garbage doorbell");
    let garbage: Vec<u8> = (0..4096).map(|_| rng.next() as u8).collect();
    raw::write_at(&slots, raw::slots::DOORBELL, &garbage);
    let reader = std::thread::spawn(move || {
        let mut sub = sub;
        let mut next = 0u64;
        while next < 200 {
            sub.poll_blocking(
                |m: &[u8], _: &Header| {
                    assert_eq!(u64::from_le_bytes(m.try_into().unwrap()), next);
                    next += 1;
                },
                16,
                T30,
            );
        }
        let start = Instant::now();
        assert_eq!(
            sub.poll_blocking(|_: &[u8], _: &Header| {}, 16, Duration::from_millis(30)),
            Polled::TimedOut
        );
        assert!(start.elapsed() >= Duration::from_millis(30));
        next
    });
    for seq in 0..200u64 {
        p.offer_blocking(&seq.to_le_bytes(), T30).unwrap();
        if seq % 50 == 0 {
            raw::write_at(&slots, raw::slots::DOORBELL, &garbage);
        }
    }
    assert_eq!(reader.join().unwrap(), 200);
}
