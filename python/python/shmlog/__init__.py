"""shmlog for Python: messaging between processes on one Linux host through shared memory.

A :class:`Publication` is the single writer of a stream; any number of :class:`Subscription`
objects, in any processes (Python or Rust), read it. Blocking calls release the GIL and honour
Ctrl-C; :meth:`Subscription.recv_async` and :meth:`Subscription.aiter` never block the event loop.
The journal (:class:`Recorder`, :func:`recordings`, :class:`Replay`) records a stream to disk and
replays it.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Optional

from . import _shmlog
from ._shmlog import (
    DEFAULT_LIVENESS_INTERVAL,
    DEFAULT_TERM_LENGTH,
    AlreadyExists,
    BackPressured,
    Closed,
    CorruptFile,
    CorruptLog,
    CorruptRecording,
    Fault,
    InsufficientSpace,
    InvalidConfig,
    InvalidName,
    IoError,
    Loss,
    MaxPositionExceeded,
    MessageTooLarge,
    NoSuchRecording,
    NotConnected,
    PermissionDenied,
    PositionNotAvailable,
    Publication,
    ReaderSlots,
    Recorder,
    Recording,
    Replay,
    ShmlogError,
    Timeout,
    TooManyReaders,
    TooManyWriters,
    VersionMismatch,
    default_dir,
    recordings,
)

__all__ = [
    "DEFAULT_LIVENESS_INTERVAL",
    "DEFAULT_TERM_LENGTH",
    "AlreadyExists",
    "BackPressured",
    "Closed",
    "CorruptFile",
    "CorruptLog",
    "CorruptRecording",
    "Fault",
    "InsufficientSpace",
    "InvalidConfig",
    "InvalidName",
    "IoError",
    "Loss",
    "MaxPositionExceeded",
    "MessageTooLarge",
    "NoSuchRecording",
    "NotConnected",
    "PermissionDenied",
    "PositionNotAvailable",
    "Publication",
    "ReaderSlots",
    "Recorder",
    "Recording",
    "Replay",
    "ShmlogError",
    "Subscription",
    "Timeout",
    "TooManyReaders",
    "TooManyWriters",
    "VersionMismatch",
    "default_dir",
    "recordings",
]


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class Subscription(_shmlog.Subscription):
    """A reader of a stream (see the Rust class for the blocking methods), with asyncio."""

    async def recv_async(self, timeout: Optional[float] = None) -> Optional[bytes]:
        """The next message, awaited without blocking the event loop; ``None`` after ``timeout``
        seconds (``None``: as long as it takes). Raises :class:`Closed` once the session is closed
        and everything it sent was read.

        The wait is the core's: the process's one shmlog waiter thread sleeps on the stream's
        doorbell (a futex) and, when it rings, writes a byte to a socket this event loop watches.
        No thread takes the GIL to wake the loop, and no executor thread is held per waiter.
        """
        if timeout is not None and not (timeout >= 0 and timeout != float("inf")):
            raise ValueError(f"timeout must be a finite number of seconds >= 0, got {timeout}")
        loop = asyncio.get_running_loop()
        fd = self._async_fd()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            # Drained before the poll: a wake-up after the poll stays in the socket.
            self._drain_wakes()
            msg = self._poll_async()
            if msg is not None:
                return msg
            fut = loop.create_future()
            loop.add_reader(fd, _wake, fut)
            try:
                if deadline is None:
                    await fut
                else:
                    left = deadline - loop.time()
                    if left <= 0:
                        return None
                    try:
                        await asyncio.wait_for(fut, left)
                    except asyncio.TimeoutError:
                        self._drain_wakes()
                        return self._poll_async()
            finally:
                loop.remove_reader(fd)

    async def aiter(self) -> AsyncIterator[bytes]:
        """Every message, awaited, until the session is closed (``async for msg in sub.aiter()``)."""
        while True:
            try:
                msg = await self.recv_async()
            except Closed:
                if self.closed:
                    raise
                return
            if msg is not None:
                yield msg

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.aiter()
