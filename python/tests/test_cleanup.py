"""Leftover files (issue 34, item 4): a process that exits closes its publications and
subscriptions, even with a daemon thread blocked in one; what a killed process left (SIGKILL, or
SIGTERM, which skips atexit) is removed by shmlog.clean(), and only that."""

from __future__ import annotations

import os
import signal
import sys
import textwrap

import pytest

import shmlog

EXIT_WITH_DAEMON = textwrap.dedent(
    """
    import sys, threading, shmlog
    name, d = sys.argv[1], sys.argv[2]
    pub = shmlog.Publication(name, d)
    sub = shmlog.Subscription(name, d)
    other = shmlog.Subscription(name + "-nobody", d)

    def read():
        # Blocked in a receive (holding `other`) when the interpreter exits.
        other.recv()

    threading.Thread(target=read, daemon=True).start()
    sub.try_recv()
    pub.wait_connected(timeout=5)
    pub.offer(b"x")
    print("ready", flush=True)
    sys.exit(0)
    """
)

HOLD = textwrap.dedent(
    """
    import sys, time, shmlog
    pub = shmlog.Publication(sys.argv[1], sys.argv[2])
    print("ready", flush=True)
    time.sleep(60)
    """
)


def files(d):
    return sorted(f for f in os.listdir(d))


def test_exit_closes_everything_even_with_a_daemon_thread_waiting(child, stream_dir, name):
    c = child([sys.executable, "-c", EXIT_WITH_DAEMON, name, stream_dir])
    c.expect_line("ready")
    rc, _, err = c.finish(timeout=30)
    assert rc == 0, err
    assert files(stream_dir) == [], "files left after a normal exit"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_clean_removes_what_a_killed_process_left(child, stream_dir, name, sig):
    c = child([sys.executable, "-c", HOLD, name, stream_dir])
    c.expect_line("ready")
    # A live publisher's files are kept.
    report = shmlog.clean(stream_dir)
    assert report.removed == [] and not report.dry_run
    assert any("alive" in why for _, why in report.kept), report.kept
    os.kill(c.proc.pid, sig)
    c.proc.wait(timeout=10)
    left = files(stream_dir)
    assert f"{name}.log" in left, left
    # A dry run says what it would remove, and removes nothing.
    dry = shmlog.clean(stream_dir, dry_run=True)
    assert dry.dry_run and {os.path.basename(p) for p, _ in dry.removed} == set(left)
    assert files(stream_dir) == left
    report = shmlog.clean(stream_dir)
    assert {os.path.basename(str(p)) for p, _ in report.removed} == set(left)
    assert any("gone" in why for _, why in report.removed), report.removed
    assert files(stream_dir) == []
    # Idempotent, and the name is free for a new publisher.
    assert shmlog.clean(stream_dir).removed == []
    shmlog.Publication(name, stream_dir).close()


def test_clean_keeps_what_is_not_a_stream(stream_dir):
    with open(os.path.join(stream_dir, "notes.txt"), "w") as f:
        f.write("mine")
    report = shmlog.clean(stream_dir)
    assert report.removed == []
    assert [os.path.basename(str(p)) for p, _ in report.kept] == ["notes.txt"]
    assert "CleanReport" in repr(report)
