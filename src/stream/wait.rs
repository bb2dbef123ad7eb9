//! Sleeping until one of several followers is readable: their doorbells at once, their
//! publishers' liveness checked when due, new sessions looked at when a bell rings without news.

use super::doorbell::{self, Rung, WakeBudget};
use super::follow::Follower;
use std::time::{Duration, Instant};

/// Waits until one of `followers` is readable or `timeout` passes; `true` if one is.
pub(crate) fn wait_any(followers: &mut [&mut Follower], timeout: Duration) -> bool {
    let deadline = Instant::now().checked_add(timeout);
    let mut budget = WakeBudget::default();
    loop {
        if followers.iter().any(|f| f.readable()) {
            return true;
        }
        let now = Instant::now();
        let mut chunk = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
        let timed_out = chunk.is_zero();
        for f in followers.iter_mut() {
            // Before the timeout: a zero timeout still learns that a publisher died.
            let next = f.check_if_due(now);
            chunk = chunk.min(next.saturating_duration_since(now));
        }
        if followers.iter().any(|f| f.readable()) {
            return true;
        }
        if timed_out {
            return false;
        }
        let bells: Vec<_> = followers.iter().map(|f| f.bell()).collect();
        let slept = doorbell::sleep_until(&bells, || followers.iter().any(|f| f.readable()), chunk);
        if slept.rung != Rung::Woken {
            continue;
        }
        let news = followers.iter().any(|f| f.readable());
        if !news {
            // Rung without news for us: a new session (look now), or a spurious wake-up.
            for (i, f) in followers.iter_mut().enumerate() {
                if slept.rang & (1 << i.min(63)) != 0 {
                    f.after_empty_wake();
                }
            }
        }
        if let Some(nap) = budget.after_wake(news) {
            std::thread::sleep(nap);
        }
    }
}
