"""The wheel (issue 34, item 8): one abi3 wheel for every CPython >= 3.10, and its platform tag
is honest: the extension needs no symbol of a newer glibc than the tag promises. The wheel for
distribution (.ci/python-wheel.sh with SHMLOG_WHEEL_RELEASE=1, linked with zig) is tagged
manylinux2014 (glibc 2.17 and later: installable without Rust on any Linux of the last decade):
with SHMLOG_WHEEL_RELEASE=1 set here too, that is checked as well.

A local development build (`maturin develop`, tagged `linux_x86_64`) promises nothing and is
skipped; CI's wheel is built for its own machine (maturin tags it with the newest glibc its
symbols need)."""

from __future__ import annotations

import os
import re
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest

import shmlog


def tags() -> list[str]:
    wheel = distribution("shmlog").read_text("WHEEL") or ""
    return [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]


def glibc_promised(platform: str):
    """The oldest glibc a platform tag promises to run on, or None for a local build."""
    if platform.startswith("manylinux2014_"):
        return (2, 17)
    m = re.match(r"manylinux_(\d+)_(\d+)_", platform)
    return (int(m.group(1)), int(m.group(2))) if m else None


def glibc_needed() -> tuple:
    """The newest glibc symbol version the extension module links against."""
    so = next(Path(shmlog.__file__).parent.glob("_shmlog*.so"))
    found = {tuple(map(int, v)) for v in re.findall(rb"GLIBC_(\d+)\.(\d+)", so.read_bytes())}
    return max(found)


def test_one_abi3_wheel_for_every_cpython():
    assert tags(), "no wheel tag recorded"
    for tag in tags():
        python, abi, _ = tag.split("-")
        assert abi == "abi3" and python == "cp310", tag
    assert sys.version_info >= (3, 10)


def test_the_platform_tag_is_manylinux_and_honest():
    platforms = {tag.split("-")[2] for tag in tags()}
    promised = {p: glibc_promised(p) for p in platforms}
    if all(v is None for v in promised.values()):
        pytest.skip(f"a local development build ({', '.join(sorted(platforms))}): not a wheel for other machines")
    needed = glibc_needed()
    for platform, glibc in promised.items():
        assert glibc is not None, f"{platform}: not a manylinux tag"
        assert needed <= glibc, f"{platform} promises glibc {glibc}, the module needs {needed}"
    if os.environ.get("SHMLOG_WHEEL_RELEASE") == "1":
        # Built for the oldest glibc Rust's standard library supports: any Linux of the last decade.
        assert min(v for v in promised.values() if v) <= (2, 17), promised
