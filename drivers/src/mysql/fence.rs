//! Fenced writes on MySQL: the application's own statements made
//! conditional on the lease (DESIGN §3, MySQL). The condition reads the
//! lease row `LOCK IN SHARE MODE`, so inside the user's transaction a
//! successor's acquire (which updates that row) waits for the
//! transaction to end: a fenced write commits before the next term or not
//! at all. Fenced transactions, opened from a fence and bounded by the
//! leader's deadline, are in `transaction.rs`.

use picolease_core::sql::{Statements, Value};
use picolease_core::{Epoch, HolderId, LeaseName};

use super::error::MysqlError;
use crate::server::fenced::Refuses;

/// The fence of one term: a condition true while `holder` holds `lease` at
/// `epoch`, unexpired, on the database's clock. AND [`Fence::condition`]
/// into the `WHERE` of your own `UPDATE`, `DELETE` or `INSERT … SELECT`
/// and bind [`Fence::params`] after your own parameters; a write that
/// changes no row was refused.
///
/// ```
/// # fn demo(fence: &picolease::mysql::Fence) {
/// let sql = format!("UPDATE jobs SET done = 1 WHERE id = ? AND {}", fence.condition());
/// let mut params = vec![mysql_async::Value::Int(7)];
/// params.extend(fence.params());
/// // conn.exec_drop(sql, params).await?; conn.affected_rows() == 0 ⇒ no longer the leader.
/// # let _ = (sql, params);
/// # }
/// ```
///
/// [`Fence::transaction`] opens a transaction that takes the lock first
/// and is bounded by the leader's deadline (gated work:
/// [`LeaderContext::fenced_transaction`](super::LeaderContext::fenced_transaction)).
///
/// **The trade on InnoDB: the holder's own renewals wait.** InnoDB has no
/// `FOR KEY SHARE`: its shared lock holds off every update of the row,
/// the renew's as well as the successor's epoch bump. So while a
/// transaction of yours holds the fence's lock, this node's renew (and
/// release) waits for it too, where PostgreSQL's do not. A renewal sent then
/// completes when the transaction commits or rolls back, or when a
/// [`Fence::transaction`] is cut at its deadline; the driver gives up on
/// it sooner, at its request timeout (killing its own session), and
/// retries an interval after its send. A transaction held open past the
/// request timeout therefore costs renewals, and one held until the
/// leader's deadline costs the term: no renewal landed meanwhile, so the
/// node demotes at that deadline (`expired`). Keep fenced transactions
/// far shorter than the request timeout.
#[derive(Clone, Debug, PartialEq)]
pub struct Fence {
    sql: String,
    params: Vec<mysql_async::Value>,
    lease: String,
    epoch: Epoch,
}

impl Fence {
    /// The fence of `holder` on `lease` at `epoch`, for `statements`' table.
    pub fn new(
        statements: &Statements,
        lease: &LeaseName,
        holder: &HolderId,
        epoch: Epoch,
    ) -> Self {
        let (sql, params) = statements.fence_bound(lease, holder, epoch, |v| match v {
            Value::Text(s) => mysql_async::Value::Bytes(s.as_bytes().to_vec()),
            Value::Int(n) => mysql_async::Value::Int(n),
        });
        Fence {
            sql: sql.to_string(),
            params,
            lease: lease.to_string(),
            epoch,
        }
    }

    /// The term this fence holds for.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The condition, with positional `?` placeholders.
    pub fn condition(&self) -> &str {
        &self.sql
    }

    /// The term's check at the start of your own transaction, on any
    /// client (mysql_async, sqlx's MySQL, …): `SELECT <condition>`, bound
    /// with [`Fence::params`] (or [`Fence::values`]) alone. One row, `1`
    /// while the term holds, `0` once it is over. From then on the lease
    /// row is share-locked until your transaction ends, so no successor's
    /// term begins before your commit, whatever you write: a bulk `DELETE`
    /// that matches nothing is then nothing to do, not a lost term. (This
    /// node's renewals wait for that lock too: keep the transaction short,
    /// see above.) [`Fence::transaction`] runs it, with the server's bounds
    /// armed from the deadline, for a mysql_async connection.
    pub fn check(&self) -> String {
        format!("SELECT {}", self.sql)
    }

    /// [`Fence::params`] as plain values, in the same order: for a client
    /// that binds its own way (sqlx: `query.bind(text)` for
    /// [`Value::Text`], `query.bind(int)` for [`Value::Int`]).
    pub fn values(&self) -> Vec<Value<'_>> {
        self.params
            .iter()
            .map(|value| match value {
                mysql_async::Value::Int(n) => Value::Int(*n),
                mysql_async::Value::Bytes(bytes) => {
                    Value::Text(std::str::from_utf8(bytes).unwrap_or_default())
                }
                // `Fence::new` binds only text and integers.
                _ => Value::Int(-1),
            })
            .collect()
    }

    /// The values of the condition's placeholders, in order: append them
    /// after your own.
    pub fn params(&self) -> Vec<mysql_async::Value> {
        self.params.clone()
    }
}

impl Refuses for Fence {
    type Error = MysqlError;

    fn over(&self, reason: &str) -> MysqlError {
        MysqlError::Fenced {
            lease: self.lease.clone(),
            epoch: self.epoch.get(),
            reason: reason.to_string(),
        }
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
