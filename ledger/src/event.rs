//! Event lines: how every process of a run writes its part of the ledger, and how the oracle
//! reads it back.
//!
//! A line is `<t> <kind> key=value ...`, `t` in microseconds of the host's monotonic clock since
//! the run began (the controller hands every role its zero). Each process appends to a file of
//! its own. Writers write each line with one `write(2)` before going on; readers buffer and a
//! thread flushes every few milliseconds, so a SIGKILL loses at most a short tail: every file is
//! a true prefix of what its process did.

use crate::sys::mono_us;
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a buffered file is flushed, at most this long after a line was written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(5);

#[derive(Debug)]
struct Inner {
    file: File,
    buf: Vec<u8>,
}

/// How an event file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One `write(2)` per line, before the caller goes on (writers, the controller).
    Direct,
    /// Buffered, flushed by a thread of its own every [`FLUSH_EVERY`] (readers).
    Flushed,
    /// Buffered, flushed only by [`Out::flush`] (files written after the run).
    Manual,
}

/// One process's event file. Cloned handles share it (a flusher thread holds one).
#[derive(Clone, Debug)]
pub struct Out {
    inner: Arc<Mutex<Inner>>,
    t0: i64,
    direct: bool,
}

impl Out {
    /// Creates the file; `t0` is the run's zero on the monotonic clock.
    pub fn create(path: &Path, t0: i64, mode: Mode) -> std::io::Result<Out> {
        let file = File::options().create_new(true).append(true).open(path)?;
        let inner = Arc::new(Mutex::new(Inner { file, buf: Vec::with_capacity(1 << 16) }));
        let out = Out { inner, t0, direct: mode == Mode::Direct };
        if mode == Mode::Flushed {
            let flusher = out.clone();
            std::thread::Builder::new().name("ledger-flush".into()).spawn(move || loop {
                std::thread::sleep(FLUSH_EVERY);
                flusher.flush();
            })?;
        }
        Ok(out)
    }

    /// Microseconds since the run's zero.
    pub fn now(&self) -> i64 {
        mono_us() - self.t0
    }

    /// Appends one line (`kind` then `args`), stamped now.
    pub fn line(&self, kind: &str, args: fmt::Arguments<'_>) {
        let t = self.now();
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Inner { file, buf } = &mut *g;
        let _ = writeln!(buf, "{t} {kind} {args}");
        if self.direct || buf.len() >= 1 << 16 {
            let _ = file.write_all(buf);
            buf.clear();
        }
    }

    /// Writes what is buffered.
    pub fn flush(&self) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Inner { file, buf } = &mut *g;
        if !buf.is_empty() {
            let _ = file.write_all(buf);
            buf.clear();
        }
    }
}

/// `ev!(out, "kind", "k={} ...", v)`: one event line.
#[macro_export]
macro_rules! ev {
    ($out:expr, $kind:expr) => { $out.line($kind, format_args!("")) };
    ($out:expr, $kind:expr, $($arg:tt)*) => { $out.line($kind, format_args!($($arg)*)) };
}

/// One parsed line.
#[derive(Clone, Copy, Debug)]
pub struct Line<'a> {
    pub t: i64,
    pub kind: &'a str,
    pub rest: &'a str,
}

impl<'a> Line<'a> {
    /// Parses a line; `None` for a torn or foreign one.
    pub fn parse(line: &'a str) -> Option<Line<'a>> {
        let mut parts = line.splitn(3, ' ');
        let t = parts.next()?.parse().ok()?;
        let kind = parts.next()?;
        Some(Line { t, kind, rest: parts.next().unwrap_or("") })
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.rest.split(' ').find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
    }

    /// The value of `key` as a number (`None` if absent or `-`).
    pub fn num(&self, key: &str) -> Option<i64> {
        self.get(key).and_then(|v| v.parse().ok())
    }

    /// `key=1`.
    pub fn flag(&self, key: &str) -> bool {
        self.get(key) == Some("1")
    }
}

/// The complete lines of a file's text (a last line without its newline was torn by a kill).
pub fn lines(text: &str) -> impl Iterator<Item = (usize, Line<'_>)> {
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    complete.lines().enumerate().filter_map(|(i, l)| Line::parse(l).map(|p| (i + 1, p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_and_a_torn_tail_is_dropped() {
        let text = "10 msg w=1 inc=2 seq=3 end=-\n20 closed session=-5\n30 msg w=1";
        let all: Vec<_> = lines(text).collect();
        assert_eq!(all.len(), 2);
        let (n, l) = all[0];
        assert_eq!((n, l.t, l.kind), (1, 10, "msg"));
        assert_eq!(
            (l.num("inc"), l.num("seq"), l.num("end"), l.get("end")),
            (Some(2), Some(3), None, Some("-"))
        );
        assert_eq!(all[1].1.num("session"), Some(-5));
        assert_eq!(l.get("w"), Some("1"), "a key is matched whole, not as a prefix of another");
    }
}
