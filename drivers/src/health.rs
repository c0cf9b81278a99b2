//! A driver loop's health: when it last stepped and when the database
//! last answered it, the data behind `since_progress`, `since_success` and
//! "wedged". A lone lease's loop has its own; a set's one loop shares its
//! with the publisher of every lease it drives, so each lease of a set
//! reports the health of the loop that actually renews it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use picolease_core::SetConfig;

use crate::lock::lock;

/// The progress of the loop that drives a lease, for health checks: a
/// lone lease's own, or shared by every lease of a set (one loop).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Health {
    /// The loop's last step (a step of the core, or a statement's outcome).
    pub(crate) last_step: std::time::Instant,
    /// The last statement the database answered.
    pub(crate) last_success: Option<(std::time::Instant, SystemTime)>,
}

/// A loop's [`Health`], shared by the publishers of the leases it drives.
pub(crate) type SharedHealth = Arc<Mutex<Health>>;

impl Health {
    /// A loop that steps now and has had no answer yet.
    pub(crate) fn shared() -> SharedHealth {
        Arc::new(Mutex::new(Health {
            last_step: std::time::Instant::now(),
            last_success: None,
        }))
    }

    /// The loop's health now.
    pub(crate) fn read(health: &SharedHealth) -> Health {
        *lock(health)
    }

    /// The loop stepped; `answered` if a statement was answered.
    pub(crate) fn step(health: &SharedHealth, answered: bool) {
        let mut health = lock(health);
        let now = std::time::Instant::now();
        health.last_step = now;
        if answered {
            health.last_success = Some((now, SystemTime::now()));
        }
    }
}

/// How long the loop may go without a step before a health check calls it
/// wedged: a follower's poll (the interval), a statement and a timed-out
/// one (2 × request timeout), and the longest reconnect backoff (the
/// PostgreSQL driver's cap: the interval, at least 100 ms).
pub(crate) fn stall_after(config: &SetConfig) -> Duration {
    config.interval + config.request_timeout * 2 + config.interval.max(Duration::from_millis(100))
}
