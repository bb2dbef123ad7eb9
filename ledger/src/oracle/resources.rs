//! R7 (bounded resources) and R8 (recordings).

use super::delivery::{owed_range, visits};
use super::model::{EvKind, Ledger, ReaderLog};
use super::{Facts, Fails, Span};
use std::collections::{BTreeSet, HashMap};

/// Descriptors a reader may hold at exit: its event file, the std streams, its subscriptions'
/// files and the runtime's. None of them grows with sessions or messages.
pub(super) const MAX_FDS: i64 = 48;
/// Resident memory a reader may have at exit beyond the logs it maps (three terms each).
pub(super) const RSS_BASE_KB: i64 = 96 << 10;
/// Heap a reader may gain between opening and exit beyond a few of the largest messages it got
/// (assembler, receiver queue) and an untethered copy batch: no buffer may keep what it held
/// for a frame it never delivered (review N6).
pub(super) const HEAP_SLACK: i64 = 256 << 10;
/// The same, measured at a fault (no second session; a receiver's queue is counted apart).
pub(super) const FAULT_SLACK: i64 = 96 << 10;

pub(super) fn check(g: &Ledger, f: &Facts, out: &mut Fails) {
    for r in &g.readers {
        bounded(g, r, out);
    }
    let files =
        g.leftovers.iter().map(|s| ("left after the run and a final clean".to_string(), vec![*s])).collect();
    out.many(g, "R7.files", "stream directory", files);
    recordings(g, f, out);
}

/// R7: descriptors, RSS and heap at exit.
fn bounded(g: &Ledger, r: &ReaderLog, out: &mut Fails) {
    let (Some(x), Some(def)) = (&r.exit, g.streams.get(&r.stream)) else { return };
    let Some(src) = x.src else { return };
    let (mut fds, mut rss, mut cases) = (Vec::new(), Vec::new(), Vec::new());
    if x.fds > MAX_FDS {
        fds.push((format!("{} descriptors at exit (bound {MAX_FDS})", x.fds), vec![src]));
    }
    let streams = if r.shape == "wait_any" { 2 } else { 1 };
    let rss_bound = RSS_BASE_KB + streams * 3 * def.term / 1024 * 2;
    if x.rss_kb > rss_bound {
        rss.push((format!("{} KiB resident at exit (bound {rss_bound})", x.rss_kb), vec![src]));
    }
    // A persistent reader's shape is `persistent-<shape>`: its receivers queue as a live one's.
    let shape = r.shape.strip_prefix("persistent-").unwrap_or(&r.shape);
    let receiver = ["recv", "iter", "async", "stream"].contains(&shape);
    let queued = if receiver || super::timing::python_shape(shape) { 64 } else { 0 };
    let heap_bound = HEAP_SLACK + (4 + queued) * x.max_msg + 2 * (64 << 10) + 2 * def.mtu * streams;
    let grown = (x.heap_kb - x.heap_open_kb) * 1024;
    if grown > heap_bound {
        cases.push((
            format!(
                "heap grew by {} KiB from open to exit (bound {} KiB: largest message {} bytes)",
                grown >> 10,
                heap_bound >> 10,
                x.max_msg
            ),
            vec![src],
        ));
    }
    // At a fault, an untethered reader (the one that copies frames before checking them) holds
    // what it grew for the frame it stopped at: nothing beyond a batch and a few messages, and a
    // receiver's queue of decoded messages (Python's shapes read through one too).
    if !r.tethered {
        let bound = FAULT_SLACK + (2 + queued) * x.max_msg + (64 << 10) + 2 * def.mtu;
        for e in &r.evs {
            if let EvKind::Fault { grown: Some(grown), .. } = e.kind {
                if grown > bound {
                    cases.push((
                        format!("heap grew by {} KiB by the fault (bound {} KiB)", grown >> 10, bound >> 10),
                        vec![e.src],
                    ));
                }
            }
        }
    }
    let subject = &g.names[r.file as usize];
    out.many(g, "R7.fds", subject, fds);
    out.many(g, "R7.rss", subject, rss);
    out.many(g, "R7.heap", subject, cases);
}

/// R7.catalog and R8: what the recorders left in the journal.
fn recordings(g: &Ledger, f: &Facts, out: &mut Fails) {
    let recorders: Vec<&ReaderLog> = g.readers.iter().filter(|r| r.role == "recorder").collect();
    let empty: Vec<_> = g.catalog.iter().filter(|c| c.stop == c.start).collect();
    if empty.len() > recorders.len() {
        let ev = empty.iter().filter_map(|c| c.src).map(|s| g.show(s)).take(5).collect();
        out.add(
            "R7.catalog",
            format!("{} empty catalog records for {} recorder processes", empty.len(), recorders.len()),
            ev,
        );
    }
    let by_id: HashMap<u32, &super::model::CatalogRec> = g.catalog.iter().map(|c| (c.id, c)).collect();
    let (mut split, mut lagged) = (Vec::new(), Vec::new());
    for r in recorders.iter().filter(|r| r.tethered) {
        let mut per_session: HashMap<i32, BTreeSet<u32>> = HashMap::new();
        for e in &r.evs {
            if let EvKind::Recording { id } = e.kind {
                if let Some(c) = by_id.get(&id) {
                    per_session.entry(c.session).or_default().insert(id);
                    if c.reason == "lagged" || c.gap > 0 {
                        lagged.push((
                            format!("recording {id}: {} with a gap of {} bytes", c.reason, c.gap),
                            c.src.into_iter().chain([e.src]).collect(),
                        ));
                    }
                }
            }
        }
        for (session, ids) in per_session.iter().filter(|(_, ids)| ids.len() > 1) {
            let src = r.evs.iter().find(|e| matches!(e.kind, EvKind::Recording { .. })).map(|e| e.src);
            split.push((
                format!("session {session} split into {} recordings {ids:?}", ids.len()),
                src.into_iter().collect(),
            ));
        }
        if let Some(x) = r.exit.as_ref().filter(|x| x.lost_bytes > 0) {
            lagged.push((
                format!("a tethered recorder lost {} bytes", x.lost_bytes),
                x.src.into_iter().collect(),
            ));
        }
    }
    out.many(g, "R8.split", "tethered recorders", split);
    out.many(g, "R8.gap", "recorders", unreported_gaps(f, &recorders, &by_id));
    out.many(g, "R8.lagged", "tethered recorders", lagged);
    same_as_readers(g, f, out);
}

/// Messages of one session a reading file delivered, `(start, end, inc, seq)` by end, with the
/// range it owed.
type Delivered = HashMap<i32, (Vec<Span>, Option<(i64, i64)>)>;

fn delivered(f: &Facts, r: &ReaderLog) -> Delivered {
    let vs = visits(r);
    let mut out: Delivered = HashMap::new();
    for (i, v) in vs.iter().enumerate() {
        let entry = out.entry(v.session).or_default();
        entry.1 = owed_range(f, r, &vs, i);
        for e in &r.evs[v.first..v.end] {
            if let EvKind::Msg { inc, seq, end, .. } = e.kind {
                let Some(end) = end.or_else(|| f.positions.get(&(inc, seq)).copied()) else { continue };
                let start = f.committed.get(&(inc, seq)).map_or(end, |c| c.start);
                entry.0.push((start, end, inc, seq));
            }
        }
    }
    for (msgs, _) in out.values_mut() {
        msgs.sort_by_key(|m| m.1);
    }
    out
}

/// The messages of `msgs` (sorted by end) within `[lo, hi]`.
fn within(msgs: &[Span], lo: i64, hi: i64) -> BTreeSet<(u32, u64)> {
    let first = msgs.partition_point(|m| m.1 < lo);
    msgs[first..].iter().take_while(|m| m.1 <= hi).filter(|m| m.0 >= lo).map(|m| (m.2, m.3)).collect()
}

/// R8.same: a recording replays exactly the messages a tethered reader without losses in that
/// session delivered over the range both cover.
fn same_as_readers(g: &Ledger, f: &Facts, out: &mut Fails) {
    let readers: Vec<(&ReaderLog, Delivered)> =
        g.readers.iter().filter(|r| r.role == "reader" && r.tethered).map(|r| (r, delivered(f, r))).collect();
    let mut cases = Vec::new();
    for rec in g.readers.iter().filter(|r| r.role == "replay") {
        let Some((id, a, b)) = rec.recording else { continue };
        let replayed = delivered(f, rec);
        let Some((&session, (rmsgs, _))) = replayed.iter().next() else { continue };
        for (r, d) in readers.iter().filter(|(r, _)| r.stream == rec.stream) {
            let Some((msgs, Some((from, to)))) = d.get(&session) else { continue };
            if r.evs.iter().any(|e| matches!(e.kind, EvKind::Loss { session: s, .. } if s == session)) {
                continue;
            }
            let (lo, hi) = (a.max(*from), b.min(*to));
            if lo >= hi {
                continue;
            }
            let (x, y) = (within(rmsgs, lo, hi), within(msgs, lo, hi));
            if x != y {
                let only_rec = x.difference(&y).next();
                let only_reader = y.difference(&x).next();
                cases.push((
                    format!(
                        "recording {id} and {} differ over [{lo}, {hi}]: {} vs {} messages (first only in the recording {only_rec:?}, only in the reader {only_reader:?})",
                        g.names[r.file as usize],
                        x.len(),
                        y.len()
                    ),
                    vec![rec.evs[0].src],
                ));
            }
        }
    }
    out.many(g, "R8.same", "recordings", cases);
}

/// Loss ranges `(session, from, to)` with touching ranges of one session joined: a reader lapped
/// again before it read anything reports the gap in pieces (`[a, b)` then `[b, c)`).
fn coalesce(losses: impl Iterator<Item = (i32, i64, i64)>) -> Vec<(i32, i64, i64)> {
    let mut all: Vec<_> = losses.collect();
    all.sort_unstable();
    let mut out: Vec<(i32, i64, i64)> = Vec::with_capacity(all.len());
    for (s, from, to) in all {
        match out.last_mut() {
            Some(last) if last.0 == s && from <= last.2 => last.2 = last.2.max(to),
            _ => out.push((s, from, to)),
        }
    }
    out
}

/// R8.gap: a recording that starts after a gap (`gap_before`) follows a loss its recorder was
/// told of (an untethered recorder lapped: `Lapped` over the gap, up to the first message start
/// after it). A gap without one is bytes
/// of the stream dropped silently (review N1: a padding frame taken for a lap).
fn unreported_gaps(
    f: &Facts,
    recorders: &[&ReaderLog],
    by_id: &HashMap<u32, &super::model::CatalogRec>,
) -> Vec<(String, Vec<super::model::Src>)> {
    let mut cases = Vec::new();
    for r in recorders {
        let lapped = coalesce(r.evs.iter().filter_map(|e| match &e.kind {
            EvKind::Loss { session, from, to, cause, .. } if cause == "Lapped" => {
                Some((*session, *from, *to))
            }
            _ => None,
        }));
        for e in &r.evs {
            let EvKind::Recording { id } = e.kind else { continue };
            let Some(c) = by_id.get(&id).filter(|c| c.gap > 0) else { continue };
            // A lap's `to` may fall inside a message whose start it reported lost: the
            // recording then begins at the next message start (seed 0x1f86216d60389062).
            let msgs = f.per_session.get(&(r.stream.clone(), c.session)).map_or(&[][..], Vec::as_slice);
            let starts_between = |a: i64, b: i64| msgs.iter().any(|m| m.0 >= a && m.0 < b);
            let told = lapped.iter().any(|&(s, from, to)| {
                s == c.session
                    && from <= c.origin - c.gap
                    && (to >= c.origin || !starts_between(to, c.origin))
            });
            if !told {
                cases.push((
                    format!(
                        "recording {id} starts at {} after a gap of {} bytes that no loss reported",
                        c.origin, c.gap
                    ),
                    c.src.into_iter().chain([e.src]).collect(),
                ));
            }
        }
    }
    cases
}

#[cfg(test)]
mod tests {
    #[test]
    fn touching_losses_of_one_session_join_and_others_stay_apart() {
        let got = super::coalesce([(7, 128, 192), (7, 0, 128), (7, 256, 300), (8, 192, 256)].into_iter());
        assert_eq!(got, [(7, 0, 192), (7, 256, 300), (8, 192, 256)]);
    }
}
