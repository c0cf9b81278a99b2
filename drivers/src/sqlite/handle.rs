//! The handle of a running SQLite contender, and its builder.

use std::sync::Arc;
use std::time::Duration;

use picolease_core::sql::{Dialect, Statements};
use picolease_core::{Config, Instant, LeaseState};

use super::error::Error;
use super::fence::Fence;
use super::gate::{Gate, LeaderContext};
use super::open::Database;
use super::options::{sqlite_option_methods, SqliteOptions};
use super::thread::{sqlite_handle_methods, DriverThread};
use super::worker::Control;
use crate::publish::Publisher;
use crate::set::SetRunner;
use crate::subscription::Subscription;
use crate::view::LeaseView;

/// Configures a [`SqliteLease`] before it starts. Made by
/// [`SqliteLease::builder`].
pub struct SqliteLeaseBuilder {
    config: Config,
    database: Database,
    publisher: Arc<Publisher>,
    options: SqliteOptions,
}

/// How often a follower checks `PRAGMA data_version` for another
/// connection's commit when it cannot watch the file: a release is
/// noticed within about this long. Each check is a timed wake-up (about
/// 50 µs of CPU on a small VM, so about 0.2 % of a core).
pub const DEFAULT_CHANGE_CHECK: Duration = Duration::from_millis(25);

impl std::fmt::Debug for SqliteLeaseBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteLeaseBuilder")
            .field("config", &self.config)
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

impl SqliteLeaseBuilder {
    sqlite_option_methods!();

    /// Every leadership change from the start on, in order.
    pub fn subscribe(&self) -> Subscription {
        self.publisher.subscribe()
    }

    /// Validates the configuration, opens the database (creating the file
    /// and table if allowed), checks the table, and starts the lease
    /// thread. A bad configuration is reported before the file is touched.
    pub fn start(self) -> Result<SqliteLease, Error> {
        let SqliteLeaseBuilder {
            config,
            mut database,
            publisher,
            options,
        } = self;
        publisher.set_clock(Arc::clone(&options.clock));
        let mut gate = Gate::new(
            Arc::clone(&publisher),
            Arc::new(Statements::new(Dialect::Sqlite, &database.table)),
            config.lease.clone(),
            config.holder.clone(),
        );
        options.add_works_to(&mut gate);
        let state = LeaseState::new(config.clone(), Instant::ZERO)?;
        let runner = SetRunner::lone(state, Arc::clone(&publisher), gate);
        let thread = DriverThread::start(
            format!("picolease-{}", config.lease),
            config.lease.to_string(),
            &mut database,
            options.notices,
            runner,
        )?;
        Ok(SqliteLease {
            statements: Statements::new(Dialect::Sqlite, &database.table),
            view: LeaseView::new(config, publisher),
            thread,
        })
    }
}

/// One contender for one lease on SQLite: the handle of its lease thread.
/// Made with [`SqliteLease::builder`].
///
/// Call [`SqliteLease::shutdown`] to stop the work and release the lease.
/// Dropping the handle asks for the same shutdown and waits for it at most
/// a ttl, so a drop never hangs.
///
/// It dereferences to a [`LeaseView`] (the same for both drivers):
/// `config()`, `lease()`, `holder()`, `leadership()`, `watch()`,
/// `subscribe()`, `renew_latencies()`.
pub struct SqliteLease {
    view: LeaseView,
    statements: Statements,
    thread: DriverThread,
}

impl std::ops::Deref for SqliteLease {
    type Target = LeaseView;
    fn deref(&self) -> &LeaseView {
        &self.view
    }
}

impl std::fmt::Debug for SqliteLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SqliteLease").field(&self.view).finish()
    }
}

impl SqliteLease {
    /// A contender for `config` (lease, holder id, timings) on `database`.
    pub fn builder(config: Config, database: Database) -> SqliteLeaseBuilder {
        let publisher = Arc::new(Publisher::new(crate::clock::system(), config.lease.clone()));
        SqliteLeaseBuilder {
            config,
            database,
            publisher,
            options: SqliteOptions::default(),
        }
    }

    /// The fence of the current term, if this node leads.
    pub fn fence(&self) -> Option<Fence> {
        let epoch = self.leadership().leader_epoch()?;
        Some(Fence::new(
            &self.statements,
            self.lease(),
            self.holder(),
            epoch,
        ))
    }

    /// Hands the lease over (DESIGN §3 "Planned handover") if this node
    /// leads when the driver gets to it: the work stops as at any end of a
    /// term (its guarantees unchanged), then one statement reserves the
    /// row for node `to` (a node name: what `--node` says, or a library
    /// holder id, whose node is itself) for two intervals, during which
    /// only that node can take it, at once and at the next epoch; after
    /// that anyone may. `None` releases the row instead. This node goes on
    /// as a follower. Returns at once; watch [`LeaseView::leadership`] or
    /// a subscription for the outcome (a `follower` transition with
    /// reason [`Demotion::HandedOver`], then the successor's term). An
    /// error names a node that cannot be reserved for.
    ///
    /// [`LeaseView::leadership`]: crate::LeaseView::leadership
    /// [`Demotion::HandedOver`]: picolease_core::Demotion::HandedOver
    pub fn hand_over(&self, to: Option<&str>) -> Result<(), picolease_core::ConfigError> {
        let to = to.map(picolease_core::HolderId::reserved_for).transpose()?;
        self.thread.send(Control::HandOver(None, to));
        Ok(())
    }

    /// Hands the lease over, as [`SqliteLease::hand_over`] does, to the lease's
    /// preferred candidate (DESIGN §3 "Preferred holders"): the live
    /// candidate the last renewal read, whatever its rank, if it runs on
    /// another node; else releases it. Followed by a shutdown, it is "hand
    /// over, then exit" (what `picolease run` does on SIGUSR1): the lease
    /// goes to the node most likely to keep it, and the shutdown finishes
    /// once the statement is answered.
    pub fn hand_over_to_preferred(&self) {
        self.thread.send(Control::HandOverToPreferred);
    }

    /// True once the thread has stopped (after shutdown, abort, or a fatal
    /// error; [`SqliteLease::shutdown`] then returns the error).
    pub fn is_finished(&self) -> bool {
        self.view.publisher().is_finished()
    }
}

sqlite_handle_methods!(SqliteLease);
