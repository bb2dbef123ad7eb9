//! Soak (issue 6): one stream for a while, with readers joining, leaving, being stopped and
//! being killed, and publishers closing or being killed and replaced; every message any reader
//! delivers is checked (`support::wire::Verifier`).
//!
//! Default 20 s; `SHMLOG_SOAK_SECS=600` for the 10-minute run. Random choices follow
//! `SHMLOG_SEED` (printed).

use crate::support;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};
use support::peer::{Cfg, Peer};
use support::{exclusive, Rng, ShmDir};

const T10: Duration = Duration::from_secs(10);
const MAX_TRANSIENTS: usize = 4;
const MAX_STOP: Duration = Duration::from_millis(200);

#[derive(Default, Debug)]
struct Tally {
    generations_closed: u32,
    generations_killed: u32,
    published: i64,
    anchor_delivered: i64,
    spawned: u32,
    killed: u32,
    stopped: u32,
    asked_to_quit: u32,
    finished_by_themselves: u32,
    max_stall: Duration,
    worst_disconnect: Duration,
}

/// Reaps transients that have exited: each must have exited cleanly, or by our SIGKILL.
fn reap(transients: &mut Vec<(Peer, bool)>, tally: &mut Tally) {
    transients.retain_mut(|(t, killed_by_us)| {
        let _ = t.seen("done"); // drains events; a `fail` event panics here
        if !t.exited() {
            return true;
        }
        let status = t.wait_exit(T10);
        if *killed_by_us {
            // A peer can reach its `quit_after` and exit between our `exited()` check and the
            // kill: SIGKILL to a zombie does nothing, so a clean exit is as good as the signal.
            let clean = status.signal() == Some(libc::SIGKILL) || status.success();
            assert!(clean, "{} exited with {status:?}\n{}", t.name, t.describe());
        } else {
            assert!(status.success(), "{} exited with {status:?}\n{}", t.name, t.describe());
            tally.finished_by_themselves += 1;
        }
        false
    });
}

#[test]
fn soak_readers_and_publishers_come_and_go() {
    let _x = exclusive();
    let secs: u64 = std::env::var("SHMLOG_SOAK_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let mut rng = Rng::new("soak");
    let started = Instant::now();
    let end = started + Duration::from_secs(secs);
    let dir = ShmDir::new("soak");
    let base = Cfg::new()
        .set("dir", dir.path().display())
        .set("name", "soak")
        .set("term", 128 << 10)
        .set("mtu", 1024)
        .set("max_len", 4 * 992)
        .set("deadline_s", secs + 120);
    // The anchor reads every session from its start, strictly, for the whole run.
    let mut anchor = Peer::spawn(
        "anchor",
        "subscriber",
        &base.clone().set("sessions", 1_000_000).set("progress", 100_000),
    );
    anchor.expect("opened", T10);
    let mut tally = Tally::default();
    let mut transients: Vec<(Peer, bool)> = Vec::new();
    let mut generation = 0;
    while Instant::now() < end {
        generation += 1;
        let mut publisher = Peer::spawn(
            &format!("pub{generation}"),
            "publisher",
            &base.clone().set("wait_go", 1).set("progress", 20_000).set("blocked_ms", 500),
        );
        let session = publisher.expect("ready", T10).num("session");
        let joined = anchor.expect_where("joined", |e| e.num("session") == session, T10);
        assert_eq!(joined.num("position"), 0, "the anchor reads every session from its start");
        publisher.send("go");
        let generation_end = (Instant::now() + Duration::from_millis(rng.range(2_000, 6_000))).min(end);
        while Instant::now() < generation_end {
            // Pacing of the churn (not synchronisation): one action every 20-200 ms.
            std::thread::sleep(Duration::from_millis(rng.range(20, 200)));
            reap(&mut transients, &mut tally);
            match rng.range(0, 4) {
                0 if transients.len() < MAX_TRANSIENTS => {
                    tally.spawned += 1;
                    let join = if rng.chance(50) { "slowest" } else { "latest" };
                    let cfg = base
                        .clone()
                        .set("join", join)
                        .set("sessions", 1_000_000)
                        .set("quit_after", rng.range(1_000, 300_000))
                        .set("controlled", rng.range(0, 2));
                    transients.push((Peer::spawn(&format!("t{}", tally.spawned), "subscriber", &cfg), false));
                }
                1 if !transients.is_empty() => {
                    let i = rng.range(0, transients.len() as u64) as usize;
                    if !transients[i].1 && !transients[i].0.exited() {
                        transients[i].0.kill();
                        transients[i].1 = true;
                        tally.killed += 1;
                    }
                }
                2 if !transients.is_empty() => {
                    let i = rng.range(0, transients.len() as u64) as usize;
                    let t = &mut transients[i].0;
                    if !t.exited() {
                        t.signal(libc::SIGSTOP);
                        std::thread::sleep(Duration::from_millis(rng.range(10, MAX_STOP.as_millis() as u64)));
                        t.signal(libc::SIGCONT);
                        tally.stopped += 1;
                    }
                }
                3 if !transients.is_empty() => {
                    let i = rng.range(0, transients.len() as u64) as usize;
                    transients[i].0.send("quit");
                    tally.asked_to_quit += 1;
                }
                _ => {}
            }
        }
        // End the generation: close it, or kill its publisher.
        if rng.chance(50) {
            publisher.send("stop");
            let done = publisher.expect("done", Duration::from_secs(30));
            publisher.expect("closed", T10);
            publisher.wait_success(T10);
            let count = done.num("count");
            let stall = Duration::from_micros(done.num("max_stall_us") as u64);
            tally.max_stall = tally.max_stall.max(stall);
            let eos = anchor.expect_where("eos", |e| e.num("session") == session, Duration::from_secs(30));
            assert_eq!((eos.num("first"), eos.num("next")), (0, count), "anchor, generation {generation}");
            tally.published += count;
            tally.anchor_delivered += eos.num("count");
            tally.generations_closed += 1;
        } else {
            let last = publisher.seen("progress").last().map_or(0, |e| e.num("seq"));
            let t0 = Instant::now();
            publisher.kill();
            let d =
                anchor.expect_where("disconnected", |e| e.num("session") == session, Duration::from_secs(5));
            let after = d.at.saturating_duration_since(t0);
            assert!(after < Duration::from_secs(1), "anchor saw publisher {generation} gone after {after:?}");
            tally.worst_disconnect = tally.worst_disconnect.max(after);
            // Its count is final once the anchor moves to the next session (or quits).
            tally.generations_killed += 1;
            tally.published += last;
        }
        // Stalls of a killed publisher are bounded by the checks above; of a closed one, here.
        assert!(
            tally.max_stall < MAX_STOP + Duration::from_secs(1),
            "the publisher was held back {:?} (stops last at most {MAX_STOP:?})",
            tally.max_stall
        );
    }
    for (t, killed) in &mut transients {
        if !*killed {
            t.send("quit");
        }
    }
    reap(&mut transients, &mut tally);
    for (t, killed) in &mut transients {
        let status = t.wait_exit(T10);
        assert!(*killed || status.success(), "{} exited with {status:?}", t.name);
    }
    anchor.send("quit");
    anchor.expect("done", T10);
    anchor.wait_success(T10);
    // Sessions a killed publisher ended: the anchor drained them to the same gap-free prefix.
    let ends = anchor.seen("session_end");
    for e in &ends {
        assert_eq!(e.get("first"), Some("0"), "{}", e.raw);
    }
    println!(
        "[soak] {secs}s ({:.1}s) generations closed={} killed={}; published >= {} messages, the anchor \
         checked all {} of the closed ones; transients spawned={} killed={} stopped={} asked_to_quit={} \
         finished_by_quit_after_or_quit={}; publisher's longest stall {:?}; worst disconnect {:?}",
        started.elapsed().as_secs_f64(),
        tally.generations_closed,
        tally.generations_killed,
        tally.published,
        tally.anchor_delivered,
        tally.spawned,
        tally.killed,
        tally.stopped,
        tally.asked_to_quit,
        tally.finished_by_themselves,
        tally.max_stall,
        tally.worst_disconnect,
    );
    assert!(tally.generations_closed + tally.generations_killed >= 1);
}
