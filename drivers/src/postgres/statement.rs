//! One statement of the engine on PostgreSQL, as the shared task runs it
//! ([`crate::server::Link`]): bound, run on the statement connection with
//! its prepared statement, decoded; and abandoned, with a cancel request
//! to the server, when the engine gives up on it.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use picolease_core::sql::{BatchBindings, Cell};
use picolease_core::{BatchReply, Reply};

use super::error::PgError;
use super::link::{Call, Link};
use crate::server::{ran_name, Binding, DriverError};
use crate::set::{Answer, Ran, Statement};

impl DriverError for PgError {
    fn stopped(reason: String) -> Self {
        PgError::Stopped { reason }
    }
}

impl crate::server::Link for Link {
    type Error = PgError;

    fn execute(
        self: Arc<Self>,
        binding: Binding,
        statement: Statement,
    ) -> BoxFuture<'static, (Answer, Option<PgError>)> {
        async move { execute(&self, binding, statement).await }.boxed()
    }

    /// The connection is suspect (a stalled socket would hold every later
    /// statement): drop it and cancel the query on the server.
    fn abandon(&self, ran: Ran, timeout: Duration) -> PgError {
        if let Some(token) = Link::abandon(self) {
            let cancel = self.connector().cancel(token);
            // Never waited for: the server may be unreachable.
            tokio::spawn(async move {
                let _ = tokio::time::timeout(timeout, cancel).await;
            });
        }
        PgError::Timeout {
            during: ran_name(ran),
            after: timeout,
        }
    }
}

/// Runs `statement` on `link` and decodes it: the engine's answer, and the
/// error behind a failed one. The request timeout starts now.
async fn execute(link: &Link, binding: Binding, statement: Statement) -> (Answer, Option<PgError>) {
    let deadline = tokio::time::Instant::now() + binding.timeout;
    let statements = link.statements();
    let table = || statements.table().to_string();
    match statement {
        Statement::Row(operation) => {
            let call = Call {
                operation,
                lease: Arc::clone(&binding.lease),
                holder: binding.holder.as_str().into(),
                ttl_millis: binding.ttl_millis,
                deadline,
                timeout: binding.timeout,
            };
            let rows = link.execute(call).await;
            match rows.and_then(|rows| {
                statements
                    .decode_reply(operation, &binding.holder, &rows)
                    .map_err(|source| PgError::Row {
                        table: table(),
                        source: source.for_lease(&binding.lease),
                    })
            }) {
                Ok(reply) => (Answer::Row(reply), None),
                Err(e) => (Answer::Row(Reply::Failed(e.failure())), Some(e)),
            }
        }
        Statement::Batch(batch) => {
            let json = batch.json();
            let bindings = BatchBindings {
                holder: binding.holder.as_str(),
                ttl_millis: binding.ttl_millis,
                batch: &json,
                stale_millis: binding.stale_millis,
            };
            let rows: Result<Vec<Vec<Cell>>, PgError> = link
                .execute_batch(batch.kind, &bindings, deadline, binding.timeout)
                .await;
            match rows.and_then(|rows| {
                statements
                    .decode_batch_reply(batch.kind, &binding.holder, &rows)
                    .map_err(|source| PgError::Row {
                        table: table(),
                        source,
                    })
            }) {
                Ok(reply) => (Answer::Batch(reply), None),
                Err(e) => (Answer::Batch(BatchReply::Failed(e.failure())), Some(e)),
            }
        }
    }
}
