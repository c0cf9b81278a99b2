//! Fenced writes on MySQL: the application's own statements made
//! conditional on the lease (DESIGN §3, MySQL). The condition reads the
//! lease row `LOCK IN SHARE MODE`, so inside the user's transaction a
//! successor's acquire (which updates that row) waits for the
//! transaction to end: a fenced write commits before the next term or not
//! at all.

use picolease_core::sql::{Bindings, Statements, Value};
use picolease_core::{Epoch, HolderId, LeaseName};

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
/// While your transaction is open the holder's own renewals wait for it
/// too (InnoDB has no weaker lock that lets an update of non-key columns
/// pass): keep it shorter than the ttl's margin.
#[derive(Clone, Debug, PartialEq)]
pub struct Fence {
    sql: String,
    params: Vec<mysql_async::Value>,
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
        let statement = statements.fence();
        let bindings = Bindings {
            lease: lease.as_str(),
            holder: holder.as_str(),
            ttl_millis: 0,
        };
        let params = statement
            .bind(&bindings, Some(epoch))
            .map(|v| match v {
                Value::Text(s) => mysql_async::Value::Bytes(s.as_bytes().to_vec()),
                Value::Int(n) => mysql_async::Value::Int(n),
            })
            .collect();
        Fence {
            sql: statement.sql().to_string(),
            params,
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

    /// The values of the condition's placeholders, in order: append them
    /// after your own.
    pub fn params(&self) -> Vec<mysql_async::Value> {
        self.params.clone()
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
