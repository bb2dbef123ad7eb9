//! A run's shape and timeline (the *scenario*): which streams, which processes start when with
//! which settings, and what is done to them (kill, stop, continue, graceful close, `clean`,
//! corrupting a dead publisher's log). The random driver draws one from a seed; the same text
//! format is written to `scenario.log` and read back by `--scenario`, so any run can be replayed
//! with the same actions (timing approximate) and kept as a regression test.
//!
//! ```text
//! seed 0x2a
//! seconds 12
//! stream s0 concurrent=0 term=65536 mtu=1408 liveness_ms=30 hostile=0
//! at 0 spawn w0.1 writer stream=s0,rate=2000,burst=200
//! at 450 kill w0.1
//! at 500 spawn w0.2 writer stream=s0,rate=2000,burst=200
//! ```

use crate::prng::Rng;
use std::fmt::Write as _;

/// One stream of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSpec {
    pub name: String,
    /// Written by `ConcurrentPublication`s (any number of writer processes) instead of one
    /// exclusive `Publication` at a time.
    pub concurrent: bool,
    pub term: usize,
    pub mtu: usize,
    pub liveness_ms: u64,
    /// The controller may corrupt a dead publisher's log (past everything committed), so its
    /// readers meet a fault: the honest rules still hold, faults of that session are expected.
    pub hostile: bool,
}

impl StreamSpec {
    /// The settings a role of this stream is given (`term=..,mtu=..,liveness_ms=..`).
    pub fn settings(&self) -> String {
        format!(
            "term={},mtu={},liveness_ms={},concurrent={}",
            self.term, self.mtu, self.liveness_ms, self.concurrent as u8
        )
    }
}

/// What the controller does at a point of the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Starts process `proc` in `role` with `settings` (`key=value,...`).
    Spawn {
        proc: String,
        role: String,
        settings: String,
    },
    Kill(String),
    Stop(String),
    Cont(String),
    /// Graceful end: the process's stdin is closed; it closes its publication or subscription.
    Close(String),
    /// `shmlog::inspect::clean` on the stream directory, while everything runs.
    Clean,
    /// Writes a bad frame header at the tail of `stream`'s log if its publisher is dead.
    Corrupt(String),
    /// Retention by hand (`journal::purge`, what `shmlog journal purge` does): every recording
    /// of `stream` loses the segments wholly below the middle of what it holds, while its
    /// recorder records and persistent readers read it.
    Purge(String),
    /// `journal::detach` at the middle of every recording of `stream`: its start moves up as a
    /// purge's does, but the files stay (`shmlog journal detach`).
    Detach(String),
    /// `journal::attach` on every recording of `stream`: detached files still there come back.
    Attach(String),
    /// `journal::delete_detached` on every recording of `stream`: a later attach brings nothing.
    DeleteDetached(String),
    /// `journal::truncate` of the newest stopped recording of `stream` not cut yet, at the
    /// message start nearest three quarters of it (after asking at a position inside a message
    /// first, which must be refused).
    Truncate(String),
}

/// A whole run: streams and timeline (milliseconds from the start).
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub seed: u64,
    pub seconds: f64,
    pub streams: Vec<StreamSpec>,
    pub timeline: Vec<(u64, Action)>,
}

impl Scenario {
    pub fn stream(&self, name: &str) -> Option<&StreamSpec> {
        self.streams.iter().find(|s| s.name == name)
    }

    /// The text form (what `scenario.log` holds and `parse` reads).
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# shmlog-ledger scenario (replay: shmlog-ledger run --scenario FILE)");
        let _ = writeln!(s, "seed {:#x}", self.seed);
        let _ = writeln!(s, "seconds {}", self.seconds);
        for st in &self.streams {
            let _ = writeln!(
                s,
                "stream {} concurrent={} term={} mtu={} liveness_ms={} hostile={}",
                st.name, st.concurrent as u8, st.term, st.mtu, st.liveness_ms, st.hostile as u8
            );
        }
        for (t, a) in &self.timeline {
            let _ = match a {
                Action::Spawn { proc, role, settings } => {
                    writeln!(s, "at {t} spawn {proc} {role} {settings}")
                }
                Action::Kill(p) => writeln!(s, "at {t} kill {p}"),
                Action::Stop(p) => writeln!(s, "at {t} stop {p}"),
                Action::Cont(p) => writeln!(s, "at {t} cont {p}"),
                Action::Close(p) => writeln!(s, "at {t} close {p}"),
                Action::Clean => writeln!(s, "at {t} clean"),
                Action::Corrupt(st) => writeln!(s, "at {t} corrupt {st}"),
                Action::Purge(st) => writeln!(s, "at {t} purge {st}"),
                Action::Detach(st) => writeln!(s, "at {t} detach {st}"),
                Action::Attach(st) => writeln!(s, "at {t} attach {st}"),
                Action::DeleteDetached(st) => writeln!(s, "at {t} delete-detached {st}"),
                Action::Truncate(st) => writeln!(s, "at {t} truncate {st}"),
            };
        }
        s
    }

    /// Reads the text form; the error names the line.
    pub fn parse(text: &str) -> Result<Scenario, String> {
        let mut sc = Scenario { seed: 0, seconds: 10.0, streams: Vec::new(), timeline: Vec::new() };
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| format!("scenario line {}: {why}: {raw}", n + 1);
            let w: Vec<&str> = line.split_whitespace().collect();
            match w[0] {
                "seed" => {
                    sc.seed = parse_u64(w.get(1).copied().unwrap_or("")).ok_or_else(|| bad("bad seed"))?
                }
                "seconds" => {
                    sc.seconds = w.get(1).and_then(|v| v.parse().ok()).ok_or_else(|| bad("bad seconds"))?
                }
                "stream" => {
                    let kv = |k: &str| {
                        w[2..].iter().find_map(|x| x.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
                    };
                    let num = |k: &str| {
                        kv(k).and_then(|v| v.parse::<u64>().ok()).ok_or_else(|| bad(&format!("no {k}")))
                    };
                    sc.streams.push(StreamSpec {
                        name: w.get(1).ok_or_else(|| bad("no name"))?.to_string(),
                        concurrent: num("concurrent")? == 1,
                        term: num("term")? as usize,
                        mtu: num("mtu")? as usize,
                        liveness_ms: num("liveness_ms")?,
                        hostile: num("hostile")? == 1,
                    });
                }
                "at" => {
                    let t: u64 = w.get(1).and_then(|v| v.parse().ok()).ok_or_else(|| bad("bad time"))?;
                    let arg =
                        |i: usize| w.get(i).map(|s| s.to_string()).ok_or_else(|| bad("missing argument"));
                    let action = match w.get(2).copied() {
                        Some("spawn") => Action::Spawn {
                            proc: arg(3)?,
                            role: arg(4)?,
                            settings: w.get(5).unwrap_or(&"").to_string(),
                        },
                        Some("kill") => Action::Kill(arg(3)?),
                        Some("stop") => Action::Stop(arg(3)?),
                        Some("cont") => Action::Cont(arg(3)?),
                        Some("close") => Action::Close(arg(3)?),
                        Some("clean") => Action::Clean,
                        Some("corrupt") => Action::Corrupt(arg(3)?),
                        Some("purge") => Action::Purge(arg(3)?),
                        Some("detach") => Action::Detach(arg(3)?),
                        Some("attach") => Action::Attach(arg(3)?),
                        Some("delete-detached") => Action::DeleteDetached(arg(3)?),
                        Some("truncate") => Action::Truncate(arg(3)?),
                        _ => return Err(bad("unknown action")),
                    };
                    sc.timeline.push((t, action));
                }
                _ => return Err(bad("unknown line")),
            }
        }
        sc.timeline.sort_by_key(|(t, _)| *t);
        Ok(sc)
    }
}

/// `0x..` or decimal.
pub fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Settings of one logical process, kept across its restarts (each restart gets its own seed).
struct Actor {
    name: String,
    role: &'static str,
    settings: String,
    stream: usize,
    /// May be killed, stopped or closed at random.
    faults: bool,
}

/// Draws a run from `seed`: 1–3 streams (small terms, so laps, rotations and back pressure are
/// common; short liveness intervals, so kills matter within seconds), writers, readers of every
/// shape, recorders and replay-merge readers, and a timeline of faults over `seconds`.
pub fn generate(seed: u64, seconds: f64) -> Scenario {
    let mut rng = Rng::new(seed);
    let end_ms = (seconds * 1000.0) as u64;
    let nstreams = *rng.weighted(&[(3, 1usize), (4, 2), (2, 3)]);
    let mut streams = Vec::new();
    for i in 0..nstreams {
        let concurrent = rng.chance(0.3);
        let hostile = !concurrent && rng.chance(0.25);
        // A hostile stream's terms are large: a bad length word at a dead publisher's tail can
        // then claim up to a term of an untethered reader's buffer (review N6).
        let term = if hostile {
            1 << 20
        } else {
            *rng.weighted(&[(4, 64usize << 10), (3, 128 << 10), (2, 256 << 10), (1, 1 << 20)])
        };
        let mtu = (*rng.pick(&[1024usize, 1408, 4096, 8192])).min(term / 8);
        streams.push(StreamSpec {
            name: format!("s{i}"),
            concurrent,
            term,
            mtu,
            liveness_ms: rng.range(20, 51),
            hostile,
        });
    }
    let mut actors = Vec::new();
    let (mut writers, mut readers) = (0, 0);
    for (si, st) in streams.iter().enumerate() {
        let nw = if st.concurrent { rng.range(1, 4) } else { 1 };
        for _ in 0..nw {
            actors.push(Actor {
                name: format!("w{writers}"),
                role: "writer",
                settings: writer_settings(&mut rng, si, writers),
                stream: si,
                faults: true,
            });
            writers += 1;
        }
        let nr = rng.range(1, if nstreams == 1 { 5 } else { 4 });
        for _ in 0..nr {
            actors.push(Actor {
                name: format!("r{readers}"),
                role: "reader",
                settings: reader_settings(&mut rng, si, None),
                stream: si,
                faults: rng.chance(0.85),
            });
            readers += 1;
        }
        if rng.chance(0.5) {
            let tethered = rng.chance(0.7) as u8;
            actors.push(Actor {
                name: format!("c{si}"),
                role: "recorder",
                settings: format!("stream=s{si},tethered={tethered}"),
                stream: si,
                faults: rng.chance(0.6),
            });
            if rng.chance(0.5) {
                actors.push(Actor {
                    name: format!("m{si}"),
                    role: "reader",
                    settings: format!("stream=s{si},shape=merge,tethered=1,join=earliest,later=earliest,copy=0,speed=fast,limit=16"),
                    stream: si,
                    faults: rng.chance(0.5),
                });
            }
        }
    }
    if nstreams >= 2 && rng.chance(0.5) {
        let s = reader_settings(&mut rng, 0, Some("wait_any"));
        let faults = rng.chance(0.7);
        actors.push(Actor {
            name: format!("r{readers}"),
            role: "reader",
            settings: format!("{s},stream2=s1"),
            stream: 0,
            faults,
        });
    }

    let mut timeline = Vec::new();
    for (i, a) in actors.iter().enumerate() {
        let mut r = rng.fork(i as u64);
        let first = match (a.role, a.settings.contains("shape=merge")) {
            ("writer", _) => r.range(0, 400),
            (_, true) => r.range(1500, 3000),
            _ => r.range(0, 1200),
        };
        lifecycle(&mut r, a, &streams[a.stream], first, end_ms, &mut timeline);
    }
    let mut t = rng.range(500, 2500);
    while t < end_ms {
        timeline.push((t, Action::Clean));
        t += rng.range(1000, 4000);
    }
    timeline.sort_by_key(|(t, _)| *t);
    Scenario { seed, seconds, streams, timeline }
}

fn writer_settings(rng: &mut Rng, stream: usize, w: u64) -> String {
    let rate = *rng.pick(&[300u32, 2000, 8000, 20000]);
    let burst = *rng.pick(&[1u32, 20, 200, 2000]);
    let claims = *rng.pick(&[0u32, 1, 3]);
    format!("stream=s{stream},w={w},rate={rate},burst={burst},claims={claims}")
}

fn reader_settings(rng: &mut Rng, stream: usize, shape: Option<&str>) -> String {
    let drawn = *rng.weighted(&[
        (3, "poll"),
        (2, "controlled"),
        (2, "block"),
        (2, "blocking"),
        (2, "recv"),
        (1, "iter"),
        (1, "async"),
        (1, "stream"),
    ]);
    let shape = shape.unwrap_or(drawn);
    let tethered = rng.chance(0.65) as u8;
    let lapped = *rng.pick(&["oldest", "live"]);
    let join = *rng.weighted(&[(3, "earliest"), (2, "latest"), (2, "slowest"), (1, "position")]);
    let later = *rng.weighted(&[(9, "earliest"), (1, "latest")]);
    let copy = rng.chance(0.3) as u8;
    let speed = *rng.weighted(&[(3, "fast"), (2, "work"), (1, "slow")]);
    let limit = *rng.pick(&[1u32, 4, 16, 64]);
    format!(
        "stream=s{stream},shape={shape},tethered={tethered},lapped={lapped},join={join},later={later},copy={copy},speed={speed},limit={limit}"
    )
}

/// One actor's incarnations and faults from `start` to `end`.
fn lifecycle(rng: &mut Rng, a: &Actor, st: &StreamSpec, start: u64, end: u64, out: &mut Vec<(u64, Action)>) {
    let mut t = start;
    let mut inc = 1;
    while t < end {
        let proc = format!("{}.{inc}", a.name);
        out.push((
            t,
            Action::Spawn { proc: proc.clone(), role: a.role.into(), settings: a.settings.clone() },
        ));
        inc += 1;
        // Faults of this incarnation until it ends (or the run does).
        loop {
            t += rng.range(300, 4000);
            if t >= end || !a.faults {
                return;
            }
            let fault =
                *rng.weighted(&[(7, "kill"), (3, "stop"), (3, "longstop"), (3, "close"), (4, "none")]);
            match fault {
                "stop" | "longstop" => {
                    let d =
                        if fault == "stop" { rng.range(5, 30) } else { rng.range(st.liveness_ms * 3, 1500) };
                    out.push((t, Action::Stop(proc.clone())));
                    out.push((t + d, Action::Cont(proc.clone())));
                    t += d;
                    continue;
                }
                "none" => continue,
                _ => {}
            }
            out.push((
                t,
                if fault == "kill" { Action::Kill(proc.clone()) } else { Action::Close(proc.clone()) },
            ));
            // Writers always come back (a run without one tests little); readers may not.
            let never = if a.role == "writer" { 0 } else { 1 };
            let mut delay = *rng.weighted(&[(3, 0u64), (4, 1), (2, 2), (never, 3)]);
            delay = match delay {
                0 => rng.range(0, 50),
                1 => rng.range(50, 500),
                2 => rng.range(500, 3000),
                _ => end,
            };
            if fault == "kill" && a.role == "writer" && st.hostile && rng.chance(0.6) {
                // A dead publisher's log with a bad frame past its end: its readers meet a fault
                // with nobody to replace the session for a while.
                out.push((t + 5, Action::Corrupt(st.name.clone())));
                delay = delay.max(1200);
            }
            t += delay;
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_scenario_reads_back_as_itself_and_a_seed_is_a_run() {
        for seed in 0..20 {
            let sc = generate(seed, 15.0);
            assert!(!sc.streams.is_empty() && !sc.timeline.is_empty());
            let again = Scenario::parse(&sc.to_text()).unwrap();
            assert_eq!(again, sc, "seed {seed}");
            assert_eq!(generate(seed, 15.0), sc);
        }
        assert!(Scenario::parse("at x spawn").is_err());
        // With persistent readers and retention operations (every kind drawn in some seed).
        let mut kinds = std::collections::BTreeSet::new();
        for seed in 0..20 {
            let mut sc = generate(seed, 15.0);
            crate::persistent_plan::add(&mut sc);
            assert_eq!(Scenario::parse(&sc.to_text()).unwrap(), sc, "seed {seed}");
            kinds.extend(sc.timeline.iter().filter_map(|(_, a)| match a {
                Action::Purge(_) => Some("purge"),
                Action::Detach(_) => Some("detach"),
                Action::Attach(_) => Some("attach"),
                Action::DeleteDetached(_) => Some("delete-detached"),
                Action::Truncate(_) => Some("truncate"),
                _ => None,
            }));
        }
        assert_eq!(
            kinds.into_iter().collect::<Vec<_>>(),
            ["attach", "delete-detached", "detach", "purge", "truncate"]
        );
        assert_eq!(parse_u64("0x1f"), Some(31));
    }
}
