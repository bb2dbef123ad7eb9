#!/usr/bin/env python3
"""shmlog from Python against what Python users pick today, in the same run.

Two processes on one host, a Python publisher and a Python subscriber:
  * throughput: 64-byte messages one way, as fast as they go (measured at the subscriber, from
    its first message to its last);
  * latency: 64-byte messages at 1 000 msg/s, one way (the publisher's CLOCK_MONOTONIC stamp in
    the message, read again by the subscriber when it has the message), p50 / p90 / p99.
Transports: shmlog (blocking iteration: the receiver sleeps on the stream's doorbell), pyzmq PUB/SUB over ipc://, and
multiprocessing.Queue. Ratios are printed against pyzmq, with the issue's goals (throughput
>= 5x pyzmq, p50 latency <= 0.5x pyzmq).

  python bench.py            # full run (about a minute)
  python bench.py --smoke    # a few thousand messages each: checks the script runs (CI)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
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


def message(seq: int, stamp: int = 0) -> bytes:
    return STAMP.pack(seq, stamp) + bytes(SIZE - STAMP.size)


def pace(rate: float, seq: int, start: int) -> int:
    """Waits for message `seq`'s slot (sleeping, then spinning the last 200 us); its time."""
    due = start + int(seq * 1e9 / rate)
    while True:
        now = time.perf_counter_ns()
        if now >= due:
            return now
        if due - now > 200_000:
            time.sleep((due - now - 200_000) / 1e9)


# ---- senders (run in a child process) --------------------------------------------------------


def shmlog_sender(name, dir, n, rate, ready):
    pub = shmlog.Publication(name, dir)
    pub.wait_connected(timeout=30)
    ready.set()
    msg = message(0)
    start = time.perf_counter_ns()
    for i in range(n):
        if rate:
            msg = message(i, pace(rate, i, start))
        try:
            pub.offer(msg)
        except shmlog.BackPressured:
            pub.offer_blocking(msg, timeout=30)
    pub.close()


def zmq_sender(endpoint, n, rate, ready, joined):
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUB)
    s.setsockopt(zmq.SNDHWM, 0)  # never drop: every message is delivered, as with the others
    s.connect(endpoint)
    # PUB/SUB's slow joiner: send markers until the subscriber has seen one.
    while not joined.is_set():
        s.send(b"W")
        joined.wait(0.001)
    ready.set()
    msg = message(0)
    start = time.perf_counter_ns()
    for i in range(n):
        if rate:
            msg = message(i, pace(rate, i, start))
        s.send(msg)
    s.close(linger=-1)
    ctx.term()


def queue_sender(q, n, rate, ready):
    ready.set()
    msg = message(0)
    start = time.perf_counter_ns()
    for i in range(n):
        if rate:
            msg = message(i, pace(rate, i, start))
        q.put(msg)


# ---- receivers (in this process) --------------------------------------------------------------


def receive(get, n: int, latency: bool):
    """Takes n messages with `get`; returns (messages per second, latencies in ns)."""
    lat = []
    first = get()
    t0 = time.perf_counter_ns()
    if latency:
        lat.append(t0 - STAMP.unpack_from(first)[1])
    for _ in range(n - 1):
        m = get()
        if latency:
            lat.append(time.perf_counter_ns() - STAMP.unpack_from(m)[1])
    t1 = time.perf_counter_ns()
    return (n - 1) / ((t1 - t0) / 1e9), lat


def run_shmlog(ctx, n, rate):
    dir = tempfile.mkdtemp(prefix="shmlog-py-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    name = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        sub = shmlog.Subscription(name, dir)
        ready = ctx.Event()
        p = ctx.Process(target=shmlog_sender, args=(name, dir, n, rate, ready))
        p.start()
        # Iteration, as a reader loop is written (`for msg in sub`): the same wait as recv(),
        # without recv()'s argument parsing (abi3 before 3.10 has no fast calls).
        result = receive(iter(sub).__next__, n, bool(rate))
        p.join(60)
        sub.close()
        return result
    finally:
        shutil.rmtree(dir, ignore_errors=True)


def run_zmq(ctx, n, rate):
    dir = tempfile.mkdtemp(prefix="shmlog-py-bench-zmq-")
    endpoint = f"ipc://{dir}/sock"
    zctx = zmq.Context()
    try:
        s = zctx.socket(zmq.SUB)
        s.setsockopt(zmq.RCVHWM, 0)
        s.setsockopt(zmq.SUBSCRIBE, b"")
        s.bind(endpoint)
        ready, joined = ctx.Event(), ctx.Event()
        p = ctx.Process(target=zmq_sender, args=(endpoint, n, rate, ready, joined))
        p.start()
        s.recv()  # the first marker: connected
        joined.set()
        ready.wait(30)
        # Markers still in flight are not messages.
        def get():
            while True:
                m = s.recv()
                if m != b"W":
                    return m

        result = receive(get, n, bool(rate))
        p.join(60)
        s.close(linger=0)
        return result
    finally:
        zctx.term()
        shutil.rmtree(dir, ignore_errors=True)


def run_queue(ctx, n, rate):
    q = ctx.Queue()
    ready = ctx.Event()
    p = ctx.Process(target=queue_sender, args=(q, n, rate, ready))
    p.start()
    result = receive(q.get, n, bool(rate))
    p.join(60)
    return result


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p / 100))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="a short run that checks the script works")
    ap.add_argument("--messages", type=int, help="messages per throughput run")
    ap.add_argument("--latency-messages", type=int, help="messages per latency run (at 1 000 msg/s)")
    ap.add_argument("--only", help="run only this transport (shmlog, pyzmq, queue)")
    args = ap.parse_args()
    n = args.messages or (5_000 if args.smoke else 1_000_000)
    nl = args.latency_messages or (200 if args.smoke else 5_000)
    ctx = mp.get_context("spawn")

    runs = [("shmlog", run_shmlog), ("pyzmq ipc://", run_zmq if zmq else None), ("mp.Queue", run_queue)]
    print(
        f"shmlog Python bench: {SIZE}-byte messages, Python publisher -> Python subscriber process, "
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"pyzmq {zmq.__version__ if zmq else '(not installed)'}, {time.strftime('%Y-%m-%d')}"
    )
    thr, lat = {}, {}
    for label, run in runs:
        if args.only and not label.startswith(args.only.replace("queue", "mp.Queue")):
            continue
        if run is None:
            print(f"{label:14} skipped (pip install pyzmq)")
            continue
        thr[label], _ = run(ctx, n, 0)
        _, lat[label] = run(ctx, nl, 1000.0)
        ls = lat[label]
        print(
            f"{label:14} throughput {thr[label] / 1e6:7.3f} M msg/s ({n} msgs)   latency at 1000 msg/s "
            f"p50 {pct(ls, 50) / 1e3:7.1f} us  p90 {pct(ls, 90) / 1e3:7.1f} us  "
            f"p99 {pct(ls, 99) / 1e3:7.1f} us ({nl} msgs)"
        )
    ref = "pyzmq ipc://"
    if args.only:
        return 0
    if ref in thr:
        t = thr["shmlog"] / thr[ref]
        p = pct(lat["shmlog"], 50) / pct(lat[ref], 50)
        print(f"shmlog / pyzmq: throughput {t:.2f}x (goal >= 5x: {'met' if t >= 5 else 'NOT met'}), "
              f"p50 latency {p:.2f}x (goal <= 0.5x: {'met' if p <= 0.5 else 'NOT met'})")
    t = thr["shmlog"] / thr["mp.Queue"]
    p = pct(lat["shmlog"], 50) / pct(lat["mp.Queue"], 50)
    print(f"shmlog / mp.Queue: throughput {t:.2f}x, p50 latency {p:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
