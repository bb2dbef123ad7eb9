"""Errors and shapes Python users expect (issue 34, item 5): every exception also derives from the
builtin it stands for, so code written against the builtins catches it; one meaning for `closed`;
`__version__`; help() that documents the Python classes."""

from __future__ import annotations

import errno
import pydoc
import re
import sys

import pytest

import shmlog


def test_exceptions_are_also_the_builtins_they_stand_for():
    expect = {
        "Timeout": TimeoutError,
        "IoError": OSError,
        "InvalidConfig": ValueError,
        "InvalidName": ValueError,
        "MessageTooLarge": ValueError,
        "PositionNotAvailable": ValueError,
        "ReaderSlots": ValueError,
        "BackPressured": BlockingIOError,
        "NotConnected": ConnectionError,
        "AlreadyExists": FileExistsError,
        "PermissionDenied": PermissionError,
        "InsufficientSpace": OSError,
        "NoSuchRecording": LookupError,
        "Closed": EOFError,
        "UsedAfterFork": RuntimeError,
    }
    for name, builtin in expect.items():
        cls = getattr(shmlog, name)
        assert issubclass(cls, builtin), f"{name} is not a {builtin.__name__}"
        assert issubclass(cls, shmlog.ShmlogError), name
        assert cls.__module__ == "shmlog", name


def test_one_except_catches_every_bad_setting(stream_dir, name):
    """term_length=0 (checked by the bindings) and 65537 (checked by the core) are one kind of
    error: InvalidConfig, a ValueError."""
    for bad in (0, -1, 1000, 65537, 1 << 31):
        with pytest.raises(shmlog.InvalidConfig):
            shmlog.Publication(name, stream_dir, term_length=bad)
    for kw in ({"liveness_interval": 0}, {"liveness_interval": -1.0}, {"max_readers": 0}):
        with pytest.raises(shmlog.InvalidConfig):
            shmlog.Publication(name, stream_dir, **kw)
    for kw in ({"join": "sometime"}, {"join": -5}, {"on_lapped": "newest"}, {"max_readers": -1}):
        with pytest.raises(shmlog.InvalidConfig):
            shmlog.Subscription(name, stream_dir, **kw)


def test_timeouts_and_os_errors_carry_what_the_builtins_do(stream_dir, name):
    pub = shmlog.Publication(name, stream_dir)
    try:
        with pytest.raises(TimeoutError):
            pub.wait_connected(timeout=0.01)
        with pytest.raises(ConnectionError) as e:
            pub.offer(b"nobody reads")
        assert e.value.errno == errno.ENOTCONN
        with pytest.raises(FileExistsError) as e:
            shmlog.Publication(name, stream_dir)
        assert e.value.errno == errno.EEXIST
        assert e.value.filename.startswith(stream_dir)
        assert "already owns" in e.value.strerror
    finally:
        pub.close()
    # A directory that cannot be made: an OSError with the errno of the system call.
    with pytest.raises(OSError) as e:
        shmlog.Publication(name, "/dev/null/not-a-dir")
    assert isinstance(e.value, shmlog.ShmlogError)
    assert e.value.errno == errno.ENOTDIR, e.value


def test_closed_has_one_meaning(stream_dir, name):
    """`closed` is True once the object was closed, for both ends (as for files); the end of a
    session is an event (Closed raised once), not a second property with another meaning."""
    sub = shmlog.Subscription(name, stream_dir)
    pub = shmlog.Publication(name, stream_dir)
    assert not hasattr(sub, "is_closed")
    assert not sub.closed and not pub.closed
    sub.try_recv()
    pub.wait_connected(timeout=5)
    pub.close()
    with pytest.raises(shmlog.Closed):
        sub.recv(timeout=5)
    assert pub.closed and not sub.closed
    sub.close()
    assert sub.closed


def test_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", shmlog.__version__)
    if sys.version_info >= (3, 8):
        from importlib.metadata import version

        assert shmlog.__version__ == version("shmlog")


def test_help_documents_the_python_classes():
    for obj in (shmlog.Subscription, shmlog.Publication):
        text = pydoc.render_doc(obj, renderer=pydoc.plaintext)
        assert "Rust" not in text, text[:400]
        for method in ("recv_many", "recv_async", "wait_connected_async", "aiter") if obj is shmlog.Subscription else (
            "offer_many",
            "send",
            "wait_connected_async",
        ):
            assert method in text
            assert getattr(obj, method).__doc__, method
