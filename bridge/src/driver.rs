//! The Java Aeron media driver (`io.aeron:aeron-all`, fetched by `scripts/fetch-aeron-driver.sh`)
//! run as a child of the bridge: started with its own directory, restarted by the bridge if it
//! dies, stopped with SIGTERM and its directory removed when the bridge lets go of it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The driver version the fetch script brings (the newest `aeron-all` on Maven Central).
pub const AERON_VERSION: &str = "1.51.0";

/// How to run an embedded driver.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// The `aeron-all` jar. `None` (the default): the first file of
    /// [`DriverConfig::jar_search_list`], looked up each time the driver starts; if there is
    /// none, the start fails with an error that names every place it looked.
    pub jar: Option<PathBuf>,
    /// The driver's directory (`aeron.dir`): emptied on start, removed on stop.
    pub dir: PathBuf,
    /// Term length of network publications and images (`aeron.term.buffer.length`).
    pub term_length: usize,
    /// Further `-D` system properties, e.g. `("aeron.mtu.length", "1408")`.
    pub properties: Vec<(String, String)>,
}

impl DriverConfig {
    /// A driver in `dir` with the defaults above: SHARED threading with the backoff idle
    /// strategy (one driver thread that sleeps when idle), 1 MiB terms, the jar searched for.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DriverConfig { jar: None, dir: dir.into(), term_length: 1 << 20, properties: Vec::new() }
    }

    /// Where a driver without a [`DriverConfig::jar`] looks for `aeron-all-1.51.0.jar`, in
    /// order, every entry absolute (none depends on the current directory):
    ///
    /// - `$AERON_JAR`, alone, if it is set (a relative value is taken from the current
    ///   directory when the bridge starts);
    /// - beside the running executable, then in `aeron/` one and two directories above it:
    ///   where `scripts/fetch-aeron-driver.sh` puts the jar (`target/aeron/`) for the binaries,
    ///   tests and benches built in this repository's `target/`;
    /// - `target/aeron/` of the workspace this crate was built in (its source's parent);
    /// - `/opt/aeron/`, then `/usr/share/java/`.
    pub fn jar_search_list() -> Vec<PathBuf> {
        search_list(std::env::var_os("AERON_JAR"), std::env::current_exe().ok())
    }

    /// The jar this driver runs: [`DriverConfig::jar`] if set, else the first file of
    /// [`DriverConfig::jar_search_list`].
    pub fn find_jar(&self) -> Result<PathBuf, String> {
        let env_set = std::env::var_os("AERON_JAR").is_some();
        find_jar(self.jar.as_deref(), &Self::jar_search_list(), env_set)
    }
}

fn jar_name() -> String {
    format!("aeron-all-{AERON_VERSION}.jar")
}

/// The search list for `$AERON_JAR` = `env` and the executable `exe`.
fn search_list(env: Option<OsString>, exe: Option<PathBuf>) -> Vec<PathBuf> {
    if let Some(jar) = env {
        let jar = PathBuf::from(jar);
        return vec![std::path::absolute(&jar).unwrap_or(jar)];
    }
    let name = jar_name();
    let mut list = Vec::new();
    if let Some(dir) = exe.as_deref().and_then(Path::parent) {
        list.push(dir.join(&name));
        for up in dir.ancestors().skip(1).take(2) {
            list.push(up.join("aeron").join(&name));
        }
    }
    // This crate is `bridge/` of its workspace, whose `target/` the fetch script fills.
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    list.push(here.parent().unwrap_or(here).join("target/aeron").join(&name));
    list.push(Path::new("/opt/aeron").join(&name));
    list.push(Path::new("/usr/share/java").join(&name));
    let mut seen = std::collections::HashSet::new();
    list.retain(|p| seen.insert(p.clone()));
    list
}

/// `explicit` if it is a file, else the first file of `candidates`; the error names the jar
/// given, or every candidate (`env_set`: the list is `$AERON_JAR` alone).
fn find_jar(explicit: Option<&Path>, candidates: &[PathBuf], env_set: bool) -> Result<PathBuf, String> {
    const HOW: &str =
        "run scripts/fetch-aeron-driver.sh, set AERON_JAR, or give the jar (--driver-jar, DriverConfig::jar)";
    if let Some(jar) = explicit {
        return match jar.is_file() {
            true => Ok(jar.to_path_buf()),
            false => Err(format!("no Aeron driver jar at {} (the jar given; {HOW})", jar.display())),
        };
    }
    if let Some(jar) = candidates.iter().find(|p| p.is_file()) {
        return Ok(jar.clone());
    }
    if env_set {
        let jar = candidates.first().map_or_else(String::new, |p| p.display().to_string());
        return Err(format!("no Aeron driver jar at {jar} (AERON_JAR; {HOW})"));
    }
    let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
    Err(format!("no Aeron driver jar {} found; looked at: {} ({HOW})", jar_name(), looked.join(", ")))
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
        let jar = config.find_jar()?;
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
            .arg(&jar)
            .arg("io.aeron.driver.MediaDriver")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        crate::sys::die_with_parent(&mut cmd);
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
        crate::sys::terminate(self.child.id());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && self.is_running() {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Cleanup of a driver that no message depends on any more: what fails here (it
        // exited meanwhile, its directory is gone) changes nothing.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jar_search_list_is_absolute_and_follows_the_executable() {
        let exe = PathBuf::from("/build/repo/target/release/deps/bridge-1234");
        let list = search_list(None, Some(exe));
        let name = jar_name();
        assert_eq!(
            list[..3],
            [
                PathBuf::from("/build/repo/target/release/deps").join(&name),
                PathBuf::from("/build/repo/target/release/aeron").join(&name),
                PathBuf::from("/build/repo/target/aeron").join(&name),
            ]
        );
        assert!(list.iter().all(|p| p.is_absolute()), "{list:?}");
        assert!(list.contains(&PathBuf::from("/opt/aeron").join(&name)));
        // $AERON_JAR is the only place looked at, made absolute.
        let list = search_list(Some("jars/a.jar".into()), Some(PathBuf::from("/x/y")));
        assert_eq!(list, [std::env::current_dir().unwrap().join("jars/a.jar")]);
    }

    #[test]
    fn a_missing_jar_is_reported_with_every_place_looked_at() {
        let dir = crate::testing::TempDir::new("bridge-jar");
        let (a, b) = (dir.path().join("a.jar"), dir.path().join("b.jar"));
        let err = find_jar(None, &[a.clone(), b.clone()], false).unwrap_err();
        assert!(err.starts_with(&format!("no Aeron driver jar {} found; looked at: ", jar_name())), "{err}");
        assert!(err.contains(&format!("{}, {}", a.display(), b.display())), "{err}");
        assert!(err.contains("scripts/fetch-aeron-driver.sh") && err.contains("AERON_JAR"), "{err}");
        let err = find_jar(None, std::slice::from_ref(&a), true).unwrap_err();
        assert!(err.starts_with(&format!("no Aeron driver jar at {} (AERON_JAR", a.display())), "{err}");
        let err = find_jar(Some(&a), std::slice::from_ref(&b), false).unwrap_err();
        assert!(err.starts_with(&format!("no Aeron driver jar at {} (the jar given", a.display())), "{err}");
        // The first one there is taken; a jar given is taken over the list.
        std::fs::write(&b, b"jar").unwrap();
        assert_eq!(find_jar(None, &[a.clone(), b.clone()], false), Ok(b.clone()));
        std::fs::write(&a, b"jar").unwrap();
        assert_eq!(find_jar(Some(&a), std::slice::from_ref(&b), false), Ok(a));
    }
}
