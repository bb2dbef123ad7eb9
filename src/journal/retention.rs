//! Applying retention policies: which segments of which recordings to purge, and purging them,
//! oldest first. A recorder with a policy (its recordings' own, or the journal's) runs this on a
//! thread of its own every `interval`, so retention never holds the publisher nor delays a
//! block's recording.
//!
//! Per recording, its own policy (`Recording::retention`) keeps its newest segments; the
//! journal's policy (the catalog's header) keeps the newest of all recordings, taking segments
//! from the oldest recordings first. A recording's newest segment is kept while it may grow
//! (recording, or interrupted); a stopped recording all of whose segments go is deleted, its
//! record freed for reuse. Nothing a registered durable reader has not read goes
//! (`journal::durable`).

use super::catalog::Catalog;
use super::durable::{durable_readers, DurableReaderInfo};
use super::maintenance::{delete_locked, move_start_up};
use super::policy::Retention;
use super::record::Recording;
use super::segment::{self, base_of};
use crate::error::Error;
use crate::region::MmapRegion;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

/// What one pass of retention did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Segment files removed.
    pub files_removed: usize,
    /// Bytes those files held on disk.
    pub bytes_removed: u64,
    /// Recordings deleted (nothing of them was kept).
    pub recordings_deleted: usize,
}

/// One recording's segments as retention sees them.
struct Plan {
    r: Recording,
    /// Base of its oldest segment, and the end of its newest (`first` if it holds nothing).
    first: i64,
    end: i64,
    /// Purge every segment below this base.
    keep_from: i64,
    /// Never purge at or above this base (what durable readers have not read).
    cap: i64,
}

impl Plan {
    fn of(r: Recording) -> Self {
        let length = r.segment_length as i64;
        let first = base_of(r.start_position, r.segment_length);
        let end = if r.stop_position > r.start_position {
            base_of(r.stop_position - 1, r.segment_length) + length
        } else {
            first
        };
        Self { r, first, end, keep_from: first, cap: i64::MAX }
    }

    fn length(&self) -> i64 {
        self.r.segment_length as i64
    }

    /// The highest base it may purge below: all of a stopped recording, all but the newest
    /// segment of one that may grow, and nothing a durable reader has not read.
    fn limit(&self) -> i64 {
        let limit = if self.r.is_stopped() { self.end } else { (self.end - self.length()).max(self.first) };
        limit.min(self.cap).max(self.first)
    }

    fn segments_kept(&self) -> i64 {
        (self.end - self.keep_from).max(0) / self.length()
    }

    /// Stream bytes it holds from `keep_from` on.
    fn bytes_kept(&self) -> i64 {
        (self.r.stop_position - self.keep_from.max(self.r.start_position)).max(0)
    }

    /// Purge at least below `base` (within the limit).
    fn raise(&mut self, base: i64) {
        self.keep_from = self.keep_from.max(base.min(self.limit()));
    }

    /// Applies a policy to this recording alone.
    fn apply_own(&mut self, policy: &Retention, now: SystemTime, dir: &Path) {
        let length = self.length();
        if let Some(n) = policy.max_segments {
            let n = n.min(i64::MAX as u64 / length as u64) as i64;
            self.raise((self.end - n * length).min(self.end - length));
        }
        if let Some(bytes) = policy.max_bytes {
            let bytes = bytes.min(i64::MAX as u64) as i64;
            let from = self.r.stop_position.saturating_sub(bytes);
            self.raise(
                base_of(from.saturating_add(length - 1).max(0), self.r.segment_length).min(self.end - length),
            );
        }
        if let Some(age) = policy.max_age {
            self.raise(self.expired_below(now, age, dir));
        }
    }

    /// The base below which every segment's last write is older than `age`.
    fn expired_below(&self, now: SystemTime, age: Duration, dir: &Path) -> i64 {
        let Some(cutoff) = now.checked_sub(age) else { return self.first };
        let mut base = self.keep_from;
        while base < self.end {
            let path = segment::path(dir, self.r.id, base);
            match std::fs::metadata(&path).and_then(|m| m.modified()) {
                Ok(written) if written < cutoff => base += self.length(),
                // Written since, or missing (purged meanwhile: the next pass sees the new start).
                _ => break,
            }
        }
        base
    }

    /// Caps what it may purge at what no durable reader of the stream still needs.
    fn protect(&mut self, readers: &[DurableReaderInfo]) {
        for reader in readers.iter().filter(|d| d.stream == self.r.stream) {
            let cap = match reader.position {
                // Nothing read yet (or a position being stored): all of its stream is unread.
                None => self.first,
                Some((recording, _)) if recording < self.r.id => self.first,
                Some((recording, position)) if recording == self.r.id => {
                    base_of(position.max(0), self.r.segment_length)
                }
                Some(_) => continue, // read whole
            };
            self.cap = self.cap.min(cap);
        }
    }
}

/// Takes segments from the oldest plans first until the journal keeps at most `n` segments.
fn trim_segments(plans: &mut [Plan], n: i64) {
    let mut excess = plans.iter().map(Plan::segments_kept).sum::<i64>() - n;
    for plan in plans {
        if excess <= 0 {
            break;
        }
        let before = plan.segments_kept();
        let removable = (plan.limit() - plan.keep_from).max(0) / plan.length();
        plan.raise(plan.keep_from + excess.min(removable) * plan.length());
        excess -= before - plan.segments_kept();
    }
}

/// Takes segments from the oldest plans first until the journal keeps at most `bytes`.
fn trim_bytes(plans: &mut [Plan], bytes: i64) {
    let mut excess = plans.iter().map(Plan::bytes_kept).sum::<i64>() - bytes;
    for plan in plans {
        if excess <= 0 {
            break;
        }
        let before = plan.bytes_kept();
        // Keep at most `before - excess` of it: from that far before its stop, a segment's base.
        let from = plan.r.stop_position - (before - excess).max(0);
        plan.raise(
            base_of(from, plan.r.segment_length) + if from % plan.length() == 0 { 0 } else { plan.length() },
        );
        excess -= before - plan.bytes_kept();
    }
}

/// One pass of retention over the journal whose catalog is `catalog`, as of `now`.
pub(crate) fn apply(catalog: &Catalog<MmapRegion>, now: SystemTime) -> Result<Applied, Error> {
    let dir = catalog.dir();
    let readers = durable_readers(dir)?;
    let journal = catalog.retention();
    let mut plans: Vec<Plan> = catalog.list().into_iter().flatten().map(Plan::of).collect();
    for plan in &mut plans {
        plan.protect(&readers);
        let own = plan.r.retention;
        plan.apply_own(&own, now, dir);
        if let Some(age) = journal.max_age {
            plan.raise(plan.expired_below(now, age, dir));
        }
    }
    if let Some(n) = journal.max_segments {
        trim_segments(&mut plans, n.min(i64::MAX as u64) as i64);
    }
    if let Some(bytes) = journal.max_bytes {
        trim_bytes(&mut plans, bytes.min(i64::MAX as u64) as i64);
    }
    let mut applied = Applied::default();
    for plan in &mut plans {
        if plan.keep_from <= plan.first {
            continue;
        }
        // Not while an operator works on it (the next pass will do it).
        let Some(_lock) = catalog.maintain(plan.r.slot, false)? else { continue };
        let Some(r) = catalog.read(plan.r.slot)?.filter(|now| now.id == plan.r.id) else { continue };
        let outcome = if r.is_stopped() && plan.keep_from >= plan.end {
            applied.recordings_deleted += 1;
            delete_locked(catalog, &r)?
        } else {
            move_start_up(catalog, &r, plan.keep_from, true)?
        };
        applied.files_removed += outcome.files_removed;
        applied.bytes_removed += outcome.bytes_removed;
    }
    Ok(applied)
}

/// Applies the retention policies of the journal `dir` once (what a recorder with a policy does
/// every second).
pub fn apply_retention(journal: impl AsRef<Path>) -> Result<Applied, Error> {
    let catalog = super::maintenance::open(journal.as_ref())?;
    apply(&catalog, SystemTime::now())
}

/// Sets the retention policy of the whole journal `dir` (kept in its catalog): applied by every
/// recorder of the journal, and by [`apply_retention`].
pub fn set_journal_retention(journal: impl AsRef<Path>, policy: Retention) -> Result<(), Error> {
    super::maintenance::open(journal.as_ref())?.set_retention(policy)
}

/// The retention policy of the whole journal `dir`.
pub fn journal_retention(journal: impl AsRef<Path>) -> Result<Retention, Error> {
    Ok(Catalog::open(journal.as_ref())?.retention())
}

/// A recorder's retention thread: one pass every `interval`, stopped (and joined) on drop.
#[derive(Debug)]
pub(crate) struct RetentionThread {
    stop: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
    error: Arc<Mutex<Option<Error>>>,
}

impl RetentionThread {
    pub(super) fn spawn(journal: PathBuf, interval: Duration) -> Result<Self, Error> {
        let (stop, stopped) = mpsc::channel::<()>();
        let error = Arc::new(Mutex::new(None));
        let errors = error.clone();
        let handle = std::thread::Builder::new()
            .name("shmlog-retention".into())
            .spawn(move || {
                let catalog = match Catalog::open_or_create(&journal, super::catalog::DEFAULT_CAPACITY) {
                    Ok(catalog) => catalog,
                    Err(e) => {
                        *errors.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        return;
                    }
                };
                loop {
                    match stopped.recv_timeout(interval) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    if let Err(e) = apply(&catalog, SystemTime::now()) {
                        *errors.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    }
                }
            })
            .map_err(|e| Error::io("start the retention thread", "shmlog-retention", e))?;
        Ok(Self { stop: Some(stop), handle: Some(handle), error })
    }

    /// The last error a pass met, once.
    pub(super) fn take_error(&self) -> Option<Error> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl Drop for RetentionThread {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}
