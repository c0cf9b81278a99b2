//! The lease table on one connection: the protocol's statements, bound
//! and stepped to completion.
//!
//! Every statement runs in autocommit mode and is stepped to completion
//! before the call returns, so no transaction or read snapshot outlives a
//! call: a contender frozen between statements (SIGSTOP, a debugger) holds
//! no lock that could block the others.

use std::fmt;

use picolease_core::sql::{Bindings, Cell, Dialect, Statements, Value};
use picolease_core::{Failure, HolderId, Operation, Reply, RowError};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::ToSql;

use super::error::SqliteError;
use super::fence::Fence;
use super::open::{classify_open, failure_of, open_connection, Database};

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

/// it to completion.
pub(super) fn run<'v>(
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
    pub(super) conn: rusqlite::Connection,
    pub(super) statements: Statements,
    path: String,
    /// The connection's busy timeout as opened.
    busy_timeout: std::time::Duration,
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
    /// `db.auto_create`, otherwise a [`SqliteError::MissingTable`]. Every lease
    /// statement is prepared once here, so a table without the lease
    /// columns is reported before anything is written.
    pub fn open(db: &Database) -> Result<Self, SqliteError> {
        Self::open_running(db, Statements::new(Dialect::Sqlite, &db.table))
    }

    /// [`LeaseTable::open`] running `statements` (a lease set's renewing
    /// by liveness, DESIGN §9 "Renewal by liveness", or the plain ones) on `db`'s table.
    pub(crate) fn open_running(db: &Database, statements: Statements) -> Result<Self, SqliteError> {
        let conn = open_connection(db)?;
        let table = LeaseTable {
            conn,
            statements,
            path: db.path_text(),
            busy_timeout: db.busy_timeout,
        };
        if db.auto_create {
            table.init()?;
        }
        table.check()?;
        Ok(table)
    }

    /// Opens without creating anything and without checking the table
    /// (for reading status of a database that may not have one yet).
    pub fn open_existing(db: &Database) -> Result<Self, SqliteError> {
        let db = db.clone().auto_create(false);
        Ok(LeaseTable {
            conn: open_connection(&db)?,
            statements: Statements::new(Dialect::Sqlite, &db.table),
            path: db.path_text(),
            busy_timeout: db.busy_timeout,
        })
    }

    /// Creates the table if it is missing (`CREATE TABLE IF NOT EXISTS`).
    pub fn init(&self) -> Result<(), SqliteError> {
        self.conn
            .execute_batch(self.statements.create_table())
            .map_err(|e| self.error(e))
    }

    /// True if the lease table exists.
    pub fn exists(&self) -> Result<bool, SqliteError> {
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

    fn check(&self) -> Result<(), SqliteError> {
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
    pub(crate) fn error(&self, source: rusqlite::Error) -> SqliteError {
        let table = self.statements.table().to_string();
        let message = source.to_string();
        if message.contains("no such table") {
            SqliteError::MissingTable {
                table,
                path: self.path.clone(),
            }
        } else if message.contains("no such column") || message.contains("has no column named") {
            SqliteError::BadSchema {
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

    pub(crate) fn row_error(&self, source: RowError) -> SqliteError {
        SqliteError::Row {
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
    ) -> (Reply, Option<SqliteError>) {
        self.execute_within(operation, bindings, me, None)
    }

    /// [`LeaseTable::execute`] for a statement that must return within
    /// `left` (the time to the leader's deadline): the busy wait for
    /// another process's write lock is cut to it (whole milliseconds,
    /// rounded down), then the connection's own busy timeout is put back.
    pub fn execute_within(
        &self,
        operation: Operation,
        bindings: &Bindings<'_>,
        me: &HolderId,
        left: Option<std::time::Duration>,
    ) -> (Reply, Option<SqliteError>) {
        self.within(left, || self.execute_now(operation, bindings, me))
    }

    /// Runs `statement` with the busy timeout cut to `left` when that is
    /// shorter (the deadline wins over I/O, DESIGN §4b), restoring it
    /// after: a statement waiting on another process's lock gives up by
    /// then.
    fn within<T>(&self, left: Option<std::time::Duration>, statement: impl FnOnce() -> T) -> T {
        let capped = left.filter(|left| *left < self.busy_timeout);
        if let Some(left) = capped {
            // Cannot fail: it only installs SQLite's default busy handler.
            let _ = self.conn.busy_timeout(left);
        }
        let result = statement();
        if capped.is_some() {
            let _ = self.conn.busy_timeout(self.busy_timeout);
        }
        result
    }

    fn execute_now(
        &self,
        operation: Operation,
        bindings: &Bindings<'_>,
        me: &HolderId,
    ) -> (Reply, Option<SqliteError>) {
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
                    Some(self.row_error(source.for_lease(bindings.lease))),
                ),
            },
            Err(e) => {
                let failure = failure_of(&e);
                (Reply::Failed(failure), Some(self.error(e)))
            }
        }
    }

    /// Runs one batch of a lease set and decodes its result. The error, if
    /// any, is returned beside the reply so the caller can report it.
    pub(crate) fn execute_batch(
        &self,
        batch: &picolease_core::Batch,
        me: &HolderId,
        ttl_millis: i64,
        stale_millis: i64,
        left: std::time::Duration,
    ) -> (picolease_core::BatchReply, Option<SqliteError>) {
        self.within(Some(left), || {
            self.execute_batch_now(batch, me, ttl_millis, stale_millis)
        })
    }

    fn execute_batch_now(
        &self,
        batch: &picolease_core::Batch,
        me: &HolderId,
        ttl_millis: i64,
        stale_millis: i64,
    ) -> (picolease_core::BatchReply, Option<SqliteError>) {
        use picolease_core::BatchReply;
        let statement = self.statements.for_batch(batch.kind);
        let json = batch.json();
        let bindings = picolease_core::sql::BatchBindings {
            holder: me.as_str(),
            ttl_millis,
            batch: &json,
            stale_millis,
        };
        // SQLite's statements commit nothing first: one transaction.
        debug_assert_eq!(statement.committed_first(), 0);
        let (steps, reply) = statement.in_order();
        let ran = match &steps[..] {
            [alone] => run(&self.conn, alone.sql(), alone.bind_batch(&bindings)),
            // Renewing by liveness (DESIGN §9 "Renewal by liveness"): the write, then the
            // statement whose rows are the reply, in one transaction
            // holding the writer lock from the start.
            _ => self.in_transaction(|conn| {
                let mut rows = Vec::new();
                for (at, step) in steps.iter().enumerate() {
                    let ran = run(conn, step.sql(), step.bind_batch(&bindings))?;
                    if at == reply {
                        rows = ran;
                    }
                }
                Ok(rows)
            }),
        };
        match ran {
            Ok(rows) => match self.statements.decode_batch_reply(batch.kind, me, &rows) {
                Ok(reply) => (reply, None),
                Err(source) => (
                    BatchReply::Failed(Failure::Fatal),
                    Some(self.row_error(source)),
                ),
            },
            Err(e) => (BatchReply::Failed(failure_of(&e)), Some(self.error(e))),
        }
    }

    /// Runs `body` in a transaction that takes the writer lock at once
    /// (`BEGIN IMMEDIATE`), committed when it succeeds and rolled back
    /// when it fails.
    fn in_transaction<T>(
        &self,
        body: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        match body(&self.conn) {
            Ok(value) => match self.conn.execute_batch("COMMIT") {
                Ok(()) => Ok(value),
                Err(e) => {
                    let _ = self.conn.execute_batch("ROLLBACK");
                    Err(e)
                }
            },
            Err(e) => {
                // Nothing to roll back when the transaction is gone (an
                // interrupt may end it); the statement's error is the one
                // to report.
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    /// The database clock in milliseconds (the host's wall clock, as the
    /// lease statements read it), for the clock-step check
    /// (`LeaseState::handle_db_clock`). A few microseconds; `None` when
    /// the read failed (the check is then skipped once).
    pub(crate) fn db_clock_millis(&self) -> Option<i64> {
        let sql = format!(
            "SELECT {}",
            picolease_core::sql::db_now_millis(self.statements.dialect())
        );
        self.conn
            .prepare_cached(&sql)
            .and_then(|mut select| select.query_row([], |row| row.get::<_, i64>(0)))
            .ok()
    }

    /// The change counter (`PRAGMA data_version`, see
    /// `Statements::change_counter`): it moves only when another
    /// connection commits. `None` when the read failed.
    pub(crate) fn change_counter(&self) -> Option<i64> {
        let sql = self.statements.change_counter()?;
        self.conn
            .prepare_cached(sql)
            .and_then(|mut pragma| pragma.query_row([], |row| row.get::<_, i64>(0)))
            .ok()
    }

    /// Evaluates `statement` (a fence or any boolean expression) as
    /// `SELECT <statement>` with the given values.
    pub fn holds(&self, fence: &Fence) -> Result<bool, SqliteError> {
        let sql = format!("SELECT {}", fence.sql());
        self.conn
            .query_row(&sql, fence.params(), |row| row.get::<_, bool>(0))
            .map_err(|e| self.error(e))
    }
}
