"""A frame the subscription cannot read (a buggy or hostile peer wrote the log): every receive
raises shmlog.Fault, promptly, after the messages before it; none spins or hangs. Run in a child
process, so that a receive that never returns fails the test instead of hanging the suite (the
core's Receiver::try_recv loops at a fault until the publisher is gone; the bindings look at the
next frame before every receive)."""

from __future__ import annotations

import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import asyncio, struct, sys, time, shmlog
    d = sys.argv[1]

    def forge(pub):
        # A committed frame at the publisher's position whose header does not match its place.
        pos = pub.position
        with open(pub.path, "r+b") as f:
            f.seek(pos + 4); f.write(bytes(28))
            f.seek(pos); f.write(struct.pack("<i", 64))

    def stream(name):
        sub = shmlog.Subscription(name, d)
        pub = shmlog.Publication(name, d, term_length=1 << 16)
        sub.try_recv()
        pub.wait_connected(timeout=5)
        return sub, pub

    def outcome(call):
        t = time.monotonic()
        try:
            r = call()
            return f"returned {r!r}"
        except shmlog.Fault:
            assert time.monotonic() - t < 1.0
            return "fault"

    sub, pub = stream("f")
    pub.offer(b"first"); pub.offer(b"second")
    forge(pub)
    print("recv", sub.recv(timeout=1), flush=True)
    print("poll", sub.poll(lambda m: print("handler", m), 10), flush=True)
    print("recv", outcome(lambda: sub.recv(timeout=1)), flush=True)
    print("try_recv", outcome(sub.try_recv), flush=True)
    print("poll", outcome(lambda: sub.poll(print)), flush=True)
    print("fault", sub.fault is not None, flush=True)

    sub2, pub2 = stream("g")
    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, forge, pub2)
        t = time.monotonic()
        try:
            await sub2.recv_async(timeout=5)
            return "returned"
        except shmlog.Fault:
            return f"fault {time.monotonic() - t < 2.0}"
    print("async", asyncio.run(main()), flush=True)
    """
)


def test_a_forged_frame_raises_fault_in_every_receive(child, stream_dir):
    c = child([sys.executable, "-c", CHILD, stream_dir])
    for line in [
        "recv b'first'",
        "handler b'second'",
        "poll 1",
        "recv fault",
        "try_recv fault",
        "poll fault",
        "fault True",
        "async fault True",
    ]:
        c.expect_line(line, timeout=20)
    rc, _, err = c.finish(timeout=20)
    assert rc == 0, err
