#!/usr/bin/env bash
# ThreadSanitizer, AddressSanitizer and Miri runs (docs/verification.md, "Sanitizers and Miri").
#
# - TSan: the writer/reader threads over one heap region (src/concurrency_tests.rs: the only
#   place TSan can see the log protocol, as every Publication/Subscription maps the file at its
#   own address), the public-API threads test (tests/it/threads.rs) and a few multi-process tests.
#   std is rebuilt with TSan (-Zbuild-std, needs rust-src) so its synchronisation is visible, and
#   `--cfg shmlog_tsan` makes the region's acquire loads real acquire loads instead of a relaxed
#   load + fence(Acquire), which TSan does not model (see src/region/raw.rs).
# - ASan: all the library's unit tests, the threads test and the same multi-process tests.
# - Miri (-Zmiri-strict-provenance): in-process unit tests over the heap backend (Miri cannot map
#   files or take fcntl locks): layout, log, reader slots, flow control, joins, assembler, and the
#   fuzz seeds that stay in memory (fuzz crate, --cfg shmlog_fuzz).
#
# Uses the nightly toolchain when installed, else stable with RUSTC_BOOTSTRAP=1. A part whose
# toolchain component cannot be had prints a loud "SKIPPED: ..." line instead of failing.
# Each sanitizer builds in its own target dir (target/san/...), Miri in target/miri.
#
#   SAN_PARTS="tsan miri" .ci/sanitizers.sh     # some parts only (tsan asan miri)
#   SHMLOG_CI_LONG=1 .ci/sanitizers.sh            # the long mode: Miri over the tests on 64 KiB terms too
set -euo pipefail
cd "$(dirname "$0")/.."

read -r -a parts <<<"${SAN_PARTS:-tsan asan miri}"
mkdir -p target/san
host=x86_64-unknown-linux-gnu
start=$(date +%s)
stamp() { echo "[sanitizers +$(($(date +%s) - start))s] $*"; }
want() { [[ " ${parts[*]} " == *" $1 "* ]]; }

if cargo +nightly --version >/dev/null 2>&1; then
    tc=(+nightly)
    rustup_tc=nightly
else
    tc=()
    rustup_tc=$(rustup show active-toolchain 2>/dev/null | cut -d' ' -f1 || echo stable)
    export RUSTC_BOOTSTRAP=1
fi
stamp "toolchain: cargo ${tc[*]:-(default) with RUSTC_BOOTSTRAP=1} ($(cargo "${tc[@]}" --version))"

has_component() {
    rustup component list --toolchain "$rustup_tc" --installed 2>/dev/null | grep -q "^$1"
}
try_component() {
    has_component "$1" || timeout 120 rustup component add --toolchain "$rustup_tc" "$1" >/dev/null 2>&1 || true
    has_component "$1"
}

# Multi-process tests spawn instrumented copies of their own test binary. Only two, with loose
# time bounds and a reduced message count (SHMLOG_MP_COUNT): sanitized processes run 5-20x
# slower, and tests with fixed counts and 30 s bounds (e.g. the late joiner's 100 000 messages)
# time out. Each process maps the files at its own address, so TSan sees no cross-process
# sharing anyway; these check each process's own threads and memory.
MP_TESTS=(
    multiprocess::million_messages_from_one_publisher_to_three_subscriber_processes
    multiprocess::subscriber_started_before_the_publisher_gets_everything
)
export SHMLOG_THREADS_COUNT=${SHMLOG_THREADS_COUNT:-5000}
export SHMLOG_MP_COUNT=${SHMLOG_MP_COUNT:-20000}
failures=()

# run NAME DIR RUSTFLAGS [cargo args...] -- [test args...]: one sanitized `cargo test` invocation.
run() {
    local name=$1 dir=$2 flags=$3
    shift 3
    local log=target/san/$name.log t0
    t0=$(date +%s)
    mkdir -p target/san
    # -p shmlog: the core only (the root's default members include the bridge and the tool).
    if RUSTFLAGS="$flags" CARGO_TARGET_DIR="$dir" cargo "${tc[@]}" test -p shmlog --target "$host" "$@" >"$log" 2>&1; then
        stamp "$name: ok in $(($(date +%s) - t0))s: $(grep -E '^test result' "$log" | awk '{p+=$4; f+=$6} END {print p" passed, "f" failed"}')"
    else
        stamp "$name: FAILED in $(($(date +%s) - t0))s (log: $log)"
        grep -E "WARNING: ThreadSanitizer|ERROR: AddressSanitizer|SUMMARY|panicked|^error" "$log" | head -20
        failures+=("$name")
    fi
    if grep -qE "WARNING: ThreadSanitizer|ERROR: AddressSanitizer|ERROR: LeakSanitizer" "$log"; then
        stamp "$name: sanitizer report in $log"
        [[ " ${failures[*]} " == *" $name "* ]] || failures+=("$name")
    fi
}

if want tsan; then
    if try_component rust-src; then
        export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
        flags="-Zsanitizer=thread -Cdebug-assertions --cfg shmlog_tsan"
        stamp "tsan: building std and the tests with $flags (-Zbuild-std)"
        run tsan-heap-threads target/san/tsan "$flags" -Zbuild-std --lib -- concurrency_tests
        run tsan-threads target/san/tsan "$flags" -Zbuild-std --test it -- threads::
        run tsan-multiprocess target/san/tsan "$flags" -Zbuild-std --test it -- "${MP_TESTS[@]}" --exact
        unset TSAN_OPTIONS
    else
        echo "SKIPPED: tsan (component rust-src unavailable: without -Zbuild-std, std's uninstrumented atomics give false reports)"
    fi
fi

if want asan; then
    # std as shipped (no -Zbuild-std): ASan needs no instrumented std to be free of false reports.
    export ASAN_OPTIONS="detect_leaks=1 detect_stack_use_after_return=1"
    flags="-Zsanitizer=address -Cdebug-assertions"
    stamp "asan: building the tests with $flags"
    run asan-lib target/san/asan "$flags" --lib
    run asan-threads target/san/asan "$flags" --test it -- threads::
    run asan-multiprocess target/san/asan "$flags" --test it -- "${MP_TESTS[@]}" --exact
    unset ASAN_OPTIONS
fi

if want miri; then
    if try_component miri && try_component rust-src; then
        t0=$(date +%s)
        stamp "miri: setting up its sysroot"
        CARGO_TARGET_DIR=target/miri cargo "${tc[@]}" miri setup >target/san/miri-setup.log 2>&1 || true
        # Unit tests over the heap backend only (Miri cannot mmap files or take fcntl locks), plus
        # the fuzz seeds that stay in memory (the fuzz crate's `miri_in_memory_seeds`): they drive
        # the shipped writer and readers on small terms (append, claim, rotation, clean, read,
        # joins, slots, flow control, stray slot words, assembler); and the plain-old-data byte
        # views of typed messages. The tests over 64 KiB terms (the joins' and three of the log's)
        # take 5-7 s of Miri's clock each, minutes of real time: the long mode's
        # (SHMLOG_CI_LONG=1), as the fuzz seeds drive joins and the log on small terms.
        filters=(
            layout:: api::assembler stream::flow stream::slots log::position log::appender
            region::pod
        )
        if [[ ${SHMLOG_CI_LONG:-0} == 1 ]]; then
            filters+=(
                stream::join
                log::tests::reads_first_message_with_its_header
                log::tests::claim_is_invisible_until_commit_and_abort_becomes_padding
                log::tests::fragments_carry_begin_and_end_flags_and_reassemble_in_order
            )
        fi
        stamp "miri: cargo miri test --lib -- ${filters[*]} (MIRIFLAGS=-Zmiri-strict-provenance)"
        mkdir -p target/san
        # The two parts run side by side (each interprets on one core; the core's part takes
        # minutes of real time, its test harness's clock is Miri's virtual one).
        MIRIFLAGS="-Zmiri-strict-provenance" CARGO_TARGET_DIR=target/miri \
            cargo "${tc[@]}" miri test -p shmlog --lib -- "${filters[@]}" >target/san/miri.log 2>&1 &
        core_part=$!
        (cd fuzz && MIRIFLAGS="-Zmiri-strict-provenance" RUSTFLAGS="--cfg shmlog_fuzz" \
            CARGO_TARGET_DIR=../target/miri-fuzz cargo "${tc[@]}" miri test -- miri_in_memory_seeds) \
            >target/san/miri-fuzz.log 2>&1 &
        fuzz_part=$!
        core_ok=0 fuzz_ok=0
        wait "$core_part" || core_ok=$?
        wait "$fuzz_part" || fuzz_ok=$?
        cat target/san/miri-fuzz.log >>target/san/miri.log
        if [[ $core_ok == 0 && $fuzz_ok == 0 ]]; then
            stamp "miri: ok in $(($(date +%s) - t0))s: $(grep -E '^test result' target/san/miri.log | tr '\n' ' ')"
        else
            stamp "miri: FAILED in $(($(date +%s) - t0))s (log: target/san/miri.log)"
            grep -E "^error|Undefined Behavior|panicked|FAILED" target/san/miri.log | head -20
            failures+=(miri)
        fi
    else
        echo "SKIPPED: miri (component unavailable)"
    fi
fi

if ((${#failures[@]})); then
    stamp "FAIL: ${failures[*]}"
    exit 1
fi
stamp "done"
