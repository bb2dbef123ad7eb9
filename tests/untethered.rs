//! Untethered subscriptions (`SubscriptionBuilder::tethered(false)`): the publisher never waits
//! for them; when it laps one, the reader reports exactly what it missed and never delivers a
//! torn or overwritten message. Threads first, then real processes stopped, slowed and killed.

mod support;

use shmlog::{Publication, Resume};
use std::time::{Duration, Instant};
use support::untethered_roles::{publish, read_all, subscription, Ledger, TERM};
use support::{exclusive, ShmDir};

/// Entry point of the peer processes; does nothing in a normal test run.
#[test]
fn peer_process() {
    support::roles::run_if_peer();
}

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
