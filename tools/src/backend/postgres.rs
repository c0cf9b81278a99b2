//! The PostgreSQL backend: `--db postgres://…` for `init`, `status`, `run`
//! and `release --force`.
//!
//! The async driver runs on a current-thread tokio runtime. Admin commands
//! block on one statement each. `run` gives the runtime a thread of its
//! own; the main loop (`commands::run`, shared with SQLite) reads the
//! driver's [`Subscription`](picolease::Subscription) and stops it through
//! [`PgContender`], so event printing and the `-- CMD` child are the same
//! code on both backends.

use std::sync::Arc;
use std::thread::JoinHandle;

use futures::future::{BoxFuture, FutureExt};
use picolease::postgres::{
    self, LeaderContext, PgConnector, PgError, PgLease, PgLeaseBuilder, PgLeaseSet,
};
use picolease::sql::LeaseRow;
use picolease::{redact_url, Config, Epoch, LeaseName, TableName, Term};
use tokio::sync::oneshot;

use super::{runtime, Contender, Started};
use crate::commands::child::{Gated, TermView};
use crate::failure::CliError;

/// A validated `postgres://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    url: String,
}

impl Target {
    /// Parses `url` as tokio-postgres does; a malformed one is a
    /// configuration error (exit 2) whose message hides any password.
    pub fn parse(url: &str) -> Result<Self, CliError> {
        PgConnector::new(url)?;
        Ok(Target {
            url: url.to_string(),
        })
    }

    pub(crate) fn connector(&self) -> Result<PgConnector, CliError> {
        Ok(PgConnector::new(&self.url)?)
    }
}

impl std::fmt::Display for Target {
    /// The URL without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact_url(&self.url))
    }
}

/// Connects once (on the current runtime), sorting failures as the driver
/// does, with the server named.
pub(crate) async fn connect(
    connector: &PgConnector,
    target: &Target,
) -> Result<tokio_postgres::Client, CliError> {
    connector.connect_client().await.map_err(|e| match e {
        PgError::Connect { reason } => CliError::runtime(format!(
            "could not connect to PostgreSQL at {target}: {reason}"
        )),
        other => other.into(),
    })
}

/// Connects once and runs `op` on the client.
fn with_client<T>(
    target: &Target,
    op: impl AsyncFnOnce(&tokio_postgres::Client) -> Result<T, PgError>,
) -> Result<T, CliError> {
    let connector = target.connector()?;
    let runtime = runtime()?;
    runtime.block_on(async {
        let client = connect(&connector, target).await?;
        Ok(op(&client).await?)
    })
}

/// `init`: creates the table if missing.
pub fn init(target: &Target, table: &TableName) -> Result<(), CliError> {
    with_client(target, async |client| postgres::init(client, table).await)
}

/// `status`: every lease; a missing table reads as no leases (as on
/// SQLite), and nothing is created.
pub fn status(target: &Target, table: &TableName) -> Result<Vec<LeaseRow>, CliError> {
    with_client(target, async |client| {
        match postgres::status(client, table).await {
            Err(PgError::MissingTable { .. }) => Ok(Vec::new()),
            other => other,
        }
    })
}

/// `release --force`: the new epoch, or `None` when there is no such lease
/// (the statement leaves a malformed row as it is; the driver reports it).
pub fn force_release(
    target: &Target,
    table: &TableName,
    lease: &LeaseName,
) -> Result<Option<Epoch>, CliError> {
    with_client(target, async |client| {
        postgres::force_release(client, table, lease).await
    })
}

/// The driver of `run`, on its own thread with its own runtime.
pub struct PgContender {
    /// `true`: shut down (release); `false`: abort (no release).
    stop: Option<oneshot::Sender<bool>>,
    thread: Option<JoinHandle<Result<(), PgError>>>,
}

/// Starts the driver for `config` on `table`, with `gated` (CMD) as its
/// gated work. Connects once first, so that an unreachable server or a
/// refused login is reported at once (exit 1 or 2) rather than retried
/// for ever; after that, outages are the driver's to ride out.
pub fn start(
    target: &Target,
    table: &TableName,
    config: Config,
    gated: Option<Arc<Gated>>,
) -> Result<Started, CliError> {
    let connector = target.connector()?;
    let runtime = runtime()?;
    runtime.block_on(async { connect(&connector, target).await.map(drop) })?;

    let mut builder = PgLease::builder(config, connector).table(table.clone());
    let transitions = builder.subscribe();
    if let Some(gated) = gated {
        builder = builder.while_leader(supervise(gated));
    }

    let (stop_tx, stop_rx) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("picolease-postgres".into())
        .spawn(move || runtime.block_on(drive(builder, stop_rx)))
        .map_err(|e| CliError::runtime(format!("cannot start the lease thread: {e}")))?;
    let contender = PgContender {
        stop: Some(stop_tx),
        thread: Some(thread),
    };
    Ok((Box::new(contender), transitions))
}

/// CMD as gated work of a lone lease or of each lease of a set: the same
/// blocking supervisor as on SQLite, on the runtime's blocking pool; the
/// task (and so the lease's next statement, or its release) waits for it.
fn supervise(gated: Arc<Gated>) -> impl Fn(LeaderContext) -> BoxFuture<'static, ()> + Send + Sync {
    move |ctx: LeaderContext| {
        let gated = Arc::clone(&gated);
        async move {
            let _ = tokio::task::spawn_blocking(move || gated.run_term(&ctx)).await;
        }
        .boxed()
    }
}

/// Starts the driver and shuts it down when asked (or when the handle is
/// dropped); returns the driver's outcome.
async fn drive(builder: PgLeaseBuilder, stop: oneshot::Receiver<bool>) -> Result<(), PgError> {
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

/// The blocking supervisor's view of an async term (it runs on a blocking
/// thread of the runtime).
impl TermView for LeaderContext {
    fn term(&self) -> &Term {
        self
    }

    fn deadline(&self) -> Option<std::time::Duration> {
        LeaderContext::deadline(self)
    }

    /// Waits on the term's token (woken at once when the driver stops the
    /// work) or its deadline, whichever comes first, from the runtime's
    /// blocking pool, where the supervisor runs.
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

impl Contender for PgContender {
    fn shutdown(mut self: Box<Self>) -> Result<(), CliError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        match self.thread.take().map(JoinHandle::join) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(e.into()),
            Some(Err(_)) => Err(CliError::runtime("the PostgreSQL lease thread panicked")),
        }
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

/// Starts a lease set on the async driver (its own runtime thread), with
/// CMD as each lease's work. Connects once first, as `start` does.
pub fn start_set(
    target: &Target,
    table: &TableName,
    template: Config,
    leases: Vec<LeaseName>,
    gated: Option<Arc<Gated>>,
) -> Result<super::StartedSet, CliError> {
    let connector = target.connector()?;
    let runtime = runtime()?;
    runtime.block_on(async { connect(&connector, target).await.map(drop) })?;
    let mut builder = PgLeaseSet::builder(template, leases, connector).table(table.clone());
    let transitions = builder.subscribe();
    if let Some(gated) = gated {
        builder = builder.while_leader(supervise(gated));
    }
    let (commands, mut inbox) = tokio::sync::mpsc::unbounded_channel();
    let (started_tx, started) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("picolease-postgres".into())
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
                        Some(SetCommand::GiveUp(lease)) => set.give_up(&lease),
                        Some(SetCommand::Shutdown) | None => return set.shutdown().await,
                    }
                }
            })
        })
        .map_err(|e| CliError::runtime(format!("cannot start the lease thread: {e}")))?;
    let view = started
        .recv()
        .map_err(|_| CliError::runtime("the PostgreSQL lease thread stopped at its start"))??;
    let contender = PgSetContender {
        commands,
        thread: Some(thread),
    };
    Ok((Box::new(contender), transitions, view))
}

/// What `run` asks of the set's runtime thread.
enum SetCommand {
    GiveUp(LeaseName),
    Shutdown,
}

/// A lease set on its own runtime thread.
struct PgSetContender {
    commands: tokio::sync::mpsc::UnboundedSender<SetCommand>,
    thread: Option<JoinHandle<Result<(), PgError>>>,
}

impl super::SetContender for PgSetContender {
    fn give_up(&self, lease: &LeaseName) {
        let _ = self.commands.send(SetCommand::GiveUp(lease.clone()));
    }

    fn shutdown(mut self: Box<Self>) -> Result<(), CliError> {
        let _ = self.commands.send(SetCommand::Shutdown);
        match self.thread.take().map(JoinHandle::join) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(e.into()),
            Some(Err(_)) => Err(CliError::runtime("the PostgreSQL lease thread panicked")),
        }
    }
}
