//! What a running bridge shows `shmlog stat`: one small text file per bridge process,
//! `<stream>.<out|in>.<pid>.bridge` beside the stream's log, rewritten whole (write to a
//! temporary file, then rename) a few times a second. Text rather than shared memory: it is read
//! by tools, never on a hot path, and a reader can never see it half written. Beside it, the
//! bridge's resume file `<stream>.<out|in>.<pid>.resume` ([`resume_path`]).
//!
//! Every value is validated when read; a file that does not parse is reported, never trusted.
//! [`scan`] and [`clean`] are what `shmlog stat` and `shmlog clean` do with these files (the
//! core's `shmlog::inspect` knows only the stream's own files, and leaves these as not its own).
//! This module needs no Aeron: it is all of the crate without feature `aeron`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Longest status file read; anything longer is not ours.
const MAX_FILE: u64 = 64 << 10;

/// Most recent losses a status file keeps (the counters keep the totals).
pub const MAX_LOSSES: usize = 16;

/// Which way a bridge carries its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BridgeDirection {
    /// From the local stream to an Aeron UDP publication.
    Out,
    /// From an Aeron UDP subscription into the local stream.
    In,
}

impl BridgeDirection {
    /// `"out"` or `"in"`, as in file names and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            BridgeDirection::Out => "out",
            BridgeDirection::In => "in",
        }
    }
}

/// Why messages of the source stream did not reach the far stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossCause {
    /// The out bridge dropped them: the far side pushed back (or was absent) under the
    /// `drop` policy. Counted exactly by the out bridge.
    Dropped,
    /// The in bridge resumed after a gap: the far bridge, its driver or the path was down, and
    /// the first message after it starts further on than the next one it expected.
    Gap,
    /// Out bridges: the bridge's reader of the local stream did not get them, and said so (a
    /// [`shmlog::Loss`] of its subscription, with its cause), or a restarted out bridge found its
    /// predecessor's resume position no longer in the log (`JoinedLate`). The positions are
    /// those of source session `session`; for `SessionsMissed` they are 0 and `session` is the
    /// session joined after the missed ones (see [`shmlog::LossCause`]).
    Source {
        /// The source session the positions belong to.
        session: i32,
        /// What the reader reported.
        cause: shmlog::LossCause,
    },
    /// In bridges: the out bridge marked the message at `to` as following messages it knows it
    /// lost before it could send them (its `Source` losses; its own status holds their sessions
    /// and exact positions). `from` is where the next message was expected in the same source
    /// session, or 0 when the marked message begins a new session of the source (the loss is
    /// then `[0, to)` of that session, plus whatever of earlier sessions the out bridge's status
    /// lists: an empty range, `[0, 0)`, says only that).
    Upstream,
}

impl LossCause {
    /// The cause as a status file writes it, one word: `dropped`, `gap`, `upstream`,
    /// `source:<session>:joined_late`, `source:<session>:fault` or
    /// `source:<session>:sessions_missed:<count>`.
    pub fn token(self) -> String {
        use shmlog::LossCause as Reader;
        match self {
            LossCause::Dropped => "dropped".into(),
            LossCause::Gap => "gap".into(),
            LossCause::Upstream => "upstream".into(),
            LossCause::Source { session, cause: Reader::JoinedLate } => {
                format!("source:{session}:joined_late")
            }
            LossCause::Source { session, cause: Reader::Fault } => format!("source:{session}:fault"),
            LossCause::Source { session, cause: Reader::Lapped } => format!("source:{session}:lapped"),
            LossCause::Source { session, cause: Reader::SessionsMissed { sessions } } => {
                format!("source:{session}:sessions_missed:{sessions}")
            }
            // A cause of a core newer than this crate (`shmlog::LossCause` is non-exhaustive):
            // written so that `parse` refuses it (the file shows as malformed, never as a
            // different cause). The crates are released together, so this stays unused.
            LossCause::Source { session, cause: _ } => format!("source:{session}:other"),
        }
    }

    /// Reads what [`LossCause::token`] writes; `None` for anything else (numbers in their
    /// canonical form only, so that what parses writes back the same).
    fn parse(s: &str) -> Option<Self> {
        use shmlog::LossCause as Reader;
        match s {
            "dropped" => return Some(LossCause::Dropped),
            "gap" => return Some(LossCause::Gap),
            "upstream" => return Some(LossCause::Upstream),
            _ => {}
        }
        let mut f = s.strip_prefix("source:")?.split(':');
        let session = canonical::<i32>(f.next()?)?;
        let cause = match (f.next()?, f.next()) {
            ("joined_late", None) => Reader::JoinedLate,
            ("fault", None) => Reader::Fault,
            ("lapped", None) => Reader::Lapped,
            ("sessions_missed", Some(n)) => Reader::SessionsMissed { sessions: canonical(n)? },
            _ => return None,
        };
        f.next().is_none().then_some(LossCause::Source { session, cause })
    }
}

/// `s` as a number, if it is written the way `Display` writes that number.
fn canonical<T: std::str::FromStr + std::fmt::Display>(s: &str) -> Option<T> {
    let n: T = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
}

impl std::fmt::Display for LossCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use shmlog::LossCause as Reader;
        match self {
            LossCause::Dropped => f.write_str("dropped by the out bridge"),
            LossCause::Gap => f.write_str("gap: not received by the in bridge"),
            LossCause::Upstream => f.write_str("lost before the out bridge sent them: see its status"),
            LossCause::Source { session, cause: Reader::JoinedLate } => {
                write!(f, "source session {session}: the out bridge's reader joined it past these")
            }
            LossCause::Source { session, cause: Reader::Fault } => {
                write!(f, "source session {session}: the out bridge's reader stopped at a fault")
            }
            LossCause::Source { session, cause: Reader::Lapped } => {
                write!(f, "source session {session}: the out bridge's untethered reader was lapped")
            }
            LossCause::Source { session, cause: Reader::SessionsMissed { sessions } } => write!(
                f,
                "up to {sessions} whole source session(s) began and ended unread before session {session}"
            ),
            LossCause::Source { session, cause } => {
                write!(f, "source session {session}: the out bridge's reader reported {cause:?}")
            }
        }
    }
}

/// Source-stream positions `[from, to)` whose messages were lost, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loss {
    /// Where the first lost message starts (for a gap: where the next expected one would have).
    pub from: i64,
    /// Where the first message after the loss starts.
    pub to: i64,
    /// How many messages, when the bridge knows (the out bridge does; an in bridge does not).
    pub messages: Option<u64>,
    /// Why.
    pub cause: LossCause,
}

/// One bridge process's state, as its status file says.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BridgeInfo {
    /// The local stream.
    pub stream: String,
    /// Out (local stream to UDP) or in (UDP to local stream).
    pub direction: BridgeDirection,
    /// The bridge's process.
    pub pid: u32,
    /// Whether that process still exists (filled in when read).
    pub alive: bool,
    /// The Aeron channel, e.g. `aeron:udp?endpoint=10.0.0.2:40123`.
    pub channel: String,
    /// The Aeron stream id on that channel.
    pub aeron_stream_id: i32,
    /// The media driver's directory.
    pub aeron_dir: String,
    /// Whether the far side is there: a connected publication (out) or an image (in).
    pub connected: bool,
    /// Messages carried.
    pub messages: u64,
    /// Payload bytes carried.
    pub bytes: u64,
    /// Times the bridge found the next hop full and held (out: the UDP publication pushed back;
    /// in: the local stream's readers were a window behind).
    pub back_pressure: u64,
    /// Messages dropped under the `drop` policy.
    pub dropped: u64,
    /// Times the bridge lost its media driver and connected again.
    pub reconnects: u64,
    /// In bridges: messages whose frames carried a source position that cannot be one
    /// (negative, or too large to add a message to; a sender other than an out bridge, or a
    /// damaged one). They are carried (or dropped, and counted in `dropped`) as fresh starts:
    /// no gap is measured to them, and the resume position stays at the last valid one.
    pub bad_positions: u64,
    /// In bridges: messages received again and not carried twice (an out bridge that lost its
    /// driver offers again what the driver may not have sent; some of it had arrived).
    pub duplicates: u64,
    /// Losses before the bridge. Out bridges: the reports of its reader of the local stream (each
    /// in `losses` too, as [`LossCause::Source`], while among the most recent), and reports that
    /// reader had to drop unread. In bridges: messages the out bridge marked as following a
    /// loss of its own (each in `losses` as [`LossCause::Upstream`] while among the most recent).
    pub source_losses: u64,
    /// Source-stream position where the last carried message starts; -1 before the first.
    pub source_position: i64,
    /// Source-stream position just after the last carried message: where a restarted out bridge
    /// resumes reading, and where an in bridge expects the next message to start; -1 before the
    /// first.
    pub resume_position: i64,
    /// The most recent losses, oldest first (at most [`MAX_LOSSES`]).
    pub losses: Vec<Loss>,
    /// When the file was written, in milliseconds since the Unix epoch.
    pub updated_ms: u64,
}

impl BridgeInfo {
    /// A fresh state for a bridge of this process.
    pub fn new(
        stream: &str,
        direction: BridgeDirection,
        channel: &str,
        aeron_stream_id: i32,
        aeron_dir: &str,
    ) -> Self {
        BridgeInfo {
            stream: stream.to_owned(),
            direction,
            pid: std::process::id(),
            alive: true,
            channel: channel.to_owned(),
            aeron_stream_id,
            aeron_dir: aeron_dir.to_owned(),
            connected: false,
            messages: 0,
            bytes: 0,
            back_pressure: 0,
            dropped: 0,
            reconnects: 0,
            bad_positions: 0,
            duplicates: 0,
            source_losses: 0,
            source_position: -1,
            resume_position: -1,
            losses: Vec::new(),
            updated_ms: 0,
        }
    }

    /// Records a loss, keeping the most recent [`MAX_LOSSES`].
    pub fn push_loss(&mut self, loss: Loss) {
        if self.losses.len() == MAX_LOSSES {
            self.losses.remove(0);
        }
        self.losses.push(loss);
    }

    /// The file this bridge writes in `dir`.
    pub fn path(&self, dir: &Path) -> PathBuf {
        status_path(dir, &self.stream, self.direction, self.pid)
    }

    /// The file's text.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let mut kv = |k: &str, v: &dyn std::fmt::Display| {
            let _ = writeln!(s, "{k} {v}");
        };
        kv("channel", &self.channel);
        kv("aeron_stream_id", &self.aeron_stream_id);
        kv("aeron_dir", &self.aeron_dir);
        kv("connected", &(self.connected as u8));
        kv("messages", &self.messages);
        kv("bytes", &self.bytes);
        kv("back_pressure", &self.back_pressure);
        kv("dropped", &self.dropped);
        kv("reconnects", &self.reconnects);
        kv("bad_positions", &self.bad_positions);
        kv("duplicates", &self.duplicates);
        kv("source_losses", &self.source_losses);
        kv("source_position", &self.source_position);
        kv("resume_position", &self.resume_position);
        kv("updated_ms", &self.updated_ms);
        for l in &self.losses {
            let n = l.messages.map_or_else(|| "-".to_owned(), |n| n.to_string());
            let _ = writeln!(s, "loss {} {} {} {}", l.from, l.to, n, l.cause.token());
        }
        s
    }

    /// Parses a status file's text for the bridge its name describes. `None` if any line is
    /// malformed or a required key is missing. Unknown keys are skipped (a newer writer); keys
    /// added after the first release (`bad_positions`, `source_losses`, `duplicates`) are optional (an older
    /// writer).
    pub fn parse(stream: &str, direction: BridgeDirection, pid: u32, text: &str) -> Option<Self> {
        let mut b = BridgeInfo::new(stream, direction, "", 0, "");
        b.pid = pid;
        b.alive = false;
        let mut seen = 0u32;
        for line in text.split_terminator('\n') {
            let (key, value) = line.split_once(' ')?;
            let bit = |i: u32| 1u32 << i;
            match key {
                "channel" => (b.channel, seen) = (value.to_owned(), seen | bit(0)),
                "aeron_stream_id" => (b.aeron_stream_id, seen) = (value.parse().ok()?, seen | bit(1)),
                "aeron_dir" => (b.aeron_dir, seen) = (value.to_owned(), seen | bit(2)),
                "connected" => {
                    b.connected = match value {
                        "0" => false,
                        "1" => true,
                        _ => return None,
                    };
                    seen |= bit(3);
                }
                "messages" => (b.messages, seen) = (value.parse().ok()?, seen | bit(4)),
                "bytes" => (b.bytes, seen) = (value.parse().ok()?, seen | bit(5)),
                "back_pressure" => (b.back_pressure, seen) = (value.parse().ok()?, seen | bit(6)),
                "dropped" => (b.dropped, seen) = (value.parse().ok()?, seen | bit(7)),
                "reconnects" => (b.reconnects, seen) = (value.parse().ok()?, seen | bit(8)),
                "bad_positions" => b.bad_positions = value.parse().ok()?,
                "duplicates" => b.duplicates = value.parse().ok()?,
                "source_losses" => b.source_losses = value.parse().ok()?,
                "source_position" => {
                    b.source_position = value.parse().ok().filter(|p: &i64| *p >= -1)?;
                    seen |= bit(9);
                }
                "updated_ms" => (b.updated_ms, seen) = (value.parse().ok()?, seen | bit(10)),
                "resume_position" => {
                    b.resume_position = value.parse().ok().filter(|p: &i64| *p >= -1)?;
                    seen |= bit(11);
                }
                "loss" => {
                    let mut f = value.split(' ');
                    let from: i64 = f.next()?.parse().ok()?;
                    let to: i64 = f.next()?.parse().ok()?;
                    let messages = match f.next()? {
                        "-" => None,
                        n => Some(n.parse().ok()?),
                    };
                    let cause = LossCause::parse(f.next()?)?;
                    if f.next().is_some() || from < 0 || to < from || b.losses.len() == MAX_LOSSES {
                        return None;
                    }
                    b.losses.push(Loss { from, to, messages, cause });
                }
                _ => {}
            }
        }
        (seen == (1 << 12) - 1).then_some(b)
    }
}

/// `<stream>.<out|in>.<pid>.bridge` in `dir`.
pub fn status_path(dir: &Path, stream: &str, direction: BridgeDirection, pid: u32) -> PathBuf {
    dir.join(format!("{stream}.{}.{pid}.bridge", direction.as_str()))
}

/// `<stream>.<out|in>.<pid>.resume` in `dir`: [`RESUME_LEN`] bytes, the bridge's resume position
/// (8 bytes) and the source session it belongs to (4 bytes, then 4 zero bytes), mapped and
/// stored to right after each message the bridge carries, so that a successor of a bridge
/// killed with SIGKILL knows to the message where it stopped (the status file is up to 100 ms
/// old).
pub fn resume_path(dir: &Path, stream: &str, direction: BridgeDirection, pid: u32) -> PathBuf {
    dir.join(format!("{stream}.{}.{pid}.resume", direction.as_str()))
}

/// Reads a resume file: (position, source session); `None` unless it is [`RESUME_LEN`] bytes with
/// a position ≥ -1.
pub fn read_resume(path: &Path) -> Option<(i64, i32)> {
    let bytes: [u8; RESUME_LEN] = std::fs::read(path).ok()?.try_into().ok()?;
    let p = i64::from_le_bytes(bytes[..8].try_into().ok()?);
    let session = i32::from_le_bytes(bytes[8..12].try_into().ok()?);
    (p >= -1).then_some((p, session))
}

/// Length of a resume file.
pub const RESUME_LEN: usize = 16;

/// Reads a file name the way [`status_path`] writes it: (stream, direction, pid).
pub fn parse_file_name(file_name: &str) -> Option<(String, BridgeDirection, u32)> {
    let body = file_name.strip_suffix(".bridge")?;
    parse_body(body)
}

/// Reads a file name the way [`resume_path`] writes it: (stream, direction, pid).
pub fn parse_resume_name(file_name: &str) -> Option<(String, BridgeDirection, u32)> {
    parse_body(file_name.strip_suffix(".resume")?)
}

fn parse_body(body: &str) -> Option<(String, BridgeDirection, u32)> {
    let (rest, pid) = body.rsplit_once('.')?;
    let (stream, dir) = rest.rsplit_once('.')?;
    let direction = match dir {
        "out" => BridgeDirection::Out,
        "in" => BridgeDirection::In,
        _ => return None,
    };
    if stream.is_empty()
        || stream.starts_with('.')
        || pid.is_empty()
        || !pid.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    Some((stream.to_owned(), direction, pid.parse().ok()?))
}

/// Writes `info` as its status file in `dir`, whole: a temporary file renamed over the old one.
pub fn write(dir: &Path, info: &BridgeInfo) -> std::io::Result<()> {
    let path = info.path(dir);
    let tmp = dir.join(format!(".{}.{}.{}.bridge.tmp", info.stream, info.direction.as_str(), info.pid));
    std::fs::write(&tmp, info.to_text())?;
    std::fs::rename(&tmp, &path)
}

/// Reads and validates the status file at `path` (named by [`status_path`]).
pub fn read(path: &Path) -> Result<BridgeInfo, String> {
    use std::io::Read;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let (stream, direction, pid) =
        parse_file_name(name).ok_or_else(|| format!("{}: not a bridge status file", path.display()))?;
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_FILE + 1).read_to_string(&mut text).map_err(|e| format!("{}: {e}", path.display()))?;
    if text.len() as u64 > MAX_FILE {
        return Err(format!("{}: longer than {MAX_FILE} bytes", path.display()));
    }
    let mut info = BridgeInfo::parse(&stream, direction, pid, &text)
        .ok_or_else(|| format!("{}: malformed bridge status", path.display()))?;
    info.alive = crate::sys::pid_alive(pid);
    Ok(info)
}

/// The bridges of one stream, as its status files in a directory say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamBridges {
    /// The running bridges and the status files dead ones left (until [`clean`]), by file name.
    pub bridges: Vec<BridgeInfo>,
    /// Status files of this stream that could not be read, and why.
    pub problems: Vec<String>,
}

/// Reads every bridge status file in `dir`, by stream name (sorted; each stream's files in file
/// name order). Read-only. Fails only when the directory itself cannot be read; a file that does
/// not parse is reported in [`StreamBridges::problems`].
pub fn scan(dir: &Path) -> std::io::Result<BTreeMap<String, StreamBridges>> {
    let mut out: BTreeMap<String, StreamBridges> = BTreeMap::new();
    for (path, stream, _, _) in bridge_files(dir, false)? {
        let entry = out.entry(stream).or_default();
        match read(&path) {
            Ok(b) => entry.bridges.push(b),
            Err(e) => entry.problems.push(e),
        }
    }
    Ok(out)
}

/// A bridge file [`clean`] removed or kept.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CleanedFile {
    /// The status or resume file.
    pub path: PathBuf,
    /// The process of the bridge that wrote it, as its name says.
    pub pid: u32,
    /// Removed (or, in a dry run, would be): its process is gone. Else kept: it runs.
    pub removed: bool,
}

impl std::fmt::Display for CleanedFile {
    /// Why it was removed or kept.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.removed {
            true => write!(f, "bridge status of a process (pid {}) that is gone", self.pid),
            false => write!(f, "bridge (pid {}) is running", self.pid),
        }
    }
}

/// Removes the status and resume files in `dir` of bridges whose process is gone; with
/// `dry_run`, only says which. Files of running bridges are kept and listed too (`removed` false);
/// a file that could not be removed (gone meanwhile, permission) is left out. Fails only when the
/// directory cannot be read.
pub fn clean(dir: &Path, dry_run: bool) -> std::io::Result<Vec<CleanedFile>> {
    let mut out = Vec::new();
    for (path, _, _, pid) in bridge_files(dir, true)? {
        let removed = !crate::sys::pid_alive(pid);
        if removed && !dry_run && std::fs::remove_file(&path).is_err() {
            continue;
        }
        out.push(CleanedFile { path, pid, removed });
    }
    Ok(out)
}

/// The bridge status files in `dir` (and with `resume`, the resume files), sorted by path, with
/// what their names say.
fn bridge_files(dir: &Path, resume: bool) -> std::io::Result<Vec<(PathBuf, String, BridgeDirection, u32)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let parsed = parse_file_name(name).or_else(|| resume.then(|| parse_resume_name(name)).flatten());
        if let Some((stream, direction, pid)) = parsed {
            out.push((entry.path(), stream, direction, pid));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BridgeInfo {
        let mut b = BridgeInfo::new(
            "md.eu",
            BridgeDirection::Out,
            "aeron:udp?endpoint=127.0.0.1:40123",
            1001,
            "/dev/shm/a b",
        );
        b.connected = true;
        b.messages = 7;
        b.bytes = 700;
        b.back_pressure = 2;
        b.dropped = 3;
        b.reconnects = 1;
        b.bad_positions = 2;
        b.source_losses = 3;
        b.source_position = 4096;
        b.resume_position = 4160;
        b.updated_ms = 1_700_000_000_000;
        b.push_loss(Loss { from: 64, to: 256, messages: Some(3), cause: LossCause::Dropped });
        b.push_loss(Loss { from: 512, to: 1024, messages: None, cause: LossCause::Gap });
        for (session, cause) in [
            (-7, shmlog::LossCause::JoinedLate),
            (9, shmlog::LossCause::Fault),
            (i32::MIN, shmlog::LossCause::SessionsMissed { sessions: u32::MAX }),
        ] {
            b.push_loss(Loss {
                from: 0,
                to: 96,
                messages: None,
                cause: LossCause::Source { session, cause },
            });
        }
        b.push_loss(Loss { from: 0, to: 0, messages: None, cause: LossCause::Upstream });
        b
    }

    #[test]
    fn a_status_reads_back_as_written() {
        let b = sample();
        let mut back = BridgeInfo::parse("md.eu", BridgeDirection::Out, b.pid, &b.to_text()).unwrap();
        back.alive = true;
        assert_eq!(back, b);
        let text = b.to_text();
        for line in ["loss 0 96 - source:-7:joined_late", "loss 0 0 - upstream", "source_losses 3"] {
            assert!(text.contains(line), "{line}: {text}");
        }
    }

    #[test]
    fn a_damaged_status_is_refused() {
        let text = sample().to_text();
        let cut = text.lines().filter(|l| !l.starts_with("bytes ")).collect::<Vec<_>>().join("\n");
        assert!(BridgeInfo::parse("s", BridgeDirection::In, 1, &cut).is_none(), "missing key");
        // An older writer's file, without the optional keys, still reads.
        let older = text
            .lines()
            .filter(|l| !l.starts_with("bad_positions ") && !l.starts_with("source_losses "))
            .collect::<Vec<_>>()
            .join("\n");
        let back = BridgeInfo::parse("s", BridgeDirection::In, 1, &older).expect("an older writer's file");
        assert_eq!((back.bad_positions, back.source_losses), (0, 0));
        for (bad, with) in [
            ("messages 7", "messages seven"),
            ("bad_positions 2", "bad_positions -2"),
            ("connected 1", "connected 2"),
            ("source_position 4096", "source_position -5"),
            ("loss 64 256 3 dropped", "loss 256 64 3 dropped"),
            ("loss 64 256 3 dropped", "loss 64 256 3 stolen"),
            ("loss 64 256 3 dropped", "loss 64 256 3 dropped extra"),
            ("source_losses 3", "source_losses -1"),
            ("source:-7:joined_late", "source:-7:joined_early"),
            ("source:-7:joined_late", "source:+7:joined_late"),
            ("source:-7:joined_late", "source:-07:joined_late"),
            ("source:-7:joined_late", "source::joined_late"),
            ("source:-7:joined_late", "source:-7:joined_late:1"),
            ("source:-7:joined_late", "source:2147483648:joined_late"),
            ("source:9:fault", "source:9:sessions_missed"),
            ("sessions_missed:4294967295", "sessions_missed:4294967296"),
            ("sessions_missed:4294967295", "sessions_missed:-1"),
            ("sessions_missed:4294967295", "sessions_missed:1:2"),
            ("upstream", "Upstream"),
        ] {
            assert!(text.contains(bad));
            assert!(
                BridgeInfo::parse("s", BridgeDirection::In, 1, &text.replace(bad, with)).is_none(),
                "{with}"
            );
        }
        let many = format!("{text}{}", "loss 1 2 - gap\n".repeat(MAX_LOSSES));
        assert!(BridgeInfo::parse("s", BridgeDirection::In, 1, &many).is_none(), "too many losses");
    }

    #[test]
    fn file_names_round_trip_and_others_are_not_ours() {
        let p = status_path(Path::new("/d"), "a.b", BridgeDirection::In, 42);
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(parse_file_name(name), Some(("a.b".into(), BridgeDirection::In, 42)));
        for other in
            ["a.log", "a.out.x.bridge", "a.up.1.bridge", ".out.1.bridge", ".a.out.1.bridge", "a.out..bridge"]
        {
            assert_eq!(parse_file_name(other), None, "{other}");
        }
    }

    #[test]
    fn written_files_are_read_and_oversized_ones_refused() {
        let dir = crate::testing::TempDir::new("bridge-status");
        let b = sample();
        write(dir.path(), &b).unwrap();
        let back = read(&b.path(dir.path())).unwrap();
        assert!(back.alive);
        assert_eq!(back.messages, 7);
        let big = status_path(dir.path(), "x", BridgeDirection::Out, 1);
        std::fs::write(&big, "channel a\n".repeat(10_000)).unwrap();
        assert!(read(&big).unwrap_err().contains("longer than"));
        let resume = resume_path(dir.path(), "x", BridgeDirection::In, 1);
        assert_eq!(parse_resume_name("x.in.1.resume"), Some(("x".into(), BridgeDirection::In, 1)));
        let mut good = 4160i64.to_le_bytes().to_vec();
        good.extend((-7i32).to_le_bytes());
        good.extend([0; 4]);
        std::fs::write(&resume, &good).unwrap();
        assert_eq!(read_resume(&resume), Some((4160, -7)));
        let mut negative = (-2i64).to_le_bytes().to_vec();
        negative.extend([0; 8]);
        for bad in [&negative[..], &[1, 2, 3], &[0; 9], &good[..12]] {
            std::fs::write(&resume, bad).unwrap();
            assert_eq!(read_resume(&resume), None, "{bad:?}");
        }
    }

    #[test]
    fn scan_groups_status_files_by_stream_and_clean_removes_only_the_dead() {
        let dir = crate::testing::TempDir::new("bridge-scan");
        let mut live = sample();
        live.stream = "a".into();
        write(dir.path(), &live).unwrap();
        let mut dead_child = std::process::Command::new("true").spawn().unwrap();
        let dead = dead_child.id();
        dead_child.wait().unwrap();
        let mut gone = BridgeInfo::new("b", BridgeDirection::In, "c", 1, "d");
        gone.pid = dead;
        write(dir.path(), &gone).unwrap();
        std::fs::write(resume_path(dir.path(), "b", BridgeDirection::In, dead), [0u8; RESUME_LEN]).unwrap();
        std::fs::write(status_path(dir.path(), "b", BridgeDirection::Out, dead), "junk").unwrap();
        std::fs::write(dir.path().join("b.log"), "not ours").unwrap();

        let found = scan(dir.path()).unwrap();
        assert_eq!(found.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(found["a"].bridges.len(), 1);
        assert!(found["a"].bridges[0].alive && found["a"].problems.is_empty());
        assert_eq!(found["b"].bridges.len(), 1);
        assert!(!found["b"].bridges[0].alive);
        assert_eq!(found["b"].problems.len(), 1, "{:?}", found["b"].problems);

        let dry = clean(dir.path(), true).unwrap();
        assert_eq!(dry.iter().filter(|c| c.removed).count(), 3, "{dry:?}");
        assert!(dry.iter().any(|c| !c.removed && c.pid == live.pid));
        assert!(
            resume_path(dir.path(), "b", BridgeDirection::In, dead).exists(),
            "a dry run removes nothing"
        );
        let done = clean(dir.path(), false).unwrap();
        assert_eq!(done, dry);
        assert!(done[0].to_string().contains("is running") || done[0].to_string().contains("is gone"));
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 2, "the live bridge's status and the log: {left:?}");
        assert!(clean(dir.path(), false).unwrap().iter().all(|c| !c.removed), "idempotent");
    }

    #[cfg(feature = "aeron")]
    #[test]
    fn the_resume_map_stores_what_a_read_of_the_file_sees() {
        let dir = crate::testing::TempDir::new("resume-map");
        let path = dir.path().join("s.out.1.resume");
        std::fs::write(&path, [0u8; RESUME_LEN]).unwrap();
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let map = crate::sys::ResumeMap::map(&file, RESUME_LEN).unwrap();
        map.store(-7i32 as u32 as i64, 4160);
        assert_eq!(read_resume(&path), Some((4160, -7)));
        std::fs::write(dir.path().join("short"), [0u8; 8]).unwrap();
        let short = std::fs::File::open(dir.path().join("short")).unwrap();
        assert!(crate::sys::ResumeMap::map(&short, RESUME_LEN).is_err());
        assert!(crate::sys::ResumeMap::map(&file, 8).is_err(), "two words or more");
    }
}
