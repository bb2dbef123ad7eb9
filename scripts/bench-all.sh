#!/usr/bin/env bash
# Runs every benchmark of docs/benchmarks.md in one go and regenerates its tables and plots.
#
#   scripts/bench-all.sh                 # full run (~15-25 min on 2 cores)
#   SHMLOG_BENCH_RT=1 scripts/bench-all.sh   # under SCHED_FIFO (chrt -f 1) when the machine is busy
#
# Needs: cargo; for the aeron-rs columns also Java 17+ and Maven (the driver jar is fetched into
# target/aeron/ once). Without them those columns print SKIPPED and stay empty.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/bench}"
SECONDS_RATE="${SHMLOG_LATENCY_SECONDS:-10}"
FEATURES=(--features aeron-compare)

if [[ ! -s target/aeron/aeron-all-1.51.0.jar ]]; then
    scripts/fetch-aeron-driver.sh || echo "no Aeron driver jar: the aeron-rs figures will be SKIPPED"
fi

cargo bench "${FEATURES[@]}" --no-run
cargo build --profile bench "${FEATURES[@]}" --example latency

RT=()
if [[ "${SHMLOG_BENCH_RT:-0}" == 1 ]] && command -v chrt >/dev/null; then
    RT=(chrt -f 1)
    echo "running under SCHED_FIFO priority 1"
fi

rm -rf target/bench-results
mkdir -p target/bench-results
run() { "${RT[@]}" cargo bench "${FEATURES[@]}" --bench "$1" -- "${@:2}" 2>&1 | tee -a target/bench-results/log.txt; }

run bounds
run throughput
run ping_pong
run offer_poll
run fanout
run idle
run vs_aeron
"${RT[@]}" "$CARGO_TARGET_DIR/release/examples/latency" --seconds "$SECONDS_RATE" 2>&1 | tee -a target/bench-results/log.txt

python3 scripts/bench-report.py
