//! `shmlog record`, `shmlog replay` and `shmlog recordings`: the journal from the command line.

use crate::sys::stop_requested;
use crate::DirArg;
use clap::Args;
use serde_json::json;
use shmlog::journal::{self, Checksum, Fsync, Recorder, Recording, RecordingState, Replay, Retention};
use shmlog::{Error, FragmentAssembler, Header, JoinAt, Publication};
use std::cell::RefCell;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub(crate) struct RecordArgs {
    #[command(flatten)]
    dir: DirArg,
    /// Stream name.
    stream: String,
    /// Journal directory (on a real disk, not /dev/shm).
    #[arg(long, value_name = "DIR")]
    journal: PathBuf,
    /// Bytes per segment file (power of two).
    #[arg(long, value_name = "BYTES", default_value_t = 128 << 20)]
    segment_length: u64,
    /// When to force recorded bytes to the disk: never, segment, or a number of milliseconds.
    #[arg(long, value_name = "POLICY", default_value = "never", value_parser = parse_fsync)]
    pub fsync: Fsync,
    /// Never hold the publisher back: skip ahead (and report the gap) when behind.
    #[arg(long)]
    untethered: bool,
    /// Start with what the log still holds behind its slowest reader, not at the publisher.
    #[arg(long)]
    from_slowest: bool,
    /// Stop after SECS seconds.
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Stop when the first recorded session ends.
    #[arg(long)]
    until_end: bool,
    /// Record frames as they are, without a CRC32C in each frame's reserved value (replay then
    /// checks only the frames' structure, and the publisher's reserved values are kept).
    #[arg(long)]
    no_checksum: bool,
    /// Reserve each segment's whole length when it is begun (posix_fallocate) instead of
    /// letting the file grow as it is written.
    #[arg(long)]
    preallocate: bool,
    #[command(flatten)]
    retain: RetainArgs,
}

/// A retention policy from the command line.
#[derive(Args, Debug, Default)]
pub(crate) struct RetainArgs {
    /// Keep segments written in the last SECS seconds only (purge older ones).
    #[arg(long, value_name = "SECS")]
    retain_age: Option<f64>,
    /// Keep at most BYTES of each recording (whole segments).
    #[arg(long, value_name = "BYTES")]
    retain_bytes: Option<u64>,
    /// Keep at most N segments of each recording.
    #[arg(long, value_name = "N")]
    retain_segments: Option<u64>,
}

impl RetainArgs {
    fn policy(&self) -> Result<Retention, String> {
        let mut p = Retention::none();
        if let Some(secs) = self.retain_age {
            if !(secs > 0.0 && secs.is_finite()) {
                return Err("--retain-age must be a positive number of seconds".into());
            }
            p = p.max_age(Duration::from_secs_f64(secs));
        }
        if let Some(bytes) = self.retain_bytes {
            p = p.max_bytes(bytes);
        }
        if let Some(n) = self.retain_segments {
            p = p.max_segments(n);
        }
        Ok(p)
    }
}

fn parse_fsync(s: &str) -> Result<Fsync, String> {
    match s {
        "never" => Ok(Fsync::Never),
        "segment" => Ok(Fsync::PerSegment),
        ms => match ms.parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Fsync::Every(Duration::from_millis(ms))),
            _ => Err(format!("{s:?}: expected never, segment or a number of milliseconds")),
        },
    }
}

/// Records until Ctrl-C, `--duration`, or (with `--until-end`) the end of the first session.
pub(crate) fn record(a: &RecordArgs) -> Result<(), String> {
    let policy = a.retain.policy()?;
    record_with(a, policy).map_err(|e| e.to_string())
}

fn record_with(a: &RecordArgs, policy: Retention) -> Result<(), Error> {
    let mut recorder = Recorder::builder(&a.stream, &a.journal)
        .stream_dir(a.dir.path())
        .segment_length(a.segment_length)
        .fsync(a.fsync)
        .tethered(!a.untethered)
        .join_at(if a.from_slowest { JoinAt::Slowest } else { JoinAt::Latest })
        .checksum(if a.no_checksum { Checksum::None } else { Checksum::Crc32c })
        .preallocate(a.preallocate)
        .retention(policy)
        .start()?;
    let deadline = a.duration.map(|d| Instant::now() + Duration::from_secs_f64(d));
    eprintln!("recording {:?} into {} (Ctrl-C stops)", a.stream, a.journal.display());
    let mut seen = None;
    let mut position = 0;
    loop {
        if stop_requested() || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let moved = recorder.poll()?;
        if let Some(id) = recorder.recording_id() {
            position = recorder.recorded_position();
            if seen != Some(id) {
                eprintln!("recording {id} started");
                seen = Some(id);
            }
        } else if seen.is_some() && a.until_end {
            break;
        }
        if moved == 0 {
            recorder.wait(Duration::from_millis(50));
        }
    }
    recorder.stop()?;
    if let Some(id) = seen {
        eprintln!("recording {id} stopped at position {position}");
    }
    Ok(())
}

#[derive(Args, Debug)]
pub(crate) struct ReplayArgs {
    #[command(flatten)]
    dir: DirArg,
    /// Journal directory.
    #[arg(long, value_name = "DIR")]
    journal: PathBuf,
    /// Recording id (see `shmlog recordings`).
    pub id: u32,
    /// Start at this position (where a message starts) [default: the recording's start].
    #[arg(long, value_name = "POSITION")]
    pub from: Option<i64>,
    /// Stop at this position.
    #[arg(long, value_name = "POSITION")]
    to: Option<i64>,
    /// At most this many messages per second.
    #[arg(long, value_name = "MSGS")]
    rate: Option<f64>,
    /// Publish into this new stream (in --dir) instead of printing.
    #[arg(long, value_name = "STREAM")]
    into: Option<String>,
    /// Keep following a recording that is still recording.
    #[arg(long)]
    follow: bool,
}

/// Replays to stdout (one `position length hex` line per message) or into a new stream.
pub(crate) fn replay(a: &ReplayArgs) -> Result<(), String> {
    replay_inner(a).map_err(|e| match e {
        Failure::Shmlog(e) => e.to_string(),
        Failure::Other(s) => s,
    })
}

enum Failure {
    Shmlog(Error),
    Other(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Self::Shmlog(e)
    }
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Self::Other(s)
    }
}

fn replay_inner(a: &ReplayArgs) -> Result<(), Failure> {
    let mut b = Replay::builder(&a.journal, a.id);
    if let Some(from) = a.from {
        b = b.from(from);
    }
    if let Some(to) = a.to {
        b = b.to(to);
    }
    if let Some(rate) = a.rate {
        b = b.pace(rate);
    }
    let mut replay = b.open()?;
    let mut publication = match &a.into {
        Some(name) => {
            let recording = replay.recording();
            let p = Publication::builder(name)
                .dir(a.dir.path())
                .term_length(recording.term_length)
                .mtu(recording.mtu)
                .create()?;
            eprintln!("replaying recording {} into stream {name:?} (waiting for a reader)", a.id);
            Some(p)
        }
        None => None,
    };
    if let Some(p) = publication.as_mut() {
        p.wait_connected(Duration::from_secs(3600))?;
    }
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let failed = RefCell::new(None::<String>);
    let mut count = 0u64;
    let mut assembler = FragmentAssembler::new(|msg: &[u8], h: &Header| {
        if failed.borrow().is_some() {
            return;
        }
        count += 1;
        match publication.as_mut() {
            Some(p) => {
                if let Err(e) = p.offer_blocking(msg, Duration::from_secs(3600)) {
                    *failed.borrow_mut() = Some(format!("replaying into the new stream: {e}"));
                }
            }
            None => {
                let mut line = String::with_capacity(32 + 2 * msg.len());
                line.push_str(&format!("{} {} ", h.position(), msg.len()));
                for b in msg {
                    line.push_str(&format!("{b:02x}"));
                }
                if writeln!(out, "{line}").is_err() {
                    *failed.borrow_mut() = Some("standard output closed".into());
                }
            }
        }
    });
    loop {
        if stop_requested() {
            break;
        }
        let n = replay.poll(&mut assembler, 256)?;
        if failed.borrow().is_some() {
            break;
        }
        if n == 0 {
            if replay.is_done() || !a.follow && replay.position() >= replay.recorded_position() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    drop(assembler);
    let _ = out.flush();
    if let Some(e) = failed.into_inner() {
        return Err(Failure::Other(e));
    }
    if let Some(p) = publication {
        p.close();
    }
    eprintln!("replayed {count} messages, up to position {}", replay.position());
    Ok(())
}

fn state(r: &Recording) -> String {
    match r.state {
        RecordingState::Recording => "recording".into(),
        RecordingState::Interrupted => "interrupted".into(),
        RecordingState::Stopped(reason) => format!("stopped:{}", reason.as_str()),
        _ => "unknown".into(),
    }
}

/// Bytes per second over the recording's life (to now while recording).
fn rate(r: &Recording) -> Option<f64> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos() as i64;
    let secs = (r.stop_unix_ns.unwrap_or(now) - r.start_unix_ns) as f64 / 1e9;
    // Over all it recorded: retention may have purged its beginning since.
    let recorded = (r.stop_position - r.origin_position) as f64;
    (secs > 0.0).then(|| recorded / secs).filter(|x| x.is_finite())
}

/// Lists the recordings of a journal directory.
pub(crate) fn recordings(journal: &Path, json: bool) -> Result<(), Error> {
    let list = journal::recordings(journal)?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if json {
        let items: Vec<_> = list
            .iter()
            .map(|r| match r {
                Ok(r) => json!({
                    "id": r.id,
                    "stream": r.stream,
                    "session_id": r.session_id,
                    "state": state(r),
                    "start_position": r.start_position,
                    "stop_position": r.stop_position,
                    "durable_position": r.durable_position,
                    "bytes": r.length(),
                    "segment_length": r.segment_length,
                    "term_length": r.term_length,
                    "start_unix_ns": r.start_unix_ns,
                    "stop_unix_ns": r.stop_unix_ns,
                    "bytes_per_second": rate(r),
                    "recorder_pid": r.recorder_pid,
                    "gap_before": r.gap_before,
                    "previous": r.previous,
                    "checksum": r.checksum.as_str(),
                    "origin_position": r.origin_position,
                    "cut_from": r.cut_from,
                    "retention": retention_json(&r.retention),
                }),
                Err(e) => json!({ "error": e.to_string() }),
            })
            .collect();
        let doc = json!({ "journal": journal.display().to_string(), "recordings": items });
        let _ = writeln!(out, "{doc}");
        return Ok(());
    }
    let _ = writeln!(out, "journal {}: {} recording(s)", journal.display(), list.len());
    let _ = writeln!(
        out,
        "{:>4}  {:<20} {:>11}  {:<24} {:>12} {:>12} {:>12}  {:>10}  {:>10}",
        "id", "stream", "session", "state", "start", "stop", "durable", "size", "rate"
    );
    for r in &list {
        match r {
            Ok(r) => {
                let _ = writeln!(
                    out,
                    "{:>4}  {:<20} {:>11}  {:<24} {:>12} {:>12} {:>12}  {:>10}  {:>10}{}{}{}",
                    r.id,
                    r.stream,
                    r.session_id,
                    state(r),
                    r.start_position,
                    r.stop_position,
                    r.durable_position,
                    human_bytes(r.length() as f64),
                    rate(r).map_or("-".into(), |b| format!("{}/s", human_bytes(b))),
                    if r.gap_before > 0 {
                        format!("  (gap of {} bytes before)", r.gap_before)
                    } else {
                        String::new()
                    },
                    if r.checksum == Checksum::None { "  (no checksum)" } else { "" },
                    if r.retention.is_none() {
                        String::new()
                    } else {
                        format!("  ({})", retention_text(&r.retention))
                    }
                );
            }
            Err(e) => {
                let _ = writeln!(out, "   ?  {e}");
            }
        }
    }
    Ok(())
}

/// A policy as JSON: each limit, or null.
pub(crate) fn retention_json(p: &Retention) -> serde_json::Value {
    json!({
        "max_age_seconds": p.max_age.map(|d| d.as_secs_f64()),
        "max_bytes": p.max_bytes,
        "max_segments": p.max_segments,
    })
}

/// A policy for people: "keep 7d, 1.0 GiB, 8 segments", or "keep everything".
pub(crate) fn retention_text(p: &Retention) -> String {
    if p.is_none() {
        return "keep everything".into();
    }
    let mut parts = Vec::new();
    if let Some(age) = p.max_age {
        parts.push(format!("{} s", age.as_secs_f64()));
    }
    if let Some(bytes) = p.max_bytes {
        parts.push(human_bytes(bytes as f64));
    }
    if let Some(n) = p.max_segments {
        parts.push(format!("{n} segments"));
    }
    format!("keep {}", parts.join(", "))
}

#[derive(clap::Subcommand, Debug)]
pub(crate) enum JournalCommand {
    /// Remove a recording's segments wholly below the one holding POSITION; the recording then
    /// starts at the first message start of what is kept.
    Purge {
        #[command(flatten)]
        at: Target,
        /// Keep the segment holding this position and everything after it.
        #[arg(long, value_name = "POSITION")]
        to: i64,
    },
    /// Move a recording's start past its segments wholly below POSITION, keeping their files.
    Detach {
        #[command(flatten)]
        at: Target,
        /// Keep the segment holding this position and everything after it.
        #[arg(long, value_name = "POSITION")]
        to: i64,
    },
    /// Take a recording's detached segment files back (the run of them just below its start).
    Attach {
        #[command(flatten)]
        at: Target,
    },
    /// Remove a recording's detached segment files.
    DeleteDetached {
        #[command(flatten)]
        at: Target,
    },
    /// Cut a stopped recording at POSITION (where a message starts): what follows is removed.
    Truncate {
        #[command(flatten)]
        at: Target,
        /// The new stop position.
        #[arg(long, value_name = "POSITION")]
        at_position: i64,
    },
    /// Delete a recording: its files, then its catalog record.
    Delete {
        #[command(flatten)]
        at: Target,
    },
    /// Show the journal's retention policy, set it, or apply the policies once (--apply).
    Retention {
        /// Journal directory.
        #[arg(long, value_name = "DIR")]
        journal: PathBuf,
        #[command(flatten)]
        retain: RetainArgs,
        /// Set the policy to keep everything.
        #[arg(long)]
        none: bool,
        /// Apply every policy (the journal's and its recordings') once, now.
        #[arg(long)]
        apply: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// A recording of a journal, for the operations.
#[derive(Args, Debug)]
pub(crate) struct Target {
    /// Journal directory.
    #[arg(long, value_name = "DIR")]
    journal: PathBuf,
    /// Recording id (see `shmlog recordings`).
    id: u32,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `shmlog journal ...`: one operation, then what it did.
pub(crate) fn journal_command(c: &JournalCommand) -> Result<(), String> {
    let (target, what, done) = match c {
        JournalCommand::Purge { at, to } => (at, "purged", journal::purge(&at.journal, at.id, *to)),
        JournalCommand::Detach { at, to } => (at, "detached", journal::detach(&at.journal, at.id, *to)),
        JournalCommand::Attach { at } => (at, "attached", journal::attach(&at.journal, at.id)),
        JournalCommand::DeleteDetached { at } => {
            (at, "deleted detached", journal::delete_detached(&at.journal, at.id))
        }
        JournalCommand::Truncate { at, at_position } => {
            (at, "truncated", journal::truncate(&at.journal, at.id, *at_position))
        }
        JournalCommand::Delete { at } => (at, "deleted", journal::delete_recording(&at.journal, at.id)),
        JournalCommand::Retention { journal: dir, retain, none, apply, json } => {
            return retention_command(dir, retain, *none, *apply, *json).map_err(|e| e.to_string());
        }
    };
    let done = done.map_err(|e| e.to_string())?;
    let r = journal::recording(&target.journal, target.id).ok();
    if target.json {
        println!(
            "{}",
            json!({
                "id": target.id,
                "done": what,
                "start_position": r.as_ref().map(|r| r.start_position),
                "stop_position": r.as_ref().map(|r| r.stop_position),
                "files_removed": done.files_removed,
                "bytes_removed": done.bytes_removed,
            })
        );
    } else {
        match r {
            Some(r) => println!(
                "recording {}: {what}; it holds {}..{} now; {} file(s), {} removed",
                target.id,
                r.start_position,
                r.stop_position,
                done.files_removed,
                human_bytes(done.bytes_removed as f64)
            ),
            None => println!(
                "recording {}: {what}; {} file(s), {} removed",
                target.id,
                done.files_removed,
                human_bytes(done.bytes_removed as f64)
            ),
        }
    }
    Ok(())
}

fn retention_command(
    dir: &Path,
    retain: &RetainArgs,
    none: bool,
    apply: bool,
    as_json: bool,
) -> Result<(), Error> {
    let asked = retain
        .policy()
        .map_err(|_| Error::InvalidConfig("--retain-age must be a positive number of seconds"))?;
    if none || !asked.is_none() {
        journal::set_journal_retention(dir, asked)?;
    }
    let applied = if apply { Some(journal::apply_retention(dir)?) } else { None };
    let policy = journal::journal_retention(dir)?;
    if as_json {
        println!(
            "{}",
            json!({
                "journal": dir.display().to_string(),
                "retention": retention_json(&policy),
                "applied": applied.map(|a| json!({
                    "files_removed": a.files_removed,
                    "bytes_removed": a.bytes_removed,
                    "recordings_deleted": a.recordings_deleted,
                })),
            })
        );
    } else {
        println!("journal {}: {}", dir.display(), retention_text(&policy));
        if let Some(a) = applied {
            println!(
                "applied: {} file(s), {} removed, {} recording(s) deleted",
                a.files_removed,
                human_bytes(a.bytes_removed as f64),
                a.recordings_deleted
            );
        }
    }
    Ok(())
}

/// What `shmlog stat --journal DIR` shows of a journal: its size on disk, its streams' oldest
/// and newest positions, its retention, and its durable readers.
#[derive(Debug)]
pub(crate) struct Summary {
    pub dir: PathBuf,
    /// Bytes its files take on disk, and its segment files.
    pub disk_bytes: u64,
    pub segments: usize,
    pub retention: Retention,
    pub streams: Vec<StreamSummary>,
    pub readers: Vec<journal::DurableReaderInfo>,
    pub problems: Vec<String>,
}

/// One stream's recordings in a journal.
#[derive(Debug)]
pub(crate) struct StreamSummary {
    pub stream: String,
    pub recordings: usize,
    /// The oldest position kept (recording id, position) and the newest.
    pub oldest: (u32, i64),
    pub newest: (u32, i64),
    /// Stream bytes its recordings hold.
    pub bytes: i64,
    /// `true` if one is being recorded.
    pub recording: bool,
}

pub(crate) fn summary(dir: &Path) -> Result<Summary, Error> {
    use std::os::unix::fs::MetadataExt;
    let (mut disk_bytes, mut segments) = (0, 0);
    for entry in
        std::fs::read_dir(dir).map_err(|e| Error::Io { op: "list journal", path: dir.into(), source: e })?
    {
        let Ok(entry) = entry else { continue };
        if let Ok(meta) = entry.metadata() {
            disk_bytes += meta.blocks() * 512;
            segments += usize::from(entry.file_name().to_string_lossy().ends_with(".seg"));
        }
    }
    let mut streams: Vec<StreamSummary> = Vec::new();
    let mut problems = Vec::new();
    for r in journal::recordings(dir)? {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        let live = r.state == RecordingState::Recording;
        match streams.iter_mut().find(|s| s.stream == r.stream) {
            Some(s) => {
                s.recordings += 1;
                s.newest = (r.id, r.stop_position);
                s.bytes += r.length();
                s.recording |= live;
            }
            None => streams.push(StreamSummary {
                stream: r.stream.clone(),
                recordings: 1,
                oldest: (r.id, r.start_position),
                newest: (r.id, r.stop_position),
                bytes: r.length(),
                recording: live,
            }),
        }
    }
    Ok(Summary {
        dir: dir.into(),
        disk_bytes,
        segments,
        retention: journal::journal_retention(dir)?,
        streams,
        readers: journal::durable_readers(dir)?,
        problems,
    })
}

/// A durable reader's lag behind its stream's newest recorded position, in bytes, when it reads
/// the newest recording (otherwise it is recordings behind: `None`).
pub(crate) fn reader_lag(s: &Summary, r: &journal::DurableReaderInfo) -> Option<i64> {
    let newest = s.streams.iter().find(|x| x.stream == r.stream)?.newest;
    match r.position {
        Some((id, position)) if id == newest.0 => Some(newest.1 - position),
        _ => None,
    }
}

pub(crate) fn summary_text(s: &Summary) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "
journal {}: {} on disk, {} segment file(s), {}",
        s.dir.display(),
        human_bytes(s.disk_bytes as f64),
        s.segments,
        retention_text(&s.retention)
    );
    for st in &s.streams {
        let _ = writeln!(
            t,
            "  stream {:<20} {} recording(s){}, {} held, oldest {} @ {}, newest {} @ {}",
            st.stream,
            st.recordings,
            if st.recording { " (recording)" } else { "" },
            human_bytes(st.bytes as f64),
            st.oldest.0,
            st.oldest.1,
            st.newest.0,
            st.newest.1
        );
    }
    for r in &s.readers {
        let _ = writeln!(
            t,
            "  durable reader {:<12} of {:<16} {} {}{}",
            r.name,
            r.stream,
            r.position.map_or("nothing read".into(), |(id, p)| format!("at {id} @ {p}")),
            reader_lag(s, r).map_or(String::new(), |lag| format!("lag {} ", human_bytes(lag as f64))),
            if r.alive { "(live)" } else { "(stopped)" }
        );
    }
    for p in &s.problems {
        let _ = writeln!(t, "  PROBLEM     {p}");
    }
    t
}

pub(crate) fn summary_json(s: &Summary) -> serde_json::Value {
    json!({
        "journal": s.dir.display().to_string(),
        "disk_bytes": s.disk_bytes,
        "segment_files": s.segments,
        "retention": retention_json(&s.retention),
        "streams": s.streams.iter().map(|st| json!({
            "stream": st.stream,
            "recordings": st.recordings,
            "recording": st.recording,
            "bytes": st.bytes,
            "oldest": { "recording": st.oldest.0, "position": st.oldest.1 },
            "newest": { "recording": st.newest.0, "position": st.newest.1 },
        })).collect::<Vec<_>>(),
        "durable_readers": s.readers.iter().map(|r| json!({
            "name": r.name,
            "stream": r.stream,
            "recording": r.position.map(|p| p.0),
            "position": r.position.map(|p| p.1),
            "lag_bytes": reader_lag(s, r),
            "updated_unix_ns": r.updated_unix_ns,
            "alive": r.alive,
        })).collect::<Vec<_>>(),
        "problems": s.problems,
    })
}

fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}
