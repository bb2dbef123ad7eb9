//! Roles and checks of `tests/it/untethered.rs`: a publisher of numbered, checksummed messages at
//! full speed, and readers (tethered or not, slow or not) that check every message they get and
//! that the messages they miss are exactly the losses they were told of.

use super::roles::{Ctx, Settings};
use shmlog::{FragmentAssembler, Header, Loss, LossCause, Publication, Resume, Subscription};
use std::cell::RefCell;
use std::time::{Duration, Instant};

/// Default term length of these tests.
pub const TERM: usize = 64 * 1024;

/// Log space a message of `len` bytes takes with fragments of at most `max_payload` bytes.
pub fn framed(len: usize, max_payload: usize) -> i64 {
    let align = |n: usize| (n + 31) & !31;
    if len <= max_payload {
        return align(len + 32) as i64;
    }
    let (full, rest) = (len / max_payload, len % max_payload);
    (full * (max_payload + 32) + if rest > 0 { align(rest + 32) } else { 0 }) as i64
}

/// Where message `seq` starts when every message takes `framed` bytes of terms of `term` bytes
/// (a term whose rest cannot hold a message is padded).
pub fn position_of(seq: u64, framed: i64, term: i64) -> i64 {
    let per_term = (term / framed) as u64;
    (seq / per_term) as i64 * term + (seq % per_term) as i64 * framed
}

/// Message `seq` of `len` bytes (at least 16): the number, a checksum of the rest, then bytes
/// derived from the number.
pub fn message(seq: u64, len: usize) -> Vec<u8> {
    let mut m = vec![0u8; len];
    m[..8].copy_from_slice(&seq.to_le_bytes());
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for b in &mut m[16..] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let sum = checksum(&m[16..]);
    m[8..16].copy_from_slice(&sum.to_le_bytes());
    m
}

/// FNV-1a over `bytes`.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// The number of a message that passes its checksum and has the length `len`; `Err` otherwise.
pub fn verify(m: &[u8], len: usize) -> Result<u64, String> {
    if m.len() != len {
        return Err(format!("a message of {} bytes, not {len}", m.len()));
    }
    let seq = u64::from_le_bytes(m[..8].try_into().unwrap());
    let sum = u64::from_le_bytes(m[8..16].try_into().unwrap());
    if sum != checksum(&m[16..]) {
        return Err(format!("message {seq} fails its checksum"));
    }
    Ok(seq)
}

/// What a reader got, checked as it goes: every message delivered whole and intact, in order,
/// and every message missed inside a loss reported before the next one delivered, the losses
/// tiling exactly the positions missed.
#[derive(Debug)]
pub struct Ledger {
    len: usize,
    framed: i64,
    term: i64,
    /// The next message expected.
    pub next: u64,
    /// Where the losses reported since the last delivery end.
    covered_to: Option<i64>,
    /// Where the last message delivered ends.
    end: i64,
    pub delivered: u64,
    pub losses: u64,
    pub lost_messages: u64,
    /// The last events, for the message of a failed check.
    history: std::collections::VecDeque<String>,
}

impl Ledger {
    pub fn new(len: usize, max_payload: usize, term: usize) -> Self {
        Self {
            len,
            framed: framed(len, max_payload),
            term: term as i64,
            next: 0,
            covered_to: None,
            end: 0,
            delivered: 0,
            losses: 0,
            lost_messages: 0,
            history: Default::default(),
        }
    }

    fn note(&mut self, event: String) {
        if self.history.len() == 12 {
            self.history.pop_front();
        }
        self.history.push_back(event);
    }

    fn fail(&self, what: String) -> Result<(), String> {
        Err(format!("{what}; last events: {:?}", self.history))
    }

    /// A loss report.
    pub fn loss(&mut self, loss: &Loss) -> Result<(), String> {
        let r = self.check_loss(loss);
        self.note(format!("loss {}..{}", loss.from, loss.to));
        r
    }

    fn check_loss(&mut self, loss: &Loss) -> Result<(), String> {
        if loss.cause != LossCause::Lapped {
            return self.fail(format!("unexpected loss {loss:?}"));
        }
        // It starts where reading stopped: after the last message or the last loss, or over
        // padding after it, at the latest where the next message starts.
        let lo = self.covered_to.unwrap_or(self.end);
        let (_, hi) = self.first_at_or_after(lo);
        if loss.from < lo || loss.from > hi || loss.to <= loss.from {
            return self.fail(format!(
                "loss {}..{} does not start where reading stopped ({lo}..={hi})",
                loss.from, loss.to
            ));
        }
        self.covered_to = Some(loss.to);
        self.losses += 1;
        Ok(())
    }

    /// The first message starting at or after `position`, and its start.
    fn first_at_or_after(&self, position: i64) -> (u64, i64) {
        let per_term = (self.term / self.framed) as u64;
        let term = (position / self.term) as u64;
        let k = ((position % self.term) as u64).div_ceil(self.framed as u64);
        let seq = if k >= per_term { (term + 1) * per_term } else { term * per_term + k };
        (seq, position_of(seq, self.framed, self.term))
    }

    /// A whole message delivered, with the position after it.
    pub fn message(&mut self, m: &[u8], end: i64) -> Result<(), String> {
        let r = self.check_message(m, end);
        self.note(format!("message {:?} ending at {end}", verify(m, self.len)));
        r
    }

    fn check_message(&mut self, m: &[u8], end: i64) -> Result<(), String> {
        let seq = match verify(m, self.len) {
            Ok(seq) => seq,
            Err(e) => return self.fail(e),
        };
        let start = position_of(seq, self.framed, self.term);
        if end - self.framed != start {
            return self.fail(format!("message {seq} ends at {end}, not {}", start + self.framed));
        }
        // The first message not covered by a loss reported since the last one delivered.
        let (due, _) = self.first_at_or_after(self.covered_to.unwrap_or(self.end));
        if seq != due {
            return self.fail(format!(
                "message {seq} delivered where message {due} was due (last delivered: {})",
                self.next.wrapping_sub(1)
            ));
        }
        self.lost_messages += seq - self.next;
        self.covered_to = None;
        self.next = seq + 1;
        self.end = end;
        self.delivered += 1;
        Ok(())
    }

    /// At the end: everything up to `sent` messages was delivered or reported lost.
    pub fn finish(&self, sent: u64) -> Result<(), String> {
        let (due, _) = self.first_at_or_after(self.covered_to.unwrap_or(self.end));
        if due < sent {
            return self.fail(format!("ended at message {due} of {sent} with no loss reported for the rest"));
        }
        Ok(())
    }
    /// The first message neither delivered nor reported lost.
    pub fn due(&self) -> u64 {
        self.first_at_or_after(self.covered_to.unwrap_or(self.end)).0
    }

    pub fn summary(&self) -> String {
        format!(
            "next={} due={} delivered={} losses={} lost_messages={}",
            self.next,
            self.due(),
            self.delivered,
            self.losses,
            self.lost_messages
        )
    }
}

/// Reads `sub` until its session is closed and drained, sleeping `handler_sleep` in the handler
/// every `every` messages (0: never), checking everything with `ledger`. `tick` is called
/// between polls (commands, deadlines).
pub fn read_all(
    sub: &mut Subscription,
    ledger: &mut Ledger,
    handler_sleep: Duration,
    every: u64,
    tick: impl FnMut(&Ledger),
) -> Result<(), String> {
    read_all_with(sub, ledger, || every, handler_sleep, tick)
}

/// [`read_all`] with a pace (`every`) that may change while it reads.
pub fn read_all_with(
    sub: &mut Subscription,
    ledger: &mut Ledger,
    every: impl Fn() -> u64,
    handler_sleep: Duration,
    mut tick: impl FnMut(&Ledger),
) -> Result<(), String> {
    let got: RefCell<Vec<(Vec<u8>, i64)>> = RefCell::new(Vec::new());
    let mut count = 0u64;
    let mut assembler = FragmentAssembler::new(|m: &[u8], h: &Header| {
        count += 1;
        let every = every();
        if every > 0 && count % every == 0 {
            std::thread::sleep(handler_sleep);
        }
        got.borrow_mut().push((m.to_vec(), h.position()));
    });
    loop {
        // Losses come before the messages after them: take them before every poll.
        while let Some(loss) = sub.take_loss() {
            // A message begun before the loss is not finished after it (the assembler also
            // sees the gap in positions; this says it outright).
            assembler.reset();
            ledger.loss(&loss)?;
        }
        tick(ledger);
        let n = sub.poll(&mut assembler, 256);
        for (m, end) in got.borrow_mut().drain(..) {
            ledger.message(&m, end)?;
        }
        if n == 0 && sub.is_closed() {
            while let Some(loss) = sub.take_loss() {
                ledger.loss(&loss)?;
            }
            return Ok(());
        }
        if n == 0 {
            // Sleep on the doorbell rather than spin (eight readers share two cores); a lap
            // makes the subscription readable too.
            sub.wait_readable(Duration::from_millis(5));
        }
    }
}

/// A subscription of the tests: untethered or not, resuming at `resume` after a lap.
pub fn subscription(name: &str, dir: &std::path::Path, tethered: bool, resume: Resume) -> Subscription {
    Subscription::builder(name)
        .dir(dir)
        .tethered(tethered)
        .on_lapped(resume)
        .liveness_interval(Duration::from_millis(20))
        .open()
        .expect("open a subscription")
}

/// Offers messages `0..count` of `len` bytes as fast as the tethered readers let it, then closes.
pub fn publish(p: &mut Publication, count: u64, len: usize, deadline: Instant) {
    for seq in 0..count {
        let m = message(seq, len);
        loop {
            match p.offer(&m) {
                Ok(_) => break,
                Err(e) if e.is_retryable() => {
                    assert!(Instant::now() < deadline, "the publisher stayed held back");
                    std::hint::spin_loop();
                }
                Err(e) => panic!("offer {seq}: {e}"),
            }
        }
    }
}

/// Peer role `ut_publisher`: a publisher of `count` messages (default: until the command `close`)
/// of `len` bytes at full speed, after `readers` readers (tethered or not) joined; prints
/// `ready`, `started`, `progress sent=N` every 65 536 messages, and `closed sent=N`.
pub fn publisher(cfg: &Settings, ctx: &Ctx) -> ! {
    let mut p = Publication::builder(cfg.name())
        .dir(cfg.dir())
        .term_length(cfg.u64_or("term", TERM as u64) as usize)
        .liveness_interval(Duration::from_millis(20))
        .create()
        .unwrap_or_else(|e| ctx.fail(&format!("create: {e}")));
    ctx.emit("ready", &format!("session={} max_payload={}", p.session_id(), p.max_payload_len()));
    p.wait_for_readers(cfg.u64_or("readers", 1) as usize, Duration::from_secs(60))
        .unwrap_or_else(|e| ctx.fail(&format!("wait for readers: {e}")));
    ctx.emit("started", "");
    let count = cfg.u64_or("count", u64::MAX);
    let len = cfg.u64_or("len", 64) as usize;
    let mut sent = count;
    for seq in 0..count {
        if seq % 4096 == 0 && ctx.try_command().as_deref() == Some("close") {
            sent = seq;
            break;
        }
        let m = message(seq, len);
        loop {
            match p.offer(&m) {
                Ok(_) => break,
                Err(e) if e.is_retryable() => {
                    ctx.check_deadline();
                    std::hint::spin_loop();
                }
                Err(e) => ctx.fail(&format!("offer {seq}: {e}")),
            }
        }
        if seq % 65_536 == 0 {
            ctx.emit("progress", &format!("sent={seq}"));
        }
    }
    p.close();
    ctx.emit("closed", &format!("sent={sent}"));
    std::process::exit(0)
}

/// Peer role `ut_reader`: reads one session to its end (tethered unless `untethered=1`),
/// checking it with a [`Ledger`]; on `slow` it sleeps `sleep_us` in its handler every `every`
/// messages from then on. Prints `ready`, `tick` lines, and at the end `done next=.. delivered=..
/// losses=.. lost_messages=..` (or `fail` with the first broken check).
pub fn reader(cfg: &Settings, ctx: &Ctx) -> ! {
    let untethered = cfg.flag("untethered");
    let resume = if cfg.flag("live") { Resume::Live } else { Resume::Oldest };
    let mut sub = subscription(cfg.name(), &cfg.dir(), !untethered, resume);
    sub.wait_connected(Duration::from_secs(60)).unwrap_or_else(|e| ctx.fail(&format!("connect: {e}")));
    let max_payload = cfg.u64_or("max_payload", 4064) as usize;
    let len = cfg.u64_or("len", 64) as usize;
    let mut ledger = Ledger::new(len, max_payload, cfg.u64_or("term", TERM as u64) as usize);
    ctx.emit("ready", &format!("untethered={}", sub.is_untethered()));
    let sleep = Duration::from_micros(cfg.u64_or("sleep_us", 0));
    let every = std::cell::Cell::new(0u64);
    let slow_every = cfg.u64_or("every", 64);
    let mut last = Instant::now();
    // The handler's pace is decided by a command; the ledger reads it through the tick.
    let result = {
        let every_ref = &every;
        read_all_with(
            &mut sub,
            &mut ledger,
            || every_ref.get(),
            sleep,
            |l| {
                ctx.check_deadline();
                if let Some(cmd) = ctx.try_command() {
                    match cmd.as_str() {
                        "slow" => every_ref.set(slow_every),
                        other => ctx.fail(&format!("unknown command {other}")),
                    }
                }
                if last.elapsed() > Duration::from_millis(500) {
                    last = Instant::now();
                    ctx.emit("tick", &l.summary());
                }
            },
        )
    };
    match result {
        Ok(()) => ctx.emit("done", &ledger.summary()),
        Err(e) => ctx.fail(&format!("{e} ({})", ledger.summary())),
    }
    std::process::exit(0)
}
