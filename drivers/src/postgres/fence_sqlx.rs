//! The fence on the user's own sqlx pool (feature `sqlx`): binding its
//! values into a sqlx query, and a fenced transaction opened on any sqlx
//! connection, so that a service on sqlx writes no binding loop and no
//! `SET LOCAL` of its own (issue 47: both were copied by hand from
//! `Fence::transaction` by the first user who tried).

use std::time::Duration;

use picolease_core::sql::Value;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{Acquire, AssertSqlSafe, Postgres, Row, Transaction};

use super::fence::Fence;

impl Fence {
    /// `query` with the fence's values bound after its own, in order: for
    /// [`Fence::check`], or a statement that ANDs [`Fence::condition`]
    /// (numbered from the placeholder after yours) into its `WHERE`.
    ///
    /// ```
    /// # async fn demo(fence: &picolease::postgres::Fence, pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
    /// let sql = format!("UPDATE jobs SET done = true WHERE id = $1 AND {}", fence.condition(2));
    /// let done = fence
    ///     .bind_sqlx(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(7_i64))
    ///     .execute(pool)
    ///     .await?
    ///     .rows_affected();
    /// // 0: job 7 is done already, or the term is over.
    /// # let _ = done; Ok(()) }
    /// ```
    pub fn bind_sqlx<'q>(
        &'q self,
        mut query: Query<'q, Postgres, PgArguments>,
    ) -> Query<'q, Postgres, PgArguments> {
        for value in self.values() {
            query = match value {
                Value::Text(text) => query.bind(text),
                Value::Int(int) => query.bind(int),
            };
        }
        query
    }

    /// A fenced transaction on your sqlx pool or connection (`&PgPool`,
    /// `&mut PgConnection`, `&mut Transaction`): it begins, arms the
    /// server's bounds from `time_left` (the leader's
    /// `ctx.time_left()`: [`Fence::bounds`]) and runs the term's check
    /// ([`Fence::check`]). `Some(tx)` while the term holds: from then on
    /// the lease row is locked until `tx` ends, so whatever you write in
    /// it (a bulk `DELETE` that matches nothing included) commits before
    /// any successor's term begins, and the server ends it by the
    /// deadline. `None` when the term is over, the transaction rolled
    /// back: write nothing.
    ///
    /// The bounds hold each statement, and each wait between statements,
    /// to `time_left` from the start: a transaction of several statements
    /// could outlast the deadline in all. Unlike [`Fence::transaction`],
    /// which re-arms them before every statement and cancels a running one
    /// at the deadline from the client, this one leaves that to you: before
    /// a further statement, re-arm with `sqlx::raw_sql(AssertSqlSafe(
    /// Fence::bounds(ctx.time_left())))` (PostgreSQL 15 has no bound on a
    /// whole transaction), or keep to one statement per transaction.
    ///
    /// ```
    /// # async fn demo(ctx: &picolease::postgres::LeaderContext, pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
    /// if let Some(mut tx) = ctx.fence().begin_sqlx(pool, ctx.time_left()).await? {
    ///     sqlx::query("DELETE FROM reservations WHERE expires_at < now()")
    ///         .execute(&mut *tx)
    ///         .await?;
    ///     tx.commit().await?;
    /// } // else: no longer the leader; nothing was written
    /// # Ok(()) }
    /// ```
    pub async fn begin_sqlx<'c, A>(
        &self,
        conn: A,
        time_left: Duration,
    ) -> Result<Option<Transaction<'c, Postgres>>, sqlx::Error>
    where
        A: Acquire<'c, Database = Postgres>,
    {
        let mut tx = conn.begin().await?;
        sqlx::raw_sql(AssertSqlSafe(Fence::bounds(time_left)))
            .execute(&mut *tx)
            .await?;
        let check = self.check();
        let holds: bool = self
            .bind_sqlx(sqlx::query(AssertSqlSafe(check.as_str())))
            .fetch_one(&mut *tx)
            .await?
            .try_get(0)?;
        if holds {
            Ok(Some(tx))
        } else {
            tx.rollback().await?;
            Ok(None)
        }
    }
}
