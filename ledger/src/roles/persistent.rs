//! A persistent reader process: a `journal::PersistentSubscription` under a durable name that
//! outlives the process (killed with SIGKILL and started again under the same name, it resumes
//! where the name's stored position says). It needs a recorder of its stream in the same
//! journal: that is what it falls back to when lapped.
//!
//! Besides the reader's lines it logs `pos rec=ID at=P` whenever the stored position changed
//! after a poll: what the next incarnation may deliver again is what this one delivered after
//! its last such line (the oracle's `P.redelivered`).
//!
//! Its receive shape (`shape=`) is drawn like a live reader's: `poll` (through a
//! `FragmentAssembler`), `controlled` (`controlled_poll` through one, the tracker answering
//! random `Abort`, `Break` and `Commit`), `blocking` (`poll_blocking`), `recv` / `iter` (a `Receiver`) or
//! `async` / `stream` (an `AsyncReceiver` on a tokio runtime). A receiver stores the position
//! inside a receive, before the message it returns: its `pos` line comes before that message's.

use super::shapes::{finish, idle_for, limit};
use super::tracker::{Speed, Tracker};
use super::{mark_heap_open, Ctx};
use crate::ev;
use futures_core::Stream;
use shmlog::journal::{PersistentSubscription, Start};
use shmlog::{
    AsyncReceiver, Bytes, FragmentAssembler, IdleStrategy, Polled, Receiver, RecvError, Subscription,
};
use std::pin::Pin;
use std::time::Duration;

pub(super) fn run(ctx: &Ctx) -> i32 {
    let s = &ctx.s;
    let stream = s.str("stream");
    let name = s.str("name");
    ev!(
        ctx.out,
        "start",
        "role=persistent proc={} inc={} stream={stream} name={name} shape=persistent-{} tethered=0 join=earliest speed={} limit={}",
        ctx.proc,
        ctx.inc,
        shape(ctx),
        s.str("speed"),
        // A receiver reads 64 fragments at a time, whatever the drawn limit: what a kill may
        // deliver again (the oracle's `P.redelivered`).
        if receives(ctx) { 64 } else { limit(ctx) }
    );
    let live = Subscription::builder(stream)
        .dir(&ctx.dir)
        .liveness_interval(Duration::from_millis(s.num("liveness_ms", 100)));
    // A name that read nothing yet starts at the journal's oldest message: then everything the
    // stream committed since the recorder began is owed to the name.
    let opened = PersistentSubscription::builder(&ctx.journal, name).live(live).start(Start::Earliest).open();
    let sub = match opened {
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
    let mut t = Tracker::new(ctx.out.clone(), speed, rng.fork(7), shape(ctx) == "controlled");
    // Its sessions change as it goes from one recording (or live log) to the next, inside a
    // poll: a new session is a `joined` line, not a broken promise.
    t.joins_in_call = true;
    if receives(ctx) {
        receiving(ctx, sub, t)
    } else {
        polling(ctx, sub, t)
    }
}

/// `true` for the shapes that read through a `Receiver`.
fn receives(ctx: &Ctx) -> bool {
    matches!(shape(ctx), "recv" | "iter" | "async" | "stream")
}

fn shape(ctx: &Ctx) -> &str {
    match ctx.s.str("shape") {
        "" => "poll",
        other => other,
    }
}

/// Logs the stored position if it changed since `stored`.
fn note_position(sub: &PersistentSubscription, stored: &mut Option<(u32, i64)>, t: &mut Tracker) {
    let now = sub.position();
    if now != *stored {
        *stored = now;
        if let Some((rec, at)) = now {
            ev!(t.out, "pos", "rec={rec} at={at}");
        }
    }
}

/// `poll`, `controlled_poll`, or `poll_blocking` (`Fault` as it returns it), through a
/// `FragmentAssembler`.
fn polling(ctx: &Ctx, mut sub: PersistentSubscription, t: Tracker) -> i32 {
    let blocking = shape(ctx) == "blocking";
    let controlled = shape(ctx) == "controlled";
    let timeout = Duration::from_millis(ctx.rng.clone().range(1, 50));
    let mut asm = FragmentAssembler::new(t);
    let (limit, mut idle) = (limit(ctx), idle_for(ctx));
    let mut stored = sub.position();
    mark_heap_open();
    while !ctx.stopping() {
        let polled = if blocking {
            sub.poll_blocking(&mut asm, limit, timeout)
        } else if controlled {
            sub.controlled_poll(&mut asm, limit).map(Polled::Fragments)
        } else {
            sub.poll(&mut asm, limit).map(Polled::Fragments)
        };
        let n = match polled {
            Ok(Polled::Fault(why)) => {
                asm.delegate_mut().fault(why);
                0
            }
            Ok(p) => p.fragments(),
            Err(e) => {
                ev!(asm.delegate_mut().out, "bad", "why=persistent-poll:{}", e.to_string().replace(' ', "-"));
                ctx.nap(Duration::from_millis(10));
                0
            }
        };
        while let Some(l) = sub.take_loss() {
            asm.delegate_mut().loss(&l);
        }
        note_position(&sub, &mut stored, asm.delegate_mut());
        if !blocking {
            idle.idle(n);
        }
    }
    finish(asm.delegate_mut())
}

/// A `Receiver` (`recv_timeout`, or its iterator) or an `AsyncReceiver` (`recv().await`, or its
/// `Stream`) over the persistent subscription: whole messages without headers.
fn receiving(ctx: &Ctx, sub: PersistentSubscription, mut t: Tracker) -> i32 {
    let shape = shape(ctx);
    let timeout = Duration::from_millis(ctx.rng.clone().range(1, 50));
    let mut stored = sub.position();
    let mut rx = Receiver::new(sub, Bytes);
    let mut got = |r: Result<Vec<u8>, RecvError<std::convert::Infallible>>,
                   sub: &mut PersistentSubscription,
                   t: &mut Tracker| {
        // Stored inside the receive, before this message: said first.
        note_position(sub, &mut stored, t);
        match r {
            Ok(m) => t.message(&m, None, None),
            Err(RecvError::Timeout) => {}
            Err(RecvError::Lost(l)) => t.loss(&l),
            Err(RecvError::Fault(why)) => {
                t.fault(why);
            }
            Err(RecvError::Journal(e)) => {
                ev!(t.out, "bad", "why=persistent-receive:{}", e.to_string().replace(' ', "-"));
                ctx.nap(Duration::from_millis(10));
            }
            Err(e) => {
                t.fault(if matches!(e, RecvError::Closed) {
                    "persistent receiver closed"
                } else {
                    "unknown receive outcome"
                });
            }
        }
    };
    mark_heap_open();
    match shape {
        "recv" | "iter" => {
            while !ctx.stopping() {
                // The iterator never ends: a persistent subscription's sessions never close.
                let r = if shape == "iter" {
                    rx.next().unwrap_or(Err(RecvError::Closed))
                } else {
                    rx.recv_timeout(timeout)
                };
                got(r, rx.source(), &mut t);
            }
        }
        _ => {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    ev!(t.out, "nostart", "why=runtime:{}", e.to_string().replace(' ', "-"));
                    return 0;
                }
            };
            let mut arx = match rt.block_on(async { AsyncReceiver::new(rx) }) {
                Ok(a) => a,
                Err(e) => {
                    ev!(t.out, "nostart", "why={}", e.to_string().replace(' ', "-"));
                    return 0;
                }
            };
            rt.block_on(async {
                while !ctx.stopping() {
                    let r = if shape == "stream" {
                        std::future::poll_fn(|cx| Pin::new(&mut arx).poll_next(cx))
                            .await
                            .unwrap_or(Err(RecvError::Closed))
                    } else {
                        arx.recv().await
                    };
                    got(r, arx.source(), &mut t);
                }
            });
        }
    }
    finish(&mut t)
}
