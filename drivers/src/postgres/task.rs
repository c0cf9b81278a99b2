//! Starting PostgreSQL's task (the shared one of `crate::server`) with its
//! statement connection and its listener.

use std::sync::Arc;

use picolease_core::sql::Statements;
use tokio::sync::mpsc;

use super::connect::Connect;
use super::fence::Fence;
use super::link::Link;
use super::notify::{spawn_listener, Interest};
use super::options::PgOptions;
use crate::server::backoff::backoff_cap;
use crate::server::driver::Runner;
use crate::server::task::DriverTask;

/// A PostgreSQL driver's task, as its handle holds it.
pub(crate) type PgTask = DriverTask<Link, Fence>;

/// Spawns `runner`'s task on the current tokio runtime (panics outside
/// one) with its statement connection and, when `options` ask for
/// notifications, its listener for `interest`, whose notices wait in a
/// queue of `backlog`. Both connections come from `connector`;
/// connecting happens in the task.
pub(crate) fn start(
    runner: Runner<Fence>,
    connector: Arc<dyn Connect>,
    statements: &Arc<Statements>,
    options: &PgOptions,
    (interest, backlog): (Interest, usize),
) -> PgTask {
    let link = Arc::new(Link::new(
        Arc::clone(&connector),
        Arc::clone(statements),
        options.auto_create,
        backoff_cap(&runner.engine.config()),
    ));
    let listening = if options.notifications {
        let (tx, rx) = mpsc::channel(backlog);
        spawn_listener(connector, statements, interest, tx).map(|listener| (rx, listener))
    } else {
        None
    };
    DriverTask::start(runner, link, listening, options.linger)
}
