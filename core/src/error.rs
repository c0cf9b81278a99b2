//! The errors of the core's two boundaries: configuration and row decoding.

use std::time::Duration;

/// A configuration that cannot work, or a name that cannot be used.
/// Every message names the value and says why it was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The ttl is zero or below the database clock's resolution.
    #[error("ttl {ttl:?} is too short: it must be at least 10ms (the database clock counts milliseconds)")]
    TtlTooShort {
        /// The configured ttl.
        ttl: Duration,
    },
    /// The ttl is longer than a day: almost surely a unit mistake.
    #[error("ttl {ttl:?} is too long: at most 24h")]
    TtlTooLong {
        /// The configured ttl.
        ttl: Duration,
    },
    /// The interval is zero.
    #[error("interval {interval:?} must be greater than zero")]
    ZeroInterval {
        /// The configured interval.
        interval: Duration,
    },
    /// The interval leaves no room for a second renewal before expiry.
    #[error("interval {interval:?} must be less than half the ttl {ttl:?}, so a failed renewal can be retried before the lease expires")]
    IntervalTooLong {
        /// The configured interval.
        interval: Duration,
        /// The configured ttl.
        ttl: Duration,
    },
    /// The request timeout is zero.
    #[error("request timeout {timeout:?} must be greater than zero")]
    ZeroTimeout {
        /// The configured timeout.
        timeout: Duration,
    },
    /// A request could outlive the lease it renews.
    #[error("request timeout {timeout:?} must be less than the ttl {ttl:?}")]
    TimeoutTooLong {
        /// The configured timeout.
        timeout: Duration,
        /// The configured ttl.
        ttl: Duration,
    },
    /// The drift allowance eats half the ttl or more.
    #[error("clock-drift allowance {drift:?} must be less than half the ttl {ttl:?}")]
    DriftTooLarge {
        /// The configured drift allowance.
        drift: Duration,
        /// The configured ttl.
        ttl: Duration,
    },
    /// The jitter could push a poll past the interval's own length.
    #[error("jitter {jitter:?} must be at most half the interval {interval:?}")]
    JitterTooLarge {
        /// The configured jitter.
        jitter: Duration,
        /// The configured interval.
        interval: Duration,
    },
    /// The stop lead would stop the work early even while renewals succeed.
    #[error("stop lead {stop_lead:?} must be less than {bound:?} (ttl − drift − 1ms − interval − request timeout), or renewals that succeed would still stop the work early")]
    StopLeadTooLong {
        /// The configured stop lead `g`.
        stop_lead: Duration,
        /// The bound it must stay strictly below.
        bound: Duration,
    },
    /// A lease name or holder id that cannot be used.
    #[error("{kind} {value:?} {problem}")]
    BadName {
        /// "lease name" or "holder id".
        kind: &'static str,
        /// The value given (cut at 80 characters).
        value: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A lease set with no lease, or more than it may hold.
    #[error("a lease set needs 1 to {max} leases, not {count}")]
    SetSize {
        /// The number of leases given.
        count: usize,
        /// The most a set may hold.
        max: usize,
    },
    /// A lease named twice in one set.
    #[error("lease {name:?} is named twice in the set")]
    DuplicateLease {
        /// The repeated name (cut at 80 characters).
        name: String,
    },
    /// A lease name in a namespace of picolease's own rows: the lease
    /// sets' membership rows (`picolease.member:`), handover requests
    /// (`picolease.handover:`) or preferred candidates
    /// (`picolease.preferred:`). A lease of such a name would be
    /// overwritten by them (`picolease handover --name X` writes
    /// `picolease.handover:X`, and its withdrawal deletes it), and the
    /// table's marker row `picolease.table` (DESIGN §3 "Failover").
    #[error("lease name {name:?} is reserved: names starting with \"picolease.member:\" (the lease sets' membership rows), \"picolease.handover:\" (handover requests) or \"picolease.preferred:\" (preferred candidates), and \"picolease.table\" (the table's marker row), are picolease's own rows")]
    ReservedLease {
        /// The name given (cut at 80 characters).
        name: String,
    },
    /// A restart policy that cannot work ([`crate::supervision::RestartPolicy`]).
    #[error("{field} {value}: {problem}")]
    BadRestartPolicy {
        /// "restart period" or "restart backoff".
        field: &'static str,
        /// The value given.
        value: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A table name that is not a plain (optionally schema-qualified) identifier.
    #[error("table name {value:?} {problem}")]
    BadTableName {
        /// The value given (cut at 80 characters).
        value: String,
        /// What is wrong with it.
        problem: &'static str,
    },
}

/// A row or result set that does not have the shape the protocol relies on:
/// a foreign table, a hand-edited row, a schema from another program.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RowError {
    /// A result row had the wrong number of columns.
    #[error("{statement} returned {found} columns, expected {expected}")]
    ColumnCount {
        /// The statement whose result was decoded.
        statement: &'static str,
        /// Columns expected.
        expected: usize,
        /// Columns found.
        found: usize,
    },
    /// A statement that must return exactly one row returned another count.
    #[error("{statement} returned {found} rows, expected {expected}")]
    RowCount {
        /// The statement whose result was decoded.
        statement: &'static str,
        /// Rows expected (a description such as "1" or "0 or 1").
        expected: &'static str,
        /// Rows found.
        found: usize,
    },
    /// A column held NULL where the protocol needs a value.
    #[error("lease {lease:?}: column {column} is NULL")]
    Null {
        /// The lease whose row is malformed (empty when unknown).
        lease: String,
        /// The column.
        column: &'static str,
    },
    /// An epoch below zero: not a value this protocol ever writes.
    #[error("lease {lease:?}: epoch {epoch} is negative")]
    NegativeEpoch {
        /// The lease whose row is malformed (empty when unknown).
        lease: String,
        /// The epoch found.
        epoch: i64,
    },
    /// A column of an unexpected type.
    #[error("lease {lease:?}: column {column} holds {found}, expected {expected}")]
    WrongType {
        /// The lease whose row is malformed (empty when unknown).
        lease: String,
        /// The column.
        column: &'static str,
        /// The type the protocol expects.
        expected: &'static str,
        /// The type found.
        found: String,
    },
}

impl RowError {
    /// The same error naming `lease`. The statements' decoder reads rows
    /// without knowing which lease they belong to, so its errors name none
    /// (`lease ""`); a driver, which knows, names it here.
    pub fn for_lease(mut self, name: &str) -> Self {
        match &mut self {
            RowError::Null { lease, .. }
            | RowError::NegativeEpoch { lease, .. }
            | RowError::WrongType { lease, .. }
                if lease.is_empty() =>
            {
                *lease = name.to_string();
            }
            _ => {}
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn for_lease_names_the_lease_only_where_none_is_named() {
        let unnamed = RowError::Null {
            lease: String::new(),
            column: "epoch",
        };
        assert_eq!(
            unnamed.for_lease("jobs").to_string(),
            "lease \"jobs\": column epoch is NULL"
        );
        let named = RowError::NegativeEpoch {
            lease: "a".into(),
            epoch: -1,
        };
        assert_eq!(named.clone().for_lease("b"), named);
        let count = RowError::RowCount {
            statement: "renew",
            expected: "0 or 1",
            found: 2,
        };
        assert_eq!(count.clone().for_lease("b"), count);
    }
}
