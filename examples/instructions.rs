//! A fixed amount of hot-path work for instruction counting under callgrind
//! (`scripts/instructions.sh`): one thread, 32-byte messages, `offer` then `poll`.
//!
//! `instructions <mode> <count> [exclusive|concurrent]`: `alternating` (one offer, one poll,
//! `count` times) or `batched` (1000 offers, then polls until all are read, `count / 1000`
//! times), through a `Publication` (default) or a `ConcurrentPublication`, either one through
//! `Publish`. Run it twice with
//! different counts and divide the difference of the instruction totals by the difference of the
//! counts: setup (file creation, page faults, warm-up) cancels out.

use shmlog::{Header, Publication, Publish, Subscription};
use std::path::Path;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "alternating".into());
    let count: u64 = args.next().and_then(|c| c.parse().ok()).unwrap_or(1_000_000);
    let kind = args.next().unwrap_or_else(|| "exclusive".into());
    let dir = std::env::temp_dir().join(format!("shmlog-instructions-{}", std::process::id()));
    let b = Publication::builder("i").dir(&dir).term_length(1 << 20);
    // Either writer through the one writer interface, monomorphised: what `Sender` does.
    match kind.as_str() {
        "exclusive" => run(b.create().expect("publication"), &mode, count, &dir),
        "concurrent" => run(b.open_concurrent().expect("concurrent publication"), &mode, count, &dir),
        other => panic!("unknown writer kind {other}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn run<P: Publish>(mut p: P, mode: &str, count: u64, dir: &Path) {
    let mut s = Subscription::builder("i").dir(dir).open().expect("subscription");
    let msg = [7u8; 32];
    let mut seen = 0u64;
    let mut handler = |m: &[u8], _: &Header| seen += m.len() as u64;
    match mode {
        "alternating" => {
            for _ in 0..count {
                p.offer(&msg).expect("offer");
                s.poll(&mut handler, 10);
            }
        }
        "batched" => {
            for _ in 0..count / 1000 {
                for _ in 0..1000 {
                    p.offer(&msg).expect("offer");
                }
                let mut got = 0;
                while got < 1000 {
                    got += s.poll(&mut handler, 256);
                }
            }
        }
        other => panic!("unknown mode {other}"),
    }
    let delivered = if mode == "batched" { count / 1000 * 1000 } else { count };
    assert_eq!(seen, delivered * msg.len() as u64, "every message delivered once");
    drop((s, p));
}
