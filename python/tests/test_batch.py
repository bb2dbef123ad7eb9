"""Batch calls (issue 34, item 7): offer_many and recv_many move many messages per call into the
extension, with the same order, back pressure and end-of-session rules as one at a time."""

from __future__ import annotations

import pytest

import shmlog


def connected(name, stream_dir, **kw):
    pub = shmlog.Publication(name, stream_dir, **kw)
    sub = shmlog.Subscription(name, stream_dir)  # joins the running session
    pub.wait_connected(timeout=5)
    return pub, sub


def test_offer_many_and_recv_many_keep_order(stream_dir, name):
    pub, sub = connected(name, stream_dir)
    msgs = [i.to_bytes(4, "little") * (i % 7) for i in range(5000)]
    sent = 0
    got = []
    while sent < len(msgs):
        try:
            sent += pub.offer_many(msgs[sent : sent + 700])
        except BlockingIOError:  # BackPressured: none appended
            pass
        got.extend(sub.recv_many(timeout=0))
    assert pub.offer_many((b"tuple", bytearray(b"bytearray"), memoryview(b"view"))) == 3
    pub.close()
    while True:
        try:
            got.extend(sub.recv_many(limit=300, timeout=5))
        except shmlog.Closed:
            break
    assert got == msgs + [b"tuple", b"bytearray", b"view"]
    sub.close()


def test_recv_many_limit_timeout_and_end_of_session(stream_dir, name):
    pub, sub = connected(name, stream_dir)
    assert sub.recv_many(timeout=0) == []
    assert sub.recv_many(timeout=0.05) == []
    assert pub.offer_many([b"%d" % i for i in range(10)]) == 10
    assert sub.recv_many(limit=4) == [b"0", b"1", b"2", b"3"]
    pub.close()
    # The end of the session met after messages: the batch returns them, the next call says so.
    assert sub.recv_many(timeout=5) == [b"%d" % i for i in range(4, 10)]
    with pytest.raises(shmlog.Closed):
        sub.recv_many(timeout=5)
    with pytest.raises(ValueError):
        sub.recv_many(limit=0)
    sub.close()


def test_poll_reports_the_end_of_a_session(stream_dir, name):
    pub, sub = connected(name, stream_dir)
    pub.offer_many([b"a", b"b"])
    pub.close()
    got = []
    assert sub.poll(got.append, 10) == 2
    with pytest.raises(shmlog.Closed):
        sub.poll(got.append, 10)
    assert got == [b"a", b"b"]
    sub.close()


def test_offer_many_under_back_pressure(stream_dir, name):
    pub, sub = connected(name, stream_dir, term_length=64 * 1024)
    msgs = [bytes(1000)] * 200  # 200 KB: three terms; the reader does not read yet
    n = pub.offer_many(msgs)  # never waits: stops where the window ends
    assert 0 < n < len(msgs)
    with pytest.raises(shmlog.BackPressured):
        pub.offer(bytes(1000))
    with pytest.raises(shmlog.BackPressured):  # waited, nobody moved: nothing appended
        pub.offer_many(msgs[n:], timeout=0.05)
    # The reader drains; the rest goes out with a wait allowed.
    got = sub.recv_many(limit=10_000, timeout=5)
    assert len(got) == n
    assert pub.offer_many(msgs[n : n + 30], timeout=5) == 30
    assert len(sub.recv_many(timeout=5)) == 30
    pub.close()
    sub.close()


def test_offer_many_errors(stream_dir, name):
    with shmlog.Publication(name, stream_dir) as pub:
        with pytest.raises(shmlog.NotConnected):
            pub.offer_many([b"nobody reads"])
        sub = shmlog.Subscription(name, stream_dir)
        pub.wait_connected(timeout=5)
        assert pub.offer_many([]) == 0
        too_big = bytes(pub.max_message_len + 1)
        # An error after some were appended ends the batch; the next call meets it.
        assert pub.offer_many([b"a", b"b", too_big, b"c"]) == 2
        with pytest.raises(shmlog.MessageTooLarge):
            pub.offer_many([too_big, b"c"])
        for bad in ([b"a", "text"], [None]):
            with pytest.raises(TypeError):
                pub.offer_many(bad)
        with pytest.raises(TypeError):
            pub.offer_many(iter([b"a"]))
        assert sub.recv_many(timeout=5)[:2] == [b"a", b"b"]
        sub.close()
