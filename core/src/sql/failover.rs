//! The statements' side of a failover (DESIGN §3 "Failover"): the epoch a
//! row adopted from another server incarnation takes, the grace period's
//! expiry, and the operators' statement that puts every lease row into
//! that shape at once (`picolease release --all --after-failover`).

use sea_query::{Alias, Expr, ExprTrait, Func, Query};

use super::build::{
    db_now, db_now_millis, Builder, EPOCH_COL, EXPIRES_AT, HOLDER_COL, INCARNATION, NAME, TTL,
};
use super::{Dialect, ReadOrder, Statement, HANDOVER_PREFIX, PREFERRED_PREFIX};

/// An adopted row's epoch counts the adopting server's clock in units of
/// 2^20 per millisecond ([`adopted_epoch`]).
pub const ADOPTION_EPOCH_SHIFT: u32 = 20;

/// The epoch a row written by another server incarnation takes when it is
/// adopted at database time `now_ms`: `max(epoch + 2^20, now_ms · 2^20)`.
///
/// A constant jump gave two adoptions of the same old row the same epoch:
/// a lagging standby promoted after a first failover's adopter had led
/// still holds the row the first adopter started from. Counting the
/// adopter's clock makes every adoption that comes later in time land
/// higher, whatever old row it starts from: the terms granted after an
/// adoption at `t` stay below `(t + 1 ms) · 2^20` as long as fewer than
/// 2^20 of them are granted in a millisecond, which no database commits.
/// `epoch + 2^20` keeps the result above the old row and the terms a lost
/// history issued beyond it (each needed a commit) when the adopter's
/// clock stands behind the old server's. The product fits a signed 64-bit
/// epoch until the year 2248.
pub fn adopted_epoch(epoch: i64, now_ms: i64) -> i64 {
    let unit = 1i64 << ADOPTION_EPOCH_SHIFT;
    Ord::max(epoch.saturating_add(unit), now_ms.saturating_mul(unit))
}

impl Builder<'_> {
    /// [`adopted_epoch`] in SQL, on the database clock: `GREATEST(epoch +
    /// 2^20, now · 2^20)` (SQLite's multi-argument `MAX`).
    pub(super) fn adopted_epoch(&self) -> Expr {
        let unit = 1i64 << ADOPTION_EPOCH_SHIFT;
        Func::greatest([
            Expr::cust(format!("{} + {unit}", self.quoted(EPOCH_COL))),
            Expr::cust(format!("{} * {unit}", db_now_millis(self.dialect))),
        ])
        .into()
    }

    /// The expiry of a row entering its grace period: `GREATEST(expires_at,
    /// now + ttl)`. Whatever term the lost history granted ends before
    /// that.
    pub(super) fn grace_expiry(&self) -> Expr {
        Func::greatest([
            self.current_expiry(),
            // The ttl is a sentinel value, bound as `Param::TtlMillis`.
            db_now(self.dialect).add(Expr::val(TTL)),
        ])
        .into()
    }

    /// The row's expiry as every statement reads it: a linked row's (a set
    /// renewing by liveness, DESIGN §9 "Renewal by liveness") is its holder's liveness's, so
    /// that adopting it writes a plain row, nobody's for a ttl at least.
    pub(super) fn current_expiry(&self) -> Expr {
        let sql = self.effective_expiry(&format!("\"{}\"", self.table.table()));
        Expr::cust(match self.dialect {
            // Written with `"` around identifiers, as `fill` takes them.
            Dialect::Mysql => sql.replace('"', "`"),
            Dialect::Sqlite | Dialect::Postgres => sql,
        })
    }

    /// The operators' statement after a failover the servers could not
    /// detect (DESIGN §3 "Failover", docs/operations.md §5.4): every sound
    /// lease row, membership rows included, takes the shape an adoption
    /// gives it. No holder, so the holder of a lost term can neither renew
    /// nor re-take it; the epoch past anything issued; the expiry a ttl
    /// away at least, so nobody leads before a lost term has ended. The
    /// handover requests and preferred-candidate rows are left alone: they
    /// name terms and candidates, not holders. `RETURNING name, epoch` (on
    /// MySQL the same rows read back, locked, after the write).
    pub(super) fn after_failover(&self) -> Statement {
        // The prefixes are constants without quotes or wildcards: written
        // inline, as every value but the sentinels is.
        let requests =
            |prefix: &str| Expr::cust(format!("{} NOT LIKE '{prefix}%'", self.quoted(NAME)));
        let mut update = Query::update()
            .table(self.table_ref())
            .value(Alias::new(HOLDER_COL), Expr::cust("NULL"))
            .value(Alias::new(EPOCH_COL), self.adopted_epoch())
            .value(Alias::new(EXPIRES_AT), self.grace_expiry())
            .to_owned();
        if let Some(now) = self.incarnation_now() {
            // Last: MySQL assigns left to right.
            update.value(Alias::new(INCARNATION), Expr::cust(now));
        }
        let update = update
            .and_where(self.row_is_sound())
            .and_where(requests(HANDOVER_PREFIX))
            .and_where(requests(PREFERRED_PREFIX))
            .returning(Query::returning().exprs([self.col(NAME), self.col(EPOCH_COL)]))
            .to_owned();
        let read = Query::select()
            .exprs([self.col(NAME), self.col(EPOCH_COL)])
            .from(self.table_ref())
            .and_where(self.row_is_sound())
            .and_where(requests(HANDOVER_PREFIX))
            .and_where(requests(PREFERRED_PREFIX))
            .to_owned();
        self.with_read_back(self.render(&update), read, ReadOrder::AfterWrite)
    }
}
