//! One statement of the engine on PostgreSQL, as the shared task runs it
//! ([`crate::server::Link`]): bound, run on the statement connection with
//! its prepared statement, decoded; and abandoned, with a cancel request
//! to the server, when the engine gives up on it.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use picolease_core::{Failure, RowError};

use super::error::PgError;
use super::link::{Call, Link};
use crate::server::{answer, ran_name, Binding, DriverError};
use picolease_core::engine::{Answer, Ran, Statement};

impl DriverError for PgError {
    fn stopped(reason: String) -> Self {
        PgError::Stopped { reason }
    }

    fn row(table: String, source: RowError) -> Self {
        PgError::Row { table, source }
    }

    fn failure(&self) -> Failure {
        PgError::failure(self)
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
    let ran = Ran::of(&statement);
    let rows = match statement {
        Statement::Row(operation) => {
            let call = Call {
                operation,
                lease: Arc::clone(&binding.lease),
                holder: binding.holder.as_str().into(),
                ttl_millis: binding.ttl_millis,
                successor: Arc::clone(&binding.successor),
                reservation_millis: binding.reservation_millis,
                candidacy: Arc::clone(&binding.candidacy),
                deadline,
                timeout: binding.timeout,
            };
            link.execute(call).await
        }
        Statement::Batch(batch) => {
            let json = batch.json();
            let bindings = binding.batch_bindings(&json);
            link.execute_batch(batch.kind, &bindings, deadline, binding.timeout)
                .await
        }
    };
    answer(link.statements(), ran, &binding, rows)
}
