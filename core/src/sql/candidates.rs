//! The statements of candidates and preference (DESIGN §3 "Preferred
//! holders"): a candidate's announcement, and the renewal's reading of
//! the best live one.
//!
//! Each lease has at most one preferred-candidate row,
//! [`PREFERRED_PREFIX`] and the lease name. Its holder is the best live
//! candidate's announcement ([`crate::Candidate::announcement`]: the rank
//! key, the holder id, a tab, the version tag), its expiry a reservation
//! from the candidate's last announcement. A candidate's announce replaces
//! the row only when it lapsed or the new text sorts at or above the old
//! one, byte by byte: the rank key comes first, so the row always names
//! the best candidate that announced within its life, and its own
//! announcements keep it alive. The renewal reads it by primary key, so a
//! leader learns of a better candidate at its next renewal for the price
//! of one index lookup.

use super::build::{db_now_millis, Builder, EXPIRES_AT, HOLDER_COL, NAME};
use super::{Dialect, Param, Statement};
use sea_query::Expr;

/// The reserved name prefix of preferred-candidate rows: the best live
/// candidate to lead lease `L` is announced in the row named
/// `picolease.preferred:L`.
pub const PREFERRED_PREFIX: &str = "picolease.preferred:";

/// The name of the row that announces the preferred candidate of `lease`.
pub fn preferred_candidate_name(lease: &str) -> String {
    format!("{PREFERRED_PREFIX}{lease}")
}

impl Builder<'_> {
    /// The renewal's third column: the live announcement in the lease's
    /// preferred-candidate row, or NULL. A primary-key lookup.
    pub(super) fn preferred_candidate(&self) -> Expr {
        let (open, close) = match self.dialect {
            Dialect::Mysql => ("`", "`"),
            Dialect::Sqlite | Dialect::Postgres => ("\"", "\""),
        };
        let c = |column: &str| format!("{open}picolease_preferred{close}.{open}{column}{close}");
        Expr::cust(format!(
            "(SELECT {holder} FROM {table} AS {open}picolease_preferred{close} \
             WHERE {name} = {preferred_name} AND {expires} > {now})",
            holder = c(HOLDER_COL),
            table = self.table_sql(),
            name = c(NAME),
            preferred_name = self.prefixed(PREFERRED_PREFIX, &self.quoted(NAME)),
            expires = c(EXPIRES_AT),
            now = db_now_millis(self.dialect),
        ))
    }

    /// `'<prefix>' || value` in this dialect (`CONCAT` on MySQL).
    pub(super) fn prefixed(&self, prefix: &str, value: &str) -> String {
        match self.dialect {
            Dialect::Mysql => format!("CONCAT('{prefix}', {value})"),
            Dialect::Sqlite | Dialect::Postgres => format!("'{prefix}' || {value}"),
        }
    }

    /// A candidate announces itself: upserts the preferred-candidate row of
    /// the lease bound as [`Param::Lease`] with the announcement bound as
    /// [`Param::Candidacy`], alive for [`Param::ReservationMillis`], when
    /// the row lapsed, is empty, or its text sorts at or below ours (byte
    /// order; on PostgreSQL under the `C` collation). Returns nothing: the
    /// candidate needs no answer, the leader reads the row.
    pub(super) fn announce(&self) -> Statement {
        let now = db_now_millis(self.dialect);
        let table = self.table_sql();
        let sql = match self.dialect {
            Dialect::Mysql => {
                // `ON DUPLICATE KEY UPDATE` assigns left to right: the
                // expiry follows the holder only if the holder is now ours.
                let h = format!("`{HOLDER_COL}`");
                let x = format!("`{EXPIRES_AT}`");
                format!(
                    "INSERT INTO {table} (`{NAME}`, {h}, `epoch`, {x}) \
                     VALUES ({name}, ?, 0, ({now}) + ?) ON DUPLICATE KEY UPDATE \
                     {h} = IF({x} <= ({now}) OR {h} IS NULL OR VALUES({h}) >= {h}, VALUES({h}), {h}), \
                     {x} = IF({h} = VALUES({h}), VALUES({x}), {x})",
                    name = self.prefixed(PREFERRED_PREFIX, "?"),
                )
            }
            Dialect::Sqlite | Dialect::Postgres => {
                let (p1, p2, p3) = match self.dialect {
                    Dialect::Postgres => ("$1", "$2", "$3"),
                    _ => ("?", "?", "?"),
                };
                let collate = match self.dialect {
                    Dialect::Postgres => " COLLATE \"C\"",
                    _ => "",
                };
                let h = self.quoted(HOLDER_COL);
                let x = self.quoted(EXPIRES_AT);
                format!(
                    "INSERT INTO {table} (\"{NAME}\", \"{HOLDER_COL}\", \"epoch\", \"{EXPIRES_AT}\") \
                     VALUES ({name}, {p2}, 0, ({now}) + {p3}) ON CONFLICT (\"{NAME}\") DO UPDATE \
                     SET \"{HOLDER_COL}\" = \"excluded\".\"{HOLDER_COL}\", \
                     \"{EXPIRES_AT}\" = \"excluded\".\"{EXPIRES_AT}\" \
                     WHERE {x} <= ({now}) OR {h} IS NULL \
                     OR \"excluded\".\"{HOLDER_COL}\"{collate} >= {h}{collate}",
                    name = self.prefixed(PREFERRED_PREFIX, p1),
                )
            }
        };
        Statement {
            sql,
            params: vec![Param::Lease, Param::Candidacy, Param::ReservationMillis],
            read_back: None,
        }
    }
}
