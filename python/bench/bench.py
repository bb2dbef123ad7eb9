#!/usr/bin/env python3
"""shmlog from Python against pyzmq, measured the same way for both, in one run.

Every test runs a Python publisher process and Python subscriber processes on one host, with
64-byte messages one way, and each transport once per round, alternating which goes first:

  * throughput: as fast as they go, one message per call (`offer` / `for msg in sub`; pyzmq
    `send` / `recv`), and shmlog with its batch calls (`offer_many` / `recv_many`).
    Throughput = messages received / (the subscriber's time at its last message - the
    publisher's time at its first send): the whole transfer, not the tail a late reader sees.
  * latency at 10 000 msg/s: one-way, the publisher's CLOCK_MONOTONIC stamp in the message read
    again by the subscriber when it has the message; p50 / p99, and the subscriber's CPU.
  * fan-out: 8 subscribers at 1 000 msg/s; p50 / p99 over all of them, and their CPU in all.

The two latency tests also run shmlog's asyncio receive (`async for m in sub` on an asyncio
loop, which sleeps on the stream's wake FIFO through `add_reader`, issue 33) beside its blocking
one (`for m in sub`): the goal is p50, p99 and CPU within 1.25x the blocking receive's. Beside
them run the floors: the same messages through a FIFO per subscriber, read blocking and awaited
through `add_reader`, nothing of shmlog in either: their ratio is the least asyncio itself adds.

pyzmq is PUB/SUB over ipc:// without high-water-mark drops (every message is delivered, as
with shmlog). The goals (issue 34): throughput >= 5x pyzmq one message per call and >= 8x with
batch calls, p50 <= 0.3x, fan-out p50 <= 0.5x and subscriber CPU <= pyzmq's.

  python bench.py                # full run: 3 rounds (a few minutes)
  python bench.py --rounds 5
  python bench.py --smoke        # CI: checks that every path runs; figures too short to judge
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
import uuid

import shmlog

try:
    import zmq
except ImportError:  # the comparison is skipped, said so in the output
    zmq = None

SIZE = 64
STAMP = struct.Struct("<QQ")  # sequence number, send time (ns, CLOCK_MONOTONIC)
BATCH = 256
MARKER = b"W"  # pyzmq's slow-joiner markers, not messages
now = time.perf_counter_ns  # CLOCK_MONOTONIC: one clock for every process of the host


def message(seq: int, stamp: int = 0) -> bytes:
    return STAMP.pack(seq, stamp) + bytes(SIZE - STAMP.size)


def pace(rate: float, seq: int, start: int) -> int:
    """Waits for message `seq`'s slot (sleeping, then spinning the last 200 us); its time."""
    due = start + int(seq * 1e9 / rate)
    while True:
        t = now()
        if t >= due:
            return t
        if due - t > 200_000:
            time.sleep((due - t - 200_000) / 1e9)


# ---- one test's plan ---------------------------------------------------------------------------


class Plan:
    """What a publisher sends and its subscribers measure."""

    def __init__(self, n: int, rate: float = 0.0, readers: int = 1, batch: bool = False, aio: bool = False):
        self.n, self.rate, self.readers, self.batch, self.aio = n, rate, readers, batch, aio


def report(out, t_last: int, lat: list, cpu: float, wall: float):
    out.put((t_last, lat, cpu, wall))


# ---- shmlog --------------------------------------------------------------------------------------


def shmlog_publisher(name, dir, plan: Plan, created, go, first):
    pub = shmlog.Publication(name, dir)
    created.set()
    pub.wait_for_readers(plan.readers, timeout=60)
    go.wait(60)
    if plan.batch:
        msgs = [message(0)] * BATCH
        first.value = now()
        sent = 0
        while sent < plan.n:
            sent += pub.offer_many(msgs[: min(BATCH, plan.n - sent)], timeout=None)
    elif plan.rate:
        start = first.value = now()
        for i in range(plan.n):
            pub.offer_blocking(message(i, pace(plan.rate, i, start)), timeout=30)
    else:
        msg = message(0)
        first.value = now()
        for _ in range(plan.n):
            try:
                pub.offer(msg)
            except shmlog.BackPressured:
                pub.offer_blocking(msg, timeout=30)
    pub.close()


def shmlog_subscriber(name, dir, plan: Plan, ready, out):
    sub = shmlog.Subscription(name, dir)
    sub.wait_connected(timeout=60)
    ready.release()
    lat = []
    c0, w0 = time.process_time(), time.monotonic()
    got = 0
    if plan.batch:
        while got < plan.n:
            got += len(sub.recv_many(4096))
    elif plan.rate and plan.aio:

        async def consume() -> int:
            n = 0
            async for m in sub:
                lat.append(now() - STAMP.unpack_from(m)[1])
                n += 1
                if n == plan.n:
                    break
            return n

        got = asyncio.run(consume())
    elif plan.rate:
        for m in sub:
            lat.append(now() - STAMP.unpack_from(m)[1])
            got += 1
            if got == plan.n:
                break
    else:
        for _ in sub:
            got += 1
            if got == plan.n:
                break
    t_last = now()
    report(out, t_last, lat, time.process_time() - c0, time.monotonic() - w0)
    sub.close()


def run_shmlog(ctx, plan: Plan):
    dir = tempfile.mkdtemp(prefix="shmlog-py-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    name = f"bench-{uuid.uuid4().hex[:8]}"
    created, go, ready = ctx.Event(), ctx.Event(), ctx.Semaphore(0)
    first, out = ctx.Value("q", 0), ctx.Queue()
    try:
        p = ctx.Process(target=shmlog_publisher, args=(name, dir, plan, created, go, first))
        p.start()
        created.wait(60)
        subs = [ctx.Process(target=shmlog_subscriber, args=(name, dir, plan, ready, out)) for _ in range(plan.readers)]
        return collect(p, subs, ready, go, first, out, plan)
    finally:
        shutil.rmtree(dir, ignore_errors=True)


def run_shmlog_aio(ctx, plan: Plan):
    return run_shmlog(ctx, Plan(plan.n, plan.rate, plan.readers, plan.batch, aio=True))


# ---- the floors: a pipe per subscriber, no protocol ---------------------------------------------
#
# What a wake-up costs Python with nothing of shmlog's: the publisher writes each stamped message
# into a FIFO per subscriber; a blocking subscriber reads it (one system call that sleeps), an
# asyncio subscriber awaits it through ``loop.add_reader`` (the callback reads what is there and
# sets the future the task awaits: the least a task woken by a descriptor costs). Their ratio is
# the least asyncio adds to a blocking receive on this machine.


def pipe_publisher(fifos, plan: Plan, created, go, first):
    created.set()
    go.wait(60)
    fds = [os.open(f, os.O_WRONLY) for f in fifos]  # every subscriber holds its FIFO open
    start = first.value = now()
    for i in range(plan.n):
        m = message(i, pace(plan.rate, i, start))
        for fd in fds:
            os.write(fd, m)
    for fd in fds:
        os.close(fd)


def pipe_subscriber(fifo, plan: Plan, ready, out):
    # Read-write: a FIFO with no writer yet would read as at its end.
    fd = os.open(fifo, os.O_RDWR | (os.O_NONBLOCK if plan.aio else 0))
    ready.release()
    lat = []
    c0, w0 = time.process_time(), time.monotonic()
    if plan.aio:

        async def consume() -> None:
            loop = asyncio.get_running_loop()
            box: list = [None, b""]

            def on_readable() -> None:
                box[1] += os.read(fd, SIZE * 256)
                if box[0] is not None and not box[0].done():
                    box[0].set_result(None)

            loop.add_reader(fd, on_readable)
            while len(lat) < plan.n:
                if len(box[1]) < SIZE:
                    box[0] = loop.create_future()
                    await box[0]
                    continue
                m, box[1] = box[1][:SIZE], box[1][SIZE:]
                lat.append(now() - STAMP.unpack_from(m)[1])
            loop.remove_reader(fd)

        asyncio.run(consume())
    else:
        while len(lat) < plan.n:
            m = os.read(fd, SIZE)  # the publisher writes whole messages (< PIPE_BUF: atomic)
            lat.append(now() - STAMP.unpack_from(m)[1])
    t_last = now()
    report(out, t_last, lat, time.process_time() - c0, time.monotonic() - w0)
    os.close(fd)


def run_pipe(ctx, plan: Plan):
    dir = tempfile.mkdtemp(prefix="shmlog-py-bench-pipe-")
    fifos = [os.path.join(dir, f"fifo{i}") for i in range(plan.readers)]
    for f in fifos:
        os.mkfifo(f)
    created, go, ready = ctx.Event(), ctx.Event(), ctx.Semaphore(0)
    first, out = ctx.Value("q", 0), ctx.Queue()
    try:
        p = ctx.Process(target=pipe_publisher, args=(fifos, plan, created, go, first))
        p.start()
        created.wait(60)
        subs = [ctx.Process(target=pipe_subscriber, args=(f, plan, ready, out)) for f in fifos]
        return collect(p, subs, ready, go, first, out, plan)
    finally:
        shutil.rmtree(dir, ignore_errors=True)


def run_pipe_aio(ctx, plan: Plan):
    return run_pipe(ctx, Plan(plan.n, plan.rate, plan.readers, plan.batch, aio=True))


# ---- pyzmq PUB/SUB -----------------------------------------------------------------------------


def zmq_publisher(endpoint, plan: Plan, created, go, first, joined):
    zctx = zmq.Context()
    s = zctx.socket(zmq.PUB)
    s.setsockopt(zmq.SNDHWM, 0)  # never drop: every message is delivered, as with shmlog
    s.bind(endpoint)
    created.set()
    # PUB/SUB's slow joiner: markers until every subscriber has seen one.
    while joined.value < plan.readers:
        s.send(MARKER)
        time.sleep(0.001)
    go.wait(60)
    if plan.rate:
        start = first.value = now()
        for i in range(plan.n):
            s.send(message(i, pace(plan.rate, i, start)))
    else:
        msg = message(0)
        first.value = now()
        for _ in range(plan.n):
            s.send(msg)
    s.close(linger=-1)
    zctx.term()


def zmq_subscriber(endpoint, plan: Plan, ready, out, joined):
    zctx = zmq.Context()
    s = zctx.socket(zmq.SUB)
    s.setsockopt(zmq.RCVHWM, 0)
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.connect(endpoint)
    s.recv()  # a marker: joined
    with joined.get_lock():
        joined.value += 1
    ready.release()
    lat = []
    c0, w0 = time.process_time(), time.monotonic()
    got = 0
    while got < plan.n:
        m = s.recv()
        if m == MARKER:
            continue
        if plan.rate:
            lat.append(now() - STAMP.unpack_from(m)[1])
        got += 1
    t_last = now()
    report(out, t_last, lat, time.process_time() - c0, time.monotonic() - w0)
    s.close(linger=0)
    zctx.term()


def run_zmq(ctx, plan: Plan):
    dir = tempfile.mkdtemp(prefix="shmlog-py-bench-zmq-")
    endpoint = f"ipc://{dir}/sock"
    created, go, ready = ctx.Event(), ctx.Event(), ctx.Semaphore(0)
    first, out, joined = ctx.Value("q", 0), ctx.Queue(), ctx.Value("i", 0)
    try:
        p = ctx.Process(target=zmq_publisher, args=(endpoint, plan, created, go, first, joined))
        p.start()
        created.wait(60)
        subs = [ctx.Process(target=zmq_subscriber, args=(endpoint, plan, ready, out, joined)) for _ in range(plan.readers)]
        return collect(p, subs, ready, go, first, out, plan)
    finally:
        shutil.rmtree(dir, ignore_errors=True)


# ---- measuring -----------------------------------------------------------------------------------


class Result:
    def __init__(self, throughput: float, lat: list, cpu: float):
        self.throughput, self.lat, self.cpu = throughput, lat, cpu

    def pct(self, p: float) -> float:
        s = sorted(self.lat)
        return s[min(len(s) - 1, int(len(s) * p / 100))] / 1e3 if s else float("nan")


def collect(pub, subs, ready, go, first, out, plan: Plan) -> Result:
    for s in subs:
        s.start()
    for _ in subs:
        if not ready.acquire(timeout=60):
            raise RuntimeError("a subscriber did not start")
    go.set()
    results = [out.get(timeout=300) for _ in subs]
    for proc in [pub, *subs]:
        proc.join(60)
        if proc.exitcode != 0:
            raise RuntimeError(f"{proc.name} exited with {proc.exitcode}")
    t_last = max(r[0] for r in results)
    throughput = plan.n / ((t_last - first.value) / 1e9)
    lat = [x for r in results for x in r[1]]
    cpu = sum(r[2] / r[3] for r in results)  # each subscriber's CPU / its wall time, summed
    return Result(throughput, lat, cpu)


def verdict(ratio: float, goal: float, at_most: bool) -> str:
    ok = ratio <= goal if at_most else ratio >= goal
    return f"(goal {'<=' if at_most else '>='} {goal}x: {'met' if ok else 'NOT met'})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="a short run that checks every path works")
    ap.add_argument("--rounds", type=int, help="rounds of every test (default 3; smoke 1)")
    ap.add_argument("--messages", type=int, help="messages per throughput run (default 1 000 000)")
    ap.add_argument("--latency", action="store_true", help="only the two latency tests, with their floors")
    args = ap.parse_args()
    smoke = args.smoke
    rounds = args.rounds or (1 if smoke else 3)
    n = args.messages or (20_000 if smoke else 1_000_000)
    lat_n = 500 if smoke else 20_000  # at 10 000 msg/s: 2 s
    fan_n = 100 if smoke else 3_000  # at 1 000 msg/s: 3 s
    ctx = mp.get_context("spawn")
    print(
        f"shmlog Python bench{' (SMOKE: too short to judge anything)' if smoke else ''}: {SIZE}-byte "
        f"messages, Python processes, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
        f"Python {sys.version.split()[0]}, shmlog {shmlog.__version__}, "
        f"pyzmq {zmq.__version__ if zmq else '(not installed)'}, {time.strftime('%Y-%m-%d %H:%M')}"
    )
    if zmq is None:
        print("pyzmq is not installed (pip install pyzmq): shmlog alone, no ratios")
    tests = [
        ("throughput, 1 message per call", Plan(n), True),
        ("throughput, batch calls", Plan(n * 5, batch=True), False),
        ("10 000 msg/s one way", Plan(lat_n, rate=10_000.0), True),
        ("8 subscribers at 1 000 msg/s", Plan(fan_n, rate=1_000.0, readers=8), True),
    ]
    if args.latency:
        tests = [t for t in tests if t[1].rate]
    results: dict = {}
    for r in range(rounds):
        for label, plan, with_zmq in tests:
            runs = [("shmlog", run_shmlog)] + ([("pyzmq", run_zmq)] if with_zmq and zmq else [])
            if plan.rate:
                runs += [("asyncio", run_shmlog_aio), ("floor", run_pipe), ("aiofloor", run_pipe_aio)]
            if r % 2:
                runs.reverse()  # alternate which goes first
            for who, run in runs:
                res = run(ctx, plan)
                results.setdefault((label, who), []).append(res)
                if plan.rate:
                    print(
                        f"round {r + 1} {label:32} {who:8} p50 {res.pct(50):8.1f} us  p99 {res.pct(99):8.1f} us  "
                        f"subscriber CPU {res.cpu * 100:5.1f} %"
                    )
                else:
                    print(f"round {r + 1} {label:32} {who:8} {res.throughput / 1e6:7.3f} M msg/s")
    print("medians over the rounds, shmlog's asyncio receive / its blocking receive:")
    med = lambda key, f: statistics.median(f(x) for x in results[key])  # noqa: E731
    for label in ("10 000 msg/s one way", "8 subscribers at 1 000 msg/s"):
        if smoke:
            break
        ratio = lambda f: med((label, "asyncio"), f) / med((label, "shmlog"), f)  # noqa: E731
        p50, p99, c = ratio(lambda x: x.pct(50)), ratio(lambda x: x.pct(99)), ratio(lambda x: x.cpu)
        print(f"  {label:32} p50 {p50:5.2f}x {verdict(p50, 1.25, True)}   p99 {p99:5.2f}x {verdict(p99, 1.25, True)}   "
              f"subscriber CPU {c:5.2f}x {verdict(c, 1.25, True)}")
        # The floor: what asyncio adds to a blocking read of a pipe, nothing of shmlog in it.
        for what, num, den in (("asyncio floor / blocking floor", "aiofloor", "floor"),
                               ("shmlog asyncio / asyncio floor", "asyncio", "aiofloor")):
            r = lambda f: med((label, num), f) / med((label, den), f)  # noqa: E731
            print(f"  {'':32} {what}: p50 {r(lambda x: x.pct(50)):5.2f}x   p99 {r(lambda x: x.pct(99)):5.2f}x   "
                  f"subscriber CPU {r(lambda x: x.cpu):5.2f}x")
    if smoke:
        # A few thousand messages measure start-up, not transfer: no ratio, no goal verdict.
        print("smoke run: every path ran; no ratios (too short to judge; run without --smoke)")
        return 0
    if zmq is None:
        return 0
    print("medians over the rounds, shmlog / pyzmq PUB/SUB:")
    throughputs = [] if args.latency else ["throughput, 1 message per call", "throughput, batch calls"]
    for label in throughputs:
        zt = med(("throughput, 1 message per call", "pyzmq"), lambda x: x.throughput)
        t = med((label, "shmlog"), lambda x: x.throughput) / zt
        goal = 8 if "batch" in label else 5
        print(f"  {label:32} {t:6.2f}x {verdict(t, goal, False)}")
    for label, goal in (("10 000 msg/s one way", 0.3), ("8 subscribers at 1 000 msg/s", 0.5)):
        p = med((label, "shmlog"), lambda x: x.pct(50)) / med((label, "pyzmq"), lambda x: x.pct(50))
        c = med((label, "shmlog"), lambda x: x.cpu) / med((label, "pyzmq"), lambda x: x.cpu)
        print(f"  {label:32} p50 {p:5.2f}x {verdict(p, goal, True)}   "
              f"subscriber CPU {c:5.2f}x {verdict(c, 1.0, True)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
