"""The ledger's Python roles: a writer and readers that use the Python package ``shmlog`` and
speak the same event lines as the Rust roles (``ledger/src/event.rs``, ``ledger/src/roles/``),
so that the controller and the oracle know them only by what they write.

The controller starts it as ``python role.py role <writer|reader> <settings>`` for a spawn whose
settings hold ``exec=python`` (``ledger/src/controller.rs``). Settings are ``key=value`` pairs
separated by commas, the Rust roles' plus:

- readers: ``shape=`` one of ``py-recv`` (``recv(timeout)``), ``py-iter`` (``for msg in sub``),
  ``py-many`` (``recv_many``), ``py-poll`` (``poll(handler)``), ``py-async``
  (``await recv_async``), ``py-aiter`` (``async for``), ``py-many-async``
  (``await recv_many_async``), ``py-wait_any`` (``shmlog.wait_any`` over ``stream`` and
  ``stream2``, then ``recv_many(timeout=0)`` of each ready one);
- persistent readers (role ``persistent``, ``shmlog.PersistentSubscription`` under durable name
  ``name=``): ``shape=`` one of ``py-recv``, ``py-iter``, ``py-poll``; a ``pos`` line whenever the
  stored position changed, before the message of the receive that stored it;
- writers: each attempt is ``offer``, ``offer_blocking``, a batch of ``offer_many`` or
  ``await send`` (asyncio), drawn per attempt (the two waiting calls after a plain ``offer`` was
  refused for back pressure); ``pyops=`` limits the draw (``offer+many``).

Event lines a Rust writer does not write: ``batch from=A to=B`` before an ``offer_many`` of
sequence numbers ``A..B`` (the oracle then knows that any of them may be committed if the
process is killed before it says). Losses come from ``take_loss()`` after each receive, before
the messages that receive returned (a loss lies before the message received after it was
reported). Heap figures are glibc's ``mallinfo2`` (bytes in use from malloc: the extension's
buffers and Python's large objects), not a Rust allocator's count.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
import threading
import time
from typing import Callable, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ledger_body as body  # noqa: E402
from ledger_body import HEADER, Id, Rng  # noqa: E402

import shmlog  # noqa: E402

FLUSH_EVERY = 0.005
GRACE = 0.7
GIVE_UP_BACK_PRESSURE = 2.0
GIVE_UP_NOT_CONNECTED = 0.2
HELD_PIECE_US = 250_000
SPIN_COUNTED = 1000
# Bodies longer than this are checked by their hash alone (it covers every byte); shorter ones
# are also regenerated and compared, as the Rust checker does. Python pays ~1 us per 8 bytes for
# each pass.
REGENERATE_UP_TO = 2048


def mono_us() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


class Settings:
    def __init__(self, text: str) -> None:
        self.kv = {}
        for pair in text.split(","):
            k, sep, v = pair.partition("=")
            if sep:
                self.kv[k] = v

    def str(self, key: str) -> str:
        return self.kv.get(key, "")

    def num(self, key: str, default: int) -> int:
        try:
            return int(self.kv[key])
        except (KeyError, ValueError):
            return default

    def flag(self, key: str) -> bool:
        return self.kv.get(key) == "1"


class Out:
    """One event file (``event::Out``): ``direct`` writes each line with one ``write(2)`` before
    going on (writers); otherwise lines are buffered and a thread flushes every 5 ms."""

    def __init__(self, path: str, t0: int, direct: bool) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        self.t0 = t0
        self.direct = direct
        self.buf: List[bytes] = []
        self.size = 0
        self.lock = threading.Lock()
        if not direct:
            threading.Thread(target=self._flusher, name="ledger-flush", daemon=True).start()

    def now(self) -> int:
        return mono_us() - self.t0

    def line(self, kind: str, rest: str = "") -> None:
        data = f"{self.now()} {kind} {rest}\n".encode()
        with self.lock:
            if self.direct:
                os.write(self.fd, data)
                return
            self.buf.append(data)
            self.size += len(data)
            if self.size >= 1 << 16:
                self._write()

    def _write(self) -> None:
        if self.buf:
            data = b"".join(self.buf)
            self.buf.clear()
            self.size = 0
            while data:
                data = data[os.write(self.fd, data) :]

    def flush(self) -> None:
        with self.lock:
            self._write()

    def _flusher(self) -> None:
        while True:
            time.sleep(FLUSH_EVERY)
            self.flush()


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


_libc = ctypes.CDLL(None, use_errno=True)
try:
    _mallinfo2 = _libc.mallinfo2
    _mallinfo2.restype = _MallInfo2
except AttributeError:  # glibc before 2.33
    _mallinfo2 = None


def heap_bytes() -> int:
    """Bytes malloc has handed out and not had back (every arena, mmapped chunks too)."""
    if _mallinfo2 is None:
        return 0
    m = _mallinfo2()
    return int(m.uordblks + m.hblkhd)


def rss_kb_and_fds() -> Tuple[int, int]:
    rss = -1
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
    except OSError:
        pass
    try:
        fds = len(os.listdir("/proc/self/fd"))
    except OSError:
        fds = -1
    return rss, fds


class Ctx:
    """What every role has (``roles::Ctx``)."""

    def __init__(self, s: Settings, out: Out) -> None:
        self.s = s
        self.out = out
        self.proc = s.str("proc")
        self.inc = s.num("inc", 0)
        self.rng = Rng(s.num("seed", 1))
        self.dir = s.str("dir")
        self.events = s.str("events")
        self.t0 = out.t0
        self.stop = threading.Event()
        self.heap_open = 0
        self.max_msg = 0
        self.exiting = threading.Lock()

    def stopping(self) -> bool:
        return self.stop.is_set()

    def nap(self, seconds: float) -> bool:
        """Sleeps up to `seconds`, returning early (``False``) when asked to stop."""
        return not self.stop.wait(seconds)

    def mark_heap_open(self) -> None:
        self.heap_open = heap_bytes()

    def exit_line(self, outs: List[Out], forced: bool, extra: str = "") -> None:
        if not self.exiting.acquire(blocking=False):
            return
        rss, fds = rss_kb_and_fds()
        for out in outs:
            out.line(
                "exit",
                f"rss_kb={rss} fds={fds} heap_kb={heap_bytes() >> 10} heap_open_kb={self.heap_open >> 10} "
                f"max_msg={self.max_msg} forced={int(forced)}{extra}",
            )
            out.flush()


def die_with_parent(parent: int) -> bool:
    _libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    return os.getppid() == parent


def watch_stdin(ctx: Ctx, writer: bool, outs: List[Out]) -> None:
    """Sets the stop flag when stdin closes; ends the process by force after ``GRACE`` (a writer
    so ended logs ``forced``, not ``exit``, which would say every attempt of it is logged)."""

    def run() -> None:
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        ctx.stop.set()
        time.sleep(GRACE)
        if writer:
            ctx.out.line("forced")
        else:
            ctx.exit_line(outs, True)
        os._exit(0)

    threading.Thread(target=run, name="ledger-stdin", daemon=True).start()


def watchdog(ctx: Ctx, outs: List[Out], seconds: float) -> None:
    def run() -> None:
        time.sleep(seconds)
        ctx.out.line("deadline")
        ctx.exit_line(outs, True)
        os._exit(4)

    threading.Thread(target=run, name="ledger-deadline", daemon=True).start()


def token(s: object) -> str:
    return str(s).replace(" ", "-").replace("\n", "-")


# ---------------------------------------------------------------------------------------------
# The writer


def framed(length: int, mtu: int) -> int:
    """Log bytes a message takes (``StreamDef::framed``)."""
    payload = mtu - 32

    def align(n: int) -> int:
        return (n + 31) & ~31

    if length <= payload:
        return align(length + 32)
    full, rest = divmod(length, payload)
    return full * mtu + (align(rest + 32) if rest else 0)


def ends_of(start: int, lengths: List[int], term: int, mtu: int) -> List[int]:
    """Where each of a batch of messages appended from `start` ends: a message that does not fit
    in the rest of its term goes to the next term's start (the appender pads the rest)."""
    out = []
    pos = start
    for n in lengths:
        f = framed(n, mtu)
        off = pos % term
        if off + f > term:
            pos += term - off
        pos += f
        out.append(pos)
    return out


class Bucket:
    """Paces attempts: `rate` a second on average, up to `burst` at once."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst, self.tokens, self.last = rate, burst, burst, time.monotonic()

    async def take(self, ctx: Ctx, n: int = 1) -> bool:
        while True:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
            if self.tokens >= 1.0:
                self.tokens -= n
                return True
            if ctx.stopping():
                return False
            await asyncio.sleep(max((1.0 - self.tokens) / self.rate, 50e-6))


class Writer:
    def __init__(self, ctx: Ctx, pub: shmlog.Publication) -> None:
        self.ctx = ctx
        self.pub = pub
        self.out = ctx.out
        self.held: Optional[Tuple[int, str]] = None

    def streak(self, why: str) -> None:
        """A refusal streak ends when refusals stop, change reason, or grow long."""
        now = self.out.now()
        if self.held is not None:
            start, was = self.held
            if was != why or now - start >= HELD_PIECE_US:
                if now - start >= 1000:
                    self.out.line("held", f"from={start} to={now} why={was}")
                self.held = None
        if why and self.held is None:
            self.held = (now, why)

    def waited(self, since: int) -> None:
        """A call that waits while back-pressured (``offer_blocking``, ``send``) took from
        `since` to now: a streak of its own."""
        self.streak("")
        now = self.out.now()
        if now - since >= 1000:
            self.out.line("held", f"from={since} to={now} why=back_pressured")

    async def retry_pause(self, idle: int) -> None:
        if idle < 20:
            return
        await asyncio.sleep(0 if idle < 40 else 0.0002)

    async def one(self, op: str, seq: int, msg: bytes) -> None:
        """One attempt of one message, retried while refused for a retryable reason."""
        first = time.monotonic()
        idle = 0
        while True:
            why = ""
            try:
                try:
                    end = self.pub.offer(msg)
                except shmlog.BackPressured:
                    if op == "Offer":
                        raise
                    # The waiting calls are made once a plain offer was refused for back
                    # pressure, so that their time is a wait for room: a call that took long
                    # because the process was descheduled is no back pressure (R6.held).
                    since = self.out.now()
                    left = max(0.0, GIVE_UP_BACK_PRESSURE - (time.monotonic() - first))
                    try:
                        if op == "Blocking":
                            end = self.pub.offer_blocking(msg, timeout=left)
                        else:
                            end = await self.pub.send(msg, timeout=left)
                    finally:
                        self.waited(since)
            except shmlog.BackPressured:
                why = "back_pressured"
            except shmlog.NotConnected:
                why = "not_connected"
            except shmlog.ShmlogError as e:
                self.streak("")
                self.out.line("refused", f"seq={seq} why={type(e).__name__}")
                return
            if not why:
                self.streak("")
                self.out.line("ok", f"seq={seq} end={end} len={len(msg)} op={op}")
                return
            if op == "Offer" or why == "not_connected":
                self.streak(why)
            give_up = GIVE_UP_BACK_PRESSURE if why == "back_pressured" else GIVE_UP_NOT_CONNECTED
            if self.ctx.stopping() or time.monotonic() - first >= give_up:
                self.streak("")
                self.out.line("refused", f"seq={seq} why={why}")
                return
            idle += 1
            await self.retry_pause(idle)

    async def many(self, seq: int, msgs: List[bytes], mtu: int, term: int, patient: bool) -> None:
        """A batch through ``offer_many``: the first ones that fit each call, until all are in
        or a refusal lasts too long. Each message's end is computed from where the batch began
        and checked against the publication's position after it."""
        self.out.line("batch", f"from={seq} to={seq + len(msgs)}")
        first = time.monotonic()
        idle = 0
        i = 0
        while i < len(msgs):
            start = self.pub.position
            why = ""
            try:
                n = self.pub.offer_many(msgs[i:], timeout=0.02 if patient else 0.0)
            except shmlog.BackPressured:
                why, n = "back_pressured", 0
            except shmlog.NotConnected:
                why, n = "not_connected", 0
            except shmlog.ShmlogError as e:
                self.streak("")
                for k in range(i, len(msgs)):
                    self.out.line("refused", f"seq={seq + k} why={type(e).__name__}")
                return
            if n > 0:
                self.streak("")
                ends = ends_of(start, [len(m) for m in msgs[i : i + n]], term, mtu)
                after = self.pub.position
                for k in range(n):
                    self.out.line("ok", f"seq={seq + i + k} end={ends[k]} len={len(msgs[i + k])} op=Many")
                # A message that did not fit in the rest of the term leaves the term padded and
                # the call returns (the appender's rotation): the position is then the next
                # term's start, the messages' ends as computed.
                padded = after % term == 0 and ends[-1] < after <= ends[-1] + term - ends[-1] % term
                if ends[-1] != after and not padded:
                    # The rule above is wrong, and so would be every end logged: a crash, so the
                    # run fails with this on stderr rather than with a false R3.
                    print(f"offer_many from {start}: computed end {ends[-1]}, position {after}", file=sys.stderr)
                    os._exit(3)
                i += n
                first = time.monotonic()
                idle = 0
                continue
            self.streak(why)
            give_up = GIVE_UP_BACK_PRESSURE if why == "back_pressured" else GIVE_UP_NOT_CONNECTED
            if self.ctx.stopping() or time.monotonic() - first >= give_up:
                self.streak("")
                for k in range(i, len(msgs)):
                    self.out.line("refused", f"seq={seq + k} why={why}")
                return
            idle += 1
            await self.retry_pause(idle)

    async def run(self) -> int:
        ctx, s, pub = self.ctx, self.ctx.s, self.pub
        rng = ctx.rng.clone()
        session = pub.session_id
        max_message = pub.max_message_len
        mtu = min(64 * 1024, max_message)  # the publication's default (Python sets no MTU)
        term = pub.term_length
        self.out.line("start", f"role=writer session={session} max_payload={mtu - 32} max_message={max_message}")
        w = s.num("w", 0)
        # Python builds every body twice as slowly as it sends it: a rate a Rust writer keeps up
        # would make this one a busy loop of its own.
        bucket = Bucket(min(float(s.num("rate", 2000)), 8000.0), float(s.num("burst", 100)))
        allowed = s.str("pyops").split("+") if s.str("pyops") else ["Offer", "Blocking", "Many", "Send"]
        ops = [(wt, op) for wt, op in ((5, "Offer"), (2, "Blocking"), (2, "Many"), (3, "Send")) if op in allowed]
        largest = min(max_message, 2 * mtu)

        def length() -> int:
            r = rng.below(100)
            if r < 45:
                return HEADER + rng.below(17)
            if r < 85:
                return rng.range(HEADER, 257)
            if r < 98:
                return rng.range(256, 2049)
            return rng.range(mtu - 31, largest + 1)  # fragmented

        seq = 0
        while not ctx.stopping() and await bucket.take(ctx):
            op = rng.weighted(ops)
            if op == "Many":
                k = rng.range(2, 17)
                bucket.tokens -= k - 1
                msgs = [body.fill(Id(w, ctx.inc, session, seq + j), length()) for j in range(k)]
                await self.many(seq, msgs, mtu, term, rng.chance(0.5))
                seq += k
            else:
                await self.one(op, seq, body.fill(Id(w, ctx.inc, session, seq), length()))
                seq += 1
        if self.held is not None:
            start, why = self.held
            self.out.line("held", f"from={start} to={self.out.now()} why={why}")
        pub.close()
        self.out.line("exit")
        return 0


def writer(ctx: Ctx) -> int:
    s = ctx.s
    stream = s.str("stream")
    ctx.out.line(
        "creating", f"role=writer proc={ctx.proc} stream={stream} w={s.num('w', 0)} inc={ctx.inc} kind=exclusive"
    )
    # A predecessor's lock may take a moment to go (as for the Rust writer).
    deadline = time.monotonic() + 3.0
    while True:
        try:
            pub = shmlog.Publication(
                stream,
                ctx.dir,
                term_length=s.num("term", 1 << 16),
                liveness_interval=s.num("liveness_ms", 100) / 1000.0,
            )
            break
        except shmlog.AlreadyExists as e:
            if time.monotonic() >= deadline:
                ctx.out.line("nostart", f"why={token(e)}")
                return 0
            if not ctx.nap(0.01):
                return 0
        except shmlog.ShmlogError as e:
            ctx.out.line("nostart", f"why={token(e)}")
            return 0
    return asyncio.run(Writer(ctx, pub).run())


# ---------------------------------------------------------------------------------------------
# Readers


LOSS_CAUSES = {
    "joined-late": "JoinedLate",
    "lapped": "Lapped",
    "fault": "Fault",
    "purged": "Purged",
    "not-recorded": "NotRecorded",
}


class Tracker:
    """One reading file's state (``roles::Tracker``): the session it last reported, and what it
    reported of it."""

    def __init__(self, ctx: Ctx, out: Out, speed: str, rng: Rng) -> None:
        self.ctx = ctx
        self.out = out
        self.session: Optional[int] = None
        self.closed_session: Optional[int] = None
        self.faults = 0
        self.closes = 0
        self.count = 0
        self.work_us = 0
        self.slow_every = 0
        r = rng.clone()
        if speed == "work":
            self.work_us = r.range(1, 50)
        elif speed == "slow":
            self.slow_every = r.range(1, 20)

    def joined(self, session: int, at: Optional[int]) -> None:
        if self.session == session:
            return
        self.end_faults()
        self.session = session
        self.out.line("joined", f"session={session} at={'-' if at is None else at}")

    def message(self, m: bytes, session: Optional[int]) -> None:
        n = len(m)
        if n > self.ctx.max_msg:
            self.ctx.max_msg = n
        try:
            i = body.check(m, regenerate=n <= REGENERATE_UP_TO)
        except ValueError as e:
            self.out.line("corrupt", f"why={e} end=- len={n}")
            return
        if session is None:
            self.joined(i.session, None)
        elif self.session != session:
            self.out.line("bad", f"why=delivered-in-session-{session}-while-joined-to-{self.session} end=-")
        self.out.line("msg", f"w={i.writer} inc={i.inc} seq={i.seq} end=-")
        self.count += 1
        if self.work_us:
            until = time.perf_counter() + self.work_us / 1e6
            while time.perf_counter() < until:
                pass
        elif self.slow_every and self.count % self.slow_every == 0:
            time.sleep(0.001)

    def loss(self, loss: shmlog.Loss) -> None:
        cause = LOSS_CAUSES.get(loss.cause)
        if cause is None:
            cause = f"SessionsMissed:{loss.sessions or 1}" if loss.cause == "sessions-missed" else "Other"
        self.out.line("loss", f"session={loss.session_id} from={loss.from_} to={loss.to} cause={cause}")

    def closed(self) -> int:
        if self.session is not None and self.closed_session != self.session:
            self.out.line("closed", f"session={self.session}")
            self.closed_session = self.session
        self.closes += 1
        return self.closes

    def fault(self, why: str) -> int:
        self.faults += 1
        if self.faults == 1:
            s = "-" if self.session is None else self.session
            self.out.line(
                "fault",
                f"session={s} why={token(why)} heap_kb={heap_bytes() >> 10} heap_open_kb={self.ctx.heap_open >> 10}",
            )
        return self.faults

    def end_faults(self) -> None:
        s = "-" if self.session is None else self.session
        if self.faults:
            self.out.line("faults", f"session={s} n={self.faults}")
        if self.closes:
            self.out.line("closes", f"session={s} n={self.closes}")
        self.faults = self.closes = 0


def back_off(n: int) -> None:
    if n > SPIN_COUNTED:
        time.sleep(0.001)


def observe(sub: shmlog.Subscription, t: Tracker, session_too: bool = True) -> None:
    """What the subscription says between receives: its session (shapes that ask) and losses."""
    if session_too:
        s = sub.session_id
        if s is not None:
            t.joined(s, sub.join_position)
    while True:
        loss = sub.take_loss()
        if loss is None:
            return
        t.loss(loss)


def fault_of(sub: shmlog.Subscription, e: BaseException) -> str:
    try:
        why = sub.fault
    except shmlog.ShmlogError:
        why = None
    return why or str(e)


def open_sub(ctx: Ctx, t: Tracker, stream: str, liveness_key: str) -> Optional[shmlog.Subscription]:
    """Opens the subscription (``opened``, or ``nostart``); an explicit position is asked of a
    running session only, then the nearest message start the refusal names (as the Rust reader)."""
    s = ctx.s
    join = {"latest": "latest", "slowest": "slowest", "position": 0}.get(s.str("join"), "earliest")
    asked = join
    tries = 0
    while True:
        try:
            sub = shmlog.Subscription(
                stream,
                ctx.dir,
                join=asked,
                liveness_interval=s.num(liveness_key, 100) / 1000.0,
                copy_payloads=s.flag("copy"),
                tethered=s.num("tethered", 1) == 1,
                on_lapped="live" if s.str("lapped") == "live" else "oldest",
            )
        except shmlog.PositionNotAvailable as e:
            if tries < 5:
                tries += 1
                asked = e.nearest
            else:
                tries = 0
                asked = join
            continue
        except shmlog.ShmlogError as e:
            t.out.line("nostart", f"why={token(e)}")
            return None
        if isinstance(asked, int) and sub.session_id is None:
            sub.close()
            if not ctx.nap(0.02):
                return None
            continue
        t.out.line("opened", f"join={'position' if isinstance(asked, int) else s.str('join') or 'earliest'}")
        return sub


class Reader:
    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        s = ctx.s
        self.shape = s.str("shape")
        self.limit = s.num("limit", 16)
        self.timeout = ctx.rng.clone().range(1, 50) / 1000.0

    def tracker(self, out: Out, stream: str) -> Tracker:
        s, ctx = self.ctx.s, self.ctx
        out.line(
            "start",
            f"role=reader proc={ctx.proc} inc={ctx.inc} stream={stream} shape={self.shape} "
            f"tethered={s.num('tethered', 1)} join={s.str('join')} later=earliest copy={s.num('copy', 0)} "
            f"speed={s.str('speed')} limit={self.limit} lapped={s.str('lapped')}",
        )
        rng = ctx.rng.clone()
        return Tracker(ctx, out, s.str("speed"), rng.fork(7))

    def finish(self, ts: List[Tracker]) -> int:
        for t in ts:
            t.end_faults()
        self.ctx.exit_line([t.out for t in ts], False)
        return 0

    def run(self) -> int:
        ctx = self.ctx
        t = self.tracker(ctx.out, ctx.s.str("stream"))
        sub = open_sub(ctx, t, ctx.s.str("stream"), "liveness_ms")
        if sub is None:
            return 0
        if self.shape == "py-wait_any":
            out2 = Out(os.path.join(ctx.events, f"{ctx.proc}~2.log"), ctx.t0, False)
            t2 = self.tracker(out2, ctx.s.str("stream2"))
            sub2 = open_sub(ctx, t2, ctx.s.str("stream2"), "liveness2_ms")
            if sub2 is None:
                return 0
            watch_outs.append(out2)
            return self.wait_any([(sub, t), (sub2, t2)])
        loops: dict = {
            "py-recv": self.recv,
            "py-iter": self.iterate,
            "py-many": self.recv_many,
            "py-poll": self.poll,
        }
        if self.shape in loops:
            return loops[self.shape](sub, t)
        if self.shape in ("py-async", "py-aiter", "py-many-async"):
            return asyncio.run(self.asynchronous(sub, t))
        t.out.line("nostart", f"why=unknown-shape-{self.shape}")
        return 0

    def answer(self, sub: shmlog.Subscription, t: Tracker, e: BaseException) -> None:
        """A receive raised the end of a session or a fault: logged, counted (a spin shows)."""
        observe(sub, t)
        if isinstance(e, shmlog.Fault):
            back_off(t.fault(fault_of(sub, e)))
        else:
            back_off(t.closed())

    def recv(self, sub: shmlog.Subscription, t: Tracker) -> int:
        self.ctx.mark_heap_open()
        while not self.ctx.stopping():
            try:
                m = sub.recv(self.timeout)
            except (shmlog.Closed, shmlog.Fault) as e:
                self.answer(sub, t, e)
                continue
            observe(sub, t)
            if m is not None:
                t.message(m, sub.session_id)
        return self.finish([t])

    def iterate(self, sub: shmlog.Subscription, t: Tracker) -> int:
        """``for msg in sub``, which ends when the session does; the loop then iterates again
        (which waits for the next session). Blocks without a timeout: a stop lands after GRACE."""
        self.ctx.mark_heap_open()
        while not self.ctx.stopping():
            try:
                for m in sub:
                    observe(sub, t)
                    t.message(m, sub.session_id)
                    if self.ctx.stopping():
                        break
                else:
                    observe(sub, t)
                    back_off(t.closed())
            except shmlog.Fault as e:
                self.answer(sub, t, e)
        return self.finish([t])

    def recv_many(self, sub: shmlog.Subscription, t: Tracker) -> int:
        self.ctx.mark_heap_open()
        while not self.ctx.stopping():
            try:
                batch = sub.recv_many(self.limit, self.timeout)
            except (shmlog.Closed, shmlog.Fault) as e:
                self.answer(sub, t, e)
                continue
            observe(sub, t)
            s = sub.session_id
            for m in batch:
                t.message(m, s)
        return self.finish([t])

    def poll(self, sub: shmlog.Subscription, t: Tracker) -> int:
        got: List[bytes] = []
        nap = 0.0
        self.ctx.mark_heap_open()
        while not self.ctx.stopping():
            try:
                n = sub.poll(got.append, self.limit)
            except (shmlog.Closed, shmlog.Fault) as e:
                self.answer(sub, t, e)
                continue
            observe(sub, t)
            s = sub.session_id
            for m in got:
                t.message(m, s)
            got.clear()
            if n:
                nap = 0.0
            else:
                nap = min(max(nap * 2, 20e-6), 0.001)
                time.sleep(nap)
        return self.finish([t])

    async def asynchronous(self, sub: shmlog.Subscription, t: Tracker) -> int:
        """asyncio: ``recv_async``, ``async for`` (ends with the session; iterated again), or
        ``recv_many_async``. Sessions are learned from the messages, as the Rust async reader
        does (the subscription is not asked between awaits)."""
        self.ctx.mark_heap_open()
        while not self.ctx.stopping():
            try:
                if self.shape == "py-async":
                    m = await sub.recv_async(self.timeout)
                    observe(sub, t, False)
                    if m is not None:
                        t.message(m, None)
                elif self.shape == "py-many-async":
                    batch = await sub.recv_many_async(self.limit, self.timeout)
                    observe(sub, t, False)
                    for m in batch:
                        t.message(m, None)
                else:
                    async for m in sub:
                        observe(sub, t, False)
                        t.message(m, None)
                        if self.ctx.stopping():
                            break
                    else:
                        observe(sub, t, False)
                        back_off(t.closed())
            except shmlog.Closed:
                observe(sub, t, False)
                back_off(t.closed())
            except shmlog.Fault as e:
                observe(sub, t, False)
                back_off(t.fault(fault_of(sub, e)))
        return self.finish([t])

    def wait_any(self, pairs: List[Tuple[shmlog.Subscription, Tracker]]) -> int:
        """``shmlog.wait_any`` over two streams, then ``recv_many(timeout=0)`` of each ready one.
        Wake-ups that found nothing to receive are counted (``empty=`` on the exit line)."""
        subs = [p[0] for p in pairs]
        trackers = {id(sub): t for sub, t in pairs}
        empty = 0
        self.ctx.mark_heap_open()
        while not self.ctx.stopping():
            for sub in shmlog.wait_any(subs, self.timeout):
                t = trackers[id(sub)]
                # The session that woke it (one that may end in the receive below).
                observe(sub, t)
                try:
                    batch = sub.recv_many(self.limit, timeout=0)
                except (shmlog.Closed, shmlog.Fault) as e:
                    self.answer(sub, t, e)
                    continue
                observe(sub, t)
                if not batch:
                    empty += 1
                s = sub.session_id
                for m in batch:
                    t.message(m, s)
        ts = [p[1] for p in pairs]
        for t in ts:
            t.end_faults()
        self.ctx.exit_line([t.out for t in ts], False, f" empty={empty}")
        return 0


def persistent(ctx: Ctx) -> int:
    """A persistent reader (``roles::persistent``): killed and started again under its durable
    name, it resumes where the name's stored position says."""
    s = ctx.s
    stream, name, shape = s.str("stream"), s.str("name"), s.str("shape")
    # The core's receiver reads 64 fragments at a time: what a kill may deliver again.
    ctx.out.line(
        "start",
        f"role=persistent proc={ctx.proc} inc={ctx.inc} stream={stream} name={name} shape=persistent-{shape} "
        f"tethered=0 join=earliest speed={s.str('speed')} limit=64",
    )
    try:
        sub = shmlog.PersistentSubscription(
            s.str("journal"),
            name,
            stream=stream,
            dir=ctx.dir,
            start="earliest",
            liveness_interval=s.num("liveness_ms", 100) / 1000.0,
        )
    except shmlog.ShmlogError as e:
        ctx.out.line("nostart", f"why={token(e)}")
        return 0
    ctx.out.line("opened", "join=earliest")
    t = Tracker(ctx, ctx.out, s.str("speed"), ctx.rng.clone().fork(7))
    stored = sub.position
    timeout = ctx.rng.clone().range(1, 50) / 1000.0

    def got(m: Optional[bytes]) -> None:
        # Stored inside the receive, before this message; its losses lie before it too.
        nonlocal stored
        now = sub.position
        if now != stored:
            stored = now
            if now is not None:
                ctx.out.line("pos", f"rec={now[0]} at={now[1]}")
        while True:
            loss = sub.take_loss()
            if loss is None:
                break
            t.loss(loss)
        if m is not None:
            t.message(m, None)

    ctx.mark_heap_open()
    it = iter(sub)
    while not ctx.stopping():
        try:
            if shape == "py-recv":
                got(sub.recv(timeout))
            elif shape == "py-poll":
                if sub.poll(got, 16) == 0:
                    got(None)
                    time.sleep(0.001)
            else:
                got(next(it))
        except shmlog.Closed:
            break
        except shmlog.ShmlogError as e:
            t.out.line("bad", f"why=persistent-receive:{token(e)}")
            ctx.nap(0.01)
    t.end_faults()
    ctx.exit_line([t.out], False)
    return 0


watch_outs: List[Out] = []


def main(argv: List[str]) -> int:
    if len(argv) < 4 or argv[1] != "role":
        print("usage: role.py role <writer|reader> <settings>", file=sys.stderr)
        return 2
    kind, s = argv[2], Settings(argv[3])
    if not die_with_parent(s.num("parent", 0)):
        return 0
    t0 = s.num("t0", mono_us())
    # A persistent reader's file is exact too (``roles::run``).
    out = Out(os.path.join(s.str("events"), f"{s.str('proc')}.log"), t0, kind in ("writer", "persistent"))
    ctx = Ctx(s, out)
    watch_outs.append(out)
    watch_stdin(ctx, kind == "writer", watch_outs)
    watchdog(ctx, watch_outs, s.num("deadline_ms", 120_000) / 1000.0)
    roles: dict = {"writer": writer, "reader": lambda c: Reader(c).run(), "persistent": persistent}
    if kind not in roles:
        print(f"unknown role {kind}", file=sys.stderr)
        return 2
    return roles[kind](ctx)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
