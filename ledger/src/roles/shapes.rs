//! The receive shapes, one loop each. Every loop stops when asked (stdin closed), reports what
//! its shape reports (and only that: a `Receiver` reader never asks `is_closed()`, it waits to be
//! told `Closed`), and writes its exit line while its subscription still lives.

use super::tracker::Tracker;
use super::{exit_line, mark_heap_open, Ctx};
use crate::ev;
use futures_core::Stream;
use shmlog::journal::{recordings, Replay, ReplayMerge};
use shmlog::{
    AsyncReceiver, Backoff, Bytes, FragmentAssembler, IdleStrategy, Polled, Receiver, RecvError,
    Subscription, SubscriptionBuilder,
};
use std::pin::Pin;
use std::time::Duration;

/// After this many fault or closed results in one session, a loop sleeps a little per result:
/// enough to count a spin, without burning a core of the run for it.
const SPIN_COUNTED: u64 = 1000;

pub(super) fn idle_for(ctx: &Ctx) -> Backoff {
    if ctx.s.str("speed") == "fast" {
        Backoff::new(50, 20, Duration::from_micros(1), Duration::from_micros(100))
    } else {
        Backoff::default()
    }
}

pub(super) fn limit(ctx: &Ctx) -> usize {
    ctx.s.num("limit", 16)
}

fn timeout(ctx: &Ctx) -> Duration {
    Duration::from_millis(ctx.rng.clone().range(1, 50))
}

/// What a subscription says between polls: its session, losses, and (for shapes that ask the
/// subscription's state) a fault or the session's end.
fn observe(sub: &mut Subscription, t: &mut Tracker, by_state: bool) {
    if let Some(s) = sub.session_id() {
        t.joined(s, sub.join_position());
    }
    while let Some(l) = sub.take_loss() {
        t.loss(&l);
    }
    if by_state {
        if let Some(why) = sub.fault() {
            t.fault_state(why);
        }
        if sub.is_closed() {
            t.closed();
        }
    }
}

/// The session of a receiver's subscription (losses stay with the receiver).
fn session_of(sub: &Subscription, t: &mut Tracker) {
    if let Some(s) = sub.session_id() {
        t.joined(s, sub.join_position());
    }
}

pub(super) fn finish(t: &mut Tracker) -> i32 {
    t.end_faults();
    exit_line(&[&t.out], false, "");
    0
}

fn back_off(n: u64) {
    if n > SPIN_COUNTED {
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub(super) fn run(ctx: &Ctx, shape: &str, sub: Subscription, t: Tracker) -> i32 {
    match shape {
        "poll" | "controlled" => polling(ctx, sub, t, shape == "controlled"),
        "block" => blocks(ctx, sub, t),
        "blocking" => blocking(ctx, sub, t),
        "recv" | "iter" => receiver(ctx, sub, t, shape == "iter"),
        "async" | "stream" => asynchronous(ctx, sub, t, shape == "stream"),
        other => {
            ev!(t.out, "nostart", "why=unknown-shape-{other}");
            0
        }
    }
}

/// `poll` or `controlled_poll` (random `Abort`, `Break`, `Commit`) through a `FragmentAssembler`.
fn polling(ctx: &Ctx, mut sub: Subscription, t: Tracker, controlled: bool) -> i32 {
    let (limit, mut idle) = (limit(ctx), idle_for(ctx));
    let mut asm = FragmentAssembler::new(t);
    mark_heap_open();
    while !ctx.stopping() {
        observe(&mut sub, asm.delegate_mut(), true);
        let n = if controlled { sub.controlled_poll(&mut asm, limit) } else { sub.poll(&mut asm, limit) };
        idle.idle(n);
    }
    finish(asm.delegate_mut())
}

/// Raw frames from `block_poll`, reassembled here (headers read by the documented format).
fn blocks(ctx: &Ctx, mut sub: Subscription, mut t: Tracker) -> i32 {
    let (max, mut idle) = (limit(ctx) * 1024, idle_for(ctx));
    let mut partial = Partial::default();
    mark_heap_open();
    while !ctx.stopping() {
        observe(&mut sub, &mut t, true);
        let n = sub.block_poll(|block, at| partial.frames(block, at, &mut t), max);
        idle.idle(n);
    }
    finish(&mut t)
}

/// A fragmented message being put together from raw frames.
#[derive(Default)]
struct Partial {
    bytes: Vec<u8>,
    /// Session and position at which its next fragment must start.
    next: Option<(i32, i64)>,
}

impl Partial {
    fn frames(&mut self, block: &[u8], at: i64, t: &mut Tracker) {
        let i32_at = |o: usize| i32::from_le_bytes(block[o..o + 4].try_into().expect("4 bytes"));
        let mut off = 0;
        while off + 32 <= block.len() {
            let len = i32_at(off);
            let aligned = ((len.max(32) as usize) + 31) & !31;
            if len < 32 || off + aligned > block.len() {
                ev!(
                    t.out,
                    "bad",
                    "why=block-frame-of-{len}-bytes-at-{} block={}",
                    at + off as i64,
                    block.len()
                );
                return;
            }
            let (flags, kind) = (block[off + 5], u16::from_le_bytes([block[off + 6], block[off + 7]]));
            let session = i32_at(off + 12);
            let (start, end) = (at + off as i64, at + (off + aligned) as i64);
            let payload = &block[off + 32..off + len as usize];
            off += aligned;
            match kind {
                0 => continue,
                1 => {}
                other => {
                    ev!(t.out, "bad", "why=frame-type-{other}-at-{start}");
                    continue;
                }
            }
            match (flags & 0x80 != 0, flags & 0x40 != 0) {
                (true, true) => t.message(payload, Some(end), Some(session)),
                (true, false) => {
                    self.bytes.clear();
                    self.bytes.extend_from_slice(payload);
                    self.next = Some((session, end));
                }
                (false, last) => {
                    if self.next != Some((session, start)) {
                        self.next = None; // a continuation without its beginning: not ours to deliver
                        continue;
                    }
                    self.bytes.extend_from_slice(payload);
                    self.next = Some((session, end));
                    if last {
                        t.message(&self.bytes, Some(end), Some(session));
                        self.next = None;
                    }
                }
            }
        }
    }
}

/// `poll_blocking`: `Closed` and `Fault` as it returns them.
fn blocking(ctx: &Ctx, mut sub: Subscription, mut t: Tracker) -> i32 {
    let (limit, timeout) = (limit(ctx), timeout(ctx));
    t.joins_in_call = true;
    let mut asm = FragmentAssembler::new(t);
    mark_heap_open();
    while !ctx.stopping() {
        observe(&mut sub, asm.delegate_mut(), false);
        match sub.poll_blocking(&mut asm, limit, timeout) {
            Polled::Closed => back_off(asm.delegate_mut().closed()),
            Polled::Fault(why) => back_off(asm.delegate_mut().fault(why)),
            Polled::Fragments(_) | Polled::TimedOut => {}
            // An outcome this ledger does not know of: a fault nobody caused fails the run.
            _ => back_off(asm.delegate_mut().fault("unknown poll_blocking outcome")),
        }
    }
    finish(asm.delegate_mut())
}

/// `Receiver::recv_timeout`, or the receiver's blocking iterator (which ends at `Closed`; the
/// loop then asks for the next session's messages).
fn receiver(ctx: &Ctx, sub: Subscription, mut t: Tracker, iterate: bool) -> i32 {
    let timeout = timeout(ctx);
    let mut rx = Receiver::new(sub, Bytes);
    mark_heap_open();
    while !ctx.stopping() {
        let r = if iterate { rx.next().unwrap_or(Err(RecvError::Closed)) } else { rx.recv_timeout(timeout) };
        session_of(rx.subscription(), &mut t);
        match r {
            Ok(m) => {
                let s = rx.subscription().session_id();
                t.message(&m, None, s);
            }
            Err(RecvError::Timeout) => {}
            Err(RecvError::Closed) => back_off(t.closed()),
            Err(RecvError::Lost(l)) => t.loss(&l),
            Err(RecvError::Fault(why)) => back_off(t.fault(why)),
            Err(RecvError::Decode(e)) => match e {},
            Err(_) => back_off(t.fault("unknown receive outcome")),
        }
    }
    finish(&mut t)
}

/// `AsyncReceiver` on a current-thread tokio runtime: `recv().await`, or its `Stream` (which
/// ends at `Closed`; the loop then polls it again for the next session). It hides its
/// subscription, so sessions are learned from the messages.
fn asynchronous(ctx: &Ctx, sub: Subscription, mut t: Tracker, stream: bool) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(e) => {
            ev!(t.out, "nostart", "why=runtime:{}", e.to_string().replace(' ', "-"));
            return 0;
        }
    };
    let mut arx = match AsyncReceiver::new(Receiver::new(sub, Bytes)) {
        Ok(a) => a,
        Err(e) => {
            ev!(t.out, "nostart", "why={}", e.to_string().replace(' ', "-"));
            return 0;
        }
    };
    mark_heap_open();
    rt.block_on(async {
        while !ctx.stopping() {
            let r = if stream {
                std::future::poll_fn(|cx| Pin::new(&mut arx).poll_next(cx))
                    .await
                    .unwrap_or(Err(RecvError::Closed))
            } else {
                arx.recv().await
            };
            match r {
                Ok(m) => t.message(&m, None, None),
                Err(RecvError::Timeout) => {}
                Err(RecvError::Closed) => back_off(t.closed()),
                Err(RecvError::Lost(l)) => t.loss(&l),
                Err(RecvError::Fault(why)) => back_off(t.fault(why)),
                Err(RecvError::Decode(e)) => match e {},
                Err(_) => back_off(t.fault("unknown receive outcome")),
            }
        }
    });
    finish(&mut t)
}

/// `Subscription::wait_any` over two streams, then a poll of each.
pub(super) fn wait_any(ctx: &Ctx, pairs: [(Subscription, Tracker); 2]) -> i32 {
    let (limit, timeout) = (limit(ctx), timeout(ctx));
    let [(mut a, ta), (mut b, tb)] = pairs;
    let (mut asm_a, mut asm_b) = (FragmentAssembler::new(ta), FragmentAssembler::new(tb));
    mark_heap_open();
    while !ctx.stopping() {
        observe(&mut a, asm_a.delegate_mut(), true);
        observe(&mut b, asm_b.delegate_mut(), true);
        Subscription::wait_any(&mut [&mut a, &mut b], timeout);
        observe(&mut a, asm_a.delegate_mut(), true);
        observe(&mut b, asm_b.delegate_mut(), true);
        a.poll(&mut asm_a, limit);
        b.poll(&mut asm_b, limit);
    }
    let (ta, tb) = (asm_a.delegate_mut(), asm_b.delegate_mut());
    ta.end_faults();
    tb.end_faults();
    exit_line(&[&ta.out, &tb.out], false, "");
    0
}

/// `ReplayMerge`: the newest recording of the stream from its start, handed over to the live
/// stream; after the handover, a poll reader like any other.
pub(super) fn merge(ctx: &Ctx, mut t: Tracker, live: SubscriptionBuilder) -> i32 {
    let stream = ctx.s.str("stream");
    let id = loop {
        let newest = recordings(&ctx.journal).ok().and_then(|list| {
            list.into_iter().flatten().filter(|r| r.stream == stream && r.length() > 0).map(|r| r.id).max()
        });
        if let Some(id) = newest {
            break id;
        }
        if !ctx.nap(Duration::from_millis(50)) {
            return finish(&mut t);
        }
    };
    let mut m = match ReplayMerge::new(Replay::builder(&ctx.journal, id), live.clone()) {
        Ok(m) => m,
        Err(e) => {
            ev!(t.out, "nostart", "why=recording-{id}:{}", e.to_string().replace(' ', "-"));
            return finish(&mut t);
        }
    };
    if let Some(r) = m.replay() {
        ev!(t.out, "opened", "recording={id}");
        t.joined(r.recording().session_id, Some(r.position()));
    }
    let (limit, mut idle) = (limit(ctx), idle_for(ctx));
    let mut asm = FragmentAssembler::new(t);
    let mut merged = false;
    mark_heap_open();
    while !ctx.stopping() {
        if let Some(live) = m.live() {
            observe(live, asm.delegate_mut(), true);
        }
        let n = match m.poll(&mut asm, limit) {
            Ok(n) => n,
            Err(shmlog::Error::PositionNotAvailable { oldest, .. })
                if m.replay().is_some_and(|r| r.position() < oldest) =>
            {
                // Purged or detached under the replay: refused, as documented. What went is a
                // loss, and a new merge goes on from the oldest message kept, as a user's would.
                let r = m.replay().expect("replaying");
                let (from, session) = (r.position(), r.recording().session_id);
                let t = asm.delegate_mut();
                ev!(t.out, "loss", "session={session} from={from} to={oldest} cause=Purged");
                match ReplayMerge::new(Replay::builder(&ctx.journal, id).from(oldest), live.clone()) {
                    Ok(again) => m = again,
                    Err(e) => {
                        ev!(t.out, "bad", "why=replay-merge-again:{}", e.to_string().replace(' ', "-"));
                        ctx.nap(Duration::from_secs(3600));
                        break;
                    }
                }
                continue;
            }
            Err(e) => {
                ev!(asm.delegate_mut().out, "bad", "why=replay-merge:{}", e.to_string().replace(' ', "-"));
                ctx.nap(Duration::from_secs(3600));
                break;
            }
        };
        if let (false, Some(at)) = (merged, m.merged_at()) {
            merged = true;
            ev!(asm.delegate_mut().out, "merged", "at={at}");
        }
        if !merged && m.replay().is_some_and(|r| r.is_done()) {
            ev!(asm.delegate_mut().out, "replay_done");
            ctx.nap(Duration::from_secs(3600));
            break;
        }
        idle.idle(n);
    }
    finish(asm.delegate_mut())
}
