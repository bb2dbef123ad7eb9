//! What every reader shape shares: checking each whole message, and writing what the shape
//! reported (joins, messages, losses, closes, faults) as event lines.

use crate::body;
use crate::ev;
use crate::event::Out;
use crate::prng::Rng;
use shmlog::{Action, ControlledFragmentHandler, FragmentHandler, Header, Loss, LossCause};
use std::time::{Duration, Instant};

/// How a reader spends time per message.
#[derive(Clone, Copy, Debug)]
pub enum Speed {
    Fast,
    /// Spins this long per message.
    Work(Duration),
    /// Sleeps a millisecond every this many messages.
    Slow(u32),
}

/// One reading file's state: the session it last reported, and what it reported of it.
#[derive(Debug)]
pub struct Tracker {
    pub out: Out,
    session: Option<i32>,
    closed: Option<i32>,
    /// Fault and closed results of the current session.
    faults: u64,
    closes: u64,
    speed: Speed,
    rng: Rng,
    /// Chance per message of each `Action` other than `Continue` (controlled polls).
    steer: bool,
    count: u64,
    /// The shape's one call both waits (joining sessions) and delivers.
    pub joins_in_call: bool,
}

impl Tracker {
    pub fn new(out: Out, speed: Speed, rng: Rng, steer: bool) -> Tracker {
        Tracker {
            out,
            session: None,
            closed: None,
            faults: 0,
            closes: 0,
            speed,
            rng,
            steer,
            count: 0,
            joins_in_call: false,
        }
    }

    pub fn session(&self) -> Option<i32> {
        self.session
    }

    /// The shape is in `session`, joined at `at` (if it can say).
    pub fn joined(&mut self, session: i32, at: Option<i64>) {
        if self.session == Some(session) {
            return;
        }
        self.end_faults();
        self.session = Some(session);
        match at {
            Some(at) => ev!(self.out, "joined", "session={session} at={at}"),
            None => ev!(self.out, "joined", "session={session} at=-"),
        }
    }

    /// A whole message, with its end position and the session its header named, if the shape
    /// gives them. A shape that hides both learns the session from the body.
    pub fn message(&mut self, bytes: &[u8], end: Option<i64>, session: Option<i32>) {
        super::note_message_len(bytes.len());
        let end_s = end.map_or("-".to_string(), |e| e.to_string());
        let id = match body::check(bytes) {
            Ok(id) => id,
            Err(why) => {
                ev!(self.out, "corrupt", "why={why} end={end_s} len={}", bytes.len());
                return;
            }
        };
        match session {
            // A call that waits and then polls (`poll_blocking`) may join a session and deliver
            // from it at once; any other poll only delivers from the session it was in.
            Some(s) if self.session != Some(s) && self.joins_in_call => self.joined(s, None),
            Some(s) if self.session != Some(s) => {
                ev!(
                    self.out,
                    "bad",
                    "why=delivered-in-session-{s}-while-joined-to-{:?} end={end_s}",
                    self.session
                )
            }
            Some(_) => {}
            None => self.joined(id.session, None),
        }
        ev!(self.out, "msg", "w={} inc={} seq={} end={end_s}", id.writer, id.inc, id.seq);
        self.count += 1;
        match self.speed {
            Speed::Fast => {}
            Speed::Work(d) => {
                let until = Instant::now() + d;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
            Speed::Slow(every) => {
                if self.count % u64::from(every.max(1)) == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }

    pub fn loss(&mut self, l: &Loss) {
        let cause = match l.cause {
            LossCause::JoinedLate => "JoinedLate".to_string(),
            LossCause::SessionsMissed { sessions } => format!("SessionsMissed:{sessions}"),
            LossCause::Lapped => "Lapped".to_string(),
            LossCause::Fault => "Fault".to_string(),
            LossCause::Purged => "Purged".to_string(),
            LossCause::NotRecorded => "NotRecorded".to_string(),
            _ => "Other".to_string(),
        };
        ev!(self.out, "loss", "session={} from={} to={} cause={cause}", l.session_id, l.from, l.to);
    }

    /// The shape reported the current session's end: the first report of a session is
    /// logged, the rest counted (a receive that returns `Closed` again and again is a spin).
    /// Returns how many so far, for the caller's back-off.
    pub fn closed(&mut self) -> u64 {
        if let Some(s) = self.session.filter(|s| self.closed != Some(*s)) {
            ev!(self.out, "closed", "session={s}");
            self.closed = Some(s);
        }
        self.closes += 1;
        self.closes
    }

    /// The shape returned a fault: the first of a session is logged, the rest counted. Returns
    /// how many so far.
    pub fn fault(&mut self, why: &str) -> u64 {
        self.faults += 1;
        if self.faults == 1 {
            let s = self.session.map_or("-".to_string(), |s| s.to_string());
            // The heap now: a reader that grew a buffer for the bad frame it stopped at has it
            // at this point, whatever it does with it later (review N6).
            let (heap, open) = super::heap_now_and_open();
            ev!(
                self.out,
                "fault",
                "session={s} why={} heap_kb={} heap_open_kb={}",
                why.replace(' ', "-"),
                heap >> 10,
                open >> 10
            );
        }
        self.faults
    }

    /// A subscription in a fault state (a poll shape asks, it is not told): logged once.
    pub fn fault_state(&mut self, why: &str) {
        if self.faults == 0 {
            self.fault(why);
        }
    }

    /// Writes how many fault and closed results the session had (when it ends, or at exit).
    pub fn end_faults(&mut self) {
        let s = self.session.map_or("-".to_string(), |s| s.to_string());
        if self.faults > 0 {
            ev!(self.out, "faults", "session={s} n={}", self.faults);
        }
        if self.closes > 0 {
            ev!(self.out, "closes", "session={s} n={}", self.closes);
        }
        (self.faults, self.closes) = (0, 0);
    }

    /// A controlled poll's answer for the next whole message.
    fn steer(&mut self) -> Action {
        if !self.steer {
            return Action::Continue;
        }
        match self.rng.below(100) {
            0..=2 => Action::Abort,
            3..=5 => Action::Break,
            6..=10 => Action::Commit,
            _ => Action::Continue,
        }
    }
}

impl FragmentHandler for Tracker {
    fn on_fragment(&mut self, payload: &[u8], header: &Header) {
        self.message(payload, Some(header.position()), Some(header.session_id()));
    }
}

impl ControlledFragmentHandler for Tracker {
    fn on_fragment(&mut self, payload: &[u8], header: &Header) -> Action {
        let action = self.steer();
        if action != Action::Abort {
            self.message(payload, Some(header.position()), Some(header.session_id()));
        }
        action
    }
}
