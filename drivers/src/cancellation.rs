//! The stop signal of gated work that runs on its own threads (the SQLite
//! driver's terms, and every lease set's work): set once, never cleared,
//! waited on with a condition variable.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The cancellation signal of one term: set once, never cleared.
#[derive(Clone, Debug, Default)]
pub struct Cancellation {
    inner: Arc<(Mutex<bool>, Condvar)>,
}

impl Cancellation {
    fn lock(&self) -> std::sync::MutexGuard<'_, bool> {
        self.inner.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Signals the work to stop.
    pub fn cancel(&self) {
        *self.lock() = true;
        self.inner.1.notify_all();
    }

    /// True once the work should stop.
    pub fn is_cancelled(&self) -> bool {
        *self.lock()
    }

    /// Blocks until cancelled or `timeout` passes; true if cancelled. A
    /// work loop sleeps between rounds with this, so it stops at once.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut cancelled = self.lock();
        while !*cancelled {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            cancelled = self
                .inner
                .1
                .wait_timeout(cancelled, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// Blocks until cancelled.
    pub fn wait(&self) {
        let mut cancelled = self.lock();
        while !*cancelled {
            cancelled = self
                .inner
                .1
                .wait(cancelled)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}
