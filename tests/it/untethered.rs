//! Untethered subscriptions (`SubscriptionBuilder::tethered(false)`): the publisher never waits
//! for them; when it laps one, the reader reports exactly what it missed and never delivers a
//! torn or overwritten message. Threads first, then real processes stopped, slowed and killed.

use crate::support;

use shmlog::{Publication, Resume};
use std::time::{Duration, Instant};
use support::untethered_roles::{publish, read_all, subscription, Ledger, TERM};
use support::{exclusive, ShmDir};

const T60: Duration = Duration::from_secs(60);

/// One publisher thread at full speed, a tethered reader that gets everything, and a slow
/// untethered reader (sleeping in its handler) that is lapped again and again: its missing
/// messages are exactly the losses it reports, and every message it gets is whole and intact.
fn threads_case(len: usize, resume: Resume) {
    let _one = exclusive();
    let dir = ShmDir::new("ut-threads");
    let name = "ut";
    // An MTU of 1 KiB: messages above 992 bytes are fragmented.
    let mut p = Publication::builder(name).dir(dir.path()).term_length(TERM).mtu(1024).create().unwrap();
    let max_payload = p.max_payload_len();
    let mut tethered = subscription(name, dir.path(), true, Resume::Oldest);
    let mut untethered = subscription(name, dir.path(), false, resume);
    assert!(untethered.is_untethered() && !tethered.is_untethered());
    p.wait_for_readers(2, T60).unwrap();
    let count: u64 = if len > max_payload { 20_000 } else { 100_000 };
    let deadline = Instant::now() + T60;
    std::thread::scope(|s| {
        let fast = s.spawn(move || {
            let mut ledger = Ledger::new(len, max_payload, TERM);
            let mut last = Instant::now();
            read_all(&mut tethered, &mut ledger, Duration::ZERO, 0, |l| {
                if last.elapsed() > Duration::from_secs(2) {
                    last = Instant::now();
                    println!("tethered: {}", l.summary());
                }
                assert!(Instant::now() < deadline)
            })
            .unwrap();
            ledger
        });
        let slow = s.spawn(move || {
            let mut ledger = Ledger::new(len, max_payload, TERM);
            let r = read_all(&mut untethered, &mut ledger, Duration::from_millis(1), 64, |_| {
                assert!(Instant::now() < deadline, "the untethered reader never finished")
            });
            (r, ledger)
        });
        publish(&mut p, count, len, deadline);
        p.close();
        let fast = fast.join().unwrap();
        assert_eq!((fast.next, fast.losses), (count, 0), "the tethered reader gets everything");
        let (r, slow) = slow.join().unwrap();
        println!("untethered: {}", slow.summary());
        r.unwrap();
        slow.finish(count).unwrap();
        assert!(slow.losses > 0, "the slow reader was never lapped: the test did not test");
        assert_eq!(slow.delivered + slow.lost_messages + (count - slow.next), count);
    });
}

#[test]
fn threads_slow_untethered_reader_reports_exactly_what_it_missed() {
    threads_case(64, Resume::Oldest);
}

#[test]
fn threads_slow_untethered_reader_resuming_live() {
    threads_case(64, Resume::Live);
}

#[test]
fn threads_fragmented_messages_are_delivered_whole_or_reported_lost() {
    threads_case(3_000, Resume::Oldest);
}

use support::peer::{Cfg, Peer};

const T30: Duration = Duration::from_secs(30);

fn reader_cfg(dir: &ShmDir, name: &str, untethered: bool, max_payload: i64) -> Cfg {
    Cfg::new()
        .set("dir", dir.path().display())
        .set("name", name)
        .set("untethered", u8::from(untethered))
        .set("max_payload", max_payload)
        .set("sleep_us", 1000)
        .set("every", 64)
}

/// Waits until `peer` prints a tick whose ledger shows at least `losses` losses.
fn await_losses(peer: &mut Peer, losses: i64, within: Duration) {
    peer.expect_where("tick", |e| e.num("losses") >= losses, within);
}

/// Ends the run: the publisher closes, and every reader left must end with everything delivered
/// or reported lost (`due` past the last message sent). Returns each reader's `done` event.
fn close_and_collect(publisher: &mut Peer, readers: &mut [Peer]) -> (i64, Vec<support::peer::Event>) {
    publisher.send("close");
    let sent = publisher.expect("closed", T30).num("sent");
    publisher.wait_success(T30);
    let done = readers
        .iter_mut()
        .map(|r| {
            let done = r.expect("done", T60);
            r.wait_success(T30);
            assert!(done.num("due") >= sent, "{}: {} of {sent} accounted for", r.name, done.raw);
            done
        })
        .collect();
    (sent, done)
}

/// The first process test: a publisher at full speed, one tethered reader, and one
/// untethered reader SIGSTOPped for 2 s, then resumed, then made slow (sleeping in its handler).
/// The publisher goes on while the reader is stopped; the tethered reader gets everything; the
/// untethered reader's missing messages are exactly its reported losses, and every message it
/// gets passes its checksum (each reader checks as it goes and fails on the first doubt).
#[test]
fn processes_stopped_then_slow_untethered_reader() {
    let _one = exclusive();
    let dir = ShmDir::new("ut-stop");
    let name = "ut";
    // The session exists before the readers open: they join it at once, and the publisher's
    // wait for two readers ends only when both read it. (Readers waiting for a session count as
    // connected, being owed it; an untethered one is not waited for, and woken late it would
    // join late.)
    let pcfg = Cfg::new().set("dir", dir.path().display()).set("name", name).set("readers", 2);
    let mut publisher = Peer::spawn("publisher", "ut_publisher", &pcfg);
    assert_eq!(publisher.expect("ready", T30).num("max_payload"), 8160);
    let mut tethered = Peer::spawn("tethered", "ut_reader", &reader_cfg(&dir, name, false, 8160));
    let mut untethered = Peer::spawn("untethered", "ut_reader", &reader_cfg(&dir, name, true, 8160));
    publisher.expect("started", T60);
    tethered.expect("ready", T60);
    untethered.expect("ready", T60);
    publisher.expect_where("progress", |e| e.num("sent") > 0, T30);
    untethered.signal(libc::SIGSTOP);
    // While it is stopped the publisher runs on: several terms' worth of messages.
    let at_stop = publisher.expect("progress", T30).num("sent");
    let stopped = Instant::now();
    publisher.expect_where("progress", |e| e.num("sent") >= at_stop + 4 * 65_536, T30);
    let left = Duration::from_secs(2).saturating_sub(stopped.elapsed());
    std::thread::sleep(left); // the scenario's 2 s stop, not a synchronisation
    untethered.signal(libc::SIGCONT);
    await_losses(&mut untethered, 1, T30);
    untethered.send("slow");
    await_losses(&mut untethered, 3, T60);
    // `inspect` (what `shmlog stat` shows) tells the two readers apart, with the losses.
    let stream = shmlog::inspect::streams(dir.path()).unwrap().into_iter().find(|s| s.name == name).unwrap();
    let (loose, held): (Vec<_>, Vec<_>) = stream.readers.iter().partition(|r| r.untethered);
    assert_eq!((loose.len(), held.len()), (1, 1), "{:?}", stream.readers);
    assert!(loose[0].losses >= 3 && loose[0].lost_bytes > 0, "{:?}", loose[0]);
    assert!(held[0].losses == 0 && !loose[0].slowest);
    let (sent, done) = close_and_collect(&mut publisher, &mut [tethered, untethered]);
    println!("sent {sent}: tethered {}, untethered {}", done[0].raw, done[1].raw);
    assert_eq!(
        (done[0].num("next"), done[0].num("losses")),
        (sent, 0),
        "the tethered reader gets everything"
    );
    assert!(done[1].num("losses") >= 3 && done[1].num("delivered") > 0);
}

/// The same with eight untethered readers (scaled to two cores: they sleep on the doorbell when
/// idle) killed and stopped at random while the publisher runs: the tethered reader gets
/// everything, the publisher is never held, and every survivor ends with its ledger exact.
#[test]
fn processes_eight_untethered_readers_killed_and_stopped_at_random() {
    let _one = exclusive();
    let dir = ShmDir::new("ut-eight");
    let name = "ut8";
    let mut rng = support::Rng::new("ut-eight");
    // The session first, as above: every reader joins it before the first message.
    let pcfg = Cfg::new().set("dir", dir.path().display()).set("name", name).set("readers", 9);
    let mut publisher = Peer::spawn("publisher", "ut_publisher", &pcfg);
    publisher.expect("ready", T30);
    let mut tethered = Peer::spawn("tethered", "ut_reader", &reader_cfg(&dir, name, false, 8160));
    let mut readers: Vec<Peer> = (0..8)
        .map(|i| {
            let cfg = reader_cfg(&dir, name, true, 8160).set("live", u8::from(i % 2 == 1));
            Peer::spawn(&format!("untethered{i}"), "ut_reader", &cfg)
        })
        .collect();
    publisher.expect("started", T60);
    tethered.expect("ready", T60);
    for r in &mut readers {
        r.expect("ready", T60);
        r.send("slow");
    }
    let mut killed = vec![false; readers.len()];
    let mut sent = publisher.expect_where("progress", |e| e.num("sent") > 0, T30).num("sent");
    for round in 0..12 {
        let i = rng.range(0, readers.len() as u64) as usize;
        if killed[i] {
            continue;
        }
        if rng.chance(30) && killed.iter().filter(|k| !**k).count() > 3 {
            readers[i].kill();
            killed[i] = true;
            println!("round {round}: killed reader {i}");
        } else {
            readers[i].signal(libc::SIGSTOP);
            // Stopped while the publisher writes at least one more term.
            sent = publisher.expect_where("progress", |e| e.num("sent") > sent, T30).num("sent");
            readers[i].signal(libc::SIGCONT);
            println!("round {round}: stopped reader {i} while the publisher passed {sent}");
        }
    }
    let mut survivors: Vec<Peer> =
        readers.into_iter().zip(&killed).filter(|(_, k)| !**k).map(|(r, _)| r).collect();
    survivors.insert(0, tethered);
    let (sent, done) = close_and_collect(&mut publisher, &mut survivors);
    assert_eq!(
        (done[0].num("next"), done[0].num("losses")),
        (sent, 0),
        "the tethered reader gets everything"
    );
    let lapped = done[1..].iter().filter(|d| d.num("losses") > 0).count();
    println!("sent {sent}; {} untethered survivors, {lapped} of them lapped", done.len() - 1);
    assert!(lapped > 0, "no untethered reader was lapped: the test did not test");
}

/// What the N5 test offers through: either kind of publication.
enum Writer {
    Exclusive(Publication),
    Concurrent(shmlog::ConcurrentPublication),
}

impl Writer {
    fn offer(&mut self, m: &[u8]) -> Result<i64, shmlog::OfferError> {
        match self {
            Writer::Exclusive(p) => p.offer(m),
            Writer::Concurrent(p) => p.offer(m),
        }
    }

    fn wait_for_readers(&mut self, n: usize) {
        match self {
            Writer::Exclusive(p) => p.wait_for_readers(n, T60),
            Writer::Concurrent(p) => p.wait_for_readers(n, T60),
        }
        .unwrap()
    }
}

/// How long after its only reader, untethered, was killed a publisher offering every `pace`
/// (zero: at full speed) goes on hearing `Ok`: it must learn, through its offers alone, that
/// nobody reads. The reader is a real process, SIGKILLed and reaped (its slot lock is gone).
fn offers_after_the_only_reader_died(dir: &ShmDir, name: &str, p: &mut Writer, pace: Duration) -> Duration {
    let mut reader = Peer::spawn("untethered", "ut_reader", &reader_cfg(dir, name, true, 8160));
    reader.expect("ready", T60);
    p.wait_for_readers(1);
    let m = support::untethered_roles::message(0, 64);
    for _ in 0..1_000 {
        // Connected: an untethered reader never holds the publisher back.
        p.offer(&m).expect("an offer with a live untethered reader");
    }
    reader.kill();
    let killed = Instant::now();
    let mut offers = 0u64;
    loop {
        match p.offer(&m) {
            Ok(_) => offers += 1,
            Err(shmlog::OfferError::NotConnected) => break,
            Err(e) => panic!("offer after the kill: {e}"),
        }
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "still connected 5 s after the only reader died ({offers} offers accepted since)"
        );
        if !pace.is_zero() {
            std::thread::sleep(pace); // the publisher's own pace, not a synchronisation
        }
    }
    println!(
        "pace {pace:?}: NotConnected {:?} after the kill, {offers} offers accepted meanwhile",
        killed.elapsed()
    );
    killed.elapsed()
}

/// The review's N5: with only untethered readers nothing holds the publisher, and it swept dead
/// readers only when held, so a killed reader kept it "connected" for good. Now a publisher
/// looks at the clock at checkpoints (paced by its own rate, none on the offer's fast path) and
/// sweeps once per liveness interval, held or not. The bound asserted, 5 s, is generous: the
/// sweep is due 20 ms (the liveness interval) after the last one, and a steady publisher reaches
/// a checkpoint within an eighth of that; the rest is for a 2-core machine shared with builds.
fn killed_untethered_reader_disconnects(concurrent: bool) {
    let _one = exclusive();
    let dir = ShmDir::new(if concurrent { "ut-n5c" } else { "ut-n5" });
    let name = "n5";
    let builder = Publication::builder(name)
        .dir(dir.path())
        .term_length(TERM)
        .liveness_interval(Duration::from_millis(20));
    let mut p = if concurrent {
        Writer::Concurrent(builder.open_concurrent().unwrap())
    } else {
        Writer::Exclusive(builder.create().unwrap())
    };
    // A steady publisher (one offer a millisecond), then one at full speed.
    for pace in [Duration::from_millis(1), Duration::ZERO] {
        offers_after_the_only_reader_died(&dir, name, &mut p, pace);
    }
}

#[test]
fn processes_killed_untethered_reader_disconnects_the_publisher() {
    killed_untethered_reader_disconnects(false);
}

#[test]
fn processes_killed_untethered_reader_disconnects_a_concurrent_publisher() {
    killed_untethered_reader_disconnects(true);
}
