//! Async receive and send under every kind of executor (issue 33: "it works with tokio,
//! smol/async-io and a plain `block_on`"), and how a wake-up reaches the task under each: a plain
//! `block_on` has no reactor, so its tasks sleep through the process's waiter thread (two hops);
//! an event loop over a `WakeFd` (what the Python bindings' asyncio does) and async-io's
//! `block_on` (smol's; feature `async-io`: `cargo test --release --features async-io --test it
//! executors::`) wait for the stream's wake FIFO themselves, one hop, without the waiter thread.
//! The tokio runtime's case is in `wakeups.rs`. Positions and deadlines synchronise, never sleeps.

use crate::support;

use shmlog::{AsyncReceiver, AsyncSender, Bytes, Receiver, Sender, WakeFd};
use std::future::Future;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use support::spawns::ran_in_own_process;
use support::{exclusive, hops, ShmDir};

/// Polls `future` as an event loop over `wake` would: clear, poll, and on `Pending` wait until
/// the descriptor is readable (level-triggered `poll(2)`, as asyncio's `add_reader` watches).
fn run_over_fd<T>(wake: &WakeFd, future: impl Future<Output = T>) -> T {
    let waker = wake.waker();
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        wake.clear();
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        let mut fd = libc::pollfd { fd: wake.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut fd, 1, 30_000) };
        assert_eq!(n, 1, "the wake descriptor never became readable");
    }
}

/// A plain `block_on` (futures' executor: no reactor). Without the feature `async-io` the
/// receiver sleeps through the waiter thread, which wakes for (about) every message; with it,
/// async-io's own thread waits for the FIFO and the waiter thread stays out of the way.
#[test]
fn a_plain_block_on_receives_every_message_through_the_waiter_thread() {
    let _x = exclusive();
    // Counts the wake-ups of the process's one waiter thread, which other tests' receivers share.
    if ran_in_own_process() {
        return;
    }
    let dir = ShmDir::new("exec-block-on");
    let (p, sub) = hops::stream(&dir, "rx", 64 * 1024);
    let mut rx = AsyncReceiver::new(Receiver::new(sub, Bytes)).unwrap();
    assert_eq!(rx.in_reactor(), cfg!(feature = "async-io"));
    let count = 200;
    let switches = hops::paced_messages(&dir, "rx", p, count, |got| {
        futures_executor::block_on(async {
            for _ in 0..count {
                hops::took(got, &rx.recv().await.unwrap());
            }
        })
    });
    println!("block_on: the waiter thread switched {switches} times for {count} messages");
    if rx.in_reactor() {
        assert!(switches < count / 10, "the waiter thread woke {switches} times for {count} messages");
    } else {
        assert!(switches >= count / 2, "the waiter thread woke only {switches} times: who woke the task?");
    }
}

#[test]
fn a_plain_block_on_awaits_room() {
    let _x = exclusive();
    let dir = ShmDir::new("exec-block-on-tx");
    let (p, sub) = hops::stream(&dir, "tx", 64 * 1024);
    let mut tx = AsyncSender::new(Sender::new(p, Bytes)).unwrap();
    let count = 3000;
    let (rounds, switches) = hops::rounds_of_room(&dir, "tx", sub, count, |sent| {
        futures_executor::block_on(async {
            for seq in 0..count {
                tx.send(&hops::message(seq)).await.unwrap();
                sent.store(seq + 1, Ordering::Release);
            }
        })
    });
    println!("block_on: the waiter thread switched {switches} times for {rounds} waits for room");
}

/// The Python bindings' path: an event loop that watches a `WakeFd` level-triggered. Each of 200
/// commits, made once the receiver armed again, wakes the loop through the FIFO: the waiter
/// thread (which the same receiver made with `AsyncReceiver::new` here sleeps through) is not on
/// the path. Without the FIFO in the `WakeFd` the loop would see only the waiter's wakes.
#[test]
fn an_event_loop_over_a_wake_fd_is_woken_without_the_waiter_thread() {
    let _x = exclusive();
    // Counts the wake-ups of the process's one waiter thread, which other tests' receivers share.
    if ran_in_own_process() {
        return;
    }
    let dir = ShmDir::new("exec-wake-fd");
    let (p, sub) = hops::stream(&dir, "rx", 64 * 1024);
    let wake = WakeFd::new().unwrap();
    let mut rx = AsyncReceiver::with_wake_fd(Receiver::new(sub, Bytes), &wake).unwrap();
    assert!(rx.in_reactor());
    let count = 200;
    let switches = hops::paced_messages(&dir, "rx", p, count, |got| {
        for _ in 0..count {
            hops::took(got, &run_over_fd(&wake, rx.recv()).unwrap());
        }
    });
    println!("wake fd: the waiter thread switched {switches} times for {count} messages");
    assert!(switches < count / 10, "the waiter thread woke {switches} times for {count} messages");
}

#[test]
fn an_event_loop_over_a_wake_fd_awaits_room_without_the_waiter_thread() {
    let _x = exclusive();
    // Counts the wake-ups of the process's one waiter thread, which other tests' receivers share.
    if ran_in_own_process() {
        return;
    }
    let dir = ShmDir::new("exec-wake-fd-tx");
    let (p, sub) = hops::stream(&dir, "tx", 64 * 1024);
    let wake = WakeFd::new().unwrap();
    let mut tx = AsyncSender::with_wake_fd(Sender::new(p, Bytes), &wake).unwrap();
    assert!(tx.in_reactor());
    let count = 3000;
    let (rounds, switches) = hops::rounds_of_room(&dir, "tx", sub, count, |sent| {
        for seq in 0..count {
            let m = hops::message(seq);
            run_over_fd(&wake, tx.send(&m)).unwrap();
            sent.store(seq + 1, Ordering::Release);
        }
    });
    println!("wake fd: the waiter thread switched {switches} times for {rounds} waits for room");
    assert!(switches < rounds / 10, "the waiter thread woke {switches} times for {rounds} waits for room");
}

/// smol's executor: async-io's `block_on` waits in async-io's reactor itself, so a commit wakes
/// this thread straight through the FIFO.
#[cfg(feature = "async-io")]
#[test]
fn async_io_block_on_is_woken_without_the_waiter_thread() {
    let _x = exclusive();
    // Counts the wake-ups of the process's one waiter thread, which other tests' receivers share.
    if ran_in_own_process() {
        return;
    }
    let dir = ShmDir::new("exec-async-io");
    let (p, sub) = hops::stream(&dir, "rx", 64 * 1024);
    let mut rx = AsyncReceiver::new(Receiver::new(sub, Bytes)).unwrap();
    assert!(rx.in_reactor());
    let count = 200;
    let switches = hops::paced_messages(&dir, "rx", p, count, |got| {
        async_io::block_on(async {
            for _ in 0..count {
                hops::took(got, &rx.recv().await.unwrap());
            }
        })
    });
    println!("async-io: the waiter thread switched {switches} times for {count} messages");
    assert!(switches < count / 10, "the waiter thread woke {switches} times for {count} messages");
}

#[cfg(feature = "async-io")]
#[test]
fn async_io_block_on_awaits_room_without_the_waiter_thread() {
    let _x = exclusive();
    // Counts the wake-ups of the process's one waiter thread, which other tests' receivers share.
    if ran_in_own_process() {
        return;
    }
    let dir = ShmDir::new("exec-async-io-tx");
    let (p, sub) = hops::stream(&dir, "tx", 64 * 1024);
    let mut tx = AsyncSender::new(Sender::new(p, Bytes)).unwrap();
    assert!(tx.in_reactor());
    let count = 3000;
    let (rounds, switches) = hops::rounds_of_room(&dir, "tx", sub, count, |sent| {
        async_io::block_on(async {
            for seq in 0..count {
                tx.send(&hops::message(seq)).await.unwrap();
                sent.store(seq + 1, Ordering::Release);
            }
        })
    });
    println!("async-io: the waiter thread switched {switches} times for {rounds} waits for room");
    assert!(switches < rounds / 10, "the waiter thread woke {switches} times for {rounds} waits for room");
}
