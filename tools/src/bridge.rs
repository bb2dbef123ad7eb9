//! `shmlog bridge out|in`: carry a stream to another host over Aeron UDP, until Ctrl-C.

use clap::{Args, ValueEnum};
use shmlog_bridge::{BackPressure, BridgeBuilder, BridgeInfo, Driver, DriverConfig};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub(crate) struct BridgeArgs {
    #[command(flatten)]
    dir: crate::DirArg,
    /// The local stream.
    #[arg(long)]
    stream: String,
    /// The Aeron channel: aeron:udp?endpoint=HOST:PORT (unicast; the in side's address), or
    /// aeron:udp?endpoint=GROUP:PORT|interface=ADDR (multicast).
    #[arg(long)]
    channel: String,
    /// The Aeron stream id on the channel.
    #[arg(long, value_name = "ID", default_value_t = 1001)]
    aeron_stream_id: i32,
    /// Start a media driver for this bridge (and restart it if it dies) in DIR, instead of
    /// attaching to a running one.
    #[arg(long, value_name = "DIR")]
    embedded_driver: Option<PathBuf>,
    /// The running driver's directory [default: /dev/shm/aeron-$USER].
    #[arg(long, value_name = "DIR", conflicts_with = "embedded_driver")]
    aeron_dir: Option<PathBuf>,
    /// The embedded driver's jar [default: $AERON_JAR, else aeron-all-1.51.0.jar searched for
    /// beside this executable, in target/aeron/ of its build, /opt/aeron/, /usr/share/java/].
    #[arg(long, value_name = "JAR")]
    driver_jar: Option<PathBuf>,
    /// The embedded driver's term length for network streams.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    driver_term_length: usize,
    /// The embedded driver's MTU (1408 suits a 1500-byte Ethernet path).
    #[arg(long, value_name = "BYTES", default_value_t = 1408)]
    mtu: usize,
    /// When the next hop cannot take a message: hold (lossless, back pressure reaches the
    /// publisher) or drop (and report the loss by position).
    #[arg(long, value_enum, default_value = "hold")]
    on_back_pressure: Policy,
    /// In bridges: write as one of several writers of the stream (a concurrent publication).
    #[arg(long)]
    concurrent: bool,
    /// In bridges: the term length of the local stream's sessions it creates [default: 16 MiB].
    /// Its largest message (a term / 8) is the most the bridge carries into it.
    #[arg(long, value_name = "BYTES")]
    term_length: Option<usize>,
    /// Seconds to wait for the driver (and, going out, for the stream's publisher).
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    connect_timeout: f64,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum Policy {
    Hold,
    Drop,
}

fn builder(a: &BridgeArgs) -> Result<BridgeBuilder, String> {
    if !(a.connect_timeout > 0.0 && a.connect_timeout.is_finite()) {
        return Err("--connect-timeout must be a positive number of seconds".into());
    }
    let driver = match &a.embedded_driver {
        Some(dir) => {
            let mut cfg = DriverConfig::new(dir);
            cfg.jar =
                a.driver_jar.as_ref().map(|jar| std::path::absolute(jar).unwrap_or_else(|_| jar.clone()));
            cfg.term_length = a.driver_term_length;
            cfg.properties.push(("aeron.mtu.length".into(), a.mtu.to_string()));
            Driver::Embedded(cfg)
        }
        None => Driver::Attach(a.aeron_dir.clone().unwrap_or_else(shmlog_bridge::default_aeron_dir)),
    };
    let b = BridgeBuilder::new(a.stream.clone())
        .dir(a.dir.path())
        .channel(a.channel.clone())
        .aeron_stream_id(a.aeron_stream_id)
        .driver(driver)
        .back_pressure(match a.on_back_pressure {
            Policy::Hold => BackPressure::Hold,
            Policy::Drop => BackPressure::Drop,
        })
        .concurrent(a.concurrent)
        .connect_timeout(Duration::from_secs_f64(a.connect_timeout));
    Ok(match a.term_length {
        Some(t) => b.term_length(t),
        None => b,
    })
}

pub(crate) fn out(a: &BridgeArgs) -> Result<(), String> {
    let mut bridge = builder(a)?.open_out().map_err(|e| e.to_string())?;
    eprintln!("shmlog bridge out: {} -> {} stream {} (Ctrl-C stops)", a.stream, a.channel, a.aeron_stream_id);
    bridge.run(crate::sys::stop_flag());
    eprintln!("{}", summary(bridge.status()));
    Ok(())
}

pub(crate) fn inbound(a: &BridgeArgs) -> Result<(), String> {
    let mut bridge = builder(a)?.open_in().map_err(|e| e.to_string())?;
    eprintln!("shmlog bridge in: {} stream {} -> {} (Ctrl-C stops)", a.channel, a.aeron_stream_id, a.stream);
    bridge.run(crate::sys::stop_flag());
    eprintln!("{}", summary(bridge.status()));
    Ok(())
}

fn summary(b: &BridgeInfo) -> String {
    let mut s = format!(
        "shmlog bridge {}: {} messages, {} bytes, {} back-pressure waits, {} dropped, {} reconnects",
        b.direction.as_str(),
        b.messages,
        b.bytes,
        b.back_pressure,
        b.dropped,
        b.reconnects
    );
    if b.bad_positions > 0 {
        s.push_str(&format!(
            "\n  {} messages without a valid source position (no gap measured to them)",
            b.bad_positions
        ));
    }
    if b.duplicates > 0 {
        s.push_str(&format!("\n  {} messages received again and not carried twice", b.duplicates));
    }
    if b.source_losses > 0 {
        s.push_str(&format!("\n  {} losses before the bridge", b.source_losses));
    }
    for l in &b.losses {
        let n = l.messages.map_or_else(|| "unknown".into(), |n| n.to_string());
        s.push_str(&format!("\n  lost [{}, {}): {n} messages ({})", l.from, l.to, l.cause));
    }
    s
}
