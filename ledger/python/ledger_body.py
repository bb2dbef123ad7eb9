"""The ledger's message bodies and chance, in Python, byte for byte as ``ledger/src/body.rs`` and
``ledger/src/prng.rs`` make them: a Python writer's messages pass the Rust readers' checks, and a
Python reader checks a Rust writer's messages by the same rule. Pure Python (no shmlog): the
crate's test ``python_and_rust_bodies_are_the_same`` runs it with any ``python3``.

Header (40 bytes, little-endian): magic ``LDG1``, writer, incarnation, session, sequence number
(u64), total length (u32), zero (u32), hash (u64) of the other fields and the body.

As a program: ``python3 ledger_body.py`` reads lines from stdin and answers each on stdout:
``fill W INC SESSION SEQ LEN`` -> the message in hex; ``check HEX`` -> ``ok W INC SESSION SEQ``
or ``err WHY``.
"""

from __future__ import annotations

import struct
import sys
from typing import NamedTuple, Sequence, Tuple, TypeVar

HEADER = 40
MAGIC = b"LDG1"
_M = (1 << 64) - 1
_T = TypeVar("_T")


def mix(z: int) -> int:
    """splitmix64's finaliser (``prng::mix``)."""
    z = (z + 0x9E3779B97F4A7C15) & _M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M
    return z ^ (z >> 31)


class Rng:
    """``prng::Rng``: splitmix64, seeded; the same draws as the Rust one from the same seed."""

    def __init__(self, seed: int) -> None:
        self.state = seed & _M

    def clone(self) -> "Rng":
        return Rng(self.state)

    def next_u64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _M
        return mix(self.state)

    def below(self, n: int) -> int:
        return self.next_u64() % max(n, 1)

    def range(self, lo: int, hi: int) -> int:
        return lo if hi <= lo else lo + self.below(hi - lo)

    def chance(self, p: float) -> bool:
        return (self.next_u64() >> 11) / float(1 << 53) <= p

    def pick(self, items: Sequence[_T]) -> _T:
        return items[self.below(len(items))]

    def weighted(self, items: Sequence[Tuple[int, _T]]) -> _T:
        r = self.below(sum(w for w, _ in items))
        for w, item in items:
            if r < w:
                return item
            r -= w
        return items[-1][1]

    def fork(self, tag: int) -> "Rng":
        return Rng(mix(self.next_u64() ^ mix(tag)))


class Id(NamedTuple):
    """The attempt a message belongs to (``body::Id``)."""

    writer: int
    inc: int
    session: int
    seq: int


def _seed(i: Id) -> int:
    return mix(mix(((i.inc << 32) | i.writer) & _M) ^ (i.seq & _M))


def _hash(i: Id, length: int, body: bytes) -> int:
    h = mix(_seed(i) ^ length ^ ((i.session & 0xFFFFFFFF) << 17))
    full = len(body) // 8
    for w in struct.unpack_from("<%dQ" % full, body):
        h = mix(h ^ w)
    tail = body[full * 8 :]
    if tail:
        h = mix(h ^ int.from_bytes(tail, "little"))
    return h


def _generate(i: Id, n: int) -> bytes:
    s = _seed(i)
    words = (n + 7) // 8
    return struct.pack("<%dQ" % words, *[mix((s + k) & _M) for k in range(words)])[:n]


def fill(i: Id, length: int) -> bytes:
    """The message of attempt `i`, `length` bytes long (at least ``HEADER``)."""
    length = max(length, HEADER)
    body = _generate(i, length - HEADER)
    h = _hash(i, length, body)
    head = struct.pack("<4sIIiQIIQ", MAGIC, i.writer, i.inc, i.session, i.seq, length, 0, h)
    return head + body


def check(message: bytes, regenerate: bool = True) -> Id:
    """The attempt a received message claims to be, if every byte of it says so; raises
    ``ValueError`` with the reason (the Rust checker's words) otherwise.

    Every byte is covered by the hash; `regenerate` also compares the body with the generated
    one, as the Rust checker does (twice the work: a Python reader of large messages may skip it,
    the hash still covers every byte)."""
    n = len(message)
    if n < HEADER:
        raise ValueError("shorter-than-header")
    magic, w, inc, session, seq, length, zero, h = struct.unpack_from("<4sIIiQIIQ", message)
    if magic != MAGIC:
        raise ValueError("bad-magic")
    i = Id(w, inc, session, seq)
    if zero != 0:
        raise ValueError("bad-header")
    if length != n:
        raise ValueError("length-differs")
    body = bytes(message[HEADER:])
    if h != _hash(i, n, body):
        raise ValueError("bad-hash")
    if regenerate and body != _generate(i, n - HEADER):
        raise ValueError("bad-body")
    return i


def _main() -> int:
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "fill":
            w, inc, session, seq, length = (int(x) for x in words[1:6])
            print(fill(Id(w, inc, session, seq), length).hex())
        elif words[0] == "check":
            try:
                i = check(bytes.fromhex(words[1]) if len(words) > 1 else b"")
                print(f"ok {i.writer} {i.inc} {i.session} {i.seq}")
            except ValueError as e:
                print(f"err {e}")
        else:
            print(f"err unknown-command-{words[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
