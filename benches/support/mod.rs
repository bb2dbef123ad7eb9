//! Helpers shared by the benches (each bench includes this module with `mod support;`).
//!
//! - the machine banner every bench prints (cores, CPU model),
//! - pinning, unique stream directories under /dev/shm, a TSC clock calibrated to ns,
//! - percentiles of recorded samples,
//! - a small shared-memory counter file for cross-process benches,
//! - re-executing the running bench binary as a child process (`SHMLOG_BENCH_CHILD=<role>`),
//! - a JSON-lines result log (`target/bench-results/<bench>.jsonl`) that
//!   `scripts/bench-report.py` turns into the tables of docs/benchmarks.md.

#![allow(dead_code)]

pub mod bounds;
pub mod clock;
pub mod futex;
pub mod shm;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Number of online CPUs (of the machine, not of the calling thread's CPU mask).
pub fn cores() -> usize {
    // SAFETY: sysconf has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// CPU model name from /proc/cpuinfo.
pub fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Command-line view shared with criterion: `--test` mode and name filters.
#[derive(Debug, Clone)]
pub struct Args {
    /// `cargo bench -- --test`: run everything once, tiny sample counts.
    pub test: bool,
    filters: Vec<String>,
}

impl Args {
    pub fn parse() -> Self {
        // Criterion flags that take a value (so the value is not mistaken for a filter).
        const WITH_VALUE: &[&str] = &[
            "--warm-up-time",
            "--measurement-time",
            "--sample-size",
            "--save-baseline",
            "--baseline",
            "--baseline-lenient",
            "--load-baseline",
            "--output-format",
            "--profile-time",
            "--nresamples",
            "--noise-threshold",
            "--confidence-level",
            "--significance-level",
            "--plotting-backend",
            "--color",
            "-c",
            "-s",
            "-b",
        ];
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mut filters = Vec::new();
        let mut skip = false;
        for a in &args {
            if skip {
                skip = false;
                continue;
            }
            if WITH_VALUE.contains(&a.as_str()) {
                skip = true;
            } else if !a.starts_with('-') {
                filters.push(a.clone());
            }
        }
        Args { test: args.iter().any(|a| a == "--test"), filters }
    }

    /// `true` if the named measurement is selected (no filter, or a filter is a substring).
    pub fn wants(&self, name: &str) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|f| name.contains(f.as_str()))
    }

    /// `full` samples normally, `small` in test mode.
    pub fn n(&self, full: usize, small: usize) -> usize {
        if self.test {
            small
        } else {
            full
        }
    }
}

/// The 1-minute load average (other work on the machine skews spinning benches).
pub fn loadavg() -> f64 {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Criterion as every bench here configures it: warm-up and measurement times, then the command
/// line (filters, `--test`).
pub fn criterion(warm_up: Duration, measurement: Duration) -> criterion::Criterion {
    criterion::Criterion::default().warm_up_time(warm_up).measurement_time(measurement).configure_from_args()
}

/// Prints the banner every bench starts with and records it.
pub fn banner(bench: &str) {
    let line = format!(
        "[{bench}] running on {} core(s) ({}), load average {:.2}; spinning threads per measurement: at most 2",
        cores(),
        cpu_model(),
        loadavg()
    );
    eprintln!("{line}");
    record(bench, "machine", &[("cores", cores() as f64), ("loadavg", loadavg())], &[("cpu", &cpu_model())]);
}

/// Pins the calling thread to `cpu` (modulo the online CPUs). Best effort.
pub fn pin(cpu: usize) {
    let cpu = cpu % cores();
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write inside it; sched_setaffinity reads
    // exactly size_of::<cpu_set_t>() bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// If the calling thread runs under SCHED_FIFO (the bench was started with `chrt -f N`), moves
/// it one priority above that, so that a helper that sleeps most of the time (the Aeron
/// driver, a client conductor) still gets the CPU when it wakes instead of waiting behind the
/// spinning bench threads. A no-op otherwise. Async-signal-safe (usable in `pre_exec`).
pub fn above_fifo_spinners() {
    // SAFETY: plain syscalls on the calling thread with a valid sched_param.
    unsafe {
        if libc::sched_getscheduler(0) == libc::SCHED_FIFO {
            let mut p = libc::sched_param { sched_priority: 0 };
            if libc::sched_getparam(0, &mut p) == 0 {
                p.sched_priority += 1;
                libc::sched_setscheduler(0, libc::SCHED_FIFO, &p);
            }
        }
    }
}

pub fn set_affinity(cpus: &[usize]) {
    // SAFETY: as in `pin`; sched_setaffinity is async-signal-safe.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn current_affinity() -> Vec<usize> {
    // SAFETY: sched_getaffinity writes at most size_of::<cpu_set_t>() bytes into `set`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..cores()).collect();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// Spawns a thread that starts already pinned to `cpu`.
///
/// A new thread inherits its parent's CPU mask. Under SCHED_FIFO (`chrt -f`), a helper spawned
/// by a main thread pinned to CPU 0 would wait behind the spinning main thread forever before
/// it could pin itself elsewhere, so the parent briefly takes the helper's mask while spawning.
pub fn spawn_on<T: Send + 'static>(
    cpu: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let saved = current_affinity();
    set_affinity(&[cpu % cores()]);
    let h = std::thread::spawn(f);
    set_affinity(&saved);
    h
}

/// Lets the calling thread run on every CPU again.
pub fn unpin() {
    let all: Vec<usize> = (0..cores()).collect();
    set_affinity(&all);
}

#[path = "../../tests/it/support/dir.rs"]
mod dir;
#[allow(unused_imports)] // not every bench makes directories
pub use dir::ShmDir;

/// Percentiles of a sample set, in the samples' unit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pcts {
    pub n: usize,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Pcts {
    pub fn of(samples: &mut [f64]) -> Pcts {
        if samples.is_empty() {
            return Pcts::default();
        }
        samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let at = |q: f64| samples[(((samples.len() as f64) * q) as usize).min(samples.len() - 1)];
        Pcts {
            n: samples.len(),
            mean: samples.iter().sum::<f64>() / samples.len() as f64,
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
            max: samples[samples.len() - 1],
        }
    }

    pub fn line(&self) -> String {
        format!(
            "n={} p50={:.0} p90={:.0} p99={:.0} p99.9={:.0} max={:.0} mean={:.1}",
            self.n, self.p50, self.p90, self.p99, self.p999, self.max, self.mean
        )
    }

    /// Prints `[bench] name ns: ...` and records it.
    pub fn report(&self, bench: &str, name: &str) {
        eprintln!("[{bench}] {name} ns: {}", self.line());
        record(
            bench,
            name,
            &[
                ("n", self.n as f64),
                ("mean", self.mean),
                ("p50", self.p50),
                ("p90", self.p90),
                ("p99", self.p99),
                ("p999", self.p999),
                ("max", self.max),
            ],
            &[("unit", "ns")],
        );
    }
}

fn results_dir() -> PathBuf {
    std::env::var_os("SHMLOG_BENCH_RESULTS").map(PathBuf::from).unwrap_or_else(|| {
        // The workspace's target/ (the bridge's bench includes this file from bridge/).
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let root = here.ancestors().find(|p| p.join("Cargo.lock").is_file()).unwrap_or(here);
        root.join("target/bench-results")
    })
}

/// Appends one JSON line to `target/bench-results/<bench>.jsonl` (not in test mode).
pub fn record(bench: &str, name: &str, nums: &[(&str, f64)], strs: &[(&str, &str)]) {
    if std::env::args().any(|a| a == "--test") || std::env::var_os("SHMLOG_BENCH_CHILD").is_some() {
        return;
    }
    let dir = results_dir();
    if fs::create_dir_all(&dir).is_err() {
        return;
    }
    let mut line = format!(
        "{{\"bench\":\"{bench}\",\"name\":\"{name}\",\"cores\":{},\"load\":{:.2}",
        cores(),
        loadavg()
    );
    for (k, v) in nums {
        if v.is_finite() {
            line += &format!(",\"{k}\":{v}");
        }
    }
    for (k, v) in strs {
        line += &format!(",\"{k}\":\"{}\"", v.replace('\\', "\\\\").replace('"', "'"));
    }
    line += "}\n";
    if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(dir.join(format!("{bench}.jsonl"))) {
        let _ = f.write_all(line.as_bytes());
    }
}

/// Records a single figure (e.g. msgs/s) and prints it.
pub fn record_value(bench: &str, name: &str, value: f64, unit: &str) {
    eprintln!("[{bench}] {name}: {value:.3} {unit}");
    record(bench, name, &[("value", value)], &[("unit", unit)]);
}

/// A few `AtomicU64`s in a shared file, for counters a child process and its parent both see.
#[derive(Debug)]
pub struct SharedCounters {
    map: memmap2::MmapRaw,
    n: usize,
}

/// Counters sit 128 bytes apart (no false sharing).
const COUNTER_STRIDE: usize = 128;

impl SharedCounters {
    pub fn create(path: &Path, n: usize) -> Self {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .expect("counter file");
        f.set_len((n * COUNTER_STRIDE) as u64).expect("size counter file");
        Self::map(&f, n)
    }

    pub fn open(path: &Path, n: usize) -> Self {
        let f = OpenOptions::new().read(true).write(true).open(path).expect("open counter file");
        Self::map(&f, n)
    }

    fn map(f: &File, n: usize) -> Self {
        let map = memmap2::MmapRaw::map_raw(f).expect("map counter file");
        assert!(map.len() >= n * COUNTER_STRIDE);
        SharedCounters { map, n }
    }

    pub fn get(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.n);
        // SAFETY: the mapping is page-aligned and at least n*128 bytes long (checked at map), so
        // the pointer is in bounds and 8-aligned; it is only ever accessed atomically, by every
        // process that maps it; the reference borrows `self`, which keeps the mapping alive.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(i * COUNTER_STRIDE).cast()) }
    }
}

/// Spins (with the spin hint) until `f` is true or `timeout` passes; returns whether it became true.
pub fn spin_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    let mut i = 0u32;
    loop {
        if f() {
            return true;
        }
        i = i.wrapping_add(1);
        if i % 1024 == 0 && std::time::Instant::now() > deadline {
            return false;
        }
        std::hint::spin_loop();
    }
}

/// The role a re-executed bench binary was started for, if any.
pub fn child_role() -> Option<String> {
    std::env::var("SHMLOG_BENCH_CHILD").ok()
}

/// Starts this very bench binary again as a child with `SHMLOG_BENCH_CHILD=role` and extra
/// environment, pinned to CPU 1 from its first instruction. The child dies with the parent
/// (PDEATHSIG).
pub fn spawn_child(role: &str, env: &[(&str, String)]) -> ChildGuard {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().expect("current exe");
    let mut cmd = Command::new(exe);
    cmd.env("SHMLOG_BENCH_CHILD", role).stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        let cpu = 1 % cores();
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            set_affinity(&[cpu]);
            Ok(())
        });
    }
    ChildGuard(Some(cmd.spawn().expect("spawn child bench process")))
}

/// Kills and reaps the child on drop, unless it was waited for.
#[derive(Debug)]
pub struct ChildGuard(pub Option<Child>);

impl ChildGuard {
    /// Waits for the child to exit by itself (up to `timeout`), then kills it.
    pub fn finish(mut self, timeout: Duration) -> bool {
        let mut child = self.0.take().unwrap();
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Environment variable helper for children.
pub fn env_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child process needs {name}"))
}
