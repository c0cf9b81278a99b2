//! Interrupts a statement that runs past its deadline.
//!
//! The busy timeout bounds waiting for a lock, but not a statement stuck
//! elsewhere (a slow disk, a huge checkpoint). The watchdog thread holds the
//! connection's `InterruptHandle` and interrupts the statement when its
//! deadline passes, so the lease loop is never blocked past the request
//! timeout.
//!
//! Arming costs a mutex and no wake-up: the watchdog polls at a quarter of
//! the timeout instead of being signalled per statement (a signal per renew
//! was a context switch that cost more than the statement itself). So a
//! statement is armed for three quarters of the timeout, and is interrupted
//! before the full timeout has passed.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Armed {
    /// The deadline of the statement running now.
    deadline: Option<Instant>,
    stop: bool,
}

type Shared = Arc<Mutex<Armed>>;

/// The watchdog of one connection. Dropping it stops its thread (at its
/// next poll).
pub(crate) struct Watchdog {
    shared: Shared,
    timeout: Duration,
}

/// Disarms the watchdog when the statement returns.
pub(crate) struct ArmedGuard<'a> {
    watchdog: &'a Watchdog,
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Armed> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Watchdog {
    /// Starts the watchdog thread for `handle`; no statement will outlive
    /// `timeout`.
    pub(crate) fn start(
        handle: rusqlite::InterruptHandle,
        timeout: Duration,
    ) -> std::io::Result<Self> {
        let shared: Shared = Arc::default();
        let theirs = Arc::clone(&shared);
        let period = (timeout / 4).max(Duration::from_millis(1));
        thread::Builder::new()
            .name("picolease-watchdog".into())
            .spawn(move || watch(&theirs, &handle, period))?;
        Ok(Watchdog { shared, timeout })
    }

    /// Arms the watchdog for one statement.
    pub(crate) fn arm(&self) -> ArmedGuard<'_> {
        lock(&self.shared).deadline = Some(Instant::now() + self.timeout * 3 / 4);
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
    }
}

fn watch(shared: &Shared, handle: &rusqlite::InterruptHandle, period: Duration) {
    loop {
        thread::sleep(period);
        let mut armed = lock(shared);
        if armed.stop {
            return;
        }
        if armed
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            tracing::warn!("statement ran past the request timeout: interrupting it");
            // Under the lock: the statement cannot be disarmed (and the next
            // one started) in between, and interrupting an idle connection
            // is a no-op.
            handle.interrupt();
            armed.deadline = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runaway_statement_is_interrupted_before_the_timeout() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let timeout = Duration::from_millis(200);
        let watchdog = Watchdog::start(conn.get_interrupt_handle(), timeout).unwrap();
        let started = Instant::now();
        let result = {
            let _armed = watchdog.arm();
            // Counts forever unless interrupted.
            conn.query_row(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
                [],
                |row| row.get::<_, i64>(0),
            )
        };
        let error = result.unwrap_err();
        assert_eq!(
            error.sqlite_error_code(),
            Some(rusqlite::ErrorCode::OperationInterrupted)
        );
        assert!(
            started.elapsed() < timeout + Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        // The connection works again for the next statement.
        let one: i64 = conn.query_row("SELECT 1", [], |row| row.get(0)).unwrap();
        assert_eq!(one, 1);
    }
}
