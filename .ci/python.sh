#!/usr/bin/env bash
# The Python bindings (python/, issues 27 and 34; the workspace's clippy run in .ci/run lints
# the member): build the abi3 wheel (CPython >= 3.10) with .ci/python-wheel.sh
# (SHMLOG_WHEEL_RELEASE=1: the manylinux2014 wheel for distribution, linked with zig), install it
# into the venv, run the pytest suite against it (test_wheel.py checks the tag against the
# symbols the module needs) and the bench smoke run. Needs only Rust, python3 (>= 3.10, with
# venv) and PyPI (maturin, pytest, pyzmq; ziglang for the release wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# The Rust end of the cross-process tests (an example of the core: `cargo test --release` built it).
cargo build --release -p shmlog --example python_peer
export SHMLOG_PEER="$root/target/release/examples/python_peer"

# The long mode (SHMLOG_CI_LONG=1) builds and checks the wheel for distribution.
export SHMLOG_WHEEL_RELEASE=${SHMLOG_WHEEL_RELEASE:-${SHMLOG_CI_LONG:-0}}
bash .ci/python-wheel.sh
venv="${SHMLOG_PY_VENV:-$root/target/python-venv}"
wheels="$root/target/wheels"
"$venv/bin/python" --version
"$venv/bin/maturin" --version
"$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheels"/shmlog-*.whl

# From a directory without the sources, so the installed wheel is what is imported.
cd "$root/python/tests"
"$venv/bin/python" -m pytest -q -p no:cacheprovider -rs .
"$venv/bin/python" "$root/python/bench/bench.py" --smoke
