#!/usr/bin/env bash
# Loom model checking of the log and stream protocols: src/log/loom_models.rs,
# src/log/loom_concurrent.rs (many writers and the unblocker),
# src/stream/loom_models.rs (the shipped stream::Writer and stream::Reader) and
# src/stream/loom_concurrent_models.rs (the shipped ConcurrentWriter), and of the journal's
# catalog record, of a replay following a recording that recovery cuts back, retention purges
# or deletes (its record reused), and of a durable reader's position
# (src/journal/loom_models.rs), over src/region/loom.rs.
#
# 1. Runs every model and the loom backend's own tests (release build, LOOM_MAX_PREEMPTIONS=2
#    unless set in the environment).
# 2. Runs the same test binary once per mutation hook (SHMLOG_MUTANT=<name>: in a loom build
#    every knob of `sync::protocol` reads it) and asserts that the models aimed at it FAIL, so CI
#    proves they can see the bugs they are there for (one build for all, not one per mutant;
#    models and mutants share one pool of two single-threaded jobs):
#      relaxed_commit                     frame lengths committed with Relaxed: every model that
#                                         reads frames (a-e, d1-d3, g) must fail;
#      skip_clean                         the next partition is never zeroed: the models that
#                                         reuse partitions (c2, d1) must fail;
#      relaxed_position                   readers publish positions with Relaxed: the
#                                         flow-control models d1-d3 must fail;
#      no_join_fence                      no SeqCst fence between a joining reader's slot and its
#                                         re-read of the writer position: d2, d3;
#      no_recompute_fence                 no SeqCst fence before the writer reads the slots:
#                                         d2, d3 must fail;
#      evict_unlocked                     the sweep frees a dead reader's slot after dropping its
#                                         lock: the eviction model f must fail;
#      trust_slot_words                   the writer trusts slot positions past its own and does
#                                         not recompute at rotation: the forged-word model g;
#      no_doorbell_barrier                no barrier between publishing and looking at the other
#                                         side's doorbell word: the doorbell model h deadlocks;
#      no_doorbell_recheck                a sleeper does not look again after arming: h;
#      doorbell_arm_first                 a sleeper arms before it reads the bell: h;
#      no_doorbell_pass_on                a reader woken by the writer's single wake-up does not
#                                         wake the other sleepers: i and i2 deadlock;
#      uncounted_sleeper                  sleepers do not count themselves among the readers' bell's
#                                         sleepers (what wait_any and the async receiver did): i, i2;
#      uncounted_reactor_sleeper          async sleepers in a runtime's reactor do not count
#                                         themselves, so nobody writes the wake FIFO: i3, i4;
#      reactor_no_rang_check              a reactor sleeper does not check, once counted, that the
#                                         bell rang since it armed (a ringer that read the count
#                                         before wrote no FIFO for it): i3;
#      one_passed_word                    one passed-ring word for the threads and the wake FIFO:
#                                         a reactor sleeper passing a ring on to the thread stops
#                                         it from writing the FIFO for the other reactor sleeper: i4;
#      no_count_fence                     no fence between a ringer's bump of the bell and its
#                                         reading of the sleeper counts: i3's reactor sleeper is
#                                         never written to;
#      relaxed_catalog                    a catalog record's state is published with Relaxed: the
#                                         journal model j sees a state before its fields;
#      no_cut_fence                       recovery does not fence between counting a cut in a
#                                         catalog record and zeroing past it: a following
#                                         replay reads a zero and trusts it (j2);
#      unfenced_reuse                     whoever reuses a deleted recording's catalog record
#                                         writes it without a fence first: a following replay
#                                         takes the new recording's positions for its own (j3);
#      unlink_before_start                retention removes a segment file before it moves the
#                                         recording's start: a replay that finds it missing takes
#                                         the purge for damage (j4);
#      unfenced_reader_position           a durable reader's position is stored without the
#                                         seqlock's fence: retention loads a torn pair (j5);
#      pending_after_reserve               a concurrent writer publishes its pending position after
#                                         its tail CAS: another writer enters the next term over a
#                                         range not yet zeroed (k1);
#      release_before_clean               a concurrent writer clears its pending position before
#                                         zeroing its share of the next partition: k1, k5;
#      unblock_over_live                  the unblocker pads a frame a live (stopped) writer owns:
#                                         k3. (relaxed_commit must also fail k1-k6; not u2, whose
#                                         frames are committed before its threads start, nor k7,
#                                         which reads no frame.)
#      stale_ceiling                      a concurrent writer compares reader positions with the
#                                         tail it loaded before its fence (T2): k4 sees
#                                         NotConnected while its reader reads;
#      rotate_unchecked                   a rotation resets the next partition's tail whatever
#                                         term it holds: k4's second rotator resets the tail the
#                                         first one's reservation moved (k1 does not see it);
#      skip_copy_check                    an untethered reader trusts its copy without the check
#                                         after it: u and u2 deliver bytes zeroed during the copy.
#      no_unblock_fence                   the unblocker pads a dead writer's hole and zeroes the
#                                         next partition with no release fence first: u2's
#                                         untethered reader copies its zeroes, yet its check reads
#                                         a tail from before the dead writer's reservation.
#      lossy_count                        a log's statistics counters are added to with a load
#                                         then a store: k7's two writers lose an increment.
#      unblock_unlocked                   the unblocker runs without the unblock lock: k6's two
#                                         unblockers pad one hole at once.
#      ignore_owed_readers                a writer does not count the readers its session is owed
#                                         to (waiting when it began): o's waiter joins late;
#      no_owed_fence                      a waiting reader does not fence between its waiting word
#                                         and its re-read of the session counter: o.
#    Every knob is a function of `sync::protocol` (src/sync.rs), the one place the names appear.
#
# Builds go to target/loom so the normal build cache is not invalidated. LTO is off for these
# builds: it buys nothing for model checking and costs minutes on two cores. `-C debug-assertions` keeps the crate's
# debug_assert!s on in the optimised build (as tokio's loom job does).
set -euo pipefail
cd "$(dirname "$0")/.."

export RUSTFLAGS="--cfg shmlog_loom -C debug-assertions"
export CARGO_TARGET_DIR=target/loom
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
export CARGO_PROFILE_BENCH_LTO=false CARGO_PROFILE_BENCH_CODEGEN_UNITS=16
export RUST_BACKTRACE=0

start=$SECONDS
step() { echo "== loom [$((SECONDS - start))s] $*"; }

step "build (release, --cfg shmlog_loom)"
bin=$(cargo test -p shmlog --release --lib --no-run --message-format=json-render-diagnostics |
    grep -o '"executable":"[^"]*"' | tail -n 1 | cut -d '"' -f 4)
if [[ -z $bin ]]; then
    echo "FAIL: no loom test binary was built" >&2
    exit 1
fi

# The backend's own tests (some expect a panic, whose message would only be noise here).
step "region::loom tests"
cargo test -p shmlog --release --lib region::loom

read -r -a knobs <<<"$(grep -o 'mutant("[a-z_]*")' src/sync.rs | cut -d '"' -f 2 | tr '\n' ' ')"

# Every model run and every mutant run is single-threaded: they share one pool of two jobs (the
# two cores), each reporting into target/loom/jobs/NAME.log, printed in order at the end. Longest
# first: the catalog model `j` alone, the other models in two halves, then the mutants, the
# relaxed catalog one (which takes `j` minutes to fail) first.
mkdir -p target/loom/jobs
rm -f target/loom/jobs/*
jobs_run=()
pool() {
    local name=$1
    shift
    jobs_run+=("$name")
    while (($(jobs -rp | wc -l) >= 2)); do wait -n || true; done
    "$@" >"target/loom/jobs/$name.log" 2>&1 &
}

# models NAME FILTER... [--skip F] [--exact]: every model matching a FILTER must pass.
run_models() {
    local name=$1 out status=0 t0=$SECONDS
    shift
    echo "== models $name: $("$bin" "$@" --list | grep -c ': test$' || true) model(s) matching '$*'"
    out=$("$bin" "$@" --test-threads=1 --nocapture 2>&1) || status=$?
    grep -E '^test |test result|iterations|panicked at' <<<"$out" | head -n 80
    if [[ $status -ne 0 ]]; then
        echo "FAIL: models $name"
        return 1
    fi
    echo "== models $name passed ($((SECONDS - t0))s)"
    touch "target/loom/jobs/models-$name.ok"
}
models() {
    pool "models-$1" run_models "$@"
}

# mutant NAME FILTER...: runs the models matching one of the FILTERs with SHMLOG_MUTANT=NAME and
# asserts that every one of them fails.
run_mutant() {
    local name=$1 out total failed status=0 t0=$SECONDS
    shift
    total=$("$bin" "$@" --list | grep -c ': test$' || true)
    echo "== mutant $name: $total model(s) matching '$*', each must fail"
    out=$(SHMLOG_MUTANT=$name LOOM_LOCATION=1 "$bin" "$@" --test-threads=1 2>&1) || status=$?
    failed=$(grep -c '^test .* FAILED$' <<<"$out" || true)
    grep -E '^test |panicked at|Causality violation|reader fault|not zeroed|was freed|ran to|^ +(left|right|created|read|write):' \
        <<<"$out" | head -n 60
    if [[ $status -eq 0 || $total -eq 0 || $failed -ne $total ]]; then
        echo "FAIL: mutant $name: $failed of $total models failed; the models cannot see this bug"
        return 1
    fi
    echo "== mutant $name: $failed of $total models failed, as they must ($((SECONDS - t0))s)"
    touch "target/loom/jobs/mutant-$name.ok"
}
mutant() {
    local name=$1
    # A misspelt name would make every model panic, and so "fail": refuse it.
    if [[ " ${knobs[*]} " != *" $name "* ]]; then
        echo "FAIL: mutant $name is not a knob of src/sync.rs (${knobs[*]})" >&2
        exit 1
    fi
    pool "mutant-$name" run_mutant "$@"
}

# The k models (loom_concurrent*) set their own preemption bounds (see their files).
step "models and mutants, two at a time, LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS"
models catalog journal::loom_models::j_catalog_record_vs_reader --exact
models stream stream::loom_models stream::loom_concurrent_models
models log log::loom_models log::loom_concurrent journal::loom_models \
    --skip journal::loom_models::j_catalog_record_vs_reader
mutant relaxed_catalog journal::loom_models::j_
mutant relaxed_commit log::loom_models log::loom_concurrent::k1_ log::loom_concurrent::k2_ \
    log::loom_concurrent::k3_ stream::loom_models::d stream::loom_models::g_ stream::loom_concurrent_models
mutant skip_clean log::loom_models::c2_ stream::loom_models::d1_
mutant relaxed_position stream::loom_models::d
mutant no_join_fence stream::loom_models::d2_ stream::loom_models::d3_
mutant no_recompute_fence stream::loom_models::d2_ stream::loom_models::d3_
mutant evict_unlocked stream::loom_models::f_
mutant trust_slot_words stream::loom_models::g_
mutant no_doorbell_barrier stream::loom_models::h_
mutant no_doorbell_recheck stream::loom_models::h_
mutant doorbell_arm_first stream::loom_models::h_
mutant no_doorbell_pass_on stream::loom_models::i_ stream::loom_models::i2_
mutant uncounted_sleeper stream::loom_models::i_ stream::loom_models::i2_
mutant uncounted_reactor_sleeper stream::loom_models::i3_ stream::loom_models::i4_ stream::loom_models::h2_
mutant reactor_no_rang_check stream::loom_models::i3_
mutant one_passed_word stream::loom_models::i4_
mutant no_count_fence stream::loom_models::i3_ stream::loom_models::h2_
mutant no_cut_fence journal::loom_models::j2_
mutant unfenced_reuse journal::loom_models::j3_
mutant unlink_before_start journal::loom_models::j4_
mutant unfenced_reader_position journal::loom_models::j5_
mutant cut_from_after_cut journal::loom_models::j6_
mutant pending_after_reserve log::loom_concurrent::k1_
mutant release_before_clean log::loom_concurrent::k1_ stream::loom_concurrent_models::k5_
mutant unblock_over_live log::loom_concurrent::k3_
mutant stale_ceiling stream::loom_concurrent_models::k4_
mutant rotate_unchecked stream::loom_concurrent_models::k4_
mutant unblock_unlocked stream::loom_concurrent_models::k6_
mutant ignore_owed_readers stream::loom_models::o_
mutant no_owed_fence stream::loom_models::o_
mutant skip_copy_check stream::loom_models::u_ log::loom_concurrent::u2_
mutant no_unblock_fence log::loom_concurrent::u2_
mutant lossy_count log::loom_concurrent::k7_

wait
bad=0
for name in "${jobs_run[@]}"; do
    cat "target/loom/jobs/$name.log"
    [[ -f target/loom/jobs/$name.ok ]] || { echo "FAIL: $name (above)"; bad=1; }
done
((bad == 0)) || { echo "FAIL: a model failed or a mutant was not caught (above)" >&2; exit 1; }

# Every knob of src/sync.rs has its line above (one added without a line fails here).
for known in "${knobs[@]}"; do
    grep -q "^mutant $known " "$0" || { echo "FAIL: mutant $known has no line in $0" >&2; exit 1; }
done

step "done in $((SECONDS - start))s"
