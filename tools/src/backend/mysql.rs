//! The MySQL/MariaDB backend: `--db mysql://…` (or `mariadb://…`) for
//! `init`, `status`, `run` (one name or several) and `release --force`.
//!
//! As on PostgreSQL, the async driver runs on a current-thread runtime
//! of its own thread; the shared main loop of `run` reads its
//! subscription, so event printing and the `-- CMD` child are the same
//! code on every backend.

use std::sync::Arc;
use std::thread::JoinHandle;

use futures::future::{BoxFuture, FutureExt};
use picolease::mysql::{
    self, LeaderContext, MysqlConnector, MysqlError, MysqlLease, MysqlLeaseBuilder, MysqlLeaseSet,
};
use picolease::sql::LeaseRow;
use picolease::{Config, Epoch, LeaseName, TableName, Term};
use tokio::sync::oneshot;

use super::{runtime, Contender, Started};
use crate::commands::child::{Gated, TermView};
use crate::failure::CliError;

/// A validated `mysql://` or `mariadb://` URL.
#[derive(Clone, Debug)]
pub struct Target {
    connector: MysqlConnector,
}

impl PartialEq for Target {
    fn eq(&self, other: &Self) -> bool {
        self.connector.url() == other.connector.url()
    }
}

impl Eq for Target {}

impl Target {
    /// Parses `url`; a malformed one is a configuration error (exit 2)
    /// whose message hides any password.
    pub fn parse(url: &str) -> Result<Self, CliError> {
        Ok(Target {
            connector: MysqlConnector::new(url)?,
        })
    }

    /// The connector for the URL.
    pub(crate) fn connector(&self) -> &MysqlConnector {
        &self.connector
    }
}

impl std::fmt::Display for Target {
    /// The URL without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.connector.url())
    }
}

/// Runs one administrative call on a runtime of its own, with the server
/// named in a connection failure.
fn admin<T>(
    target: &Target,
    op: impl AsyncFnOnce(&MysqlConnector) -> Result<T, MysqlError>,
) -> Result<T, CliError> {
    let runtime = runtime()?;
    runtime.block_on(async {
        op(&target.connector).await.map_err(|e| match e {
            MysqlError::Connect { reason } => {
                CliError::runtime(format!("could not connect to MySQL at {target}: {reason}"))
            }
            other => other.into(),
        })
    })
}

/// `init`: creates the table if missing.
pub fn init(target: &Target, table: &TableName) -> Result<(), CliError> {
    admin(target, async |c| mysql::init(c, table).await)
}

/// `status`: every lease; a missing table reads as no leases, and nothing
/// is created.
pub fn status(target: &Target, table: &TableName) -> Result<Vec<LeaseRow>, CliError> {
    admin(target, async |c| match mysql::status(c, table).await {
        Err(MysqlError::MissingTable { .. }) => Ok(Vec::new()),
        other => other,
    })
}

/// `release --force`: the epoch it was held at, or `None`.
pub fn force_release(
    target: &Target,
    table: &TableName,
    lease: &LeaseName,
) -> Result<Option<Epoch>, CliError> {
    admin(target, async |c| {
        mysql::force_release(c, table, lease).await
    })
}

/// Checks that the server answers and the login works (by creating the
/// table, which the driver would do anyway): an unreachable server or a
/// refused login is reported at once, not retried for ever.
fn check(target: &Target, table: &TableName) -> Result<tokio::runtime::Runtime, CliError> {
    init(target, table)?;
    runtime()
}

/// The driver of `run` (one name), on its own thread with its own runtime.
pub struct MysqlContender {
    /// `true`: shut down (release); `false`: abort (no release).
    stop: Option<oneshot::Sender<bool>>,
    thread: Option<JoinHandle<Result<(), MysqlError>>>,
}

/// Starts the driver for `config` on `table`, with `gated` (CMD) as its
/// gated work.
pub fn start(
    target: &Target,
    table: &TableName,
    config: Config,
    gated: Option<Arc<Gated>>,
) -> Result<Started, CliError> {
    let runtime = check(target, table)?;
    let mut builder = MysqlLease::builder(config, target.connector.clone()).table(table.clone());
    let transitions = builder.subscribe();
    if let Some(gated) = gated {
        builder = builder.while_leader(supervise(gated));
    }
    let (stop_tx, stop_rx) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("picolease-mysql".into())
        .spawn(move || runtime.block_on(drive(builder, stop_rx)))
        .map_err(|e| CliError::runtime(format!("cannot start the lease thread: {e}")))?;
    let contender = MysqlContender {
        stop: Some(stop_tx),
        thread: Some(thread),
    };
    Ok((Box::new(contender), transitions))
}

/// CMD as gated work, on the runtime's blocking pool.
fn supervise(gated: Arc<Gated>) -> impl Fn(LeaderContext) -> BoxFuture<'static, ()> + Send + Sync {
    move |ctx: LeaderContext| {
        let gated = Arc::clone(&gated);
        async move {
            let _ = tokio::task::spawn_blocking(move || gated.run_term(&ctx)).await;
        }
        .boxed()
    }
}

async fn drive(
    builder: MysqlLeaseBuilder,
    stop: oneshot::Receiver<bool>,
) -> Result<(), MysqlError> {
    let mut lease = builder.start()?;
    tokio::select! {
        result = lease.stopped() => result,
        release = stop => match release {
            Ok(false) => {
                lease.abort();
                Ok(())
            }
            _ => lease.shutdown().await,
        },
    }
}

/// The blocking supervisor's view of an async term, as on PostgreSQL.
impl TermView for LeaderContext {
    fn term(&self) -> &Term {
        self
    }

    fn deadline(&self) -> Option<std::time::Duration> {
        LeaderContext::deadline(self)
    }

    fn ended(&self, timeout: std::time::Duration) -> bool {
        if self.is_cancelled() {
            return true;
        }
        let wait = timeout.min(self.time_left());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let token = self.token().clone();
                let _ = runtime.block_on(tokio::time::timeout(wait, token.cancelled_owned()));
            }
            Err(_) => std::thread::sleep(wait),
        }
        self.is_cancelled()
    }
}

fn joined(thread: Option<JoinHandle<Result<(), MysqlError>>>) -> Result<(), CliError> {
    match thread.map(JoinHandle::join) {
        None | Some(Ok(Ok(()))) => Ok(()),
        Some(Ok(Err(e))) => Err(e.into()),
        Some(Err(_)) => Err(CliError::runtime("the MySQL lease thread panicked")),
    }
}

impl Contender for MysqlContender {
    fn shutdown(mut self: Box<Self>) -> Result<(), CliError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        joined(self.thread.take())
    }

    fn abort(mut self: Box<Self>) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(false);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Starts a lease set (its own runtime thread), with CMD as each lease's
/// work.
pub fn start_set(
    target: &Target,
    table: &TableName,
    template: Config,
    leases: Vec<LeaseName>,
    gated: Option<Arc<Gated>>,
) -> Result<super::StartedSet, CliError> {
    let runtime = check(target, table)?;
    let mut builder =
        MysqlLeaseSet::builder(template, leases, target.connector.clone()).table(table.clone());
    let transitions = builder.subscribe();
    if let Some(gated) = gated {
        builder = builder.while_leader(supervise(gated));
    }
    let (commands, mut inbox) = tokio::sync::mpsc::unbounded_channel();
    let (started_tx, started) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("picolease-mysql".into())
        .spawn(move || {
            runtime.block_on(async move {
                let set = match builder.start() {
                    Ok(set) => set,
                    Err(e) => {
                        let _ = started_tx.send(Err(e));
                        return Ok(());
                    }
                };
                let _ = started_tx.send(Ok(set.snapshots()));
                loop {
                    match inbox.recv().await {
                        Some(Some(lease)) => set.give_up(&lease),
                        Some(None) | None => return set.shutdown().await,
                    }
                }
            })
        })
        .map_err(|e| CliError::runtime(format!("cannot start the lease thread: {e}")))?;
    let view = started
        .recv()
        .map_err(|_| CliError::runtime("the MySQL lease thread stopped at its start"))??;
    Ok((
        Box::new(MysqlSetContender {
            commands,
            thread: Some(thread),
        }),
        transitions,
        view,
    ))
}

/// A lease set on its own runtime thread; `Some(lease)` gives a lease up,
/// `None` shuts down.
struct MysqlSetContender {
    commands: tokio::sync::mpsc::UnboundedSender<Option<LeaseName>>,
    thread: Option<JoinHandle<Result<(), MysqlError>>>,
}

impl super::SetContender for MysqlSetContender {
    fn give_up(&self, lease: &LeaseName) {
        let _ = self.commands.send(Some(lease.clone()));
    }

    fn shutdown(mut self: Box<Self>) -> Result<(), CliError> {
        let _ = self.commands.send(None);
        joined(self.thread.take())
    }
}
