//! Loom model of a catalog record (`journal::record`, the shipped code over a `LoomRegion`).
//!
//! - `j_catalog_record_vs_reader`: a recorder publishes a recording, moves its recorded and
//!   durable positions and stops it, while another process takes a snapshot and decodes it. The
//!   snapshot must always decode: free, or the very fields published, with
//!   `start <= durable <= recorded`, and a stopped recording's final stop position. The mutant
//!   that publishes the state with a relaxed store (`shmlog_mutant_relaxed_catalog`) lets the
//!   reader see a state before the fields it publishes, and must fail.

use super::record::{self, Fields, RecordingState, StopReason, RECORD_LEN, WORDS};
use crate::region::LoomRegion;
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
                record::publish(&*region, 0, &fields());
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
