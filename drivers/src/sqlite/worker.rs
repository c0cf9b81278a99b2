//! The SQLite driver's one loop: one thread, one connection, one
//! statement at a time, for a lone lease and for a set alike.
//!
//! It sleeps until the engine's next timeout (or a control message),
//! feeds the engine through its [`Runner<Gate>`], and runs the statement the
//! engine asks for on its connection, the busy wait cut and the watchdog
//! armed to the statement's `end_by`. It makes no decision of its own.

use std::time::Duration;

use picolease_core::sql::Bindings;
use picolease_core::{Failure, LeaseName};

use super::changes::ChangeSource;
use super::error::SqliteError;
use super::gate::Gate;
use super::inbox::Local;
use super::table::LeaseTable;
use super::watchdog::Watchdog;
use crate::metrics::Outcome;
use crate::runner::{Answer, Execute, Input, Obeyed, Ran, Runner, Statement};

/// The loop's connection and the watchdog that interrupts its statements.
pub(crate) struct Connection {
    pub(crate) table: LeaseTable,
    pub(crate) watchdog: Watchdog,
}

impl Connection {
    /// Runs one statement the engine asked for, ending by its `end_by`
    /// (the busy wait cut to it, the watchdog armed for it: the deadline
    /// wins over I/O, DESIGN §4b), then reads the database clock for the
    /// engine's clock-step check before the answer counts. Returns the
    /// fatal error a failed statement ended the loop with, if any.
    fn execute(&self, runner: &mut Runner<Gate>, execute: Execute) -> Option<SqliteError> {
        let Execute {
            request,
            statement,
            end_by,
        } = execute;
        let config = runner.engine.config();
        let (me, ttl_millis) = (config.holder.clone(), config.ttl_millis());
        let reservation_millis = config.reservation_millis();
        let stale_millis = runner.engine.stale_millis();
        let left = end_by.map(|end_by| runner.time_until(end_by));
        let started = std::time::Instant::now();
        let (answer, error) = match &statement {
            Statement::Row(operation) => {
                // Work of an ended term is gone before a lone lease's next
                // statement (its release, on shutdown). A set's hand-over
                // waited for its own lease's work in the core, and waits
                // for no other.
                if !runner.engine.is_set() {
                    for gate in runner.gates() {
                        gate.join_stopped();
                    }
                    runner.reap();
                }
                let lease = runner.engine.row_lease().cloned();
                let successor = runner.engine.successor();
                let bindings = Bindings {
                    lease: lease.as_ref().map_or("", LeaseName::as_str),
                    holder: me.as_str(),
                    ttl_millis,
                    successor,
                    reservation_millis,
                    candidacy: runner.engine.announcement(),
                };
                let _armed = self.watchdog.arm_until(left.map(|left| started + left));
                let (reply, error) = self.table.execute_within(*operation, &bindings, &me, left);
                (Answer::Row(reply), error)
            }
            Statement::Batch(batch) => {
                let left = left.unwrap_or(config_timeout(runner));
                let _armed = self.watchdog.arm_until(Some(started + left));
                let (reply, error) =
                    self.table
                        .execute_batch(batch, &me, ttl_millis, stale_millis, left);
                (Answer::Batch(reply), error)
            }
        };
        let failure = match &answer {
            Answer::Row(picolease_core::Reply::Failed(failure))
            | Answer::Batch(picolease_core::BatchReply::Failed(failure)) => Some(*failure),
            _ => None,
        };
        let outcome = statement_outcome(failure, error.as_ref());
        let mut fatal = None;
        if let Some(error) = error {
            if failure == Some(Failure::Fatal) {
                tracing::error!(statement = ?Ran::of(&statement), "{error}");
                fatal = Some(error);
            } else {
                tracing::warn!(statement = ?Ran::of(&statement), "retrying after: {error}");
            }
        }
        let sent = runner.now();
        if let Some(db_millis) = self.table.db_clock_millis() {
            let now = runner.now();
            if runner.engine.handle_db_clock(now, sent, db_millis) {
                tracing::warn!(
                    holder = %me,
                    "the database clock (this host's wall clock) stepped by more than the drift allowance; every held lease demotes (reason clock) and competes again"
                );
            }
        }
        runner.reply(request, answer, outcome);
        fatal
    }
}

/// The request timeout of the runner's engine.
fn config_timeout(runner: &Runner<Gate>) -> Duration {
    runner.engine.config().request_timeout
}

/// Runs the loop until the engine finishes (or a handle aborts); returns
/// the fatal error that finished it, if any.
pub(crate) fn run(
    mut runner: Runner<Gate>,
    connection: Connection,
    mut inbox: super::inbox::Inbox,
    changes: ChangeSource,
) -> Result<(), SqliteError> {
    let me = runner.engine.config().holder.clone();
    let mut fatal = None;
    let mut data_version: Option<i64> = None;
    if changes.is_on() {
        // The baseline: the first commit after this one is a change.
        data_version = connection.table.change_counter();
    }
    // A file event whose check found no commit yet: look again shortly.
    let mut recheck = Recheck::default();
    let mut was_watching = false;
    runner.handle(Input::Timeout);
    loop {
        // A synchronous statement has returned (or been interrupted)
        // before the engine can give up on it: there is never one to
        // cancel.
        while let Some(execute) = runner.carry_out().execute {
            if let Some(error) = connection.execute(&mut runner, execute) {
                fatal = Some(error);
            }
        }
        if runner.engine.is_finished() {
            break;
        }
        // Watching starts: the events of a commit published since the
        // last look were drained unread (`inbox.rs`), and it may send no
        // later one, so look soon, as after an event that found nothing.
        if runner.watching() && !was_watching && changes.is_on() {
            recheck.after_check(true, false);
        }
        was_watching = runner.watching();
        // Without a file watch, a node the core has asked to watch (it can
        // use a release) polls the change counter this often.
        let polling = changes.poll.filter(|_| runner.watching());
        // Waits are measured on the monotonic clock, which stops during
        // suspend: a bounded wait re-reads the suspend-aware clock soon
        // after a resume.
        let wait = runner
            .wait()
            .unwrap_or(crate::clock::LONGEST_WAIT)
            .min(crate::clock::LONGEST_WAIT);
        let wait = polling.map_or(wait, |every| wait.min(every));
        let wait = recheck.wait().map_or(wait, |soon| wait.min(soon));
        let control = inbox.receive(wait, &changes, runner.watching());
        let mut file_changed = false;
        match control.map(|control| runner.obey(control)) {
            Some(Obeyed::Loop(Local::FileChanged)) => file_changed = true,
            Some(Obeyed::Loop(Local::Run(job))) => job(connection.table.connection()),
            Some(Obeyed::Abort) => {
                tracing::warn!(holder = %me, "aborting without releasing");
                break;
            }
            Some(Obeyed::Done) | None => {}
        }
        runner.reap();
        let rechecking = recheck.due();
        if (polling.is_some() || file_changed || rechecking) && runner.watching() {
            let changed = check_for_change(&mut runner, &connection.table, &mut data_version);
            recheck.after_check(file_changed, changed);
        } else if rechecking {
            recheck = Recheck::default();
        }
        runner.handle(Input::Timeout);
    }
    runner.stop_all();
    while !runner.has_stopped() {
        std::thread::sleep(Duration::from_millis(1));
    }
    runner.finish();
    match fatal {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// The change check (DESIGN §4): `PRAGMA data_version` (a few
/// microseconds, no lock) tells whether another connection committed
/// since the last check; only then does the engine hear of it (a lone
/// lease with its row, read here; a set surveys). Errors are ignored: the
/// engine's own timeouts are the fallback.
/// Returns whether another connection had committed.
fn check_for_change(
    runner: &mut Runner<Gate>,
    table: &LeaseTable,
    data_version: &mut Option<i64>,
) -> bool {
    let Some(version) = table.change_counter() else {
        return false;
    };
    if data_version
        .replace(version)
        .is_none_or(|seen| seen == version)
    {
        return false;
    }
    let row = runner
        .engine
        .watched_row()
        .and_then(|lease| match table.lease_row(lease) {
            Ok(row) => row,
            Err(error) => {
                tracing::debug!(lease = %lease, "change check: {error}");
                None
            }
        });
    runner.handle(Input::Changed(row));
    true
}

/// A writer in WAL mode appends its commit to the `-wal` file (the write
/// the file watch sees) before it publishes it in the shared-memory index
/// (which no watch sees), so a check right after the event can find
/// `data_version` unchanged; a release that closes no connection (a
/// planned handover, a set's) sends no later event. So a file event whose
/// check found nothing is checked again after 50 µs, 250 µs, 1 ms and
/// 5 ms (measured: `bench`'s planned handover on SQLite waited for the
/// next 100 ms poll in a few rounds of ten without rechecks; the loop's
/// thread waits on the watch itself and so often looks while the commit
/// is still being written, which the earliest recheck catches: the event
/// to the publication took tens of microseconds in a trace of `bench`).
#[derive(Debug, Default)]
struct Recheck {
    /// When to check again, and how many checks are left after it.
    at: Option<(std::time::Instant, u8)>,
}

impl Recheck {
    const DELAYS: [Duration; 4] = [
        Duration::from_micros(50),
        Duration::from_micros(250),
        Duration::from_millis(1),
        Duration::from_millis(5),
    ];

    /// How long until the next recheck, if one is planned.
    fn wait(&self) -> Option<Duration> {
        self.at
            .map(|(at, _)| at.saturating_duration_since(std::time::Instant::now()))
    }

    /// True when a planned recheck is due now.
    fn due(&self) -> bool {
        self.at
            .is_some_and(|(at, _)| std::time::Instant::now() >= at)
    }

    /// After a check: a file event that found nothing plans the first
    /// recheck; a recheck that found nothing plans the next, if any; a
    /// change ends it.
    fn after_check(&mut self, file_event: bool, changed: bool) {
        let next = match (changed, file_event, self.at) {
            (true, _, _) => None,
            (false, true, _) => Some(0),
            (false, false, Some((at, n))) if std::time::Instant::now() >= at => Some(n + 1),
            (false, false, keep) => {
                self.at = keep;
                return;
            }
        };
        self.at = next
            .and_then(|n| Self::DELAYS.get(usize::from(n)).map(|d| (n, *d)))
            .map(|(n, d)| (std::time::Instant::now() + d, n));
    }
}

/// A statement's outcome for the metrics: interrupted by the watchdog
/// (past its end) counts as a timeout.
fn statement_outcome(failure: Option<Failure>, error: Option<&SqliteError>) -> Outcome {
    match (failure, error) {
        (_, Some(SqliteError::Sqlite { source, .. }))
            if source.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted) =>
        {
            Outcome::Timeout
        }
        (Some(Failure::Fatal), _) => Outcome::Fatal,
        (Some(Failure::Transient), _) => Outcome::Transient,
        (None, _) => Outcome::Answered,
    }
}
