//! The on-file layout, as bytes: for tests that inspect or damage files the way a buggy or
//! hostile peer could. Offsets mirror `src/layout/log_meta.rs` and `src/layout/slots.rs`
//! (little-endian; the log's metadata is its last 4096 bytes); `docs/format.md` describes them.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Length of the log metadata section at the end of the file.
pub const META_LEN: u64 = 4096;

/// Log metadata offsets (inside the metadata section).
pub mod meta {
    pub const TAIL_COUNTERS: u64 = 0;
    pub const ACTIVE_TERM_COUNT: u64 = 24;
    pub const EOS_POSITION: u64 = 128;
    pub const INITIAL_TERM_ID: u64 = 264;
    pub const HEADER_LENGTH: u64 = 268;
    pub const MTU: u64 = 272;
    pub const TERM_LENGTH: u64 = 276;
    pub const PAGE_SIZE: u64 = 280;
    pub const WINDOW: u64 = 284;
    pub const MAGIC: u64 = 512;
    pub const VERSION: u64 = 520;
    pub const READY: u64 = 524;
    pub const SESSION_ID: u64 = 532;
    pub const NAME_LEN: u64 = 540;
}

/// Reader-slot file offsets.
pub mod slots {
    pub const MAGIC: u64 = 0;
    pub const VERSION: u64 = 8;
    pub const SLOT_COUNT: u64 = 12;
    pub const READY: u64 = 16;
    pub const HIGH_WATER: u64 = 64;
    pub const HEADER_LEN: u64 = 4096;
    pub const SLOTS_START: u64 = 8192;
    pub const DOORBELL: u64 = 4096;
    pub const READERS_ARMED: u64 = DOORBELL;
    pub const READERS_BELL: u64 = DOORBELL + 128;
    pub const WRITER_ARMED: u64 = DOORBELL + 256;
    pub const WRITER_BELL: u64 = DOORBELL + 384;
    pub const READERS_SLEEPING: u64 = DOORBELL + 512;
    pub const READERS_FD_SLEEPING: u64 = DOORBELL + 768;
    pub const WRITER_FD_SLEEPING: u64 = DOORBELL + 1024;
    pub const SLOT_LEN: u64 = 4096;
    pub const STATE: u64 = 0;
    pub const POSITION: u64 = 8;
    pub const PID: u64 = 24;
    pub const STATE_FREE: i64 = 0;
    pub const STATE_ACTIVE: i64 = 2;
}

pub fn log_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.log"))
}

pub fn readers_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.readers"))
}

fn len_of(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

pub fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    let f = OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

pub fn read_at(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let f = OpenOptions::new().read(true).open(path).unwrap();
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, offset).unwrap();
    buf
}

/// Writes an `i32` into the log metadata field at `field`.
/// The `i32` at `offset` of the file at `path`.
pub fn file_i32(path: &Path, offset: u64) -> i32 {
    i32::from_le_bytes(read_at(path, offset, 4).try_into().unwrap())
}

pub fn set_meta_i32(log: &Path, field: u64, value: i32) {
    write_at(log, len_of(log) - META_LEN + field, &value.to_le_bytes());
}

pub fn set_meta_i64(log: &Path, field: u64, value: i64) {
    write_at(log, len_of(log) - META_LEN + field, &value.to_le_bytes());
}

pub fn meta_i32(log: &Path, field: u64) -> i32 {
    i32::from_le_bytes(read_at(log, len_of(log) - META_LEN + field, 4).try_into().unwrap())
}

pub fn meta_i64(log: &Path, field: u64) -> i64 {
    i64::from_le_bytes(read_at(log, len_of(log) - META_LEN + field, 8).try_into().unwrap())
}

/// One reader slot as the file says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub index: usize,
    pub state: i64,
    pub session: i32,
    pub position: i64,
    pub pid: i64,
}

/// Every slot of a reader-slot file (read without locks: a snapshot for assertions).
pub fn read_slots(path: &Path) -> Vec<Slot> {
    let bytes = std::fs::read(path).unwrap();
    let word = |off: u64| i64::from_le_bytes(bytes[off as usize..off as usize + 8].try_into().unwrap());
    let count = i32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    (0..count)
        .map(|i| {
            let base = slots::SLOTS_START + i as u64 * slots::SLOT_LEN;
            let st = word(base + slots::STATE);
            Slot {
                index: i,
                state: st & 0xFFFF_FFFF,
                session: (st >> 32) as i32,
                position: word(base + slots::POSITION),
                pid: word(base + slots::PID),
            }
        })
        .collect()
}
