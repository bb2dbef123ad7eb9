//! The controller: runs a scenario's timeline with real processes, ends them, replays the
//! recordings, and asks the oracle. Everything of a run lives under one run directory (event
//! files on disk, the journal) and one stream directory under `/dev/shm`; both are removed at
//! the end unless the run failed or `--keep` was given.

use crate::event::{lines, Mode, Out};
use crate::oracle::{self, Report};
use crate::plan::{Action, Scenario};
use crate::prng::mix;
use crate::roles::Tracker;
use crate::{ev, sys};
use shmlog::journal::{recordings, Recording, RecordingState, Replay};
use shmlog::FragmentAssembler;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// Recordings replayed after a run (a recorder that splits its recordings at every aborted
/// claim makes thousands: review N1; the catalog lists them all, the first ones suffice).
const REPLAYED: usize = 200;

/// What a run can be asked.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Keep the run's directories even if it passed.
    pub keep: bool,
    /// Print the timeline's actions as they happen.
    pub verbose: bool,
}

/// How a run went.
#[derive(Debug)]
pub struct Outcome {
    pub report: Report,
    pub run_dir: PathBuf,
    /// The stream directory (under `/dev/shm`).
    pub streams: PathBuf,
    pub elapsed: Duration,
    /// Timeline actions done (spawns, kills, stops, ...).
    pub actions: usize,
}

/// A child process of the run.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    alive: bool,
    stopped: bool,
    role: String,
    shape: String,
    files: Vec<PathBuf>,
}

struct Run<'a> {
    sc: &'a Scenario,
    opts: &'a Options,
    ctl: Out,
    run_dir: PathBuf,
    events: PathBuf,
    journal: PathBuf,
    streams: PathBuf,
    t0: i64,
    procs: BTreeMap<String, Proc>,
    incs: u32,
    actions: usize,
    /// Recordings the controller truncated (each is cut once).
    cut: BTreeSet<u32>,
}

/// Runs `sc` and checks it.
pub fn run(sc: &Scenario, opts: &Options) -> std::io::Result<Outcome> {
    let started = Instant::now();
    let tag = format!("shmlog-ledger-{}-{:x}", std::process::id(), sys::mono_us());
    let run_dir = std::env::temp_dir().join(&tag);
    let shm = Path::new("/dev/shm");
    let streams = if shm.is_dir() { shm.join(&tag) } else { run_dir.join("streams") };
    let (events, journal) = (run_dir.join("events"), run_dir.join("journal"));
    for d in [&run_dir, &events, &journal, &run_dir.join("stderr"), &streams] {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(d)?;
    }
    fs::write(run_dir.join("scenario.log"), sc.to_text())?;
    let t0 = sys::mono_us();
    let ctl = Out::create(&events.join("controller.log"), t0, Mode::Direct)?;
    ev!(ctl, "run", "seed={:#x} seconds={} streams={}", sc.seed, sc.seconds, streams.display());
    for s in &sc.streams {
        ev!(
            ctl,
            "stream",
            "name={} concurrent={} term={} mtu={} liveness_ms={} hostile={}",
            s.name,
            s.concurrent as u8,
            s.term,
            s.mtu,
            s.liveness_ms,
            s.hostile as u8
        );
    }
    let mut r = Run {
        sc,
        opts,
        ctl,
        run_dir: run_dir.clone(),
        events,
        journal,
        streams,
        t0,
        procs: BTreeMap::new(),
        incs: 0,
        actions: 0,
        cut: BTreeSet::new(),
    };
    let start = Instant::now();
    for (t, action) in &sc.timeline {
        r.wait_until(start + Duration::from_millis(*t));
        r.act(action);
    }
    r.wait_until(start + Duration::from_secs_f64(sc.seconds));
    ev!(r.ctl, "end");
    r.end();
    r.recordings();
    let report = oracle::check(oracle::read_dir(&r.events)?);
    let outcome = Outcome {
        report,
        run_dir,
        streams: r.streams.clone(),
        elapsed: started.elapsed(),
        actions: r.actions,
    };
    if outcome.report.failures.is_empty() && !opts.keep {
        remove(&outcome);
    }
    Ok(outcome)
}

/// Removes a run's directories.
pub fn remove(o: &Outcome) {
    let _ = fs::remove_dir_all(&o.streams);
    let _ = fs::remove_dir_all(&o.run_dir);
}

fn status_text(s: std::process::ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("code:{c}"),
        (None, Some(sig)) => format!("signal:{sig}"),
        _ => "unknown".into(),
    }
}

impl Run<'_> {
    /// Reaps children until `due`.
    fn wait_until(&mut self, due: Instant) {
        loop {
            self.reap();
            let now = Instant::now();
            if now >= due {
                return;
            }
            std::thread::sleep((due - now).min(Duration::from_millis(2)));
        }
    }

    fn reap(&mut self) {
        for (name, p) in self.procs.iter_mut().filter(|(_, p)| p.alive) {
            if let Ok(Some(status)) = p.child.try_wait() {
                p.alive = false;
                ev!(self.ctl, "exit", "proc={name} status={}", status_text(status));
            }
        }
    }

    fn say(&self, what: &str) {
        if self.opts.verbose {
            eprintln!("[{:>8.3}] {what}", (sys::mono_us() - self.t0) as f64 / 1e6);
        }
    }

    fn act(&mut self, action: &Action) {
        self.actions += 1;
        self.say(&format!("{action:?}"));
        match action {
            Action::Spawn { proc, role, settings } => self.spawn(proc, role, settings),
            Action::Kill(p) => self.kill(p),
            Action::Stop(p) | Action::Cont(p) => {
                let stop = matches!(action, Action::Stop(_));
                if let Some(x) = self.procs.get_mut(p).filter(|x| x.alive) {
                    let sig = if stop { sys::SIGSTOP } else { sys::SIGCONT };
                    if sys::signal(x.child.id(), sig) {
                        x.stopped = stop;
                        ev!(self.ctl, if stop { "stop" } else { "cont" }, "proc={p}");
                    }
                }
            }
            Action::Close(p) => self.close(p),
            Action::Clean => match shmlog::inspect::clean(&self.streams, false) {
                Ok(rep) => ev!(self.ctl, "clean", "removed={} kept={}", rep.removed.len(), rep.kept.len()),
                Err(e) => ev!(self.ctl, "clean", "error={}", e.to_string().replace(' ', "-")),
            },
            Action::Corrupt(stream) => self.corrupt(stream),
            Action::Purge(stream) => self.purge(stream),
            Action::Detach(stream) => self.move_start("detach", stream, |journal, r| {
                shmlog::journal::detach(
                    journal,
                    r.id,
                    r.start_position + (r.stop_position - r.start_position) / 2,
                )
            }),
            Action::Attach(stream) => {
                self.move_start("attach", stream, |journal, r| shmlog::journal::attach(journal, r.id))
            }
            Action::DeleteDetached(stream) => self.delete_detached(stream),
            Action::Truncate(stream) => self.truncate(stream),
        }
    }

    fn spawn(&mut self, proc: &str, role: &str, base: &str) {
        if self.procs.get(proc).is_some_and(|p| p.alive) {
            ev!(self.ctl, "skip", "proc={proc} why=alive");
            return;
        }
        self.incs += 1;
        let kv = crate::roles::Settings::parse(base);
        let spec = self.sc.stream(kv.str("stream")).cloned().unwrap_or_else(|| crate::plan::StreamSpec {
            name: kv.str("stream").into(),
            concurrent: false,
            term: 1 << 16,
            mtu: 1408,
            liveness_ms: 100,
            hostile: false,
        });
        let mut settings = format!(
            "{base},{},proc={proc},inc={},dir={},journal={},events={},t0={},parent={},deadline_ms={},seed={}",
            spec.settings(),
            self.incs,
            self.streams.display(),
            self.journal.display(),
            self.events.display(),
            self.t0,
            std::process::id(),
            ((self.sc.seconds + 60.0) * 1000.0) as u64,
            mix(self.sc.seed ^ mix(proc.bytes().fold(0u64, |h, b| mix(h ^ u64::from(b))))),
        );
        let mut files = vec![self.events.join(format!("{proc}.log"))];
        let stream2 = kv.str("stream2").to_string();
        if let Some(s2) = self.sc.stream(&stream2) {
            settings.push_str(&format!(",liveness2_ms={}", s2.liveness_ms));
            files.push(self.events.join(format!("{proc}~2.log")));
        }
        let stderr = File::create(self.run_dir.join("stderr").join(format!("{proc}.txt")));
        // A role of another language is a program named by `exec=` (`python`: the bundled
        // Python role), started the same way and speaking the same event lines (`roles`).
        let mut command = match kv.str("exec") {
            "" => Command::new(std::env::current_exe().expect("the controller's own executable")),
            crate::python::EXEC => crate::python::command(),
            program => Command::new(program),
        };
        let child = command
            .args(["role", role, &settings])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(stderr.map_or(Stdio::null(), Stdio::from))
            .spawn();
        match child {
            Ok(mut child) => {
                let tethered = if role == "writer" { 0 } else { kv.num::<u8>("tethered", 1) };
                let s2 = if stream2.is_empty() { String::new() } else { format!(" stream2={stream2}") };
                ev!(
                    self.ctl,
                    "spawn",
                    "proc={proc} pid={} role={role} stream={}{s2} tethered={tethered}",
                    child.id(),
                    kv.str("stream")
                );
                let stdin = child.stdin.take();
                let p = Proc {
                    child,
                    stdin,
                    alive: true,
                    stopped: false,
                    role: role.into(),
                    shape: kv.str("shape").into(),
                    files,
                };
                self.procs.insert(proc.into(), p);
            }
            Err(e) => ev!(self.ctl, "spawn-failed", "proc={proc} why={}", e.to_string().replace(' ', "-")),
        }
    }

    fn kill(&mut self, proc: &str) {
        let Some(p) = self.procs.get_mut(proc).filter(|p| p.alive) else { return };
        ev!(self.ctl, "kill", "proc={proc}");
        let _ = p.child.kill();
        let status = p.child.wait().map(status_text).unwrap_or_default();
        p.alive = false;
        ev!(self.ctl, "exit", "proc={proc} status={status}");
    }

    fn close(&mut self, proc: &str) {
        let Some(p) = self.procs.get_mut(proc).filter(|p| p.alive) else { return };
        if p.stdin.take().is_some() {
            ev!(self.ctl, "close", "proc={proc}");
        }
    }

    /// Purges every recording of `stream` below the middle of what it holds (whole segments
    /// only: one shorter than two segments keeps everything), through the public API, as an
    /// operator's `shmlog journal purge` would.
    fn purge(&mut self, stream: &str) {
        let Ok(list) = recordings(&self.journal) else {
            ev!(self.ctl, "purge", "stream={stream} error=no-catalog");
            return;
        };
        for rec in list.into_iter().flatten().filter(|r| r.stream == stream) {
            // A reader may meet the purge before its line is written: the line says when it began.
            let began = self.ctl.now();
            let middle = rec.start_position + (rec.stop_position - rec.start_position) / 2;
            match shmlog::journal::purge(&self.journal, rec.id, middle) {
                Ok(o) if o.start > rec.start_position => ev!(
                    self.ctl,
                    "purge",
                    "stream={stream} id={} session={} from={} to={} bytes={} began={began}",
                    rec.id,
                    rec.session_id,
                    rec.start_position,
                    o.start,
                    o.bytes_removed
                ),
                Ok(_) => {}
                Err(e) => ev!(
                    self.ctl,
                    "purge",
                    "stream={stream} id={} error={}",
                    rec.id,
                    e.to_string().replace(' ', "-")
                ),
            }
        }
    }

    /// The recordings of `stream` the catalog lists (the `what` line says so if there is no
    /// catalog yet).
    fn recordings_of(&self, what: &str, stream: &str) -> Vec<Recording> {
        match recordings(&self.journal) {
            Ok(list) => list.into_iter().flatten().filter(|r| r.stream == stream).collect(),
            Err(_) => {
                ev!(self.ctl, what, "stream={stream} error=no-catalog");
                Vec::new()
            }
        }
    }

    /// The line of an operation that failed.
    fn failed(&self, what: &str, stream: &str, id: u32, e: &shmlog::Error) {
        ev!(self.ctl, what, "stream={stream} id={} error={}", id, e.to_string().replace(' ', "-"));
    }

    /// Moves the start of every recording of `stream` with `op`, as `shmlog journal` would, one
    /// line each saying where it was (`from`) and is (`to`): `detach` below the middle of what
    /// it holds (its start moves up as a purge's does, its files stay), or `attach` (whatever
    /// detached files are still there come back).
    fn move_start(
        &mut self,
        what: &str,
        stream: &str,
        op: impl Fn(&Path, &Recording) -> Result<shmlog::journal::Outcome, shmlog::Error>,
    ) {
        for rec in self.recordings_of(what, stream) {
            let began = self.ctl.now();
            match op(&self.journal, &rec) {
                Ok(o) => ev!(
                    self.ctl,
                    what,
                    "stream={stream} id={} session={} from={} to={} began={began}",
                    rec.id,
                    rec.session_id,
                    rec.start_position,
                    o.start
                ),
                Err(e) => self.failed(what, stream, rec.id, &e),
            }
        }
    }

    /// Removes the detached files of every recording of `stream`.
    fn delete_detached(&mut self, stream: &str) {
        for rec in self.recordings_of("delete-detached", stream) {
            let began = self.ctl.now();
            match shmlog::journal::delete_detached(&self.journal, rec.id) {
                Ok(o) => ev!(
                    self.ctl,
                    "delete-detached",
                    "stream={stream} id={} session={} start={} files={} bytes={} began={began}",
                    rec.id,
                    rec.session_id,
                    o.start,
                    o.files_removed,
                    o.bytes_removed
                ),
                Err(e) => self.failed("delete-detached", stream, rec.id, &e),
            }
        }
    }

    /// Truncates the newest stopped recording of `stream` not cut yet: first at a position
    /// inside a message near three quarters of what it holds (a frame never starts 8 bytes past
    /// a 32-byte boundary), which must be refused with `PositionNotAvailable` naming the
    /// nearest message start; then at that start.
    fn truncate(&mut self, stream: &str) {
        let Some(rec) = self
            .recordings_of("truncate", stream)
            .into_iter()
            .filter(|r| r.is_stopped() && r.stop_position > r.start_position && !self.cut.contains(&r.id))
            .max_by_key(|r| r.id)
        else {
            return;
        };
        self.cut.insert(rec.id);
        let (start, stop) = (rec.start_position, rec.stop_position);
        let probe = ((start + (stop - start) * 3 / 4) & !31) + 8;
        let probe = if probe < stop { probe } else { start + 8 };
        let began = self.ctl.now();
        let text = |e: &shmlog::Error| e.to_string().replace(' ', "-");
        // The try inside a message, then the cut at the start it named (or where the try cut,
        // if it was taken: a defect R8.truncate reports).
        let (got, done) = match shmlog::journal::truncate(&self.journal, rec.id, probe) {
            Err(shmlog::Error::PositionNotAvailable { nearest, .. }) => (
                "PositionNotAvailable".to_string(),
                shmlog::journal::truncate(&self.journal, rec.id, nearest).map(|o| (nearest, o)),
            ),
            Ok(o) => ("ok".to_string(), Ok((probe, o))),
            Err(e) => (text(&e), Err(e)),
        };
        match done {
            Ok((at, o)) => ev!(
                self.ctl,
                "truncate",
                "stream={stream} id={} session={} start={start} from={stop} to={at} files={} bytes={} probe={probe} probe_got={got} began={began}",
                rec.id,
                rec.session_id,
                o.files_removed,
                o.bytes_removed
            ),
            Err(e) => ev!(
                self.ctl,
                "truncate",
                "stream={stream} id={} session={} probe={probe} probe_got={got} error={}",
                rec.id,
                rec.session_id,
                text(&e)
            ),
        }
    }

    /// Writes a bad frame header at the tail of `stream`'s log, if its (exclusive) publisher
    /// is dead: past everything committed, so no committed message is touched, but every reader
    /// that gets there meets a fault (and an untethered one copies a term's worth first: N6).
    fn corrupt(&mut self, stream: &str) {
        let why = match self.try_corrupt(stream) {
            Ok((session, at)) => {
                ev!(self.ctl, "corrupt", "stream={stream} session={session} at={at}");
                return;
            }
            Err(why) => why,
        };
        ev!(self.ctl, "corrupt-skipped", "stream={stream} why={why}");
    }

    fn try_corrupt(&self, stream: &str) -> Result<(i32, i64), String> {
        let all = shmlog::inspect::streams(&self.streams).map_err(|e| e.to_string().replace(' ', "-"))?;
        let info = all.into_iter().find(|s| s.name == stream).ok_or("no-stream")?;
        let log = info.log.ok_or("no-log")?;
        if log.publisher_alive || log.concurrent || log.eos_position.is_some() {
            return Err("publisher-alive-closed-or-concurrent".into());
        }
        let t = log.term_length as i64;
        let (p, off) = (log.position, log.position % t);
        if t - off < 64 {
            return Err("at-a-term-end".into());
        }
        let at = ((p / t) % 3) * t + off;
        let mut header = [0u8; 32];
        header[0..4].copy_from_slice(&((t - off) as i32).to_le_bytes());
        header[4] = 0xEE; // no version of the format
        header[5] = 0xC0;
        header[6..8].copy_from_slice(&1u16.to_le_bytes());
        header[8..12].copy_from_slice(&(off as i32).to_le_bytes());
        header[12..16].copy_from_slice(&log.session_id.to_le_bytes());
        header[16..20].copy_from_slice(&log.stream_id.to_le_bytes());
        let file = fs::OpenOptions::new().write(true).open(&log.path).map_err(|e| e.kind().to_string())?;
        // The rest of the header first, the length word last, as a writer commits.
        file.write_all_at(&header[4..], at as u64 + 4).map_err(|e| e.kind().to_string())?;
        file.write_all_at(&header[..4], at as u64).map_err(|e| e.kind().to_string())?;
        Ok((log.session_id, p))
    }

    /// Ends the run: everything continued; writers closed (their readers then report their
    /// sessions closed, waited for a bounded time); everyone else closed; stragglers killed;
    /// a last `clean`, and whatever is left in the stream directory noted.
    fn end(&mut self) {
        let stopped: Vec<String> =
            self.procs.iter().filter(|(_, p)| p.alive && p.stopped).map(|(n, _)| n.clone()).collect();
        for name in stopped {
            self.act(&Action::Cont(name));
        }
        let writers: Vec<String> =
            self.procs.iter().filter(|(_, p)| p.role == "writer").map(|(n, _)| n.clone()).collect();
        self.close_all(&writers);
        self.drain();
        let rest: Vec<String> = self.procs.keys().cloned().collect();
        self.close_all(&rest);
        let _ = shmlog::inspect::clean(&self.streams, false);
        if let Ok(dir) = fs::read_dir(&self.streams) {
            for e in dir.flatten() {
                ev!(self.ctl, "leftover", "path={}", e.path().display());
            }
        }
    }

    /// Closes `names` and waits for them to exit (5 s), then kills what is left.
    fn close_all(&mut self, names: &[String]) {
        for n in names {
            self.close(n);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while names.iter().any(|n| self.procs[n].alive) && Instant::now() < deadline {
            self.wait_until(Instant::now() + Duration::from_millis(10));
        }
        for n in names {
            self.kill(n);
        }
    }

    /// Waits until every live reader has reported the end of the session it reads (or never
    /// joined one), at most the oracle's bound for it and a little more.
    fn drain(&mut self) {
        let longest = self.sc.streams.iter().map(|s| s.liveness_ms).max().unwrap_or(100) as i64;
        let deadline =
            Instant::now() + Duration::from_micros(crate::oracle::closed_bound_us(longest) as u64 + 500_000);
        let mut tails: BTreeMap<PathBuf, (u64, bool)> = BTreeMap::new();
        for p in self.procs.values().filter(|p| p.alive && p.role == "reader" && p.shape != "merge") {
            for f in &p.files {
                tails.insert(f.clone(), (0, false));
            }
        }
        while Instant::now() < deadline {
            for (path, (offset, open)) in tails.iter_mut() {
                *offset = scan(path, *offset, open);
            }
            if tails.values().all(|(_, open)| !open) {
                break;
            }
            self.wait_until(Instant::now() + Duration::from_millis(50));
        }
    }

    /// Lists the journal's recordings and replays each (the first [`REPLAYED`]) into
    /// `events/replay-<id>.log`.
    fn recordings(&mut self) {
        let Ok(list) = recordings(&self.journal) else { return };
        for (n, rec) in list.into_iter().flatten().enumerate() {
            let reason = match rec.state {
                RecordingState::Stopped(r) => r.as_str(),
                RecordingState::Recording => "recording",
                RecordingState::Interrupted => "interrupted",
                _ => "unknown",
            };
            ev!(
                self.ctl,
                "recording",
                "id={} stream={} session={} start={} stop={} reason={reason} gap={} origin={}",
                rec.id,
                rec.stream,
                rec.session_id,
                rec.start_position,
                rec.stop_position,
                rec.gap_before,
                rec.origin_position
            );
            if n >= REPLAYED {
                continue;
            }
            let path = self.events.join(format!("replay-{}.log", rec.id));
            let Ok(out) = Out::create(&path, self.t0, Mode::Manual) else { continue };
            ev!(
                out,
                "start",
                "role=replay proc=replay-{} stream={} shape=replay tethered=1 recording={} from={} stop={}",
                rec.id,
                rec.stream,
                rec.id,
                rec.start_position,
                rec.stop_position
            );
            let mut replay = match Replay::builder(&self.journal, rec.id).open() {
                Ok(r) => r,
                Err(e) => {
                    ev!(out, "corrupt", "why=replay-open:{}", e.to_string().replace(' ', "-"));
                    out.flush();
                    continue;
                }
            };
            let mut t = Tracker::new(out.clone(), crate::roles::Speed::Fast, crate::prng::Rng::new(0), false);
            t.joined(rec.session_id, Some(rec.start_position));
            let mut asm = FragmentAssembler::new(t);
            // Nothing records any more: a replay that finds nothing new is at its end.
            let deadline = Instant::now() + Duration::from_secs(2);
            loop {
                match replay.poll(&mut asm, 256) {
                    Ok(0)
                        if replay.position() >= rec.stop_position
                            || replay.is_done()
                            || Instant::now() > deadline =>
                    {
                        break
                    }
                    Ok(0) => std::thread::sleep(Duration::from_millis(1)),
                    Ok(_) => {}
                    Err(e) => {
                        ev!(out, "corrupt", "why=replay:{}", e.to_string().replace(' ', "-"));
                        break;
                    }
                }
            }
            out.flush();
        }
    }
}

/// Reads the new complete lines of a reader's file from `offset`; `open` becomes `true` at a
/// `joined` line and `false` at a `closed` or `fault` line (or an exit). Returns the new offset.
fn scan(path: &Path, offset: u64, open: &mut bool) -> u64 {
    let Ok(mut f) = File::open(path) else { return offset };
    if f.seek(SeekFrom::Start(offset)).is_err() {
        return offset;
    }
    let mut text = String::new();
    if f.read_to_string(&mut text).is_err() {
        return offset;
    }
    let complete = text.rfind('\n').map_or(0, |i| i + 1);
    for (_, l) in lines(&text[..complete]) {
        match l.kind {
            "joined" => *open = true,
            "closed" | "fault" | "exit" => *open = false,
            _ => {}
        }
    }
    offset + complete as u64
}
