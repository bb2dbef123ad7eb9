"""Persistent subscriptions from Python: a durable name read through poll, recv, iteration and
asyncio gets every message once, in order, across a fall back to the journal when the publisher
laps it; a process that opens the name again (after a close, or a kill -9) resumes where it
stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import shmlog


def numbered(i: int) -> bytes:
    return i.to_bytes(8, "little") + bytes(i % 200)


def number(m: bytes) -> int:
    return int.from_bytes(m[:8], "little")


class Stream:
    """A publisher of `name` recorded into `journal` by a recorder this test drives."""

    def __init__(self, stream_dir, name, journal):
        self.pub = shmlog.Publication(name, stream_dir, term_length=64 * 1024)
        self.rec = shmlog.Recorder(name, journal, dir=stream_dir)
        self.sent = 0

    def send(self, count: int) -> None:
        for _ in range(count):
            while True:
                try:
                    self.pub.offer(numbered(self.sent))
                    break
                except shmlog.BackPressured:
                    self.rec.poll()
            self.sent += 1
            if self.sent % 64 == 0:
                self.rec.poll()
        while self.rec.poll():
            pass

    def close(self) -> None:
        self.pub.close()
        self.rec.stop()


@pytest.fixture
def stream(stream_dir, name, tmp_path):
    s = Stream(stream_dir, name, str(tmp_path / "journal"))
    yield s
    s.close()


def open_persistent(stream_dir, name, tmp_path, **kw):
    return shmlog.PersistentSubscription(
        str(tmp_path / "journal"), "reports", stream=name, dir=stream_dir, start="earliest", **kw
    )


def test_every_shape_reads_on_where_the_last_stopped(stream_dir, name, tmp_path, stream):
    stream.send(300)
    got = []
    # poll: whole messages to a handler.
    with open_persistent(stream_dir, name, tmp_path) as sub:
        assert sub.position is None or sub.position[1] >= 0
        while len(got) < 100:
            sub.poll(got.append, limit=100 - len(got))
    # recv: the next one opens where poll stopped (the position is of messages handed out).
    with open_persistent(stream_dir, name, tmp_path) as sub:
        first = sub.recv(timeout=10)
        assert first is not None
        # A close may deliver again what the last read took but did not hand out, never skip.
        assert number(first) <= len(got)
        got = got[: number(first)] + [first]
        while len(got) < 200:
            m = sub.recv(timeout=10)
            assert m is not None
            got.append(m)
    # iteration
    with open_persistent(stream_dir, name, tmp_path) as sub:
        it = iter(sub)
        first = next(it)
        assert number(first) <= len(got)
        got = got[: number(first)] + [first]
        for m in it:
            got.append(m)
            if len(got) == 300:
                break
        assert sub.try_recv() is None
        assert sub.take_loss() is None
        assert sub.position is not None
        sub.unregister()
    assert [number(m) for m in got] == list(range(300))
    assert got == [numbered(i) for i in range(300)]


def test_a_lapped_persistent_subscription_reads_every_message_once(stream_dir, name, tmp_path, stream):
    stream.send(10)
    with open_persistent(stream_dir, name, tmp_path) as sub:
        got = [sub.recv(timeout=10) for _ in range(10)]
        assert sub.is_live
        # The publisher laps the live reads: 64 KiB terms, far more than three of them sent.
        stream.send(5000)
        fell_back = False
        while len(got) < 5010:
            m = sub.recv(timeout=10)
            assert m is not None, f"{len(got)} of 5010"
            got.append(m)
            fell_back = fell_back or not sub.is_live
        assert fell_back, "never lapped: nothing was tested"
        assert sub.take_loss() is None
        assert [number(m) for m in got] == list(range(5010))
        assert "PersistentSubscription" in repr(sub)


def test_recv_times_out_and_bad_arguments_raise(stream_dir, name, tmp_path, stream):
    with open_persistent(stream_dir, name, tmp_path) as sub:
        t0 = time.monotonic()
        assert sub.recv(timeout=0.05) is None
        assert time.monotonic() - t0 >= 0.05
        with pytest.raises(TypeError):
            sub.poll(42)
        with pytest.raises(ValueError):
            sub.recv(timeout=-1)
    with pytest.raises(shmlog.Closed):
        sub.recv(timeout=0)
    with pytest.raises(ValueError):
        shmlog.PersistentSubscription(str(tmp_path / "journal"), "x", stream=name, dir=stream_dir, start="middle")


def test_a_reader_killed_resumes_with_no_gap(stream_dir, name, tmp_path, stream):
    """A child process reads the name and is killed -9; the next one resumes with no gap."""
    stream.send(2000)
    out = tmp_path / "seen"
    child = textwrap.dedent(
        f"""
        import shmlog, sys
        sub = shmlog.PersistentSubscription({str(tmp_path / "journal")!r}, "reports", stream={name!r},
                                            dir={stream_dir!r}, start="earliest")
        with open({str(out)!r}, "a") as f:
            for i, m in enumerate(sub):
                f.write(str(int.from_bytes(m[:8], "little")) + "\\n")
                f.flush()
                if i == 700:
                    print("ready", flush=True)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, env=os.environ.copy())
    assert p.stdout.readline().strip() == b"ready"
    p.send_signal(signal.SIGKILL)
    p.wait(30)
    seen = [int(x) for x in out.read_text().split()]
    assert len(seen) > 700
    # The child may have read all 2 000 before the kill landed: there is always a next message.
    stream.send(100)
    with open_persistent(stream_dir, name, tmp_path) as sub:
        first = number(sub.recv(timeout=10))
        assert first <= seen[-1] + 1, "resumed past a message the killed reader never handed out"
        assert first >= seen[-1] + 1 - 64, "more than one read delivered again"


async def ticker(ticks: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        ticks.append(loop.time())
        await asyncio.sleep(0.005)


def test_an_asyncio_reader_lapped_reads_every_message_once_while_the_loop_ticks(
    stream_dir, name, tmp_path, stream
):
    """Lapped by a burst sent while it waited, the asyncio reader falls back to the journal,
    catches up, waits through the publisher's pause and reads a second burst sent from another
    thread, merged into the live stream: every message once, in order, and the loop's timer
    never held up (the pause is longer than the stall the test allows)."""
    stream.send(10)
    total = 10 + 5000 + 3000

    def after_a_pause(count: int) -> None:
        time.sleep(0.5)
        stream.send(count)

    async def main():
        loop = asyncio.get_running_loop()
        ticks: list[float] = [loop.time()]  # from the start to the end, whatever ran between
        stop = asyncio.Event()
        tick = asyncio.create_task(ticker(ticks, stop))
        got, modes = [], set()
        with open_persistent(stream_dir, name, tmp_path) as sub:
            got += [await sub.recv_async(timeout=10) for _ in range(10)]
            assert sub.is_live
            # Waiting, lapped: 64 KiB terms, far more than three of them sent meanwhile.
            waiting = asyncio.create_task(sub.recv_async(timeout=10))
            await loop.run_in_executor(None, stream.send, 5000)
            got.append(await waiting)
            burst = loop.run_in_executor(None, after_a_pause, 3000)
            async for m in sub:
                got.append(m)
                modes.add(sub.is_live)
                if len(got) == total:
                    break
            await burst
            assert await sub.recv_async(timeout=0.05) is None
            merged = sub.is_live
            assert sub.take_loss() is None
        ticks.append(loop.time())
        stop.set()
        await tick
        return got, modes, merged, ticks

    got, modes, merged, ticks = asyncio.run(asyncio.wait_for(main(), 60))
    assert [number(m) for m in got] == list(range(total))
    assert False in modes, "never lapped: nothing was tested"
    assert merged, "never merged into the live stream again"
    gap = max(b - a for a, b in zip(ticks, ticks[1:]))
    assert gap < 0.25, f"the event loop stalled {gap:.3f} s"


def test_an_asyncio_reader_reopened_resumes_after_the_last_message_it_handed_out(
    stream_dir, name, tmp_path, stream
):
    """The name keeps the position of the messages asyncio handed out, batch by batch: a reader
    that read all there was (its last receive found nothing) and closed is followed by one that
    starts at the next message, none twice, none missing."""
    stream.send(300)

    async def read(upto: int) -> list[bytes]:
        got = []
        with open_persistent(stream_dir, name, tmp_path) as sub:
            while len(got) < upto:
                batch = await sub.recv_many_async(7, timeout=10)
                assert batch, f"{len(got)} of {upto}: nothing within 10 s"
                assert len(batch) <= 7
                got += batch
            assert await sub.recv_async(timeout=0.05) is None
        return got

    first = asyncio.run(read(300))
    stream.send(300)
    second = asyncio.run(read(300))
    assert [number(m) for m in first + second] == list(range(600))


def test_the_watch_of_an_asyncio_reader_ends_at_close_and_so_does_its_iteration(
    stream_dir, name, tmp_path, stream
):
    """close() ends the loop's watch of the wake descriptor and the iteration a task runs on it
    (a persistent subscription's iteration never ends by itself)."""
    stream.send(3)

    async def main():
        loop = asyncio.get_running_loop()
        sub = open_persistent(stream_dir, name, tmp_path)
        got = []

        async def iterate():
            async for m in sub:
                got.append(m)

        task = asyncio.create_task(iterate())
        while len(got) < 3:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.05)  # the task waits on the watch
        assert not task.done()
        fd = sub._async_fd()
        sub.close()
        await asyncio.wait_for(task, 5)
        return got, loop.remove_reader(fd)

    got, still_watched = asyncio.run(main())
    assert [number(m) for m in got] == [0, 1, 2]
    assert not still_watched, "close() left the loop watching the closed descriptor"


def test_an_asyncio_reader_raises_a_corrupt_recording_as_recv_does_after_the_messages_before_it(
    stream_dir, name, tmp_path, stream
):
    """A flipped byte in the recording it falls back to: the asyncio reader hands out every
    message before it (a batch that met the error after messages returns them), then raises
    ``CorruptRecording`` as ``recv`` does, and again when asked again (nothing was taken)."""
    stream.send(10)
    bad = 2050

    async def main():
        loop = asyncio.get_running_loop()
        got = []
        with open_persistent(stream_dir, name, tmp_path) as sub:
            got += [await sub.recv_async(timeout=10) for _ in range(10)]
            waiting = asyncio.create_task(sub.recv_async(timeout=10))  # asyncio's receiver waits
            await asyncio.sleep(0)
            await loop.run_in_executor(None, stream.send, 5000)
            got.append(await waiting)
            (segment,) = (tmp_path / "journal").rglob("*.seg")
            data = bytearray(segment.read_bytes())
            at = data.find(numbered(bad))
            assert at > 0 and data.find(numbered(bad), at + 1) < 0
            data[at] ^= 0xFF
            segment.write_bytes(bytes(data))
            while True:
                try:
                    batch = await sub.recv_many_async(1000, timeout=10)
                except shmlog.CorruptRecording:
                    break
                assert batch, f"{len(got)}: nothing within 10 s"
                got += batch
            with pytest.raises(shmlog.CorruptRecording):
                await sub.recv_async(timeout=10)
        return got

    got = asyncio.run(asyncio.wait_for(main(), 60))
    assert [number(m) for m in got] == list(range(bad))
