//! The PostgreSQL backend: `--db postgres://…` for `init`, `status`, `run`
//! and `release --force`.
//!
//! The async driver runs on a current-thread tokio runtime. Admin commands
//! block on one statement each. `run` gives the runtime a thread of its
//! own; the main loop (`commands::run`, shared with SQLite) sees the
//! driver's transitions on a std channel and stops it through
//! [`PgContender`], so event printing and the `-- CMD` child are the same
//! code on both backends.

use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use picolease::postgres::{self, LeaderContext, PgConnector, PgError, PgLease};
use picolease::sql::LeaseRow;
use picolease::{Config, Epoch, LeaseName, TableName};
use tokio::sync::oneshot;

use crate::backend::redact;
use crate::commands::child::Gated;
use crate::commands::run::{Change, Contender};
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

    fn connector(&self) -> Result<PgConnector, CliError> {
        Ok(PgConnector::new(&self.url)?)
    }
}

impl std::fmt::Display for Target {
    /// The URL without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact(&self.url))
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::runtime(format!("cannot start the async runtime: {e}")))
}

/// Connects once (on the current runtime), sorting failures as the driver
/// does, but with the server named and the cause kept: tokio-postgres
/// leaves the cause ("Connection refused", "failed to lookup address")
/// out of its message, and so does `PgError::Connect`.
async fn connect(
    connector: &PgConnector,
    target: &Target,
) -> Result<tokio_postgres::Client, CliError> {
    use picolease::postgres::Connect;
    match Connect::connect(connector).await {
        Ok(client) => Ok(client),
        Err(e) => match e.as_db_error() {
            // Refused credentials or an unknown database: as the driver
            // sorts them (PgError::Login), a configuration error.
            Some(db) if ["28", "3D"].iter().any(|c| db.code().code().starts_with(c)) => {
                Err(PgError::Login {
                    code: db.code().code().to_string(),
                    reason: db.message().to_string(),
                }
                .into())
            }
            _ => {
                let mut message = format!("could not connect to PostgreSQL at {target}: {e}");
                let mut source = std::error::Error::source(&e);
                while let Some(cause) = source {
                    message.push_str(&format!(": {cause}"));
                    source = cause.source();
                }
                Err(CliError::runtime(message))
            }
        },
    }
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

/// `release --force`: the new epoch, or `None` when there is no such lease.
pub fn force_release(
    target: &Target,
    table: &TableName,
    lease: &LeaseName,
) -> Result<Option<Epoch>, CliError> {
    with_client(target, async |client| {
        // The statement updates the row before its reply is decoded: a
        // malformed row (a NULL epoch) would be rewritten and only then
        // reported. In a transaction, that error rolls the write back.
        let during = |e: tokio_postgres::Error| PgError::Connection {
            during: "force release",
            reason: e.to_string(),
        };
        client.batch_execute("BEGIN").await.map_err(during)?;
        match postgres::force_release(client, table, lease).await {
            Ok(epoch) => {
                client.batch_execute("COMMIT").await.map_err(during)?;
                Ok(epoch)
            }
            Err(e) => {
                let _ = client.batch_execute("ROLLBACK").await;
                Err(e)
            }
        }
    })
}

/// The driver of `run`, on its own thread with its own runtime.
pub struct PgContender {
    stop: Option<oneshot::Sender<()>>,
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
) -> Result<(PgContender, mpsc::Receiver<Change>), CliError> {
    let connector = target.connector()?;
    let runtime = runtime()?;
    runtime.block_on(async { connect(&connector, target).await.map(drop) })?;

    let mut builder = PgLease::builder(config.clone(), connector).table(table.clone());
    if let Some(gated) = gated {
        let lease: Arc<str> = config.lease.as_str().into();
        let node: Arc<str> = config.holder.as_str().into();
        builder = builder.run_while_leader(move |ctx: LeaderContext| {
            let (gated, lease, node) = (gated.clone(), lease.clone(), node.clone());
            async move {
                // CMD is supervised by blocking code shared with SQLite; the
                // task (and so the driver's next statement) waits for it.
                let _ = tokio::task::spawn_blocking(move || {
                    gated.run_term(&lease, &node, ctx.epoch(), |timeout| {
                        if ctx.is_cancelled() {
                            return true;
                        }
                        std::thread::sleep(timeout);
                        ctx.is_cancelled()
                    })
                })
                .await;
            }
        });
    }

    let (changes_tx, changes_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("picolease-postgres".into())
        .spawn(move || runtime.block_on(drive(builder, changes_tx, stop_rx)))
        .map_err(|e| CliError::runtime(format!("cannot start the lease thread: {e}")))?;
    Ok((
        PgContender {
            stop: Some(stop_tx),
            thread: Some(thread),
        },
        changes_rx,
    ))
}

/// What ended the wait in [`drive`].
enum End {
    Stopped(Result<(), PgError>),
    ShutdownAsked,
}

/// Spawns the driver, forwards its transitions, and shuts it down when
/// asked (or when the handle is dropped).
async fn drive(
    builder: postgres::PgLeaseBuilder,
    changes: mpsc::Sender<Change>,
    mut stop: oneshot::Receiver<()>,
) -> Result<(), PgError> {
    let mut lease = builder.spawn()?;
    // On a current-thread runtime the driver task has not run yet, so
    // subscribing now misses nothing.
    let mut transitions = lease.subscribe();
    let forward = |t: postgres::Transition| {
        let _ = changes.send(Change {
            leadership: t.leadership,
            at: t.at,
        });
    };
    let end = loop {
        tokio::select! {
            Some(t) = transitions.recv() => forward(t),
            result = lease.stopped() => break End::Stopped(result),
            _ = &mut stop => break End::ShutdownAsked,
        }
    };
    let outcome = match end {
        End::Stopped(result) => result,
        End::ShutdownAsked => lease.shutdown().await,
    };
    while let Ok(t) = transitions.try_recv() {
        forward(t);
    }
    outcome
}

impl Contender for PgContender {
    fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    fn shutdown(mut self) -> Result<(), CliError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take().map(JoinHandle::join) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(e.into()),
            Some(Err(_)) => Err(CliError::runtime("the PostgreSQL lease thread panicked")),
        }
    }
}
