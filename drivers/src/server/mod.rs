//! The driver of a database reached over the network, PostgreSQL's and
//! MySQL's alike: one builder and one handle over one lease or a set
//! (`contender.rs`) with the options they share (`options.rs`), one tokio
//! task per handle (`driver.rs`), each lease's work behind its gate
//! (`gate.rs`), the handle's side of the task (`task.rs`), the reconnect
//! backoff (`backoff.rs`), the administrative statements (`admin.rs`),
//! the opening of a fenced transaction (`fenced.rs`), noticing a new
//! server incarnation on connecting (`server_change.rs`). A
//! database (`database.rs`) brings only its connector, its own options,
//! its statement connection (a `Link`), its fence, how one statement runs
//! on an administrative session and, where it has them, release notices.
//!
//! Public here: the generic [`Contender`] and [`Builder`] (each database
//! names its instances: `PgLease`, `MysqlLeaseSet`, …), the sealed
//! [`Database`] they are generic over, and [`LeaderContext`], as each
//! driver's `LeaderContext` (`postgres::LeaderContext`,
//! `mysql::LeaderContext`).

pub(crate) mod admin;
pub(crate) mod backoff;
mod builder;
mod contender;
mod database;
pub(crate) mod driver;
pub(crate) mod fenced;
pub(crate) mod gate;
pub(crate) mod options;
pub(crate) mod server_change;
pub(crate) mod task;
pub(crate) mod tls;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use picolease_core::sql::{Cell, Statements};
use picolease_core::{BatchReply, Epoch, Failure, HolderId, LeaseName, Reply, RowError};

use picolease_core::engine::{Answer, Ran, Statement};

pub use admin::{
    force_release, lease_row, release_after_failover, request_hand_over, status,
    withdraw_hand_over, Admin,
};
pub use builder::Builder;
pub use contender::Contender;
pub(crate) use database::{sealed::Driver, Listen};
pub use database::{Connects, Database};
pub use gate::LeaderContext;

/// What the task hears from a database's release notices.
#[derive(Debug)]
pub(crate) enum Notice {
    /// This row (a lease, or a set's membership row) was released.
    Released(String),
    /// Listening again after the connection was lost: notices sent
    /// meanwhile are gone.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))] // only LISTEN resubscribes
    Resubscribed,
}

/// What binding a statement needs of the engine's configuration.
#[derive(Clone)]
pub(crate) struct Binding {
    pub(crate) lease: Arc<str>,
    pub(crate) holder: HolderId,
    pub(crate) ttl_millis: i64,
    pub(crate) stale_millis: i64,
    /// The request timeout.
    pub(crate) timeout: Duration,
    /// A hand-over's reservation, set for that statement only.
    pub(crate) successor: Arc<str>,
    /// How long a hand-over reserves the row, in milliseconds.
    pub(crate) reservation_millis: i64,
    /// This node's announcement as a candidate (DESIGN §3 "Preferred
    /// holders"; empty when it announces nothing).
    pub(crate) candidacy: Arc<str>,
}

impl Binding {
    /// A batch's values, its items being `json` (the batch's own text).
    pub(crate) fn batch_bindings<'a>(
        &'a self,
        json: &'a str,
    ) -> picolease_core::sql::BatchBindings<'a> {
        picolease_core::sql::BatchBindings {
            holder: self.holder.as_str(),
            ttl_millis: self.ttl_millis,
            batch: json,
            stale_millis: self.stale_millis,
        }
    }

    /// The single-row statement's values.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))] // MySQL's link binds them by hand
    pub(crate) fn bindings(&self) -> picolease_core::sql::Bindings<'_> {
        picolease_core::sql::Bindings {
            lease: &self.lease,
            holder: self.holder.as_str(),
            ttl_millis: self.ttl_millis,
            successor: &self.successor,
            reservation_millis: self.reservation_millis,
            candidacy: &self.candidacy,
        }
    }
}

/// A database's statement connection, as the task drives it.
pub(crate) trait Link: Send + Sync + 'static {
    /// The database's error type.
    type Error: DriverError;

    /// Runs `statement` and decodes it: the engine's answer, and the error
    /// behind a failed one. Dropped unfinished when the engine gives up on
    /// it (then [`Link::abandon`] follows).
    fn execute(
        self: Arc<Self>,
        binding: Binding,
        statement: Statement,
    ) -> BoxFuture<'static, (Answer, Option<Self::Error>)>;

    /// The engine gave up on the statement in flight (its future was
    /// dropped): retire the connection, cancel the statement on the
    /// server without waiting for it, and say what happened.
    fn abandon(&self, ran: Ran, timeout: Duration) -> Self::Error;
}

/// What the task needs of a database's error type.
pub(crate) trait DriverError: Clone + std::fmt::Display + Send + Sync + 'static {
    /// The task ended by a panic or a cancel of its own (`reason`).
    fn stopped(reason: String) -> Self;
    /// A row of `table` that does not decode.
    fn row(table: String, source: RowError) -> Self;
    /// Whether retrying may help.
    fn failure(&self) -> Failure;
}

/// The engine's answer to `ran` from the rows a database returned for it
/// (or the error that stopped it), decoded by `statements`; with the error
/// behind a failed answer.
pub(crate) fn answer<E: DriverError>(
    statements: &Statements,
    ran: Ran,
    binding: &Binding,
    rows: Result<Vec<Vec<Cell>>, E>,
) -> (Answer, Option<E>) {
    let table = || statements.table().to_string();
    match ran {
        Ran::Row(operation) => match rows.and_then(|rows| {
            statements
                .decode_reply(operation, &binding.holder, &rows)
                .map_err(|source| E::row(table(), source.for_lease(&binding.lease)))
        }) {
            Ok(reply) => (Answer::Row(reply), None),
            Err(e) => (Answer::Row(Reply::Failed(e.failure())), Some(e)),
        },
        Ran::Batch(kind) => match rows.and_then(|rows| {
            statements
                .decode_batch_reply(kind, &binding.holder, &rows)
                .map_err(|source| E::row(table(), source))
        }) {
            Ok(reply) => (Answer::Batch(reply), None),
            Err(e) => (Answer::Batch(BatchReply::Failed(e.failure())), Some(e)),
        },
    }
}

/// A database's fence of one term, made for each term's context.
pub(crate) trait TermFence: Clone + Send + Sync + 'static {
    /// The fence of `holder` on `lease` at `epoch`, for `statements`' table.
    fn for_term(
        statements: &Statements,
        lease: &LeaseName,
        holder: &HolderId,
        epoch: Epoch,
    ) -> Self;
}

/// `err`'s message with every cause its own text leaves out, joined by
/// `: ` (tokio-postgres and mysql_async leave "Connection refused" or
/// "failed to lookup address" out of their own messages).
pub(crate) fn with_causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut reason = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !reason.contains(&cause_text) {
            reason.push_str(": ");
            reason.push_str(&cause_text);
        }
        source = cause.source();
    }
    reason
}

/// The name of an operation in messages.
pub(crate) fn operation_name(operation: picolease_core::Operation) -> &'static str {
    use picolease_core::Operation;
    match operation {
        Operation::Acquire => "acquire",
        Operation::Renew { .. } => "renew",
        Operation::Release { .. } => "release",
        Operation::HandOver { .. } => "hand over",
        Operation::Announce => "announce",
    }
}

/// The name of a batch in messages.
pub(crate) fn batch_name(kind: picolease_core::BatchKind) -> &'static str {
    use picolease_core::BatchKind;
    match kind {
        BatchKind::Acquire => "acquire batch",
        BatchKind::Renew => "renew batch",
        BatchKind::Release => "release batch",
        BatchKind::Survey => "survey",
        BatchKind::HandOver => "hand-over",
    }
}

/// The name of what `ran` in messages.
pub(crate) fn ran_name(ran: Ran) -> &'static str {
    match ran {
        Ran::Row(operation) => operation_name(operation),
        Ran::Batch(kind) => batch_name(kind),
    }
}
