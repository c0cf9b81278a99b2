//! The databases a `--db` URL names, behind one small interface.
//!
//! Each backend module (`sqlite`, and `postgres` and `mysql` with the
//! features of those names, on by default) offers the same operations:
//! `init`, `status`, `force_release`, `start` (a running [`Contender`] for
//! one lease or many, [`Leases`], with its subscription and view:
//! [`Started`]), and for `handover` the request, its withdrawal and a
//! [`RowWatch`]. The commands only ever call [`Backend`]'s methods,
//! so they hold no per-database branch. A binary built without
//! `postgres` refuses `postgres://` URLs with a clear configuration error.

#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod server;
pub mod sqlite;
mod start_wait;

mod contender;
pub use contender::{Contender, Leases, ScopeView, Started, View};

use std::sync::Arc;
use std::time::Duration;

use picolease::sql::LeaseRow;
use picolease::sqlite::Location;
use picolease::{redact_url, Epoch, LeaseName, TableName};

use crate::failure::{one_line, CliError};
use crate::term::child::Gated;

/// A current-thread tokio runtime for an async driver or an admin call.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::runtime(format!("cannot start the async runtime: {e}")))
}

/// One lease's row read again and again on one connection
/// ([`Backend::watch_row`]).
pub enum RowWatch {
    Sqlite(Box<picolease::sqlite::LeaseTable>),
    #[cfg(feature = "postgres")]
    Postgres(postgres::RowWatch),
    #[cfg(feature = "mysql")]
    Mysql(mysql::RowWatch),
}

impl RowWatch {
    /// The row of `lease`, if it exists.
    pub fn read(&mut self, lease: &LeaseName) -> Result<Option<LeaseRow>, CliError> {
        match self {
            RowWatch::Sqlite(table) => Ok(table.lease_row(lease)?),
            #[cfg(feature = "postgres")]
            RowWatch::Postgres(watch) => watch.read(lease),
            #[cfg(feature = "mysql")]
            RowWatch::Mysql(watch) => watch.read(lease),
        }
    }
}

/// The database a URL names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite://PATH` or `sqlite::memory:`.
    Sqlite(Location),
    /// `postgres://…` or `postgresql://…`.
    #[cfg(feature = "postgres")]
    Postgres(postgres::Target),
    /// `mysql://…` or `mariadb://…`.
    #[cfg(feature = "mysql")]
    Mysql(mysql::Target),
}

impl Backend {
    /// Parses `--db`. Accepts `sqlite://PATH` (relative or absolute:
    /// `sqlite:///tmp/x.db`), `sqlite:PATH` and `sqlite::memory:`.
    pub fn parse(url: &str) -> Result<Self, CliError> {
        if url == "sqlite::memory:" || url == "sqlite://:memory:" {
            return Ok(Backend::Sqlite(Location::Memory));
        }
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            if path.is_empty() {
                return Err(CliError::usage(format!(
                    "--db {url:?} has no path: use sqlite://PATH or sqlite::memory:"
                )));
            }
            return Ok(Backend::Sqlite(Location::file(path)));
        }
        let scheme = url.split("://").next().unwrap_or(url);
        if url.contains("://") && (scheme == "postgres" || scheme == "postgresql") {
            #[cfg(feature = "postgres")]
            return Ok(Backend::Postgres(postgres::Target::parse(url)?));
            #[cfg(not(feature = "postgres"))]
            return Err(CliError::usage(format!(
                "postgres support not built in this picolease binary (--db {scheme}://…; build with the `postgres` feature); use sqlite://PATH"
            )));
        }
        if url.contains("://") && (scheme == "mysql" || scheme == "mariadb") {
            #[cfg(feature = "mysql")]
            return Ok(Backend::Mysql(mysql::Target::parse(url)?));
            #[cfg(not(feature = "mysql"))]
            return Err(CliError::usage(format!(
                "mysql support not built in this picolease binary (--db {scheme}://…; build with the `mysql` feature); use sqlite://PATH"
            )));
        }
        Err(CliError::usage(format!(
            "--db {:?} is not a supported database URL: use sqlite://PATH, sqlite::memory:, postgres://… or mysql://…",
            one_line(&redact_url(url))
        )))
    }

    /// Where the table lives, for messages (a PostgreSQL URL without its
    /// password).
    pub fn place(&self) -> String {
        match self {
            Backend::Sqlite(location) => location.to_string(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(target) => target.to_string(),
            #[cfg(feature = "mysql")]
            Backend::Mysql(target) => target.to_string(),
        }
    }

    /// `init`: creates the table (and, on SQLite, the file) if missing.
    pub fn init(&self, table: &TableName) -> Result<(), CliError> {
        match self {
            Backend::Sqlite(location) => sqlite::init(location, table),
            #[cfg(feature = "postgres")]
            Backend::Postgres(target) => postgres::init(target, table),
            #[cfg(feature = "mysql")]
            Backend::Mysql(target) => mysql::init(target, table),
        }
    }

    /// `status`: every lease, without writing anything (a missing file or
    /// table reads as no leases).
    pub fn status(&self, table: &TableName) -> Result<Vec<LeaseRow>, CliError> {
        match self {
            Backend::Sqlite(location) => sqlite::status(location, table),
            #[cfg(feature = "postgres")]
            Backend::Postgres(target) => postgres::status(target, table),
            #[cfg(feature = "mysql")]
            Backend::Mysql(target) => mysql::status(target, table),
        }
    }

    /// `handover`: asks the holder of term `epoch` of `lease` to hand it
    /// over to node `to` (`""`: anyone).
    pub fn request_hand_over(
        &self,
        table: &TableName,
        lease: &LeaseName,
        epoch: Epoch,
        to: &str,
    ) -> Result<(), CliError> {
        match self {
            Backend::Sqlite(location) => {
                sqlite::request_hand_over(location, table, lease, epoch, to)
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(target) => {
                postgres::request_hand_over(target, table, lease, epoch, to)
            }
            #[cfg(feature = "mysql")]
            Backend::Mysql(target) => mysql::request_hand_over(target, table, lease, epoch, to),
        }
    }

    /// `handover`: a watch of one lease's row on one connection.
    pub fn watch_row(&self, table: &TableName) -> Result<RowWatch, CliError> {
        Ok(match self {
            Backend::Sqlite(location) => {
                RowWatch::Sqlite(Box::new(sqlite::open_table(location, table)?))
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(target) => {
                RowWatch::Postgres(postgres::RowWatch::open(target, table)?)
            }
            #[cfg(feature = "mysql")]
            Backend::Mysql(target) => RowWatch::Mysql(mysql::RowWatch::open(target, table)?),
        })
    }

    /// `handover`: withdraws the request for term `epoch` of `lease`, if
    /// it is still there (a later request stays).
    pub fn withdraw_hand_over(
        &self,
        table: &TableName,
        lease: &LeaseName,
        epoch: Epoch,
    ) -> Result<(), CliError> {
        match self {
            Backend::Sqlite(location) => sqlite::withdraw_hand_over(location, table, lease, epoch),
            #[cfg(feature = "postgres")]
            Backend::Postgres(target) => postgres::withdraw_hand_over(target, table, lease, epoch),
            #[cfg(feature = "mysql")]
            Backend::Mysql(target) => mysql::withdraw_hand_over(target, table, lease, epoch),
        }
    }

    /// `release --force`: the new epoch, or `None` when there is no such
    /// lease. A malformed row is reported and left unchanged. `ttl` is the
    /// grace a row from another server incarnation is adopted for.
    pub fn force_release(
        &self,
        table: &TableName,
        lease: &LeaseName,
        ttl: Duration,
    ) -> Result<Option<Epoch>, CliError> {
        match self {
            Backend::Sqlite(location) => sqlite::force_release(location, table, lease),
            #[cfg(feature = "postgres")]
            Backend::Postgres(target) => postgres::force_release(target, table, lease, ttl),
            #[cfg(feature = "mysql")]
            Backend::Mysql(target) => mysql::force_release(target, table, lease, ttl),
        }
    }

    /// `release --all --after-failover`: every lease and membership row
    /// put into a grace period of `ttl`; each row's name and new epoch.
    pub fn release_after_failover(
        &self,
        table: &TableName,
        ttl: Duration,
    ) -> Result<Vec<(String, Epoch)>, CliError> {
        match self {
            Backend::Sqlite(location) => sqlite::release_after_failover(location, table, ttl),
            #[cfg(feature = "postgres")]
            Backend::Postgres(target) => postgres::release_after_failover(target, table, ttl),
            #[cfg(feature = "mysql")]
            Backend::Mysql(target) => mysql::release_after_failover(target, table, ttl),
        }
    }

    /// `run` (and `bench`): starts a contender for `leases` on `table`,
    /// with `gated` (CMD) as each term's work.
    pub fn start(
        &self,
        table: &TableName,
        leases: Leases,
        gated: Option<Arc<Gated>>,
    ) -> Result<Started, CliError> {
        match self {
            Backend::Sqlite(location) => sqlite::start(location, table, leases, gated),
            #[cfg(feature = "postgres")]
            Backend::Postgres(target) => server::start::<picolease::postgres::Postgres>(
                postgres::checked_runtime(target)?,
                "PostgreSQL",
                target.connector().clone(),
                table,
                leases,
                gated,
            ),
            #[cfg(feature = "mysql")]
            Backend::Mysql(target) => server::start::<picolease::mysql::Mysql>(
                mysql::checked_runtime(target, table)?,
                "MySQL",
                target.connector().clone(),
                table,
                leases,
                gated,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            Backend::parse("sqlite://picolease.db").unwrap(),
            Backend::Sqlite(Location::file("picolease.db"))
        );
        assert_eq!(
            Backend::parse("sqlite:///tmp/a.db").unwrap(),
            Backend::Sqlite(Location::file("/tmp/a.db"))
        );
        assert_eq!(
            Backend::parse("sqlite::memory:").unwrap(),
            Backend::Sqlite(Location::Memory)
        );
        assert!(Backend::parse("mysql://x").is_err());
        assert!(Backend::parse("sqlite://").is_err());
        let foreign = Backend::parse("oracle://u:secret@h/db")
            .unwrap_err()
            .to_string();
        assert!(!foreign.contains("secret"), "{foreign}");
        // A MySQL URL: its password hidden wherever it is shown.
        let mysql = Backend::parse("mariadb://u:secret@h/db").unwrap();
        assert_eq!(mysql.place(), "mariadb://u:***@h/db");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_urls() {
        assert!(matches!(
            Backend::parse("postgres://u:secret@h/db").unwrap(),
            Backend::Postgres(_)
        ));
        assert!(matches!(
            Backend::parse("postgresql://h:5432/db?connect_timeout=2").unwrap(),
            Backend::Postgres(_)
        ));
        let bad = Backend::parse("postgres://u:secret@h:notaport/db").unwrap_err();
        assert!(matches!(bad, CliError::Usage(_)), "{bad:?}");
        assert!(!bad.to_string().contains("secret"), "{bad}");
    }

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn postgres_urls_without_the_feature() {
        let pg = Backend::parse("postgres://u:secret@h/db")
            .unwrap_err()
            .to_string();
        assert!(
            pg.contains("postgres support not built") && !pg.contains("secret"),
            "{pg}"
        );
    }
}
