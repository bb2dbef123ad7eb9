//! R8's retention rules: what the operator's operations on recordings (`shmlog journal purge,
//! detach, attach, delete-detached, truncate`), made by the controller while recorders record and
//! readers read, promise about the recordings they leave.
//!
//! - **R8.attach** an attach brings a recording's start back to where it was before the detaches
//!   since the last purge, deletion of detached files or attach (their files are still there);
//!   after a purge or a deletion of the detached files, it brings nothing back.
//! - **R8.retained** the catalog after the run says what the last operation on each recording
//!   left: its start (purge, detach, attach) and its stop (truncate).
//! - **R8.truncate** a truncation inside a message is refused with `PositionNotAvailable`, naming
//!   the message start after it, where the truncation then cuts (between the start and the
//!   old stop); the final replay delivers nothing past the cut.
//!
//! The final replays' contents over what each recording holds then (an attached range too) are
//! R4 and R8.same's: every committed message of the range, the same as tethered readers'.

use super::model::{EvKind, Ledger, OpKind};
use super::{Facts, Fails};
use std::collections::BTreeMap;

pub(super) fn check(g: &Ledger, f: &Facts, out: &mut Fails) {
    let mut attach = Vec::new();
    let mut truncate = Vec::new();
    // Per recording: where an attach should bring its start back to, if anything is detached.
    let mut detached: BTreeMap<u32, i64> = BTreeMap::new();
    for op in &g.ops {
        let Some((from, to)) = op.moved else {
            if op.kind == OpKind::Truncate && op.probe_got.as_deref() != Some("PositionNotAvailable") {
                truncate.push((
                    format!("recording {}: a truncation inside a message got {:?}", op.id, op.probe_got),
                    vec![op.src],
                ));
            }
            continue;
        };
        match op.kind {
            OpKind::Detach if to > from => {
                detached.entry(op.id).or_insert(from);
            }
            OpKind::Purge | OpKind::DeleteDetached => {
                detached.remove(&op.id);
            }
            OpKind::Attach => {
                let want = detached.remove(&op.id).unwrap_or(from);
                if to != want {
                    attach.push((
                        format!(
                            "recording {}: an attach moved its start from {from} to {to}, not to {want} (detached files there: {})",
                            op.id,
                            want < from
                        ),
                        vec![op.src],
                    ));
                }
            }
            OpKind::Truncate => {
                let probe = op.probe;
                let refused = op.probe_got.as_deref() == Some("PositionNotAvailable");
                if !refused || to > from || probe.is_some_and(|p| to < p) {
                    truncate.push((
                        format!(
                            "recording {}: truncated from {from} to {to} after a try inside a message at {probe:?} got {:?}",
                            op.id, op.probe_got
                        ),
                        vec![op.src],
                    ));
                }
            }
            OpKind::Detach => {}
        }
    }
    truncate.extend(replayed_past_cut(g, f));
    out.many(g, "R8.attach", "retention operations", attach);
    out.many(g, "R8.truncate", "truncations", truncate);
    out.many(g, "R8.retained", "recordings", retained(g));
}

/// The last truncation of each recording: where it cut.
fn cuts(g: &Ledger) -> BTreeMap<u32, (i64, super::model::Src)> {
    g.ops
        .iter()
        .filter(|op| op.kind == OpKind::Truncate)
        .filter_map(|op| op.moved.filter(|m| m.1 < m.0).map(|m| (op.id, (m.1, op.src))))
        .collect()
}

/// R8.truncate: a final replay that delivered a message ending past its recording's cut.
fn replayed_past_cut(g: &Ledger, f: &Facts) -> Vec<(String, Vec<super::model::Src>)> {
    let cuts = cuts(g);
    let mut cases = Vec::new();
    for r in g.readers.iter().filter(|r| r.role == "replay") {
        let Some(&(cut, src)) = r.recording.and_then(|(id, _, _)| cuts.get(&id)) else { continue };
        for e in &r.evs {
            let EvKind::Msg { inc, seq, end, .. } = e.kind else { continue };
            let end = end.or_else(|| f.positions.get(&(inc, seq)).copied());
            if end.is_some_and(|end| end > cut) {
                cases.push((
                    format!("{inc}/{seq} replayed, ending at {end:?}, past the cut at {cut}"),
                    vec![src, e.src],
                ));
                break;
            }
        }
    }
    cases
}

/// R8.retained: the catalog's start and stop of each recording against its last operations'.
fn retained(g: &Ledger) -> Vec<(String, Vec<super::model::Src>)> {
    let mut start = BTreeMap::new();
    for op in g.ops.iter().filter(|op| matches!(op.kind, OpKind::Purge | OpKind::Detach | OpKind::Attach)) {
        if let Some((_, to)) = op.moved {
            start.insert(op.id, (to, op.src));
        }
    }
    let cuts = cuts(g);
    let mut cases = Vec::new();
    for c in &g.catalog {
        let catalog = c.src.into_iter();
        if let Some(&(want, src)) = start.get(&c.id).filter(|(want, _)| *want != c.start) {
            cases.push((
                format!("recording {} starts at {}, its last operation left it at {want}", c.id, c.start),
                catalog.clone().chain([src]).collect(),
            ));
        }
        if let Some(&(cut, src)) = cuts.get(&c.id).filter(|(cut, _)| *cut != c.stop) {
            cases.push((
                format!("recording {} stops at {}, its truncation cut it at {cut}", c.id, c.stop),
                catalog.chain([src]).collect(),
            ));
        }
    }
    cases
}
