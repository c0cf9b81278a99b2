//! Fenced writes: the application's own statements made conditional on
//! the lease, so that a paused or partitioned ex-leader's write changes
//! nothing — the database itself rejects it. Fenced transactions, opened
//! from a fence, are in `transaction.rs`.

use std::sync::Arc;

use picolease_core::sql::{Param, Statement, Statements, Value};
use picolease_core::{Epoch, HolderId, LeaseName};
use tokio_postgres::types::{ToSql, Type};

use super::cells::param_type;
use super::connect::Connect;
use super::error::PgError;

/// The condition "this lease is still held by this holder at this epoch and
/// has not expired", to AND into the `WHERE` of your own statement.
///
/// Gated tasks get one from [`LeaderContext::fence`](super::LeaderContext::fence);
/// [`PgLease::fence`](super::PgLease::fence) gives the current term's;
/// [`Fence::new`] makes one for any term.
/// The database evaluates it, on its own clock, in the same statement as
/// your write: a successor that bumped the epoch, or a lapsed ttl, makes
/// the write touch no row (check the affected-row count). A write that
/// may touch no row anyway (a bulk `DELETE`) cannot tell the two apart:
/// run [`Fence::check`] first in the same transaction.
///
/// The condition reads the lease row `FOR KEY SHARE`, which it holds until
/// your transaction ends; a successor's acquire (an epoch bump, a key
/// update thanks to the table's unique index on `(name, epoch)`) waits for
/// that lock. So a fenced write that commits late, after the lease lapsed,
/// still commits before the successor's term begins, never inside it. The
/// holder's own renewals do not wait (they change no key column). The
/// price: while your transaction is open, the next term cannot start, so
/// keep it short — [`Fence::transaction`] bounds it by the leader's
/// deadline. Row locks need a read-write transaction and `UPDATE` privilege
/// on the lease table.
///
/// ```
/// # fn demo(fence: &picolease::postgres::Fence) {
/// use tokio_postgres::types::ToSql;
///
/// let job_id: i64 = 7;
/// // Your placeholders come first ($1); the fence's follow from $2.
/// let sql = format!(
///     "UPDATE jobs SET done = true WHERE id = $1 AND {}",
///     fence.condition(2)
/// );
/// let mut params: Vec<&(dyn ToSql + Sync)> = vec![&job_id];
/// params.extend(fence.params());
/// // client.execute(&sql, &params).await? == 0  ⇒ no longer the leader.
/// # let _ = (sql, params);
/// # }
/// ```
#[derive(Clone)]
pub struct Fence {
    pub(super) statement: Statement,
    pub(super) lease: String,
    pub(super) holder: String,
    pub(super) epoch: i64,
    /// Sends cancel requests at a fenced transaction's deadline (default:
    /// without TLS).
    pub(super) canceller: Option<Arc<dyn Connect>>,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence")
            .field("statement", &self.statement)
            .field("lease", &self.lease)
            .field("holder", &self.holder)
            .field("epoch", &self.epoch)
            .field("canceller", &self.canceller.as_ref().map(|_| "connector"))
            .finish()
    }
}

impl Fence {
    /// The fence of `holder` on `lease` at `epoch`, for `statements`' table.
    pub fn new(
        statements: &Statements,
        lease: &LeaseName,
        holder: &HolderId,
        epoch: Epoch,
    ) -> Self {
        Fence {
            statement: statements.fence().clone(),
            lease: lease.to_string(),
            holder: holder.to_string(),
            epoch: epoch.to_i64(),
            canceller: None,
        }
    }

    /// The same fence, whose fenced transactions send their cancel request
    /// at the deadline through `connector` ([`Connect::cancel`]: TLS if the
    /// server requires it). Without it they connect without TLS.
    pub fn with_canceller(mut self, connector: Arc<dyn Connect>) -> Self {
        self.canceller = Some(connector);
        self
    }

    /// The term this fence holds for.
    pub fn epoch(&self) -> Epoch {
        Epoch::new(self.epoch.max(0) as u64)
    }

    /// The condition as SQL, an `EXISTS(…)` whose placeholders are numbered
    /// from `$first` (put your own parameters first).
    pub fn condition(&self, first: usize) -> String {
        self.statement.numbered_from(first).sql().to_string()
    }

    /// The term's check at the start of your own transaction, on any
    /// client: `SELECT <condition>` with placeholders from `$1` (bind
    /// [`Fence::values`] or [`Fence::params`]). One row, `true` while the
    /// term holds. From then on the lease row is locked until your
    /// transaction ends, so no successor's term begins before your commit,
    /// whatever you write: a bulk `DELETE` that matches nothing is then
    /// nothing to do, not a lost term. What [`Fence::transaction`] runs;
    /// run [`Fence::bounds`] before it, so that the server ends the
    /// transaction by the deadline.
    pub fn check(&self) -> String {
        format!("SELECT {}", self.condition(1))
    }

    /// `SET LOCAL` the server's bounds of a fenced transaction with
    /// `time_left` (the leader's: `ctx.time_left()`) in your own
    /// transaction, on any client: `statement_timeout` and
    /// `idle_in_transaction_session_timeout`, so the lease row's lock goes
    /// by the deadline (see [`Fence::transaction`] for the arithmetic).
    /// Two statements, no parameters: run it with the simple query
    /// protocol (sqlx's `raw_sql`, tokio-postgres's `batch_execute`).
    pub fn bounds(time_left: std::time::Duration) -> String {
        super::transaction::timeouts(time_left)
    }

    /// The values to bind for the condition's placeholders, in order:
    /// append them after your own.
    pub fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.statement
            .params()
            .iter()
            .map(|param| match param {
                Param::Lease => &self.lease as &(dyn ToSql + Sync),
                Param::Holder => &self.holder,
                Param::Epoch => &self.epoch,
                // The fence binds no ttl; should a future fence need one,
                // -1 makes it match nothing rather than something.
                Param::TtlMillis => &-1i64,
                // Only the batch statements bind these; never the fence.
                Param::Batch => &"[]",
                Param::Successor | Param::Candidacy => &"",
                Param::StaleMillis | Param::ReservationMillis => &0i64,
            })
            .collect()
    }

    /// [`Fence::params`] as plain values, in the same order: for a client
    /// that binds its own way (sqlx, say: `query.bind(text)` for
    /// [`Value::Text`], `query.bind(int)` for [`Value::Int`]).
    pub fn values(&self) -> Vec<Value<'_>> {
        self.statement
            .params()
            .iter()
            .map(|param| match param {
                Param::Lease => Value::Text(&self.lease),
                Param::Holder => Value::Text(&self.holder),
                Param::Epoch => Value::Int(self.epoch),
                // As in `params`: a ttl would match nothing.
                Param::TtlMillis => Value::Int(-1),
                Param::Batch => Value::Text("[]"),
                Param::Successor | Param::Candidacy => Value::Text(""),
                Param::StaleMillis | Param::ReservationMillis => Value::Int(0),
            })
            .collect()
    }

    /// [`Fence::params`] with the type each is sent as, for an unnamed
    /// statement (`query_typed`, `execute_typed`: what a client behind a
    /// transaction pooler sends, since named prepared statements do not
    /// survive one).
    pub fn typed_params(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        self.params()
            .into_iter()
            .zip(self.statement.params())
            .map(|(value, param)| (value, param_type(*param)))
            .collect()
    }
}

impl Fence {
    pub(super) fn over(&self, reason: &str) -> PgError {
        PgError::Fenced {
            lease: self.lease.clone(),
            epoch: self.epoch.max(0) as u64,
            reason: reason.to_string(),
        }
    }
}

impl crate::server::fenced::Refuses for Fence {
    type Error = PgError;

    fn over(&self, reason: &str) -> PgError {
        Fence::over(self, reason)
    }
}

impl crate::server::TermFence for Fence {
    fn for_term(
        statements: &Statements,
        lease: &LeaseName,
        holder: &HolderId,
        epoch: Epoch,
    ) -> Self {
        Fence::new(statements, lease, holder, epoch)
    }
}
