//! The command line: `run` one scenario (a seed's, or a file's), `ci` (fixed seeds plus one
//! random seed within a time budget), `check` a kept run again, and `role` (what the
//! controller starts).

use crate::controller::{self, Options, Outcome};
use crate::plan::{generate, parse_u64, Scenario};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: shmlog-ledger run [--seed S] [--seconds N] [--scenario FILE] [--only RULE,...] [--keep] [-v] [--no-python]
       shmlog-ledger ci [--budget SECONDS | --minutes N] [--strict] [--no-python]
       shmlog-ledger plan --seed S [--seconds N] [--no-python]
       shmlog-ledger shrink --scenario FILE --rule RULE [--tries N]
       shmlog-ledger check RUN_DIR
       shmlog-ledger role KIND SETTINGS

  --only R5.closed,R8.  the run fails only if one of these rules fails (`R8.`: any R8 rule):
                        a regression test of one defect ignores the others
  --no-python           draw Rust roles only, even where the Python package is installed
                        (a seed draws Python roles too where `import shmlog` works)
  exit status of run:   0 pass, 1 a rule failed, 2 bad arguments or setup, 3 skipped (the
                        scenario has Python roles and the Python package is not there)";

/// `run`'s exit status when the scenario has Python roles that cannot run here.
pub const SKIPPED: i32 = 3;

/// `rule` is `pattern`, or `pattern` ends in `.` and names its group.
pub fn matches(rule: &str, pattern: &str) -> bool {
    rule == pattern || (pattern.ends_with('.') && rule.starts_with(pattern))
}

/// Rules that fail on today's code, each with the fix it waits for. `ci` reports their
/// failures without failing; remove a line when its fix lands (then its failures fail CI).
pub const KNOWN: &str = include_str!("../known-failures.txt");

/// Seeds `ci` always runs (each for [`CI_SECONDS`]): together they have every receive shape,
/// both kinds of writer, claims aborted and held, long stops, a corrupted log, tethered and
/// untethered recorders and readers, replay-merge, every `JoinAt` and `copy_payloads` (the
/// test below keeps it so when the generator changes).
pub const CI_SEEDS: [u64; 4] = [0x5eed_006b, 0x5eed_0040, 0x5eed_0060, 0x5eed_007b];
pub const CI_SECONDS: f64 = 20.0;
/// The seed `ci` then runs with Python roles (where the package is built or installed): a Python
/// writer and five of the eight Python receive shapes; the random seeds after it draw Python
/// roles too, and `ledger/scenarios/python.txt` has every shape. The Rust seeds above run Rust
/// roles only, so that their coverage does not depend on the machine.
pub const CI_PYTHON_SEED: u64 = 0x5eed_00ac;

pub fn main(args: Vec<String>) -> i32 {
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let has = |name: &str| args.iter().any(|a| a == name);
    match args.get(1).map(String::as_str) {
        Some("role") if args.len() >= 4 => crate::roles::run(&args[2], &args[3]),
        Some("run") => {
            let seconds: f64 = arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(15.0);
            let sc = match arg("--scenario") {
                Some(file) => match std::fs::read_to_string(&file)
                    .map_err(|e| e.to_string())
                    .and_then(|t| Scenario::parse(&t))
                {
                    Ok(sc) => sc,
                    Err(e) => {
                        eprintln!("{file}: {e}");
                        return 2;
                    }
                },
                None => {
                    let seed = arg("--seed").and_then(|s| parse_u64(&s)).unwrap_or_else(random_seed);
                    draw(seed, seconds, python(has("--no-python"), false))
                }
            };
            if let (true, Err(why)) = (crate::python::needed_by(&sc), crate::python::available()) {
                println!(
                    "ledger: SKIPPED: seed {:#x} has Python roles, which cannot run here: {why}",
                    sc.seed
                );
                return SKIPPED;
            }
            let opts = Options { keep: has("--keep"), verbose: has("-v") };
            let only: Vec<String> =
                arg("--only").map(|o| o.split(',').map(String::from).collect()).unwrap_or_default();
            match one(&sc, &opts, arg("--scenario").is_some()) {
                Some(o) => {
                    let counted = o
                        .report
                        .rules()
                        .into_iter()
                        .filter(|r| only.is_empty() || only.iter().any(|p| matches(r, p)));
                    i32::from(counted.count() > 0)
                }
                None => 2,
            }
        }
        Some("plan") => {
            let seed = arg("--seed").and_then(|s| parse_u64(&s)).unwrap_or_else(random_seed);
            let seconds: f64 = arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(CI_SECONDS);
            print!("{}", draw(seed, seconds, python(has("--no-python"), true)).to_text());
            0
        }
        Some("shrink") => match (arg("--scenario"), arg("--rule")) {
            (Some(file), Some(rule)) => {
                crate::shrink::main(&file, &rule, arg("--tries").and_then(|t| t.parse().ok()).unwrap_or(40))
            }
            _ => {
                eprintln!("{USAGE}");
                2
            }
        },
        Some("ci") => {
            ci(arg("--budget"), arg("--minutes"), has("--strict"), python(has("--no-python"), false))
        }
        Some("check") if args.len() >= 3 => {
            let dir = PathBuf::from(&args[2]).join("events");
            match crate::oracle::read_dir(&dir) {
                Ok(files) => {
                    let report = crate::oracle::check(files);
                    print_failures(&report);
                    println!("{:?}", report.stats);
                    i32::from(!report.failures.is_empty())
                }
                Err(e) => {
                    eprintln!("{}: {e}", dir.display());
                    2
                }
            }
        }
        _ => {
            eprintln!("{USAGE}");
            2
        }
    }
}

/// Whether seeds draw Python roles: the package is installed (said either way, on stderr if
/// `quiet`, so that `plan`'s output stays a scenario) and not refused by `--no-python`.
fn python(refused: bool, quiet: bool) -> bool {
    let say = |line: String| if quiet { eprintln!("{line}") } else { println!("{line}") };
    if refused {
        say("ledger: Python roles: off (--no-python)".into());
        return false;
    }
    match crate::python::available() {
        Ok(what) => {
            say(format!("ledger: Python roles: yes, {what}"));
            true
        }
        Err(why) => {
            say(format!(
                "ledger: Python roles: NO, this run draws Rust roles only: {why} (`bash .ci/python.sh` installs the package; SHMLOG_LEDGER_PYTHON names another interpreter)"
            ));
            false
        }
    }
}

/// A seed's scenario, with Python roles if `python`, and persistent readers and retention unless it
/// is one of the fixed seeds (whose scenarios stay as chosen).
pub fn draw(seed: u64, seconds: f64, python: bool) -> Scenario {
    let mut sc = generate(seed, seconds);
    if !CI_SEEDS.contains(&seed) && seed != CI_PYTHON_SEED {
        crate::persistent_plan::add(&mut sc);
    }
    if python {
        crate::python::pythonize(&mut sc);
    }
    sc
}

fn random_seed() -> u64 {
    crate::prng::mix(crate::sys::mono_us() as u64 ^ u64::from(std::process::id()) << 40)
}

/// Runs one scenario and prints its summary (and its failures, with how to replay them).
pub fn one(sc: &Scenario, opts: &Options, from_file: bool) -> Option<Outcome> {
    let python = crate::python::needed_by(sc);
    if let (true, Err(why)) = (python, crate::python::available()) {
        println!("ledger: seed {:#x} has Python roles, which cannot run here: {why}", sc.seed);
        return None;
    }
    println!(
        "ledger: seed {:#x}, {} s, {} stream(s), {} actions",
        sc.seed,
        sc.seconds,
        sc.streams.len(),
        sc.timeline.len()
    );
    let o = match controller::run(sc, opts) {
        Ok(o) => o,
        Err(e) => {
            println!("ledger: the run could not be set up: {e}");
            return None;
        }
    };
    let s = o.report.stats;
    println!(
        "ledger: seed {:#x}: {} processes, {} sessions, {} attempts ({} committed), {} deliveries, {} losses, {} recordings, {} actions, {:.1} s: {}",
        sc.seed,
        s.processes,
        s.sessions,
        s.attempts,
        s.committed,
        s.deliveries,
        s.losses,
        s.recordings,
        o.actions,
        o.elapsed.as_secs_f64(),
        if o.report.failures.is_empty() { "pass".to_string() } else { format!("FAIL {:?}", o.report.rules()) }
    );
    if !o.report.failures.is_empty() {
        print_failures(&o.report);
        println!("ledger: run directory kept: {}", o.run_dir.display());
        if !from_file {
            println!(
                "ledger: replay: cargo run --release -p shmlog-ledger -- run --seed {:#x} --seconds {}{}",
                sc.seed,
                sc.seconds,
                if python {
                    " (with the Python extension built: cargo build --release -p shmlog-python)"
                } else {
                    " --no-python"
                }
            );
        }
        println!(
            "ledger: replay its actions: cargo run --release -p shmlog-ledger -- run --scenario {}",
            o.run_dir.join("scenario.log").display()
        );
    }
    Some(o)
}

fn print_failures(report: &crate::oracle::Report) {
    for f in &report.failures {
        println!("  {} {}", f.rule, f.what);
        for e in f.evidence.iter().take(12) {
            println!("      {e}");
        }
    }
}

/// The rule ids of [`KNOWN`] with what each waits for.
pub fn known() -> Vec<(String, String)> {
    KNOWN
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            l.split_once(char::is_whitespace).map(|(r, why)| (r.to_string(), why.trim().to_string()))
        })
        .collect()
}

/// CI: the fixed seeds, then random seeds while the budget lasts (at least one); a long mode
/// for before a release (`--minutes`). Known failures are reported, not failed, unless strict.
fn ci(budget: Option<String>, minutes: Option<String>, strict: bool, python: bool) -> i32 {
    let budget =
        match (budget.and_then(|b| b.parse::<f64>().ok()), minutes.and_then(|m| m.parse::<f64>().ok())) {
            (_, Some(m)) => Duration::from_secs_f64(m * 60.0),
            (Some(b), None) => Duration::from_secs_f64(b),
            (None, None) => Duration::from_secs(150),
        };
    let start = Instant::now();
    let known = known();
    let (mut runs, mut procs, mut ops, mut unexpected, mut expected) = (0, 0, 0, Vec::new(), Vec::new());
    let mut python_procs = 0;
    // (seed, with Python roles): the Rust seeds, the Python one, then random ones.
    let mut seeds: Vec<(u64, bool)> = CI_SEEDS.iter().map(|&s| (s, false)).collect();
    if python {
        seeds.push((CI_PYTHON_SEED, true));
    }
    let fixed = seeds.len();
    let mut i = 0;
    loop {
        let (seed, with_python) = match seeds.get(i) {
            Some(&s) => s,
            None if i == fixed || start.elapsed() + Duration::from_secs_f64(CI_SECONDS + 8.0) < budget => {
                let s = random_seed();
                println!("ledger: random seed {s:#x}");
                seeds.push((s, python));
                (s, python)
            }
            None => break,
        };
        i += 1;
        let sc = draw(seed, CI_SECONDS, with_python);
        let Some(o) = one(&sc, &Options::default(), false) else {
            unexpected.push((seed, "setup".to_string()));
            continue;
        };
        runs += 1;
        procs += o.report.stats.processes;
        python_procs += crate::python::spawns(&sc);
        ops += o.report.stats.attempts + o.report.stats.deliveries + o.actions;
        let mut kept = false;
        for rule in o.report.rules() {
            match known.iter().find(|(r, _)| *r == rule) {
                Some((_, why)) if !strict => expected.push((seed, rule.to_string(), why.clone())),
                _ => {
                    unexpected.push((seed, rule.to_string()));
                    kept = true;
                }
            }
        }
        if !kept {
            // Only known failures: the seed replays them; the disk is not the place to keep them.
            controller::remove(&o);
        }
    }
    println!(
        "ledger ci: {runs} runs ({} s each), {procs} processes ({python_procs} of them Python), {ops} operations (attempts, deliveries, actions), {:.0} s",
        CI_SECONDS,
        start.elapsed().as_secs_f64()
    );
    for (seed, rule, why) in &expected {
        println!("ledger ci: known failure {rule} (seed {seed:#x}): {why}");
    }
    for (seed, rule) in &unexpected {
        println!("ledger ci: FAILED {rule} (seed {seed:#x})");
    }
    i32::from(!unexpected.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ci_seeds_cover_every_role_shape_and_fault() {
        let text: String = CI_SEEDS.iter().map(|&s| generate(s, CI_SECONDS).to_text()).collect();
        for feature in [
            "shape=poll,",
            "shape=controlled",
            "shape=block,",
            "shape=blocking",
            "shape=recv",
            "shape=iter",
            "shape=async",
            "shape=stream",
            "shape=wait_any",
            "shape=merge",
            "concurrent=1",
            "claims=3",
            " stop ",
            " kill ",
            " close ",
            " clean",
            " corrupt ",
            "recorder stream=s0,tethered=1",
            ",tethered=0",
            "join=position",
            "join=latest",
            "join=slowest",
            "later=latest",
            "copy=1",
            "lapped=live",
        ] {
            assert!(text.contains(feature), "no CI seed has {feature:?}");
        }
        assert!(
            text.contains("recorder stream=s1,tethered=0")
                || text.contains("recorder stream=s0,tethered=0")
                || text.contains("recorder stream=s2,tethered=0")
        );
    }

    #[test]
    fn only_matches_a_rule_or_its_group() {
        assert!(matches("R5.closed", "R5.closed") && !matches("R5.closed-once", "R5.closed"));
        assert!(matches("R8.split", "R8.") && !matches("R7.heap", "R8."));
        assert!(known().iter().all(|(r, why)| r.starts_with('R') && r.contains('.') && !why.is_empty()));
    }
}
