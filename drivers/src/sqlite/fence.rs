//! Fenced writes on SQLite: the application's own statements made
//! conditional on the lease (DESIGN §3). SQLite's single writer lock orders
//! a fenced write against a successor's acquire: whichever commits first is
//! seen by the other.

use picolease_core::sql::{Statements, Value};
use picolease_core::{Epoch, HolderId, LeaseName};

/// The fence of one term: a condition true while `holder` holds `lease` at
/// `epoch`, unexpired, on the database's clock (DESIGN §3). AND
/// [`Fence::sql`] into your own `WHERE` and bind [`Fence::params`] after
/// your own parameters, so a stale leader's write changes nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct Fence {
    sql: String,
    params: Vec<rusqlite::types::Value>,
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
            Value::Text(s) => rusqlite::types::Value::Text(s.to_string()),
            Value::Int(n) => rusqlite::types::Value::Integer(n),
        });
        Fence {
            sql: sql.to_string(),
            params,
            epoch,
        }
    }

    /// The term this fence holds for.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The condition, with positional `?` placeholders.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The values of the condition's placeholders, in order.
    pub fn params(&self) -> rusqlite::ParamsFromIter<std::slice::Iter<'_, rusqlite::types::Value>> {
        rusqlite::params_from_iter(self.params.iter())
    }

    /// The values, to append to your own parameters.
    pub fn values(&self) -> &[rusqlite::types::Value] {
        &self.params
    }
}
