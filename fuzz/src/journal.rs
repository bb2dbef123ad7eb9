//! Fuzz target `journal`: catalog records, segment frames and whole recordings on disk, damaged.

use crate::input::Input;
use shmlog::__fuzz::frame::{HeaderRest, BEGIN_FLAG, END_FLAG, TYPE_DATA};
use shmlog::__fuzz::journal::{self as j, record, Catalog, Checksum, Expect, Fields};
use shmlog::__fuzz::{align, Terms};
use shmlog::journal::{self as public, Replay};
use shmlog::Header;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

const TERM: usize = 64 * 1024;
const MTU: usize = 1024;
const SESSION: i32 = 5;
const STREAM: i32 = 6;

/// Fuzz target `journal`:
/// - a catalog record's 64 words, valid ones damaged: decoding never panics, and what it accepts
///   is ordered (`origin <= start <= durable <= recorded`, aligned) with a sane geometry;
/// - one frame header over hostile bytes: accepted frames fit their term;
/// - a recording written as a recorder writes it (messages, fragments, padding at term ends),
///   with or without a CRC32C in each frame's reserved value, then damaged (bytes overwritten,
///   single bits flipped, a segment truncated, catalog words overwritten): listing, replay from
///   any message start and recovery never panic; a replay delivers every frame that lies wholly
///   before the first damaged byte exactly as written, positions only grow, and recovery cuts at
///   or below the recorded end. In a checksummed recording (catalog intact) every delivered
///   fragment is exactly a written frame, wherever the damage lies: a damaged byte of a frame's
///   header or payload is never delivered. Then retention's operations (purge, detach, attach,
///   delete detached, truncate) at positions from the input: they never panic, and on an intact
///   recording a replay afterwards delivers only written frames, in order;
/// - the journal's durable readers' file with hostile words: listing never panics.
pub fn journal(data: &[u8]) {
    let mut input = Input::new(data);
    // 2 and 3 keep the byte values of the seeds written before sealed recordings existed.
    match input.below(5) {
        0 => record_words(&mut input),
        1 => one_frame(&mut input),
        4 => readers_file(&mut input),
        scenario => recording(&mut input, scenario == 3),
    }
}

fn fields(checksum: Checksum) -> Fields<'static> {
    Fields {
        stream: "fuzz",
        session_id: SESSION,
        stream_id: STREAM,
        term_length: TERM,
        mtu: MTU,
        initial_term_id: 17,
        segment_length: TERM as u64,
        start_position: 0,
        start_unix_ns: 1,
        boot_id: j::boot_id(),
        pid: 1,
        gap_before: 0,
        previous: None,
        checksum,
        retention: j::Retention::none(),
    }
}

fn record_words(input: &mut Input<'_>) {
    let region = shmlog::__fuzz::HeapRegion::new(record::RECORD_LEN);
    record::publish(&region, 0, 0, &fields(Checksum::Crc32c));
    let mut words = record::snapshot(&region, 0);
    for _ in 0..input.below(6) {
        let w = input.below(j::WORDS);
        words[w] = input.interesting_i64();
    }
    if let Ok(Some(r)) = record::decode(0, &words, input.bool()) {
        assert!(r.origin_position <= r.start_position);
        assert!(r.start_position <= r.durable_position && r.durable_position <= r.stop_position);
        assert!(r.start_position >= 0 && r.stop_position % 32 == 0);
        assert!(r.term_length.is_power_of_two() && r.segment_length >= r.term_length as u64);
        assert!(!r.stream.is_empty() && r.stream.len() <= 128);
    }
}

fn expect() -> Expect {
    Expect { terms: Terms::new(TERM, 17), session_id: SESSION, stream_id: STREAM }
}

fn one_frame(input: &mut Input<'_>) {
    let position = (input.below(4 * TERM / 32) * 32) as i64;
    let n = input.below(128);
    let bytes = input.bytes(n);
    if let Ok(Some(f)) = j::frame_at(bytes, position, &expect()) {
        let offset = position as usize % TERM;
        assert!(f.len >= 32 && f.aligned <= TERM - offset && f.aligned % 32 == 0);
    }
    // The checksum takes any bytes, even shorter than a header.
    let _ = j::checksum(bytes);
}

/// One frame as written: where it starts, and its bytes.
struct Written {
    position: i64,
    bytes: Vec<u8>,
}

fn frame(position: i64, flags: u8, payload_len: usize, fill: u8) -> Written {
    let e = expect();
    let rest = HeaderRest {
        flags,
        frame_type: TYPE_DATA,
        term_offset: e.terms.term_offset(position) as i32,
        session_id: SESSION,
        stream_id: STREAM,
        term_id: e.terms.term_id(position),
        ..Default::default()
    };
    let len = payload_len + 32;
    let mut bytes = vec![fill; align(len, 32)];
    bytes[..4].copy_from_slice(&(len as i32).to_le_bytes());
    bytes[4..32].copy_from_slice(&rest.encode());
    Written { position, bytes }
}

fn scratch_dir() -> PathBuf {
    let base = std::env::var_os("SHMLOG_FUZZ_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let n = std::thread::current().id();
    base.join(format!("shmlog-fuzz-journal-{}-{n:?}", std::process::id()).replace(['(', ')'], ""))
}

/// `sealed`: each frame carries its CRC32C (`Checksum::Crc32c`).
fn recording(input: &mut Input<'_>, sealed: bool) {
    let dir = scratch_dir();
    let _ = std::fs::remove_dir_all(&dir);
    let catalog = Catalog::open_or_create(&dir, 4).expect("a catalog in a scratch directory");
    let checksum = if sealed { Checksum::Crc32c } else { Checksum::None };
    let (id, slot) = catalog.allocate(&fields(checksum)).expect("a record");
    // Messages as the publisher would cut them, padding where one does not fit its term.
    let mut frames: Vec<Written> = Vec::new();
    let mut position = 0i64;
    let mut data_frames = Vec::new();
    for m in 0..input.below(48) + 1 {
        let len = input.u16() as usize % 3000;
        let framed = shmlog::__fuzz::frame::framed_length(len, MTU - 32) as i64;
        let room = TERM as i64 - position % TERM as i64;
        if framed > room {
            let mut pad = j::padding_header(position, room as usize, &expect());
            if sealed {
                j::seal(&mut pad);
            }
            frames.push(Written { position, bytes: pad.to_vec() });
            position += room;
        }
        let pieces = len.div_ceil(MTU - 32).max(1);
        for k in 0..pieces {
            let size = (len - k * (MTU - 32)).min(MTU - 32);
            let flags = if k == 0 { BEGIN_FLAG } else { 0 } | if k + 1 == pieces { END_FLAG } else { 0 };
            let mut f = frame(position, flags, size, m as u8);
            if sealed {
                j::seal(&mut f.bytes[..size + 32]);
            }
            position += f.bytes.len() as i64;
            data_frames.push(frames.len());
            frames.push(f);
        }
    }
    let stop = position;
    for f in &frames {
        let base = f.position & !(TERM as i64 - 1);
        let path = j::segment_path(&dir, id, base);
        let file = std::fs::OpenOptions::new().create(true).write(true).open(&path).unwrap();
        file.set_len(TERM as u64).unwrap(); // segments are sized up front, as the recorder does
        file.write_all_at(&f.bytes, (f.position - base) as u64).unwrap();
    }
    catalog.set_recorded(slot, stop);
    // Damage, at or after `clean` (everything before it stays as written).
    let mut clean = i64::MAX;
    for _ in 0..input.below(4) {
        match input.below(4) {
            0 if stop > 0 => {
                let at = input.below(stop as usize) as i64;
                let base = at & !(TERM as i64 - 1);
                let file =
                    std::fs::OpenOptions::new().write(true).open(j::segment_path(&dir, id, base)).unwrap();
                let _ = file.write_all_at(&[input.byte() | 1], (at - base) as u64);
                clean = clean.min(at);
            }
            1 if stop > 0 => {
                let at = input.below(stop as usize) as i64;
                let base = at & !(TERM as i64 - 1);
                let file =
                    std::fs::OpenOptions::new().write(true).open(j::segment_path(&dir, id, base)).unwrap();
                let _ = file.set_len((at - base) as u64);
                clean = clean.min(at);
            }
            2 if stop > 0 => {
                // One bit flipped: what a disk or a stray write does.
                let at = input.below(stop as usize) as i64;
                let base = at & !(TERM as i64 - 1);
                let path = j::segment_path(&dir, id, base);
                let file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
                let mut b = [0u8; 1];
                if file.read_exact_at(&mut b, (at - base) as u64).is_ok() {
                    b[0] ^= 1 << input.below(8);
                    let _ = file.write_all_at(&b, (at - base) as u64);
                }
                clean = clean.min(at);
            }
            _ => {
                let w = input.below(j::WORDS);
                let value = input.interesting_i64();
                let file = std::fs::OpenOptions::new().write(true).open(dir.join("catalog")).unwrap();
                let _ = file.write_all_at(
                    &value.to_le_bytes(),
                    (4096 + slot as usize * record::RECORD_LEN + w * 8) as u64,
                );
                clean = -1; // the recording's description itself is in doubt
            }
        }
    }
    let _ = public::recordings(&dir);
    let from = match input.below(3) {
        0 => None,
        1 => data_frames.get(input.below(data_frames.len())).map(|&i| frames[i].position),
        _ => Some(input.interesting_i64()),
    };
    let mut builder = Replay::builder(&dir, id);
    if let Some(from) = from {
        builder = builder.from(from);
    }
    if let Ok(mut replay) = builder.open() {
        let start = replay.position();
        let mut delivered: Vec<(i64, Vec<u8>)> = Vec::new();
        for _ in 0..4 * frames.len() + 4 {
            let polled = replay.poll(|p: &[u8], h: &Header| delivered.push((h.position(), p.to_vec())), 7);
            if !matches!(polled, Ok(n) if n > 0) {
                break;
            }
        }
        let mut last = start;
        for (end, _) in &delivered {
            assert!(*end > last, "positions only grow");
            last = *end;
        }
        if clean >= 0 {
            // Every frame wholly before the damage, from the start on, arrives as written.
            let expected = frames.iter().filter(|f| {
                f.position >= start
                    && f.position + f.bytes.len() as i64 <= clean.min(stop)
                    && f.bytes[6] == TYPE_DATA as u8
            });
            for (f, (end, payload)) in expected.zip(&delivered) {
                let len = i32::from_le_bytes(f.bytes[..4].try_into().unwrap()) as usize;
                assert_eq!(*end, f.position + f.bytes.len() as i64);
                assert_eq!(payload.as_slice(), &f.bytes[32..len], "frame at {} changed", f.position);
            }
            if clean == i64::MAX && from.is_none() {
                assert_eq!(delivered.len(), data_frames.len(), "an intact recording replays whole");
            }
            if sealed {
                // Wherever the damage is, what is delivered is exactly what was written.
                for (end, payload) in &delivered {
                    let f = frames
                        .iter()
                        .find(|f| f.position + f.bytes.len() as i64 == *end && f.bytes[6] == TYPE_DATA as u8)
                        .unwrap_or_else(|| panic!("a fragment ending at {end} was never written"));
                    let len = i32::from_le_bytes(f.bytes[..4].try_into().unwrap()) as usize;
                    assert_eq!(
                        payload.as_slice(),
                        &f.bytes[32..len],
                        "damaged frame at {} delivered",
                        f.position
                    );
                }
            }
        }
    }
    // Recovery of the (possibly damaged) recording as if its recorder had died.
    if let Ok(r) = public::recording(&dir, id) {
        if let Ok(cut) = j::cut(&dir, &r, |_| {}) {
            assert!(cut >= r.start_position && cut <= r.stop_position, "cut {cut} outside the recording");
            if clean == i64::MAX {
                assert_eq!(cut, stop, "an intact recording of whole messages is cut nowhere");
            }
        }
    }
    catalog.stop(slot, stop, j::StopReason::Stopped);
    catalog.release(slot);
    drop(catalog);
    // Retention's operations, anywhere: never a panic; on an intact recording, only written
    // frames are replayed afterwards, in order.
    for _ in 0..input.below(4) {
        let at = match input.below(3) {
            0 => input.below(stop.max(1) as usize) as i64,
            1 => data_frames.get(input.below(data_frames.len())).map_or(0, |&i| frames[i].position),
            _ => input.interesting_i64(),
        };
        let _ = match input.below(5) {
            0 => public::purge(&dir, id, at).map(|_| ()),
            1 => public::detach(&dir, id, at).map(|_| ()),
            2 => public::attach(&dir, id).map(|_| ()),
            3 => public::delete_detached(&dir, id).map(|_| ()),
            _ => public::truncate(&dir, id, at).map(|_| ()),
        };
    }
    if clean == i64::MAX {
        if let Ok(mut replay) = Replay::builder(&dir, id).open() {
            let mut last = replay.position();
            for _ in 0..4 * frames.len() + 4 {
                let mut bad = None;
                let polled = replay.poll(
                    |p: &[u8], h: &Header| {
                        let written =
                            frames.iter().find(|f| f.position + f.bytes.len() as i64 == h.position());
                        let len =
                            written.map(|f| i32::from_le_bytes(f.bytes[..4].try_into().unwrap()) as usize);
                        if written.map(|f| &f.bytes[32..len.unwrap_or(32)]) != Some(p) || h.position() <= last
                        {
                            bad = Some(h.position());
                        }
                        last = h.position();
                    },
                    7,
                );
                assert_eq!(
                    bad, None,
                    "a fragment that was not written (or out of order) replayed after maintenance"
                );
                if !matches!(polled, Ok(n) if n > 0) {
                    break;
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The durable readers' file of a journal, registered readers' words overwritten: listing
/// never panics, and what it lists has names within their bounds.
fn readers_file(input: &mut Input<'_>) {
    let dir = scratch_dir();
    let _ = std::fs::remove_dir_all(&dir);
    let names = ["report", "audit", "x"];
    let registered: Vec<_> = (0..input.below(3) + 1)
        .map(|i| public::DurableReader::register(&dir, names[i], "fuzz").expect("a reader"))
        .collect();
    if let Some(reader) = registered.first() {
        reader.store(input.u32(), input.interesting_i64());
    }
    let file = std::fs::OpenOptions::new().write(true).open(dir.join("readers")).unwrap();
    for _ in 0..input.below(8) {
        let at = 4096 + input.below(3 * 256) as u64 / 8 * 8;
        let _ = file.write_all_at(&input.interesting_i64().to_le_bytes(), at);
    }
    if let Ok(list) = public::durable_readers(&dir) {
        for r in list {
            assert!(r.name.len() <= 64 && r.stream.len() <= 128);
        }
    }
    drop(registered);
    let _ = std::fs::remove_dir_all(&dir);
}
