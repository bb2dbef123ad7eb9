//! Every figure of `shmlog stat` as OpenMetrics families, for `stat --openmetrics` and
//! `serve-metrics`: the streams of each directory (publisher, positions, counters, reader slots,
//! writers of concurrent logs), their readers (position, lag, losses, state), their bridges
//! (the status files' counters) and each journal (size, positions kept, retention, durable
//! readers). The names, types and units are declared once, in the tables below; `docs/cli.md`
//! lists them.

use crate::journal::{self, Summary};
use crate::openmetrics::{Exposition, Kind, Labels, Meta};
use crate::stat::{self, Stream};
use shmlog::inspect::{LogInfo, ReaderInfo, ReaderState};
use shmlog_bridge::status::{BridgeInfo, LossCause};
use std::path::PathBuf;

/// What one scrape read: each directory's streams and each journal's summary, or why not.
pub(crate) struct Snapshot {
    pub dirs: Vec<(PathBuf, Result<Vec<Stream>, shmlog::Error>)>,
    pub journals: Vec<(PathBuf, Result<Summary, shmlog::Error>)>,
}

impl Snapshot {
    /// Reads every directory and journal now (each named once, in the order given).
    pub(crate) fn take(dirs: &[PathBuf], journals: &[PathBuf]) -> Self {
        Snapshot {
            dirs: distinct(dirs).map(|d| (d.clone(), stat::streams(d))).collect(),
            journals: distinct(journals).map(|j| (j.clone(), journal::summary(j))).collect(),
        }
    }

    /// The first source that could not be read, and why.
    pub(crate) fn first_error(&self) -> Option<String> {
        let dirs = self.dirs.iter().filter_map(|(_, r)| r.as_ref().err());
        let journals = self.journals.iter().filter_map(|(_, r)| r.as_ref().err());
        dirs.chain(journals).next().map(ToString::to_string)
    }

    /// The exposition: every family, then `# EOF`.
    pub(crate) fn render(&self) -> String {
        let mut e = Exposition::default();
        for (dir, result) in &self.dirs {
            let d = dir.display().to_string();
            e.gauge(&DIR_UP, &[("dir", &d)], result.is_ok());
            if let Ok(streams) = result {
                e.gauge(&DIR_STREAMS, &[("dir", &d)], streams.len());
                for s in streams {
                    stream(&mut e, &d, s);
                }
            }
        }
        for (path, result) in &self.journals {
            let j = path.display().to_string();
            e.gauge(&JOURNAL_UP, &[("journal", &j)], result.is_ok());
            if let Ok(summary) = result {
                journal_summary(&mut e, &j, summary);
            }
        }
        e.finish()
    }
}

/// Each path once: a directory named twice would repeat its series, which the format forbids.
fn distinct(paths: &[PathBuf]) -> impl Iterator<Item = &PathBuf> {
    paths.iter().enumerate().filter(move |(i, p)| !paths[..*i].contains(p)).map(|(_, p)| p)
}

const fn gauge(name: &'static str, unit: Option<&'static str>, help: &'static str) -> Meta {
    Meta { name, kind: Kind::Gauge, unit, help }
}

const fn counter(name: &'static str, unit: Option<&'static str>, help: &'static str) -> Meta {
    Meta { name, kind: Kind::Counter, unit, help }
}

const BYTES: Option<&str> = Some("bytes");
const SECONDS: Option<&str> = Some("seconds");

static DIR_UP: Meta =
    gauge("shmlog_dir_up", None, "1 if the stream directory could be read at this scrape, else 0.");
static DIR_STREAMS: Meta = gauge(
    "shmlog_dir_streams",
    None,
    "Streams of the directory: with a log, a reader-slot file or bridge status files.",
);

static STREAM: Meta = Meta {
    name: "shmlog_stream",
    kind: Kind::Info,
    unit: None,
    help: "The session of the stream's current log: session and stream ids, single or concurrent writers.",
};
static STREAM_PROBLEMS: Meta = gauge(
    "shmlog_stream_problems",
    None,
    "Files of the stream that are not valid shmlog files, and bridge status files that do not parse (shmlog stat lists them).",
);
static LOG_SIZE: Meta = gauge("shmlog_stream_log_size_bytes", BYTES, "Length of the stream's log file.");
static PUBLISHER_ALIVE: Meta = gauge(
    "shmlog_stream_publisher_alive",
    None,
    "1 while the publisher process holds its lock on the log, 0 once it died.",
);
static MAPPED: Meta = gauge(
    "shmlog_stream_mapped_by_readers",
    None,
    "1 while a reader maps the log (shmlog clean keeps it), else 0.",
);
static START_TIME: Meta = gauge(
    "shmlog_stream_start_time_seconds",
    SECONDS,
    "When the session's log was created, since the Unix epoch.",
);
static TERM_LENGTH: Meta = gauge("shmlog_stream_term_length_bytes", BYTES, "Term length of the log.");
static WINDOW: Meta = gauge(
    "shmlog_stream_window_bytes",
    BYTES,
    "Flow-control window: how far the publisher may run ahead of its slowest tethered reader.",
);
static MTU: Meta = gauge("shmlog_stream_mtu_bytes", BYTES, "Largest frame of the log.");
static PAGE_SIZE: Meta = gauge("shmlog_stream_page_size_bytes", BYTES, "Page size the log was laid out for.");
static POSITION: Meta = gauge(
    "shmlog_stream_position_bytes",
    BYTES,
    "The publisher's position: bytes appended since the session began.",
);
static LIMIT: Meta = gauge(
    "shmlog_stream_limit_bytes",
    BYTES,
    "The publisher's limit as computed last (slowest reader plus window): it appends nothing past it.",
);
static END_POSITION: Meta = gauge(
    "shmlog_stream_end_position_bytes",
    BYTES,
    "Where the publisher closed the session (end of stream); absent while it is open.",
);
static BACK_PRESSURE: Meta = counter(
    "shmlog_stream_back_pressure_events",
    None,
    "Offers refused for back pressure or for want of a reader, in this session.",
);
static ROTATIONS: Meta =
    counter("shmlog_stream_rotations", None, "Term rotations of the log, in this session.");
static LIMIT_RECOMPUTES: Meta = counter(
    "shmlog_stream_limit_recomputes",
    None,
    "Times the publisher recomputed its limit, in this session.",
);
static READERS_EVICTED: Meta = counter(
    "shmlog_stream_readers_evicted",
    None,
    "Dead readers the publisher freed the slots of, in this session.",
);
static CONNECTED_READERS: Meta = gauge(
    "shmlog_stream_connected_readers",
    None,
    "Readers the publisher counted at its last limit computation.",
);
static IGNORED_POSITIONS: Meta = gauge(
    "shmlog_stream_ignored_reader_positions",
    None,
    "Reader positions past the publisher's that it ignored: stray words in the reader-slot file.",
);
static READER_SLOTS: Meta = gauge(
    "shmlog_stream_reader_slots",
    None,
    "Slots of the stream's reader-slot file (claimed ones are readers).",
);
static WRITER_ALIVE: Meta = gauge(
    "shmlog_stream_writer_alive",
    None,
    "Concurrent logs: 1 while the writer of this slot holds its lock, 0 once it died.",
);
static WRITER_PENDING: Meta = gauge(
    "shmlog_stream_writer_pending_position_bytes",
    BYTES,
    "Concurrent logs: where the writer is writing a frame; absent between messages.",
);

static READER: Meta = Meta {
    name: "shmlog_reader",
    kind: Kind::Info,
    unit: None,
    help: "A claimed reader slot and the session it reads (no session label while it reads none).",
};
static READER_STATE: Meta = Meta {
    name: "shmlog_reader_state",
    kind: Kind::StateSet,
    unit: None,
    help: "What the reader slot says: waiting for a session, active in one, or a word this version does not know.",
};
static READER_ALIVE: Meta =
    gauge("shmlog_reader_alive", None, "1 while the reader process holds its slot's lock, 0 once it died.");
static READER_POSITION: Meta =
    gauge("shmlog_reader_position_bytes", BYTES, "The reader's position in the session it reads.");
static READER_JOIN: Meta =
    gauge("shmlog_reader_join_position_bytes", BYTES, "Where the reader joined the session it reads.");
static READER_LAG: Meta = gauge(
    "shmlog_reader_lag_bytes",
    BYTES,
    "Publisher position minus reader position, for a reader of the current session.",
);
static READER_SLOWEST: Meta =
    gauge("shmlog_reader_slowest", None, "1 for the slowest live tethered reader of the stream, else 0.");
static READER_HOLDS_BACK: Meta = gauge(
    "shmlog_reader_holding_back",
    None,
    "1 if the reader is a whole window behind: the publisher can append nothing until it moves.",
);
static READER_UNTETHERED: Meta = gauge(
    "shmlog_reader_untethered",
    None,
    "1 for an untethered reader (never holds the publisher back; lapped instead), else 0.",
);
static READER_LOSSES: Meta = counter(
    "shmlog_reader_losses",
    None,
    "Times the untethered reader was lapped since it claimed its slot, each one loss report.",
);
static READER_LOST_BYTES: Meta =
    counter("shmlog_reader_lost_bytes", BYTES, "Stream bytes the untethered reader lost to being lapped.");

static BRIDGE: Meta = Meta {
    name: "shmlog_bridge",
    kind: Kind::Info,
    unit: None,
    help: "A bridge's status file: its Aeron channel, stream id and media driver directory.",
};
static BRIDGE_ALIVE: Meta = gauge(
    "shmlog_bridge_alive",
    None,
    "1 while the bridge process exists, 0 for a status file it left behind.",
);
static BRIDGE_CONNECTED: Meta = gauge(
    "shmlog_bridge_connected",
    None,
    "1 while the far side is there (out: a connected publication; in: an image), else 0.",
);
static BRIDGE_MESSAGES: Meta = counter("shmlog_bridge_messages", None, "Messages carried.");
static BRIDGE_BYTES: Meta = counter("shmlog_bridge_bytes", BYTES, "Payload bytes carried.");
static BRIDGE_BACK_PRESSURE: Meta =
    counter("shmlog_bridge_back_pressure_events", None, "Times the next hop was full and the bridge held.");
static BRIDGE_DROPPED: Meta =
    counter("shmlog_bridge_dropped_messages", None, "Messages dropped under the drop policy.");
static BRIDGE_RECONNECTS: Meta =
    counter("shmlog_bridge_reconnects", None, "Times the bridge lost its media driver and connected again.");
static BRIDGE_BAD_POSITIONS: Meta = counter(
    "shmlog_bridge_bad_position_messages",
    None,
    "In bridges: messages whose source position cannot be one (no gap measured to them).",
);
static BRIDGE_DUPLICATES: Meta = counter(
    "shmlog_bridge_duplicate_messages",
    None,
    "In bridges: messages received again and not carried twice.",
);
static BRIDGE_SOURCE_LOSSES: Meta = counter(
    "shmlog_bridge_source_losses",
    None,
    "Losses before the bridge: its reader's loss reports (out), or messages marked as following one (in).",
);
static BRIDGE_SOURCE_POSITION: Meta = gauge(
    "shmlog_bridge_source_position_bytes",
    BYTES,
    "Source-stream position where the last carried message starts; absent before the first.",
);
static BRIDGE_RESUME_POSITION: Meta = gauge(
    "shmlog_bridge_resume_position_bytes",
    BYTES,
    "Source-stream position just after the last carried message (where a restart resumes); absent before the first.",
);
static BRIDGE_UPDATED: Meta = gauge(
    "shmlog_bridge_last_update_time_seconds",
    SECONDS,
    "When the bridge last wrote its status file, since the Unix epoch.",
);
static BRIDGE_RECENT_LOSSES: Meta = gauge(
    "shmlog_bridge_recent_losses",
    None,
    "Losses among the most recent ones the status file keeps (at most 16), by cause: dropped, gap (in bridges), upstream (in), source (out).",
);

static JOURNAL_UP: Meta =
    gauge("shmlog_journal_up", None, "1 if the journal could be read at this scrape, else 0.");
static JOURNAL_DISK: Meta = gauge(
    "shmlog_journal_disk_usage_bytes",
    BYTES,
    "Disk space the journal's files take (its catalog included).",
);
static JOURNAL_SEGMENTS: Meta = gauge("shmlog_journal_segment_files", None, "Segment files of the journal.");
static JOURNAL_PROBLEMS: Meta =
    gauge("shmlog_journal_problems", None, "Catalog records of the journal that could not be read.");
static RETAIN_AGE: Meta = gauge(
    "shmlog_journal_retention_max_age_seconds",
    SECONDS,
    "The journal's retention: segments older than this are purged; absent for no limit.",
);
static RETAIN_BYTES: Meta = gauge(
    "shmlog_journal_retention_max_bytes",
    BYTES,
    "The journal's retention: bytes kept at most per recording; absent for no limit.",
);
static RETAIN_SEGMENTS: Meta = gauge(
    "shmlog_journal_retention_max_segments",
    None,
    "The journal's retention: segments kept at most per recording; absent for no limit.",
);
static JOURNAL_RECORDINGS: Meta =
    gauge("shmlog_journal_recordings", None, "Recordings of the stream in the journal.");
static JOURNAL_RECORDING: Meta = gauge(
    "shmlog_journal_recording_active",
    None,
    "1 while one of the stream's recordings is being recorded, else 0.",
);
static JOURNAL_HELD: Meta =
    gauge("shmlog_journal_held_bytes", BYTES, "Stream bytes the stream's recordings hold.");
static JOURNAL_OLDEST: Meta = gauge(
    "shmlog_journal_oldest_position_bytes",
    BYTES,
    "The oldest position the journal keeps of the stream, in the recording labelled.",
);
static JOURNAL_NEWEST: Meta = gauge(
    "shmlog_journal_newest_position_bytes",
    BYTES,
    "The newest position recorded of the stream, in the recording labelled.",
);
static DURABLE_POSITION: Meta = gauge(
    "shmlog_journal_reader_position_bytes",
    BYTES,
    "A durable reader's stored position, in the recording labelled; absent until it read something.",
);
static DURABLE_LAG: Meta = gauge(
    "shmlog_journal_reader_lag_bytes",
    BYTES,
    "A durable reader's lag behind the newest recorded position, when it reads the newest recording.",
);
static DURABLE_ALIVE: Meta =
    gauge("shmlog_journal_reader_alive", None, "1 while a live process holds the durable reader, else 0.");
static DURABLE_UPDATED: Meta = gauge(
    "shmlog_journal_reader_last_update_time_seconds",
    SECONDS,
    "When the durable reader's position was last stored, since the Unix epoch.",
);

/// Every family the tool writes, for the tests of its naming.
#[cfg(test)]
static ALL: &[&Meta] = &[
    &DIR_UP,
    &DIR_STREAMS,
    &STREAM,
    &STREAM_PROBLEMS,
    &LOG_SIZE,
    &PUBLISHER_ALIVE,
    &MAPPED,
    &START_TIME,
    &TERM_LENGTH,
    &WINDOW,
    &MTU,
    &PAGE_SIZE,
    &POSITION,
    &LIMIT,
    &END_POSITION,
    &BACK_PRESSURE,
    &ROTATIONS,
    &LIMIT_RECOMPUTES,
    &READERS_EVICTED,
    &CONNECTED_READERS,
    &IGNORED_POSITIONS,
    &READER_SLOTS,
    &WRITER_ALIVE,
    &WRITER_PENDING,
    &READER,
    &READER_STATE,
    &READER_ALIVE,
    &READER_POSITION,
    &READER_JOIN,
    &READER_LAG,
    &READER_SLOWEST,
    &READER_HOLDS_BACK,
    &READER_UNTETHERED,
    &READER_LOSSES,
    &READER_LOST_BYTES,
    &BRIDGE,
    &BRIDGE_ALIVE,
    &BRIDGE_CONNECTED,
    &BRIDGE_MESSAGES,
    &BRIDGE_BYTES,
    &BRIDGE_BACK_PRESSURE,
    &BRIDGE_DROPPED,
    &BRIDGE_RECONNECTS,
    &BRIDGE_BAD_POSITIONS,
    &BRIDGE_DUPLICATES,
    &BRIDGE_SOURCE_LOSSES,
    &BRIDGE_SOURCE_POSITION,
    &BRIDGE_RESUME_POSITION,
    &BRIDGE_UPDATED,
    &BRIDGE_RECENT_LOSSES,
    &JOURNAL_UP,
    &JOURNAL_DISK,
    &JOURNAL_SEGMENTS,
    &JOURNAL_PROBLEMS,
    &RETAIN_AGE,
    &RETAIN_BYTES,
    &RETAIN_SEGMENTS,
    &JOURNAL_RECORDINGS,
    &JOURNAL_RECORDING,
    &JOURNAL_HELD,
    &JOURNAL_OLDEST,
    &JOURNAL_NEWEST,
    &DURABLE_POSITION,
    &DURABLE_LAG,
    &DURABLE_ALIVE,
    &DURABLE_UPDATED,
];

/// Nanoseconds since the Unix epoch (a word of shared memory or a file: any value) as seconds.
fn seconds(ns: i64) -> f64 {
    ns as f64 / 1e9
}

fn stream(e: &mut Exposition, dir: &str, s: &Stream) {
    let l: &Labels = &[("dir", dir), ("stream", &s.name)];
    let file_problems = s.files.as_ref().map_or(0, |f| f.problems.len());
    e.gauge(&STREAM_PROBLEMS, l, file_problems + s.bridges.problems.len());
    if let Some(files) = &s.files {
        if let Some(log) = &files.log {
            log_figures(e, l, log);
        }
        if files.readers_path.is_some() {
            e.gauge(&READER_SLOTS, l, files.slot_count);
        }
        for r in &files.readers {
            reader(e, dir, &s.name, r);
        }
    }
    for b in &s.bridges.bridges {
        bridge(e, dir, &s.name, b);
    }
}

fn log_figures(e: &mut Exposition, l: &Labels, log: &LogInfo) {
    let (session, stream_id) = (log.session_id.to_string(), log.stream_id.to_string());
    let writers = if log.concurrent { "concurrent" } else { "single" };
    e.info(&STREAM, &[l, &[("session", &session), ("stream_id", &stream_id), ("writers", writers)]].concat());
    e.gauge(&LOG_SIZE, l, log.file_length);
    if log.concurrent {
        for w in &log.writers {
            let (slot, pid) = (w.slot.to_string(), w.pid.to_string());
            let wl = [l, &[("slot", &slot), ("pid", &pid)]].concat();
            e.gauge(&WRITER_ALIVE, &wl, w.alive);
            if let Some(p) = w.pending {
                e.gauge(&WRITER_PENDING, &wl, p);
            }
        }
    } else {
        let pid = log.publisher_pid.to_string();
        e.gauge(&PUBLISHER_ALIVE, &[l, &[("pid", &pid)]].concat(), log.publisher_alive);
    }
    e.gauge(&MAPPED, l, log.mapped_by_readers);
    let created = seconds(log.created_ns);
    e.gauge(&START_TIME, l, created);
    e.gauge(&TERM_LENGTH, l, log.term_length);
    e.gauge(&WINDOW, l, log.window);
    e.gauge(&MTU, l, log.mtu);
    e.gauge(&PAGE_SIZE, l, log.page_size);
    e.gauge(&POSITION, l, log.position);
    e.gauge(&LIMIT, l, log.limit);
    if let Some(eos) = log.eos_position {
        e.gauge(&END_POSITION, l, eos);
    }
    // The log's counters begin with its session: the log's creation is when they started.
    e.counter(&BACK_PRESSURE, l, log.back_pressure_events, Some(created));
    e.counter(&ROTATIONS, l, log.rotations, Some(created));
    e.counter(&LIMIT_RECOMPUTES, l, log.limit_recomputes, Some(created));
    e.counter(&READERS_EVICTED, l, log.readers_evicted, Some(created));
    e.gauge(&CONNECTED_READERS, l, log.connected_readers);
    e.gauge(&IGNORED_POSITIONS, l, log.ignored_positions);
}

fn reader(e: &mut Exposition, dir: &str, stream: &str, r: &ReaderInfo) {
    let (slot, pid) = (r.slot.to_string(), r.pid.to_string());
    let l: &Labels = &[("dir", dir), ("stream", stream), ("slot", &slot), ("pid", &pid)];
    match r.session_id {
        Some(session) => e.info(&READER, &[l, &[("session", &session.to_string())]].concat()),
        None => e.info(&READER, l),
    }
    let state = match r.state {
        ReaderState::Waiting => "waiting",
        ReaderState::Active => "active",
        _ => "unknown",
    };
    e.stateset(&READER_STATE, l, &["waiting", "active", "unknown"], state);
    e.gauge(&READER_ALIVE, l, r.alive);
    e.gauge(&READER_POSITION, l, r.position);
    e.gauge(&READER_JOIN, l, r.join_position);
    if let Some(lag) = r.lag {
        e.gauge(&READER_LAG, l, lag);
    }
    e.gauge(&READER_SLOWEST, l, r.slowest);
    e.gauge(&READER_HOLDS_BACK, l, r.holds_back);
    e.gauge(&READER_UNTETHERED, l, r.untethered);
    // The slot's loss counters begin when it is claimed.
    let claimed = Some(seconds(r.claimed_ns));
    e.counter(&READER_LOSSES, l, r.losses, claimed);
    e.counter(&READER_LOST_BYTES, l, r.lost_bytes, claimed);
}

fn bridge(e: &mut Exposition, dir: &str, stream: &str, b: &BridgeInfo) {
    let pid = b.pid.to_string();
    let l: &Labels = &[("dir", dir), ("stream", stream), ("direction", b.direction.as_str()), ("pid", &pid)];
    let aeron_stream_id = b.aeron_stream_id.to_string();
    let facts =
        [("channel", b.channel.as_str()), ("aeron_stream_id", &aeron_stream_id), ("aeron_dir", &b.aeron_dir)];
    e.info(&BRIDGE, &[l, &facts].concat());
    e.gauge(&BRIDGE_ALIVE, l, b.alive);
    e.gauge(&BRIDGE_CONNECTED, l, b.connected);
    e.counter(&BRIDGE_MESSAGES, l, b.messages, None);
    e.counter(&BRIDGE_BYTES, l, b.bytes, None);
    e.counter(&BRIDGE_BACK_PRESSURE, l, b.back_pressure, None);
    e.counter(&BRIDGE_DROPPED, l, b.dropped, None);
    e.counter(&BRIDGE_RECONNECTS, l, b.reconnects, None);
    e.counter(&BRIDGE_BAD_POSITIONS, l, b.bad_positions, None);
    e.counter(&BRIDGE_DUPLICATES, l, b.duplicates, None);
    e.counter(&BRIDGE_SOURCE_LOSSES, l, b.source_losses, None);
    if b.source_position >= 0 {
        e.gauge(&BRIDGE_SOURCE_POSITION, l, b.source_position);
    }
    if b.resume_position >= 0 {
        e.gauge(&BRIDGE_RESUME_POSITION, l, b.resume_position);
    }
    // Milliseconds of a file: any value; as seconds, a float is always finite.
    e.gauge(&BRIDGE_UPDATED, l, b.updated_ms as f64 / 1e3);
    for cause in ["dropped", "gap", "upstream", "source"] {
        let n = b.losses.iter().filter(|loss| loss_kind(loss.cause) == Some(cause)).count();
        e.gauge(&BRIDGE_RECENT_LOSSES, &[l, &[("cause", cause)]].concat(), n);
    }
}

/// A loss cause without its session (a label of few values).
fn loss_kind(cause: LossCause) -> Option<&'static str> {
    match cause {
        LossCause::Dropped => Some("dropped"),
        LossCause::Gap => Some("gap"),
        LossCause::Upstream => Some("upstream"),
        LossCause::Source { .. } => Some("source"),
        _ => None,
    }
}

fn journal_summary(e: &mut Exposition, j: &str, s: &Summary) {
    let l: &Labels = &[("journal", j)];
    e.gauge(&JOURNAL_DISK, l, s.disk_bytes);
    e.gauge(&JOURNAL_SEGMENTS, l, s.segments);
    e.gauge(&JOURNAL_PROBLEMS, l, s.problems.len());
    if let Some(age) = s.retention.max_age {
        e.gauge(&RETAIN_AGE, l, age.as_secs_f64());
    }
    if let Some(bytes) = s.retention.max_bytes {
        e.gauge(&RETAIN_BYTES, l, bytes);
    }
    if let Some(n) = s.retention.max_segments {
        e.gauge(&RETAIN_SEGMENTS, l, n);
    }
    for st in &s.streams {
        let l: &Labels = &[("journal", j), ("stream", &st.stream)];
        e.gauge(&JOURNAL_RECORDINGS, l, st.recordings);
        e.gauge(&JOURNAL_RECORDING, l, st.recording);
        e.gauge(&JOURNAL_HELD, l, st.bytes);
        let (oldest, newest) = (st.oldest.0.to_string(), st.newest.0.to_string());
        e.gauge(&JOURNAL_OLDEST, &[l, &[("recording", &oldest)]].concat(), st.oldest.1);
        e.gauge(&JOURNAL_NEWEST, &[l, &[("recording", &newest)]].concat(), st.newest.1);
    }
    for r in &s.readers {
        let l: &Labels = &[("journal", j), ("stream", &r.stream), ("reader", &r.name)];
        if let Some((id, position)) = r.position {
            e.gauge(&DURABLE_POSITION, &[l, &[("recording", &id.to_string())]].concat(), position);
        }
        if let Some(lag) = journal::reader_lag(s, r) {
            e.gauge(&DURABLE_LAG, l, lag);
        }
        e.gauge(&DURABLE_ALIVE, l, r.alive);
        if r.updated_unix_ns != 0 {
            e.gauge(&DURABLE_UPDATED, l, seconds(r.updated_unix_ns));
        }
    }
}

/// `shmlog stat --openmetrics`: one exposition of every directory and journal, or the first
/// error (as `stat` fails on a directory it cannot read).
pub(crate) fn print_once(dirs: &[PathBuf], journals: &[PathBuf]) -> Result<(), String> {
    let snapshot = Snapshot::take(dirs, journals);
    if let Some(e) = snapshot.first_error() {
        return Err(e);
    }
    print!("{}", snapshot.render());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_family_follows_the_naming_rules_once() {
        let mut seen = HashSet::new();
        for m in ALL {
            assert_eq!(m.naming_error(), None);
            assert!(m.name.starts_with("shmlog_"), "{}", m.name);
            assert!(seen.insert(m.name), "{} declared twice", m.name);
        }
        // Sample names must not collide with another family's: `x` info writes `x_info`,
        // a counter `x_total` and `x_created`.
        for m in ALL {
            let samples: &[&str] = match m.kind {
                Kind::Counter => &["_total", "_created"],
                Kind::Info => &["_info"],
                _ => &[],
            };
            for suffix in samples {
                assert!(!seen.contains(format!("{}{suffix}", m.name).as_str()), "{} clashes", m.name);
            }
        }
    }

    #[test]
    fn a_bridge_with_hostile_numbers_renders() {
        use shmlog_bridge::status::{BridgeDirection, Loss, StreamBridges};
        let mut b = BridgeInfo::new("s\"\\", BridgeDirection::In, "c\n", 1, "d");
        (b.updated_ms, b.bytes, b.source_position) = (u64::MAX, u64::MAX, i64::MIN);
        b.push_loss(Loss { from: 0, to: i64::MAX, messages: Some(u64::MAX), cause: LossCause::Gap });
        let mut bridges = StreamBridges::default();
        (bridges.bridges, bridges.problems) = (vec![b], vec!["bad".into()]);
        let stream = Stream { name: bridges.bridges[0].stream.clone(), files: None, bridges };
        let snapshot = Snapshot { dirs: vec![(PathBuf::from("/d"), Ok(vec![stream]))], journals: vec![] };
        let text = snapshot.render();
        assert!(
            text.contains("shmlog_bridge_bytes_total{dir=\"/d\",stream=\"s\\\"\\\\\",direction=\"in\""),
            "{text}"
        );
        assert!(text.contains("channel=\"c\\n\""), "{text}");
        assert!(text.contains("cause=\"gap\"} 1\n") && text.contains("shmlog_stream_problems{"), "{text}");
        assert!(!text.contains("shmlog_bridge_source_position_bytes{"), "-1 and below: none yet: {text}");
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn a_directory_named_twice_is_read_once_and_an_unreadable_one_is_down() {
        let missing = std::env::temp_dir().join(format!("shmlog-metrics-missing-{}", std::process::id()));
        let snapshot = Snapshot::take(&[missing.clone(), missing.clone()], std::slice::from_ref(&missing));
        assert_eq!(snapshot.dirs.len(), 1);
        assert!(snapshot.first_error().is_some());
        let text = snapshot.render();
        let d = missing.display();
        assert!(text.contains(&format!("shmlog_dir_up{{dir=\"{d}\"}} 0\n")), "{text}");
        assert!(text.contains(&format!("shmlog_journal_up{{journal=\"{d}\"}} 0\n")), "{text}");
    }
}
