//! A recorder process: a `journal::Recorder` of one stream, tethered or not, killed and
//! restarted like any process. It logs each recording it writes to and each loss it is told
//! of; the controller replays the recordings after the run.

use super::{Ctx, Tracker};
use crate::ev;
use shmlog::journal::Recorder;
use std::time::Duration;

/// Segment files of 64 KiB (raised to the term length): a split recording costs little disk.
const SEGMENT: u64 = 1 << 16;

pub(super) fn run(ctx: &Ctx) -> i32 {
    let s = &ctx.s;
    let stream = s.str("stream");
    let tethered = s.num::<u8>("tethered", 1) == 1;
    ev!(
        ctx.out,
        "start",
        "role=recorder proc={} inc={} stream={stream} shape=recorder tethered={}",
        ctx.proc,
        ctx.inc,
        tethered as u8
    );
    let started = Recorder::builder(stream, &ctx.journal)
        .stream_dir(&ctx.dir)
        .tethered(tethered)
        .segment_length(SEGMENT.max(s.num("term", 1 << 16)))
        .start();
    let mut rec = match started {
        Ok(r) => r,
        Err(e) => {
            ev!(ctx.out, "nostart", "why={}", e.to_string().replace(' ', "-"));
            return 0;
        }
    };
    ev!(ctx.out, "opened");
    // Losses are logged the way a reader's are, through a tracker on the same file.
    let mut t = Tracker::new(ctx.out.clone(), super::tracker::Speed::Fast, ctx.rng.clone(), false);
    let mut current = None;
    let mut failed = false;
    while !ctx.stopping() {
        let n = match rec.poll() {
            Ok(n) => n,
            Err(e) => {
                if !failed {
                    ev!(ctx.out, "bad", "why=recorder-failed:{}", e.to_string().replace(' ', "-"));
                    failed = true;
                }
                0
            }
        };
        if rec.recording_id() != current {
            current = rec.recording_id();
            if let Some(id) = current {
                ev!(ctx.out, "recording", "id={id}");
            }
        }
        while let Some(l) = rec.take_loss() {
            t.loss(&l);
        }
        if n == 0 {
            rec.wait(Duration::from_millis(5));
        }
    }
    ev!(ctx.out, "exit", "lost_bytes={} failed={}", rec.lost_bytes(), rec.is_failed() as u8);
    ctx.out.flush();
    let _ = rec.stop();
    0
}
