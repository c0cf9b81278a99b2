//! A lease's first row after a failover (DESIGN §3 "Failover", "A lease's
//! first row"): the table's marker row, and what a fresh row starts as.
//!
//! Adoption protects the rows a new server has. A lease whose very first
//! row was lost (written on the old server, never replicated) has no row
//! there: the first acquire inserts one, and without more it would lead at
//! once at epoch 1 while the lost term's holder still runs, and name a
//! term with an epoch the lost history had already given.
//!
//! The table therefore carries one more row, [`TABLE_MARKER`], written with
//! the table (in the same statement batch) and replicated with it, holding
//! nobody. It records the server incarnation that created it, like every
//! row, and its `epoch` is the floor of a fresh row's epoch (0 at
//! creation). A fresh row of a lease is inserted
//!
//! - as today (the caller's, at the marker's epoch + 1, so epoch 1 in a
//!   table that never failed over) while the marker is this server's and
//!   past its expiry;
//! - as a **grace row** (nobody's, its expiry a ttl away, the same shape an
//!   adoption gives a row) while the marker was written by another server
//!   incarnation, or its own grace has not ended (the runbook put it
//!   there). Its epoch is then the adopted epoch of the marker
//!   ([`adopted_epoch`](super::adopted_epoch), counting the clock) plus 1,
//!   above any epoch the lost history gave.
//!
//! Nothing adopts the marker automatically: after a server change each new
//! lease name pays one ttl of grace before its first term, once. The
//! operators' runbook (`release --all --after-failover`) re-stamps it with
//! the other rows, and that ends the cost once its grace has passed.
//!
//! Membership rows are exempt: each is named by its holder id, which no
//! other process shares, so a lost one can only be re-created by its own
//! holder.

use super::batch::MEMBER_PREFIX_END;
use super::build::{
    db_now_millis, Builder, EPOCH_COL, EXPIRES_AT, HOLDER, HOLDER_COL, INCARNATION, LEASE, NAME,
    TTL,
};
use super::failover::ADOPTION_EPOCH_SHIFT;
use super::{Dialect, MEMBER_PREFIX};
use sea_query::{Alias, CaseStatement, Expr, ExprTrait, Query};

/// The name of the table's marker row: in picolease's reserved namespace,
/// so no lease can take it (`ConfigError::ReservedLease`).
pub const TABLE_MARKER: &str = "picolease.table";

/// The alias of the one-row derived table carrying the caller (the
/// single acquire's; MySQL's batch too).
pub(super) const CALLER: &str = "picolease_caller";
/// Its ttl column.
pub(super) const CALLER_TTL: &str = "ttl_ms";
/// The alias of the marker row in the subqueries.
const MARKER_ALIAS: &str = "picolease_marker";
/// The alias of the row a fresh insert looks for.
const EXISTING_ALIAS: &str = "picolease_existing";

impl Builder<'_> {
    /// An identifier, quoted. Identifiers are validated (letters, digits,
    /// underscores), so quoting them by hand is safe.
    fn ident(&self, s: &str) -> String {
        match self.dialect {
            Dialect::Mysql => format!("`{s}`"),
            Dialect::Sqlite | Dialect::Postgres => format!("\"{s}\""),
        }
    }

    /// The table, qualified by its schema, quoted for the dialect.
    fn table_plain(&self) -> String {
        match self.dialect {
            Dialect::Mysql => self.mysql_table(),
            Dialect::Sqlite | Dialect::Postgres => self.qualified_table(),
        }
    }

    /// `table AS alias`.
    fn table_as(&self, alias: &str) -> String {
        format!("{} AS {}", self.table_plain(), self.ident(alias))
    }

    /// `alias.column`, quoted.
    fn aliased(&self, alias: &str, column: &str) -> String {
        format!("{}.{}", self.ident(alias), self.ident(column))
    }

    /// The marker was written by another server incarnation (SQL over
    /// [`MARKER_ALIAS`]); never on SQLite, which has none.
    fn marker_foreign(&self) -> Option<String> {
        let now = self.incarnation_now()?;
        let column = self.aliased(MARKER_ALIAS, INCARNATION);
        Some(match self.dialect {
            Dialect::Mysql => format!("NOT ({column} <=> {now})"),
            Dialect::Postgres | Dialect::Sqlite => format!("{column} IS DISTINCT FROM {now}"),
        })
    }

    /// A fresh row starts as a grace row: the marker is another server's,
    /// or in its grace period still.
    fn fresh_in_grace(&self) -> String {
        let expiry = format!(
            "{} > {}",
            self.aliased(MARKER_ALIAS, EXPIRES_AT),
            db_now_millis(self.dialect)
        );
        let grace = match self.marker_foreign() {
            Some(foreign) => format!("({foreign} OR {expiry})"),
            None => expiry,
        };
        format!(
            "EXISTS (SELECT 1 FROM {} WHERE {} = '{TABLE_MARKER}' AND {grace})",
            self.table_as(MARKER_ALIAS),
            self.aliased(MARKER_ALIAS, NAME),
        )
    }

    /// The holder a fresh row of `name` is inserted with: `holder`, or
    /// NULL (a grace row) while [`Self::fresh_in_grace`] and no row of
    /// `name` exists. The value is also what the upsert's conflict branch
    /// sees as the caller (`excluded.holder`), which is why it stays the
    /// caller's whenever the row exists: a row inserted by another
    /// statement since this one's snapshot is then met with NULL, which
    /// takes nothing (a fresh row is not lapsed), and kept as it is.
    /// `member_name`: the SQL of the name in a batch, whose membership
    /// rows are exempt.
    pub(super) fn fresh_holder(&self, name: Expr, holder: Expr, member_name: Option<&str>) -> Expr {
        let existing = Query::select()
            .expr(Expr::cust("1"))
            .from_as(self.table_ref(), Alias::new(EXISTING_ALIAS))
            .and_where(Expr::col((Alias::new(EXISTING_ALIAS), Alias::new(NAME))).eq(name))
            .to_owned();
        let mut grace = Expr::cust(self.fresh_in_grace()).and(Expr::exists(existing).not());
        if let Some(member_name) = member_name {
            grace = grace.and(Expr::cust(self.not_a_member(member_name)));
        }
        CaseStatement::new()
            .case(grace, Expr::cust("NULL"))
            .finally(holder)
            .into()
    }

    /// SQLite and PostgreSQL: the single acquire's `SELECT` of the row to
    /// insert: `name, fresh holder, fresh epoch, now + ttl FROM (SELECT
    /// lease, holder, ttl) AS picolease_caller`, binding the lease, the
    /// holder and the ttl once each, in that order, as before the marker.
    pub(super) fn caller_select(&self) -> sea_query::SelectStatement {
        let (text, bigint) = match self.dialect {
            Dialect::Postgres => ("text", "bigint"),
            Dialect::Sqlite | Dialect::Mysql => ("TEXT", "INTEGER"),
        };
        let caller = Query::select()
            .expr_as(Expr::val(LEASE).cast_as(Alias::new(text)), Alias::new(NAME))
            .expr_as(
                Expr::val(HOLDER).cast_as(Alias::new(text)),
                Alias::new(HOLDER_COL),
            )
            .expr_as(
                Expr::val(TTL).cast_as(Alias::new(bigint)),
                Alias::new(CALLER_TTL),
            )
            .to_owned();
        let of_caller = |column: &str| Expr::col((Alias::new(CALLER), Alias::new(column)));
        Query::select()
            .expr(of_caller(NAME))
            .expr(self.fresh_holder(of_caller(NAME), of_caller(HOLDER_COL), None))
            .expr(self.fresh_epoch())
            .expr(Expr::cust(db_now_millis(self.dialect)).add(of_caller(CALLER_TTL)))
            .from_subquery(caller, Alias::new(CALLER))
            // SQLite reads `ON` after a bare FROM as a join constraint.
            .and_where(Expr::cust("true"))
            .to_owned()
    }

    /// MySQL's fresh holder, written by hand: the caller (`caller`, SQL),
    /// or NULL while [`Self::fresh_in_grace`] (and, in a batch, the item
    /// `member_name` is not a membership row). No existence check: MySQL's
    /// conflict branch reads the caller from elsewhere
    /// (`Builder::mysql_conflict_clause`).
    pub(super) fn mysql_fresh_holder(&self, caller: &str, member_name: Option<&str>) -> String {
        let member = member_name
            .map(|name| format!(" AND {}", self.not_a_member(name)))
            .unwrap_or_default();
        format!(
            "CASE WHEN {grace}{member} THEN NULL ELSE {caller} END",
            grace = self.fresh_in_grace(),
        )
    }

    /// `name` (SQL) is not a membership row's: outside `[MEMBER_PREFIX,
    /// MEMBER_PREFIX_END)` byte-wise (as `Builder::is_member`).
    fn not_a_member(&self, name: &str) -> String {
        let collate = match self.dialect {
            // SQLite's BINARY and MySQL's VARBINARY compare bytes already.
            Dialect::Sqlite | Dialect::Mysql => "",
            Dialect::Postgres => " COLLATE \"C\"",
        };
        format!("({name}{collate} < '{MEMBER_PREFIX}' OR {name}{collate} >= '{MEMBER_PREFIX_END}')")
    }

    /// The epoch a fresh row is inserted at: the marker's epoch + 1 (1
    /// without a marker), the marker's adopted epoch + 1 while it is
    /// another server's.
    pub(super) fn fresh_epoch(&self) -> Expr {
        Expr::cust(self.fresh_epoch_sql())
    }

    /// [`Self::fresh_epoch`] as SQL.
    pub(super) fn fresh_epoch_sql(&self) -> String {
        let epoch = self.aliased(MARKER_ALIAS, EPOCH_COL);
        let floor = match self.marker_foreign() {
            Some(foreign) => {
                let unit = 1i64 << ADOPTION_EPOCH_SHIFT;
                let now = db_now_millis(self.dialect);
                let adopted = match self.dialect {
                    Dialect::Sqlite => format!("MAX({epoch} + {unit}, ({now}) * {unit})"),
                    Dialect::Postgres | Dialect::Mysql => {
                        format!("GREATEST({epoch} + {unit}, ({now}) * {unit})")
                    }
                };
                format!("CASE WHEN {foreign} THEN {adopted} ELSE {epoch} END")
            }
            None => epoch,
        };
        format!(
            "COALESCE((SELECT {floor} FROM {} WHERE {} = '{TABLE_MARKER}'), 0) + 1",
            self.table_as(MARKER_ALIAS),
            self.aliased(MARKER_ALIAS, NAME),
        )
    }

    /// The statement that writes the marker if it is missing: nobody's,
    /// epoch 0, lapsed since 1970, this server's incarnation (PostgreSQL's
    /// column default; MySQL names it). Parameterless; appended to the
    /// table's creation (SQLite, PostgreSQL: one batch, one transaction on
    /// PostgreSQL) or to its migration (MySQL, after the incarnation
    /// column exists). An older table gains it too, unless one of its rows
    /// is malformed: such a row stops every driver with a typed error,
    /// and nothing is written to its table then.
    pub(super) fn create_marker(&self) -> String {
        let table = self.table_plain();
        let q = |c: &str| self.ident(c);
        let (name, holder, epoch, expires) = (q(NAME), q(HOLDER_COL), q(EPOCH_COL), q(EXPIRES_AT));
        let unsound = Query::select()
            .expr(Expr::cust("1"))
            .from(self.table_ref())
            .and_where(self.row_is_sound().not())
            .to_owned();
        match self.dialect {
            // Decided by a plain read first (`SELECT … INTO @v`, a
            // consistent read without row locks; MariaDB locks the rows a
            // `SET @v = (SELECT …)` reads), then a plain upsert of the one
            // key: an `INSERT … SELECT` over the table locks every row it
            // scans, and contenders starting together deadlocked on it
            // (1213).
            Dialect::Mysql => {
                let insert = format!(
                    "INSERT INTO {table} ({name}, {holder}, {epoch}, {expires}, {inc}) \
                     VALUES (''{TABLE_MARKER}'', NULL, 0, 0, {now}) \
                     ON DUPLICATE KEY UPDATE {name} = {name}",
                    inc = q(INCARNATION),
                    now = super::build::MYSQL_INCARNATION,
                );
                format!(
                    "SELECT NOT EXISTS (SELECT 1 FROM {table} WHERE {name} = '{TABLE_MARKER}') \
                     AND NOT EXISTS ({unsound}) INTO @picolease_marker; \
                     SET @picolease_sql = IF(@picolease_marker, '{insert}', 'DO 0'); \
                     PREPARE picolease_marker FROM @picolease_sql; EXECUTE picolease_marker; \
                     DEALLOCATE PREPARE picolease_marker",
                    unsound = unsound.to_string(sea_query::MysqlQueryBuilder),
                )
            }
            Dialect::Sqlite | Dialect::Postgres => format!(
                "INSERT INTO {table} ({name}, {holder}, {epoch}, {expires}) \
                 SELECT '{TABLE_MARKER}', NULL, 0, 0 WHERE NOT EXISTS ({unsound}) \
                 ON CONFLICT ({name}) DO NOTHING",
                unsound = match self.dialect {
                    Dialect::Sqlite => unsound.to_string(sea_query::SqliteQueryBuilder),
                    _ => unsound.to_string(sea_query::PostgresQueryBuilder),
                },
            ),
        }
    }

    /// The lease rows a listing shows: every row but the marker.
    pub(super) fn not_the_marker(&self) -> Expr {
        Expr::cust(format!("{} <> '{TABLE_MARKER}'", self.quoted(NAME)))
    }
}
