//! Many writers into one stream (`ConcurrentPublication`), across real processes: one total
//! order for every reader, every writer's messages in its order, and writers killed with SIGKILL
//! anywhere (inside claims, at term ends) holding nobody back for longer than the liveness
//! interval, losing no live writer's message and never showing a partial message of theirs.

use crate::support;

use shmlog::{OfferError, Publication, Subscription};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::peer::{Cfg, Event, Peer};
use support::spawns::no_spawns;
use support::{iterations, Rng, ShmDir};

const MTU: usize = 1024;
const LIVENESS_MS: u64 = 50;

fn base(dir: &ShmDir, name: &str) -> Cfg {
    Cfg::new()
        .set("dir", dir.path().display())
        .set("name", name)
        .set("mtu", MTU)
        .set("max_len", 3 * (MTU - 32))
        .set("liveness_ms", LIVENESS_MS)
        .set("deadline_s", 240)
}

/// Every reader's `end` event.
fn ends(readers: &mut [Peer], within: Duration) -> Vec<Event> {
    readers.iter_mut().map(|r| r.expect("end", within)).collect()
}

/// `writer id -> messages seen` from an `end` event.
fn counts(end: &Event) -> BTreeMap<u64, u64> {
    end.get("counts")
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once(':').unwrap();
            (k.parse().unwrap(), v.parse().unwrap())
        })
        .collect()
}

/// Every reader saw the same messages in the same order.
fn assert_same_order(ends: &[Event]) {
    for e in ends {
        assert_eq!(e.get("order"), ends[0].get("order"), "readers saw different orders: {ends:?}");
        assert_eq!(counts(e), counts(&ends[0]), "readers saw different messages: {ends:?}");
    }
}

fn start_readers(n: usize, cfg: &Cfg) -> Vec<Peer> {
    let mut readers: Vec<Peer> = (0..n).map(|i| Peer::spawn(&format!("reader{i}"), "creader", cfg)).collect();
    for r in &mut readers {
        r.expect("opened", Duration::from_secs(20));
    }
    readers
}

#[test]
fn four_writer_processes_one_total_order_for_three_readers() {
    let _serial = support::exclusive();
    let dir = ShmDir::new("conc-order");
    let per_writer = iterations(100_000, 1_000_000) as u64;
    let cfg = base(&dir, "many").set("term", 1 << 20).set("readers", 3);
    let mut readers = start_readers(3, &cfg);
    let mut writers: Vec<Peer> = (0..4)
        .map(|w| {
            let c = cfg.clone().set("writer", w).set("count", per_writer).set("wait_go", 1).set("linger", 1);
            Peer::spawn(&format!("writer{w}"), "cwriter", &c)
        })
        .collect();
    let sessions: Vec<String> = writers
        .iter_mut()
        .map(|w| w.expect("ready", Duration::from_secs(20)).get("session").unwrap().to_owned())
        .collect();
    assert!(sessions.iter().all(|s| *s == sessions[0]), "the writers share one session: {sessions:?}");
    let start = Instant::now();
    for w in &mut writers {
        w.send("go");
    }
    for w in &mut writers {
        w.expect("done", Duration::from_secs(200));
    }
    let elapsed = start.elapsed();
    for w in &mut writers {
        w.send("close");
        w.wait_success(Duration::from_secs(20));
    }
    let ends = ends(&mut readers, Duration::from_secs(60));
    assert_same_order(&ends);
    let expected: BTreeMap<u64, u64> = (0..4).map(|w| (w, per_writer)).collect();
    assert_eq!(counts(&ends[0]), expected, "every message of every writer, once");
    println!(
        "4 writers x {per_writer} messages to 3 readers in {elapsed:?} ({:.2} M msgs/s), same order everywhere",
        (4 * per_writer) as f64 / elapsed.as_secs_f64() / 1e6
    );
}

/// Writers come and go under SIGKILL at random points while three steady writers keep
/// writing: readers never see a partial message, lose nothing of a live writer, agree on the
/// order, and are never held for much longer than the liveness interval.
#[test]
fn writers_killed_anywhere_never_stall_readers_or_lose_live_messages() {
    let _serial = support::exclusive();
    let dir = ShmDir::new("conc-kill");
    let mut rng = Rng::new("conc-kill");
    let kills = iterations(8, 200);
    // A small term, so kills land at term ends and inside rotations too.
    let cfg = base(&dir, "kills").set("term", 64 * 1024).set("readers", 3);
    let mut readers = start_readers(3, &cfg);
    let per_steady = 40_000 + 2_000 * kills as u64;
    let mut steady: Vec<Peer> = (0..3)
        .map(|w| {
            let c = cfg.clone().set("writer", w).set("count", per_steady).set("linger", 1);
            Peer::spawn(&format!("steady{w}"), "cwriter", &c)
        })
        .collect();
    for w in &mut steady {
        w.expect("ready", Duration::from_secs(20));
    }
    let mut victims = Vec::new();
    for k in 0..kills {
        let id = 100 + k as u64;
        // Half die at a random moment, half inside a claim (a hole for certain).
        let c = if k % 2 == 0 {
            cfg.clone().set("writer", id).set("kill_us", rng.range(200, 20_000))
        } else {
            cfg.clone().set("writer", id).set("die_in_claim", rng.range(0, 2_000))
        };
        let mut victim = Peer::spawn(&format!("victim{k}"), "cwriter", &c);
        victim.expect("ready", Duration::from_secs(20));
        let status = victim.wait_exit(Duration::from_secs(30));
        assert_eq!(status.signal(), Some(libc::SIGKILL), "victim {k} died by SIGKILL: {}", victim.describe());
        victims.push(id);
    }
    for w in &mut steady {
        w.expect("done", Duration::from_secs(200));
    }
    for w in &mut steady {
        w.send("close");
        w.wait_success(Duration::from_secs(20));
    }
    let ends = ends(&mut readers, Duration::from_secs(60));
    assert_same_order(&ends);
    let seen = counts(&ends[0]);
    for w in 0..3 {
        assert_eq!(seen.get(&w), Some(&per_steady), "every message of live writer {w}: {seen:?}");
    }
    let longest = ends.iter().map(|e| e.num("longest_wait_ms")).max().unwrap();
    let victims_seen: u64 = victims.iter().map(|v| seen.get(v).copied().unwrap_or(0)).sum();
    println!(
        "{kills} writers killed; their {victims_seen} whole messages delivered in order, no partial one; \
         longest reader wait {longest} ms (liveness interval {LIVENESS_MS} ms)"
    );
    // A hole is padded within a liveness interval of the death; the rest is scheduling on two
    // cores shared by seven processes.
    assert!(longest < 20 * LIVENESS_MS as i64, "a reader waited {longest} ms");
}

trait Signal {
    fn signal(&self) -> Option<i32>;
}

impl Signal for std::process::ExitStatus {
    fn signal(&self) -> Option<i32> {
        std::os::unix::process::ExitStatusExt::signal(self)
    }
}

/// A writer stopped (SIGSTOP) with a frame reserved is never padded over, however long it is
/// stopped and however many liveness intervals pass: readers wait, and its message arrives whole
/// once it resumes.
#[test]
fn a_stopped_writer_is_never_unblocked_over() {
    let _serial = support::exclusive();
    let dir = ShmDir::new("conc-stop");
    let cfg = base(&dir, "stop").set("term", 64 * 1024).set("readers", 1);
    let mut readers = start_readers(1, &cfg);
    let mut other =
        Peer::spawn("other", "cwriter", &cfg.clone().set("writer", 1).set("count", 20_000).set("linger", 1));
    other.expect("ready", Duration::from_secs(20));
    let mut stopped = Peer::spawn(
        "stopped",
        "cwriter",
        &cfg.clone().set("writer", 2).set("count", 20_000).set("linger", 1),
    );
    stopped.expect("ready", Duration::from_secs(20));
    // Stop and resume it many times, at random points (some land inside a reservation).
    let mut rng = Rng::new("conc-stop");
    for _ in 0..iterations(20, 200) {
        std::thread::sleep(Duration::from_micros(rng.range(100, 3_000)));
        stopped.signal(libc::SIGSTOP);
        // Several liveness intervals: an unblocker that passed over a stopped writer would.
        std::thread::sleep(Duration::from_millis(3 * LIVENESS_MS));
        stopped.signal(libc::SIGCONT);
    }
    other.expect("done", Duration::from_secs(120));
    stopped.expect("done", Duration::from_secs(120));
    other.send("close");
    stopped.send("close");
    other.wait_success(Duration::from_secs(20));
    stopped.wait_success(Duration::from_secs(20));
    let end = readers[0].expect("end", Duration::from_secs(60));
    let seen = counts(&end);
    assert_eq!(seen.get(&1), Some(&20_000));
    assert_eq!(seen.get(&2), Some(&20_000), "every message of the stopped writer, whole: {seen:?}");
}

/// In one process: handles on one stream share its session; an exclusive publisher cannot take
/// a stream that has concurrent writers, nor the reverse; the last writer out ends the stream.
#[test]
fn handles_share_a_session_and_exclude_an_exclusive_publisher() {
    // The last writer out must see the other gone: a spawn by a parallel test could hold its
    // descriptor (and its lock) for a moment (`support::spawns`).
    let _quiet = no_spawns();
    let dir = ShmDir::new("conc-api");
    let open = || Publication::builder("api").dir(dir.path()).term_length(64 * 1024).open_concurrent();
    let mut a = open().unwrap();
    let mut b = a.try_clone().unwrap();
    assert_eq!(a.session_id(), b.session_id());
    assert_ne!(a.writer_slot(), b.writer_slot());
    let err = Publication::builder("api").dir(dir.path()).create().unwrap_err();
    assert!(matches!(err, shmlog::Error::AlreadyExists { .. }), "{err}");
    let mut sub = Subscription::builder("api").dir(dir.path()).open().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !a.is_connected() {
        sub.poll(|_: &[u8], _: &shmlog::Header| {}, 1);
        assert!(Instant::now() < deadline, "the reader never joined");
    }
    assert!(matches!(a.offer(&[0; 100_000]), Err(OfferError::MessageTooLarge { .. })));
    let first = a.offer(b"from a").unwrap();
    let second = b.offer(b"from b").unwrap();
    assert!(second > first);
    let mut got = Vec::new();
    while got.len() < 2 {
        sub.poll(|m: &[u8], _: &shmlog::Header| got.push(m.to_vec()), 10);
        assert!(Instant::now() < deadline);
    }
    assert_eq!(got, [b"from a".to_vec(), b"from b".to_vec()]);
    drop(a);
    assert!(!sub.is_end_of_stream(), "one writer left: the stream goes on");
    b.close();
    while !sub.is_end_of_stream() {
        sub.poll(|_: &[u8], _: &shmlog::Header| {}, 10);
        assert!(Instant::now() < deadline, "the last writer's close ends the stream");
    }
    let exclusive = Publication::builder("api").dir(dir.path()).create().unwrap();
    let err = Publication::builder("api").dir(dir.path()).open_concurrent().unwrap_err();
    assert!(matches!(err, shmlog::Error::AlreadyExists { .. }), "{err}");
    drop(exclusive);
}

/// Two writers closing at the same moment: the second to look is the last, ends the stream and
/// removes the log (each once saw the other's lock, and neither did).
#[test]
fn two_writers_closing_at_once_still_end_the_stream() {
    // As above: no spawn may hold the first writer's descriptor while the second looks.
    let _quiet = no_spawns();
    let dir = ShmDir::new("conc-close");
    for round in 0..iterations(20, 200) {
        let open = || Publication::builder("close").dir(dir.path()).term_length(64 * 1024).open_concurrent();
        let (a, b) = (open().unwrap(), open().unwrap());
        assert_eq!(a.session_id(), b.session_id());
        let path = a.path().to_path_buf();
        let go = std::sync::Arc::new(std::sync::Barrier::new(2));
        let threads: Vec<_> = [a, b]
            .into_iter()
            .map(|p| {
                let go = go.clone();
                std::thread::spawn(move || {
                    go.wait();
                    p.close();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(!path.exists(), "round {round}: neither writer ended the stream");
    }
}

/// All 32 writer slots taken, one by a writer killed inside a claim: a slot whose dead owner's
/// message is not padded yet is not free (the unblocker finds the hole through its pending word).
/// While a live writer's open claim before that hole keeps it from being padded, the error says
/// how many slots live writers hold and which ones dead writers do; once that claim is committed,
/// a new writer pads the hole itself and takes the slot.
#[test]
fn too_many_writers_says_who_holds_the_slots_and_a_dead_writers_slot_is_freed_by_the_next_claimer() {
    let _serial = support::exclusive();
    let dir = ShmDir::new("conc-slots");
    let cfg = base(&dir, "slots").set("term", 64 * 1024);
    let open = || {
        Publication::builder("slots")
            .dir(dir.path())
            .term_length(64 * 1024)
            .mtu(MTU)
            .liveness_interval(Duration::from_millis(LIVENESS_MS))
            .open_concurrent()
    };
    let first = open().unwrap();
    let mut sub = Subscription::builder("slots").dir(dir.path()).open().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut probe = first.try_clone().unwrap();
    while !probe.is_connected() {
        sub.poll(|_: &[u8], _: &shmlog::Header| {}, 1);
        assert!(Instant::now() < deadline, "the reader never joined");
    }
    // Slot 1: a live writer's open claim, before the dead writer's message.
    let mut claim = probe.try_claim(8).unwrap();
    claim.buffer().copy_from_slice(b"claimed!");
    // Slot 2: a writer killed inside its first claim.
    let mut victim = Peer::spawn("victim", "cwriter", &cfg.clone().set("writer", 7).set("die_in_claim", 0));
    assert_eq!(victim.expect("ready", Duration::from_secs(20)).get("slot"), Some("2"));
    assert_eq!(victim.wait_exit(Duration::from_secs(30)).signal(), Some(libc::SIGKILL));
    // Slots 3 to 31: live writers.
    let mut others: Vec<_> = (3..32).map(|_| first.try_clone().unwrap()).collect();
    let err = first.try_clone().unwrap_err();
    match &err {
        shmlog::Error::TooManyWriters { slots: 32, live: 31, awaiting_unblock, .. } => {
            assert_eq!(awaiting_unblock, &[2])
        }
        other => panic!("{other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("31 of 32 writer slots") && text.contains("slot 2"),
        "live writers hold 31 slots, a dead one slot 2: {text}"
    );
    claim.commit();
    // The dead writer's message can be padded now: the next claimer does it, and takes slot 2.
    let next = first.try_clone().unwrap_or_else(|e| panic!("slot 2 is free once padded: {e}"));
    assert_eq!(next.writer_slot(), 2);
    let err = first.try_clone().unwrap_err();
    assert!(
        matches!(&err, shmlog::Error::TooManyWriters { live: 32, awaiting_unblock, .. } if awaiting_unblock.is_empty())
    );
    assert!(err.to_string().contains("all 32 writer slots of the log are held by live writers"), "{err}");
    // The reader goes on past the padded hole.
    let mut got = Vec::new();
    while got.is_empty() {
        sub.poll(|m: &[u8], _: &shmlog::Header| got.push(m.to_vec()), 10);
        assert!(Instant::now() < deadline, "the reader is held at the dead writer's hole");
    }
    assert_eq!(got, [b"claimed!".to_vec()]);
    others.clear();
}

/// The review's N7 e: a concurrent log's tail counter whose offset is off the 32-byte grid (a
/// corrupt or hostile file: no writer stores one). Writers took it as the start of their next
/// frame: a debug build tripped an assertion of the region layer, a release build masked the
/// offset onto the grid and wrote over the frame before it. Now every writer reports the log
/// corrupt, and readers go on with what was committed. Run in both builds (`cargo test` and
/// `cargo test --release`).
#[test]
fn a_misaligned_tail_is_corruption_not_an_assertion_or_a_masked_write() {
    use std::os::unix::fs::FileExt;
    let dir = ShmDir::new("misaligned-tail");
    let term = 64 * 1024;
    let mut p = Publication::builder("mis").dir(dir.path()).term_length(term).open_concurrent().unwrap();
    let mut other = p.try_clone().unwrap();
    let mut sub = Subscription::builder("mis").dir(dir.path()).open().unwrap();
    p.wait_for_readers(1, Duration::from_secs(10)).unwrap();
    for i in 0..3u8 {
        p.offer(&[i; 40]).unwrap();
    }
    // Term 0's tail counter, the first word of the metadata after the three terms: 8 past its
    // offset (three frames of 96 bytes: 288 -> 296).
    let file = std::fs::OpenOptions::new().read(true).write(true).open(p.path()).unwrap();
    let at = 3 * term as u64;
    let mut raw = [0u8; 8];
    file.read_exact_at(&mut raw, at).unwrap();
    let tail = i64::from_le_bytes(raw);
    assert_eq!(tail & 0xFFFF_FFFF, 288);
    file.write_all_at(&(tail + 8).to_le_bytes(), at).unwrap();
    for writer in [&mut p, &mut other] {
        assert_eq!(writer.offer(b"after").unwrap_err(), OfferError::Corrupt);
        assert_eq!(writer.try_claim(8).err(), Some(OfferError::Corrupt));
    }
    let mut got = Vec::new();
    while sub.poll(|m: &[u8], _: &shmlog::Header| got.push(m.to_vec()), 16) > 0 {}
    assert_eq!(got, (0..3u8).map(|i| vec![i; 40]).collect::<Vec<_>>(), "what was committed, and only that");
    // A reader joining at the tail is told the log is corrupt; one joining at a message start
    // (the other reader's place, or the oldest) reads what was committed.
    let latest = Subscription::builder("mis").dir(dir.path()).join_at(shmlog::JoinAt::Latest).open();
    assert!(matches!(latest, Err(shmlog::Error::Corrupt { .. })), "{latest:?}");
    for (join, expected) in [(shmlog::JoinAt::Slowest, 0), (shmlog::JoinAt::Earliest, 3)] {
        let mut late = Subscription::builder("mis").dir(dir.path()).join_at(join).open().unwrap();
        assert_eq!(late.poll(|_: &[u8], _: &shmlog::Header| {}, 16), expected, "{join:?}");
        assert_eq!(late.fault(), None);
    }
}
