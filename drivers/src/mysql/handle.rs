//! The handles of a running MySQL contender (a lone lease) and of a
//! lease set, and their builders: the shared server handles
//! (`crate::server::handles`) with MySQL's connector, options and task.

use std::sync::Arc;

use picolease_core::sql::{Dialect, Statements};
use tokio::sync::mpsc;

use super::connect::MysqlConnector;
use super::error::MysqlError;
use super::fence::Fence;
use super::link::Link;
use super::options::{mysql_option_methods, MysqlOptions};
use super::wake::{spawn_waker, WakeLock};
use super::LeaderContext;
use crate::server::backoff::backoff_cap;
use crate::server::driver::Runner;
use crate::server::handles::{server_handles, Listen};
use crate::server::task::DriverTask;

/// Spawns `runner`'s task with its statement connection and, for a lone
/// lease with `options.wake_up`, its release wake-up (`wake.rs`): the
/// lock its link takes while leading and the waker on a second
/// connection. A set (`Listen::Every`) has none yet: its followers notice
/// a release at their next poll.
fn start(
    runner: Runner<Fence>,
    connector: MysqlConnector,
    statements: &Arc<Statements>,
    options: &MysqlOptions,
    listen: Listen,
) -> DriverTask<Link, Fence> {
    let config = runner.engine.config();
    let wake = match listen {
        Listen::Lease(lease) if options.wake_up => {
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

server_handles! {
    database: "MySQL or MariaDB",
    dialect: Dialect::Mysql,
    error: MysqlError,
    connector: MysqlConnector => MysqlConnector, by |c| -> MysqlConnector { c },
    options: MysqlOptions, mysql_option_methods,
    start: start,
    lease: MysqlLease, MysqlLeaseBuilder,
    set: MysqlLeaseSet, MysqlLeaseSetBuilder,
}
