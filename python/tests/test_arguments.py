"""Bad arguments raise clear exceptions (never a crash): wrong types, names with '/', negative
or NaN timeouts, out-of-range settings; every core error is a ShmlogError subclass with the
core's message."""

from __future__ import annotations

import math

import pytest

import shmlog


def test_wrong_types(stream_dir, name):
    with pytest.raises(TypeError):
        shmlog.Publication(123, stream_dir)
    with pytest.raises(TypeError):
        shmlog.Subscription(None, stream_dir)
    with pytest.raises(TypeError):
        shmlog.Publication(name, stream_dir, term_length="big")
    with pytest.raises(TypeError):
        shmlog.Subscription(name, stream_dir, join=1.5)
    with shmlog.Publication(name, stream_dir) as pub:
        for bad in (123, "text", None, [1, 2], object()):
            with pytest.raises(TypeError, match="bytes-like"):
                pub.offer(bad)
        with pytest.raises(TypeError):
            pub.offer_blocking(b"x", timeout="soon")
    sub = shmlog.Subscription(name, stream_dir)
    with pytest.raises(TypeError):
        sub.recv(timeout="1")
    with pytest.raises(TypeError, match="callable"):
        sub.poll(42)


def test_names_that_are_not_file_names(stream_dir):
    for bad in ("a/b", "", "..", "/etc/passwd", "x\0y"):
        with pytest.raises(shmlog.InvalidName, match="invalid stream name"):
            shmlog.Publication(bad, stream_dir)
        with pytest.raises(shmlog.InvalidName):
            shmlog.Subscription(bad, stream_dir)
    assert issubclass(shmlog.InvalidName, shmlog.ShmlogError)


def test_bad_timeouts(stream_dir, name):
    sub = shmlog.Subscription(name, stream_dir)
    # Zero is fine: a look without waiting.
    assert sub.recv(timeout=0) is None
    for bad in (-1, -0.001, math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="timeout"):
            sub.recv(timeout=bad)
        with pytest.raises(ValueError, match="timeout"):
            sub.wait_connected(timeout=bad)
    with shmlog.Publication(name, stream_dir) as pub:
        with pytest.raises(ValueError, match="timeout"):
            pub.offer_blocking(b"x", timeout=-1)
        with pytest.raises(ValueError, match="timeout"):
            pub.wait_connected(timeout=math.nan)


def test_bad_settings(stream_dir, name):
    with pytest.raises(ValueError, match="term_length"):
        shmlog.Publication(name, stream_dir, term_length=-1)
    with pytest.raises(ValueError, match="term_length"):
        shmlog.Publication(name, stream_dir, term_length=0)
    with pytest.raises(OverflowError):
        shmlog.Publication(name, stream_dir, term_length=1 << 70)
    with pytest.raises(shmlog.InvalidConfig, match="invalid configuration"):
        shmlog.Publication(name, stream_dir, term_length=1000)
    with pytest.raises(ValueError, match="liveness_interval"):
        shmlog.Publication(name, stream_dir, liveness_interval=0)
    with pytest.raises(ValueError, match="join"):
        shmlog.Subscription(name, stream_dir, join="sometime")
    with pytest.raises(ValueError, match="join position"):
        shmlog.Subscription(name, stream_dir, join=-5)
    with pytest.raises(ValueError, match="max_readers"):
        shmlog.Subscription(name, stream_dir, max_readers=-1)
    sub = shmlog.Subscription(name, stream_dir)
    with pytest.raises(ValueError, match="limit"):
        sub.poll(print, 0)
    with pytest.raises(shmlog.ShmlogError):
        shmlog.Publication(name, "/dev/null/not-a-dir")


def test_offer_errors_are_exceptions(stream_dir, name):
    with shmlog.Publication(name, stream_dir, term_length=64 * 1024) as pub:
        with pytest.raises(shmlog.NotConnected, match="not connected"):
            pub.offer(b"nobody reads")
        sub = shmlog.Subscription(name, stream_dir)
        assert sub.try_recv() is None
        pub.wait_connected(timeout=5)
        with pytest.raises(shmlog.MessageTooLarge) as e:
            pub.offer(bytes(pub.max_message_len + 1))
        assert e.value.len == pub.max_message_len + 1 and e.value.max == pub.max_message_len
        # The reader does not read: the publisher runs into its window.
        with pytest.raises(shmlog.BackPressured):
            for _ in range(100_000):
                pub.offer(bytes(1000))
        with pytest.raises(shmlog.BackPressured):
            pub.offer_blocking(bytes(1000), timeout=0.05)
        with pytest.raises(shmlog.AlreadyExists):
            shmlog.Publication(name, stream_dir)


def test_use_after_close(stream_dir, name):
    pub = shmlog.Publication(name, stream_dir)
    pub.close()
    pub.close()
    assert pub.closed
    with pytest.raises(shmlog.Closed, match="closed"):
        pub.offer(b"x")
    with pytest.raises(shmlog.Closed):
        pub.position
    sub = shmlog.Subscription(name, stream_dir)
    sub.close()
    with pytest.raises(shmlog.Closed):
        sub.recv(timeout=0)
    with pytest.raises(shmlog.Closed):
        list(sub)
    assert sub.closed


def test_every_exception_is_a_shmlog_error():
    for n in shmlog.__all__:
        obj = getattr(shmlog, n)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert issubclass(obj, shmlog.ShmlogError), n
