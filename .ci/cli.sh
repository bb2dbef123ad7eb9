#!/usr/bin/env bash
# The `shmlog` tool (feature `cli`): build it, run its integration tests (tests/cli.rs, which start
# the binary as real processes) and its unit tests, and lint everything with the feature on.
# The library half (`shmlog::inspect`) is tested by the plain `cargo test` of .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --features cli --bin shmlog
cargo test --release --features cli --test cli --bin shmlog
cargo clippy --features cli --all-targets -- -D warnings
