//! A real Aeron media driver (the Java one, `io.aeron:aeron-all` fetched into target/aeron by
//! `scripts/fetch-aeron-driver.sh`) run as a child process for the duration of a bench.
//!
//! Settings follow the comparison recipe: SHARED threading with the `backoff` idle strategy
//! (busy-spinning driver threads would fight the two bench threads for 2 cores), an IPC term
//! of the requested length, its own `aeron.dir` under /dev/shm deleted on start and shutdown.
//! Stopped with SIGTERM (a SIGINT can be ignored when the bench runs as a background job), and
//! PDEATHSIG makes it die with the bench even if the bench is killed.



use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const AERON_VERSION: &str = "1.51.0";

/// A running driver; stopped and its directory removed on drop.
#[derive(Debug)]
pub struct MediaDriver {
    child: Child,
    pub dir: PathBuf,
    pub log: PathBuf,
}

/// Where the driver jar is expected (`AERON_JAR` overrides).
pub fn jar_path() -> PathBuf {
    std::env::var_os("AERON_JAR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../target/aeron/aeron-all-{AERON_VERSION}.jar"))
    })
}

fn java_works() -> bool {
    Command::new("java")
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

impl MediaDriver {
    /// Starts the driver with an IPC term of `ipc_term` bytes. `Err` says why it cannot run
    /// (no Java, no jar, did not start): callers print it as a SKIPPED line.
    pub fn start(ipc_term: usize) -> Result<MediaDriver, String> {
        let jar = jar_path();
        if !jar.is_file() {
            return Err(format!("no driver jar at {} (run scripts/fetch-aeron-driver.sh)", jar.display()));
        }
        if !java_works() {
            return Err("no working `java` on PATH (Java 17+ needed for the Aeron driver)".into());
        }
        let pid = std::process::id();
        let dir = PathBuf::from(if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" })
            .join(format!("aeron-bench-{pid}"));
        let log = std::env::temp_dir().join(format!("aeron-bench-driver-{pid}.log"));
        let out = std::fs::File::create(&log).map_err(|e| format!("driver log {}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new("java");
        cmd.args([
            "--add-exports",
            "java.base/jdk.internal.misc=ALL-UNNAMED",
            "--add-opens",
            "java.base/jdk.internal.misc=ALL-UNNAMED",
            "--add-opens",
            "java.base/java.util.zip=ALL-UNNAMED",
            "-Xms256m",
            "-Xmx256m",
        ])
        .arg(format!("-Daeron.dir={}", dir.display()))
        .arg("-Daeron.threading.mode=SHARED")
        .arg("-Daeron.shared.idle.strategy=backoff")
        .arg(format!("-Daeron.ipc.term.buffer.length={ipc_term}"))
        .arg("-Daeron.dir.delete.on.start=true")
        .arg("-Daeron.dir.delete.on.shutdown=true")
        .arg("-cp")
        .arg(&jar)
        .arg("io.aeron.driver.MediaDriver")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
        {
            use std::os::unix::process::CommandExt;
            let all: Vec<usize> = (0..crate::support::cores()).collect();
            // SAFETY: prctl, sched_* are async-signal-safe; `all` was allocated before the fork.
            unsafe {
                cmd.pre_exec(move || {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    // Under `chrt -f`, the driver must be able to preempt the spinning threads.
                    crate::support::above_fifo_spinners();
                    // Not the bench thread's CPU 0 only: the driver may run on any CPU.
                    crate::support::set_affinity(&all);
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().map_err(|e| format!("cannot start java: {e}"))?;
        let mut driver = MediaDriver { child, dir, log };
        let cnc = driver.dir.join("cnc.dat");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if std::fs::metadata(&cnc).map(|m| m.len() > 0).unwrap_or(false) {
                // Let the driver finish writing the CnC header.
                std::thread::sleep(Duration::from_millis(200));
                return Ok(driver);
            }
            if let Ok(Some(status)) = driver.child.try_wait() {
                let tail = std::fs::read_to_string(&driver.log).unwrap_or_default();
                let tail: String = tail.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                return Err(format!("the driver exited at start ({status}): {tail}"));
            }
            if Instant::now() > deadline {
                return Err("the driver wrote no cnc.dat within 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn dir_string(&self) -> String {
        self.dir.display().to_string()
    }
}

impl Drop for MediaDriver {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.log);
    }
}
