//! R1–R4: what was delivered against what was committed.

use super::model::{Attempt, EvKind, Ledger, ReaderLog, Src};
use super::{Facts, Fails};
use std::collections::{HashMap, HashSet};

/// A reader's time in one session: from its `joined` line to the next session's.
#[derive(Clone, Debug)]
pub(super) struct Visit {
    pub session: i32,
    pub at: Option<i64>,
    /// Event indices: the `joined` line and one past the visit's last event.
    pub first: usize,
    pub end: usize,
    pub closed: bool,
    pub fault: bool,
    pub merged: bool,
}

/// The visits of a reading file, in order.
pub(super) fn visits(r: &ReaderLog) -> Vec<Visit> {
    let mut v: Vec<Visit> = Vec::new();
    for (i, e) in r.evs.iter().enumerate() {
        if let Some(cur) = v.last_mut() {
            cur.end = i + 1;
        }
        match &e.kind {
            EvKind::Joined { session, at } if v.last().is_none_or(|c| c.session != *session) => {
                v.push(Visit {
                    session: *session,
                    at: *at,
                    first: i,
                    end: i + 1,
                    closed: false,
                    fault: false,
                    merged: false,
                });
            }
            EvKind::Closed { session } => {
                if let Some(c) = v.last_mut().filter(|c| c.session == *session) {
                    c.closed = true;
                }
            }
            EvKind::Fault { .. } => {
                if let Some(c) = v.last_mut() {
                    c.fault = true;
                }
            }
            EvKind::Merged { .. } => {
                if let Some(c) = v.last_mut() {
                    c.merged = true;
                }
            }
            _ => {}
        }
    }
    v
}

/// Which message ends at each position of each session (stream, session, end), and where said.
type Total = HashMap<(String, i32, i64), ((u32, u64), Src)>;

pub(super) fn check(g: &Ledger, f: &Facts, out: &mut Fails) {
    let mut total = Total::new();
    let mut clash = Vec::new();
    for w in &g.writers {
        for (seq, a) in &w.attempts {
            if let (Attempt::Ok { end, src, .. }, Some(s)) = (a, w.session) {
                if let Some((id, other)) = total.insert((w.stream.clone(), s, *end), ((w.inc, *seq), *src)) {
                    clash.push((
                        format!("{}/{} and {}/{seq} both committed to end at {end}", id.0, id.1, w.inc),
                        vec![other, *src],
                    ));
                }
            }
        }
    }
    out.many(g, "R3.total", "writers", clash);
    for r in &g.readers {
        let vs = visits(r);
        whole_and_genuine(g, f, r, &vs, out);
        once_in_order(g, f, r, &vs, out);
        one_total_order(g, f, r, &vs, &mut total, out);
        // A persistent reader owes its stream across incarnations (`super::persistent`).
        if r.role != "persistent" {
            nothing_missed(g, f, r, &vs, out);
            sessions_missed(g, f, r, &vs, out);
        }
        keeping_up_loses_nothing(g, f, r, out);
    }
}

/// R0.api and R1: content checked by the reader, attempt checked against its writer.
fn whole_and_genuine(g: &Ledger, f: &Facts, r: &ReaderLog, vs: &[Visit], out: &mut Fails) {
    let (mut corrupt, mut bad, mut phantom, mut failed) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut in_visit = vec![None; r.evs.len()];
    for v in vs {
        for slot in &mut in_visit[v.first..v.end] {
            *slot = Some(v.session);
        }
    }
    for (i, e) in r.evs.iter().enumerate() {
        match &e.kind {
            EvKind::Corrupt { why } => corrupt.push((format!("content check failed: {why}"), vec![e.src])),
            EvKind::Bad { why } if why.starts_with("why=recorder-failed") => {
                failed.push((why.clone(), vec![e.src]))
            }
            EvKind::Bad { why } => bad.push((why.clone(), vec![e.src])),
            EvKind::Msg { w, inc, seq, .. } => {
                let Some(wi) = f.by_inc.get(inc) else {
                    phantom.push((format!("no writer incarnation {inc}"), vec![e.src]));
                    continue;
                };
                let writer = &g.writers[*wi];
                if writer.w != *w || writer.stream != r.stream {
                    phantom.push((format!("writer {w}/{inc} is not this stream's"), vec![e.src]));
                }
                if in_visit[i].is_some() && writer.session.is_some() && in_visit[i] != writer.session {
                    let what =
                        format!("delivered in session {:?}, committed in {:?}", in_visit[i], writer.session);
                    phantom.push((what, vec![e.src]));
                }
                match writer.attempts.get(seq) {
                    Some(Attempt::Ok { .. }) => {}
                    Some(Attempt::Refused { src }) => {
                        phantom.push(("delivered a refused attempt".into(), vec![e.src, *src]))
                    }
                    Some(Attempt::Aborted { src }) => {
                        phantom.push(("delivered an aborted claim".into(), vec![e.src, *src]))
                    }
                    None if writer.unknown(*seq) => {}
                    None => phantom.push((
                        format!("seq {seq} was never attempted (last {:?})", writer.last_seq),
                        vec![e.src],
                    )),
                }
            }
            _ => {}
        }
    }
    let subject = format!("{} ({})", g.names[r.file as usize], r.shape);
    out.many(g, "R1.whole", &subject, corrupt);
    out.many(g, "R1.genuine", &subject, phantom);
    out.many(g, "R0.api", &subject, bad);
    out.many(g, "R8.failed", &subject, failed);
}

/// End position of a delivered message: its own, else what its writer or another reader said.
pub(super) fn end_of(f: &Facts, inc: u32, seq: u64, end: Option<i64>) -> Option<i64> {
    end.or_else(|| f.positions.get(&(inc, seq)).copied())
}

/// R2: never twice, positions up within a session, each writer's sequence up.
fn once_in_order(g: &Ledger, f: &Facts, r: &ReaderLog, vs: &[Visit], out: &mut Fails) {
    let (mut twice, mut order) = (Vec::new(), Vec::new());
    let mut seen: HashMap<(u32, u64), Src> = HashMap::new();
    let mut last_seq: HashMap<u32, (u64, Src)> = HashMap::new();
    for v in vs {
        let mut last_end: Option<(i64, Src)> = None;
        for e in &r.evs[v.first..v.end] {
            let EvKind::Msg { inc, seq, end, .. } = e.kind else { continue };
            if let Some(first) = seen.insert((inc, seq), e.src) {
                twice.push((format!("message {inc}/{seq} delivered again"), vec![first, e.src]));
            }
            if let Some(end) = end_of(f, inc, seq, end) {
                if let Some((prev, src)) = last_end.filter(|(p, _)| *p >= end) {
                    order.push((format!("end {end} after {prev}"), vec![src, e.src]));
                }
                last_end = Some((end, e.src));
            }
            if let Some((prev, src)) = last_seq.get(&inc).filter(|(p, _)| *p >= seq) {
                order.push((format!("writer {inc}: seq {seq} after {prev}"), vec![*src, e.src]));
            }
            last_seq.insert(inc, (seq, e.src));
        }
    }
    let subject = g.names[r.file as usize].clone();
    out.many(g, "R2.once", &subject, twice);
    out.many(g, "R2.order", &subject, order);
}

/// R3: one end position per message, and one message per end position, across everyone.
fn one_total_order(g: &Ledger, f: &Facts, r: &ReaderLog, vs: &[Visit], total: &mut Total, out: &mut Fails) {
    let mut cases = Vec::new();
    for v in vs {
        for e in &r.evs[v.first..v.end] {
            let EvKind::Msg { inc, seq, end: Some(end), .. } = e.kind else { continue };
            if let Some(&known) = f.positions.get(&(inc, seq)).filter(|p| **p != end) {
                cases.push((format!("{inc}/{seq} ends at {end} here, at {known} elsewhere"), vec![e.src]));
            }
            let key = (r.stream.clone(), v.session, end);
            match total.get(&key) {
                Some(&(id, src)) if id != (inc, seq) => cases
                    .push((format!("{inc}/{seq} and {}/{} both end at {end}", id.0, id.1), vec![src, e.src])),
                Some(_) => {}
                None => {
                    total.insert(key, ((inc, seq), e.src));
                }
            }
        }
    }
    out.many(g, "R3.total", &g.names[r.file as usize], cases);
}

/// Whether `r` owes session `session` (its `i`th visit) from the session's first message: it
/// existed before the session began, or had read an earlier one. Not for a first session joined
/// at an explicit position (a replay-merge's too).
fn owed_from_start(f: &Facts, r: &ReaderLog, i: usize, session: i32) -> bool {
    if r.role == "replay" || (i == 0 && (r.join == "position" || r.shape == "merge")) {
        return false;
    }
    if i > 0 {
        return true;
    }
    let begin = f.session(&r.stream, session).map_or(i64::MIN, |s| s.begin_lo);
    r.opened_t.is_some_and(|t| t < begin)
}

/// The range of positions `[from, to]` that a visit owes, or `None` if it owes nothing.
pub(super) fn owed_range(f: &Facts, r: &ReaderLog, vs: &[Visit], i: usize) -> Option<(i64, i64)> {
    let v = &vs[i];
    let msgs = || {
        r.evs[v.first..v.end].iter().filter_map(|e| match e.kind {
            EvKind::Msg { inc, seq, end, .. } => Some((inc, seq, end_of(f, inc, seq, end))),
            _ => None,
        })
    };
    if let Some((_, a, b)) = r.recording {
        return Some((a, b));
    }
    let from = if owed_from_start(f, r, i, v.session) {
        0
    } else if let Some(at) = v.at {
        at
    } else {
        let (inc, seq, _) = msgs().next()?;
        f.committed.get(&(inc, seq))?.start
    };
    let to = if v.closed || v.fault || i + 1 < vs.len() {
        i64::MAX
    } else {
        let last_msg = msgs().filter_map(|m| m.2).max();
        let last_loss = r.evs[v.first..v.end]
            .iter()
            .filter_map(|e| match e.kind {
                EvKind::Loss { session, to, .. } if session == v.session => Some(to),
                _ => None,
            })
            .max();
        last_msg.max(last_loss)?
    };
    Some((from, to))
}

/// Losses `r` reported for `session`: `[from, to)` ranges.
fn losses(r: &ReaderLog, session: i32) -> Vec<(i64, i64)> {
    r.evs
        .iter()
        .filter_map(|e| match e.kind {
            EvKind::Loss { session: s, from, to, .. } if s == session => Some((from, to)),
            _ => None,
        })
        .collect()
}

/// R4.missed: every committed message of a visit's owed range delivered, or in a reported loss.
fn nothing_missed(g: &Ledger, f: &Facts, r: &ReaderLog, vs: &[Visit], out: &mut Fails) {
    let delivered: HashSet<(u32, u64)> = r
        .evs
        .iter()
        .filter_map(|e| match e.kind {
            EvKind::Msg { inc, seq, .. } => Some((inc, seq)),
            _ => None,
        })
        .collect();
    let mut cases = Vec::new();
    for (i, v) in vs.iter().enumerate() {
        let Some((from, to)) = owed_range(f, r, vs, i) else { continue };
        let Some(committed) = f.per_session.get(&(r.stream.clone(), v.session)) else { continue };
        let lost = losses(r, v.session);
        let mut missed = Vec::new();
        for &(start, end, inc, seq) in committed {
            if start < from || end > to || delivered.contains(&(inc, seq)) {
                continue;
            }
            if lost.iter().any(|&(a, b)| a <= start && start < b) {
                continue;
            }
            missed.push((start, end, inc, seq));
        }
        if let Some(&(start, end, inc, seq)) = missed.first() {
            let w = &g.writers[f.by_inc[&inc]];
            let src = match w.attempts.get(&seq) {
                Some(Attempt::Ok { src, .. }) => vec![r.evs[v.first].src, *src],
                _ => vec![r.evs[v.first].src],
            };
            let what = format!(
                "session {}: {} committed message(s) in the owed range [{from}, {}] neither delivered nor reported lost; first {inc}/{seq} at [{start}, {end})",
                v.session,
                missed.len(),
                if to == i64::MAX { "end".to_string() } else { to.to_string() }
            );
            cases.push((what, src));
        }
    }
    out.many(g, "R4.missed", &g.names[r.file as usize], cases);
}

/// R4.sessions: sessions with committed messages that began while the reader was there and that
/// it skipped whole are covered by `SessionsMissed` reports (as many as it skipped).
fn sessions_missed(g: &Ledger, f: &Facts, r: &ReaderLog, vs: &[Visit], out: &mut Fails) {
    if r.role == "replay" || vs.is_empty() {
        return;
    }
    let Some(order) = f.order.get(&r.stream) else { return };
    let Some(opened) = r.opened_t else { return };
    let has_msgs = |id: i32| f.per_session.get(&(r.stream.clone(), id)).is_some_and(|m| !m.is_empty());
    let mut cases = Vec::new();
    let mut prev: Option<(usize, usize)> = None; // (position in `order`, the visit's first event)
    for v in vs {
        let Some(here) = order.iter().position(|&s| s == v.session) else { continue };
        let skipped: Vec<i32> = match prev {
            Some((p, _)) => order[p + 1..here.max(p + 1)].to_vec(),
            None => order[..here]
                .iter()
                .copied()
                .filter(|&s| f.session(&r.stream, s).is_some_and(|s| s.begin_lo > opened))
                .collect(),
        };
        let skipped = skipped.into_iter().filter(|&s| has_msgs(s)).count() as u32;
        if skipped > 0 {
            let from = prev.map_or(0, |(_, e)| e);
            // Reports come between the sessions: after the last one's `joined`, before the next's
            // first message.
            let first_msg =
                (v.first..v.end).find(|&i| matches!(r.evs[i].kind, EvKind::Msg { .. })).unwrap_or(v.end);
            let reported: u32 = r.evs[from..first_msg]
                .iter()
                .filter_map(|e| match &e.kind {
                    EvKind::Loss { cause, sessions, .. } if cause == "SessionsMissed" => Some(*sessions),
                    _ => None,
                })
                .sum();
            if reported < skipped {
                cases.push((
                    format!(
                        "{skipped} session(s) with messages skipped before session {}, {reported} reported",
                        v.session
                    ),
                    vec![r.evs[v.first].src],
                ));
            }
        }
        prev = Some((here, v.first));
    }
    out.many(g, "R4.sessions", &g.names[r.file as usize], cases);
}

/// R4.late: a tethered reader (later sessions joined from their start, the default) that
/// existed when a session began is counted by its publisher from the start, so it loses nothing
/// of it: no `JoinedLate` (issue 31, item 6).
fn keeping_up_loses_nothing(g: &Ledger, f: &Facts, r: &ReaderLog, out: &mut Fails) {
    if !r.tethered || r.later != "earliest" || r.role == "replay" {
        return;
    }
    let Some(opened) = r.opened_t else { return };
    let mut cases = Vec::new();
    for e in &r.evs {
        let EvKind::Loss { session, from, to, cause, .. } = &e.kind else { continue };
        let Some(s) = f.session(&r.stream, *session) else { continue };
        if cause == "JoinedLate" && opened < s.begin_lo {
            cases.push((
                format!("session {session}: [{from}, {to}) lost by a reader that was there before it began"),
                vec![e.src],
            ));
        }
    }
    out.many(g, "R4.late", &g.names[r.file as usize], cases);
}
