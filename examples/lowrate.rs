//! Low-rate fan-out: one publisher at a fixed rate (1 000 and 10 000 messages/s) to N subscriber
//! *processes*, one-way latency pooled over subscribers and the subscribers' CPU, for the ways a
//! reader can wait, all in one run:
//!
//! - `shmlog-blocking`: `Subscription::poll_blocking` (the doorbell: no CPU while idle);
//! - `shmlog-receiver`: `Receiver::recv_timeout` over the same doorbell (each message decoded
//!   into a `Vec<u8>` by the `Bytes` codec);
//! - `shmlog-backoff`:  `poll` with the default `Backoff` idle strategy;
//! - `shmlog-yielding`: `poll` with `Yielding` (a core per reader while it can get one);
//! - `shmlog-untethered`: as `shmlog-blocking`, through untethered subscriptions (the publisher
//!   never waits for them; `lost` counts what they missed, each in a loss report);
//! - `shmlog-async`:    `AsyncReceiver::recv().await` on a current-thread tokio runtime (made
//!   inside it: the receiver awaits the stream's wake FIFO in the runtime's reactor);
//! - `shmlog-async-waiter`: the same receiver made outside the runtime, so it sleeps through the
//!   process's waiter thread (`SHMLOG_ASYNC_WAITER=1` in its environment keeps it there with
//!   the feature `async-io` too);
//! - `shmlog-block-on`: `recv().await` under a plain `futures::executor::block_on` (no reactor:
//!   through the waiter thread, as that executor gets it without the feature `async-io`);
//! - `shmlog-async-io`: under `async_io::block_on` (smol's), in async-io's reactor (built with
//!   `--features async-io` only);
//! - `udp-multicast`:   blocking `recv` on a socket joined to 239.255.0.1 on 127.0.0.1;
//! - `tokio-udp`:       the same socket as a tokio `UdpSocket`, `recv().await` on a current-thread
//!   runtime: what an async service fanning out over UDP multicast does;
//! - `futex-floor`:     a bare shared futex word the publisher bumps and wakes (`FUTEX_WAKE`, all
//!   waiters) after writing the timestamp: what any kernel wake-up costs here, the floor.
//!
//! ```text
//! cargo run --release [--features async-io] --example lowrate -- [--rates 1000,10000] [--subs 1,8,32,64] [--seconds 2]
//!                                          [--lanes shmlog-blocking,udp-multicast,...]
//! ```
//!
//! Every message carries its sequence number and the CLOCK_MONOTONIC time it was sent;
//! subscribers record now minus that (the same clock in every process) in an HdrHistogram after
//! the first 5 % of messages, and report their CPU time (getrusage) over the measured part; the
//! `cpu` column is their CPU seconds per second of that part (where they fall behind, it lasts
//! longer than the publisher's sending).
//! The publisher paces itself by sleeping (it does not take a core from the subscribers) and
//! reports its own CPU (`pub cpu`: the publishing thread's CPU seconds per second; UDP and the
//! floor fan out inside the publisher's `sendto` / `FUTEX_WAKE`, shmlog inside the first woken
//! reader, so compare readers + publisher) and its time per send (`send p50`: offer, sendto, or bump + FUTEX_WAKE), which is
//! where waking N sleepers costs it. The floor lane's readers see only the latest message when
//! several arrive while they are busy (`lost` counts those; the bare word is not a queue).

#[path = "../benches/support/futex.rs"]
mod futex;
#[path = "../benches/support/page.rs"]
mod page;

use hdrhistogram::Histogram;
use shmlog::{
    AsyncReceiver, Backoff, Bytes, Header, IdleStrategy, Publication, Receiver, RecvError, Subscription,
    Yielding,
};
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::FromRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LANES: &[&str] = &[
    "shmlog-blocking",
    "shmlog-receiver",
    "shmlog-async",
    "shmlog-async-waiter",
    "shmlog-block-on",
    #[cfg(feature = "async-io")]
    "shmlog-async-io",
    "shmlog-backoff",
    "shmlog-yielding",
    "shmlog-untethered",
    "udp-multicast",
    "tokio-udp",
    "futex-floor",
];
const GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 0, 1);
/// Sequence number of the message that tells subscribers to report and leave.
const STOP: u64 = u64::MAX;

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of the calling thread.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn cpu_ns() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(u.ru_utime) + tv(u.ru_stime)
}

struct Args {
    rates: Vec<u64>,
    subs: Vec<usize>,
    seconds: f64,
    lanes: Vec<String>,
    dir: std::path::PathBuf,
}

fn list<T: std::str::FromStr>(v: &str) -> Vec<T> {
    v.split(',').map(|x| x.parse().unwrap_or_else(|_| panic!("bad list item {x}"))).collect()
}

fn parse_args() -> Args {
    let mut a = Args {
        rates: vec![1000, 10_000],
        subs: vec![1, 8, 32, 64],
        seconds: 2.0,
        lanes: LANES.iter().map(|s| s.to_string()).collect(),
        dir: std::env::temp_dir(),
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let v = argv.get(i + 1).cloned().unwrap_or_default();
        match argv[i].as_str() {
            "--rates" => a.rates = list(&v),
            "--subs" => a.subs = list(&v),
            "--seconds" => a.seconds = v.parse().expect("--seconds"),
            "--lanes" => a.lanes = list(&v),
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    a.dir = a.dir.join(format!("shmlog-lowrate-{}", std::process::id()));
    a
}

/// The futex floor's shared page: a futex word, then the message (seq, sent_ns).
struct FloorPage {
    map: page::Page,
}

impl FloorPage {
    fn word(&self) -> &std::sync::atomic::AtomicU32 {
        self.map.word()
    }
    fn slot(&self, i: usize) -> &std::sync::atomic::AtomicU64 {
        self.map.slot(i)
    }
    fn publish(&self, seq: u64, sent: u64) {
        use std::sync::atomic::Ordering::*;
        self.slot(1).store(sent, Relaxed);
        self.slot(0).store(seq, Release);
        futex::bump_and_wake_all(self.word());
    }
    fn wait(&self, seen: u32) {
        futex::wait(self.word(), seen, None);
    }
}

/// A UDP socket with SO_REUSEADDR (every subscriber binds the same port), or a sender's.
fn udp_socket(port: u16, receiver: bool) -> UdpSocket {
    // SAFETY: plain socket calls with valid pointers and sizes; the fd is handed to UdpSocket.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        assert!(fd >= 0);
        let one: libc::c_int = 1;
        let set = |level, name, val: *const libc::c_void, len| {
            assert_eq!(
                libc::setsockopt(fd, level, name, val, len as libc::socklen_t),
                0,
                "setsockopt {name}"
            );
        };
        let lo = libc::in_addr { s_addr: u32::from(Ipv4Addr::LOCALHOST).to_be() };
        if receiver {
            set(libc::SOL_SOCKET, libc::SO_REUSEADDR, &one as *const _ as *const _, 4);
            let addr = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: port.to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(GROUP).to_be() },
                sin_zero: [0; 8],
            };
            assert_eq!(
                libc::bind(
                    fd,
                    &addr as *const _ as *const libc::sockaddr,
                    std::mem::size_of_val(&addr) as u32
                ),
                0
            );
            let mreq = libc::ip_mreq {
                imr_multiaddr: libc::in_addr { s_addr: u32::from(GROUP).to_be() },
                imr_interface: lo,
            };
            set(
                libc::IPPROTO_IP,
                libc::IP_ADD_MEMBERSHIP,
                &mreq as *const _ as *const _,
                std::mem::size_of_val(&mreq),
            );
        } else {
            set(
                libc::IPPROTO_IP,
                libc::IP_MULTICAST_IF,
                &lo as *const _ as *const _,
                std::mem::size_of_val(&lo),
            );
            set(libc::IPPROTO_IP, libc::IP_MULTICAST_LOOP, &one as *const _ as *const _, 4);
        }
        UdpSocket::from_raw_fd(fd)
    }
}

/// Awaits `rx`'s messages until the end of the session or `on_message` says stop.
async fn receive_all(rx: &mut AsyncReceiver<Vec<u8>, Bytes>, on_message: &mut impl FnMut(u64, u64) -> bool) {
    loop {
        match rx.recv().await {
            Ok(m) => {
                let (seq, sent) = decode(&m);
                if !on_message(seq, sent) {
                    break;
                }
            }
            Err(RecvError::Closed) => break,
            Err(e) => panic!("async receiver: {e}"),
        }
    }
}

/// A message's sequence number and send time.
fn decode(m: &[u8]) -> (u64, u64) {
    (u64::from_le_bytes(m[0..8].try_into().unwrap()), u64::from_le_bytes(m[8..16].try_into().unwrap()))
}

/// A subscriber process: `lowrate --child <lane> <stream> <port> <warmup>`.
fn child(argv: &[String]) {
    let (lane, stream, port, warmup) =
        (&argv[0], &argv[1], argv[2].parse::<u16>().unwrap(), argv[3].parse::<u64>().unwrap());
    let dir = std::path::PathBuf::from(&argv[4]);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
    let (mut cpu_start, mut wall_start) = (0, 0);
    let mut received = 0u64;
    let mut on_message = |seq: u64, sent: u64| -> bool {
        if seq == STOP {
            return false;
        }
        received += 1;
        if seq == warmup {
            cpu_start = cpu_ns();
            wall_start = now_ns();
        }
        if seq >= warmup {
            hist.saturating_record(now_ns().saturating_sub(sent).max(1));
        }
        true
    };
    let ready = || {
        println!("ready");
        std::io::stdout().flush().unwrap();
    };
    match lane.as_str() {
        "tokio-udp" => {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
            runtime.block_on(async {
                let std_sock = udp_socket(port, true);
                std_sock.set_nonblocking(true).unwrap();
                let sock = tokio::net::UdpSocket::from_std(std_sock).unwrap();
                ready();
                let mut buf = [0u8; 64];
                loop {
                    let n = sock.recv(&mut buf).await.unwrap();
                    let (seq, sent) = decode(&buf[..n]);
                    if !on_message(seq, sent) {
                        break;
                    }
                }
            });
        }
        "shmlog-async" | "shmlog-async-waiter" => {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
            let sub = Subscription::builder(stream.as_str()).dir(&dir).open().unwrap();
            let make = || AsyncReceiver::new(Receiver::new(sub, Bytes)).unwrap();
            let mut rx = if lane == "shmlog-async" { runtime.block_on(async { make() }) } else { make() };
            assert_eq!(rx.in_reactor(), lane == "shmlog-async");
            ready();
            runtime.block_on(receive_all(&mut rx, &mut on_message));
        }
        "shmlog-block-on" | "shmlog-async-io" => {
            let sub = Subscription::builder(stream.as_str()).dir(&dir).open().unwrap();
            let mut rx = AsyncReceiver::new(Receiver::new(sub, Bytes)).unwrap();
            assert_eq!(rx.in_reactor(), lane == "shmlog-async-io");
            ready();
            let received = receive_all(&mut rx, &mut on_message);
            #[cfg(feature = "async-io")]
            if lane == "shmlog-async-io" {
                async_io::block_on(received);
            } else {
                futures_executor::block_on(received);
            }
            #[cfg(not(feature = "async-io"))]
            futures_executor::block_on(received);
        }
        "udp-multicast" => {
            let sock = udp_socket(port, true);
            ready();
            let mut buf = [0u8; 64];
            loop {
                let n = sock.recv(&mut buf).unwrap();
                let (seq, sent) = decode(&buf[..n]);
                if !on_message(seq, sent) {
                    break;
                }
            }
        }
        "futex-floor" => {
            let page = FloorPage { map: page::Page::open(&dir.join(stream), false) };
            ready();
            let mut seen = page.word().load(std::sync::atomic::Ordering::Acquire);
            loop {
                let now = page.word().load(std::sync::atomic::Ordering::Acquire);
                if now == seen {
                    page.wait(seen);
                    continue;
                }
                seen = now;
                let seq = page.slot(0).load(std::sync::atomic::Ordering::Acquire);
                let sent = page.slot(1).load(std::sync::atomic::Ordering::Relaxed);
                if !on_message(seq, sent) {
                    break;
                }
            }
        }
        "shmlog-receiver" => {
            let sub = Subscription::builder(stream.as_str()).dir(&dir).open().unwrap();
            let mut rx = Receiver::new(sub, Bytes);
            ready();
            loop {
                match rx.recv_timeout(Duration::from_secs(5)) {
                    Ok(m) => {
                        let (seq, sent) = decode(&m);
                        if !on_message(seq, sent) {
                            break;
                        }
                    }
                    Err(RecvError::Closed) => break,
                    Err(RecvError::Timeout) => {}
                    Err(e) => panic!("receiver: {e}"),
                }
            }
        }
        shm => {
            let mut sub = Subscription::builder(stream.as_str())
                .dir(&dir)
                .tethered(shm != "shmlog-untethered")
                .open()
                .unwrap();
            ready();
            let mut going = true;
            let mut backoff = Backoff::default();
            let mut yielding = Yielding;
            while going {
                let mut handler = |m: &[u8], _: &Header| {
                    let (seq, sent) = decode(m);
                    going &= on_message(seq, sent);
                };
                match shm {
                    "shmlog-blocking" | "shmlog-untethered" => {
                        sub.poll_blocking(&mut handler, 16, Duration::from_secs(5));
                    }
                    "shmlog-backoff" => {
                        let n = sub.poll(&mut handler, 16);
                        backoff.idle(n);
                    }
                    "shmlog-yielding" => {
                        let n = sub.poll(&mut handler, 16);
                        yielding.idle(n);
                    }
                    other => panic!("unknown lane {other}"),
                }
                if sub.is_closed() {
                    break;
                }
            }
        }
    }
    let cpu = cpu_ns().saturating_sub(cpu_start);
    let wall = now_ns().saturating_sub(wall_start);
    let mut out = format!("report received={received} cpu_ns={cpu} wall_ns={wall} hist=");
    for v in hist.iter_recorded() {
        out += &format!("{}:{},", v.value_iterated_to(), v.count_at_value());
    }
    println!("{out}");
}

struct Cell {
    pub_cores: f64,
    send_p50: f64,
    send_mean: f64,
    send_p99: f64,
    p50: f64,
    p99: f64,
    p999: f64,
    cpu_cores: f64,
    lost: u64,
}

fn run_cell(a: &Args, lane: &str, rate: u64, n: usize, port: u16) -> Cell {
    let stream = format!("lowrate-{lane}-{rate}-{n}");
    let count = (rate as f64 * a.seconds) as u64;
    let warmup = count / 20;
    let exe = std::env::current_exe().unwrap();
    // The stream exists before the subscribers start (they join it from its start).
    let mut publication = match lane {
        l if l.starts_with("shmlog") => Some(
            Publication::builder(stream.as_str())
                .dir(&a.dir)
                .term_length(1 << 20)
                .max_readers(128)
                .create()
                .unwrap(),
        ),
        _ => None,
    };
    let floor =
        (lane == "futex-floor").then(|| FloorPage { map: page::Page::open(&a.dir.join(&stream), true) });
    let mut children: Vec<(Child, BufReader<std::process::ChildStdout>)> = (0..n)
        .map(|_| {
            let mut c = Command::new(&exe);
            c.args(["--child", lane, &stream, &port.to_string(), &warmup.to_string()])
                .arg(&a.dir)
                .stdout(Stdio::piped());
            if matches!(lane, "shmlog-async-waiter" | "shmlog-block-on") {
                c.env("SHMLOG_ASYNC_WAITER", "1"); // the waiter thread, whatever the features
            }
            let mut c = c.spawn().unwrap();
            let out = BufReader::new(c.stdout.take().unwrap());
            (c, out)
        })
        .collect();
    for (_, out) in &mut children {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "a subscriber failed to start");
    }
    if let Some(p) = &mut publication {
        p.wait_for_readers(n, Duration::from_secs(30)).unwrap();
    }
    let udp = lane.contains("udp").then(|| udp_socket(0, false));
    let target = SocketAddrV4::new(GROUP, port);
    let send = |p: &mut Option<Publication>, seq: u64| {
        let mut m = [0u8; 16];
        m[0..8].copy_from_slice(&seq.to_le_bytes());
        let sent = now_ns();
        m[8..16].copy_from_slice(&sent.to_le_bytes());
        if let Some(p) = p {
            p.offer_blocking(&m, Duration::from_secs(10)).unwrap();
        } else if let Some(s) = &udp {
            s.send_to(&m, target).unwrap();
        } else if let Some(f) = &floor {
            f.publish(seq, sent);
        }
    };
    let period = Duration::from_nanos(1_000_000_000 / rate);
    // The publisher's own cost per message: time inside offer / sendto / the futex wake.
    let mut send_hist = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
    let start = Instant::now();
    let (mut pub_cpu0, mut pub_wall0) = (0, 0);
    for seq in 0..count {
        if seq == warmup {
            (pub_cpu0, pub_wall0) = (thread_cpu_ns(), now_ns());
        }
        let at = start + period * seq as u32;
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        let t0 = now_ns();
        send(&mut publication, seq);
        if seq >= warmup {
            send_hist.saturating_record(now_ns() - t0);
        }
    }
    let pub_cores = (thread_cpu_ns() - pub_cpu0) as f64 / (now_ns() - pub_wall0).max(1) as f64;
    // Stop: for UDP a few times (datagrams may drop), then the session's end.
    let settle = Instant::now();
    loop {
        send(&mut publication, STOP);
        if !lane.contains("udp") || settle.elapsed() > Duration::from_millis(50) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
    let (mut cpu, mut wall, mut lost) = (0u64, 0u64, 0u64);
    for (mut c, mut out) in children {
        let mut line = String::new();
        while !line.starts_with("report") {
            line.clear();
            if out.read_line(&mut line).unwrap() == 0 {
                panic!("a subscriber ended without a report");
            }
        }
        let field = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k)).unwrap().to_string();
        lost += count - field("received=").parse::<u64>().unwrap().min(count);
        cpu += field("cpu_ns=").parse::<u64>().unwrap();
        wall = wall.max(field("wall_ns=").parse::<u64>().unwrap());
        for pair in field("hist=").split(',').filter(|s| !s.is_empty()) {
            let (v, k) = pair.split_once(':').unwrap();
            hist.record_n(v.parse().unwrap(), k.parse().unwrap()).unwrap();
        }
        c.wait().unwrap();
    }
    drop(publication);
    let _ = std::fs::remove_file(a.dir.join(&stream));
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    Cell {
        pub_cores,
        send_p50: send_hist.value_at_quantile(0.5) as f64 / 1000.0,
        send_mean: send_hist.mean() / 1000.0,
        send_p99: send_hist.value_at_quantile(0.99) as f64 / 1000.0,
        p50: us(0.5),
        p99: us(0.99),
        p999: us(0.999),
        cpu_cores: cpu as f64 / wall.max(1) as f64,
        lost,
    }
}

/// `true` if a datagram sent to the group on loopback comes back (some containers and CI hosts
/// have no multicast route on `lo`).
fn multicast_works(port: u16) -> bool {
    std::panic::catch_unwind(|| {
        let rx = udp_socket(port, true);
        rx.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        udp_socket(0, false).send_to(b"probe", SocketAddrV4::new(GROUP, port)).unwrap();
        let mut buf = [0u8; 8];
        rx.recv(&mut buf).is_ok()
    })
    .unwrap_or(false)
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("--child") {
        child(&argv[2..]);
        return;
    }
    let mut a = parse_args();
    std::fs::create_dir_all(&a.dir).unwrap();
    let mut port = 40_000 + (std::process::id() % 10_000) as u16;
    if a.lanes.iter().any(|l| l.contains("udp")) && !multicast_works(port) {
        println!(
            "udp lanes SKIPPED: no multicast on loopback here (a route for 239.255.0.1 via lo is needed)"
        );
        a.lanes.retain(|l| !l.contains("udp"));
    }
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("lowrate: one publisher, N subscriber processes, {} s per cell, {cores} cores", a.seconds);
    println!("one-way latency in µs (pooled over subscribers) and the subscribers' CPU in cores");
    println!(
        "{:<7} {:>3}  {:<19} {:>9} {:>9} {:>9} {:>7} {:>8} {:>9} {:>9} {:>9} {:>6}",
        "rate",
        "N",
        "lane",
        "p50",
        "p99",
        "p99.9",
        "cpu",
        "pub cpu",
        "send p50",
        "send mean",
        "send p99",
        "lost"
    );
    for &rate in &a.rates {
        for &n in &a.subs {
            for lane in &a.lanes {
                port += 1;
                let c = run_cell(&a, lane, rate, n, port);
                println!(
                    "{:<7} {:>3}  {:<19} {:>9.1} {:>9.1} {:>9.1} {:>6.1}% {:>7.1}% {:>9.2} {:>9.2} {:>9.1} {:>6}",
                    rate,
                    n,
                    lane,
                    c.p50,
                    c.p99,
                    c.p999,
                    c.cpu_cores * 100.0,
                    c.pub_cores * 100.0,
                    c.send_p50,
                    c.send_mean,
                    c.send_p99,
                    c.lost
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&a.dir);
}
