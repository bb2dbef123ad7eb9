#!/usr/bin/env bash
# Runs every benchmark of docs/benchmarks.md in one go and regenerates its tables and plots.
#
#   scripts/bench-all.sh                 # full run (~15-25 min on 2 cores)
#   SHMLOG_BENCH_RT=1 scripts/bench-all.sh   # under SCHED_FIFO (chrt -f 1) when the machine is busy
#   scripts/bench-all.sh --warm-up-time 1 --measurement-time 2   # extra arguments go to criterion
#
# Needs: cargo; for the aeron-rs columns also Java 17+ and Maven (the driver jar is fetched into
# target/aeron/ once). Without them those columns print SKIPPED and stay empty.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/bench}"
SECONDS_RATE="${SHMLOG_LATENCY_SECONDS:-10}"
# The comparison with aeron-rs is a crate of its own (compare/): one results directory for both.
COMPARE=(--manifest-path compare/Cargo.toml)
export SHMLOG_BENCH_RESULTS="$PWD/target/bench-results"

if [[ ! -s target/aeron/aeron-all-1.51.0.jar ]]; then
    scripts/fetch-aeron-driver.sh || echo "no Aeron driver jar: the aeron-rs figures will be SKIPPED"
fi

# Build once, then run the binaries themselves: no rebuild between benches (the code measured
# stays the same through the run) and no compiler running under SCHED_FIFO.
declare -A BIN
while IFS=$'\t' read -r name exe; do
    BIN[$name]=$exe
done < <( (cargo bench -p shmlog --no-run --message-format=json; cargo bench "${COMPARE[@]}" --no-run --message-format=json) \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "bench" in m["target"]["kind"]:
        print(m["target"]["name"] + "\t" + m["executable"])')
cargo build --profile bench "${COMPARE[@]}" --example latency
LATENCY="$CARGO_TARGET_DIR/release/examples/latency"

RT=()
if [[ "${SHMLOG_BENCH_RT:-0}" == 1 ]] && command -v chrt >/dev/null; then
    RT=(chrt -f 1)
    echo "running under SCHED_FIFO priority 1"
fi

# SHMLOG_BENCHES="ping_pong latency" re-runs some parts and keeps the other results.
if [[ -z "${SHMLOG_BENCHES:-}" ]]; then
    rm -rf target/bench-results
fi
mkdir -p target/bench-results
for b in ${SHMLOG_BENCHES:-bounds throughput ping_pong offer_poll fanout idle vs_aeron journal concurrent latency}; do
    # A bench re-run replaces all of its records: none left over from a manual run with other
    # options (a `--seconds 1` latency run would otherwise add its own rows to the tables).
    rm -f "target/bench-results/$b.jsonl"
    if [[ $b == latency ]]; then
        "${RT[@]}" "$LATENCY" --seconds "$SECONDS_RATE" 2>&1 | tee -a target/bench-results/log.txt
        continue
    fi
    [[ -n "${BIN[$b]:-}" ]] || { echo "no executable for bench $b" >&2; exit 1; }
    "${RT[@]}" "${BIN[$b]}" --bench "$@" 2>&1 | tee -a target/bench-results/log.txt
done

python3 scripts/bench-report.py
