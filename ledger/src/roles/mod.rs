//! The processes of a run. The controller starts each as `shmlog-ledger role <kind> <settings>`
//! (`key=value,...`); a role writes its events to `events/<proc>.log`, dies with the controller
//! (`PR_SET_PDEATHSIG`), ends gracefully when its stdin closes, and exits by itself at its
//! deadline whatever happens.
//!
//! A role written in another language (the Python bindings, a bridge) takes its place by
//! speaking the same event lines (`crate::event`) and the same stdin rule: the controller and
//! the oracle know roles only by what they write. In a scenario, `exec=/path/to/program` among a
//! spawn's settings makes the controller start `program role <kind> <settings>` instead of
//! itself (the settings then hold `exec=` too; a program ignores what it does not know).

mod persistent;
mod reader;
mod recorder;
mod shapes;
mod tracker;
mod writer;

pub use tracker::{Speed, Tracker};

use crate::event::{Mode, Out};
use crate::prng::Rng;
use crate::sys;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A role's settings: `key=value` pairs separated by commas.
#[derive(Clone, Debug, Default)]
pub struct Settings(HashMap<String, String>);

impl Settings {
    pub fn parse(s: &str) -> Settings {
        Settings(
            s.split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    pub fn str(&self, key: &str) -> &str {
        self.0.get(key).map_or("", String::as_str)
    }

    pub fn num<T: std::str::FromStr>(&self, key: &str, default: T) -> T {
        self.0.get(key).and_then(|v| v.parse().ok()).unwrap_or(default)
    }

    pub fn flag(&self, key: &str) -> bool {
        self.str(key) == "1"
    }
}

/// What every role has: its settings, event file, chance, and the stop flag.
#[derive(Debug)]
pub struct Ctx {
    pub s: Settings,
    pub proc: String,
    pub inc: u32,
    pub out: Out,
    pub rng: Rng,
    pub dir: PathBuf,
    pub journal: PathBuf,
    pub events: PathBuf,
    pub t0: i64,
    stop: Arc<AtomicBool>,
}

impl Ctx {
    /// `true` once the controller asked for a graceful end (closed our stdin).
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Sleeps up to `d`, in slices, returning early (`false`) when asked to stop.
    pub fn nap(&self, d: Duration) -> bool {
        let end = std::time::Instant::now() + d;
        loop {
            if self.stopping() {
                return false;
            }
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(left.min(Duration::from_millis(10)));
        }
    }

    /// Another event file of this process (a reader of two streams writes one per stream).
    pub fn second_out(&self, suffix: &str) -> std::io::Result<Out> {
        Out::create(&self.events.join(format!("{}{suffix}.log", self.proc)), self.t0, Mode::Flushed)
    }
}

/// Heap held just after the role opened what it reads (see `sys::Meter`).
static HEAP_OPEN: AtomicI64 = AtomicI64::new(0);
/// The largest message delivered so far.
static MAX_MSG: AtomicI64 = AtomicI64::new(0);
static EXITING: AtomicBool = AtomicBool::new(false);

/// Notes the heap as the baseline for the exit line's growth.
pub fn mark_heap_open() {
    HEAP_OPEN.store(sys::heap_bytes(), Ordering::Relaxed);
}

/// Heap bytes now and at the open mark.
pub fn heap_now_and_open() -> (i64, i64) {
    (sys::heap_bytes(), HEAP_OPEN.load(Ordering::Relaxed))
}

pub fn note_message_len(len: usize) {
    MAX_MSG.fetch_max(len as i64, Ordering::Relaxed);
}

/// Writes the exit line (once per process): resources now, for the oracle's bounds.
pub fn exit_line(outs: &[&Out], forced: bool, extra: &str) {
    if EXITING.swap(true, Ordering::SeqCst) {
        return;
    }
    let (rss, fds) = sys::rss_kb_and_fds();
    for out in outs {
        crate::ev!(
            out,
            "exit",
            "rss_kb={rss} fds={fds} heap_kb={} heap_open_kb={} max_msg={} forced={}{extra}",
            sys::heap_bytes() >> 10,
            HEAP_OPEN.load(Ordering::Relaxed) >> 10,
            MAX_MSG.load(Ordering::Relaxed),
            forced as u8
        );
        out.flush();
    }
}

/// How long after its stdin closed a role stuck in a blocking receive is ended by force.
const GRACE: Duration = Duration::from_millis(700);

/// Runs role `kind` with `settings`; returns the process's exit code.
pub fn run(kind: &str, settings: &str) -> i32 {
    let s = Settings::parse(settings);
    if !sys::die_with_parent(s.num("parent", 0)) {
        return 0;
    }
    let proc = s.str("proc").to_string();
    let events = PathBuf::from(s.str("events"));
    let t0 = s.num("t0", sys::mono_us());
    // A persistent reader's file is exact too: what the position it stored covers is what the
    // next incarnation must not deliver again, so no delivered line may die in a buffer.
    let mode = if kind == "writer" || kind == "persistent" { Mode::Direct } else { Mode::Flushed };
    let out = match Out::create(&events.join(format!("{proc}.log")), t0, mode) {
        Ok(out) => out,
        Err(e) => {
            eprintln!("{proc}: cannot create its event file: {e}");
            return 2;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    watch_stdin(Arc::clone(&stop), out.clone(), kind == "writer");
    let deadline = Duration::from_millis(s.num("deadline_ms", 120_000));
    let watchdog = out.clone();
    std::thread::spawn(move || {
        std::thread::sleep(deadline);
        crate::ev!(watchdog, "deadline");
        exit_line(&[&watchdog], true, "");
        std::process::exit(4);
    });
    let ctx = Ctx {
        proc,
        inc: s.num("inc", 0),
        rng: Rng::new(s.num("seed", 1)),
        dir: PathBuf::from(s.str("dir")),
        journal: PathBuf::from(s.str("journal")),
        events,
        t0,
        out,
        stop,
        s,
    };
    match kind {
        "writer" => writer::run(&ctx),
        "reader" => reader::run(&ctx),
        "recorder" => recorder::run(&ctx),
        "persistent" => persistent::run(&ctx),
        other => {
            eprintln!("unknown role {other}");
            2
        }
    }
}

/// Sets the stop flag when stdin closes (the controller's graceful end, or its death); a role
/// still stuck in a blocking receive after [`GRACE`] is ended by force, with its exit line.
/// A writer ended so logs no `exit` (which would say every attempt of it is logged).
fn watch_stdin(stop: Arc<AtomicBool>, out: Out, writer: bool) {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        stop.store(true, Ordering::Relaxed);
        std::thread::sleep(GRACE);
        if writer {
            crate::ev!(out, "forced");
        } else {
            exit_line(&[&out], true, "");
        }
        std::process::exit(0);
    });
}
