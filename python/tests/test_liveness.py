"""A publisher killed with SIGKILL: Python readers (blocking, iterating, asyncio) see the stream
closed within the liveness interval (100 ms by default; the bound allows for a loaded 2-core
machine), after everything it committed."""

from __future__ import annotations

import asyncio
import time

import pytest

import shmlog

# The liveness interval, plus the wake-up and scheduling slack of a loaded machine.
BOUND = shmlog.DEFAULT_LIVENESS_INTERVAL + 0.4


def start_holder(peer, child, stream_dir, name):
    holder = child([peer, "hold", name, stream_dir])
    return holder


def test_blocking_reader_sees_a_killed_publisher_closed(peer, child, stream_dir, name):
    sub = shmlog.Subscription(name, stream_dir)
    holder = start_holder(peer, child, stream_dir, name)
    assert sub.recv(timeout=30) == b"hello"
    holder.expect_line("sent")
    assert sub.is_connected
    holder.proc.kill()
    killed = time.monotonic()
    with pytest.raises(shmlog.Closed):
        sub.recv(timeout=5)
    elapsed = time.monotonic() - killed
    assert elapsed < BOUND, f"closed seen {elapsed:.3f} s after the kill"
    assert not sub.is_connected and not sub.closed


def test_iteration_ends_when_the_publisher_is_killed(peer, child, stream_dir, name):
    sub = shmlog.Subscription(name, stream_dir)
    holder = start_holder(peer, child, stream_dir, name)
    it = iter(sub)
    assert next(it) == b"hello"
    holder.expect_line("sent")
    holder.proc.kill()
    killed = time.monotonic()
    assert list(it) == []
    assert time.monotonic() - killed < BOUND


def test_async_reader_sees_a_killed_publisher_closed(peer, child, stream_dir, name):
    sub = shmlog.Subscription(name, stream_dir)
    holder = start_holder(peer, child, stream_dir, name)

    async def main():
        got = []
        killed = None
        async for m in sub.aiter():
            got.append(m)
            holder.expect_line("sent")
            holder.proc.kill()
            killed = time.monotonic()
        return got, time.monotonic() - killed

    got, elapsed = asyncio.run(main())
    assert got == [b"hello"]
    assert elapsed < BOUND, f"closed seen {elapsed:.3f} s after the kill"
