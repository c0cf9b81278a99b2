//! Fenced writes: the application's own statements made conditional on
//! the lease, so that a paused or partitioned ex-leader's write changes
//! nothing — the database itself rejects it — and the opening of fenced
//! transactions, bounded by the leader's deadline (the transaction itself
//! is in `transaction.rs`).

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use futures::future::try_join;
use picolease_core::sql::{Param, Statement, Statements};
use picolease_core::{Epoch, HolderId, LeaseName};
use tokio::time::Instant;
use tokio_postgres::types::ToSql;
use tokio_postgres::{CancelToken, Client, NoTls};

use super::connect::Connect;
use super::error::PgError;
use super::transaction::{statement_error, timeouts, until, FencedTransaction, CANCEL_PATIENCE};

/// The condition "this lease is still held by this holder at this epoch and
/// has not expired", to AND into the `WHERE` of your own statement.
///
/// Gated tasks get one from [`LeaderContext::fence`](super::LeaderContext::fence);
/// [`PgLease::fence`](super::PgLease::fence) gives the current term's;
/// [`Fence::new`] makes one for any term.
/// The database evaluates it, on its own clock, in the same statement as
/// your write: a successor that bumped the epoch, or a lapsed ttl, makes
/// the write touch no row (check the affected-row count).
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
                Param::StaleMillis => &0i64,
            })
            .collect()
    }
}

impl Fence {
    /// Opens a fenced transaction on `client` that must end by `deadline`
    /// (the leader's deadline: `Instant::now()` plus the time left in the
    /// term, [`LeaderContext::time_left`](super::LeaderContext::time_left); [`LeaderContext::fenced_transaction`](super::LeaderContext::fenced_transaction)
    /// and [`PgLease::fenced_transaction`](super::PgLease::fenced_transaction) do this for you).
    ///
    /// It begins a transaction, sets `statement_timeout` and
    /// `idle_in_transaction_session_timeout` (`SET LOCAL`) to the time left
    /// until `deadline`, and evaluates the fence (`SELECT <fence>`), which
    /// locks the lease row `FOR KEY SHARE` for the whole transaction. If
    /// the fence no longer holds, or `deadline` has passed, it rolls back
    /// and returns [`PgError::Fenced`]. Once it returns, no successor can
    /// take the lease before this transaction ends: everything it commits
    /// is ordered before the next term (still AND the fence into your
    /// writes, with [`FencedTransaction::fence`], so that they also stop at
    /// the lease's expiry).
    ///
    /// # The bound on a takeover's delay
    ///
    /// While the transaction is open it delays the next term; this is how
    /// long at most. Let `D` be `deadline` and `L` the time left when the
    /// transaction began (`L ≤ ttl·(1 − ρ)`); each statement re-arms both
    /// server timeouts to `D − now` when sent:
    ///
    /// - a statement of it running at `D`, client responsive: the client
    ///   sends a cancel request (cancel token); the server aborts the
    ///   transaction, which frees the lock, within a round trip of `D`.
    ///   Later calls and `commit` are refused; dropping sends the ROLLBACK;
    /// - otherwise (client idle in the transaction, paused, hung or cut
    ///   off): the server ends a statement by its `statement_timeout`
    ///   (about `D`) and closes a session idle in the transaction after
    ///   `idle_in_transaction_session_timeout` (what was left when the last
    ///   statement was sent, at most `L`): the lock goes by `D + L` at the
    ///   very worst, and by about `D` when the last statement was short.
    ///
    /// The leader's deadline comes before the lease's expiry on the
    /// database (by the drift allowance), so a successor is delayed by at
    /// most `L` (≤ ttl) past the expiry, plus one interval if its own
    /// acquire timed out while waiting. PostgreSQL 15 has no
    /// `transaction_timeout`; these two settings are what bounds a
    /// transaction on the server.
    ///
    /// When `idle_in_transaction_session_timeout` fires, the server closes
    /// the *connection*: `client` is then closed and must be replaced.
    ///
    /// ```no_run
    /// # async fn demo(
    /// #     fence: picolease::postgres::Fence,
    /// #     mut client: tokio_postgres::Client,
    /// #     time_left: std::time::Duration,
    /// # ) -> Result<(), picolease::postgres::PgError> {
    /// let deadline = tokio::time::Instant::now() + time_left;
    /// let tx = fence.transaction(&mut client, deadline).await?;
    /// let sql = format!(
    ///     "UPDATE jobs SET done = true WHERE id = $1 AND {}",
    ///     tx.fence().condition(2)
    /// );
    /// let job: i64 = 7;
    /// let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&job];
    /// params.extend(tx.fence().params());
    /// if tx.execute(sql.as_str(), &params).await? == 1 {
    ///     tx.commit().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn transaction<'c>(
        &self,
        client: &'c mut Client,
        deadline: Instant,
    ) -> Result<FencedTransaction<'c>, PgError> {
        let cancel = client.cancel_token();
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.over("the leader's deadline had passed before it began"));
        }
        let check = format!("SELECT {}", self.condition(1));
        let params = self.params();
        let bounds = timeouts(left);
        let begin = async {
            let tx = client.transaction().await?;
            let (_, row) = try_join(
                tx.batch_execute(&bounds),
                tx.query_one(check.as_str(), &params),
            )
            .await?;
            let holds: bool = row.try_get(0)?;
            Ok::<_, tokio_postgres::Error>((tx, holds))
        };
        match until(deadline, begin).await {
            Some(Ok((tx, true))) => Ok(FencedTransaction {
                tx,
                cancel,
                fence: self.clone(),
                deadline,
                over: AtomicBool::new(false),
                failed: Mutex::new(None),
            }),
            Some(Ok((tx, false))) => {
                drop(tx);
                Err(self.over(
                    "the fence no longer holds (the lease was taken over, released or lapsed)",
                ))
            }
            Some(Err(e)) => Err(statement_error("begin of a fenced transaction", &e)),
            None => {
                self.send_cancel(cancel);
                Err(self.over("the leader's deadline passed while it began"))
            }
        }
    }

    pub(super) fn over(&self, reason: &str) -> PgError {
        PgError::Fenced {
            lease: self.lease.clone(),
            epoch: self.epoch.max(0) as u64,
            reason: reason.to_string(),
        }
    }

    /// Asks the server to cancel whatever runs on the connection of
    /// `token`, in the background.
    pub(super) fn send_cancel(&self, token: CancelToken) {
        let cancel = match &self.canceller {
            Some(connector) => connector.cancel(token),
            None => Box::pin(async move { token.cancel_query(NoTls).await }),
        };
        tokio::spawn(async move {
            let _ = tokio::time::timeout(CANCEL_PATIENCE, cancel).await;
        });
    }
}
