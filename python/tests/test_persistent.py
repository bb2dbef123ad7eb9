"""Persistent subscriptions from Python: a durable name read through poll, recv and iteration
gets every message once, in order, across a fall back to the journal when the publisher laps
it; a process that opens the name again (after a close, or a kill -9) resumes where it stopped."""

from __future__ import annotations

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
    with open_persistent(stream_dir, name, tmp_path) as sub:
        first = number(sub.recv(timeout=10))
        assert first <= seen[-1] + 1, "resumed past a message the killed reader never handed out"
        assert first >= seen[-1] + 1 - 64, "more than one read delivered again"
