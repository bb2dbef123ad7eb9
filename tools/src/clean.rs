//! `shmlog clean`: what crashed processes left behind, removed by the inspection API
//! (`shmlog::inspect::clean` for the streams' files, `shmlog_bridge::status::clean` for the
//! bridges'), and what it did printed for people or as JSON.

use serde_json::{json, Value};
use shmlog::inspect;
use shmlog_bridge::status;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// What `shmlog clean` did: the core's report on the streams' files and the bridges' files,
/// one row (path, why) each.
#[derive(Debug, Default)]
pub(crate) struct Cleaned {
    pub dry_run: bool,
    pub removed: Vec<(PathBuf, String)>,
    pub kept: Vec<(PathBuf, String)>,
}

/// `inspect::clean` for the streams' files, then `status::clean` for the bridges' (which the
/// core lists as not its own: those rows give way to the bridge's).
pub(crate) fn clean_dir(dir: &Path, dry_run: bool) -> Result<Cleaned, shmlog::Error> {
    let report = inspect::clean(dir, dry_run)?;
    let bridges = status::clean(dir, dry_run).map_err(|source| shmlog::Error::Io {
        op: "read directory",
        path: dir.to_path_buf(),
        source,
    })?;
    let bridge_file = |path: &Path| {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        status::parse_file_name(name).or_else(|| status::parse_resume_name(name)).is_some()
    };
    let row = |e: &inspect::CleanEntry| (e.path.clone(), e.reason.to_string());
    let mut out = Cleaned {
        dry_run,
        removed: report.removed.iter().map(row).collect(),
        kept: report
            .kept
            .iter()
            .filter(|e| !(e.reason == inspect::CleanReason::NotOurs && bridge_file(&e.path)))
            .map(row)
            .collect(),
    };
    for b in bridges {
        let list = if b.removed { &mut out.removed } else { &mut out.kept };
        list.push((b.path.clone(), b.to_string()));
    }
    Ok(out)
}

/// `shmlog clean`.
pub(crate) fn run(dir: &Path, dry_run: bool, as_json: bool) -> Result<(), shmlog::Error> {
    let report = clean_dir(dir, dry_run)?;
    if as_json {
        println!("{}", clean_json(&report));
    } else {
        print!("{}", clean_text(&report));
    }
    Ok(())
}

pub(crate) fn clean_text(report: &Cleaned) -> String {
    let mut s = String::new();
    let verb = if report.dry_run { "would remove" } else { "removed" };
    for (path, why) in &report.removed {
        let _ = writeln!(s, "{verb:<12} {}: {why}", path.display());
    }
    for (path, why) in &report.kept {
        let _ = writeln!(s, "{:<12} {}: {why}", "kept", path.display());
    }
    let n = report.removed.len();
    let _ = writeln!(
        s,
        "{n} file{} {}, {} kept",
        if n == 1 { "" } else { "s" },
        if report.dry_run { "would be removed (dry run)" } else { "removed" },
        report.kept.len()
    );
    s
}

fn clean_json(report: &Cleaned) -> String {
    let entries = |list: &[(PathBuf, String)]| -> Vec<Value> {
        list.iter().map(|(path, why)| json!({ "path": path.display().to_string(), "reason": why })).collect()
    };
    json!({ "dry_run": report.dry_run, "removed": entries(&report.removed), "kept": entries(&report.kept) })
        .to_string()
}
