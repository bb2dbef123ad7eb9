//! The settings of a bridge and what both directions share: the Aeron link (driver, client,
//! reconnection), the status file and the resume file.

use crate::client::Client;
use crate::driver::{DriverConfig, MediaDriver};
use crate::status::{self as bridge_status, BridgeDirection, BridgeInfo};
use crate::sys::{self, ResumeMap};
use shmlog::{Error, IdleStrategy};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What a bridge does when the next hop cannot take a message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackPressure {
    /// Wait for it: nothing is lost, and the wait reaches back to the local publisher.
    #[default]
    Hold,
    /// Drop the message and record the loss (count and source positions) in the status.
    Drop,
}

/// Where the bridge finds its media driver.
#[derive(Clone, Debug)]
pub enum Driver {
    /// A driver already running with this directory (`aeron.dir`).
    Attach(PathBuf),
    /// A driver the bridge starts, restarts if it dies, and stops. The driver gets SIGTERM when
    /// the thread that started it ends (so it never outlives a killed bridge): open the bridge
    /// on the thread that will run it.
    Embedded(DriverConfig),
}

/// Why a bridge could not start or go on.
#[derive(Debug)]
#[non_exhaustive]
pub enum BridgeError {
    /// The local stream could not be opened or written.
    Stream(Error),
    /// The media driver could not be started or reached, or refused a channel.
    Aeron(String),
    /// A setting is out of range.
    Config(&'static str),
}

impl fmt::Display for BridgeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BridgeError::Stream(e) => write!(f, "local stream: {e}"),
            BridgeError::Aeron(e) => write!(f, "aeron: {e}"),
            BridgeError::Config(e) => write!(f, "bridge setting: {e}"),
        }
    }
}

impl std::error::Error for BridgeError {}

impl From<Error> for BridgeError {
    fn from(e: Error) -> Self {
        BridgeError::Stream(e)
    }
}

/// Settings of a bridge; [`BridgeBuilder::open_out`] and [`BridgeBuilder::open_in`] start one.
#[derive(Clone, Debug)]
pub struct BridgeBuilder {
    pub(crate) stream: String,
    pub(crate) dir: PathBuf,
    pub(crate) channel: String,
    pub(crate) aeron_stream_id: i32,
    pub(crate) driver: Driver,
    pub(crate) back_pressure: BackPressure,
    pub(crate) concurrent: bool,
    pub(crate) term_length: Option<usize>,
    pub(crate) connect_timeout: Duration,
    pub(crate) spin_before_sleep: Duration,
}

impl BridgeBuilder {
    /// A bridge for local stream `stream`, on `aeron:udp?endpoint=localhost:40123` stream id
    /// 1001 through a driver in the default Aeron directory.
    pub fn new(stream: impl Into<String>) -> Self {
        BridgeBuilder {
            stream: stream.into(),
            dir: shmlog::default_dir(),
            channel: "aeron:udp?endpoint=localhost:40123".into(),
            aeron_stream_id: 1001,
            driver: Driver::Attach(default_aeron_dir()),
            back_pressure: BackPressure::Hold,
            concurrent: false,
            term_length: None,
            connect_timeout: Duration::from_secs(10),
            spin_before_sleep: Duration::ZERO,
        }
    }

    /// The directory of the local stream (default [`shmlog::default_dir`]).
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = dir.into();
        self
    }

    /// The Aeron channel: `aeron:udp?endpoint=host:port` for unicast, or
    /// `aeron:udp?endpoint=224.0.1.1:40456|interface=10.0.0.1` for a multicast group.
    pub fn channel(mut self, channel: impl Into<String>) -> Self {
        self.channel = channel.into();
        self
    }

    /// The Aeron stream id on the channel (default 1001).
    pub fn aeron_stream_id(mut self, id: i32) -> Self {
        self.aeron_stream_id = id;
        self
    }

    /// Which media driver to use (default: attach to one in the default Aeron directory).
    pub fn driver(mut self, driver: Driver) -> Self {
        self.driver = driver;
        self
    }

    /// Hold (default) or drop when the next hop pushes back.
    pub fn back_pressure(mut self, policy: BackPressure) -> Self {
        self.back_pressure = policy;
        self
    }

    /// In bridges only: write into the local stream as one of several writers
    /// ([`shmlog::ConcurrentPublication`]), so several in bridges (or local writers) can feed it.
    pub fn concurrent(mut self, yes: bool) -> Self {
        self.concurrent = yes;
        self
    }

    /// In bridges only: the term length of the local stream's sessions the bridge creates
    /// (default [`shmlog::DEFAULT_TERM_LENGTH`]; see `PublicationBuilder::term_length`). Its
    /// largest message is the most the bridge carries into it: a longer one is dropped and
    /// reported. With [`BridgeBuilder::concurrent`], a log that exists keeps its creator's.
    pub fn term_length(mut self, bytes: usize) -> Self {
        self.term_length = Some(bytes);
        self
    }

    /// Out bridges only: how long [`BridgeOut::run`](crate::BridgeOut::run) polls the local stream before it sleeps on
    /// its doorbell (default zero: sleep at once, woken by the publisher in microseconds).
    /// Spinning saves that wake-up per message at the cost of a core while it spins.
    pub fn spin_before_sleep(mut self, spin: Duration) -> Self {
        self.spin_before_sleep = spin;
        self
    }

    /// How long to wait for the driver when starting and reconnecting (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    // `open_out` and `open_in` are in outbound.rs and inbound.rs, which stand on this file.

    pub(crate) fn validate(&self) -> Result<(), BridgeError> {
        shmlog::validate_name(&self.stream)?;
        if !self.channel.starts_with("aeron:udp") {
            return Err(BridgeError::Config("the channel must be an aeron:udp channel"));
        }
        Ok(())
    }
}

/// The embedded driver runs in `<dir>/bridge-<pid>`: a bridge restarted after a SIGKILL must
/// not share a directory with its predecessor's driver, which is still shutting down (and
/// deletes its directory when done). Subdirectories of bridges that are gone are removed.
fn own_driver_dir(cfg: &DriverConfig) -> Result<DriverConfig, BridgeError> {
    std::fs::create_dir_all(&cfg.dir)
        .map_err(|e| BridgeError::Aeron(format!("driver directory {}: {e}", cfg.dir.display())))?;
    // Housekeeping only (no position or loss lives in a driver's directory): what cannot be
    // listed or removed is left for the next bridge, and never stops this one.
    if let Ok(read) = std::fs::read_dir(&cfg.dir) {
        for entry in read.flatten() {
            let name = entry.file_name();
            let pid = name.to_str().and_then(|n| n.strip_prefix("bridge-")).and_then(|rest| {
                let digits = rest.split('.').next()?;
                digits.parse::<u32>().ok()
            });
            if pid.is_some_and(|p| !sys::pid_alive(p)) {
                let path = entry.path();
                let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
            }
        }
    }
    let mut own = cfg.clone();
    own.dir = cfg.dir.join(format!("bridge-{}", std::process::id()));
    Ok(own)
}

/// Aeron's default directory: `/dev/shm/aeron-<user>`.
pub fn default_aeron_dir() -> PathBuf {
    let user = std::env::var("USER").unwrap_or_else(|_| "default".into());
    let base = if Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
    PathBuf::from(base).join(format!("aeron-{user}"))
}

/// The Aeron side both directions share: the driver (if embedded), the client, reconnection.
pub(crate) struct Link {
    pub(crate) driver: Option<MediaDriver>,
    pub(crate) aeron_dir: PathBuf,
    pub(crate) client: Option<Client>,
    /// The channel and stream id of the bridge's publication or subscription.
    pub(crate) channel: String,
    pub(crate) aeron_stream_id: i32,
    pub(crate) timeout: Duration,
    pub(crate) next_attempt: Instant,
    /// When the caller's publication or subscription may be added (again).
    pub(crate) next_add: Instant,
}

impl Link {
    pub(crate) fn open(b: &BridgeBuilder) -> Result<Link, BridgeError> {
        let timeout = b.connect_timeout;
        let (driver, aeron_dir) = match &b.driver {
            Driver::Attach(dir) => (None, dir.clone()),
            Driver::Embedded(cfg) => {
                let cfg = own_driver_dir(cfg)?;
                (Some(MediaDriver::start(&cfg).map_err(BridgeError::Aeron)?), cfg.dir)
            }
        };
        let client = Client::connect(&aeron_dir.to_string_lossy(), timeout).map_err(BridgeError::Aeron)?;
        let now = Instant::now();
        Ok(Link {
            driver,
            aeron_dir,
            client: Some(client),
            channel: b.channel.clone(),
            aeron_stream_id: b.aeron_stream_id,
            timeout,
            next_attempt: now,
            next_add: now,
        })
    }

    /// Runs the client's duty cycle; once the driver is lost, returns `Lost` (the caller takes
    /// the client away). Without a client, tries to
    /// connect again at most every 500 ms (restarting an embedded driver first) and returns
    /// `Reconnected` once it has.
    fn tend(&mut self, now: Instant) -> LinkEvent {
        match &mut self.client {
            Some(c) if c.driver_lost() => LinkEvent::Lost,
            Some(c) => {
                c.keep_alive(now);
                LinkEvent::Steady
            }
            None if now < self.next_attempt => LinkEvent::Down,
            None => {
                self.next_attempt = now + Duration::from_millis(500);
                if let Some(d) = &mut self.driver {
                    if let Err(e) = d.restart_if_exited() {
                        eprintln!("shmlog bridge: restarting the media driver: {e}");
                        return LinkEvent::Down;
                    }
                }
                match Client::connect(&self.aeron_dir.to_string_lossy(), Duration::from_millis(200)) {
                    Ok(c) => {
                        self.client = Some(c);
                        LinkEvent::Reconnected
                    }
                    Err(_) => LinkEvent::Down,
                }
            }
        }
    }

    /// [`Link::tend`], keeping `status` in step: on `Lost` it is marked disconnected and stderr
    /// says so, and `on_lost` may still read the lost client's counters before it is dropped
    /// (the caller drops its publication or subscription there: it belonged to that client); a
    /// reconnection is counted.
    pub(crate) fn tend_for(&mut self, now: Instant, status: &mut Status, on_lost: impl FnOnce(&Client)) {
        match self.tend(now) {
            LinkEvent::Lost => {
                status.info.connected = false;
                eprintln!(
                    "shmlog bridge {}: lost the media driver in {}; reconnecting",
                    status.info.direction.as_str(),
                    self.aeron_dir.display()
                );
                if let Some(c) = self.client.take() {
                    on_lost(&c);
                }
            }
            LinkEvent::Reconnected => {
                status.info.reconnects += 1;
                self.next_add = now;
            }
            LinkEvent::Steady | LinkEvent::Down => {}
        }
    }

    /// Fills `slot` with the bridge's publication or subscription (`add`: `Client::add_publication`
    /// or `Client::add_subscription`) if it is empty and a client may add it now: at once after a
    /// (re)connection, then at most once a second after a refusal.
    pub(crate) fn ensure<T>(
        &mut self,
        slot: &mut Option<T>,
        now: Instant,
        add: impl FnOnce(&mut Client, &str, i32, Duration) -> Result<T, String>,
    ) -> Result<(), BridgeError> {
        if slot.is_some() || now < self.next_add {
            return Ok(());
        }
        let Some(client) = self.client.as_mut() else { return Ok(()) };
        self.next_add = now + Duration::from_secs(1);
        *slot =
            Some(add(client, &self.channel, self.aeron_stream_id, self.timeout).map_err(BridgeError::Aeron)?);
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LinkEvent {
    Steady,
    Lost,
    Down,
    Reconnected,
}

/// The status file and when to write it next, and the resume file. Dropped (a clean stop, or
/// an open that failed), it removes both: a clean stop leaves nothing to resume.
pub(crate) struct Status {
    pub(crate) info: BridgeInfo,
    pub(crate) dir: PathBuf,
    pub(crate) next_write: Instant,
    pub(crate) resume: ResumeFile,
    /// The last write of the status file failed (said once on stderr, until one succeeds).
    pub(crate) write_failing: bool,
    /// The files of dead predecessors whose resume position this bridge took over: removed
    /// once it has started (until then a successor can still take them over).
    pub(crate) adopted: Vec<PathBuf>,
}

/// The mapped resume file (`status::resume_path`): where the bridge stands, stored right
/// after each message it carries (a store, no system call), so a bridge killed at any point
/// leaves at most the message in hand unrecorded.
pub(crate) struct ResumeFile(pub(crate) Option<ResumeMap>);

impl ResumeFile {
    /// No file: positions are not kept (tests and fuzzing of the duty cycle).
    #[cfg(any(test, shmlog_fuzz))]
    pub(crate) fn detached() -> Self {
        ResumeFile(None)
    }

    /// Stores the resume position and the source session it belongs to. The page holding them
    /// is in the page cache the moment the store is, so a successor reads it after a SIGKILL.
    pub(crate) fn save(&self, position: i64, session: i32) {
        if let Some(r) = &self.0 {
            r.store(session as u32 as i64, position);
        }
    }
}

impl Status {
    const EVERY: Duration = Duration::from_millis(100);

    /// Makes the stream's directory if this bridge is its first user, then creates and maps the
    /// resume file: without it a successor could not report what this bridge's death lost, so
    /// a failure is an error, not a bridge that runs without one.
    pub(crate) fn new(
        b: &BridgeBuilder,
        direction: BridgeDirection,
        aeron_dir: &Path,
    ) -> Result<Self, BridgeError> {
        shmlog::ensure_dir(&b.dir)?;
        let info = BridgeInfo::new(
            &b.stream,
            direction,
            &b.channel,
            b.aeron_stream_id,
            &aeron_dir.to_string_lossy(),
        );
        let path = bridge_status::resume_path(&b.dir, &b.stream, direction, info.pid);
        let resume = map_resume(&path).map_err(|e| io_error("create the bridge's resume file", &path, e))?;
        Ok(Status {
            info,
            dir: b.dir.clone(),
            next_write: Instant::now(),
            resume: ResumeFile(Some(resume)),
            write_failing: false,
            adopted: Vec::new(),
        })
    }

    /// Finds the status files of this stream, direction and channel whose bridges are gone;
    /// returns the furthest resume position they recorded and its source session, if any. Their
    /// files are kept until [`Status::retire_predecessors`]: a bridge that fails to start (or is
    /// killed) before then leaves them to the next one.
    pub(crate) fn find_predecessors(&mut self) -> Result<Option<(i64, i32)>, BridgeError> {
        let mut resume: Option<(i64, i32)> = None;
        let listing = |e| io_error("list the stream directory", &self.dir, e);
        // The directory was just made or checked: a listing that fails could hide a
        // predecessor's resume position, so it stops the bridge.
        for entry in std::fs::read_dir(&self.dir).map_err(listing)? {
            let entry = entry.map_err(listing)?;
            let name = entry.file_name();
            let Some((stream, direction, pid)) = name.to_str().and_then(bridge_status::parse_file_name)
            else {
                continue;
            };
            if stream != self.info.stream || direction != self.info.direction || pid == self.info.pid {
                continue;
            }
            let resume_file = bridge_status::resume_path(&self.dir, &stream, direction, pid);
            let old = match bridge_status::read(&entry.path()) {
                Ok(old) => old,
                // Removed meanwhile (`shmlog clean`, or another bridge took it over).
                Err(_) if !entry.path().exists() => continue,
                // Damaged or foreign: it cannot say which channel it carried, so its resume
                // position is not used. It stays for `shmlog stat`, which shows it as a problem;
                // said here too, since a loss after it may go unreported.
                Err(e) => {
                    eprintln!("shmlog bridge {}: {e}; its resume position is not used", direction.as_str());
                    continue;
                }
            };
            if old.alive
                || old.channel != self.info.channel
                || old.aeron_stream_id != self.info.aeron_stream_id
            {
                continue;
            }
            match bridge_status::read_resume(&resume_file) {
                Some(r) if r.0 >= 0 => resume = resume.max(Some(r)),
                Some(_) => {} // it had carried nothing
                // Its resume file is gone or damaged: the status file's copy is up to 100 ms
                // old, so a gap measured from it may start early (never late).
                None if old.resume_position >= 0 => {
                    eprintln!(
                        "shmlog bridge {}: {} unreadable; resuming from its status file instead",
                        direction.as_str(),
                        resume_file.display()
                    );
                    resume = resume.max(Some((old.resume_position, 0)));
                }
                None => {}
            }
            self.adopted.push(entry.path());
            self.adopted.push(resume_file);
        }
        Ok(resume)
    }

    /// Removes the files of the predecessors taken over, once this bridge has started and its
    /// own resume file holds what they said.
    pub(crate) fn retire_predecessors(&mut self) {
        for path in std::mem::take(&mut self.adopted) {
            remove_file_said(&path, self.info.direction);
        }
    }

    /// The end of a duty cycle: the status file, if it is due.
    pub(crate) fn end_cycle(&mut self, now: Instant) {
        if now >= self.next_write {
            self.write(now);
        }
    }

    pub(crate) fn write(&mut self, now: Instant) {
        self.next_write = now + Self::EVERY;
        self.info.updated_ms = sys::now_ms();
        // A status that cannot be written (full /dev/shm) must not stop the traffic: the
        // losses stay in `status()` and the resume file, and stderr says so once.
        match bridge_status::write(&self.dir, &self.info) {
            Ok(()) => self.write_failing = false,
            Err(e) if !self.write_failing => {
                self.write_failing = true;
                eprintln!(
                    "shmlog bridge {}: cannot write its status file in {}: {e}",
                    self.info.direction.as_str(),
                    self.dir.display()
                );
            }
            Err(_) => {}
        }
    }
}

impl Drop for Status {
    fn drop(&mut self) {
        remove_file_said(&self.info.path(&self.dir), self.info.direction);
        let resume =
            bridge_status::resume_path(&self.dir, &self.info.stream, self.info.direction, self.info.pid);
        remove_file_said(&resume, self.info.direction);
    }
}

/// Removes a bridge file; a failure other than "not there" is said on stderr (a file left
/// behind is shown by `shmlog stat` and removed by `shmlog clean`).
fn remove_file_said(path: &Path, direction: BridgeDirection) {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            eprintln!("shmlog bridge {}: cannot remove {}: {e}", direction.as_str(), path.display())
        }
        _ => {}
    }
}

/// Creates the resume file (position -1: nothing carried yet) and maps it.
pub(crate) fn map_resume(path: &Path) -> std::io::Result<ResumeMap> {
    let mut initial = [0u8; bridge_status::RESUME_LEN];
    initial[..8].copy_from_slice(&(-1i64).to_le_bytes());
    std::fs::write(path, initial)?;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
    ResumeMap::map(&file, bridge_status::RESUME_LEN)
}

/// A failed file operation of the bridge's, as the local stream's error type says one.
fn io_error(op: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Io { op, path: path.to_path_buf(), source }
}

/// Runs a bridge's duty cycle until `stop` is set, idling with `idle` when it found no work.
pub(crate) fn run_until(stop: &AtomicBool, idle: &mut impl IdleStrategy, mut duty: impl FnMut() -> usize) {
    while !stop.load(Ordering::Relaxed) {
        idle.idle(duty());
    }
}
