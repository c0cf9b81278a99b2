//! A lease set on SQLite (DESIGN §9): one thread, one connection, one
//! statement at a time, whatever the number of leases.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use picolease_core::sql::{Dialect, Statements};
use picolease_core::{BatchReply, Config, Failure, LeaseName, LeaseSet};

use super::changes::ChangeSource;
use super::error::Error;
use super::fence::Fence;
use super::gate::{Gate, LeaderContext, Work};
use super::open::Database;
use super::options::{sqlite_option_methods, SqliteOptions};
use super::table::LeaseTable;
use super::thread::DriverThread;
use super::watchdog::Watchdog;
use super::worker::{run_on_connection, ConnectionJob};
use crate::set::{Execute, SetRunner, SetView};
use crate::subscription::{Fanout, Subscription};

/// The runner of a SQLite set: each lease's work behind a lone lease's
/// gate.
type Runner = SetRunner<Gate>;

enum Control {
    Shutdown,
    Abort,
    GiveUp(LeaseName),
    /// Register work on every lease (started at once where held).
    AddWork(Work),
    /// Run a closure on the connection, between two batches.
    Run(ConnectionJob),
    /// Another connection wrote to the database file (the file watch).
    FileChanged,
}

/// Builds a [`SqliteLeaseSet`]: `SqliteLeaseSet::builder(template, leases,
/// database)`, optional work, then `start()`.
pub struct SqliteLeaseSetBuilder {
    template: Config,
    leases: Vec<LeaseName>,
    database: Database,
    options: SqliteOptions,
    fanout: Arc<Fanout>,
}

impl SqliteLeaseSetBuilder {
    sqlite_option_methods!();

    /// Every lease's leadership changes from the start on, in order
    /// ([`SetView::subscribe`]).
    pub fn subscribe(&self) -> Subscription {
        self.fanout.subscribe()
    }

    /// `lease`'s leadership changes from the start on, in order, as a lone
    /// lease's builder's `subscribe()`; `None` for a lease outside the set.
    pub fn subscribe_to(&self, lease: &LeaseName) -> Option<Subscription> {
        self.leases
            .contains(lease)
            .then(|| self.fanout.subscribe_to(Some(lease.clone())))
    }

    /// Validates the set, opens the database (creating the file and table
    /// if allowed) and starts the set's thread.
    pub fn start(self) -> Result<SqliteLeaseSet, Error> {
        let SqliteLeaseSetBuilder {
            template,
            leases,
            mut database,
            options,
            fanout,
        } = self;
        let set = LeaseSet::new(template.clone(), leases, picolease_core::Instant::ZERO)?;
        let (table, watchdog) =
            super::watchdog::open_watched(&mut database, template.request_timeout)?;
        let (control, inbox) = mpsc::channel();
        let statements = Arc::new(Statements::new(Dialect::Sqlite, &database.table));
        let holder = template.holder.clone();
        let clock = Arc::clone(&options.clock);
        let (runner, outputs) = SetRunner::new(set, clock, fanout, |lease, publisher| {
            let mut gate = Gate::new(
                Arc::clone(publisher),
                Arc::clone(&statements),
                lease.clone(),
                holder.clone(),
            );
            options.add_works_to(&mut gate);
            gate
        });
        let connection = Connection { table, watchdog };
        let waker = control.clone();
        let changes = ChangeSource::start(options.notices, &database.location, move || {
            waker.send(Control::FileChanged).is_ok()
        });
        let thread = DriverThread::spawn("picolease-set".into(), "lease set".into(), move || {
            run(runner, connection, inbox, changes)
        })?;
        Ok(SqliteLeaseSet {
            statements,
            control,
            thread,
            outputs,
        })
    }
}

/// One node contending for a set of leases on SQLite, with a fair share
/// between the live nodes. Made with [`SqliteLeaseSet::builder`].
///
/// Dropping the handle asks for a shutdown and waits for it at most a ttl.
pub struct SqliteLeaseSet {
    statements: Arc<Statements>,
    control: mpsc::Sender<Control>,
    thread: DriverThread,
    outputs: SetView,
}

impl SqliteLeaseSet {
    /// A set of `leases` contended with the timings and holder id of
    /// `template` (its lease name is not used).
    pub fn builder(
        template: Config,
        leases: Vec<LeaseName>,
        database: Database,
    ) -> SqliteLeaseSetBuilder {
        SqliteLeaseSetBuilder {
            fanout: Arc::new(Fanout::for_leases(leases.len())),
            template,
            leases,
            database,
            options: SqliteOptions::default(),
        }
    }

    /// The fence of `lease`'s current term, if this node leads it (as a
    /// lone lease's [`super::SqliteLease::fence`]).
    pub fn fence(&self, lease: &LeaseName) -> Option<Fence> {
        let epoch = self.leadership(lease)?.leader_epoch()?;
        Some(Fence::new(&self.statements, lease, self.holder(), epoch))
    }

    /// Registers more work, like [`SqliteLeaseSetBuilder::while_leader`],
    /// as a lone lease's handle does: it starts at once in the current
    /// term of every lease this node leads, and in every later term.
    pub fn while_leader(&self, work: impl Fn(LeaderContext) + Send + Sync + 'static) {
        let _ = self.control.send(Control::AddWork(Arc::new(work)));
    }

    /// Gives `lease` up (its work stops, then it is released); this node
    /// keeps contending, and does not take it back for a ttl.
    pub fn give_up(&self, lease: &LeaseName) {
        let _ = self.control.send(Control::GiveUp(lease.clone()));
    }

    /// Runs `job` on the set thread's own connection, between two batches,
    /// and returns its result (`None` if the thread has stopped), as a lone
    /// lease's [`super::SqliteLease::with_connection`]. The set's loop
    /// waits for it: keep it short. Meant for measurements and diagnostics
    /// (e.g. timing a bare statement on the very connection the set
    /// renews through).
    pub fn with_connection<R: Send + 'static>(
        &self,
        job: impl FnOnce(&rusqlite::Connection) -> R + Send + 'static,
    ) -> Option<R> {
        run_on_connection(|job| self.control.send(Control::Run(job)).is_ok(), job)
    }

    /// True once the set's thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Stops every lease's work, releases every held lease and the
    /// membership row, and waits for the thread.
    pub fn shutdown(mut self) -> Result<(), Error> {
        self.thread.stop(&self.control, Control::Shutdown)
    }

    /// Stops at once without releasing anything, as a crash would.
    pub fn abort(mut self) {
        let _ = self.thread.stop(&self.control, Control::Abort);
    }
}

/// What the set publishes, per lease and as a whole: [`SetView`].
impl std::ops::Deref for SqliteLeaseSet {
    type Target = SetView;
    fn deref(&self) -> &SetView {
        &self.outputs
    }
}

impl Drop for SqliteLeaseSet {
    fn drop(&mut self) {
        if self.thread.is_joinable() {
            let _ = self.control.send(Control::Shutdown);
            let until = std::time::Instant::now() + self.outputs.config().ttl;
            while !self.thread.is_finished() && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            if self.thread.is_finished() {
                let _ = self.thread.join();
            }
        }
    }
}

/// The set's connection and the watchdog that interrupts its statements.
struct Connection {
    table: LeaseTable,
    watchdog: Watchdog,
}

impl Connection {
    /// Runs one batch the set asked for, ending by its `end_by` (the busy
    /// wait cut to it, the watchdog armed for it: the deadline wins over
    /// I/O, as for a lone lease's renew), then reads the database clock
    /// for the set's clock-step check before the reply counts. Returns
    /// the fatal error a failed batch ended the set with, if any.
    fn execute(&self, runner: &mut Runner, execute: Execute) -> Option<Error> {
        let Execute {
            request,
            batch,
            end_by,
        } = execute;
        let config = runner.set.config();
        let (me, ttl_millis) = (config.holder.clone(), config.ttl_millis());
        let stale_millis = runner.set.stale_millis();
        let left = runner.time_until(end_by);
        let started = std::time::Instant::now();
        let (reply, error) = {
            let _armed = self.watchdog.arm_until(Some(started + left));
            self.table
                .execute_batch(&batch, &me, ttl_millis, stale_millis, left)
        };
        let mut fatal = None;
        if let Some(error) = error {
            match reply {
                BatchReply::Failed(Failure::Fatal) => {
                    tracing::error!(kind = ?batch.kind, "{error}");
                    fatal = Some(error);
                }
                _ => tracing::warn!(kind = ?batch.kind, "retrying after: {error}"),
            }
        }
        let sent = runner.now();
        if let Some(db_millis) = self.table.db_clock_millis() {
            let now = runner.now();
            if runner.set.handle_db_clock(now, sent, db_millis) {
                tracing::warn!(
                    holder = %me,
                    "the database clock (this host's wall clock) stepped by more than the drift allowance; every held lease demotes (reason clock) and competes again"
                );
            }
        }
        runner.reply(request, batch.kind, reply);
        fatal
    }
}

fn run(
    mut runner: Runner,
    connection: Connection,
    inbox: mpsc::Receiver<Control>,
    changes: ChangeSource,
) -> Result<(), Error> {
    let me = runner.set.config().holder.clone();
    let mut fatal = None;
    let mut data_version: Option<i64> = None;
    let mut handle_gone = false;
    let now = runner.now();
    runner.set.handle_timeout(now);
    loop {
        // A synchronous batch has returned (or been interrupted) before
        // the set can give up on it: there is never one to cancel.
        while let Some(execute) = runner.carry_out().execute {
            if let Some(error) = connection.execute(&mut runner, execute) {
                fatal = Some(error);
            }
        }
        if runner.set.is_finished() {
            break;
        }
        let now = runner.now();
        // Without a file watch, a node under its share polls the change
        // counter this often.
        let polling = changes.poll.filter(|_| runner.set.wants_changes(now));
        let wait = runner
            .wait()
            .unwrap_or(crate::clock::LONGEST_WAIT)
            .min(crate::clock::LONGEST_WAIT);
        let wait = polling.map_or(wait, |every| wait.min(every));
        let control = super::thread::receive(&inbox, wait, &mut handle_gone, || Control::Shutdown);
        let now = runner.now();
        let file_changed = matches!(control, Some(Control::FileChanged));
        match control {
            Some(Control::FileChanged) => changes.taken(),
            Some(Control::Shutdown) => runner.set.handle_shutdown(now),
            Some(Control::GiveUp(lease)) => runner.set.handle_give_up(now, lease.as_str()),
            Some(Control::Run(job)) => job(connection.table.connection()),
            Some(Control::AddWork(work)) => {
                for gate in runner.gates() {
                    gate.add(Arc::clone(&work));
                }
            }
            Some(Control::Abort) => {
                tracing::warn!(holder = %me, "aborting without releasing the leases");
                break;
            }
            None => {}
        }
        runner.reap();
        if (polling.is_some() || file_changed) && runner.set.wants_changes(now) {
            if let Some(version) = connection.table.change_counter() {
                if data_version
                    .replace(version)
                    .is_some_and(|seen| seen != version)
                {
                    runner.set.handle_survey_request(now);
                }
            }
        }
        let now = runner.now();
        runner.set.handle_timeout(now);
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
