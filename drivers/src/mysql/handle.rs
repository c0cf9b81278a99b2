//! The handles of a running MySQL contender (a lone lease) and of a
//! lease set, and their builders: the shared server handles
//! (`crate::server::handles`) with MySQL's connector, options and task.

use std::sync::Arc;

use picolease_core::sql::{Dialect, Statements};

use super::connect::MysqlConnector;
use super::error::MysqlError;
use super::fence::Fence;
use super::link::Link;
use super::options::{mysql_option_methods, MysqlOptions};
use super::LeaderContext;
use crate::server::backoff::backoff_cap;
use crate::server::driver::Runner;
use crate::server::handles::{server_handles, Listen};
use crate::server::task::DriverTask;

/// Spawns `runner`'s task with its statement connection. MySQL has no
/// release notices (yet), so `_listen` names none: followers notice a
/// release at their next poll.
fn start(
    runner: Runner<Fence>,
    connector: MysqlConnector,
    statements: &Arc<Statements>,
    options: &MysqlOptions,
    _listen: Listen,
) -> DriverTask<Link, Fence> {
    let link = Arc::new(Link::new(
        connector,
        Arc::clone(statements),
        options.auto_create,
        backoff_cap(&runner.engine.config()),
    ));
    DriverTask::start(runner, link, None, std::time::Duration::ZERO)
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
