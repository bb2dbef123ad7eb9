#!/usr/bin/env bash
# The bridge over Aeron UDP (feature `bridge`, docs/bridge.md): fetch the Java media driver from
# Maven Central (scripts/fetch-aeron-driver.sh), lint with the feature on, run the multi-host tests
# (tests/bridge.rs: two and three drivers on loopback, SIGKILLed bridges and drivers) with the
# driver required, so a missing Java or jar fails here instead of skipping, and the bench once in
# criterion's test mode. Timings are not judged.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/fetch-aeron-driver.sh
java -version 2>&1 | head -1
cargo clippy --all-targets --features cli,bridge -- -D warnings
cargo test --release --features bridge --lib bridge
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --features bridge
SHMLOG_REQUIRE_AERON=1 cargo test --release --features cli,bridge --test bridge
CARGO_PROFILE_BENCH_LTO=false CARGO_PROFILE_BENCH_CODEGEN_UNITS=16 \
    cargo bench --features bridge --bench bridge -- --test
echo "bridge took $(( $(date +%s) - start )) s"
