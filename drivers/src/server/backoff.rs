//! How long a driver waits before connecting again: capped, jittered,
//! doubling per consecutive failure; and the one reconnection both server
//! links use ([`Reconnect`]).

use std::collections::hash_map::RandomState;
use std::fmt::Display;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// The longest wait between reconnects for `config`: the interval, at
/// least 100 ms (the bound `publish::stall_after` counts with).
pub(crate) fn backoff_cap(config: &picolease_core::SetConfig) -> Duration {
    config.interval.max(Duration::from_millis(100))
}

/// The first reconnect waits about this long; each failure doubles it.
const BACKOFF_BASE: Duration = Duration::from_millis(50);

/// Consecutive connection failures, turned into a wait before the next
/// attempt: `min(cap, base · 2^(n−1))`, scaled by a random factor in
/// [½, 1] so that contenders that lost the database together do not all
/// come back in the same millisecond.
#[derive(Debug)]
pub(crate) struct Backoff {
    pub(crate) failures: u32,
    cap: Duration,
    /// Earliest start of the next attempt, drawn when the last one failed.
    retry_at: Option<Instant>,
    pub(crate) last_reason: String,
}

impl Backoff {
    pub(crate) fn new(cap: Duration) -> Self {
        Backoff {
            failures: 0,
            cap,
            retry_at: None,
            last_reason: String::new(),
        }
    }

    /// The wait after `failures` consecutive failures, given a random
    /// `draw`: `min(cap, base · 2^(failures−1))`, scaled into [½, 1].
    pub(crate) fn delay(&self, draw: u64) -> Duration {
        let exp = BACKOFF_BASE.saturating_mul(1 << self.failures.saturating_sub(1).min(16));
        let factor = 0.5 + (draw % 1001) as f64 / 2000.0;
        exp.min(self.cap).mul_f64(factor)
    }

    /// When the next connection attempt may start (`None`: at once).
    pub(crate) fn next_attempt(&self) -> Option<Instant> {
        self.retry_at
    }

    pub(crate) fn failed(&mut self, reason: String) {
        self.failures = self.failures.saturating_add(1);
        // RandomState is seeded from the operating system's entropy: a
        // fresh draw per failure, so contenders that lost the database
        // together do not come back in the same millisecond.
        let draw = RandomState::new().build_hasher().finish();
        self.retry_at = Some(Instant::now() + self.delay(draw));
        self.last_reason = reason;
    }

    pub(crate) fn succeeded(&mut self) {
        self.failures = 0;
        self.retry_at = None;
    }
}

/// A statement link's reconnection, the same for PostgreSQL and MySQL:
/// wait out the backoff (or say it runs past the statement's deadline),
/// connect within the deadline, create the table on the first connection
/// when asked, and count the outcome in the backoff.
pub(crate) struct Reconnect {
    state: Mutex<(Backoff, bool)>,
}

impl Reconnect {
    pub(crate) fn new(cap: Duration) -> Self {
        Reconnect {
            state: Mutex::new((Backoff::new(cap), false)),
        }
    }

    fn state(&self) -> MutexGuard<'_, (Backoff, bool)> {
        // Each critical section is one update: poisoning cannot leave the
        // state inconsistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A failure of the session that counts towards the backoff.
    pub(crate) fn failed(&self, reason: String) {
        self.state().0.failed(reason);
    }

    /// Connects with `attempt`, told whether the table was already found
    /// or created on an earlier connection, once the backoff allows and
    /// by `deadline`. Past it, `timed_out`; a backoff that ends after it,
    /// `backing_off` with the reason.
    pub(crate) async fn connect<T, E, F>(
        &self,
        deadline: Instant,
        attempt: impl FnOnce(bool) -> F,
        backing_off: impl FnOnce(String) -> E,
        timed_out: impl FnOnce() -> E,
    ) -> Result<T, E>
    where
        E: Display,
        F: Future<Output = Result<T, E>>,
    {
        let (wait_until, table_ready) = {
            let state = self.state();
            (state.0.next_attempt(), state.1)
        };
        if let Some(at) = wait_until {
            if at >= deadline {
                let state = self.state();
                return Err(backing_off(format!(
                    "backing off for {:?} after {} failed attempts (last: {})",
                    at.saturating_duration_since(Instant::now()),
                    state.0.failures,
                    state.0.last_reason
                )));
            }
            tokio::time::sleep_until(at).await;
        }
        let outcome = match tokio::time::timeout_at(deadline, attempt(table_ready)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(timed_out()),
        };
        let mut state = self.state();
        match &outcome {
            Ok(_) => {
                state.0.succeeded();
                state.1 = true;
            }
            Err(e) => {
                tracing::warn!(error = %e, "picolease: could not connect");
                state.0.failed(e.to_string());
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter_in_the_upper_half() {
        let mut backoff = Backoff::new(Duration::from_millis(500));
        let mut expected = BACKOFF_BASE;
        for failures in 1..=8 {
            backoff.failures = failures;
            let (low, high) = (backoff.delay(0), backoff.delay(1000));
            assert_eq!(high, expected.min(Duration::from_millis(500)));
            assert_eq!(low, high / 2);
            expected *= 2;
        }
        backoff.failures = u32::MAX;
        assert_eq!(backoff.delay(1000), Duration::from_millis(500));
    }
}
