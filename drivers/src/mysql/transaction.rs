//! Fenced transactions on MySQL and MariaDB (DESIGN §3, MySQL): the type
//! ([`FencedTransaction`]) and its openers, [`Fence::transaction`] and
//! those of gated work and of the handles. What bounds one on the server
//! and kills it at its deadline is in `bounds.rs`.

use std::time::Duration;

use mysql_async::prelude::{FromRow, Queryable, StatementLike};
use mysql_async::{Conn, Params, Transaction};
use picolease_core::LeaseName;
use tokio::time::Instant;

use super::bounds::{begin, cut_by_the_server, finish, statement_error, Session};
use super::error::MysqlError;
use super::fence::Fence;
use crate::server::fenced::{open, until, Refuses};

/// A transaction fenced by a lease term and bounded by the leader's
/// deadline, opened with [`Fence::transaction`] (or
/// [`LeaderContext::fenced_transaction`](super::LeaderContext::fenced_transaction),
/// [`MysqlLease::fenced_transaction`](super::MysqlLease::fenced_transaction)).
///
/// While it is open, the lease row is locked `LOCK IN SHARE MODE`: no
/// successor can take the lease, so whatever it commits is ordered before
/// the next term (and this node's own renewals wait too: see [`Fence`]).
/// Its statements ([`exec_drop`](Self::exec_drop), [`exec`](Self::exec),
/// [`query_drop`](Self::query_drop), as mysql_async's `Queryable`) each
/// re-arm the session's bounds to the time left first, and race the
/// deadline on the client: at the deadline the transaction's session is
/// killed on the server from a second connection (the statement stops,
/// the transaction rolls back, the lock goes) and the call returns
/// [`MysqlError::Fenced`]; so do later calls and [`commit`](Self::commit).
/// The connection is then closed: replace it (a pool does).
///
/// A statement that fails ends the transaction as on PostgreSQL (MySQL
/// itself would roll back only that statement, or, after a deadlock, the
/// whole transaction and its lock): later calls return that error again,
/// and `commit` rolls back and returns it.
///
/// Call [`commit`](Self::commit) or [`rollback`](Self::rollback): they
/// put the session's own bounds back. Dropping it instead leaves mysql_async
/// to send the ROLLBACK at the connection's next use, and the bounds armed
/// (a pool resets a returned connection; or call `Conn::reset`); until
/// then the server closes the session once it has been idle in the
/// transaction for the time that was left, in whole seconds.
#[derive(Debug)]
pub struct FencedTransaction<'c> {
    tx: Transaction<'c>,
    fence: Fence,
    deadline: Instant,
    session: Session,
    /// The deadline passed and the session was killed: nothing more is sent.
    over: bool,
    /// The first statement error, which ended the transaction.
    failed: Option<MysqlError>,
}

impl<'c> FencedTransaction<'c> {
    /// The fence this transaction was opened with: AND its
    /// [`condition`](Fence::condition) into your writes, so that they also
    /// stop at the lease's expiry.
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

    /// The rows the last statement changed (`Conn::affected_rows`): 0 for
    /// a fenced write means the fence no longer held.
    pub fn affected_rows(&self) -> u64 {
        self.tx.affected_rows()
    }

    /// Runs `stmt` with `params` (as `Queryable::exec_drop`), bounded by
    /// the deadline.
    pub async fn exec_drop<S, P>(&mut self, stmt: S, params: P) -> Result<(), MysqlError>
    where
        S: StatementLike,
        P: Into<Params> + Send,
    {
        let (deadline, arm, tx) = self.next("exec_drop")?;
        let outcome = until(deadline, async {
            tx.query_drop(arm).await?;
            tx.exec_drop(stmt, params).await
        })
        .await;
        self.settle("exec_drop", outcome)
    }

    /// Runs `stmt` with `params` (as `Queryable::exec`), bounded by the
    /// deadline; returns its rows.
    pub async fn exec<T, S, P>(&mut self, stmt: S, params: P) -> Result<Vec<T>, MysqlError>
    where
        T: FromRow + Send + 'static,
        S: StatementLike,
        P: Into<Params> + Send,
    {
        let (deadline, arm, tx) = self.next("exec")?;
        let outcome = until(deadline, async {
            tx.query_drop(arm).await?;
            tx.exec(stmt, params).await
        })
        .await;
        self.settle("exec", outcome)
    }

    /// Runs `sql` without parameters (as `Queryable::query_drop`), bounded
    /// by the deadline.
    pub async fn query_drop(&mut self, sql: &str) -> Result<(), MysqlError> {
        let (deadline, arm, tx) = self.next("query_drop")?;
        let outcome = until(deadline, async {
            tx.query_drop(arm).await?;
            tx.query_drop(sql).await
        })
        .await;
        self.settle("query_drop", outcome)
    }

    /// Puts the session's bounds back and commits, if the deadline has not
    /// passed and no statement failed (otherwise it rolls back and returns
    /// the error: the failed statement's, or [`MysqlError::Fenced`]).
    ///
    /// A commit still unanswered at the deadline returns
    /// [`MysqlError::Timeout`] and its session is killed: its outcome is
    /// unknown, but if it committed it did so before any successor's
    /// acquire, which waits for it.
    pub async fn commit(mut self) -> Result<(), MysqlError> {
        if let Some(failed) = self.failed.take() {
            // The first error says what went wrong; a broken connection
            // rolls back on the server anyway.
            let _ = self.rollback().await;
            return Err(failed);
        }
        self.left("commit")?;
        let FencedTransaction {
            mut tx,
            deadline,
            session,
            ..
        } = self;
        let started = Instant::now();
        let restore = session.restore.clone();
        let work = async move {
            tx.query_drop(restore).await?;
            tx.commit().await
        };
        match until(deadline, work).await {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(statement_error("commit of a fenced transaction", &e)),
            None => {
                session.kill();
                Err(MysqlError::Timeout {
                    during: "commit of a fenced transaction (outcome unknown)",
                    after: started.elapsed(),
                })
            }
        }
    }

    /// Puts the session's bounds back and rolls back, waiting for the
    /// server until the deadline at most (past it, the session is killed,
    /// which rolls back on the server). Once the transaction was cut at
    /// its deadline there is nothing left to do.
    pub async fn rollback(self) -> Result<(), MysqlError> {
        if self.over {
            return Ok(());
        }
        match until(self.deadline, finish(self.tx, &self.session)).await {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(statement_error("rollback of a fenced transaction", &e)),
            None => {
                self.session.kill();
                Ok(())
            }
        }
    }

    /// What the next statement needs: the deadline, the bounds armed to
    /// the time left, the transaction; or the error that ends it.
    fn next(
        &mut self,
        during: &str,
    ) -> Result<(Instant, String, &mut Transaction<'c>), MysqlError> {
        let left = self.left(during)?;
        let arm = self.session.arm(left);
        Ok((self.deadline, arm, &mut self.tx))
    }

    /// The time left, or what ends the transaction: a failed statement's
    /// error, or its deadline (at which its session is killed).
    fn left(&mut self, during: &str) -> Result<Duration, MysqlError> {
        if let Some(failed) = &self.failed {
            return Err(failed.clone());
        }
        if self.over {
            return Err(self.fence.over(
                "it is over: its deadline passed and its session was killed on the server, which rolled it back",
            ));
        }
        let left = self.time_left();
        if left.is_zero() {
            self.cut();
            return Err(self.fence.over(&format!(
                "the leader's deadline passed before {during}: its session is killed on the server, which rolls it back"
            )));
        }
        Ok(left)
    }

    /// The outcome of a statement: `None` means the deadline came first.
    fn settle<T>(
        &mut self,
        during: &'static str,
        outcome: Option<Result<T, mysql_async::Error>>,
    ) -> Result<T, MysqlError> {
        match outcome {
            Some(Ok(value)) => Ok(value),
            Some(Err(e)) => match cut_by_the_server(&e) {
                Some(why) => {
                    self.cut();
                    Err(self.fence.over(&format!(
                        "the server stopped {during} at the bound armed from the leader's deadline ({why}); its session is killed, which rolls the transaction back"
                    )))
                }
                None => {
                    let error = statement_error(during, &e);
                    self.failed.get_or_insert_with(|| error.clone());
                    Err(error)
                }
            },
            None => {
                self.cut();
                Err(self.fence.over(&format!(
                    "the leader's deadline passed during {during}: its session is killed on the server, which stops the statement and rolls the transaction back"
                )))
            }
        }
    }

    /// Ends the transaction on the server, once.
    fn cut(&mut self) {
        if !self.over {
            self.over = true;
            self.session.kill();
        }
    }
}

impl Fence {
    /// Opens a fenced transaction on `conn` that must end by `deadline`
    /// (the leader's deadline: `Instant::now()` plus the time left in the
    /// term; [`LeaderContext::fenced_transaction`](super::LeaderContext::fenced_transaction)
    /// and [`MysqlLease::fenced_transaction`](super::MysqlLease::fenced_transaction)
    /// do this for you).
    ///
    /// It reads the session's bounds (to put them back at the end),
    /// begins a transaction, arms the bounds to the time left, and
    /// evaluates the fence (`SELECT <fence>`), which locks the lease row
    /// `LOCK IN SHARE MODE` for the whole transaction. If the fence no
    /// longer holds, or `deadline` has passed, it rolls back and returns
    /// [`MysqlError::Fenced`]. Once it returns, no successor can take the
    /// lease before this transaction ends: everything it commits is
    /// ordered before the next term. Four round trips (five on MySQL, and
    /// one more to prepare the fence on a connection's first use).
    ///
    /// # The bound on a takeover's delay
    ///
    /// Let `D` be `deadline` and `L` the time left when it began; each
    /// statement re-arms the bounds to `R = D − now` when sent:
    ///
    /// - client responsive: at `D` it kills the session from a second
    ///   connection; the server rolls back, which frees the lock, within a
    ///   connect and a round trip of `D`;
    /// - client silent (paused, hung, cut off): the server stops a
    ///   statement by `D` (MariaDB's `max_statement_time`, every statement
    ///   and lock wait; on MySQL `max_execution_time` only for `SELECT`,
    ///   and lock waits by `innodb_lock_wait_timeout`, `R` rounded up to
    ///   whole seconds), then closes the session once idle in the
    ///   transaction for `R` rounded up to whole seconds (MariaDB's
    ///   `idle_transaction_timeout`; MySQL's `wait_timeout`): the lock
    ///   goes by `D + ⌈L⌉` at worst.
    ///
    /// And this node's renewals wait for it meanwhile (see [`Fence`]).
    ///
    /// ```no_run
    /// # async fn demo(
    /// #     fence: picolease::mysql::Fence,
    /// #     mut conn: mysql_async::Conn,
    /// #     time_left: std::time::Duration,
    /// # ) -> Result<(), picolease::mysql::MysqlError> {
    /// let deadline = tokio::time::Instant::now() + time_left;
    /// let mut tx = fence.transaction(&mut conn, deadline).await?;
    /// let sql = format!("UPDATE jobs SET done = 1 WHERE id = ? AND {}", tx.fence().condition());
    /// let mut params = vec![mysql_async::Value::Int(7)];
    /// params.extend(tx.fence().params());
    /// tx.exec_drop(sql, params).await?;
    /// if tx.affected_rows() == 1 {
    ///     tx.commit().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn transaction<'c>(
        &self,
        conn: &'c mut Conn,
        deadline: Instant,
    ) -> Result<FencedTransaction<'c>, MysqlError> {
        let check = format!("SELECT {}", self.condition());
        let begun = begin(conn, check, self.params(), deadline);
        let (tx, session) = open(self, deadline, begun).await?;
        Ok(FencedTransaction {
            tx,
            fence: self.clone(),
            deadline,
            session,
            over: false,
            failed: None,
        })
    }
}

/// A fenced transaction of a term's work.
impl super::LeaderContext {
    /// Opens a fenced transaction of this term on `conn`, bounded by the
    /// leader's deadline as it stands now (`time_left`); see
    /// [`Fence::transaction`] for what it guarantees and what it costs.
    /// Refused ([`MysqlError::Fenced`]) once the term has ended.
    pub async fn fenced_transaction<'c>(
        &self,
        conn: &'c mut Conn,
    ) -> Result<FencedTransaction<'c>, MysqlError> {
        if self.is_cancelled() || self.deadline().is_none() {
            return Err(self.fence().over("the term has ended"));
        }
        let deadline = Instant::now() + self.time_left();
        self.fence().transaction(conn, deadline).await
    }
}

/// The refusal of a node that does not lead `lease` (at `epoch`, if any).
fn not_leading(lease: &LeaseName, epoch: Option<picolease_core::Epoch>) -> MysqlError {
    MysqlError::Fenced {
        lease: lease.to_string(),
        epoch: epoch.map_or(0, |e| e.get()),
        reason: "this node does not lead it".to_string(),
    }
}

/// A fenced transaction of a lone lease's current term.
impl super::MysqlLease {
    /// Opens a fenced transaction of the current term on `conn`, bounded
    /// by the leader's deadline as it stands now (`fence()`,
    /// `time_left()`); see [`Fence::transaction`]. Refused
    /// ([`MysqlError::Fenced`]) when this node does not lead.
    pub async fn fenced_transaction<'c>(
        &self,
        conn: &'c mut Conn,
    ) -> Result<FencedTransaction<'c>, MysqlError> {
        match (self.fence(), self.time_left()) {
            (Some(fence), Some(left)) => fence.transaction(conn, Instant::now() + left).await,
            _ => Err(not_leading(self.lease(), self.leadership().epoch)),
        }
    }
}

/// A fenced transaction of one lease of a set.
impl super::MysqlLeaseSet {
    /// Opens a fenced transaction of `lease`'s current term on `conn`, as
    /// a lone lease's [`MysqlLease::fenced_transaction`](super::MysqlLease::fenced_transaction).
    /// Refused ([`MysqlError::Fenced`]) when this node does not lead `lease`.
    pub async fn fenced_transaction<'c>(
        &self,
        lease: &LeaseName,
        conn: &'c mut Conn,
    ) -> Result<FencedTransaction<'c>, MysqlError> {
        match (self.fence(lease), self.time_left(lease)) {
            (Some(fence), Some(left)) => fence.transaction(conn, Instant::now() + left).await,
            _ => Err(not_leading(
                lease,
                self.leadership(lease).and_then(|l| l.epoch),
            )),
        }
    }
}
