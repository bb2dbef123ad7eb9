//! Who is alive, as the kernel knows it: open-file-description locks that the kernel drops when
//! their holder dies, however it dies (see `sys::lock`).
//!
//! | lock | held by | means |
//! |---|---|---|
//! | write lock on byte 0 of the log | the publisher | publisher alive |
//! | read lock on byte 1 of the log | every reader mapping it | log in use |
//! | read lock on byte 0 of the slot file | every process with it open | slot file in use |
//! | read lock on byte 0 of a concurrent log | every writer of it | some writer alive |
//! | write lock on byte `64 + i` of a concurrent log | writer slot `i`'s owner | writer alive |
//! | write lock on byte 2 of a concurrent log | the unblocker, briefly | one unblocker at a time |
//! | write lock on byte 3 of a concurrent log | a leaving writer, briefly | one leaver at a time |
//! | write lock on a slot's page of the slot file | the slot's reader | reader alive, slot owned |
//! | write lock on the whole slot file | whoever removes it, briefly | nobody else has it open |
//!
//! Locks belong to an open file description, which `fork()` shares: a child forked without
//! `exec` keeps its parent's tokens alive (see `docs/reliability.md`).

use super::concurrent_writer::{ConcurrentWriter, WriterLiveness};
use super::doorbell::{Doorbell, Fanout};
use super::slots::{SlotLocks, SlotMut, Slots};
use super::writer::{Liveness, Writer};
use crate::error::Error;
use crate::layout::slots::{self as s, slot_offset};
use crate::region::{MmapRegion, Region};
use crate::sys::clock::now_ns;
use crate::sys::fs::is_same_file;
use crate::sys::lock::{self, Kind};
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Byte the publisher write-locks in its log while it lives.
pub(crate) const PUBLISHER_LOCK: u64 = 0;
/// Byte every reader of a log read-locks while it maps it.
pub(crate) const READER_LOCK: u64 = 1;
/// Byte of the slot file that every process holding it open read-locks (in the header, outside
/// every slot), so whoever removes the file, which write-locks all of it first, never removes a
/// file a live publisher or reader uses.
pub(crate) const USER_LOCK: u64 = 0;

/// Byte the one unblocker of a concurrent log write-locks while it pads dead writers' holes.
pub(crate) const UNBLOCK_LOCK: u64 = 2;
/// Byte a leaving writer of a concurrent log write-locks while it finds out whether it is the last.
pub(crate) const CLOSE_LOCK: u64 = 3;
/// Byte `WRITER_LOCKS + i` of a concurrent log is write-locked by writer slot `i`'s owner.
pub(crate) const WRITER_LOCKS: u64 = 64;

/// `true` if another open file description holds a lock on `[start, start + len)` that
/// conflicts with `kind` (`len` 0: to the end of the file). Never takes a lock, so tools can ask
/// without disturbing anyone. An error (a bug, or an exotic file system) reads as "held": never
/// call a live owner dead.
pub(crate) fn held(file: &File, kind: Kind, start: u64, len: u64) -> bool {
    lock::is_held(file, kind, start, len).unwrap_or(true)
}

/// `true` while the log's publisher holds its lock: the exclusive publisher's write lock, or the
/// read lock of any writer of a concurrent log.
pub(crate) fn publisher_alive(log: &File) -> bool {
    held(log, Kind::Exclusive, PUBLISHER_LOCK, 1)
}

/// `true` while writer slot `slot` of a concurrent log is held by a live writer.
pub(crate) fn writer_alive(log: &File, slot: usize) -> bool {
    held(log, Kind::Exclusive, WRITER_LOCKS + slot as u64, 1)
}

/// The kernel's word on the writers of a concurrent log, through a read-write descriptor of it
/// (`own`: the asker's own writer slot, which its own descriptor's lock cannot show).
#[derive(Debug)]
pub(crate) struct LogWriters {
    pub(crate) file: File,
    pub(crate) own: Option<usize>,
}

impl WriterLiveness for LogWriters {
    fn writer_alive(&self, slot: usize) -> bool {
        self.own == Some(slot) || writer_alive(&self.file, slot)
    }

    fn with_unblock_lock<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        if !matches!(lock::try_lock(&self.file, Kind::Exclusive, UNBLOCK_LOCK, 1), Ok(true)) {
            return None;
        }
        let out = f();
        let _ = lock::unlock(&self.file, UNBLOCK_LOCK, 1);
        Some(out)
    }
}

/// `true` while some reader maps the log.
pub(crate) fn log_mapped_by_readers(log: &File) -> bool {
    held(log, Kind::Exclusive, READER_LOCK, 1)
}

/// `true` while some process holds slot `index`'s lock of the slot file.
pub(crate) fn slot_owner_alive(slot_file: &File, index: usize) -> bool {
    let (start, len) = slot_range(index);
    held(slot_file, Kind::Exclusive, start, len)
}

/// `true` if the session `session` (numbered `seq`) is owed to a live reader of the stream
/// ([`Slots::owed_readers`]): its finished log must stay for that reader to read.
pub(crate) fn owed_to_live_reader<R: Region>(
    slots: &Slots<R>,
    slot_file: &File,
    session: i32,
    seq: i32,
) -> bool {
    slots.owed_readers(session, seq).any(|i| slot_owner_alive(slot_file, i))
}

/// `true` while some reader holds any of the `count` slots of the slot file.
pub(crate) fn slots_held(slot_file: &File, count: usize) -> bool {
    held(slot_file, Kind::Exclusive, s::SLOTS_START as u64, (count * s::SLOT_LEN) as u64)
}

/// `true` while any other process holds any lock on the file (has it open, for our files).
pub(crate) fn in_use(file: &File) -> bool {
    held(file, Kind::Exclusive, 0, 0)
}

/// Takes a lock on the whole file, which proves that no other process holds one (nobody else has
/// a slot file or a temporary open), and keeps everyone out until it is dropped.
pub(crate) fn lock_whole(file: &File) -> std::io::Result<bool> {
    lock::try_lock(file, Kind::Exclusive, 0, 0)
}

/// Takes the publisher's and the readers' bytes of a log: it has no live publisher and no
/// reader maps it, and neither can appear until the lock is dropped.
pub(crate) fn lock_log_owners(log: &File) -> std::io::Result<bool> {
    lock::try_lock(log, Kind::Exclusive, PUBLISHER_LOCK, 2)
}

/// The byte range of slot `index`: its page.
pub(crate) fn slot_range(index: usize) -> (u64, u64) {
    (slot_offset(index) as u64, s::SLOT_LEN as u64)
}

/// A stream's reader-slot file, open read-write: the slots' kernel tokens are its byte-range
/// locks. Holding it open holds the file's user lock.
#[derive(Debug)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct SlotFile {
    pub(crate) file: File,
    pub(crate) path: PathBuf,
    /// The stream's wake FIFO beside it, opened the first time a ring has to write it.
    pub(crate) fanout: Arc<Fanout>,
}

impl SlotFile {
    pub(crate) fn new(file: File, path: PathBuf) -> Self {
        let fanout = Arc::new(Fanout::of(&path));
        Self { file, path, fanout }
    }

    /// `true` if the stream's name still leads to this file.
    pub(crate) fn is_current(&self) -> Result<bool, Error> {
        is_same_file(&self.file, &self.path).map_err(|e| Error::io("inspect", &self.path, e))
    }

    /// Claims a free slot of `slots` for this process (an `untethered` reader's, or not): takes
    /// its lock, maps its page alone read-write and marks it claimed (raising the high-water mark through a short-lived
    /// mapping of the header). `Ok(None)` if every slot is held, or if the file was removed
    /// meanwhile (the caller reopens).
    pub(crate) fn claim<R: Region>(
        &self,
        slots: &Slots<R>,
        untethered: bool,
    ) -> Result<Option<SlotMut<MmapRegion>>, Error> {
        let Some(index) = slots.lock_free(self)? else { return Ok(None) };
        let mapped = MmapRegion::map(&self.file, slot_offset(index) as u64, s::SLOT_LEN).and_then(|slot| {
            Ok((slot, MmapRegion::map(&self.file, 0, s::HEADER_LEN)?, self.map_doorbell()?))
        });
        let (page, header, bell) = match mapped {
            Ok(maps) => maps,
            Err(e) => {
                self.unlock(index);
                return Err(Error::io("map reader slot", &self.path, e));
            }
        };
        let mut slot = SlotMut::new(page, 0, index).with_bell(bell);
        slot.set_untethered(untethered);
        slot.claim(&header, std::process::id() as i64, now_ns());
        drop(header);
        // Holding a slot lock keeps `remove_if_abandoned` from removing the file from now on; if
        // it was removed before, the slot is in a file nobody else will open: leave it, reopen.
        match self.is_current() {
            Ok(true) => Ok(Some(slot)),
            Ok(false) => {
                self.release(slot);
                Ok(None)
            }
            Err(e) => {
                self.release(slot);
                Err(e)
            }
        }
    }

    /// The stream's doorbell page, mapped read-write on its own (sleepers write it).
    pub(crate) fn map_doorbell(&self) -> std::io::Result<Doorbell<MmapRegion>> {
        let page = MmapRegion::map(&self.file, s::DOORBELL as u64, s::DOORBELL_LEN)?;
        Ok(Doorbell::new(page, 0).with_fanout(Arc::clone(&self.fanout)))
    }

    /// Frees our slot and drops its lock.
    pub(crate) fn release(&self, slot: SlotMut<MmapRegion>) {
        slot.free();
        self.unlock(slot.index());
    }

    /// Removes the file if no other process has it open (no publisher, no reader, not even one
    /// about to claim a slot): the last user to leave removes it. Returns whether it did. Call
    /// it holding no slot.
    pub(crate) fn remove_if_abandoned(&self) -> bool {
        // Replaces our own user lock; conflicts with everyone else's.
        if !matches!(lock::try_lock(&self.file, Kind::Exclusive, 0, 0), Ok(true)) {
            return false;
        }
        let removed =
            is_same_file(&self.file, &self.path).unwrap_or(false) && std::fs::remove_file(&self.path).is_ok();
        if removed {
            // The stream's wake FIFO goes with it (reactor sleepers of a new slot file make theirs).
            let _ = std::fs::remove_file(self.fanout.path());
        }
        // Back to a plain user: a lock on the whole file would keep everyone else out.
        let _ = lock::try_lock(&self.file, Kind::Shared, USER_LOCK, 1);
        let _ = lock::unlock(&self.file, USER_LOCK + 1, 0);
        removed
    }
}

/// A slot's lock is an exclusive OFD lock on its page of the slot file.
impl SlotLocks for SlotFile {
    type Error = Error;

    fn try_lock(&self, index: usize) -> Result<bool, Error> {
        let (start, len) = slot_range(index);
        lock::try_lock(&self.file, Kind::Exclusive, start, len).map_err(|e| Error::io("lock", &self.path, e))
    }

    fn unlock(&self, index: usize) {
        let (start, len) = slot_range(index);
        let _ = lock::unlock(&self.file, start, len);
    }
}

/// The writer of a stream's files: its log and the reader-slot file mapped read-write, its
/// readers' liveness from the slot file's locks.
pub(crate) type FileWriter = Writer<MmapRegion, MmapRegion, Paced>;

/// The shortest step between a writer's checkpoints (`stream::flow`): one frame of the smallest
/// size, so a slow writer looks at the clock at every append.
pub(crate) const MIN_CHECKPOINT_STEP: i64 = 32;
/// The longest: a writer at full speed looks at the clock at least once per 32 KiB appended
/// (1 024 of the smallest messages).
pub(crate) const MAX_CHECKPOINT_STEP: i64 = 32 << 10;

/// The publisher's liveness: the slot file's locks, asked at most once per interval, and the
/// pace of its checkpoints.
#[derive(Debug)]
pub(crate) struct Paced {
    pub(crate) slot_file: SlotFile,
    interval: Duration,
    last_sweep: Option<Instant>,
    /// When the writer last asked `sweep_due`, and the step to its next checkpoint.
    last_ask: Option<Instant>,
    step: i64,
}

impl Paced {
    pub(crate) fn new(slot_file: SlotFile, interval: Duration) -> Self {
        Self { slot_file, interval, last_sweep: None, last_ask: None, step: MAX_CHECKPOINT_STEP }
    }
}

/// The step to a writer's next checkpoint, from the last one and the time since it was set: a
/// writer back within an eighth of the liveness interval doubles it (up to the longest), one that
/// took longer comes back after one frame. So a writer at a steady pace asks at least every
/// quarter of an interval (a step that took longer than an eighth followed one that took less),
/// and one at full speed once per longest step; a writer that slows down abruptly asks again
/// within one longest step.
fn next_step(step: i64, since_last_ask: Option<Duration>, interval: Duration) -> i64 {
    match since_last_ask {
        Some(d) if d < interval / 8 => step.saturating_mul(2).min(MAX_CHECKPOINT_STEP),
        _ => MIN_CHECKPOINT_STEP,
    }
}

impl SlotLocks for Paced {
    type Error = Error;

    fn try_lock(&self, index: usize) -> Result<bool, Error> {
        self.slot_file.try_lock(index)
    }

    fn unlock(&self, index: usize) {
        self.slot_file.unlock(index)
    }
}

impl Liveness for Paced {
    fn sweep_due(&mut self) -> bool {
        let now = Instant::now();
        self.step = next_step(self.step, self.last_ask.map(|t| now.duration_since(t)), self.interval);
        self.last_ask = Some(now);
        let due = self.last_sweep.is_none_or(|t| now.duration_since(t) >= self.interval);
        if due {
            self.last_sweep = Some(now);
        }
        due
    }

    fn checkpoint_step(&self) -> i64 {
        self.step
    }

    fn fanout(&self) -> Option<&Fanout> {
        Some(&self.slot_file.fanout)
    }
}

/// A writer of a concurrent stream's files.
pub(crate) type FileConcurrentWriter = ConcurrentWriter<MmapRegion, MmapRegion, ConcurrentPaced>;

/// A concurrent writer's liveness: the reader slots' locks (asked at most once per interval), and
/// the writers' locks in the log.
#[derive(Debug)]
pub(crate) struct ConcurrentPaced {
    pub(crate) readers: Paced,
    pub(crate) writers: LogWriters,
}

impl SlotLocks for ConcurrentPaced {
    type Error = Error;

    fn try_lock(&self, index: usize) -> Result<bool, Error> {
        self.readers.try_lock(index)
    }

    fn unlock(&self, index: usize) {
        self.readers.unlock(index)
    }
}

impl Liveness for ConcurrentPaced {
    fn sweep_due(&mut self) -> bool {
        self.readers.sweep_due()
    }

    fn checkpoint_step(&self) -> i64 {
        self.readers.checkpoint_step()
    }

    fn fanout(&self) -> Option<&Fanout> {
        self.readers.fanout()
    }
}

impl WriterLiveness for ConcurrentPaced {
    fn writer_alive(&self, slot: usize) -> bool {
        self.writers.writer_alive(slot)
    }

    fn with_unblock_lock<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        self.writers.with_unblock_lock(f)
    }
}

#[cfg(all(test, not(shmlog_loom)))]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_follow_the_writers_pace() {
        let interval = Duration::from_millis(80);
        let quick = Some(Duration::from_millis(1));
        let slow = Some(Duration::from_millis(10));
        assert_eq!(next_step(64, quick, interval), 128, "back quickly: twice as far");
        assert_eq!(next_step(MAX_CHECKPOINT_STEP, quick, interval), MAX_CHECKPOINT_STEP);
        assert_eq!(next_step(MAX_CHECKPOINT_STEP, slow, interval), MIN_CHECKPOINT_STEP, "slowed down");
        assert_eq!(next_step(MAX_CHECKPOINT_STEP, None, interval), MIN_CHECKPOINT_STEP, "first ask");
    }
}
