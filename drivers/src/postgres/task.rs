//! PostgreSQL as the shared task's `Driver` (`crate::server`): its types,
//! and starting its task with its statement connection and its listener.
//!
//! # Connections
//!
//! A lone lease and a set have the same two: the statement connection
//! (`link.rs`) and the `LISTEN` connection (`notify.rs`), both from the
//! application's [`Connect`]or (a [`super::PgConnector`] names them
//! `application_name = 'picolease'` unless the URL names them), with one
//! backoff and one set of rules. A statement that fails for a reason that
//! is not clearly transient, or that the engine gives up on (it is then
//! cancelled on the server), drops the statement connection; the next
//! statement connects afresh, after a jittered backoff that doubles per
//! consecutive failure and never exceeds the interval (at least 100 ms).
//! The listening connection is re-established 500 ms after it breaks; a
//! set then surveys at once, since notifications sent meanwhile were lost.

use std::sync::Arc;

use picolease_core::sql::{Dialect, Statements};
use tokio::sync::mpsc;

use super::connect::Connect;
use super::error::PgError;
use super::fence::Fence;
use super::handle::{PgOptions, Postgres};
use super::link::Link;
use super::notify::spawn_listener;
use crate::server::backoff::backoff_cap;
use crate::server::driver::TaskRunner;
use crate::server::options::ServerOptions;
use crate::server::task::DriverTask;
use crate::server::{Driver, Listen};

/// How many release notices may wait for a set's task before the listener
/// waits for it (a node giving up its surplus frees hundreds of rows in
/// one commit; none is dropped).
const NOTICE_BACKLOG: usize = 4096;

// The sealed trait names crate-private types (see `server/database.rs`).
#[allow(private_interfaces)]
impl Driver for Postgres {
    const NAME: &'static str = "PostgreSQL";
    const DIALECT: Dialect = Dialect::Postgres;
    type Connector = Arc<dyn Connect>;
    type Options = PgOptions;
    type Error = PgError;
    type Link = Link;
    type Fence = Fence;

    /// Spawns `runner`'s task on the current tokio runtime (panics outside
    /// one) with its statement connection and, when `options` ask for
    /// notifications, its listener for the notices `listen` names. Both
    /// connections come from `connector`; connecting happens in the task.
    fn start(
        runner: TaskRunner<Fence>,
        connector: Arc<dyn Connect>,
        statements: &Arc<Statements>,
        options: &ServerOptions<Self::Fence, Self::Options>,
        listen: Listen,
    ) -> DriverTask<Link, Fence> {
        let link = Arc::new(Link::new(
            Arc::clone(&connector),
            Arc::clone(statements),
            options.auto_create,
            backoff_cap(&runner.engine.config()),
        ));
        let backlog = match listen {
            Listen::Lease(_) => 1,
            Listen::Every => NOTICE_BACKLOG,
        };
        let listening = if options.own.notifications {
            let (tx, rx) = mpsc::channel(backlog);
            spawn_listener(connector, statements, listen, tx).map(|listener| (rx, listener))
        } else {
            None
        };
        DriverTask::start(runner, link, listening, options.own.linger)
    }
}
