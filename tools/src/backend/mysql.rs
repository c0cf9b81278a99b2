//! The MySQL/MariaDB backend: `--db mysql://…` (or `mariadb://…`) for
//! `init`, `status`, `run` (one name or several) and `release --force`.
//!
//! As on PostgreSQL, the async driver runs on a current-thread runtime
//! of its own thread; the shared main loop of `run` reads its
//! subscription, so event printing and the `-- CMD` child are the same
//! code on every backend.

use picolease::mysql::{self, MysqlConnector, MysqlError};
use picolease::sql::LeaseRow;
use picolease::{LeaseName, TableName};

use super::runtime;
use super::server::AdminTarget;
pub use super::server::{
    force_release, release_after_failover, request_hand_over, withdraw_hand_over,
};
use super::start_wait::{self, Check};
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
    runtime.block_on(async { op(&target.connector).await.map_err(|e| named(target, e)) })
}

/// A failure to connect names the server.
pub(crate) fn named(target: &Target, error: MysqlError) -> CliError {
    match error {
        MysqlError::Connect { reason } => {
            CliError::runtime(format!("could not connect to MySQL at {target}: {reason}"))
        }
        MysqlError::Tls { reason, .. } => CliError::runtime(format!(
            "could not connect to MySQL at {target}: TLS: {reason}"
        )),
        other => other.into(),
    }
}

/// The administrative commands connect from the target's connector.
impl AdminTarget for Target {
    type Admin<'a> = &'a MysqlConnector;
    type Error = MysqlError;

    fn admin<T>(
        &self,
        op: impl for<'a> AsyncFnOnce(&'a MysqlConnector) -> Result<T, MysqlError>,
    ) -> Result<T, CliError> {
        admin(self, op)
    }
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

/// `handover`'s watch of one lease's row: one connection, the row read
/// again and again by its key (not a new connection and the whole table
/// per look).
pub struct RowWatch {
    runtime: tokio::runtime::Runtime,
    /// Taken when the watch is dropped, to disconnect.
    conn: Option<mysql_async::Conn>,
    table: TableName,
}

impl RowWatch {
    /// Connects once.
    pub fn open(target: &Target, table: &TableName) -> Result<Self, CliError> {
        // The connection lives on this runtime, which the watch keeps.
        let runtime = runtime()?;
        let conn = runtime
            .block_on(target.connector.connect_client())
            .map_err(|e| named(target, e))?;
        Ok(RowWatch {
            runtime,
            conn: Some(conn),
            table: table.clone(),
        })
    }

    /// The row of `lease`, if it exists.
    pub fn read(&mut self, lease: &LeaseName) -> Result<Option<LeaseRow>, CliError> {
        let conn = self.conn.as_mut().expect("connected until dropped");
        let read = mysql::lease_row(conn, &self.table, lease);
        Ok(self.runtime.block_on(read)?)
    }
}

impl Drop for RowWatch {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            let _ = self.runtime.block_on(conn.disconnect());
        }
    }
}

/// The driver's runtime, once the server has answered and the login
/// worked (by creating the table, which the driver would do anyway): an
/// unreachable server or a refused login is reported at once, not retried
/// for ever.
pub fn checked_runtime(
    target: &Target,
    table: &TableName,
) -> Result<tokio::runtime::Runtime, CliError> {
    let runtime = runtime()?;
    let place = format!("MySQL at {target}");
    start_wait::until_ready(&place, || {
        match runtime.block_on(mysql::init(&target.connector, table)) {
            Ok(()) => Check::Ready(()),
            Err(error @ (MysqlError::Connect { .. } | MysqlError::Database { .. }))
                if start_wait::not_ready(&error.to_string()) =>
            {
                let reason = error.to_string();
                Check::NotReady(reason, named(target, error))
            }
            Err(other) => Check::Failed(named(target, other)),
        }
    })?;
    Ok(runtime)
}
