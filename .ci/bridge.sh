#!/usr/bin/env bash
# The bridge over Aeron UDP (crate shmlog-bridge, bridge/; docs/bridge.md): fetch the Java media
# driver from Maven Central (scripts/fetch-aeron-driver.sh), build the tool with its `bridge`
# command (the multi-host tests start it as real processes), run those tests
# (bridge/tests/bridge.rs: two and three drivers on loopback, SIGKILLed bridges and drivers) with
# the driver required, so a missing Java or jar fails here instead of skipping, and the bench once
# in criterion's test mode. Timings are not judged. The bridge's unit tests, lints and docs run in
# .ci/run with the rest of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/fetch-aeron-driver.sh
java -version 2>&1 | head -1
cargo build --release -p shmlog-tools --features bridge --bin shmlog
SHMLOG_REQUIRE_AERON=1 SHMLOG_BIN="$PWD/target/release/shmlog" \
    cargo test --release -p shmlog-bridge --features driver-tests --test bridge
# The release profile, so the dependencies the tests just built are reused (test mode: no timing).
cargo bench --profile release -p shmlog-bridge --bench bridge -- --test
echo "bridge took $(( $(date +%s) - start )) s"
