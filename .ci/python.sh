#!/usr/bin/env bash
# The Python bindings (python/, issue 27): lint the member, build the wheel with maturin (from
# PyPI, into a venv of its own), install it, run the pytest suite and the bench smoke run.
# Needs only Rust, python3 (>= 3.9, with venv) and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cargo clippy -p shmlog-python --all-targets -- -D warnings
cargo build --release -p shmlog-python --example peer
export SHMLOG_PEER="$root/target/release/examples/peer"

venv="${SHMLOG_PY_VENV:-$root/target/python-venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "maturin>=1.5,<2" pytest pyzmq
"$venv/bin/python" --version
"$venv/bin/maturin" --version

wheels="$root/target/wheels"
rm -rf "$wheels"
"$venv/bin/maturin" build --release -m python/Cargo.toml --out "$wheels"
"$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheels"/shmlog-*.whl

# From a directory without the sources, so the installed wheel is what is imported.
cd "$root/python/tests"
"$venv/bin/python" -m pytest -q -p no:cacheprovider .
"$venv/bin/python" "$root/python/bench/bench.py" --smoke
