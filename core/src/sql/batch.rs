//! The batched statements of a lease *set*: one statement acquires, renews
//! or releases many leases (and membership rows, which are leases named
//! [`MEMBER_PREFIX`]`<holder id>`), and the survey reads what a node needs
//! to choose which free leases to try.
//!
//! A batch travels as one parameter: a JSON array bound as text
//! ([`Param::Batch`](super::Param::Batch), written by [`batch_names`] or [`batch_pairs`]),
//! unpacked inside the statement by the database's JSON table function
//! (`json_each` on SQLite, `json_array_elements[_text]` on PostgreSQL,
//! `JSON_TABLE` on MySQL: see `super::mysql`).
//! Each item is decided by exactly the single-lease statement's rule, so
//! the batch rule book is the single one applied per name.

use sea_query::{Alias, Expr, ExprTrait, Func, FunctionCall, Query};

use super::build::{
    db_now, Builder, BATCH, EPOCH_COL, EXPIRES_AT, HOLDER, HOLDER_COL, INCARNATION, NAME,
    PG_INCARNATION, STALE, TTL,
};
use super::decode::{self, Cell, LeaseRow};
use super::{db_now_millis, Dialect, Param, Statement, MEMBER_PREFIX};

/// The alias of the lease table inside the row-locking subquery.
const LOCKED: &str = "locked";
use crate::error::RowError;
use crate::names::{Epoch, HolderId};
use crate::protocol::Reply;

/// The first string after every name that starts with [`MEMBER_PREFIX`]:
/// the prefix with its last character (`:`) replaced by the next one
/// (`;`). Membership rows are exactly the names in
/// `[MEMBER_PREFIX, MEMBER_PREFIX_END)` in byte order.
pub(super) const MEMBER_PREFIX_END: &str = "picolease.member;";

/// The alias of the batch's table function.
const ITEM: &str = "j";

/// A JSON array of strings: `["a","b"]`, each name a JSON string (`"`
/// and `\` escaped, control characters as `\u00XX`, the rest as is, in
/// UTF-8). The argument of [`Param::Batch`](super::Param::Batch) for
/// [`super::Statements::acquire_batch`]. The names must be distinct.
pub fn batch_names<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::from("[");
    for (i, name) in names.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_string(&mut out, name);
    }
    out.push(']');
    out
}

/// A JSON array of `[name, epoch]` pairs: `[["a",3],["b",5]]`. The
/// argument of [`Param::Batch`](super::Param::Batch) for [`super::Statements::renew_batch`] and
/// [`super::Statements::release_batch`]. The names must be distinct. An
/// epoch beyond `i64::MAX` (never one the database gave) is written as
/// `i64::MAX`, which matches no row, as [`Epoch::to_i64`] does.
pub fn batch_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, Epoch)>) -> String {
    let mut out = String::from("[");
    for (i, (name, epoch)) in pairs.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        push_json_string(&mut out, name);
        out.push(',');
        out.push_str(&epoch.to_i64().to_string());
        out.push(']');
    }
    out.push(']');
    out
}

/// Appends `s` as a JSON string literal: `"` and `\` escaped with a
/// backslash, every character below U+0020 as `\u00XX`, everything else
/// (non-ASCII included) as is, in UTF-8.
pub(crate) fn push_json_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let n = u32::from(c) as usize;
                out.push_str("\\u00");
                out.push(char::from(HEX[n >> 4]));
                out.push(char::from(HEX[n & 0xf]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl Builder<'_> {
    /// `"j"."value"`: one item of the batch (a name, or a `[name, epoch]`
    /// pair as JSON).
    fn item(&self) -> Expr {
        Expr::col((Alias::new(ITEM), Alias::new("value")))
    }

    /// The table function unpacking the batch. PostgreSQL: the parameter
    /// is cast to text first, so it is prepared as text (tokio-postgres
    /// refuses a `&str` for a `json` parameter), then to json. Names come
    /// out as text (`json_array_elements_text`); pairs as json values.
    fn batch_source(&self, pairs: bool) -> FunctionCall {
        match self.dialect {
            Dialect::Sqlite => Func::cust("json_each").arg(Expr::val(BATCH)),
            Dialect::Postgres => Func::cust(if pairs {
                "json_array_elements"
            } else {
                "json_array_elements_text"
            })
            .arg(
                Expr::val(BATCH)
                    .cast_as(Alias::new("text"))
                    .cast_as(Alias::new("json")),
            ),
            Dialect::Mysql => unreachable!("MySQL's batches use JSON_TABLE (super::mysql)"),
        }
    }

    /// `SELECT name, epoch FROM <the batch's pairs>`, typed like the
    /// table's columns (text, 64-bit integer).
    fn batch_pairs_select(&self) -> sea_query::SelectStatement {
        let (name, epoch) = match self.dialect {
            Dialect::Sqlite => (
                Func::cust("json_extract")
                    .arg(self.item())
                    .arg(Expr::cust("'$[0]'"))
                    .into(),
                Func::cust("json_extract")
                    .arg(self.item())
                    .arg(Expr::cust("'$[1]'"))
                    .into(),
            ),
            Dialect::Postgres => (
                Expr::cust(format!("\"{ITEM}\".\"value\" ->> 0")),
                Expr::cust(format!("CAST(\"{ITEM}\".\"value\" ->> 1 AS bigint)")),
            ),
            Dialect::Mysql => unreachable!("MySQL's batches use JSON_TABLE (super::mysql)"),
        };
        Query::select()
            .expr(name)
            .expr(epoch)
            .from_function(self.batch_source(true), Alias::new(ITEM))
            .to_owned()
    }

    /// `holder = me AND (name, epoch) IN (<the batch's pairs>)`: the
    /// single renew's and release's condition, per pair (SQLite; see
    /// [`Builder::pg_locked_pairs`] for PostgreSQL).
    fn mine_in_batch(&self) -> Expr {
        self.col(HOLDER_COL).eq(HOLDER).and(
            Expr::tuple([self.col(NAME), self.col(EPOCH_COL)])
                .in_subquery(self.batch_pairs_select()),
        )
    }

    /// PostgreSQL: the rows of the batch that we hold at their epochs,
    /// locked in name order (byte-wise, `COLLATE "C"`), as a derived table
    /// `locked(name, epoch)` to update from; its one parameter is the
    /// batch, after `holder` (`$holder`, `$batch`).
    ///
    /// Lease sets send every batch sorted the same way and the acquire's
    /// upsert locks rows in the order of its batch, so two batches
    /// touching the same rows (a holder's renew, another node's acquire)
    /// always lock them in one order: one waits for the other, they never
    /// deadlock. Without it a large renew locked rows in the join's order
    /// and met acquires head on (measured at 10,000 leases: lock cycles
    /// nearly every interval). The join on the primary key keeps it one
    /// index probe per item.
    fn pg_locked_pairs(&self, holder: usize, batch: usize) -> String {
        format!(
            "(SELECT \"{LOCKED}\".\"{NAME}\", \"{LOCKED}\".\"{EPOCH_COL}\" FROM {table} AS \"{LOCKED}\" \
             JOIN json_array_elements(CAST(CAST(${batch} AS text) AS json)) AS \"{ITEM}\" \
             ON \"{LOCKED}\".\"{NAME}\" = \"{ITEM}\".\"value\" ->> 0 \
             AND \"{LOCKED}\".\"{EPOCH_COL}\" = CAST(\"{ITEM}\".\"value\" ->> 1 AS bigint) \
             WHERE \"{LOCKED}\".\"{HOLDER_COL}\" = ${holder} \
             ORDER BY \"{LOCKED}\".\"{NAME}\" COLLATE \"C\" FOR NO KEY UPDATE OF \"{LOCKED}\") AS \"{LOCKED}\"",
            table = self.qualified_table(),
        )
    }

    /// The table as SQL, schema-qualified when it has a schema.
    pub(super) fn qualified_table(&self) -> String {
        // Identifiers are validated (letters, digits, underscores).
        match self.table.schema() {
            Some(schema) => format!("\"{schema}\".\"{}\"", self.table.table()),
            None => format!("\"{}\"", self.table.table()),
        }
    }

    /// PostgreSQL: `UPDATE … SET <set> FROM <locked pairs> WHERE` the row
    /// is the locked one, still ours at that epoch and written by this
    /// server incarnation (DESIGN §3 "Failover"), `RETURNING name,
    /// epoch` and `returning_more`. `set` uses the placeholders before
    /// `holder`.
    fn pg_update_locked(
        &self,
        set: &str,
        holder: usize,
        batch: usize,
        returning_more: &str,
    ) -> String {
        let t = self.table.table();
        format!(
            "UPDATE {table} SET {set} FROM {locked} \
             WHERE \"{t}\".\"{NAME}\" = \"{LOCKED}\".\"{NAME}\" \
             AND \"{t}\".\"{EPOCH_COL}\" = \"{LOCKED}\".\"{EPOCH_COL}\" \
             AND \"{t}\".\"{HOLDER_COL}\" = ${holder} \
             AND \"{t}\".\"{INCARNATION}\" = {PG_INCARNATION} \
             RETURNING \"{t}\".\"{NAME}\", \"{t}\".\"{EPOCH_COL}\"{returning_more}",
            table = self.qualified_table(),
            locked = self.pg_locked_pairs(holder, batch),
        )
    }

    /// The multi-row acquire: the single acquire's upsert for every name
    /// of the batch. `WHERE true` tells SQLite's parser that `ON CONFLICT`
    /// belongs to the upsert, not to a join.
    pub(super) fn acquire_batch(&self) -> Statement {
        if self.dialect == Dialect::Mysql {
            return self.mysql_acquire_batch();
        }
        let now = || db_now(self.dialect);
        let select = Query::select()
            .expr(self.item())
            // A fresh row starts as a grace row after a server change
            // (`first_row`); membership rows do not.
            .expr(self.fresh_holder(
                self.item(),
                Expr::val(HOLDER),
                Some(&format!("\"{ITEM}\".\"value\"")),
            ))
            .expr(self.fresh_epoch())
            .expr(now().add(Expr::val(TTL)))
            .from_function(self.batch_source(false), Alias::new(ITEM))
            .and_where(Expr::cust("true"))
            .to_owned();
        let mut select = select;
        if self.dialect == Dialect::Postgres {
            // Conflicting rows are locked in this order: by name, byte-wise,
            // as the renew and release lock theirs (see `mine_in_batch`).
            select.order_by_expr(
                Expr::cust(format!("\"{ITEM}\".\"value\" COLLATE \"C\"")),
                sea_query::Order::Asc,
            );
        }
        let query = Query::insert()
            .into_table(self.table_ref())
            .columns([
                Alias::new(NAME),
                Alias::new(HOLDER_COL),
                Alias::new(EPOCH_COL),
                Alias::new(EXPIRES_AT),
            ])
            .select_from(select)
            .expect("four columns, four values")
            .on_conflict(self.take_on_conflict())
            .returning(Query::returning().exprs([
                self.col(NAME),
                self.col(HOLDER_COL),
                self.col(EPOCH_COL),
                self.col(EXPIRES_AT).sub(now()),
            ]))
            .to_owned();
        let statement = self.render(&query);
        match self.dialect {
            Dialect::Postgres => self.pg_skip_held(statement),
            Dialect::Sqlite | Dialect::Mysql => statement,
        }
    }

    /// PostgreSQL: the batch acquire without touching the rows another
    /// holder visibly holds. `INSERT … ON CONFLICT DO UPDATE` locks every
    /// conflicting row until its commit, even one it leaves as it is, so a
    /// node reaching for many held leases would queue the holders' renews
    /// behind it. Rows held by another holder, sound and unexpired in the
    /// statement's snapshot, are read instead (the same `name, holder,
    /// epoch, expires_in` the upsert returns for them, unchanged) and left
    /// out of the upsert; every other name goes through the upsert as
    /// before. A row reserved for this node (a planned handover) is not
    /// "another holder's": it goes through the upsert, which takes it. A
    /// row freed after the snapshot is merely reported held, and tried
    /// again later; nothing is ever taken that the upsert would not take.
    fn pg_skip_held(&self, upsert: Statement) -> Statement {
        let now = db_now_millis(Dialect::Postgres);
        let held = format!(
            "SELECT \"h\".\"{NAME}\", \"h\".\"{HOLDER_COL}\", \"h\".\"{EPOCH_COL}\", \
             \"h\".\"{EXPIRES_AT}\" - ({now}) FROM {table} AS \"h\" \
             JOIN json_array_elements_text(CAST(CAST($3 AS text) AS json)) AS \"b\" \
             ON \"h\".\"{NAME}\" = \"b\".\"value\" \
             WHERE \"h\".\"{HOLDER_COL}\" IS NOT NULL AND \"h\".\"{HOLDER_COL}\" <> $1 \
             AND \"h\".\"{HOLDER_COL}\" <> ({reservation}) \
             AND \"h\".\"{EPOCH_COL}\" >= 0 AND \"h\".\"{EXPIRES_AT}\" > ({now})",
            table = self.qualified_table(),
            reservation = Self::reservation_of("CAST($1 AS text)"),
        );
        let insert = upsert.sql.replacen(
            "WHERE true",
            &format!("WHERE \"{ITEM}\".\"value\" NOT IN (SELECT \"{NAME}\" FROM \"held\")"),
            1,
        );
        debug_assert_ne!(
            insert, upsert.sql,
            "the upsert's WHERE is the one to extend"
        );
        debug_assert_eq!(
            upsert.params,
            [Param::Holder, Param::TtlMillis, Param::Batch],
            "$1 is the holder and $3 the batch"
        );
        Statement {
            sql: format!(
                "WITH \"held\" AS ({held}), \"taken\" AS ({insert}) \
                 SELECT * FROM \"taken\" UNION ALL SELECT * FROM \"held\""
            ),
            params: upsert.params,
            read_back: None,
        }
    }

    /// The multi-row renew: extends every row of the batch held by us at
    /// its epoch (the single renew's condition, per pair), returning
    /// `name, epoch` and, as the single renew's second column, the node an
    /// operator asked that term to be handed over to (DESIGN §3 "Planned
    /// handover"; NULL almost always: one primary-key probe per row).
    pub(super) fn renew_batch(&self) -> Statement {
        if self.dialect == Dialect::Mysql {
            return self.mysql_renew_batch();
        }
        if self.dialect == Dialect::Postgres {
            let now = db_now_millis(Dialect::Postgres);
            let asked = self.asked_hand_over_sql();
            return Statement {
                sql: self.pg_update_locked(
                    &format!("\"{EXPIRES_AT}\" = ({now}) + $1"),
                    2,
                    3,
                    &format!(", {asked}"),
                ),
                params: vec![Param::TtlMillis, Param::Holder, Param::Batch],
                read_back: None,
            };
        }
        let query = Query::update()
            .table(self.table_ref())
            .value(
                Alias::new(EXPIRES_AT),
                db_now(self.dialect).add(Expr::val(TTL)),
            )
            .and_where(self.mine_in_batch())
            .returning(Query::returning().exprs([
                self.col(NAME),
                self.col(EPOCH_COL),
                self.asked_hand_over(),
            ]))
            .to_owned();
        self.render(&query)
    }

    /// The multi-row release: frees every row of the batch held by us at
    /// its epoch, keeping the epoch; on PostgreSQL it notifies the release
    /// channel with each freed name in the same statement.
    pub(super) fn release_batch(&self) -> Statement {
        if self.dialect == Dialect::Mysql {
            return self.mysql_release_batch();
        }
        if self.dialect == Dialect::Postgres {
            let now = db_now_millis(Dialect::Postgres);
            let update = self.pg_update_locked(
                &format!("\"{HOLDER_COL}\" = NULL, \"{EXPIRES_AT}\" = {now}"),
                1,
                2,
                "",
            );
            return Statement {
                // The channel is derived from a validated identifier: it
                // holds only letters, digits, underscores and a dot.
                sql: format!(
                    "WITH released AS ({update}) SELECT released.name, released.epoch FROM released \
                     CROSS JOIN LATERAL pg_notify('{}', released.name) AS notified",
                    self.table.release_channel()
                ),
                params: vec![Param::Holder, Param::Batch],
                read_back: None,
            };
        }
        let update = Query::update()
            .table(self.table_ref())
            .value(Alias::new(HOLDER_COL), Expr::cust("NULL"))
            .value(Alias::new(EXPIRES_AT), db_now(self.dialect))
            .and_where(self.mine_in_batch())
            .returning(Query::returning().exprs([self.col(NAME), self.col(EPOCH_COL)]))
            .to_owned();
        // SQLite only: PostgreSQL and MySQL returned above.
        self.render(&update)
    }

    /// `name` is a membership row's: in `[MEMBER_PREFIX, MEMBER_PREFIX_END)`
    /// byte-wise (on PostgreSQL under the `C` collation, whatever the
    /// database's default).
    fn is_member(&self) -> String {
        let collate = match self.dialect {
            // SQLite's BINARY and MySQL's VARBINARY compare bytes already.
            Dialect::Sqlite | Dialect::Mysql => "",
            Dialect::Postgres => " COLLATE \"C\"",
        };
        let name = self.quoted(NAME);
        format!(
            "({name}{collate} >= '{MEMBER_PREFIX}' AND {name}{collate} < '{MEMBER_PREFIX_END}')"
        )
    }

    /// Live members, and the leases that are free, expire within
    /// [`Param::StaleMillis`](super::Param::StaleMillis) (lapsed ones
    /// included) or are reserved for a successor, by name.
    pub(super) fn survey(&self) -> Statement {
        let now = || db_now(self.dialect);
        let live_member = Expr::cust(self.is_member())
            .and(self.col(HOLDER_COL).is_not_null())
            .and(self.col(EXPIRES_AT).gt(now()));
        // Reservations (DESIGN §3 "Planned handover") too, whatever their
        // time left: the node a lease is handed to learns it here. The
        // survey reads every row anyway, so the test costs nothing.
        let takeable_soon = Expr::cust(format!("NOT {}", self.is_member())).and(
            self.col(HOLDER_COL)
                .is_null()
                .or(self.col(EXPIRES_AT).sub(now()).lt(Expr::val(STALE)))
                .or(Expr::cust(format!("{} LIKE '%#'", self.quoted(HOLDER_COL)))),
        );
        let query = self
            .rows()
            .and_where(live_member.or(takeable_soon))
            .order_by(
                (Alias::new(self.table.table()), Alias::new(NAME)),
                sea_query::Order::Asc,
            )
            .to_owned();
        self.render(&query)
    }
}

/// The rows of [`super::Statements::acquire_batch`]: `name` then the
/// single acquire's `holder, epoch, expires_in_ms`, decoded as it does.
pub(super) fn acquire_batch(
    dialect: Dialect,
    me: &HolderId,
    rows: &[Vec<Cell>],
) -> Result<Vec<(String, Reply)>, RowError> {
    rows.iter()
        .map(|row| {
            decode::expect_columns("acquire batch", row, 4)?;
            let name = decode::name(&row[0])?;
            let reply =
                decode::acquire_row(dialect, me, &row[1..]).map_err(|e| e.for_lease(&name))?;
            Ok((name, reply))
        })
        .collect()
}

/// The rows of [`super::Statements::renew_batch`] and
/// [`super::Statements::release_batch`]: `name, epoch`.
pub(super) fn names_and_epochs(rows: &[Vec<Cell>]) -> Result<Vec<(String, Epoch)>, RowError> {
    rows.iter()
        .map(|row| {
            decode::expect_columns("renew or release batch", row, 2)?;
            let name = decode::name(&row[0])?;
            let epoch = decode::epoch(&name, &row[1])?;
            Ok((name, epoch))
        })
        .collect()
}

/// The rows of [`super::Statements::renew_batch`]: `name, epoch, asked`.
/// The names renewed, and those an operator asked to hand over, with the
/// node asked for (`None`: anyone).
#[allow(clippy::type_complexity)]
pub(super) fn renewed(
    rows: &[Vec<Cell>],
) -> Result<(Vec<String>, Vec<(String, Option<HolderId>)>), RowError> {
    let mut renewed = Vec::with_capacity(rows.len());
    let mut asked = Vec::new();
    for row in rows {
        decode::expect_columns("renew batch", row, 3)?;
        let name = decode::name(&row[0])?;
        decode::epoch(&name, &row[1])?;
        if let Some(to) = decode::hand_over_request(&name, &row[2])? {
            asked.push((name.clone(), to));
        }
        renewed.push(name);
    }
    Ok((renewed, asked))
}

/// The rows of [`super::Statements::survey`]: the status's shape.
pub(super) fn survey(rows: &[Vec<Cell>]) -> Result<Vec<LeaseRow>, RowError> {
    rows.iter().map(|row| decode::status_row(row)).collect()
}

#[cfg(test)]
mod tests {
    use super::super::Param;
    use super::*;

    #[test]
    fn the_member_range_ends_right_after_the_prefix() {
        let (last, head) = MEMBER_PREFIX.as_bytes().split_last().unwrap();
        let (end_last, end_head) = MEMBER_PREFIX_END.as_bytes().split_last().unwrap();
        assert_eq!(head, end_head);
        assert_eq!(*end_last, last + 1);
    }

    #[test]
    fn params_are_what_the_batch_statements_bind() {
        for dialect in [Dialect::Sqlite, Dialect::Postgres, Dialect::Mysql] {
            let s = super::super::Statements::new(dialect, &Default::default());
            assert_eq!(
                s.acquire_batch().params(),
                &[Param::Holder, Param::TtlMillis, Param::Batch]
            );
            assert_eq!(
                s.acquire().params(),
                &[Param::Lease, Param::Holder, Param::TtlMillis]
            );
        }
    }
}
