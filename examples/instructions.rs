//! A fixed amount of hot-path work for instruction counting under callgrind
//! (`scripts/instructions.sh`): one thread, 32-byte messages, `offer` then `poll`.
//!
//! `instructions <mode> <count>`: `alternating` (one offer, one poll, `count` times) or
//! `batched` (1000 offers, then polls until all are read, `count / 1000` times). Run it twice with
//! different counts and divide the difference of the instruction totals by the difference of the
//! counts: setup (file creation, page faults, warm-up) cancels out.

use shmlog::{Header, Publication, Subscription};

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "alternating".into());
    let count: u64 = args.next().and_then(|c| c.parse().ok()).unwrap_or(1_000_000);
    let dir = std::env::temp_dir().join(format!("shmlog-instructions-{}", std::process::id()));
    let mut p = Publication::builder("i").dir(&dir).term_length(1 << 20).create().expect("publication");
    let mut s = Subscription::builder("i").dir(&dir).open().expect("subscription");
    let msg = [7u8; 32];
    let mut seen = 0u64;
    let mut handler = |m: &[u8], _: &Header| seen += m.len() as u64;
    match mode.as_str() {
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
    let _ = std::fs::remove_dir_all(&dir);
}
