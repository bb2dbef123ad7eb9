"""shmlog for Python: messaging between processes on one Linux host through shared memory.

A :class:`Publication` is the single writer of a stream; any number of :class:`Subscription`
objects, in any processes (Python or Rust), read it. Blocking calls release the GIL and honour
Ctrl-C; the ``*_async`` methods, :meth:`Publication.send` and :meth:`Subscription.aiter` never
block the event loop; :func:`wait_any` waits on several subscriptions from synchronous code. The
journal (:class:`Recorder`, :func:`recordings`, :class:`Replay`) records a stream to disk and
replays it. :func:`clean` removes what dead processes left in a stream directory.
"""

from __future__ import annotations

import asyncio
import atexit
import weakref
from typing import AsyncIterator, Optional, Union

from . import _shmlog
from ._shmlog import (
    DEFAULT_LIVENESS_INTERVAL,
    DEFAULT_TERM_LENGTH,
    AlreadyExists,
    BackPressured,
    CleanReport,
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
    ReaderSlots,
    Recorder,
    Recording,
    Replay,
    ShmlogError,
    Timeout,
    TooManyReaders,
    TooManyWriters,
    UsedAfterFork,
    VersionMismatch,
    __version__,
    clean,
    default_dir,
    recordings,
    wait_any,
)

__all__ = [
    "DEFAULT_LIVENESS_INTERVAL",
    "DEFAULT_TERM_LENGTH",
    "AlreadyExists",
    "BackPressured",
    "CleanReport",
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
    "PersistentSubscription",
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
    "UsedAfterFork",
    "VersionMismatch",
    "__version__",
    "clean",
    "default_dir",
    "recordings",
    "wait_any",
]

_BytesLike = Union[bytes, bytearray, memoryview]

# Every publication and subscription of this process, closed at exit (a daemon thread's too):
# a publication's log is 3 terms of RAM in /dev/shm (48 MiB by default) until it is closed.
_live: "weakref.WeakSet[Union[Publication, Subscription]]" = weakref.WeakSet()

# What an event loop watches: a publication or a (persistent) subscription.
_Owner = Union["Publication", "Subscription", "PersistentSubscription"]


@atexit.register
def _close_at_exit() -> None:
    for obj in list(_live):
        try:
            obj.close()
        except Exception:  # noqa: BLE001 - at exit, a close that fails must not stop the others
            pass


def _check_timeout(timeout: Optional[float]) -> None:
    if timeout is not None and not (timeout >= 0 and timeout != float("inf")):
        raise ValueError(f"timeout must be a finite number of seconds >= 0, got {timeout}")


def _ready(fut: asyncio.Future, result: bool) -> None:
    if not fut.done():
        fut.set_result(result)


class _Watch:
    """An event loop's watch on the wake descriptor of one publication or subscription, kept from
    one wait to the next: registered per wait, it cost two ``epoll_ctl``, a selector update and a
    handle per message (issue 33). The loop calls :meth:`_on_readable` when the descriptor has
    wake-ups; it takes them (a level-triggered loop would call again) and wakes the awaiting task.

    No wake-up is missed: a receive polls after the last take, and sets its waiter before it
    yields to the loop, so a ring after the take finds the descriptor readable and the waiter set.
    The watch holds its owner weakly (a dropped subscription is not kept alive, and counted as a
    reader, by the loop that watched it) and ends before the descriptor is closed: at ``close()``,
    when the owner is collected, or when a wait runs on another loop.
    """

    __slots__ = ("_owner", "_fd", "_loop", "_waiters", "__weakref__")

    def __init__(self, owner: _Owner) -> None:
        self._owner = weakref.ref(owner)
        self._fd = owner._async_fd()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        # The futures of the tasks awaiting a wake-up (usually one; several tasks may await).
        self._waiters: list = []
        weakref.finalize(owner, self.stop)

    def _on_readable(self) -> None:
        owner = self._owner()
        if owner is None:
            self.stop()
            return
        try:
            owner._drain_wakes()
        except (ShmlogError, RuntimeError):  # closed (or busy) under the watch: the waiter's poll says
            self.stop()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(True)

    async def wait(self, loop: asyncio.AbstractEventLoop, deadline: Optional[float]) -> bool:
        """Awaits a wake-up; ``False`` if `deadline` (loop time) passed first."""
        if self._loop is not loop:
            self.stop()
            loop.add_reader(self._fd, self._on_readable)
            self._loop = loop
        fut = loop.create_future()
        self._waiters.append(fut)
        timer = None if deadline is None else loop.call_at(deadline, _ready, fut, False)
        try:
            return await fut
        finally:
            self._waiters.remove(fut)
            if timer is not None:
                timer.cancel()

    def stop(self) -> None:
        """Stops watching (twice does nothing)."""
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._fd)

    def end(self) -> None:
        """Stops watching for good (the owner closes): the tasks awaiting a wake-up poll now,
        and their polls say the owner is closed."""
        self.stop()
        for waiter in list(self._waiters):
            loop = waiter.get_loop()
            if not loop.is_closed():
                # A close may come from another thread than the loop's.
                loop.call_soon_threadsafe(_ready, waiter, True)


class _Messages:
    """``async for msg in sub``: one message per step (a consumer that leaves the loop early
    loses nothing), straight to ``recv_many_async`` (an async generator and a second coroutine
    per message cost as much as a system call)."""

    __slots__ = ("_sub",)

    def __init__(self, sub: "_Receiving") -> None:
        self._sub = sub

    def __aiter__(self) -> "_Messages":
        return self

    async def __anext__(self) -> bytes:
        sub = self._sub
        try:
            return (await sub.recv_many_async(1))[0]
        except Closed:
            if sub._iteration_ends():
                raise StopAsyncIteration from None
            raise


def _watch_of(owner: _Owner) -> _Watch:
    """`owner`'s watch, made by its first wait (its descriptor too)."""
    watch = owner._watch = _Watch(owner)
    return watch


class _Watched:
    """A class an event loop may watch (its extension class has ``_async_fd`` and
    ``_drain_wakes``): the watch, ended before the object closes."""

    _watch: Optional[_Watch] = None

    def close(self) -> None:
        """Closes (see the extension's ``close``); an event loop's watch first."""
        watch = self._watch
        if watch is not None:
            watch.end()
        super().close()

    def __exit__(self, *exc: object) -> bool:
        self.close()
        return False


class _Receiving(_Watched):
    """asyncio receives of :class:`Subscription` and :class:`PersistentSubscription` (their
    extension classes have ``_poll_async``): the messages there now, else a wait on the watch."""

    def _iteration_ends(self) -> bool:
        """``True`` if ``Closed`` from a receive ends ``async for`` (else it is raised)."""
        raise NotImplementedError

    async def recv_async(self, timeout: Optional[float] = None) -> Optional[bytes]:
        """The next message, awaited without blocking the event loop; ``None`` after `timeout`
        seconds (``None``: as long as it takes). Raises what ``recv`` raises.

        The wait is the core's: the stream's doorbell wakes this event loop through the wake
        FIFO in a descriptor the loop watches (or the process's one shmlog waiter thread writes
        to it, for a liveness check or a nap while a persistent subscription catches up). No
        thread takes the GIL to wake the loop, and no executor thread is held per waiter.
        """
        batch = await self.recv_many_async(1, timeout)
        return batch[0] if batch else None

    async def recv_many_async(self, limit: int = 1024, timeout: Optional[float] = None) -> list[bytes]:
        """The messages there now (at most `limit`) as a list, awaiting the first without
        blocking the event loop; ``[]`` after `timeout` seconds. Raises like
        :meth:`recv_async` (what a batch meets after messages, the next receive raises)."""
        _check_timeout(timeout)
        if limit < 1:
            raise InvalidConfig(f"limit must be a positive integer, got {limit}")
        watch = self._watch or _watch_of(self)
        batch = self._poll_async(limit)
        if batch:
            return batch
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if not await watch.wait(loop, deadline):
                return self._poll_async(limit)
            batch = self._poll_async(limit)
            if batch:
                return batch

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _Messages(self)


async def _poll_until(check, timeout: Optional[float]) -> None:
    """Awaits ``check()`` becoming true, looking again after 0.25 ms, doubling to 5 ms; raises
    :class:`Timeout` after `timeout` seconds. For waits the stream has no doorbell for (a reader
    joining a publisher, a subscription finding a publisher): the core's blocking waits back off
    the same way."""
    _check_timeout(timeout)
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    nap = 0.00025
    while not check():
        if deadline is not None and loop.time() >= deadline:
            raise Timeout("timed out waiting for a connection")
        await asyncio.sleep(nap if deadline is None else max(0.0, min(nap, deadline - loop.time())))
        nap = min(nap * 2, 0.005)


class Publication(_Watched, _shmlog.Publication):
    """The single writer of stream `name` (one thread at a time), blocking or asyncio.

    ``Publication(name, dir=None, *, term_length=None, liveness_interval=None, max_readers=None,
    keep_files=False)`` creates the stream's log in `dir` (default :func:`default_dir`). Offer
    with :meth:`offer` (never waits), :meth:`offer_blocking` (sleeps while back-pressured),
    :meth:`offer_many` (a batch in one call) or ``await`` :meth:`send` (asyncio). Closing it
    (``close()``, its ``with`` block, or the interpreter's exit) ends the stream.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        # The object was made by the extension's constructor; only remember it for the exit.
        _live.add(self)

    async def send(self, data: _BytesLike, timeout: Optional[float] = None) -> int:
        """Appends `data` as one message, awaiting room while back-pressured without blocking
        the event loop; returns the stream position after it. Raises :class:`BackPressured`
        after `timeout` seconds (``None``: as long as it takes), :class:`NotConnected` and the
        other offer errors at once. Cancel-safe: a send cancelled while it waits appended nothing.

        The wait is the core's: readers that move ring the publisher's doorbell while it waits,
        and the process's one shmlog waiter thread writes a byte to a socket this loop watches.
        """
        _check_timeout(timeout)
        try:
            return self.offer(data)
        except BackPressured:
            if timeout == 0:
                raise
        message = data if type(data) is bytes else bytes(data)
        watch = self._watch or _watch_of(self)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            position = self._poll_send(message)
            if position is not None:
                return position
            if not await watch.wait(loop, deadline):
                return self.offer(message)  # a last look; BackPressured if still no room

    async def wait_connected_async(self, timeout: Optional[float] = None) -> None:
        """Awaits a live reader of the stream, at most `timeout` seconds; raises
        :class:`Timeout` (a ``TimeoutError``) then. The event loop runs meanwhile."""
        await _poll_until(lambda: self.connected_readers > 0, timeout)

    async def wait_for_readers_async(self, readers: int, timeout: Optional[float] = None) -> None:
        """Awaits at least `readers` live readers of the stream, at most `timeout` seconds."""
        if readers < 1:
            raise InvalidConfig(f"readers must be a positive integer, got {readers}")
        await _poll_until(lambda: self.connected_readers >= readers, timeout)


class Subscription(_Receiving, _shmlog.Subscription):
    """A reader of stream `name` (one thread at a time), blocking, in batches or asyncio.

    ``Subscription(name, dir=None, *, join=None, liveness_interval=None, max_readers=None,
    copy_payloads=False, tethered=True, on_lapped='oldest')``. It is a reader from the moment it
    is made (a publisher's ``wait_connected`` counts it). Receive with ``for msg in sub``,
    :meth:`recv`, :meth:`try_recv`, :meth:`recv_many` (a batch as a list), :meth:`poll` (a
    handler per message), or ``await`` :meth:`recv_async` / ``async for msg in sub``. When a
    session ends, a receive says so once (``Closed``, or the iteration ends); receiving again
    waits for the next publisher's session.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        _live.add(self)

    def _iteration_ends(self) -> bool:
        # The end of a session ends it (iterating again waits for the next); a close raises.
        return not self.closed

    def aiter(self) -> AsyncIterator[bytes]:
        """Every message, awaited, until the session is over (``async for msg in sub.aiter()``);
        iterating again waits for the next session."""
        return _Messages(self)

    async def wait_connected_async(self, timeout: Optional[float] = None) -> None:
        """Awaits a live publisher's session, at most `timeout` seconds; raises :class:`Timeout`
        (a ``TimeoutError``) then. The event loop runs meanwhile."""
        await _poll_until(self._connected_now, timeout)


class PersistentSubscription(_Receiving, _shmlog.PersistentSubscription):
    """A durable named reader of a stream that falls back to the journal when the publisher laps
    it (see the extension class for the arguments). Receive with ``for msg in psub``,
    :meth:`recv`, :meth:`try_recv`, :meth:`poll`, or ``await`` :meth:`recv_async` /
    :meth:`recv_many_async` / ``async for msg in psub``. It goes on across sessions: an
    iteration ends only when it is closed. Every kind of receive keeps the name's position at
    the messages handed out, never past one still queued: a close may hand out again what the
    last read took and did not hand out, never skip it.
    """

    def _iteration_ends(self) -> bool:
        # Only a close raises Closed: it ends the iteration.
        return True
