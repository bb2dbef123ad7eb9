//! The child's side: the roles a peer process plays (publisher, subscriber, ...).
//!
//! A role reads its settings from the environment, prints `@@` events on stdout, takes commands
//! from stdin, and ends the process itself (`process::exit`), so the test harness of the child
//! never reports anything. Every role has a deadline: a peer never outlives a broken test.

use super::peer::{CFG_VAR, ROLE_VAR};
use super::wire::{fill, seed_of, Shape, Verifier};
use shmlog::{
    Action, Backoff, FragmentAssembler, Header, IdleStrategy, JoinAt, OfferError, Publication, Subscription,
    Yielding,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// Runs the role named in the environment, if any; returns at once in a normal test run.
pub fn run_if_peer() {
    let Ok(role) = std::env::var(ROLE_VAR) else { return };
    // Die with the parent: a peer must never outlive the test that started it.
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes plain integers.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    let cfg = Settings::from_env();
    let ctx = Ctx::new(&cfg);
    match role.as_str() {
        "publisher" => publisher(&cfg, &ctx),
        "subscriber" => subscriber(&cfg, &ctx),
        "open_default" => open_default(&cfg, &ctx),
        "sleeper" => sleeper(&cfg, &ctx),
        "idle_publisher" => idle_publisher(&cfg, &ctx),
        "recorder" => recorder(&cfg, &ctx),
        "journal_maintainer" => journal_maintainer(&cfg, &ctx),
        "persistent_reader" => persistent_reader(&cfg, &ctx),
        "cwriter" => super::concurrent_roles::writer(&cfg, &ctx),
        "creader" => super::concurrent_roles::reader(&cfg, &ctx),
        "wake_sleeper" => super::wake_roles::sleeper(&cfg, &ctx),
        "loss_publisher" => super::loss_roles::publisher(&cfg, &ctx),
        "loss_reader" => super::loss_roles::reader(&cfg, &ctx),
        "ut_publisher" => super::untethered_roles::publisher(&cfg, &ctx),
        "ut_reader" => super::untethered_roles::reader(&cfg, &ctx),
        other => ctx.fail(&format!("unknown role {other}")),
    }
}

/// A peer's settings, from [`CFG_VAR`].
pub struct Settings(HashMap<String, String>);

impl Settings {
    fn from_env() -> Self {
        let raw = std::env::var(CFG_VAR).unwrap_or_default();
        Self(
            raw.split(';')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        )
    }

    pub fn str(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn u64(&self, key: &str) -> Option<u64> {
        self.str(key).map(|v| v.parse().unwrap_or_else(|_| panic!("setting {key}={v} is not a number")))
    }

    pub fn u64_or(&self, key: &str, default: u64) -> u64 {
        self.u64(key).unwrap_or(default)
    }

    pub fn flag(&self, key: &str) -> bool {
        self.str(key) == Some("1")
    }

    pub fn name(&self) -> &str {
        self.str("name").expect("setting name")
    }

    pub fn dir(&self) -> PathBuf {
        PathBuf::from(self.str("dir").expect("setting dir"))
    }

    pub fn mtu(&self) -> usize {
        self.u64_or("mtu", 1024) as usize
    }

    pub fn shape(&self) -> Shape {
        let mtu = self.mtu();
        Shape::new(mtu, self.u64_or("max_len", 4 * (mtu as u64 - 32)) as usize)
    }
}

/// Output, commands and the deadline of a peer.
pub struct Ctx {
    commands: Receiver<String>,
    deadline: Instant,
}

impl Ctx {
    fn new(cfg: &Settings) -> Self {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if tx.send(line.trim().to_owned()).is_err() {
                    return;
                }
            }
            // The parent closed our stdin (it is gone or dropped us): leave.
            let _ = tx.send("eof".to_owned());
        });
        Self { commands: rx, deadline: Instant::now() + Duration::from_secs(cfg.u64_or("deadline_s", 150)) }
    }

    pub fn emit(&self, kind: &str, fields: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "@@ {kind} {fields}");
        let _ = out.flush();
    }

    pub fn fail(&self, what: &str) -> ! {
        self.emit("fail", what);
        std::process::exit(1)
    }

    pub fn check_deadline(&self) {
        if Instant::now() > self.deadline {
            self.fail("deadline passed");
        }
    }

    /// A command if one arrived; `eof` (parent gone) ends the process.
    pub fn try_command(&self) -> Option<String> {
        match self.commands.try_recv() {
            Ok(c) if c == "eof" => std::process::exit(2),
            Ok(c) => Some(c),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => std::process::exit(2),
        }
    }

    /// Waits for command `want`; `quit` exits cleanly.
    pub fn wait_command(&self, want: &str) {
        let left = self.deadline.saturating_duration_since(Instant::now());
        match self.commands.recv_timeout(left) {
            Ok(c) if c == want => {}
            Ok(c) if c == "quit" => std::process::exit(0),
            Ok(c) if c == "eof" => std::process::exit(2),
            Ok(other) => self.fail(&format!("expected command {want}, got {other}")),
            Err(_) => self.fail(&format!("no {want} command before the deadline")),
        }
    }
}

/// Ends this process at once, as a crash would: no destructor runs, the kernel drops our locks.
pub fn die_now() -> ! {
    // SAFETY: kill(2) with our own pid; SIGKILL cannot be caught, so this does not return.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    loop {
        std::hint::spin_loop();
    }
}

/// Kills this process after `us` microseconds, from another thread (lands anywhere in the
/// main thread's work: between offers, inside an offer, a claim, a rotation, a create).
pub fn die_after(us: u64) {
    let start = Instant::now();
    let at = Duration::from_micros(us);
    std::thread::spawn(move || {
        // Sleep most of the way, then spin: sleeps overshoot by tens of microseconds.
        if let Some(sleep) = at.checked_sub(Duration::from_micros(200)) {
            std::thread::sleep(sleep);
        }
        while start.elapsed() < at {
            std::hint::spin_loop();
        }
        die_now();
    });
}

/// Where a publisher kills itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kill {
    Never,
    /// Before offering message N: exactly N messages were published.
    Before(u64),
    /// At message N: claims it, writes half, dies with the claim open.
    InClaim(u64),
    /// From message N on, at the first message that does not fit in the term: dies before it.
    BeforeRotation(u64),
    /// From message N on, right after the first offer that rotated to a new term.
    AfterRotation(u64),
}

fn parse_kill(cfg: &Settings) -> Kill {
    let Some(spec) = cfg.str("kill") else { return Kill::Never };
    let (mode, n) = spec.split_once(':').expect("kill=<mode>:<n>");
    let n: u64 = n.parse().expect("kill count");
    match mode {
        "before" => Kill::Before(n),
        "claim" => Kill::InClaim(n),
        "before_rotation" => Kill::BeforeRotation(n),
        "after_rotation" => Kill::AfterRotation(n),
        other => panic!("unknown kill mode {other}"),
    }
}

/// Offers `msg` once with the API chosen by `seq` (offer / offer_vectored / try_claim).
fn offer_once(p: &mut Publication, seq: u64, msg: &[u8]) -> Result<i64, OfferError> {
    match seq % 3 {
        0 if msg.len() <= p.max_payload_len() => {
            let mut claim = p.try_claim(msg.len())?;
            claim.buffer().copy_from_slice(msg);
            claim.set_reserved_value(seq as i64);
            Ok(claim.commit())
        }
        1 => {
            let a = msg.len() / 3;
            let b = msg.len() - msg.len() / 4;
            p.offer_vectored(&[&msg[..a], &msg[a..b], &msg[b..]])
        }
        _ => p.offer(msg),
    }
}

/// Publishes messages 0.. of its session; see the settings read below.
fn publisher(cfg: &Settings, ctx: &Ctx) -> ! {
    let shape = cfg.shape();
    let mut b = Publication::builder(cfg.name())
        .dir(cfg.dir())
        .term_length(cfg.u64_or("term", 64 * 1024) as usize)
        .mtu(cfg.mtu());
    if let Some(ms) = cfg.u64("liveness_ms") {
        b = b.liveness_interval(Duration::from_millis(ms));
    }
    if let Some(n) = cfg.u64("max_readers") {
        b = b.max_readers(n as usize);
    }
    if let Some(us) = cfg.u64("create_kill_us") {
        die_after(us);
    }
    let creating = Instant::now();
    let mut p = match b.create() {
        Ok(p) => p,
        Err(e) => {
            ctx.emit("create_error", &format!("err={}", format!("{e:?}").replace(' ', "_")));
            std::process::exit(3)
        }
    };
    let session = p.session_id();
    let create_us = creating.elapsed().as_micros();
    ctx.emit(
        "ready",
        &format!(
            "session={session} position={} pid={} create_us={create_us}",
            p.position(),
            std::process::id()
        ),
    );
    if cfg.flag("wait_go") {
        ctx.wait_command("go");
    }
    if let Some(us) = cfg.u64("kill_us") {
        die_after(us);
    }
    let kill = parse_kill(cfg);
    let count = cfg.u64_or("count", u64::MAX);
    let progress = cfg.u64_or("progress", 0);
    let pause_at = cfg.u64("pause_at");
    let report_blocked = Duration::from_millis(cfg.u64_or("blocked_ms", 200));
    let term = p.term_length() as i64;
    let seed = seed_of(session);
    let mut buf = Vec::new();
    let mut idle = Backoff::default();
    let mut max_stall = Duration::ZERO;
    let mut rotated_after = None;
    let mut seq = 0u64;
    let mut stop = false;
    while seq < count {
        let len = shape.len(seed, seq);
        fill(seed, seq, len, &mut buf);
        let fits = (p.position() & (term - 1)) + shape.framed(len) as i64 <= term;
        match kill {
            Kill::Before(n) if seq == n => die_now(),
            Kill::BeforeRotation(n) if seq >= n && !fits => die_now(),
            Kill::AfterRotation(n) if seq >= n && !fits => rotated_after = Some(seq),
            Kill::InClaim(n) if seq == n => {
                let len = len.min(p.max_payload_len());
                let start = Instant::now();
                loop {
                    match p.try_claim(len) {
                        Ok(mut claim) => {
                            let half = len / 2;
                            claim.buffer()[..half].copy_from_slice(&buf[..half]);
                            die_now();
                        }
                        Err(e) if e.is_retryable() => idle.idle(0),
                        Err(e) => ctx.fail(&format!("claim failed: {e}")),
                    }
                    if start.elapsed() > Duration::from_secs(30) {
                        ctx.fail("claim never admitted");
                    }
                }
            }
            _ => {}
        }
        let mut stalled: Option<Instant> = None;
        let mut reported = false;
        let mut tries = 0u32;
        loop {
            match offer_once(&mut p, seq, &buf) {
                Ok(_) => break,
                Err(e) if e.is_retryable() => {
                    let since = *stalled.get_or_insert_with(Instant::now);
                    tries = tries.wrapping_add(1);
                    if tries % 64 == 0 {
                        if !reported && since.elapsed() >= report_blocked {
                            reported = true;
                            ctx.emit("blocked", &format!("seq={seq} position={} error={e:?}", p.position()));
                        }
                        match ctx.try_command().as_deref() {
                            Some("quit") => std::process::exit(0),
                            Some("stop") => stop = true,
                            _ => {}
                        }
                        ctx.check_deadline();
                    }
                    idle.idle(0);
                }
                Err(e) => ctx.fail(&format!("offer of message {seq} failed: {e}")),
            }
        }
        idle.reset();
        if let Some(since) = stalled {
            let stall = since.elapsed();
            max_stall = max_stall.max(stall);
            if reported {
                ctx.emit("unblocked", &format!("seq={seq} stall_ms={}", stall.as_millis()));
            }
        }
        if rotated_after == Some(seq) {
            die_now();
        }
        seq += 1;
        if progress > 0 && seq % progress == 0 {
            ctx.emit("progress", &format!("seq={seq} position={}", p.position()));
        }
        if pause_at == Some(seq) {
            ctx.emit("paused", &format!("count={seq} position={}", p.position()));
            ctx.wait_command("go");
        }
        if seq % 1024 == 0 {
            match ctx.try_command().as_deref() {
                Some("stop") => stop = true,
                Some("quit") => std::process::exit(0),
                _ => {}
            }
            ctx.check_deadline();
        }
        if stop {
            break;
        }
    }
    ctx.emit(
        "done",
        &format!("count={seq} position={} max_stall_us={}", p.position(), max_stall.as_micros()),
    );
    if cfg.flag("linger") {
        ctx.wait_command("close");
    }
    let position = p.position();
    p.close();
    ctx.emit("closed", &format!("count={seq} position={position}"));
    std::process::exit(0)
}

/// Subscribes and checks every message (see `wire::Verifier`), session after session.
fn subscriber(cfg: &Settings, ctx: &Ctx) -> ! {
    let join = match cfg.str("join") {
        Some("latest") => JoinAt::Latest,
        _ => JoinAt::Slowest,
    };
    let mut b = Subscription::builder(cfg.name()).dir(cfg.dir()).join_at(join);
    if let Some(ms) = cfg.u64("liveness_ms") {
        b = b.liveness_interval(Duration::from_millis(ms));
    }
    if let Some(n) = cfg.u64("max_readers") {
        b = b.max_readers(n as usize);
    }
    let mut sub = match b.open() {
        Ok(s) => s,
        Err(e) => {
            ctx.emit("open_error", &format!("err={}", format!("{e:?}").replace(' ', "_")));
            std::process::exit(3)
        }
    };
    ctx.emit("opened", &format!("pid={}", std::process::id()));
    let v = RefCell::new(Verifier::new(cfg.shape()));
    v.borrow_mut().break_after = cfg.u64("pause_after");
    let mut plain = FragmentAssembler::new(|m: &[u8], h: &Header| {
        v.borrow_mut().on_message(m, h.session_id());
    });
    let mut controlled = FragmentAssembler::new(|m: &[u8], h: &Header| {
        if v.borrow_mut().on_message(m, h.session_id()) {
            Action::Break
        } else {
            Action::Continue
        }
    });
    let use_controlled = cfg.flag("controlled") || cfg.u64("pause_after").is_some();
    let sessions_wanted = cfg.u64_or("sessions", 1);
    let quit_after = cfg.u64("quit_after");
    let progress = cfg.u64_or("progress", 0);
    let limit = cfg.u64_or("fragment_limit", 64) as usize;
    let mut backoff = Backoff::default();
    let mut yielding = Yielding;
    let idle: &mut dyn IdleStrategy =
        if cfg.str("idle") == Some("yield") { &mut yielding } else { &mut backoff };
    let mut sessions_joined = 0u64;
    let mut connected = false;
    let mut eos_seen = false;
    let mut next_progress = progress;
    let mut last_check = Instant::now();
    let mut polls = 0u64;
    loop {
        // Between sessions (the last one closed, the next not joined yet) there is none.
        if sub.session_id().is_some() && sub.session_id() != v.borrow().session {
            let mut vb = v.borrow_mut();
            if let Some(old) = vb.session {
                ctx.emit(
                    "session_end",
                    &format!(
                        "session={old} count={} first={} next={}",
                        vb.count,
                        opt(vb.first_seq),
                        vb.next_seq
                    ),
                );
            }
            let sid = sub.session_id().expect("checked above");
            let from_start = sub.join_position() == Some(0);
            vb.begin_session(sid, from_start);
            sessions_joined += 1;
            connected = true;
            eos_seen = false;
            next_progress = progress;
            ctx.emit(
                "joined",
                &format!(
                    "session={sid} position={} from_start={}",
                    sub.join_position().unwrap_or(-1),
                    from_start as u8
                ),
            );
            drop(vb);
            plain.reset();
            controlled.reset();
        }
        let n = if use_controlled {
            sub.controlled_poll(&mut controlled, limit)
        } else {
            sub.poll(&mut plain, limit)
        };
        polls += 1;
        {
            let mut vb = v.borrow_mut();
            if let Some(f) = vb.failure.take() {
                ctx.fail(&f);
            }
            while progress > 0 && vb.count >= next_progress {
                ctx.emit(
                    "progress",
                    &format!("session={} count={next_progress} position={}", opt(vb.session), sub.position()),
                );
                next_progress += progress;
            }
            if vb.broke {
                vb.broke = false;
                ctx.emit("paused", &format!("seq={} position={}", vb.next_seq - 1, sub.position()));
                drop(vb);
                ctx.wait_command("resume");
                continue;
            }
            if quit_after.is_some_and(|q| vb.total >= q) {
                ctx.emit("done", &format!("total={} reason=quit_after", vb.total));
                drop(vb);
                leave(sub, 0);
            }
        }
        if n > 0 {
            idle.reset();
            if polls % 256 == 0 {
                if let Some(c) = ctx.try_command() {
                    if c == "quit" {
                        ctx.emit("done", &format!("total={} reason=quit", v.borrow().total));
                        leave(sub, 0);
                    }
                }
            }
            continue;
        }
        if let Some(fault) = sub.fault() {
            ctx.fail(&format!("the subscription reports a faulty frame: {fault}"));
        }
        let now = Instant::now();
        if connected && now.duration_since(last_check) >= Duration::from_millis(1) {
            last_check = now;
            if !sub.is_connected() {
                connected = false;
                let vb = v.borrow();
                ctx.emit(
                    "disconnected",
                    &format!(
                        "session={} count={} next={} eos={}",
                        opt(vb.session),
                        vb.count,
                        vb.next_seq,
                        sub.is_end_of_stream() as u8
                    ),
                );
            }
        }
        if !eos_seen && sub.session_id().is_some() && sub.is_end_of_stream() {
            eos_seen = true;
            let vb = v.borrow();
            ctx.emit(
                "eos",
                &format!(
                    "session={} count={} first={} next={} position={}",
                    opt(vb.session),
                    vb.count,
                    opt(vb.first_seq),
                    vb.next_seq,
                    sub.position()
                ),
            );
            if sessions_joined >= sessions_wanted {
                ctx.emit("done", &format!("total={} reason=eos", vb.total));
                drop(vb);
                leave(sub, 0);
            }
        }
        if let Some(c) = ctx.try_command() {
            if c == "quit" {
                ctx.emit("done", &format!("total={} reason=quit", v.borrow().total));
                leave(sub, 0);
            }
        }
        ctx.check_deadline();
        idle.idle(0);
    }
}

/// An optional number for an event: the number, or `none`.
fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "none".to_owned(), |x| x.to_string())
}

/// Leaves cleanly: the subscription frees its slot, then the process ends.
fn leave(sub: Subscription, code: i32) -> ! {
    drop(sub);
    std::process::exit(code)
}

/// Opens a subscription in the default directory (`SHMLOG_DIR` set by the parent) and reports.
fn open_default(cfg: &Settings, ctx: &Ctx) -> ! {
    match Subscription::builder(cfg.name()).open() {
        Ok(_) => ctx.emit("result", "ok=1"),
        Err(e) => ctx.emit("result", &format!("ok=0 err={}", format!("{e:?}").replace(' ', "_"))),
    }
    std::process::exit(0)
}

/// A subscriber that never spins: `poll_blocking` with a timeout of `timeout_ms` (default one
/// minute), liveness checks every `liveness_ms` (default 100). Messages carry their sequence
/// number in their first 8 bytes; every gap or repeat is a failure. Prints `ready` once it holds
/// its slot, `closed n=<messages>` when the session is closed, `timeout n=<messages>` if a call
/// times out (and then leaves).
fn sleeper(cfg: &Settings, ctx: &Ctx) -> ! {
    let mut sub = Subscription::builder(cfg.name())
        .dir(cfg.dir())
        .liveness_interval(Duration::from_millis(cfg.u64_or("liveness_ms", 100)))
        .open()
        .unwrap_or_else(|e| ctx.fail(&format!("open: {e}")));
    ctx.emit("ready", &format!("pid={}", std::process::id()));
    let timeout = Duration::from_millis(cfg.u64_or("timeout_ms", 60_000));
    let mut next = 0u64;
    let mut bad = None;
    loop {
        ctx.check_deadline();
        let n = sub.poll_blocking(
            |payload: &[u8], _: &Header| {
                let seq = u64::from_le_bytes(payload[..8].try_into().unwrap());
                if seq != next && bad.is_none() {
                    bad = Some(format!("expected message {next}, got {seq}"));
                }
                next = seq + 1;
            },
            256,
            timeout,
        );
        if let Some(what) = &bad {
            ctx.fail(what);
        }
        if sub.is_closed() {
            ctx.emit("closed", &format!("n={next}"));
            leave(sub, 0);
        }
        if n == shmlog::Polled::TimedOut {
            ctx.emit("timeout", &format!("n={next}"));
            leave(sub, 0);
        }
    }
}

/// A publisher that waits for `readers` readers, offers `count` numbered messages
/// (`offer_blocking`), prints `published`,
/// then idles until killed or told `quit`.
fn idle_publisher(cfg: &Settings, ctx: &Ctx) -> ! {
    let mut p = Publication::builder(cfg.name())
        .dir(cfg.dir())
        .create()
        .unwrap_or_else(|e| ctx.fail(&format!("create: {e}")));
    ctx.emit("created", &format!("session={}", p.session_id()));
    let readers = cfg.u64_or("readers", 0) as usize;
    p.wait_for_readers(readers, Duration::from_secs(30)).unwrap_or_else(|e| ctx.fail(&format!("wait: {e}")));
    for seq in 0..cfg.u64_or("count", 0) {
        p.offer_blocking(&seq.to_le_bytes(), Duration::from_secs(30))
            .unwrap_or_else(|e| ctx.fail(&format!("offer {seq}: {e}")));
    }
    ctx.emit("published", &format!("position={}", p.position()));
    ctx.wait_command("never");
    std::process::exit(0)
}

/// Records stream `name` into the journal directory `journal` until its session ends (or the
/// `quit` command); `kill_us` kills it at a random point, `fsize` caps the size of files it
/// may create (RLIMIT_FSIZE: a disk that cannot take another segment), `hold` makes it wait for
/// the `go` command between starting (recovery done, `recording` said) and its first poll,
/// `poll_sleep_us` makes it sleep that long after each poll that recorded something (so it
/// trails the publisher and writes whole 1 MiB blocks, which end anywhere in a message).
fn recorder(cfg: &Settings, ctx: &Ctx) -> ! {
    use shmlog::journal::{Fsync, Recorder};
    if let Some(limit) = cfg.u64("fsize") {
        let rl = libc::rlimit { rlim_cur: limit, rlim_max: limit };
        // SAFETY: plain integers and a valid pointer to a local; SIGXFSZ is ignored so the write
        // fails with EFBIG instead of killing us.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            libc::setrlimit(libc::RLIMIT_FSIZE, &rl);
        }
    }
    if let Some(us) = cfg.u64("kill_us") {
        die_after(us);
    }
    let fsync = match cfg.u64("fsync_ms") {
        Some(0) => Fsync::PerSegment,
        Some(ms) => Fsync::Every(Duration::from_millis(ms)),
        None => Fsync::Never,
    };
    let mut r = match Recorder::builder(cfg.name(), cfg.str("journal").expect("setting journal"))
        .stream_dir(cfg.dir())
        .segment_length(cfg.u64_or("segment", 1 << 20))
        .fsync(fsync)
        .tethered(!cfg.flag("untethered"))
        .preallocate(cfg.flag("preallocate"))
        .start()
    {
        Ok(r) => r,
        Err(e) => ctx.fail(&format!("recorder start: {e}")),
    };
    ctx.emit("recording", &format!("resumed={}", r.recording_id().map_or(-1, i64::from)));
    if cfg.flag("hold") {
        ctx.wait_command("go");
    }
    let mut started = false;
    loop {
        match r.poll() {
            Ok(0) => {
                started |= r.recording_id().is_some();
                if started && r.recording_id().is_none() && cfg.flag("until_eos") {
                    break;
                }
                r.wait(Duration::from_millis(20));
            }
            Ok(_) => {
                started |= r.recording_id().is_some();
                if let Some(us) = cfg.u64("poll_sleep_us") {
                    std::thread::sleep(Duration::from_micros(us));
                }
            }
            Err(e) => {
                let err = format!("{e:?}").replace(' ', "_");
                ctx.emit("record_error", &format!("err={err} position={}", r.recorded_position()));
                std::process::exit(4)
            }
        }
        if ctx.try_command().as_deref() == Some("quit") {
            break;
        }
        ctx.check_deadline();
    }
    let position = r.recorded_position();
    let _ = r.stop();
    ctx.emit("stopped", &format!("position={position}"));
    std::process::exit(0)
}

/// Reads stream `name` as durable reader `reader` of `journal` (a persistent subscription that
/// starts at the journal's oldest message) and appends each whole message's sequence number to
/// the file `out` (8 bytes, one write each: a kill -9 loses none written); `kill_us` kills it at
/// a random point, `poll_sleep_us` makes it sleep after each poll that delivered (so that the
/// publisher laps its live reads). Says `done` once it delivered message `count - 1`.
fn persistent_reader(cfg: &Settings, ctx: &Ctx) -> ! {
    use shmlog::journal::{PersistentSubscription, Start};
    use std::cell::Cell;
    if let Some(us) = cfg.u64("kill_us") {
        die_after(us);
    }
    let path = cfg.str("out").expect("setting out");
    let mut out = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open out");
    let journal = PathBuf::from(cfg.str("journal").expect("setting journal"));
    let mut sub = match PersistentSubscription::builder(&journal, cfg.str("reader").expect("setting reader"))
        .live(Subscription::builder(cfg.name()).dir(cfg.dir()))
        .start(Start::Earliest)
        .open()
    {
        Ok(sub) => sub,
        Err(e) => ctx.fail(&format!("persistent subscription: {e}")),
    };
    ctx.emit("reading", &format!("position={}", opt(sub.position().map(|(_, p)| p))));
    let last = cfg.u64("count").expect("setting count") - 1;
    let from_start = sub.position().is_none();
    // The Verifier checks every message (from the first self-describing one if resumed); the
    // sequence numbers written are those it checked, short messages counted from their neighbours.
    let (verifier, done) = (RefCell::new(Verifier::new(cfg.shape())), Cell::new(false));
    let (mut next, mut held) = (None::<u64>, 0u64);
    let mut deliver = |msg: &[u8], session: i32| {
        let mut v = verifier.borrow_mut();
        if v.total == 0 && next.is_none() && held == 0 {
            v.begin_session(session, from_start);
            next = from_start.then_some(0);
        }
        v.on_message(msg, session);
        let seqs = match (super::wire::seq_of(msg), next) {
            (Some(s), None) => s.saturating_sub(held)..s + 1,
            (_, Some(n)) => n..n + 1,
            (None, None) => {
                held += 1;
                return;
            }
        };
        for seq in seqs.clone() {
            out.write_all(&seq.to_le_bytes()).expect("write out");
        }
        next = Some(seqs.end);
        done.set(done.get() || seqs.contains(&last));
    };
    let (mut live, mut fell_back) = (false, 0);
    let mut after = |sub: &mut PersistentSubscription, loss: Option<shmlog::Loss>| {
        if let Some(failure) = &verifier.borrow().failure {
            ctx.fail(&failure.replace(' ', "_"));
        }
        if let Some(loss) = loss.or_else(|| sub.take_loss()) {
            ctx.fail(&format!("loss: {loss}").replace(' ', "_"));
        }
        fell_back += usize::from(live && !sub.is_live());
        live = sub.is_live();
        ctx.check_deadline();
    };
    let nap = || {
        if let Some(us) = cfg.u64("poll_sleep_us") {
            std::thread::sleep(Duration::from_micros(us));
        }
    };
    // The receive shape (`shape`): poll, poll_blocking, controlled_poll, Receiver, AsyncReceiver.
    let shape = cfg.str("shape").unwrap_or("poll");
    ctx.emit("shape", shape);
    match shape {
        "poll" | "blocking" => {
            let mut assembler = FragmentAssembler::new(|m: &[u8], h: &Header| deliver(m, h.session_id()));
            while !done.get() {
                let n = if shape == "poll" {
                    sub.poll(&mut assembler, 64)
                } else {
                    sub.poll_blocking(&mut assembler, 64, Duration::from_millis(20)).map(|p| p.fragments())
                };
                match n {
                    Ok(0) if shape == "poll" => std::thread::sleep(Duration::from_micros(200)),
                    Ok(0) => {}
                    Ok(_) => nap(),
                    Err(e) => ctx.fail(&format!("poll: {e}")),
                }
                after(&mut sub, None);
            }
        }
        "controlled" => {
            // Whole messages steered with drawn actions (`Abort` one in eight): a kill between an
            // `Abort` and the next poll is as likely as anywhere else.
            let mut draws = u64::from(std::process::id()) << 32;
            let mut assembler = FragmentAssembler::new(|m: &[u8], h: &Header| {
                draws += 1;
                let action = match super::wire::mix(draws) % 100 {
                    0..12 => Action::Abort,
                    12..18 => Action::Break,
                    18..24 => Action::Commit,
                    _ => Action::Continue,
                };
                if action != Action::Abort {
                    deliver(m, h.session_id());
                }
                action
            });
            while !done.get() {
                match sub.controlled_poll(&mut assembler, 64) {
                    Ok(0) => std::thread::sleep(Duration::from_micros(200)),
                    Ok(_) => nap(),
                    Err(e) => ctx.fail(&format!("poll: {e}")),
                }
                after(&mut sub, None);
            }
        }
        "recv" | "async" => {
            // The messages come without headers: the session is the recording's (one publisher).
            let session = loop {
                let found = shmlog::journal::recordings(&journal).ok().and_then(|list| {
                    list.into_iter().flatten().find(|r| r.stream == cfg.name()).map(|r| r.session_id)
                });
                if let Some(s) = found {
                    break s;
                }
                ctx.check_deadline();
                std::thread::sleep(Duration::from_millis(1));
            };
            let mut rx = shmlog::Receiver::new(sub, shmlog::Bytes);
            let mut receive = |got: Result<Vec<u8>, shmlog::RecvError<std::convert::Infallible>>,
                               sub: &mut PersistentSubscription| {
                let loss = match got {
                    Ok(m) => {
                        deliver(&m, session);
                        nap();
                        None
                    }
                    Err(shmlog::RecvError::Timeout) => None,
                    Err(shmlog::RecvError::Lost(loss)) => Some(loss),
                    Err(e) => ctx.fail(&format!("receive: {e}").replace(' ', "_")),
                };
                after(sub, loss);
            };
            if shape == "recv" {
                while !done.get() {
                    let got = rx.recv_timeout(Duration::from_millis(20));
                    receive(got, rx.source());
                }
            } else {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                rt.block_on(async {
                    let mut arx = shmlog::AsyncReceiver::new(rx).expect("async receiver");
                    while !done.get() {
                        let got = arx.recv().await;
                        receive(got, arx.source());
                    }
                });
            }
        }
        other => ctx.fail(&format!("unknown shape {other}")),
    }
    ctx.emit("done", &format!("live={} fell_back={fell_back}", u8::from(live)));
    std::process::exit(0)
}

/// Moves the start of recording `id` of `journal` back and forth without end (detach, attach,
/// purge a segment at a time), for a test that kills it anywhere: `segment` bytes per segment.
fn journal_maintainer(cfg: &Settings, ctx: &Ctx) -> ! {
    let journal = PathBuf::from(cfg.str("journal").expect("setting journal"));
    let id = cfg.u64("id").expect("setting id") as u32;
    let segment = cfg.u64_or("segment", 1 << 16) as i64;
    let start = match shmlog::journal::recording(&journal, id) {
        Ok(r) => r.start_position,
        Err(e) => ctx.fail(&format!("maintenance: {e}")),
    };
    if let Some(us) = cfg.u64("kill_us") {
        die_after(us);
    }
    ctx.emit("maintaining", "");
    let mut keep = (start & !(segment - 1)) + segment;
    loop {
        let step = shmlog::journal::detach(&journal, id, keep)
            .and_then(|_| shmlog::journal::attach(&journal, id))
            .and_then(|_| shmlog::journal::purge(&journal, id, keep));
        if let Err(e) = step {
            ctx.fail(&format!("maintenance: {e}"));
        }
        keep += segment;
        ctx.check_deadline();
    }
}
