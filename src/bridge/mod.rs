//! Carry a stream to other hosts over Aeron's UDP transport (feature `bridge`).
//!
//! A [`BridgeOut`] is a reader of a local stream that offers every message to an Aeron UDP
//! publication (a unicast endpoint or a multicast group); a [`BridgeIn`] subscribes to that
//! channel on the far host and publishes every message into a local stream there, so readers on
//! both hosts use the plain shmlog API. The network part is Aeron's own: a real media driver
//! (the Java one, started by the bridge or already running) does Setup, Status Messages, NAKs and
//! retransmission; the bridge never invents a protocol.
//!
//! - **Boundaries and order** are kept: one shmlog message is one Aeron message, fragmented and
//!   reassembled by each side as needed.
//! - **Back pressure** passes through under [`BackPressure::Hold`] (the default): a slow or absent
//!   far side stops the out bridge, whose reader position then holds the local publisher within
//!   its window. Under [`BackPressure::Drop`] the bridge drops instead and records what it lost,
//!   by source position. Never silently.
//! - **Positions**: every Aeron frame carries, in its reserved value, the source-stream position
//!   where its message starts. The in bridge uses it to report gaps after a reconnection (the
//!   far bridge killed with messages in flight); a restarted out bridge resumes reading where
//!   its predecessor's resume file says it stopped.
//! - **Losses before the bridge**: what the out bridge's reader of the local stream reports it
//!   could not read ([`crate::Loss`]) goes into the out bridge's status and marks the next
//!   message on the wire, so the in bridge records it too: a loss is never a silent jump.
//! - **State** is published for `shmlog stat` in a status file beside the stream's log.
//! - **Failures**: the driver lost is reconnected (and an embedded one restarted); the far side
//!   gone is Aeron's "not connected", handled as back pressure; the local publisher restarting
//!   is followed to its new session.
//!
//! See `docs/bridge.md` for deployment across two hosts.

// Only flags between threads of this process (stop, driver lost): no protocol memory, nothing
// for the loom build to swap.
#![allow(clippy::disallowed_types)]

mod client;
mod driver;
pub(crate) mod inbound;
mod outbound;
pub(crate) mod wire;

pub use crate::api::bridge_status::{BridgeDirection, BridgeInfo, Loss, LossCause};
pub use driver::{DriverConfig, MediaDriver, AERON_VERSION};
pub use inbound::BridgeIn;
pub use outbound::BridgeOut;

use crate::api::bridge_status;
use crate::error::Error;
use crate::region::{MmapRegion, RegionMut};
use crate::IdleStrategy;
use client::Client;
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
    stream: String,
    dir: PathBuf,
    channel: String,
    aeron_stream_id: i32,
    driver: Driver,
    back_pressure: BackPressure,
    concurrent: bool,
    term_length: Option<usize>,
    connect_timeout: Duration,
    spin_before_sleep: Duration,
}

impl BridgeBuilder {
    /// A bridge for local stream `stream`, on `aeron:udp?endpoint=localhost:40123` stream id
    /// 1001 through a driver in the default Aeron directory.
    pub fn new(stream: impl Into<String>) -> Self {
        BridgeBuilder {
            stream: stream.into(),
            dir: crate::default_dir(),
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

    /// The directory of the local stream (default [`crate::default_dir`]).
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
    /// ([`crate::ConcurrentPublication`]), so several in bridges (or local writers) can feed it.
    pub fn concurrent(mut self, yes: bool) -> Self {
        self.concurrent = yes;
        self
    }

    /// In bridges only: the term length of the local stream's sessions the bridge creates
    /// (default [`crate::DEFAULT_TERM_LENGTH`]; see `PublicationBuilder::term_length`). Its
    /// largest message is the most the bridge carries into it: a longer one is dropped and
    /// reported. With [`BridgeBuilder::concurrent`], a log that exists keeps its creator's.
    pub fn term_length(mut self, bytes: usize) -> Self {
        self.term_length = Some(bytes);
        self
    }

    /// Out bridges only: how long [`BridgeOut::run`] polls the local stream before it sleeps on
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

    /// Starts a bridge from the local stream to the channel. The local stream must have a
    /// publisher (it is waited for up to the connect timeout).
    pub fn open_out(self) -> Result<BridgeOut, BridgeError> {
        BridgeOut::open(self)
    }

    /// Starts a bridge from the channel into the local stream, creating its publication.
    pub fn open_in(self) -> Result<BridgeIn, BridgeError> {
        BridgeIn::open(self)
    }

    fn validate(&self) -> Result<(), BridgeError> {
        crate::stream::name::validate(&self.stream)?;
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
            if pid.is_some_and(|p| !crate::sys::process::pid_alive(p)) {
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
struct Link {
    driver: Option<MediaDriver>,
    aeron_dir: PathBuf,
    client: Option<Client>,
    /// The channel and stream id of the bridge's publication or subscription.
    channel: String,
    aeron_stream_id: i32,
    timeout: Duration,
    next_attempt: Instant,
    /// When the caller's publication or subscription may be added (again).
    next_add: Instant,
}

impl Link {
    fn open(b: &BridgeBuilder) -> Result<Link, BridgeError> {
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
    fn tend_for(&mut self, now: Instant, status: &mut Status, on_lost: impl FnOnce(&Client)) {
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
    fn ensure<T>(
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
struct Status {
    info: BridgeInfo,
    dir: PathBuf,
    next_write: Instant,
    resume: ResumeFile,
    /// The last write of the status file failed (said once on stderr, until one succeeds).
    write_failing: bool,
    /// The files of dead predecessors whose resume position this bridge took over: removed
    /// once it has started (until then a successor can still take them over).
    adopted: Vec<PathBuf>,
}

/// The mapped resume file (`bridge_status::resume_path`): where the bridge stands, stored right
/// after each message it carries (a store, no system call), so a bridge killed at any point
/// leaves at most the message in hand unrecorded.
pub(crate) struct ResumeFile(Option<MmapRegion>);

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
            r.store_i64(8, session as u32 as i64, Ordering::Relaxed);
            r.store_i64(0, position, Ordering::Release);
        }
    }
}

impl Status {
    const EVERY: Duration = Duration::from_millis(100);

    /// Makes the stream's directory if this bridge is its first user, then creates and maps the
    /// resume file: without it a successor could not report what this bridge's death lost, so
    /// a failure is an error, not a bridge that runs without one.
    fn new(b: &BridgeBuilder, direction: BridgeDirection, aeron_dir: &Path) -> Result<Self, BridgeError> {
        crate::stream::dir::ensure(&b.dir, b.dir == crate::default_dir())?;
        let info = BridgeInfo::new(
            &b.stream,
            direction,
            &b.channel,
            b.aeron_stream_id,
            &aeron_dir.to_string_lossy(),
        );
        let path = bridge_status::resume_path(&b.dir, &b.stream, direction, info.pid);
        let resume = map_resume(&path).map_err(|e| Error::io("create the bridge's resume file", &path, e))?;
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
    fn find_predecessors(&mut self) -> Result<Option<(i64, i32)>, BridgeError> {
        let mut resume: Option<(i64, i32)> = None;
        let listing = |e| Error::io("list the stream directory", &self.dir, e);
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
    fn retire_predecessors(&mut self) {
        for path in std::mem::take(&mut self.adopted) {
            remove_file_said(&path, self.info.direction);
        }
    }

    /// The end of a duty cycle: the status file, if it is due.
    fn end_cycle(&mut self, now: Instant) {
        if now >= self.next_write {
            self.write(now);
        }
    }

    fn write(&mut self, now: Instant) {
        self.next_write = now + Self::EVERY;
        self.info.updated_ms = (crate::sys::clock::now_ns() / 1_000_000) as u64;
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
fn map_resume(path: &Path) -> std::io::Result<MmapRegion> {
    let mut initial = [0u8; bridge_status::RESUME_LEN];
    initial[..8].copy_from_slice(&(-1i64).to_le_bytes());
    std::fs::write(path, initial)?;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
    MmapRegion::map(&file, 0, bridge_status::RESUME_LEN)
}

/// Runs a bridge's duty cycle until `stop` is set, idling with `idle` when it found no work.
fn run_until(stop: &AtomicBool, idle: &mut impl IdleStrategy, mut duty: impl FnMut() -> usize) {
    while !stop.load(Ordering::Relaxed) {
        idle.idle(duty());
    }
}
