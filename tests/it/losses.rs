//! Loss is never silent: a subscription that moves to a later session of its stream starts at its
//! first message when the log still holds it, and otherwise is told exactly what it missed
//! (`Subscription::take_loss`, `RecvError::Lost`), as it is of whole sessions that began and ended
//! unseen. Readers check every message against the losses reported before it.

use crate::support;

use shmlog::{
    AsyncReceiver, Bytes, Header, JoinAt, Loss, LossCause, Publication, Receiver, RecvError, Subscription,
};
use std::time::{Duration, Instant};
use support::loss_roles::{position_of, FRAMED, LEN};
use support::peer::{Cfg, Peer};
use support::spawns::no_spawns;
use support::{exclusive, ShmDir};

const T30: Duration = Duration::from_secs(30);
const TERM: usize = 64 * 1024;

fn publication(dir: &ShmDir, name: &str) -> Publication {
    Publication::builder(name).dir(dir.path()).term_length(TERM).create().unwrap()
}

fn subscription(dir: &ShmDir, name: &str) -> Subscription {
    Subscription::builder(name).dir(dir.path()).open().unwrap()
}

fn message(seq: u64) -> [u8; LEN] {
    let mut m = [0u8; LEN];
    m[..8].copy_from_slice(&seq.to_le_bytes());
    m
}

fn seq_of(m: &[u8]) -> u64 {
    u64::from_le_bytes(m[..8].try_into().unwrap())
}

/// Offers `count` numbered messages (from `from`), `fast` reading along so flow control lets the
/// publisher run on.
fn send(p: &mut Publication, fast: &mut Subscription, from: u64, count: u64) {
    for seq in from..from + count {
        let deadline = Instant::now() + T30;
        while p.offer(&message(seq)).is_err() {
            fast.poll(|_: &[u8], _: &Header| {}, 1024);
            assert!(Instant::now() < deadline, "the publisher stayed held back");
        }
    }
    while fast.poll(|_: &[u8], _: &Header| {}, 1024) > 0 {}
}

/// Polls `sub` (joining the session when due) until it has `count` messages or the deadline.
fn read(sub: &mut Subscription, count: usize) -> Vec<(u64, i64)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + T30;
    while got.len() < count {
        let left = count - got.len();
        let n = sub.poll(|m: &[u8], h: &Header| got.push((seq_of(m), h.position() - FRAMED)), left);
        if n == 0 {
            sub.wait_readable(Duration::from_millis(10));
        }
        assert!(Instant::now() < deadline, "only {} of {count} messages", got.len());
    }
    got
}

/// A subscription opened before its publisher, which polls only after the publisher has sent to
/// another reader that kept up: it reads the session from its first message. It is a reader the
/// new session is owed to from the moment it opened: the publisher, counting it at the session's
/// start until it joins, is held a window past the start (before, it ran on and the late reader
/// missed the start: without a word, then with a loss report).
#[test]
fn a_session_that_begins_while_a_reader_waits_is_read_from_its_first_message() {
    let dir = ShmDir::new("loss-from-start");
    let mut late = subscription(&dir, "s");
    let mut p = publication(&dir, "s");
    let mut fast = subscription(&dir, "s");
    assert!(p.is_connected(), "the waiting subscription counts from the start");
    let per_term = (TERM as i64 / FRAMED) as u64;
    let mut sent = 0;
    loop {
        match p.offer(&message(sent)) {
            Ok(_) => sent += 1,
            Err(shmlog::OfferError::BackPressured) => break,
            Err(e) => panic!("{e}"),
        }
        while fast.poll(|_: &[u8], _: &Header| {}, 1024) > 0 {}
    }
    assert!(sent < per_term, "held within a term of the start by the reader that did not look: {sent}");
    assert_eq!(p.position(), sent as i64 * FRAMED);
    // Once it looks, everything flows, and it reads the session whole.
    let reading = std::thread::scope(|s| {
        let reader = s.spawn(|| read(&mut late, 3 * per_term as usize));
        send(&mut p, &mut fast, sent, 3 * per_term - sent);
        reader.join().unwrap()
    });
    assert_eq!(reading.iter().map(|g| g.0).collect::<Vec<_>>(), (0..3 * per_term).collect::<Vec<_>>());
    assert_eq!(late.take_loss(), None, "nothing was missed");
}

/// An untethered reader waiting for a session is owed it too, but does not hold its publisher:
/// looking only after the publisher ran two terms past the session's start, the log no longer
/// holds its first messages. It is told exactly which (session, from 0 to where it starts), and
/// starts at the oldest message the log holds.
#[test]
fn a_reader_that_looks_too_late_is_told_exactly_what_it_missed() {
    let dir = ShmDir::new("loss-late");
    let mut late = untethered(&dir, "s");
    let mut p = publication(&dir, "s");
    let mut fast = subscription(&dir, "s");
    p.wait_for_readers(1, T30).unwrap();
    let per_term = (TERM as i64 / FRAMED) as u64;
    send(&mut p, &mut fast, 0, 2 * per_term + 100);
    let got = read(&mut late, 10);
    let loss = late.take_loss().expect("a loss report");
    assert_eq!(
        loss,
        Loss { session_id: p.session_id(), from: 0, to: got[0].1, cause: LossCause::JoinedLate }
    );
    assert_eq!(late.take_loss(), None, "one report");
    let first = got[0].0;
    assert_eq!(got[0].1, position_of(first, TERM as i64));
    assert!(got[0].1 >= p.position() - TERM as i64, "the oldest message the log holds");
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), (first..first + 10).collect::<Vec<_>>());
    assert!(loss.to_string().contains(&format!("0..{}", loss.to)), "{loss}");
}

fn untethered(dir: &ShmDir, name: &str) -> Subscription {
    Subscription::builder(name).dir(dir.path()).tethered(false).open().unwrap()
}

/// `later_sessions(JoinAt::Latest)`: the reader skips to the live position, and what it skipped is
/// still reported.
#[test]
fn skipping_to_the_latest_is_reported_too() {
    let dir = ShmDir::new("loss-latest");
    let mut late = Subscription::builder("s").dir(dir.path()).later_sessions(JoinAt::Latest).open().unwrap();
    let mut p = publication(&dir, "s");
    let mut fast = subscription(&dir, "s");
    p.wait_for_readers(1, T30).unwrap();
    send(&mut p, &mut fast, 0, 100);
    let deadline = Instant::now() + T30;
    while late.session_id().is_none() {
        late.wait_readable(Duration::from_millis(10));
        assert!(Instant::now() < deadline, "never joined");
    }
    let at = late.position();
    assert_eq!(at, p.position(), "joined at the publisher");
    assert_eq!(
        late.take_loss(),
        Some(Loss { session_id: p.session_id(), from: 0, to: at, cause: LossCause::JoinedLate })
    );
    send(&mut p, &mut fast, 100, 5);
    assert_eq!(read(&mut late, 5).iter().map(|g| g.0).collect::<Vec<_>>(), (100..105).collect::<Vec<_>>());
    assert!(Subscription::builder("s").dir(dir.path()).later_sessions(JoinAt::Position(0)).open().is_err());
}

/// Two publishers start and end while a reader of an earlier session does not look; it then
/// drains its session and joins the third: it is told that one whole session passed unseen, and
/// reads the third from its start.
#[test]
fn whole_sessions_begun_and_ended_unseen_are_reported() {
    let dir = ShmDir::new("loss-sessions");
    let mut first = publication(&dir, "s");
    let mut sub = subscription(&dir, "s");
    let mut helper = subscription(&dir, "s");
    first.wait_for_readers(2, T30).unwrap();
    send(&mut first, &mut helper, 0, 10);
    assert_eq!(read(&mut sub, 10).len(), 10);
    first.close();
    let mut second = publication(&dir, "s");
    send(&mut second, &mut helper, 0, 10);
    second.close();
    let mut third = publication(&dir, "s");
    send(&mut third, &mut helper, 0, 10);
    let got = read(&mut sub, 10);
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>(),
        "the third from its start"
    );
    assert_eq!(sub.session_id(), Some(third.session_id()));
    assert_eq!(
        sub.take_loss(),
        Some(Loss {
            session_id: third.session_id(),
            from: 0,
            to: 0,
            cause: LossCause::SessionsMissed { sessions: 1 }
        })
    );
    assert_eq!(sub.take_loss(), None);
}

/// A reader still reading an earlier session when the next one begins, sends and closes: the
/// closed session's log stays for it (it owes that session), and it reads it whole after the
/// earlier one; once the last user leaves, no file is left.
#[test]
fn a_session_that_ends_before_a_slow_reader_gets_there_is_still_read_whole() {
    // The last user must be alone when it leaves: a spawn by a parallel test could hold another
    // handle's descriptor (and its lock) for a moment (`support::spawns`).
    let _quiet = no_spawns();
    let dir = ShmDir::new("loss-finished");
    let mut first = publication(&dir, "s");
    let mut slow = subscription(&dir, "s");
    let mut helper = subscription(&dir, "s");
    first.wait_for_readers(2, T30).unwrap();
    send(&mut first, &mut helper, 0, 100);
    first.close();
    let mut second = publication(&dir, "s");
    send(&mut second, &mut helper, 0, 50);
    let session = second.session_id();
    second.close(); // the slow reader is still in the first session: the log stays
    assert_eq!(read(&mut slow, 100).iter().map(|g| g.0).collect::<Vec<_>>(), (0..100).collect::<Vec<_>>());
    let got = read(&mut slow, 50);
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), (0..50).collect::<Vec<_>>(), "the second whole");
    assert_eq!(slow.session_id(), Some(session));
    // The poll that finds the end closes the session (until the next call).
    assert_eq!(slow.poll(|_: &[u8], _: &Header| panic!("past the end"), 1), 0);
    assert!(slow.is_closed() && slow.is_end_of_stream());
    assert_eq!(slow.take_loss(), None);
    drop((slow, helper));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "files left behind");
}

/// The same, but the finished session's log is removed before the reader gets there (as `clean`
/// might): the reader cannot read it, and is told that a whole session passed.
#[test]
fn a_session_whose_log_vanished_is_reported_missed() {
    let dir = ShmDir::new("loss-vanished");
    let mut first = publication(&dir, "s");
    let mut slow = subscription(&dir, "s");
    let mut helper = subscription(&dir, "s");
    first.wait_for_readers(2, T30).unwrap();
    send(&mut first, &mut helper, 0, 10);
    let session = first.session_id();
    first.close();
    let mut second = publication(&dir, "s");
    send(&mut second, &mut helper, 0, 10);
    second.close();
    std::fs::remove_file(dir.path().join("s.log")).unwrap();
    assert_eq!(read(&mut slow, 10).len(), 10);
    let deadline = Instant::now() + T30;
    let loss = loop {
        if let Some(loss) = slow.take_loss() {
            break loss;
        }
        slow.wait_readable(Duration::from_millis(10));
        slow.poll(|_: &[u8], _: &Header| panic!("nothing left to read"), 1);
        assert!(Instant::now() < deadline, "no loss reported");
    };
    assert_eq!(
        loss,
        Loss { session_id: session, from: 0, to: 0, cause: LossCause::SessionsMissed { sessions: 1 } }
    );
}

/// `Receiver` and `AsyncReceiver` hand a loss over once, between the messages before and after
/// it; the blocking iterator yields it as an `Err`.
#[test]
fn receivers_report_a_loss_once_between_the_messages_around_it() {
    let per_term = (TERM as i64 / FRAMED) as u64;
    let dir = ShmDir::new("loss-receivers");
    // Untethered, so that the publisher runs two terms past them before they look.
    let mut rx = Receiver::new(untethered(&dir, "s"), Bytes);
    let mut arx = AsyncReceiver::new(Receiver::new(untethered(&dir, "s"), Bytes)).unwrap();
    let mut p = publication(&dir, "s");
    let mut fast = subscription(&dir, "s");
    p.wait_for_readers(1, T30).unwrap();
    send(&mut p, &mut fast, 0, 2 * per_term + 10);
    let session_id = p.session_id();
    match rx.recv_timeout(T30) {
        Err(RecvError::Lost(Loss { session_id: s, from: 0, cause: LossCause::JoinedLate, .. })) => {
            assert_eq!(s, session_id)
        }
        other => panic!("wanted the loss first, got {other:?}"),
    }
    let first = seq_of(&rx.recv_timeout(T30).unwrap());
    assert!(first > 0);
    assert_eq!(seq_of(&rx.recv_timeout(T30).unwrap()), first + 1, "the loss is reported once");
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(async {
        assert!(matches!(arx.recv().await, Err(RecvError::Lost(Loss { from: 0, .. }))));
        let first = seq_of(&arx.recv().await.unwrap());
        assert_eq!(seq_of(&arx.recv().await.unwrap()), first + 1);
    });
    let mut it = Receiver::new(untethered(&dir, "t"), Bytes);
    let mut q = publication(&dir, "t");
    let mut fast = subscription(&dir, "t");
    q.wait_for_readers(1, T30).unwrap();
    send(&mut q, &mut fast, 0, 2 * per_term + 10);
    let items: Vec<_> = it.by_ref().take(3).collect();
    assert!(matches!(items[0], Err(RecvError::Lost(_))), "{:?}", items[0]);
    assert!(items[1].is_ok() && items[2].is_ok());
}

/// Three reader processes of different speeds (none, 20 us, 200 us of work per message) read a
/// stream whose publisher process is SIGKILLed three times mid-stream and restarted at once; a
/// last publisher sends 3 000 messages and closes. Each reader checks every message against the
/// losses reported before it (every message it misses lies in a reported loss, none it gets does),
/// and at the end every reader read every session to where the others did.
#[test]
fn readers_of_three_speeds_lose_nothing_silently_across_publisher_kills() {
    let _x = exclusive();
    let dir = ShmDir::new("loss-kills");
    let cfg = Cfg::new().set("dir", dir.path().display()).set("name", "k").set("term", TERM);
    let mut readers: Vec<Peer> = [0, 20, 200]
        .iter()
        .map(|us| Peer::spawn(&format!("reader{us}us"), "loss_reader", &cfg.clone().set("delay_us", us)))
        .collect();
    for r in &mut readers {
        r.expect("ready", T30);
    }
    let mut sessions = Vec::new();
    let mut reports: Vec<Vec<support::peer::Event>> = Vec::new();
    let mut p = None;
    for kill in 0..4 {
        let last = kill == 3;
        let pcfg = if last { cfg.clone().set("count", 3000) } else { cfg.clone() };
        let mut publisher =
            Peer::spawn(&format!("publisher{kill}"), "loss_publisher", &pcfg.set("readers", 1));
        sessions.push(publisher.expect("ready", T30).num("session") as i32);
        if last {
            publisher.expect("closed", Duration::from_secs(60));
            p = Some(publisher);
        } else {
            // Killed mid-stream: after a few terms' worth, at whatever message it is on.
            publisher.expect_where(
                "progress",
                |e| e.num("sent") >= 2048 + 512 * kill,
                Duration::from_secs(60),
            );
            publisher.kill();
        }
    }
    let mut p = p.unwrap();
    let last = *sessions.last().unwrap();
    let mut losses = 0;
    for r in &mut readers {
        r.send(&format!("report {last}"));
        let report = r.expect("report", Duration::from_secs(60));
        let lines = r.seen("session");
        println!(
            "{}: {} | {}",
            r.name,
            report.raw,
            lines.iter().map(|e| e.raw.as_str()).collect::<Vec<_>>().join(" | ")
        );
        losses += r.seen("loss").len();
        let end = lines.iter().find(|e| e.num("id") == i64::from(last)).expect("the last session");
        assert_eq!(end.num("next"), 3000, "{}: the last session read to its end", r.name);
        // A killed session is read as far as it was committed: as far as any other reader got.
        for e in &lines {
            for other in &reports {
                let other: &Vec<support::peer::Event> = other;
                if let Some(o) = other.iter().find(|o| o.num("id") == e.num("id")) {
                    assert_eq!(
                        o.num("next"),
                        e.num("next"),
                        "session {} read to different ends",
                        e.num("id")
                    );
                }
            }
        }
        reports.push(lines);
    }
    println!("loss reports in all: {losses}");
    p.wait_success(T30);
    for r in &mut readers {
        r.wait_success(T30);
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "files left behind");
}
