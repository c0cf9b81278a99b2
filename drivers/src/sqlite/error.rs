//! The one error type of the SQLite driver.

use picolease_core::{ConfigError, RowError};

/// Everything that can go wrong in the SQLite driver. Every message names
/// the value at fault (the path, the table, the lease).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteError {
    /// The timings, lease name, holder id or table name cannot be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The database file could not be opened or created.
    #[error("cannot open SQLite database {path:?}: {source}")]
    Open {
        /// The path given.
        path: String,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// The path names a directory.
    #[error("SQLite database path {path:?} is a directory, not a file")]
    IsDirectory {
        /// The path given.
        path: String,
    },
    /// The file exists but is not a SQLite database.
    #[error("{path:?} is not a SQLite database")]
    NotADatabase {
        /// The path given.
        path: String,
    },
    /// The database file is missing and creating it was not allowed.
    #[error(
        "SQLite database {path:?} does not exist (auto-create is off; run `picolease init` first)"
    )]
    MissingDatabase {
        /// The path given.
        path: String,
    },
    /// The lease table is missing and creating it was not allowed.
    #[error("table {table:?} does not exist in {path:?} (auto-create is off; run `picolease init` first)")]
    MissingTable {
        /// The table name.
        table: String,
        /// The database path.
        path: String,
    },
    /// The table exists but lacks the lease columns: another program's table.
    #[error("table {table:?} in {path:?} is not a lease table: {detail}")]
    BadSchema {
        /// The table name.
        table: String,
        /// The database path.
        path: String,
        /// What SQLite said.
        detail: String,
    },
    /// A lease row has a shape the protocol never writes (NULL or negative
    /// epoch, wrong column type): it was left untouched.
    #[error("malformed row in table {table:?}: {source}")]
    Row {
        /// The table name.
        table: String,
        /// What was wrong with the row.
        source: RowError,
    },
    /// Any other SQLite failure.
    #[error("SQLite error on {path:?}: {source}")]
    Sqlite {
        /// The database path.
        path: String,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// The driver thread could not be started.
    #[error("cannot start the lease thread: {0}")]
    Spawn(String),
    /// The driver thread panicked (a bug: please report it).
    #[error("the lease thread for {lease:?} panicked")]
    Panicked {
        /// The lease name.
        lease: String,
    },
}
