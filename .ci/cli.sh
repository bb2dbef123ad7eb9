#!/usr/bin/env bash
# The `shmlog` tool (crate shmlog-tools, tools/) as a user builds it, without the bridge command:
# that build uses the bridge crate without Aeron (feature `aeron` off: only its status format), a
# configuration the workspace-wide runs of .ci/run never see (they unify features). Its tests
# (tools/tests/cli.rs, the binary as real processes, and its unit tests) run in .ci/run's
# `cargo test --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p shmlog-tools --bin shmlog
cargo clippy -p shmlog-bridge --no-default-features --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p shmlog-bridge --no-default-features
target/release/shmlog --help >/dev/null
# The OpenMetrics output read by Prometheus's parser: here a missing parser fails instead of skipping.
SHMLOG_REQUIRE_OPENMETRICS_PARSER=1 cargo test --release -p shmlog-tools --test cli openmetrics
