"""Sessions (issue 34, items 1 and 2), on the core's rule: a subscription is a reader from the
moment it is made, so a publisher that starts counts it and it loses nothing of the session;
when a session ends, every receive shape says so once (recv raises Closed, iteration ends, ...),
and receiving again waits, sleeping, for the next publisher's session and goes on with it."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
import time

import pytest

import shmlog

# A receive after the end of a session waits this long for the next one in these tests: ample
# for a reader that learns of a new session as a sleeper learns of a message.
WAIT = 5.0

# The bindings follow the core's rule and keep no session logic of their own.


def session(name, stream_dir, messages, **kw):
    """A publisher's whole session: waits for a reader, offers `messages`, closes."""
    with shmlog.Publication(name, stream_dir, **kw) as pub:
        pub.wait_connected(timeout=WAIT)
        assert pub.offer_many(messages, timeout=WAIT) == len(messages)
        return pub.session_id


def test_a_constructed_subscription_is_a_reader(stream_dir, name):
    """Made before the publisher and never polled: the publisher's wait_connected counts it, and
    it receives the session from its first message, with no loss."""
    sub = shmlog.Subscription(name, stream_dir)
    msgs = [b"%d" % i for i in range(100)]
    session(name, stream_dir, msgs)
    got = []
    with pytest.raises(shmlog.Closed):
        while True:
            got.extend(sub.recv_many(timeout=WAIT))
    assert got == msgs
    assert sub.take_loss() is None
    sub.close()


def test_a_reader_of_an_older_session_is_counted_by_the_next(stream_dir, name):
    """A subscription still reading the session before (or sitting on its end, not yet
    received) is a reader of the next session from its start: nothing of either is lost."""
    sub = shmlog.Subscription(name, stream_dir)
    pub = shmlog.Publication(name, stream_dir)
    pub.wait_connected(timeout=WAIT)
    pub.offer_many([b"a1", b"a2", b"a3"])
    assert sub.recv(timeout=WAIT) == b"a1"
    pub.close()
    # The new publisher counts the subscription that has not finished the old session.
    session(name, stream_dir, [b"b1", b"b2"])
    assert sub.recv_many(timeout=WAIT) == [b"a2", b"a3"]
    with pytest.raises(shmlog.Closed):
        sub.recv(timeout=WAIT)
    assert [sub.recv(timeout=WAIT), sub.recv(timeout=WAIT)] == [b"b1", b"b2"]
    assert sub.take_loss() is None
    sub.close()


def test_the_end_is_reported_once_then_receiving_waits(stream_dir, name):
    """After Closed, every receive waits for the next session (None / [] / 0 at its timeout),
    instead of raising Closed again at once."""
    sub = shmlog.Subscription(name, stream_dir)
    session(name, stream_dir, [b"first"])
    assert sub.recv(timeout=WAIT) == b"first"
    with pytest.raises(shmlog.Closed):
        sub.recv(timeout=WAIT)
    t0 = time.monotonic()
    assert sub.recv(timeout=0.2) is None
    assert time.monotonic() - t0 >= 0.15, "recv did not wait"
    assert sub.try_recv() is None
    assert sub.recv_many(timeout=0.05) == []
    assert sub.poll(print) == 0
    assert shmlog.wait_any([sub], timeout=0.05) == []

    async def after_end():
        return await sub.recv_async(timeout=0.1)

    assert asyncio.run(after_end()) is None
    # The next session is received from its first message.
    session(name, stream_dir, [b"second"])
    assert sub.recv(timeout=WAIT) == b"second"
    with pytest.raises(shmlog.Closed):
        sub.recv(timeout=WAIT)
    sub.close()


READER = textwrap.dedent(
    """
    import sys, shmlog
    sub = shmlog.Subscription(sys.argv[1], sys.argv[2])
    print("ready", flush=True)
    while True:                      # the documented restart loop
        got = [m for m in sub]       # one session, until it ends
        print("session", b",".join(got).decode(), flush=True)
        if got and got[-1] == b"last":
            break
    """
)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_restart_loop_goes_on_with_each_session_without_spinning(child, stream_dir, name):
    """`while True: for m in sub:` ends its inner loop once per session, sleeps while no
    publisher exists, and reads every message of each new session."""
    reader = child([sys.executable, "-c", READER, name, stream_dir])
    reader.expect_line("ready")
    session(name, stream_dir, [b"1", b"2"])
    reader.expect_line("session 1,2", timeout=WAIT)
    # No publisher for a while: the reader sleeps.
    before = cpu_seconds(reader.proc.pid)
    time.sleep(0.5)
    spent = cpu_seconds(reader.proc.pid) - before
    assert spent < 0.2, f"the reader used {spent:.2f} s of CPU in 0.5 s without a publisher"
    session(name, stream_dir, [b"3"])
    reader.expect_line("session 3", timeout=WAIT)
    # A publisher restarted at once, while the reader may still be on the last session's end.
    session(name, stream_dir, [b"4", b"5"])
    session(name, stream_dir, [b"6", b"last"])
    reader.expect_line("session 4,5", timeout=WAIT)
    reader.expect_line("session 6,last", timeout=WAIT)
    rc, rest, err = reader.finish(timeout=WAIT)
    assert rc == 0 and rest == [], (rest, err)


HOLD = textwrap.dedent(
    """
    import sys, time, shmlog
    pub = shmlog.Publication(sys.argv[1], sys.argv[2])
    pub.wait_connected(timeout=10)
    pub.offer(b"before the kill")
    print("sent", flush=True)
    time.sleep(60)
    """
)


def test_a_killed_publisher_then_a_new_one(child, stream_dir, name):
    sub = shmlog.Subscription(name, stream_dir)
    holder = child([sys.executable, "-c", HOLD, name, stream_dir])
    holder.expect_line("sent", timeout=WAIT * 2)
    assert sub.recv(timeout=WAIT) == b"before the kill"
    holder.proc.kill()
    with pytest.raises(shmlog.Closed):
        sub.recv(timeout=WAIT)
    assert sub.recv(timeout=0.05) is None  # waits for the next session
    session(name, stream_dir, [b"after the restart"])
    assert sub.recv(timeout=WAIT) == b"after the restart"
    sub.close()


def test_async_for_ends_once_per_session(stream_dir, name):
    sub = shmlog.Subscription(name, stream_dir)

    async def main():
        sessions = []
        for _ in range(2):
            sessions.append([m async for m in sub])
        return sessions

    async def both():
        loop = asyncio.get_running_loop()
        reading = asyncio.ensure_future(main())
        await loop.run_in_executor(None, session, name, stream_dir, [b"a", b"b"])
        await loop.run_in_executor(None, session, name, stream_dir, [b"c"])
        return await asyncio.wait_for(reading, WAIT)

    assert asyncio.run(both()) == [[b"a", b"b"], [b"c"]]
    sub.close()
