//! The `shmlog` command-line tool, run as a separate process against real streams.

/// The core's temporary-directory helper of the tests, shared by file.
#[allow(dead_code)]
#[path = "../../tests/support/dir.rs"]
mod dir;

use dir::ShmDir;
use json::Doc;
use shmlog::{Header, Publication, Subscription};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_shmlog");

fn shmlog(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run shmlog")
}

/// Runs `shmlog` and returns its standard output, failing the test on a non-zero exit.
fn shmlog_ok(args: &[&str]) -> String {
    let out = shmlog(args);
    assert!(
        out.status.success(),
        "shmlog {args:?} failed: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn spawn(args: &[&str]) -> Child {
    Command::new(BIN).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn shmlog")
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn finish(child: Child) -> (String, String, std::process::ExitStatus) {
    let out = child.wait_with_output().expect("wait for shmlog");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status,
    )
}

fn signal(child: &Child, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid fits");
    // SAFETY: kill(2) has no memory arguments; the child is ours and not yet reaped, so the pid
    // cannot name another process.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig}): {}", std::io::Error::last_os_error());
}

fn drain(sub: &mut Subscription) -> usize {
    let mut n = 0;
    loop {
        let got = sub.poll(|_: &[u8], _: &Header| {}, 1000);
        if got == 0 {
            return n;
        }
        n += got;
    }
}

fn dir_arg(dir: &ShmDir) -> &str {
    dir.path().to_str().expect("UTF-8 temp path")
}

#[test]
fn stat_json_reports_positions_and_pids_of_a_live_publisher_and_readers() {
    let dir = ShmDir::new("cli-stat");
    let mut publication =
        Publication::builder("prices").dir(dir.path()).term_length(64 * 1024).create().unwrap();
    let mut fast = Subscription::builder("prices").dir(dir.path()).open().unwrap();
    let idle = Subscription::builder("prices").dir(dir.path()).open().unwrap();
    assert!(publication.is_connected());
    for i in 0..50u32 {
        publication.offer(&i.to_le_bytes()).unwrap();
    }
    assert_eq!(drain(&mut fast), 50);
    let position = publication.position();

    let doc = json::parse(&shmlog_ok(&["stat", "--json", "--dir", dir_arg(&dir)]));
    let streams = doc.field("streams").arr();
    assert_eq!(streams.len(), 1);
    let st = &streams[0];
    assert_eq!(st.field("name").str(), "prices");
    assert!(st.field("problems").arr().is_empty());
    let log = st.field("log");
    assert_eq!(log.field("publisher_pid").int(), i64::from(std::process::id()));
    assert!(log.field("publisher_alive").bool());
    assert_eq!(log.field("position").int(), position);
    assert_eq!(log.field("session_id").int(), i64::from(publication.session_id()));
    assert_eq!(log.field("term_length").int(), 64 * 1024);
    assert_eq!(log.field("eos_position"), &json::Value::Null);
    let readers = st.field("readers").arr();
    assert_eq!(readers.len(), 2);
    for r in readers {
        assert_eq!(r.field("pid").int(), i64::from(std::process::id()));
        assert!(r.field("alive").bool());
        assert_eq!(r.field("state").str(), "active");
    }
    assert_eq!(readers[0].field("position").int(), fast.position());
    assert_eq!(readers[0].field("lag").int(), 0);
    assert_eq!(readers[1].field("position").int(), idle.position());
    assert_eq!(readers[1].field("lag").int(), position);
    assert!(readers[1].field("slowest").bool() && !readers[0].field("slowest").bool());

    let text = shmlog_ok(&["stat", "--dir", dir_arg(&dir)]);
    assert!(text.contains("stream prices") && text.contains("slowest"), "{text}");
    assert!(text.contains(&format!("position    {position}")), "{text}");
}

#[test]
fn stat_follows_a_publisher_in_another_process_and_sees_it_die() {
    let dir = ShmDir::new("cli-stat-child");
    let d = dir_arg(&dir);
    let mut child = spawn(&[
        "latency",
        "pub",
        "--dir",
        d,
        "--stream",
        "feed",
        "--rate",
        "2000",
        "--duration",
        "120",
        "--idle",
        "sleep",
    ]);
    let mut sub = Subscription::builder("feed")
        .dir(dir.path())
        .wait_for_publisher(Duration::from_secs(60))
        .open()
        .unwrap();
    let mut got = 0;
    wait_until("messages from the child publisher", || {
        got += drain(&mut sub);
        got >= 100
    });
    let doc = json::parse(&shmlog_ok(&["stat", "--json", "--dir", d]));
    let st = &doc.field("streams").arr()[0];
    let log = st.field("log");
    assert_eq!(log.field("publisher_pid").int(), i64::from(child.id()));
    assert!(log.field("publisher_alive").bool());
    assert!(log.field("position").int() >= sub.position());
    let reader = &st.field("readers").arr()[0];
    assert_eq!(reader.field("pid").int(), i64::from(std::process::id()));
    assert_eq!(reader.field("position").int(), sub.position());

    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    let doc = json::parse(&shmlog_ok(&["stat", "--json", "--dir", d]));
    let log = doc.field("streams").arr()[0].field("log");
    assert!(!log.field("publisher_alive").bool(), "the kernel dropped the dead publisher's lock");
}

#[test]
fn clean_removes_a_killed_publishers_files_and_keeps_live_ones() {
    let dir = ShmDir::new("cli-clean");
    let d = dir_arg(&dir);
    let mut child = spawn(&["latency", "pub", "--dir", d, "--stream", "dead", "--wait", "120"]);
    let dead_log = dir.path().join("dead.log");
    let dead_readers = dir.path().join("dead.readers");
    wait_until("the child's log", || dead_log.exists());
    child.kill().unwrap();
    child.wait().unwrap();
    let _live = Publication::builder("live").dir(dir.path()).term_length(64 * 1024).create().unwrap();
    let _reader = Subscription::builder("live").dir(dir.path()).open().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"not a stream").unwrap();

    let dry = shmlog_ok(&["clean", "--dry-run", "--dir", d]);
    assert!(dry.contains("would remove") && dry.contains("dead.log"), "{dry}");
    assert!(dead_log.exists() && dead_readers.exists(), "a dry run removes nothing");

    let report = json::parse(&shmlog_ok(&["clean", "--json", "--dir", d]));
    let paths = |key: &str| -> Vec<String> {
        report
            .field(key)
            .arr()
            .iter()
            .map(|e| e.field("path").str().rsplit('/').next().unwrap().to_owned())
            .collect()
    };
    let mut removed = paths("removed");
    removed.sort();
    assert_eq!(removed, ["dead.log", "dead.readers"]);
    let mut kept = paths("kept");
    kept.sort();
    assert_eq!(kept, ["live.log", "live.readers", "notes.txt"]);
    assert!(!dead_log.exists() && !dead_readers.exists());
    assert!(dir.path().join("live.log").exists() && dir.path().join("live.readers").exists());
    let pid = std::process::id();
    let reasons: Vec<&str> = report.field("kept").arr().iter().map(|e| e.field("reason").str()).collect();
    assert!(reasons.iter().any(|r| r.contains(&format!("pid {pid}")) && r.contains("alive")), "{reasons:?}");

    let again = shmlog_ok(&["clean", "--dir", d]);
    assert!(again.contains("0 files removed"), "idempotent: {again}");
}

#[test]
fn latency_burst_prints_statistics_and_writes_hgrm_and_svg() {
    let dir = ShmDir::new("cli-burst");
    let hgrm = dir.path().join("latency.hgrm");
    let svg = dir.path().join("latency.svg");
    let out = shmlog_ok(&[
        "latency",
        "burst",
        "--dir",
        dir_arg(&dir),
        "--count",
        "20000",
        "--size",
        "64",
        "--idle",
        "yield",
        "--hgrm",
        hgrm.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.contains("received 20000 messages"), "{out}");
    for label in ["count", "mean", "min", "max", "p50", "p90", "p95", "p99", "p99.9", "1/20", "20/20"] {
        assert!(out.contains(label), "{label} missing from:\n{out}");
    }
    let text = std::fs::read_to_string(&hgrm).unwrap();
    assert!(text.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)"), "{text}");
    assert!(text.contains("Total count    =        20000]"), "{text}");
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg"), "{picture}");
    assert!(picture.contains(r#"<path class="latency" d="M"#));
    assert_balanced_tags(&picture);
    assert!(!dir.path().join(format!("shmlog-burst-{}.log", std::process::id())).exists());
}

#[test]
fn latency_pub_and_sub_in_two_processes() {
    let dir = ShmDir::new("cli-pubsub");
    let d = dir_arg(&dir);
    let sub = spawn(&[
        "latency",
        "sub",
        "--dir",
        d,
        "--stream",
        "lat",
        "--count",
        "3000",
        "--timeout",
        "60",
        "--idle",
        "yield",
    ]);
    let publisher = shmlog_ok(&[
        "latency",
        "pub",
        "--dir",
        d,
        "--stream",
        "lat",
        "--rate",
        "20000",
        "--duration",
        "0.15",
        "--idle",
        "yield",
    ]);
    assert!(publisher.contains("sent 3000 messages"), "{publisher}");
    let (out, err, status) = finish(sub);
    assert!(status.success(), "{status}\n{out}\n{err}");
    assert!(out.contains("received 3000 messages"), "{out}");
    let count_line = out.lines().find(|l| l.trim_start().starts_with("count")).unwrap();
    assert!(count_line.ends_with(" 3000"), "{count_line}");
}

#[test]
fn ctrl_c_ends_runs_with_the_partial_result() {
    let dir = ShmDir::new("cli-sigint");
    let d = dir_arg(&dir);
    let sub = spawn(&["latency", "sub", "--dir", d, "--timeout", "120", "--idle", "sleep"]);
    let publisher =
        spawn(&["latency", "pub", "--dir", d, "--rate", "1000", "--duration", "120", "--idle", "sleep"]);
    let mut watcher = Subscription::builder("shmlog-latency").dir(dir.path()).open().unwrap();
    let mut seen = 0;
    wait_until("messages flowing", || {
        seen += drain(&mut watcher);
        seen >= 200
    });
    drop(watcher);
    signal(&sub, libc::SIGINT);
    let (out, err, status) = finish(sub);
    assert!(status.success(), "{status}\n{out}\n{err}");
    assert!(out.contains("interrupted: partial result") && out.contains("p99.9"), "{out}");
    signal(&publisher, libc::SIGINT);
    let (out, err, status) = finish(publisher);
    assert!(status.success(), "{status}\n{out}\n{err}");
    assert!(out.contains("(interrupted)") || out.contains("(the subscriber went away)"), "{out}");
}

#[test]
fn errors_name_the_file_and_exit_non_zero() {
    let dir = ShmDir::new("cli-errors");
    let missing = dir.path().join("nope");
    let out = shmlog(&["stat", "--dir", missing.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("shmlog: error:") && err.contains(missing.to_str().unwrap()), "{err}");

    let out = shmlog(&["latency", "burst", "--dir", dir_arg(&dir), "--size", "8"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--size"));

    let out = shmlog(&["latency", "sub", "--dir", dir_arg(&dir), "--timeout", "0.2"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no message received"));
}

#[test]
fn stat_of_an_empty_directory_and_watch_mode() {
    let dir = ShmDir::new("cli-empty");
    let doc = json::parse(&shmlog_ok(&["stat", "--json", "--dir", dir_arg(&dir)]));
    assert!(doc.field("streams").arr().is_empty());
    let mut publication = Publication::builder("w").dir(dir.path()).term_length(64 * 1024).create().unwrap();
    let mut sub = Subscription::builder("w").dir(dir.path()).open().unwrap();
    assert!(publication.is_connected());
    let watch = spawn(&["stat", "--json", "--watch", "0.2", "--dir", dir_arg(&dir)]);
    let stop = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < stop {
        let _ = publication.offer(&[0u8; 200]);
        drain(&mut sub);
        std::thread::sleep(Duration::from_millis(1));
    }
    signal(&watch, libc::SIGINT);
    let (out, err, status) = finish(watch);
    assert!(status.success(), "{status}\n{err}");
    let docs: Vec<json::Value> = out.lines().map(json::parse).collect();
    assert!(docs.len() >= 3, "{out}");
    let rate = docs.last().unwrap().field("streams").arr()[0].field("log").field("bytes_per_sec");
    assert!(rate.is_number(), "rates appear from the second snapshot: {rate:?}");
}

/// Records `count` messages of 200 bytes of stream `name` in-process into `journal` (64 KiB
/// segments), stopped; its id.
fn record_in_process(dir: &ShmDir, journal: &std::path::Path, name: &str, count: u32) -> u32 {
    use shmlog::journal::Recorder;
    let mut recorder =
        Recorder::builder(name, journal).stream_dir(dir.path()).segment_length(64 * 1024).start().unwrap();
    let mut p = Publication::builder(name).dir(dir.path()).term_length(64 * 1024).create().unwrap();
    while !p.is_connected() {
        recorder.poll().unwrap();
    }
    for i in 0..count {
        while p.offer(&[i as u8; 200]).is_err() {
            recorder.poll().unwrap();
        }
    }
    while recorder.recorded_position() < p.position() {
        recorder.poll().unwrap();
    }
    let id = recorder.recording_id().unwrap();
    recorder.stop().unwrap();
    id
}

#[test]
fn journal_operations_and_the_journal_in_stat() {
    let dir = ShmDir::new("cli-journal-ops");
    let journal = std::env::temp_dir().join(format!("shmlog-cli-journal-ops-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&journal);
    let j = journal.to_str().unwrap();
    let id = record_in_process(&dir, &journal, "ops", 3_000);
    let seg = 64 * 1024;
    let files = || {
        std::fs::read_dir(&journal)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".seg"))
            .count()
    };
    let all = files();
    assert!(all >= 8, "{all} segments");
    let op =
        |args: &[&str]| json::parse(&shmlog_ok(&[&["journal"], args, &["--journal", j, "--json"]].concat()));

    let detached = op(&["detach", &id.to_string(), "--to", &(3 * seg).to_string()]);
    assert_eq!(detached.field("done").str(), "detached");
    let start = detached.field("start_position").int();
    assert!(start >= 3 * seg && start < 4 * seg, "{start}");
    assert_eq!(files(), all);
    assert_eq!(op(&["attach", &id.to_string()]).field("start_position").int(), 0);
    op(&["detach", &id.to_string(), "--to", &(2 * seg).to_string()]);
    assert_eq!(op(&["delete-detached", &id.to_string()]).field("files_removed").int(), 2);
    let purged = op(&["purge", &id.to_string(), "--to", &(4 * seg).to_string()]);
    assert_eq!((purged.field("done").str(), purged.field("files_removed").int()), ("purged", 2));
    assert!(purged.field("bytes_removed").int() > 0);
    assert_eq!(files(), all - 4);
    let text = shmlog_ok(&["journal", "purge", "--journal", j, &id.to_string(), "--to", "0"]);
    assert!(text.contains("recording 0: purged") && text.contains("0 file(s)"), "{text}");

    // Truncate at a message start (one from a replay), refused elsewhere.
    let lines = shmlog_ok(&["replay", "--journal", j, &id.to_string()]);
    let at: i64 = lines.lines().nth(100).unwrap().split(' ').next().unwrap().parse().unwrap();
    let out = shmlog(&[
        "journal",
        "truncate",
        "--journal",
        j,
        &id.to_string(),
        "--at-position",
        &(at + 32).to_string(),
    ]);
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("nearest one is"),
        "{out:?}"
    );
    let cut = op(&["truncate", &id.to_string(), "--at-position", &at.to_string()]);
    assert_eq!(cut.field("stop_position").int(), at);
    assert_eq!(shmlog_ok(&["replay", "--journal", j, &id.to_string()]).lines().count(), 101);

    // The journal's retention: set, shown, applied.
    let policy = json::parse(&shmlog_ok(&[
        "journal",
        "retention",
        "--journal",
        j,
        "--retain-segments",
        "1",
        "--json",
    ]));
    assert_eq!(policy.field("retention").field("max_segments").int(), 1);
    let text = shmlog_ok(&["journal", "retention", "--journal", j]);
    assert!(text.contains("keep 1 segments"), "{text}");

    // `stat --journal`: size, oldest and newest positions, retention, durable readers.
    let reader = shmlog::journal::DurableReader::register(&journal, "report", "ops").unwrap();
    reader.store(id, at);
    let doc = json::parse(&shmlog_ok(&["stat", "--dir", dir_arg(&dir), "--journal", j, "--json"]));
    let jr = &doc.field("journals").arr()[0];
    assert!(jr.field("disk_bytes").int() > 0);
    assert_eq!(jr.field("retention").field("max_segments").int(), 1);
    let st = &jr.field("streams").arr()[0];
    assert_eq!((st.field("stream").str(), st.field("recordings").int()), ("ops", 1));
    assert_eq!(st.field("oldest").field("position").int(), purged.field("start_position").int());
    assert_eq!(st.field("newest").field("position").int(), at);
    let dr = &jr.field("durable_readers").arr()[0];
    assert_eq!(
        (dr.field("name").str(), dr.field("position").int(), dr.field("lag_bytes").int()),
        ("report", at, 0)
    );
    assert!(dr.field("alive").bool());
    let text = shmlog_ok(&["stat", "--dir", dir_arg(&dir), "--journal", j]);
    assert!(text.contains(&format!("journal {j}")) && text.contains("keep 1 segments"), "{text}");
    assert!(text.contains("stream ops") && text.contains("durable reader report"), "{text}");
    drop(reader);

    // Applied: the durable reader (stopped now, still registered) keeps the segment it reads.
    let applied = json::parse(&shmlog_ok(&["journal", "retention", "--journal", j, "--apply", "--json"]));
    assert!(applied.field("applied").field("files_removed").int() >= 0);
    assert!(files() >= 1);

    // Delete: the recording and its files go.
    assert_eq!(op(&["delete", &id.to_string()]).field("done").str(), "deleted");
    assert_eq!(files(), 0);
    let doc = json::parse(&shmlog_ok(&["recordings", "--journal", j, "--json"]));
    assert!(doc.field("recordings").arr().is_empty());
    let out = shmlog(&["journal", "purge", "--journal", j, &id.to_string(), "--to", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("no recording with id {id}")), "{out:?}");
    let _ = std::fs::remove_dir_all(&journal);
}

/// Checks that every element of an XML document is closed, in order.
#[test]
fn record_recordings_and_replay_from_the_command_line() {
    let dir = ShmDir::new("cli-journal");
    let journal = std::env::temp_dir().join(format!("shmlog-cli-journal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&journal);
    let j = journal.to_str().unwrap();
    let recorder = spawn(&[
        "record",
        "ticks",
        "--dir",
        dir_arg(&dir),
        "--journal",
        j,
        "--until-end",
        "--fsync",
        "segment",
    ]);
    let mut publication =
        Publication::builder("ticks").dir(dir.path()).term_length(64 * 1024).create().unwrap();
    publication.wait_connected(Duration::from_secs(30)).unwrap();
    let count = 500u32;
    for i in 0..count {
        let msg = [i.to_le_bytes().as_slice(), &[0xAB; 20]].concat();
        publication.offer_blocking(&msg, Duration::from_secs(10)).unwrap();
    }
    publication.close();
    let (_, err, status) = finish(recorder);
    assert!(status.success(), "record failed: {err}");
    assert!(err.contains("recording 0 started") && err.contains("recording 0 stopped"), "{err}");

    let doc = json::parse(&shmlog_ok(&["recordings", "--journal", j, "--json"]));
    let list = doc.field("recordings").arr();
    assert_eq!(list.len(), 1);
    let r = &list[0];
    assert_eq!((r.field("id").int(), r.field("stream").str()), (0, "ticks"));
    assert_eq!(r.field("state").str(), "stopped:end-of-stream");
    let stop = r.field("stop_position").int();
    assert_eq!(r.field("bytes").int(), stop);
    assert_eq!(r.field("durable_position").int(), stop, "--fsync segment syncs at the stop");
    assert_eq!(r.field("checksum").str(), "crc32c", "frames are checksummed unless --no-checksum");
    let text = shmlog_ok(&["recordings", "--journal", j]);
    assert!(text.contains("ticks") && text.contains("stopped:end-of-stream"), "{text}");

    // To stdout: one `position length hex` line per message.
    let lines: Vec<String> = shmlog_ok(&["replay", "--journal", j, "0"]).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), count as usize);
    let fields: Vec<&str> = lines[7].split(' ').collect();
    assert_eq!(fields[1], "24");
    assert!(fields[2].starts_with("07000000abab"), "{}", lines[7]);
    let from: i64 = lines[9].split(' ').next().unwrap().parse().unwrap();
    let tail = shmlog_ok(&["replay", "--journal", j, "0", "--from", &from.to_string()]);
    assert_eq!(tail.lines().count(), count as usize - 10);
    assert!(tail.lines().next().unwrap().contains(" 0a000000"), "{tail}");

    // Into a new stream, read here.
    let into = spawn(&["replay", "--journal", j, "0", "--dir", dir_arg(&dir), "--into", "ticks-copy"]);
    // No `wait_for_publisher`: the replay may publish everything and close before `open` would
    // see it connected. It waits for a reader, so nothing is sent before we join.
    let mut copy = Subscription::builder("ticks-copy").dir(dir.path()).open().unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(copy.is_closed() && got.len() == count as usize) {
        copy.poll_blocking(
            |m: &[u8], _: &Header| got.push(u32::from_le_bytes(m[..4].try_into().unwrap())),
            100,
            Duration::from_millis(50),
        );
        assert!(Instant::now() < deadline, "the replayed stream did not end");
    }
    assert_eq!(got, (0..count).collect::<Vec<_>>());
    let (_, err, status) = finish(into);
    assert!(status.success(), "replay --into failed: {err}");

    // Errors name what is wrong and exit non-zero.
    let out = shmlog(&["replay", "--journal", j, "9"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no recording with id 9"));
    let out = shmlog(&["replay", "--journal", j, "0", "--from", "33"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("nearest one is"), "{out:?}");
    let _ = std::fs::remove_dir_all(&journal);
}

fn assert_balanced_tags(xml: &str) {
    let mut stack = Vec::new();
    let mut rest = xml;
    while let Some(open) = rest.find('<') {
        let close = rest[open..].find('>').expect("unterminated tag") + open;
        let tag = &rest[open + 1..close];
        rest = &rest[close + 1..];
        if tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name.trim()), "mismatched </{name}>");
        } else if !tag.ends_with('/') {
            stack.push(tag.split_whitespace().next().expect("tag name").to_owned());
        }
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
}

/// `shmlog stat` lists each bridge's status file under its stream (a stream with only bridge
/// files too), alive or not, and reports a damaged one; `clean` removes the files of bridges that
/// are gone and keeps a running bridge's and the streams' own (no Java needed: the files are
/// written here as a bridge would). The core's `inspect` does not know these files: the tool
/// joins it with `shmlog_bridge::status`. Moved here from the bridge's tests with the split.
#[test]
fn stat_lists_bridges_and_clean_removes_only_dead_ones() {
    use shmlog_bridge::status::{BridgeDirection, BridgeInfo};
    const STREAM: &str = "orders";
    let dir = ShmDir::new("cli-bridge-files");
    let d = dir_arg(&dir);
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let me = std::process::id();
    let mut info =
        BridgeInfo::new(STREAM, BridgeDirection::Out, "aeron:udp?endpoint=127.0.0.1:1", 7, "/dev/shm/a");
    info.messages = 42;
    std::fs::write(dir.path().join(format!("{STREAM}.out.{me}.bridge")), info.to_text()).unwrap();
    std::fs::write(dir.path().join(format!("{STREAM}.in.{dead_pid}.bridge")), info.to_text()).unwrap();
    std::fs::write(dir.path().join(format!("{STREAM}.in.{dead_pid}.resume")), [0u8; 16]).unwrap();
    std::fs::write(dir.path().join(format!("other.out.{me}.bridge")), "messages many\n").unwrap();
    let _live = Publication::builder("live").dir(dir.path()).term_length(64 * 1024).create().unwrap();

    let doc = json::parse(&shmlog_ok(&["stat", "--json", "--dir", d]));
    let streams = doc.field("streams").arr();
    let names: Vec<&str> = streams.iter().map(|s| s.field("name").str()).collect();
    assert_eq!(names, ["live", "orders", "other"], "sorted, bridge-only streams too");
    let orders = &streams[1];
    assert_eq!(orders.field("log"), &json::Value::Null);
    let mut seen: Vec<(i64, bool, i64)> = orders
        .field("bridges")
        .arr()
        .iter()
        .map(|b| (b.field("pid").int(), b.field("alive").bool(), b.field("messages").int()))
        .collect();
    seen.sort();
    let mut want = vec![(i64::from(me), true, 42), (i64::from(dead_pid), false, 42)];
    want.sort();
    assert_eq!(seen, want);
    let other = &streams[2];
    assert!(
        other.field("bridges").arr().is_empty() && other.field("bridge_problems").arr().len() == 1,
        "{other}"
    );
    let text = shmlog_ok(&["stat", "--dir", d]);
    assert!(
        text.contains("GONE (status left by a dead bridge") && text.contains("malformed bridge status"),
        "{text}"
    );

    let report = json::parse(&shmlog_ok(&["clean", "--json", "--dir", d]));
    let removed: Vec<&str> = report.field("removed").arr().iter().map(|e| e.field("path").str()).collect();
    assert_eq!(removed.len(), 2, "{removed:?}");
    assert!(removed.iter().all(|n| n.contains(&format!(".in.{dead_pid}."))), "{removed:?}");
    let kept = report.field("kept").arr();
    let why = |name: &str| {
        kept.iter()
            .find(|e| e.field("path").str().ends_with(name))
            .map(|e| e.field("reason").str().to_owned())
    };
    assert_eq!(why(&format!("{STREAM}.out.{me}.bridge")), Some(format!("bridge (pid {me}) is running")));
    assert!(why("live.log").is_some_and(|r| r.contains("publisher")), "{kept:?}");
    assert!(kept.iter().all(|e| e.field("reason").str() != "not a shmlog file name"), "{kept:?}");
    let mut left = dir.entries();
    left.sort();
    assert_eq!(
        left,
        [
            "live.log".to_owned(),
            "live.readers".to_owned(),
            format!("{STREAM}.out.{me}.bridge"),
            format!("other.out.{me}.bridge")
        ]
    );
}

/// The JSON documents the tool prints, read with serde_json; panics name what was missing.
mod json {
    pub use serde_json::Value;

    pub fn parse(text: &str) -> Value {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }

    pub trait Doc {
        fn field(&self, key: &str) -> &Value;
        fn arr(&self) -> &[Value];
        fn str(&self) -> &str;
        fn int(&self) -> i64;
        fn bool(&self) -> bool;
    }

    impl Doc for Value {
        fn field(&self, key: &str) -> &Value {
            self.as_object()
                .unwrap_or_else(|| panic!("not an object: {self}"))
                .get(key)
                .unwrap_or_else(|| panic!("no field {key:?} in {self}"))
        }

        fn arr(&self) -> &[Value] {
            self.as_array().unwrap_or_else(|| panic!("not an array: {self}"))
        }

        fn str(&self) -> &str {
            self.as_str().unwrap_or_else(|| panic!("not a string: {self}"))
        }

        fn int(&self) -> i64 {
            self.as_i64().unwrap_or_else(|| panic!("not an integer: {self}"))
        }

        fn bool(&self) -> bool {
            self.as_bool().unwrap_or_else(|| panic!("not a boolean: {self}"))
        }
    }
}
