//! The public API in one process: every operation a user has, and the errors they can get.

use crate::support;
use shmlog::FragmentHandler;
use shmlog::{Action, Error, FragmentAssembler, Header, JoinAt, OfferError, Publication, Subscription};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;
use support::{pattern, ShmDir};

const T: usize = 64 * 1024;

fn pair(dir: &ShmDir, name: &str) -> (Publication, Subscription) {
    let publication = Publication::builder(name).dir(dir.path()).term_length(T).create().unwrap();
    let sub = Subscription::builder(name).dir(dir.path()).open().unwrap();
    (publication, sub)
}

/// Polls until the position stops moving (a poll ends at a term end, padding included).
fn settle(sub: &mut Subscription, mut handler: impl FragmentHandler) {
    loop {
        let before = sub.position();
        sub.poll(|m: &[u8], h: &Header| handler.on_fragment(m, h), 1000);
        if sub.position() == before {
            return;
        }
    }
}

fn drain(sub: &mut Subscription) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    settle(sub, |m: &[u8], _: &Header| got.push(m.to_vec()));
    got
}

#[test]
fn offers_without_a_reader_report_not_connected_and_are_not_delivered() {
    let dir = ShmDir::new("api");
    let mut p = Publication::builder("a").dir(dir.path()).term_length(T).create().unwrap();
    assert!(!p.is_connected());
    assert_eq!(p.offer(b"x"), Err(OfferError::NotConnected));
    let mut s = Subscription::builder("a").dir(dir.path()).open().unwrap();
    assert!(p.is_connected() && s.is_connected());
    p.offer(b"y").unwrap();
    assert_eq!(drain(&mut s), vec![b"y".to_vec()]);
}

#[test]
fn back_pressure_holds_the_writer_a_window_ahead_of_the_slowest_reader() {
    let dir = ShmDir::new("api");
    let (mut p, mut s) = pair(&dir, "bp");
    let mut sent = 0u64;
    let err = loop {
        match p.offer(&[1u8; 100]) {
            Ok(_) => sent += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err, OfferError::BackPressured);
    assert!(err.is_retryable());
    // Window is T/2 = 32 KiB; 128-byte frames; one message may overshoot.
    let window = (T / 2) as i64;
    assert!(p.position() >= window && p.position() <= window + 128, "{}", p.position());
    assert_eq!(drain(&mut s).len() as u64, sent);
    p.offer(b"more").unwrap();
}

#[test]
fn messages_too_large_are_refused_with_the_limit() {
    let dir = ShmDir::new("api");
    let (mut p, _s) = pair(&dir, "big");
    assert_eq!(p.max_message_len(), T / 8);
    assert_eq!(p.max_payload_len(), T / 8 - 32);
    let big = vec![0u8; T / 8 + 1];
    assert_eq!(p.offer(&big), Err(OfferError::MessageTooLarge { len: T / 8 + 1, max: T / 8 }));
    let e = p.try_claim(T / 8).unwrap_err();
    assert_eq!(e, OfferError::MessageTooLarge { len: T / 8, max: T / 8 - 32 });
    assert!(!e.is_retryable());
}

#[test]
fn fragmented_and_vectored_messages_come_back_whole() {
    let dir = ShmDir::new("api");
    let p = Publication::builder("frag").dir(dir.path()).term_length(T).mtu(1024);
    let mut p = p.create().unwrap();
    let mut s = Subscription::builder("frag").dir(dir.path()).open().unwrap();
    let mut expected = Vec::new();
    let mut got = Vec::new();
    let mut asm = FragmentAssembler::new(|m: &[u8], h: &Header| {
        assert!(h.is_begin() && h.is_end());
        got.push(m.to_vec())
    });
    for seq in 0..400u64 {
        let len = (seq as usize * 37) % (T / 8);
        let msg = pattern(seq, len);
        let r = if seq % 3 == 0 {
            let cut = len / 3;
            p.offer_vectored(&[&msg[..cut], &[], &msg[cut..]])
        } else {
            p.offer(&msg)
        };
        match r {
            Ok(_) => expected.push(msg),
            Err(OfferError::BackPressured) => {
                settle(&mut s, &mut asm);
                p.offer(&msg).unwrap();
                expected.push(msg);
            }
            Err(e) => panic!("{e}"),
        }
    }
    settle(&mut s, &mut asm);
    drop(asm);
    assert_eq!(got.len(), expected.len());
    assert!(got == expected);
}

#[test]
fn claims_commit_abort_and_forgotten_claims_never_stall_readers() {
    let dir = ShmDir::new("api");
    let (mut p, mut s) = pair(&dir, "claim");
    let mut c = p.try_claim(5).unwrap();
    c.buffer().copy_from_slice(b"first");
    c.set_reserved_value(99);
    let pos = c.commit();
    assert_eq!(pos, 64);
    p.try_claim(3).unwrap().abort();
    drop(p.try_claim(3).unwrap()); // dropped: aborted
    let mut c = p.try_claim(4).unwrap();
    c.buffer().copy_from_slice(b"lost");
    std::mem::forget(c); // leaked: aborted by the next operation
    p.offer(b"second").unwrap();
    let mut got = Vec::new();
    let mut reserved = Vec::new();
    while s.poll(
        |m: &[u8], h: &Header| {
            got.push(m.to_vec());
            reserved.push(h.reserved_value());
        },
        10,
    ) > 0
    {}
    assert_eq!(got, vec![b"first".to_vec(), b"second".to_vec()]);
    assert_eq!(reserved, vec![99, 0]);
}

#[test]
fn controlled_poll_through_a_subscription() {
    let dir = ShmDir::new("api");
    let (mut p, mut s) = pair(&dir, "ctl");
    for i in 0..3u8 {
        p.offer(&[i]).unwrap();
    }
    assert_eq!(s.controlled_poll(|_: &[u8], _: &Header| Action::Abort, 10), 0);
    assert_eq!(s.position(), 0);
    assert_eq!(s.controlled_poll(|_: &[u8], _: &Header| Action::Break, 10), 1);
    assert_eq!(s.position(), 64);
    let mut seen = Vec::new();
    let n = s.controlled_poll(
        |m: &[u8], _: &Header| {
            seen.push(m[0]);
            Action::Commit
        },
        10,
    );
    assert_eq!((n, seen, s.position()), (2, vec![1, 2], 192));
}

#[test]
fn block_poll_hands_raw_frames() {
    let dir = ShmDir::new("api");
    let (mut p, mut s) = pair(&dir, "blk");
    for i in 0..4u8 {
        p.offer(&[i; 8]).unwrap();
    }
    let mut block = Vec::new();
    let n = s.block_poll(
        |b: &[u8], start: i64| {
            assert_eq!(start, 0);
            block.extend_from_slice(b);
        },
        1 << 20,
    );
    assert_eq!((n, block.len(), s.position()), (256, 256, 256));
    assert_eq!(&block[32..40], &[0u8; 8]);
    assert_eq!(&block[64 + 32..64 + 40], &[1u8; 8]);
}

#[test]
fn close_marks_end_of_stream_and_removes_the_log() {
    let dir = ShmDir::new("api");
    let (mut p, mut s) = pair(&dir, "eos");
    p.offer(b"last words").unwrap();
    let path = p.path().to_owned();
    assert!(!s.is_end_of_stream());
    p.close();
    assert!(!path.exists());
    assert!(!s.is_end_of_stream(), "one message still to read");
    assert_eq!(drain(&mut s), vec![b"last words".to_vec()]);
    assert!(s.is_end_of_stream());
    assert!(!s.is_connected());
}

#[test]
fn joins_at_slowest_latest_or_an_available_position() {
    let dir = ShmDir::new("api");
    let (mut p, mut first) = pair(&dir, "join");
    for i in 0..10u8 {
        p.offer(&[i]).unwrap();
    }
    first.poll(|_: &[u8], _: &Header| {}, 4);
    let slowest = Subscription::builder("join").dir(dir.path()).open().unwrap();
    assert_eq!(slowest.position(), 4 * 64, "joins at the slowest reader");
    let latest = Subscription::builder("join").dir(dir.path()).join_at(JoinAt::Latest).open().unwrap();
    assert_eq!(latest.position(), 10 * 64);
    let mut at = Subscription::builder("join").dir(dir.path()).join_at(JoinAt::Position(128)).open().unwrap();
    assert_eq!(drain(&mut at).first().map(|m| m[0]), Some(2));
    for bad in [-64, 96, 100, 11 * 64] {
        let e = Subscription::builder("join").dir(dir.path()).join_at(JoinAt::Position(bad)).open();
        assert!(matches!(e, Err(Error::PositionNotAvailable { requested, .. }) if requested == bad), "{bad}");
    }
}

#[test]
fn subscription_opened_before_the_publisher_joins_when_it_appears() {
    let dir = ShmDir::new("api");
    let mut s =
        Subscription::builder("early").dir(dir.path()).liveness_interval(Duration::ZERO).open().unwrap();
    assert!(!s.is_connected());
    assert_eq!(s.poll(|_: &[u8], _: &Header| {}, 10), 0);
    let mut p = Publication::builder("early").dir(dir.path()).term_length(T).create().unwrap();
    s.wait_connected(Duration::from_secs(5)).unwrap();
    p.wait_connected(Duration::from_secs(5)).unwrap();
    p.offer(b"hi").unwrap();
    assert_eq!(drain(&mut s), vec![b"hi".to_vec()]);
}

#[test]
fn a_new_publisher_starts_a_new_session_that_open_subscriptions_join() {
    let dir = ShmDir::new("api");
    let (mut p, mut s) = pair(&dir, "sess");
    let first = p.session_id();
    p.offer(b"one").unwrap();
    drop(p);
    let mut p2 = Publication::builder("sess").dir(dir.path()).term_length(T).create().unwrap();
    assert_ne!(p2.session_id(), first);
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while got.len() < 2 && std::time::Instant::now() < deadline {
        s.poll(|m: &[u8], _: &Header| got.push(m.to_vec()), 10);
        if s.session_id() == Some(p2.session_id()) && got.len() == 1 {
            p2.offer(b"two").unwrap();
        }
    }
    assert_eq!(got, vec![b"one".to_vec(), b"two".to_vec()]);
}

#[test]
fn a_live_publisher_cannot_be_displaced_but_a_dead_ones_log_is_replaced() {
    let dir = ShmDir::new("api");
    let p = Publication::builder("own").dir(dir.path()).term_length(T).keep_files(true).create().unwrap();
    let e = Publication::builder("own").dir(dir.path()).term_length(T).create().unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
    let session = p.session_id();
    drop(p); // kept on disk, lock released: stale
    assert!(dir.path().join("own.log").exists());
    let p2 = Publication::builder("own").dir(dir.path()).term_length(T).create().unwrap();
    assert_ne!(p2.session_id(), session);
}

#[test]
fn files_are_private_and_names_are_checked() {
    let dir = ShmDir::new("api");
    let sub_dir = dir.path().join("new/deeper");
    let p = Publication::builder("perm").dir(&sub_dir).term_length(T).create().unwrap();
    let mode = std::fs::metadata(p.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dmode = std::fs::metadata(&sub_dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(dmode, 0o700);
    for bad in ["a/b", "..", "", ".x", "nul\0"] {
        let e = Publication::builder(bad).dir(dir.path()).create().unwrap_err();
        assert!(matches!(e, Error::InvalidName { .. }), "{bad:?}: {e}");
        assert!(matches!(Subscription::builder(bad).dir(dir.path()).open(), Err(Error::InvalidName { .. })));
    }
    for (t, mtu) in [(100_000, None), (T, Some(1000)), (1 << 31, None)] {
        let mut b = Publication::builder("cfg").dir(dir.path()).term_length(t);
        if let Some(m) = mtu {
            b = b.mtu(m);
        }
        assert!(matches!(b.create(), Err(Error::InvalidConfig(_))));
    }
}

#[test]
fn opening_a_foreign_or_wrong_version_log_is_a_typed_error() {
    let dir = ShmDir::new("api");
    let path = dir.path().join("bad.log");
    std::fs::write(&path, vec![0xAB; 3 * T + 4096]).unwrap();
    let mut s = Subscription::builder("bad").dir(dir.path()).liveness_interval(Duration::ZERO).open();
    // Open succeeds (no live session) or names the corruption; never a panic.
    if let Ok(s) = s.as_mut() {
        assert!(!s.is_connected());
    }
    let e = Publication::builder("bad").dir(dir.path()).term_length(T).create().unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("bad.log"), "{e}");
    std::fs::write(&path, b"short").unwrap();
    assert!(Publication::builder("bad").dir(dir.path()).term_length(T).create().is_err());
}

#[test]
fn an_explicit_position_inside_a_message_is_refused_even_over_zero_bytes() {
    let dir = ShmDir::new("api");
    let (mut p, _s) = pair(&dir, "inside");
    p.offer(&[0u8; 64]).unwrap(); // frame 0..96, zero payload at 32..96
    p.offer(b"next").unwrap();
    let e = Subscription::builder("inside").dir(dir.path()).join_at(JoinAt::Position(64)).open();
    assert!(matches!(e, Err(Error::PositionNotAvailable { requested: 64, .. })), "{e:?}");
    let ok = Subscription::builder("inside").dir(dir.path()).join_at(JoinAt::Position(96)).open();
    assert_eq!(ok.unwrap().position(), 96);
}

#[test]
fn a_fifo_under_the_streams_name_is_refused_without_blocking() {
    let dir = ShmDir::new("api");
    let path = dir.path().join("fifo.log");
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = Publication::builder("fifo").dir(dir.path()).term_length(T).create().unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    let mut s = Subscription::builder("fifo").dir(dir.path()).liveness_interval(Duration::ZERO).open();
    assert!(matches!(s, Err(Error::Corrupt { .. })) || !s.as_mut().unwrap().is_connected());
}
