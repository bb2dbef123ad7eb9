//! The Python roles (`ledger/python/role.py`): a writer and readers of the Python package's every
//! receive shape, speaking the same event lines as the Rust roles. A spawn with `exec=python` in
//! its settings runs that script under the Python that has the package, found once per process:
//!
//! 1. `$SHMLOG_LEDGER_PYTHON`, if set: an interpreter that imports `shmlog` by itself;
//! 2. the extension built beside this binary (`cargo build --release -p shmlog-python`, as
//!    `.ci/ledger.sh` and `.ci/python.sh` do: `target/<profile>/lib_shmlog.so`), put together
//!    with the package's Python part (`python/python/shmlog`) into
//!    `target/<profile>/ledger-python/` and imported from there (`PYTHONPATH`): the bindings of
//!    this tree, not of whatever wheel was installed last;
//! 3. the venv `.ci/python.sh` installs the wheel into (`target/python-venv`);
//! 4. `python3` on `PATH`.
//!
//! The interpreter of 2 is the venv's if there is one, else `python3`. It counts as there if
//! `import shmlog` works. When it does not, the random driver draws Rust roles only, and says so.

use crate::plan::{Action, Scenario};
use crate::prng::{mix, Rng};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The value of `exec=` that names the bundled Python role.
pub const EXEC: &str = "python";

/// The role script.
pub fn script() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/python/role.py"))
}

/// The pure-Python body module (no `shmlog` needed), for the body test.
pub fn body_script() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/python/ledger_body.py"))
}

/// The interpreter the Python roles run under, and the directory it imports the package from
/// when that is the extension built beside this binary (see the module's docs).
pub fn interpreter() -> (PathBuf, Option<PathBuf>) {
    static FOUND: OnceLock<(PathBuf, Option<PathBuf>)> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            if let Some(p) = std::env::var_os("SHMLOG_LEDGER_PYTHON").filter(|p| !p.is_empty()) {
                return (PathBuf::from(p), None);
            }
            let profile = std::env::current_exe().ok().and_then(|exe| Some(exe.parent()?.to_path_buf()));
            let venv = profile
                .as_ref()
                .and_then(|p| Some(p.parent()?.join("python-venv/bin/python")))
                .filter(|v| v.is_file());
            let python = venv.clone().unwrap_or_else(|| PathBuf::from("python3"));
            match profile.as_deref().map(package_beside) {
                Some(Ok(dir)) => (python, Some(dir)),
                _ => (python, None),
            }
        })
        .clone()
}

/// Puts the extension built in `profile` (`lib_shmlog.so`) together with the package's Python
/// files into `profile/ledger-python/shmlog/`; `Err` if there is no extension. Each file is
/// written under a name of its own and renamed, so that controllers running at once (the
/// scenario tests) never see half a file.
fn package_beside(profile: &std::path::Path) -> std::io::Result<PathBuf> {
    let lib = profile.join("lib_shmlog.so");
    let sources = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../python/python/shmlog"));
    let root = profile.join("ledger-python");
    let dir = root.join("shmlog");
    std::fs::create_dir_all(&dir)?;
    let mut files = vec![(lib, dir.join("_shmlog.abi3.so"))];
    for entry in std::fs::read_dir(&sources)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "py") {
            files.push((path.clone(), dir.join(path.file_name().unwrap_or_default())));
        }
    }
    for (from, to) in files {
        let partial = to.with_extension(format!("part{}", std::process::id()));
        std::fs::copy(&from, &partial)?;
        std::fs::rename(&partial, &to)?;
    }
    Ok(root)
}

/// `Ok(what)` if the Python roles can run here (`what`: the interpreter and the package's
/// version), `Err(why not)` otherwise. Asked once per process.
pub fn available() -> &'static Result<String, String> {
    static AVAILABLE: OnceLock<Result<String, String>> = OnceLock::new();
    AVAILABLE.get_or_init(|| {
        let (python, path) = interpreter();
        if !script().is_file() {
            return Err(format!("no role script at {}", script().display()));
        }
        let out = with_path(Command::new(&python), path.as_deref())
            .args(["-c", "import shmlog, sys; print(shmlog.__version__, sys.version.split()[0])"])
            .stdin(Stdio::null())
            .output();
        let from = path.map_or(String::new(), |p| format!(", the extension built in {}", p.display()));
        match out {
            Ok(o) if o.status.success() => Ok(format!(
                "{} (shmlog {}{from})",
                python.display(),
                String::from_utf8_lossy(&o.stdout).trim().replacen(' ', ", Python ", 1)
            )),
            Ok(o) => Err(format!(
                "`{} -c \"import shmlog\"` failed: {}",
                python.display(),
                String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("").trim()
            )),
            Err(e) => Err(format!("cannot run {}: {e}", python.display())),
        }
    })
}

/// The command that starts the Python role (the controller adds `role <kind> <settings>`).
pub fn command() -> Command {
    let (python, path) = interpreter();
    let mut c = with_path(Command::new(python), path.as_deref());
    // -u: nothing of Python's own is buffered (its stderr goes to the run's stderr/ file).
    c.arg("-u").arg(script());
    c
}

/// `c` importing from `dir` first, if any.
fn with_path(mut c: Command, dir: Option<&std::path::Path>) -> Command {
    if let Some(dir) = dir {
        let mut path = std::ffi::OsString::from(dir);
        if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
            path.push(":");
            path.push(old);
        }
        c.env("PYTHONPATH", path);
    }
    c
}

/// The Python readers' receive shapes (`role.py`), besides `py-wait_any` (a reader of two
/// streams takes that one).
pub const READER_SHAPES: [&str; 7] =
    ["py-recv", "py-iter", "py-many", "py-poll", "py-async", "py-aiter", "py-many-async"];

/// Chance that a reader (a writer of an exclusive stream) of a drawn scenario is a Python one.
const READERS: f64 = 0.3;
const WRITERS: f64 = 0.4;

/// Makes some of a drawn scenario's processes Python ones, all incarnations of a process alike:
/// readers (not replay-merge readers or recorders, which the package does not have as roles)
/// with a Python receive shape, and writers of exclusive streams (the package has no
/// `ConcurrentPublication`). At least one of each when the scenario has one that can be. Draws
/// from a generator of its own, so the Rust part of a seed's scenario is the same with or without
/// Python. A stream with a Python writer gets the MTU the package's `Publication` uses (it sets
/// none: 64 KiB or the largest message if smaller), so that the oracle frames its messages right;
/// the Python package's subscriptions have no `later_sessions` (the default, `Earliest`).
pub fn pythonize(sc: &mut Scenario) {
    let mut rng = Rng::new(mix(sc.seed ^ 0x5059_5448_4f4e));
    // Logical processes in the order they first start, with their role and settings.
    let mut actors: Vec<(String, String, String)> = Vec::new();
    for (_, a) in &sc.timeline {
        if let Action::Spawn { proc, role, settings } = a {
            let name = proc.split('.').next().unwrap_or(proc).to_string();
            if !actors.iter().any(|(n, ..)| *n == name) {
                actors.push((name, role.clone(), settings.clone()));
            }
        }
    }
    let eligible = |role: &str, settings: &str| {
        let kv = crate::roles::Settings::parse(settings);
        match role {
            "reader" => kv.str("shape") != "merge",
            "writer" => sc.stream(kv.str("stream")).is_some_and(|s| !s.concurrent),
            _ => false,
        }
    };
    let mut chosen: Vec<&str> = Vec::new();
    for (name, role, settings) in &actors {
        let p = if role == "writer" { WRITERS } else { READERS };
        if rng.chance(p) && eligible(role, settings) {
            chosen.push(name);
        }
    }
    for want in ["reader", "writer"] {
        let has = |chosen: &[&str]| actors.iter().any(|(n, r, _)| r == want && chosen.contains(&n.as_str()));
        if !has(&chosen) {
            let candidates: Vec<&(String, String, String)> =
                actors.iter().filter(|(_, r, s)| r == want && eligible(r, s)).collect();
            if !candidates.is_empty() {
                chosen.push(&rng.pick(&candidates).0);
            }
        }
    }
    let mut shapes = rng.below(READER_SHAPES.len() as u64) as usize;
    let mut new_settings: Vec<(String, String)> = Vec::new();
    let mut mtu_of: Vec<String> = Vec::new();
    for (name, role, settings) in actors.iter().filter(|(n, ..)| chosen.contains(&n.as_str())) {
        let kv = crate::roles::Settings::parse(settings);
        let s = if role == "reader" {
            let shape = if kv.str("shape") == "wait_any" {
                "py-wait_any"
            } else {
                shapes += 1;
                READER_SHAPES[shapes % READER_SHAPES.len()]
            };
            settings
                .split(',')
                .map(|kv| match kv.split_once('=') {
                    Some(("shape", _)) => format!("shape={shape}"),
                    Some(("later", _)) => "later=earliest".to_string(),
                    _ => kv.to_string(),
                })
                .collect::<Vec<_>>()
                .join(",")
        } else {
            mtu_of.push(kv.str("stream").to_string());
            settings.clone()
        };
        new_settings.push((name.clone(), format!("{s},exec={EXEC}")));
    }
    for (_, a) in sc.timeline.iter_mut() {
        if let Action::Spawn { proc, settings, .. } = a {
            let name = proc.split('.').next().unwrap_or(proc);
            if let Some((_, s)) = new_settings.iter().find(|(n, _)| n == name) {
                *settings = s.clone();
            }
        }
    }
    for st in sc.streams.iter_mut().filter(|s| mtu_of.contains(&s.name)) {
        st.mtu = (64 << 10).min(st.term / 8);
    }
    persistent(sc);
}

/// The Python persistent readers' receive shapes (`role.py`'s `persistent`).
pub const PERSISTENT_SHAPES: [&str; 3] = ["py-recv", "py-iter", "py-poll"];

/// Some incarnations of persistent readers run in Python (a generator of their own: the rest of
/// the scenario stays as drawn), each with a Python receive shape: a name's incarnations then
/// hand its stored position from one language to the other.
fn persistent(sc: &mut Scenario) {
    let mut rng = Rng::new(mix(sc.seed ^ 0x5059_5045_5253));
    for (_, a) in sc.timeline.iter_mut() {
        if let Action::Spawn { role, settings, .. } = a {
            if role == "persistent" && rng.chance(0.4) {
                let shape = *rng.pick(&PERSISTENT_SHAPES);
                let kept: Vec<&str> = settings.split(',').filter(|kv| !kv.starts_with("shape=")).collect();
                *settings = format!("{},shape={shape},exec={EXEC}", kept.join(","));
            }
        }
    }
}

/// How many of a scenario's processes are Python ones.
pub fn spawns(sc: &Scenario) -> usize {
    let python = |settings: &str| settings.split(',').any(|kv| kv == "exec=python");
    sc.timeline
        .iter()
        .filter(|(_, a)| matches!(a, Action::Spawn { settings, .. } if python(settings)))
        .count()
}

/// Whether a scenario has a Python role.
pub fn needed_by(sc: &Scenario) -> bool {
    spawns(sc) > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::{self, Id};
    use std::io::Write as _;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// Runs `ledger_body.py` (plain `python3`: no package needed) over `input`, one answer per line.
    fn python_bodies(input: &str) -> Option<Vec<String>> {
        let child = Command::new("python3")
            .arg(body_script())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            eprintln!("SKIPPED: no python3 to run {}", body_script().display());
            return None;
        };
        // Fed from a thread: the answers come while the questions go (both more than a pipe holds).
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_string();
        let feeder = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let out = child.wait_with_output().unwrap();
        feeder.join().unwrap().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Some(String::from_utf8(out.stdout).unwrap().lines().map(String::from).collect())
    }

    #[test]
    fn python_and_rust_bodies_are_the_same() {
        let ids = [
            Id { writer: 0, inc: 1, session: 7, seq: 0 },
            Id { writer: 3, inc: 9, session: -77, seq: 12345 },
            Id { writer: u32::MAX, inc: u32::MAX, session: i32::MIN, seq: u64::MAX },
            Id { writer: 12, inc: 400, session: 1_209_157_195, seq: 1 << 40 },
        ];
        let lens = [0, 39, 40, 41, 47, 48, 49, 333, 5000, 70_001];
        let mut fills = String::new();
        let mut rust = Vec::new();
        let mut m = Vec::new();
        for id in ids {
            for len in lens {
                fills.push_str(&format!("fill {} {} {} {} {len}\n", id.writer, id.inc, id.session, id.seq));
                body::fill(id, len, &mut m);
                rust.push((id, m.clone()));
            }
        }
        // Rust's messages checked by Python, and damaged ones refused for the same reason.
        let mut checks = String::new();
        let mut expected = Vec::new();
        for (id, m) in &rust {
            checks.push_str(&format!("check {}\n", hex(m)));
            expected.push(format!("ok {} {} {} {}", id.writer, id.inc, id.session, id.seq));
            for at in [0, 5, 13, 20, 25, 29, 35, 41, m.len() - 1] {
                if at < m.len() {
                    let mut bad = m.clone();
                    bad[at] ^= 0x10;
                    checks.push_str(&format!("check {}\n", hex(&bad)));
                    expected.push(format!("err {}", body::check(&bad).unwrap_err()));
                }
            }
            checks.push_str(&format!("check {}\n", hex(&m[..m.len() - 1])));
            expected.push(format!("err {}", body::check(&m[..m.len() - 1]).unwrap_err()));
        }
        let Some(answers) = python_bodies(&format!("{fills}{checks}")) else { return };
        let (made, checked) = answers.split_at(rust.len());
        for ((id, m), py) in rust.iter().zip(made) {
            assert_eq!(*py, hex(m), "{id:?}, {} bytes: Python made another message", m.len());
            assert_eq!(body::check(&unhex(py)), Ok(*id), "Rust refuses Python's message");
        }
        assert_eq!(checked, &expected[..], "Python's checks differ from Rust's");
    }

    #[test]
    fn the_ci_python_seed_keeps_its_rust_part_and_the_scenario_has_every_python_shape() {
        let mut text = String::new();
        for seed in [crate::cli::CI_PYTHON_SEED] {
            let rust = crate::plan::generate(seed, crate::cli::CI_SECONDS);
            let mut sc = rust.clone();
            pythonize(&mut sc);
            assert!(needed_by(&sc) && !needed_by(&rust));
            assert_eq!(sc.timeline.len(), rust.timeline.len());
            for ((t, a), (u, b)) in sc.timeline.iter().zip(&rust.timeline) {
                assert_eq!(t, u);
                match (a, b) {
                    (Action::Spawn { settings: s, role, .. }, Action::Spawn { settings: r, .. })
                        if s.contains("exec=python") =>
                    {
                        let kv = crate::roles::Settings::parse(s);
                        let st = sc.stream(kv.str("stream")).unwrap();
                        if role == "writer" {
                            assert!(!st.concurrent, "a Python writer of a concurrent stream: {s}");
                            assert_eq!(st.mtu, (64 << 10).min(st.term / 8), "{s}");
                        } else {
                            assert!(
                                kv.str("shape").starts_with("py-") && kv.str("later") == "earliest",
                                "{s}"
                            );
                            assert!(!r.contains("shape=merge"));
                        }
                    }
                    _ => assert_eq!(a, b, "seed {seed:#x}: a Rust action changed"),
                }
            }
            text.push_str(&sc.to_text());
        }
        assert!(text.lines().any(|l| l.contains(" writer ") && l.contains("exec=python")));
        let shapes = READER_SHAPES.iter().filter(|s| text.contains(&format!("shape={s},"))).count();
        assert!(shapes >= 5, "the CI Python seed has {shapes} Python shapes");
        let kept = include_str!("../scenarios/python.txt");
        for shape in READER_SHAPES.iter().chain(&["py-wait_any"]) {
            assert!(kept.contains(&format!("shape={shape},")), "scenarios/python.txt has no {shape}");
        }
    }
}
