//! One thread: offer (or try_claim + commit, or offer_vectored of a 16-byte header and the
//! body) then poll it back, for payloads of 0, 32, 100, 256 bytes and 1, 4, 64 KiB: ns per
//! message and bytes/s. The poll hands the payload in place (no copy); the handler reads its
//! first and last byte. A 1 MiB term (3 MiB log); the 64 KiB figure is compared with memcpy of
//! 64 KiB into a buffer of the same 3 MiB footprint, measured in the same run.

mod support;

use criterion::{BenchmarkId, Criterion, Throughput};
use shmlog::{Publication, Subscription};
use std::hint::black_box;
use std::time::Duration;
use support::bounds::memcpy_rate;
use support::shm::pair;
use support::{Args, Pcts, ShmDir};

const B: &str = "offer_poll";
const TERM: usize = 1 << 20;
const SIZES: [usize; 7] = [0, 32, 100, 256, 1024, 4096, 65536];

#[inline(always)]
fn poll_one(s: &mut Subscription) -> usize {
    let mut got = 0;
    while got == 0 {
        got = s.poll(
            |p: &[u8], _: &shmlog::Header| {
                black_box((p.first(), p.last()));
            },
            usize::MAX,
        );
    }
    got
}

/// Polls until the subscription has everything up to `position` (fragmented messages).
#[inline(always)]
fn poll_to(s: &mut Subscription, position: i64) {
    while s.position() < position {
        poll_one(s);
    }
}

fn offer_poll(p: &mut Publication, s: &mut Subscription, msg: &[u8]) {
    let pos = p.offer(black_box(msg)).expect("offer");
    poll_to(s, pos);
}

fn claim_poll(p: &mut Publication, s: &mut Subscription, msg: &[u8]) {
    let mut claim = p.try_claim(msg.len()).expect("claim");
    claim.buffer().copy_from_slice(black_box(msg));
    let pos = claim.commit();
    poll_to(s, pos);
}

fn vectored_poll(p: &mut Publication, s: &mut Subscription, msg: &[u8]) {
    let (head, body) = msg.split_at(msg.len().min(16));
    let pos = p.offer_vectored(&[black_box(head), black_box(body)]).expect("offer_vectored");
    poll_to(s, pos);
}

type Op = fn(&mut Publication, &mut Subscription, &[u8]);

fn group(c: &mut Criterion, args: &Args, name: &str, op: Op, max: usize) {
    let mut g = c.benchmark_group(format!("offer_poll/{name}"));
    for size in SIZES.iter().copied().filter(|&s| s <= max) {
        let dir = ShmDir::new("op");
        let (mut p, mut s) = pair(dir.path(), "op", TERM);
        let msg = vec![3u8; size];
        // Warm-up over all three terms.
        let warm = args.n(3 * TERM / (size + 32).max(64) + 1000, 5);
        for _ in 0..warm {
            op(&mut p, &mut s, &msg);
        }
        g.throughput(Throughput::Bytes(size.max(1) as u64));
        g.bench_function(BenchmarkId::from_parameter(format!("{size}B")), |b| {
            b.iter(|| op(&mut p, &mut s, &msg))
        });
        let label = format!("offer_poll/{name}/{size}B");
        if args.wants(&label) {
            // Our own figure for the report: median of 3 timed loops.
            let n = args.n((64 << 20) / (size + 64), 5);
            let mut ns: Vec<f64> = (0..3)
                .map(|_| {
                    let t = std::time::Instant::now();
                    for _ in 0..n {
                        op(&mut p, &mut s, &msg);
                    }
                    t.elapsed().as_nanos() as f64 / n as f64
                })
                .collect();
            let ns = Pcts::of(&mut ns).p50;
            support::record(B, &label, &[("ns_per_msg", ns), ("bytes_per_s", size as f64 * 1e9 / ns)], &[]);
            eprintln!("[{B}] {label}: {ns:.1} ns/msg, {:.2} GB/s", size as f64 / ns);
        }
    }
    g.finish();
}

fn main() {
    let args = Args::parse();
    support::banner(B);
    let mut c = support::criterion(Duration::from_millis(500), Duration::from_secs(2));
    group(&mut c, &args, "offer", offer_poll, usize::MAX);
    group(&mut c, &args, "try_claim", claim_poll, 65536 - 32);
    group(&mut c, &args, "offer_vectored", vectored_poll, usize::MAX);
    if args.wants("offer_poll/memcpy_64KiB") {
        let rounds = args.n(100_000, 10);
        for (label, footprint) in [("hot", 64usize << 10), ("walk_3MiB", 3 * TERM)] {
            let mut r: Vec<f64> = (0..3).map(|_| memcpy_rate(64 << 10, footprint, rounds)).collect();
            support::record_value(
                B,
                &format!("memcpy_64KiB_{label}_bytes_per_s"),
                Pcts::of(&mut r).p50,
                "B/s",
            );
        }
    }
    c.final_summary();
}
