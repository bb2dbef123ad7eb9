#!/usr/bin/env bash
# Instructions per message on the hot path, counted by callgrind (repeatable on a noisy VM, unlike
# timings): examples/instructions.rs run with two message counts; the difference of the totals
# divided by the difference of the counts cancels setup.
#
#   scripts/instructions.sh            # this checkout
#   KIND=concurrent scripts/instructions.sh   # through a ConcurrentPublication
#   TARGET_DIR=... scripts/instructions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)"; exit 1; }
export CARGO_TARGET_DIR="${TARGET_DIR:-target}"
cargo build -q --profile bench --example instructions
bin="$CARGO_TARGET_DIR/release/examples/instructions"
total() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" "${KIND:-exclusive}" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
for mode in alternating batched; do
    small=$(total "$mode" 100000)
    large=$(total "$mode" 300000)
    awk -v m="$mode" -v s="$small" -v l="$large" \
        -v k="${KIND:-exclusive}" 'BEGIN { printf "%s, %s: %.1f instructions per message (offer + poll)\n", k, m, (l - s) / 200000 }'
done
