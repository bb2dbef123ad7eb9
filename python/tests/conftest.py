"""Fixtures of the shmlog Python tests: a unique stream directory and name per test, and the Rust
peer (examples/python_peer.rs, an example of the core crate) for the cross-process tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stream_dir():
    """A fresh directory for stream files (in /dev/shm when there is one), removed afterwards."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    d = tempfile.mkdtemp(prefix="shmlog-py-test-", dir=base)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def name():
    """A stream name no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def peer():
    """The Rust peer binary: $SHMLOG_PEER (set by .ci/python.sh), else built here."""
    path = os.environ.get("SHMLOG_PEER")
    if not path:
        subprocess.run(
            ["cargo", "build", "--release", "-p", "shmlog", "--example", "python_peer"],
            cwd=ROOT,
            check=True,
        )
        target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
        path = os.path.join(target, "release", "examples", "python_peer")
    assert os.access(path, os.X_OK), f"no peer binary at {path}"
    return path


class Child:
    """A child process whose stdout lines are read with a bound (never waited on forever)."""

    def __init__(self, args, **kw):
        import queue
        import threading

        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True, **kw
        )
        self.lines: queue.Queue = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def expect_line(self, want: str, timeout: float = 30.0) -> str:
        import queue

        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line from {self.proc.args} within {timeout} s") from None
        assert line is not None and line.startswith(want), (
            f"{self.proc.args}: expected {want!r}, got {line!r}; stderr: {self.stderr()}"
        )
        return line

    def finish(self, timeout: float = 60.0):
        """Waits for the exit; returns (exit code, the lines not read yet, stderr)."""
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=timeout)
        self.reader.join(timeout)
        rest = []
        while not self.lines.empty():
            line = self.lines.get()
            if line is not None:
                rest.append(line)
        return rc, rest, self.proc.stderr.read()

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(running)"
        return self.proc.stderr.read()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for f in (self.proc.stderr, self.proc.stdin):
            if f and not f.closed:
                f.close()


@pytest.fixture
def child():
    """Starts children; kills whatever is left at the end of the test."""
    started = []

    def start(args, **kw):
        c = Child(args, **kw)
        started.append(c)
        return c

    yield start
    for c in started:
        c.kill()
