//! The PostgreSQL backend: `--db postgres://…` for `init`, `status`, `run`
//! and `release --force`.
//!
//! The async driver runs on a current-thread tokio runtime. Admin commands
//! block on one statement each. `run` gives the runtime a thread of its
//! own; the main loop (`commands::run`, shared with SQLite) reads the
//! driver's [`Subscription`](picolease::Subscription) and stops it through
//! a [`Contender`](super::Contender), so event printing and the `-- CMD`
//! child are the same code on every backend.

use picolease::postgres::{self, PgConnector, PgError};
use picolease::sql::LeaseRow;
use picolease::{redact_url, LeaseName, TableName};

use super::runtime;
use super::server::AdminTarget;
pub use super::server::{
    force_release, release_after_failover, request_hand_over, withdraw_hand_over,
};
use super::start_wait::{self, Check};
use crate::failure::CliError;

/// A `postgres://` URL, parsed once into the connector every command of
/// this backend uses (`run`'s driver, the admin commands, `bench`), beside
/// the URL without its password for messages.
#[derive(Clone, Debug)]
pub struct Target {
    /// Boxed: a parsed configuration is large, and `Backend` is passed by
    /// value.
    connector: Box<PgConnector>,
    /// The URL with its password hidden.
    shown: String,
}

impl PartialEq for Target {
    fn eq(&self, other: &Self) -> bool {
        self.shown == other.shown
    }
}

impl Eq for Target {}

impl Target {
    /// Parses `url` as tokio-postgres does; a malformed one is a
    /// configuration error (exit 2) whose message hides any password.
    pub fn parse(url: &str) -> Result<Self, CliError> {
        Ok(Target {
            connector: Box::new(PgConnector::new(url)?),
            shown: redact_url(url),
        })
    }

    /// Whether release notices reach a follower here: always, but behind
    /// a transaction pooler only through a direct notice connection
    /// (`picolease_notify_url`).
    pub fn has_release_notices(&self) -> bool {
        use picolease::postgres::Connect;
        self.connector.connect_listener().is_some()
    }

    /// The connector for the URL.
    pub(crate) fn connector(&self) -> &PgConnector {
        &self.connector
    }
}

impl std::fmt::Display for Target {
    /// The URL without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// Connects once (on the current runtime), sorting failures as the driver
/// does, with the server named.
pub(crate) async fn connect(
    connector: &PgConnector,
    target: &Target,
) -> Result<tokio_postgres::Client, CliError> {
    connector
        .connect_client()
        .await
        .map_err(|e| named(target, e))
}

/// A failure to connect names the server.
fn named(target: &Target, error: PgError) -> CliError {
    match error {
        PgError::Connect { reason } => CliError::runtime(format!(
            "could not connect to PostgreSQL at {target}: {reason}"
        )),
        PgError::Tls { reason, .. } => CliError::runtime(format!(
            "could not connect to PostgreSQL at {target}: TLS: {reason}"
        )),
        other => other.into(),
    }
}

/// Connects once and runs `op` on the client.
fn with_client<T>(
    target: &Target,
    op: impl AsyncFnOnce(&tokio_postgres::Client) -> Result<T, PgError>,
) -> Result<T, CliError> {
    let runtime = runtime()?;
    runtime.block_on(async {
        let client = connect(target.connector(), target).await?;
        Ok(op(&client).await?)
    })
}

/// The administrative commands run on a client of their own.
impl AdminTarget for Target {
    type Admin<'a> = &'a tokio_postgres::Client;
    type Error = PgError;

    fn admin<T>(
        &self,
        op: impl for<'a> AsyncFnOnce(&'a tokio_postgres::Client) -> Result<T, PgError>,
    ) -> Result<T, CliError> {
        with_client(self, op)
    }
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

/// `handover`'s watch of one lease's row: one connection, the row read
/// again and again by its key (not a new connection and the whole table
/// per look).
pub struct RowWatch {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    table: TableName,
}

impl RowWatch {
    /// Connects once.
    pub fn open(target: &Target, table: &TableName) -> Result<Self, CliError> {
        let runtime = runtime()?;
        let client = runtime.block_on(connect(target.connector(), target))?;
        Ok(RowWatch {
            runtime,
            client,
            table: table.clone(),
        })
    }

    /// The row of `lease`, if it exists.
    pub fn read(&mut self, lease: &LeaseName) -> Result<Option<LeaseRow>, CliError> {
        let read = postgres::lease_row(&self.client, &self.table, lease);
        Ok(self.runtime.block_on(read)?)
    }
}

/// The driver's runtime, once the server has answered: connects once
/// first, so that an unreachable server or a refused login is reported at
/// once (exit 1 or 2) rather than retried for ever by the driver; after
/// that, outages are the driver's to ride out.
pub fn checked_runtime(target: &Target) -> Result<tokio::runtime::Runtime, CliError> {
    let runtime = runtime()?;
    let place = format!("PostgreSQL at {target}");
    start_wait::until_ready(&place, || {
        match runtime.block_on(target.connector().connect_client()) {
            Ok(_) => Check::Ready(()),
            Err(PgError::Connect { reason }) if start_wait::not_ready(&reason) => {
                let error = named(
                    target,
                    PgError::Connect {
                        reason: reason.clone(),
                    },
                );
                Check::NotReady(reason, error)
            }
            Err(other) => Check::Failed(named(target, other)),
        }
    })?;
    Ok(runtime)
}
