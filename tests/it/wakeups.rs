//! One wait protocol: every way to sleep on a stream (`poll_blocking`, `Receiver`,
//! `Subscription::wait_any`, `AsyncReceiver`, `AsyncSender`) is woken by the publisher's single
//! wake-up passed on between sleepers, none waits for a timeout, and a peer that keeps ringing
//! costs a sleeper little. Deadlines and positions, never sleeps, synchronise the tests.

use crate::support;

use shmlog::{AsyncSender, Bytes, Header, Publication, Receiver, Sender, Subscription};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::peer::{Cfg, Peer};
use support::spawns::ran_in_own_process;
use support::wake_roles::message;
use support::{await_word, exclusive, hops, raw, thread_cpu, ShmDir};

const T30: Duration = Duration::from_secs(30);

fn publication(dir: &ShmDir, name: &str, term: usize) -> Publication {
    Publication::builder(name).dir(dir.path()).term_length(term).create().unwrap()
}

fn subscription(dir: &ShmDir, name: &str) -> Subscription {
    Subscription::builder(name).dir(dir.path()).liveness_interval(Duration::from_secs(5)).open().unwrap()
}

/// Waits (bounded, yielding) until `n` readers sleep on the stream's bell.
fn await_sleepers(dir: &ShmDir, name: &str, n: i32) {
    let path = raw::readers_path(dir.path(), name);
    await_word(&path, raw::slots::READERS_SLEEPING, |v| v == n, "the readers never slept");
}

/// The review's case (T1): a `wait_readable` sleeper and a `wait_any` sleeper on one stream, one
/// offer. Before, `wait_any` did not count itself among the sleepers nor pass the writer's single
/// wake-up on, so one of the two slept until its liveness check (5 s here). Now both wake at once.
#[test]
fn a_blocking_and_a_wait_any_sleeper_both_wake_for_one_offer() {
    let _x = exclusive();
    let dir = ShmDir::new("wake-two-kinds");
    for round in 0..4 {
        let name = format!("two{round}");
        let mut p = publication(&dir, &name, 64 * 1024);
        let (mut a, mut b) = (subscription(&dir, &name), subscription(&dir, &name));
        let blocking = std::thread::spawn(move || {
            let start = Instant::now();
            assert!(a.wait_readable(T30));
            start.elapsed()
        });
        let any = std::thread::spawn(move || {
            let start = Instant::now();
            assert!(Subscription::wait_any(&mut [&mut b], T30));
            start.elapsed()
        });
        await_sleepers(&dir, &name, 2);
        p.offer(b"news").unwrap();
        let (slept_a, slept_b) = (blocking.join().unwrap(), any.join().unwrap());
        assert!(
            slept_a < Duration::from_secs(1) && slept_b < Duration::from_secs(1),
            "round {round}: blocking slept {slept_a:?}, wait_any slept {slept_b:?} (liveness 5 s)"
        );
    }
}

/// Sleeper processes, one of each kind (`poll_blocking`, `Receiver::recv_timeout`, `wait_any`
/// over this stream and an idle one, `AsyncReceiver::recv` under a current-thread tokio runtime
/// through the waiter thread, in the runtime's reactor and, with `async-io`, in async-io's), on
/// one stream: 2 000 messages at 1 000 a second, each stamped with its send
/// time. Every message reaches every sleeper, in order, within 500 ms: a wake-up that waited for
/// a timeout would take the 5 s liveness interval, while a sleeper preempted on a busy 2-core
/// machine was seen at 10.1 ms (the bound checks that no wake-up is lost, not how fast one is:
/// that is `examples/lowrate.rs`'s job).
#[test]
fn every_kind_of_sleeper_gets_every_message_without_a_lost_wake_up() {
    let _x = exclusive();
    let dir = ShmDir::new("wake-four-kinds");
    let name = "four";
    let count = 2000u64;
    let mut p = publication(&dir, name, 1 << 20);
    let _idle = publication(&dir, "four-idle", 64 * 1024);
    let cfg =
        Cfg::new().set("dir", dir.path().display()).set("name", name).set("count", count).set("late_ms", 500);
    let mut kinds = vec!["poll_blocking", "receiver", "wait_any", "async", "async_reactor"];
    if cfg!(feature = "async-io") {
        kinds.push("async_io");
    }
    let spawn = |k: &&str| {
        // The waiter thread's path even where async-io's reactor would take the receiver.
        let env: &[(&str, &str)] = if *k == "async" { &[("SHMLOG_ASYNC_WAITER", "1")] } else { &[] };
        Peer::spawn_with_env(k, "wake_sleeper", &cfg.clone().set("kind", k), env)
    };
    let mut peers: Vec<Peer> = kinds.iter().map(spawn).collect();
    for peer in &mut peers {
        peer.expect("ready", T30);
    }
    p.wait_for_readers(kinds.len(), T30).unwrap();
    let start = Instant::now();
    for seq in 0..count {
        // Paces the publisher at 1 000 a second (not a synchronisation).
        let due = start + Duration::from_millis(seq);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        p.offer_blocking(&message(seq), T30).unwrap();
    }
    for (peer, kind) in peers.iter_mut().zip(kinds) {
        let done = peer.expect("done", T30);
        println!("{kind}: {}", done.raw);
        assert_eq!(done.num("n"), count as i64, "{kind}");
        assert_eq!(done.num("late"), 0, "{kind}: messages later than 500 ms: {}", done.raw);
    }
}

/// A peer that keeps changing the readers' bell and waking its sleepers (a hostile or broken
/// process of the same user) makes every futex wait of a sleeper return at once. The sleeper's wake budget turns such a
/// run into naps: it spends a small share of a core instead of spinning, and still gets the
/// message sent meanwhile.
#[test]
fn a_peer_that_keeps_ringing_costs_a_sleeper_little_cpu() {
    let _x = exclusive();
    let dir = ShmDir::new("wake-hostile");
    let mut p = publication(&dir, "h", 64 * 1024);
    let mut sub = subscription(&dir, "h");
    let file =
        std::fs::OpenOptions::new().read(true).write(true).open(raw::readers_path(dir.path(), "h")).unwrap();
    // SAFETY: a shared mapping of a file this test owns; the bell is written through an atomic.
    let map = unsafe { memmap2::MmapMut::map_mut(&file) }.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let ringer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let bell = map[raw::slots::READERS_BELL as usize..].as_ptr() as *mut u32;
            // SAFETY: 4-aligned, inside the mapping, which lives as long as this thread.
            let bell = unsafe { std::sync::atomic::AtomicU32::from_ptr(bell) };
            while !stop.load(Ordering::Relaxed) {
                bell.fetch_add(1, Ordering::Relaxed);
                // SAFETY: FUTEX_WAKE only uses the address as a key.
                unsafe {
                    libc::syscall(
                        libc::SYS_futex,
                        bell.as_ptr(),
                        libc::FUTEX_WAKE,
                        i32::MAX,
                        0usize,
                        0usize,
                        0u32,
                    )
                };
            }
        })
    };
    let cpu0 = thread_cpu();
    let start = Instant::now();
    assert!(!sub.wait_readable(Duration::from_millis(500)), "nothing was sent");
    let (wall, cpu) = (start.elapsed(), thread_cpu() - cpu0);
    p.offer(b"still delivered").unwrap();
    assert!(sub.wait_readable(T30));
    let mut got = Vec::new();
    sub.poll(|m: &[u8], _: &Header| got.push(m.to_vec()), 1);
    stop.store(true, Ordering::Relaxed);
    ringer.join().unwrap();
    assert_eq!(got, vec![b"still delivered".to_vec()]);
    println!("sleeper under a ringing peer: {cpu:?} of CPU in {wall:?}");
    // Spinning costs the whole wall time; a sleeper napping costs ~8 % here (a wake-up, a nap
    // and a barrier per millisecond), more on a loaded machine.
    assert!(cpu < wall / 4, "the sleeper spun: {cpu:?} of CPU in {wall:?}");
}

/// `AsyncSender::send` on a back-pressured stream awaits room under a current-thread runtime: the
/// runtime's other task keeps ticking while the sender waits for a slow reader, the sender does
/// not spin, and every message arrives in order.
#[test]
fn an_async_sender_awaits_room_without_blocking_the_runtime() {
    let _x = exclusive();
    let dir = ShmDir::new("wake-async-send");
    let mut p = publication(&dir, "s", 64 * 1024); // a window of 32 KiB
    let sub = subscription(&dir, "s");
    p.wait_for_readers(1, T30).unwrap();
    let count = 2000u64;
    let len = 1000; // 32 messages fill the window
    let released = Arc::new(AtomicU64::new(0));
    // A reader that takes a message only when allowed: the sender must wait for it.
    let reader = {
        let released = Arc::clone(&released);
        std::thread::spawn(move || {
            let mut rx = Receiver::new(sub, Bytes);
            for seq in 0..count {
                let deadline = Instant::now() + T30;
                while released.load(Ordering::Acquire) <= seq {
                    assert!(Instant::now() < deadline, "never released {seq}");
                    std::thread::yield_now();
                }
                let m = rx.recv_timeout(T30).unwrap();
                assert_eq!(u64::from_le_bytes(m[..8].try_into().unwrap()), seq);
            }
        })
    };
    let mut tx = AsyncSender::new(Sender::new(p, Bytes)).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let r = Arc::clone(&released);
    let (ticks, cpu, wall) = runtime.block_on(async move {
        let ticks = Arc::new(AtomicU64::new(0));
        let t = Arc::clone(&ticks);
        // The other task: ticks, and lets the reader take a message every tick.
        let ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_micros(200)).await;
                t.fetch_add(1, Ordering::Relaxed);
                r.fetch_add(5, Ordering::Release);
            }
        });
        let (cpu0, start) = (thread_cpu(), Instant::now());
        for seq in 0..count {
            let mut m = seq.to_le_bytes().to_vec();
            m.resize(len, 0);
            tx.send(&m).await.unwrap();
        }
        let (cpu, wall) = (thread_cpu() - cpu0, start.elapsed());
        ticker.abort();
        (ticks.load(Ordering::Relaxed), cpu, wall)
    });
    released.store(u64::MAX, Ordering::Release);
    reader.join().unwrap();
    println!("async sender: {count} messages in {wall:?}, {ticks} ticks, {cpu:?} of CPU");
    assert!(ticks >= count / 10, "the runtime's other task ran only {ticks} times");
    assert!(cpu < wall / 2, "the sender spun: {cpu:?} of CPU in {wall:?}");
}

/// One hop (issue 33): an `AsyncReceiver` made inside a tokio runtime with its IO driver sleeps
/// in the runtime's reactor, and each of 200 commits, every one made once the receiver took the
/// one before and armed its bell again (asleep, or about to be), wakes the runtime's thread
/// straight through the stream's wake FIFO: the process's waiter thread is not on the path (it
/// sleeps for its 1 s tick). The same receiver made outside the runtime sleeps through the waiter thread, which
/// then wakes for every message: that is the path this test fails on.
#[test]
fn an_async_receiver_in_a_reactor_is_woken_without_the_waiter_thread() {
    let _x = exclusive();
    // Counts the wake-ups of the process's one waiter thread, which other tests' receivers share.
    if ran_in_own_process() {
        return;
    }
    let dir = ShmDir::new("wake-one-hop");
    let (p, sub) = hops::stream(&dir, "hop", 64 * 1024);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    let mut rx = runtime.block_on(async { shmlog::AsyncReceiver::new(Receiver::new(sub, Bytes)).unwrap() });
    assert!(rx.in_reactor(), "made in a runtime with its IO driver: in the reactor");
    let count = 200;
    let switches = hops::paced_messages(&dir, "hop", p, count, |got| {
        runtime.block_on(async {
            for _ in 0..count {
                hops::took(got, &rx.recv().await.unwrap());
            }
        })
    });
    println!("waiter thread: {switches} switches for {count} wake-ups in the reactor");
    assert!(switches < count / 10, "the waiter thread woke {switches} times for {count} messages");
}

/// An `AsyncSender` made inside a tokio runtime awaits room in the reactor too. Flow control
/// hands room back in a reader's moves, not one message at a time, so the reader here frees room
/// in rounds: each time the sender has sent more since the last round and armed its bell again
/// (back-pressured, so asleep or about to be), the reader drains everything committed, which
/// rings the sender awake. Every round is one wake-up of a sleeping sender, and none of them may
/// go through the waiter thread (it sleeps for its 1 s tick). The same sender made outside the
/// runtime sleeps through the waiter thread, which wakes for every round: the path this test
/// fails on.
#[test]
fn an_async_sender_in_a_reactor_awaits_room_without_the_waiter_thread() {
    let _x = exclusive();
    // Counts the wake-ups of the process's one waiter thread, which other tests' receivers share.
    if ran_in_own_process() {
        return;
    }
    let dir = ShmDir::new("wake-one-hop-tx");
    let (p, sub) = hops::stream(&dir, "room", 64 * 1024);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    let mut tx = runtime.block_on(async { AsyncSender::new(Sender::new(p, Bytes)).unwrap() });
    assert!(tx.in_reactor());
    let count = 3000;
    let (rounds, switches) = hops::rounds_of_room(&dir, "room", sub, count, |sent| {
        runtime.block_on(async {
            for seq in 0..count {
                tx.send(&hops::message(seq)).await.unwrap();
                sent.store(seq + 1, Ordering::Release);
            }
        })
    });
    println!("waiter thread: {switches} switches for {rounds} waits for room in the reactor ({count} sends)");
    assert!(switches < rounds / 10, "the waiter thread woke {switches} times for {rounds} waits for room");
}
