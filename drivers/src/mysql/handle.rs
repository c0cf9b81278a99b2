//! MySQL (and MariaDB) as a server [`Database`]: the marker type, how its
//! task starts (with the lone lease's wake-up), and the names of its
//! handles (instances of the shared [`Contender`] and [`Builder`]).

use std::sync::Arc;

use picolease_core::sql::{Dialect, Statements};
use tokio::sync::mpsc;

use super::connect::MysqlConnector;
use super::error::MysqlError;
use super::fence::Fence;
use super::link::Link;
use super::wake::{spawn_waker, WakeLock};
use crate::scope::Scope;
use crate::server::backoff::backoff_cap;
use crate::server::driver::TaskRunner;
use crate::server::options::ServerOptions;
use crate::server::task::DriverTask;
use crate::server::{Builder, Connects, Contender, Database, Driver, Listen};
use crate::set::SetView;
use crate::view::LeaseView;

/// MySQL or MariaDB, the [`Database`] of [`MysqlLease`] and
/// [`MysqlLeaseSet`].
#[derive(Debug)]
pub struct Mysql;

impl Database for Mysql {}

// The sealed trait names crate-private types (see `server/database.rs`).
#[allow(private_interfaces)]
impl Driver for Mysql {
    const NAME: &'static str = "MySQL or MariaDB";
    const DIALECT: Dialect = Dialect::Mysql;
    type Connector = MysqlConnector;
    type Options = MysqlOptions;
    type Error = MysqlError;
    type Link = Link;
    type Fence = Fence;

    /// Spawns `runner`'s task with its statement connection and, for a
    /// lone lease with `wake_up`, its release wake-up (`wake.rs`): the
    /// lock its link takes while leading and the waker on a second
    /// connection. A set (`Listen::Every`) has none yet: its followers
    /// notice a release at their next poll.
    fn start(
        runner: TaskRunner<Fence>,
        connector: MysqlConnector,
        statements: &Arc<Statements>,
        options: &ServerOptions<Self::Fence, Self::Options>,
        listen: Listen,
    ) -> DriverTask<Link, Fence> {
        let config = runner.engine.config();
        let wake = match listen {
            Listen::Lease(lease) if options.own.wake_up => {
                // The database the rows are in, however the contenders name it.
                let table = statements.table();
                let database = table.schema().unwrap_or(connector.database());
                Some(Arc::new(WakeLock::new(database, table.table(), &lease)))
            }
            _ => None,
        };
        let listening = wake.as_ref().map(|lock| {
            let (tx, rx) = mpsc::channel(1);
            let waker = spawn_waker(connector.clone(), Arc::clone(lock), config.interval, tx);
            (rx, waker)
        });
        let link = Arc::new(Link::new(
            connector,
            Arc::clone(statements),
            options.auto_create,
            backoff_cap(&config),
            wake,
        ));
        DriverTask::start(runner, link, listening, std::time::Duration::ZERO)
    }
}

/// MySQL's own options.
#[derive(Debug)]
pub struct MysqlOptions {
    /// A lone lease's followers wait on the leader's wake-up lock.
    pub(crate) wake_up: bool,
}

impl Default for MysqlOptions {
    fn default() -> Self {
        MysqlOptions { wake_up: true }
    }
}

/// The option only MySQL has.
impl<S: Scope> Builder<Mysql, S> {
    /// Wake followers of a lone lease at once when its leader releases
    /// (default on): the leader's session holds a named user lock while it
    /// leads and a follower waits on it from a second connection
    /// (`GET_LOCK`). Off, where the server refuses user locks, or on a
    /// Galera node other than the leader's (the lock is local to a node),
    /// a follower takes a released lease at its next poll, within one
    /// interval. Only a wake-up: who leads is still the row's and the
    /// epoch's. A set has no wake-up yet.
    pub fn wake_up(mut self, on: bool) -> Self {
        self.options.own.wake_up = on;
        self
    }
}

/// A [`MysqlConnector`] is MySQL's connector.
impl Connects<Mysql> for MysqlConnector {
    fn into_connector(self) -> MysqlConnector {
        self
    }
}

/// One contender for one lease on MySQL or MariaDB: the handle of the
/// driver task. Made with [`MysqlLease::builder`]; it dereferences to a
/// [`LeaseView`].
pub type MysqlLease = Contender<Mysql, LeaseView>;
/// Configures a [`MysqlLease`] before it starts.
pub type MysqlLeaseBuilder = Builder<Mysql, LeaseView>;
/// One node contending for a set of leases on MySQL or MariaDB, with a
/// fair share between the live nodes (DESIGN §9). Made with
/// [`MysqlLeaseSet::builder`]; it dereferences to a [`SetView`].
pub type MysqlLeaseSet = Contender<Mysql, SetView>;
/// Configures a [`MysqlLeaseSet`] before it starts.
pub type MysqlLeaseSetBuilder = Builder<Mysql, SetView>;
