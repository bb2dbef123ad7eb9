//! P: persistent readers (`journal::PersistentSubscription`), judged across the incarnations of
//! one durable name, which a kill -9 and a restart under the same name continue:
//!
//! - **P.missed** at least once across incarnations: every message the stream committed between
//!   the first and the last message the name delivered (in the stream's order: sessions by
//!   begin, then positions) is delivered by some incarnation, or its start lies in a `Purged` or
//!   `NotRecorded` loss one of them reported for its session (a truncated tail it had not read
//!   too: the record keeps the old stop, and the tail is reported `Purged`).
//! - **P.order** each incarnation delivers in the stream's order, across sessions too.
//! - **P.redelivered** a message is delivered again only as a redelivery of the tail the name had
//!   not stored yet: what earlier incarnations delivered after the last `pos` line (the stored
//!   position the library reported) of the latest one that logged one; no more of them than the
//!   previous incarnation's last poll can hold (its fragment limit, plus one message begun
//!   before it); and all of them before the incarnation's first new message.
//! - **P.cause** its losses are `Purged` or `NotRecorded` only (it falls back to the journal for
//!   anything else), and `Purged` only for a session the controller had purged, detached or
//!   truncated by then (a detached range reads as a purged one until it is attached again).

use super::delivery::end_of;
use super::model::{EvKind, Ledger, OpKind, ReaderLog, Src};
use super::{Facts, Fails};
use std::collections::{BTreeMap, HashSet};

/// A message's place in its stream: its session's rank (by begin) and its end position.
type Key = (usize, i64);

/// One delivered message of one incarnation.
struct Delivery {
    key: Key,
    id: (u32, u64),
    src: Src,
}

pub(super) fn check(g: &Ledger, f: &Facts, out: &mut Fails) {
    let mut names: BTreeMap<(&str, &str), Vec<&ReaderLog>> = BTreeMap::new();
    for r in g.readers.iter().filter(|r| r.role == "persistent") {
        names.entry((r.stream.as_str(), r.name.as_str())).or_default().push(r);
    }
    for ((stream, name), mut incs) in names {
        incs.sort_by_key(|r| r.start_t);
        let subject = format!("persistent reader {name} of {stream} ({} incarnations)", incs.len());
        let delivered: Vec<Vec<Delivery>> = incs.iter().map(|r| deliveries(f, r)).collect();
        out.many(g, "P.order", &subject, in_order(&delivered));
        out.many(g, "P.redelivered", &subject, redelivered(&incs, &delivered));
        out.many(g, "P.missed", &subject, missed(f, stream, &incs, &delivered));
        out.many(g, "P.cause", &subject, causes(g, &incs));
    }
}

/// A session's rank in its stream.
fn rank(f: &Facts, stream: &str, session: i32) -> Option<usize> {
    f.order.get(stream)?.iter().position(|&s| s == session)
}

fn deliveries(f: &Facts, r: &ReaderLog) -> Vec<Delivery> {
    let mut session = None;
    let mut out = Vec::new();
    for e in &r.evs {
        match e.kind {
            EvKind::Joined { session: s, .. } => session = Some(s),
            EvKind::Msg { inc, seq, end, .. } => {
                let s = f.committed.get(&(inc, seq)).map(|c| c.session).or(session);
                let (Some(s), Some(end)) = (s, end_of(f, inc, seq, end)) else { continue };
                let Some(rk) = rank(f, &r.stream, s) else { continue };
                out.push(Delivery { key: (rk, end), id: (inc, seq), src: e.src });
            }
            _ => {}
        }
    }
    out
}

fn in_order(delivered: &[Vec<Delivery>]) -> Vec<(String, Vec<Src>)> {
    let mut cases = Vec::new();
    for d in delivered {
        for w in d.windows(2) {
            if w[1].key <= w[0].key {
                cases.push((
                    format!("{:?} delivered after {:?}", w[1].key, w[0].key),
                    vec![w[0].src, w[1].src],
                ));
            }
        }
    }
    cases
}

fn redelivered(incs: &[&ReaderLog], delivered: &[Vec<Delivery>]) -> Vec<(String, Vec<Src>)> {
    let mut cases = Vec::new();
    for k in 1..incs.len() {
        let mut ever = HashSet::new();
        let mut tail = HashSet::new();
        let mut stored = false;
        for j in (0..k).rev() {
            // Messages after the last `pos` line: the position stored before them does not cover
            // them (the file is a true prefix, so a `pos` line follows the messages it covers).
            let last_pos = incs[j].evs.iter().rposition(|e| matches!(e.kind, EvKind::Pos { .. }));
            for (i, e) in incs[j].evs.iter().enumerate() {
                if let EvKind::Msg { inc, seq, .. } = e.kind {
                    ever.insert((inc, seq));
                    if !stored && last_pos.is_none_or(|p| i > p) {
                        tail.insert((inc, seq));
                    }
                }
            }
            stored |= last_pos.is_some();
        }
        // What the docs promise: a crash delivers again at most what the last poll delivered
        // (at most `limit` fragments: whole messages, and one message begun in an earlier poll).
        let bound = incs[k - 1].limit as usize + 1;
        let again: Vec<Src> = delivered[k].iter().filter(|d| ever.contains(&d.id)).map(|d| d.src).collect();
        if again.len() > bound {
            cases.push((
                format!("{} messages delivered again, more than one poll's {bound}", again.len()),
                vec![again[0], again[again.len() - 1]],
            ));
        }
        let mut fresh: Option<Src> = None;
        for d in &delivered[k] {
            if !ever.contains(&d.id) {
                fresh = fresh.or(Some(d.src));
                continue;
            }
            let (inc, seq) = d.id;
            if let Some(first_new) = fresh {
                cases.push((
                    format!("{inc}/{seq} delivered again after a message no earlier incarnation delivered"),
                    vec![first_new, d.src],
                ));
            } else if !tail.contains(&d.id) {
                cases.push((
                    format!("{inc}/{seq} delivered again though a stored position already covered it"),
                    vec![d.src],
                ));
            }
        }
    }
    cases
}

fn missed(
    f: &Facts,
    stream: &str,
    incs: &[&ReaderLog],
    delivered: &[Vec<Delivery>],
) -> Vec<(String, Vec<Src>)> {
    let all = || delivered.iter().flatten();
    let (Some(lo), Some(hi)) = (all().map(|d| d.key).min(), all().map(|d| d.key).max()) else {
        return Vec::new();
    };
    let got: HashSet<(u32, u64)> = all().map(|d| d.id).collect();
    let covered = |session: i32, start: i64| {
        incs.iter().flat_map(|r| &r.evs).any(|e| {
            matches!(&e.kind, EvKind::Loss { session: s, from, to, cause, .. }
                if *s == session && *from <= start && start < *to && (cause == "Purged" || cause == "NotRecorded"))
        })
    };
    let Some(order) = f.order.get(stream) else { return Vec::new() };
    let mut missing = Vec::new();
    for (rk, &session) in order.iter().enumerate().take(hi.0 + 1).skip(lo.0) {
        let Some(msgs) = f.per_session.get(&(stream.to_string(), session)) else { continue };
        for &(start, end, inc, seq) in msgs {
            let key = (rk, end);
            if key < lo || key > hi || got.contains(&(inc, seq)) || covered(session, start) {
                continue;
            }
            missing.push((session, start, end, inc, seq));
        }
    }
    let Some(&(session, start, end, inc, seq)) = missing.first() else { return Vec::new() };
    let first = incs.iter().find_map(|r| r.evs.first().map(|e| e.src));
    vec![(
        format!(
            "{} committed message(s) between its first and last delivery neither delivered by any incarnation nor in a Purged/NotRecorded loss; first {inc}/{seq} at [{start}, {end}) of session {session}",
            missing.len()
        ),
        first.into_iter().collect(),
    )]
}

fn causes(g: &Ledger, incs: &[&ReaderLog]) -> Vec<(String, Vec<Src>)> {
    let mut cases = Vec::new();
    for r in incs {
        for e in &r.evs {
            let EvKind::Loss { session, from, to, cause, .. } = &e.kind else { continue };
            let purged = || {
                g.ops.iter().any(|op| {
                    let removed = match op.kind {
                        OpKind::Purge | OpKind::Detach => op.moved.is_some_and(|(from, to)| to > from),
                        OpKind::Truncate => op.moved.is_some_and(|(stop, cut)| cut < stop),
                        _ => false,
                    };
                    removed && op.stream == r.stream && op.session == *session && op.t <= e.t
                })
            };
            let why = match cause.as_str() {
                "NotRecorded" => continue,
                "Purged" if purged() => continue,
                "Purged" => {
                    "Purged, but the controller purged, detached or truncated nothing of that session by then"
                }
                _ => "a loss a persistent reader never reports (it falls back to the journal)",
            };
            cases.push((format!("session {session}: [{from}, {to}) {cause}: {why}"), vec![e.src]));
        }
    }
    cases
}
