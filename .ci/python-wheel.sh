#!/usr/bin/env bash
# Builds the Python wheel of this tree into target/wheels/ with maturin, in a venv of its own
# (target/python-venv: maturin, pytest, pyzmq from PyPI). One build serves both users of the
# extension: .ci/ledger.sh (its Python roles import target/release/lib_shmlog.so) and
# .ci/python.sh (installs the wheel); the second call finds the build done.
#
# CI builds for this machine (maturin tags the wheel with the newest glibc its symbols need:
# python/tests/test_wheel.py checks the tag is honest). The wheel for distribution
# (SHMLOG_WHEEL_RELEASE=1, which .ci/python.sh sets in the CI's long mode) is linked with zig
# against glibc 2.17's symbols and tagged manylinux2014, installable on any Linux of the last
# decade; its own target directory keeps the workspace's release build from being rebuilt, and
# it takes a cold build of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv="${SHMLOG_PY_VENV:-$root/target/python-venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
packages=("maturin>=1.5,<2" pytest pyzmq)
release=${SHMLOG_WHEEL_RELEASE:-0}
[[ $release == 1 ]] && packages+=(ziglang)
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "${packages[@]}"

wheels="$root/target/wheels"
rm -rf "$wheels"
if [[ $release == 1 ]]; then
  # zig (from the ziglang package, on PATH through the venv) links against glibc 2.17's symbols.
  PATH="$venv/bin:$PATH" "$venv/bin/maturin" build --release --zig --compatibility manylinux2014 \
    --target-dir "$root/target/zig" -m python/Cargo.toml --out "$wheels"
else
  PATH="$venv/bin:$PATH" "$venv/bin/maturin" build --release \
    --target-dir "$root/target" -m python/Cargo.toml --out "$wheels"
fi
ls "$wheels"
