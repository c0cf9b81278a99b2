//! The statement connection of a MySQL driver, a lone lease's or a set's:
//! connected on demand (the table created on first connect), reused,
//! dropped when it breaks or a statement on it fails for a reason that is
//! not contention, killed on the server when the engine gives up on its
//! statement, and reconnected with the shared capped, jittered backoff.
//!
//! A statement with a read-back (MySQL has no `RETURNING`) runs with it in
//! one transaction, as [`picolease_core::sql::ReadBack`] prescribes; the
//! rows decoded are the read's, never the write's row count.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use mysql_async::consts::ColumnType;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params};
use picolease_core::sql::{Cell, Statement, Statements, Value};
use picolease_core::Operation;
use tokio::time::Instant;

use super::connect::MysqlConnector;
use super::error::MysqlError;
use super::wake::WakeLock;
use crate::server::backoff::Reconnect;
use crate::server::server_change::ServerWatch;
use crate::server::{answer, batch_name, operation_name, ran_name, Binding};
use picolease_core::engine::{Answer, Ran};

struct LinkState {
    /// The connection between statements.
    idle: Option<Conn>,
    /// The server's id of the connection a statement is running on.
    busy: Option<u32>,
}

/// The statement connection of one driver.
/// `pub` only for the sealed `Driver` impl; its module is private.
pub struct Link {
    connector: MysqlConnector,
    statements: Arc<Statements>,
    auto_create: bool,
    /// A lone lease's release wake-up, when it has one (`wake.rs`).
    wake: Option<Arc<WakeLock>>,
    state: Mutex<LinkState>,
    reconnect: Reconnect,
    /// The server's incarnation (`@@server_id`) as of the last connection.
    server: ServerWatch,
}

impl Link {
    pub(crate) fn new(
        connector: MysqlConnector,
        statements: Arc<Statements>,
        auto_create: bool,
        backoff_cap: Duration,
        wake: Option<Arc<WakeLock>>,
    ) -> Self {
        Link {
            connector,
            server: ServerWatch::new(&statements),
            statements,
            auto_create,
            wake,
            state: Mutex::new(LinkState {
                idle: None,
                busy: None,
            }),
            reconnect: Reconnect::new(backoff_cap),
        }
    }

    fn state(&self) -> MutexGuard<'_, LinkState> {
        // Each critical section is a single assignment: poisoning cannot
        // leave the state inconsistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn table(&self) -> String {
        self.statements.table().to_string()
    }

    /// The idle connection, or a new one (after the backoff) if there is
    /// none; marked busy until given back.
    async fn session(
        &self,
        during: &'static str,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Conn, MysqlError> {
        {
            let mut state = self.state();
            if let Some(conn) = state.idle.take() {
                state.busy = Some(conn.id());
                return Ok(conn);
            }
        }
        let attempt = |table_ready: bool| async move {
            let mut conn = self.connector.connect(timeout).await?;
            if self.statements.renews_by_liveness() {
                super::version::refuse_mysql_proper(&mut conn).await?;
            }
            if self.auto_create && !table_ready {
                create_table(&mut conn, &self.statements).await?;
            }
            self.observe_server(&mut conn).await;
            Ok::<_, MysqlError>(conn)
        };
        let backing_off = |reason| MysqlError::Connect { reason };
        let timed_out = || MysqlError::Timeout {
            during,
            after: timeout,
        };
        let conn = self
            .reconnect
            .connect(deadline, attempt, backing_off, timed_out)
            .await?;
        tracing::debug!(table = %self.statements.table(), id = conn.id(), "picolease: connected");
        self.state().busy = Some(conn.id());
        Ok(conn)
    }

    /// Reads the `@@server_id` a new connection reached, so that a
    /// promoted replica is told to the operator (`server/server_change.rs`).
    /// A failure is only logged: the statements check the incarnation
    /// themselves.
    async fn observe_server(&self, conn: &mut Conn) {
        let Some(select) = self.statements.server_incarnation() else {
            return;
        };
        match conn.query_first::<String, _>(select).await {
            Ok(Some(now)) => {
                self.server.record(&self.statements, now);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(error = %e, "picolease: could not read the server's incarnation");
            }
        }
    }

    /// Gives `conn` back after a statement, or drops it (retired) after
    /// an error that is not contention.
    async fn give_back(&self, mut conn: Conn, error: Option<&MysqlError>) {
        if let Some(error) = error {
            if error.retires_session() {
                self.state().busy = None;
                self.reconnect.failed(error.to_string());
                tracing::info!(error = %error, table = %self.statements.table(), "picolease: retiring the session; the next statement connects afresh");
                return;
            }
            // Contention: the transaction may still be open.
            if let Err(e) = conn.query_drop("ROLLBACK").await {
                tracing::info!(error = %e, "picolease: rollback failed; retiring the session");
                self.state().busy = None;
                return;
            }
        }
        let mut state = self.state();
        state.busy = None;
        state.idle = Some(conn);
    }

    /// Runs `statement` (with its read-backs, in one transaction; `values`
    /// are each step's, in [`Statement::in_order`]'s order) and returns
    /// the rows to decode. After a lone lease's `operation` the wake-up
    /// lock follows its answer on the same session.
    async fn rows(
        &self,
        during: &'static str,
        statement: &Statement,
        values: Vec<Vec<Value<'_>>>,
        deadline: Instant,
        binding: &Binding,
        operation: Option<Operation>,
    ) -> Result<Vec<Vec<Cell>>, MysqlError> {
        let mut conn = self.session(during, deadline, binding.timeout).await?;
        let mut result = run(&mut conn, statement, values.clone()).await;
        // A chain that deadlocked was rolled back whole (what it committed
        // first, a kill, stays done and is a no-op the second time): it
        // runs again at once, within the operation's deadline, where the
        // set would otherwise wait an interval for its next try. Renewing
        // by liveness on MariaDB, the acquires of a takeover of 10 x 10,000
        // still deadlock 4 to 8 times (19 to 64 before the acquire judged
        // ended livenesses without a lock, when a few percent of a crashed
        // node's leases were taken an interval late).
        let mut retries = 0;
        while statement.read_back().is_some()
            && retries < DEADLOCK_RETRIES
            && Instant::now() < deadline
            && matches!(&result, Err(mysql_async::Error::Server(e)) if e.code == ER_LOCK_DEADLOCK)
        {
            retries += 1;
            if conn.query_drop("ROLLBACK").await.is_err() {
                break;
            }
            result = run(&mut conn, statement, values.clone()).await;
        }
        if let (Ok(rows), Some(wake), Some(operation)) = (&result, &self.wake, operation) {
            if let Ok(reply) = self
                .statements
                .decode_reply(operation, &binding.holder, rows)
            {
                wake.follow(&mut conn, operation, &reply).await;
            }
        }
        let result = result.map_err(|e| MysqlError::from_statement(during, &self.table(), &e));
        self.give_back(conn, result.as_ref().err()).await;
        result
    }

    async fn execute(
        &self,
        binding: Binding,
        statement: picolease_core::engine::Statement,
    ) -> (Answer, Option<MysqlError>) {
        let deadline = Instant::now() + binding.timeout;
        let statements = Arc::clone(&self.statements);
        let ran = Ran::of(&statement);
        let rows = match statement {
            picolease_core::engine::Statement::Row(operation) => {
                let bindings = binding.bindings();
                let sql = statements.for_operation(operation);
                let epoch = operation.epoch();
                let values = sql
                    .in_order()
                    .0
                    .iter()
                    .map(|step| step.bind(&bindings, epoch).collect())
                    .collect();
                let during = operation_name(operation);
                self.rows(during, sql, values, deadline, &binding, Some(operation))
                    .await
            }
            picolease_core::engine::Statement::Batch(batch) => {
                let json = batch.json();
                let bindings = binding.batch_bindings(&json);
                let sql = statements.for_batch(batch.kind);
                let values = sql
                    .in_order()
                    .0
                    .iter()
                    .map(|step| step.bind_batch(&bindings).collect())
                    .collect();
                let during = batch_name(batch.kind);
                self.rows(during, sql, values, deadline, &binding, None)
                    .await
            }
        };
        answer(&statements, ran, &binding, rows)
    }
}

impl crate::server::Link for Link {
    type Error = MysqlError;

    fn execute(
        self: Arc<Self>,
        binding: Binding,
        statement: picolease_core::engine::Statement,
    ) -> BoxFuture<'static, (Answer, Option<MysqlError>)> {
        async move { Link::execute(&self, binding, statement).await }.boxed()
    }

    /// The statement's future (and the connection it held) is dropped:
    /// kill the connection on the server, so its statement stops and its
    /// transaction rolls back there too.
    fn abandon(&self, ran: Ran, timeout: Duration) -> MysqlError {
        self.reconnect.failed("a statement timed out".into());
        let busy = self.state().busy.take();
        if let Some(id) = busy {
            let connector = self.connector.clone();
            // Never waited for: the server may be unreachable.
            tokio::spawn(async move {
                let _ = tokio::time::timeout(timeout, connector.kill(id)).await;
            });
        }
        MysqlError::Timeout {
            during: ran_name(ran),
            after: timeout,
        }
    }
}

/// MySQL's error code for a deadlock: the server rolled the transaction
/// back.
const ER_LOCK_DEADLOCK: u16 = 1213;

/// How often a deadlocked statement with read-backs runs again at once.
const DEADLOCK_RETRIES: u32 = 3;

/// Runs `statement` on `conn`: alone, or with its read-backs in one
/// transaction ([`Statement::in_order`], `values` each step's in that
/// order; the first [`Statement::committed_first`] steps each in a
/// transaction of its own before it), the reply's rows the result.
pub(crate) async fn run(
    conn: &mut Conn,
    statement: &Statement,
    values: Vec<Vec<Value<'_>>>,
) -> Result<Vec<Vec<Cell>>, mysql_async::Error> {
    let (steps, reply) = statement.in_order();
    debug_assert_eq!(steps.len(), values.len(), "one set of values a step");
    if let ([alone], [values]) = (&steps[..], &values[..]) {
        let rows: Vec<mysql_async::Row> = conn.exec(alone.sql(), params(values)).await?;
        return Ok(rows.iter().map(cells).collect());
    }
    let alone = statement.committed_first();
    let mut rows: Vec<mysql_async::Row> = Vec::new();
    for (at, (step, values)) in steps.iter().zip(&values).enumerate() {
        if at <= alone {
            conn.query_drop(picolease_core::sql::MYSQL_BEGIN).await?;
        }
        if at == reply {
            rows = conn.exec(step.sql(), params(values)).await?;
        } else {
            conn.exec_drop(step.sql(), params(values)).await?;
        }
        if at < alone {
            conn.query_drop("COMMIT").await?;
        }
    }
    conn.query_drop("COMMIT").await?;
    Ok(rows.iter().map(cells).collect())
}

/// Creates the table (and its `(name, epoch)` index, part of the
/// `CREATE TABLE` on MySQL) if it is missing.
pub(crate) async fn create_table(
    conn: &mut Conn,
    statements: &Statements,
) -> Result<(), MysqlError> {
    let table = statements.table().to_string();
    conn.query_drop(statements.create_table())
        .await
        .map_err(|e| MysqlError::from_statement("create table", &table, &e))?;
    if let Some(index) = statements.create_index() {
        conn.query_drop(index)
            .await
            .map_err(|e| MysqlError::from_statement("create index", &table, &e))?;
    }
    Ok(())
}

/// The values of a statement as mysql_async binds them.
fn params(values: &[Value<'_>]) -> Params {
    if values.is_empty() {
        return Params::Empty;
    }
    Params::Positional(
        values
            .iter()
            .map(|v| match v {
                Value::Text(s) => mysql_async::Value::Bytes(s.as_bytes().to_vec()),
                Value::Int(n) => mysql_async::Value::Int(*n),
            })
            .collect(),
    )
}

/// A row as [`Cell`]s: integers as `Int`, the string and binary-string
/// types (the `VARBINARY` name and holder among them) as `Text` when they
/// are UTF-8, anything else by its type's name (which the decoder
/// reports as a malformed row).
fn cells(row: &mysql_async::Row) -> Vec<Cell> {
    let columns = row.columns_ref();
    (0..row.len())
        .map(|i| {
            let ty = columns[i].column_type();
            match row.as_ref(i) {
                None | Some(mysql_async::Value::NULL) => Cell::Null,
                Some(mysql_async::Value::Int(n)) => Cell::Int(*n),
                Some(mysql_async::Value::UInt(n)) => i64::try_from(*n)
                    .map(Cell::Int)
                    .unwrap_or_else(|_| Cell::Other(format!("unsigned {n}"))),
                Some(mysql_async::Value::Bytes(bytes)) if is_string(ty) => {
                    String::from_utf8(bytes.clone())
                        .map(Cell::Text)
                        .unwrap_or_else(|_| Cell::Other("non-UTF-8 bytes".into()))
                }
                Some(_) => Cell::Other(format!("{ty:?}")),
            }
        })
        .collect()
}

fn is_string(ty: ColumnType) -> bool {
    matches!(
        ty,
        ColumnType::MYSQL_TYPE_VARCHAR
            | ColumnType::MYSQL_TYPE_VAR_STRING
            | ColumnType::MYSQL_TYPE_STRING
            | ColumnType::MYSQL_TYPE_BLOB
            | ColumnType::MYSQL_TYPE_TINY_BLOB
            | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
            | ColumnType::MYSQL_TYPE_LONG_BLOB
    )
}
