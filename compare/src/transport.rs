//! One small sending/receiving interface over shmlog, aeron-rs and
//! crossbeam-channel, so the comparison runs the very same workload code over each, and the
//! workloads themselves: round trip, streaming throughput, one-way latency.



use crate::support::clock::Clock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The sending end of a stream of 32-byte messages.
pub trait Tx {
    /// `false` when back-pressured (retry); panics on a hard error.
    fn send(&mut self, msg: &[u8; 32]) -> bool;

    #[inline(always)]
    fn send_spin(&mut self, msg: &[u8; 32]) {
        while !self.send(msg) {
            std::hint::spin_loop();
        }
    }
}

/// The receiving end.
pub trait Rx {
    /// Hands up to `limit` messages to `f`; returns how many.
    fn recv<F: FnMut(&[u8])>(&mut self, f: F, limit: usize) -> usize;
}

// ---- shmlog -------------------------------------------------------------------------------

impl Tx for shmlog::Publication {
    #[inline(always)]
    fn send(&mut self, msg: &[u8; 32]) -> bool {
        match self.offer(msg) {
            Ok(_) => true,
            Err(e) if e.is_retryable() => false,
            Err(e) => panic!("shmlog offer: {e:?}"),
        }
    }
}

impl Rx for shmlog::Subscription {
    #[inline(always)]
    fn recv<F: FnMut(&[u8])>(&mut self, mut f: F, limit: usize) -> usize {
        self.poll(|p: &[u8], _: &shmlog::Header| f(p), limit)
    }
}

// ---- a bare ring (the floor) ---------------------------------------------------------------

/// A bare single-producer single-consumer ring of 64-byte slots, each a sequence word and the
/// message: the least a shared-memory transport can do per message, behind the same `Tx`/`Rx`
/// as the others, so that its latency is the floor in the same table.
pub mod raw {
    use super::{Rx, Tx};
    use crossbeam_utils::CachePadded;
    use std::cell::UnsafeCell;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[repr(C, align(64))]
    struct Slot {
        seq: AtomicU64,
        msg: UnsafeCell<[u8; 32]>,
    }

    struct Ring {
        slots: Box<[Slot]>,
        mask: u64,
        /// Messages the receiver has finished with.
        head: CachePadded<AtomicU64>,
    }

    // SAFETY: a slot's message is written only by the one sender before the release store of
    // the slot's sequence, and read only by the one receiver after the acquire load of it; the
    // sender rewrites a slot only after the receiver's released head has passed it.
    unsafe impl Sync for Ring {}

    pub struct RawTx {
        ring: Arc<Ring>,
        tail: u64,
        cached_head: u64,
    }

    pub struct RawRx {
        ring: Arc<Ring>,
        head: u64,
    }

    /// A ring of `capacity` slots (a power of two).
    pub fn channel(capacity: usize) -> (RawTx, RawRx) {
        assert!(capacity.is_power_of_two());
        let slots =
            (0..capacity).map(|_| Slot { seq: AtomicU64::new(0), msg: UnsafeCell::new([0; 32]) }).collect();
        let ring =
            Arc::new(Ring { slots, mask: capacity as u64 - 1, head: CachePadded::new(AtomicU64::new(0)) });
        (RawTx { ring: ring.clone(), tail: 0, cached_head: 0 }, RawRx { ring, head: 0 })
    }

    impl Tx for RawTx {
        #[inline(always)]
        fn send(&mut self, msg: &[u8; 32]) -> bool {
            let capacity = self.ring.mask + 1;
            if self.tail - self.cached_head >= capacity {
                self.cached_head = self.ring.head.load(Ordering::Acquire);
                if self.tail - self.cached_head >= capacity {
                    return false;
                }
            }
            let slot = &self.ring.slots[(self.tail & self.ring.mask) as usize];
            // SAFETY: the receiver has passed this slot (see `Sync for Ring`).
            unsafe { *slot.msg.get() = *msg };
            slot.seq.store(self.tail + 1, Ordering::Release);
            self.tail += 1;
            true
        }
    }

    impl Rx for RawRx {
        #[inline(always)]
        fn recv<F: FnMut(&[u8])>(&mut self, mut f: F, limit: usize) -> usize {
            let mut n = 0;
            while n < limit {
                let slot = &self.ring.slots[(self.head & self.ring.mask) as usize];
                if slot.seq.load(Ordering::Acquire) != self.head + 1 {
                    break;
                }
                // SAFETY: published by the acquire load above (see `Sync for Ring`).
                let msg = unsafe { *slot.msg.get() };
                f(&msg);
                self.head += 1;
                n += 1;
            }
            if n > 0 {
                self.ring.head.store(self.head, Ordering::Release);
            }
            n
        }
    }
}

// ---- crossbeam-channel (in-process baseline) ----------------------------------------------

impl Tx for crossbeam_channel::Sender<[u8; 32]> {
    #[inline(always)]
    fn send(&mut self, msg: &[u8; 32]) -> bool {
        match self.try_send(*msg) {
            Ok(()) => true,
            Err(crossbeam_channel::TrySendError::Full(_)) => false,
            Err(e) => panic!("crossbeam send: {e:?}"),
        }
    }
}

impl Rx for crossbeam_channel::Receiver<[u8; 32]> {
    #[inline(always)]
    fn recv<F: FnMut(&[u8])>(&mut self, mut f: F, limit: usize) -> usize {
        let mut n = 0;
        while n < limit {
            match self.try_recv() {
                Ok(m) => {
                    f(&m);
                    n += 1;
                }
                Err(_) => break,
            }
        }
        n
    }
}

// ---- aeron-rs 0.1.8 over a real media driver ----------------------------------------------

pub mod aeron {
    use super::{Rx, Tx};
    use aeron_rs::aeron::Aeron;
    use aeron_rs::concurrent::atomic_buffer::AtomicBuffer;
    use aeron_rs::concurrent::logbuffer::header::Header;
    use aeron_rs::context::Context;
    use aeron_rs::publication::Publication;
    use aeron_rs::subscription::Subscription;
    use aeron_rs::utils::errors::AeronError;
    use aeron_rs::utils::types::Index;
    use std::ffi::CString;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// A publication borrowed from its locked mutex for a whole run (no lock per message).
    pub struct AeronTx<'a>(pub &'a Publication);

    impl Tx for AeronTx<'_> {
        #[inline(always)]
        fn send(&mut self, msg: &[u8; 32]) -> bool {
            // aeron-rs only reads through this buffer.
            let buf = AtomicBuffer::wrap_raw_slice(msg.as_slice() as *const [u8] as *mut [u8]);
            match self.0.offer_part(buf, 0, 32) {
                Ok(_) => true,
                Err(AeronError::BackPressured)
                | Err(AeronError::AdminAction)
                | Err(AeronError::NotConnected) => false,
                Err(e) => panic!("aeron-rs offer: {e:?}"),
            }
        }
    }

    /// A subscription borrowed from its locked mutex for a whole run.
    pub struct AeronRx<'a>(pub &'a mut Subscription);

    impl Rx for AeronRx<'_> {
        #[inline(always)]
        fn recv<F: FnMut(&[u8])>(&mut self, mut f: F, limit: usize) -> usize {
            let mut h = |buf: &AtomicBuffer, offset: Index, length: Index, _: &Header| {
                f(&buf.as_slice()[offset as usize..(offset + length) as usize])
            };
            self.0.poll(&mut h, limit as i32) as usize
        }
    }

    /// An aeron-rs client whose conductor runs on a thread we own (invoker mode), because the
    /// built-in conductor thread of 0.1.8 holds its mutex while it sleeps and starves
    /// `find_*` calls for up to tens of seconds.
    pub struct Client {
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
        pub publications: Vec<Arc<Mutex<Publication>>>,
        pub subscriptions: Vec<Arc<Mutex<Subscription>>>,
    }

    type Handles = (Vec<Arc<Mutex<Publication>>>, Vec<Arc<Mutex<Subscription>>>);

    impl Client {
        /// Connects to the driver in `dir`, adds a publication and a subscription on
        /// `aeron:ipc` for each stream id, and waits until each publication is connected.
        pub fn connect(dir: &str, streams: &[i32]) -> Result<Client, String> {
            let stop = Arc::new(AtomicBool::new(false));
            let (tx, rx) = mpsc::channel::<Result<Handles, String>>();
            let (dir, streams, st) = (dir.to_string(), streams.to_vec(), stop.clone());
            let thread = std::thread::spawn(move || {
                crate::support::above_fifo_spinners();
                let setup = || -> Result<(Aeron, Handles), String> {
                    let mut ctx = Context::new();
                    ctx.set_aeron_dir(dir);
                    ctx.set_use_conductor_agent_invoker(true);
                    let mut aeron = Aeron::new(ctx).map_err(|e| format!("aeron-rs connect: {e}"))?;
                    let channel = CString::new("aeron:ipc").unwrap();
                    let mut ids = Vec::new();
                    for &s in &streams {
                        let p = aeron
                            .add_publication(channel.clone(), s)
                            .map_err(|e| format!("add_publication: {e}"))?;
                        let q = aeron
                            .add_subscription(channel.clone(), s)
                            .map_err(|e| format!("add_subscription: {e}"))?;
                        ids.push((p, q));
                    }
                    let deadline = Instant::now() + Duration::from_secs(20);
                    let (mut pubs, mut subs) = (Vec::new(), Vec::new());
                    for (p, q) in ids {
                        let publication = loop {
                            aeron.conductor_agent_invoker().invoke();
                            match aeron.find_publication(p) {
                                Ok(x) => break x,
                                Err(_) if Instant::now() < deadline => {
                                    std::thread::sleep(Duration::from_millis(1))
                                }
                                Err(e) => return Err(format!("find_publication: {e}")),
                            }
                        };
                        let subscription = loop {
                            aeron.conductor_agent_invoker().invoke();
                            match aeron.find_subscription(q) {
                                Ok(x) => break x,
                                Err(_) if Instant::now() < deadline => {
                                    std::thread::sleep(Duration::from_millis(1))
                                }
                                Err(e) => return Err(format!("find_subscription: {e}")),
                            }
                        };
                        // The image appears on this (conductor) thread.
                        while !publication.lock().unwrap().is_connected() {
                            if Instant::now() > deadline {
                                return Err("aeron-rs publication never connected".into());
                            }
                            aeron.conductor_agent_invoker().invoke();
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        // ...and on the subscription: its image must be attached before a
                        // reader thread holds the subscription's lock for a whole run (the
                        // conductor locks it to add an image).
                        while subscription.lock().unwrap().image_count() == 0 {
                            if Instant::now() > deadline {
                                return Err("aeron-rs subscription got no image".into());
                            }
                            aeron.conductor_agent_invoker().invoke();
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        pubs.push(publication);
                        subs.push(subscription);
                    }
                    Ok((aeron, (pubs, subs)))
                };
                match setup() {
                    Ok((aeron, handles)) => {
                        let _ = tx.send(Ok(handles));
                        // Keep-alives and image handling, as the built-in conductor thread would.
                        while !st.load(Ordering::Relaxed) {
                            aeron.conductor_agent_invoker().invoke();
                            std::thread::sleep(Duration::from_millis(4));
                        }
                        drop(aeron);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            });
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(Ok((publications, subscriptions))) => {
                    Ok(Client { stop, thread: Some(thread), publications, subscriptions })
                }
                Ok(Err(e)) => {
                    let _ = thread.join();
                    Err(e)
                }
                Err(_) => {
                    stop.store(true, Ordering::Relaxed);
                    Err("aeron-rs setup timed out".into())
                }
            }
        }
    }

    /// A receiver that owns the subscription's `Arc<Mutex<_>>` and locks it on its first poll, in
    /// the sink thread, keeping the guard for its whole life (no lock per poll).
    pub struct AeronSinkRx {
        arc: std::sync::Arc<std::sync::Mutex<Subscription>>,
        guard: Option<std::sync::MutexGuard<'static, Subscription>>,
    }

    impl AeronSinkRx {
        pub fn new(arc: std::sync::Arc<std::sync::Mutex<Subscription>>) -> Self {
            AeronSinkRx { arc, guard: None }
        }
    }

    impl Rx for AeronSinkRx {
        #[inline(always)]
        fn recv<F: FnMut(&[u8])>(&mut self, f: F, limit: usize) -> usize {
            if self.guard.is_none() {
                let m: &std::sync::Mutex<_> = &self.arc;
                // SAFETY: the mutex lives in `self.arc`, which outlives the guard: `Drop` below
                // drops the guard first, and the guard never leaves this struct.
                let m: &'static std::sync::Mutex<_> = unsafe { &*(m as *const std::sync::Mutex<_>) };
                self.guard = Some(m.lock().unwrap());
            }
            AeronRx(self.guard.as_mut().unwrap()).recv(f, limit)
        }
    }

    impl Drop for AeronSinkRx {
        fn drop(&mut self) {
            self.guard.take();
        }
    }

    // SAFETY: the guard is created and dropped on the sink thread only (the struct moves there
    // before its first poll, with `guard == None`).
    unsafe impl Send for AeronSinkRx {}

    impl Drop for Client {
        fn drop(&mut self) {
            self.publications.clear();
            self.subscriptions.clear();
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

// ---- workloads ----------------------------------------------------------------------------

/// A message that tells an echo loop to stop (first byte).
pub const STOP: u8 = 0xEE;

/// Lets several threads share one CPU and take turns (interleaved comparisons): while the gate
/// is closed its thread sleeps parked, not waking on a timer, so it does not preempt the pair
/// being measured; opening it wakes that thread at once.
pub struct Gate {
    open: AtomicBool,
    sleeper: std::sync::Mutex<Option<std::thread::Thread>>,
}

impl Gate {
    pub fn new(open: bool) -> Self {
        Gate { open: AtomicBool::new(open), sleeper: std::sync::Mutex::new(None) }
    }

    pub fn open(&self) {
        self.open.store(true, Ordering::Release);
        if let Some(t) = self.sleeper.lock().unwrap().as_ref() {
            t.unpark();
        }
    }

    pub fn close(&self) {
        self.open.store(false, Ordering::Release);
    }

    /// Whether the gate is open; if not, first sleeps until it is opened or 20 ms passed (so
    /// a stop flag is still seen). Called by the gated thread only.
    pub fn pass(&self) -> bool {
        if self.open.load(Ordering::Acquire) {
            return true;
        }
        self.sleeper.lock().unwrap().get_or_insert_with(std::thread::current);
        // An `open` between the load above and here leaves an unpark token: no lost wake-up.
        if !self.open.load(Ordering::Acquire) {
            std::thread::park_timeout(Duration::from_millis(20));
        }
        self.open.load(Ordering::Acquire)
    }
}

/// Echoes `rx` onto `tx` until a message starting with [`STOP`] arrives (forwarded too).
pub fn echo<T: Tx, R: Rx>(rx: &mut R, tx: &mut T) {
    echo_when(rx, tx, &Gate::new(true));
}

/// As [`echo`], but only while `gate` is open; otherwise it sleeps.
pub fn echo_when<T: Tx, R: Rx>(rx: &mut R, tx: &mut T, gate: &Gate) {
    let mut done = false;
    let mut m = [0u8; 32];
    while !done {
        if !gate.pass() {
            continue;
        }
        let n = rx.recv(
            |p| {
                m.copy_from_slice(&p[..32]);
                if p[0] == STOP {
                    done = true;
                }
            },
            1,
        );
        if n > 0 {
            tx.send_spin(&m);
        } else {
            std::hint::spin_loop();
        }
    }
}

/// One round trip: send on `ping`, spin until one message comes back on `pong`.
#[inline(always)]
pub fn round_trip<T: Tx, R: Rx>(ping: &mut T, pong: &mut R, msg: &[u8; 32]) {
    ping.send_spin(msg);
    while pong.recv(
        |p| {
            std::hint::black_box(p[0]);
        },
        1,
    ) == 0
    {
        std::hint::spin_loop();
    }
}

/// Up to `n` timed round trips within `max`: RTT samples in ns.
pub fn rtt_samples<T: Tx, R: Rx>(
    ping: &mut T,
    pong: &mut R,
    clock: &Clock,
    n: usize,
    max: Duration,
) -> Vec<f64> {
    let msg = [1u8; 32];
    let mut out = Vec::with_capacity(n);
    let deadline = Instant::now() + max;
    for i in 0..n {
        if i % 1024 == 0 && Instant::now() > deadline {
            break;
        }
        let a = clock.raw();
        round_trip(ping, pong, &msg);
        let b = clock.raw();
        out.push(clock.delta_ns(a, b));
    }
    out
}

/// Shared state of a receiving thread: messages seen, and the one-way samples it records.
pub struct Sink {
    pub received: AtomicU64,
    pub stop: AtomicBool,
    /// When set, the receiver records `now - stamp` of each message into `samples`.
    pub record: AtomicBool,
    /// The receiver's echo of `record`, stored once it has switched (and, when switching off,
    /// after it handed its samples over).
    pub ack: AtomicBool,
    pub samples: std::sync::Mutex<Vec<f64>>,
    /// While closed, the receiver sleeps instead of polling. Open by default.
    pub active: Gate,
}

impl Sink {
    pub fn new() -> Arc<Sink> {
        Arc::new(Sink {
            received: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            record: AtomicBool::new(false),
            ack: AtomicBool::new(false),
            samples: std::sync::Mutex::new(Vec::new()),
            active: Gate::new(true),
        })
    }

    /// Spins until `n` messages were received; panics after a minute without (a hung receiver
    /// must fail the bench, not hang it).
    pub fn wait_for(&self, n: u64) {
        let mut i = 0u32;
        let mut deadline = None;
        while self.received.load(Ordering::Acquire) < n {
            std::hint::spin_loop();
            i = i.wrapping_add(1);
            if i % (1 << 20) == 0 {
                let d = *deadline.get_or_insert_with(|| Instant::now() + Duration::from_secs(60));
                assert!(
                    Instant::now() < d,
                    "receiver stalled at {} of {n}",
                    self.received.load(Ordering::Acquire)
                );
            }
        }
    }
}

/// The receiving loop: counts messages; while `record` is set, stores one-way latencies
/// (the first 8 bytes of each message are a send stamp from `clock.now_ns()`).
///
/// The receive time is read once per poll, after the handler has seen the whole batch, and
/// charged to every message of it: a message is never stamped as received before it was
/// (conservative, by at most the time to hand out the rest of its batch), and the clock
/// (~14 ns a stamp here) is not paid per message, so it does not slow the receiver below the
/// sender and turn a burst into a queueing measurement of the harness itself.
pub fn sink_loop<R: Rx>(rx: &mut R, sink: &Sink, clock: Clock, limit: usize) {
    let mut n = 0u64;
    // Touched once here, so that recording never page-faults in the middle of a burst.
    let mut local: Vec<f64> = vec![0.0; 1 << 20];
    local.clear();
    let mut stamps: Vec<u64> = Vec::with_capacity(limit);
    let mut was_recording = false;
    loop {
        if !sink.active.pass() {
            if sink.stop.load(Ordering::Relaxed) {
                return;
            }
            continue;
        }
        let recording = sink.record.load(Ordering::Acquire);
        if recording != was_recording {
            if !recording {
                sink.samples.lock().unwrap().append(&mut local);
            }
            sink.ack.store(recording, Ordering::Release);
            was_recording = recording;
        }
        let k = rx.recv(
            |p| {
                if recording {
                    stamps.push(u64::from_le_bytes(p[..8].try_into().unwrap()));
                }
            },
            limit,
        );
        if k > 0 {
            if recording {
                let now = clock.now_ns();
                local.extend(stamps.drain(..).map(|stamp| now.saturating_sub(stamp) as f64));
            }
            n += k as u64;
            sink.received.store(n, Ordering::Release);
        } else {
            if sink.stop.load(Ordering::Relaxed) {
                return;
            }
            std::hint::spin_loop();
        }
    }
}

/// Sends `n` messages back to back and waits until all were received: elapsed time.
pub fn burst<T: Tx>(tx: &mut T, sink: &Sink, sent: &mut u64, n: u64) -> Duration {
    let msg = [5u8; 32];
    let t = Instant::now();
    for _ in 0..n {
        tx.send_spin(&msg);
    }
    *sent += n;
    sink.wait_for(*sent);
    t.elapsed()
}

/// One stamped message, then wait until it was received (one in flight at a time).
#[inline(always)]
pub fn oneway_then_ack<T: Tx>(tx: &mut T, sink: &Sink, sent: &mut u64, clock: &Clock) {
    let mut msg = [0u8; 32];
    msg[..8].copy_from_slice(&clock.now_ns().to_le_bytes());
    tx.send_spin(&msg);
    *sent += 1;
    sink.wait_for(*sent);
}

/// Sends `n` stamped messages as fast as possible (a burst), recording one-way latencies of
/// each; waits until all were received. Returns the samples.
pub fn stamped_burst<T: Tx>(tx: &mut T, sink: &Sink, sent: &mut u64, clock: &Clock, n: u64) -> Vec<f64> {
    start_recording(sink);
    for _ in 0..n {
        let mut msg = [0u8; 32];
        msg[..8].copy_from_slice(&clock.now_ns().to_le_bytes());
        tx.send_spin(&msg);
    }
    *sent += n;
    sink.wait_for(*sent);
    stop_recording(sink)
}

/// Sends `n` stamped messages at `rate` per second (busy-waiting for each send time; a late
/// send is stamped when actually sent), recording one-way latencies.
pub fn stamped_fixed_rate<T: Tx>(
    tx: &mut T,
    sink: &Sink,
    sent: &mut u64,
    clock: &Clock,
    n: u64,
    rate: f64,
) -> Vec<f64> {
    start_recording(sink);
    let period = 1e9 / rate;
    let start = clock.now_ns() as f64;
    for i in 0..n {
        let due = (start + i as f64 * period) as u64;
        while clock.now_ns() < due {
            std::hint::spin_loop();
        }
        let mut msg = [0u8; 32];
        msg[..8].copy_from_slice(&clock.now_ns().to_le_bytes());
        tx.send_spin(&msg);
    }
    *sent += n;
    sink.wait_for(*sent);
    stop_recording(sink)
}

/// One at a time (send, wait for receipt), recording one-way latencies.
pub fn stamped_one_at_a_time<T: Tx>(
    tx: &mut T,
    sink: &Sink,
    sent: &mut u64,
    clock: &Clock,
    n: u64,
    max: Duration,
) -> Vec<f64> {
    start_recording(sink);
    let deadline = Instant::now() + max;
    for i in 0..n {
        if i % 1024 == 0 && Instant::now() > deadline {
            break;
        }
        oneway_then_ack(tx, sink, sent, clock);
    }
    stop_recording(sink)
}

fn start_recording(sink: &Sink) {
    sink.samples.lock().unwrap().clear();
    sink.record.store(true, Ordering::Release);
    wait_ack(sink, true);
}

fn stop_recording(sink: &Sink) -> Vec<f64> {
    sink.record.store(false, Ordering::Release);
    wait_ack(sink, false);
    std::mem::take(&mut *sink.samples.lock().unwrap())
}

fn wait_ack(sink: &Sink, value: bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while sink.ack.load(Ordering::Acquire) != value {
        assert!(Instant::now() < deadline, "receiver did not switch recording");
        std::thread::yield_now();
    }
}
