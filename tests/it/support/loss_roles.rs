//! Roles of `tests/it/losses.rs`: a publisher of fixed-size numbered messages, and a reader of a given
//! speed that checks, session by session, that every message it misses lies in a loss it was
//! told of and that no message it gets does.

use super::roles::{Ctx, Settings};
use shmlog::{Header, Loss, LossCause, Publication, Subscription};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Payload bytes of every message (a frame of 96 bytes).
pub const LEN: usize = 64;
/// Framed length of every message.
pub const FRAMED: i64 = 96;

/// Where message `seq` of a session starts, for terms of `term` bytes: the publisher pads a term
/// whose rest cannot hold a frame, so each term holds `term / FRAMED` messages.
pub fn position_of(seq: u64, term: i64) -> i64 {
    let per_term = (term / FRAMED) as u64;
    (seq / per_term) as i64 * term + (seq % per_term) as i64 * FRAMED
}

/// Offers messages 0.. of a new session (`offer_blocking`), `count` of them (default: until
/// killed); prints `progress sent=N` every 256 and `closed sent=N` after closing.
pub fn publisher(cfg: &Settings, ctx: &Ctx) -> ! {
    let mut p = Publication::builder(cfg.name())
        .dir(cfg.dir())
        .term_length(cfg.u64_or("term", 64 * 1024) as usize)
        .liveness_interval(Duration::from_millis(20))
        .create()
        .unwrap_or_else(|e| ctx.fail(&format!("create: {e}")));
    ctx.emit("ready", &format!("session={}", p.session_id()));
    p.wait_for_readers(cfg.u64_or("readers", 1) as usize, Duration::from_secs(60))
        .unwrap_or_else(|e| ctx.fail(&format!("wait for readers: {e}")));
    let count = cfg.u64_or("count", u64::MAX);
    let mut msg = [0u8; LEN];
    let mut seq = 0;
    while seq < count {
        msg[..8].copy_from_slice(&seq.to_le_bytes());
        msg[8..16].copy_from_slice(&p.session_id().to_le_bytes().repeat(2));
        match p.offer_blocking(&msg, Duration::from_millis(100)) {
            Ok(_) => seq += 1,
            Err(e) if e.is_retryable() => ctx.check_deadline(),
            Err(e) => ctx.fail(&format!("offer {seq}: {e}")),
        }
        if seq % 256 == 0 {
            ctx.emit("progress", &format!("sent={seq}"));
        }
    }
    p.close();
    ctx.emit("closed", &format!("sent={seq}"));
    std::process::exit(0)
}

/// What a reader saw of one session.
#[derive(Default)]
struct Seen {
    /// The next message expected.
    next: u64,
    delivered: u64,
    losses: Vec<Loss>,
}

/// Reads session after session, `delay_us` per message, checking every message against the
/// losses reported before it. On `report ID`, reads on until session ID is at its end of stream,
/// then prints one `session id=.. next=.. delivered=.. losses=..` line per session and `report
/// sessions=.. missed_sessions=..`, and exits.
pub fn reader(cfg: &Settings, ctx: &Ctx) -> ! {
    let term = cfg.u64_or("term", 64 * 1024) as i64;
    let delay = Duration::from_micros(cfg.u64_or("delay_us", 0));
    let mut sub = Subscription::builder(cfg.name())
        .dir(cfg.dir())
        .liveness_interval(Duration::from_millis(20))
        .open()
        .unwrap_or_else(|e| ctx.fail(&format!("open: {e}")));
    ctx.emit("ready", "");
    let mut sessions: BTreeMap<i32, Seen> = BTreeMap::new();
    let mut missed_sessions = 0u64;
    let mut bad: Option<String> = None;
    let mut report_at: Option<i32> = None;
    let mut reading = None;
    let mut ended = std::collections::BTreeSet::new();
    let mut tick = Instant::now();
    loop {
        ctx.check_deadline();
        if tick.elapsed() > Duration::from_secs(2) {
            tick = Instant::now();
            ctx.emit(
                "tick",
                &format!(
                    "session={:?} position={} closed={} eos={} fault={:?}",
                    sub.session_id(),
                    sub.position(),
                    sub.is_closed(),
                    sub.is_end_of_stream(),
                    sub.fault()
                )
                .replace(' ', "_"),
            );
        }
        if sub.session_id().is_some() && sub.session_id() != reading {
            reading = sub.session_id();
            ctx.emit("joined", &format!("session={} at={}", reading.unwrap_or(0), sub.position()));
        }
        if let Some(cmd) = ctx.try_command() {
            match cmd.strip_prefix("report ") {
                Some(id) => report_at = Some(id.parse().expect("report <session id>")),
                None => ctx.fail(&format!("unknown command {cmd}")),
            }
        }
        // A closed session is left by the next poll: note its end while it is still ours.
        if sub.is_end_of_stream() {
            if let Some(id) = sub.session_id() {
                ended.insert(id);
            }
        }
        if report_at.is_some_and(|id| ended.contains(&id)) {
            {
                for (id, s) in &sessions {
                    ctx.emit(
                        "session",
                        &format!(
                            "id={id} next={} delivered={} losses={}",
                            s.next,
                            s.delivered,
                            s.losses.len()
                        ),
                    );
                }
                ctx.emit("report", &format!("sessions={} missed_sessions={missed_sessions}", sessions.len()));
                drop(sub); // leaves the stream: the last user removes its files
                std::process::exit(0);
            }
        }
        // Losses come before the messages after them: take them before every poll.
        while let Some(loss) = sub.take_loss() {
            let cause = match loss.cause {
                LossCause::SessionsMissed { sessions } => format!("missed:{sessions}"),
                other => format!("{other:?}"),
            };
            ctx.emit(
                "loss",
                &format!("session={} from={} to={} cause={cause}", loss.session_id, loss.from, loss.to),
            );
            match loss.cause {
                LossCause::SessionsMissed { sessions } => missed_sessions += u64::from(sessions),
                _ => sessions.entry(loss.session_id).or_default().losses.push(loss),
            }
        }
        let n = sub.poll(
            |m: &[u8], h: &Header| {
                let seq = u64::from_le_bytes(m[..8].try_into().unwrap());
                let s = sessions.entry(h.session_id()).or_default();
                let start = h.position() - FRAMED;
                let covered = |at: i64| s.losses.iter().any(|l| l.from <= at && at < l.to);
                if start != position_of(seq, term) {
                    bad.get_or_insert(format!("message {seq} at {start}, not {}", position_of(seq, term)));
                }
                if covered(start) {
                    bad.get_or_insert(format!(
                        "message {seq} of session {} delivered inside a loss",
                        h.session_id()
                    ));
                }
                if let Some(k) = (s.next..seq).find(|&k| !covered(position_of(k, term))) {
                    bad.get_or_insert(format!(
                        "session {}: message {k} missing, in no reported loss (got {seq} after {})",
                        h.session_id(),
                        s.next
                    ));
                }
                if seq < s.next {
                    bad.get_or_insert(format!("message {seq} again or out of order (expected {})", s.next));
                }
                s.next = seq + 1;
                s.delivered += 1;
                if !delay.is_zero() {
                    let until = Instant::now() + delay; // a slow reader: busy, as a real one would be
                    while Instant::now() < until {
                        std::hint::spin_loop();
                    }
                }
            },
            16,
        );
        if let Some(what) = &bad {
            ctx.fail(what);
        }
        if n == 0 {
            sub.wait_readable(Duration::from_millis(10));
        }
    }
}
