//! Fenced transactions: a transaction whose writes land inside the term
//! or not at all, bounded by the leader's deadline on the server and on
//! the client (see [`Fence::transaction`]).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures::future::try_join;
use tokio::time::Instant;
use tokio_postgres::types::ToSql;
use tokio_postgres::{CancelToken, Client, Row, ToStatement, Transaction};

use super::error::PgError;
use super::fence::Fence;
use super::gate::LeaderContext;
use super::handle::PgLease;

/// How long a cancel request sent at the deadline may take before it is
/// given up (it is never waited for by the caller).
pub(super) const CANCEL_PATIENCE: Duration = Duration::from_secs(5);

impl LeaderContext {
    /// Opens a fenced transaction of this term on `client`, bounded by the
    /// leader's deadline as it stands now ([`LeaderContext::time_left`]);
    /// see [`Fence::transaction`] for what it guarantees and the bound it
    /// puts on a takeover's delay. Refused ([`PgError::Fenced`]) once the
    /// term has ended.
    pub async fn fenced_transaction<'c>(
        &self,
        client: &'c mut Client,
    ) -> Result<FencedTransaction<'c>, PgError> {
        if self.is_cancelled() || self.deadline().is_none() {
            return Err(self.fence().over("the term has ended"));
        }
        let deadline = Instant::now() + self.time_left();
        self.fence().transaction(client, deadline).await
    }
}

impl PgLease {
    /// Opens a fenced transaction of the current term on `client`, bounded
    /// by the leader's deadline as it stands now ([`PgLease::fence`],
    /// [`crate::LeaseView::time_left`]); see [`Fence::transaction`]. Refused
    /// ([`PgError::Fenced`]) when this node does not lead.
    pub async fn fenced_transaction<'c>(
        &self,
        client: &'c mut Client,
    ) -> Result<FencedTransaction<'c>, PgError> {
        match (self.fence(), self.time_left()) {
            (Some(fence), Some(left)) => fence.transaction(client, Instant::now() + left).await,
            _ => Err(PgError::Fenced {
                lease: self.lease().to_string(),
                epoch: self.leadership().epoch.map_or(0, |e| e.get()),
                reason: "this node does not lead".to_string(),
            }),
        }
    }
}

/// A transaction fenced by a lease term and bounded by the leader's
/// deadline, opened with [`Fence::transaction`] (or
/// [`LeaderContext::fenced_transaction`], [`PgLease::fenced_transaction`]).
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

/// `work`'s outcome, or `None` if `deadline` comes first.
pub(super) async fn until<T>(deadline: Instant, work: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        outcome = work => Some(outcome),
        () = tokio::time::sleep_until(deadline) => None,
    }
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
