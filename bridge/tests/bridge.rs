//! Two (and three) "hosts" on one machine: each host is a stream directory with its own Aeron
//! media driver (the Java one, in its own directory, started by the bridge process), joined by
//! UDP on loopback. The bridges are real `shmlog bridge` processes; publishers and readers are
//! threads of this test. Needs Java 17+ and the driver jar (`scripts/fetch-aeron-driver.sh`):
//! without them every test prints SKIPPED, and fails instead under `SHMLOG_REQUIRE_AERON=1`
//! (as `.ci/run` sets it).
//!
//! Compiled only with feature `driver-tests`, and run by `.ci/bridge.sh`, which first builds the
//! tool these tests start: `cargo build --release -p shmlog-tools --features bridge` (another
//! package's binary, so cargo does not build it for this test; `SHMLOG_BIN` names another one).

// The std-only parts of the core's test support (`tests/it/support/`), shared by file (`basics`
// names `super::wire`, so all three sit at the root).
#[allow(dead_code)]
#[path = "../../tests/it/support/basics.rs"]
mod basics;
#[allow(dead_code)]
#[path = "../../tests/it/support/dir.rs"]
mod dir;
#[allow(dead_code)]
#[path = "../../tests/it/support/wire.rs"]
mod wire;
mod support {
    pub use super::basics::*;
    pub use super::dir::ShmDir;
}

use shmlog::{FragmentAssembler, FragmentHandler, Header, OfferError, Publication, Subscription};
use shmlog_bridge::status::{self, BridgeDirection, BridgeInfo, Loss, LossCause};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{pattern, Rng, ShmDir};

const STREAM: &str = "orders";

fn jar() -> PathBuf {
    std::env::var_os("AERON_JAR").map(PathBuf::from).unwrap_or_else(|| {
        // This crate is `bridge/` of the workspace, whose target/ the fetch script fills.
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../target/aeron/aeron-all-{}.jar", shmlog_bridge::AERON_VERSION))
    })
}

/// Whether the Java driver can run here; says so loudly when it cannot.
fn aeron_available() -> bool {
    let java = Command::new("java").arg("-version").stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    let why = if !java {
        "no working `java` on PATH"
    } else if !jar().is_file() {
        "no driver jar (run scripts/fetch-aeron-driver.sh)"
    } else {
        return true;
    };
    if std::env::var("SHMLOG_REQUIRE_AERON").is_ok_and(|v| v == "1") {
        panic!("SHMLOG_REQUIRE_AERON=1 but the Aeron driver cannot run: {why}");
    }
    eprintln!("SKIPPED: the bridge tests need the Java Aeron driver: {why}");
    false
}

/// The `shmlog` tool with its `bridge` command: `$SHMLOG_BIN`, else `shmlog` of the target
/// directory this test was built in (`.ci/bridge.sh` builds it first).
fn shmlog_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("SHMLOG_BIN") {
        return PathBuf::from(bin);
    }
    // The test runs as target/<profile>/deps/bridge-<hash>.
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(|deps| deps.parent()).map(|p| p.join("shmlog"));
    match bin {
        Some(bin) if bin.is_file() => bin,
        _ => panic!(
            "no shmlog binary beside {}: build it first (cargo build --release -p shmlog-tools --features bridge) \
             or set SHMLOG_BIN",
            exe.display()
        ),
    }
}

/// A UDP port nobody uses right now.
fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A host: a stream directory and the directory its bridges' media driver uses.
struct Host {
    dir: ShmDir,
    aeron: ShmDir,
    /// The stream directory: `dir`, or a directory in it that its first user makes.
    streams: PathBuf,
}

impl Host {
    fn new(tag: &str) -> Host {
        let dir = ShmDir::new(tag);
        let streams = dir.path().to_path_buf();
        Host { dir, aeron: ShmDir::new(&format!("{tag}-aeron")), streams }
    }

    /// A host whose stream directory does not exist yet.
    fn unmade(tag: &str) -> Host {
        let host = Host::new(tag);
        Host { streams: host.dir.path().join("streams"), ..host }
    }

    fn path(&self) -> &Path {
        &self.streams
    }

    /// The status of this host's bridge with `pid`, as `shmlog stat` would show it.
    fn bridge(&self, pid: u32) -> Option<BridgeInfo> {
        let streams = status::scan(self.path()).ok()?;
        streams.into_values().flat_map(|s| s.bridges).find(|b| b.pid == pid)
    }
}

/// A `shmlog bridge` process, stopped with SIGTERM (or already killed) on drop.
struct BridgeProc {
    child: Child,
    log: PathBuf,
}

impl BridgeProc {
    fn spawn(way: &str, host: &Host, channel: &str, extra: &[&str]) -> BridgeProc {
        Self::spawn_in(None, way, host, channel, extra)
    }

    /// Spawns the bridge inside network namespace `netns` (`ip netns exec` execs it in place, so
    /// the pid is the bridge's).
    fn spawn_in(netns: Option<&str>, way: &str, host: &Host, channel: &str, extra: &[&str]) -> BridgeProc {
        let log = host.dir.path().join(format!("bridge-{way}-{}.stderr", support::Rng::new("log").next()));
        let err = std::fs::File::create(&log).unwrap();
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(shmlog_bin());
                c
            }
            None => Command::new(shmlog_bin()),
        };
        let child = cmd
            .args(["bridge", way, "--stream", STREAM, "--channel", channel, "--connect-timeout", "60"])
            .arg("--dir")
            .arg(host.path())
            .arg("--embedded-driver")
            .arg(host.aeron.path())
            .args(extra)
            .env("AERON_JAR", jar())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap();
        BridgeProc { child, log }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops it with SIGTERM and returns its stderr.
    fn stop(&mut self) -> String {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let text = std::fs::read_to_string(&self.log).unwrap_or_default();
                assert!(status.success(), "bridge exited with {status}: {text}");
                return text;
            }
            assert!(Instant::now() < deadline, "bridge did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The pid of its media driver (its child process).
    fn driver_pid(&self) -> u32 {
        let pid = self.child.id();
        wait_for("the embedded driver to start", Duration::from_secs(60), || {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
            tasks
                .flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
                .flat_map(|c| c.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
                .next()
        })
    }
}

impl Drop for BridgeProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `f` until it returns `Some`, failing the test after `within`.
fn wait_for<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(x) = f() {
            return x;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Message `seq`: its number, then deterministic bytes; lengths vary so that some messages are
/// fragmented by Aeron (over its 1408-byte MTU) and a few by shmlog (over 64 KiB).
fn message(seq: u64, rng: &mut Rng) -> Vec<u8> {
    let len = match rng.range(0, 1000) {
        0 => rng.range(70_000, 100_000),
        1..=20 => rng.range(1_400, 5_000),
        _ => rng.range(8, 300),
    } as usize;
    let mut m = seq.to_le_bytes().to_vec();
    m.extend(pattern(seq, len - 8));
    m
}

fn check(m: &[u8]) -> u64 {
    let seq = u64::from_le_bytes(m[..8].try_into().unwrap());
    assert!(m[8..] == pattern(seq, m.len() - 8)[..], "message {seq} corrupted");
    seq
}

/// Like [`message`], but at most 5 000 bytes: a far stream with 64 KiB terms takes 8 KiB at
/// most. Some are still fragmented by Aeron (over its 1408-byte MTU).
fn small_message(seq: u64, rng: &mut Rng) -> Vec<u8> {
    let len = match rng.range(0, 100) {
        0..=1 => rng.range(1_400, 5_000),
        _ => rng.range(8, 300),
    } as usize;
    let mut m = seq.to_le_bytes().to_vec();
    m.extend(pattern(seq, len - 8));
    m
}

/// Offers every message, waiting out back pressure (bounded); returns each one's source start
/// position.
fn publish(
    p: &mut Publication,
    seqs: std::ops::Range<u64>,
    rng: &mut Rng,
    pace: Option<Duration>,
) -> Vec<(u64, i64)> {
    publish_with(p, seqs, rng, pace, message)
}

/// [`publish`] with messages made by `make`.
fn publish_with(
    p: &mut Publication,
    seqs: std::ops::Range<u64>,
    rng: &mut Rng,
    pace: Option<Duration>,
    make: fn(u64, &mut Rng) -> Vec<u8>,
) -> Vec<(u64, i64)> {
    let mut starts = Vec::new();
    for seq in seqs {
        let m = make(seq, rng);
        let before = p.position();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match p.offer(&m) {
                Ok(_) => break,
                Err(OfferError::BackPressured | OfferError::NotConnected) if Instant::now() < deadline => {
                    std::thread::yield_now()
                }
                Err(e) => panic!("offer of message {seq}: {e}"),
            }
        }
        // Where it starts: the position before it, or the next term's start after padding.
        let end = p.position();
        let span = end - before;
        let own = shmlog_span(m.len(), p.max_payload_len());
        starts.push((seq, end - own.min(span)));
        if let Some(d) = pace {
            std::thread::sleep(d);
        }
    }
    starts
}

/// Bytes a message of `len` takes in a log whose frames carry at most `max_payload` bytes.
fn shmlog_span(len: usize, max_payload: usize) -> i64 {
    let frags = len.div_ceil(max_payload).max(1);
    let last = len - (frags - 1) * max_payload;
    ((frags - 1) * (max_payload + 32) + ((last + 32 + 31) & !31)) as i64
}

/// Sequence numbers of whole messages, checked byte for byte.
struct Collect(Vec<u64>);

impl FragmentHandler for Collect {
    fn on_fragment(&mut self, m: &[u8], _: &Header) {
        self.0.push(check(m));
    }
}

/// A reader on a host, joined now (it follows the stream to a new session when its publisher,
/// an in bridge, is restarted); its thread collects sequence numbers until it has seen `last`.
fn reader(dir: &Path, last: u64) -> std::thread::JoinHandle<Vec<u64>> {
    let mut sub =
        Subscription::builder(STREAM).dir(dir).wait_for_publisher(Duration::from_secs(60)).open().unwrap();
    std::thread::spawn(move || {
        let mut asm = FragmentAssembler::new(Collect(Vec::new()));
        let deadline = Instant::now() + Duration::from_secs(240);
        while asm.delegate_mut().0.last() != Some(&last) {
            if sub.poll(&mut asm, 64) == 0 {
                sub.wait_readable(Duration::from_millis(10));
            }
            assert!(
                Instant::now() < deadline,
                "reader timed out with {} messages",
                asm.delegate_mut().0.len()
            );
        }
        asm.into_inner().0
    })
}

/// The files a stream's bridges keep while they run (status, resume).
fn bridge_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".bridge") || n.ends_with(".resume"))
        .collect();
    v.sort();
    v
}

/// Checks a run with losses: what arrived is in order and without duplicates, and every
/// message that did not arrive lies in a loss the bridges reported, which holds nothing that
/// did arrive, but for one case: a bridge killed in the instant between publishing a message and
/// recording it (a few instructions) leaves that message as the first of its gap.
fn check_losses(starts: &[(u64, i64)], seen: &[u64], losses: &[Loss]) -> usize {
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "out of order or duplicated");
    let seen_set: std::collections::HashSet<u64> = seen.iter().copied().collect();
    let inside = |p: i64| losses.iter().any(|l| l.from <= p && p < l.to);
    let in_hand = |p: i64| losses.iter().any(|l| l.cause == LossCause::Gap && l.from == p);
    let mut missing = 0;
    for &(seq, start) in starts {
        if seen_set.contains(&seq) {
            assert!(
                !inside(start) || in_hand(start),
                "message {seq} at {start} arrived but lies in a reported loss {losses:?}"
            );
        } else {
            missing += 1;
            assert!(inside(start), "message {seq} at {start} was lost without a report (losses {losses:?})");
        }
    }
    missing
}

/// What a far reader got: each message's sequence number, far session and far start
/// position, and the losses its subscription reported.
#[derive(Default)]
struct FarSeen {
    got: Vec<(u64, i32, i64)>,
    losses: Vec<shmlog::Loss>,
}

/// Where a reader stands (its session, or `i64::MIN` before it joins one, and its position),
/// for the test to wait on.
struct Progress {
    session: AtomicI64,
    position: AtomicI64,
}

/// A reader stopped on the test's word (`stop`) until told to go on (`go`): a reader that
/// stalls, as one held up by its own work would.
#[derive(Default)]
struct Stall {
    stop: AtomicBool,
    go: AtomicBool,
}

/// Collects whole messages with their far session and start position.
struct Placed<'a> {
    seen: &'a mut FarSeen,
    assembly: Vec<u8>,
    start: Option<i64>,
}

impl FragmentHandler for Placed<'_> {
    fn on_fragment(&mut self, m: &[u8], h: &Header) {
        if h.is_begin() {
            let start = h.position() - ((h.frame_length() as i64 + 31) & !31);
            if h.is_end() {
                self.seen.got.push((check(m), h.session_id(), start));
                return;
            }
            self.assembly.clear();
            self.start = Some(start);
        }
        let Some(start) = self.start else { return };
        self.assembly.extend_from_slice(m);
        if h.is_end() {
            self.start = None;
            self.seen.got.push((check(&self.assembly), h.session_id(), start));
        }
    }
}

/// A far reader taking `delay` per message (busy, as a reader doing real work is), that takes
/// its subscription's loss reports before every poll, until it has seen message `last`.
fn far_reader(
    dir: &Path,
    last: u64,
    delay: Duration,
    progress: Arc<Progress>,
    stall: Arc<Stall>,
) -> std::thread::JoinHandle<FarSeen> {
    let mut sub =
        Subscription::builder(STREAM).dir(dir).wait_for_publisher(Duration::from_secs(60)).open().unwrap();
    std::thread::spawn(move || {
        let mut seen = FarSeen::default();
        let (mut assembly, mut start) = (Vec::new(), None);
        let deadline = Instant::now() + Duration::from_secs(240);
        while seen.got.last().map(|g| g.0) != Some(last) {
            assert!(Instant::now() < deadline, "far reader timed out with {} messages", seen.got.len());
            while stall.stop.load(Ordering::Acquire) && !stall.go.load(Ordering::Acquire) {
                assert!(Instant::now() < deadline, "the stall was never lifted");
                std::thread::sleep(Duration::from_millis(1));
            }
            while let Some(loss) = sub.take_loss() {
                seen.losses.push(loss);
            }
            let before = seen.got.len();
            let mut handler = Placed { seen: &mut seen, assembly: std::mem::take(&mut assembly), start };
            let n = sub.poll(|m: &[u8], h: &Header| handler.on_fragment(m, h), 16);
            (assembly, start) = (handler.assembly, handler.start);
            for _ in before..seen.got.len() {
                let until = Instant::now() + delay;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
            progress.session.store(sub.session_id().map_or(i64::MIN, i64::from), Ordering::Release);
            progress.position.store(sub.position(), Ordering::Release);
            if n == 0 {
                sub.wait_readable(Duration::from_millis(10));
            }
        }
        seen
    })
}

/// Checks what each far reader got against what was published (`starts`: sequence number and
/// source start) and the losses reported: the reader's own (by far session and position) and
/// the bridges' (`bridge_losses`, by source position). Every message a reader missed lies in
/// one of its own losses if some reader got it (it reached the far stream), and in a bridge's
/// loss if none did (it was lost on the wire); no message a reader got lies in one of its own
/// losses, nor in a bridge's but for the one in hand (see [`check_losses`]). Returns how many
/// each reader missed, and how many of those it was told of itself.
fn check_far_readers(
    starts: &[(u64, i64)],
    readers: &[FarSeen],
    bridge_losses: &[Loss],
) -> Vec<(usize, usize)> {
    let mut far: HashMap<u64, (i32, i64)> = HashMap::new();
    for r in readers {
        for &(seq, session, at) in &r.got {
            let first = *far.entry(seq).or_insert((session, at));
            assert_eq!(first, (session, at), "message {seq} read at two places of the far stream");
        }
    }
    let in_bridge_loss = |p: i64| bridge_losses.iter().any(|l| l.from <= p && p < l.to);
    let in_hand = |p: i64| bridge_losses.iter().any(|l| l.cause == LossCause::Gap && l.from == p);
    let mut counts = Vec::new();
    for (i, r) in readers.iter().enumerate() {
        let seqs: Vec<u64> = r.got.iter().map(|g| g.0).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "reader {i}: out of order or duplicated");
        let got: HashSet<u64> = seqs.into_iter().collect();
        let sessions_read: HashSet<i32> = r.got.iter().map(|g| g.1).collect();
        let own = |session: i32, p: i64| {
            r.losses.iter().any(|l| l.session_id == session && l.from <= p && p < l.to)
                || (!sessions_read.contains(&session)
                    && r.losses.iter().any(|l| matches!(l.cause, shmlog::LossCause::SessionsMissed { .. })))
        };
        let (mut missing, mut told) = (0, 0);
        for &(seq, start) in starts {
            if got.contains(&seq) {
                let (session, at) = far[&seq];
                assert!(
                    !own(session, at),
                    "reader {i}: message {seq} delivered inside its own loss {:?}",
                    r.losses
                );
                assert!(
                    !in_bridge_loss(start) || in_hand(start),
                    "reader {i}: message {seq} at source {start} delivered inside a bridge loss {bridge_losses:?}"
                );
                continue;
            }
            missing += 1;
            match far.get(&seq) {
                Some(&(session, at)) => {
                    assert!(
                        own(session, at),
                        "reader {i}: message {seq} (far session {session} at {at}) missed without a report \
                         (its losses {:?})",
                        r.losses
                    );
                    told += 1;
                }
                None => assert!(
                    in_bridge_loss(start),
                    "message {seq} at source {start} reached no far reader and lies in no bridge loss \
                     {bridge_losses:?}"
                ),
            }
        }
        counts.push((missing, told));
    }
    counts
}

#[test]
fn three_readers_on_the_far_host_get_every_message_in_order_and_byte_exact() {
    if !aeron_available() {
        return;
    }
    let _one = support::exclusive();
    let (a, b) = (Host::new("bridge-a"), Host::new("bridge-b"));
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_port());
    let mut inb = BridgeProc::spawn("in", &b, &channel, &[]);
    let n = support::iterations(20_000, 1_000_000) as u64;
    // All three join before the first message: the in bridge holds until a reader is there.
    let readers: Vec<_> = (0..3).map(|_| reader(b.path(), n - 1)).collect();
    let mut p = Publication::builder(STREAM).dir(a.path()).create().unwrap();
    let mut out = BridgeProc::spawn("out", &a, &channel, &[]);
    p.wait_for_readers(1, Duration::from_secs(60)).unwrap();
    let t = Instant::now();
    publish(&mut p, 0..n, &mut Rng::new("bridge-all"), None);
    for r in readers {
        assert_eq!(r.join().unwrap(), (0..n).collect::<Vec<_>>());
    }
    eprintln!("{n} messages to 3 far readers in {}", support::secs(t.elapsed()));
    let carried = |h: &Host, pid| {
        wait_for("the bridge's status", Duration::from_secs(10), || h.bridge(pid).filter(|b| b.messages == n))
    };
    for (status, way) in
        [(carried(&a, out.pid()), BridgeDirection::Out), (carried(&b, inb.pid()), BridgeDirection::In)]
    {
        assert_eq!(status.direction, way);
        assert!(status.alive && status.connected, "{status:?}");
        assert_eq!((status.dropped, status.losses.len(), status.reconnects), (0, 0, 0), "{status:?}");
    }
    out.stop();
    inb.stop();
    assert_eq!(bridge_files(a.path()), Vec::<String>::new(), "a stopped bridge cleans its files");
    assert_eq!(bridge_files(b.path()), Vec::<String>::new());
}

#[test]
fn one_bridge_out_to_a_multicast_group_feeds_two_far_hosts() {
    if !aeron_available() {
        return;
    }
    let _one = support::exclusive();
    let (a, b, c) = (Host::new("mc-a"), Host::new("mc-b"), Host::new("mc-c"));
    // fc=min: the sender waits for the slowest receiver (Aeron's multicast default, `max`,
    // follows the fastest and lets a slower one fall behind and lose data).
    let channel = format!("aeron:udp?endpoint=224.0.1.1:{}|interface=127.0.0.1|fc=min", free_port());
    let _inb = BridgeProc::spawn("in", &b, &channel, &[]);
    let _inc = BridgeProc::spawn("in", &c, &channel, &[]);
    let n = support::iterations(5_000, 200_000) as u64;
    let rb = reader(b.path(), n - 1);
    let rc = reader(c.path(), n - 1);
    let mut p = Publication::builder(STREAM).dir(a.path()).create().unwrap();
    let out = BridgeProc::spawn("out", &a, &channel, &[]);
    p.wait_for_readers(1, Duration::from_secs(60)).unwrap();
    // Both far hosts must be there before the first message: a multicast publication connects
    // with the first receiver.
    wait_for("both far hosts connected", Duration::from_secs(60), || {
        [&b, &c]
            .iter()
            .all(|h| status::scan(h.path()).unwrap().values().flat_map(|s| &s.bridges).any(|x| x.connected))
            .then_some(())
    });
    publish(&mut p, 0..n, &mut Rng::new("bridge-mc"), None);
    assert_eq!(rb.join().unwrap(), (0..n).collect::<Vec<_>>());
    assert_eq!(rc.join().unwrap(), (0..n).collect::<Vec<_>>());
    drop(out);
}

/// Kills the far (in) bridge with SIGKILL in mid-stream and starts a new one: the near side
/// keeps working (its own reader gets everything), the far reader follows the new bridge's
/// session, and whatever was in flight is reported by source position. The in bridge is the
/// first user of the far host's stream directory (it does not exist before it starts): its
/// resume file was once lost that way, and with it the gap report (issue 23).
#[test]
fn far_bridge_killed_and_restarted_loses_only_what_it_reports() {
    if !aeron_available() {
        return;
    }
    let _one = support::exclusive();
    let (a, b) = (Host::new("kill-a"), Host::unmade("kill-b"));
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_port());
    assert!(!b.path().exists());
    let mut inb = BridgeProc::spawn("in", &b, &channel, &[]);
    wait_for("the in bridge to start", Duration::from_secs(60), || b.bridge(inb.pid()));
    let n = support::iterations(8_000, 100_000) as u64;
    let far = reader(b.path(), n - 1);
    let mut p = Publication::builder(STREAM).dir(a.path()).create().unwrap();
    let near = reader(a.path(), n - 1);
    let _out = BridgeProc::spawn("out", &a, &channel, &[]);
    p.wait_for_readers(2, Duration::from_secs(60)).unwrap();
    let publisher = std::thread::spawn(move || {
        publish(&mut p, 0..n, &mut Rng::new("bridge-kill"), Some(Duration::from_micros(200)))
    });
    wait_for("a third of the messages across", Duration::from_secs(120), || {
        b.bridge(inb.pid()).filter(|s| s.messages >= n / 3)
    });
    inb.kill9();
    let inb2 = BridgeProc::spawn("in", &b, &channel, &[]);
    let starts = publisher.join().unwrap();
    assert_eq!(near.join().unwrap(), (0..n).collect::<Vec<_>>(), "the near side lost nothing");
    let seen = far.join().unwrap();
    let status = wait_for("the new bridge's status", Duration::from_secs(10), || {
        b.bridge(inb2.pid()).filter(|s| s.source_position == starts.last().unwrap().1)
    });
    assert!(status.losses.iter().all(|l| l.cause == LossCause::Gap), "{status:?}");
    let missing = check_losses(&starts, &seen, &status.losses);
    eprintln!("far bridge killed: {missing} of {n} messages lost in flight, reported as {:?}", status.losses);
}

/// Issue 23, under the rule of owed sessions: the far (in) bridge SIGKILLed and restarted under
/// three far readers of different speeds (none, 20 µs and 200 µs of work per message), plain
/// subscriptions of the far stream (64 KiB terms). The slowest is also held up from the kill
/// until the new bridge's session has run a quarter of a term ahead of it. A reader still on the
/// dead bridge's session is owed the new one from its first message (the new bridge's publisher
/// waits for it, and the near side waits through the bridges' flow control), so no reader is
/// told of a late join, every reader gets the same messages, and every message none of them got
/// lies in the new bridge's gap (what the wire lost while no bridge listened). Before the core's
/// change (9d97393) readers moved to the new session at the slowest reader's position and were
/// told nothing: the review saw [0, 0, 1985], [2279, 0, 0] and [54, 0, 2100] messages silently
/// missed in three runs.
#[test]
fn three_far_readers_lose_only_the_wires_gap_when_the_in_bridge_restarts() {
    if !aeron_available() {
        return;
    }
    let _one = support::exclusive();
    let (a, b) = (Host::new("three-a"), Host::new("three-b"));
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_port());
    const TERM: i64 = 64 * 1024;
    let term = TERM.to_string();
    let far_args = ["--term-length", term.as_str()];
    let mut inb = BridgeProc::spawn("in", &b, &channel, &far_args);
    let n = support::iterations(8_000, 100_000) as u64;
    let progress: Vec<Arc<Progress>> = (0..3)
        .map(|_| Arc::new(Progress { session: AtomicI64::new(i64::MIN), position: AtomicI64::new(0) }))
        .collect();
    let stall = Arc::new(Stall::default());
    let readers: Vec<_> = [0u64, 20, 200]
        .iter()
        .enumerate()
        .map(|(i, &us)| {
            let stall = if i == 2 { stall.clone() } else { Arc::new(Stall::default()) };
            far_reader(b.path(), n - 1, Duration::from_micros(us), progress[i].clone(), stall)
        })
        .collect();
    let mut p = Publication::builder(STREAM).dir(a.path()).create().unwrap();
    let near = reader(a.path(), n - 1);
    let _out = BridgeProc::spawn("out", &a, &channel, &[]);
    p.wait_for_readers(2, Duration::from_secs(60)).unwrap();
    let publisher = std::thread::spawn(move || {
        publish_with(
            &mut p,
            0..n,
            &mut Rng::new("bridge-three"),
            Some(Duration::from_micros(200)),
            small_message,
        )
    });
    wait_for("a third of the messages across", Duration::from_secs(120), || {
        b.bridge(inb.pid()).filter(|s| s.messages >= n / 3)
    });
    let old_session = progress[0].session.load(Ordering::Acquire);
    stall.stop.store(true, Ordering::Release);
    inb.kill9();
    let inb2 = BridgeProc::spawn("in", &b, &channel, &far_args);
    // The new session runs ahead of the held-up reader as far as its window lets it.
    wait_for("the new session a quarter of a term in", Duration::from_secs(120), || {
        let (session, position) = (&progress[0].session, &progress[0].position);
        let moved = session.load(Ordering::Acquire) != old_session;
        (moved && position.load(Ordering::Acquire) >= TERM / 4).then_some(())
    });
    let held_at = progress[2].position.load(Ordering::Acquire);
    stall.go.store(true, Ordering::Release);
    let starts = publisher.join().unwrap();
    assert_eq!(near.join().unwrap(), (0..n).collect::<Vec<_>>(), "the near side lost nothing");
    let seen: Vec<FarSeen> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    let status = wait_for("the new bridge's status", Duration::from_secs(10), || {
        b.bridge(inb2.pid()).filter(|s| s.source_position == starts.last().unwrap().1)
    });
    assert!(status.losses.iter().all(|l| l.cause == LossCause::Gap), "{status:?}");
    let counts = check_far_readers(&starts, &seen, &status.losses);
    for (i, r) in seen.iter().enumerate() {
        assert!(r.losses.is_empty(), "reader {i} was owed the new session whole: {:?}", r.losses);
        let got = |r: &FarSeen| r.got.iter().map(|g| g.0).collect::<Vec<u64>>();
        assert_eq!(got(r), got(&seen[0]), "reader {i} got what reader 0 got");
    }
    assert!(counts.iter().all(|&(_, told)| told == 0), "{counts:?}");
    eprintln!(
        "far bridge killed under three readers (the slowest held at {held_at}): missed {counts:?} of {n}, \
         all in the bridge's gaps {:?}",
        status.losses
    );
}

/// Issue 23, under the rule of owed sessions: the out bridge carries a first session and is
/// SIGKILLed; the near publisher restarts and its new session runs four terms (64 KiB each)
/// ahead, paced by a near reader (a dead bridge holds nobody). The restarted out bridge finds
/// its predecessor's resume file for the old session and reads the new one from the oldest
/// message the log still holds, reporting what it could not read (`JoinedLate`): the out bridge
/// records it (`Source`, with the source session), and marks the first message after it on the
/// wire, so the in bridge records an `Upstream` loss over the same positions. Every message the
/// far reader missed lies in both; every one of the first session arrived. Before, the report
/// stayed unread in the out bridge's subscription: the far side saw a jump to the middle of the
/// new session and reported nothing.
#[test]
fn a_loss_the_out_bridges_reader_reports_is_reported_at_both_ends() {
    if !aeron_available() {
        return;
    }
    let _one = support::exclusive();
    let (a, b) = (Host::new("srcloss-a"), Host::new("srcloss-b"));
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_port());
    const TERM: usize = 64 * 1024;
    let mut rng = Rng::new("bridge-srcloss");
    let k = 40;
    let n = k + 1_500;
    let inb = BridgeProc::spawn("in", &b, &channel, &[]);
    let far = reader(b.path(), n - 1);
    let mut p1 = Publication::builder(STREAM).dir(a.path()).term_length(TERM).create().unwrap();
    let mut out = BridgeProc::spawn("out", &a, &channel, &[]);
    p1.wait_for_readers(1, Duration::from_secs(60)).unwrap();
    let first = publish_with(&mut p1, 0..k, &mut rng, None, small_message);
    let s1 = p1.session_id();
    // Carried, and the out bridge's resume file says so (it saves as it carries).
    wait_for("the first session across", Duration::from_secs(60), || {
        b.bridge(inb.pid()).filter(|s| s.messages == k)
    });
    wait_for("the out bridge's resume position", Duration::from_secs(60), || {
        a.bridge(out.pid()).filter(|s| s.messages == k)
    });
    out.kill9();
    drop(p1);
    let mut p2 = Publication::builder(STREAM).dir(a.path()).term_length(TERM).create().unwrap();
    let near = reader(a.path(), n - 1);
    let second = publish_with(&mut p2, k..n, &mut rng, None, small_message);
    assert_ne!(p2.session_id(), s1);
    assert!(second.last().unwrap().1 > 3 * TERM as i64, "four terms: {second:?}");
    assert_eq!(near.join().unwrap(), (k..n).collect::<Vec<_>>());
    // Now the out bridge again: it carried the first session, and joins the second late.
    let out2 = BridgeProc::spawn("out", &a, &channel, &[]);
    let seen = far.join().unwrap();
    let out_status = wait_for("the out bridge's status", Duration::from_secs(10), || {
        a.bridge(out2.pid()).filter(|s| s.source_position == second.last().unwrap().1)
    });
    let in_status = wait_for("the in bridge's status", Duration::from_secs(10), || {
        b.bridge(inb.pid()).filter(|s| s.source_position == second.last().unwrap().1)
    });
    let cause = LossCause::Source { session: p2.session_id(), cause: shmlog::LossCause::JoinedLate };
    let [source] = out_status.losses[..] else { panic!("one loss at the out bridge: {out_status:?}") };
    assert_eq!((source.from, source.messages, source.cause, out_status.source_losses), (0, None, cause, 1));
    assert!(source.to > 0);
    // The in bridge places the loss before the first message it got, which starts where the
    // reader joined or, when the reader joined on a term's padding, at the next term's start.
    let first_after = second.iter().map(|m| m.1).find(|&start| start >= source.to).unwrap();
    assert!(
        first_after == source.to || (first_after % TERM as i64 == 0 && first_after - source.to < TERM as i64),
        "nothing but padding between the join at {} and the next message at {first_after}",
        source.to
    );
    let upstream = Loss { from: 0, to: first_after, messages: None, cause: LossCause::Upstream };
    assert_eq!((in_status.losses.clone(), in_status.source_losses), (vec![upstream], 1), "{in_status:?}");
    // The first session whole; of the second, exactly the messages at and after the loss's end.
    let expected: Vec<u64> =
        first.iter().map(|m| m.0).chain(second.iter().filter(|m| m.1 >= source.to).map(|m| m.0)).collect();
    assert_eq!(seen, expected, "the far reader got everything but the reported loss");
    let missed = check_losses(&second, &seen, &[upstream]);
    eprintln!("publisher restarted while the out bridge was dead: {missed} of {} messages of its new session lost, reported at both ends as [0, {})", n - k, source.to);
    drop(p2);
}

/// Kills the near (out) bridge with SIGKILL (its embedded driver goes with it) and starts a new
/// one: it resumes reading the local stream where its predecessor's resume file says, so only
/// what the dead driver had accepted but not sent can be lost, and the far bridge reports it.
#[test]
fn near_bridge_killed_and_restarted_resumes_where_it_stopped() {
    if !aeron_available() {
        return;
    }
    let _one = support::exclusive();
    let (a, b) = (Host::new("near-a"), Host::new("near-b"));
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_port());
    let inb = BridgeProc::spawn("in", &b, &channel, &[]);
    let n = support::iterations(8_000, 100_000) as u64;
    let far = reader(b.path(), n - 1);
    let mut p = Publication::builder(STREAM).dir(a.path()).create().unwrap();
    let mut out = BridgeProc::spawn("out", &a, &channel, &[]);
    p.wait_for_readers(1, Duration::from_secs(60)).unwrap();
    let publisher = std::thread::spawn(move || {
        publish(&mut p, 0..n, &mut Rng::new("bridge-near"), Some(Duration::from_micros(200)))
    });
    wait_for("a third of the messages across", Duration::from_secs(120), || {
        b.bridge(inb.pid()).filter(|s| s.messages >= n / 3)
    });
    out.kill9();
    let out2 = BridgeProc::spawn("out", &a, &channel, &[]);
    let starts = publisher.join().unwrap();
    let seen = far.join().unwrap();
    let status = wait_for("the far bridge's status", Duration::from_secs(10), || {
        b.bridge(inb.pid()).filter(|s| s.source_position == starts.last().unwrap().1)
    });
    let missing = check_losses(&starts, &seen, &status.losses);
    assert!(a.bridge(out2.pid()).is_some_and(|s| s.messages > 0));
    eprintln!("near bridge killed: {missing} of {n} messages lost, reported as {:?}", status.losses);
}

/// The near publisher closes and a new one opens the stream (a new session, positions from 0
/// again): the out bridge follows it, marks its first message a fresh start, and the far side
/// gets every message of both sessions, in order, with no loss reported.
#[test]
fn a_restarted_publisher_is_followed_without_a_false_gap() {
    if !aeron_available() {
        return;
    }
    let _one = support::exclusive();
    let (a, b) = (Host::new("pubrs-a"), Host::new("pubrs-b"));
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_port());
    let inb = BridgeProc::spawn("in", &b, &channel, &[]);
    let n = support::iterations(4_000, 100_000) as u64;
    let far = reader(b.path(), n - 1);
    let mut rng = Rng::new("bridge-pubrs");
    let mut p = Publication::builder(STREAM).dir(a.path()).create().unwrap();
    let out = BridgeProc::spawn("out", &a, &channel, &[]);
    p.wait_for_readers(1, Duration::from_secs(60)).unwrap();
    publish(&mut p, 0..n / 2, &mut rng, None);
    drop(p);
    let mut p = Publication::builder(STREAM).dir(a.path()).create().unwrap();
    // `publish` waits out NotConnected until the out bridge has joined the new session.
    publish(&mut p, n / 2..n, &mut rng, None);
    assert_eq!(far.join().unwrap(), (0..n).collect::<Vec<_>>());
    let status = wait_for("the far bridge's status", Duration::from_secs(10), || {
        b.bridge(inb.pid()).filter(|s| s.messages == n)
    });
    assert_eq!((status.losses.len(), status.dropped), (0, 0), "{status:?}");
    let near = a.bridge(out.pid()).unwrap();
    assert_eq!((near.losses.len(), near.dropped), (0, 0), "{near:?}");
}

/// Kills the out bridge's media driver with SIGKILL: the bridge notices, starts a new driver,
/// connects again, offers again what the dead driver had taken but not sent, and goes on;
/// anything still lost must lie in a gap the far bridge reports.
#[test]
fn a_killed_driver_is_restarted_and_the_bridge_reconnects() {
    if !aeron_available() {
        return;
    }
    let _one = support::exclusive();
    let (a, b) = (Host::new("drv-a"), Host::new("drv-b"));
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_port());
    let inb = BridgeProc::spawn("in", &b, &channel, &[]);
    let n = support::iterations(8_000, 100_000) as u64;
    let far = reader(b.path(), n - 1);
    let mut p = Publication::builder(STREAM).dir(a.path()).create().unwrap();
    let out = BridgeProc::spawn("out", &a, &channel, &[]);
    p.wait_for_readers(1, Duration::from_secs(60)).unwrap();
    let publisher = std::thread::spawn(move || {
        publish(&mut p, 0..n, &mut Rng::new("bridge-drv"), Some(Duration::from_micros(200)))
    });
    wait_for("a third of the messages across", Duration::from_secs(120), || {
        b.bridge(inb.pid()).filter(|s| s.messages >= n / 3)
    });
    // SAFETY: kill(2) on the driver, a child of our child.
    unsafe { libc::kill(out.driver_pid() as i32, libc::SIGKILL) };
    let starts = publisher.join().unwrap();
    let seen = far.join().unwrap();
    let status = wait_for("the far bridge's status", Duration::from_secs(10), || {
        b.bridge(inb.pid()).filter(|s| s.source_position == starts.last().unwrap().1)
    });
    let out_status = a.bridge(out.pid()).unwrap();
    assert!(out_status.reconnects >= 1, "{out_status:?}");
    let missing = check_losses(&starts, &seen, &status.losses);
    eprintln!(
        "driver killed: {missing} of {n} messages lost, reported as {:?}; {} received again, not carried twice",
        status.losses, status.duplicates
    );
    eprintln!("out bridge: {}", std::fs::read_to_string(&out.log).unwrap_or_default());
}

/// A reader on a host that collects sequence numbers until it has seen every one of `lasts`.
fn reader_until(dir: &Path, lasts: Vec<u64>) -> std::thread::JoinHandle<Vec<u64>> {
    let mut sub =
        Subscription::builder(STREAM).dir(dir).wait_for_publisher(Duration::from_secs(60)).open().unwrap();
    std::thread::spawn(move || {
        let mut asm = FragmentAssembler::new(Collect(Vec::new()));
        let deadline = Instant::now() + Duration::from_secs(240);
        while !lasts.iter().all(|l| asm.delegate_mut().0.contains(l)) {
            if sub.poll(&mut asm, 64) == 0 {
                sub.wait_readable(Duration::from_millis(10));
            }
            assert!(
                Instant::now() < deadline,
                "reader timed out with {} messages",
                asm.delegate_mut().0.len()
            );
        }
        asm.into_inner().0
    })
}

/// Two near hosts, each with its publisher and out bridge, feed one far in bridge on one
/// channel and stream id; the second out bridge's media driver is SIGKILLed mid-stream. The
/// first source runs ahead in source positions (larger messages), so the second one's
/// messages offered again start below where the first stands. Every message of the first
/// source arrives once, in order; so does every message of the second, but for any lost on
/// the wire, which lies in a gap the far bridge reports. Before, the far bridge compared the
/// second source's messages offered again with its one resume position (the first source's)
/// and dropped them as duplicates, reporting nothing.
#[test]
fn two_sources_into_one_in_bridge_lose_nothing_when_one_loses_its_driver() {
    if !aeron_available() {
        return;
    }
    let _one = support::exclusive();
    let (a1, a2, b) = (Host::new("two-a1"), Host::new("two-a2"), Host::new("two-b"));
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_port());
    let inb = BridgeProc::spawn("in", &b, &channel, &[]);
    let n = support::iterations(4_000, 100_000) as u64;
    const SECOND: u64 = 1 << 40;
    let far = reader_until(b.path(), vec![n - 1, SECOND + n - 1]);
    let mut p1 = Publication::builder(STREAM).dir(a1.path()).create().unwrap();
    let mut p2 = Publication::builder(STREAM).dir(a2.path()).create().unwrap();
    let _out1 = BridgeProc::spawn("out", &a1, &channel, &[]);
    let out2 = BridgeProc::spawn("out", &a2, &channel, &[]);
    p1.wait_for_readers(1, Duration::from_secs(60)).unwrap();
    p2.wait_for_readers(1, Duration::from_secs(60)).unwrap();
    let pace = Some(Duration::from_micros(300));
    let first = std::thread::spawn(move || publish(&mut p1, 0..n, &mut Rng::new("two-1"), pace));
    let second = std::thread::spawn(move || {
        publish_with(&mut p2, SECOND..SECOND + n, &mut Rng::new("two-2"), pace, small_message)
    });
    wait_for("a third of the messages across", Duration::from_secs(120), || {
        b.bridge(inb.pid()).filter(|s| s.messages >= 2 * n / 3)
    });
    // SAFETY: kill(2) on the driver, a child of our child.
    unsafe { libc::kill(out2.driver_pid() as i32, libc::SIGKILL) };
    let (starts1, starts2) = (first.join().unwrap(), second.join().unwrap());
    let seen = far.join().unwrap();
    let (seen1, seen2): (Vec<u64>, Vec<u64>) = seen.into_iter().partition(|&s| s < SECOND);
    assert_eq!(seen1, (0..n).collect::<Vec<_>>(), "the first source, whole and in order");
    let status = wait_for("the far bridge's status", Duration::from_secs(10), || {
        b.bridge(inb.pid()).filter(|s| s.messages >= seen1.len() as u64 + seen2.len() as u64)
    });
    let missing = check_losses(&starts2, &seen2, &status.losses);
    let out_status = a2.bridge(out2.pid()).unwrap();
    assert!(out_status.reconnects >= 1, "{out_status:?}");
    assert_eq!(status.dropped, 0, "{status:?}");
    eprintln!(
        "two sources, the second's driver killed: {missing} of {n} of its messages lost on the wire; \
         {} received again and skipped; losses {:?}; first source up to {}",
        status.duplicates,
        status.losses,
        starts1.last().unwrap().1
    );
    eprintln!("second out bridge: {}", std::fs::read_to_string(&out2.log).unwrap_or_default());
}

/// Under `--on-back-pressure drop`, an out bridge with no far side drops, and says exactly what:
/// the dropped runs' counts add up to the messages the far reader never saw.
#[test]
fn the_drop_policy_counts_and_places_every_dropped_message() {
    if !aeron_available() {
        return;
    }
    let _one = support::exclusive();
    let (a, b) = (Host::new("drop-a"), Host::new("drop-b"));
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_port());
    let mut p = Publication::builder(STREAM).dir(a.path()).create().unwrap();
    let out = BridgeProc::spawn("out", &a, &channel, &["--on-back-pressure", "drop"]);
    p.wait_for_readers(1, Duration::from_secs(60)).unwrap();
    let mut rng = Rng::new("bridge-drop");
    let n = 4_000u64;
    // No far side yet: all of these are dropped.
    let mut starts = publish(&mut p, 0..n / 2, &mut rng, None);
    wait_for("the first half dropped", Duration::from_secs(30), || {
        a.bridge(out.pid()).filter(|s| s.dropped == n / 2)
    });
    let _inb = BridgeProc::spawn("in", &b, &channel, &[]);
    let far = reader(b.path(), n - 1);
    wait_for("the far side connected", Duration::from_secs(60), || {
        a.bridge(out.pid()).filter(|s| s.connected)
    });
    starts.extend(publish(&mut p, n / 2..n, &mut rng, Some(Duration::from_micros(200))));
    let seen = far.join().unwrap();
    let status = wait_for("the out bridge's status", Duration::from_secs(10), || {
        a.bridge(out.pid()).filter(|s| s.source_position == starts.last().unwrap().1)
    });
    assert!(status.losses.iter().all(|l| l.cause == LossCause::Dropped), "{status:?}");
    let missing = check_losses(&starts, &seen, &status.losses);
    let counted: u64 = status.losses.iter().map(|l| l.messages.unwrap()).sum();
    assert_eq!((status.dropped, counted), (missing as u64, missing as u64), "{status:?}");
    assert!(missing as u64 >= n / 2);
}

/// The path goes silent (the far driver stopped with SIGSTOP for 2 s, so neither data nor
/// status messages pass): under the default hold policy the near publisher is held and
/// nothing is lost.
#[test]
fn a_silent_path_holds_the_publisher_and_loses_nothing() {
    if !aeron_available() {
        return;
    }
    let _one = support::exclusive();
    let (a, b) = (Host::new("path-a"), Host::new("path-b"));
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_port());
    let inb = BridgeProc::spawn("in", &b, &channel, &[]);
    let n = support::iterations(20_000, 200_000) as u64;
    let far = reader(b.path(), n - 1);
    let mut p = Publication::builder(STREAM).dir(a.path()).create().unwrap();
    let out = BridgeProc::spawn("out", &a, &channel, &[]);
    p.wait_for_readers(1, Duration::from_secs(60)).unwrap();
    let publisher = std::thread::spawn(move || publish(&mut p, 0..n, &mut Rng::new("bridge-path"), None));
    wait_for("some messages across", Duration::from_secs(120), || {
        b.bridge(inb.pid()).filter(|s| s.messages >= n / 10)
    });
    let driver = inb.driver_pid() as i32;
    // SAFETY: kill(2) on the far driver, a child of our child.
    unsafe { libc::kill(driver, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_secs(2)); // the outage under test, not synchronisation
                                                // SAFETY: as above.
    unsafe { libc::kill(driver, libc::SIGCONT) };
    publisher.join().unwrap();
    assert_eq!(far.join().unwrap(), (0..n).collect::<Vec<_>>());
    let status = a.bridge(out.pid()).unwrap();
    assert!(status.back_pressure > 0, "the outage should have held the bridge: {status:?}");
    assert_eq!((status.dropped, status.losses.len()), (0, 0), "{status:?}");
}

/// Two network namespaces joined by a veth pair (10.201.N.1 in `a`, 10.201.N.2 in `b`), deleted
/// on drop. `None` (and a SKIPPED line) where this user may not create them.
struct NetPair {
    a: String,
    b: String,
    n: u32,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl NetPair {
    fn create() -> Option<NetPair> {
        let n = std::process::id() % 250 + 1;
        let (a, b) = (format!("shmlog-{}-a", std::process::id()), format!("shmlog-{}-b", std::process::id()));
        if !ip(&["netns", "add", &a]) {
            eprintln!("SKIPPED: cannot create network namespaces here (ip netns add needs CAP_SYS_ADMIN)");
            return None;
        }
        let pair = NetPair { a, b, n };
        let (va, vb) = (format!("shl{n}a"), format!("shl{n}b"));
        let (ipa, ipb) = (format!("10.201.{n}.1/24"), format!("10.201.{n}.2/24"));
        let ok = ip(&["netns", "add", &pair.b])
            && ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])
            && ip(&["link", "set", &va, "netns", &pair.a])
            && ip(&["link", "set", &vb, "netns", &pair.b])
            && ip(&["-n", &pair.a, "addr", "add", &ipa, "dev", &va])
            && ip(&["-n", &pair.b, "addr", "add", &ipb, "dev", &vb])
            && [&pair.a, &pair.b].iter().all(|ns| ip(&["-n", ns, "link", "set", "lo", "up"]))
            && ip(&["-n", &pair.a, "link", "set", &va, "up"])
            && ip(&["-n", &pair.b, "link", "set", &vb, "up"]);
        assert!(ok, "setting up the veth pair failed");
        Some(pair)
    }

    /// Takes both ends of the pair down (`on`): nothing passes, and sends fail with no route as
    /// when a cable is pulled; or brings them up again. (netem would drop silently, but this
    /// kernel has no `sch_netem`.)
    fn cut(&self, on: bool) {
        for (ns, dev) in [(&self.a, format!("shl{}a", self.n)), (&self.b, format!("shl{}b", self.n))] {
            let state = if on { "down" } else { "up" };
            assert!(ip(&["-n", ns, "link", "set", &dev, state]), "ip -n {ns} link set {dev} {state}");
        }
    }
}

impl Drop for NetPair {
    fn drop(&mut self) {
        ip(&["netns", "del", &self.a]);
        ip(&["netns", "del", &self.b]);
    }
}

/// Two hosts in two network namespaces joined by a veth pair (a real 1500-byte MTU path, not
/// loopback); the path is cut for 2 s (both ends of the link down): under the hold policy
/// the near publisher is held, Aeron recovers what was on the wire, nothing is lost.
#[test]
fn a_path_cut_between_two_network_namespaces_heals_without_loss() {
    if !aeron_available() {
        return;
    }
    let _one = support::exclusive();
    let Some(net) = NetPair::create() else { return };
    let (a, b) = (Host::new("ns-a"), Host::new("ns-b"));
    let channel = format!("aeron:udp?endpoint=10.201.{}.2:40123", net.n);
    let inb = BridgeProc::spawn_in(Some(&net.b), "in", &b, &channel, &[]);
    let n = support::iterations(20_000, 200_000) as u64;
    let far = reader(b.path(), n - 1);
    let mut p = Publication::builder(STREAM).dir(a.path()).create().unwrap();
    let out = BridgeProc::spawn_in(Some(&net.a), "out", &a, &channel, &[]);
    p.wait_for_readers(1, Duration::from_secs(60)).unwrap();
    let publisher = std::thread::spawn(move || {
        publish(&mut p, 0..n, &mut Rng::new("bridge-ns"), Some(Duration::from_micros(50)))
    });
    wait_for("some messages across", Duration::from_secs(120), || {
        b.bridge(inb.pid()).filter(|s| s.messages >= n / 10)
    });
    net.cut(true);
    std::thread::sleep(Duration::from_secs(2)); // the outage under test, not synchronisation
    net.cut(false);
    publisher.join().unwrap();
    assert_eq!(far.join().unwrap(), (0..n).collect::<Vec<_>>());
    let status = a.bridge(out.pid()).unwrap();
    assert_eq!((status.dropped, status.losses.len()), (0, 0), "{status:?}");
    eprintln!("path cut for 2 s: nothing lost; the out bridge held {} times", status.back_pressure);
}

/// Bad settings are refused before anything starts, each with the cause (no Java needed).
#[test]
fn bad_settings_are_refused_with_a_clear_error() {
    let dir = ShmDir::new("bridge-bad");
    let run = |args: &[&str]| {
        let out = Command::new(shmlog_bin())
            .args(["bridge"])
            .args(args)
            .arg("--dir")
            .arg(dir.path())
            .args(["--connect-timeout", "0.5"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let udp = "aeron:udp?endpoint=127.0.0.1:1";
    assert!(run(&["out", "--stream", "x", "--channel", "aeron:ipc"]).contains("must be an aeron:udp channel"));
    assert!(run(&["in", "--stream", "a/b", "--channel", udp]).contains("contains '/'"));
    let no_jar = dir.path().join("no.jar");
    let drivers = dir.path().join("drivers");
    let err = run(&[
        "in",
        "--stream",
        "x",
        "--channel",
        udp,
        "--embedded-driver",
        drivers.to_str().unwrap(),
        "--driver-jar",
        no_jar.to_str().unwrap(),
    ]);
    assert!(err.contains("no Aeron driver jar at"), "{err}");
    // $AERON_JAR names a file that is not there: said, with the variable's name.
    let out = Command::new(shmlog_bin())
        .args(["bridge", "in", "--stream", "x", "--channel", udp, "--embedded-driver"])
        .arg(&drivers)
        .arg("--dir")
        .arg(dir.path())
        .env("AERON_JAR", &no_jar)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("no Aeron driver jar at {} (AERON_JAR", no_jar.display())), "{err}");
    let absent = dir.path().join("no-driver");
    let err = run(&["in", "--stream", "x", "--channel", udp, "--aeron-dir", absent.to_str().unwrap()]);
    assert!(err.contains("no Aeron media driver answers in"), "{err}");
    // Nothing of the stream was left behind by the refused bridges.
    assert!(dir.entries().iter().all(|e| e == "drivers"), "{:?}", dir.entries());
}

/// The embedded driver's jar is found wherever the bridge is started from: with no
/// `AERON_JAR` and no `--driver-jar`, from a directory that is not the repository's, the bridge
/// finds `target/aeron/aeron-all-*.jar` from its own executable's place (the default used to be
/// relative to the current directory: it failed with "no Aeron driver jar at target/aeron/…").
#[test]
fn the_embedded_driver_is_found_from_any_current_directory() {
    if !aeron_available() || std::env::var_os("AERON_JAR").is_some() {
        return;
    }
    let _one = support::exclusive();
    let b = Host::new("jar-b");
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_port());
    let log = b.dir.path().join("bridge.stderr");
    let child = Command::new(shmlog_bin())
        .args(["bridge", "in", "--stream", STREAM, "--channel", &channel, "--connect-timeout", "60"])
        .arg("--dir")
        .arg(b.path())
        .arg("--embedded-driver")
        .arg(b.aeron.path())
        .env_remove("AERON_JAR")
        .current_dir(b.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut inb = BridgeProc { child, log };
    let pid = inb.pid();
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.bridge(pid).is_none() {
        if let Ok(Some(status)) = inb.child.try_wait() {
            panic!("the bridge exited ({status}): {}", std::fs::read_to_string(&inb.log).unwrap_or_default());
        }
        assert!(Instant::now() < deadline, "the bridge did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    inb.stop();
}
