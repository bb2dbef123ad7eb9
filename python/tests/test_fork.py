"""fork() (issue 34, item 3): a Publication or Subscription made before os.fork() raises
UsedAfterFork in the child, and the child's exit (atexit, finalizers) leaves the parent's stream
alone: the parent's subscriber gets every message the parent offers, and the session goes on.
Run in a child process of its own, so that pytest itself never forks."""

from __future__ import annotations

import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import os, sys, shmlog
    name, d = sys.argv[1], sys.argv[2]
    sub = shmlog.Subscription(name, d)
    pub = shmlog.Publication(name, d)
    sub.try_recv()
    pub.wait_connected(timeout=5)
    pub.offer(b"before")
    pid = os.fork()
    if pid == 0:
        # The child: every use of the parent's objects is refused, clearly.
        for what, call in [
            ("offer", lambda: pub.offer(b"from the child")),
            ("offer_many", lambda: pub.offer_many([b"from the child"])),
            ("recv", lambda: sub.recv(timeout=0)),
            ("position", lambda: sub.position),
        ]:
            try:
                call()
                print(what, "allowed", flush=True)
            except shmlog.UsedAfterFork as e:
                assert "fork" in str(e) and isinstance(e, RuntimeError)
                print(what, "refused", flush=True)
        # The child's own objects work.
        mine = shmlog.Publication(name + "-child", d)
        mine.close()
        # Closing the parent's copies, and the exit's finalizers, leave the parent's stream be.
        pub.close()
        sub.close()
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    for i in range(100):
        pub.offer_blocking(b"after %d" % i, timeout=5)
    got = [sub.recv(timeout=5) for _ in range(101)]
    assert got == [b"before"] + [b"after %d" % i for i in range(100)], got[:5]
    assert sub.is_connected, "the child's exit closed the parent's stream"
    assert sub.try_recv() is None
    pub.close()
    print("parent ok", flush=True)
    """
)


def test_objects_made_before_fork_are_refused_in_the_child(child, stream_dir, name):
    c = child([sys.executable, "-c", SCRIPT, name, stream_dir])
    for line in ["offer refused", "offer_many refused", "recv refused", "position refused", "parent ok"]:
        c.expect_line(line, timeout=30)
    rc, rest, err = c.finish(timeout=30)
    assert rc == 0, err
    assert rest == [], rest
