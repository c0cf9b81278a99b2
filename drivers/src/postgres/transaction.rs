//! Fenced transactions: a transaction whose writes land inside the term
//! or not at all, bounded by the leader's deadline on the server and on
//! the client: how one is opened ([`Fence::transaction`]), and the type
//! ([`FencedTransaction`]). Gated work opens one through
//! `LeaderContext::fenced_transaction`, a handle through
//! `PgLease::fenced_transaction` (both in `handle.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures::future::try_join;
use tokio::time::Instant;
use tokio_postgres::types::ToSql;
use tokio_postgres::{CancelToken, Client, NoTls, Row, ToStatement, Transaction};

use super::error::PgError;
use super::fence::Fence;
use crate::server::fenced::{open, until, Begun};

/// How long a cancel request sent at the deadline may take before it is
/// given up (it is never waited for by the caller).
pub(super) const CANCEL_PATIENCE: Duration = Duration::from_secs(5);

/// A transaction fenced by a lease term and bounded by the leader's
/// deadline, opened with [`Fence::transaction`] (or
/// [`LeaderContext::fenced_transaction`](super::LeaderContext::fenced_transaction),
/// [`PgLease::fenced_transaction`](super::PgLease::fenced_transaction)).
///
/// While it is open, the lease row is locked `FOR KEY SHARE`: no successor
/// can take the lease, so whatever it commits is ordered before the next
/// term. Its statements ([`execute`](Self::execute),
/// [`query`](Self::query), [`batch_execute`](Self::batch_execute)) each
/// re-arm the server's `statement_timeout` and
/// `idle_in_transaction_session_timeout` to the time left (pipelined with
/// the statement, no extra round trip), and race the deadline on the
/// client: at the deadline the running statement is cancelled on the
/// server (which aborts the transaction and frees the lock) and the call
/// returns [`PgError::Fenced`]; so do later calls and
/// [`commit`](Self::commit). Drop it then (or call
/// [`rollback`](Self::rollback)): dropping sends the ROLLBACK. A statement
/// that fails leaves the transaction aborted: `commit` then rolls back and
/// says so.
pub struct FencedTransaction<'c> {
    pub(super) tx: Transaction<'c>,
    pub(super) cancel: CancelToken,
    pub(super) fence: Fence,
    pub(super) deadline: Instant,
    /// The deadline passed: nothing more is sent but the ROLLBACK.
    pub(super) over: AtomicBool,
    /// The first statement error, which aborted the transaction.
    pub(super) failed: Mutex<Option<PgError>>,
}

impl std::fmt::Debug for FencedTransaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedTransaction")
            .field("fence", &self.fence)
            .field("deadline", &self.deadline)
            .field("over", &self.over.load(Ordering::Relaxed))
            .field("failed", &*self.failed())
            .finish()
    }
}

impl<'c> FencedTransaction<'c> {
    /// The fence this transaction was opened with: AND its
    /// [`condition`](Fence::condition) into your writes.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// The deadline it must end by.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left before the deadline (zero once passed).
    pub fn time_left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Runs `statement` with `params` (as `Transaction::execute`), bounded
    /// by the deadline; returns the number of rows changed.
    pub async fn execute<T>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, PgError>
    where
        T: ?Sized + ToStatement,
    {
        let bounds = timeouts(self.left("execute")?);
        let work = try_join(
            self.tx.batch_execute(&bounds),
            self.tx.execute(statement, params),
        );
        let outcome = until(self.deadline, work).await;
        self.settle("execute", outcome.map(|r| r.map(|(_, n)| n)))
    }

    /// Runs `statement` with `params` (as `Transaction::query`), bounded by
    /// the deadline; returns its rows.
    pub async fn query<T>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, PgError>
    where
        T: ?Sized + ToStatement,
    {
        let bounds = timeouts(self.left("query")?);
        let work = try_join(
            self.tx.batch_execute(&bounds),
            self.tx.query(statement, params),
        );
        let outcome = until(self.deadline, work).await;
        self.settle("query", outcome.map(|r| r.map(|(_, rows)| rows)))
    }

    /// Runs `sql`, one or more statements without parameters (as
    /// `Transaction::batch_execute`), bounded by the deadline.
    pub async fn batch_execute(&self, sql: &str) -> Result<(), PgError> {
        let bounds = timeouts(self.left("batch_execute")?);
        let work = try_join(self.tx.batch_execute(&bounds), self.tx.batch_execute(sql));
        let outcome = until(self.deadline, work).await;
        self.settle("batch_execute", outcome.map(|r| r.map(|_| ())))
    }

    /// Commits, if the deadline has not passed and no statement failed
    /// (otherwise it rolls back and returns the error: a failed statement's
    /// [`PgError::Database`] with SQLSTATE 25P02, or [`PgError::Fenced`]).
    ///
    /// A commit still unanswered at the deadline returns
    /// [`PgError::Timeout`]: its outcome is unknown, but if it committed it
    /// did so before any successor's acquire, which waits for it.
    pub async fn commit(self) -> Result<(), PgError> {
        if let Some(failed) = self.failed().take() {
            return Err(PgError::Database {
                during: "commit of a fenced transaction",
                code: "25P02".into(),
                reason: format!("an earlier statement failed, so it was rolled back: {failed}"),
            });
        }
        self.left("commit")?;
        let FencedTransaction {
            tx,
            cancel,
            fence,
            deadline,
            ..
        } = self;
        let started = Instant::now();
        match until(deadline, tx.commit()).await {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(statement_error("commit of a fenced transaction", &e)),
            None => {
                fence.send_cancel(cancel);
                Err(PgError::Timeout {
                    during: "commit of a fenced transaction (outcome unknown)",
                    after: started.elapsed(),
                })
            }
        }
    }

    /// Rolls back, waiting for the server's answer until the deadline at
    /// most (past it, the ROLLBACK is sent without waiting).
    pub async fn rollback(self) -> Result<(), PgError> {
        match until(self.deadline, self.tx.rollback()).await {
            Some(Ok(())) | None => Ok(()),
            Some(Err(e)) => Err(statement_error("rollback of a fenced transaction", &e)),
        }
    }

    fn failed(&self) -> std::sync::MutexGuard<'_, Option<PgError>> {
        // Each critical section is one assignment: poisoning cannot leave
        // it inconsistent.
        self.failed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The time left, or the error that ends the transaction (its deadline
    /// has passed: drop it, which rolls it back).
    fn left(&self, during: &str) -> Result<Duration, PgError> {
        let left = self.time_left();
        if self.over.load(Ordering::Acquire) {
            return Err(self
                .fence
                .over("it is over (its deadline passed): drop it to roll it back"));
        }
        if left.is_zero() {
            self.over.store(true, Ordering::Release);
            return Err(self.fence.over(&format!(
                "the leader's deadline passed before {during}: nothing more is sent; drop it to roll it back"
            )));
        }
        Ok(left)
    }

    /// The outcome of a statement: `None` means the deadline came first.
    fn settle<T>(
        &self,
        during: &'static str,
        outcome: Option<Result<T, tokio_postgres::Error>>,
    ) -> Result<T, PgError> {
        match outcome {
            Some(Ok(value)) => Ok(value),
            Some(Err(e)) => {
                let error = statement_error(during, &e);
                self.failed().get_or_insert_with(|| error.clone());
                Err(error)
            }
            None => {
                self.over.store(true, Ordering::Release);
                self.fence.send_cancel(self.cancel.clone());
                Err(self.fence.over(&format!(
                    "the leader's deadline passed during {during}: the statement was cancelled on the server, which aborts the transaction"
                )))
            }
        }
    }
}

/// Re-arms the server's bounds of the transaction to `left`.
pub(super) fn timeouts(left: Duration) -> String {
    let millis = left.as_micros().div_ceil(1000).max(1);
    format!(
        "SET LOCAL statement_timeout = {millis}; \
         SET LOCAL idle_in_transaction_session_timeout = {millis}"
    )
}

/// An error of the application's own statement: its SQLSTATE and message,
/// or the connection's failure (not sorted like the lease statements',
/// which name the lease table).
pub(super) fn statement_error(during: &'static str, err: &tokio_postgres::Error) -> PgError {
    match err.as_db_error() {
        Some(db) => PgError::Database {
            during,
            code: db.code().code().to_string(),
            reason: db.message().to_string(),
        },
        None => PgError::Connection {
            during,
            reason: err.to_string(),
        },
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
        let check = self.check();
        let params = self.typed_params();
        let begun = async {
            let bounds = timeouts(deadline.saturating_duration_since(Instant::now()));
            let begin = async {
                let tx = client.transaction().await?;
                let (_, row) = try_join(
                    tx.batch_execute(&bounds),
                    // Unnamed: one round trip, and safe behind a pooler.
                    tx.query_typed_one(check.as_str(), &params),
                )
                .await?;
                let holds: bool = row.try_get(0)?;
                Ok::<_, tokio_postgres::Error>((tx, holds))
            };
            match until(deadline, begin).await {
                Some(Ok((tx, true))) => Begun::Holds(tx),
                // Dropping the transaction rolls it back.
                Some(Ok((_, false))) => Begun::Refused,
                Some(Err(e)) => Begun::Failed(statement_error("begin of a fenced transaction", &e)),
                None => {
                    self.send_cancel(cancel.clone());
                    Begun::Late
                }
            }
        };
        let tx = open(self, deadline, begun).await?;
        Ok(FencedTransaction {
            tx,
            cancel,
            fence: self.clone(),
            deadline,
            over: AtomicBool::new(false),
            failed: Mutex::new(None),
        })
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
