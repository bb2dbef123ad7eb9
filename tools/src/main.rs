//! `shmlog`: look into stream directories, clean up after crashes, and measure latency.
//!
//! The crate `shmlog-tools` (`tools/` of the workspace): `cargo run --release -p shmlog-tools --
//! --help`; with feature `bridge` also `shmlog bridge` (compiles the Aeron client):
//! `cargo run --release -p shmlog-tools --features bridge -- bridge --help`.

#![warn(unreachable_pub)]

#[cfg(feature = "bridge")]
mod bridge;
mod clean;
mod histogram;
mod journal;
mod latency;
mod metrics;
mod openmetrics;
mod serve;
mod stat;
mod sys;

use clap::{Args, Parser, Subcommand};
use latency::IdleKind;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "shmlog", version, about = "Inspect, clean and measure shmlog shared-memory streams")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show every stream of a directory: publisher, position, limit, counters, readers and lag.
    Stat {
        /// Directory of the streams (repeatable, except with --json) [default: $SHMLOG_DIR, else
        /// /dev/shm/shmlog-<uid>]
        #[arg(long, value_name = "DIR")]
        dir: Vec<PathBuf>,
        /// Print again every SECS seconds, with rates (MB/s, back-pressure events/s), until Ctrl-C.
        #[arg(long, value_name = "SECS")]
        watch: Option<f64>,
        /// Print JSON (one object per snapshot, one per line with --watch).
        #[arg(long)]
        json: bool,
        /// Print every figure once in the OpenMetrics text format (what Prometheus scrapes).
        #[arg(long, conflicts_with_all = ["json", "watch"])]
        openmetrics: bool,
        /// Show this journal directory too: size, oldest and newest positions, retention,
        /// durable readers (repeatable).
        #[arg(long, value_name = "DIR")]
        journal: Vec<PathBuf>,
    },
    /// Remove files of streams whose publisher is dead and that no live reader uses.
    Clean {
        #[command(flatten)]
        dir: DirArg,
        /// Only say what would be removed.
        #[arg(long)]
        dry_run: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Measure one-way latency between a publisher and a subscriber.
    #[command(subcommand)]
    Latency(LatencyCommand),
    /// Record a stream into segment files of a journal directory on disk, until Ctrl-C.
    Record(journal::RecordArgs),
    /// Replay a recording to stdout (`position length hex` per message) or into a new stream.
    Replay(journal::ReplayArgs),
    /// Carry a stream to or from another host over Aeron UDP (feature `bridge`), until Ctrl-C.
    #[cfg(feature = "bridge")]
    #[command(subcommand)]
    Bridge(BridgeCommand),
    /// Purge, detach, attach, truncate or delete a journal's recordings, or set its retention.
    #[command(subcommand)]
    Journal(journal::JournalCommand),
    /// Serve every `stat` figure to Prometheus: OpenMetrics over HTTP at /metrics, until Ctrl-C.
    ServeMetrics(serve::ServeArgs),
    /// List the recordings of a journal directory: streams, positions, sizes, rates, states.
    Recordings {
        /// Journal directory.
        #[arg(long, value_name = "DIR")]
        journal: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[cfg(feature = "bridge")]
#[derive(Subcommand, Debug)]
enum BridgeCommand {
    /// Read a local stream and offer every message to an Aeron UDP channel.
    Out(bridge::BridgeArgs),
    /// Subscribe to an Aeron UDP channel and publish every message into a local stream.
    In(bridge::BridgeArgs),
}

#[derive(Args, Debug)]
struct DirArg {
    /// Directory of the streams [default: $SHMLOG_DIR, else /dev/shm/shmlog-<uid>]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// The directories given, or the default one.
fn dirs_or_default(dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    if dirs.is_empty() {
        vec![shmlog::default_dir()]
    } else {
        dirs
    }
}

impl DirArg {
    fn path(&self) -> PathBuf {
        self.dir.clone().unwrap_or_else(shmlog::default_dir)
    }
}

#[derive(Args, Debug)]
struct Common {
    #[command(flatten)]
    dir: DirArg,
    /// What a loop does when it found no work.
    #[arg(long, value_enum, default_value = "spin")]
    idle: IdleKind,
}

#[derive(Args, Debug)]
struct Output {
    /// Leave out the first N messages from the statistics (page faults, caches, CPU frequency).
    #[arg(long, value_name = "N", default_value_t = 0)]
    warmup: usize,
    /// Write HdrHistogram's percentile distribution (values in µs) to FILE.
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,
    /// Write a plot of latency by percentile as a standalone SVG to FILE.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum LatencyCommand {
    /// Publish timestamped messages at a fixed rate (start `latency sub` too, in another process).
    Pub {
        #[command(flatten)]
        common: Common,
        /// Stream name.
        #[arg(long, default_value = "shmlog-latency")]
        stream: String,
        /// Messages per second.
        #[arg(long, default_value_t = 10_000.0)]
        rate: f64,
        /// Seconds to publish for.
        #[arg(long, value_name = "SECS", default_value_t = 10.0)]
        duration: f64,
        /// Message size in bytes (at least 16: timestamp and sequence number).
        #[arg(long, value_name = "BYTES", default_value_t = 32)]
        size: usize,
        /// Term length of the log in bytes (power of two, 64 KiB to 1 GiB).
        #[arg(long, value_name = "BYTES", default_value_t = shmlog::DEFAULT_TERM_LENGTH)]
        term_length: usize,
        /// Seconds to wait for a subscriber before giving up.
        #[arg(long, value_name = "SECS", default_value_t = 30.0)]
        wait: f64,
    },
    /// Receive timestamped messages and print latency statistics.
    Sub {
        #[command(flatten)]
        common: Common,
        /// Stream name.
        #[arg(long, default_value = "shmlog-latency")]
        stream: String,
        /// Stop after N messages (0: at the publisher's end of stream).
        #[arg(long, value_name = "N", default_value_t = 0)]
        count: u64,
        /// Stop after SECS seconds without a message (also while waiting for the publisher).
        #[arg(long, value_name = "SECS", default_value_t = 30.0)]
        timeout: f64,
        #[command(flatten)]
        output: Output,
    },
    /// Publisher and subscriber in this process on two threads; offers as fast as flow control
    /// allows.
    Burst {
        #[command(flatten)]
        common: Common,
        /// Stream name [default: shmlog-burst-<pid>].
        #[arg(long)]
        stream: Option<String>,
        /// Messages to send.
        #[arg(long, value_name = "N", default_value_t = 100_000)]
        count: u64,
        /// Message size in bytes (at least 16).
        #[arg(long, value_name = "BYTES", default_value_t = 32)]
        size: usize,
        /// Term length of the log in bytes.
        #[arg(long, value_name = "BYTES", default_value_t = shmlog::DEFAULT_TERM_LENGTH)]
        term_length: usize,
        #[command(flatten)]
        output: Output,
    },
}

fn run(cli: Cli) -> Result<(), String> {
    sys::install_stop_handler();
    sys::default_sigpipe();
    match cli.command {
        Command::Stat { dir, watch, json, openmetrics, journal } => {
            if watch.is_some_and(|w| !(w > 0.0 && w.is_finite())) {
                return Err("--watch must be a positive number of seconds".into());
            }
            let format = match (json, openmetrics) {
                (true, _) => stat::Format::Json,
                (_, true) => stat::Format::OpenMetrics,
                _ => stat::Format::Text,
            };
            stat::run(&dirs_or_default(dir), watch, format, &journal)
        }
        Command::ServeMetrics(args) => serve::run(&args),
        Command::Clean { dir, dry_run, json } => {
            clean::run(&dir.path(), dry_run, json).map_err(|e| e.to_string())
        }
        #[cfg(feature = "bridge")]
        Command::Bridge(BridgeCommand::Out(args)) => bridge::out(&args),
        #[cfg(feature = "bridge")]
        Command::Bridge(BridgeCommand::In(args)) => bridge::inbound(&args),
        Command::Record(args) => journal::record(&args),
        Command::Journal(cmd) => journal::journal_command(&cmd),
        Command::Replay(args) => journal::replay(&args),
        Command::Recordings { journal, json } => {
            journal::recordings(&journal, json).map_err(|e| e.to_string())
        }
        Command::Latency(cmd) => {
            let result = match cmd {
                LatencyCommand::Pub { common, stream, rate, duration, size, term_length, wait } => {
                    latency::run_pub(&latency::PubArgs {
                        dir: common.dir.path(),
                        stream,
                        rate,
                        duration,
                        size,
                        term_length,
                        wait,
                        idle: common.idle,
                    })
                }
                LatencyCommand::Sub { common, stream, count, timeout, output } => {
                    latency::run_sub(&latency::SubArgs {
                        dir: common.dir.path(),
                        stream,
                        count,
                        timeout,
                        warmup: output.warmup,
                        idle: common.idle,
                        hgrm: output.hgrm,
                        svg: output.svg,
                    })
                }
                LatencyCommand::Burst { common, stream, count, size, term_length, output } => {
                    latency::run_burst(&latency::BurstArgs {
                        dir: common.dir.path(),
                        stream,
                        count,
                        size,
                        term_length,
                        warmup: output.warmup,
                        idle: common.idle,
                        hgrm: output.hgrm,
                        svg: output.svg,
                    })
                }
            };
            result.map_err(|e| e.to_string())
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shmlog: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_the_documented_forms() {
        let cli =
            Cli::try_parse_from(["shmlog", "stat", "--dir", "/tmp/x", "--watch", "2", "--json"]).unwrap();
        assert!(matches!(cli.command, Command::Stat { watch: Some(w), json: true, .. } if w == 2.0));
        let cli = Cli::try_parse_from([
            "shmlog",
            "latency",
            "pub",
            "--rate",
            "1000",
            "--duration",
            "0.5",
            "--size",
            "64",
            "--idle",
            "backoff",
        ])
        .unwrap();
        assert!(matches!(cli.command, Command::Latency(LatencyCommand::Pub { size: 64, .. })));
        let cli = Cli::try_parse_from([
            "shmlog",
            "latency",
            "sub",
            "--count",
            "5",
            "--timeout",
            "3",
            "--hgrm",
            "h",
            "--svg",
            "s",
        ])
        .unwrap();
        assert!(matches!(cli.command, Command::Latency(LatencyCommand::Sub { count: 5, .. })));
        assert!(Cli::try_parse_from(["shmlog", "latency", "burst", "--idle", "nope"]).is_err());
        let cli =
            Cli::try_parse_from(["shmlog", "record", "s", "--journal", "/j", "--fsync", "250"]).unwrap();
        assert!(
            matches!(&cli.command, Command::Record(a) if a.fsync == shmlog::journal::Fsync::Every(std::time::Duration::from_millis(250)))
        );
        assert!(Cli::try_parse_from(["shmlog", "record", "s", "--journal", "/j", "--fsync", "0"]).is_err());
        let cli = Cli::try_parse_from(["shmlog", "replay", "--journal", "/j", "3", "--from", "64"]).unwrap();
        assert!(matches!(&cli.command, Command::Replay(a) if a.id == 3 && a.from == Some(64)));
    }
}
