//! Crash matrix (issue 6): peers SIGKILLed or SIGSTOPped at random moments, stale files.
//!
//! Each case runs a few iterations by default and many with `SHMLOG_LONG=1`; each prints a
//! summary line (`--nocapture`) that `docs/reliability.md` records. Random choices come from
//! `SHMLOG_SEED` (printed) so a failure can be replayed.

use crate::support;

use shmlog::{Error, Header, JoinAt, Publication, Subscription};
use std::time::{Duration, Instant};
use support::peer::{Cfg, Peer};
use support::{exclusive, iterations, raw, Rng, ShmDir};

const T10: Duration = Duration::from_secs(10);
const ONE_SECOND: Duration = Duration::from_secs(1);
/// 64 KiB terms (the smallest) and 1 KiB frames: a rotation every ~130 messages.
const TERM: usize = 64 << 10;

fn stream(dir: &ShmDir, name: &str) -> Cfg {
    Cfg::new()
        .set("dir", dir.path().display())
        .set("name", name)
        .set("term", TERM)
        .set("mtu", 1024)
        .set("max_len", 4 * 992)
}

fn spawn_subscribers(names: &[&str], cfg: &Cfg) -> Vec<Peer> {
    let mut subs: Vec<Peer> = names.iter().map(|n| Peer::spawn(n, "subscriber", cfg)).collect();
    for s in &mut subs {
        s.expect("opened", T10);
    }
    subs
}

fn spawn_publisher(name: &str, cfg: &Cfg) -> (Peer, i64) {
    let mut p = Peer::spawn(name, "publisher", &cfg.clone().set("wait_go", 1));
    let session = p.expect("ready", T10).num("session");
    (p, session)
}

fn joined_from_start(subs: &mut [Peer], session: i64) {
    for s in subs {
        let j = s.expect_where("joined", |e| e.num("session") == session, T10);
        assert_eq!(j.num("position"), 0, "{} joins the new session at its start", s.name);
    }
}

/// `true` if the peer was ended by SIGKILL.
fn killed(p: &mut Peer) -> bool {
    use std::os::unix::process::ExitStatusExt;
    p.wait_exit(T10).signal() == Some(libc::SIGKILL)
}

/// B1: the publisher SIGKILLs itself between offers, inside a claim, just before or just after a
/// rotation, or at a random instant (a timer thread: anywhere in offer, claim, pad, rotate).
/// Surviving subscribers deliver a gap-free, uncorrupted prefix (the same one), see the
/// publisher gone within 1 s, and join the next publisher's session from its start.
#[test]
fn publisher_killed_at_random_moments() {
    let _x = exclusive();
    let mut rng = Rng::new("publisher crash matrix");
    let per_mode = iterations(2, 40);
    let modes = ["before", "claim", "before_rotation", "after_rotation", "timer"];
    let n2 = 3_000i64;
    for mode in modes {
        let (mut worst, mut prefixes) = (Duration::ZERO, Vec::new());
        for i in 0..per_mode {
            let dir = ShmDir::new("pubcrash");
            let base = stream(&dir, "pc");
            let mut subs = spawn_subscribers(&["sub0", "sub1"], &base.clone().set("sessions", 2));
            let at = rng.range(0, 4_000);
            let kill_us = rng.range(0, 30_000);
            let cfg = match mode {
                "timer" => base.clone().set("kill_us", kill_us),
                _ => base.clone().set("kill", format!("{mode}:{at}")),
            };
            let (mut first, s1) = spawn_publisher("pub1", &cfg);
            joined_from_start(&mut subs, s1);
            first.send("go");
            assert!(killed(&mut first), "{mode} #{i}: pub1 should have killed itself");
            let dead = Instant::now();
            for s in &mut subs {
                let d = s.expect_where("disconnected", |e| e.num("session") == s1, Duration::from_secs(5));
                let after = d.at.saturating_duration_since(dead);
                assert!(after < ONE_SECOND, "{mode} #{i}: {} saw the publisher gone after {after:?}", s.name);
                worst = worst.max(after);
            }
            // The next publisher replaces the dead one's log and the readers move over.
            let (mut second, s2) = spawn_publisher("pub2", &base.clone().set("count", n2));
            assert_ne!(s1, s2);
            joined_from_start(&mut subs, s2);
            let mut ends = Vec::new();
            for s in &mut subs {
                let end = s.expect_where("session_end", |e| e.num("session") == s1, T10);
                assert!(matches!(end.get("first"), Some("0") | Some("none")), "{mode} #{i}: {}", end.raw);
                ends.push(end.num("next"));
            }
            assert_eq!(ends[0], ends[1], "{mode} #{i}: both readers drained the same prefix");
            if matches!(mode, "before" | "claim") {
                assert_eq!(ends[0], at as i64, "{mode} #{i}: exactly the messages before the kill");
            }
            prefixes.push(ends[0]);
            second.send("go");
            second.expect("closed", T10);
            for s in &mut subs {
                let eos = s.expect_where("eos", |e| e.num("session") == s2, T10);
                assert_eq!((eos.num("first"), eos.num("next")), (0, n2), "{mode} #{i}: {}", s.name);
                s.wait_success(T10);
            }
            second.wait_success(T10);
        }
        println!(
            "[publisher crash] mode={mode} iterations={per_mode} ok={per_mode} prefixes={:?} \
             worst_disconnect_after_death={worst:?}",
            &prefixes[..prefixes.len().min(8)]
        );
    }
}

/// B1: a subscriber SIGKILLed at a random moment — while opening, joining, or reading — stops
/// holding the publisher back within 1 s, and the other subscribers lose nothing.
#[test]
fn subscriber_killed_at_random_moments() {
    let _x = exclusive();
    let mut rng = Rng::new("subscriber crash matrix");
    let runs = iterations(4, 200);
    let n = 40_000i64;
    let (mut worst_stall, mut joined_kills, mut early_kills) = (Duration::ZERO, 0, 0);
    for i in 0..runs {
        let dir = ShmDir::new("subcrash");
        let base = stream(&dir, "sc");
        let mut stable = spawn_subscribers(&["sub0", "sub1"], &base);
        let early_victim = rng.chance(50);
        let mut victim = if early_victim {
            let mut v = Peer::spawn("victim", "subscriber", &base.clone().set("progress", 500));
            v.expect("opened", T10);
            Some(v)
        } else {
            None
        };
        // It lingers after its last message until told to close: the slot file is read below,
        // and its last user removes it once everybody has gone.
        let (mut publisher, session) = spawn_publisher("pub", &base.clone().set("count", n).set("linger", 1));
        joined_from_start(&mut stable, session);
        if let Some(v) = victim.as_mut() {
            joined_from_start(std::slice::from_mut(v), session);
        }
        publisher.send("go");
        let mut victim = match victim {
            Some(mut v) => {
                // Killed after a random number of messages read.
                let after = rng.range(0, n as u64 / 2) as i64;
                v.expect_where("progress", |e| e.num("count") >= after, T10);
                v
            }
            None => {
                // A late joiner killed a random instant after it starts: while opening, claiming
                // its slot, joining, or reading.
                let v = Peer::spawn("victim", "subscriber", &base);
                let wait = Duration::from_micros(rng.range(0, 20_000));
                let spawned = Instant::now();
                while spawned.elapsed() < wait {
                    std::hint::spin_loop();
                }
                v
            }
        };
        victim.kill();
        let victim_pid = victim.pid() as i64;
        let victim_joined = !victim.seen("joined").is_empty();
        if victim_joined {
            joined_kills += 1;
        } else {
            early_kills += 1;
        }
        let done = publisher.expect("done", Duration::from_secs(60));
        let stall = Duration::from_micros(done.num("max_stall_us") as u64);
        assert!(stall < ONE_SECOND, "#{i}: the publisher was held back for {stall:?}");
        worst_stall = worst_stall.max(stall);
        let window = (TERM / 2) as i64;
        for slot in raw::read_slots(&raw::readers_path(dir.path(), "sc")) {
            if slot.pid != victim_pid {
                continue;
            }
            let counted = slot.state == raw::slots::STATE_ACTIVE && slot.session == session as i32;
            assert!(
                !(counted && slot.position + window < done.num("position")),
                "#{i}: the publisher ran past a reader it still counted: {slot:?}"
            );
            if victim_joined {
                assert!(!counted, "#{i}: the dead reader's slot was never freed: {slot:?}");
            }
        }
        publisher.send("close");
        publisher.expect("closed", T10);
        for s in &mut stable {
            let eos = s.expect("eos", T10);
            assert_eq!((eos.num("first"), eos.num("next")), (0, n), "#{i}: {}", s.name);
            s.wait_success(T10);
        }
        publisher.wait_success(T10);
    }
    println!(
        "[subscriber crash] iterations={runs} ok={runs} killed_after_joining={joined_kills} \
         killed_before_joining={early_kills} worst_publisher_stall={worst_stall:?}"
    );
}

/// B1: a SIGSTOPped subscriber is alive, so it holds the publisher back (tethered, never
/// evicted) however long it is stopped; after SIGCONT everything flows and nobody lost anything.
#[test]
fn stopped_subscriber_backpressures_the_publisher_until_continued() {
    let _x = exclusive();
    let runs = iterations(1, 20);
    let n = 60_000i64;
    let held = Duration::from_millis(600); // six liveness intervals
    for i in 0..runs {
        let dir = ShmDir::new("sigstop");
        let base = stream(&dir, "ss");
        let mut subs = spawn_subscribers(&["steady", "stopped"], &base.clone().set("progress", 1_000));
        let (mut publisher, session) =
            spawn_publisher("pub", &base.clone().set("count", n).set("blocked_ms", 100));
        joined_from_start(&mut subs, session);
        publisher.send("go");
        subs[1].expect_where("progress", |e| e.num("count") >= 10_000, T10);
        subs[1].signal(libc::SIGSTOP);
        let blocked = publisher.expect("blocked", Duration::from_secs(5));
        let stopped_slot = raw::read_slots(&raw::readers_path(dir.path(), "ss"))
            .into_iter()
            .find(|s| s.pid == subs[1].pid() as i64)
            .expect("the stopped reader's slot");
        assert_eq!(stopped_slot.state, raw::slots::STATE_ACTIVE);
        // Admitted below the limit (reader + window), a message of up to 4 frames may end past it.
        let bound = stopped_slot.position + (TERM / 2) as i64 + 4 * 1024;
        assert!(
            blocked.num("position") <= bound,
            "#{i}: the publisher is at most a window (and a message) ahead of the stopped reader: \
             publisher at {}, reader at {}",
            blocked.num("position"),
            stopped_slot.position
        );
        // Tethered: still blocked after several liveness intervals, the slot still counted.
        let moved = publisher.try_expect_where("unblocked", |_| true, held);
        assert!(moved.is_none(), "#{i}: a stopped (live) reader was evicted: {moved:?}");
        let slot = raw::read_slots(&raw::readers_path(dir.path(), "ss"))[stopped_slot.index];
        assert_eq!((slot.state, slot.position), (raw::slots::STATE_ACTIVE, stopped_slot.position));
        subs[1].signal(libc::SIGCONT);
        let unblocked = publisher.expect("unblocked", T10);
        assert!(unblocked.num("stall_ms") >= held.as_millis() as i64);
        publisher.expect("closed", Duration::from_secs(30));
        for s in &mut subs {
            let eos = s.expect("eos", T10);
            assert_eq!((eos.num("first"), eos.num("next")), (0, n), "#{i}: {}", s.name);
            s.wait_success(T10);
        }
        publisher.wait_success(T10);
    }
    println!("[stopped subscriber] iterations={runs} ok={runs} publisher held >= {held:?} each time, resumed after SIGCONT");
}

/// B1: a publisher killed at a random instant while it creates its log never leaves a
/// half-initialised log under the stream's name: a reader either finds no log or a complete one,
/// and the next publisher creates its session without trouble.
#[test]
fn publisher_killed_while_creating_never_leaves_a_half_initialised_log() {
    let _x = exclusive();
    let mut rng = Rng::new("create crash");
    let runs = iterations(10, 200);
    let dir = ShmDir::new("createcrash");
    let base = stream(&dir, "cc");
    // Calibrate: how long does a create take here?
    let mut probe = Peer::spawn("probe", "publisher", &base.clone().set("count", 0));
    let create_us = probe.expect("ready", T10).num("create_us").max(50) as u64;
    probe.wait_success(T10);
    let (mut before_publish, mut after_publish, mut completed) = (0, 0, 0);
    for i in 0..runs {
        let kill_us = rng.range(0, create_us);
        let mut p =
            Peer::spawn("pub", "publisher", &base.clone().set("create_kill_us", kill_us).set("wait_go", 1));
        let ready = p.try_expect_where("ready", |_| true, T10).is_some();
        if ready {
            // Created before the timer fired: let the timer end it mid-run.
            p.send("go");
        }
        assert!(killed(&mut p), "#{i}: the publisher should have been killed");
        let log = raw::log_path(dir.path(), "cc");
        if log.exists() {
            after_publish += 1;
            assert_eq!(raw::meta_i32(&log, raw::meta::READY), 1, "#{i}: a visible log is always ready");
        } else {
            before_publish += 1;
        }
        completed += ready as u32;
        // A reader finds either nothing or a complete (dead) log: never an error.
        let sub = Subscription::builder("cc").dir(dir.path()).open();
        let mut sub = sub.unwrap_or_else(|e| panic!("#{i}: open after a crash in create: {e}"));
        assert!(!sub.is_connected());
        // The next publisher replaces whatever was left, and the reader joins it.
        let mut publication = Publication::builder("cc")
            .dir(dir.path())
            .term_length(TERM)
            .create()
            .unwrap_or_else(|e| panic!("#{i}: create after a crash in create: {e}"));
        sub.wait_connected(T10).unwrap();
        assert_eq!(sub.session_id(), Some(publication.session_id()));
        publication.offer(b"after the crash").unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + T10;
        while got.is_empty() && Instant::now() < deadline {
            sub.poll(|m: &[u8], _: &Header| got.push(m.to_vec()), 10);
        }
        assert_eq!(got, vec![b"after the crash".to_vec()]);
        drop(sub);
        publication.close();
    }
    let leftovers = dir.entries().into_iter().filter(|e| e.ends_with(".tmp")).count();
    println!(
        "[create crash] iterations={runs} ok={runs} killed_before_the_log_was_visible={before_publish} \
         after={after_publish} (of which after create returned: {completed}); create takes ~{create_us} µs; \
         temporary files left behind: {leftovers}"
    );
}

/// B1: stale files under the stream's name are detected: a dead publisher's log is replaced by
/// the next publisher (new file, new session), a log that is not ready is refused to readers
/// and replaced on create, and a live publisher's log is never replaced.
#[test]
fn stale_files_are_detected_and_replaced_never_reused() {
    use std::os::unix::fs::MetadataExt;
    let _x = exclusive();
    let dir = ShmDir::new("stale");
    let base = stream(&dir, "st");
    let log = raw::log_path(dir.path(), "st");
    // A log left by a SIGKILLed publisher (it dies after ten messages, nobody reading).
    let mut reader = Subscription::builder("st").dir(dir.path()).open().unwrap();
    let mut dead = Peer::spawn("dead", "publisher", &base.clone().set("kill", "before:10").set("wait_go", 1));
    let dead_session = dead.expect("ready", T10).num("session") as i32;
    reader.wait_connected(T10).unwrap();
    dead.send("go");
    assert!(killed(&mut dead));
    let old_inode = std::fs::metadata(&log).unwrap().ino();
    // Readers see it dead and do not reuse it; a new reader does not join it.
    let deadline = Instant::now() + T10;
    let mut got = 0;
    while reader.is_connected() && Instant::now() < deadline {
        got += reader.poll(|_: &[u8], _: &Header| {}, 100);
    }
    assert!(!reader.is_connected());
    let mut late = Subscription::builder("st").dir(dir.path()).open().unwrap();
    assert_eq!(late.session_id(), None, "a dead publisher's log is not joined");
    // The next publisher replaces it: a new file and a new session, which both readers join.
    let mut fresh = Publication::builder("st").dir(dir.path()).term_length(TERM).create().unwrap();
    assert_ne!(std::fs::metadata(&log).unwrap().ino(), old_inode, "a new file, not the stale one reused");
    assert_ne!(fresh.session_id(), dead_session);
    for s in [&mut reader, &mut late] {
        let deadline = Instant::now() + T10;
        while s.session_id() != Some(fresh.session_id()) && Instant::now() < deadline {
            got += s.poll(|_: &[u8], _: &Header| {}, 100);
        }
        assert_eq!(s.session_id(), Some(fresh.session_id()));
        assert_eq!(s.join_position(), Some(0));
    }
    // A live publisher's log is never replaced.
    let second = Publication::builder("st").dir(dir.path()).term_length(TERM).create();
    assert!(matches!(second, Err(Error::AlreadyExists { .. })), "{second:?}");
    fresh.offer(b"x").unwrap();
    drop((reader, late));
    fresh.close();
    // A log at the name that is not ready (as if initialisation never finished), with no live
    // publisher: readers leave it alone (not even mapped) and wait, and the next publisher
    // replaces it.
    let kept =
        Publication::builder("st").dir(dir.path()).term_length(TERM).keep_files(true).create().unwrap();
    drop(kept);
    raw::set_meta_i32(&log, raw::meta::READY, 0);
    let waiting = Subscription::builder("st").dir(dir.path()).open().unwrap();
    assert_eq!(waiting.session_id(), None, "a dead publisher's broken log is not joined");
    drop(waiting);
    let replaced = Publication::builder("st").dir(dir.path()).term_length(TERM).create().unwrap();
    assert_eq!(raw::meta_i32(&log, raw::meta::READY), 1);
    let sub = Subscription::builder("st").dir(dir.path()).join_at(JoinAt::Latest).open().unwrap();
    assert_eq!(sub.session_id(), Some(replaced.session_id()));
    drop(sub);
    drop(replaced);
    // An empty file at the name (e.g. a crashed foreign tool): readers refuse, create replaces.
    std::fs::write(&log, b"").unwrap();
    let refused = Subscription::builder("st").dir(dir.path()).open();
    assert!(matches!(refused, Err(Error::Corrupt { .. })), "{refused:?}");
    let replaced = Publication::builder("st").dir(dir.path()).term_length(TERM).create().unwrap();
    assert_eq!(raw::meta_i32(&log, raw::meta::READY), 1);
    drop(replaced);
    println!("[stale files] dead publisher's log replaced; not-ready and empty logs refused then replaced; live log kept ({got} messages read)");
}
