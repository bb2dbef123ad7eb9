//! Loom model of a catalog record (`journal::record`, the shipped code over a `LoomRegion`).
//!
//! - `j_catalog_record_vs_reader`: a recorder publishes a recording, moves its recorded and
//!   durable positions and stops it, while another process takes a snapshot and decodes it. The
//!   snapshot must always decode: free, or the very fields published, with
//!   `start <= durable <= recorded`, and a stopped recording's final stop position. The mutant
//!   that publishes the state with a relaxed store (`SHMLOG_MUTANT=relaxed_catalog`) lets the
//!   reader see a state before the fields it publishes, and must fail.
//! - `j2_cut_vs_following_replay`: a replay follows a recording whose recorder died: it read the
//!   record's progress (cut count, recorded position) before, and now reads two words of recorded
//!   bytes (the segment bytes `pread` copies, as relaxed words) while recovery cuts the recording
//!   back (`record::cut_back`), zeroes what lies past the cut and a resumed recorder writes the
//!   same bytes again and moves the recorded position. Whenever the replay trusts what it read
//!   (`record::uncut` holds), it read the recorded bytes, never a zero; when it does not, the
//!   progress it reads again (`record::progress`) lets it read only bytes written back. The
//!   mutant without recovery's fence between counting the cut and zeroing
//!   (`SHMLOG_MUTANT=no_cut_fence`) lets it read a zero and still see the old count, and must
//!   fail.
//! - `j3_reused_record_vs_following_replay`: a replay follows a stopped recording while it is
//!   deleted and its record reused for a new recording (`record::retire`, `record::free`,
//!   `record::publish`). Whenever the replay's progress says the record still holds its recording
//!   (`record::progress`, a seqlock over the id and the state), the positions it loaded are that
//!   recording's, never the new one's. The mutant without the reuser's fence before it writes
//!   the record (`SHMLOG_MUTANT=unfenced_reuse`) lets a loaded word be the new recording's while
//!   the id and state read as the old one's, and must fail.
//! - `j4_purge_vs_replay`: retention moves a recording's start up and then removes the segment
//!   file below it (`record::move_start`; the removal is a store of a word standing for the
//!   file's existence, as the `unlink` system call orders it). A replay that finds the file
//!   missing and then loads the start (`record::start`) sees it past the position it wanted: a
//!   purge, reported as such, never as damage. The mutant that removes the file first
//!   (`SHMLOG_MUTANT=unlink_before_start`) must fail.
//! - `j6_truncation_vs_snapshot`: an operator truncates a stopped recording (`record::truncate`:
//!   the old stop kept, then the positions lowered) while another process takes a snapshot and
//!   decodes it. The snapshot always decodes, and one that holds the lowered stop holds the old
//!   stop as `cut_from` (a persistent subscription reports the cut tail from it). The mutant that
//!   keeps the old stop after lowering (`SHMLOG_MUTANT=cut_from_after_cut`) must fail.
//! - `j5_durable_reader_position`: a durable reader stores its position twice, moving to another
//!   recording (`reader_position::store`) while retention loads it (`reader_position::try_load`):
//!   what loads is a pair that was stored, never a recording with the other's position. The
//!   mutant without the writer's fence (`SHMLOG_MUTANT=unfenced_reader_position`) must fail.

use super::policy::Retention;
use super::reader_position;
use super::record::{self, Checksum, Fields, RecordingState, StopReason, RECORD_LEN, WORDS};
use crate::region::LoomRegion;
use crate::region::{Region, RegionMut};
use crate::sync::Ordering;
use loom::thread;
use std::sync::Arc;

fn fields() -> Fields<'static> {
    Fields {
        stream: "s",
        session_id: 7,
        stream_id: 9,
        term_length: 1 << 16,
        mtu: 1408,
        initial_term_id: 3,
        segment_length: 1 << 20,
        start_position: 4096,
        start_unix_ns: 1,
        boot_id: 2,
        pid: 1000,
        gap_before: 0,
        previous: None,
        checksum: Checksum::Crc32c,
        retention: Retention::none(),
    }
}

#[test]
fn j_catalog_record_vs_reader() {
    // One preemption is enough to put the snapshot anywhere in the recorder's run, and every
    // relaxed load may still read any store loom allows; two make the model take minutes.
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(1);
    builder.check(|| {
        let words: Vec<usize> = (0..WORDS).map(|w| w * 8).collect();
        let region = Arc::new(LoomRegion::new(RECORD_LEN, &[], &[], &words));
        let recorder = {
            let region = region.clone();
            thread::spawn(move || {
                record::publish(&*region, 0, 0, &fields());
                record::set_recorded(&*region, 0, 8192);
                record::set_durable(&*region, 0, 8192);
                record::stop(&*region, 0, 12288, StopReason::EndOfStream, 5);
            })
        };
        let snapshot = record::snapshot(&*region, 0);
        match record::decode(0, &snapshot, true) {
            Ok(None) => {}
            Ok(Some(r)) => {
                let f = fields();
                assert_eq!((r.stream.as_str(), r.session_id, r.stream_id), (f.stream, 7, 9));
                assert_eq!(
                    (r.term_length, r.mtu, r.segment_length),
                    (f.term_length, f.mtu, f.segment_length)
                );
                assert_eq!((r.start_position, r.recorder_pid), (4096, 1000));
                assert!([4096, 8192, 12288].contains(&r.stop_position), "{}", r.stop_position);
                if let RecordingState::Stopped(_) = r.state {
                    assert_eq!(r.stop_position, 12288, "a stopped recording's stop position is final");
                }
            }
            Err(what) => panic!("a snapshot taken while the recorder runs does not decode: {what}"),
        }
        recorder.join().unwrap();
    });
}

#[test]
fn j2_cut_vs_following_replay() {
    // Two words of segment bytes after the record, at the stream positions 8192 - 64 and - 32:
    // a message that began before the cut at 4096 and whose end was recorded.
    const DATA: [usize; 2] = [RECORD_LEN, RECORD_LEN + 8];
    const BYTES: [i64; 2] = [0x1111, 0x2222];
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let mut words: Vec<usize> = (0..WORDS).map(|w| w * 8).collect();
        words.extend(DATA);
        let region = Arc::new(LoomRegion::new(RECORD_LEN + 16, &[], &[], &words));
        record::publish(&*region, 0, 0, &fields());
        for (at, v) in DATA.iter().zip(BYTES) {
            region.store_i64(*at, v, Ordering::Relaxed);
        }
        record::set_recorded(&*region, 0, 8192);
        // What the replay knew before the recorder died.
        let before = record::progress(&*region, 0, 0, 0);
        assert_eq!((before.cuts, before.recorded), (0, 8192));
        let recovery = {
            let region = region.clone();
            thread::spawn(move || {
                // A restarted recorder: cut back to the last complete message, zero past it...
                record::cut_back(&*region, 0, 4096);
                for at in DATA {
                    region.store_i64(at, 0, Ordering::Relaxed);
                }
                // ... resume, write the same bytes again and move the recorded position.
                record::resume(&*region, 0, 4096, 2000);
                for (at, v) in DATA.iter().zip(BYTES) {
                    region.store_i64(*at, v, Ordering::Relaxed);
                }
                record::set_recorded(&*region, 0, 8192);
            })
        };
        // The replay reads the bytes below the recorded position it knew (a `pread`).
        let read = |region: &LoomRegion| DATA.map(|at| region.load_i64(at, Ordering::Relaxed));
        let got = read(&region);
        if record::uncut(&*region, 0, before.cuts, 0, 0) {
            assert_eq!(got, BYTES, "bytes read while no cut began were zeroed under the read");
        } else {
            // A cut began: read again only what the recording holds now.
            let now = record::progress(&*region, 0, 0, 0);
            assert!(now.cuts == 1 && (now.recorded == 4096 || now.recorded == 8192), "{now:?}");
            if now.recorded == 8192 {
                let again = read(&region);
                assert!(record::uncut(&*region, 0, now.cuts, 0, 0));
                assert_eq!(again, BYTES, "bytes below a recorded position written back are whole");
            }
        }
        recovery.join().unwrap();
    });
}

#[test]
fn j3_reused_record_vs_following_replay() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let words: Vec<usize> = (0..WORDS).map(|w| w * 8).collect();
        let region = Arc::new(LoomRegion::new(RECORD_LEN, &[], &[], &words));
        // Recording 7 in record 0, stopped at 12288.
        record::publish(&*region, 0, 7, &fields());
        record::set_recorded(&*region, 0, 12288);
        record::stop(&*region, 0, 12288, StopReason::EndOfStream, 5);
        let reuser = {
            let region = region.clone();
            thread::spawn(move || {
                record::retire(&*region, 0);
                record::free(&*region, 0);
                // Recording 8 begins at 65536 in the same record.
                record::publish(&*region, 0, 8, &Fields { start_position: 65536, ..fields() });
                record::set_recorded(&*region, 0, 70000 & !31);
            })
        };
        let p = record::progress(&*region, 0, 0, 7);
        if p.valid {
            assert_eq!(
                (p.start, p.recorded, p.stopped, p.cuts),
                (4096, 12288, true, 0),
                "the progress of a record reused meanwhile passed for the old recording's"
            );
        }
        reuser.join().unwrap();
    });
}

#[test]
fn j4_purge_vs_replay() {
    // The word after the record stands for the segment file below the new start: 1 while it
    // exists.
    const FILE: usize = RECORD_LEN;
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let mut words: Vec<usize> = (0..WORDS).map(|w| w * 8).collect();
        words.push(FILE);
        let region = Arc::new(LoomRegion::new(RECORD_LEN + 8, &[], &[], &words));
        record::publish(&*region, 0, 7, &Fields { segment_length: 1 << 16, ..fields() });
        record::set_recorded(&*region, 0, 3 << 16);
        region.store_i64(FILE, 1, Ordering::Relaxed);
        let purge = {
            let region = region.clone();
            thread::spawn(move || {
                // Segment 0 goes: the start moves to the first message of segment 1.
                record::move_start(&*region, 0, (1 << 16) + 64, 1 << 16, || {
                    region.store_i64(FILE, 0, Ordering::Release);
                });
            })
        };
        // A replay at 8192 opens the file of segment 0 (an open is an acquire of the file's
        // existence); missing, it loads the start.
        if region.load_i64(FILE, Ordering::Acquire) == 0 {
            let start = record::start(&*region, 0);
            assert!(start > 8192, "a file missing below the start it loaded: taken for damage, not a purge");
        }
        purge.join().unwrap();
    });
}

#[test]
fn j5_durable_reader_position() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let words: Vec<usize> = (0..4).map(|w| w * 8).collect();
        let region = Arc::new(LoomRegion::new(32, &[], &[], &words));
        let writer = {
            let region = region.clone();
            thread::spawn(move || {
                reader_position::store(&*region, 0, 1, 100);
                reader_position::store(&*region, 0, 2, 50);
            })
        };
        if let Some(pair) = reader_position::try_load(&*region, 0) {
            assert!([(0, 0), (1, 100), (2, 50)].contains(&pair), "a torn position loaded: {pair:?}");
        }
        writer.join().unwrap();
    });
}

#[test]
fn j6_truncation_vs_snapshot() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let words: Vec<usize> = (0..WORDS).map(|w| w * 8).collect();
        let region = Arc::new(LoomRegion::new(RECORD_LEN, &[], &[], &words));
        record::publish(&*region, 0, 0, &fields());
        record::set_recorded(&*region, 0, 12288);
        record::stop(&*region, 0, 12288, StopReason::EndOfStream, 5);
        let operator = {
            let region = region.clone();
            thread::spawn(move || record::truncate(&*region, 0, 12288, 8192))
        };
        // Without this yield loom explored one schedule only (the whole snapshot first); with it,
        // the snapshot before, between and after the operator's two steps (9 schedules).
        thread::yield_now();
        let snapshot = record::snapshot(&*region, 0);
        let r = match record::decode(0, &snapshot, false) {
            Ok(Some(r)) => r,
            other => panic!("a snapshot taken during a truncation does not decode: {other:?}"),
        };
        match r.stop_position {
            8192 => assert_eq!(r.cut_from, Some(12288), "the lowered stop without the old one"),
            12288 => assert!(matches!(r.cut_from, None | Some(12288)), "{:?}", r.cut_from),
            other => panic!("stop position {other}"),
        }
        operator.join().unwrap();
    });
}
