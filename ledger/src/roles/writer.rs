//! A writer process: one exclusive `Publication` or one `ConcurrentPublication` handle, offering
//! numbered attempts (`offer`, `offer_vectored`, `try_claim` then commit, abort, drop, or a
//! claim held a while so a kill can land inside it) at a paced rate with bursts. Every attempt's
//! outcome is one line, written before the next attempt begins.

use super::Ctx;
use crate::body::{self, Id, HEADER};
use crate::ev;
use shmlog::{ClaimGuard, ClaimSource, ConcurrentPublication, Error, OfferError, Publication};
use std::time::{Duration, Instant};

/// What a writer does with either kind of publication.
trait Writes: ClaimSource + Sized {
    fn put(&mut self, m: &[u8]) -> Result<i64, OfferError>;
    fn put_vectored(&mut self, parts: &[&[u8]]) -> Result<i64, OfferError>;
    fn claim(&mut self, len: usize) -> Result<ClaimGuard<'_, Self>, OfferError>;
    fn max_payload(&self) -> usize;
    fn max_message(&self) -> usize;
    fn session(&self) -> i32;
}

macro_rules! writes {
    ($t:ty) => {
        impl Writes for $t {
            fn put(&mut self, m: &[u8]) -> Result<i64, OfferError> {
                self.offer(m)
            }
            fn put_vectored(&mut self, parts: &[&[u8]]) -> Result<i64, OfferError> {
                self.offer_vectored(parts)
            }
            fn claim(&mut self, len: usize) -> Result<ClaimGuard<'_, Self>, OfferError> {
                self.try_claim(len)
            }
            fn max_payload(&self) -> usize {
                self.max_payload_len()
            }
            fn max_message(&self) -> usize {
                self.max_message_len()
            }
            fn session(&self) -> i32 {
                self.session_id()
            }
        }
    };
}
writes!(Publication);
writes!(ConcurrentPublication);

/// How long a retryable refusal is retried before the attempt is logged as refused.
const GIVE_UP_BACK_PRESSURE: Duration = Duration::from_secs(2);
const GIVE_UP_NOT_CONNECTED: Duration = Duration::from_millis(200);
/// A long streak is logged in pieces, so a kill loses at most this much of it.
const HELD_PIECE: Duration = Duration::from_millis(250);

pub(super) fn run(ctx: &Ctx) -> i32 {
    let s = &ctx.s;
    let stream = s.str("stream");
    let concurrent = s.flag("concurrent");
    let kind = if concurrent { "concurrent" } else { "exclusive" };
    ev!(
        ctx.out,
        "creating",
        "role=writer proc={} stream={stream} w={} inc={} kind={kind}",
        ctx.proc,
        s.num::<u32>("w", 0),
        ctx.inc
    );
    let builder = Publication::builder(stream)
        .dir(&ctx.dir)
        .term_length(s.num("term", 1 << 16))
        .mtu(s.num("mtu", 1408))
        .liveness_interval(Duration::from_millis(s.num("liveness_ms", 100)));
    // A predecessor's lock may take a moment to go (it is reaped by the controller, but a
    // graceful one closes by itself); a dead concurrent writer's slot until its hole is padded.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let result = if concurrent {
            builder.clone().open_concurrent().map(|p| writer_loop(ctx, p))
        } else {
            builder.clone().create().map(|p| writer_loop(ctx, p))
        };
        match result {
            Ok(code) => return code,
            Err(Error::AlreadyExists { .. } | Error::TooManyWriters { .. }) if Instant::now() < deadline => {
                if !ctx.nap(Duration::from_millis(10)) {
                    return 0;
                }
            }
            Err(e) => {
                ev!(ctx.out, "nostart", "why={}", e.to_string().replace(' ', "-"));
                return 0;
            }
        }
    }
}

/// Paces attempts: `rate` a second on average, up to `burst` at once.
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// Waits for a token; `false` if asked to stop meanwhile.
    fn take(&mut self, ctx: &Ctx) -> bool {
        loop {
            let now = Instant::now();
            self.tokens =
                (self.tokens + now.duration_since(self.last).as_secs_f64() * self.rate).min(self.burst);
            self.last = now;
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                return true;
            }
            let wait = Duration::from_secs_f64((1.0 - self.tokens) / self.rate);
            if !ctx.nap(wait.max(Duration::from_micros(50))) {
                return false;
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Offer,
    Vectored,
    Commit,
    Abort,
    Drop,
    Hold,
}

/// How one try of an attempt went.
enum Outcome {
    Committed(i64),
    Aborted(&'static str),
    Refused(OfferError),
}

fn writer_loop<P: Writes>(ctx: &Ctx, mut p: P) -> i32 {
    let s = &ctx.s;
    let mut rng = ctx.rng.clone();
    let session = p.session();
    let w: u32 = s.num("w", 0);
    ev!(
        ctx.out,
        "start",
        "role=writer session={session} max_payload={} max_message={}",
        p.max_payload(),
        p.max_message()
    );
    let rate: f64 = s.num("rate", 2000.0);
    let burst: f64 = s.num("burst", 100.0);
    let claims: u32 = s.num("claims", 1);
    let mut bucket = Bucket { rate, burst, tokens: burst, last: Instant::now() };
    let largest = p.max_message().min(8 * s.num::<usize>("mtu", 1408)).max(HEADER);
    let mut msg = Vec::with_capacity(largest);
    let mut held: Option<(i64, &'static str)> = None;
    let mut seq = 0u64;
    while !ctx.stopping() && bucket.take(ctx) {
        let len = match rng.below(100) {
            0..=29 => HEADER + rng.below(17) as usize,
            30..=64 => rng.range(HEADER as u64, 257) as usize,
            65..=89 => rng.range(256, p.max_payload() as u64 + 1) as usize,
            _ => rng.range(p.max_payload() as u64 + 1, largest as u64 + 1) as usize,
        }
        .min(largest);
        body::fill(Id { writer: w, inc: ctx.inc, session, seq }, len, &mut msg);
        let mut op = *rng.weighted(&[
            (6, Op::Offer),
            (2, Op::Vectored),
            (2 * claims, Op::Commit),
            (claims, Op::Abort),
            (claims, Op::Drop),
            (claims / 2, Op::Hold),
        ]);
        if len > p.max_payload() && !matches!(op, Op::Offer | Op::Vectored) {
            op = Op::Offer;
        }
        let first = Instant::now();
        let mut idle = 0u32;
        loop {
            let outcome = attempt(ctx, &mut p, op, &msg, &mut rng);
            let why = match outcome {
                Outcome::Refused(e) if e.is_retryable() => {
                    if e == OfferError::BackPressured {
                        "back_pressured"
                    } else {
                        "not_connected"
                    }
                }
                _ => "",
            };
            let now = ctx.out.now();
            // A streak ends when the refusals stop, change reason, or grow long.
            if let Some((from, was)) = held {
                if was != why || now - from >= HELD_PIECE.as_micros() as i64 {
                    if now - from >= 1000 {
                        ev!(ctx.out, "held", "from={from} to={now} why={was}");
                    }
                    held = None;
                }
            }
            if !why.is_empty() && held.is_none() {
                held = Some((now, why));
            }
            let give_up = if why == "back_pressured" { GIVE_UP_BACK_PRESSURE } else { GIVE_UP_NOT_CONNECTED };
            match outcome {
                Outcome::Committed(end) => {
                    ev!(ctx.out, "ok", "seq={seq} end={end} len={} op={op:?}", msg.len());
                }
                Outcome::Aborted(how) => ev!(ctx.out, "aborted", "seq={seq} how={how}"),
                Outcome::Refused(e) if e.is_retryable() && !ctx.stopping() && first.elapsed() < give_up => {
                    idle += 1;
                    if idle < 20 {
                        std::hint::spin_loop();
                    } else if idle < 40 {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    continue;
                }
                Outcome::Refused(e) => ev!(ctx.out, "refused", "seq={seq} why={}", refusal(e)),
            }
            break;
        }
        seq += 1;
    }
    if let Some((from, why)) = held {
        ev!(ctx.out, "held", "from={from} to={} why={why}", ctx.out.now());
    }
    drop(p);
    ev!(ctx.out, "exit");
    0
}

fn refusal(e: OfferError) -> String {
    match e {
        OfferError::BackPressured => "back_pressured".into(),
        OfferError::NotConnected => "not_connected".into(),
        other => format!("{other:?}").replace(' ', ""),
    }
}

/// One try of an attempt.
fn attempt<P: Writes>(ctx: &Ctx, p: &mut P, op: Op, msg: &[u8], rng: &mut crate::prng::Rng) -> Outcome {
    let refused = Outcome::Refused;
    match op {
        Op::Offer => p.put(msg).map_or_else(refused, Outcome::Committed),
        Op::Vectored => {
            let a = rng.range(0, msg.len() as u64 + 1) as usize;
            let b = rng.range(a as u64, msg.len() as u64 + 1) as usize;
            p.put_vectored(&[&msg[..a], &msg[a..b], &msg[b..]]).map_or_else(refused, Outcome::Committed)
        }
        Op::Commit | Op::Abort | Op::Drop | Op::Hold => {
            let mut claim = match p.claim(msg.len()) {
                Ok(c) => c,
                Err(e) => return refused(e),
            };
            claim.buffer().copy_from_slice(msg);
            match op {
                Op::Abort => {
                    claim.abort();
                    Outcome::Aborted("abort")
                }
                Op::Drop => {
                    drop(claim);
                    Outcome::Aborted("drop")
                }
                Op::Hold => {
                    // Held a while, so that a kill or a stop can land inside a claim. Said first:
                    // a claim held open holds the stream's other writers back (a window past it).
                    ev!(ctx.out, "hold");
                    ctx.nap(Duration::from_millis(rng.range(5, 150)));
                    Outcome::Committed(claim.commit())
                }
                _ => Outcome::Committed(claim.commit()),
            }
        }
    }
}
