//! An async subscriber under tokio: the `AsyncReceiver` stream yields typed messages while the
//! runtime's threads stay free (the process's one waiter thread sleeps on the doorbell).
//!
//! ```text
//! cargo run --release --features async --example async_tokio
//! ```

use futures_core::Stream;
use shmlog::{AsyncReceiver, PodCodec, Publication, Receiver, Sender, Subscription};
use std::pin::Pin;
use std::time::{Duration, Instant};

/// A price update: plain old data, sent as its own bytes.
type Tick = [f64; 2];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("shmlog-async-{}", std::process::id()));
    let publication = Publication::builder("ticks").dir(&dir).create()?;
    let subscription = Subscription::builder("ticks").dir(&dir).open()?;
    let mut ticks = AsyncReceiver::new(Receiver::<Tick, PodCodec>::new(subscription, PodCodec))?;

    // A publisher thread: 1 000 ticks, one per millisecond, each stamped with its send time.
    let epoch = Instant::now();
    let sender = std::thread::spawn(move || {
        let mut tx = Sender::new(publication, PodCodec);
        for i in 0..1000 {
            std::thread::sleep(Duration::from_millis(1));
            let sent = epoch.elapsed().as_secs_f64();
            tx.send_timeout(&[100.0 + i as f64 * 0.01, sent], Duration::from_secs(1)).expect("send");
        }
        // Dropping the sender closes the stream: the async loop below ends.
    });

    let mut latencies = Vec::new();
    while let Some(tick) = std::future::poll_fn(|cx| Pin::new(&mut ticks).poll_next(cx)).await {
        let [_price, sent] = tick?;
        latencies.push((epoch.elapsed().as_secs_f64() - sent) * 1e6);
    }
    sender.join().expect("sender");
    latencies.sort_by(|a, b| a.total_cmp(b));
    let pct = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "{} ticks received; one-way latency p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        latencies.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
