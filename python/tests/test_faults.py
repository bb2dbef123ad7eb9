"""A frame the subscription cannot read (a buggy or hostile peer wrote the log): every receive
shape delivers the messages before it, then raises shmlog.Fault, promptly; receiving again never
spins and never hangs. Run in a child process, so that a receive that never returns fails the
test instead of hanging the suite.

The fault is said once and the next receive waits (asleep) until the session ends or a new one
starts (the core's session-change rule; before it, every receive said it again at once)."""

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
        pub = shmlog.Publication(name, d, term_length=1 << 16)
        sub = shmlog.Subscription(name, d)
        pub.wait_connected(timeout=5)
        pub.offer(b"first"); pub.offer(b"second")
        forge(pub)
        return sub, pub

    async def recv_async(sub, timeout):
        return await sub.recv_async(timeout)

    shapes = {
        "recv": lambda sub, t: [m for m in [sub.recv(timeout=t)] if m is not None],
        "try_recv": lambda sub, t: [m for m in [sub.try_recv()] if m is not None],
        "recv_many": lambda sub, t: sub.recv_many(timeout=t),
        "poll": lambda sub, t: (lambda got: (sub.poll(got.append, 10), got)[1])([]),
        "iter": lambda sub, t: [next(iter(sub))],
        "recv_async": lambda sub, t: [m for m in [asyncio.run(recv_async(sub, t))] if m is not None],
    }
    for shape, receive in shapes.items():
        sub, pub = stream(shape)
        got, fault = [], None
        t = time.monotonic()
        while fault is None and time.monotonic() - t < 5:
            try:
                got += receive(sub, 1.0)
            except shmlog.Fault as e:
                fault = time.monotonic() - t
        assert got == [b"first", b"second"], (shape, got)
        assert fault is not None and fault < 2.0, (shape, fault)
        assert sub.fault is not None
        # Said once, the next receive waits its timeout asleep and finds nothing; it never spins.
        t, c = time.monotonic(), time.process_time()
        try:
            again = sub.recv(timeout=0.3)
        except shmlog.Fault:
            again = "fault again"
        waited, cpu = time.monotonic() - t, time.process_time() - c
        assert again is None and 0.25 <= waited < 2.0, (shape, again, waited)
        assert cpu < 0.1, (shape, cpu)
        print(shape, "ok", flush=True)
        pub.close(); sub.close()
    """
)


def test_a_forged_frame_raises_fault_once_in_every_receive_shape(child, stream_dir):
    c = child([sys.executable, "-c", CHILD, stream_dir])
    for shape in ["recv", "try_recv", "recv_many", "poll", "iter", "recv_async"]:
        c.expect_line(f"{shape} ok", timeout=30)
    rc, _, err = c.finish(timeout=20)
    assert rc == 0, err
