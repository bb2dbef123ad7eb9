//! Each rule against a hand-made ledger that keeps every promise, then against one that breaks
//! it: the good one passes every rule, each bad one fails exactly the rule it breaks.

use super::check;

const CONTROLLER: &str = "\
0 stream name=s0 concurrent=0 term=65536 mtu=1408 liveness_ms=30 hostile=0
0 spawn proc=r0.1 pid=1 role=reader stream=s0 tethered=1
1 spawn proc=w0.1 pid=2 role=writer stream=s0 tethered=0
500 kill proc=w0.1
500 exit proc=w0.1 status=signal:9
900 spawn proc=w0.2 pid=3 role=writer stream=s0 tethered=0
1500 exit proc=w0.2 status=code:0
2000 exit proc=r0.1 status=code:0
";

/// Session 7: three messages of 50 bytes (96 bytes framed each), then killed; session 8: three
/// more, closed.
const W1: &str = "\
10 creating role=writer proc=w0.1 stream=s0 w=0 inc=1 kind=exclusive
20 start role=writer session=7
30 ok seq=0 end=96 len=50
40 ok seq=1 end=192 len=50
50 ok seq=2 end=288 len=50
";

const W2: &str = "\
1000 creating role=writer proc=w0.2 stream=s0 w=0 inc=2 kind=exclusive
1010 start role=writer session=8
1020 ok seq=0 end=96 len=50
1030 refused seq=1 why=not_connected
1040 ok seq=2 end=192 len=50
1050 aborted seq=3 how=abort
1060 ok seq=4 end=288 len=50
1400 exit
";

const R: &str = "\
5 start role=reader proc=r0.1 stream=s0 shape=poll tethered=1 join=earliest later=earliest
6 opened
25 joined session=7 at=0
31 msg w=0 inc=1 seq=0 end=96
41 msg w=0 inc=1 seq=1 end=192
51 msg w=0 inc=1 seq=2 end=288
600 closed session=7
1015 joined session=8 at=0
1021 msg w=0 inc=2 seq=0 end=96
1041 msg w=0 inc=2 seq=2 end=192
1061 msg w=0 inc=2 seq=4 end=288
1600 closed session=8
1990 exit rss_kb=4000 fds=9 heap_kb=300 heap_open_kb=290 max_msg=50
";

fn files(c: &str, w1: &str, w2: &str, r: &str) -> Vec<(String, String)> {
    vec![
        ("events/controller.log".into(), c.into()),
        ("events/w0.1.log".into(), w1.into()),
        ("events/w0.2.log".into(), w2.into()),
        ("events/r0.1.log".into(), r.into()),
    ]
}

/// Asserts that a ledger keeps every promise.
fn passes(f: Vec<(String, String)>) {
    let report = check(f);
    assert!(report.failures.is_empty(), "{:#?}", report.failures);
}

/// The rules a reader-side edit of the good ledger breaks.
fn reader_edit(from: &str, to: &str) -> Vec<&'static str> {
    assert!(R.contains(from), "{from:?} is not in the good ledger");
    check(files(CONTROLLER, W1, W2, &R.replace(from, to))).rules()
}

#[test]
fn the_good_ledger_keeps_every_promise() {
    let report = check(files(CONTROLLER, W1, W2, R));
    assert!(report.failures.is_empty(), "{:#?}", report.failures);
    assert_eq!((report.stats.sessions, report.stats.committed, report.stats.deliveries), (2, 6, 6));
}

#[test]
fn r1_a_corrupt_a_phantom_a_refused_or_an_aborted_message_is_caught() {
    assert_eq!(
        reader_edit(
            "41 msg w=0 inc=1 seq=1 end=192\n",
            "41 corrupt why=bad-hash end=192\n41 msg w=0 inc=1 seq=1 end=192\n"
        ),
        ["R1.whole"]
    );
    // seq 3 of the killed writer is its unknown attempt (it may have committed it unlogged) ...
    assert_eq!(
        reader_edit("\n600 closed", "\n60 msg w=0 inc=1 seq=3 end=384\n600 closed"),
        Vec::<&str>::new()
    );
    // ... seq 4 was never attempted, and the graceful writer has no unknown attempt.
    assert!(
        reader_edit("\n600 closed", "\n60 msg w=0 inc=1 seq=4 end=384\n600 closed").contains(&"R1.genuine")
    );
    assert!(
        reader_edit("1600 closed", "1070 msg w=0 inc=2 seq=5 end=384\n1600 closed").contains(&"R1.genuine")
    );
    assert!(
        reader_edit("1041 msg w=0 inc=2 seq=2", "1041 msg w=0 inc=2 seq=1").contains(&"R1.genuine"),
        "refused"
    );
    assert!(
        reader_edit("1041 msg w=0 inc=2 seq=2", "1041 msg w=0 inc=2 seq=3").contains(&"R1.genuine"),
        "aborted"
    );
    assert!(
        reader_edit("1021 msg w=0 inc=2", "1021 msg w=0 inc=9").contains(&"R1.genuine"),
        "no such writer"
    );
}

#[test]
fn r2_a_duplicate_or_a_reorder_is_caught() {
    assert!(reader_edit(
        "51 msg w=0 inc=1 seq=2 end=288\n",
        "51 msg w=0 inc=1 seq=2 end=288\n52 msg w=0 inc=1 seq=2 end=288\n"
    )
    .contains(&"R2.once"));
    let swapped = reader_edit(
        "41 msg w=0 inc=1 seq=1 end=192\n51 msg w=0 inc=1 seq=2 end=288\n",
        "41 msg w=0 inc=1 seq=2 end=288\n51 msg w=0 inc=1 seq=1 end=192\n",
    );
    assert_eq!(swapped, ["R2.order"]);
}

#[test]
fn r3_a_message_at_two_positions_is_caught() {
    assert_eq!(reader_edit("41 msg w=0 inc=1 seq=1 end=192", "41 msg w=0 inc=1 seq=1 end=160"), ["R3.total"]);
}

#[test]
fn r4_a_gap_without_a_loss_is_caught_and_a_reported_one_is_not() {
    assert_eq!(reader_edit("41 msg w=0 inc=1 seq=1 end=192\n", ""), ["R4.missed"]);
    assert_eq!(
        reader_edit("41 msg w=0 inc=1 seq=1 end=192\n", "41 loss session=7 from=96 to=192 cause=Lapped\n"),
        Vec::<&str>::new()
    );
    // The last message of a session is owed once the reader says the session is closed ...
    assert_eq!(reader_edit("51 msg w=0 inc=1 seq=2 end=288\n", ""), ["R4.missed"]);
    // ... and not by a reader whose file ends before it (killed, say).
    let cut = R.split("51 msg").next().unwrap();
    let report = check(files(CONTROLLER, W1, W2, cut));
    assert!(!report.broke("R4.missed"), "{:#?}", report.failures);
    // A reader that opened after a session began owes nothing before where it joined.
    let late_open = R
        .replace("6 opened", "26 opened")
        .replace("5 start", "21 start")
        .replace("25 joined session=7 at=0", "27 joined session=7 at=96");
    let late_open = late_open.replace("31 msg w=0 inc=1 seq=0 end=96\n", "");
    passes(files(CONTROLLER, W1, W2, &late_open));
}

#[test]
fn r4_a_tethered_reader_there_before_a_session_began_loses_nothing_of_it() {
    let late = reader_edit(
        "1015 joined session=8 at=0\n1021 msg w=0 inc=2 seq=0 end=96\n",
        "1015 joined session=8 at=96\n1016 loss session=8 from=0 to=96 cause=JoinedLate\n",
    );
    assert_eq!(late, ["R4.late"]);
    // An untethered one may, if it says so.
    let untethered = R.replace("tethered=1", "tethered=0");
    let untethered = untethered.replace(
        "1015 joined session=8 at=0\n1021 msg w=0 inc=2 seq=0 end=96\n",
        "1015 joined session=8 at=96\n1016 loss session=8 from=0 to=96 cause=JoinedLate\n",
    );
    passes(files(CONTROLLER, W1, W2, &untethered));
}

#[test]
fn r4_a_whole_session_skipped_needs_a_sessions_missed_report() {
    // A third session between 7 and 8 that the reader never saw.
    let c = CONTROLLER.replace("900 spawn", "700 spawn proc=w0.9 pid=9 role=writer stream=s0 tethered=0\n800 exit proc=w0.9 status=code:0\n900 spawn");
    let w9 = "700 creating role=writer proc=w0.9 stream=s0 w=0 inc=9 kind=exclusive\n710 start role=writer session=9\n720 ok seq=0 end=96 len=50\n790 exit\n";
    let mut f = files(&c, W1, W2, R);
    f.push(("events/w0.9.log".into(), w9.into()));
    assert_eq!(check(f.clone()).rules(), ["R4.sessions"]);
    f[3].1 = R.replace("1015 joined", "1014 loss session=8 from=0 to=0 cause=SessionsMissed:1\n1015 joined");
    passes(f);
}

#[test]
fn r5_a_session_left_unseen_a_message_after_closed_or_a_closed_never_said_is_caught() {
    assert_eq!(reader_edit("600 closed session=7\n", ""), ["R5.closed"]);
    assert_eq!(
        reader_edit(
            "51 msg w=0 inc=1 seq=2 end=288\n600 closed session=7\n",
            "45 closed session=7\n51 msg w=0 inc=1 seq=2 end=288\n"
        ),
        ["R5.after-closed"]
    );
    // The reader ran 3.6 s after session 8 ended and never said it closed.
    let c = CONTROLLER.replace("2000 exit proc=r0.1", "3600000 exit proc=r0.1");
    let r = R.replace("1600 closed session=8\n", "");
    assert_eq!(check(files(&c, W1, W2, &r)).rules(), ["R5.liveness"]);
    // Unless it was still at work in the session until shortly before (a slow reader draining) ...
    let draining = r.replace("1990 exit", "3500000 loss session=8 from=288 to=288 cause=Lapped\n1990 exit");
    passes(files(&c, W1, W2, &draining));
    // ... or stopped most of that time.
    let c = c.replace("3600000 exit", "1600 stop proc=r0.1\n3000000 cont proc=r0.1\n3600000 exit");
    passes(files(&c, W1, W2, &r));
}

#[test]
fn r5_a_fault_returned_over_and_over_and_a_fault_nobody_caused_are_caught() {
    let r = R
        .replace("shape=poll", "shape=recv")
        .replace("600 closed session=7", "60 fault session=7 why=bad-version\n600 faults session=7 n=11000");
    let c = format!("{CONTROLLER}55 corrupt stream=s0 session=7 at=288\n");
    assert_eq!(check(files(&c, W1, W2, &r)).rules(), ["R5.fault-once"]);
    assert_eq!(check(files(CONTROLLER, W1, W2, &r)).rules(), ["R0.fault", "R5.fault-once"]);
    let once = r.replace("n=11000", "n=1");
    passes(files(&c, W1, W2, &once));
}

#[test]
fn r5_closed_returned_again_and_again_is_caught() {
    let r = R
        .replace("shape=poll", "shape=recv")
        .replace("600 closed session=7\n", "600 closed session=7\n601 closes session=7 n=1\n");
    passes(files(CONTROLLER, W1, W2, &r));
    assert_eq!(check(files(CONTROLLER, W1, W2, &r.replace("n=1", "n=5000"))).rules(), ["R5.closed-once"]);
    // A poll reader asks `is_closed()`, a state: no count applies.
    let polled = r.replace("shape=recv", "shape=poll").replace("n=1", "n=5000");
    passes(files(CONTROLLER, W1, W2, &polled));
}

#[test]
fn r5_closed_of_a_session_never_joined_is_not_returned_again() {
    // Session 8 begins and ends (no message) before the reader receives again: one more
    // `Closed`, which cannot name it. A second would be `Closed` returned again.
    let empty = "1000 creating role=writer proc=w0.2 stream=s0 w=0 inc=2 kind=exclusive\n1010 start role=writer session=8\n1400 exit\n";
    let r = R.replace("shape=poll", "shape=recv").split("1015 joined").next().unwrap().to_string()
        + "1700 closes session=7 n=2\n1990 exit rss_kb=4000 fds=9 heap_kb=300 heap_open_kb=290 max_msg=50\n";
    passes(files(CONTROLLER, W1, empty, &r));
    assert_eq!(check(files(CONTROLLER, W1, empty, &r.replace("n=2", "n=3"))).rules(), ["R5.closed-once"]);
}

#[test]
fn r0_a_crash_is_caught() {
    let c = CONTROLLER.replace("2000 exit proc=r0.1 status=code:0", "2000 exit proc=r0.1 status=code:101");
    assert_eq!(check(files(&c, W1, W2, R)).rules(), ["R0.crash"]);
    let w = W2.replace("1010 start role=writer session=8", "1010 nostart why=permission-denied");
    assert!(check(files(CONTROLLER, W1, &w, R)).rules().contains(&"R0.start"));
}

#[test]
fn r6_a_writer_held_or_committing_long_after_its_readers_died_is_caught() {
    // The reader is killed at 1 100 µs; the writer goes on committing 3 s later.
    let c = CONTROLLER.replace("1500 exit proc=w0.2", "4000000 exit proc=w0.2").replace(
        "2000 exit proc=r0.1 status=code:0",
        "1100 kill proc=r0.1\n1100 exit proc=r0.1 status=signal:9",
    );
    let r = R.split("1041 msg").next().unwrap().to_string();
    let late = W2.replace("1400 exit", "3500000 ok seq=5 end=384 len=50\n3900000 exit");
    assert_eq!(check(files(&c, W1, &late, &r)).rules(), ["R6.connected"]);
    let soon = W2.replace("1400 exit", "1500000 ok seq=5 end=384 len=50\n3900000 exit");
    passes(files(&c, W1, &soon, &r));
    let held = W2.replace("1400 exit", "3900000 held from=1200 to=3800000 why=back_pressured\n3900000 exit");
    assert_eq!(check(files(&c, W1, &held, &r)).rules(), ["R6.held"]);
    // Unless another writer of the stream held a claim open until shortly before.
    let c2 = format!("{c}10 spawn proc=w9.1 pid=9 role=writer stream=s0 tethered=0\n3900000 exit proc=w9.1 status=code:0\n");
    let other = "10 creating role=writer proc=w9.1 stream=s0 w=9 inc=9 kind=concurrent\n11 start role=writer session=8\n1100 hold\n3000000 ok seq=0 end=384 len=50\n3800000 exit\n";
    let mut f = files(&c2, W1, &held, &r);
    f.push(("events/w9.1.log".into(), other.into()));
    let report = check(f);
    assert!(!report.broke("R6.held"), "{:#?}", report.failures);
}

#[test]
fn r7_a_heap_that_grew_a_leftover_file_or_many_descriptors_are_caught() {
    assert_eq!(reader_edit("heap_kb=300", "heap_kb=2000"), ["R7.heap"]);
    assert_eq!(reader_edit("fds=9", "fds=900"), ["R7.fds"]);
    assert_eq!(reader_edit("rss_kb=4000", "rss_kb=4000000"), ["R7.rss"]);
    // An untethered reader that grew a term's worth by the time it stopped at a bad frame.
    let c = format!("{CONTROLLER}55 corrupt stream=s0 session=7 at=288\n");
    let r = R
        .replace("tethered=1", "tethered=0")
        .replace("600 closed", "60 fault session=7 why=bad heap_kb=1400 heap_open_kb=290\n600 closed");
    assert_eq!(check(files(&c, W1, W2, &r)).rules(), ["R7.heap"]);
    passes(files(&c, W1, W2, &r.replace("heap_kb=1400", "heap_kb=300")));
    let c = format!("{CONTROLLER}2100 leftover path=/dev/shm/x/s0.readers\n");
    assert_eq!(check(files(&c, W1, W2, R)).rules(), ["R7.files"]);
}

#[test]
fn r7_a_python_persistent_readers_queue_counts_as_a_python_readers_does() {
    // Python reads through the core's receiver, whose queue holds up to one read of the
    // largest messages: 669 KiB grown with 32 KiB messages (seed 0x6d809957c35c67b5, a
    // persistent `py-poll` reader). A Rust poller queues nothing: the same growth is caught.
    let grown = |shape: &str| {
        R.replace("shape=poll", &format!("shape={shape}")).replace(
            "heap_kb=300 heap_open_kb=290 max_msg=50",
            "heap_kb=5810 heap_open_kb=5141 max_msg=32720",
        )
    };
    passes(files(CONTROLLER, W1, W2, &grown("py-poll")));
    passes(files(CONTROLLER, W1, W2, &grown("persistent-py-poll")));
    assert_eq!(check(files(CONTROLLER, W1, W2, &grown("persistent-poll"))).rules(), ["R7.heap"]);
}

#[test]
fn r8_a_split_or_lagging_tethered_recorder_and_a_replay_that_differs_are_caught() {
    let rec = "2 start role=recorder proc=c0.1 stream=s0 tethered=1\n3 opened\n30 recording id=0\n45 recording id=1\n1990 exit lost_bytes=96\n";
    let c = format!(
        "{}2 spawn proc=c0.1 pid=5 role=recorder stream=s0 tethered=1\n2000 exit proc=c0.1 status=code:0\n2100 recording id=0 stream=s0 session=7 start=0 stop=96 reason=lagged gap=0\n2100 recording id=1 stream=s0 session=7 start=192 stop=288 reason=publisher-died gap=96\n",
        CONTROLLER
    );
    let replay = |id: u32, a: i64, b: i64, body: &str| {
        format!("2200 start role=replay proc=replay-{id} stream=s0 shape=replay tethered=1 recording={id} from={a} stop={b}\n2200 joined session=7 at={a}\n{body}")
    };
    let mut f = files(&c, W1, W2, R);
    f.push(("events/c0.1.log".into(), rec.into()));
    f.push(("events/replay-0.log".into(), replay(0, 0, 96, "2201 msg w=0 inc=1 seq=0 end=96\n")));
    f.push(("events/replay-1.log".into(), replay(1, 192, 288, "2201 msg w=0 inc=1 seq=2 end=288\n")));
    assert_eq!(check(f.clone()).rules(), ["R8.gap", "R8.lagged", "R8.split"]);
    // An untethered recorder may lag and leave a gap, if its subscription reported the lap.
    let untethered = rec
        .replace("tethered=1", "tethered=0")
        .replace("45 recording id=1", "44 loss session=7 from=96 to=192 cause=Lapped\n45 recording id=1");
    let mut g = f.clone();
    g[0].1 =
        c.replace("pid=5 role=recorder stream=s0 tethered=1", "pid=5 role=recorder stream=s0 tethered=0");
    g[4].1 = untethered.clone();
    assert_eq!(check(g.clone()).rules(), Vec::<&str>::new());
    // A lap reported in two touching pieces covers the gap, and so does a lap whose `to` falls
    // inside the message (at 96) whose start it reported (seed 0x1f86216d60389062); a lap
    // ending where a message of the gap starts leaves that message unreported.
    let pieces = |a: &str| untethered.replace("44 loss session=7 from=96 to=192 cause=Lapped\n", a);
    g[4].1 = pieces(
        "43 loss session=7 from=96 to=128 cause=Lapped\n44 loss session=7 from=128 to=192 cause=Lapped\n",
    );
    assert_eq!(check(g.clone()).rules(), Vec::<&str>::new());
    g[4].1 = pieces("44 loss session=7 from=96 to=128 cause=Lapped\n");
    assert_eq!(check(g.clone()).rules(), Vec::<&str>::new());
    g[4].1 = pieces("44 loss session=7 from=64 to=96 cause=Lapped\n");
    assert_eq!(check(g.clone()).rules(), ["R8.gap"]);
    g[4].1 = untethered.replace("44 loss session=7 from=96 to=192 cause=Lapped\n", "");
    assert_eq!(check(g).rules(), ["R8.gap"]);
    // One recording, replayed with a message missing.
    let one = c.replace("reason=lagged", "reason=publisher-died").replace("stop=96", "stop=288");
    let one = one.lines().filter(|l| !l.contains("id=1")).collect::<Vec<_>>().join("\n") + "\n";
    f[0].1 = one;
    f[4].1 = rec.replace("45 recording id=1\n", "").replace("lost_bytes=96", "lost_bytes=0");
    f[5].1 = replay(0, 0, 288, "2201 msg w=0 inc=1 seq=0 end=96\n2202 msg w=0 inc=1 seq=2 end=288\n");
    f.pop();
    assert_eq!(check(f.clone()).rules(), ["R4.missed", "R8.same"]);
    f[5].1 = replay(0, 0, 288, "2201 msg w=0 inc=1 seq=0 end=96\n2201 msg w=0 inc=1 seq=1 end=192\n2202 msg w=0 inc=1 seq=2 end=288\n");
    passes(f);
}

/// Persistent reader `p0` in two incarnations over the good ledger's sessions: the first is
/// killed after storing the position after 1/0 (its tail 1/1 is delivered again), the second
/// reads the rest, session 8's middle purged under it (a `Purged` loss covers 2/2).
const P_CONTROLLER: &str = "\
100 spawn proc=p0.1 pid=4 role=persistent stream=s0 tethered=0
800 kill proc=p0.1
800 exit proc=p0.1 status=signal:9
850 spawn proc=p0.2 pid=5 role=persistent stream=s0 tethered=0
1100 purge stream=s0 id=1 session=8 from=0 to=192 bytes=65536 began=1090
1900 exit proc=p0.2 status=code:0
";

const P1: &str = "\
110 start role=persistent proc=p0.1 inc=3 stream=s0 name=p0 shape=persistent tethered=0 join=earliest speed=fast limit=4
111 opened join=earliest
112 joined session=7 at=-
120 msg w=0 inc=1 seq=0 end=96
121 pos rec=0 at=96
130 msg w=0 inc=1 seq=1 end=192
";

const P2: &str = "\
860 start role=persistent proc=p0.2 inc=4 stream=s0 name=p0 shape=persistent tethered=0 join=earliest speed=fast limit=4
861 opened join=earliest
862 joined session=7 at=-
870 msg w=0 inc=1 seq=1 end=192
871 msg w=0 inc=1 seq=2 end=288
872 pos rec=0 at=288
1025 joined session=8 at=-
1026 msg w=0 inc=2 seq=0 end=96
1027 pos rec=1 at=96
1200 loss session=8 from=96 to=192 cause=Purged
1201 msg w=0 inc=2 seq=4 end=288
1202 pos rec=1 at=288
1890 exit rss_kb=4000 fds=9 heap_kb=300 heap_open_kb=290 max_msg=50
";

/// The rules the good ledger with persistent reader files `p1`, `p2` (and controller lines
/// `pc`) breaks.
fn persistent(pc: &str, p1: &str, p2: &str) -> Vec<&'static str> {
    let mut f = files(&format!("{CONTROLLER}{pc}"), W1, W2, R);
    f.push(("events/p0.1.log".into(), p1.into()));
    f.push(("events/p0.2.log".into(), p2.into()));
    check(f).rules()
}

/// The rules an edit of the second incarnation breaks.
fn p2_edit(from: &str, to: &str) -> Vec<&'static str> {
    assert!(P2.contains(from), "{from:?} is not in the good ledger");
    persistent(P_CONTROLLER, P1, &P2.replace(from, to))
}

#[test]
fn p_two_incarnations_of_a_persistent_reader_keep_every_promise() {
    assert_eq!(persistent(P_CONTROLLER, P1, P2), Vec::<&str>::new());
    // A NotRecorded loss covers what the journal never held as a Purged one does.
    assert_eq!(p2_edit("cause=Purged", "cause=NotRecorded"), Vec::<&str>::new());
}

#[test]
fn p_a_message_neither_delivered_by_any_incarnation_nor_reported_lost_is_caught() {
    assert_eq!(p2_edit("871 msg w=0 inc=1 seq=2 end=288\n", ""), ["P.missed"]);
    // Delivered by the first incarnation only is delivered.
    assert_eq!(
        persistent(
            P_CONTROLLER,
            &format!("{P1}131 msg w=0 inc=1 seq=2 end=288\n"),
            &P2.replace("871 msg w=0 inc=1 seq=2 end=288\n", "")
        ),
        Vec::<&str>::new()
    );
}

#[test]
fn p_a_loss_other_than_purged_or_not_recorded_or_a_purge_nobody_made_is_caught() {
    // Lapped: the live loss it should have fallen back to the journal for (and it covers nothing).
    assert_eq!(p2_edit("cause=Purged", "cause=Lapped"), ["P.cause", "P.missed"]);
    // Purged, but the controller purged nothing.
    let no_purge = P_CONTROLLER
        .replace("1100 purge stream=s0 id=1 session=8 from=0 to=192 bytes=65536 began=1090\n", "");
    assert_eq!(persistent(&no_purge, P1, P2), ["P.cause"]);
}

#[test]
fn p_a_message_delivered_again_beyond_the_unstored_tail_is_caught() {
    // 1/0 was covered by the stored position at 96.
    assert_eq!(
        p2_edit("870 msg w=0 inc=1 seq=1", "869 msg w=0 inc=1 seq=0 end=96\n870 msg w=0 inc=1 seq=1"),
        ["P.redelivered"]
    );
    // More again than the last poll can hold (limit 4 fragments: 5 messages at most).
    let many: String =
        (0..7).map(|q| format!("{} ok seq={q} end={} len=50\n", 30 + q, 96 * (q + 1))).collect();
    let w1 = format!("10 creating role=writer proc=w0.1 stream=s0 w=0 inc=1 kind=exclusive\n20 start role=writer session=7\n{many}");
    let p1: String =
        (0..7).map(|q| format!("{} msg w=0 inc=1 seq={q} end={}\n", 120 + q, 96 * (q + 1))).collect();
    let p2: String =
        (0..7).map(|q| format!("{} msg w=0 inc=1 seq={q} end={}\n", 870 + q, 96 * (q + 1))).collect();
    let head = |p: &str, n: &str| p.lines().take(3).collect::<Vec<_>>().join("\n").replace("p0.1", n) + "\n";
    let mut f = files(&format!("{CONTROLLER}{P_CONTROLLER}"), &w1, W2, R);
    f.push(("events/p0.1.log".into(), format!("{}{p1}", head(P1, "p0.1"))));
    f.push(("events/p0.2.log".into(), format!("{}{p2}", head(P1, "p0.2"))));
    assert!(check(f).rules().contains(&"P.redelivered"));
}

#[test]
fn p_a_redelivery_after_a_new_message_or_out_of_order_is_caught() {
    // The first incarnation skipped 1/1 and delivered 1/2 unstored; the second delivers 1/1
    // (new) and then 1/2 again: not a redelivered tail.
    let p1 = P1.replace("130 msg w=0 inc=1 seq=1 end=192", "130 msg w=0 inc=1 seq=2 end=288");
    assert_eq!(persistent(P_CONTROLLER, &p1, P2), ["P.redelivered"]);
    // Session 7's last message after session 8's first: out of the stream's order.
    assert_eq!(
        p2_edit(
            "871 msg w=0 inc=1 seq=2 end=288\n872 pos rec=0 at=288\n1025 joined session=8 at=-\n1026 msg w=0 inc=2 seq=0 end=96\n",
            "1025 joined session=8 at=-\n1026 msg w=0 inc=2 seq=0 end=96\n1026 joined session=7 at=-\n1026 msg w=0 inc=1 seq=2 end=288\n1026 joined session=8 at=-\n"
        ),
        ["P.order"]
    );
}

#[test]
fn p_a_detach_explains_a_purged_loss_and_a_truncation_the_tail_it_cut() {
    // A detach moves the start up as a purge does: the loss it causes reads `Purged`.
    let purge = "1100 purge stream=s0 id=1 session=8 from=0 to=192 bytes=65536 began=1090\n";
    let detach =
        P_CONTROLLER.replace(purge, "1100 detach stream=s0 id=1 session=8 from=0 to=192 began=1090\n");
    assert_eq!(persistent(&detach, P1, P2), Vec::<&str>::new());
    // One that moved nothing explains nothing.
    let idle = P_CONTROLLER.replace(purge, "1100 detach stream=s0 id=1 session=8 from=0 to=0 began=1090\n");
    assert_eq!(persistent(&idle, P1, P2), ["P.cause"]);
    // 1/2 ([192, 288) of session 7) delivered by no incarnation: missed, even when the
    // controller truncated session 7's recording below it, unless the name reported the cut
    // tail (as the library does: `Purged`, from where it got to the old stop).
    let p2 = P2.replace("871 msg w=0 inc=1 seq=2 end=288\n", "");
    assert_eq!(persistent(P_CONTROLLER, P1, &p2), ["P.missed"]);
    let cut = |to: i64| {
        format!("{P_CONTROLLER}950 truncate stream=s0 id=0 session=7 start=0 from=288 to={to} files=0 bytes=0 probe=104 probe_got=PositionNotAvailable began=940\n")
    };
    assert_eq!(persistent(&cut(192), P1, &p2), ["P.missed"]);
    let told = p2.replace(
        "1025 joined session=8",
        "960 loss session=7 from=192 to=288 cause=Purged\n1025 joined session=8",
    );
    assert_eq!(persistent(&cut(192), P1, &told), Vec::<&str>::new());
    // The loss explained only by a truncation that cut something, before it.
    assert_eq!(persistent(&cut(288), P1, &told), ["P.cause"]);
    assert_eq!(persistent(P_CONTROLLER, P1, &told), ["P.cause"]);
}

/// Recording 0 of session 7 (the good ledger's first), with the controller's operations `ops`
/// on it, the catalog after the run saying `start` and `stop`, and its final replay delivering
/// `replayed` (messages of writer incarnation 1).
fn retention(ops: &str, start: i64, stop: i64, replayed: &[u64]) -> Vec<&'static str> {
    let c = format!(
        "{CONTROLLER}{ops}2100 recording id=0 stream=s0 session=7 start={start} stop={stop} reason=publisher-died gap=0 origin=0\n"
    );
    let mut body = format!("2200 start role=replay proc=replay-0 stream=s0 shape=replay tethered=1 recording=0 from={start} stop={stop}\n2200 joined session=7 at={start}\n");
    for &seq in replayed {
        body.push_str(&format!("2201 msg w=0 inc=1 seq={seq} end={}\n", 96 * (seq + 1)));
    }
    let mut f = files(&c, W1, W2, R);
    f.push(("events/replay-0.log".into(), body));
    check(f).rules()
}

const DETACH: &str = "1100 detach stream=s0 id=0 session=7 from=0 to=192 began=1090\n";
const DELETE: &str =
    "1150 delete-detached stream=s0 id=0 session=7 start=192 files=1 bytes=65536 began=1140\n";

fn attach(from: i64, to: i64) -> String {
    format!("1200 attach stream=s0 id=0 session=7 from={from} to={to} began=1190\n")
}

#[test]
fn r8_an_attach_brings_back_what_was_detached_and_nothing_deleted_or_purged() {
    // Detached, then attached: the recording starts where it did, and replays all of it.
    assert_eq!(retention(&format!("{DETACH}{}", attach(192, 0)), 0, 288, &[0, 1, 2]), Vec::<&str>::new());
    // Detached and left so: it starts at the detach's end.
    assert_eq!(retention(DETACH, 192, 288, &[2]), Vec::<&str>::new());
    // An attach that brought back part of it, or nothing, though the files were there.
    assert_eq!(retention(&format!("{DETACH}{}", attach(192, 96)), 96, 288, &[1, 2]), ["R8.attach"]);
    assert_eq!(retention(&format!("{DETACH}{}", attach(192, 192)), 192, 288, &[2]), ["R8.attach"]);
    // The detached files deleted (or purged with what lay above them): an attach brings nothing.
    assert_eq!(
        retention(&format!("{DETACH}{DELETE}{}", attach(192, 192)), 192, 288, &[2]),
        Vec::<&str>::new()
    );
    assert_eq!(retention(&format!("{DETACH}{DELETE}{}", attach(192, 0)), 0, 288, &[0, 1, 2]), ["R8.attach"]);
    // Detached below 96, then purged below 192 (the detached files with it).
    let purged = "1100 detach stream=s0 id=0 session=7 from=0 to=96 began=1090\n1150 purge stream=s0 id=0 session=7 from=96 to=192 bytes=65536 began=1140\n";
    assert_eq!(retention(&format!("{purged}{}", attach(192, 192)), 192, 288, &[2]), Vec::<&str>::new());
    assert_eq!(retention(&format!("{purged}{}", attach(192, 0)), 0, 288, &[0, 1, 2]), ["R8.attach"]);
}

#[test]
fn r8_a_catalog_that_does_not_say_what_the_last_operation_left_is_caught() {
    let ops = format!("{DETACH}{}", attach(192, 0));
    // The attach said 0; the catalog after the run starts at 192 (the replay then, rightly, from
    // there).
    assert_eq!(retention(&ops, 192, 288, &[2]), ["R8.retained"]);
    // A final replay that starts above what the catalog says misses what it holds.
    assert_eq!(retention(&ops, 0, 288, &[2]), ["R4.missed", "R8.same"]);
}

const TRUNCATE: &str = "1300 truncate stream=s0 id=0 session=7 start=0 from=288 to=192 files=0 bytes=0 probe=104 probe_got=PositionNotAvailable began=1290\n";

#[test]
fn r8_a_truncation_refuses_a_position_inside_a_message_and_nothing_past_the_cut_is_replayed() {
    assert_eq!(retention(TRUNCATE, 0, 192, &[0, 1]), Vec::<&str>::new());
    // The position inside a message was taken.
    assert_eq!(
        retention(&TRUNCATE.replace("got=PositionNotAvailable", "got=ok"), 0, 192, &[0, 1]),
        ["R8.truncate"]
    );
    // Its refusal named a start before the position, and the cut went there.
    assert_eq!(retention(&TRUNCATE.replace("to=192", "to=96"), 0, 96, &[0]), ["R8.truncate"]);
    // The catalog kept the old stop, or the final replay delivered a message past the cut.
    assert_eq!(retention(TRUNCATE, 0, 288, &[0, 1, 2]), ["R8.retained", "R8.truncate"]);
    assert_eq!(retention(TRUNCATE, 0, 192, &[0, 1, 2]), ["R8.truncate"]);
    // A truncation that failed still says what its try inside a message got.
    let failed = "1300 truncate stream=s0 id=0 session=7 probe=104 probe_got=Timeout\n";
    assert_eq!(retention(failed, 0, 288, &[0, 1, 2]), ["R8.truncate"]);
}
