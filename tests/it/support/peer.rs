//! The parent's side of a peer process: spawn the test binary again in a role, send it commands
//! on stdin, and wait (with deadlines) for the events it prints on stdout.
//!
//! A peer prints `@@ <kind> key=value ...` lines; everything else on its stdout (the test
//! harness's own output) is ignored. A `fail` event panics the test at once with the peer's
//! story so far. Dropping a `Peer` kills it, so a failing test leaves no process behind.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Name of the `#[test]` at the test binary's root (`tests/it/main.rs`): it runs the role named
/// by [`ROLE_VAR`] and exits, and does nothing when the variable is unset.
pub const ENTRY_TEST: &str = "peer_process";
/// Environment variable naming the role of a peer process.
pub const ROLE_VAR: &str = "SHMLOG_TEST_PEER";
/// Environment variable holding the role's settings, `key=value` pairs separated by `;`.
pub const CFG_VAR: &str = "SHMLOG_TEST_CFG";

/// One line a peer printed.
#[derive(Clone, Debug)]
pub struct Event {
    pub kind: String,
    pub fields: Vec<(String, String)>,
    pub raw: String,
    /// When the parent received it (read by a dedicated thread, so waiting elsewhere does not
    /// delay the stamp).
    pub at: Instant,
}

impl Event {
    fn parse(line: &str, at: Instant) -> Option<Self> {
        let rest = line.strip_prefix("@@ ")?;
        let mut words = rest.split_whitespace();
        let kind = words.next()?.to_owned();
        let fields =
            words.filter_map(|w| w.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned()))).collect();
        Some(Self { kind, fields, raw: rest.to_owned(), at })
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    pub fn num(&self, key: &str) -> i64 {
        self.get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("event {:?} has no numeric field {key}", self.raw))
    }
}

/// A running peer process.
pub struct Peer {
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Option<Event>>,
    pending: VecDeque<Event>,
    /// Every event received, in order.
    pub log: Vec<Event>,
    eof: bool,
    status: Option<ExitStatus>,
}

/// Settings passed to a peer.
#[derive(Clone, Debug, Default)]
pub struct Cfg(pub Vec<(String, String)>);

impl Cfg {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a setting.
    pub fn set(mut self, key: &str, value: impl ToString) -> Self {
        self.0.retain(|(k, _)| k != key);
        self.0.push((key.to_owned(), value.to_string()));
        self
    }

    fn encode(&self) -> String {
        self.0.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(";")
    }
}

impl Peer {
    /// Starts the current test binary as peer `name` in `role`.
    pub fn spawn(name: &str, role: &str, cfg: &Cfg) -> Peer {
        Self::spawn_with_env(name, role, cfg, &[])
    }

    /// Like [`Peer::spawn`], with extra environment variables for the peer only.
    pub fn spawn_with_env(name: &str, role: &str, cfg: &Cfg, env: &[(&str, &str)]) -> Peer {
        let exe = std::env::current_exe().expect("test executable path");
        let mut cmd = Command::new(exe);
        cmd.args([ENTRY_TEST, "--exact", "--nocapture", "--test-threads=1", "-q"])
            .env(ROLE_VAR, role)
            .env(CFG_VAR, cfg.encode())
            .env("SHMLOG_TEST_PEER_NAME", name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = {
            let _spawn = super::spawns::spawning();
            cmd.spawn().expect("spawn peer")
        };
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(e) = Event::parse(&line, Instant::now()) {
                    if tx.send(Some(e)).is_err() {
                        return;
                    }
                }
            }
            let _ = tx.send(None);
        });
        Peer {
            name: name.to_owned(),
            stdin: child.stdin.take(),
            child,
            rx,
            pending: VecDeque::new(),
            log: Vec::new(),
            eof: false,
            status: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one command line; ignored if the peer is gone.
    pub fn send(&mut self, line: &str) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = writeln!(stdin, "{line}").and_then(|_| stdin.flush());
        }
    }

    fn story(&self) -> String {
        let mut s = format!("peer {} (pid {}) said:\n", self.name, self.child.id());
        for e in self.log.iter().rev().take(40).collect::<Vec<_>>().iter().rev() {
            s.push_str("  @@ ");
            s.push_str(&e.raw);
            s.push('\n');
        }
        if let Some(st) = self.status {
            s.push_str(&format!("  exit: {st:?}\n"));
        }
        s
    }

    /// Receives one more event into `pending`; `false` on timeout or end of output.
    fn receive(&mut self, deadline: Instant) -> bool {
        if self.eof {
            return false;
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(wait) {
            Ok(Some(e)) => {
                self.log.push(e.clone());
                if e.kind == "fail" {
                    panic!("peer {} failed: {}\n{}", self.name, e.raw, self.story());
                }
                self.pending.push_back(e);
                true
            }
            Ok(None) | Err(RecvTimeoutError::Disconnected) => {
                self.eof = true;
                false
            }
            Err(RecvTimeoutError::Timeout) => false,
        }
    }

    /// The first not yet consumed event of `kind` satisfying `pred`, waiting up to `within`;
    /// `None` on timeout or if the peer's output ended.
    pub fn try_expect_where(
        &mut self,
        kind: &str,
        mut pred: impl FnMut(&Event) -> bool,
        within: Duration,
    ) -> Option<Event> {
        let deadline = Instant::now() + within;
        let mut scanned = 0;
        loop {
            while scanned < self.pending.len() {
                let e = &self.pending[scanned];
                if e.kind == kind && pred(e) {
                    // Consumed; events of other kinds stay pending, in order.
                    return self.pending.remove(scanned);
                }
                scanned += 1;
            }
            if !self.receive(deadline) {
                return None;
            }
        }
    }

    /// Like [`Peer::try_expect_where`], panicking with the peer's story on timeout.
    pub fn expect_where(&mut self, kind: &str, pred: impl FnMut(&Event) -> bool, within: Duration) -> Event {
        match self.try_expect_where(kind, pred, within) {
            Some(e) => e,
            None => {
                if self.eof {
                    self.status = self.child.wait().ok();
                }
                panic!(
                    "peer {}: no matching {kind:?} event within {within:?}{}\n{}",
                    self.name,
                    if self.eof { " (its output ended)" } else { "" },
                    self.story()
                )
            }
        }
    }

    /// The next event of `kind`, waiting up to `within`.
    pub fn expect(&mut self, kind: &str, within: Duration) -> Event {
        self.expect_where(kind, |_| true, within)
    }

    /// Events of `kind` received so far (consumed or not), without waiting.
    pub fn seen(&mut self, kind: &str) -> Vec<Event> {
        while self.receive(Instant::now()) {}
        self.log.iter().filter(|e| e.kind == kind).cloned().collect()
    }

    /// Waits up to `within` for the peer to exit; panics if it does not.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        // Drain output first (fail events panic here), so the pipe never blocks the peer.
        while self.receive(deadline) {}
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                self.status = Some(st);
                return st;
            }
            if Instant::now() >= deadline {
                panic!("peer {} did not exit within {within:?}\n{}", self.name, self.story());
            }
            // The output has ended, so the exit is imminent: a short bounded poll.
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits for a clean exit (status 0).
    pub fn wait_success(&mut self, within: Duration) {
        let st = self.wait_exit(within);
        assert!(st.success(), "peer {} exited with {st:?}\n{}", self.name, self.story());
    }

    /// SIGKILL, then reap. Returns when the process is gone (its locks released).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        self.status = self.child.wait().ok();
    }

    /// Sends `signal` (e.g. `libc::SIGSTOP`) to the peer.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) has no memory arguments; the pid is our own unreaped child.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill({}, {signal})", self.child.id());
    }

    /// `true` once the process has exited (reaps it).
    pub fn exited(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status.is_some()
    }

    /// Story of this peer, for assertion messages.
    pub fn describe(&self) -> String {
        self.story()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if self.status.is_none() {
            // A stopped peer must be continued to die promptly on some kernels; SIGKILL wakes it.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
