//! A reader process: opens a subscription as its settings say (tethered or not, every `JoinAt`,
//! `later_sessions`, `copy_payloads`, `on_lapped`) and reads it through one receive shape
//! (`shapes`), or merges a recording into the live stream.

use super::shapes;
use super::tracker::{Speed, Tracker};
use super::Ctx;
use crate::ev;
use shmlog::{Error, JoinAt, Resume, Subscription, SubscriptionBuilder};
use std::time::Duration;

pub(super) fn run(ctx: &Ctx) -> i32 {
    let s = &ctx.s;
    let shape = s.str("shape").to_string();
    let tracker = |ctx: &Ctx, out: crate::event::Out, stream: &str| {
        ev!(
            out,
            "start",
            "role=reader proc={} inc={} stream={stream} shape={shape} tethered={} join={} later={} copy={} speed={} limit={} lapped={}",
            ctx.proc,
            ctx.inc,
            s.num::<u8>("tethered", 1),
            s.str("join"),
            s.str("later"),
            s.num::<u8>("copy", 0),
            s.str("speed"),
            s.num::<u32>("limit", 16),
            s.str("lapped")
        );
        let speed = match s.str("speed") {
            "work" => Speed::Work(Duration::from_micros(ctx.rng.clone().range(1, 50))),
            "slow" => Speed::Slow(ctx.rng.clone().range(1, 20) as u32),
            _ => Speed::Fast,
        };
        let mut rng = ctx.rng.clone();
        Tracker::new(out, speed, rng.fork(7), shape == "controlled")
    };
    let mut first = tracker(ctx, ctx.out.clone(), s.str("stream"));
    if shape == "merge" {
        return shapes::merge(ctx, first, builder(ctx, s.str("stream"), "liveness_ms"));
    }
    let Some(sub) = open(ctx, &mut first, s.str("stream"), "liveness_ms") else { return 0 };
    if shape == "wait_any" {
        let out2 = match ctx.second_out("~2") {
            Ok(o) => o,
            Err(_) => return 2,
        };
        let mut second = tracker(ctx, out2, s.str("stream2"));
        let Some(sub2) = open(ctx, &mut second, s.str("stream2"), "liveness2_ms") else { return 0 };
        return shapes::wait_any(ctx, [(sub, first), (sub2, second)]);
    }
    shapes::run(ctx, &shape, sub, first)
}

/// The subscription's settings, from the role's.
fn builder(ctx: &Ctx, stream: &str, liveness_key: &str) -> SubscriptionBuilder {
    let s = &ctx.s;
    Subscription::builder(stream)
        .dir(&ctx.dir)
        .liveness_interval(Duration::from_millis(s.num(liveness_key, 100)))
        .tethered(s.num::<u8>("tethered", 1) == 1)
        .copy_payloads(s.flag("copy"))
        .on_lapped(if s.str("lapped") == "live" { Resume::Live } else { Resume::Oldest })
        .later_sessions(if s.str("later") == "latest" { JoinAt::Latest } else { JoinAt::Earliest })
}

/// Opens the subscription (`opened` when done; `nostart` if it cannot). An explicit position is
/// asked of a running session only: first the session's start, then the nearest message start
/// the refusal names.
fn open(ctx: &Ctx, t: &mut Tracker, stream: &str, liveness_key: &str) -> Option<Subscription> {
    let b = builder(ctx, stream, liveness_key);
    let join = match ctx.s.str("join") {
        "latest" => JoinAt::Latest,
        "slowest" => JoinAt::Slowest,
        "position" => JoinAt::Position(0),
        _ => JoinAt::Earliest,
    };
    let mut asked = join;
    let mut tries = 0;
    loop {
        match b.clone().join_at(asked).open() {
            Ok(sub) if matches!(asked, JoinAt::Position(_)) && sub.session_id().is_none() => {
                // Nobody publishes yet: an explicit position waits for a running session.
                drop(sub);
                if !ctx.nap(Duration::from_millis(20)) {
                    return None;
                }
            }
            Ok(sub) => {
                ev!(
                    t.out,
                    "opened",
                    "join={}",
                    if matches!(asked, JoinAt::Position(_)) { "position" } else { ctx.s.str("join") }
                );
                return Some(sub);
            }
            Err(Error::PositionNotAvailable { nearest, .. }) if tries < 5 => {
                tries += 1;
                asked = JoinAt::Position(nearest);
            }
            Err(Error::PositionNotAvailable { .. }) => {
                tries = 0;
                asked = join;
            }
            Err(e) => {
                ev!(t.out, "nostart", "why={}", e.to_string().replace(' ', "-"));
                return None;
            }
        }
    }
}
