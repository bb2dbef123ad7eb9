//! A publisher restarted within milliseconds of a SIGKILL: every receive shape reports the end of
//! the old session before it delivers anything of the new one, and loses nothing of the new one
//! (the review of 2026-11-28: 15 of 16 readers went into the new session without a word, and a
//! busy reader missed 19 775 of its 20 000 messages, looking for new sessions every 100 ms while
//! the new publisher, waiting for no one, ran ahead).

use crate::support;

use shmlog::{AsyncReceiver, Bytes, Header, Polled, Receiver, RecvError, Subscription};
use std::time::{Duration, Instant};
use support::loss_roles::LEN;
use support::peer::{Cfg, Peer};
use support::{exclusive, ShmDir};

const T60: Duration = Duration::from_secs(60);
const SECOND: u64 = 20_000;

/// What a reader saw, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Message { session: i32, seq: u64 },
    Closed,
    Lost,
}

fn message(m: &[u8]) -> Seen {
    assert_eq!(m.len(), LEN);
    let seq = u64::from_le_bytes(m[..8].try_into().unwrap());
    let session = i32::from_le_bytes(m[8..12].try_into().unwrap());
    Seen::Message { session, seq }
}

/// `true` once `seen` holds the second session's last message and its end.
fn done(seen: &[Seen]) -> bool {
    let closed = seen.iter().filter(|s| **s == Seen::Closed).count();
    closed >= 2
}

/// The four shapes, each on its own thread, until they saw two sessions end (or the deadline).
fn reader(dir: &std::path::Path, shape: &'static str) -> std::thread::JoinHandle<Vec<Seen>> {
    let sub =
        Subscription::builder("r").dir(dir).liveness_interval(Duration::from_millis(20)).open().unwrap();
    std::thread::spawn(move || {
        let deadline = Instant::now() + T60;
        let mut seen = Vec::new();
        match shape {
            "poll" => {
                let mut sub = sub;
                let mut closed_reported = false;
                while !done(&seen) && Instant::now() < deadline {
                    while sub.take_loss().is_some() {
                        seen.push(Seen::Lost);
                    }
                    // A busy reader doing no work: the fastest a new session can be missed.
                    let n = sub.poll(|m: &[u8], _: &Header| seen.push(message(m)), 64);
                    if n == 0 && sub.is_closed() && !closed_reported {
                        seen.push(Seen::Closed);
                    }
                    closed_reported = n == 0 && sub.is_closed();
                }
            }
            "poll_blocking" => {
                let mut sub = sub;
                while !done(&seen) && Instant::now() < deadline {
                    while sub.take_loss().is_some() {
                        seen.push(Seen::Lost);
                    }
                    let got = sub.poll_blocking(|m: &[u8], _: &Header| seen.push(message(m)), 64, T60);
                    match got {
                        Polled::Closed => seen.push(Seen::Closed),
                        Polled::Fault(why) => panic!("{why}"),
                        Polled::Fragments(_) | Polled::TimedOut => {}
                        other => panic!("{other:?}"),
                    }
                }
            }
            "receiver" => {
                let mut rx = Receiver::new(sub, Bytes);
                while !done(&seen) && Instant::now() < deadline {
                    match rx.recv_timeout(T60) {
                        Ok(m) => seen.push(message(&m)),
                        Err(RecvError::Closed) => seen.push(Seen::Closed),
                        Err(RecvError::Lost(_)) => seen.push(Seen::Lost),
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            "async" => {
                let mut rx = AsyncReceiver::new(Receiver::new(sub, Bytes)).unwrap();
                let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
                runtime.block_on(async {
                    while !done(&seen) && Instant::now() < deadline {
                        match tokio::time::timeout(T60, rx.recv()).await {
                            Ok(Ok(m)) => seen.push(message(&m)),
                            Ok(Err(RecvError::Closed)) => seen.push(Seen::Closed),
                            Ok(Err(RecvError::Lost(_))) => seen.push(Seen::Lost),
                            Ok(Err(e)) => panic!("{e}"),
                            Err(_) => break,
                        }
                    }
                });
            }
            _ => unreachable!(),
        }
        seen
    })
}

/// Four readers, one of each receive shape, read a publisher that is SIGKILLed after a few terms
/// and restarted at once; the second publisher sends 20 000 messages and closes. Each reader
/// sees: the first session's messages from its first (as far as they were committed), `Closed`,
/// the second session's 20 000 messages from its first, `Closed`; no loss, nothing else.
#[test]
fn every_receive_shape_reports_a_restart_and_loses_nothing_of_the_new_session() {
    let _x = exclusive();
    let dir = ShmDir::new("sessions-restart");
    let shapes = ["poll", "poll_blocking", "receiver", "async"];
    let readers: Vec<_> = shapes.iter().map(|shape| reader(dir.path(), shape)).collect();
    let cfg = Cfg::new().set("dir", dir.path().display()).set("name", "r").set("term", 64 * 1024);
    let mut first = Peer::spawn("first", "loss_publisher", &cfg.clone().set("readers", shapes.len()));
    let s1 = first.expect("ready", T60).num("session") as i32;
    first.expect_where("progress", |e| e.num("sent") >= 2048, T60);
    first.kill();
    // It waits for one reader only: the others must not lose its start either.
    let mut second =
        Peer::spawn("second", "loss_publisher", &cfg.clone().set("readers", 1).set("count", SECOND));
    let s2 = second.expect("ready", T60).num("session") as i32;
    second.expect("closed", T60);
    second.wait_success(T60);
    for (shape, reader) in shapes.iter().zip(readers) {
        let seen = reader.join().unwrap();
        let closed: Vec<usize> =
            seen.iter().enumerate().filter(|(_, s)| **s == Seen::Closed).map(|(i, _)| i).collect();
        assert_eq!(
            closed.len(),
            2,
            "{shape}: two sessions ended: {:?}",
            &seen[seen.len().saturating_sub(5)..]
        );
        assert!(!seen.contains(&Seen::Lost), "{shape}: a loss reported");
        let (old, new) = (&seen[..closed[0]], &seen[closed[0] + 1..closed[1]]);
        assert!(old.len() >= 2048, "{shape}: {} messages of the first session", old.len());
        for (i, s) in old.iter().enumerate() {
            assert_eq!(*s, Seen::Message { session: s1, seq: i as u64 }, "{shape}: first session, #{i}");
        }
        assert_eq!(new.len() as u64, SECOND, "{shape}: the whole second session");
        for (i, s) in new.iter().enumerate() {
            assert_eq!(*s, Seen::Message { session: s2, seq: i as u64 }, "{shape}: second session, #{i}");
        }
        assert_eq!(closed[1], seen.len() - 1, "{shape}: nothing after the end");
    }
}
