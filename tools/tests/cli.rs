//! The `shmlog` command-line tool, run as a separate process against real streams.

/// The core's temporary-directory helper of the tests, shared by file.
#[allow(dead_code)]
#[path = "../../tests/it/support/dir.rs"]
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

/// A directory or symbolic link of a test outside the stream directory, removed at the end.
struct TempPath(std::path::PathBuf);

impl TempPath {
    fn new(tag: &str) -> Self {
        let path = std::env::temp_dir().join(format!("shmlog-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        let _ = std::fs::remove_file(&path);
        TempPath(path)
    }

    fn arg(&self) -> &str {
        self.0.to_str().expect("UTF-8 temp path")
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `stat --openmetrics` read back by Prometheus's own parser: every figure `stat --json` shows
/// (stream, readers, bridges, journal) with the value the JSON and the handles report, label
/// values that need escaping (a stream name with a quote and a backslash, a journal path with
/// quotes) read back as they are, and the families' types and units.
#[test]
fn openmetrics_stat_has_every_figure_and_parses() {
    use shmlog_bridge::status::{BridgeDirection, BridgeInfo, Loss, LossCause};
    const NAME: &str = "desk \"A\"\\fx";
    const CHANNEL: &str = "aeron:udp?endpoint=224.0.1.1:40557|interface=127.0.0.1";
    let dir = ShmDir::new("cli-openmetrics");
    let d = dir_arg(&dir);
    let journal = TempPath::new("cli-openmetrics-\"journal\"");
    let j = journal.arg();
    let me = std::process::id();

    // A publisher, a tethered reader 10 messages behind, an untethered reader lapped at least once.
    let mut p = Publication::builder(NAME).dir(dir.path()).term_length(64 * 1024).create().unwrap();
    let mut fast = Subscription::builder(NAME).dir(dir.path()).open().unwrap();
    let mut loose = Subscription::builder(NAME).dir(dir.path()).tethered(false).open().unwrap();
    assert!(p.is_connected());
    drain(&mut loose);
    for i in 0..1_000u32 {
        while p.offer(&[i as u8; 200]).is_err() {
            drain(&mut fast);
        }
    }
    drain(&mut fast);
    wait_until("the untethered reader to catch up", || {
        drain(&mut loose);
        loose.position() == p.position()
    });
    let mut lost = 0;
    while let Some(loss) = loose.take_loss() {
        lost += loss.to - loss.from;
    }
    assert!(loose.laps() >= 1 && lost > 0, "lapped: {} laps, {lost} bytes", loose.laps());
    for _ in 0..10 {
        p.offer(&[7u8; 200]).unwrap();
    }
    let position = p.position();

    // Two bridges' status files: a running out bridge, an in bridge whose process is gone.
    let mut out = BridgeInfo::new(NAME, BridgeDirection::Out, CHANNEL, 1001, "/dev/shm/aeron");
    (out.connected, out.messages, out.bytes, out.dropped, out.back_pressure) = (true, 42, 4200, 3, 5);
    (out.source_position, out.resume_position, out.updated_ms) = (4000, 4100, 1_700_000_000_123);
    out.push_loss(Loss { from: 100, to: 200, messages: Some(3), cause: LossCause::Dropped });
    std::fs::write(out.path(dir.path()), out.to_text()).unwrap();
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let mut inb = BridgeInfo::new(NAME, BridgeDirection::In, CHANNEL, 1001, "/dev/shm/aeron");
    (inb.pid, inb.duplicates, inb.bad_positions, inb.reconnects) = (gone_pid, 2, 1, 4);
    inb.push_loss(Loss { from: 300, to: 400, messages: None, cause: LossCause::Gap });
    std::fs::write(inb.path(dir.path()), inb.to_text()).unwrap();

    // A journal: a stopped recording, a durable reader 10 messages into it, a retention policy.
    let id = record_in_process(&dir, &journal.0, "rec", 300);
    let stop = shmlog::journal::recordings(&journal.0).unwrap()[0].as_ref().unwrap().stop_position;
    let reader = shmlog::journal::DurableReader::register(&journal.0, "report", "rec").unwrap();
    reader.store(id, 2560);
    shmlog_ok(&["journal", "retention", "--journal", j, "--retain-segments", "5"]);

    let text = shmlog_ok(&["stat", "--openmetrics", "--dir", d, "--journal", j]);
    assert!(text.ends_with("\n# EOF\n"), "{text}");
    let doc = json::parse(&shmlog_ok(&["stat", "--json", "--dir", d, "--journal", j]));
    let m = openmetrics::check(&text);

    // Metadata: every family typed, documented, with a unit where its name says so.
    for f in m.families() {
        let name = f.field("name").str();
        assert_ne!(f.field("type").str(), "unknown", "{name}: a sample outside its family's names");
        assert!(!f.field("help").str().is_empty(), "{name}");
    }
    assert_eq!(m.family("shmlog_stream_position_bytes").field("unit").str(), "bytes");
    assert_eq!(m.family("shmlog_stream_rotations").field("type").str(), "counter");
    assert_eq!(m.family("shmlog_reader_state").field("type").str(), "stateset");
    assert_eq!(m.family("shmlog_bridge").field("type").str(), "info");

    // The stream: what the handle says, and every figure of the JSON.
    let st = doc.field("streams").arr().iter().find(|s| s.field("name").str() == NAME).unwrap();
    let log = st.field("log");
    let s: &[(&str, &str)] = &[("dir", d), ("stream", NAME)];
    assert_eq!(m.value("shmlog_dir_up", &[("dir", d)]), 1.0);
    assert_eq!(m.value("shmlog_stream_position_bytes", s), position as f64);
    let session = p.session_id().to_string();
    assert_eq!(
        m.value("shmlog_stream_info", &[s, &[("session", &session), ("writers", "single")]].concat()),
        1.0
    );
    assert_eq!(m.value("shmlog_stream_publisher_alive", &[s, &[("pid", &me.to_string())]].concat()), 1.0);
    assert!(m.value("shmlog_stream_rotations_total", s) >= 3.0);
    for (field, sample) in [
        ("position", "shmlog_stream_position_bytes"),
        ("limit", "shmlog_stream_limit_bytes"),
        ("file_length", "shmlog_stream_log_size_bytes"),
        ("term_length", "shmlog_stream_term_length_bytes"),
        ("window", "shmlog_stream_window_bytes"),
        ("mtu", "shmlog_stream_mtu_bytes"),
        ("page_size", "shmlog_stream_page_size_bytes"),
        ("back_pressure_events", "shmlog_stream_back_pressure_events_total"),
        ("rotations", "shmlog_stream_rotations_total"),
        ("limit_recomputes", "shmlog_stream_limit_recomputes_total"),
        ("readers_evicted", "shmlog_stream_readers_evicted_total"),
        ("connected_readers", "shmlog_stream_connected_readers"),
        ("ignored_positions", "shmlog_stream_ignored_reader_positions"),
        ("mapped_by_readers", "shmlog_stream_mapped_by_readers"),
    ] {
        assert_eq!(m.value(sample, s), openmetrics::number(log.field(field)), "{field}");
    }
    let created = log.field("created_ns").int() as f64 / 1e9;
    assert!((m.value("shmlog_stream_rotations_created", s) - created).abs() < 1e-3);
    assert_eq!(m.value("shmlog_stream_reader_slots", s), st.field("slot_count").int() as f64);
    assert_eq!(m.value("shmlog_stream_problems", s), 0.0);

    // The readers: the handles' positions, lag and losses, and every figure of the JSON.
    let readers = st.field("readers").arr();
    assert_eq!(readers.len(), 2);
    for r in readers {
        let (slot, pid) = (r.field("slot").int().to_string(), r.field("pid").int().to_string());
        let l = [s, &[("slot", slot.as_str()), ("pid", pid.as_str())]].concat();
        let untethered = r.field("untethered").bool();
        let handle = if untethered { &loose } else { &fast };
        assert_eq!(m.value("shmlog_reader_position_bytes", &l), handle.position() as f64);
        assert_eq!(m.value("shmlog_reader_lag_bytes", &l), (position - handle.position()) as f64);
        assert_eq!(m.value("shmlog_reader_lag_bytes", &l), 2560.0, "10 messages of 256 bytes behind");
        if untethered {
            assert_eq!(m.value("shmlog_reader_losses_total", &l), loose.laps() as f64);
            assert_eq!(m.value("shmlog_reader_lost_bytes_total", &l), lost as f64);
        }
        for (field, sample) in [
            ("alive", "shmlog_reader_alive"),
            ("join_position", "shmlog_reader_join_position_bytes"),
            ("slowest", "shmlog_reader_slowest"),
            ("holds_back", "shmlog_reader_holding_back"),
            ("untethered", "shmlog_reader_untethered"),
            ("losses", "shmlog_reader_losses_total"),
            ("lost_bytes", "shmlog_reader_lost_bytes_total"),
        ] {
            assert_eq!(m.value(sample, &l), openmetrics::number(r.field(field)), "{field}");
        }
        let state =
            |st: &str| m.value("shmlog_reader_state", &[&l[..], &[("shmlog_reader_state", st)]].concat());
        assert_eq!((state("active"), state("waiting"), state("unknown")), (1.0, 0.0, 0.0));
        assert_eq!(m.value("shmlog_reader_info", &[&l[..], &[("session", session.as_str())]].concat()), 1.0);
    }

    // The bridges: the status files' figures.
    let (me_s, gone_s) = (me.to_string(), gone_pid.to_string());
    let o = [s, &[("direction", "out"), ("pid", me_s.as_str())]].concat();
    let i = [s, &[("direction", "in"), ("pid", gone_s.as_str())]].concat();
    let info = [&o[..], &[("channel", CHANNEL), ("aeron_stream_id", "1001")]].concat();
    assert_eq!(m.value("shmlog_bridge_info", &info), 1.0);
    assert_eq!((m.value("shmlog_bridge_alive", &o), m.value("shmlog_bridge_alive", &i)), (1.0, 0.0));
    assert_eq!(m.value("shmlog_bridge_connected", &o), 1.0);
    for (sample, want) in [
        ("shmlog_bridge_messages_total", 42.0),
        ("shmlog_bridge_bytes_total", 4200.0),
        ("shmlog_bridge_dropped_messages_total", 3.0),
        ("shmlog_bridge_back_pressure_events_total", 5.0),
        ("shmlog_bridge_source_position_bytes", 4000.0),
        ("shmlog_bridge_resume_position_bytes", 4100.0),
        ("shmlog_bridge_last_update_time_seconds", 1_700_000_000.123),
    ] {
        assert_eq!(m.value(sample, &o), want, "{sample}");
    }
    for (sample, want) in [
        ("shmlog_bridge_duplicate_messages_total", 2.0),
        ("shmlog_bridge_bad_position_messages_total", 1.0),
        ("shmlog_bridge_reconnects_total", 4.0),
    ] {
        assert_eq!(m.value(sample, &i), want, "{sample}");
    }
    let losses = |l: &[(&str, &str)], cause: &str| {
        m.value("shmlog_bridge_recent_losses", &[l, &[("cause", cause)]].concat())
    };
    assert_eq!((losses(&o, "dropped"), losses(&o, "gap"), losses(&i, "gap")), (1.0, 0.0, 1.0));
    assert!(m.absent("shmlog_bridge_source_position_bytes", &i), "none carried yet: no position");

    // The journal: positions, the durable reader's lag, retention, size.
    let jl: &[(&str, &str)] = &[("journal", j)];
    let js = [jl, &[("stream", "rec")]].concat();
    let jr = &doc.field("journals").arr()[0];
    let rec = id.to_string();
    assert_eq!(m.value("shmlog_journal_up", jl), 1.0);
    assert_eq!(m.value("shmlog_journal_disk_usage_bytes", jl), jr.field("disk_bytes").int() as f64);
    assert_eq!(m.value("shmlog_journal_retention_max_segments", jl), 5.0);
    assert!(m.absent("shmlog_journal_retention_max_bytes", jl), "no limit: no sample");
    assert_eq!(
        m.value("shmlog_journal_newest_position_bytes", &[&js[..], &[("recording", &rec)]].concat()),
        stop as f64
    );
    assert_eq!(
        m.value("shmlog_journal_oldest_position_bytes", &[&js[..], &[("recording", &rec)]].concat()),
        0.0
    );
    assert_eq!(m.value("shmlog_journal_recordings", &js), 1.0);
    assert_eq!(m.value("shmlog_journal_recording_active", &js), 0.0);
    let dr = [&js[..], &[("reader", "report")]].concat();
    assert_eq!(m.value("shmlog_journal_reader_lag_bytes", &dr), (stop - 2560) as f64);
    assert_eq!(
        m.value("shmlog_journal_reader_position_bytes", &[&dr[..], &[("recording", &rec)]].concat()),
        2560.0
    );
    assert_eq!(m.value("shmlog_journal_reader_alive", &dr), 1.0);
    drop(reader);
}

/// `serve-metrics` over loopback: the exposition computed at each scrape (it follows the
/// publisher), the OpenMetrics media type, a directory that cannot be read shown as down, a
/// label with a line feed escaped; 404, 405, 400 and 431 for what is not a scrape, and the
/// server still serving after them; SIGTERM ends it cleanly.
#[test]
fn openmetrics_served_over_http_per_scrape() {
    use std::io::{BufRead, BufReader};
    let dir = ShmDir::new("cli-serve-metrics");
    // A directory path with a line feed (through a link): a label value the format escapes.
    let link = TempPath::new("cli-serve-\nmetrics");
    std::os::unix::fs::symlink(dir.path(), &link.0).unwrap();
    let missing = TempPath::new("cli-serve-metrics-missing");
    let mut p = Publication::builder("feed").dir(dir.path()).term_length(64 * 1024).create().unwrap();
    let mut sub = Subscription::builder("feed").dir(dir.path()).open().unwrap();
    assert!(p.is_connected());
    p.offer(b"one").unwrap();

    let mut server = Command::new(BIN)
        .args(["serve-metrics", "--listen", "127.0.0.1:0", "--dir", link.arg(), "--dir", missing.arg()])
        .args(["--journal", missing.arg()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let addr = first
        .trim()
        .strip_prefix("serving OpenMetrics at http://")
        .and_then(|a| a.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("{first}"))
        .to_owned();
    let escaped_dir = link.arg().replace('\n', "\\n");
    let position_line =
        |pos: i64| format!("shmlog_stream_position_bytes{{dir=\"{escaped_dir}\",stream=\"feed\"}} {pos}\n");

    for round in 0..2 {
        let (status, head, body) = http::request(&addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(status, 200, "{head}{body}");
        assert!(
            head.contains("\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n"),
            "{head}"
        );
        assert!(body.contains(&position_line(p.position())), "round {round}: {body}");
        let m = openmetrics::check(&body);
        let l: &[(&str, &str)] = &[("dir", link.arg()), ("stream", "feed")];
        assert_eq!(m.value("shmlog_stream_position_bytes", l), p.position() as f64);
        assert_eq!(
            m.value("shmlog_reader_position_bytes", &[l, &[("slot", "0")]].concat()),
            sub.position() as f64
        );
        assert_eq!(m.value("shmlog_dir_up", &[("dir", link.arg())]), 1.0);
        assert_eq!(m.value("shmlog_dir_up", &[("dir", missing.arg())]), 0.0);
        assert_eq!(m.value("shmlog_journal_up", &[("journal", missing.arg())]), 0.0);
        // The next scrape sees what happened since.
        for _ in 0..5 {
            p.offer(b"more").unwrap();
        }
        drain(&mut sub);
    }

    let head_only = http::request(&addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!((head_only.0, head_only.2.as_str()), (200, ""));
    assert_eq!(http::request(&addr, b"GET /other HTTP/1.1\r\n\r\n").0, 404);
    assert_eq!(http::request(&addr, b"GET / HTTP/1.1\r\n\r\n").0, 404);
    let post = http::request(&addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(post.0, 405);
    assert!(post.1.contains("\r\nAllow: GET, HEAD\r\n"), "{}", post.1);
    assert_eq!(http::request(&addr, b"\x00\x01\x02 nonsense\r\n\r\n").0, 400);
    let huge = [&b"GET /metrics HTTP/1.1\r\nX-Long: "[..], &[b'a'; 20_000], b"\r\n\r\n"].concat();
    assert_eq!(http::request(&addr, &huge).0, 431);
    drop(std::net::TcpStream::connect(&addr).unwrap()); // connects, sends nothing, leaves
    let (status, _, body) = http::request(&addr, b"GET /metrics?from=test HTTP/1.0\r\n\r\n");
    assert!(status == 200 && body.contains(&position_line(p.position())), "still serving: {status}");

    signal(&server, libc::SIGTERM);
    let (_, err, status) = finish(server);
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("cli-serve-metrics-missing") && err.contains("shmlog_dir_up"), "logged once: {err}");
    assert_eq!(err.matches("serve-metrics:").count(), 1, "a failure is logged once, not per scrape: {err}");
}

/// A minimal HTTP/1 client for the tests of `serve-metrics`.
mod http {
    use std::io::{Read, Write};
    use std::time::Duration;

    /// Sends `request` as it is, reads until the server closes: (status, head, body).
    pub fn request(addr: &str, request: &[u8]) -> (u16, String, String) {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(request).expect("send");
        let mut reply = Vec::new();
        s.read_to_end(&mut reply).expect("read the response");
        let reply = String::from_utf8(reply).expect("UTF-8 response");
        let (head, body) = reply.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no head: {reply:?}"));
        let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{head}"));
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no Content-Length: {head}"));
        if !request.starts_with(b"HEAD ") {
            assert_eq!(body.len(), length, "{head}");
        }
        (status, format!("{head}\r\n"), body.to_owned())
    }
}

/// The OpenMetrics parser of Prometheus's Python client (`prometheus_client`), run on the tool's
/// output: the test reads back what a real scraper would. Python is `$SHMLOG_PYTHON`, else
/// `python3`; when it lacks the package, the set-up installs it from the Python package index
/// with pip into the build's test directory (once, shared by later runs). Only when that fails
/// (no Python, no pip, no network) is the parse skipped, with a message saying why, unless
/// `SHMLOG_REQUIRE_OPENMETRICS_PARSER` is set, which makes it a failure.
mod openmetrics {
    use super::json::{self, Doc, Value};
    use std::ffi::OsString;
    use std::io::Write;
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::sync::OnceLock;

    const SCRIPT: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
families = [
    {"name": f.name, "type": f.type, "unit": f.unit, "help": f.documentation,
     "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in f.samples]}
    for f in text_string_to_metric_families(sys.stdin.read())
]
json.dump(families, sys.stdout)
"#;

    /// An interpreter that can import the parser, and where the package is if pip put it there.
    pub struct Parser {
        python: OsString,
        path: Option<PathBuf>,
    }

    impl Parser {
        fn command(&self) -> Command {
            let mut c = Command::new(&self.python);
            if let Some(path) = &self.path {
                c.env("PYTHONPATH", path);
            }
            c
        }

        fn works(&self) -> bool {
            self.command()
                .args(["-c", "import prometheus_client.openmetrics.parser"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        }
    }

    /// Installs the package with pip into `into` (a fresh directory renamed into place, so that
    /// a concurrent run of the tests never sees half an installation). The reason if it fails.
    fn install(python: &OsString, into: &Path) -> Result<(), String> {
        let staging = into.with_extension(format!("staging-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        let out = Command::new(python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input"])
            .arg("--target")
            .arg(&staging)
            .arg("prometheus_client")
            .output()
            .map_err(|e| format!("{python:?} -m pip: {e}"))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(format!(
                "pip install prometheus_client: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        // Another run may have renamed its copy first: then that one is used.
        if std::fs::rename(&staging, into).is_err() {
            let _ = std::fs::remove_dir_all(&staging);
        }
        Ok(())
    }

    fn find() -> Result<Parser, String> {
        let python = std::env::var_os("SHMLOG_PYTHON").unwrap_or_else(|| "python3".into());
        let installed = Parser { python: python.clone(), path: None };
        if installed.works() {
            return Ok(installed);
        }
        let into = Path::new(env!("CARGO_TARGET_TMPDIR")).join("prometheus_client");
        let local = Parser { python, path: Some(into.clone()) };
        if !local.works() {
            install(&local.python, &into)?;
        }
        if local.works() {
            Ok(local)
        } else {
            Err(format!("{:?} cannot import prometheus_client from {}", local.python, into.display()))
        }
    }

    /// The parser, found or installed once per test process; `None` (after saying why) if it
    /// cannot be had.
    pub fn parser() -> Option<&'static Parser> {
        static PARSER: OnceLock<Result<Parser, String>> = OnceLock::new();
        match PARSER.get_or_init(find) {
            Ok(p) => Some(p),
            Err(why) => {
                assert!(std::env::var_os("SHMLOG_REQUIRE_OPENMETRICS_PARSER").is_none(), "{why}");
                eprintln!(
                    "SKIPPED the OpenMetrics parse: {why} (set SHMLOG_PYTHON to a Python with \
                     prometheus_client, or let pip reach the package index)"
                );
                None
            }
        }
    }

    /// The families Prometheus's parser read, or a panic with its error and the text.
    pub fn parse(parser: &Parser, text: &str) -> Families {
        let mut child = parser
            .command()
            .args(["-c", SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run python");
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "the OpenMetrics parser refused the exposition: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        Families(json::parse(&String::from_utf8(out.stdout).unwrap()))
    }

    /// The exposition read by the test itself, strictly (families, metadata, samples whose names
    /// belong to their family, escaped label values), so that every value is checked even where
    /// Python's parser cannot be had; where it can, the two readings must agree sample for sample.
    pub fn check(text: &str) -> Families {
        let mine = read(text);
        if let Some(p) = parser() {
            let theirs = parse(p, text);
            theirs.assert_same(&mine, text);
        }
        mine
    }

    fn read(text: &str) -> Families {
        let body = text.strip_suffix("# EOF\n").unwrap_or_else(|| panic!("no # EOF last: {text}"));
        let mut families: Vec<Value> = Vec::new();
        for line in body.lines() {
            if let Some(meta) = line.strip_prefix("# ") {
                let mut words = meta.splitn(3, ' ');
                let (Some(keyword), Some(name), Some(arg)) = (words.next(), words.next(), words.next())
                else {
                    panic!("metadata line: {line}")
                };
                if keyword == "TYPE" {
                    let f =
                        serde_json::json!({"name": name, "type": arg, "unit": "", "help": "", "samples": []});
                    families.push(f);
                    continue;
                }
                let f = families.last_mut().unwrap_or_else(|| panic!("{line} before # TYPE"));
                assert_eq!(f["name"], name, "{line}: metadata of another family");
                match keyword {
                    "UNIT" => f["unit"] = arg.into(),
                    "HELP" => f["help"] = arg.into(),
                    _ => panic!("metadata line: {line}"),
                }
                continue;
            }
            let f = families.last_mut().unwrap_or_else(|| panic!("{line} before # TYPE"));
            let (name, labels, value) = sample(line);
            let suffix = name.strip_prefix(f["name"].as_str().unwrap()).unwrap_or_else(|| panic!("{line}"));
            let allowed: &[&str] = match f["type"].as_str().unwrap() {
                "counter" => &["_total", "_created"],
                "info" => &["_info"],
                "gauge" | "stateset" => &[""],
                other => panic!("type {other}"),
            };
            assert!(allowed.contains(&suffix), "{line}: not a sample of its family");
            let s = serde_json::json!({"name": name, "labels": labels, "value": value});
            f["samples"].as_array_mut().unwrap().push(s);
        }
        Families(Value::Array(families))
    }

    /// `name{k="v",...} value`.
    fn sample(line: &str) -> (String, serde_json::Map<String, Value>, f64) {
        let end = line.find(['{', ' ']).unwrap_or_else(|| panic!("sample line: {line}"));
        let name = line[..end].to_owned();
        let mut labels = serde_json::Map::new();
        let mut rest = line[end..].chars();
        if line[end..].starts_with('{') {
            rest.next();
            loop {
                let key: String = rest.by_ref().take_while(|c| *c != '=').collect();
                assert_eq!(rest.next(), Some('"'), "{line}");
                let mut value = String::new();
                loop {
                    match rest.next() {
                        Some('"') => break,
                        Some('\\') => match rest.next() {
                            Some('n') => value.push('\n'),
                            Some(c @ ('\\' | '"')) => value.push(c),
                            other => panic!("escape {other:?}: {line}"),
                        },
                        Some(c) => value.push(c),
                        None => panic!("unterminated label value: {line}"),
                    }
                }
                assert!(labels.insert(key, value.into()).is_none(), "label twice: {line}");
                match rest.next() {
                    Some(',') => {}
                    Some('}') => break,
                    other => panic!("{other:?} after a label: {line}"),
                }
            }
        }
        let number: String = rest.collect();
        let number = number.strip_prefix(' ').unwrap_or_else(|| panic!("sample line: {line}"));
        let value = match number {
            "NaN" => f64::NAN,
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            n => n.parse().unwrap_or_else(|e| panic!("{e}: {line}")),
        };
        (name, labels, value)
    }

    /// A JSON number or boolean as the exposition's number.
    pub fn number(v: &Value) -> f64 {
        v.as_f64().or_else(|| v.as_bool().map(f64::from)).unwrap_or_else(|| panic!("not a number: {v}"))
    }

    /// Two readings of one number: equal, or (Python's parser reads some fractions, the
    /// `_created` times, a unit in the last place off the nearest double) within a few units.
    fn same_number(a: f64, b: f64) -> bool {
        a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 4.0 * f64::EPSILON * a.abs().max(b.abs())
    }

    pub struct Families(Value);

    impl Families {
        pub fn families(&self) -> &[Value] {
            self.0.arr()
        }

        /// Every family's metadata and every sample, as comparable lines.
        /// Every family's metadata and every sample (as a line without its value, and the value).
        fn normalized(&self) -> Vec<(String, f64)> {
            let mut lines = Vec::new();
            for f in self.families() {
                let [name, kind, unit, help] = ["name", "type", "unit", "help"].map(|k| f.field(k).str());
                lines.push((format!("# {name} {kind} {unit} {help}"), 0.0));
                for s in f.field("samples").arr() {
                    let mut labels: Vec<_> =
                        s.field("labels").as_object().unwrap().iter().map(|(k, v)| (k, v.str())).collect();
                    labels.sort();
                    lines.push((format!("{} {labels:?}", s.field("name").str()), number(s.field("value"))));
                }
            }
            lines
        }

        /// Panics unless both readings have the same families, samples and values.
        fn assert_same(&self, other: &Families, text: &str) {
            let (a, b) = (self.normalized(), other.normalized());
            let differ = a.len() != b.len()
                || a.iter().zip(&b).any(|((ka, va), (kb, vb))| ka != kb || !same_number(*va, *vb));
            assert!(!differ, "the two parsers disagree:\n{a:?}\n{b:?}\non:\n{text}");
        }

        pub fn family(&self, name: &str) -> &Value {
            self.families()
                .iter()
                .find(|f| f.field("name").str() == name)
                .unwrap_or_else(|| panic!("no {name}"))
        }

        fn matching(&self, sample: &str, labels: &[(&str, &str)]) -> Vec<&Value> {
            self.families()
                .iter()
                .flat_map(|f| f.field("samples").arr())
                .filter(|s| s.field("name").str() == sample)
                .filter(|s| {
                    labels.iter().all(|(k, v)| s.field("labels").get(*k).and_then(Value::as_str) == Some(*v))
                })
                .collect()
        }

        /// The value of the one sample named `sample` with (at least) these labels.
        pub fn value(&self, sample: &str, labels: &[(&str, &str)]) -> f64 {
            match self.matching(sample, labels)[..] {
                [one] => number(one.field("value")),
                ref found => panic!("{} samples {sample} with {labels:?}: {found:?}", found.len()),
            }
        }

        /// `true` if there is no such sample.
        pub fn absent(&self, sample: &str, labels: &[(&str, &str)]) -> bool {
            self.matching(sample, labels).is_empty()
        }
    }
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
