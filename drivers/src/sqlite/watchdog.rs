//! Interrupts a statement that runs past the request timeout.
//!
//! The busy timeout bounds waiting for a lock, but not a statement stuck
//! elsewhere (a slow disk, a huge checkpoint). The watchdog thread holds the
//! connection's `InterruptHandle` and interrupts the statement when its
//! deadline passes, so the lease loop is never blocked past the timeout.

use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Armed {
    /// The deadline of the statement running now, with its sequence number.
    deadline: Option<(Instant, u64)>,
    next: u64,
    stop: bool,
}

type Shared = Arc<(Mutex<Armed>, Condvar)>;

/// The watchdog of one connection. Dropping it stops its thread.
pub(crate) struct Watchdog {
    shared: Shared,
}

/// Disarms the watchdog when the statement returns.
pub(crate) struct ArmedGuard<'a> {
    watchdog: &'a Watchdog,
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Armed> {
    shared
        .0
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Watchdog {
    /// Starts the watchdog thread for `handle`.
    pub(crate) fn start(handle: rusqlite::InterruptHandle) -> std::io::Result<Self> {
        let shared: Shared = Arc::default();
        let theirs = Arc::clone(&shared);
        thread::Builder::new()
            .name("picolease-watchdog".into())
            .spawn(move || watch(&theirs, &handle))?;
        Ok(Watchdog { shared })
    }

    /// Arms the watchdog for a statement that must finish within `timeout`.
    pub(crate) fn arm(&self, timeout: Duration) -> ArmedGuard<'_> {
        let mut armed = lock(&self.shared);
        armed.next += 1;
        armed.deadline = Some((Instant::now() + timeout, armed.next));
        self.shared.1.notify_all();
        ArmedGuard { watchdog: self }
    }
}

impl Drop for ArmedGuard<'_> {
    fn drop(&mut self) {
        lock(&self.watchdog.shared).deadline = None;
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        lock(&self.shared).stop = true;
        self.shared.1.notify_all();
    }
}

fn watch(shared: &Shared, handle: &rusqlite::InterruptHandle) {
    let mut armed = lock(shared);
    loop {
        if armed.stop {
            return;
        }
        match armed.deadline {
            None => {
                armed = shared.1.wait(armed).unwrap_or_else(|p| p.into_inner());
            }
            Some((deadline, seq)) => {
                let now = Instant::now();
                if now >= deadline {
                    tracing::warn!("statement ran past the request timeout: interrupting it");
                    handle.interrupt();
                    // Once per statement.
                    if armed.deadline == Some((deadline, seq)) {
                        armed.deadline = None;
                    }
                } else {
                    armed = shared
                        .1
                        .wait_timeout(armed, deadline - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
    }
}
