//! What a duty loop does when a poll or offer found no work.
//!
//! Use as `idle.idle(sub.poll(...))`: any work resets the strategy, no work backs off.

use crate::error::{Error, OfferError};
use std::time::{Duration, Instant};

/// A way to wait between attempts that found no work.
pub trait IdleStrategy {
    /// Called with the work done by the last attempt: resets on work, backs off on none.
    fn idle(&mut self, work_count: usize) {
        if work_count > 0 {
            self.reset();
        } else {
            self.idle_once();
        }
    }

    /// Backs off once.
    fn idle_once(&mut self);

    /// Forgets any back-off progress (called on work).
    fn reset(&mut self) {}
}

/// Spins with the CPU's spin-wait hint: lowest wake-up latency, one full core.
#[derive(Clone, Copy, Debug, Default)]
pub struct BusySpin;

impl IdleStrategy for BusySpin {
    #[inline(always)]
    fn idle_once(&mut self) {
        std::hint::spin_loop();
    }
}

/// Does nothing: a pure busy loop without even the spin hint.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoOp;

impl IdleStrategy for NoOp {
    #[inline(always)]
    fn idle_once(&mut self) {}
}

/// Yields the thread to the scheduler.
#[derive(Clone, Copy, Debug, Default)]
pub struct Yielding;

impl IdleStrategy for Yielding {
    fn idle_once(&mut self) {
        std::thread::yield_now();
    }
}

/// Sleeps a fixed period (default 1 µs; the OS rounds it up, often to ~50 µs).
#[derive(Clone, Copy, Debug)]
pub struct Sleeping(pub Duration);

impl Default for Sleeping {
    fn default() -> Self {
        Self(Duration::from_micros(1))
    }
}

impl IdleStrategy for Sleeping {
    fn idle_once(&mut self) {
        std::thread::sleep(self.0);
    }
}

/// Spins, then yields, then parks with a doubling period (agrona's `BackoffIdleStrategy`).
///
/// The first idle call after work only enters the spinning phase; then `max_spins` spins,
/// `max_yields` yields, one call to enter parking, then parks of `min_park`, doubling up to
/// `max_park`.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    /// Spins before yielding (default 10).
    pub max_spins: u32,
    /// Yields before parking (default 5).
    pub max_yields: u32,
    /// First park period (default 1 µs).
    pub min_park: Duration,
    /// Longest park period (default 1 ms).
    pub max_park: Duration,
    state: BackoffState,
    spins: u32,
    yields: u32,
    park: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BackoffState {
    NotIdle,
    Spinning,
    Yielding,
    Parking,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(10, 5, Duration::from_micros(1), Duration::from_millis(1))
    }
}

impl Backoff {
    /// A back-off with the given limits.
    pub fn new(max_spins: u32, max_yields: u32, min_park: Duration, max_park: Duration) -> Self {
        Self {
            max_spins,
            max_yields,
            min_park,
            max_park,
            state: BackoffState::NotIdle,
            spins: 0,
            yields: 0,
            park: min_park,
        }
    }

    /// What the next `idle_once` will do; for tests and diagnostics.
    fn step(&mut self) -> Step {
        match self.state {
            BackoffState::NotIdle => {
                self.state = BackoffState::Spinning;
                self.spins = 1;
                Step::Nothing
            }
            BackoffState::Spinning => {
                self.spins += 1;
                if self.spins > self.max_spins {
                    self.state = BackoffState::Yielding;
                    self.yields = 0;
                }
                Step::Spin
            }
            BackoffState::Yielding => {
                self.yields += 1;
                if self.yields > self.max_yields {
                    self.state = BackoffState::Parking;
                    self.park = self.min_park;
                    Step::Nothing
                } else {
                    Step::Yield
                }
            }
            BackoffState::Parking => {
                let d = self.park;
                self.park = (self.park * 2).min(self.max_park);
                Step::Park(d)
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Nothing,
    Spin,
    Yield,
    Park(Duration),
}

impl IdleStrategy for Backoff {
    fn idle_once(&mut self) {
        match self.step() {
            Step::Nothing => {}
            Step::Spin => std::hint::spin_loop(),
            Step::Yield => std::thread::yield_now(),
            Step::Park(d) => std::thread::sleep(d),
        }
    }

    fn reset(&mut self) {
        self.state = BackoffState::NotIdle;
        self.spins = 0;
        self.yields = 0;
        self.park = self.min_park;
    }
}

/// Retries `offer` while it is back-pressured or not connected, idling with `idle`, until
/// `deadline` (the `offer_with` of both publications).
pub(crate) fn offer_retrying(
    mut offer: impl FnMut() -> Result<i64, OfferError>,
    idle: &mut impl IdleStrategy,
    deadline: Instant,
) -> Result<i64, OfferError> {
    idle.reset();
    loop {
        match offer() {
            Err(e) if e.is_retryable() && Instant::now() < deadline => idle.idle(0),
            other => return other,
        }
    }
}

/// Waits, backing off, until `count()` reaches `want` or `timeout` passes ([`Error::Timeout`]).
pub(crate) fn wait_for_count(
    mut count: impl FnMut() -> usize,
    want: usize,
    timeout: Duration,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    let mut idle = Backoff::default();
    while count() < want {
        if Instant::now() >= deadline {
            return Err(Error::Timeout);
        }
        idle.idle(0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_spins_yields_then_parks_doubling_to_the_cap() {
        let mut b = Backoff::default();
        let steps: Vec<Step> = (0..30).map(|_| b.step()).collect();
        assert_eq!(steps[0], Step::Nothing, "entering the spin phase");
        assert!(steps[1..=10].iter().all(|s| *s == Step::Spin), "{steps:?}");
        assert!(steps[11..=15].iter().all(|s| *s == Step::Yield), "{steps:?}");
        assert_eq!(steps[16], Step::Nothing, "entering the park phase");
        let parks: Vec<u128> = steps[17..]
            .iter()
            .map(|s| match s {
                Step::Park(d) => d.as_micros(),
                other => panic!("expected park, got {other:?}"),
            })
            .collect();
        assert_eq!(&parks[..11], &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]);
        assert!(parks[11..].iter().all(|p| *p == 1000));
    }

    #[test]
    fn work_resets_backoff() {
        let mut b = Backoff::default();
        for _ in 0..40 {
            b.step();
        }
        b.idle(1);
        assert_eq!(b.step(), Step::Nothing);
        assert_eq!(b.step(), Step::Spin);
        assert_eq!(b.park, b.min_park);
    }
}
