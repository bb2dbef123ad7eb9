#!/usr/bin/env bash
# Bench smoke check for CI: every bench compiles and runs once in criterion's test mode, the
# core's (-p shmlog; the bridge's bench runs in .ci/bridge.sh, where its Java driver is) and the
# comparison's (compare/: aeron-rs, its own workspace); the latency example
# runs briefly. Timings are not judged. Needs neither Java nor Maven: without the driver jar the aeron-rs parts print
# SKIPPED. Built with the release profile (no LTO) in the default target directory, so the
# library and the dependencies `cargo test --release` built are reused: only the bench binaries
# and the comparison crate compile here.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
export SHMLOG_BENCH_RESULTS="$CARGO_TARGET_DIR/bench-results-ci"

BENCHES=(offer_poll throughput ping_pong fanout idle bounds journal concurrent untethered compare:vs_aeron)
COMPARE=(--manifest-path compare/Cargo.toml)
# The core's benches are built at the root, for the workspace's default members, as the tests
# step built everything else: `-p shmlog` alone unifies the dependencies' features differently
# and compiled the library and a dozen dependencies again (about 60 s). Each then runs from its
# path (a `cargo bench -p shmlog` run would build them once more).
declare -A core_bench=()
while IFS=$'\t' read -r name exe; do core_bench[$name]=$exe; done < <(
    cargo bench --profile release --no-run --benches --message-format=json-render-diagnostics |
        python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and "bench" in t.get("kind", []) and m.get("executable"):
        print(t["name"], m["executable"], sep="\t")
')
cargo bench --profile release "${COMPARE[@]}" --no-run
# With async-io (the core's dev-dependency on itself turns it on, as for `cargo test`): its lane
# (smol's reactor) beside tokio's, the waiter thread's and the plain block_on's.
cargo build --release --example lowrate --example room
cargo build --release "${COMPARE[@]}" --example latency

passed=0
failed=0
for b in "${BENCHES[@]}"; do
    t0=$(date +%s)
    if [[ $b == compare:* ]]; then
        b=${b#compare:}
        run=(cargo bench --profile release "${COMPARE[@]}" --bench "$b" -- --test)
    elif [[ -n ${core_bench[$b]:-} ]]; then
        run=("${core_bench[$b]}" --test)
    else
        run=(sh -c 'echo "this bench was not among those cargo bench --no-run built"; exit 1')
    fi
    if "${run[@]}" >"$CARGO_TARGET_DIR/bench-$b.log" 2>&1; then
        passed=$((passed + 1))
        echo "bench $b: ok ($(( $(date +%s) - t0 )) s)"
    else
        failed=$((failed + 1))
        echo "bench $b: FAILED; last lines:"
        tail -n 30 "$CARGO_TARGET_DIR/bench-$b.log"
    fi
    grep -h "SKIPPED" "$CARGO_TARGET_DIR/bench-$b.log" || true
done
# The latency example, briefly: its lanes taking turns (aeron-rs too where the driver jar is).
if "$CARGO_TARGET_DIR/release/examples/latency" --seconds 1 --burst 1000 --rate 1000 --term 65536 >/dev/null 2>&1; then
    passed=$((passed + 1)); echo "example latency: ok"
else
    failed=$((failed + 1)); echo "example latency: FAILED"
fi
# The low-rate fan-out, briefly: every lane at N = 1 and 4.
if "$CARGO_TARGET_DIR/release/examples/lowrate" --rates 1000 --subs 1,4 --seconds 0.3; then
    passed=$((passed + 1)); echo "example lowrate: ok"
else
    failed=$((failed + 1)); echo "example lowrate: FAILED"
fi
# A sender woken for room, briefly: every lane.
if "$CARGO_TARGET_DIR/release/examples/room" --seconds 0.3; then
    passed=$((passed + 1)); echo "example room: ok"
else
    failed=$((failed + 1)); echo "example room: FAILED"
fi
echo "bench smoke took $(( $(date +%s) - start )) s"
echo "bench: $passed passed, $failed failed"
[[ $failed == 0 ]]
