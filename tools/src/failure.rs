//! The CLI's one error type and its exit codes: 2 for bad usage or
//! configuration, 1 for a failure at run time.

use std::process::ExitCode;

use picolease::sqlite;

/// An error to print on one line of stderr and exit with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad usage or configuration: exit 2.
    #[error("{0}")]
    Usage(String),
    /// A failure at run time: exit 1.
    #[error("{0}")]
    Runtime(String),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CliError::Usage(_) => ExitCode::from(2),
            CliError::Runtime(_) => ExitCode::from(1),
        }
    }

    /// A bad-usage error from anything printable.
    pub fn usage(e: impl std::fmt::Display) -> Self {
        CliError::Usage(one_line(&e.to_string()))
    }

    /// A run-time error from anything printable.
    pub fn runtime(e: impl std::fmt::Display) -> Self {
        CliError::Runtime(one_line(&e.to_string()))
    }
}

/// Messages from SQLite or the OS may span lines; the CLI prints one.
pub fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl From<sqlite::SqliteError> for CliError {
    /// Pointing at the wrong thing (a bad value, a directory, a foreign file,
    /// a missing table) is a configuration error; everything else happened
    /// at run time.
    fn from(e: sqlite::SqliteError) -> Self {
        match e {
            sqlite::SqliteError::Config(_)
            | sqlite::SqliteError::Open { .. }
            | sqlite::SqliteError::NotADatabase { .. }
            | sqlite::SqliteError::IsDirectory { .. }
            | sqlite::SqliteError::MissingDatabase { .. }
            | sqlite::SqliteError::MissingTable { .. }
            | sqlite::SqliteError::BadSchema { .. } => CliError::usage(e),
            _ => CliError::runtime(e),
        }
    }
}

#[cfg(feature = "mysql")]
impl From<picolease::mysql::MysqlError> for CliError {
    /// As for PostgreSQL: pointing at the wrong thing is a configuration
    /// error; everything else happened at run time.
    fn from(e: picolease::mysql::MysqlError) -> Self {
        use picolease::mysql::MysqlError;
        match e {
            MysqlError::Config(_)
            | MysqlError::InvalidUrl { .. }
            | MysqlError::Login { .. }
            | MysqlError::MissingTable { .. }
            | MysqlError::Schema { .. } => CliError::usage(e),
            _ => CliError::runtime(e),
        }
    }
}

#[cfg(feature = "postgres")]
impl From<picolease::postgres::PgError> for CliError {
    /// As on SQLite: pointing at the wrong thing (a malformed URL, a bad
    /// value, refused credentials or an unknown database, a missing table,
    /// a table of another shape) is a configuration error; everything else
    /// (an unreachable server, a lost connection, a malformed row) happened
    /// at run time.
    fn from(e: picolease::postgres::PgError) -> Self {
        use picolease::postgres::PgError;
        match e {
            PgError::Config(_)
            | PgError::InvalidUrl { .. }
            | PgError::Login { .. }
            | PgError::MissingTable { .. }
            | PgError::MissingIndex { .. }
            | PgError::Schema { .. } => CliError::usage(e),
            _ => CliError::runtime(e),
        }
    }
}
