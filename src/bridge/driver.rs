//! The Java Aeron media driver (`io.aeron:aeron-all`, fetched by `scripts/fetch-aeron-driver.sh`)
//! run as a child of the bridge: started with its own directory, restarted by the bridge if it
//! dies, stopped with SIGTERM and its directory removed when the bridge lets go of it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The driver version the fetch script brings (the newest `aeron-all` on Maven Central).
pub const AERON_VERSION: &str = "1.51.0";

/// How to run an embedded driver.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// The `aeron-all` jar. Default: `$AERON_JAR`, else `target/aeron/aeron-all-1.51.0.jar`
    /// under the current directory (where the fetch script puts it).
    pub jar: PathBuf,
    /// The driver's directory (`aeron.dir`): emptied on start, removed on stop.
    pub dir: PathBuf,
    /// Term length of network publications and images (`aeron.term.buffer.length`).
    pub term_length: usize,
    /// Further `-D` system properties, e.g. `("aeron.mtu.length", "1408")`.
    pub properties: Vec<(String, String)>,
}

impl DriverConfig {
    /// A driver in `dir` with the defaults above: SHARED threading with the backoff idle
    /// strategy (one driver thread that sleeps when idle), 1 MiB terms.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let jar = std::env::var_os("AERON_JAR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(format!("target/aeron/aeron-all-{AERON_VERSION}.jar")));
        DriverConfig { jar, dir: dir.into(), term_length: 1 << 20, properties: Vec::new() }
    }
}

/// A running media driver, stopped (and its directory removed) on drop.
#[derive(Debug)]
pub struct MediaDriver {
    child: Child,
    config: DriverConfig,
    log: PathBuf,
}

impl MediaDriver {
    /// Starts the driver and waits (up to 30 s) until it has written its CnC file.
    pub fn start(config: &DriverConfig) -> Result<MediaDriver, String> {
        if !config.jar.is_file() {
            return Err(format!(
                "no Aeron driver jar at {} (run scripts/fetch-aeron-driver.sh, or set AERON_JAR)",
                config.jar.display()
            ));
        }
        let log = config.dir.with_extension("driver.log");
        let out = std::fs::File::create(&log).map_err(|e| format!("driver log {}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(java());
        cmd.args([
            "--add-exports",
            "java.base/jdk.internal.misc=ALL-UNNAMED",
            "--add-opens",
            "java.base/jdk.internal.misc=ALL-UNNAMED",
            "--add-opens",
            "java.base/java.util.zip=ALL-UNNAMED",
            "-Xms128m",
            "-Xmx128m",
        ])
        .arg(format!("-Daeron.dir={}", config.dir.display()))
        .arg("-Daeron.threading.mode=SHARED")
        .arg("-Daeron.shared.idle.strategy=backoff")
        .arg(format!("-Daeron.term.buffer.length={}", config.term_length))
        .arg("-Daeron.dir.delete.on.start=true")
        .arg("-Daeron.dir.delete.on.shutdown=true");
        for (k, v) in &config.properties {
            cmd.arg(format!("-D{k}={v}"));
        }
        cmd.arg("-cp")
            .arg(&config.jar)
            .arg("io.aeron.driver.MediaDriver")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        crate::sys::process::die_with_parent(&mut cmd);
        let child = cmd.spawn().map_err(|e| format!("cannot start {}: {e}", java().display()))?;
        let mut driver = MediaDriver { child, config: config.clone(), log };
        driver.wait_started()?;
        Ok(driver)
    }

    fn wait_started(&mut self) -> Result<(), String> {
        let cnc = self.config.dir.join("cnc.dat");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if std::fs::metadata(&cnc).is_ok_and(|m| m.len() > 0) {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let text = std::fs::read_to_string(&self.log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(5).collect();
                return Err(format!("the Aeron driver exited at start ({status}): {}", tail.join(" | ")));
            }
            if Instant::now() > deadline {
                return Err("the Aeron driver wrote no cnc.dat within 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The driver's directory, for clients.
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    /// The driver's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the driver process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Starts a new driver with the same settings if this one has exited; true if it did.
    pub fn restart_if_exited(&mut self) -> Result<bool, String> {
        if self.is_running() {
            return Ok(false);
        }
        // The old child is reaped; the new one takes its place (and its directory and log).
        let mut fresh = MediaDriver::start(&self.config)?;
        std::mem::swap(&mut self.child, &mut fresh.child);
        // `fresh` now holds the reaped child: dropping it must neither signal a pid that may
        // have been reused nor remove the directory the new driver uses.
        let _ = std::mem::ManuallyDrop::new(fresh);
        Ok(true)
    }
}

impl Drop for MediaDriver {
    fn drop(&mut self) {
        crate::sys::process::signal(self.child.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && self.is_running() {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.config.dir);
        let _ = std::fs::remove_file(&self.log);
    }
}

/// `$JAVA_HOME/bin/java` if set, else `java` from PATH.
fn java() -> PathBuf {
    std::env::var_os("JAVA_HOME")
        .map(|h| PathBuf::from(h).join("bin/java"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("java"))
}
