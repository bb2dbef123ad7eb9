"""Python and Rust on the two ends of one stream, in different processes: 100 000 messages of
random size (some fragmented past the 64 KiB MTU) with their sequence numbers and checksums,
checked in order at the other end (examples/python_peer.rs is the Rust end)."""

from __future__ import annotations

import random
import struct
import zlib

import shmlog

COUNT = 100_000


def random_len(rng: random.Random) -> int:
    # The peer's distribution: mostly up to 2 KiB, one in a hundred up to 200 KiB.
    return rng.randrange(200 << 10) if rng.randrange(100) == 0 else rng.randrange(2048)


def message(seq: int, payload: bytes) -> bytes:
    return struct.pack("<QI", seq, zlib.crc32(payload)) + payload


def check(m: bytes) -> int:
    seq, crc = struct.unpack_from("<QI", m)
    assert zlib.crc32(m[12:]) == crc, f"message {seq}: checksum mismatch"
    return seq


def test_python_publisher_to_rust_subscriber(peer, child, stream_dir, name):
    rng = random.Random(27)
    with shmlog.Publication(name, stream_dir) as pub:
        sub = child([peer, "sub", name, stream_dir, str(COUNT)])
        sub.expect_line("ready")
        pub.wait_connected(timeout=30)
        fragmented = 0
        for seq in range(COUNT):
            n = random_len(rng)
            fragmented += n > 64 * 1024 - 32 - 12
            pub.offer_blocking(message(seq, rng.randbytes(n)), timeout=30)
    rc, out, err = sub.finish(timeout=60)
    assert rc == 0, err
    assert out == [f"ok {COUNT}"], (out, err)
    assert fragmented > 0


def test_rust_publisher_to_python_subscriber(peer, child, stream_dir, name):
    sub = shmlog.Subscription(name, stream_dir)
    publisher = child([peer, "pub", name, stream_dir, str(COUNT), "27"])
    expected = 0
    for m in sub:  # until the peer closes the stream
        assert check(m) == expected
        expected += 1
    assert expected == COUNT
    assert not sub.is_connected and not sub.closed
    assert sub.take_loss() is None
    rc, _, err = publisher.finish()
    assert rc == 0, err
    sub.close()


def test_python_to_python_subscriber_in_poll_mode(stream_dir, name):
    """poll(handler) delivers whole messages in order, fragmented ones included."""
    rng = random.Random(5)
    sent = [rng.randbytes(rng.choice([0, 1, 100, 70_000, 120_000])) for _ in range(200)]
    sub = shmlog.Subscription(name, stream_dir)
    got: list[bytes] = []
    with shmlog.Publication(name, stream_dir, term_length=1 << 20) as pub:
        assert sub.try_recv() is None  # joins the session
        pub.wait_connected(timeout=5)
        for m in sent:
            while True:
                try:
                    pub.offer(m)
                    break
                except shmlog.BackPressured:
                    sub.poll(got.append, 16)
    got.extend(sub)  # the rest, until the stream is closed
    assert got == sent
