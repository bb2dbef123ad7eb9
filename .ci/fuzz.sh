#!/usr/bin/env bash
# Fuzzing smoke run (docs/verification.md, "Fuzzing").
#
# Builds the cargo-fuzz targets of fuzz/ (libFuzzer + AddressSanitizer) and runs each one for
# FUZZ_SECONDS (default 15, 300 in the long mode; two targets at a time, each is one process on
# one core) starting from the committed corpus fuzz/corpus/<target>/, which also
# holds the inputs of past crashes. Fails if any target crashes; the crash input is left in
# fuzz/artifacts/<target>/. New corpus entries go to fuzz/target/ci-corpus/, never into git.
#
# The scenarios are the fuzz crate's library (fuzz/src/); they reach the crate's internals
# through `shmlog::__fuzz` (and the bridge's through `shmlog_bridge::__fuzz`), which exist only
# with `--cfg shmlog_fuzz` (set here through
# RUSTFLAGS, which cargo-fuzz extends with its own flags; a crate-prefixed cfg, so a downstream
# user's fuzzer, which sets the global `fuzzing`, never compiles it).
#
#   SHMLOG_CI_LONG=1 .ci/fuzz.sh            # the long mode, before a release: 300 s a target
#                                           # and the harness's in-process tests (seed depth)
#   FUZZ_SECONDS=600 .ci/fuzz.sh            # a longer run
#   FUZZ_TARGETS="ops_oracle" .ci/fuzz.sh   # some targets only
#   FUZZ_HARNESS_TESTS=1 .ci/fuzz.sh        # the harness's in-process tests in a short run too
set -euo pipefail
cd "$(dirname "$0")/.."

long=${SHMLOG_CI_LONG:-0}
# The short mode builds the targets without optimisation (half the build's CPU: a smoke run
# replays the corpus and explores for seconds); the long mode optimised, as cargo fuzz does.
if [[ $long == 1 ]]; then
    seconds=${FUZZ_SECONDS:-300}
    profile=()
else
    seconds=${FUZZ_SECONDS:-15}
    profile=(--dev)
fi
[[ ${FUZZ_OPTIMISED:-0} == 1 ]] && profile=()
mkdir -p target
read -r -a targets <<<"${FUZZ_TARGETS:-term_reader file_validation ops_oracle assembler journal unblock bridge_status bridge_in doorbell}"
start=$(date +%s)
stamp() { echo "[fuzz +$(($(date +%s) - start))s] $*"; }

if ! cargo fuzz --version >/dev/null 2>&1; then
    stamp "installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi
# cargo-fuzz needs unstable rustc flags (-Zsanitizer): the stable toolchain with RUSTC_BOOTSTRAP,
# so no nightly is needed. Set FUZZ_TOOLCHAIN=+nightly to use a nightly instead.
toolchain=${FUZZ_TOOLCHAIN:-}
if [[ -z $toolchain ]]; then
    export RUSTC_BOOTSTRAP=1
fi

export RUSTFLAGS="${RUSTFLAGS:-} --cfg shmlog_fuzz"

# The targets' scenarios and the seed corpus are tested in-process too (no libFuzzer): random
# inputs must not trip the harness, and the seeds must still reach deep (the libFuzzer runs below
# replay the corpus, but do not check how deep the seeds go).
# A release build of the fuzz crate of its own (~140 s on 2 cores): the long mode's.
if [[ ${FUZZ_HARNESS_TESTS:-$long} == 1 ]]; then
    stamp "harness tests: cargo test --release in fuzz/"
    if ! (cd fuzz && CARGO_TARGET_DIR=../target/fuzz-harness cargo test --release -q) >target/fuzz-harness.log 2>&1; then
        tail -40 target/fuzz-harness.log
        echo "FAIL: fuzz harness tests"
        exit 1
    fi
    grep -E "test result" target/fuzz-harness.log
fi

stamp "building the targets: cargo fuzz build ${profile[*]} (RUSTFLAGS=$RUSTFLAGS)"
if ! (cd fuzz && cargo $toolchain fuzz build "${profile[@]}") >target/fuzz-build.log 2>&1; then
    tail -40 target/fuzz-build.log
    echo "FAIL: cargo fuzz build"
    exit 1
fi

# fuzz_one TARGET: one target's run; its report goes to fuzz/target/ci-TARGET.report, printed in
# order at the end, and a crash leaves fuzz/target/ci-TARGET.crash.
fuzz_one() {
    local t=$1 work=fuzz/target/ci-corpus/$1 log=fuzz/target/ci-$1.log report=fuzz/target/ci-$1.report
    local status execs last
    mkdir -p "$work" "fuzz/artifacts/$t"
    {
        stamp "run $t for ${seconds}s (corpus fuzz/corpus/$t, $(ls "fuzz/corpus/$t" | wc -l) files)"
        # A crash makes cargo fuzz exit non-zero; keep going so every target reports.
        if (cd fuzz && cargo $toolchain fuzz run "${profile[@]}" "$t" "target/ci-corpus/$t" "corpus/$t" -- \
            -max_total_time="$seconds" -timeout=20 -rss_limit_mb=3072 -print_final_stats=1) >"$log" 2>&1; then
            status=ok
        else
            status=CRASH
            touch "fuzz/target/ci-$t.crash"
        fi
        execs=$(grep -oE "stat::number_of_executed_units: [0-9]+" "$log" | grep -oE "[0-9]+$" || echo "?")
        last=$(grep -E "^#[0-9]+" "$log" | tail -1 | grep -oE "cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9a-zA-Z]+" || echo "cov: ?")
        stamp "$t: $status, $execs executions, $last"
        if [[ $status == CRASH ]]; then
            grep -E "panicked|ERROR|SUMMARY|Test unit written" "$log" | head -20
        fi
    } >"$report"
}

stamp "running ${#targets[@]} targets, two at a time"
rm -f fuzz/target/ci-*.crash fuzz/target/ci-*.report
for t in "${targets[@]}"; do
    while (($(jobs -rp | wc -l) >= 2)); do wait -n || true; done
    fuzz_one "$t" &
done
wait
failed=()
for t in "${targets[@]}"; do
    cat "fuzz/target/ci-$t.report"
    [[ -f fuzz/target/ci-$t.crash ]] && failed+=("$t")
done

if ((${#failed[@]})); then
    stamp "FAIL: crashes in ${failed[*]} (inputs in fuzz/artifacts/, logs in fuzz/target/ci-*.log)"
    exit 1
fi
stamp "all targets ran clean"
