//! `shmlog stat`: the inspection API (`shmlog::inspect` for the streams' files,
//! `shmlog_bridge::status` for the bridges' status files), printed for people or as JSON.

use crate::sys::stop_requested;
use serde_json::{json, Value};
use shmlog::inspect::{self, LogInfo, ReaderInfo, StreamInfo};
use shmlog_bridge::status::{self, BridgeDirection, BridgeInfo, StreamBridges};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One stream of a directory as `stat` shows it: the core's view of its log and reader slots
/// (`None` for a stream that has only bridge files) and its bridges' status files.
#[derive(Debug)]
pub(crate) struct Stream {
    pub name: String,
    pub files: Option<StreamInfo>,
    pub bridges: StreamBridges,
}

/// Every stream of `dir`, sorted by name: those with a log or reader-slot file, and those with
/// only bridge status files.
pub(crate) fn streams(dir: &Path) -> Result<Vec<Stream>, shmlog::Error> {
    let mut by_name: BTreeMap<String, Stream> = BTreeMap::new();
    for info in inspect::streams(dir)? {
        let name = info.name.clone();
        by_name.insert(name.clone(), Stream { name, files: Some(info), bridges: StreamBridges::default() });
    }
    let bridges = status::scan(dir).map_err(|source| shmlog::Error::Io {
        op: "read directory",
        path: dir.to_path_buf(),
        source,
    })?;
    for (name, b) in bridges {
        by_name
            .entry(name.clone())
            .or_insert_with(|| Stream { name, files: None, bridges: Default::default() })
            .bridges = b;
    }
    Ok(by_name.into_values().collect())
}

/// Rates computed between two snapshots.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct StreamRates {
    /// Publisher throughput, bytes per second.
    pub bytes_per_sec: f64,
    /// Back-pressure events per second.
    pub back_pressure_per_sec: f64,
}

/// What the previous snapshot saw, to turn counters into rates.
#[derive(Debug, Default)]
pub(crate) struct Previous {
    at: Option<Instant>,
    streams: HashMap<(String, i32), (i64, i64)>,
    readers: HashMap<(String, usize, i64, Option<i32>), i64>,
}

/// Rates of one snapshot, keyed like `Previous`.
#[derive(Debug, Default)]
pub(crate) struct Rates {
    streams: HashMap<String, StreamRates>,
    readers: HashMap<(String, usize), f64>,
}

impl Previous {
    /// Rates since the previous call (none the first time), and remembers `now` for the next.
    pub(crate) fn update(&mut self, list: &[Stream], now: Instant) -> Option<Rates> {
        let elapsed = self.at.map(|t| now.duration_since(t).as_secs_f64()).filter(|&s| s > 0.0);
        let mut rates = Rates::default();
        let mut streams = HashMap::new();
        let mut readers = HashMap::new();
        for st in list.iter().filter_map(|s| s.files.as_ref()) {
            if let Some(log) = &st.log {
                let key = (st.name.clone(), log.session_id);
                if let (Some(secs), Some(&(pos, bp))) = (elapsed, self.streams.get(&key)) {
                    rates.streams.insert(
                        st.name.clone(),
                        StreamRates {
                            // Wrapping: every word here comes from shared memory (a forged
                            // one must not panic a debug build), and counters wrap.
                            bytes_per_sec: log.position.wrapping_sub(pos) as f64 / secs,
                            back_pressure_per_sec: log.back_pressure_events.wrapping_sub(bp) as f64 / secs,
                        },
                    );
                }
                streams.insert(key, (log.position, log.back_pressure_events));
            }
            for r in &st.readers {
                let key = (st.name.clone(), r.slot, r.pid, r.session_id);
                if let (Some(secs), Some(&pos)) = (elapsed, self.readers.get(&key)) {
                    rates
                        .readers
                        .insert((st.name.clone(), r.slot), r.position.wrapping_sub(pos) as f64 / secs);
                }
                readers.insert(key, r.position);
            }
        }
        self.at = Some(now);
        self.streams = streams;
        self.readers = readers;
        elapsed.map(|_| rates)
    }
}

/// How `stat` prints a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// For people.
    Text,
    /// One JSON object per snapshot.
    Json,
    /// The OpenMetrics text format, once (`metrics.rs`).
    OpenMetrics,
}

/// `shmlog stat`: prints every stream of each directory once, or every `watch` seconds until
/// Ctrl-C.
pub(crate) fn run(
    dirs: &[PathBuf],
    watch: Option<f64>,
    format: Format,
    journals: &[PathBuf],
) -> Result<(), String> {
    match format {
        Format::OpenMetrics => return crate::metrics::print_once(dirs, journals),
        Format::Json if dirs.len() > 1 => {
            return Err("--json shows one --dir (run it once per directory, or use --openmetrics)".into())
        }
        _ => {}
    }
    let mut previous: Vec<Previous> = dirs.iter().map(|_| Previous::default()).collect();
    let started = Instant::now();
    loop {
        let summaries = journals
            .iter()
            .map(|j| crate::journal::summary(j))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        if format == Format::Text && watch.is_some() {
            println!("--- {:.1} s ---", started.elapsed().as_secs_f64());
        }
        for (i, (dir, previous)) in dirs.iter().zip(&mut previous).enumerate() {
            if i > 0 && format == Format::Text {
                println!();
            }
            let list = streams(dir).map_err(|e| e.to_string())?;
            let rates = previous.update(&list, Instant::now());
            if format == Format::Json {
                let mut doc: Value =
                    serde_json::from_str(&stat_json(dir, &list, rates.as_ref())).unwrap_or(Value::Null);
                doc["journals"] = summaries.iter().map(crate::journal::summary_json).collect();
                println!("{doc}");
            } else {
                print!("{}", stat_text(dir, &list, rates.as_ref()));
            }
        }
        if format == Format::Text {
            for s in &summaries {
                print!("{}", crate::journal::summary_text(s));
            }
        }
        let Some(period) = watch else { return Ok(()) };
        let until = Instant::now() + Duration::from_secs_f64(period.max(0.05));
        while Instant::now() < until {
            if stop_requested() {
                return Ok(());
            }
            std::thread::sleep(
                Duration::from_millis(20).min(until.saturating_duration_since(Instant::now())),
            );
        }
        if stop_requested() {
            return Ok(());
        }
    }
}

/// Bytes for people: "16 MiB", "48.0 MiB", "4 KiB", "100 B".
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = "B";
    for u in UNITS {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    if v == v.trunc() {
        format!("{v:.0} {unit}")
    } else {
        format!("{v:.1} {unit}")
    }
}

fn age(created_ns: i64) -> String {
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
    let secs = now.saturating_sub(created_ns) as f64 / 1e9;
    if secs < 0.0 {
        "in the future".to_owned()
    } else if secs < 120.0 {
        format!("{secs:.1} s ago")
    } else if secs < 7200.0 {
        format!("{:.1} min ago", secs / 60.0)
    } else {
        format!("{:.1} h ago", secs / 3600.0)
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The text report.
pub(crate) fn stat_text(dir: &Path, list: &[Stream], rates: Option<&Rates>) -> String {
    let mut s = String::new();
    let n = list.len();
    let _ = writeln!(s, "{}: {n} stream{}", dir.display(), if n == 1 { "" } else { "s" });
    for stream in list {
        let _ = writeln!(s, "\nstream {}", stream.name);
        match &stream.files {
            Some(st) => files_text(&mut s, st, rates),
            None => {
                let _ = writeln!(s, "  log         none (no publisher has this stream open)");
            }
        }
        for b in &stream.bridges.bridges {
            bridge_text(&mut s, b);
        }
        for p in &stream.bridges.problems {
            let _ = writeln!(s, "  PROBLEM     {p}");
        }
    }
    s
}

/// A stream's log and reader slots.
fn files_text(s: &mut String, st: &StreamInfo, rates: Option<&Rates>) {
    {
        match &st.log {
            Some(log) => log_text(s, log, rates.and_then(|r| r.streams.get(&st.name))),
            None => {
                let _ = writeln!(s, "  log         none (no publisher has this stream open)");
            }
        }
        for p in &st.problems {
            let _ = writeln!(s, "  PROBLEM     {p}");
        }
        if let Some(path) = &st.readers_path {
            let live = st.readers.iter().filter(|r| r.alive).count();
            let _ = writeln!(
                s,
                "  readers     {} claimed ({live} live) of {} slots in {}",
                st.readers.len(),
                st.slot_count,
                path.display()
            );
        }
        if !st.readers.is_empty() {
            let _ = writeln!(
                s,
                "    {:>4} {:>8} {:>5} {:>8} {:>10} {:>14} {:>12} {:>12} {:>9}  note",
                "slot", "pid", "alive", "state", "session", "position", "lag", "join", "MB/s"
            );
            for r in &st.readers {
                let rate = rates.and_then(|x| x.readers.get(&(st.name.clone(), r.slot)));
                reader_text(s, r, rate.copied());
            }
        }
    }
}

fn bridge_text(s: &mut String, b: &BridgeInfo) {
    let state = match (b.alive, b.connected) {
        (false, _) => "GONE (status left by a dead bridge; `shmlog clean` removes it)",
        (true, true) => "connected",
        (true, false) => "NOT CONNECTED (far side absent, or driver lost)",
    };
    let _ = writeln!(
        s,
        "  bridge {:<4} pid {} {state}\n    channel   {} stream {} (driver {})",
        b.direction.as_str(),
        b.pid,
        b.channel,
        b.aeron_stream_id,
        b.aeron_dir
    );
    let _ = writeln!(
        s,
        "    carried   {} messages, {}, last at source position {}; back pressure {}, dropped {}, \
         reconnects {}, updated {}",
        b.messages,
        bytes(b.bytes),
        b.source_position,
        b.back_pressure,
        b.dropped,
        b.reconnects,
        // A status file's time is not trusted: clamp it before scaling.
        age(i64::try_from(b.updated_ms).unwrap_or(i64::MAX).saturating_mul(1_000_000))
    );
    if b.bad_positions > 0 {
        let _ = writeln!(
            s,
            "    BAD       {} messages without a valid source position (no gap measured to them)",
            b.bad_positions
        );
    }
    if b.duplicates > 0 {
        let _ = writeln!(s, "    AGAIN     {} messages received again and not carried twice", b.duplicates);
    }
    if b.source_losses > 0 {
        let what = match b.direction {
            BridgeDirection::Out => "reported by its reader of the local stream",
            _ => "marked by the out bridge (see its status on the source host)",
        };
        let _ = writeln!(s, "    LOST      {} losses before the bridge, {what}", b.source_losses);
    }
    for l in &b.losses {
        if let status::LossCause::Source { session, cause: shmlog::LossCause::SessionsMissed { sessions } } =
            l.cause
        {
            let _ = writeln!(
                s,
                "    LOST      up to {sessions} whole source session(s), ended unread before session {session}"
            );
            continue;
        }
        let n = l.messages.map_or_else(|| "unknown number of".to_owned(), |n| n.to_string());
        let _ =
            writeln!(s, "    LOST      {n} messages at source positions [{}, {}): {}", l.from, l.to, l.cause);
    }
}

fn log_text(s: &mut String, log: &LogInfo, rates: Option<&StreamRates>) {
    let _ = writeln!(s, "  log         {} ({})", log.path.display(), bytes(log.file_length));
    if log.concurrent {
        let alive = log.writers.iter().filter(|w| w.alive).count();
        let _ =
            writeln!(s, "  writers     {alive} alive of {} slots used (concurrent log)", log.writers.len());
        for w in &log.writers {
            let pending = w.pending.map_or_else(String::new, |p| format!(", writing at {p}"));
            let _ = writeln!(
                s,
                "    writer {:<3} pid {} {}{pending}",
                w.slot,
                w.pid,
                if w.alive { "alive" } else { "dead" }
            );
        }
    } else {
        let _ = writeln!(
            s,
            "  publisher   pid {} {}",
            log.publisher_pid,
            if log.publisher_alive { "alive" } else { "DEAD" }
        );
    }
    let _ = writeln!(
        s,
        "  session     {:#010x}, stream id {:#010x}, created {}",
        log.session_id,
        log.stream_id,
        age(log.created_ns)
    );
    let _ = writeln!(
        s,
        "  geometry    term {}, window {}, mtu {}, page {}",
        bytes(log.term_length as u64),
        bytes(log.window as u64),
        bytes(log.mtu as u64),
        bytes(log.page_size as u64)
    );
    let eos = log.eos_position.map_or_else(|| "-".to_owned(), |p| p.to_string());
    let _ = writeln!(s, "  position    {} (limit {}, end of stream {eos})", log.position, log.limit);
    let _ = writeln!(
        s,
        "  counters    back-pressure events {}, rotations {}, limit recomputes {}, readers evicted {}, \
         connected readers {}",
        log.back_pressure_events,
        log.rotations,
        log.limit_recomputes,
        log.readers_evicted,
        log.connected_readers
    );
    if log.ignored_positions > 0 {
        let _ = writeln!(
            s,
            "  WARNING     {} reader position(s) past the publisher's were ignored: a process wrote \
             stray words into the stream's reader-slot file",
            log.ignored_positions,
        );
    }
    if let Some(r) = rates {
        let _ = writeln!(
            s,
            "  rates       {:.3} MB/s, {:.1} back-pressure events/s",
            r.bytes_per_sec / 1e6,
            r.back_pressure_per_sec
        );
    }
}

fn reader_text(s: &mut String, r: &ReaderInfo, rate: Option<f64>) {
    let session = r.session_id.map_or_else(|| "-".to_owned(), |v| format!("{v:#010x}"));
    let lag = r.lag.map_or_else(|| "-".to_owned(), |v| v.to_string());
    let rate = rate.map_or_else(|| "-".to_owned(), |v| format!("{:.3}", v / 1e6));
    let mut note = String::new();
    if r.holds_back {
        note.push_str("HOLDING BACK THE PUBLISHER (a window behind)");
    } else if r.slowest {
        note.push_str("slowest");
    }
    if r.untethered {
        // Never holds the publisher back; its losses are kept in its slot.
        note.push_str(&format!(
            "untethered, lapped {} time(s), {} lost",
            r.losses,
            bytes(r.lost_bytes.max(0) as u64)
        ));
    }
    if !r.alive {
        if !note.is_empty() {
            note.push_str("; ");
        }
        note.push_str("dead: slot freed when the publisher next checks");
    }
    let _ = writeln!(
        s,
        "    {:>4} {:>8} {:>5} {:>8} {:>10} {:>14} {:>12} {:>12} {:>9}  {note}",
        r.slot,
        r.pid,
        yes_no(r.alive),
        r.state.to_string(),
        session,
        r.position,
        lag,
        r.join_position,
        rate
    );
}

/// The JSON report: one object (serde_json writes non-finite rates as `null`).
pub(crate) fn stat_json(dir: &Path, list: &[Stream], rates: Option<&Rates>) -> String {
    let streams: Vec<Value> = list
        .iter()
        .map(|stream| {
            let bridges = stream.bridges.bridges.iter().map(bridge_json).collect::<Vec<_>>();
            let Some(st) = &stream.files else {
                return json!({
                    "name": stream.name,
                    "log": Value::Null,
                    "readers_path": Value::Null,
                    "slot_count": 0,
                    "readers": [],
                    "problems": [],
                    "bridges": bridges,
                    "bridge_problems": stream.bridges.problems,
                });
            };
            let log = st.log.as_ref().map(|l| log_json(l, rates.and_then(|r| r.streams.get(&st.name))));
            let readers: Vec<Value> = st
                .readers
                .iter()
                .map(|r| {
                    reader_json(r, rates.and_then(|x| x.readers.get(&(st.name.clone(), r.slot))).copied())
                })
                .collect();
            json!({
                "name": st.name,
                "log": log,
                "readers_path": st.readers_path.as_ref().map(|p| p.display().to_string()),
                "slot_count": st.slot_count,
                "readers": readers,
                "problems": st.problems.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
                "bridges": bridges,
                "bridge_problems": stream.bridges.problems,
            })
        })
        .collect();
    json!({ "dir": dir.display().to_string(), "streams": streams }).to_string()
}

fn bridge_json(b: &BridgeInfo) -> Value {
    json!({
        "direction": b.direction.as_str(),
        "pid": b.pid,
        "alive": b.alive,
        "channel": b.channel,
        "aeron_stream_id": b.aeron_stream_id,
        "aeron_dir": b.aeron_dir,
        "connected": b.connected,
        "messages": b.messages,
        "bytes": b.bytes,
        "back_pressure": b.back_pressure,
        "dropped": b.dropped,
        "reconnects": b.reconnects,
        "bad_positions": b.bad_positions,
        "duplicates": b.duplicates,
        "source_losses": b.source_losses,
        "source_position": b.source_position,
        "resume_position": b.resume_position,
        "updated_ms": b.updated_ms,
        "losses": b.losses.iter().map(|l| json!({
            "from": l.from,
            "to": l.to,
            "messages": l.messages,
            "cause": l.cause.token(),
        })).collect::<Vec<_>>(),
    })
}

fn log_json(l: &LogInfo, rates: Option<&StreamRates>) -> Value {
    json!({
        "path": l.path.display().to_string(),
        "file_length": l.file_length,
        "name": l.name,
        "publisher_pid": l.publisher_pid,
        "publisher_alive": l.publisher_alive,
        "mapped_by_readers": l.mapped_by_readers,
        "session_id": l.session_id,
        "stream_id": l.stream_id,
        "created_ns": l.created_ns,
        "term_length": l.term_length,
        "window": l.window,
        "mtu": l.mtu,
        "page_size": l.page_size,
        "position": l.position,
        "limit": l.limit,
        "eos_position": l.eos_position,
        "back_pressure_events": l.back_pressure_events,
        "rotations": l.rotations,
        "limit_recomputes": l.limit_recomputes,
        "readers_evicted": l.readers_evicted,
        "connected_readers": l.connected_readers,
        "ignored_positions": l.ignored_positions,
        "concurrent": l.concurrent,
        "writers": l.writers.iter().map(|w| json!({
            "slot": w.slot,
            "pid": w.pid,
            "alive": w.alive,
            "pending": w.pending,
        })).collect::<Vec<_>>(),
        "bytes_per_sec": rates.map(|r| r.bytes_per_sec),
        "back_pressure_per_sec": rates.map(|r| r.back_pressure_per_sec),
    })
}

fn reader_json(r: &ReaderInfo, rate: Option<f64>) -> Value {
    json!({
        "slot": r.slot,
        "pid": r.pid,
        "alive": r.alive,
        "state": r.state.to_string(),
        "session_id": r.session_id,
        "position": r.position,
        "join_position": r.join_position,
        "claimed_ns": r.claimed_ns,
        "lag": r.lag,
        "slowest": r.slowest,
        "holds_back": r.holds_back,
        "untethered": r.untethered,
        "losses": r.losses,
        "lost_bytes": r.lost_bytes,
        "bytes_per_sec": rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bridge_status_with_hostile_numbers_still_prints() {
        let mut b = BridgeInfo::new("s", BridgeDirection::In, "c", 1, "d");
        b.updated_ms = u64::MAX;
        b.bytes = u64::MAX;
        b.losses.push(status::Loss {
            from: 0,
            to: i64::MAX,
            messages: Some(u64::MAX),
            cause: status::LossCause::Gap,
        });
        let mut s = String::new();
        bridge_text(&mut s, &b);
        assert!(s.contains("in the future") && s.contains("LOST"), "{s}");
        assert!(bridge_json(&b)["updated_ms"].as_u64() == Some(u64::MAX));
    }

    #[test]
    fn losses_before_the_bridge_are_shown_with_their_source_session() {
        use shmlog_bridge::status::{Loss, LossCause};
        let mut b = BridgeInfo::new("s", BridgeDirection::Out, "c", 1, "d");
        b.source_losses = 2;
        let source = |session, cause| LossCause::Source { session, cause };
        b.push_loss(Loss {
            from: 0,
            to: 4096,
            messages: None,
            cause: source(7, shmlog::LossCause::JoinedLate),
        });
        let missed = shmlog::LossCause::SessionsMissed { sessions: 3 };
        b.push_loss(Loss { from: 0, to: 0, messages: None, cause: source(9, missed) });
        let mut s = String::new();
        bridge_text(&mut s, &b);
        for line in [
            "2 losses before the bridge, reported by its reader of the local stream",
            "[0, 4096): source session 7",
            "up to 3 whole source session(s), ended unread before session 9",
        ] {
            assert!(s.contains(line), "{line}: {s}");
        }
        let json = bridge_json(&b);
        assert_eq!(json["source_losses"].as_u64(), Some(2));
        assert_eq!(json["losses"][1]["cause"].as_str(), Some("source:9:sessions_missed:3"));
    }

    /// The review's N7 d: positions, counters and creation times are words of shared memory;
    /// forged ones made the rates and ages overflow (a panic in debug builds, where this test
    /// runs with `cargo test`).
    #[test]
    fn forged_words_do_not_overflow_rates_or_ages() {
        let dir = std::env::temp_dir().join(format!("shmlog-stat-forged-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut p = shmlog::Publication::builder("s").dir(&dir).term_length(64 * 1024).create().unwrap();
        let _sub = shmlog::Subscription::builder("s").dir(&dir).open().unwrap();
        assert!(p.is_connected());
        p.offer(b"x").unwrap();
        let forged = |min: bool| {
            let mut list = streams(&dir).unwrap();
            let files = list[0].files.as_mut().unwrap();
            let v = if min { i64::MIN } else { i64::MAX };
            let log = files.log.as_mut().unwrap();
            (log.position, log.back_pressure_events, log.created_ns) = (v, v, v);
            files.readers[0].position = v;
            list
        };
        let mut previous = Previous::default();
        let t0 = Instant::now();
        assert!(previous.update(&forged(true), t0).is_none());
        let rates = previous.update(&forged(false), t0 + Duration::from_secs(1)).unwrap();
        assert_eq!(rates.streams["s"].bytes_per_sec, -1.0, "wrapped: MAX - MIN is -1");
        let mut text = String::new();
        log_text(&mut text, forged(true)[0].files.as_ref().unwrap().log.as_ref().unwrap(), None);
        assert!(text.contains("h ago"), "{text}");
        drop((p, _sub));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bytes_are_human() {
        assert_eq!(bytes(100), "100 B");
        assert_eq!(bytes(4096), "4 KiB");
        assert_eq!(bytes(16 << 20), "16 MiB");
        assert_eq!(bytes(3 * (16 << 20) + 4096), "48.0 MiB");
    }
}
