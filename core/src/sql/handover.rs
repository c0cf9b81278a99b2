//! The statements of a planned handover (DESIGN §3 "Planned handover"):
//! the holder's hand-over, the operator's request, and the renewal's
//! reading of that request.
//!
//! A handover needs no new column and no new parameter of the acquire.
//! The holder writes a reservation into its own row (`holder =
//! '<node>#'`, [`HolderId::reserved_for`]), which the acquire's
//! "takeable" treats as another holder's row until it expires, except for
//! the node it names (the acquire computes its holder's reservation
//! itself, `Builder::reservation_of_excluded`). An operator's request is a row of its own,
//! [`HANDOVER_PREFIX`] and the lease name, whose `epoch` says which term
//! it asks to end: a request outlives nothing, since the next term has
//! another epoch.
//!
//! [`HolderId::reserved_for`]: crate::HolderId::reserved_for

use sea_query::{Alias, Expr, ExprTrait, OnConflict, Query};

use super::build::{
    db_now, Builder, EPOCH, EPOCH_COL, EXPIRES_AT, HOLDER_COL, LEASE, NAME, RESERVATION, SUCCESSOR,
};
use super::{Dialect, ReadOrder, Statement};

/// The reserved name prefix of handover requests: an operator's request to
/// hand lease `L` over is the row named `picolease.handover:L`, its holder
/// the node asked for (empty: whoever comes next), its epoch the term it
/// asks to end.
pub const HANDOVER_PREFIX: &str = "picolease.handover:";

/// The name of the request row that asks for `lease` to be handed over.
pub fn hand_over_request_name(lease: &str) -> String {
    format!("{HANDOVER_PREFIX}{lease}")
}

/// The term an operator's handover request would end, read from the
/// lease's row: its epoch while a holder (not a reservation) has time
/// left; `None` when the lease is free, lapsed, in a grace period after a
/// failover or already reserved for a successor: nothing to hand over.
pub fn term_to_hand_over(row: &super::LeaseRow) -> Option<crate::Epoch> {
    row.holder.as_ref()?;
    let live = row.expires_in_ms.is_some_and(|left| left > 0);
    (live && row.reserved_for().is_none()).then_some(row.epoch)
}

impl Builder<'_> {
    /// The reservation of the holder the acquire would write (DESIGN §3
    /// "Planned handover"): its text up to and including its last `#`,
    /// or, without one, the whole id and `#`; `HolderId::reservation` in
    /// SQL, so that no statement needs a parameter more. SQLite and
    /// PostgreSQL: `rtrim(h, replace(h, '#', ''))` trims from the right
    /// every character of `h` but `#`, so it stops at the last `#` (and
    /// leaves `''` when there is none). MySQL: `SUBSTRING_INDEX(h, '#',
    /// -1)` is the part after the last `#` (all of `h` without one).
    pub(super) fn reservation_of_excluded(&self) -> Expr {
        match self.dialect {
            Dialect::Mysql => Expr::cust(Self::mysql_reservation_of("VALUES(`holder`)")),
            Dialect::Sqlite | Dialect::Postgres => {
                Expr::cust(Self::reservation_of("\"excluded\".\"holder\""))
            }
        }
    }

    /// MySQL: the reservation of the holder id `h` (an SQL expression), as
    /// [`Builder::reservation_of_excluded`] computes it.
    pub(super) fn mysql_reservation_of(h: &str) -> String {
        format!(
            "CONCAT(LEFT({h}, CHAR_LENGTH({h}) - CHAR_LENGTH(SUBSTRING_INDEX({h}, '#', -1))), \
             IF(LOCATE('#', {h}) = 0, CONCAT({h}, '#'), ''))"
        )
    }

    /// SQLite and PostgreSQL: the reservation of the holder id `h` (an SQL
    /// expression), as [`Builder::reservation_of_excluded`] computes it.
    pub(super) fn reservation_of(h: &str) -> String {
        format!(
            "CASE WHEN rtrim({h}, replace({h}, '#', '')) = '' THEN {h} || '#' \
             ELSE rtrim({h}, replace({h}, '#', '')) END"
        )
    }

    /// The table as SQL in this dialect, schema-qualified when it has a
    /// schema. Identifiers are validated (letters, digits, underscores).
    pub(super) fn table_sql(&self) -> String {
        let q = |ident: &str| match self.dialect {
            Dialect::Mysql => format!("`{ident}`"),
            Dialect::Sqlite | Dialect::Postgres => format!("\"{ident}\""),
        };
        match self.table.schema() {
            Some(schema) => format!("{}.{}", q(schema), q(self.table.table())),
            None => q(self.table.table()),
        }
    }

    /// The renewal's second column: the node an operator asked this term
    /// to be handed over to (`''`: to whoever comes next), or NULL. A
    /// primary-key lookup of the request row, matched on the row's name
    /// and epoch.
    pub(super) fn asked_hand_over(&self) -> Expr {
        Expr::cust(self.asked_hand_over_sql())
    }

    /// [`Builder::asked_hand_over`] as SQL text, for the statements
    /// written by hand (PostgreSQL's and MySQL's batches).
    pub(super) fn asked_hand_over_sql(&self) -> String {
        let request_name = self.prefixed(HANDOVER_PREFIX, &self.quoted(NAME));
        let (open, close) = match self.dialect {
            Dialect::Mysql => ("`", "`"),
            Dialect::Sqlite | Dialect::Postgres => ("\"", "\""),
        };
        let r = |column: &str| format!("{open}picolease_request{close}.{open}{column}{close}");
        format!(
            "(SELECT COALESCE({holder}, '') FROM {table} AS {open}picolease_request{close} \
             WHERE {name} = {request_name} AND {epoch} = {row_epoch})",
            holder = r(HOLDER_COL),
            table = self.table_sql(),
            name = r(NAME),
            epoch = r(EPOCH_COL),
            row_epoch = self.quoted(EPOCH_COL),
        )
    }

    /// Hand over: `UPDATE … SET holder = <reservation>, expires_at = now +
    /// reservation WHERE` the row is ours at our epoch (and, on
    /// PostgreSQL, of this server incarnation), notifying the release
    /// channel as a release does. The epoch stays: the successor's acquire
    /// bumps it.
    pub(super) fn hand_over(&self) -> Statement {
        let update = Query::update()
            .table(self.table_ref())
            .value(Alias::new(HOLDER_COL), Expr::val(SUCCESSOR))
            .value(
                Alias::new(EXPIRES_AT),
                db_now(self.dialect).add(Expr::val(RESERVATION)),
            )
            .and_where(self.mine())
            .returning(Query::returning().exprs([self.col(NAME), self.col(EPOCH_COL)]))
            .to_owned();
        // Once handed over the row no longer names us: MySQL reads (and
        // locks) it before the write.
        self.with_read_back(
            self.with_notify(&update),
            self.mine_row(),
            ReadOrder::BeforeWrite,
        )
    }

    /// An operator's request (`picolease handover`): upsert the row named
    /// by [`Param::Lease`](super::Param::Lease) (the caller binds
    /// [`HANDOVER_PREFIX`] and the lease) with holder = the node asked for
    /// ([`Param::Successor`](super::Param::Successor), `''` for anyone),
    /// epoch = the term to end, expires_at = now.
    pub(super) fn request_hand_over(&self) -> Statement {
        let query = Query::insert()
            .into_table(self.table_ref())
            .columns([
                Alias::new(NAME),
                Alias::new(HOLDER_COL),
                Alias::new(EPOCH_COL),
                Alias::new(EXPIRES_AT),
            ])
            .values_panic([
                Expr::val(LEASE),
                Expr::val(SUCCESSOR),
                Expr::val(EPOCH),
                db_now(self.dialect),
            ])
            .on_conflict(
                OnConflict::column(Alias::new(NAME))
                    .update_columns([
                        Alias::new(HOLDER_COL),
                        Alias::new(EPOCH_COL),
                        Alias::new(EXPIRES_AT),
                    ])
                    .to_owned(),
            )
            .to_owned();
        self.render(&query)
    }

    /// An operator withdraws a request: `DELETE` the request row bound as
    /// [`Param::Lease`](super::Param::Lease) if it still names the term
    /// bound as [`Param::Epoch`](super::Param::Epoch) (a newer request,
    /// for a later term, stays).
    pub(super) fn withdraw_hand_over(&self) -> Statement {
        let query = Query::delete()
            .from_table(self.table_ref())
            .and_where(self.col(NAME).eq(LEASE))
            .and_where(self.col(EPOCH_COL).eq(EPOCH))
            .to_owned();
        self.render(&query)
    }
}
