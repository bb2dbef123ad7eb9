//! R0 (processes), R5 (the end of a session is seen) and R6 (nobody held by the dead): the rules
//! about time. Every bound is generous (seconds): CI runs on two busy cores, where a process may
//! not be scheduled for a good fraction of a second, and a bound that fails for scheduling
//! noise teaches people to ignore the harness.

use super::delivery::{visits, Visit};
use super::model::{EvKind, Ledger, Proc, ReaderLog, Src};
use super::{Facts, Fails};

/// How long after its session ended a running reader may go without reporting it: the
/// liveness interval (a sleeper's longest sleep before it looks at its publisher) plus 3 s for
/// draining a window at a slow reader's pace and for scheduling on a loaded machine.
pub fn closed_bound_us(liveness_ms: i64) -> i64 {
    liveness_ms * 1000 + 3_000_000
}

/// How long after the last reader went away a writer may still be held back or still commit:
/// the liveness interval (the writer's sweep) plus 2 s of scheduling slack.
pub fn held_bound_us(liveness_ms: i64) -> i64 {
    liveness_ms * 1000 + 2_000_000
}

/// Shapes whose every receive returns a result a loop acts on (a fault returned again and again
/// is a spin).
const RECEIVERS: [&str; 4] = ["recv", "iter", "async", "stream"];

/// Shapes documented to wait for the next session once they said `Closed` ("receiving again
/// waits for it", "polling again waits for it"): `Closed` returned again and again is a spin.
const WAITERS: [&str; 5] = ["recv", "iter", "async", "stream", "blocking"];

/// The Python package's receive shapes (`ledger/python/role.py`, `py-...`) are both: each goes
/// through the core's `Receiver`, and is documented to wait for the next session after `Closed`.
pub(super) fn python_shape(shape: &str) -> bool {
    shape.starts_with("py-")
}

pub(super) fn check(g: &Ledger, f: &Facts, out: &mut Fails) {
    processes(g, out);
    starts(g, out);
    for r in &g.readers {
        if r.role != "reader" {
            continue;
        }
        let vs = visits(r);
        let liveness = g.streams.get(&r.stream).map_or(100, |s| s.liveness_ms);
        let subject = g.names[r.file as usize].clone();
        let (mut unseen, mut after, mut late, mut faults, mut unexpected) =
            (vec![], vec![], vec![], vec![], vec![]);
        let mut closes = vec![];
        for (i, v) in vs.iter().enumerate() {
            let evs = &r.evs[v.first..v.end];
            if i + 1 < vs.len() && !v.closed && !v.fault {
                let next = &r.evs[vs[i + 1].first];
                unseen.push((
                    format!("session {} left for {} without `closed`", v.session, vs[i + 1].session),
                    vec![r.evs[v.first].src, next.src],
                ));
            }
            if let Some(c) = evs.iter().position(|e| e.kind == EvKind::Closed { session: v.session }) {
                if let Some(m) = evs[c..].iter().find(|e| matches!(e.kind, EvKind::Msg { .. })) {
                    after.push((
                        format!("a message of session {} after its `closed`", v.session),
                        vec![evs[c].src, m.src],
                    ));
                }
            }
            for e in evs {
                match &e.kind {
                    EvKind::Faults { session, n }
                        if *n > 1 && (RECEIVERS.contains(&r.shape.as_str()) || python_shape(&r.shape)) =>
                    {
                        faults.push((format!("session {session}: the fault returned {n} times"), vec![e.src]))
                    }
                    EvKind::Closes { session, n }
                        if *n > 1 + unnamed_sessions(g, r, &vs, v.session, e.t)
                            && (WAITERS.contains(&r.shape.as_str()) || python_shape(&r.shape)) =>
                    {
                        closes.push((format!("session {session}: `Closed` returned {n} times"), vec![e.src]))
                    }
                    EvKind::Fault { session, why, .. } => {
                        let s = session.unwrap_or(v.session);
                        if !g.corrupted.iter().any(|(st, id)| *st == r.stream && *id == s) {
                            unexpected.push((
                                format!("fault `{why}` in session {s}, which nobody corrupted"),
                                vec![e.src],
                            ));
                        }
                    }
                    _ => {}
                }
            }
            // Still running long after its session's writers had all ended, and never said so.
            let last = i + 1 == vs.len();
            if last && !v.closed && !v.fault && (r.shape != "merge" || v.merged) {
                let (Some(s), Some(p)) = (f.session(&r.stream, v.session), g.procs.get(&r.proc)) else {
                    continue;
                };
                let (Some(ended), Some(exit)) = (s.end_t, p.exit_t) else { continue };
                // From the session's end, or from the reader's last word in it if it was still
                // delivering (a slow reader drains a backlog first).
                let ended = ended.max(evs.last().map_or(ended, |e| e.t));
                let awake = exit - ended - p.stopped_within(ended, exit);
                if ended < exit && awake > closed_bound_us(liveness) {
                    late.push((
                        format!(
                            "session {} ended at {ended} µs; the reader ran {} ms more (awake) and never reported it closed",
                            v.session,
                            awake / 1000
                        ),
                        vec![r.evs[v.first].src],
                    ));
                }
            }
        }
        out.many(g, "R5.closed", &subject, unseen);
        out.many(g, "R5.after-closed", &subject, after);
        out.many(g, "R5.liveness", &subject, late);
        out.many(g, "R5.fault-once", &subject, faults);
        out.many(g, "R5.closed-once", &subject, closes);
        out.many(g, "R0.fault", &subject, unexpected);
    }
    held_by_the_dead(g, out);
}

/// R0.start: every process opened what it writes or reads (a `clean` under load, say, must not
/// make a publisher or subscription fail to open).
fn starts(g: &Ledger, out: &mut Fails) {
    let mut cases: Vec<(String, Vec<Src>)> = Vec::new();
    for w in &g.writers {
        if let Some((why, src)) = &w.nostart {
            cases.push((format!("{} could not open its publication: {why}", w.proc), vec![*src]));
        }
    }
    for r in &g.readers {
        for e in &r.evs {
            if let EvKind::NoStart { why } = &e.kind {
                cases.push((format!("{} could not open: {why}", r.proc), vec![e.src]));
            }
        }
    }
    out.many(g, "R0.start", "processes", cases);
}

/// R0.crash: every process ended by itself with status 0, or by the controller's SIGKILL.
fn processes(g: &Ledger, out: &mut Fails) {
    let mut cases = Vec::new();
    for p in g.procs.values() {
        let fine = p.status == "code:0" || (p.killed && p.status == "signal:9");
        if !fine {
            cases.push((format!("{} ({}) ended with {:?}", p.name, p.role, p.status), vec![]));
        }
    }
    out.many(g, "R0.crash", "processes", cases);
}

/// The stretches of `[lo, hi)` in which none of `procs` was alive.
fn gaps(procs: &[&Proc], lo: i64, hi: i64) -> Vec<(i64, i64)> {
    let mut alive: Vec<(i64, i64)> =
        procs.iter().map(|p| (p.spawn_t, p.exit_t.unwrap_or(i64::MAX))).collect();
    alive.sort();
    let (mut out, mut t) = (Vec::new(), lo);
    for (a, b) in alive {
        if a > t && t < hi {
            out.push((t, a.min(hi)));
        }
        t = t.max(b);
    }
    if t < hi {
        out.push((t, hi));
    }
    out
}

/// R6: no back pressure long after the last tethered reader died; no commit long after the last
/// reader of any kind went away (review N5: a dead untethered reader kept the writer connected).
/// Sessions of `r`'s stream that began after `r` logged `closed session` and before `until`, and
/// that `r` never joined: a session that began and ended between two receives (its writer closed
/// or died before this reader took a message of it) is told by one more `Closed` that cannot
/// name it (a subscription forgets a session as it reports its end), not `Closed` returned again.
fn unnamed_sessions(g: &Ledger, r: &ReaderLog, vs: &[Visit], session: i32, until: i64) -> u64 {
    let Some(since) = r.evs.iter().find(|e| e.kind == EvKind::Closed { session }).map(|e| e.t) else {
        return 0;
    };
    let joined = |s: i32| vs.iter().any(|v| v.session == s);
    let sessions: std::collections::HashSet<i32> = g
        .writers
        .iter()
        .filter(|w| w.stream == r.stream && w.start_t.is_some_and(|t| since <= t && t <= until))
        .filter_map(|w| w.session.filter(|&s| !joined(s)))
        .collect();
    sessions.len() as u64
}

fn held_by_the_dead(g: &Ledger, out: &mut Fails) {
    let (mut held, mut connected) = (Vec::new(), Vec::new());
    for w in &g.writers {
        let (Some(def), Some(start), Some(me)) = (g.streams.get(&w.stream), w.start_t, g.procs.get(&w.proc))
        else {
            continue;
        };
        let bound = held_bound_us(def.liveness_ms);
        let of_stream: Vec<&Proc> = g.procs.values().filter(|p| p.streams.contains(&w.stream)).collect();
        let readers: Vec<&Proc> = of_stream.iter().copied().filter(|p| p.role != "writer").collect();
        let tethered: Vec<&Proc> = readers.iter().copied().filter(|p| p.tethered).collect();
        let end = me.exit_t.unwrap_or(i64::MAX);
        let awake = |a: i64, b: i64| b - a - me.stopped_within(a, b);
        let anyone_stopped = |a: i64, b: i64| of_stream.iter().any(|p| p.stopped_within(a, b) > 0);
        // Another writer of the stream holding a claim open holds this one back, a window past
        // it, for as long as it holds it (or, killed inside it, until its hole is padded).
        let held_open: Vec<(i64, i64)> = g
            .writers
            .iter()
            .filter(|o| o.stream == w.stream && o.inc != w.inc)
            .flat_map(|o| {
                let end = g.procs.get(&o.proc).and_then(|p| p.exit_t).unwrap_or(i64::MAX);
                o.holds.iter().map(move |&(a, b)| (a, b.min(end)))
            })
            .collect();
        let last_hold_end = |b: i64| held_open.iter().filter(|h| h.0 <= b).map(|h| h.1.min(b)).max();
        for &(from, to, ref why, src) in &w.held {
            if why != "back_pressured" {
                continue;
            }
            for (g0, g1) in gaps(&tethered, start, end) {
                let (a, b) = (from.max(g0), to.min(g1));
                let g0 = g0.max(last_hold_end(b).unwrap_or(g0));
                if b > a && awake(g0, b) > bound && !anyone_stopped(g0, b) {
                    held.push((
                        format!("back-pressured until {b} µs; no tethered reader alive since {g0} µs"),
                        vec![src],
                    ));
                    break;
                }
            }
        }
        let nobody = gaps(&readers, start, end);
        let late: Vec<(i64, i64, Src)> = w
            .oks
            .iter()
            .filter_map(|&(t, _, src)| {
                let gap = nobody.iter().find(|&&(g0, g1)| g0 <= t && t < g1 && awake(g0, t) > bound)?;
                Some((t, gap.0, src))
            })
            .collect();
        if let Some(&(t, since, src)) = late.first() {
            let what = format!(
                "{} commit(s) with no reader alive (none expected {} ms after the last left); first at {t} µs, nobody since {since} µs",
                late.len(),
                bound / 1000
            );
            connected.push((what, vec![src]));
        }
    }
    out.many(g, "R6.held", "writers", held);
    out.many(g, "R6.connected", "writers", connected);
}
