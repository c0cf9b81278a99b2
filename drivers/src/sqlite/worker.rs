//! The lease thread: one connection and one `LeaseState`.
//!
//! It sleeps until the machine's `poll_timeout` (or a control message),
//! feeds the machine, and carries out its commands in order. It makes no
//! decision of its own.

use std::sync::{mpsc, Arc};

use picolease_core::sql::Bindings;
use picolease_core::{
    Command, Failure, HolderId, Instant, LeaseName, LeaseState, Operation, Reply,
};

use super::error::Error;
use super::gate::{Gate, Work};
use super::table::LeaseTable;
use super::watchdog::Watchdog;
use crate::metrics::Outcome;
use crate::publish::Publisher;

/// A closure run on the lease thread's connection, between statements.
pub(crate) type ConnectionJob = Box<dyn FnOnce(&rusqlite::Connection) + Send>;

/// Runs `job` on a driver thread's connection and waits for its result:
/// `send` hands the boxed job to the thread (false once it has stopped,
/// and then `None`). Both handles' `with_connection`.
pub(crate) fn run_on_connection<R: Send + 'static>(
    send: impl FnOnce(ConnectionJob) -> bool,
    job: impl FnOnce(&rusqlite::Connection) -> R + Send + 'static,
) -> Option<R> {
    let (tx, rx) = std::sync::mpsc::channel();
    let job: ConnectionJob = Box::new(move |conn| {
        let _ = tx.send(job(conn));
    });
    if !send(job) {
        return None;
    }
    rx.recv().ok()
}

/// What the handle asks of the thread.
pub(crate) enum Control {
    /// Stop the work, release, finish.
    Shutdown,
    /// Stop at once without releasing: a simulated crash.
    Abort,
    /// Run a closure on the connection.
    Run(ConnectionJob),
    /// Register gated work (started at once if leading).
    AddWork(Work),
    /// Another connection wrote to the database file (release
    /// notifications).
    FileChanged,
}

/// The lease thread's state.
pub(crate) struct Worker {
    pub(crate) lease: LeaseName,
    pub(crate) holder: HolderId,
    pub(crate) ttl_millis: i64,
    pub(crate) state: LeaseState,
    pub(crate) table: LeaseTable,
    pub(crate) watchdog: Watchdog,
    pub(crate) gate: Gate,
    pub(crate) publisher: Arc<Publisher>,
    /// The core's time zero, on the publisher's clock.
    pub(crate) origin: std::time::Duration,
    pub(crate) inbox: mpsc::Receiver<Control>,
    pub(crate) fatal: Option<Error>,
    /// How a follower hears of other connections' commits: the file watch
    /// (it sends [`Control::FileChanged`]) or a poll.
    pub(crate) changes: super::changes::ChangeSource,
    /// The last `PRAGMA data_version` seen by the change check.
    pub(crate) data_version: Option<i64>,
}

impl Worker {
    fn now(&self) -> Instant {
        let elapsed = self.publisher.now().saturating_sub(self.origin);
        Instant::from_nanos(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX))
    }

    /// The leader's deadline, handed to the publisher on its clock so gated
    /// work can read it without this thread.
    fn publish_deadline(&self) {
        let deadline = self
            .state
            .leader_deadline()
            .map(|at| self.origin + std::time::Duration::from_nanos(at.as_nanos()));
        self.publisher.set_deadline(deadline);
    }

    /// Runs until the machine finishes (or the handle aborts); returns the
    /// fatal error that finished it, if any.
    pub(crate) fn run(mut self) -> Result<(), Error> {
        let mut handle_gone = false;
        if self.changes.is_on() {
            // The baseline: the first commit after this one is a change.
            self.check_for_change();
        }
        self.state.handle_timeout(self.now());
        loop {
            self.carry_out();
            let Some(wake) = self.state.poll_timeout() else {
                break;
            };
            // Waits are measured on the monotonic clock, which stops during
            // suspend: a bounded wait re-reads the suspend-aware clock soon
            // after a resume.
            let wait = wake
                .saturating_duration_since(self.now())
                .min(crate::clock::LONGEST_WAIT);
            // A follower looks for another connection's commit this often.
            let checking = self.changes.poll.filter(|_| self.state.wants_changes());
            let wait = checking.map_or(wait, |every| wait.min(every));
            let control =
                super::thread::receive(&self.inbox, wait, &mut handle_gone, || Control::Shutdown);
            let now = self.now();
            match control {
                None => {
                    if checking.is_some() {
                        self.check_for_change();
                    }
                    self.state.handle_timeout(self.now());
                }
                Some(Control::Shutdown) => self.state.handle_shutdown(now),
                Some(Control::Run(job)) => {
                    job(self.table.connection());
                    self.state.handle_timeout(self.now());
                }
                Some(Control::FileChanged) => {
                    self.changes.taken();
                    if self.state.wants_changes() {
                        self.check_for_change();
                    }
                    self.state.handle_timeout(self.now());
                }
                Some(Control::AddWork(work)) => {
                    self.gate.add(work);
                    self.state.handle_timeout(now);
                }
                Some(Control::Abort) => {
                    tracing::warn!(lease = %self.lease, holder = %self.holder, "aborting without releasing the lease");
                    break;
                }
            }
        }
        self.publisher.set_deadline(None);
        self.gate.stop();
        self.gate.join_stopped();
        self.publisher.finish();
        match self.fatal.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Drains the machine's commands and carries them out in order; a
    /// statement's reply is fed back once the commands before it are done.
    fn carry_out(&mut self) {
        loop {
            // Before any command: gated work started below reads it.
            self.publish_deadline();
            let mut reply = None;
            while let Some(command) = self.state.poll_command() {
                match command {
                    Command::Execute { request, operation } => {
                        // Work of an ended term is gone before any statement.
                        self.gate.join_stopped();
                        let started = std::time::Instant::now();
                        let outcome = self.execute(operation);
                        // Before the reply counts: a stepped wall clock
                        // demotes first (DESIGN §4b).
                        self.read_db_clock();
                        reply = Some((request, operation, outcome, started));
                    }
                    // A synchronous statement has already returned.
                    Command::Cancel { .. } => {}
                    Command::StartWork { epoch } => {
                        self.gate.start(epoch);
                    }
                    Command::StopWork { .. } => self.gate.stop(),
                    Command::Publish(leadership) => {
                        tracing::info!(lease = %self.lease, holder = %self.holder, ?leadership, "leadership changed");
                        self.publisher.publish(leadership);
                    }
                    Command::Finished => {}
                }
            }
            let Some((request, operation, reply, started)) = reply else {
                return;
            };
            let accepted_renew = matches!(
                (operation, &reply),
                (Operation::Renew { .. }, Reply::Accepted)
            );
            self.state.handle_reply(self.now(), request, reply);
            if accepted_renew {
                self.publisher.record_renewal(started.elapsed());
            }
        }
    }

    /// Reads the database clock (the host's wall clock, as the lease
    /// statements see it) and lets the core compare its advance with the
    /// local clock's. A few microseconds; a failed read is skipped.
    fn read_db_clock(&mut self) {
        let sent = self.now();
        let Some(db_millis) = self.table.db_clock_millis() else {
            return;
        };
        let now = self.now();
        if self.state.handle_db_clock(now, sent, db_millis) {
            tracing::warn!(
                lease = %self.lease,
                holder = %self.holder,
                "the database clock (this host's wall clock) stepped by more than the drift allowance; a leader demotes (reason clock) and competes again"
            );
        }
    }

    /// The follower's change check (DESIGN §4): `PRAGMA data_version`
    /// (a few microseconds, no lock) tells whether another connection
    /// committed since the last check; only then is the lease's row read,
    /// and the core decides whether it is worth an acquire (free, lapsed or
    /// ours). Errors are ignored: the poll at the interval is the fallback.
    fn check_for_change(&mut self) {
        let Some(version) = self.table.change_counter() else {
            return;
        };
        let seen = self.data_version.replace(version);
        if seen.is_none_or(|seen| seen == version) {
            return;
        }
        match self.table.lease_row(&self.lease) {
            Ok(Some(row)) => {
                let now = self.now();
                self.state.handle_row_observed(now, &row);
            }
            Ok(None) => {}
            Err(error) => tracing::debug!(lease = %self.lease, "change check: {error}"),
        }
    }

    fn execute(&mut self, operation: Operation) -> Reply {
        let bindings = Bindings {
            lease: self.lease.as_str(),
            holder: self.holder.as_str(),
            ttl_millis: self.ttl_millis,
        };
        let started = std::time::Instant::now();
        // The deadline wins over I/O (DESIGN §4b): a leader's statement
        // waits for a lock, or runs, no longer than its deadline.
        let left = self
            .state
            .leader_deadline()
            .map(|deadline| deadline.saturating_duration_since(self.now()));
        let (reply, error) = {
            let _armed = self.watchdog.arm_until(left.map(|left| started + left));
            self.table
                .execute_within(operation, &bindings, &self.holder, left)
        };
        let outcome = statement_outcome(&reply, error.as_ref());
        self.publisher
            .record_statement(operation, started.elapsed(), outcome);
        if let Some(error) = error {
            match reply {
                Reply::Failed(Failure::Fatal) => {
                    tracing::error!(lease = %self.lease, ?operation, "{error}");
                    self.fatal = Some(error);
                }
                _ => tracing::warn!(lease = %self.lease, ?operation, "retrying after: {error}"),
            }
        }
        reply
    }
}

/// A statement's outcome for the metrics: interrupted by the watchdog
/// (past the request timeout) counts as a timeout.
fn statement_outcome(reply: &Reply, error: Option<&Error>) -> Outcome {
    match (reply, error) {
        (_, Some(Error::Sqlite { source, .. }))
            if source.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted) =>
        {
            Outcome::Timeout
        }
        (Reply::Failed(Failure::Fatal), _) => Outcome::Fatal,
        (Reply::Failed(Failure::Transient), _) => Outcome::Transient,
        _ => Outcome::Answered,
    }
}
