"""asyncio: messages are awaited while a timer task keeps ticking (the event loop never blocks),
woken by the stream's wake FIFO in a descriptor the loop watches (no thread in between)."""

from __future__ import annotations

import asyncio
import os
import struct
import threading

import shmlog

TICK = 0.005


async def ticker(ticks: list[float], stop: asyncio.Event):
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        ticks.append(loop.time())
        await asyncio.sleep(TICK)


def max_gap(ticks: list[float]) -> float:
    return max(b - a for a, b in zip(ticks, ticks[1:]))


def test_async_for_with_a_ticking_timer(peer, child, stream_dir, name):
    count = 200
    sub = shmlog.Subscription(name, stream_dir)
    # 200 messages 5 ms apart from a Rust process: about a second of waiting between messages.
    publisher = child([peer, "pace", name, stream_dir, str(count), "5000"])

    async def main():
        ticks: list[float] = []
        stop = asyncio.Event()
        t = asyncio.create_task(ticker(ticks, stop))
        seqs = []
        async for m in sub.aiter():
            seqs.append(struct.unpack_from("<Q", m)[0])
        stop.set()
        await t
        return seqs, ticks

    seqs, ticks = asyncio.run(main())
    assert seqs == list(range(count))
    # The loop ran the timer all along: over a second of ticks, none held up by a wait.
    assert len(ticks) > 100, len(ticks)
    assert max_gap(ticks) < 0.25, f"the event loop stalled {max_gap(ticks):.3f} s"
    rc, _, err = publisher.finish()
    assert rc == 0, err


def test_recv_async_timeout_and_wake(stream_dir, name):
    sub = shmlog.Subscription(name, stream_dir)
    pub = shmlog.Publication(name, stream_dir)

    async def main():
        loop = asyncio.get_running_loop()
        ticks: list[float] = []
        stop = asyncio.Event()
        t = asyncio.create_task(ticker(ticks, stop))
        # Nothing yet: None at the timeout, the timer ticking meanwhile.
        before = len(ticks)
        assert await sub.recv_async(timeout=0.1) is None
        assert len(ticks) - before >= 5
        # A message offered from a timer callback wakes the waiting receiver.
        loop.call_later(0.05, pub.offer, b"late")
        assert await asyncio.wait_for(sub.recv_async(), 5) == b"late"
        # Cancelling a wait leaves the subscription usable.
        waiting = asyncio.create_task(sub.recv_async())
        await asyncio.sleep(0.02)
        waiting.cancel()
        try:
            await waiting
        except asyncio.CancelledError:
            pass
        pub.offer(b"after cancel")
        assert await sub.recv_async(timeout=5) == b"after cancel"
        # Blocking and async calls mix on one subscription.
        pub.offer(b"blocking")
        assert sub.recv(timeout=5) == b"blocking"
        pub.close()
        got = [m async for m in sub]
        stop.set()
        await t
        return got

    # The publisher needs a connected reader before it offers: the first recv_async joins.
    assert sub.try_recv() is None
    pub.wait_connected(timeout=5)
    assert asyncio.run(main()) == []
    sub.close()


def _waiter_switches():
    """Voluntary context switches of this process's shmlog async waiter thread so far (its name
    cut to the kernel's 15 characters), or None if it has not started."""
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().strip() != "shmlog-async-wa":
                    continue
            with open(f"/proc/self/task/{task}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        return int(line.split()[1])
        except FileNotFoundError:
            continue
    return None


def test_asyncio_receive_is_woken_through_the_fifo_not_the_waiter_thread(stream_dir, name):
    """One hop (issue 33): the event loop watches a descriptor that holds the stream's wake FIFO,
    so each of 200 messages, offered by another thread once the loop took the one before, wakes
    the loop itself; the core's waiter thread (which the loop went through before: two hops)
    stays asleep. Every message arrives, in order."""
    count = 200
    pub = shmlog.Publication(name, stream_dir)
    sub = shmlog.Subscription(name, stream_dir)
    taken = threading.Semaphore(0)
    failed = []

    def publish():
        for i in range(count):
            if i > 0 and not taken.acquire(timeout=30):
                failed.append(f"message {i - 1} never taken")
                return
            pub.offer(struct.pack("<Q", i))

    async def main():
        seqs = [struct.unpack_from("<Q", await sub.recv_async(30))[0]]
        before = _waiter_switches()  # the waiter thread exists once a receive waited
        taken.release()
        while len(seqs) < count:
            m = await sub.recv_async(30)
            assert m is not None, f"message {len(seqs)} timed out"
            seqs.append(struct.unpack_from("<Q", m)[0])
            taken.release()
        return seqs, before

    t = threading.Thread(target=publish)
    t.start()
    seqs, before = asyncio.run(main())
    t.join()
    assert not failed, failed
    assert seqs == list(range(count))
    switches = _waiter_switches() - (before or 0)
    print(f"waiter thread: {switches} switches for {count} messages")
    assert switches < count // 10, f"the waiter thread woke {switches} times for {count} messages"


def test_an_asyncio_batch_that_meets_the_end_returns_its_messages_then_closed(stream_dir, name):
    """The asyncio receive keeps its receiver in the reactor between calls; an end its batch met
    after messages is still said once, by the next receive (not lost to the next session)."""
    sub = shmlog.Subscription(name, stream_dir)
    pub = shmlog.Publication(name, stream_dir)
    assert sub.try_recv() is None
    pub.wait_connected(timeout=5)

    async def main():
        # Nothing yet: the receive sleeps in the reactor, and its receiver stays there.
        assert await sub.recv_many_async(16, timeout=0.05) == []
        for m in (b"a", b"b", b"c"):
            pub.offer(m)
        pub.close()
        got = await sub.recv_many_async(16, timeout=5)
        try:
            await sub.recv_many_async(16, timeout=5)
        except shmlog.Closed:
            return got, True
        return got, False

    assert asyncio.run(main()) == ([b"a", b"b", b"c"], True)
    sub.close()


def test_the_loop_watches_a_subscription_from_one_receive_to_the_next_until_it_is_closed(stream_dir, name):
    """The event loop's watch on the wake descriptor is set up by the first receive that waits
    and kept (issue 33: setting it up per wait cost two epoll_ctl and a selector update a
    message); close() ends it before the descriptor is closed, so the loop never watches a
    closed (or reused) descriptor number."""
    count = 50
    pub = shmlog.Publication(name, stream_dir)
    sub = shmlog.Subscription(name, stream_dir)
    pub.wait_connected(timeout=5)

    async def main():
        loop = asyncio.get_running_loop()
        added = []
        add_reader = loop.add_reader
        loop.add_reader = lambda fd, cb, *a: (added.append(fd), add_reader(fd, cb, *a))[1]
        got = []
        for i in range(count):
            # Offered once the receive waits: every receive waits for its message.
            loop.call_soon(pub.offer, struct.pack("<Q", i))
            m = await sub.recv_async(timeout=5)
            assert m is not None, f"message {i} timed out"
            got.append(struct.unpack_from("<Q", m)[0])
        fd = sub._async_fd()
        sub.close()
        return got, added, fd, loop.remove_reader(fd)

    got, added, fd, still_watched = asyncio.run(main())
    assert got == list(range(count))
    assert added == [fd], f"watched {len(added)} times for {count} waits"
    assert not still_watched, "close() left the loop watching the closed descriptor"
    pub.close()


def test_a_subscription_dropped_while_its_loop_runs_is_collected_and_leaves_the_stream(stream_dir, name):
    """The loop's watch holds its subscription weakly: a dropped subscription is collected (and
    stops being a reader the publisher waits for) while the loop that watched it still runs."""
    import gc
    import weakref

    pub = shmlog.Publication(name, stream_dir)

    async def main():
        loop = asyncio.get_running_loop()
        sub = shmlog.Subscription(name, stream_dir)
        assert await sub.recv_async(timeout=0.02) is None  # waited: watched by this loop
        fd, ref = sub._async_fd(), weakref.ref(sub)
        assert pub.connected_readers == 1
        del sub
        gc.collect()
        return ref() is None, loop.remove_reader(fd)

    collected, still_watched = asyncio.run(main())
    assert collected, "the loop's watch kept a dropped subscription alive"
    assert not still_watched, "the loop still watched a collected subscription's descriptor"
    assert pub.connected_readers == 0
    pub.close()


def test_receives_on_one_loop_then_another_are_woken_on_each(stream_dir, name):
    """The watch moves to the loop a receive runs on (``asyncio.run`` twice): a watch left on the
    first, closed loop would never wake the second's receive."""
    pub = shmlog.Publication(name, stream_dir)
    sub = shmlog.Subscription(name, stream_dir)
    pub.wait_connected(timeout=5)

    async def one(m: bytes):
        asyncio.get_running_loop().call_later(0.01, pub.offer, m)
        # No timeout of its own: one would end in a last look that finds the message unwoken.
        return await asyncio.wait_for(sub.recv_async(), 5)

    assert asyncio.run(one(b"first")) == b"first"
    assert asyncio.run(one(b"second")) == b"second"
    sub.close()
    pub.close()


def test_two_tasks_awaiting_one_subscription_are_both_woken(stream_dir, name):
    """Two tasks of one loop awaiting the same subscription: the watch wakes every waiting task
    (one slot for a waiter would leave the first to wait for ever), and each message goes to
    exactly one of them."""
    pub = shmlog.Publication(name, stream_dir)
    sub = shmlog.Subscription(name, stream_dir)
    pub.wait_connected(timeout=5)

    async def main():
        loop = asyncio.get_running_loop()
        first = asyncio.create_task(sub.recv_async())
        second = asyncio.create_task(sub.recv_async())
        await asyncio.sleep(0)  # both wait now
        loop.call_soon(pub.offer, b"a")
        loop.call_soon(pub.offer, b"b")
        return await asyncio.wait_for(asyncio.gather(first, second), 5)

    assert sorted(asyncio.run(main())) == [b"a", b"b"]
    sub.close()
    pub.close()
