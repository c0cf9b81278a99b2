//! Building the statements with sea-query.
//!
//! Each statement is built once per table and dialect. sea-query renders
//! bound values as placeholders in order of appearance; to learn which
//! placeholder stands for what, the statements are built with *sentinel*
//! values (one per [`Param`]) and the rendered value list is mapped back to
//! parameters. Drivers then prepare the text once and bind real values on
//! every call.

use sea_query::{
    Alias, CaseStatement, ColumnDef, Expr, ExprTrait, Func, Index, LockType, MysqlQueryBuilder,
    OnConflict, PostgresQueryBuilder, Query, QueryStatementWriter, SqliteQueryBuilder, Table,
    TableRef,
};

use super::{Dialect, Param, ReadBack, ReadOrder, Statement, Statements};
use crate::names::TableName;

pub(super) const LEASE: &str = "\u{1}picolease:lease";
pub(super) const HOLDER: &str = "\u{1}picolease:holder";
pub(super) const EPOCH: i64 = i64::MIN + 17;
pub(super) const TTL: i64 = i64::MIN + 29;
/// The JSON array of a batch statement ([`Param::Batch`]).
pub(super) const BATCH: &str = "\u{1}picolease:batch";
/// The staleness threshold of the survey ([`Param::StaleMillis`]).
pub(super) const STALE: i64 = i64::MIN + 41;
/// The reservation a handover writes ([`Param::Successor`]).
pub(super) const SUCCESSOR: &str = "\u{1}picolease:successor";
/// How long a handover's reservation lasts ([`Param::ReservationMillis`]).
pub(super) const RESERVATION: i64 = i64::MIN + 53;

pub(super) const NAME: &str = "name";
pub(super) const HOLDER_COL: &str = "holder";
pub(super) const EPOCH_COL: &str = "epoch";
pub(super) const EXPIRES_AT: &str = "expires_at";
/// PostgreSQL and MySQL: the incarnation of the server that last wrote the
/// row (DESIGN §3 "Failover").
pub(super) const INCARNATION: &str = "incarnation";

/// PostgreSQL: the incarnation of the server running the statement, the
/// start of its postmaster in microseconds. It changes with every start
/// of the server process (a restart, a crash and its recovery, the
/// promotion of a standby, which has a postmaster of its own), stays the
/// same while it runs, and every role can read it (DESIGN §3 "Failover"
/// says why not the system identifier or the timeline).
pub(super) const PG_INCARNATION: &str =
    "CAST(FLOOR(EXTRACT(EPOCH FROM pg_postmaster_start_time()) * 1000000) AS BIGINT)";

/// MySQL and MariaDB: the incarnation of the server running the statement,
/// its `@@server_id`. Replication needs every server of a topology to
/// have its own, so a promoted replica is a new incarnation; every role
/// can read it, and it means the same on both servers (the start time
/// does not: MariaDB reads it from `information_schema.GLOBAL_STATUS`,
/// MySQL 8 from `performance_schema.global_status`). A crash that lost
/// commits and restarts the same server keeps it (DESIGN §3 "Failover":
/// the runbook covers that).
pub(super) const MYSQL_INCARNATION: &str = "@@server_id";

/// What the fence index's name adds to the table's: at most 54 + 6 = 60
/// bytes, within PostgreSQL's 63-byte and MySQL's 64-byte identifier limits.
pub(super) const FENCE_INDEX_SUFFIX: &str = "_fence";

/// The database clock; documented on [`super::db_now_millis`].
pub(super) fn db_now_millis(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)",
        Dialect::Postgres => {
            "CAST(FLOOR(EXTRACT(EPOCH FROM statement_timestamp()) * 1000) AS BIGINT)"
        }
        // Session-time-zone independent (see `super::db_now_millis`); the
        // difference is a non-negative BIGINT, so DIV floors it.
        Dialect::Mysql => {
            "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000"
        }
    }
}

pub(super) fn db_now(dialect: Dialect) -> Expr {
    Expr::cust(db_now_millis(dialect))
}

pub(super) struct Builder<'a> {
    pub(super) dialect: Dialect,
    pub(super) table: &'a TableName,
}

impl Builder<'_> {
    pub(super) fn table_ref(&self) -> TableRef {
        match self.table.schema() {
            Some(schema) => (Alias::new(schema), Alias::new(self.table.table())).into(),
            None => Alias::new(self.table.table()).into(),
        }
    }

    /// A column qualified by the table's name: inside `ON CONFLICT DO UPDATE`
    /// PostgreSQL needs the qualification to tell the existing row from
    /// `excluded`.
    pub(super) fn col(&self, column: &'static str) -> Expr {
        Expr::col((Alias::new(self.table.table()), Alias::new(column)))
    }

    pub(super) fn quoted(&self, column: &'static str) -> String {
        match self.dialect {
            // Identifiers are validated (letters, digits, underscores).
            Dialect::Mysql => format!("`{}`.`{column}`", self.table.table()),
            Dialect::Sqlite | Dialect::Postgres => {
                format!("\"{}\".\"{column}\"", self.table.table())
            }
        }
    }

    /// The value the upsert would have inserted: `excluded.<column>`, on
    /// MySQL `VALUES(<column>)` (the row alias of MySQL 8.0.19+ is not in
    /// MariaDB; `VALUES()` is in both, deprecated but kept in MySQL 8).
    fn excluded(&self, column: &'static str) -> Expr {
        match self.dialect {
            Dialect::Mysql => Expr::cust(format!("VALUES(`{column}`)")),
            Dialect::Sqlite | Dialect::Postgres => {
                Expr::col((Alias::new("excluded"), Alias::new(column)))
            }
        }
    }

    /// The existing row has the shape the protocol writes. A row that fails
    /// this (NULL or negative epoch, on SQLite a value of another type) is
    /// never taken over, so decoding can report it without anything having
    /// been written.
    pub(super) fn row_is_sound(&self) -> Expr {
        let epoch = self.col(EPOCH_COL);
        let expires = self.col(EXPIRES_AT);
        match self.dialect {
            // Identifiers are validated, so quoting them by hand is safe.
            Dialect::Sqlite => Expr::cust(format!(
                "typeof({e}) = 'integer' AND {e} >= 0 AND typeof({x}) = 'integer' \
                 AND ({h} IS NULL OR typeof({h}) = 'text')",
                e = self.quoted(EPOCH_COL),
                x = self.quoted(EXPIRES_AT),
                h = self.quoted(HOLDER_COL)
            )),
            Dialect::Postgres | Dialect::Mysql => epoch
                .clone()
                .is_not_null()
                .and(epoch.gte(0))
                .and(expires.is_not_null()),
        }
    }

    pub(super) fn mine(&self) -> Expr {
        let mine = self
            .col(NAME)
            .eq(LEASE)
            .and(self.col(HOLDER_COL).eq(HOLDER))
            .and(self.col(EPOCH_COL).eq(EPOCH));
        match self.current_incarnation() {
            Some(current) => mine.and(current),
            None => mine,
        }
    }

    /// `incarnation = <this server's>`: the row was last written by the
    /// server now answering. A renew, a release and a fence on a row from
    /// another incarnation match nothing (DESIGN §3 "Failover"); SQLite
    /// has no incarnation.
    pub(super) fn current_incarnation(&self) -> Option<Expr> {
        let now = self.incarnation_now()?;
        Some(Expr::cust(format!("{} = {now}", self.quoted(INCARNATION))))
    }

    /// The incarnation of the server running the statement: PostgreSQL's
    /// postmaster start, MySQL's `@@server_id`; SQLite has none.
    pub(super) fn incarnation_now(&self) -> Option<&'static str> {
        match self.dialect {
            Dialect::Postgres => Some(PG_INCARNATION),
            Dialect::Mysql => Some(MYSQL_INCARNATION),
            Dialect::Sqlite => None,
        }
    }

    /// PostgreSQL: the row is sound and was written by another server
    /// incarnation (or before the column existed): the acquire adopts it
    /// (holder cleared, epoch jumped, expiry at least a ttl away) instead
    /// of taking it.
    pub(super) fn foreign(&self) -> Option<Expr> {
        let now = self.incarnation_now()?;
        let column = self.quoted(INCARNATION);
        let distinct = match self.dialect {
            Dialect::Mysql => format!("NOT ({column} <=> {now})"),
            Dialect::Postgres | Dialect::Sqlite => format!("{column} IS DISTINCT FROM {now}"),
        };
        Some(self.row_is_sound().and(Expr::cust(distinct)))
    }

    fn create_table(&self) -> String {
        if self.dialect == Dialect::Mysql {
            return self.mysql_create_table();
        }
        let table = Table::create()
            .table(self.table_ref())
            .if_not_exists()
            .col(
                ColumnDef::new(Alias::new(NAME))
                    .text()
                    .not_null()
                    .primary_key(),
            )
            .col(ColumnDef::new(Alias::new(HOLDER_COL)).text().null())
            .col(
                ColumnDef::new(Alias::new(EPOCH_COL))
                    .big_integer()
                    .not_null(),
            )
            .col(
                ColumnDef::new(Alias::new(EXPIRES_AT))
                    .big_integer()
                    .not_null(),
            )
            .to_owned();
        let mut table = table;
        if self.dialect == Dialect::Postgres {
            table.col(
                ColumnDef::new(Alias::new(INCARNATION))
                    .big_integer()
                    .null()
                    .default(Expr::cust(PG_INCARNATION)),
            );
        }
        // The marker row with the table, in one batch (`first_row`);
        // MySQL writes it after its migration (`create_index`).
        let create = match self.dialect {
            Dialect::Sqlite => table.to_string(SqliteQueryBuilder),
            Dialect::Postgres => table.to_string(PostgresQueryBuilder),
            Dialect::Mysql => unreachable!("rendered by mysql_create_table"),
        };
        format!("{create}; {}", self.create_marker())
    }

    /// The name of the unique index on `(name, epoch)` (PostgreSQL puts an
    /// index in its table's schema, so it is never schema-qualified).
    pub(super) fn fence_index_name(&self) -> String {
        format!("{}{FENCE_INDEX_SUFFIX}", self.table.table())
    }

    /// PostgreSQL: the unique index on `(name, epoch)` that makes every
    /// epoch bump a key update (see [`Statements::create_index`]), created
    /// only when missing. `CREATE INDEX IF NOT EXISTS` alone would take a
    /// SHARE lock on the table even when the index exists, queueing every
    /// contender's next statement behind whatever holds the table; the
    /// catalog check takes no lock on it. SQLite needs no index: its writer
    /// lock orders fenced writes and takeovers already.
    fn create_index(&self) -> Option<String> {
        match self.dialect {
            Dialect::Sqlite => None,
            // MySQL declares the index inside its CREATE TABLE; what is
            // left is the incarnation column of an older table.
            Dialect::Mysql => Some(self.mysql_migrate()),
            Dialect::Postgres => {
                let name = self.fence_index_name();
                let create = self.fence_index_create(true);
                let regclass = self.regclass();
                // A table created before the incarnation column existed
                // gains it, each row stamped with the running server's
                // incarnation (a stable default is evaluated once, by
                // the ALTER, and the rows are not rewritten). The default
                // stays: a row inserted by an older picolease, which
                // does not name the column, records the server too.
                Some(format!(
                    "DO $picolease$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index i \
                     JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid \
                     WHERE i.indrelid = '{regclass}'::regclass AND c.relname = '{name}') \
                     THEN {create}; END IF; \
                     IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute \
                     WHERE attrelid = '{regclass}'::regclass AND attname = '{INCARNATION}' \
                     AND NOT attisdropped) \
                     THEN ALTER TABLE {regclass} ADD COLUMN \"{INCARNATION}\" BIGINT \
                     DEFAULT {PG_INCARNATION}; END IF; END $picolease$"
                ))
            }
        }
    }

    /// PostgreSQL: `CREATE UNIQUE INDEX [IF NOT EXISTS] <table>_fence ON
    /// <table> (name, epoch)`.
    fn fence_index_create(&self, if_not_exists: bool) -> String {
        let mut create = Index::create();
        if if_not_exists {
            create.if_not_exists();
        }
        create
            .unique()
            .name(self.fence_index_name())
            .table(self.table_ref())
            .col(Alias::new(NAME))
            .col(Alias::new(EPOCH_COL))
            .to_string(PostgresQueryBuilder)
    }

    /// PostgreSQL: the table as a quoted name for a `regclass` literal.
    /// Identifiers are validated (letters, digits, underscores), so
    /// quoting them by hand inside the literal is safe.
    fn regclass(&self) -> String {
        match self.table.schema() {
            Some(schema) => format!("\"{schema}\".\"{}\"", self.table.table()),
            None => format!("\"{}\"", self.table.table()),
        }
    }

    /// PostgreSQL: the fence's unique index alone, as a user would add
    /// it to a table made without it (`CREATE UNIQUE INDEX … (name,
    /// epoch)`), and a parameterless query that says whether the table
    /// has such an index: NULL when the table is missing (its statements
    /// report that), else true or false. Any unique index on exactly
    /// `(name, epoch)` or `(epoch, name)`, without a predicate, will do:
    /// each makes an epoch bump a key update.
    pub(super) fn fence_index_check(&self) -> Option<(String, String)> {
        if self.dialect != Dialect::Postgres {
            return None;
        }
        let create = self.fence_index_create(false);
        let regclass = self.regclass();
        let attnum = |column: &str| {
            format!(
                "(SELECT a.attnum FROM pg_catalog.pg_attribute a \
                 WHERE a.attrelid = i.indrelid AND a.attname = '{column}' AND NOT a.attisdropped)"
            )
        };
        let (name, epoch) = (attnum(NAME), attnum(EPOCH_COL));
        let check = format!(
            "SELECT CASE WHEN to_regclass('{regclass}') IS NULL THEN NULL ELSE EXISTS (\
             SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = to_regclass('{regclass}') \
             AND i.indisunique AND i.indpred IS NULL AND i.indnkeyatts = 2 \
             AND ((i.indkey[0] = {name} AND i.indkey[1] = {epoch}) \
             OR (i.indkey[0] = {epoch} AND i.indkey[1] = {name}))) END"
        );
        Some((check, create))
    }

    pub(super) fn acquire(&self) -> Statement {
        let now = || db_now(self.dialect);
        let mut columns = vec![
            Alias::new(NAME),
            Alias::new(HOLDER_COL),
            Alias::new(EPOCH_COL),
            Alias::new(EXPIRES_AT),
        ];
        // MySQL's statement is written by hand around this one's conflict
        // clause (`mysql_acquire`); the values here only render it.
        let mut values = vec![
            Expr::val(LEASE),
            Expr::val(HOLDER),
            Expr::val(1i64),
            now().add(Expr::val(TTL)),
        ];
        // A fresh row records the server too. PostgreSQL's column default
        // does it (and for an older picolease's inserts); MySQL's column
        // cannot default to a system variable, so the insert names it.
        if self.dialect == Dialect::Mysql {
            columns.push(Alias::new(INCARNATION));
            values.push(Expr::cust(MYSQL_INCARNATION));
        }
        let mut query = Query::insert()
            .into_table(self.table_ref())
            .columns(columns)
            .to_owned();
        match self.dialect {
            Dialect::Mysql => query.values_panic(values),
            // A fresh row starts as a grace row after a server change,
            // above the marker's epoch (`first_row`); the caller comes in
            // a one-row derived table, so that the lease is bound once.
            Dialect::Sqlite | Dialect::Postgres => query
                .select_from(self.caller_select())
                .expect("four columns, four values"),
        };
        let query = query
            .on_conflict(self.take_on_conflict())
            .returning(Query::returning().exprs([
                self.col(HOLDER_COL),
                self.col(EPOCH_COL),
                self.col(EXPIRES_AT).sub(now()),
            ]))
            .to_owned();
        // MySQL renders no RETURNING: the row is read back, locked.
        let read = Query::select()
            .exprs([
                self.col(HOLDER_COL),
                self.col(EPOCH_COL),
                self.col(EXPIRES_AT).sub(now()),
            ])
            .from(self.table_ref())
            .and_where(self.col(NAME).eq(LEASE))
            .to_owned();
        let write = match self.dialect {
            Dialect::Mysql => self.mysql_acquire(&self.render(&query)),
            Dialect::Sqlite | Dialect::Postgres => self.render(&query),
        };
        self.with_read_back(write, read, ReadOrder::AfterWrite)
    }

    /// On MySQL, attaches `read` (locked `FOR UPDATE`) as the statement's
    /// [`ReadBack`]; elsewhere the statement returns its rows itself.
    pub(super) fn with_read_back(
        &self,
        write: Statement,
        mut read: sea_query::SelectStatement,
        order: ReadOrder,
    ) -> Statement {
        if self.dialect != Dialect::Mysql {
            return write;
        }
        read.lock(LockType::Update);
        self.attach(write, self.render(&read), order)
    }

    /// `write` with `read` as its [`ReadBack`].
    pub(super) fn attach(&self, write: Statement, read: Statement, order: ReadOrder) -> Statement {
        Statement {
            read_back: Some(Box::new(ReadBack {
                statement: read,
                order,
            })),
            ..write
        }
    }

    /// The acquire's `ON CONFLICT (name) DO UPDATE`: take the existing row
    /// (the `excluded` holder and expiry, the epoch bumped) when it is sound
    /// and free, lapsed or already the `excluded` holder's; else keep it.
    /// The batch acquire uses the very same clause.
    pub(super) fn take_on_conflict(&self) -> OnConflict {
        let now = || db_now(self.dialect);
        // Lapsed (a released row's expiry is its release), or ours (a
        // lost acquire reply), and sound. A row without a holder whose
        // expiry is still ahead is in its grace period after a server
        // change: nobody's, and not takeable until it ends.
        // Reserved for our node by a planned handover counts as ours.
        let takeable = || {
            self.row_is_sound().and(
                self.col(EXPIRES_AT)
                    .lte(now())
                    .or(self.col(HOLDER_COL).eq(self.excluded(HOLDER_COL)))
                    .or(self.col(HOLDER_COL).eq(self.reservation_of_excluded())),
            )
        };
        // PostgreSQL: a row from another server incarnation is adopted
        // first (DESIGN §3 "Failover"): `adopted` wins over take or keep.
        let foreign = self.foreign();
        let pick3 = |adopted: Expr, taken: Expr, kept: Expr| -> Expr {
            let mut case = CaseStatement::new();
            if let Some(foreign) = &foreign {
                case = case.case(foreign.clone(), adopted);
            }
            case.case(takeable(), taken).finally(kept).into()
        };
        let pick = |taken: Expr, kept: Expr| -> Expr { pick3(Expr::cust("NULL"), taken, kept) };
        // On SQLite and PostgreSQL every SET expression reads the row as it
        // was before the statement, so the three CASEs decide on the same
        // state. MySQL's ON DUPLICATE KEY UPDATE assigns left to right, each
        // expression seeing the columns set before it; the CASEs still
        // agree, because taking keeps the row takeable (the holder becomes
        // `VALUES(holder)`, the epoch stays >= 0) and keeping changes
        // nothing, so every later CASE answers as the first did.
        let mut on_conflict = OnConflict::column(Alias::new(NAME))
            .value(
                Alias::new(HOLDER_COL),
                pick(self.excluded(HOLDER_COL), self.col(HOLDER_COL)),
            )
            .value(
                Alias::new(EPOCH_COL),
                pick3(
                    self.adopted_epoch(),
                    self.col(EPOCH_COL).add(1i64),
                    self.col(EPOCH_COL),
                ),
            )
            .value(
                Alias::new(EXPIRES_AT),
                pick3(
                    // A full ttl from now at least: whatever term the
                    // lost history granted ends before that.
                    Func::greatest([self.current_expiry(), self.excluded(EXPIRES_AT)]).into(),
                    self.excluded(EXPIRES_AT),
                    self.col(EXPIRES_AT),
                ),
            )
            .to_owned();
        if let Some(now) = self.incarnation_now() {
            // Every sound row the acquire meets records this server; an
            // unsound one is left exactly as it is, for decoding to report.
            // Last: MySQL assigns left to right, and the CASEs above must
            // see the incarnation the row had.
            let incarnation: Expr = CaseStatement::new()
                .case(self.row_is_sound(), Expr::cust(now))
                .finally(self.col(INCARNATION))
                .into();
            on_conflict = on_conflict
                .value(Alias::new(INCARNATION), incarnation)
                .to_owned();
        }
        on_conflict
    }

    /// Renders `query` and maps its values back to parameters. The one
    /// values that are not sentinels, small integer literals (the epoch `1`
    /// of a fresh row, `epoch + 1`, `SELECT 1`), are written inline.
    pub(super) fn render(&self, query: &impl QueryStatementWriter) -> Statement {
        let (sql, values) = match self.dialect {
            Dialect::Sqlite => query.build(SqliteQueryBuilder),
            Dialect::Postgres => query.build(PostgresQueryBuilder),
            Dialect::Mysql => query.build(MysqlQueryBuilder),
        };
        let mut params = Vec::new();
        let mut out = String::with_capacity(sql.len());
        let mut placeholders = split_placeholders(&sql, self.dialect);
        let mut next = 1;
        let mut values = values.into_iter();
        out.push_str(placeholders.remove(0));
        for piece in placeholders {
            let value = values.next().expect("one value per placeholder");
            match value {
                sea_query::Value::BigInt(Some(n))
                    if n != EPOCH && n != TTL && n != STALE && n != RESERVATION =>
                {
                    out.push_str(&n.to_string())
                }
                sea_query::Value::Int(Some(n)) => out.push_str(&n.to_string()),
                sea_query::Value::String(Some(ref s)) if s == LEASE => {
                    params.push(Param::Lease);
                    push_placeholder(&mut out, self.dialect, &mut next);
                }
                sea_query::Value::String(Some(ref s)) if s == HOLDER => {
                    params.push(Param::Holder);
                    push_placeholder(&mut out, self.dialect, &mut next);
                }
                sea_query::Value::BigInt(Some(EPOCH)) => {
                    params.push(Param::Epoch);
                    push_placeholder(&mut out, self.dialect, &mut next);
                }
                sea_query::Value::BigInt(Some(TTL)) => {
                    params.push(Param::TtlMillis);
                    push_placeholder(&mut out, self.dialect, &mut next);
                }
                sea_query::Value::String(Some(ref s)) if s == BATCH => {
                    params.push(Param::Batch);
                    push_placeholder(&mut out, self.dialect, &mut next);
                }
                sea_query::Value::BigInt(Some(STALE)) => {
                    params.push(Param::StaleMillis);
                    push_placeholder(&mut out, self.dialect, &mut next);
                }
                sea_query::Value::BigInt(Some(RESERVATION)) => {
                    params.push(Param::ReservationMillis);
                    push_placeholder(&mut out, self.dialect, &mut next);
                }
                sea_query::Value::String(Some(ref s)) if s == SUCCESSOR => {
                    params.push(Param::Successor);
                    push_placeholder(&mut out, self.dialect, &mut next);
                }
                other => panic!("statement built with a non-sentinel value {other:?}"),
            }
            out.push_str(piece);
        }
        Statement {
            sql: out,
            params,
            read_back: None,
        }
    }

    fn renew(&self) -> Statement {
        let query = Query::update()
            .table(self.table_ref())
            .value(
                Alias::new(EXPIRES_AT),
                db_now(self.dialect).add(Expr::val(TTL)),
            )
            .and_where(self.mine())
            .returning(Query::returning().exprs([
                self.col(EPOCH_COL),
                self.asked_hand_over(),
                self.preferred_candidate(),
            ]))
            .to_owned();
        // MySQL: the row read back after the write, with the request and
        // the preferred candidate.
        let read = Query::select()
            .exprs([
                self.col(EPOCH_COL),
                self.asked_hand_over(),
                self.preferred_candidate(),
            ])
            .from(self.table_ref())
            .and_where(self.mine())
            .to_owned();
        self.with_read_back(self.render(&query), read, ReadOrder::AfterWrite)
    }

    /// `SELECT epoch FROM <table> WHERE` the row is ours at our epoch: the
    /// MySQL read-back of renew and release.
    pub(super) fn mine_row(&self) -> sea_query::SelectStatement {
        Query::select()
            .expr(self.col(EPOCH_COL))
            .from(self.table_ref())
            .and_where(self.mine())
            .to_owned()
    }

    fn release_update(&self) -> sea_query::UpdateStatement {
        Query::update()
            .table(self.table_ref())
            .value(Alias::new(HOLDER_COL), Expr::cust("NULL"))
            .value(Alias::new(EXPIRES_AT), db_now(self.dialect))
            .and_where(self.mine())
            .returning(Query::returning().exprs([self.col(NAME), self.col(EPOCH_COL)]))
            .to_owned()
    }

    fn release(&self) -> Statement {
        let update = self.release_update();
        // Once freed the row no longer names us: MySQL reads (and locks)
        // it before the write.
        self.with_read_back(
            self.with_notify(&update),
            self.mine_row(),
            ReadOrder::BeforeWrite,
        )
    }

    fn force_release(&self) -> Statement {
        // PostgreSQL: a row from another server incarnation is adopted
        // as the acquire adopts it (epoch past whatever the lost history
        // issued, expiry a ttl away: its grace period), for the lost
        // term's holder may still run until its own deadline; it records
        // this server either way. Any other row is freed at once: the
        // operator overrides the term.
        let (epoch, expires_at): (Expr, Expr) = match self.foreign() {
            Some(foreign) => (
                CaseStatement::new()
                    .case(foreign.clone(), self.adopted_epoch())
                    .finally(self.col(EPOCH_COL).add(1i64))
                    .into(),
                CaseStatement::new()
                    .case(foreign, self.grace_expiry())
                    .finally(db_now(self.dialect))
                    .into(),
            ),
            None => (self.col(EPOCH_COL).add(1i64), db_now(self.dialect)),
        };
        let mut update = Query::update()
            .table(self.table_ref())
            .value(Alias::new(HOLDER_COL), Expr::cust("NULL"))
            .value(Alias::new(EPOCH_COL), epoch)
            .value(Alias::new(EXPIRES_AT), expires_at)
            .to_owned();
        if let Some(now) = self.incarnation_now() {
            // Last: MySQL assigns left to right (see `take_on_conflict`).
            update.value(Alias::new(INCARNATION), Expr::cust(now));
        }
        let update = update
            .and_where(self.col(NAME).eq(LEASE))
            // A malformed row is left exactly as it is: the caller reads it
            // (`lease_row`) to report what is wrong with it.
            .and_where(self.row_is_sound())
            .returning(Query::returning().exprs([self.col(NAME), self.col(EPOCH_COL)]))
            .to_owned();
        // The update keeps a sound row sound, so reading the sound row
        // after it finds exactly the row it changed, with its new epoch.
        let read = Query::select()
            .expr(self.col(EPOCH_COL))
            .from(self.table_ref())
            .and_where(self.col(NAME).eq(LEASE))
            .and_where(self.row_is_sound())
            .to_owned();
        self.with_read_back(self.with_notify(&update), read, ReadOrder::AfterWrite)
    }

    /// On PostgreSQL, wraps an `UPDATE … RETURNING name, epoch` so the same
    /// statement (hence the same transaction) notifies the release channel
    /// for each row it freed; returns `epoch` either way.
    pub(super) fn with_notify(&self, update: &sea_query::UpdateStatement) -> Statement {
        let inner = self.render(update);
        match self.dialect {
            Dialect::Sqlite => {
                // SQLite has no notifications: return just the epoch.
                let sql = inner.sql.replacen(
                    &format!("RETURNING \"{}\".\"{NAME}\", ", self.table.table()),
                    "RETURNING ",
                    1,
                );
                Statement {
                    sql,
                    params: inner.params,
                    read_back: None,
                }
            }
            // No notifications and no RETURNING (the caller adds the
            // read-back).
            Dialect::Mysql => inner,
            Dialect::Postgres => Statement {
                // The channel is derived from a validated identifier: it
                // holds only letters, digits, underscores and a dot.
                sql: format!(
                    "WITH released AS ({}) SELECT released.epoch FROM released \
                     CROSS JOIN LATERAL pg_notify('{}', released.name) AS notified",
                    inner.sql,
                    self.table.release_channel()
                ),
                params: inner.params,
                read_back: None,
            },
        }
    }

    /// `name, holder, epoch, expires_in_ms` of the lease rows: the shape
    /// `decode_status` reads.
    pub(super) fn rows(&self) -> sea_query::SelectStatement {
        Query::select()
            .exprs([
                self.col(NAME),
                self.col(HOLDER_COL),
                self.col(EPOCH_COL),
                self.col(EXPIRES_AT).sub(db_now(self.dialect)),
            ])
            .from(self.table_ref())
            .and_where(self.not_the_marker())
            .to_owned()
    }

    /// Every row with its expiry as every reader sees it: a linked row's
    /// (DESIGN §9 "Renewal by liveness") through its holder's membership row, whichever way the
    /// set renews, so `picolease status` reads a fleet part of which renews
    /// by liveness.
    fn status(&self) -> Statement {
        self.liveness_status()
    }

    /// One lease's row, read as [`Builder::status`] reads them.
    fn lease_row(&self) -> Statement {
        self.liveness_lease_row()
    }

    fn fence(&self) -> Statement {
        let mut row = Query::select()
            .expr(Expr::val(1i64))
            .from(self.table_ref())
            .and_where(self.mine())
            .and_where(self.col(EXPIRES_AT).gt(db_now(self.dialect)))
            .to_owned();
        match self.dialect {
            // Holds the row until the fenced transaction ends: an epoch
            // bump (a key update, thanks to the unique index on
            // `(name, epoch)`) waits for it; the holder's renew and release
            // (no key column changed) do not.
            Dialect::Postgres => {
                row.lock(LockType::KeyShare);
            }
            // `LOCK IN SHARE MODE` (MariaDB refuses `FOR SHARE`): every
            // write to the row waits for it, the holder's renew included.
            Dialect::Mysql => {
                row.lock(LockType::Share);
            }
            // SQLite renders no locking clause; its writer lock orders a
            // fenced write and a takeover already.
            Dialect::Sqlite => {}
        }
        let query = Query::select().expr(Expr::exists(row)).to_owned();
        let statement = self.render(&query);
        Statement {
            sql: statement
                .sql
                .strip_prefix("SELECT ")
                .expect("a SELECT renders with its keyword")
                .to_string(),
            params: statement.params,
            read_back: None,
        }
    }
}

fn split_placeholders(sql: &str, dialect: Dialect) -> Vec<&str> {
    match dialect {
        // The statements contain no other `?` (text literals are sentinels
        // bound as values, JSON paths use `$`).
        Dialect::Sqlite | Dialect::Mysql => sql.split('?').collect(),
        Dialect::Postgres => {
            // `$n` placeholders: split at each `$` followed by digits. The
            // statements contain no other `$` (identifiers are validated,
            // text literals are sentinels bound as values).
            let mut pieces = Vec::new();
            let bytes = sql.as_bytes();
            let mut start = 0;
            let mut i = 0;
            while i < bytes.len() {
                if bytes[i] == b'$' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
                    pieces.push(&sql[start..i]);
                    i += 1;
                    while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                        i += 1;
                    }
                    start = i;
                } else {
                    i += 1;
                }
            }
            pieces.push(&sql[start..]);
            pieces
        }
    }
}

fn push_placeholder(out: &mut String, dialect: Dialect, next: &mut usize) {
    match dialect {
        Dialect::Sqlite | Dialect::Mysql => out.push('?'),
        Dialect::Postgres => {
            out.push('$');
            out.push_str(&next.to_string());
        }
    }
    // Saturates rather than overflowing: a caller asking for placeholders
    // from `usize::MAX` gets SQL the database rejects, not a panic.
    *next = next.saturating_add(1);
}

/// The statement with its PostgreSQL placeholders renumbered from `first`.
pub(super) fn renumber(statement: &Statement, first: usize) -> Statement {
    if !statement.sql.contains('$') {
        return statement.clone();
    }
    let pieces = split_placeholders(&statement.sql, Dialect::Postgres);
    let mut out = String::with_capacity(statement.sql.len() + 8);
    let mut next = first.max(1);
    out.push_str(pieces[0]);
    for piece in &pieces[1..] {
        push_placeholder(&mut out, Dialect::Postgres, &mut next);
        out.push_str(piece);
    }
    Statement {
        sql: out,
        params: statement.params.clone(),
        read_back: statement.read_back.clone(),
    }
}

pub(super) fn statements(dialect: Dialect, table: &TableName) -> Statements {
    let b = Builder { dialect, table };
    Statements {
        dialect,
        table: table.clone(),
        create_table: b.create_table(),
        create_index: b.create_index(),
        fence_index_check: b.fence_index_check(),
        acquire: b.acquire(),
        renew: b.renew(),
        release: b.release(),
        hand_over: b.hand_over(),
        announce: b.announce(),
        request_hand_over: b.request_hand_over(),
        withdraw_hand_over: b.withdraw_hand_over(),
        force_release: b.force_release(),
        after_failover: b.after_failover(),
        status: b.status(),
        lease_row: b.lease_row(),
        fence: b.fence(),
        acquire_batch: b.acquire_batch(),
        renew_batch: b.renew_batch(),
        release_batch: b.release_batch(),
        survey: b.survey(),
        by_liveness: false,
    }
}
