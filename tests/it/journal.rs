//! The journal: recording a live stream into segment files, replaying it, merging a replay into
//! the live stream, and what crashes, damage and a full disk do to it (docs/journal.md).

use crate::support;

use shmlog::journal::{self, Checksum, Fsync, Recorder, RecordingState, Replay, ReplayMerge, StopReason};
use shmlog::{Action, Error, FragmentAssembler, Header, Publication, Subscription};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::peer::{Cfg, Peer};
use support::wire::{seed_of, Shape, Verifier};
use support::ShmDir;

/// A journal directory on a real disk (the temp dir), removed on drop.
struct DiskDir(PathBuf);

impl DiskDir {
    fn new(tag: &str) -> Self {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        Self(std::env::temp_dir().join(format!("shmlog-journal-{tag}-{}-{nanos:x}", std::process::id())))
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for DiskDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const MTU: usize = 1024;

fn shape() -> Shape {
    Shape::new(MTU, 3000)
}

/// Publishes `count` self-describing messages (some fragmented) on a thread; returns the session.
fn publish(dir: &Path, name: &str, count: u64) -> std::thread::JoinHandle<i32> {
    publish_after_first(dir, name, count, Arc::new(AtomicBool::new(true)))
}

/// [`publish`], holding every message after the first until `go` is set.
fn publish_after_first(
    dir: &Path,
    name: &str,
    count: u64,
    go: Arc<AtomicBool>,
) -> std::thread::JoinHandle<i32> {
    let (dir, name) = (dir.to_path_buf(), name.to_owned());
    std::thread::spawn(move || {
        let mut p = Publication::builder(&name).dir(&dir).term_length(64 * 1024).mtu(MTU).create().unwrap();
        p.wait_connected(Duration::from_secs(10)).unwrap();
        let session = p.session_id();
        let (shape, seed, mut buf) = (shape(), seed_of(session), Vec::new());
        let deadline = Instant::now() + Duration::from_secs(60);
        for seq in 0..count {
            while seq == 1 && !go.load(Ordering::Acquire) {
                assert!(Instant::now() < deadline, "never told to go on");
                std::thread::yield_now();
            }
            support::wire::fill(seed, seq, shape.len(seed, seq), &mut buf);
            while let Err(e) = p.offer(&buf) {
                assert!(e.is_retryable(), "{e}");
                std::thread::yield_now();
            }
        }
        p.close();
        session
    })
}

/// Replays recording `id` to its end through a verifier (strict from message 0 if `from_start`).
fn verify_replay(journal: &Path, id: u32, session: i32, from_start: bool) -> Verifier {
    let mut v = Verifier::new(shape());
    v.begin_session(session, from_start);
    let mut replay = Replay::builder(journal, id).open().unwrap();
    let mut assembler = FragmentAssembler::new(|msg: &[u8], h: &Header| {
        v.on_message(msg, h.session_id());
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !replay.is_done() {
        replay.poll(&mut assembler, 256).unwrap();
        assert!(Instant::now() < deadline, "replay did not finish");
    }
    drop(assembler);
    assert_eq!(v.failure, None);
    v
}

/// A recorder of a stream on a thread of its own (1 MiB segments, joining a session at its
/// start), started before [`RecorderThread::start`] returns: a live reader alone lets a
/// publisher go on, and a recorder that started late on a loaded machine would miss sessions.
struct RecorderThread {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl RecorderThread {
    fn start(shm: &Path, journal: &Path, stream: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (started, recording) = std::sync::mpsc::channel();
        let thread = {
            let (shm, journal, stream, stop) =
                (shm.to_path_buf(), journal.to_path_buf(), stream.to_owned(), stop.clone());
            std::thread::spawn(move || {
                let mut r = Recorder::builder(stream, journal)
                    .stream_dir(shm)
                    .segment_length(1 << 20)
                    .join_at(shmlog::JoinAt::Earliest)
                    .start()
                    .unwrap();
                started.send(()).unwrap();
                r.run_until(|| stop.load(Ordering::Relaxed)).unwrap();
            })
        };
        recording.recv().unwrap();
        Self { stop, thread }
    }

    /// Stops the recorder after its current poll and waits for its thread.
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
    }
}

/// Polls `recorder` until `done()` and the recording it started is closed (end of stream).
fn record_until_closed(recorder: &mut Recorder, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut started = false;
    loop {
        started |= recorder.recording_id().is_some();
        if recorder.poll().unwrap() == 0 {
            if started && recorder.recording_id().is_none() && done() {
                return;
            }
            recorder.wait(Duration::from_millis(10));
        }
        assert!(Instant::now() < deadline, "recording did not finish");
    }
}

#[test]
fn a_recording_replays_exactly_what_was_published() {
    let (shm, disk) = (ShmDir::new("journal-basic"), DiskDir::new("basic"));
    let count = 20_000;
    let mut recorder = Recorder::builder("orders", disk.path())
        .stream_dir(shm.path())
        .segment_length(128 * 1024)
        .fsync(Fsync::PerSegment)
        .start()
        .unwrap();
    let publisher = publish(shm.path(), "orders", count);
    record_until_closed(&mut recorder, || publisher.is_finished());
    let session = publisher.join().unwrap();
    let recordings = journal::recordings(disk.path()).unwrap();
    assert_eq!(recordings.len(), 1);
    let r = recordings[0].as_ref().unwrap();
    assert_eq!((r.session_id, r.start_position), (session, 0));
    assert_eq!(r.state, RecordingState::Stopped(StopReason::EndOfStream));
    assert_eq!(r.durable_position, r.stop_position, "per-segment fsync syncs at the stop");
    let v = verify_replay(disk.path(), r.id, session, true);
    assert_eq!(v.total, count);
}

/// Records `count` messages of a publisher thread into a new journal; returns the session and
/// the recording's id.
fn record_messages(shm: &Path, journal: &Path, name: &str, count: u64, segment: u64) -> (i32, u32) {
    let mut recorder =
        Recorder::builder(name, journal).stream_dir(shm).segment_length(segment).start().unwrap();
    let publisher = publish(shm, name, count);
    let mut id = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        id = id.or(recorder.recording_id());
        if recorder.poll().unwrap() == 0 {
            if id.is_some() && recorder.recording_id().is_none() && publisher.is_finished() {
                break;
            }
            recorder.wait(Duration::from_millis(10));
        }
        assert!(Instant::now() < deadline, "recording did not finish");
    }
    (publisher.join().unwrap(), id.unwrap())
}

/// Every message's end position in recording `id` (the positions a replay may start at).
fn message_ends(journal: &Path, id: u32) -> Vec<i64> {
    let mut ends = Vec::new();
    let mut replay = Replay::builder(journal, id).open().unwrap();
    let mut assembler = FragmentAssembler::new(|_: &[u8], h: &Header| ends.push(h.position()));
    while !replay.is_done() {
        replay.poll(&mut assembler, 1024).unwrap();
    }
    drop(assembler);
    ends
}

#[test]
fn a_replay_starts_where_a_message_starts_and_nowhere_else() {
    let (shm, disk) = (ShmDir::new("journal-from"), DiskDir::new("from"));
    let (session, id) = record_messages(shm.path(), disk.path(), "from", 3_000, 64 * 1024);
    let ends = message_ends(disk.path(), id);
    assert_eq!(ends.len(), 3_000);
    let r = journal::recording(disk.path(), id).unwrap();
    assert_eq!(*ends.last().unwrap(), r.stop_position);
    for k in [0usize, 1, 999, 1_500, 2_998] {
        // Message k ends where message k + 1 starts.
        let mut v = Verifier::new(shape());
        v.begin_session(session, true);
        v.next_seq = k as u64 + 1;
        let mut replay = Replay::builder(disk.path(), id).from(ends[k]).open().unwrap();
        let mut assembler = FragmentAssembler::new(|m: &[u8], h: &Header| {
            v.on_message(m, h.session_id());
        });
        while !replay.is_done() {
            replay.poll(&mut assembler, 64).unwrap();
        }
        drop(assembler);
        assert_eq!((v.failure.as_deref(), v.total), (None, 3_000 - k as u64 - 1), "from message {}", k + 1);
    }
    // Inside a message: refused, naming the next message start (a message longer than one
    // 32-byte frame, or 32 bytes past its start would be the next message's: CI once drew an
    // empty message 11).
    let k =
        (10..ends.len() - 1).find(|&k| ends[k + 1] - ends[k] > 32).expect("a message of more than a header");
    let inside = ends[k] + 32;
    match Replay::builder(disk.path(), id).from(inside).open() {
        Err(Error::PositionNotAvailable { requested, oldest, newest, nearest }) => {
            assert_eq!((requested, oldest, newest, nearest), (inside, 0, r.stop_position, ends[k + 1]));
        }
        other => panic!("a position inside a message was not refused: {other:?}"),
    }
    for outside in [-32, r.stop_position + 32, 7] {
        assert!(matches!(
            Replay::builder(disk.path(), id).from(outside).open(),
            Err(Error::PositionNotAvailable { .. })
        ));
    }
    // `to` stops at a message end; pacing delivers no faster than asked.
    let mut replay = Replay::builder(disk.path(), id).to(ends[99]).pace(20_000.0).open().unwrap();
    let (mut n, start) = (0, Instant::now());
    while !replay.is_done() {
        n += replay.poll(|_: &[u8], _: &Header| {}, 1000).unwrap();
    }
    assert_eq!(replay.position(), ends[99]);
    // A `to` inside a message's frame ends the replay before that frame.
    let mut cut = Replay::builder(disk.path(), id).to(ends[5] + 32).open().unwrap();
    let mut delivered = 0;
    while !cut.is_done() {
        delivered += cut.poll(|_: &[u8], _: &Header| {}, 1000).unwrap();
    }
    assert!(cut.position() <= ends[5] + 32 && cut.position() >= ends[5], "{}", cut.position());
    assert!(delivered >= 6);
    assert!(
        n >= 100 && start.elapsed() >= Duration::from_millis(4),
        "{n} fragments in {:?}",
        start.elapsed()
    );
}

#[test]
fn replay_merge_hands_over_to_the_live_stream_with_no_gap_and_no_duplicate() {
    let (shm, disk) = (ShmDir::new("journal-merge"), DiskDir::new("merge"));
    let count = 400_000;
    let recorder = RecorderThread::start(shm.path(), disk.path(), "merge");
    let publisher = publish(shm.path(), "merge", count);
    // Once something is recorded, replay it from the start and merge into the live stream while
    // the publisher keeps going.
    let deadline = Instant::now() + Duration::from_secs(60);
    let id = loop {
        match journal::recordings(disk.path()) {
            Ok(list) if list.first().is_some_and(|r| r.as_ref().is_ok_and(|r| r.length() > 1 << 20)) => {
                break list[0].as_ref().unwrap().id
            }
            _ => {}
        }
        assert!(Instant::now() < deadline, "nothing was recorded");
        std::thread::yield_now();
    };
    let mut merge =
        ReplayMerge::new(Replay::builder(disk.path(), id), Subscription::builder("merge").dir(shm.path()))
            .unwrap();
    let session = merge.replay().unwrap().recording().session_id;
    let mut v = Verifier::new(shape());
    v.begin_session(session, true);
    let mut assembler = FragmentAssembler::new(|m: &[u8], h: &Header| {
        v.on_message(m, h.session_id());
    });
    let mut closed = false;
    while !closed {
        merge.poll(&mut assembler, 256).unwrap();
        closed = merge.live().is_some_and(|live| live.is_closed());
        assert!(Instant::now() < deadline, "replay-merge did not reach the end of the stream");
    }
    drop(assembler);
    assert_eq!(publisher.join().unwrap(), session);
    recorder.stop();
    let merged_at = merge.merged_at().expect("merged into the live stream");
    assert_eq!(v.failure, None);
    assert_eq!(v.total, count, "every message once, in order, across the handover at {merged_at}");
    assert!(merged_at > 1 << 20, "merged at {merged_at}, after replaying what was recorded");
}

#[test]
fn damage_to_a_segment_is_an_error_naming_the_file_and_position() {
    let (shm, disk) = (ShmDir::new("journal-damage"), DiskDir::new("damage"));
    let (_, id) = record_messages(shm.path(), disk.path(), "damage", 3_000, 64 * 1024);
    let ends = message_ends(disk.path(), id);
    let victim = ends[1_000]; // a message start in the middle of the recording
    let seg_len = 64 * 1024;
    let base = victim & !(seg_len - 1);
    let path = disk.path().join(format!("{id}-{base}.seg"));
    let mut bytes = std::fs::read(&path).unwrap();
    let at = (victim - base) as usize;
    bytes[at + 12] ^= 0xff; // the session id in the header
    std::fs::write(&path, &bytes).unwrap();
    let mut replay = Replay::builder(disk.path(), id).open().unwrap();
    let mut delivered = 0;
    let error = loop {
        match replay.poll(|_: &[u8], _: &Header| delivered += 1, 64) {
            Ok(_) => assert!(!replay.is_done(), "the damaged frame was replayed"),
            Err(e) => break e,
        }
    };
    match &error {
        Error::CorruptRecording { path: p, position, .. } => assert_eq!((p, *position), (&path, victim)),
        other => panic!("unexpected error {other:?}"),
    }
    assert!(error.to_string().contains(&path.display().to_string()), "{error}");
    assert_eq!(replay.position(), victim, "everything before the damage was delivered");
    assert!(delivered >= 1_000);
    // Truncated: the file is shorter than the recording says.
    let r = journal::recording(disk.path(), id).unwrap();
    let last_base = r.stop_position & !(seg_len - 1);
    let last = disk.path().join(format!("{id}-{last_base}.seg"));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .unwrap()
        .set_len(((r.stop_position - last_base) / 2) as u64)
        .unwrap();
    let mut replay = Replay::builder(disk.path(), id).from(ends[1_500]).open().unwrap();
    let error = loop {
        if let Err(e) = replay.poll(|_: &[u8], _: &Header| {}, 64) {
            break e;
        }
        assert!(!replay.is_done(), "a truncated segment was replayed to its end");
    };
    assert!(
        matches!(&error, Error::CorruptRecording { path, what, .. } if *path == last && what.contains("shorter")),
        "{error:?}"
    );
}

fn publisher_cfg(shm: &Path, name: &str) -> Cfg {
    Cfg::new()
        .set("name", name)
        .set("dir", shm.display())
        .set("term", 64 * 1024)
        .set("mtu", MTU)
        .set("max_len", 3000)
}

fn recorder_cfg(shm: &Path, journal: &Path, name: &str) -> Cfg {
    Cfg::new()
        .set("name", name)
        .set("dir", shm.display())
        .set("journal", journal.display())
        .set("segment", 1 << 20)
        .set("mtu", MTU)
}

/// Replays every recording of `session` in order; returns the recordings and the messages
/// replayed. Each recording must replay whole, valid messages in order; consecutive recordings
/// may have gaps between them (reported in the catalog), never overlaps.
fn replay_all(journal: &Path, session: i32) -> (Vec<journal::Recording>, u64) {
    let list: Vec<_> = journal::recordings(journal).unwrap().into_iter().map(Result::unwrap).collect();
    let mut total = 0;
    let mut last_stop = 0;
    for r in list.iter().filter(|r| r.session_id == session) {
        assert!(r.is_stopped(), "recording {} left in state {:?}", r.id, r.state);
        assert!(r.start_position >= last_stop, "recording {} overlaps the one before", r.id);
        last_stop = r.stop_position;
        let v = verify_replay(journal, r.id, session, r.start_position == 0);
        total += v.total;
    }
    (list, total)
}

#[test]
fn a_recorder_process_records_a_publisher_process_message_for_message() {
    let _x = support::exclusive();
    let (shm, disk) = (ShmDir::new("journal-mp"), DiskDir::new("mp"));
    let count = support::iterations(300_000, 3_000_000);
    let mut recorder =
        Peer::spawn("recorder", "recorder", &recorder_cfg(shm.path(), disk.path(), "mp").set("until_eos", 1));
    recorder.expect("recording", Duration::from_secs(10));
    let mut publisher =
        Peer::spawn("publisher", "publisher", &publisher_cfg(shm.path(), "mp").set("count", count));
    let session = publisher.expect("ready", Duration::from_secs(10)).num("session") as i32;
    publisher.expect("closed", Duration::from_secs(120));
    recorder.expect("stopped", Duration::from_secs(30));
    let (list, total) = replay_all(disk.path(), session);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].state, RecordingState::Stopped(StopReason::EndOfStream));
    assert_eq!(total, count as u64);
}

#[test]
fn a_recorder_killed_anywhere_resumes_where_its_last_complete_message_ended() {
    let _x = support::exclusive();
    let mut rng = support::Rng::new("journal-kill");
    for round in 0..support::iterations(3, 30) {
        let (shm, disk) = (ShmDir::new("journal-kill"), DiskDir::new("kill"));
        let count = 150_000u64;
        let mut first = Peer::spawn("recorder-0", "recorder", &recorder_cfg(shm.path(), disk.path(), "kill"));
        first.expect("recording", Duration::from_secs(10));
        // The dead recorder's slot holds the publisher until evicted (2 s), so the log still
        // holds where it stopped when the next one starts: every restart can resume.
        let mut publisher = Peer::spawn(
            "publisher",
            "publisher",
            &publisher_cfg(shm.path(), "kill").set("count", count).set("liveness_ms", 2000),
        );
        let session = publisher.expect("ready", Duration::from_secs(10)).num("session") as i32;
        // Once the recording exists (a recorder killed before it starts one leaves nothing to
        // resume: the next joins at the publisher's position), kill -9 the first recorder.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !journal::recordings(disk.path())
            .is_ok_and(|l| l.first().is_some_and(|r| r.as_ref().is_ok_and(|r| r.length() > 0)))
        {
            assert!(Instant::now() < deadline, "round {round}: nothing recorded");
            std::thread::yield_now();
        }
        drop(first);
        let kills = 4;
        for k in 0..kills {
            let at = rng.range(1_000, 60_000);
            let mut r = Peer::spawn(
                &format!("recorder-{}", k + 1),
                "recorder",
                &recorder_cfg(shm.path(), disk.path(), "kill").set("kill_us", at),
            );
            let status = r.wait_exit(Duration::from_secs(30));
            assert!(!status.success(), "round {round}: recorder {k} was not killed: {status:?}");
        }
        let mut last =
            Peer::spawn("recorder-last", "recorder", &recorder_cfg(shm.path(), disk.path(), "kill"));
        publisher.expect("closed", Duration::from_secs(120));
        // The end of stream closes the recording (a recorder killed late may have got there).
        let deadline = Instant::now() + Duration::from_secs(30);
        while !journal::recordings(disk.path())
            .unwrap()
            .iter()
            .all(|r| r.as_ref().is_ok_and(|r| r.is_stopped()))
        {
            assert!(
                Instant::now() < deadline,
                "round {round}: the end of stream did not close the recording"
            );
            std::thread::yield_now();
        }
        last.send("quit");
        last.wait_success(Duration::from_secs(10));
        let (list, total) = replay_all(disk.path(), session);
        println!("round {round}: {} recording(s), {total} messages", list.len());
        assert_eq!(list.len(), 1, "round {round}: every restart resumed the one recording: {list:#?}");
        assert_eq!(total, count, "round {round}: no message lost or repeated across {kills} kills");
    }
}

#[test]
fn a_torn_frame_after_a_crash_is_cut_and_never_replayed() {
    let _x = support::exclusive();
    let (shm, disk) = (ShmDir::new("journal-torn"), DiskDir::new("torn"));
    let mut recorder = Peer::spawn("recorder", "recorder", &recorder_cfg(shm.path(), disk.path(), "torn"));
    recorder.expect("recording", Duration::from_secs(10));
    let mut publisher =
        Peer::spawn("publisher", "publisher", &publisher_cfg(shm.path(), "torn").set("pause_at", 5_000));
    let session = publisher.expect("ready", Duration::from_secs(10)).num("session") as i32;
    let paused_at = publisher.expect("paused", Duration::from_secs(60)).num("position");
    let deadline = Instant::now() + Duration::from_secs(10);
    let r = loop {
        let r = journal::recording(disk.path(), 0);
        match r {
            Ok(r) if r.stop_position == paused_at => break r,
            _ => {}
        }
        assert!(Instant::now() < deadline, "the recorder did not catch up");
        std::thread::yield_now();
    };
    drop(recorder); // kill -9 while idle
    assert_eq!(journal::recording(disk.path(), 0).unwrap().state, RecordingState::Interrupted);
    // What a write cut short by the crash would leave: a header claiming 1000 bytes, half of them.
    let base = r.stop_position & !((1 << 20) - 1);
    let path = disk.path().join(format!("0-{base}.seg"));
    let torn_at = (r.stop_position - base) as u64;
    let mut torn = vec![0xA5u8; 500];
    torn[..4].copy_from_slice(&1000i32.to_le_bytes());
    {
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().write_all_at(&torn, torn_at).unwrap();
    }
    // A new recorder that does not resume closes it at its last complete message.
    let next = Recorder::builder("torn", disk.path()).stream_dir(shm.path()).resume(false).start().unwrap();
    let closed = journal::recording(disk.path(), 0).unwrap();
    assert_eq!(closed.state, RecordingState::Stopped(StopReason::RecorderDied));
    assert_eq!(closed.stop_position, r.stop_position);
    let mut after = vec![0u8; 500];
    {
        use std::os::unix::fs::FileExt;
        std::fs::File::open(&path).unwrap().read_exact_at(&mut after, torn_at).unwrap();
    }
    assert!(after.iter().all(|&b| b == 0), "the torn frame was left in the segment");
    assert_eq!(verify_replay(disk.path(), 0, session, true).total, 5_000);
    drop(next);
    publisher.send("quit");
}

#[test]
fn a_full_disk_stops_recording_with_a_typed_error_and_keeps_what_was_recorded() {
    let _x = support::exclusive();
    for preallocate in [false, true] {
        let (shm, disk) = (ShmDir::new("journal-full"), DiskDir::new("full"));
        let (session, id) = record_messages(shm.path(), disk.path(), "full", 2_000, 4 << 20);
        // A recorder that may not write files past 2 MiB (RLIMIT_FSIZE: EFBIG, as ENOSPC would).
        let mut cfg =
            recorder_cfg(shm.path(), disk.path(), "full").set("segment", 4 << 20).set("fsize", 2 << 20);
        if preallocate {
            cfg = cfg.set("preallocate", 1);
        }
        let mut recorder = Peer::spawn("recorder", "recorder", &cfg);
        recorder.expect("recording", Duration::from_secs(10));
        // A reader besides the recorder, so the publisher has someone to deliver to once it is gone.
        let mut reader = Peer::spawn("reader", "subscriber", &publisher_cfg(shm.path(), "full"));
        reader.expect("opened", Duration::from_secs(10));
        let mut publisher = Peer::spawn(
            "publisher",
            "publisher",
            &publisher_cfg(shm.path(), "full").set("count", 100_000).set("wait_go", 1),
        );
        let second = publisher.expect("ready", Duration::from_secs(10)).num("session") as i32;
        // Both in the new session before it writes: the recording starts at its start.
        let deadline = Instant::now() + Duration::from_secs(10);
        while shmlog::inspect::streams(shm.path())
            .unwrap()
            .iter()
            .all(|s| s.readers.iter().filter(|r| r.alive && r.session_id == Some(second)).count() < 2)
        {
            assert!(Instant::now() < deadline, "the recorder and the reader did not join");
            std::thread::sleep(Duration::from_millis(1));
        }
        publisher.send("go");
        let error = recorder.expect("record_error", Duration::from_secs(30));
        assert!(error.get("err").unwrap().starts_with("InsufficientSpace"), "{}", error.raw);
        // The recorder left the stream: the publisher is not held back by it.
        publisher.expect("closed", Duration::from_secs(60));
        let done = reader.expect("done", Duration::from_secs(30));
        assert_eq!(done.get("reason"), Some("eos"), "{}", done.raw);
        let failed = journal::recording(disk.path(), id + 1).unwrap();
        assert_eq!(failed.state, RecordingState::Stopped(StopReason::DiskFull));
        let files: Vec<_> = std::fs::read_dir(disk.path())
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("{}-", id + 1)))
            .collect();
        if preallocate {
            // The segment could not be sized: nothing recorded, no stub left.
            assert_eq!(failed.length(), 0);
            assert!(files.is_empty(), "a segment that could not be sized was left behind");
        } else {
            // The segment grew to the limit: everything written before the failed write is
            // recorded and replays whole.
            assert_eq!(files.len(), 1);
            assert!(files[0].metadata().unwrap().len() <= 2 << 20);
            assert!(failed.length() > 1 << 20, "{}", failed.length());
            assert!(failed.stop_position <= 2 << 20);
            let v = verify_replay(disk.path(), failed.id, second, true);
            assert!(v.total > 100, "{}", v.total);
        }
        assert_eq!(verify_replay(disk.path(), id, session, true).total, 2_000);
    }
}

#[test]
fn an_untethered_recorder_reports_the_gaps_it_skipped_and_never_a_torn_message() {
    let (shm, disk) = (ShmDir::new("journal-untethered"), DiskDir::new("untethered"));
    let count = 60_000u64;
    let mut recorder =
        Recorder::builder("loose", disk.path()).stream_dir(shm.path()).tethered(false).start().unwrap();
    // The publisher goes on from its first message once the recorder has recorded it: however
    // late the recorder's thread runs, it then stalls in a stream it is recording.
    let go = Arc::new(AtomicBool::new(false));
    let publisher = publish_after_first(shm.path(), "loose", count, Arc::clone(&go));
    // A recorder that falls behind: it polls once, then lets the publisher run into it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut started = false;
    loop {
        started |= recorder.recording_id().is_some();
        let n = recorder.poll().unwrap();
        if n > 0 {
            go.store(true, Ordering::Release);
        }
        if n == 0 {
            if started && recorder.recording_id().is_none() && publisher.is_finished() {
                break;
            }
            recorder.wait(Duration::from_millis(10));
        } else {
            // A disk stall: no poll until the publisher, which the untethered recorder never
            // holds back, is more than two terms past what was recorded (it has lapped it), or
            // done.
            let ahead = || {
                shmlog::inspect::streams(shm.path())
                    .ok()
                    .and_then(|s| s.into_iter().find_map(|s| s.log))
                    .is_some_and(|log| {
                        log.position - recorder.recorded_position() > 2 * log.term_length as i64
                    })
            };
            while !publisher.is_finished() && !ahead() {
                assert!(Instant::now() < deadline, "the publisher did not get ahead");
                std::thread::yield_now();
            }
        }
        assert!(Instant::now() < deadline, "recording did not finish");
    }
    let session = publisher.join().unwrap();
    let list: Vec<_> = journal::recordings(disk.path()).unwrap().into_iter().map(Result::unwrap).collect();
    assert!(list.len() > 1, "the slow recorder never skipped");
    let gaps: i64 = list.iter().map(|r| r.gap_before).sum();
    assert_eq!(gaps, recorder.lost_bytes());
    for pair in list.windows(2) {
        assert_eq!(pair[0].state, RecordingState::Stopped(StopReason::Lagged));
        assert_eq!(pair[1].previous, Some(pair[0].id));
        assert_eq!(pair[1].start_position - pair[0].stop_position, pair[1].gap_before);
    }
    let (_, total) = replay_all(disk.path(), session);
    assert!(total > 0 && total < count, "{total} of {count} messages recorded");
}

/// Records `count` messages of `len` bytes (message `i` filled with `i as u8`) with `checksum`;
/// returns the recording's id.
fn record_fixed(shm: &Path, journal: &Path, name: &str, count: u64, len: usize, checksum: Checksum) -> u32 {
    let mut recorder = Recorder::builder(name, journal)
        .stream_dir(shm)
        .segment_length(1 << 20)
        .checksum(checksum)
        .start()
        .unwrap();
    let (dir, owned) = (shm.to_path_buf(), name.to_owned());
    let publisher = std::thread::spawn(move || {
        let mut p = Publication::builder(&owned).dir(&dir).term_length(64 * 1024).mtu(MTU).create().unwrap();
        p.wait_connected(Duration::from_secs(10)).unwrap();
        for i in 0..count {
            while let Err(e) = p.offer(&vec![i as u8; len]) {
                assert!(e.is_retryable(), "{e}");
                std::thread::yield_now();
            }
        }
        p.close();
    });
    record_until_closed(&mut recorder, || publisher.is_finished());
    publisher.join().unwrap();
    let list = journal::recordings(journal).unwrap();
    let r = list.last().unwrap().as_ref().unwrap();
    assert_eq!(r.checksum, checksum);
    r.id
}

/// Replays recording `id` from `from` (a message start) until an error or its end: the messages
/// delivered (position, payload) and the error, if any.
fn replay_from(journal: &Path, id: u32, from: Option<i64>) -> (Vec<(i64, Vec<u8>)>, Option<Error>) {
    let mut b = Replay::builder(journal, id);
    if let Some(from) = from {
        b = b.from(from);
    }
    let mut replay = match b.open() {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut got = Vec::new();
    let mut assembler = FragmentAssembler::new(|m: &[u8], h: &Header| got.push((h.position(), m.to_vec())));
    let error = loop {
        match replay.poll(&mut assembler, 256) {
            Ok(_) if replay.is_done() => break None,
            Ok(_) => {}
            Err(e) => break Some(e),
        }
    };
    drop(assembler);
    (got, error)
}

/// Flips bit `bit` of the byte at stream position `at` of recording `id` (1 MiB segments).
fn flip(journal: &Path, id: u32, at: i64, bit: i64) -> PathBuf {
    use std::os::unix::fs::FileExt;
    let base = at & !((1 << 20) - 1);
    let path = journal.join(format!("{id}-{base}.seg"));
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let mut b = [0u8; 1];
    file.read_exact_at(&mut b, (at - base) as u64).unwrap();
    b[0] ^= 1 << bit;
    file.write_all_at(&b, (at - base) as u64).unwrap();
    path
}

#[test]
fn a_flipped_bit_anywhere_in_a_checksummed_frame_is_an_error_never_a_message() {
    // Messages of 58 bytes: 90-byte frames, 96 with alignment, 682 to a 64 KiB term and a 64-byte
    // padding frame at each term's end.
    let (shm, disk) = (ShmDir::new("journal-flip"), DiskDir::new("flip"));
    let count = 3_000u64;
    let id = record_fixed(shm.path(), disk.path(), "flip", count, 58, Checksum::Crc32c);
    let (all, error) = replay_from(disk.path(), id, None);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(all.len() as u64, count);
    let starts: Vec<i64> = std::iter::once(0).chain(all.iter().map(|m| m.0)).collect();
    // A message in the first half of a term: its length word 90 with bit 14 flipped says 16 474,
    // which still fits the term (the case a user saw replay as one 16 442-byte message).
    let k = (1_000..).find(|&k| starts[k] % (64 * 1024) < 16 * 1024).unwrap();
    let victim = starts[k];
    let path = flip(disk.path(), id, victim + 1, 6); // bit 14 of the little-endian length word
    let (got, error) = replay_from(disk.path(), id, None);
    match &error {
        Some(Error::CorruptRecording { path: p, position, what }) => {
            assert_eq!((p, *position), (&path, victim), "{what}");
        }
        other => panic!("a length word 90 -> 16 474 was not an error: {other:?}"),
    }
    assert_eq!(got.len(), k, "every message before the damaged frame, and none after");
    assert!(got.iter().enumerate().all(|(i, (_, m))| m.len() == 58 && m.iter().all(|&b| b == i as u8)));
    flip(disk.path(), id, victim + 1, 6);
    // Every bit of the frame's 90 bytes (header and payload), one at a time: an error at the
    // frame, never a message (from the message before it, so the walk to `from` is short).
    for bit in 0..90 * 8 {
        flip(disk.path(), id, victim + bit / 8, bit % 8);
        let (got, error) = replay_from(disk.path(), id, Some(starts[k - 1]));
        assert!(
            matches!(&error, Some(Error::CorruptRecording { position, .. }) if *position == victim),
            "bit {bit}: {error:?}"
        );
        assert_eq!(got.len(), 1, "bit {bit}: only the message before the frame was delivered");
        flip(disk.path(), id, victim + bit / 8, bit % 8);
    }
    // Every bit of a padding frame's header.
    let term = 64 * 1024i64;
    let pad_at = (starts[k] / term + 1) * term - 64;
    let before_pad = *starts.iter().rev().find(|&&s| s < pad_at).unwrap();
    assert_eq!(pad_at - before_pad, 96, "a message ends where the padding begins");
    for bit in 0..32 * 8 {
        flip(disk.path(), id, pad_at + bit / 8, bit % 8);
        let (got, error) = replay_from(disk.path(), id, Some(before_pad));
        assert!(
            matches!(&error, Some(Error::CorruptRecording { position, .. }) if *position == pad_at),
            "padding bit {bit}: {error:?}"
        );
        assert_eq!(got.len(), 1, "padding bit {bit}");
        flip(disk.path(), id, pad_at + bit / 8, bit % 8);
    }
    assert_eq!(replay_from(disk.path(), id, None).0, all, "every flip was undone");
    // Without a checksum the same length flip is delivered as one 16 442-byte message made of
    // the next frames (here the frame after it lands mid-frame, an error then): what every
    // recording did before checksums.
    let plain = record_fixed(shm.path(), disk.path(), "flip", count, 58, Checksum::None);
    let (clean, _) = replay_from(disk.path(), plain, None);
    let starts: Vec<i64> = std::iter::once(0).chain(clean.iter().map(|m| m.0)).collect();
    let victim = starts[(1_000..).find(|&k| starts[k] % term < 16 * 1024).unwrap()];
    flip(disk.path(), plain, victim + 1, 6);
    let (got, _) = replay_from(disk.path(), plain, None);
    assert!(got.iter().any(|(_, m)| m.len() == 16_442), "the structural checks alone caught it");
}

#[test]
fn a_replay_following_a_recovering_recorder_never_reports_false_damage() {
    let _x = support::exclusive();
    let (shm, disk) = (ShmDir::new("journal-follow"), DiskDir::new("follow"));
    // A recorder that sleeps 2 ms after each block trails the publisher by more than a block,
    // so its blocks are 1 MiB and end anywhere in a message (one that caught up records whole
    // messages mostly: the publisher spends its time between them).
    let cfg = || recorder_cfg(shm.path(), disk.path(), "follow").set("poll_sleep_us", 2000);
    let mut recorder = Peer::spawn("recorder-0", "recorder", &cfg());
    recorder.expect("recording", Duration::from_secs(10));
    // The dead recorder's slot holds the publisher until evicted (2 s): every restart resumes.
    // Terms of 4 MiB: a recorder's blocks (1 MiB at most) end anywhere, not at a term's end,
    // which is always between messages; messages of up to 20 000 bytes (20 fragments): a
    // recorder that caught up often records part of one.
    let mut publisher = Peer::spawn(
        "publisher",
        "publisher",
        &publisher_cfg(shm.path(), "follow")
            .set("liveness_ms", 2000)
            .set("term", 4 << 20)
            .set("max_len", 20_000),
    );
    let session = publisher.expect("ready", Duration::from_secs(10)).num("session") as i32;
    let recorded = || journal::recording(disk.path(), 0).map_or(0, |r| r.stop_position);
    let deadline = Instant::now() + Duration::from_secs(60);
    while recorded() < 2 << 20 {
        assert!(Instant::now() < deadline, "nothing recorded");
        std::thread::yield_now();
    }
    let mut replay = Replay::builder(disk.path(), 0).open().unwrap();
    let mut v = Verifier::new(Shape::new(MTU, 20_000));
    v.begin_session(session, true);
    let mut assembler = FragmentAssembler::new(|m: &[u8], h: &Header| {
        v.on_message(m, h.session_id());
    });
    let (mut kills, mut inside) = (0, 0);
    while inside < 3 {
        kills += 1;
        assert!(kills <= 40, "40 kills and only {inside} inside a message");
        // Follow about 1 MiB behind, then kill the recorder: the replay's buffer (1 MiB at most)
        // ends before where the recording will be cut (at most a message before its end).
        let round = recorded();
        loop {
            let lag = recorded() - replay.position();
            if lag > 2 << 20 {
                replay.poll(&mut assembler, 256).unwrap();
            } else if lag >= (1 << 20) + (128 << 10) && recorded() >= round + (2 << 20) {
                break;
            } else {
                std::thread::yield_now();
            }
            assert!(Instant::now() < deadline + Duration::from_secs(60), "the recorder stopped recording");
        }
        drop(recorder); // SIGKILL, wherever it is
        let old_stop = recorded();
        assert_eq!(replay.recorded_position(), old_stop, "the replay knows where the recording ended");
        // Restart at once; it recovers (cuts back to the last whole message, zeroes past it) and
        // resumes, then waits before it writes anything.
        recorder = Peer::spawn(&format!("recorder-{kills}"), "recorder", &cfg().set("hold", 1));
        let resumed = recorder.expect("recording", Duration::from_secs(10)).num("resumed");
        assert_eq!(resumed, 0, "kill {kills}: the restart did not resume the recording");
        let cut = recorded();
        if cut < old_stop {
            // Killed inside a message: the bytes the replay knew of past `cut` are zeroes now.
            inside += 1;
            let until = Instant::now() + Duration::from_secs(10);
            while replay.position() < cut {
                replay.poll(&mut assembler, 256).unwrap();
                assert!(Instant::now() < until, "the replay did not reach the cut");
            }
            for _ in 0..20 {
                assert_eq!(
                    replay.poll(&mut assembler, 256).unwrap(),
                    0,
                    "read past the cut before it was rewritten"
                );
            }
            assert!(replay.position() <= cut, "kill {kills}: the replay passed the cut");
        }
        recorder.send("go");
    }
    // The publisher dies; the last recorder closes the recording; the replay reads to its end.
    publisher.kill();
    let until = Instant::now() + Duration::from_secs(30);
    while !journal::recording(disk.path(), 0).unwrap().is_stopped() {
        assert!(Instant::now() < until, "the recording was not closed");
        std::thread::yield_now();
    }
    while !replay.is_done() {
        replay.poll(&mut assembler, 256).unwrap();
        assert!(Instant::now() < until, "the replay did not finish");
    }
    drop(assembler);
    recorder.send("quit");
    assert_eq!(v.failure, None);
    let whole = message_ends(disk.path(), 0).len() as u64;
    println!("{kills} kills, {inside} inside a message, {} messages", v.total);
    assert_eq!(v.total, whole, "the following replay got every message once, in order");
    assert_eq!(journal::recordings(disk.path()).unwrap().len(), 1, "every restart resumed");
}

#[test]
fn a_recorder_stopped_by_a_full_disk_still_tells_how_far_it_recorded() {
    let _x = support::exclusive();
    let (shm, disk) = (ShmDir::new("journal-full-pos"), DiskDir::new("full-pos"));
    // A limit far above anything written, so the recorder ignores SIGXFSZ; lowered from here
    // once 4 MiB are recorded (RLIMIT_FSIZE: EFBIG where a full disk gives ENOSPC).
    let mut recorder = Peer::spawn(
        "recorder",
        "recorder",
        &recorder_cfg(shm.path(), disk.path(), "full-pos").set("segment", 4 << 20).set("fsize", 1u64 << 40),
    );
    recorder.expect("recording", Duration::from_secs(10));
    let mut publisher = Peer::spawn("publisher", "publisher", &publisher_cfg(shm.path(), "full-pos"));
    publisher.expect("ready", Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(60);
    while journal::recording(disk.path(), 0).map_or(0, |r| r.stop_position) < 4 << 20 {
        assert!(Instant::now() < deadline, "4 MiB were not recorded");
        std::thread::yield_now();
    }
    let limit = libc::rlimit { rlim_cur: 1 << 20, rlim_max: 1 << 20 };
    // SAFETY: a valid pointer to a local for the new limit, none for the old one.
    let rc =
        unsafe { libc::prlimit(recorder.pid() as i32, libc::RLIMIT_FSIZE, &limit, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    let error = recorder.expect("record_error", Duration::from_secs(30));
    assert!(error.get("err").unwrap().starts_with("InsufficientSpace"), "{}", error.raw);
    let r = journal::recording(disk.path(), 0).unwrap();
    assert_eq!(r.state, RecordingState::Stopped(StopReason::DiskFull));
    assert!(r.stop_position >= 4 << 20, "{}", r.stop_position);
    assert_eq!(error.num("position"), r.stop_position, "Recorder::recorded_position() after the stop");
    drop(publisher);
}

/// A publication of either kind, for tests that run both.
enum AnyPublication {
    Exclusive(Publication),
    Concurrent(shmlog::ConcurrentPublication),
}

impl AnyPublication {
    fn open(shm: &Path, name: &str, concurrent: bool) -> Self {
        let b = Publication::builder(name).dir(shm).term_length(64 * 1024).mtu(MTU);
        if concurrent {
            Self::Concurrent(b.open_concurrent().unwrap())
        } else {
            Self::Exclusive(b.create().unwrap())
        }
    }

    fn offer(&mut self, msg: &[u8]) -> Result<i64, shmlog::OfferError> {
        match self {
            Self::Exclusive(p) => p.offer(msg),
            Self::Concurrent(p) => p.offer(msg),
        }
    }

    /// Claims `len` bytes and fills them with `fill`; then commits (`Some(true)`), aborts
    /// (`Some(false)`) or drops (`None`) the claim.
    fn claim(&mut self, len: usize, fill: u8, end: Option<bool>) -> Result<(), shmlog::OfferError> {
        fn finish<P: shmlog::ClaimSource>(mut c: shmlog::ClaimGuard<'_, P>, fill: u8, end: Option<bool>) {
            c.buffer().fill(fill);
            match end {
                Some(true) => {
                    c.commit();
                }
                Some(false) => c.abort(),
                None => drop(c),
            }
        }
        match self {
            Self::Exclusive(p) => finish(p.try_claim(len)?, fill, end),
            Self::Concurrent(p) => finish(p.try_claim(len)?, fill, end),
        }
        Ok(())
    }

    fn is_connected(&mut self) -> bool {
        match self {
            Self::Exclusive(p) => p.is_connected(),
            Self::Concurrent(p) => p.is_connected(),
        }
    }

    fn close(self) {
        match self {
            Self::Exclusive(p) => p.close(),
            Self::Concurrent(p) => p.close(),
        }
    }
}

/// N1: padding inside a term (a claim aborted or dropped, by an exclusive or a concurrent
/// publication) is part of the stream. A recorder records it: one recording, no gap, no loss, no
/// extra segment, and its replay is exactly what a tethered reader saw.
#[test]
fn aborted_and_dropped_claims_cost_a_recorder_no_recording_and_no_loss() {
    for (concurrent, tethered) in [(false, true), (true, true), (false, false), (true, false)] {
        let name = &format!("claims-{}{}", concurrent as u8, tethered as u8);
        let (shm, disk) = (ShmDir::new(name), DiskDir::new(name));
        // An untethered recorder is polled with the tethered reader, which holds the publisher
        // within a window of both: it is never lapped, so it loses nothing either.
        let mut recorder = Recorder::builder(name, disk.path())
            .stream_dir(shm.path())
            .segment_length(1 << 16)
            .tethered(tethered)
            .start()
            .unwrap();
        let mut reader = Subscription::builder(name).dir(shm.path()).open().unwrap();
        let mut p = AnyPublication::open(shm.path(), name, concurrent);
        let mut seen: Vec<(i64, Vec<u8>)> = Vec::new();
        let drain = |recorder: &mut Recorder, reader: &mut Subscription, seen: &mut Vec<(i64, Vec<u8>)>| {
            while recorder.poll().unwrap() > 0 {}
            reader.poll(|m: &[u8], h: &Header| seen.push((h.position(), m.to_vec())), 1000);
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !p.is_connected() {
            drain(&mut recorder, &mut reader, &mut seen);
            assert!(Instant::now() < deadline, "not connected");
        }
        let mut aborts = 0;
        for i in 0..3_000u32 {
            let len = 40 + (i as usize * 37) % 400;
            loop {
                let done = match i % 6 {
                    1 => p.claim(len, i as u8, Some(false)).map(|_| aborts += 1),
                    3 => p.claim(len, i as u8, None).map(|_| aborts += 1),
                    5 => p.claim(len, i as u8, Some(true)),
                    _ => p.offer(&vec![i as u8; len]).map(|_| ()),
                };
                match done {
                    Ok(()) => break,
                    Err(e) => assert!(e.is_retryable(), "{e}"),
                }
                drain(&mut recorder, &mut reader, &mut seen);
                assert!(Instant::now() < deadline, "back pressure did not clear");
            }
        }
        p.close();
        while recorder.recording_id().is_some() || !reader.is_closed() {
            drain(&mut recorder, &mut reader, &mut seen);
            assert!(Instant::now() < deadline, "the recording did not close");
        }
        assert!(aborts >= 1_000);
        let list: Vec<_> =
            journal::recordings(disk.path()).unwrap().into_iter().map(Result::unwrap).collect();
        assert_eq!(list.len(), 1, "{name}: one recording, not one per aborted claim: {list:#?}");
        let r = &list[0];
        assert_eq!(r.state, RecordingState::Stopped(StopReason::EndOfStream));
        assert_eq!((r.gap_before, recorder.lost_bytes()), (0, 0), "no loss");
        assert!(recorder.take_loss().is_none());
        let segments = std::fs::read_dir(disk.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".seg"))
            .count() as i64;
        assert_eq!(segments, (r.stop_position + (1 << 16) - 1) >> 16, "one segment per 64 KiB recorded");
        let (replayed, error) = replay_from(disk.path(), r.id, None);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(replayed.len(), seen.len());
        assert!(replayed == seen, "{name}: the replay is not what the tethered reader saw");
    }
}

/// The recorder's contract with an untethered subscription: a `block_poll` in which it is lapped
/// hands over no block (here a lap found while passing the rest of a message joined inside of,
/// where the poll used to go on and hand over a block after the lap), so a block always follows
/// the last one, or padding, unless a lap was reported in between.
#[test]
fn an_untethered_block_poll_that_is_lapped_hands_over_no_block() {
    let shm = ShmDir::new("lapped-block");
    let mut p = Publication::builder("lapped-block").dir(shm.path()).term_length(64 * 1024).create().unwrap();
    let mut sub = Subscription::builder("lapped-block").dir(shm.path()).tethered(false).open().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.is_connected() {
        sub.block_poll(|_: &[u8], _: i64| {}, 1 << 20);
        assert!(Instant::now() < deadline, "not connected");
    }
    // Nothing read yet (still passing what it joined inside of): the publisher laps it.
    while p.position() < 4 * 64 * 1024 {
        p.offer(&[7; 200]).unwrap();
    }
    let mut handed = 0;
    sub.block_poll(|block: &[u8], _: i64| handed += block.len(), 1 << 20);
    assert_eq!(sub.laps(), 1, "lapped");
    assert_eq!(handed, 0, "a lapped poll handed over a block after the lap");
    sub.block_poll(|block: &[u8], _: i64| handed += block.len(), 1 << 20);
    assert!(handed > 0, "the next poll reads on");
}

/// A segment costs what it holds: a short recording takes a few pages, not a 128 MiB segment (the
/// default length), also when it ends with padding whose body is not written; preallocation is
/// there when asked for.
#[test]
fn a_segment_file_costs_what_it_holds_unless_preallocated() {
    use std::os::unix::fs::MetadataExt;
    for preallocate in [false, true] {
        let name = &format!("footprint-{}", preallocate as u8);
        let (shm, disk) = (ShmDir::new(name), DiskDir::new(name));
        let mut recorder = Recorder::builder(name, disk.path())
            .stream_dir(shm.path())
            .preallocate(preallocate)
            .start()
            .unwrap();
        let mut p = Publication::builder(name).dir(shm.path()).term_length(64 * 1024).create().unwrap();
        while !p.is_connected() {
            recorder.poll().unwrap();
        }
        for i in 0..10u8 {
            p.offer(&[i; 100]).unwrap();
        }
        // An aborted claim last: padding at the recording's end, 2 KiB of it a hole.
        p.try_claim(2000).unwrap().abort();
        let end = p.position();
        while recorder.recorded_position() < end {
            recorder.poll().unwrap();
        }
        recorder.stop().unwrap();
        let r = journal::recording(disk.path(), 0).unwrap();
        assert_eq!(r.stop_position, end, "the recording ends where the reader stands, after the padding");
        let meta = std::fs::metadata(disk.path().join("0-0.seg")).unwrap();
        if preallocate {
            assert_eq!(meta.len(), 128 << 20);
        } else {
            assert_eq!(meta.len(), end as u64, "the file ends where the recording does");
            assert!(meta.blocks() * 512 <= 16 << 10, "{} blocks for {end} bytes", meta.blocks());
        }
        let (got, error) = replay_from(disk.path(), 0, None);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(got.len(), 10);
    }
}

/// The segment files of recording `id` in `journal`, by base.
fn segment_bases(journal: &Path, id: u32) -> Vec<i64> {
    let prefix = format!("{id}-");
    let mut bases: Vec<i64> = std::fs::read_dir(journal)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_prefix(&prefix)?.strip_suffix(".seg")?.parse().ok()
        })
        .collect();
    bases.sort();
    bases
}

/// Replays recording `id` from its start (or `from`) to its end, checking every message
/// (strictly in sequence from the recording's first message); the messages and the error.
fn replay_checked(journal: &Path, id: u32, session: i32, from: Option<i64>) -> (u64, Option<Error>) {
    let mut v = Verifier::new(shape());
    v.begin_session(session, false);
    let mut b = Replay::builder(journal, id);
    if let Some(from) = from {
        b = b.from(from);
    }
    let mut replay = match b.open() {
        Ok(r) => r,
        Err(e) => return (0, Some(e)),
    };
    let mut assembler = FragmentAssembler::new(|m: &[u8], h: &Header| {
        v.on_message(m, h.session_id());
    });
    let error = loop {
        match replay.poll(&mut assembler, 256) {
            Ok(_) if replay.is_done() => break None,
            Ok(_) => {}
            Err(e) => break Some(e),
        }
    };
    drop(assembler);
    assert_eq!(v.failure, None);
    (v.total, error)
}

/// Purge, detach, attach, delete detached segments, truncate and delete, on a stopped
/// recording: each moves the catalog and the files as it says, a replay of what is kept is whole,
/// and one that asks for what is gone gets a typed error with the oldest position kept.
#[test]
fn segments_are_purged_detached_attached_and_truncated_and_replays_see_what_is_kept() {
    let (shm, disk) = (ShmDir::new("journal-ops"), DiskDir::new("ops"));
    let j = disk.path();
    let (session, id) = record_messages(shm.path(), j, "ops", 6_000, 64 * 1024);
    let r = journal::recording(j, id).unwrap();
    let seg = 64 * 1024i64;
    let all = segment_bases(j, id);
    assert!(all.len() >= 10, "{all:?}");
    assert!(matches!(replay_checked(j, id, session, None), (6_000, None)));

    // Detach below the fourth segment: the start moves to its first message, the files stay.
    let detached = journal::detach(j, id, 3 * seg + 100).unwrap();
    assert!(detached.start >= 3 * seg && detached.start < 4 * seg, "{detached:?}");
    assert_eq!(detached.files_removed, 0);
    assert_eq!(segment_bases(j, id), all);
    let now = journal::recording(j, id).unwrap();
    assert_eq!((now.start_position, now.origin_position), (detached.start, 0));
    match Replay::builder(j, id).from(0).open() {
        Err(Error::PositionNotAvailable { requested: 0, oldest, .. }) => assert_eq!(oldest, detached.start),
        other => panic!("a replay of detached data was not refused: {other:?}"),
    }
    let (kept, error) = replay_checked(j, id, session, None);
    assert!(error.is_none() && kept > 0 && kept < 6_000, "{kept} {error:?}");

    // Attach takes them back.
    assert_eq!(journal::attach(j, id).unwrap().start, 0);
    assert!(matches!(replay_checked(j, id, session, None), (6_000, None)));

    // Detach again and delete what is detached: the files go, attach finds nothing.
    journal::detach(j, id, 2 * seg).unwrap();
    let deleted = journal::delete_detached(j, id).unwrap();
    assert_eq!(deleted.files_removed, 2);
    assert_eq!(segment_bases(j, id), all[2..]);
    assert_eq!(journal::attach(j, id).unwrap().start, deleted.start, "nothing to attach");

    // Purge below the sixth segment.
    let purged = journal::purge(j, id, 5 * seg).unwrap();
    assert_eq!(purged.files_removed, 3);
    assert!(purged.bytes_removed > 0);
    assert_eq!(segment_bases(j, id), all[5..]);
    let (kept, error) = replay_checked(j, id, session, None);
    assert!(error.is_none() && kept > 0, "{error:?}");

    // Truncate at a message start: what follows goes, the recording stops there.
    let ends = message_ends(j, id);
    let at = ends[ends.len() / 2];
    match journal::truncate(j, id, at + 32) {
        Err(Error::PositionNotAvailable { nearest, .. }) => assert!(nearest > at + 32),
        other => panic!("truncation inside a message was not refused: {other:?}"),
    }
    journal::truncate(j, id, at).unwrap();
    let now = journal::recording(j, id).unwrap();
    assert_eq!((now.stop_position, now.state), (at, r.state));
    assert_eq!(*segment_bases(j, id).last().unwrap(), (at - 1) & !(seg - 1), "nothing past the stop");
    assert_eq!(message_ends(j, id).last(), Some(&at));

    // Delete: the files and the record go; the next recording reuses the record, not the id.
    journal::delete_recording(j, id).unwrap();
    assert!(segment_bases(j, id).is_empty());
    assert!(matches!(journal::recording(j, id), Err(Error::NoSuchRecording { .. })));
    assert!(matches!(Replay::builder(j, id).open(), Err(Error::NoSuchRecording { .. })));
    let (_, next) = record_messages(shm.path(), j, "ops", 10, 64 * 1024);
    assert_eq!(next, id + 1);
    assert_eq!(journal::recordings(j).unwrap().len(), 1);
}

/// A replay that already opened a segment keeps reading it after a purge removes it (an unlinked
/// file lives while open): no torn read. When it moves on to a purged segment it gets
/// `PositionNotAvailable` with the oldest position kept, and a replay from there goes on whole.
#[test]
fn a_replay_reads_on_through_a_purge_and_is_told_where_the_kept_data_starts() {
    let (shm, disk) = (ShmDir::new("journal-purge-replay"), DiskDir::new("purge-replay"));
    let j = disk.path();
    // Segments of 1 MiB, read 256 KiB at a time: most of the first is read after the purge.
    let (session, id) = record_messages(shm.path(), j, "pr", 15_000, 1 << 20);
    let mut v = Verifier::new(shape());
    v.begin_session(session, true);
    let mut replay = Replay::builder(j, id).open().unwrap();
    let mut assembler = FragmentAssembler::new(|m: &[u8], h: &Header| {
        v.on_message(m, h.session_id());
    });
    // Into the first segment (its file open), then the first two segments are purged.
    while replay.position() < 1024 {
        replay.poll(&mut assembler, 1).unwrap();
    }
    assert!(journal::recording(j, id).unwrap().stop_position > 3 << 20);
    let purged = journal::purge(j, id, 2 << 20).unwrap();
    assert_eq!(purged.files_removed, 2);
    let error = loop {
        match replay.poll(&mut assembler, 64) {
            Ok(_) => assert!(!replay.is_done(), "the replay went past the purge"),
            Err(e) => break e,
        }
    };
    drop(assembler);
    assert_eq!(v.failure, None, "every message read from the open file was whole");
    match error {
        Error::PositionNotAvailable { requested, oldest, nearest, .. } => {
            assert_eq!(requested, 1 << 20, "the first segment was read to its end");
            assert_eq!((oldest, nearest), (purged.start, purged.start));
        }
        other => panic!("a replay of purged data: {other}"),
    }
    let (kept, error) = replay_checked(j, id, session, Some(purged.start));
    assert!(error.is_none() && kept > 0 && v.total + kept < 15_000, "{kept} {error:?}");
}

/// A recorder with retention policies (its recordings' own and the journal's) purges while it
/// records, on its own thread, and deletes old recordings whole, so a catalog of 4 records serves
/// 12 sessions: a recorder that runs for years never meets "catalog is full".
#[test]
fn a_recorder_with_retention_purges_as_it_records_and_never_fills_its_catalog() {
    let (shm, disk) = (ShmDir::new("journal-retain"), DiskDir::new("retain"));
    let j = disk.path().to_path_buf();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let recorder = {
        let (shm, j, stop) = (shm.path().to_path_buf(), j.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut r = Recorder::builder("retain", &j)
                .stream_dir(shm)
                .segment_length(64 * 1024)
                .catalog_capacity(4)
                .retention(journal::Retention::none().max_segments(3))
                .journal_retention(journal::Retention::none().max_segments(5))
                .retention_interval(Duration::from_millis(5))
                .start()
                .unwrap();
            r.run_until(|| stop.load(std::sync::atomic::Ordering::Relaxed)).unwrap();
            assert!(r.take_retention_error().is_none());
        })
    };
    let mut sessions = Vec::new();
    for round in 0..12 {
        sessions.push(publish(shm.path(), "retain", 2_000).join().unwrap());
        // Once the session's recording is closed, the policies hold after the thread's next
        // pass: each recording at most 3 segments, the journal 5.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let list: Vec<_> = journal::recordings(&j).unwrap().into_iter().map(Result::unwrap).collect();
            let counts: Vec<usize> = list.iter().map(|r| segment_bases(&j, r.id).len()).collect();
            let closed =
                list.iter().all(|r| r.is_stopped()) && list.iter().any(|r| r.session_id == sessions[round]);
            if closed && counts.iter().all(|&n| n <= 3) && counts.iter().sum::<usize>() <= 5 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: the policies do not hold: {counts:?} {list:#?}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    recorder.join().unwrap();
    let list: Vec<_> = journal::recordings(&j).unwrap().into_iter().map(Result::unwrap).collect();
    assert!(list.len() <= 4 && !list.is_empty(), "{list:#?}");
    let last = list.last().unwrap();
    assert!(last.id >= 11, "12 recordings, ids never reused: {list:#?}");
    for r in &list {
        assert!(r.retention == journal::Retention::none().max_segments(3));
        assert!(r.start_position > r.origin_position || segment_bases(&j, r.id).first() == Some(&0));
    }
    assert_eq!(journal::journal_retention(&j).unwrap(), journal::Retention::none().max_segments(5));
    // What is kept of the newest session replays whole, from its (moved) start.
    let (kept, error) = replay_checked(&j, last.id, *sessions.last().unwrap(), None);
    assert!(error.is_none() && kept > 0, "{kept} {error:?}");
}

/// Retention never purges what a registered durable reader has not read: its position (a
/// recording and a position in it, stored by hand here as the persistent subscription will)
/// keeps that recording from the segment holding it, and every later recording of its stream.
#[test]
fn retention_keeps_what_a_durable_reader_has_not_read() {
    let (shm, disk) = (ShmDir::new("journal-durable"), DiskDir::new("durable"));
    let j = disk.path();
    let seg = 64 * 1024i64;
    let (_, a) = record_messages(shm.path(), j, "dr", 4_000, seg as u64);
    let (_, b) = record_messages(shm.path(), j, "dr", 4_000, seg as u64);
    let (_, other) = record_messages(shm.path(), j, "other", 10, seg as u64);
    let (a_files, b_files) = (segment_bases(j, a), segment_bases(j, b));
    assert!(a_files.len() >= 6 && b_files.len() >= 6);
    let reader = journal::DurableReader::register(j, "report", "dr").unwrap();
    assert_eq!(reader.position(), None);
    // One segment for the whole journal; nothing read yet: all of "dr" is kept.
    journal::set_journal_retention(j, journal::Retention::none().max_segments(1)).unwrap();
    journal::apply_retention(j).unwrap();
    assert_eq!((segment_bases(j, a), segment_bases(j, b)), (a_files.clone(), b_files.clone()));
    assert!(matches!(journal::recording(j, other), Err(Error::NoSuchRecording { .. })), "not its stream");
    // Read into A's fifth segment: A is kept from there, B whole.
    let position = 4 * seg + 96;
    reader.store(a, position);
    assert_eq!(reader.position(), Some((a, position)));
    journal::apply_retention(j).unwrap();
    assert_eq!(segment_bases(j, a), a_files[4..]);
    assert!(journal::recording(j, a).unwrap().start_position <= position);
    assert_eq!(segment_bases(j, b), b_files);
    // Into B: A was read whole and goes; B is kept from the reader on.
    reader.store(b, 2 * seg);
    journal::apply_retention(j).unwrap();
    assert!(matches!(journal::recording(j, a), Err(Error::NoSuchRecording { .. })));
    assert_eq!(segment_bases(j, b), b_files[2..]);
    // A second process's view of the registration; the name is held while registered.
    let listed = journal::durable_readers(j).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].name.as_str(), listed[0].stream.as_str()), ("report", "dr"));
    assert_eq!((listed[0].position, listed[0].alive), (Some((b, 2 * seg)), true));
    assert!(journal::DurableReader::register(j, "report", "dr").is_err(), "held by a live reader");
    // Unregistered: the journal's policy alone.
    reader.unregister().unwrap();
    journal::apply_retention(j).unwrap();
    assert!(segment_bases(j, b).len() <= 1);
    assert!(journal::durable_readers(j).unwrap().is_empty());
}

/// Kill -9 anywhere in a purge, a detach or an attach, while the recording is replayed: the
/// journal opens, what it claims replays whole, and the next open finishes the purge (no file
/// below the start's segment that is not detached survives it).
#[test]
fn a_maintenance_process_killed_anywhere_leaves_a_journal_that_replays_what_it_claims() {
    let _x = support::exclusive();
    let mut rng = support::Rng::new("journal-maintenance-kill");
    let (shm, disk) = (ShmDir::new("journal-mkill"), DiskDir::new("mkill"));
    let j = disk.path();
    let seg = 64 * 1024u64;
    let (session, id) = record_messages(shm.path(), j, "mk", 20_000, seg);
    let r = journal::recording(j, id).unwrap();
    let mut kills = 0;
    while journal::recording(j, id).unwrap().start_position < r.stop_position - 2 * seg as i64 && kills < 30 {
        // From its start: a round of detach, attach and purge takes a few hundred microseconds.
        let at = rng.range(10, 20_000);
        let cfg = Cfg::new().set("journal", j.display()).set("id", id).set("segment", seg).set("kill_us", at);
        let mut p = Peer::spawn("maintainer", "journal_maintainer", &cfg);
        let status = p.wait_exit(Duration::from_secs(30));
        assert!(!status.success(), "the maintainer was not killed: {status:?}");
        kills += 1;
        // The journal opens and replays what it claims, from its start.
        let now = journal::recording(j, id).unwrap();
        let (kept, error) = replay_checked(j, id, session, None);
        assert!(error.is_none(), "kill {kills} at {at} us: {error:?}");
        assert!(kept > 0);
        // An operation finishes what the killed one left: files below the purged base go.
        journal::attach(j, id).unwrap();
        let bases = segment_bases(j, id);
        let start = journal::recording(j, id).unwrap().start_position;
        assert!(start <= now.start_position, "attach moves the start down, if anything");
        assert!(bases.first().is_some_and(|&b| b <= start), "{bases:?} {start}");
        for pair in bases.windows(2) {
            assert_eq!(pair[1] - pair[0], seg as i64, "a hole in the segments kept: {bases:?}");
        }
    }
    let r = journal::recording(j, id).unwrap();
    println!("{kills} kills, the start at {} of {}", r.start_position, r.stop_position);
    assert!(kills >= 3 && r.start_position > 0);
}

/// The sequence numbers a persistent reader's processes wrote to `out`, in order.
fn read_seqs(out: &Path) -> Vec<u64> {
    let bytes = std::fs::read(out).unwrap_or_default();
    bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Every receive shape in turn (poll, poll_blocking, controlled_poll with random actions,
/// Receiver, AsyncReceiver), each incarnation killed -9 at a random point and the next one of
/// another shape resuming under the same name.
#[test]
fn a_persistent_reader_killed_anywhere_resumes_where_it_stopped_and_loses_nothing() {
    let _x = support::exclusive();
    let mut rng = support::Rng::new("journal-persistent");
    let (shm, disk) = (ShmDir::new("journal-persist"), DiskDir::new("persist"));
    let out = disk.path().with_extension("seqs");
    let count = support::iterations(150_000, 1_500_000) as u64;
    let mut recorder = Peer::spawn(
        "recorder",
        "recorder",
        &recorder_cfg(shm.path(), disk.path(), "persist").set("until_eos", 1),
    );
    recorder.expect("recording", Duration::from_secs(10));
    let mut publisher =
        Peer::spawn("publisher", "publisher", &publisher_cfg(shm.path(), "persist").set("count", count));
    publisher.expect("ready", Duration::from_secs(10));
    let shapes = ["poll", "blocking", "controlled", "recv", "async"];
    let first_shape = rng.range(0, shapes.len() as u64) as usize;
    let reader = |k: usize, extra: &[(&str, u64)]| {
        let mut cfg = Cfg::new()
            .set("shape", shapes[(first_shape + k) % shapes.len()])
            .set("name", "persist")
            .set("dir", shm.path().display())
            .set("journal", disk.path().display())
            .set("reader", "reports")
            .set("mtu", MTU)
            .set("max_len", 3000)
            .set("out", out.display())
            .set("count", count);
        for (key, value) in extra {
            cfg = cfg.set(key, value);
        }
        Peer::spawn(&format!("reader-{k}"), "persistent_reader", &cfg)
    };
    // Every other reader sleeps after its polls, so that the publisher laps its live reads and
    // it falls back to the journal; each is killed -9 at a random point.
    let kills = 6;
    let mut finished = false;
    for k in 0..kills {
        let at = rng.range(20_000, 300_000);
        let sleep = if k % 2 == 1 { 2_000 } else { 0 };
        let mut r = reader(k, &[("kill_us", at), ("poll_sleep_us", sleep)]);
        let shape = r.expect("shape", Duration::from_secs(10)).raw;
        let status = r.wait_exit(Duration::from_secs(60));
        println!("reader {k}: {shape}, killed at {at} us, {} delivered so far", read_seqs(&out).len());
        if status.success() {
            finished = true; // read to the end before its kill
            break;
        }
    }
    if !finished {
        let mut r = reader(kills, &[]);
        let done = r.expect("done", Duration::from_secs(120));
        println!("last reader: live={} fell_back={}", done.num("live"), done.num("fell_back"));
        r.wait_success(Duration::from_secs(10));
    }
    publisher.expect("closed", Duration::from_secs(120));
    recorder.expect("stopped", Duration::from_secs(30));
    let seqs = read_seqs(&out);
    let _ = std::fs::remove_file(&out);
    // Each process delivers in order; a restart goes back at most to the start of the last
    // poll the killed one made (its position is stored after each poll): never past a message.
    assert_eq!(seqs.first(), Some(&0));
    let mut next = 0u64;
    let mut repeated = 0u64;
    for (i, &s) in seqs.iter().enumerate() {
        assert!(s <= next, "message {next} was lost: {s} came next, at {i}");
        if s < next {
            repeated += 1;
        } else {
            next += 1;
        }
    }
    assert_eq!(next, count, "every message delivered");
    assert!(repeated <= kills as u64 * 65, "{repeated} messages delivered twice across {kills} kills");
    println!("{} messages, {repeated} delivered again after a kill", seqs.len());
}

#[test]
fn a_lapped_persistent_subscription_goes_back_to_the_journal_and_merges_with_no_gap() {
    lapped_persistent_poll("lapped", None);
}

/// The lapped persistent subscription above driven by `controlled_poll`, its handler answering
/// with random actions (a seeded draw: `Abort` one fragment in ten, `Break` and `Commit` one in
/// twenty each): every message once, in order, across its falls back and merges, and an aborted
/// fragment is the next one the handler sees, whether the next poll reads live, falls back to
/// the journal or merges into the live stream.
#[test]
fn a_lapped_persistent_subscription_steered_by_actions_delivers_every_message_once() {
    lapped_persistent_poll("lapped-ctl", Some(support::Rng::new("journal-lapped-ctl")));
}

/// A persistent subscription read through `poll` (`actions` `None`) or `controlled_poll` with
/// actions drawn from `actions`, while a publisher laps it now and then.
fn lapped_persistent_poll(tag: &str, mut actions: Option<support::Rng>) {
    use shmlog::journal::{PersistentSubscription, Start};
    use shmlog::FragmentHandler;
    let (shm, disk) = (ShmDir::new(&format!("journal-{tag}")), DiskDir::new(tag));
    let count = 200_000;
    let recorder = RecorderThread::start(shm.path(), disk.path(), "lapped");
    let mut sub = PersistentSubscription::builder(disk.path(), "slow")
        .live(Subscription::builder("lapped").dir(shm.path()))
        .start(Start::Earliest)
        .open()
        .unwrap();
    let publisher = publish(shm.path(), "lapped", count);
    let v = std::cell::RefCell::new(Verifier::new(shape()));
    let mut session = None;
    let (mut live, mut fell_back, mut polls) = (false, 0, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut assembler = FragmentAssembler::new(|m: &[u8], h: &Header| {
        let mut v = v.borrow_mut();
        if session.is_none() {
            session = Some(h.session_id());
            v.begin_session(h.session_id(), true);
        }
        v.on_message(m, h.session_id());
    });
    // The fragment last aborted (its position, and whether it was read live), the aborts made
    // reading live and catching up, and the aborted fragments delivered again by a poll that read
    // the other way (a fall-back or a merge in between).
    let mut aborted: Option<(i64, bool)> = None;
    let (mut aborts_live, mut aborts_replaying, mut across) = (0u64, 0u64, 0u64);
    while v.borrow().total < count {
        let n = match &mut actions {
            None => sub.poll(&mut assembler, 64).unwrap(),
            Some(rng) => {
                let was_live = sub.is_live();
                let handler = |payload: &[u8], h: &Header| {
                    if let Some((at, live)) = aborted.take() {
                        assert_eq!(h.position(), at, "the fragment aborted is not the next one delivered");
                        across += u64::from(live != was_live);
                    }
                    let action = match rng.range(0, 100) {
                        0..10 => Action::Abort,
                        10..15 => Action::Break,
                        15..20 => Action::Commit,
                        _ => Action::Continue,
                    };
                    if action == Action::Abort {
                        aborted = Some((h.position(), was_live));
                        *if was_live { &mut aborts_live } else { &mut aborts_replaying } += 1;
                    } else {
                        assembler.on_fragment(payload, h);
                    }
                    action
                };
                sub.controlled_poll(handler, 64).unwrap()
            }
        };
        polls += 1;
        // Slow now and then while live: the publisher laps it.
        if n > 0 && live && polls % 4 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        fell_back += usize::from(live && !sub.is_live());
        live = sub.is_live();
        assert_eq!(sub.take_loss(), None);
        assert!(Instant::now() < deadline, "{} of {count} messages delivered", v.borrow().total);
    }
    drop(assembler);
    publisher.join().unwrap();
    // The end of stream closes the recording: then it holds all the reader read.
    while !journal::recordings(disk.path()).unwrap().iter().all(|r| r.as_ref().is_ok_and(|r| r.is_stopped()))
    {
        assert!(Instant::now() < deadline, "the end of stream did not close the recording");
        std::thread::yield_now();
    }
    recorder.stop();
    let v = v.into_inner();
    assert_eq!(v.failure, None);
    assert_eq!(v.total, count, "every message once, in order");
    assert!(fell_back > 0, "the publisher never lapped the live reads: nothing was tested");
    if actions.is_some() {
        assert!(
            aborts_live > 0 && aborts_replaying > 0,
            "aborts: {aborts_live} live, {aborts_replaying} replaying"
        );
        println!("aborted {aborts_live} fragments live, {aborts_replaying} catching up, {across} delivered again across a fall-back or a merge");
    }
    let (id, position) = sub.position().expect("a durable position");
    // Stored after the last message: the journal holds nothing more to deliver from there.
    let (rest, error) = replay_from(disk.path(), id, Some(position));
    assert!(rest.is_empty() && error.is_none(), "after the stored position {position}: {error:?}");
    println!("fell back to the journal {fell_back} times");
    sub.unregister().unwrap();
}

#[test]
fn a_persistent_subscription_reports_what_was_purged_under_it_and_reads_on_from_what_is_kept() {
    use shmlog::journal::{DurableReader, PersistentSubscription};
    use shmlog::LossCause;
    let (shm, disk) = (ShmDir::new("journal-ppurge"), DiskDir::new("ppurge"));
    let (session, id) = record_messages(shm.path(), disk.path(), "ppurge", 3_000, 64 << 10);
    // The reader had read nothing of the recording when an operator purged its first half.
    DurableReader::register(disk.path(), "late", "ppurge").unwrap().store(id, 0);
    let stop = journal::recording(disk.path(), id).unwrap().stop_position;
    journal::purge(disk.path(), id, stop / 2).unwrap();
    let kept = journal::recording(disk.path(), id).unwrap().start_position;
    assert!(kept > 0, "nothing was purged");
    let mut sub = PersistentSubscription::builder(disk.path(), "late")
        .live(Subscription::builder("ppurge").dir(shm.path()))
        .open()
        .unwrap();
    let mut v = Verifier::new(shape());
    v.begin_session(session, false);
    let mut assembler = FragmentAssembler::new(|m: &[u8], h: &Header| {
        v.on_message(m, h.session_id());
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while sub.position() != Some((id, stop)) {
        sub.poll(&mut assembler, 256).unwrap();
        assert!(Instant::now() < deadline, "the kept part was not read to its end");
    }
    drop(assembler);
    let loss = sub.take_loss().expect("the purge is reported");
    assert_eq!((loss.session_id, loss.from, loss.to, loss.cause), (session, 0, kept, LossCause::Purged));
    assert_eq!(sub.take_loss(), None);
    assert_eq!(v.failure, None);
    assert!(v.total > 0 && v.total < 3_000, "{} messages read after the purge", v.total);
}

/// A truncation cuts a stopped recording's tail: a persistent subscription that had not read it
/// reports it `Purged`, from where it got (reading on through the cut, or restarted past it) to
/// the old stop, and delivers nothing past the cut. Without the record's note of the old stop
/// both readers move on without a loss.
#[test]
fn a_persistent_subscription_reports_the_tail_a_truncation_cut_under_it() {
    use shmlog::journal::{DurableReader, PersistentSubscription};
    use shmlog::LossCause;
    let (shm, disk) = (ShmDir::new("journal-ptrunc"), DiskDir::new("ptrunc"));
    let (session, id) = record_messages(shm.path(), disk.path(), "ptrunc", 3_000, 64 << 10);
    let ends = message_ends(disk.path(), id);
    let stop = journal::recording(disk.path(), id).unwrap().stop_position;
    assert_eq!(ends.last(), Some(&stop));
    let (cut, ahead) = (ends[1_499], ends[2_249]);
    // "ahead" stored a position past the cut before it (and was then killed).
    DurableReader::register(disk.path(), "ahead", "ptrunc").unwrap().store(id, ahead);
    DurableReader::register(disk.path(), "behind", "ptrunc").unwrap().store(id, 0);
    let open = |name: &str| {
        PersistentSubscription::builder(disk.path(), name)
            .live(Subscription::builder("ptrunc").dir(shm.path()))
            .open()
            .unwrap()
    };
    let mut behind = open("behind");
    let mut last_end = 0;
    let mut assembler = FragmentAssembler::new(|_: &[u8], h: &Header| last_end = h.position());
    let deadline = Instant::now() + Duration::from_secs(30);
    while behind.position().is_none_or(|(_, at)| at < ends[499]) {
        behind.poll(&mut assembler, 64).unwrap();
        assert!(Instant::now() < deadline, "the first part was not read");
    }
    journal::truncate(disk.path(), id, cut).unwrap();
    assert_eq!(journal::recording(disk.path(), id).unwrap().cut_from, Some(stop));
    let loss = loop {
        behind.poll(&mut assembler, 64).unwrap();
        if let Some(loss) = behind.take_loss() {
            break loss;
        }
        assert!(Instant::now() < deadline, "no loss reported for the cut tail");
    };
    drop(assembler);
    assert_eq!((loss.session_id, loss.from, loss.to, loss.cause), (session, cut, stop, LossCause::Purged));
    assert_eq!(last_end, cut, "read to the cut and not past it");
    let mut ahead_sub = open("ahead");
    let mut delivered = 0;
    let loss = loop {
        delivered += ahead_sub.poll(|_: &[u8], _: &Header| {}, 64).unwrap();
        if let Some(loss) = ahead_sub.take_loss() {
            break loss;
        }
        assert!(Instant::now() < deadline, "no loss reported to the restarted reader");
    };
    assert_eq!((loss.session_id, loss.from, loss.to, loss.cause), (session, ahead, stop, LossCause::Purged));
    assert_eq!(delivered, 0, "nothing of the cut recording is past its position");
}

/// A reader steered by a handler's [`Action`]s, whichever way it gets its frames.
trait Steered {
    fn steer(&mut self, handler: &mut dyn FnMut(&[u8], &Header) -> Action, limit: usize) -> usize;
    fn at(&self) -> i64;
}

impl Steered for Subscription {
    fn steer(&mut self, handler: &mut dyn FnMut(&[u8], &Header) -> Action, limit: usize) -> usize {
        self.controlled_poll(|p: &[u8], h: &Header| handler(p, h), limit)
    }
    fn at(&self) -> i64 {
        self.position()
    }
}

/// Its position is the durable one: stored after each poll (and at a `Commit`); none while
/// reading live before the first fragment it delivered (the stream's start, 0, here).
impl Steered for journal::PersistentSubscription {
    fn steer(&mut self, handler: &mut dyn FnMut(&[u8], &Header) -> Action, limit: usize) -> usize {
        self.controlled_poll(|p: &[u8], h: &Header| handler(p, h), limit).unwrap()
    }
    fn at(&self) -> i64 {
        self.position().map_or(0, |(_, at)| at)
    }
}

impl Steered for Replay {
    fn steer(&mut self, handler: &mut dyn FnMut(&[u8], &Header) -> Action, limit: usize) -> usize {
        self.controlled_poll(|p: &[u8], h: &Header| handler(p, h), limit).unwrap()
    }
    fn at(&self) -> i64 {
        self.position()
    }
}

/// Polls `reader` with a script of actions (per poll: the fragment limit and the answer to each
/// fragment, `Continue` after the last); per poll, what it returned, the first payload byte of
/// every fragment the handler saw, and the position after it.
fn run_script(reader: &mut dyn Steered, script: &[(usize, &[Action])]) -> Vec<(usize, Vec<u8>, i64)> {
    script
        .iter()
        .map(|&(limit, actions)| {
            let mut seen = Vec::new();
            let n = reader.steer(
                &mut |p: &[u8], _: &Header| {
                    seen.push(p[0]);
                    actions.get(seen.len() - 1).copied().unwrap_or(Action::Continue)
                },
                limit,
            );
            (n, seen, reader.at())
        })
        .collect()
}

/// `Abort`, `Break`, `Commit` and `Continue` mean the same in every delivery: in place, copied,
/// untethered (from its checked copy), replayed from a recording (one frame loop serves them
/// all: `log::frame_loop`), and a persistent subscription's, live or from the journal.
#[test]
fn every_delivery_path_follows_the_same_actions() {
    let (shm, disk) = (ShmDir::new("journal-actions"), DiskDir::new("actions"));
    let name = "steered";
    let mut p = Publication::builder(name).dir(shm.path()).term_length(64 * 1024).mtu(MTU).create().unwrap();
    let open = |b: shmlog::SubscriptionBuilder| b.dir(shm.path()).open().unwrap();
    let mut in_place = open(Subscription::builder(name));
    let mut copied = open(Subscription::builder(name).copy_payloads(true));
    let mut untethered = open(Subscription::builder(name).tethered(false));
    assert!(untethered.is_untethered());
    let persistent = |name: &str, start| {
        journal::PersistentSubscription::builder(disk.path(), name)
            .live(Subscription::builder("steered").dir(shm.path()))
            .start(start)
            .open()
            .unwrap()
    };
    let mut persistent_live = persistent("live", journal::Start::Live);
    let mut recorder = Recorder::builder(name, disk.path()).stream_dir(shm.path()).start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while p.wait_for_readers(4, Duration::from_millis(10)).is_err() {
        recorder.poll().unwrap();
        assert!(Instant::now() < deadline, "the recorder did not join");
    }
    for i in 0..6u8 {
        p.offer(&[i; 8]).unwrap(); // 64 bytes a frame
    }
    p.close();
    record_until_closed(&mut recorder, || true);
    let id = journal::recordings(disk.path()).unwrap().last().unwrap().as_ref().unwrap().id;
    let mut replay = Replay::builder(disk.path(), id).open().unwrap();
    let mut persistent_replay = persistent("replay", journal::Start::Earliest);
    assert!(persistent_live.is_live() && !persistent_replay.is_live());

    use Action::{Abort, Break, Commit};
    let script: &[(usize, &[Action])] = &[
        (10, &[Abort]),                 // not consumed: delivered again
        (10, &[Break]),                 // consumed, and the poll stops
        (10, &[Commit, Commit, Abort]), // two consumed, the third left
        (2, &[]),                       // the fragment limit
        (10, &[]),                      // the rest
        (10, &[]),                      // nothing more
    ];
    let expected = vec![
        (0, vec![0], 0),
        (1, vec![0], 64),
        (2, vec![1, 2, 3], 192),
        (2, vec![3, 4], 320),
        (1, vec![5], 384),
        (0, vec![], 384),
    ];
    let readers: [(&str, &mut dyn Steered); 6] = [
        ("in place", &mut in_place),
        ("copied", &mut copied),
        ("untethered", &mut untethered),
        ("replay", &mut replay),
        ("persistent, live", &mut persistent_live),
        ("persistent, from the journal", &mut persistent_replay),
    ];
    for (path, reader) in readers {
        assert_eq!(run_script(reader, script), expected, "{path}");
    }
}

/// The lapped persistent subscription of the test above, read through a `Receiver` (`recv`) or an
/// `AsyncReceiver` on a tokio runtime (`async`): whole messages, each once and in order, across
/// its falls back to the journal and merges into the live stream.
fn lapped_persistent_receiver(how: &str) {
    use shmlog::journal::{PersistentSubscription, Start};
    use shmlog::{AsyncReceiver, Bytes, Receiver, RecvError};
    let (shm, disk) = (ShmDir::new(&format!("journal-lrx-{how}")), DiskDir::new(&format!("lrx-{how}")));
    let count = 100_000;
    let recorder = RecorderThread::start(shm.path(), disk.path(), "lrx");
    let sub = PersistentSubscription::builder(disk.path(), "slow")
        .live(Subscription::builder("lrx").dir(shm.path()))
        .start(Start::Earliest)
        .open()
        .unwrap();
    let publisher = publish(shm.path(), "lrx", count);
    let mut v = Verifier::new(shape());
    let (mut live, mut fell_back) = (false, 0);
    let deadline = Instant::now() + Duration::from_secs(120);
    // Messages come without headers: the session is the recording's.
    let session = || loop {
        let list = journal::recordings(disk.path()).unwrap();
        if let Some(r) = list.into_iter().flatten().find(|r| r.stream == "lrx") {
            break r.session_id;
        }
        assert!(Instant::now() < deadline, "no recording");
        std::thread::yield_now();
    };
    let mut check = |got: Result<Vec<u8>, RecvError<std::convert::Infallible>>,
                     sub: &PersistentSubscription| {
        let m = got.unwrap_or_else(|e| panic!("after {} messages: {e}", v.total));
        if v.total == 0 {
            v.begin_session(session(), true);
        }
        v.on_message(&m, v.session.unwrap());
        // Slow now and then while live: the publisher laps it.
        if live && v.total % 64 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        fell_back += usize::from(live && !sub.is_live());
        live = sub.is_live();
        assert!(Instant::now() < deadline, "{} of {count} messages delivered", v.total);
        v.total < count
    };
    let mut rx = Receiver::new(sub, Bytes);
    let sub = if how == "async" {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut arx = rt.block_on(async { AsyncReceiver::new(rx) }).unwrap();
        rt.block_on(async {
            loop {
                let got = arx.recv().await;
                if !check(got, arx.source()) {
                    break;
                }
            }
        });
        arx.into_inner().into_source()
    } else {
        while check(rx.recv_timeout(Duration::from_secs(10)), rx.source()) {}
        rx.into_source()
    };
    publisher.join().unwrap();
    recorder.stop();
    assert_eq!(v.failure, None);
    assert_eq!(v.total, count, "every message once, in order");
    assert!(fell_back > 0, "the publisher never lapped the live reads: nothing was tested");
    println!("{how}: fell back to the journal {fell_back} times");
    sub.unregister().unwrap();
}

#[test]
fn a_lapped_persistent_receiver_receives_every_message_once_across_falls_back_and_merges() {
    lapped_persistent_receiver("recv");
}

#[test]
fn a_lapped_persistent_async_receiver_receives_every_message_once_across_falls_back_and_merges() {
    lapped_persistent_receiver("async");
}

/// An idle persistent subscription reading live sleeps through `poll_blocking`'s timeout on the
/// stream's doorbell (no spinning: the thread's CPU time stays a small part of the wait), and
/// wakes for a message.
#[test]
fn an_idle_persistent_subscription_sleeps_in_poll_blocking_and_wakes_for_a_message() {
    use shmlog::journal::PersistentSubscription;
    use shmlog::Polled;
    let (shm, disk) = (ShmDir::new("journal-pblock"), DiskDir::new("pblock"));
    let mut publication = Publication::builder("pblock").dir(shm.path()).create().unwrap();
    let mut sub = PersistentSubscription::builder(disk.path(), "idle")
        .live(Subscription::builder("pblock").dir(shm.path()))
        .open()
        .unwrap();
    assert!(sub.is_live());
    // This thread's CPU time (the first field of its schedstat, in nanoseconds).
    let cpu = || {
        let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
        Duration::from_nanos(stat.split_whitespace().next().unwrap().parse().unwrap())
    };
    let (t0, c0) = (Instant::now(), cpu());
    let got =
        sub.poll_blocking(|_: &[u8], _: &Header| panic!("nothing was sent"), 16, Duration::from_millis(300));
    let (waited, spent) = (t0.elapsed(), cpu() - c0);
    assert_eq!(got.unwrap(), Polled::TimedOut);
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(spent < waited / 4, "{spent:?} of CPU in a wait of {waited:?}: it spun");
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        publication.offer(b"wake").unwrap();
        publication
    });
    let mut got = Vec::new();
    let polled = sub
        .poll_blocking(|m: &[u8], _: &Header| got.extend_from_slice(m), 16, Duration::from_secs(30))
        .unwrap();
    assert_eq!((polled, got.as_slice()), (Polled::Fragments(1), &b"wake"[..]));
    drop(sender.join().unwrap());
}

/// A `Receiver` reads ahead (a batch of fragments decoded into its queue), but a persistent
/// subscription under it stores the position of the last message handed out, never one still
/// queued: dropped with messages queued (as a kill -9 would leave it), the name resumes at or
/// before the first it did not hand out, at most one read (64 fragments) before it.
#[test]
fn a_persistent_receiver_dropped_with_messages_queued_resumes_with_no_gap() {
    use shmlog::journal::{PersistentSubscription, Start};
    use shmlog::{Bytes, Receiver};
    let (shm, disk) = (ShmDir::new("journal-pqueued"), DiskDir::new("pqueued"));
    let (_, id) = record_messages(shm.path(), disk.path(), "pqueued", 2_000, 64 << 10);
    let (all, error) = replay_from(disk.path(), id, None);
    assert!(error.is_none() && all.len() == 2_000);
    let open = || {
        let sub = PersistentSubscription::builder(disk.path(), "queued")
            .live(Subscription::builder("pqueued").dir(shm.path()))
            .start(Start::Earliest)
            .open()
            .unwrap();
        Receiver::new(sub, Bytes)
    };
    // The index of the next message not handed out yet.
    let mut next = 0usize;
    for take in [1, 5, 70, 3, 200, 64, 65, 1, 1] {
        let mut rx = open();
        let first = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        // Where it resumed: the message it gave first, at most a read's worth back.
        let resumed = (next.saturating_sub(64)..=next)
            .rev()
            .find(|&k| all[k].1 == first)
            .unwrap_or_else(|| panic!("resumed past message {next}, or more than a read before it"));
        let mut at = resumed + 1;
        for _ in 1..take.max(next - resumed + 1) {
            let m = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert!(m == all[at].1, "message {at} out of order");
            at += 1;
        }
        next = next.max(at);
        // The rest of its read stays queued, unread.
    }
    assert!(next >= 200, "{next}");
}

/// A process that goes away between an `Abort` and its next poll (dropped here, which leaves the
/// name as a kill -9 does: the position is stored after each poll) resumes in front of the
/// fragment aborted: the next process delivers it, from the start of its message, and nothing of
/// the stream is skipped. A `Commit` stores the position at once: the next fragment's handler
/// finds it in the `readers` file.
#[test]
fn an_aborted_fragment_is_delivered_again_after_a_restart_and_a_commit_is_stored_at_once() {
    use shmlog::journal::{durable_readers, PersistentSubscription, Start};
    let (shm, disk) = (ShmDir::new("journal-pabort"), DiskDir::new("pabort"));
    let (_, id) = record_messages(shm.path(), disk.path(), "pabort", 600, 64 << 10);
    // Every fragment of the recording: its position (after it) and whether it ends a message.
    let mut fragments = Vec::<(i64, bool)>::new();
    let mut replay = Replay::builder(disk.path(), id).open().unwrap();
    while !replay.is_done() {
        replay.poll(|_: &[u8], h: &Header| fragments.push((h.position(), h.is_end())), 256).unwrap();
    }
    // The index of the first fragment of the message fragment `k` is in.
    let message_start = |k: usize| (0..k).rev().find(|&i| fragments[i].1).map_or(0, |i| i + 1);
    let stored = || {
        let readers = durable_readers(disk.path()).unwrap();
        readers.into_iter().find(|r| r.name == "aborter").and_then(|r| r.position)
    };
    let mut rng = support::Rng::new("journal-pabort");
    // Abort points: a message's first fragment, one inside a fragmented message, then random.
    let first_inside = (1..fragments.len()).find(|&k| message_start(k) < k).expect("a fragmented message");
    let mut points = vec![3, first_inside];
    points.sort_unstable();
    points.dedup();
    while points.len() < 12 {
        let last = *points.last().unwrap() as u64;
        points.push(rng.range(last + 1, last + 40) as usize);
    }
    assert!(*points.last().unwrap() < fragments.len(), "{} fragments", fragments.len());
    // Where the previous process aborted: the next one starts with that fragment's message.
    let mut expect_first = 0;
    let (mut commits_seen, mut seen_inside) = (0, false);
    for &k in &points {
        let mut sub = PersistentSubscription::builder(disk.path(), "aborter")
            .live(Subscription::builder("pabort").dir(shm.path()))
            .start(Start::Earliest)
            .open()
            .unwrap();
        let mut seen = Vec::new();
        let mut committed: Option<i64> = None;
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.last() != Some(&fragments[k].0) {
            sub.controlled_poll(
                |_: &[u8], h: &Header| {
                    if let Some(at) = committed.take() {
                        assert_eq!(stored(), Some((id, at)), "a Commit did not store the position at once");
                        commits_seen += 1;
                    }
                    seen.push(h.position());
                    if h.position() == fragments[k].0 {
                        return Action::Abort;
                    }
                    if h.is_end() && rng.chance(30) {
                        committed = Some(h.position());
                        return Action::Commit;
                    }
                    Action::Continue
                },
                16,
            )
            .unwrap();
            assert!(Instant::now() < deadline, "fragment {k} never came");
        }
        let first = fragments.iter().position(|f| f.0 == seen[0]).unwrap();
        assert_eq!(first, expect_first, "resumed at fragment {first}, not where the aborted message starts");
        let want: Vec<i64> = fragments[first..=k].iter().map(|f| f.0).collect();
        assert_eq!(seen, want, "fragments {first}..={k}: a gap or a duplicate");
        expect_first = message_start(k);
        seen_inside |= expect_first < k;
        // Stored after the poll: in front of the aborted fragment's message, not past it.
        let start =
            if expect_first == 0 { replay.recording().start_position } else { fragments[expect_first - 1].0 };
        assert_eq!(sub.position(), Some((id, start)));
        drop(sub);
    }
    assert!(seen_inside && commits_seen > 0, "inside a message: {seen_inside}, commits: {commits_seen}");
}

/// A persistent subscription that reads a session live ahead of its recorder (which has recorded
/// less than the reader read) stores its position all the same, in the recording of that
/// session: a restart resumes there (from the live log, or once the recorder gets there). Found
/// by the ledger (seed 606: a fast reader delivered 52 messages of a new session, never stored,
/// and its next incarnation delivered them again).
#[test]
fn a_persistent_subscription_ahead_of_its_recorder_stores_its_position() {
    use shmlog::journal::PersistentSubscription;
    let (shm, disk) = (ShmDir::new("journal-pahead"), DiskDir::new("pahead"));
    let mut recorder = Recorder::builder("pahead", disk.path()).stream_dir(shm.path()).start().unwrap();
    let go = Arc::new(AtomicBool::new(false));
    let count = 20;
    let publisher = publish_after_first(shm.path(), "pahead", count, go.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    // The recorder records the first message, then does not poll again until the end.
    let id = loop {
        recorder.poll().unwrap();
        let recorded = journal::recordings(disk.path()).unwrap().into_iter().flatten().next();
        if let Some(r) = recorded.filter(|r| r.stop_position > r.start_position) {
            break r.id;
        }
        assert!(Instant::now() < deadline, "the first message was not recorded");
    };
    let mut sub = PersistentSubscription::builder(disk.path(), "ahead")
        .live(Subscription::builder("pahead").dir(shm.path()))
        .open()
        .unwrap();
    go.store(true, Ordering::Release);
    let last_end = std::cell::Cell::new(None);
    let mut assembler = FragmentAssembler::new(|_: &[u8], h: &Header| last_end.set(Some(h.position())));
    while !publisher.is_finished() {
        sub.poll(&mut assembler, 64).unwrap();
        assert!(Instant::now() < deadline, "the publisher did not finish");
    }
    // Read to the publisher's end; the position's store looks the recording up once a millisecond.
    while last_end.get().is_none() || sub.position().map(|(_, at)| at) != last_end.get() {
        sub.poll(&mut assembler, 64).unwrap();
        assert!(
            Instant::now() < deadline,
            "stored {:?}, delivered up to {:?}",
            sub.position(),
            last_end.get()
        );
    }
    drop(assembler);
    let recorded = journal::recording(disk.path(), id).unwrap().stop_position;
    assert!(recorded < last_end.get().unwrap(), "the recorder went on: nothing was tested");
    assert_eq!(sub.position().map(|(rec, _)| rec), Some(id));
    publisher.join().unwrap();
    while recorder.poll().unwrap() > 0 || recorder.recording_id().is_some() {
        assert!(Instant::now() < deadline, "the recorder did not finish");
    }
}

/// A wait joins a session that started while the reader waited, and queues the loss of what it
/// joined past (the publisher wrote more than its log holds meanwhile: an untethered reader is
/// not waited for): the persistent subscription sees that loss before it delivers anything of
/// the session, and goes to the journal for the session's start. Delivered past first, the
/// skipped start would count as delivered and never come.
#[test]
fn a_session_a_wait_joined_late_is_read_from_the_journal_from_its_start() {
    use shmlog::journal::PersistentSubscription;
    let (shm, disk) = (ShmDir::new("journal-pwaitjoin"), DiskDir::new("pwaitjoin"));
    let recorder = RecorderThread::start(shm.path(), disk.path(), "pwaitjoin");
    let mut sub = PersistentSubscription::builder(disk.path(), "waiter")
        .live(Subscription::builder("pwaitjoin").dir(shm.path()))
        .open()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    // Session A, read live to its end.
    let a = publish(shm.path(), "pwaitjoin", 10).join().unwrap();
    let got = std::cell::RefCell::new(Vec::<(i32, Vec<u8>)>::new());
    let mut assembler =
        FragmentAssembler::new(|m: &[u8], h: &Header| got.borrow_mut().push((h.session_id(), m.to_vec())));
    loop {
        sub.poll(&mut assembler, 64).unwrap();
        assert!(Instant::now() < deadline, "session A not read");
        if sub.is_live() && !journal::recordings(disk.path()).unwrap().is_empty() {
            let r = journal::recordings(disk.path()).unwrap().remove(0).unwrap();
            if r.is_stopped() && sub.position() == Some((r.id, r.stop_position)) {
                break;
            }
        }
    }
    // Session B, far more than its log holds, while the reader does not poll.
    let count = 5_000;
    let b = publish(shm.path(), "pwaitjoin", count).join().unwrap();
    assert_ne!(a, b);
    assert!(sub.wait_readable(Duration::from_secs(10)), "the wait saw nothing of session B");
    let mut v = Verifier::new(shape());
    v.begin_session(b, true);
    got.borrow_mut().clear();
    while v.total < count {
        sub.poll(&mut assembler, 256).unwrap();
        for (s, m) in got.borrow_mut().drain(..) {
            v.on_message(&m, s);
        }
        assert_eq!(v.failure, None);
        assert_eq!(sub.take_loss(), None);
        assert!(Instant::now() < deadline, "{} of {count} messages of session B", v.total);
    }
    drop(assembler);
    recorder.stop();
    assert_eq!(v.failure, None);
}
