"""Blocking calls release the GIL and honour Ctrl-C: SIGINT to a Python process blocked in
recv() raises KeyboardInterrupt there (the wait runs in slices of 50 ms that check signals)."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time

import shmlog

CHILD = textwrap.dedent(
    """
    import signal, sys, time, shmlog
    # A process started with SIGINT ignored (a CI launched in the background by a shell without
    # job control) keeps it ignored: Python installs its handler only where SIGINT was default.
    # Install it here, as a terminal user's process has it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sub = shmlog.Subscription(sys.argv[1], sys.argv[2])
    call = sys.argv[3]
    print("ready", flush=True)
    try:
        if call == "recv":
            sub.recv()
        elif call == "iter":
            for _ in sub:
                pass
        elif call == "wait_connected":
            sub.wait_connected()
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(0)
    print("returned", flush=True)
    sys.exit(1)
    """
)


def blocked_in_kernel(pid: int) -> bool:
    """The process's main thread sleeps (state S): it is inside the wait, not before it."""
    with open(f"/proc/{pid}/task/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "S"


def interrupt(child, stream_dir, name, call):
    c = child([sys.executable, "-c", CHILD, name, stream_dir, call])
    c.expect_line("ready")
    deadline = time.monotonic() + 10
    while not blocked_in_kernel(c.proc.pid):
        assert time.monotonic() < deadline, "the child never blocked"
        time.sleep(0.001)
    os.kill(c.proc.pid, signal.SIGINT)
    sent = time.monotonic()
    c.expect_line("interrupted", timeout=10)
    elapsed = time.monotonic() - sent
    rc, _, err = c.finish()
    assert rc == 0, err
    assert elapsed < 1.0, f"KeyboardInterrupt {elapsed:.3f} s after SIGINT"


def test_ctrl_c_during_recv(child, stream_dir, name):
    interrupt(child, stream_dir, name, "recv")


def test_ctrl_c_during_iteration(child, stream_dir, name):
    interrupt(child, stream_dir, name, "iter")


def test_ctrl_c_during_wait_connected(child, stream_dir, name):
    interrupt(child, stream_dir, name, "wait_connected")


def test_blocking_recv_releases_the_gil(stream_dir, name):
    """While one thread waits in recv (0.6 s), this one keeps running: no gap in its progress
    anywhere near the wait's length (a wait that held the GIL would stop it for all of it)."""
    sub = shmlog.Subscription(name, stream_dir)
    done = threading.Event()

    def wait():
        assert sub.recv(timeout=0.6) is None
        done.set()

    t = threading.Thread(target=wait)
    last = time.monotonic()
    t.start()
    gap = 0.0
    while not done.is_set():
        now = time.monotonic()
        gap = max(gap, now - last)
        last = now
    t.join()
    assert gap < 0.3, f"this thread stood still {gap:.3f} s while the other waited"
