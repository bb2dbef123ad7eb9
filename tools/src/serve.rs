//! `shmlog serve-metrics`: `stat`'s figures for Prometheus, over HTTP/1.1 with std alone. It
//! answers `GET /metrics` (and `HEAD`) with the OpenMetrics exposition read at that request,
//! 404 for every other path, 405 for other methods, 400 for what is not an HTTP/1 request line,
//! 431 for a request head over 8 KiB and 408 for one not sent within 5 s; then it closes the
//! connection. At most 8 connections are served at once (each on a thread of its own, so a
//! slow client holds only its own), more get 503. A web framework would bring a runtime and
//! dozens of crates for one read-only page a scraper fetches every few seconds.

use crate::metrics::Snapshot;
use crate::openmetrics::CONTENT_TYPE;
use crate::sys::{stop_requested, wait_readable};
use clap::Args;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// Address and port to listen on. Loopback by default: the figures name processes, streams
    /// and paths; listen on another address only where the network is trusted.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
    listen: String,
    /// Directory of the streams (repeatable) [default: $SHMLOG_DIR, else /dev/shm/shmlog-<uid>]
    #[arg(long, value_name = "DIR")]
    dir: Vec<PathBuf>,
    /// A journal directory to show too: size, positions, retention, durable readers (repeatable).
    #[arg(long, value_name = "DIR")]
    journal: Vec<PathBuf>,
}

/// The longest request head read (request line and headers); a scraper's is a few hundred bytes.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client has to send its request head.
const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// How long a client may take to read the response.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once.
const MAX_CONNECTIONS: usize = 8;

/// What each scrape reads, and the last failure reported (each is logged once, not per scrape).
struct Sources {
    dirs: Vec<PathBuf>,
    journals: Vec<PathBuf>,
    last_error: Mutex<Option<String>>,
}

impl Sources {
    fn exposition(&self) -> String {
        let snapshot = Snapshot::take(&self.dirs, &self.journals);
        let error = snapshot.first_error();
        let mut last = self.last_error.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if error != *last {
            match &error {
                Some(e) => {
                    eprintln!("shmlog: serve-metrics: {e} (served as shmlog_dir_up / shmlog_journal_up 0)")
                }
                None => eprintln!("shmlog: serve-metrics: every directory and journal is readable again"),
            }
            *last = error;
        }
        snapshot.render()
    }
}

/// `shmlog serve-metrics`: serves until Ctrl-C or SIGTERM.
pub(crate) fn run(a: &ServeArgs) -> Result<(), String> {
    let listener = TcpListener::bind(&a.listen).map_err(|e| format!("{}: listen: {e}", a.listen))?;
    let addr = listener.local_addr().map_err(|e| format!("{}: listen: {e}", a.listen))?;
    // Non-blocking, so that a connection reset between the wait and the accept cannot block.
    listener.set_nonblocking(true).map_err(|e| format!("{addr}: listen: {e}"))?;
    let sources = Arc::new(Sources {
        dirs: crate::dirs_or_default(a.dir.clone()),
        journals: a.journal.clone(),
        last_error: Mutex::new(None),
    });
    if !addr.ip().is_loopback() {
        eprintln!("shmlog: serve-metrics: listening on {addr}: other hosts can read every figure");
    }
    println!("serving OpenMetrics at http://{addr}/metrics");
    let _ = std::io::stdout().flush();
    let active = Arc::new(AtomicUsize::new(0));
    while !stop_requested() {
        if !wait_readable(listener.as_fd(), Duration::from_millis(250)) {
            continue;
        }
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => continue,
            Err(e) => {
                // Out of descriptors, say: the waiting connection stays queued; try again soon.
                eprintln!("shmlog: serve-metrics: accept: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            refuse_busy(stream);
            continue;
        }
        let held = Held(Arc::clone(&active));
        let sources = Arc::clone(&sources);
        let spawned = std::thread::Builder::new().name("scrape".into()).spawn(move || {
            let _held = held;
            serve_one(stream, &sources);
        });
        if let Err(e) = spawned {
            eprintln!("shmlog: serve-metrics: thread: {e}");
        }
    }
    Ok(())
}

/// One of the connections served at once, released when its thread ends (or unwinds).
struct Held(Arc<AtomicUsize>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Too many connections: a short answer from the accepting thread, which must not wait for it.
fn refuse_busy(mut stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(&error_response(503, "Service Unavailable", "too many connections\n"));
}

fn serve_one(mut stream: TcpStream, sources: &Sources) {
    // Accepted sockets may inherit the listener's non-blocking mode.
    if stream.set_nonblocking(false).is_err() || stream.set_write_timeout(Some(WRITE_TIMEOUT)).is_err() {
        return;
    }
    let response = match read_head(&mut stream) {
        Ok(head) => respond(&head, sources),
        Err(Some(refusal)) => refusal,
        Err(None) => return,
    };
    if stream.write_all(&response).is_ok() {
        close_gently(stream);
    }
}

/// Reads up to the blank line that ends a request head. `Err(Some(response))` for a head too
/// large or too slow, `Err(None)` when the client went away.
fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, Option<Vec<u8>>> {
    let deadline = Instant::now() + HEAD_DEADLINE;
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = end_of_head(&head) {
            head.truncate(end);
            return Ok(head);
        }
        // Four bytes more than the limit: room for the blank line after a head of MAX_HEAD.
        let room = (MAX_HEAD + 4).saturating_sub(head.len()).min(chunk.len());
        if room == 0 {
            return Err(Some(error_response(
                431,
                "Request Header Fields Too Large",
                "request head over 8 KiB\n",
            )));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Err(Some(error_response(408, "Request Timeout", "request head not received in time\n")));
        }
        match stream.read(&mut chunk[..room]) {
            Ok(0) => return Err(None),
            Ok(n) => head.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(Some(error_response(
                    408,
                    "Request Timeout",
                    "request head not received in time\n",
                )))
            }
            Err(_) => return Err(None),
        }
    }
}

/// Where the head ends (before its blank line), if it has: CRLF CRLF, or bare LFs.
fn end_of_head(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = buf.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The answer to a whole request head.
fn respond(head: &[u8], sources: &Sources) -> Vec<u8> {
    let bad = || error_response(400, "Bad Request", "not an HTTP/1 request\n");
    let Ok(text) = std::str::from_utf8(head) else { return bad() };
    let line = text.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return bad();
    };
    let token = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    if !token(method) || !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return bad();
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => {
            let mut r = error_response(405, "Method Not Allowed", "only GET and HEAD\n");
            insert_header(&mut r, "Allow: GET, HEAD");
            return r;
        }
    };
    let path = target.split('?').next().unwrap_or(target);
    if path != "/metrics" {
        return error_response(404, "Not Found", "the metrics are at /metrics\n");
    }
    let body = sources.exposition();
    response(200, "OK", CONTENT_TYPE, body.as_bytes(), head_only)
}

fn response(status: u16, reason: &str, content_type: &str, body: &[u8], head_only: bool) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        r.extend_from_slice(body);
    }
    r
}

fn error_response(status: u16, reason: &str, message: &str) -> Vec<u8> {
    response(status, reason, "text/plain; charset=utf-8", message.as_bytes(), false)
}

/// Adds a header line to a response `response` made.
fn insert_header(r: &mut Vec<u8>, header: &str) {
    let at = r.windows(2).position(|w| w == b"\r\n").map_or(0, |i| i + 2);
    r.splice(at..at, format!("{header}\r\n").into_bytes());
}

/// Ends the connection so that the client reads the whole response: closing a socket with
/// unread request bytes (a head over the limit) would reset it and could drop the response in
/// flight. Reads what the client still sends, for a bounded time and amount, then closes.
fn close_gently(mut stream: TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    if stream.set_read_timeout(Some(Duration::from_secs(1))).is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    let mut left: usize = 64 * 1024;
    while left > 0 {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources() -> Sources {
        let missing = std::env::temp_dir().join(format!("shmlog-serve-missing-{}", std::process::id()));
        Sources { dirs: vec![missing], journals: vec![], last_error: Mutex::new(None) }
    }

    fn status_of(r: &[u8]) -> &str {
        std::str::from_utf8(&r[9..12]).unwrap()
    }

    #[test]
    fn requests_get_the_right_status() {
        let s = sources();
        for (head, status) in [
            (&b"GET /metrics HTTP/1.1\r\nHost: x"[..], "200"),
            (b"GET /metrics?x=1 HTTP/1.0", "200"),
            (b"HEAD /metrics HTTP/1.1", "200"),
            (b"GET / HTTP/1.1", "404"),
            (b"GET /metrics/ HTTP/1.1", "404"),
            (b"POST /metrics HTTP/1.1", "405"),
            (b"GET /metrics HTTP/2", "400"),
            (b"GET /metrics", "400"),
            (b"GET  /metrics HTTP/1.1", "400"),
            (b"G(T /metrics HTTP/1.1", "400"),
            (b"GET metrics HTTP/1.1", "400"),
            (b"\xff\xfe", "400"),
            (b"", "400"),
        ] {
            let r = respond(head, &s);
            assert_eq!(status_of(&r), status, "{}", String::from_utf8_lossy(head));
        }
        let r = String::from_utf8(respond(b"POST /metrics HTTP/1.1", &s)).unwrap();
        assert!(r.starts_with("HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD\r\n"), "{r}");
        let get = String::from_utf8(respond(b"GET /metrics HTTP/1.1", &s)).unwrap();
        let head = String::from_utf8(respond(b"HEAD /metrics HTTP/1.1", &s)).unwrap();
        assert!(
            get.contains(&format!("Content-Type: {CONTENT_TYPE}\r\n")) && get.ends_with("# EOF\n"),
            "{get}"
        );
        assert!(head.ends_with("\r\n\r\n") && get.starts_with(&head), "HEAD: the same head, no body");
    }

    #[test]
    fn the_head_ends_at_the_first_blank_line() {
        assert_eq!(end_of_head(b"GET / HTTP/1.1\r\nA: b\r\n\r\nbody"), Some(20));
        assert_eq!(end_of_head(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(end_of_head(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
    }
}
