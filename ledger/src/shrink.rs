//! Shrinking a failing scenario: drop chunks of its timeline (halves, then quarters, ... then
//! single actions) and keep each cut after which the same rule still fails; then cut the run's
//! length to a little past its last action. A failure that needs timing luck may not survive a
//! cut: each try is one run, so a flaky failure shrinks less, never wrongly.

use crate::controller::{self, Options};
use crate::plan::Scenario;

/// Whether `sc` still breaks `rule` (a rule id, or a group such as `R8.`).
fn fails(sc: &Scenario, rule: &str) -> bool {
    match controller::run(sc, &Options::default()) {
        Ok(o) => {
            let broke = o.report.rules().iter().any(|r| crate::cli::matches(r, rule));
            controller::remove(&o);
            broke
        }
        Err(_) => false,
    }
}

pub fn main(file: &str, rule: &str, tries: usize) -> i32 {
    let mut sc =
        match std::fs::read_to_string(file).map_err(|e| e.to_string()).and_then(|t| Scenario::parse(&t)) {
            Ok(sc) => sc,
            Err(e) => {
                eprintln!("{file}: {e}");
                return 2;
            }
        };
    if !fails(&sc, rule) {
        eprintln!("shrink: {file} does not fail {rule} (now); nothing to shrink");
        return 1;
    }
    let mut runs = 1;
    let mut chunk = sc.timeline.len().div_ceil(2);
    while chunk >= 1 && runs < tries {
        let mut at = 0;
        while at < sc.timeline.len() && runs < tries {
            let mut cut = sc.clone();
            cut.timeline.drain(at..(at + chunk).min(cut.timeline.len()));
            runs += 1;
            if fails(&cut, rule) {
                eprintln!("shrink: {} actions left", cut.timeline.len());
                sc = cut;
            } else {
                at += chunk;
            }
        }
        if chunk == 1 {
            break;
        }
        chunk = chunk.div_ceil(2);
    }
    let last = sc.timeline.last().map_or(0, |(t, _)| *t) as f64 / 1000.0;
    let mut short = sc.clone();
    short.seconds = (last + 2.0).min(sc.seconds);
    if runs < tries && short.seconds < sc.seconds && fails(&short, rule) {
        sc = short;
    }
    print!("{}", sc.to_text());
    eprintln!("shrink: {} actions, {} s, after {runs} runs", sc.timeline.len(), sc.seconds);
    0
}
