//! Whole, typed messages (issue 13): `Sender`/`Receiver` with the bytes, plain-old-data and (with
//! the `serde` feature) postcard codecs, `recv_timeout`, the blocking iterator, and (with the
//! `async` feature) the `Stream` under tokio without blocking its worker.

use crate::support;

use shmlog::{Bytes, PodCodec, Publication, Receiver, RecvError, Sender, Subscription, WrongSize};
use std::time::{Duration, Instant};
use support::ShmDir;

const T30: Duration = Duration::from_secs(30);

fn pair(dir: &ShmDir, name: &str) -> (Publication, Subscription) {
    let p = Publication::builder(name).dir(dir.path()).term_length(1 << 20).create().unwrap();
    let s = Subscription::builder(name).dir(dir.path()).open().unwrap();
    (p, s)
}

/// Plain-old-data values from a publishing thread arrive in order through `recv_timeout`; then
/// the close ends the session.
#[test]
fn pod_values_arrive_in_order_then_the_session_closes() {
    let dir = ShmDir::new("typed-pod");
    let (p, s) = pair(&dir, "pod");
    let mut rx = Receiver::new(s, PodCodec);
    let sender = std::thread::spawn(move || {
        let mut tx: Sender<[u64; 2], PodCodec> = Sender::new(p, PodCodec);
        for i in 0..10_000u64 {
            tx.send_timeout(&[i, i * i], T30).unwrap();
        }
    });
    for i in 0..10_000u64 {
        let v: [u64; 2] = rx.recv_timeout(T30).unwrap();
        assert_eq!(v, [i, i * i]);
    }
    sender.join().unwrap();
    assert_eq!(rx.recv_timeout(T30), Err(RecvError::Closed));
}

/// Messages larger than a frame are reassembled; a receiver waits no longer than its timeout; a
/// message of the wrong size for a POD type is a decode error, and the next one still arrives.
#[test]
fn fragments_are_reassembled_timeouts_fire_and_bad_sizes_are_errors() {
    let dir = ShmDir::new("typed-bytes");
    let (p, s) = pair(&dir, "b");
    let mut tx = Sender::new(p, Bytes);
    let mut rx = Receiver::new(s, Bytes);
    let start = Instant::now();
    assert_eq!(rx.recv_timeout(Duration::from_millis(20)), Err(RecvError::Timeout));
    assert!(start.elapsed() >= Duration::from_millis(20));
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    tx.send(&big).unwrap();
    tx.send(&b"small".to_vec()).unwrap();
    assert_eq!(rx.recv_timeout(T30).unwrap(), big);
    assert_eq!(rx.try_recv().unwrap(), b"small".to_vec());

    let mut pods: Receiver<u64, PodCodec> = Receiver::new(rx.into_subscription(), PodCodec);
    tx.send(&vec![1, 2, 3]).unwrap();
    tx.send(&7u64.to_le_bytes().to_vec()).unwrap();
    assert_eq!(pods.recv_timeout(T30), Err(RecvError::Decode(WrongSize { len: 3, expected: 8 })));
    assert_eq!(pods.recv_timeout(T30), Ok(7));
}

/// The blocking iterator yields every message and ends when the publisher closes.
#[test]
fn the_iterator_ends_with_the_session() {
    let dir = ShmDir::new("typed-iter");
    let (p, s) = pair(&dir, "it");
    let sender = std::thread::spawn(move || {
        let mut tx = Sender::new(p, Bytes);
        for i in 0..100u8 {
            tx.send_timeout(&vec![i; i as usize + 1], T30).unwrap();
        }
    });
    let got: Vec<Vec<u8>> = Receiver::new(s, Bytes).map(Result::unwrap).collect();
    sender.join().unwrap();
    assert_eq!(got.len(), 100);
    assert!(got.iter().enumerate().all(|(i, m)| m.len() == i + 1 && m.iter().all(|&b| b == i as u8)));
}

#[cfg(feature = "serde")]
#[test]
fn serde_values_round_trip_through_postcard() {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Order {
        id: u64,
        symbol: String,
        legs: Vec<(i32, f64)>,
    }
    let dir = ShmDir::new("typed-serde");
    let (p, s) = pair(&dir, "serde");
    let mut tx = Sender::new(p, shmlog::Postcard);
    let mut rx: Receiver<Order, shmlog::Postcard> = Receiver::new(s, shmlog::Postcard);
    let order = Order { id: 42, symbol: "XYZ".into(), legs: vec![(1, 10.5), (-2, 99.25)] };
    tx.send(&order).unwrap();
    assert_eq!(rx.recv_timeout(T30).unwrap(), order);
    // Garbage is a decode error, not a panic.
    let mut raw = Sender::new(tx.into_publication(), Bytes);
    raw.send(&vec![0xff; 3]).unwrap();
    assert!(matches!(rx.recv_timeout(T30), Err(RecvError::Decode(_))));
}

/// Under a single-threaded tokio runtime, a task awaiting the stream does not block the thread:
/// a ticking task keeps running while the receiver waits, and every message arrives.
#[cfg(feature = "async")]
#[test]
fn the_async_stream_does_not_block_the_runtime() {
    use futures_core::Stream;
    use std::pin::Pin;
    let dir = ShmDir::new("typed-async");
    let (p, s) = pair(&dir, "async");
    let mut rx = shmlog::AsyncReceiver::new(Receiver::<u64, PodCodec>::new(s, PodCodec)).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let (got, ticks) = runtime.block_on(async move {
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let t = ticks.clone();
        let ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(1)).await;
                t.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        // The sender starts only once the receiver waits (its ticks show the runtime is free).
        let sender = std::thread::spawn(move || {
            let mut tx: Sender<u64, PodCodec> = Sender::new(p, PodCodec);
            for i in 0..50u64 {
                std::thread::sleep(Duration::from_millis(2)); // paces the sender, not a sync
                tx.send_timeout(&i, T30).unwrap();
            }
        });
        let mut got = Vec::new();
        while let Some(v) = std::future::poll_fn(|cx| Pin::new(&mut rx).poll_next(cx)).await {
            got.push(v.unwrap());
        }
        sender.join().unwrap();
        ticker.abort();
        (got, ticks.load(std::sync::atomic::Ordering::Relaxed))
    });
    assert_eq!(got, (0..50).collect::<Vec<u64>>());
    assert!(ticks > 10, "the runtime's other task ran only {ticks} times while the stream waited");
}

/// A recording replayed as an async stream of typed values: it follows the recording while the
/// recorder extends it, without blocking the runtime, and ends when the recording stops.
#[cfg(feature = "async")]
#[test]
fn an_async_replay_follows_a_growing_recording_to_its_end() {
    use futures_core::Stream;
    use shmlog::journal::{AsyncReplay, Recorder, Replay};
    use std::pin::Pin;
    let dir = ShmDir::new("typed-replay");
    let journal = std::env::temp_dir().join(format!("shmlog-typed-replay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&journal);
    let mut recorder = Recorder::builder("rp", &journal).stream_dir(dir.path()).start().unwrap();
    let p = Publication::builder("rp").dir(dir.path()).term_length(1 << 20).create().unwrap();
    let mut tx: Sender<u64, PodCodec> = Sender::new(p, PodCodec);
    let deadline = Instant::now() + T30;
    while !tx.publication().is_connected() {
        recorder.poll().unwrap();
        recorder.wait(Duration::from_millis(1));
        assert!(Instant::now() < deadline, "the recorder did not join");
    }
    tx.send(&0).unwrap();
    while recorder.recorded_position() == 0 {
        recorder.poll().unwrap();
        assert!(Instant::now() < deadline, "nothing recorded");
    }
    // The recorder and the sender go on while the replay follows.
    let recording = recorder.recording_id().unwrap();
    let worker = std::thread::spawn(move || {
        for i in 1..200u64 {
            tx.send_timeout(&i, T30).unwrap();
            if i % 20 == 0 {
                std::thread::sleep(Duration::from_millis(2)); // paces the sender, not a sync
            }
            recorder.poll().unwrap();
        }
        drop(tx); // end of stream: the recorder closes the recording
        let deadline = Instant::now() + T30;
        while recorder.recording_id().is_some() {
            recorder.poll().unwrap();
            recorder.wait(Duration::from_millis(1));
            assert!(Instant::now() < deadline, "the end of stream did not close the recording");
        }
    });
    let replay = Replay::builder(&journal, recording).open().unwrap();
    let mut rx: AsyncReplay<u64, PodCodec> = AsyncReplay::new(replay, PodCodec).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let got = runtime.block_on(async move {
        let mut got = Vec::new();
        while let Some(v) = std::future::poll_fn(|cx| Pin::new(&mut rx).poll_next(cx)).await {
            got.push(v.unwrap());
        }
        got
    });
    worker.join().unwrap();
    assert_eq!(got, (0..200).collect::<Vec<u64>>());
    let _ = std::fs::remove_dir_all(&journal);
}
