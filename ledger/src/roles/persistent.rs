//! A persistent reader process: a `journal::PersistentSubscription` under a durable name that
//! outlives the process (killed with SIGKILL and started again under the same name, it resumes
//! where the name's stored position says). It needs a recorder of its stream in the same
//! journal: that is what it falls back to when lapped.
//!
//! Besides the reader's lines it logs `pos rec=ID at=P` whenever the stored position changed
//! after a poll: what the next incarnation may deliver again is what this one delivered after
//! its last such line (the oracle's `P.redelivered`).

use super::shapes::{finish, idle_for, limit};
use super::tracker::{Speed, Tracker};
use super::{mark_heap_open, Ctx};
use crate::ev;
use shmlog::journal::{PersistentSubscription, Start};
use shmlog::{FragmentAssembler, IdleStrategy, Subscription};
use std::time::Duration;

pub(super) fn run(ctx: &Ctx) -> i32 {
    let s = &ctx.s;
    let stream = s.str("stream");
    let name = s.str("name");
    ev!(
        ctx.out,
        "start",
        "role=persistent proc={} inc={} stream={stream} name={name} shape=persistent tethered=0 join=earliest speed={} limit={}",
        ctx.proc,
        ctx.inc,
        s.str("speed"),
        limit(ctx)
    );
    let live = Subscription::builder(stream)
        .dir(&ctx.dir)
        .liveness_interval(Duration::from_millis(s.num("liveness_ms", 100)));
    // A name that read nothing yet starts at the journal's oldest message: then everything the
    // stream committed since the recorder began is owed to the name.
    let opened = PersistentSubscription::builder(&ctx.journal, name).live(live).start(Start::Earliest).open();
    let mut sub = match opened {
        Ok(sub) => sub,
        Err(e) => {
            ev!(ctx.out, "nostart", "why={}", e.to_string().replace(' ', "-"));
            return 0;
        }
    };
    ev!(ctx.out, "opened", "join=earliest");
    let speed = match s.str("speed") {
        "slow" => Speed::Slow(ctx.rng.clone().range(1, 20) as u32),
        "work" => Speed::Work(Duration::from_micros(ctx.rng.clone().range(1, 50))),
        _ => Speed::Fast,
    };
    let mut rng = ctx.rng.clone();
    let mut t = Tracker::new(ctx.out.clone(), speed, rng.fork(7), false);
    // Its sessions change as it goes from one recording (or live log) to the next, inside a
    // poll: a new session is a `joined` line, not a broken promise.
    t.joins_in_call = true;
    let mut asm = FragmentAssembler::new(t);
    let (limit, mut idle) = (limit(ctx), idle_for(ctx));
    let mut stored = sub.position();
    mark_heap_open();
    while !ctx.stopping() {
        let n = match sub.poll(&mut asm, limit) {
            Ok(n) => n,
            Err(e) => {
                ev!(asm.delegate_mut().out, "bad", "why=persistent-poll:{}", e.to_string().replace(' ', "-"));
                ctx.nap(Duration::from_millis(10));
                0
            }
        };
        while let Some(l) = sub.take_loss() {
            asm.delegate_mut().loss(&l);
        }
        let now = sub.position();
        if now != stored {
            stored = now;
            if let Some((rec, at)) = now {
                ev!(asm.delegate_mut().out, "pos", "rec={rec} at={at}");
            }
        }
        idle.idle(n);
    }
    finish(asm.delegate_mut())
}
