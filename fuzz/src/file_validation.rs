//! Fuzz target `file_validation`: log and reader-slot validation over hostile bytes, sizes and
//! files.

use crate::input::{
    bytes_of, file_geometry, fresh_log, heap_from, message_bytes, put, small_geometry, Input, SESSION,
};
use shmlog::__fuzz::files::{self, Found};
use shmlog::__fuzz::frame::{max_message_len, FRAME_ALIGNMENT};
use shmlog::__fuzz::meta::{self, META_LEN, PAGE_MIN, PARTITION_COUNT, TERM_MIN_LENGTH};
use shmlog::__fuzz::reader::{self, InPlace};
use shmlog::__fuzz::slot_layout as s;
use shmlog::__fuzz::{
    claimed_slot, hold_publisher_lock, Appender, Counter, Error, FlowControl, Gauge, HeapRegion, Log,
    MmapRegion, ReadOnlyRegion, Region, Slots, Tripped,
};
use shmlog::Action;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Fuzz target `file_validation`: `Log::open`/`open_any_term` and `Slots::open` over hostile
/// bytes and sizes, and `files::open_log`/`files::open_readers` over real files holding them.
///
/// Properties: validation returns `Ok` or a typed error, never panics or faults; an untouched
/// valid image is accepted; whatever is accepted has a consistent geometry and can be read
/// (metadata, producer position, frames) without a panic.
pub fn file_validation(data: &[u8]) {
    let _ = run_file_validation(data);
}

/// [`file_validation`]; returns whether the file was accepted.
pub(crate) fn run_file_validation(data: &[u8]) -> bool {
    let mut input = Input::new(data);
    match input.below(4) {
        0 => {
            let image = log_image(&mut input);
            check_log_open(&heap_from(&image.bytes), &image)
        }
        1 => {
            let (bytes, pristine) = slots_image(&mut input);
            let region = heap_from(&bytes);
            match Slots::open(&region) {
                Ok(slots) => {
                    exercise_slots(&slots, &mut input);
                    true
                }
                Err(e) => {
                    assert!(!pristine, "a valid reader-slot file was refused: {e:?}");
                    false
                }
            }
        }
        2 => {
            let accepted = log_file(&mut input);
            let _ = std::fs::remove_dir_all(scratch_dir());
            accepted
        }
        _ => {
            let accepted = readers_file(&mut input);
            let _ = std::fs::remove_dir_all(scratch_dir());
            accepted
        }
    }
}

/// Bytes of a (possibly damaged) log file.
struct LogImage {
    bytes: Vec<u8>,
    /// Untouched output of `Log::initialize` (and appends).
    pristine: bool,
    /// Its geometry passes the file rules.
    file_rules: bool,
}

fn log_image(input: &mut Input<'_>) -> LogImage {
    if input.below(4) == 0 {
        let len = match input.below(3) {
            0 => input.below(3 * PAGE_MIN),
            1 => PAGE_MIN * input.below(64),
            _ => meta::file_length(TERM_MIN_LENGTH, PAGE_MIN),
        };
        let mut bytes = vec![0u8; len];
        // The metadata section is what validation reads: fill it first.
        let src = input.bytes(len.min(META_LEN));
        bytes[len - src.len()..].copy_from_slice(src);
        return LogImage { bytes, pristine: false, file_rules: false };
    }
    let file_rules = input.bool();
    let g = if file_rules { file_geometry(input) } else { small_geometry(input) };
    let term_count = [0, 1, 2, 7, i32::MAX - 1][input.below(5)];
    let log = fresh_log(g, input.interesting_i32(), term_count);
    let mut appender = Appender::new(log).expect("a fresh log has a writer position");
    let max = max_message_len(g.term_length);
    for seq in 0..input.below(12) as u64 {
        let len = input.below(max + 1);
        let msg = message_bytes(seq, len);
        loop {
            match appender.append(&[&msg], len) {
                Ok(_) => break,
                Err(Tripped) => {
                    if appender.rotate().is_err() {
                        break;
                    }
                }
            }
        }
    }
    let mut bytes = bytes_of(appender.log().region());
    let patches = input.below(8);
    for _ in 0..patches {
        patch_log(&mut bytes, input);
    }
    LogImage { bytes, pristine: patches == 0, file_rules }
}

/// One damage to a log image: a metadata field, a few raw bytes, or the length.
fn patch_log(bytes: &mut Vec<u8>, input: &mut Input<'_>) {
    const I64_FIELDS: [usize; 6] = [
        meta::TAIL_COUNTERS,
        meta::TAIL_COUNTERS + 8,
        meta::TAIL_COUNTERS + 16,
        meta::EOS_POSITION,
        meta::MAGIC_OFFSET,
        meta::CREATED_NS,
    ];
    let m = bytes.len().saturating_sub(META_LEN);
    match input.below(5) {
        0 | 1 => {
            // Every i32 field, plus the first word of the name.
            let i = input.below(meta::I32_FIELDS.len() + 1);
            let at = m + meta::I32_FIELDS.get(i).copied().unwrap_or(meta::NAME);
            put(bytes, at, &input.interesting_i32().to_le_bytes());
        }
        2 => {
            let at = m + I64_FIELDS[input.below(I64_FIELDS.len())];
            put(bytes, at, &input.interesting_i64().to_le_bytes());
        }
        3 => {
            let at = input.below(bytes.len());
            let n = 1 + input.below(8);
            put(bytes, at, input.bytes(n));
        }
        _ => {
            let len = bytes.len();
            let new_len = match input.below(4) {
                0 => len.saturating_sub(PAGE_MIN),
                1 => len + PAGE_MIN,
                2 => input.below(len + 1),
                _ => len * 2,
            };
            bytes.resize(new_len, 0);
        }
    }
}

fn check_log_open(region: &HeapRegion, image: &LogImage) -> bool {
    let any = Log::open_any_term(region);
    let strict = Log::open(region);
    if image.pristine {
        assert!(any.is_ok(), "a valid log was refused: {:?}", any.err());
        if image.file_rules {
            assert!(strict.is_ok(), "a valid file-sized log was refused: {:?}", strict.err());
        }
    }
    if strict.is_ok() {
        assert!(any.is_ok(), "the file rules accepted what the model rules refused");
    }
    let accepted = any.is_ok();
    for log in [any, strict].into_iter().flatten() {
        exercise_log(&log);
    }
    accepted
}

/// Everything a subscriber does with a log it accepted, checked for panics.
fn exercise_log<R: Region>(log: &Log<R>) {
    let g = log.geometry();
    assert!(g.validate_rest().is_ok(), "accepted a log with geometry {g:?}");
    assert_eq!(g.file_length(), log.region().len(), "accepted a log of the wrong length");
    let _ = log.name();
    let _ = log.eos_position();
    let _ = log.publisher_pid();
    let _ = log.active_term_count();
    for i in 0..PARTITION_COUNT {
        let _ = log.raw_tail(i);
    }
    for counter in [
        Counter::BackPressureEvents,
        Counter::LimitRecomputes,
        Counter::ReadersEvicted,
        Counter::IgnoredPositions,
    ] {
        let _ = log.counter(counter);
    }
    for gauge in [Gauge::PublisherLimit, Gauge::ConnectedReaders] {
        let _ = log.gauge(gauge);
    }
    let Ok(producer) = log.producer_position() else { return };
    assert!(producer >= 0, "negative producer position {producer}");
    let terms = log.terms();
    let t = terms.term_length as i64;
    // Subscribers only ever read at 32-aligned positions (a join checks it): do the same.
    for start in [terms.term_begin(producer), producer, producer - t] {
        if start < 0 || start % FRAME_ALIGNMENT as i64 != 0 {
            continue;
        }
        let _ = reader::frame_starts_at(log, start);
        let _ = reader::message_starts_at(log, start);
        let _ = reader::message_start_at_or_after(log, start, producer);
        // SAFETY: single-threaded: nobody writes the region while a handler holds its bytes.
        let _ = unsafe { reader::read_block(log, start, usize::MAX, &mut InPlace, |_: &[u8], _| {}) };
        let mut p = start;
        for _ in 0..PARTITION_COUNT * terms.term_length / FRAME_ALIGNMENT + 3 {
            let cursor = reader::Cursor::new(log, p);
            // SAFETY: as above.
            let scan = unsafe {
                reader::read_at(log, &cursor, usize::MAX, &mut InPlace, |_, _| Action::Continue, |_| {})
            };
            assert!(scan.position >= p, "read moved back");
            if scan.position == p {
                break;
            }
            p = scan.position;
        }
    }
}

/// Bytes of a (possibly damaged) reader-slot file; `true` if untouched.
fn slots_image(input: &mut Input<'_>) -> (Vec<u8>, bool) {
    if input.below(3) == 0 {
        let len = match input.below(2) {
            0 => input.below(2048),
            _ => s::file_length(1 + input.below(8)),
        };
        let mut bytes = vec![0u8; len];
        let src = input.bytes(len);
        bytes[..src.len()].copy_from_slice(src);
        return (bytes, false);
    }
    let count = if input.below(16) == 0 { s::MAX_SLOTS } else { 1 + input.below(8) };
    let region = Arc::new(HeapRegion::new(s::file_length(count)));
    Slots::initialize(Arc::clone(&region), count);
    for _ in 0..input.below(count.min(8) + 1) {
        let slot = claimed_slot(&region, input.below(count), input.interesting_i64());
        if input.bool() {
            let session = if input.bool() { SESSION } else { input.interesting_i32() };
            slot.activate(session, input.interesting_i64());
        }
    }
    let mut bytes = bytes_of(&*region);
    let patches = input.below(6);
    for _ in 0..patches {
        match input.below(4) {
            0 => {
                let at = [s::VERSION, s::SLOT_COUNT, s::READY][input.below(3)];
                put(&mut bytes, at, &input.interesting_i32().to_le_bytes());
            }
            1 => {
                let at = [s::MAGIC_OFFSET, s::HIGH_WATER][input.below(2)];
                put(&mut bytes, at, &input.interesting_i64().to_le_bytes());
            }
            2 => {
                let at = s::slot_offset(input.below(count)) + 8 * input.below(s::SLOT_LEN / 8);
                put(&mut bytes, at, &input.interesting_i64().to_le_bytes());
            }
            _ => {
                let len = bytes.len();
                let new_len =
                    [len.saturating_sub(1), len + 8, len + s::SLOT_LEN, input.below(len)][input.below(4)];
                bytes.resize(new_len, 0);
            }
        }
    }
    (bytes, patches == 0)
}

/// Everything a publisher or subscriber does with a slot table it accepted.
fn exercise_slots<R: Region>(slots: &Slots<R>, input: &mut Input<'_>) {
    let count = slots.count();
    assert!((1..=s::MAX_SLOTS).contains(&count), "accepted {count} slots");
    assert!(slots.high_water() <= count, "high water past the table");
    for session in [SESSION, 0, input.interesting_i32()] {
        let ceiling = input.interesting_i64();
        let found = slots.scan(session, Some(input.below(count)), ceiling);
        assert!(found.count + found.ignored <= count);
        assert_eq!(found.count == 0, found.min.is_none());
        assert!(found.max.is_none_or(|m| m <= ceiling), "a position past the ceiling was counted");
        let mut flow = FlowControl::new(input.below(1 << 16), input.interesting_i64());
        let _ = flow.recompute(slots, session, ceiling);
    }
    for i in 0..slots.high_water().min(64) {
        let _ = slots.view(i);
    }
}

/// A scratch directory of this thread for the file targets (under `/dev/shm` when it exists),
/// created on demand and removed after each run. libFuzzer runs one thread; tests run several.
fn scratch_dir() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
    static THREADS: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static DIR: PathBuf = {
            let base = match std::env::var_os("SHMLOG_FUZZ_DIR") {
                Some(dir) => PathBuf::from(dir),
                None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
                None => std::env::temp_dir(),
            };
            let n = THREADS.fetch_add(1, AtomicOrdering::Relaxed);
            base.join(format!("shmlog-fuzz-{}-{n}", std::process::id()))
        };
    }
    let dir = DIR.with(PathBuf::clone);
    std::fs::create_dir_all(&dir).expect("create the fuzz scratch directory");
    dir
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .expect("create a scratch file");
    f.write_all(bytes).expect("write a scratch file");
    f.set_permissions(std::fs::Permissions::from_mode(mode)).expect("chmod a scratch file");
}

fn remove_any(path: &Path) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_dir(path);
}

/// `files::open_log` (a reader's way in: only a live publisher's log is mapped) and
/// `files::inspect_log` (the tools' way: any file) over a real file (or a directory, a symlink,
/// nothing) at the log's path; the harness holds the publisher's lock on it, or not.
fn log_file(input: &mut Input<'_>) -> bool {
    let dir = scratch_dir();
    let path = dir.join("f.log");
    remove_any(&path);
    let mut pristine = false;
    match input.below(8) {
        0 => {
            assert!(
                matches!(files::open_log(&path, None), Ok(Found::Nothing)),
                "a missing log is not an error"
            );
            assert!(matches!(files::inspect_log(&path, false), Ok(None)), "a missing log is not an error");
            return false;
        }
        1 => std::fs::create_dir(&path).expect("create a scratch directory"),
        2 => {
            let target = dir.join("target.log");
            let image = log_image(input);
            write_file(&target, &image.bytes, 0o600);
            std::os::unix::fs::symlink(&target, &path).expect("create a scratch symlink");
        }
        3 => {
            let image = log_image(input);
            write_file(&path, &image.bytes, [0o602, 0o666, 0o620, 0o000, 0o400][input.below(5)]);
        }
        _ => {
            let image = log_image(input);
            write_file(&path, &image.bytes, 0o600);
            pristine = image.pristine && image.file_rules;
            if input.below(8) == 0 {
                // Sparse growth or truncation after writing, up to past the largest log.
                let file = std::fs::OpenOptions::new().write(true).open(&path).expect("reopen");
                let len = [0, 1, 8191, 8192, (4u64 << 30) + 4096][input.below(5)];
                file.set_len(len).expect("resize a scratch file");
                pristine = false;
            }
        }
    }
    // A live publisher holds its lock on its own open of the file.
    let holder =
        if input.bool() {
            std::fs::OpenOptions::new().read(true).write(true).open(&path).ok().filter(|f| {
                f.metadata().is_ok_and(|m| m.is_file()) && hold_publisher_lock(f).unwrap_or(false)
            })
        } else {
            None
        };
    let mut accepted = false;
    match files::open_log(&path, None) {
        Ok(Found::Live(read)) => {
            assert!(holder.is_some(), "a log without a live publisher was mapped");
            exercise_log(&read.log);
            accepted = true;
        }
        Ok(Found::Dead(_)) => assert!(holder.is_none(), "a live publisher's log reported dead"),
        Ok(Found::Nothing) => panic!("an existing path reported as missing"),
        Ok(Found::Same) => panic!("no log was being read"),
        Err(e) => {
            assert!(!(pristine && holder.is_some()), "a valid, live log file was refused: {e}");
            let _ = e.to_string();
        }
    }
    match files::inspect_log(&path, false) {
        Ok(Some((_, log))) => exercise_log(&log),
        Ok(None) => panic!("an existing path reported as missing"),
        Err(e) => assert!(!pristine, "a valid log file was refused by the tools: {e}"),
    }
    drop(holder);
    remove_any(&path);
    remove_any(&dir.join("target.log"));
    accepted
}

/// `files::open_readers` (the publisher's read-write mapping, or a reader's read-only one) over
/// a real reader-slot file holding the fuzzed bytes.
fn readers_file(input: &mut Input<'_>) -> bool {
    let dir = scratch_dir();
    let path = dir.join("f.readers");
    remove_any(&path);
    let (bytes, pristine) = slots_image(input);
    write_file(&path, &bytes, 0o600);
    let at_least = input.bool();
    let opened = if input.bool() {
        files::open_readers::<MmapRegion>(&dir, "f", 4, 0o600, at_least).map(|(_, slots)| {
            exercise_slots(&slots, input);
            slots.count()
        })
    } else {
        files::open_readers::<ReadOnlyRegion>(&dir, "f", 4, 0o600, at_least).map(|(_, slots)| {
            exercise_slots(&slots, input);
            slots.count()
        })
    };
    let accepted = match opened {
        Ok(count) => {
            assert!(!at_least || count >= 4, "a slot file of {count} slots accepted for 4");
            true
        }
        Err(Error::ReaderSlots { slots, wanted: 4, .. }) => {
            assert!(at_least && slots < 4, "refused {slots} slots");
            false
        }
        Err(e) => {
            assert!(!pristine, "a valid reader-slot file was refused: {e}");
            false
        }
    };
    remove_any(&path);
    accepted
}
