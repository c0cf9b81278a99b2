//! The statement connection of a PostgreSQL driver, a lone lease's or a
//! lease set's (the one link both use): connected on demand, its prepared
//! statements reused across renewals (a lone lease's three, a set's four
//! batches, each group prepared pipelined on first use), dropped when it
//! breaks, when a statement on it times out or fails for a reason that is
//! not clearly transient ([`PgError::retires_session`]), and reconnected
//! with capped, jittered backoff.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use picolease_core::sql::{BatchBindings, Bindings, Cell, Statement, Statements, Value};
use picolease_core::{BatchKind, Operation};
use tokio::sync::OnceCell;
use tokio::time::Instant;
use tokio_postgres::{CancelToken, Client};

use super::admin::create_table;
use super::cells::{param_type, rows_to_cells, to_sql, typed};
use super::connect::Connect;
use super::error::PgError;
use super::pooler::Pooler;
use super::server_change::PgServerWatch;
use crate::server::backoff::Reconnect;
use crate::server::{batch_name, operation_name};

/// Every batch statement, prepared together.
const BATCH_KINDS: [BatchKind; 4] = [
    BatchKind::Acquire,
    BatchKind::Renew,
    BatchKind::Release,
    BatchKind::Survey,
];

/// One live connection and the statements prepared on it.
pub(crate) struct Session {
    client: Client,
    acquire: OnceCell<tokio_postgres::Statement>,
    renew: OnceCell<tokio_postgres::Statement>,
    release: OnceCell<tokio_postgres::Statement>,
    /// Prepared on first use (a planned handover is rare).
    hand_over: OnceCell<tokio_postgres::Statement>,
    announce: OnceCell<tokio_postgres::Statement>,
    /// A lease set's four batch statements.
    batches: OnceCell<HashMap<BatchKind, tokio_postgres::Statement>>,
}

impl Session {
    fn new(client: Client) -> Self {
        Session {
            client,
            acquire: OnceCell::new(),
            renew: OnceCell::new(),
            release: OnceCell::new(),
            hand_over: OnceCell::new(),
            announce: OnceCell::new(),
            batches: OnceCell::new(),
        }
    }

    /// The batch's prepared statement; on first use of this connection
    /// all four batch statements are prepared at once (pipelined).
    async fn prepared_batch(
        &self,
        kind: BatchKind,
        statements: &Statements,
    ) -> Result<&tokio_postgres::Statement, tokio_postgres::Error> {
        let prepared = self
            .batches
            .get_or_try_init(|| async {
                let prepares = BATCH_KINDS.map(|kind| {
                    let statement = statements.for_batch(kind);
                    let types: Vec<_> =
                        statement.params().iter().copied().map(param_type).collect();
                    let client = &self.client;
                    async move {
                        client
                            .prepare_typed(statement.sql(), &types)
                            .await
                            .map(|prepared| (kind, prepared))
                    }
                });
                let prepared = futures::future::try_join_all(prepares).await?;
                Ok::<_, tokio_postgres::Error>(prepared.into_iter().collect())
            })
            .await?;
        Ok(&prepared[&kind])
    }

    /// The operation's prepared statement. On first use of this
    /// connection all three lease statements are prepared at once (the
    /// requests are pipelined: about one round trip), so no later
    /// statement, above all the release at shutdown, pays a Parse round
    /// trip of its own.
    async fn prepared(
        &self,
        operation: Operation,
        statements: &Statements,
    ) -> Result<&tokio_postgres::Statement, tokio_postgres::Error> {
        let cell = match operation {
            Operation::Acquire => &self.acquire,
            Operation::Renew { .. } => &self.renew,
            Operation::Release { .. } => &self.release,
            Operation::HandOver { .. } => &self.hand_over,
            Operation::Announce => &self.announce,
        };
        if self.acquire.get().is_none() {
            futures::try_join!(
                prepare_into(&self.client, &self.acquire, statements.acquire()),
                prepare_into(&self.client, &self.renew, statements.renew()),
                prepare_into(&self.client, &self.release, statements.release()),
            )?;
        }
        cell.get_or_try_init(|| async {
            let statement = statements.for_operation(operation);
            let types: Vec<_> = statement.params().iter().copied().map(param_type).collect();
            self.client.prepare_typed(statement.sql(), &types).await
        })
        .await
    }
}

/// Prepares `statement` into `cell` unless it already holds one.
async fn prepare_into(
    client: &Client,
    cell: &OnceCell<tokio_postgres::Statement>,
    statement: &Statement,
) -> Result<(), tokio_postgres::Error> {
    let types: Vec<_> = statement.params().iter().copied().map(param_type).collect();
    cell.get_or_try_init(|| client.prepare_typed(statement.sql(), &types))
        .await
        .map(drop)
}

/// The connection of one driver, shared between the driver loop and the
/// statement in flight (at most one, so nothing contends for it).
/// `pub` only for the sealed `Driver` impl; its module is private.
pub struct Link {
    connector: Arc<dyn Connect>,
    statements: Arc<Statements>,
    auto_create: bool,
    /// Send every statement unnamed (`query_typed`): a transaction pooler
    /// is in the way, said by the connector or met ([`PgError::Pooler`]).
    unnamed: AtomicBool,
    /// The live session, if any.
    current: Mutex<Option<Arc<Session>>>,
    reconnect: Reconnect,
    /// The server's incarnation as of the last connection.
    server: PgServerWatch,
}

/// What one statement needs besides the link: its bound values' sources.
pub(crate) struct Call {
    pub(crate) operation: Operation,
    pub(crate) lease: Arc<str>,
    pub(crate) holder: Arc<str>,
    pub(crate) ttl_millis: i64,
    /// A hand-over's reservation.
    pub(crate) successor: Arc<str>,
    /// How long a hand-over reserves the row, in milliseconds.
    pub(crate) reservation_millis: i64,
    /// This node's announcement as a candidate.
    pub(crate) candidacy: Arc<str>,
    /// The request timeout runs out here: connecting or backing off past
    /// it is pointless.
    pub(crate) deadline: Instant,
    /// The request timeout (for messages).
    pub(crate) timeout: Duration,
}

impl Link {
    pub(crate) fn new(
        connector: Arc<dyn Connect>,
        statements: Arc<Statements>,
        auto_create: bool,
        backoff_cap: Duration,
    ) -> Self {
        Link {
            unnamed: AtomicBool::new(connector.pooler() != Pooler::None),
            connector,
            server: PgServerWatch::new(&statements),
            statements,
            auto_create,
            current: Mutex::new(None),
            reconnect: Reconnect::new(backoff_cap),
        }
    }

    fn current(&self) -> MutexGuard<'_, Option<Arc<Session>>> {
        // A panic while holding this lock cannot leave it inconsistent (each
        // critical section is a single assignment), so poisoning is ignored.
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn table(&self) -> String {
        self.statements.table().to_string()
    }

    /// Runs one lease statement and returns its rows as cells.
    pub(crate) async fn execute(&self, call: Call) -> Result<Vec<Vec<Cell>>, PgError> {
        let during = operation_name(call.operation);
        let session = self.session(during, call.deadline, call.timeout).await?;
        let statement = self.statements.for_operation(call.operation);
        let bindings = Bindings {
            lease: &call.lease,
            holder: &call.holder,
            ttl_millis: call.ttl_millis,
            successor: &call.successor,
            reservation_millis: call.reservation_millis,
            candidacy: &call.candidacy,
        };
        let values: Vec<_> = statement.bind(&bindings, call.operation.epoch()).collect();
        let prepared = session.prepared(call.operation, &self.statements);
        let result = self.query(&session, statement, &values, prepared).await;
        result.map_err(|e| self.failed(&session, during, &e))
    }

    /// Runs one batch of a lease set and returns its rows as cells. The
    /// time is the set's to keep: past its give-up the set's task drops
    /// this future and calls [`Link::abandon`]; `deadline` only bounds
    /// connecting and backing off.
    pub(crate) async fn execute_batch(
        &self,
        kind: BatchKind,
        bindings: &BatchBindings<'_>,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Vec<Vec<Cell>>, PgError> {
        let during = batch_name(kind);
        let session = self.session(during, deadline, timeout).await?;
        let statement = self.statements.for_batch(kind);
        let values: Vec<_> = statement.bind_batch(bindings).collect();
        let prepared = session.prepared_batch(kind, &self.statements);
        let result = self.query(&session, statement, &values, prepared).await;
        result.map_err(|e| self.failed(&session, during, &e))
    }

    /// Runs `statement` with `values` on `session` and returns its rows as
    /// cells: unnamed when a transaction pooler is in the way, else as the
    /// statement `prepared` on this session (awaited only then).
    async fn query<'s>(
        &self,
        session: &'s Session,
        statement: &Statement,
        values: &[Value<'_>],
        prepared: impl Future<Output = Result<&'s tokio_postgres::Statement, tokio_postgres::Error>>,
    ) -> Result<Vec<Vec<Cell>>, tokio_postgres::Error> {
        let rows = if self.unnamed.load(Ordering::Relaxed) {
            let params = typed(statement, values);
            session.client.query_typed(statement.sql(), &params).await?
        } else {
            let params: Vec<_> = values.iter().map(to_sql).collect();
            session.client.query(prepared.await?, &params).await?
        };
        rows_to_cells(&rows)
    }

    /// The error of a statement on `session`, which is retired when the
    /// connection broke or the error is not clearly transient.
    fn failed(
        &self,
        session: &Arc<Session>,
        during: &'static str,
        e: &tokio_postgres::Error,
    ) -> PgError {
        let error = PgError::from_statement(during, &self.table(), e);
        if matches!(error, PgError::Pooler { .. }) && !self.unnamed.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %error, "picolease: a transaction pooler is in the way; sending unnamed statements from now on");
        }
        if session.client.is_closed() || error.retires_session() {
            self.retire(session, &error);
        }
        error
    }

    /// The live session, connecting (after the backoff) if there is none.
    async fn session(
        &self,
        during: &'static str,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Arc<Session>, PgError> {
        {
            let mut current = self.current();
            match &*current {
                Some(session) if !session.client.is_closed() => return Ok(session.clone()),
                _ => *current = None,
            }
        }
        let attempt = |table_ready: bool| async move {
            let client = self
                .connector
                .connect()
                .await
                .map_err(|e| PgError::from_connect(&e))?;
            if self.auto_create && !table_ready {
                create_table(&client, &self.statements).await?;
            } else if !table_ready {
                check_fence_index(&client, &self.statements).await?;
            }
            // Only a pooler the URL names keeps the session's keepalives
            // unset: an unannounced one (unnamed statements by default)
            // is most often no pooler at all, and a cut-off client's
            // sessions must still be given up by the server.
            let pooled = self.connector.pooler() == Pooler::Transaction;
            self.server.observe(&client, &self.statements, pooled).await;
            Ok::<_, PgError>(client)
        };
        let backing_off = |reason| PgError::Connect { reason };
        let timed_out = || PgError::Timeout {
            during,
            after: timeout,
        };
        let client = self
            .reconnect
            .connect(deadline, attempt, backing_off, timed_out)
            .await?;
        tracing::debug!(table = %self.statements.table(), "picolease: connected");
        let session = Arc::new(Session::new(client));
        *self.current() = Some(session.clone());
        Ok(session)
    }

    /// Drops `session` after a statement on it failed for a reason that is
    /// not clearly transient (DESIGN §4b: a session that fails for a reason
    /// of its own is replaced, never retried for ever). The next statement
    /// connects afresh, after the backoff this failure adds to.
    fn retire(&self, session: &Arc<Session>, error: &PgError) {
        let mut current = self.current();
        if current
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, session))
        {
            *current = None;
            self.reconnect.failed(error.to_string());
            tracing::info!(error = %error, table = %self.statements.table(), "picolease: retiring the session; the next statement connects afresh");
        }
    }

    /// A statement on the current connection timed out: the connection is
    /// suspect (a stalled socket would hold every later statement), so it is
    /// dropped; returns its cancel token so the server-side query can be
    /// cancelled.
    pub(crate) fn abandon(&self) -> Option<CancelToken> {
        let session = self.current().take()?;
        Some(session.client.cancel_token())
    }

    /// The statements this link runs.
    pub(crate) fn statements(&self) -> &Statements {
        &self.statements
    }

    /// The connector (to send cancel requests with).
    pub(crate) fn connector(&self) -> &Arc<dyn Connect> {
        &self.connector
    }
}

/// With table creation off: the table the user made must have the
/// fence's unique index (`Statements::fence_index_check`), or fenced
/// writes would not hold a takeover back; a clear error naming the
/// statement that adds it. A missing table is left to the statements'
/// own error; a failed check to the next attempt.
async fn check_fence_index(client: &Client, statements: &Statements) -> Result<(), PgError> {
    let Some((check, create)) = statements.fence_index_check() else {
        return Ok(());
    };
    let has_index = match client.simple_query(check).await {
        Ok(messages) => messages.into_iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(|v| v == "t"),
            _ => None,
        }),
        Err(e) => {
            return Err(PgError::from_statement(
                "check the fence's index",
                &statements.table().to_string(),
                &e,
            ))
        }
    };
    match has_index {
        Some(false) => Err(PgError::MissingIndex {
            table: statements.table().to_string(),
            create: create.to_string(),
        }),
        _ => Ok(()),
    }
}
