//! `shmlog record`, `shmlog replay` and `shmlog recordings`: the journal from the command line.

use crate::sys::stop_requested;
use crate::DirArg;
use clap::Args;
use serde_json::json;
use shmlog::journal::{self, Checksum, Fsync, Recorder, Recording, RecordingState, Replay};
use shmlog::{Error, FragmentAssembler, Header, JoinAt, Publication};
use std::cell::RefCell;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct RecordArgs {
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
pub fn record(a: &RecordArgs) -> Result<(), Error> {
    let mut recorder = Recorder::builder(&a.stream, &a.journal)
        .stream_dir(a.dir.path())
        .segment_length(a.segment_length)
        .fsync(a.fsync)
        .tethered(!a.untethered)
        .join_at(if a.from_slowest { JoinAt::Slowest } else { JoinAt::Latest })
        .checksum(if a.no_checksum { Checksum::None } else { Checksum::Crc32c })
        .preallocate(a.preallocate)
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
pub struct ReplayArgs {
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
pub fn replay(a: &ReplayArgs) -> Result<(), String> {
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
    }
}

/// Bytes per second over the recording's life (to now while recording).
fn rate(r: &Recording) -> Option<f64> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos() as i64;
    let secs = (r.stop_unix_ns.unwrap_or(now) - r.start_unix_ns) as f64 / 1e9;
    (secs > 0.0).then(|| r.length() as f64 / secs).filter(|x| x.is_finite())
}

/// Lists the recordings of a journal directory.
pub fn recordings(journal: &Path, json: bool) -> Result<(), Error> {
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
                    "{:>4}  {:<20} {:>11}  {:<24} {:>12} {:>12} {:>12}  {:>10}  {:>10}{}{}",
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
                    if r.checksum == Checksum::None { "  (no checksum)" } else { "" }
                );
            }
            Err(e) => {
                let _ = writeln!(out, "   ?  {e}");
            }
        }
    }
    Ok(())
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
