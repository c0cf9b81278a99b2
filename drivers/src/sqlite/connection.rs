//! One SQLite connection set up for several processes sharing a file, and
//! the execution of the protocol's statements on it.
//!
//! Every statement runs in autocommit mode and is stepped to completion
//! before the call returns, so no transaction or read snapshot outlives a
//! call: a contender frozen between statements (SIGSTOP, a debugger) holds
//! no lock that could block the others.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use picolease_core::sql::{Bindings, Cell, Dialect, LeaseRow, Statement, Statements, Value};
use picolease_core::{Epoch, HolderId, LeaseName, Operation, Reply, RowError, TableName};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{ErrorCode, OpenFlags, ToSql};

use super::error::Error;
use picolease_core::Failure;

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

    fn path_text(&self) -> String {
        self.location.to_string()
    }
}

/// A bound value as rusqlite wants it, without copying the text.
struct Bound<'a>(Value<'a>);

impl ToSql for Bound<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self.0 {
            Value::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Value::Int(n) => ToSqlOutput::Borrowed(ValueRef::Integer(n)),
        })
    }
}

/// Opens a connection set up for sharing the file between processes: WAL
/// (readers never block the writer), `synchronous = NORMAL` (durable at
/// checkpoints, which is what a lease needs), a busy timeout.
pub fn open_connection(db: &Database) -> Result<rusqlite::Connection, Error> {
    let path = db.path_text();
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = match &db.location {
        Location::Memory => rusqlite::Connection::open_in_memory(),
        Location::File(file) => {
            if db.auto_create {
                flags |= OpenFlags::SQLITE_OPEN_CREATE;
            } else if !file.exists() {
                return Err(Error::MissingDatabase { path });
            }
            if file.is_dir() {
                return Err(Error::IsDirectory { path });
            }
            rusqlite::Connection::open_with_flags(file, flags)
        }
    }
    .map_err(|source| Error::Open {
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
    setup(&conn).map_err(|source| classify_open(&path, source))?;
    Ok(conn)
}

fn classify_open(path: &str, source: rusqlite::Error) -> Error {
    match source.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => Error::NotADatabase { path: path.into() },
        Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly | ErrorCode::PermissionDenied) => {
            Error::Open {
                path: path.into(),
                source,
            }
        }
        _ => Error::Sqlite {
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

/// Reads every row of a prepared, bound statement as [`Cell`]s, stepping
/// it to completion.
fn run<'v>(
    conn: &rusqlite::Connection,
    sql: &str,
    values: impl Iterator<Item = Value<'v>>,
) -> rusqlite::Result<Vec<Vec<Cell>>> {
    let mut stmt = conn.prepare_cached(sql)?;
    for (i, value) in values.enumerate() {
        stmt.raw_bind_parameter(i + 1, Bound(value))?;
    }
    let columns = stmt.column_count();
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let mut cells = Vec::with_capacity(columns);
        for i in 0..columns {
            cells.push(match row.get_ref(i)? {
                ValueRef::Null => Cell::Null,
                ValueRef::Integer(n) => Cell::Int(n),
                ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Real(_) => Cell::Other("real".into()),
                ValueRef::Blob(_) => Cell::Other("blob".into()),
            });
        }
        out.push(cells);
    }
    Ok(out)
}

/// The lease table on one connection: create it, read it, run the
/// protocol's statements on it.
pub struct LeaseTable {
    conn: rusqlite::Connection,
    statements: Statements,
    path: String,
}

impl fmt::Debug for LeaseTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseTable")
            .field("path", &self.path)
            .field("table", &self.statements.table().to_string())
            .finish()
    }
}

impl LeaseTable {
    /// Opens the database and checks the table: created when missing if
    /// `db.auto_create`, otherwise a [`Error::MissingTable`]. Every lease
    /// statement is prepared once here, so a table without the lease
    /// columns is reported before anything is written.
    pub fn open(db: &Database) -> Result<Self, Error> {
        let conn = open_connection(db)?;
        let table = LeaseTable {
            conn,
            statements: Statements::new(Dialect::Sqlite, &db.table),
            path: db.path_text(),
        };
        if db.auto_create {
            table.init()?;
        }
        table.check()?;
        Ok(table)
    }

    /// Opens without creating anything and without checking the table
    /// (for reading status of a database that may not have one yet).
    pub fn open_existing(db: &Database) -> Result<Self, Error> {
        let db = db.clone().auto_create(false);
        Ok(LeaseTable {
            conn: open_connection(&db)?,
            statements: Statements::new(Dialect::Sqlite, &db.table),
            path: db.path_text(),
        })
    }

    /// Creates the table if it is missing (`CREATE TABLE IF NOT EXISTS`).
    pub fn init(&self) -> Result<(), Error> {
        self.conn
            .execute_batch(self.statements.create_table())
            .map_err(|e| self.error(e))
    }

    /// True if the lease table exists.
    pub fn exists(&self) -> Result<bool, Error> {
        let table = self.statements.table().table().to_string();
        self.conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |row| row.get::<_, i64>(0),
            )
            .map(|n| n > 0)
            .map_err(|e| self.error(e))
    }

    fn check(&self) -> Result<(), Error> {
        for statement in [
            self.statements.acquire(),
            self.statements.renew(),
            self.statements.release(),
        ] {
            self.conn
                .prepare_cached(statement.sql())
                .map_err(|e| self.error(e))?;
        }
        Ok(())
    }

    /// Maps an SQLite error to the driver's error, naming the table.
    pub(crate) fn error(&self, source: rusqlite::Error) -> Error {
        let table = self.statements.table().to_string();
        let message = source.to_string();
        if message.contains("no such table") {
            Error::MissingTable {
                table,
                path: self.path.clone(),
            }
        } else if message.contains("no such column") || message.contains("has no column named") {
            Error::BadSchema {
                table,
                path: self.path.clone(),
                detail: message,
            }
        } else {
            classify_open(&self.path, source)
        }
    }

    /// The statements for this table.
    pub fn statements(&self) -> &Statements {
        &self.statements
    }

    /// The connection, for the caller's own (fenced) writes.
    pub fn connection(&self) -> &rusqlite::Connection {
        &self.conn
    }

    /// The database path as given (for messages).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Every lease, by name. A missing table reads as no leases.
    pub fn status(&self) -> Result<Vec<LeaseRow>, Error> {
        if !self.exists()? {
            return Ok(Vec::new());
        }
        let rows = run(
            &self.conn,
            self.statements.status().sql(),
            std::iter::empty(),
        )
        .map_err(|e| self.error(e))?;
        self.statements
            .decode_status(&rows)
            .map_err(|source| self.row_error(source))
    }

    /// Administrative release: frees `lease` whoever holds it and bumps the
    /// epoch. `None` when there is no such lease.
    pub fn force_release(&self, lease: &LeaseName) -> Result<Option<Epoch>, Error> {
        let statement = self.statements.force_release();
        let bindings = Bindings {
            lease: lease.as_str(),
            holder: "",
            ttl_millis: 0,
        };
        let rows = run(&self.conn, statement.sql(), statement.bind(&bindings, None))
            .map_err(|e| self.error(e))?;
        self.statements
            .decode_force_release(&rows)
            .map_err(|source| self.row_error(source))
    }

    pub(crate) fn row_error(&self, source: picolease_core::RowError) -> Error {
        Error::Row {
            table: self.statements.table().to_string(),
            source,
        }
    }

    /// Runs one lease operation and decodes its reply. The error, if any,
    /// is returned beside the reply so the caller can report it.
    pub fn execute(
        &self,
        operation: Operation,
        bindings: &Bindings<'_>,
        me: &HolderId,
    ) -> (Reply, Option<Error>) {
        let statement = self.statements.for_operation(operation);
        match run(
            &self.conn,
            statement.sql(),
            statement.bind(bindings, operation.epoch()),
        ) {
            Ok(rows) => match self.statements.decode_reply(operation, me, &rows) {
                Ok(reply) => (reply, None),
                Err(source) => (
                    Reply::Failed(Failure::Fatal),
                    Some(self.row_error(name_lease(source, bindings.lease))),
                ),
            },
            Err(e) => {
                let failure = failure_of(&e);
                (Reply::Failed(failure), Some(self.error(e)))
            }
        }
    }

    /// Evaluates `statement` (a fence or any boolean expression) as
    /// `SELECT <statement>` with the given values.
    pub fn holds(&self, fence: &Fence) -> Result<bool, Error> {
        let sql = format!("SELECT {}", fence.sql());
        self.conn
            .query_row(&sql, fence.params(), |row| row.get::<_, bool>(0))
            .map_err(|e| self.error(e))
    }
}

/// The fence of one term: a condition true while `holder` holds `lease` at
/// `epoch`, unexpired, on the database's clock (DESIGN §3). AND
/// [`Fence::sql`] into your own `WHERE` and bind [`Fence::params`] after
/// your own parameters, so a stale leader's write changes nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct Fence {
    sql: String,
    params: Vec<rusqlite::types::Value>,
}

impl Fence {
    /// The fence of `holder` on `lease` at `epoch`, for `statements`' table.
    pub fn new(
        statements: &Statements,
        lease: &LeaseName,
        holder: &HolderId,
        epoch: Epoch,
    ) -> Self {
        let statement: &Statement = statements.fence();
        let bindings = Bindings {
            lease: lease.as_str(),
            holder: holder.as_str(),
            ttl_millis: 0,
        };
        let params = statement
            .bind(&bindings, Some(epoch))
            .map(|v| match v {
                Value::Text(s) => rusqlite::types::Value::Text(s.to_string()),
                Value::Int(n) => rusqlite::types::Value::Integer(n),
            })
            .collect();
        Fence {
            sql: statement.sql().to_string(),
            params,
        }
    }

    /// The condition, with positional `?` placeholders.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The values of the condition's placeholders, in order.
    pub fn params(&self) -> rusqlite::ParamsFromIter<std::slice::Iter<'_, rusqlite::types::Value>> {
        rusqlite::params_from_iter(self.params.iter())
    }

    /// The values, to append to your own parameters.
    pub fn values(&self) -> &[rusqlite::types::Value] {
        &self.params
    }
}

/// The core decodes a lease statement's reply without knowing the lease's
/// name (its errors then say `lease ""`); the driver knows it.
fn name_lease(error: RowError, name: &str) -> RowError {
    match error {
        RowError::Null { lease, column } if lease.is_empty() => RowError::Null {
            lease: name.into(),
            column,
        },
        RowError::NegativeEpoch { lease, epoch } if lease.is_empty() => RowError::NegativeEpoch {
            lease: name.into(),
            epoch,
        },
        RowError::WrongType {
            lease,
            column,
            expected,
            found,
        } if lease.is_empty() => RowError::WrongType {
            lease: name.into(),
            column,
            expected,
            found,
        },
        other => other,
    }
}
