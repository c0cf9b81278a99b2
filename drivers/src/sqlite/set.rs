//! A lease set on SQLite (DESIGN §9): one thread, one connection, one
//! statement at a time, whatever the number of leases.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use picolease_core::sql::{Dialect, Statements};
use picolease_core::{Config, LeaseName, LeaseSet};

use super::changes::ChangeSource;
use super::error::Error;
use super::fence::Fence;
use super::gate::{Gate, LeaderContext};
use super::open::Database;
use super::options::{sqlite_option_methods, SqliteOptions};
use super::thread::DriverThread;
use super::worker::{run, run_on_connection, Connection, Control};
use crate::set::{SetRunner, SetView};
use crate::subscription::{Fanout, Subscription};

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
