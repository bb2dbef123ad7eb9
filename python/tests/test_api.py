"""The API's shapes: bytes-like offers, context managers, poll, loss reports, properties."""

from __future__ import annotations

import pytest

import shmlog


def test_bytes_like_offers_and_properties(stream_dir, name):
    sub = shmlog.Subscription(name, stream_dir)
    with shmlog.Publication(name, stream_dir, term_length=1 << 16) as pub:
        assert sub.try_recv() is None
        pub.wait_connected(timeout=5)
        assert pub.is_connected and pub.connected_readers == 1
        p1 = pub.offer(b"bytes")
        p2 = pub.offer(bytearray(b"bytearray"))
        p3 = pub.offer(memoryview(b"xxmemoryviewxx")[2:-2])
        assert 0 < p1 < p2 < p3 == pub.position
        assert pub.term_length == 1 << 16 and pub.name == name
        assert str(pub.path).startswith(stream_dir)
        assert [sub.recv(5), sub.recv(5), sub.recv(5)] == [b"bytes", b"bytearray", b"memoryview"]
        assert sub.position == p3
        assert sub.session_id == pub.session_id
        assert sub.is_connected and not sub.closed
        assert "session" in repr(sub) and "session" in repr(pub)
    with pytest.raises(shmlog.Closed):
        sub.recv(5)
    assert not sub.is_connected and not sub.closed


def test_poll_and_handler_errors(stream_dir, name):
    sub = shmlog.Subscription(name, stream_dir)
    with shmlog.Publication(name, stream_dir) as pub:
        sub.try_recv()
        pub.wait_connected(timeout=5)
        for i in range(10):
            pub.offer(bytes([i]))
        got = []
        assert sub.recv(5) == bytes([0])
        assert sub.poll(got.append, 3) == 3

        def boom(m):
            raise RuntimeError("handler failed")

        with pytest.raises(RuntimeError, match="handler failed"):
            sub.poll(boom)
        # The message the handler raised on was taken; the others stay.
        assert sub.poll(got.append) == 5
        assert got == [bytes([i]) for i in (1, 2, 3, 5, 6, 7, 8, 9)]
        assert sub.poll(got.append) == 0


def test_a_late_joiner_reports_its_loss(stream_dir, name):
    """An untethered subscription waiting for a publisher that ran more than a term ahead before
    it looked joins past the session's start and reports the loss (cause, session, from, to). (A
    tethered one holds the publisher a window past the session's start until it looks.)"""
    late = shmlog.Subscription(name, stream_dir, tethered=False)
    reader = None
    with shmlog.Publication(name, stream_dir, term_length=64 * 1024) as pub:
        reader = shmlog.Subscription(name, stream_dir)
        assert reader.try_recv() is None
        pub.wait_connected(timeout=5)
        for i in range(1000):
            pub.offer_blocking(i.to_bytes(4, "little") + bytes(500), timeout=5)
            while reader.try_recv() is not None:
                pass
        first = late.recv(timeout=5)
        assert first is not None and int.from_bytes(first[:4], "little") > 0
        loss = late.take_loss()
        assert loss is not None, "no loss reported"
        assert loss.cause == "joined-late"
        assert loss.session_id == pub.session_id
        assert 0 <= loss.from_ < loss.to
        assert "missed" in str(loss)
        assert late.take_loss() is None
    reader.close()


def test_an_untethered_reader_never_holds_the_publisher(stream_dir, name):
    # Terms of 64 KiB: 1 000 messages of 1 KiB lap a reader that does not read many times over.
    with shmlog.Publication(name, stream_dir, term_length=64 * 1024) as pub:
        slow = shmlog.Subscription(name, stream_dir, tethered=False, on_lapped="oldest")
        pub.wait_connected(timeout=10)
        for i in range(1000):
            # A tethered reader that never reads would back-pressure the publisher here.
            pub.offer(i.to_bytes(4, "little") + bytes(1020))
        pub.offer(b"last")
        got = []
        while not got or got[-1] != b"last":
            got.append(slow.recv(timeout=10))
            assert got[-1] is not None, "nothing arrived"
        loss = slow.take_loss()
        assert loss is not None and loss.cause == "lapped", loss
        assert loss.session_id == pub.session_id
        assert 0 <= loss.from_ < loss.to
        # Resumed at the oldest message the log still held: the last terms only, no more losses.
        assert len(got) < 1000
        assert slow.take_loss() is None
        with pytest.raises(ValueError, match="on_lapped"):
            shmlog.Subscription(name, stream_dir, tethered=False, on_lapped="newest")
        slow.close()
