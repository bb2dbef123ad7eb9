//! The journal against what a user would do by hand, side by side in the same run, rounds taking
//! turns (medians of per-round ratios; `sync(2)` before each side of a round):
//!
//! - `record`: a recorder copying a publisher thread's 1 KiB messages into segment files, MB/s,
//!   against `pwrite` of the same number of bytes in 1 MiB writes to a file of the same disk
//!   (both sized up front, both left to the page cache; then both with an fdatasync per 64 MiB).
//!   The recorder runs twice a round: with each frame's CRC32C (the default) and without
//!   (`Checksum::None`). Goal: >= 0.8x with the checksum.
//! - `live`: what attaching a recorder (polling every millisecond) costs the live path: the round
//!   trip of 32-byte ping-pong (p50/p99) and a publisher's streaming throughput to a spinning
//!   subscriber, with and without it. Goal: >= 0.9x, where the disk keeps up.
//! - `replay`: replaying a recording from the page cache, bytes of messages delivered a second,
//!   against `memcpy` of the same bytes in 1 MiB copies, with the checksums checked and of a
//!   recording without them. Goal: >= 0.5x.
//!
//! - `purge`: retention's purge of 1 GiB (eight 128 MiB segments, the default length) of a
//!   recording, wall time, against removing eight 128 MiB files of the same disk with plain
//!   `unlink`s: each side's bytes freshly written and then synced (`sync(2)`) before it is timed.
//!   Goal: < 100 ms of the recorder's time: the purge runs on the recorder's retention thread,
//!   so `purge_beside_recording` measures what it costs a recorder recording another stream into
//!   the same journal at 50 MB/s meanwhile: its longest `poll` (and p99) over one second with a
//!   purge of 1 GiB in it, against the same second without.
//!
//! - `persistent/catch_up`: a persistent subscription whose durable position is a backlog behind
//!   (the bytes a publisher of 1 KiB messages at 20 MB/s makes in 10 s: 200 MB) resumes, catches
//!   up from the journal while the publisher keeps going at that rate, and merges into the live
//!   stream: bytes of messages delivered a second until merged, against the publisher's rate
//!   (goal >= 5x) and against replaying the same recording by hand (`Replay`, which never
//!   merges: what a user would do instead).
//! - `persistent/publisher`: a publisher's streaming rate (64-byte messages, one second) with a
//!   tethered recorder as its reader, alone; with a slow persistent subscription (64 fragments
//!   a millisecond) lapped by it beside; and with a slow tethered subscription instead (what a
//!   user would do instead to lose nothing). Goal: >= 0.95x with the persistent one.
//! - The same question counted in instructions, where timings of three threads on a loaded
//!   machine cannot answer it: with `SHMLOG_OFFER_LOOP=alone|persistent` the bench runs only
//!   [`offer_loop`], one thread that offers 64-byte messages, polls a tethered recorder every 64
//!   and (`persistent`) a persistent subscription: 64 fragments every 16 offers for 20 000
//!   offers, then nothing for 30 000 (twice the log: it is lapped, falls back to the journal,
//!   catches up and merges again, four times in 200 000 offers). Under
//!   `valgrind --tool=callgrind --toggle-collect='*counted_offer*'` the total is the publisher's
//!   instructions alone; the loop prints its offers and refused offers to divide by.
//!
//! Journals go to `$SHMLOG_BENCH_DISK` or the temp dir (a real disk, not `/dev/shm`).

mod support;

use criterion::Criterion;
use shmlog::journal::{Checksum, DurableReader, Fsync, PersistentSubscription, Recorder, Replay};
use shmlog::{Header, Publication, Subscription};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::shm::{offer_spin, pair, round_trip, Counter, Echo};
use support::{Args, Pcts, ShmDir};

const B: &str = "journal";
const SEGMENT: u64 = 64 << 20;

/// A fresh directory on a real disk, removed on drop.
struct Disk(PathBuf);

impl Disk {
    fn new(tag: &str) -> Self {
        let base =
            std::env::var_os("SHMLOG_BENCH_DISK").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
        let path =
            base.join(format!("shmlog-bench-{tag}-{}-{}", std::process::id(), support::loadavg().to_bits()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Disk(path)
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes back what earlier lanes left dirty in the page cache, so the kernel's flusher threads
/// do not run during the next measurement (they would take a core from it).
fn settle() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// `rounds` rounds of `a`, then `b`, then `c` (each after `settle`): the medians of each and of
/// the per-round ratios `b / a` and `c / a`.
fn alternate3(
    rounds: usize,
    mut a: impl FnMut() -> f64,
    mut b: impl FnMut() -> f64,
    mut c: impl FnMut() -> f64,
) -> [f64; 5] {
    let mut v: [Vec<f64>; 5] = Default::default();
    for _ in 0..rounds {
        settle();
        let x = a();
        settle();
        let y = b();
        settle();
        let z = c();
        for (i, value) in [x, y, z, y / x, z / x].into_iter().enumerate() {
            v[i].push(value);
        }
    }
    v.map(|mut v| median(&mut v))
}

/// `rounds` rounds of `a` then `b` (each after `settle`): the medians of `a`, of `b`, and of the
/// per-round ratios `b / a`.
fn alternate(rounds: usize, mut a: impl FnMut() -> f64, mut b: impl FnMut() -> f64) -> (f64, f64, f64) {
    let (mut xs, mut ys, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        settle();
        let x = a();
        settle();
        let y = b();
        xs.push(x);
        ys.push(y);
        ratios.push(y / x);
    }
    (median(&mut xs), median(&mut ys), median(&mut ratios))
}

/// Polls `recorder` until it has joined `p`'s session.
fn connect(recorder: &mut Recorder, p: &mut Publication) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.is_connected() {
        recorder.poll().unwrap();
        recorder.wait(Duration::from_millis(1));
        assert!(Instant::now() < deadline, "the recorder did not join");
    }
}

/// Records `bytes` of 1 KiB messages a publisher thread offers into a new journal; returns the
/// directories, the recording's id and how long the recorder took from the first offer on.
fn record_stream(bytes: u64, fsync: Fsync, checksum: Checksum) -> (ShmDir, Disk, u32, Duration) {
    record_segments(bytes, SEGMENT, fsync, checksum)
}

/// [`record_stream`] into segments of `segment` bytes.
fn record_segments(
    bytes: u64,
    segment: u64,
    fsync: Fsync,
    checksum: Checksum,
) -> (ShmDir, Disk, u32, Duration) {
    let (shm, disk) = (ShmDir::new("journal-rec"), Disk::new("rec"));
    let mut recorder = Recorder::builder("rec", &disk.0)
        .stream_dir(shm.path())
        .segment_length(segment)
        .fsync(fsync)
        .checksum(checksum)
        .start()
        .unwrap();
    let mut p = Publication::builder("rec").dir(shm.path()).term_length(16 << 20).create().unwrap();
    connect(&mut recorder, &mut p);
    let messages = bytes / 1056; // a 1 KiB message takes 1056 bytes of log
    let publisher = std::thread::spawn(move || {
        for i in 0..messages {
            offer_spin(&mut p, &[i as u8; 1024]);
        }
        p
    });
    let start = Instant::now();
    while recorder.recorded_position() < (messages * 1056) as i64 {
        if recorder.poll().unwrap() == 0 {
            std::hint::spin_loop();
        }
    }
    let elapsed = start.elapsed();
    let id = recorder.recording_id().unwrap();
    recorder.stop().unwrap();
    drop(publisher.join().unwrap());
    (shm, disk, id, elapsed)
}

/// MB/s of a recorder recording `bytes`.
fn record_round(bytes: u64, fsync: Fsync, checksum: Checksum) -> f64 {
    let (_, _, _, elapsed) = record_stream(bytes, fsync, checksum);
    (bytes / 1056 * 1056) as f64 / elapsed.as_secs_f64() / 1e6
}

/// Bytes of the recorded stream's log (3 terms of 16 MiB): where the recorder's writes come from.
const LOG_BYTES: usize = 48 << 20;

/// Writes `bytes` to a file sized up front in 1 MiB `pwrite`s (fdatasync per 64 MiB if `sync`),
/// from a buffer the size of the recorder's log (so from memory, not from a cache-hot block).
fn write_round(bytes: u64, sync: bool) -> f64 {
    let disk = Disk::new("write");
    let source = vec![5u8; LOG_BYTES];
    let start = Instant::now();
    let mut written = 0u64;
    let mut file = None;
    while written < bytes {
        if written % SEGMENT == 0 {
            if let Some(f) = file.take() {
                if sync {
                    std::fs::File::sync_data(&f).unwrap();
                }
            }
            let f = std::fs::File::create(disk.0.join(format!("{written}.seg"))).unwrap();
            f.set_len(SEGMENT).unwrap();
            file = Some(f);
        }
        let n = (1 << 20).min((bytes - written) as usize);
        let from = (written as usize) % LOG_BYTES;
        file.as_ref().unwrap().write_all_at(&source[from..from + n], written % SEGMENT).unwrap();
        written += n as u64;
    }
    if sync {
        file.unwrap().sync_data().unwrap();
    }
    bytes as f64 / start.elapsed().as_secs_f64() / 1e6
}

fn record_lanes(args: &Args) {
    let bytes: u64 = if args.test { 8 << 20 } else { 256 << 20 };
    for (label, fsync, sync) in
        [("page_cache", Fsync::Never, false), ("fsync_per_segment", Fsync::PerSegment, true)]
    {
        let name = format!("journal/record/{label}");
        if !args.wants(&name) {
            continue;
        }
        let [w, r, p, q, qp] = alternate3(
            args.n(7, 1),
            || write_round(bytes, sync),
            || record_round(bytes, fsync, Checksum::Crc32c),
            || record_round(bytes, fsync, Checksum::None),
        );
        eprintln!(
            "[{B}] {name}: recorder with CRC32C {r:.0} MB/s (ratio {q:.2}, goal >= 0.8), without {p:.0} MB/s \
             (ratio {qp:.2}), sequential pwrite {w:.0} MB/s"
        );
        support::record(
            B,
            &name,
            &[
                ("recorder_mbps", r),
                ("recorder_no_checksum_mbps", p),
                ("write_mbps", w),
                ("ratio", q),
                ("ratio_no_checksum", qp),
            ],
            &[],
        );
    }
}

/// Round trips of 32-byte ping-pong, optionally with a recorder on the ping stream.
fn rtt_round(n: usize, recorded: bool) -> Vec<f64> {
    let (shm, disk) = (ShmDir::new("journal-rtt"), Disk::new("rtt"));
    let (mut ping, ping_sub) = pair(shm.path(), "ping", 1 << 20);
    let (pong, mut pong_sub) = pair(shm.path(), "pong", 1 << 20);
    let stop = Arc::new(AtomicBool::new(false));
    let recorder = recorded.then(|| {
        let (shm, disk, stop) = (shm.path().to_path_buf(), disk.0.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut r = Recorder::builder("ping", disk)
                .stream_dir(shm)
                .join_at(shmlog::JoinAt::Slowest)
                .start()
                .unwrap();
            r.run_until(|| stop.load(Ordering::Relaxed)).unwrap();
        })
    });
    let echo = Echo::start(ping_sub, pong, 1);
    support::pin(0);
    let msg = [1u8; 32];
    for _ in 0..1000 {
        round_trip(&mut ping, &mut pong_sub, &msg);
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        round_trip(&mut ping, &mut pong_sub, &msg);
        samples.push(t.elapsed().as_nanos() as f64);
    }
    support::unpin();
    echo.stop(&mut ping);
    stop.store(true, Ordering::Relaxed);
    if let Some(r) = recorder {
        r.join().unwrap();
    }
    samples
}

/// Streaming throughput of 64-byte messages to a spinning subscriber, msgs/s.
fn stream_round(n: u64, recorded: bool) -> f64 {
    let (shm, disk) = (ShmDir::new("journal-tp"), Disk::new("tp"));
    let (mut p, sub) = pair(shm.path(), "tp", 16 << 20);
    let stop = Arc::new(AtomicBool::new(false));
    let recorder = recorded.then(|| {
        let (shm, disk, stop) = (shm.path().to_path_buf(), disk.0.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut r = Recorder::builder("tp", disk)
                .stream_dir(shm)
                .join_at(shmlog::JoinAt::Slowest)
                .segment_length(SEGMENT)
                .start()
                .unwrap();
            r.run_until(|| stop.load(Ordering::Relaxed)).unwrap();
        })
    });
    let counter = Counter::start(sub, 1, 256);
    support::pin(0);
    let msg = [3u8; 64];
    let t = Instant::now();
    for _ in 0..n {
        offer_spin(&mut p, &msg);
    }
    counter.wait_for(n);
    let rate = n as f64 / t.elapsed().as_secs_f64();
    support::unpin();
    drop(counter.stop());
    stop.store(true, Ordering::Relaxed);
    if let Some(r) = recorder {
        r.join().unwrap();
    }
    rate
}

/// Streaming throughput of 64-byte messages with one reader: a spinning subscriber, or a
/// recorder (polling without a pause) as the only reader; msgs/s. Two threads: fits 2 cores.
fn sole_reader_round(n: u64, recorder_reads: bool) -> f64 {
    if !recorder_reads {
        let shm = ShmDir::new("journal-sole");
        let (mut p, sub) = pair(shm.path(), "sole", 16 << 20);
        let counter = Counter::start(sub, 1, 256);
        support::pin(0);
        let msg = [3u8; 64];
        let t = Instant::now();
        for _ in 0..n {
            offer_spin(&mut p, &msg);
        }
        counter.wait_for(n);
        let rate = n as f64 / t.elapsed().as_secs_f64();
        support::unpin();
        drop(counter.stop());
        return rate;
    }
    let (shm, disk) = (ShmDir::new("journal-sole"), Disk::new("sole"));
    let mut recorder =
        Recorder::builder("sole", &disk.0).stream_dir(shm.path()).segment_length(SEGMENT).start().unwrap();
    let mut p = Publication::builder("sole").dir(shm.path()).term_length(16 << 20).create().unwrap();
    connect(&mut recorder, &mut p);
    let end = n as i64 * 96; // a 64-byte message takes 96 bytes of log
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let thread = support::spawn_on(1, move || {
        support::pin(1);
        while recorder.recorded_position() < end {
            recorder.poll().unwrap();
        }
        d.store(true, Ordering::Release);
        recorder
    });
    support::pin(0);
    let msg = [3u8; 64];
    let t = Instant::now();
    for _ in 0..n {
        offer_spin(&mut p, &msg);
    }
    while !done.load(Ordering::Acquire) {
        std::hint::spin_loop();
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    support::unpin();
    thread.join().unwrap().stop().unwrap();
    rate
}

fn live_lanes(args: &Args) {
    if args.wants("journal/live/sole_reader") {
        let n = args.n(20_000_000, 200_000) as u64;
        let (a, b, q) =
            alternate(args.n(5, 1), || sole_reader_round(n, false), || sole_reader_round(n, true));
        eprintln!(
            "[{B}] journal/live/sole_reader: publisher {:.1} M msgs/s (64 B) to a subscriber, {:.1} M msgs/s to a \
             recorder as its only reader (ratio {q:.2}: the recorder keeps the publisher going as a reader does)",
            a / 1e6,
            b / 1e6
        );
        support::record(
            B,
            "journal/live/sole_reader",
            &[("subscriber_msgs_per_s", a), ("recorder_msgs_per_s", b), ("ratio", q)],
            &[],
        );
    }
    if args.wants("journal/live/rtt") {
        let (mut p50, mut p99, mut p50r, mut p99r) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.n(5, 1) {
            for recorded in [false, true] {
                settle();
                let mut s = rtt_round(args.n(100_000, 2_000), recorded);
                let pc = Pcts::of(&mut s);
                if recorded {
                    p50r.push(pc.p50);
                    p99r.push(pc.p99);
                } else {
                    p50.push(pc.p50);
                    p99.push(pc.p99);
                }
            }
        }
        let (a50, a99, b50, b99) = (median(&mut p50), median(&mut p99), median(&mut p50r), median(&mut p99r));
        eprintln!(
            "[{B}] journal/live/rtt: p50 {a50:.0} -> {b50:.0} ns, p99 {a99:.0} -> {b99:.0} ns with a recorder \
             (speed ratio p50 {:.2}, p99 {:.2}; goal >= 0.9)",
            a50 / b50,
            a99 / b99
        );
        support::record(
            B,
            "journal/live/rtt",
            &[("p50_ns", a50), ("p99_ns", a99), ("p50_recorded_ns", b50), ("p99_recorded_ns", b99)],
            &[],
        );
    }
    if args.wants("journal/live/throughput") {
        let n = args.n(20_000_000, 200_000) as u64;
        let (a, b, q) = alternate(args.n(5, 1), || stream_round(n, false), || stream_round(n, true));
        eprintln!(
            "[{B}] journal/live/throughput: {:.1} -> {:.1} M msgs/s (64 B) with a recorder, ratio {q:.2} \
             (goal >= 0.9 where the recorder has a core; here {} cores are shared by a spinning publisher, a spinning \
             subscriber and the recorder)",
            a / 1e6,
            b / 1e6,
            support::cores()
        );
        support::record(
            B,
            "journal/live/throughput",
            &[("msgs_per_s", a), ("recorded_msgs_per_s", b), ("ratio", q)],
            &[],
        );
    }
}

fn replay_round(journal: &Path, id: u32) -> f64 {
    let mut replay = Replay::builder(journal, id).open().unwrap();
    let mut bytes = 0u64;
    let start = Instant::now();
    while !replay.is_done() {
        replay.poll(|m: &[u8], _: &Header| bytes += m.len() as u64, 1024).unwrap();
    }
    bytes as f64 / start.elapsed().as_secs_f64() / 1e6
}

/// Copies `src` (as big as the recording: in memory, as the page cache is) into a 1 MiB buffer,
/// 1 MiB at a time, as the replay's `pread`s do.
fn memcpy_round(src: &[u8]) -> f64 {
    let mut dst = vec![0u8; 1 << 20];
    let start = Instant::now();
    for chunk in src.chunks(1 << 20) {
        dst[..chunk.len()].copy_from_slice(std::hint::black_box(chunk));
        std::hint::black_box(&mut dst);
    }
    src.len() as f64 / start.elapsed().as_secs_f64() / 1e6
}

fn replay_lanes(args: &Args) {
    if !args.wants("journal/replay") {
        return;
    }
    let bytes: u64 = if args.test { 8 << 20 } else { 256 << 20 };
    let (_shm, disk, id, _) = record_stream(bytes, Fsync::Never, Checksum::Crc32c);
    let (_shm_plain, disk_plain, id_plain, _) = record_stream(bytes, Fsync::Never, Checksum::None);
    replay_round(&disk.0, id); // into the page cache
    replay_round(&disk_plain.0, id_plain);
    let source = vec![9u8; bytes as usize];
    let [m, r, p, q, qp] = alternate3(
        args.n(7, 1),
        || memcpy_round(&source),
        || replay_round(&disk.0, id),
        || replay_round(&disk_plain.0, id_plain),
    );
    eprintln!(
        "[{B}] journal/replay: {r:.0} MB/s of messages from the page cache with CRC32C checks (ratio {q:.2}, goal \
         >= 0.5), {p:.0} MB/s without (ratio {qp:.2}), memcpy {m:.0} MB/s"
    );
    support::record(
        B,
        "journal/replay",
        &[
            ("replay_mbps", r),
            ("replay_no_checksum_mbps", p),
            ("memcpy_mbps", m),
            ("ratio", q),
            ("ratio_no_checksum", qp),
        ],
        &[],
    );
}

/// Milliseconds `journal::purge` takes to remove `segments` segments of `segment` bytes of a
/// recording made just before (and synced).
fn purge_round(segments: u64, segment: u64) -> f64 {
    // One segment more than purged: the purge keeps the one holding its position.
    let (_shm, disk, id, _) =
        record_segments((segments + 1) * segment, segment, Fsync::Never, Checksum::Crc32c);
    settle();
    let start = Instant::now();
    let done = shmlog::journal::purge(&disk.0, id, (segments * segment) as i64).unwrap();
    let ms = start.elapsed().as_secs_f64() * 1e3;
    assert_eq!(done.files_removed as u64, segments, "{done:?}");
    ms
}

/// Milliseconds plain `unlink`s take to remove `segments` files of `segment` bytes written just
/// before (and synced), as the recorder writes them (1 MiB `pwrite`s, from memory).
fn unlink_round(segments: u64, segment: u64) -> f64 {
    let disk = Disk::new("unlink");
    let source = vec![5u8; 1 << 20];
    let paths: Vec<PathBuf> = (0..segments).map(|i| disk.0.join(format!("{i}.seg"))).collect();
    for path in &paths {
        let f = std::fs::File::create(path).unwrap();
        for at in (0..segment).step_by(1 << 20) {
            f.write_all_at(&source, at).unwrap();
        }
    }
    settle();
    let start = Instant::now();
    for path in &paths {
        std::fs::remove_file(path).unwrap();
    }
    start.elapsed().as_secs_f64() * 1e3
}

/// A recorder recording a publisher's 1 KiB messages at 50 MB/s into a journal that holds
/// `segments + 1` segments of an older recording, for one second, with (`purge`) a purge of
/// `segments` of them on another thread from 100 ms on: the recorder's poll durations (ms) and
/// how long the purge took.
fn beside_round(purge: bool, segments: u64, segment: u64) -> (Pcts, f64) {
    let (_shm_old, disk, old, _) =
        record_segments((segments + 1) * segment, segment, Fsync::Never, Checksum::Crc32c);
    settle();
    let shm = ShmDir::new("journal-live");
    let mut recorder =
        Recorder::builder("live", &disk.0).stream_dir(shm.path()).segment_length(segment).start().unwrap();
    let mut p = Publication::builder("live").dir(shm.path()).term_length(16 << 20).create().unwrap();
    connect(&mut recorder, &mut p);
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..50 {
                    offer_spin(&mut p, &[i as u8; 1024]);
                    i += 1;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let purger = {
        let dir = disk.0.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let start = Instant::now();
            if purge {
                let done = shmlog::journal::purge(&dir, old, (segments * segment) as i64).unwrap();
                assert_eq!(done.files_removed as u64, segments);
            }
            start.elapsed().as_secs_f64() * 1e3
        })
    };
    let mut polls = Vec::new();
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(1) {
        let start = Instant::now();
        let moved = recorder.poll().unwrap();
        polls.push(start.elapsed().as_secs_f64() * 1e3);
        if moved == 0 {
            recorder.wait(Duration::from_millis(1));
        }
    }
    stop.store(true, Ordering::Relaxed);
    publisher.join().unwrap();
    let purge_ms = purger.join().unwrap();
    recorder.stop().unwrap();
    (Pcts::of(&mut polls), purge_ms)
}

fn purge_lanes(args: &Args) {
    if args.wants("journal/purge_beside_recording") {
        let (segments, segment) = if args.test { (1, 16 << 20) } else { (8, 128 << 20) };
        let (mut quiet, mut busy, mut purges) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.n(3, 1) {
            let (q, _) = beside_round(false, segments, segment);
            let (b, ms) = beside_round(true, segments, segment);
            quiet.push(q);
            busy.push(b);
            purges.push(ms);
        }
        let worst = |v: &[Pcts], f: fn(&Pcts) -> f64| v.iter().map(f).fold(0.0, f64::max);
        let (qmax, bmax) = (worst(&quiet, |p| p.max), worst(&busy, |p| p.max));
        let (q99, b99) = (worst(&quiet, |p| p.p99), worst(&busy, |p| p.p99));
        let purge_ms = median(&mut purges);
        eprintln!(
            "[{B}] journal/purge_beside_recording: recorder's longest poll {bmax:.2} ms with a purge of {} MiB \
             ({purge_ms:.0} ms on another thread) beside it, {qmax:.2} ms without; p99 {b99:.3} / {q99:.3} ms",
            (segments * segment) >> 20
        );
        support::record(
            B,
            "journal/purge_beside_recording",
            &[
                ("poll_max_ms", bmax),
                ("poll_max_quiet_ms", qmax),
                ("poll_p99_ms", b99),
                ("poll_p99_quiet_ms", q99),
                ("purge_ms", purge_ms),
            ],
            &[],
        );
    }
    if !args.wants("journal/purge") {
        return;
    }
    // 1 GiB in 128 MiB segments; in test mode one segment of 16 MiB (the recorded log's term:
    // a segment is at least a term).
    let (segments, segment) = if args.test { (1, 16 << 20) } else { (8, 128 << 20) };
    let (unlink, purge, q) =
        alternate(args.n(5, 1), || unlink_round(segments, segment), || purge_round(segments, segment));
    eprintln!(
        "[{B}] journal/purge: {purge:.1} ms to purge {} MiB ({segments} segments), plain unlink {unlink:.1} ms \
         (ratio {q:.2}; goal < 100 ms)",
        (segments * segment) >> 20
    );
    support::record(
        B,
        "journal/purge",
        &[("purge_ms", purge), ("unlink_ms", unlink), ("ratio", q), ("bytes", (segments * segment) as f64)],
        &[],
    );
}

/// Starts a recorder of stream `name` on a thread of its own (tethered, polling in a loop);
/// returns it once it has joined `p`'s session, and the flag that stops it.
fn recorder_thread(
    name: &str,
    shm: &Path,
    disk: &Path,
    p: &mut Publication,
) -> (std::thread::JoinHandle<()>, Arc<AtomicBool>) {
    let mut recorder = Recorder::builder(name, disk).stream_dir(shm).segment_length(SEGMENT).start().unwrap();
    connect(&mut recorder, p);
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let thread = std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            if recorder.poll().unwrap() == 0 {
                recorder.wait(Duration::from_micros(100));
            }
        }
        recorder.stop().unwrap();
    });
    (thread, stop)
}

/// Publishes 1 KiB messages at `mbps` MB/s (a batch every millisecond) until `stop`.
fn paced(mut p: Publication, mbps: f64, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Publication> {
    std::thread::spawn(move || {
        let msg = [5u8; 1024];
        let per_ms = (mbps * 1e6 / 1024.0 / 1000.0).round() as u64;
        let start = Instant::now();
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let due = (start.elapsed().as_secs_f64() * 1000.0) as u64 * per_ms;
            while sent < due {
                offer_spin(&mut p, &msg);
                sent += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        p
    })
}

/// One catch-up: a backlog of `backlog` bytes recorded, then a persistent subscription resumed
/// at its start while a publisher goes on at `mbps`; returns the MB/s of messages it delivered
/// until it merged, and the MB/s of a plain replay of the same backlog.
fn catch_up_round(backlog: u64, mbps: f64) -> (f64, f64) {
    let (shm, disk) = (ShmDir::new("journal-pcu"), Disk::new("pcu"));
    let mut p = Publication::builder("pcu").dir(shm.path()).term_length(16 << 20).create().unwrap();
    let (recorder, stop_recorder) = recorder_thread("pcu", shm.path(), &disk.0, &mut p);
    let msg = [5u8; 1024];
    let mut end = 0;
    for _ in 0..backlog / 1024 {
        end = offer_spin(&mut p, &msg);
    }
    let id = loop {
        let list = shmlog::journal::recordings(&disk.0).unwrap();
        match list.first() {
            Some(Ok(r)) if r.stop_position >= end => break r.id,
            _ => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    // From here on the publisher goes on at its pace, for both readers.
    let stop_publisher = Arc::new(AtomicBool::new(false));
    let publisher = paced(p, mbps, stop_publisher.clone());
    let by_hand = {
        let mut replay = Replay::builder(&disk.0, id).to(end).open().unwrap();
        let mut bytes = 0u64;
        let start = Instant::now();
        while !replay.is_done() {
            replay.poll(|m: &[u8], _: &Header| bytes += m.len() as u64, 1024).unwrap();
        }
        bytes as f64 / start.elapsed().as_secs_f64() / 1e6
    };
    DurableReader::register(&disk.0, "bench", "pcu").unwrap().store(id, 0);
    let start = Instant::now();
    let mut sub = PersistentSubscription::builder(&disk.0, "bench")
        .live(Subscription::builder("pcu").dir(shm.path()))
        .open()
        .unwrap();
    let mut bytes = 0u64;
    while !sub.is_live() {
        sub.poll(|m: &[u8], _: &Header| bytes += m.len() as u64, 1024).unwrap();
        assert!(start.elapsed() < Duration::from_secs(60), "the persistent subscription never merged");
    }
    let rate = bytes as f64 / start.elapsed().as_secs_f64() / 1e6;
    stop_publisher.store(true, Ordering::Relaxed);
    drop(publisher.join().unwrap());
    stop_recorder.store(true, Ordering::Relaxed);
    recorder.join().unwrap();
    (rate, by_hand)
}

/// Who reads beside the recorder in a `publisher_round`.
#[derive(Clone, Copy)]
enum Beside {
    Nobody,
    Persistent,
    SlowTethered,
}

/// A publisher's rate of 64-byte messages over `secs`, a tethered recorder reading, and beside
/// it a slow reader (64 fragments a millisecond) of the kind `beside` says; msgs/s.
fn publisher_round(secs: f64, beside: Beside) -> f64 {
    let (shm, disk) = (ShmDir::new("journal-ppub"), Disk::new("ppub"));
    let mut p = Publication::builder("ppub").dir(shm.path()).term_length(16 << 20).create().unwrap();
    let (recorder, stop_recorder) = recorder_thread("ppub", shm.path(), &disk.0, &mut p);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (shm, journal, stop) = (shm.path().to_path_buf(), disk.0.clone(), stop.clone());
        let slow = move |mut poll: Box<dyn FnMut() -> usize>| {
            while !stop.load(Ordering::Relaxed) {
                poll();
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        match beside {
            Beside::Nobody => None,
            Beside::Persistent => {
                let mut sub = PersistentSubscription::builder(&journal, "slow")
                    .live(Subscription::builder("ppub").dir(&shm))
                    .open()
                    .unwrap();
                Some(std::thread::spawn(move || {
                    slow(Box::new(move || sub.poll(|_: &[u8], _: &Header| {}, 64).unwrap()))
                }))
            }
            Beside::SlowTethered => {
                let mut sub = Subscription::builder("ppub").dir(&shm).open().unwrap();
                Some(std::thread::spawn(move || {
                    slow(Box::new(move || sub.poll(|_: &[u8], _: &Header| {}, 64)))
                }))
            }
        }
    };
    let msg = [3u8; 64];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        for _ in 0..1000 {
            offer_spin(&mut p, &msg);
        }
        n += 1000;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    if let Some(r) = reader {
        r.join().unwrap();
    }
    stop_recorder.store(true, Ordering::Relaxed);
    recorder.join().unwrap();
    rate
}

fn persistent_lanes(args: &Args) {
    if args.wants("journal/persistent/catch_up") {
        // 10 s of a 20 MB/s publisher behind.
        let (backlog, mbps) = if args.test { (8 << 20, 20.0) } else { (200_000_000, 20.0) };
        let (mut rates, mut by_hand, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.n(3, 1) {
            settle();
            let (rate, hand) = catch_up_round(backlog, mbps);
            rates.push(rate);
            by_hand.push(hand);
            ratios.push(rate / hand);
        }
        let (rate, hand, q) = (median(&mut rates), median(&mut by_hand), median(&mut ratios));
        eprintln!(
            "[{B}] journal/persistent/catch_up: {rate:.0} MB/s of messages until merged, {:.1}x the publisher's \
             {mbps} MB/s (goal >= 5x); a plain replay of the backlog {hand:.0} MB/s (ratio {q:.2})",
            rate / mbps
        );
        support::record(
            B,
            "journal/persistent/catch_up",
            &[("catch_up_mbps", rate), ("publisher_mbps", mbps), ("replay_mbps", hand), ("ratio_replay", q)],
            &[],
        );
    }
    if args.wants("journal/persistent/publisher") {
        let secs = if args.test { 0.1 } else { 1.0 };
        let [alone, persistent, tethered, q, qt] = alternate3(
            args.n(5, 1),
            || publisher_round(secs, Beside::Nobody),
            || publisher_round(secs, Beside::Persistent),
            || publisher_round(secs, Beside::SlowTethered),
        );
        eprintln!(
            "[{B}] journal/persistent/publisher: {:.2} M msgs/s (64 B) with a recorder; {:.2} M with a slow persistent \
             subscription beside (ratio {q:.2}, goal >= 0.95); {:.3} M with a slow tethered one instead (ratio {qt:.3})",
            alone / 1e6,
            persistent / 1e6,
            tethered / 1e6
        );
        support::record(
            B,
            "journal/persistent/publisher",
            &[
                ("alone_msgs_per_s", alone),
                ("persistent_msgs_per_s", persistent),
                ("tethered_msgs_per_s", tethered),
                ("ratio", q),
                ("ratio_tethered", qt),
            ],
            &[],
        );
    }
}

/// One offer, counted by callgrind's `--toggle-collect` (see the module docs).
#[inline(never)]
fn counted_offer(p: &mut Publication, msg: &[u8]) -> bool {
    p.offer(msg).is_ok()
}

/// `offers` 64-byte offers in one thread, a tethered recorder polled every 64, and with
/// `persistent` a slow persistent subscription beside (see the module docs). Deterministic: the
/// publisher's instructions depend on the readers only through the protocol.
fn offer_loop(persistent: bool, offers: u64) {
    let (shm, disk) = (ShmDir::new("journal-poffer"), Disk::new("poffer"));
    let mut p = Publication::builder("poffer").dir(shm.path()).term_length(512 << 10).create().unwrap();
    let mut recorder = Recorder::builder("poffer", &disk.0).stream_dir(shm.path()).start().unwrap();
    let mut sub = persistent.then(|| {
        PersistentSubscription::builder(&disk.0, "slow")
            .live(Subscription::builder("poffer").dir(shm.path()))
            .open()
            .unwrap()
    });
    let msg = [3u8; 64];
    let (mut refused, mut read, mut fell_back, mut merged) = (0u64, 0u64, 0u64, 0u64);
    for i in 0..offers {
        while !counted_offer(&mut p, &msg) {
            refused += 1;
            recorder.poll().unwrap();
        }
        if i % 64 == 63 {
            recorder.poll().unwrap();
        }
        if let Some(sub) = sub.as_mut().filter(|_| i % 50_000 < 20_000 && i % 16 == 15) {
            let live = sub.is_live();
            read += sub.poll(|_: &[u8], _: &Header| {}, 64).unwrap() as u64;
            fell_back += u64::from(live && !sub.is_live());
            merged += u64::from(!live && sub.is_live());
        }
    }
    eprintln!(
        "offer_loop persistent={persistent}: {offers} offers, {refused} refused, the persistent subscription \
         read {read} fragments, fell back {fell_back} times and merged {merged} times"
    );
}

fn main() {
    if let Ok(mode) = std::env::var("SHMLOG_OFFER_LOOP") {
        let offers = std::env::var("SHMLOG_OFFERS").ok().and_then(|n| n.parse().ok()).unwrap_or(200_000);
        return offer_loop(mode == "persistent", offers);
    }
    let args = Args::parse();
    support::banner(B);
    live_lanes(&args);
    record_lanes(&args);
    settle();
    replay_lanes(&args);
    settle();
    purge_lanes(&args);
    settle();
    persistent_lanes(&args);
    // Criterion's own report of the replay, for its statistics and baselines.
    let (_shm, disk, id, _) =
        record_stream(if args.test { 1 << 20 } else { 32 << 20 }, Fsync::Never, Checksum::Crc32c);
    let mut c: Criterion = support::criterion(Duration::from_millis(200), Duration::from_secs(2));
    c.bench_function("journal/replay_32MiB", |b| b.iter(|| replay_round(&disk.0, id)));
    c.final_summary();
}
