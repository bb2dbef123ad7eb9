//! An aeron-rs client driven from the bridge's own loop (invoker mode): the conductor thread
//! of aeron-rs 0.1.8 keeps its lock while it sleeps, which starves setup calls for seconds, and
//! a bridge has a loop of its own anyway.

use aeron_rs::aeron::Aeron;
use aeron_rs::context::Context;
use aeron_rs::exclusive_publication::ExclusivePublication;
use aeron_rs::subscription::Subscription;
use aeron_rs::utils::errors::{AeronError, GenericError};
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The type of Aeron's sender position counters (`snd-pos`), keyed by the publication's
/// registration id.
const SENDER_POSITION_TYPE_ID: i32 = 2;

/// How long the driver may stay silent before the client counts it as gone.
const DRIVER_TIMEOUT_MS: u64 = 3_000;

/// A connected client and whether its driver has been lost.
pub(crate) struct Client {
    aeron: Aeron,
    driver_lost: Arc<AtomicBool>,
    last_duty: Instant,
}

impl Client {
    /// Connects to the media driver whose directory is `dir`, retrying until `timeout`.
    pub(crate) fn connect(dir: &str, timeout: Duration) -> Result<Client, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let driver_lost = Arc::new(AtomicBool::new(false));
            let mut ctx = Context::new();
            ctx.set_aeron_dir(dir.to_owned());
            ctx.set_use_conductor_agent_invoker(true);
            ctx.set_media_driver_timeout(DRIVER_TIMEOUT_MS);
            let lost = driver_lost.clone();
            ctx.set_error_handler(move |e: AeronError| {
                if means_driver_lost(&e) {
                    lost.store(true, Ordering::Relaxed);
                }
            });
            match Aeron::new(ctx) {
                Ok(aeron) => return Ok(Client { aeron, driver_lost, last_duty: Instant::now() }),
                Err(e) if Instant::now() >= deadline => {
                    return Err(format!("no Aeron media driver answers in {dir}: {e}"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Adds an exclusive publication (one writer, its own session: two out bridges on one
    /// driver never share one) and waits until the driver has made it.
    pub(crate) fn add_publication(
        &mut self,
        channel: &str,
        stream_id: i32,
        timeout: Duration,
    ) -> Result<Arc<Mutex<ExclusivePublication>>, String> {
        let id = self
            .aeron
            .add_exclusive_publication(c_string(channel)?, stream_id)
            .map_err(|e| format!("add publication {channel}: {e}"))?;
        self.wait_for(timeout, |a| a.find_exclusive_publication(id))
            .map_err(|e| format!("publication {channel} stream {stream_id}: {e}"))
    }

    /// Adds a subscription and waits until the driver has made it.
    pub(crate) fn add_subscription(
        &mut self,
        channel: &str,
        stream_id: i32,
        timeout: Duration,
    ) -> Result<Arc<Mutex<Subscription>>, String> {
        let id = self
            .aeron
            .add_subscription(c_string(channel)?, stream_id)
            .map_err(|e| format!("add subscription {channel}: {e}"))?;
        self.wait_for(timeout, |a| a.find_subscription(id))
            .map_err(|e| format!("subscription {channel} stream {stream_id}: {e}"))
    }

    fn wait_for<T>(
        &mut self,
        timeout: Duration,
        mut find: impl FnMut(&mut Aeron) -> Result<T, AeronError>,
    ) -> Result<T, String> {
        let deadline = Instant::now() + timeout;
        loop {
            self.aeron.conductor_agent_invoker().invoke();
            match find(&mut self.aeron) {
                Ok(x) => return Ok(x),
                Err(e) if Instant::now() >= deadline || self.driver_lost() => return Err(e.to_string()),
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }

    /// The conductor's duty cycle (driver keep-alives, new and lost images), at most once a
    /// millisecond however often it is called.
    pub(crate) fn keep_alive(&mut self, now: Instant) {
        if now.duration_since(self.last_duty) >= Duration::from_millis(1) {
            self.last_duty = now;
            self.aeron.conductor_agent_invoker().invoke();
        }
    }

    /// How far the driver's sender got with the publication registered as `registration_id`
    /// (its `snd-pos` counter): the bytes up to there were sent. Still readable after the driver
    /// died, since its counters stay mapped.
    pub(crate) fn sender_position(&self, registration_id: i64) -> Option<i64> {
        // `None` when the counters cannot be read: the out bridge then offers nothing again,
        // and what the dead driver held is lost and reported by the far side as a gap.
        let reader = self.aeron.counters_reader().ok()?;
        let mut id = None;
        reader.for_each(|counter, type_id, key, _label| {
            if type_id == SENDER_POSITION_TYPE_ID && key.get::<i64>(0) == registration_id {
                id = Some(counter);
            }
        });
        reader.counter_value(id?).ok().and_then(|v| i64::try_from(v).ok())
    }

    /// Whether the driver stopped answering (killed, or its directory was deleted).
    pub(crate) fn driver_lost(&self) -> bool {
        self.driver_lost.load(Ordering::Relaxed)
    }
}

fn means_driver_lost(e: &AeronError) -> bool {
    matches!(
        e,
        AeronError::DriverTimeout(_)
            | AeronError::ClientTimeoutException
            | AeronError::Generic(GenericError::ClientHeartbeatNotActive)
            | AeronError::Generic(GenericError::ClientConductorClosed)
            | AeronError::Generic(GenericError::TimeoutBetweenServiceCallsOverTimeout(_))
    )
}

fn c_string(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{s:?}: a channel cannot contain NUL"))
}
