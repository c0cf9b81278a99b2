//! Interrupts a statement that runs past its deadline.
//!
//! The busy timeout bounds waiting for a lock, but not a statement stuck
//! elsewhere (a slow disk, a huge checkpoint). The watchdog thread holds the
//! connection's `InterruptHandle` and interrupts the statement when its
//! deadline passes, so the lease loop is never blocked past the request
//! timeout.
//!
//! Arming costs a mutex and, in steady state, no wake-up: the watchdog
//! polls at a quarter of the timeout instead of being signalled per
//! statement (a signal per renew was a context switch that cost more than
//! the statement itself). So a statement is armed for three quarters of the
//! timeout, and is interrupted before the full timeout has passed.
//!
//! A statement may also be armed with an earlier instant, the leader's
//! deadline (DESIGN §4b: the deadline wins over I/O). When that instant
//! falls before the watchdog's next poll, arming wakes the thread, which
//! then sleeps exactly until it: the interruption lands at the deadline,
//! not up to a quarter of the timeout later.

use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Armed {
    /// The deadline of the statement running now.
    deadline: Option<Instant>,
    /// When the watchdog thread will look next (if it is waiting).
    next_poll: Option<Instant>,
    stop: bool,
}

type Shared = Arc<(Mutex<Armed>, Condvar)>;

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
        .0
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
    #[cfg(test)]
    pub(crate) fn arm(&self) -> ArmedGuard<'_> {
        self.arm_until(None)
    }

    /// Arms the watchdog for one statement that must also end by `limit`
    /// (the leader's deadline): interrupted at the earlier of three
    /// quarters of the timeout from now and `limit`.
    pub(crate) fn arm_until(&self, limit: Option<Instant>) -> ArmedGuard<'_> {
        let mut deadline = Instant::now() + self.timeout * 3 / 4;
        if let Some(limit) = limit {
            deadline = deadline.min(limit);
        }
        let mut armed = lock(&self.shared);
        armed.deadline = Some(deadline);
        if armed.next_poll.is_some_and(|poll| deadline < poll) {
            self.shared.1.notify_one();
        }
        ArmedGuard { watchdog: self }
    }
}

/// Opens the lease table for a driver (a lone lease's or a set's): its
/// busy timeout at most ¾ of the request timeout, and a watchdog on its
/// connection so that no statement outlives the request timeout.
pub(crate) fn open_watched(
    database: &mut super::open::Database,
    statements: picolease_core::sql::Statements,
    request_timeout: Duration,
) -> Result<(super::table::LeaseTable, Watchdog), super::error::SqliteError> {
    database.busy_timeout = database.busy_timeout.min(request_timeout * 3 / 4);
    let table = super::table::LeaseTable::open_running(database, statements)?;
    let watchdog = Watchdog::start(table.connection().get_interrupt_handle(), request_timeout)
        .map_err(|e| super::error::SqliteError::Spawn(e.to_string()))?;
    Ok((table, watchdog))
}

impl Drop for ArmedGuard<'_> {
    fn drop(&mut self) {
        lock(&self.watchdog.shared).deadline = None;
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        lock(&self.shared).stop = true;
        self.shared.1.notify_one();
    }
}

fn watch(shared: &Shared, handle: &rusqlite::InterruptHandle, period: Duration) {
    let mut armed = lock(shared);
    loop {
        if armed.stop {
            return;
        }
        let now = Instant::now();
        if armed.deadline.is_some_and(|deadline| now >= deadline) {
            tracing::warn!(
                "statement ran past the request timeout or the leader's deadline: interrupting it"
            );
            // Under the lock: the statement cannot be disarmed (and the next
            // one started) in between, and interrupting an idle connection
            // is a no-op.
            handle.interrupt();
            armed.deadline = None;
        }
        // The next regular poll, or the armed deadline if it comes first.
        let mut wake = now + period;
        if let Some(deadline) = armed.deadline {
            wake = wake.min(deadline);
        }
        armed.next_poll = Some(wake);
        armed = shared
            .1
            .wait_timeout(armed, wake.saturating_duration_since(now))
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .0;
        armed.next_poll = None;
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

    #[test]
    fn a_statement_armed_with_an_earlier_limit_is_interrupted_at_it() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        // Polls every 2.5 s: only the wake-up on arming can meet the limit.
        let watchdog =
            Watchdog::start(conn.get_interrupt_handle(), Duration::from_secs(10)).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let started = Instant::now();
        let limit = started + Duration::from_millis(100);
        let result = {
            let _armed = watchdog.arm_until(Some(limit));
            conn.query_row(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
                [],
                |row| row.get::<_, i64>(0),
            )
        };
        let late = Instant::now().saturating_duration_since(limit);
        eprintln!("interrupted {late:?} after the limit");
        assert_eq!(
            result.unwrap_err().sqlite_error_code(),
            Some(rusqlite::ErrorCode::OperationInterrupted)
        );
        assert!(late < Duration::from_millis(500), "{late:?}");
    }
}
