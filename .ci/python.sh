#!/usr/bin/env bash
# The Python bindings (python/, issues 27 and 34; the workspace's clippy run in .ci/run lints
# the member): build the wheel users install
# (abi3, CPython >= 3.10, manylinux2014: glibc 2.17 and later, linked with zig so that the tag is
# not the build machine's newer glibc), install it into a venv of its own, run the pytest suite
# against it (test_wheel.py checks the tag against the symbols the module needs) and the bench
# smoke run. Needs only Rust, python3 (>= 3.10, with venv) and PyPI (maturin, ziglang, pytest,
# pyzmq).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cargo build --release -p shmlog-python --example peer
export SHMLOG_PEER="$root/target/release/examples/peer"

venv="${SHMLOG_PY_VENV:-$root/target/python-venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "maturin>=1.5,<2" ziglang pytest pyzmq
"$venv/bin/python" --version
"$venv/bin/maturin" --version

wheels="$root/target/wheels"
rm -rf "$wheels"
# zig (from the ziglang package, on PATH through the venv) links against glibc 2.17's symbols;
# a target directory of its own keeps the workspace's release build from being rebuilt.
PATH="$venv/bin:$PATH" "$venv/bin/maturin" build --release --zig --compatibility manylinux2014 \
  --target-dir "$root/target/zig" -m python/Cargo.toml --out "$wheels"
ls "$wheels"
"$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheels"/shmlog-*.whl

# From a directory without the sources, so the installed wheel is what is imported.
cd "$root/python/tests"
"$venv/bin/python" -m pytest -q -p no:cacheprovider -rs .
"$venv/bin/python" "$root/python/bench/bench.py" --smoke
