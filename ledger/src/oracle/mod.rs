//! The oracle: what every process of a run may have seen, given what every writer committed.
//! Checked after every process of the run has ended, from the event files alone. Rules (the
//! ids name them in reports; `docs/reliability.md` states them as the project's promises):
//!
//! - **R0** no process crashed (`R0.crash`) or failed to open (`R0.start`); no fault outside a
//!   session the controller corrupted; no receive shape broke a documented promise the reader
//!   could check itself (`R0.api`: `bad` lines).
//! - **R1** whole and genuine: every delivered message checks by content, and is an attempt its
//!   writer committed (or may have: the one after its last line, if it was killed).
//! - **R2** exactly once, in order: no message twice per reader; positions increase within a
//!   session; each writer's sequence numbers increase.
//! - **R3** one total order: a message's end position is the same for every reader and its
//!   writer.
//! - **R4** nothing silently missed: over a reader's time in a session, every committed message
//!   is delivered or inside a loss it was told of; whole sessions skipped are reported; a
//!   tethered reader that existed when a session began loses nothing of it (`R4.late`).
//! - **R5** the end of a session is seen: `closed` before the next session, never a message of a
//!   closed session, `closed` within a bound of the session's end, a fault and a `Closed`
//!   returned once (not again and again: a spin).
//! - **R6** nobody is held by the dead: no back pressure long after the last tethered reader
//!   died, no commit long after the last reader of any kind was gone.
//! - **R7** bounded resources: descriptors (`R7.fds`), RSS (`R7.rss`) and heap (`R7.heap`, at
//!   exit and at a fault); no file left after `clean`; no empty catalog records beyond one per
//!   recorder.
//! - **R8** recordings: every recording replays genuine messages, exactly what tethered readers
//!   delivered over its range; a tethered recorder never splits a session, lags or loses; a
//!   recording that starts after a gap follows a loss its recorder was told of; no recorder
//!   stops on an error (`R8.failed`: a full catalog, a failed write). The operator's operations
//!   on recordings (`retention`): an attach brings back exactly what was detached and nothing
//!   after a purge or a deletion of the detached files (`R8.attach`); the catalog ends where the
//!   last operation left each recording (`R8.retained`); a truncation inside a message is
//!   refused, and nothing past a cut is replayed (`R8.truncate`).
//! - **P** persistent readers, across the incarnations of one durable name (`persistent`): at
//!   least once (`P.missed`: anything not delivered lies in a `Purged`/`NotRecorded` loss), in
//!   order (`P.order`), again only the tail not yet stored (`P.redelivered`), and no other loss
//!   (`P.cause`: `Purged` only for a session purged or detached by then).

pub mod model;

mod delivery;
mod persistent;
mod resources;
mod retention;
mod timing;

pub use timing::{closed_bound_us, held_bound_us};

use model::{Attempt, Ledger, Src};
use std::collections::{BTreeMap, HashMap};

/// One broken rule, with the events that show it.
#[derive(Clone, Debug)]
pub struct Failure {
    pub rule: &'static str,
    pub what: String,
    pub evidence: Vec<String>,
}

/// What the oracle found, and how much it looked at.
#[derive(Debug, Default)]
pub struct Report {
    pub failures: Vec<Failure>,
    pub stats: Stats,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub processes: usize,
    pub sessions: usize,
    pub attempts: usize,
    pub committed: usize,
    pub deliveries: usize,
    pub losses: usize,
    pub recordings: usize,
}

impl Report {
    /// Rules broken, each once, in order.
    pub fn rules(&self) -> Vec<&'static str> {
        let mut r: Vec<_> = self.failures.iter().map(|f| f.rule).collect();
        r.sort();
        r.dedup();
        r
    }

    pub fn broke(&self, rule: &str) -> bool {
        self.failures.iter().any(|f| f.rule == rule)
    }
}

/// A message's place: start and end position, writer incarnation and sequence number.
pub type Span = (i64, i64, u32, u64);

/// A session of a stream, as its writers' files tell it.
#[derive(Clone, Debug)]
pub struct Session {
    pub stream: String,
    pub id: i32,
    /// No earlier than this did the session begin (its first writer's `creating` line)...
    pub begin_lo: i64,
    /// ...and no later than this (its first writer's `start` line).
    pub begin_hi: i64,
    /// When its last writer process ended (`None` if one never did).
    pub end_t: Option<i64>,
    pub writers: Vec<usize>,
}

/// A committed message: session, start and end position, writer (index into `writers`).
#[derive(Clone, Copy, Debug)]
pub struct Committed {
    pub session: i32,
    pub start: i64,
    pub end: i64,
}

/// What the rules share: sessions in order, committed messages, known positions.
#[derive(Debug, Default)]
pub struct Facts {
    pub sessions: HashMap<(String, i32), Session>,
    /// Sessions of each stream by begin time.
    pub order: BTreeMap<String, Vec<i32>>,
    pub by_inc: HashMap<u32, usize>,
    pub committed: HashMap<(u32, u64), Committed>,
    /// Committed messages of each session, by end.
    pub per_session: HashMap<(String, i32), Vec<Span>>,
    /// The end position of every message whose end anyone logged (writer first, then readers).
    pub positions: HashMap<(u32, u64), i64>,
}

impl Facts {
    pub fn of(g: &Ledger) -> Facts {
        let mut f = Facts::default();
        for (i, w) in g.writers.iter().enumerate() {
            f.by_inc.insert(w.inc, i);
            let Some(session) = w.session else { continue };
            let key = (w.stream.clone(), session);
            let end_t = g.procs.get(&w.proc).and_then(|p| p.exit_t);
            let s = f.sessions.entry(key.clone()).or_insert_with(|| Session {
                stream: w.stream.clone(),
                id: session,
                begin_lo: i64::MAX,
                begin_hi: i64::MAX,
                end_t: Some(i64::MIN),
                writers: Vec::new(),
            });
            s.begin_lo = s.begin_lo.min(w.creating_t.unwrap_or(i64::MIN));
            s.begin_hi = s.begin_hi.min(w.start_t.unwrap_or(i64::MAX));
            s.end_t = match (s.end_t, end_t) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
            s.writers.push(i);
            let Some(def) = g.streams.get(&w.stream) else { continue };
            for (&seq, a) in &w.attempts {
                if let Attempt::Ok { end, len, .. } = *a {
                    let c = Committed { session, start: end - def.framed(len), end };
                    f.committed.insert((w.inc, seq), c);
                    f.positions.insert((w.inc, seq), end);
                    f.per_session.entry(key.clone()).or_default().push((c.start, end, w.inc, seq));
                }
            }
        }
        for v in f.per_session.values_mut() {
            v.sort_by_key(|m| m.1);
        }
        for s in f.sessions.values() {
            f.order.entry(s.stream.clone()).or_default().push(s.id);
        }
        for (stream, ids) in f.order.iter_mut() {
            ids.sort_by_key(|id| f.sessions[&(stream.clone(), *id)].begin_hi);
        }
        for r in &g.readers {
            for e in &r.evs {
                if let model::EvKind::Msg { inc, seq, end: Some(end), .. } = e.kind {
                    f.positions.entry((inc, seq)).or_insert(end);
                }
            }
        }
        f
    }

    pub fn session(&self, stream: &str, id: i32) -> Option<&Session> {
        self.sessions.get(&(stream.to_string(), id))
    }
}

/// Collects failures, one per rule and subject, with a count and the first examples.
#[derive(Debug, Default)]
pub struct Fails {
    pub list: Vec<Failure>,
}

impl Fails {
    pub fn add(&mut self, rule: &'static str, what: String, evidence: Vec<String>) {
        self.list.push(Failure { rule, what, evidence });
    }

    /// One failure for `n` cases of `rule` in `subject`, showing the first few.
    pub fn many(&mut self, g: &Ledger, rule: &'static str, subject: &str, cases: Vec<(String, Vec<Src>)>) {
        if cases.is_empty() {
            return;
        }
        let n = cases.len();
        let mut evidence = Vec::new();
        for (what, srcs) in cases.iter().take(3) {
            evidence.push(what.clone());
            evidence.extend(srcs.iter().map(|s| format!("    {}", g.show(*s))));
        }
        self.add(rule, format!("{subject}: {n} case(s)"), evidence);
    }
}

/// Reads the run's ledger (`(file name, text)` of every event file) and checks every rule.
pub fn check(files: Vec<(String, String)>) -> Report {
    let g = Ledger::read(files);
    let f = Facts::of(&g);
    let mut fails = Fails::default();
    delivery::check(&g, &f, &mut fails);
    persistent::check(&g, &f, &mut fails);
    timing::check(&g, &f, &mut fails);
    resources::check(&g, &f, &mut fails);
    retention::check(&g, &f, &mut fails);
    let deliveries = g
        .readers
        .iter()
        .map(|r| r.evs.iter().filter(|e| matches!(e.kind, model::EvKind::Msg { .. })).count())
        .sum();
    let losses = g
        .readers
        .iter()
        .map(|r| r.evs.iter().filter(|e| matches!(e.kind, model::EvKind::Loss { .. })).count())
        .sum();
    let stats = Stats {
        processes: g.procs.len(),
        sessions: f.sessions.len(),
        attempts: g.writers.iter().map(|w| w.attempts.len()).sum(),
        committed: f.committed.len(),
        deliveries,
        losses,
        recordings: g.catalog.len(),
    };
    Report { failures: fails.list, stats }
}

/// Reads every file of a run's `events/` directory.
pub fn read_dir(dir: &std::path::Path) -> std::io::Result<Vec<(String, String)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = format!("events/{}", path.file_name().unwrap_or_default().to_string_lossy());
        let bytes = std::fs::read(&path)?;
        files.push((name, String::from_utf8_lossy(&bytes).into_owned()));
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests;
