"""asyncio both ways and a wait over several streams (issue 34, item 6): `await pub.send()` awaits
room while back-pressured without blocking the event loop, both ends can await a connection, and
synchronous code waits on several subscriptions at once with shmlog.wait_any()."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import shmlog

from test_asyncio import max_gap, ticker


def test_send_awaits_room_without_blocking_the_loop(stream_dir, name):
    """2 000 messages of 1 KB through a 64 KiB term: far more than the window, so the sender
    waits for the reader many times; the timer ticks all along, and every message arrives."""
    pub = shmlog.Publication(name, stream_dir, term_length=64 * 1024)
    sub = shmlog.Subscription(name, stream_dir)
    count = 2000

    async def sender():
        waited = 0
        for i in range(count):
            msg = i.to_bytes(4, "little") + bytes(1020)
            try:
                pub.offer(msg)
            except shmlog.BackPressured:
                waited += 1
                await pub.send(msg, timeout=10)
        return waited

    async def receiver():
        got = []
        while len(got) < count:
            m = await sub.recv_async(timeout=10)
            assert m is not None, "nothing arrived"
            got.append(int.from_bytes(m[:4], "little"))
            if len(got) % 50 == 0:
                await asyncio.sleep(0.002)  # a slow reader: the window fills meanwhile
        return got

    async def main():
        await pub.wait_connected_async(timeout=5)
        ticks: list[float] = []
        stop = asyncio.Event()
        t = asyncio.create_task(ticker(ticks, stop))
        waited, got = await asyncio.gather(sender(), receiver())
        stop.set()
        await t
        return waited, got, ticks

    waited, got, ticks = asyncio.run(main())
    assert got == list(range(count))
    assert waited > 0, "the sender never had to wait: the test proves nothing"
    # A send that blocked the loop would stall it until the receiver's 10 s timeout.
    assert max_gap(ticks) < 1.0, f"the event loop stalled {max_gap(ticks):.3f} s"
    pub.close()
    sub.close()


def test_send_cancelled_while_waiting_appends_nothing(stream_dir, name):
    pub = shmlog.Publication(name, stream_dir, term_length=64 * 1024)
    sub = shmlog.Subscription(name, stream_dir)

    async def main():
        await pub.wait_connected_async(timeout=5)
        n = 0
        while True:
            try:
                pub.offer(bytes(1000))
                n += 1
            except shmlog.BackPressured:
                break
        position = pub.position
        with pytest.raises(shmlog.BackPressured):
            await pub.send(b"no room", timeout=0.05)
        waiting = asyncio.create_task(pub.send(b"cancelled"))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert pub.position == position
        # The reader drains; a send goes out.
        assert len(sub.recv_many(limit=10_000, timeout=5)) == n
        await pub.send(bytearray(b"after"), timeout=5)
        assert await sub.recv_async(timeout=5) == b"after"

    asyncio.run(main())
    pub.close()
    sub.close()


def test_both_ends_await_a_connection(stream_dir, name):
    async def main():
        loop = asyncio.get_running_loop()
        pub = shmlog.Publication(name, stream_dir)
        ticks: list[float] = []
        stop = asyncio.Event()
        t = asyncio.create_task(ticker(ticks, stop))
        with pytest.raises(shmlog.Timeout):
            await pub.wait_connected_async(timeout=0.05)
        subs = []
        loop.call_later(0.05, lambda: subs.append(shmlog.Subscription(name, stream_dir)))
        await pub.wait_connected_async(timeout=5)
        await subs[0].wait_connected_async(timeout=5)
        # A subscription waiting for a publisher that starts later.
        later = shmlog.Subscription(name + "-later", stream_dir)
        with pytest.raises(TimeoutError):
            await later.wait_connected_async(timeout=0.05)
        pubs = []
        loop.call_later(0.05, lambda: pubs.append(shmlog.Publication(name + "-later", stream_dir)))
        await later.wait_connected_async(timeout=5)
        assert later.is_connected
        stop.set()
        await t
        assert max_gap(ticks) < 1.0  # a blocking wait would stall it until its timeout
        for o in [pub, *subs, later, *pubs]:
            o.close()

    asyncio.run(main())


def test_wait_any_over_several_streams(stream_dir, name):
    names = [f"{name}-{i}" for i in range(3)]
    pubs = [shmlog.Publication(n, stream_dir) for n in names]
    subs = [shmlog.Subscription(n, stream_dir) for n in names]
    for p in pubs:
        p.wait_connected(timeout=5)
    assert shmlog.wait_any(subs, timeout=0) == []
    t0 = time.monotonic()
    assert shmlog.wait_any(subs, timeout=0.05) == []
    assert time.monotonic() - t0 >= 0.04
    # A message on the second stream, offered from another thread while this one waits (the
    # wait releases the GIL).
    threading.Timer(0.05, pubs[1].offer, args=(b"two",)).start()
    ready = shmlog.wait_any(subs, timeout=5)
    assert ready == [subs[1]] and ready[0] is subs[1]
    assert subs[1].recv_many(timeout=0) == [b"two"]
    pubs[0].offer(b"zero")
    pubs[2].offer(b"two again")
    deadline = time.monotonic() + 5
    ready = []
    while len(ready) < 2 and time.monotonic() < deadline:
        ready = shmlog.wait_any(subs, timeout=1)
    assert ready == [subs[0], subs[2]]
    assert [s.try_recv() for s in ready] == [b"zero", b"two again"]
    # The end of a session is something to receive too.
    pubs[1].close()
    assert shmlog.wait_any(subs, timeout=5) == [subs[1]]
    with pytest.raises(shmlog.Closed):
        subs[1].recv(timeout=0)
    with pytest.raises(ValueError):
        shmlog.wait_any([subs[0], subs[0]], timeout=0)
    subs[2].close()
    with pytest.raises(shmlog.Closed):
        shmlog.wait_any(subs, timeout=0)
    for o in pubs + subs:
        o.close()
