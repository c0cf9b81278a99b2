//! Opening the database file: where it is, how it is shared between
//! processes, and how SQLite's errors are sorted.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use picolease_core::{Failure, TableName};
use rusqlite::{ErrorCode, OpenFlags};

use super::error::SqliteError;

/// Where the database lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A file shared by every contender (each opens its own connection).
    File(PathBuf),
    /// A private in-memory database: one connection, one process. Useful
    /// for trying the API; contenders cannot share it.
    Memory,
}

impl Location {
    /// A file location.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Location::File(path.into())
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File(path) => write!(f, "{}", path.display()),
            Location::Memory => f.write_str(":memory:"),
        }
    }
}

/// How to open the database.
#[derive(Clone, Debug)]
pub struct Database {
    /// The file or memory.
    pub location: Location,
    /// The lease table.
    pub table: TableName,
    /// Create the file and the table when missing (default true).
    pub auto_create: bool,
    /// How long SQLite retries a locked database before reporting busy.
    /// The driver sets it below the request timeout.
    pub busy_timeout: Duration,
}

impl Database {
    /// The default table in `location`, created when missing, with a busy
    /// timeout of 1 s.
    pub fn new(location: Location) -> Self {
        Database {
            location,
            table: TableName::default(),
            auto_create: true,
            busy_timeout: Duration::from_secs(1),
        }
    }

    /// A file database with the default table.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self::new(Location::file(path))
    }

    /// Uses `table` instead of the default.
    pub fn table(mut self, table: TableName) -> Self {
        self.table = table;
        self
    }

    /// Whether to create the file and the table when missing.
    pub fn auto_create(mut self, yes: bool) -> Self {
        self.auto_create = yes;
        self
    }

    pub(crate) fn path_text(&self) -> String {
        self.location.to_string()
    }
}

/// Opens a connection set up for sharing the file between processes: WAL
/// (readers never block the writer), `synchronous = NORMAL` (durable at
/// checkpoints, which is what a lease needs), a busy timeout.
pub fn open_connection(db: &Database) -> Result<rusqlite::Connection, SqliteError> {
    let path = db.path_text();
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = match &db.location {
        Location::Memory => rusqlite::Connection::open_in_memory(),
        Location::File(file) => {
            if db.auto_create {
                flags |= OpenFlags::SQLITE_OPEN_CREATE;
            } else if !file.exists() {
                return Err(SqliteError::MissingDatabase { path });
            }
            if file.is_dir() {
                return Err(SqliteError::IsDirectory { path });
            }
            rusqlite::Connection::open_with_flags(file, flags)
        }
    }
    .map_err(|source| SqliteError::Open {
        path: path.clone(),
        source,
    })?;
    let setup = |conn: &rusqlite::Connection| -> rusqlite::Result<()> {
        conn.busy_timeout(db.busy_timeout)?;
        // Reading the schema is the first real access: a foreign file
        // fails here, before anything is written.
        conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
        let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.set_prepared_statement_cache_capacity(16);
        Ok(())
    };
    // Switching a fresh file to WAL needs a lock SQLite does not wait for
    // with its busy handler: processes starting together on one new file
    // can see "database is locked" here. Retry within the busy timeout.
    let give_up = std::time::Instant::now() + db.busy_timeout;
    loop {
        match setup(&conn) {
            Ok(()) => return Ok(conn),
            Err(e)
                if failure_of(&e) == Failure::Transient && std::time::Instant::now() < give_up =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(source) => return Err(classify_open(&path, source)),
        }
    }
}

pub(crate) fn classify_open(path: &str, source: rusqlite::Error) -> SqliteError {
    match source.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => SqliteError::NotADatabase { path: path.into() },
        Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly | ErrorCode::PermissionDenied) => {
            SqliteError::Open {
                path: path.into(),
                source,
            }
        }
        _ => SqliteError::Sqlite {
            path: path.into(),
            source,
        },
    }
}

/// Whether retrying can help: lock contention, an interrupted (timed-out)
/// statement, I/O trouble. Anything else (a missing table or column, a
/// constraint, a type mismatch) will fail the same way again.
pub(crate) fn failure_of(error: &rusqlite::Error) -> Failure {
    match error.sqlite_error_code() {
        Some(
            ErrorCode::DatabaseBusy
            | ErrorCode::DatabaseLocked
            | ErrorCode::OperationInterrupted
            | ErrorCode::SystemIoFailure
            | ErrorCode::DiskFull
            | ErrorCode::CannotOpen
            | ErrorCode::FileLockingProtocolFailed
            | ErrorCode::SchemaChanged
            | ErrorCode::OutOfMemory,
        ) => Failure::Transient,
        _ => Failure::Fatal,
    }
}
