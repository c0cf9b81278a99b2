//! A lease set's renewal by liveness (DESIGN §9 "Renewal by liveness"):
//! the statements that write one row per node per interval.
//!
//! A node's membership row is its **liveness**; every other row the node
//! takes while its liveness lives is **linked** to it: `expires_at =`
//! [`LINK_BASE`] `+` the liveness's epoch (its *term*). A linked row
//! expires when its liveness does, so the renewal extends the liveness
//! alone and confirms the linked rows by reading them.
//!
//! Every reader here sees a linked row's **effective expiry**: its
//! liveness row's, or *now* once that term is over (the liveness row
//! gone, taken at a later epoch, or cleared by a taker). A holder's
//! liveness rows are its membership rows: named [`MEMBER_PREFIX`] `+` the
//! holder id, perhaps followed by a space and its rank, held by it, plain.
//!
//! The statements are [`Statements::renewing_by_liveness`]'s and mirror
//! `sim::ModelDb::by_liveness` rule for rule; `tests/tests/model_vs_*`
//! run both on random sequences. MySQL's batches, which cannot write and
//! read in one statement, are `sql::liveness_mysql`'s.
//!
//! [`Statements::renewing_by_liveness`]: super::Statements::renewing_by_liveness

use sea_query::{Expr, MysqlQueryBuilder, PostgresQueryBuilder, Query, SqliteQueryBuilder};

use super::batch::MEMBER_PREFIX_END;
use super::build::{
    db_now_millis, Builder, EPOCH_COL, EXPIRES_AT, HOLDER_COL, INCARNATION, MYSQL_INCARNATION,
    NAME, PG_INCARNATION,
};
use super::first_row::TABLE_MARKER;
use super::handover::HANDOVER_PREFIX;
use super::{Dialect, Param, ReadBack, ReadOrder, Statement, MEMBER_PREFIX};

/// The base of a linked row's `expires_at`: `LINK_BASE` + the term of its
/// holder's liveness, far beyond any expiry (2^62 ms is 146 million
/// years), so a version that does not know links reads the row as held
/// and never takes it.
pub const LINK_BASE: i64 = 1 << 62;

/// Fills a hand-written statement's parameters: `@H` the holder, `@T` the
/// ttl, `@B` the batch, `@S` the stale threshold, `@L` the lease, `@E`
/// the epoch. On PostgreSQL each kind is one numbered parameter (`$N`,
/// numbered in order of first appearance), bound once however often the
/// text names it; on SQLite and MySQL each occurrence is a positional `?`
/// (so the fence can follow a caller's own `?`s). `@@` and `@` before a
/// lowercase letter (MySQL's system and session variables, `@@server_id`)
/// are left as they are. The templates quote
/// identifiers with `"`, and no text literal in them holds one: on MySQL
/// each becomes a backtick.
pub(super) fn fill(dialect: Dialect, template: &str) -> Statement {
    let translated;
    let template = if dialect == Dialect::Mysql {
        translated = template.replace('"', "`");
        translated.as_str()
    } else {
        template
    };
    const KINDS: [(&str, Param); 6] = [
        ("@H", Param::Holder),
        ("@T", Param::TtlMillis),
        ("@B", Param::Batch),
        ("@S", Param::StaleMillis),
        ("@L", Param::Lease),
        ("@E", Param::Epoch),
    ];
    let mut params: Vec<Param> = Vec::new();
    let mut sql = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find('@') {
        sql.push_str(&rest[..at]);
        // `@@server_id`, and MySQL's session variables (`@picolease_…`):
        // not parameters.
        if rest[at + 1..].starts_with(|c: char| c == '@' || c.is_ascii_lowercase()) {
            sql.push('@');
            rest = &rest[at + 1..];
            continue;
        }
        let token = rest.get(at..at + 2).unwrap_or("@");
        let (_, param) = KINDS
            .iter()
            .find(|(t, _)| *t == token)
            .unwrap_or_else(|| panic!("unknown parameter {token:?} in a liveness statement"));
        match dialect {
            Dialect::Postgres => {
                let n = match params.iter().position(|p| p == param) {
                    Some(i) => i + 1,
                    None => {
                        params.push(*param);
                        params.len()
                    }
                };
                sql.push('$');
                sql.push_str(&n.to_string());
            }
            Dialect::Sqlite | Dialect::Mysql => {
                params.push(*param);
                sql.push('?');
            }
        }
        rest = &rest[at + 2..];
    }
    sql.push_str(rest);
    Statement {
        sql,
        params,
        read_back: None,
    }
}

impl Builder<'_> {
    /// `(NOW)`: the database clock in milliseconds.
    pub(super) fn now(&self) -> String {
        format!("({})", db_now_millis(self.dialect))
    }

    /// PostgreSQL compares names byte-wise under the `C` collation.
    fn c(&self) -> &'static str {
        match self.dialect {
            Dialect::Postgres => " COLLATE \"C\"",
            Dialect::Sqlite | Dialect::Mysql => "",
        }
    }

    /// `parts` (SQL) joined into one text: `||`, on MySQL `CONCAT`.
    pub(super) fn concat(&self, parts: &[&str]) -> String {
        match self.dialect {
            Dialect::Mysql => format!("CONCAT({})", parts.join(", ")),
            Dialect::Sqlite | Dialect::Postgres => parts.join(" || "),
        }
    }

    /// The name `name` (SQL) is a membership row's of the holder `holder`
    /// (SQL): the prefix and the id, then nothing or a space and a rank.
    pub(super) fn is_liveness_name(&self, name: &str, holder: &str) -> String {
        let p = format!("'{MEMBER_PREFIX}'");
        format!(
            "({name} = {exact} OR substr({name}, 1, length({holder}) + {n}) = {ranked})",
            exact = self.concat(&[&p, holder]),
            ranked = self.concat(&[&p, holder, "' '"]),
            n = MEMBER_PREFIX.len() + 1,
        )
    }

    /// The row `r` (an alias or the table) is one of its holder's liveness
    /// rows: a membership row named for its holder, plain.
    pub(super) fn is_liveness_row(&self, r: &str) -> String {
        let c = self.c();
        format!(
            "({r}.\"{NAME}\"{c} >= '{MEMBER_PREFIX}' AND {r}.\"{NAME}\"{c} < '{MEMBER_PREFIX_END}' \
             AND {r}.\"{HOLDER_COL}\" IS NOT NULL AND {r}.\"{EXPIRES_AT}\" < {LINK_BASE} AND {live})",
            live = self.is_liveness_name(&format!("{r}.\"{NAME}\""), &format!("{r}.\"{HOLDER_COL}\"")),
        )
    }

    /// The row `r` is linked (on SQLite, only an integer expiry is: an
    /// unsound row's is left for decoding to report).
    pub(super) fn is_linked(&self, r: &str) -> String {
        match self.dialect {
            Dialect::Sqlite => format!(
                "(typeof({r}.\"{EXPIRES_AT}\") = 'integer' AND {r}.\"{EXPIRES_AT}\" >= {LINK_BASE})"
            ),
            Dialect::Postgres | Dialect::Mysql => format!("({r}.\"{EXPIRES_AT}\" >= {LINK_BASE})"),
        }
    }

    /// The effective expiry of the row `r`, reading its liveness from the
    /// table. A holder has one membership row (its rank is fixed for its
    /// life): most often named the prefix and the id alone, found by one
    /// primary-key probe whether or not it is still the liveness of that
    /// term; a ranked one's name goes on with its rank, found by a scan
    /// of the membership rows, made only when the probe finds no row.
    pub(super) fn effective_expiry(&self, r: &str) -> String {
        self.effective_expiry_over(r, &self.qualified_table())
    }

    /// [`Builder::effective_expiry`], the ranked liveness looked for among
    /// `members` (SQL: the table, or a statement's `"mem"`,
    /// [`Builder::pg_members`]).
    fn effective_expiry_over(&self, r: &str, members: &str) -> String {
        let now = self.now();
        let term = format!("{r}.\"{EXPIRES_AT}\" - {LINK_BASE}");
        let live = |l: &str| {
            format!(
                "{l}.\"{HOLDER_COL}\" = {r}.\"{HOLDER_COL}\" AND {l}.\"{EPOCH_COL}\" = {term} \
                 AND {l}.\"{EXPIRES_AT}\" < {LINK_BASE}"
            )
        };
        format!(
            "(CASE WHEN {linked} THEN COALESCE(\
             (SELECT CASE WHEN {exact_live} THEN \"e\".\"{EXPIRES_AT}\" ELSE {now} END FROM {table} AS \"e\" \
             WHERE \"e\".\"{NAME}\" = {exact_name}), \
             (SELECT MAX(\"l\".\"{EXPIRES_AT}\") FROM {members} AS \"l\" WHERE {ranked_live} AND {liveness}), {now}) \
             ELSE {r}.\"{EXPIRES_AT}\" END)",
            linked = self.is_linked(r),
            exact_name = self.concat(&[&format!("'{MEMBER_PREFIX}'"), &format!("{r}.\"{HOLDER_COL}\"")]),
            exact_live = live("\"e\""),
            ranked_live = live("\"l\""),
            table = self.qualified_table(),
            liveness = self.is_liveness_row("\"l\""),
        )
    }

    /// `"liv" AS (…)`: every holder's liveness terms and their expiry,
    /// for the statements that read many rows to join against.
    fn liveness_terms(&self) -> String {
        format!(
            "\"liv\" AS (SELECT \"l\".\"{HOLDER_COL}\", \"l\".\"{EPOCH_COL}\", MAX(\"l\".\"{EXPIRES_AT}\") AS \"{EXPIRES_AT}\" \
             FROM {table} AS \"l\" WHERE {liveness} GROUP BY \"l\".\"{HOLDER_COL}\", \"l\".\"{EPOCH_COL}\")",
            table = self.qualified_table(),
            liveness = self.is_liveness_row("\"l\""),
        )
    }

    /// `"eff" AS (…)`: the table's rows (but its marker) with their
    /// effective expiry, joined once against [`Self::liveness_terms`].
    fn effective_rows(&self) -> String {
        format!(
            "\"eff\" AS (SELECT \"r\".\"{NAME}\", \"r\".\"{HOLDER_COL}\", \"r\".\"{EPOCH_COL}\", \
             CASE WHEN {linked} THEN COALESCE(\"liv\".\"{EXPIRES_AT}\", {now}) ELSE \"r\".\"{EXPIRES_AT}\" END AS \"{EXPIRES_AT}\" \
             FROM {table} AS \"r\" LEFT JOIN \"liv\" ON {linked} AND \"liv\".\"{HOLDER_COL}\" = \"r\".\"{HOLDER_COL}\" \
             AND \"liv\".\"{EPOCH_COL}\" = \"r\".\"{EXPIRES_AT}\" - {LINK_BASE} \
             WHERE \"r\".\"{NAME}\" <> '{TABLE_MARKER}')",
            linked = self.is_linked("\"r\""),
            now = self.now(),
            table = self.qualified_table(),
        )
    }

    /// The status by liveness: every row with its effective expiry.
    pub(super) fn liveness_status(&self) -> Statement {
        self.effective_select(" ORDER BY \"name\"")
    }

    /// One lease's row by liveness, its effective expiry.
    pub(super) fn liveness_lease_row(&self) -> Statement {
        self.effective_select(" WHERE \"name\" = @L")
    }

    /// `name, holder, epoch, expires_in` of the rows with their effective
    /// expiry, `rest` (a condition, an order) after them.
    fn effective_select(&self, rest: &str) -> Statement {
        fill(
            self.dialect,
            &format!(
                "WITH {liv}, {eff} SELECT \"{NAME}\", \"{HOLDER_COL}\", \"{EPOCH_COL}\", \"{EXPIRES_AT}\" - {now} \
                 FROM \"eff\"{rest}",
                liv = self.liveness_terms(),
                eff = self.effective_rows(),
                now = self.now(),
            ),
        )
    }

    /// The survey by liveness: live members, and leases that are free,
    /// expire (effectively) within the stale threshold, or are reserved.
    pub(super) fn liveness_survey(&self) -> Statement {
        let c = self.c();
        let member = format!(
            "(\"{NAME}\"{c} >= '{MEMBER_PREFIX}' AND \"{NAME}\"{c} < '{MEMBER_PREFIX_END}')"
        );
        let now = self.now();
        fill(
            self.dialect,
            &format!(
                "WITH {liv}, {eff} SELECT \"{NAME}\", \"{HOLDER_COL}\", \"{EPOCH_COL}\", \"{EXPIRES_AT}\" - {now} \
                 FROM \"eff\" WHERE ({member} AND \"{HOLDER_COL}\" IS NOT NULL AND \"{EXPIRES_AT}\" > {now}) \
                 OR (NOT {member} AND (\"{HOLDER_COL}\" IS NULL OR \"{EXPIRES_AT}\" - {now} < @S \
                 OR \"{HOLDER_COL}\" LIKE '%#')) ORDER BY \"{NAME}\"",
                liv = self.liveness_terms(),
                eff = self.effective_rows(),
            ),
        )
    }

    /// The fence by liveness: the row is ours at our epoch (and this
    /// server incarnation's) and its effective expiry is ahead. PostgreSQL
    /// holds the lease row `FOR KEY SHARE`: a takeover bumps its epoch, a
    /// key update, which waits for the fenced transaction. MySQL holds it
    /// `LOCK IN SHARE MODE`, as its plain fence does: every write to the
    /// row waits, a takeover's included (its liveness killed first, the
    /// lease row's epoch bumped after).
    pub(super) fn liveness_fence(&self) -> Statement {
        let t = format!("\"{}\"", self.table.table());
        let (incarnation, lock) = match self.dialect {
            Dialect::Postgres => (
                format!(" AND {t}.\"{INCARNATION}\" = {PG_INCARNATION}"),
                " FOR KEY SHARE",
            ),
            Dialect::Mysql => (
                format!(" AND {t}.\"{INCARNATION}\" = {MYSQL_INCARNATION}"),
                " LOCK IN SHARE MODE",
            ),
            Dialect::Sqlite => (String::new(), ""),
        };
        fill(
            self.dialect,
            &format!(
                "EXISTS (SELECT 1 FROM {table} WHERE {t}.\"{NAME}\" = @L AND {t}.\"{HOLDER_COL}\" = @H \
                 AND {t}.\"{EPOCH_COL}\" = @E{incarnation} AND {eff} > {now}{lock})",
                table = self.qualified_table(),
                eff = self.effective_expiry(&t),
                now = self.now(),
            ),
        )
    }

    /// The renewal's handover request for the row `r`, as
    /// `Builder::asked_hand_over_sql` reads it for the table's row.
    pub(super) fn asked_for(&self, r: &str) -> String {
        let q = |column: &str| format!("\"picolease_request\".\"{column}\"");
        format!(
            "(SELECT COALESCE({holder}, '') FROM {table} AS \"picolease_request\" \
             WHERE {name} = {request} AND {epoch} = {r}.\"{EPOCH_COL}\")",
            holder = q(HOLDER_COL),
            table = self.qualified_table(),
            name = q(NAME),
            request = self.prefixed(HANDOVER_PREFIX, &format!("{r}.\"{NAME}\"")),
            epoch = q(EPOCH_COL),
        )
    }

    /// A sea-query expression as SQL text (it binds no value).
    pub(super) fn text_of(&self, expr: Expr) -> String {
        let select = Query::select().expr(expr).to_owned();
        let sql = match self.dialect {
            Dialect::Sqlite => select.to_string(SqliteQueryBuilder),
            Dialect::Postgres => select.to_string(PostgresQueryBuilder),
            Dialect::Mysql => select.to_string(MysqlQueryBuilder),
        };
        sql.strip_prefix("SELECT ")
            .expect("a SELECT renders with its keyword")
            .to_string()
    }

    /// The source rows of the acquire: each name of the batch with its
    /// fresh holder (NULL for a grace row after a server change) and fresh
    /// epoch, as `"c"`, in name order on PostgreSQL (rows are locked in
    /// that order, as the other batches lock theirs); `skip` filters names
    /// (PostgreSQL leaves out rows read as held, and its own liveness).
    fn acquire_source(&self, skip: &str) -> String {
        let item = "\"j\".\"value\"";
        let fresh_holder =
            self.text_of(self.fresh_holder(Expr::cust(item), Expr::cust("@H"), Some(item)));
        let fresh_epoch = self.fresh_epoch_sql();
        let (source, order) = match self.dialect {
            Dialect::Sqlite => ("json_each(@B)".to_string(), String::new()),
            Dialect::Postgres => (
                "json_array_elements_text(CAST(CAST(@B AS text) AS json))".to_string(),
                format!(" ORDER BY {item} COLLATE \"C\""),
            ),
            Dialect::Mysql => {
                unreachable!("MySQL takes in statements of its own (`sql::liveness_mysql`)")
            }
        };
        format!(
            "(SELECT {item} AS \"{NAME}\", {fresh_holder} AS \"{HOLDER_COL}\", {fresh_epoch} AS \"{EPOCH_COL}\" \
             FROM {source} AS \"j\" WHERE true{skip}{order}) AS \"c\""
        )
    }

    /// The acquire's `ON CONFLICT ("name") DO UPDATE`, by liveness. In
    /// order: a row of another server incarnation is adopted (PostgreSQL;
    /// from its effective expiry); the caller's own liveness row keeps its
    /// epoch and is extended; a takeable row (`takeable`, SQL on the
    /// table's row `t`) is taken, at the next epoch, linked as the source
    /// row says; anything else is kept.
    fn liveness_on_conflict(&self, t: &str, takeable: &str) -> String {
        let now = self.now();
        let x = |column: &str| format!("\"excluded\".\"{column}\"");
        let col = |column: &str| format!("{t}.\"{column}\"");
        let sound = self.text_of(self.row_is_sound());
        let own = format!(
            "{} = {} AND {}",
            col(HOLDER_COL),
            x(HOLDER_COL),
            self.is_liveness_name(&col(NAME), &x(HOLDER_COL))
        );
        let take = format!(
            "{sound} AND ({takeable} OR {h} = {xh} OR {h} = {reserved})",
            h = col(HOLDER_COL),
            xh = x(HOLDER_COL),
            reserved = Self::reservation_of("\"excluded\".\"holder\""),
        );
        let foreign = self.foreign().map(|f| self.text_of(f));
        let case = |adopted: &str, own_value: &str, taken: &str, kept: &str| -> String {
            let adopt = foreign
                .as_ref()
                .map(|f| format!("WHEN {f} THEN {adopted} "))
                .unwrap_or_default();
            format!(
                "CASE {adopt}WHEN {own} THEN {own_value} WHEN {take} THEN {taken} ELSE {kept} END"
            )
        };
        let greatest = match self.dialect {
            Dialect::Sqlite => "MAX",
            Dialect::Postgres | Dialect::Mysql => "GREATEST",
        };
        let mut set = format!(
            "\"{HOLDER_COL}\" = {holder}, \"{EPOCH_COL}\" = {epoch}, \"{EXPIRES_AT}\" = {expires}",
            holder = case("NULL", &col(HOLDER_COL), &x(HOLDER_COL), &col(HOLDER_COL)),
            epoch = case(
                &self.text_of(self.adopted_epoch()),
                &col(EPOCH_COL),
                &format!("{} + 1", col(EPOCH_COL)),
                &col(EPOCH_COL)
            ),
            expires = case(
                &format!(
                    "{greatest}({eff}, {now} + @T)",
                    eff = self.effective_expiry(t)
                ),
                &x(EXPIRES_AT),
                &x(EXPIRES_AT),
                &col(EXPIRES_AT)
            ),
        );
        if let Some(incarnation) = self.incarnation_now() {
            set.push_str(&format!(
                ", \"{INCARNATION}\" = CASE WHEN {sound} THEN {incarnation} ELSE {} END",
                col(INCARNATION)
            ));
        }
        format!("ON CONFLICT (\"{NAME}\") DO UPDATE SET {set}")
    }

    /// The acquire's value of `expires_at` for a source row `"c"`: a grace
    /// row and the caller's own liveness row expire a ttl from now; any
    /// other row is linked to `term` (SQL: the caller's live liveness
    /// term, NULL when it has none, which leaves the row plain).
    fn acquire_expiry(&self, term: &str) -> String {
        let now = self.now();
        format!(
            "CASE WHEN \"c\".\"{HOLDER_COL}\" IS NULL OR {own} THEN {now} + @T \
             ELSE COALESCE({LINK_BASE} + {term}, {now} + @T) END",
            own = self.is_liveness_name(&format!("\"c\".\"{NAME}\""), "@H"),
        )
    }

    /// The set's batch acquire by liveness.
    ///
    /// SQLite (one writer: nothing runs between its two statements, and
    /// no kill is needed, DESIGN §9 "Renewal by liveness"): the write extends the caller's
    /// live liveness; the upsert, run after it in the same transaction
    /// (its [`ReadBack`]), takes what is free, lapsed or linked to an
    /// ended liveness, linking it to the caller's term, and returns each
    /// name's `holder, epoch, expires_in`.
    ///
    /// PostgreSQL (one statement): `mine` extends the caller's live
    /// liveness; `judged` reads, in the statement's snapshot, the batch's
    /// rows linked to another holder's liveness that ended or lapsed (its
    /// own rows the caller takes anyway, and its own lapsed liveness it
    /// takes back at its epoch: nobody ended it); `killed` ends each
    /// lapsed one with a write conditioned on its expiry (rechecked on its
    /// latest version once locked: a renewal in flight makes it wait and
    /// end nothing); the upsert takes a linked row only when it is still
    /// the row judged and its liveness ended or was ended by `killed`.
    /// A liveness row `killed` ended is left out of the upsert (no row is
    /// written twice by one statement): a set never acquires another
    /// node's membership row.
    pub(super) fn liveness_acquire_batch(&self) -> Statement {
        match self.dialect {
            Dialect::Sqlite => self.sqlite_liveness_acquire_batch(),
            Dialect::Postgres => self.pg_liveness_acquire_batch(),
            Dialect::Mysql => self.mysql_liveness_acquire_batch(),
        }
    }

    /// `UPDATE` of the caller's live liveness rows (this server
    /// incarnation's) to a ttl from now; `more` adds to its condition.
    fn extend_liveness(&self, more: &str) -> String {
        let t = format!("\"{}\"", self.table.table());
        let incarnation = match self.dialect {
            Dialect::Postgres => format!(
                " AND {t}.\"{INCARNATION}\" = {PG_INCARNATION} AND {t}.\"{NAME}\" = ANY ({})",
                self.pg_liveness_names("CAST(@H AS text)")
            ),
            Dialect::Sqlite | Dialect::Mysql => String::new(),
        };
        format!(
            "UPDATE {table} SET \"{EXPIRES_AT}\" = {now} + @T WHERE {t}.\"{HOLDER_COL}\" = @H \
             AND {liveness}{incarnation} AND {more}",
            table = self.qualified_table(),
            now = self.now(),
            liveness = self.is_liveness_row(&t),
        )
    }

    /// PostgreSQL: the names the membership row of the holder `h` (SQL)
    /// may have, as an array for `name = ANY (…)`, so that the lookup is
    /// by primary key: the prefix and the id; or, when no row has that
    /// name, the ranked rows of that holder (a scan of the membership rows
    /// under the `C` collation, which the primary key's collation may not
    /// order). Without it every acquire and renewal scanned the whole
    /// table: at 10,000 leases an acquire outgrew its 500 ms timeout under
    /// load, each cancelled one left 1,000 dead rows behind, and a third of
    /// the leases were never taken (`bench --leases 10000 --nodes 3 --ttl
    /// 2s --by-liveness`).
    fn pg_liveness_names(&self, h: &str) -> String {
        self.pg_liveness_names_over(h, &self.qualified_table())
    }

    /// [`Builder::pg_liveness_names`], the ranked rows looked for among
    /// `members` (the table, or a statement's `"mem"`).
    fn pg_liveness_names_over(&self, h: &str, members: &str) -> String {
        let table = self.qualified_table();
        let p = MEMBER_PREFIX;
        format!(
            "ARRAY(SELECT '{p}' || {h} UNION ALL SELECT \"x\".\"{NAME}\" FROM {members} AS \"x\" \
             WHERE NOT EXISTS (SELECT 1 FROM {table} AS \"y\" WHERE \"y\".\"{NAME}\" = '{p}' || {h}) \
             AND \"x\".\"{NAME}\" COLLATE \"C\" >= '{p}' || {h} || ' ' AND \"x\".\"{NAME}\" COLLATE \"C\" < '{p}' || {h} || '!')"
        )
    }

    /// PostgreSQL: `"mem" AS (…)`, the membership rows, read once by a
    /// statement that looks up other holders' liveness row by row. A
    /// ranked holder's membership row is found by a range of names under
    /// the `C` collation, which the primary key's collation may not
    /// order, so each lookup in the table was a sequential scan (0.62 ms
    /// over 10,010 rows here), one per row linked to that holder: a
    /// crashed ranked node's 1,000 leases among 10 nodes over 10,000
    /// were led again up to 2.9 s after the kill, past ttl + interval
    /// (`scripts/bench-takeover --by-liveness --priority 1`). Read from
    /// `"mem"` (referenced more than once, so computed once, and only
    /// when a lookup reaches for it), the table is scanned once at most.
    fn pg_members(&self) -> String {
        format!(
            "\"mem\" AS (SELECT \"m\".\"{NAME}\", \"m\".\"{HOLDER_COL}\", \"m\".\"{EPOCH_COL}\", \"m\".\"{EXPIRES_AT}\" \
             FROM {table} AS \"m\" WHERE \"m\".\"{NAME}\" COLLATE \"C\" >= '{MEMBER_PREFIX}' \
             AND \"m\".\"{NAME}\" COLLATE \"C\" < '{MEMBER_PREFIX_END}')",
            table = self.qualified_table(),
        )
    }

    fn sqlite_liveness_acquire_batch(&self) -> Statement {
        let t = format!("\"{}\"", self.table.table());
        let now = self.now();
        let extend = fill(
            self.dialect,
            &self.extend_liveness(&format!("{t}.\"{EXPIRES_AT}\" > {now}")),
        );
        let term = format!(
            "(SELECT MAX(\"m\".\"{EPOCH_COL}\") FROM {table} AS \"m\" WHERE \"m\".\"{HOLDER_COL}\" = @H \
             AND {liveness} AND \"m\".\"{EXPIRES_AT}\" > {now})",
            table = self.qualified_table(),
            liveness = self.is_liveness_row("\"m\""),
        );
        let eff = self.effective_expiry(&t);
        let upsert = fill(
            self.dialect,
            &format!(
                "INSERT INTO {table} (\"{NAME}\", \"{HOLDER_COL}\", \"{EPOCH_COL}\", \"{EXPIRES_AT}\") \
                 SELECT \"c\".\"{NAME}\", \"c\".\"{HOLDER_COL}\", \"c\".\"{EPOCH_COL}\", {expiry} FROM {source} WHERE true \
                 {conflict} RETURNING {t}.\"{NAME}\", {t}.\"{HOLDER_COL}\", {t}.\"{EPOCH_COL}\", {eff} - {now}",
                table = self.qualified_table(),
                expiry = self.acquire_expiry(&term),
                source = self.acquire_source(""),
                conflict = self.liveness_on_conflict(&t, &format!("{eff} <= {now}")),
            ),
        );
        Statement {
            read_back: Some(Box::new(ReadBack {
                statement: upsert,
                order: ReadOrder::AfterWrite,
            })),
            ..extend
        }
    }

    fn pg_liveness_acquire_batch(&self) -> Statement {
        let t = format!("\"{}\"", self.table.table());
        let table = self.qualified_table();
        let now = self.now();
        let batch = "json_array_elements_text(CAST(CAST(@B AS text) AS json))";
        let mem = self.pg_members();
        let mine = format!(
            "\"mine\" AS ({extend} RETURNING {t}.\"{NAME}\", {t}.\"{HOLDER_COL}\", {t}.\"{EPOCH_COL}\", {t}.\"{EXPIRES_AT}\")",
            extend = self.extend_liveness(&format!("{t}.\"{EXPIRES_AT}\" > {now}")),
        );
        // Each linked row of the batch with its holder's liveness row at its
        // term (`lname`, NULL when that term is over), found by key.
        let judged = format!(
            "\"judged\" AS (SELECT \"r\".\"{NAME}\", \"r\".\"{HOLDER_COL}\", \"r\".\"{EXPIRES_AT}\" AS \"link\", \
             \"lv\".\"{NAME}\" AS \"lname\", \"lv\".\"{NAME}\" IS NULL AS \"ended\" \
             FROM {batch} AS \"b\" CROSS JOIN LATERAL (SELECT * FROM {table} AS \"p\" \
             WHERE \"p\".\"{NAME}\" = \"b\".\"value\" LIMIT 1) AS \"r\" \
             LEFT JOIN LATERAL (SELECT \"l\".\"{NAME}\", \"l\".\"{EXPIRES_AT}\" FROM {table} AS \"l\" \
             WHERE \"l\".\"{NAME}\" = ANY ({names}) AND \"l\".\"{HOLDER_COL}\" = \"r\".\"{HOLDER_COL}\" \
             AND \"l\".\"{EPOCH_COL}\" = \"r\".\"{EXPIRES_AT}\" - {LINK_BASE} AND \"l\".\"{EXPIRES_AT}\" < {LINK_BASE} \
             LIMIT 1) AS \"lv\" ON true \
             WHERE {linked} AND \"r\".\"{HOLDER_COL}\" IS NOT NULL AND \"r\".\"{HOLDER_COL}\" <> @H \
             AND (\"lv\".\"{NAME}\" IS NULL OR \"lv\".\"{EXPIRES_AT}\" <= {now}))",
            linked = self.is_linked("\"r\""),
            names = self.pg_liveness_names_over("\"r\".\"holder\"", "\"mem\""),
        );
        let killed = format!(
            "\"killed\" AS (UPDATE {table} SET \"{HOLDER_COL}\" = NULL, \"{EXPIRES_AT}\" = {now} \
             FROM (SELECT DISTINCT \"lname\", \"{HOLDER_COL}\", \"link\" - {LINK_BASE} AS \"term\" FROM \"judged\" WHERE NOT \"ended\") AS \"k\" \
             WHERE {t}.\"{NAME}\" = \"k\".\"lname\" AND {t}.\"{HOLDER_COL}\" = \"k\".\"{HOLDER_COL}\" \
             AND {t}.\"{EPOCH_COL}\" = \"k\".\"term\" AND {t}.\"{EXPIRES_AT}\" < {LINK_BASE} AND {t}.\"{EXPIRES_AT}\" <= {now} \
             RETURNING {t}.\"{NAME}\", \"k\".\"{HOLDER_COL}\", \"k\".\"term\")",
        );
        let held = format!(
            "\"held\" AS (SELECT \"h\".\"{NAME}\", \"h\".\"{HOLDER_COL}\", \"h\".\"{EPOCH_COL}\", {eff} - {now} AS \"expires_in\" \
             FROM {batch} AS \"b\" CROSS JOIN LATERAL (SELECT * FROM {table} AS \"p\" \
             WHERE \"p\".\"{NAME}\" = \"b\".\"value\" LIMIT 1) AS \"h\" \
             WHERE \"h\".\"{HOLDER_COL}\" IS NOT NULL AND \"h\".\"{HOLDER_COL}\" <> @H \
             AND \"h\".\"{HOLDER_COL}\" <> ({reservation}) AND \"h\".\"{EPOCH_COL}\" >= 0 AND {eff} > {now})",
            eff = self.effective_expiry_over("\"h\"", "\"mem\""),
            reservation = Self::reservation_of("CAST(@H AS text)"),
        );
        // A linked row is taken only as the row judged, its liveness ended
        // in the snapshot (a term never lives again) or ended by `killed`.
        let takeable = format!(
            "(({t}.\"{EXPIRES_AT}\" < {LINK_BASE} AND {t}.\"{EXPIRES_AT}\" <= {now}) \
             OR EXISTS (SELECT 1 FROM \"judged\" WHERE \"judged\".\"{NAME}\" = {t}.\"{NAME}\" \
             AND \"judged\".\"{HOLDER_COL}\" = {t}.\"{HOLDER_COL}\" AND \"judged\".\"link\" = {t}.\"{EXPIRES_AT}\" \
             AND (\"judged\".\"ended\" OR EXISTS (SELECT 1 FROM \"killed\" WHERE \"killed\".\"{HOLDER_COL}\" = \"judged\".\"{HOLDER_COL}\" \
             AND \"killed\".\"term\" = \"judged\".\"link\" - {LINK_BASE}))))"
        );
        let term = format!("(SELECT MAX(\"{EPOCH_COL}\") FROM \"mine\")");
        // What the caller's own linked rows expire with is its liveness as
        // `mine` extended it (the snapshot holds the old expiry).
        let returned_expiry = format!(
            "CASE WHEN {linked} AND {t}.\"{HOLDER_COL}\" = @H THEN COALESCE((SELECT MAX(\"mine\".\"{EXPIRES_AT}\") FROM \"mine\" \
             WHERE \"mine\".\"{EPOCH_COL}\" = {t}.\"{EXPIRES_AT}\" - {LINK_BASE}), {eff}) ELSE {eff} END",
            linked = self.is_linked(&t),
            eff = self.effective_expiry_over(&t, "\"mem\""),
        );
        let taken = format!(
            "\"taken\" AS (INSERT INTO {table} (\"{NAME}\", \"{HOLDER_COL}\", \"{EPOCH_COL}\", \"{EXPIRES_AT}\") \
             SELECT \"c\".\"{NAME}\", \"c\".\"{HOLDER_COL}\", \"c\".\"{EPOCH_COL}\", {expiry} FROM {source} \
             {conflict} RETURNING {t}.\"{NAME}\", {t}.\"{HOLDER_COL}\", {t}.\"{EPOCH_COL}\", {returned_expiry} - {now})",
            expiry = self.acquire_expiry(&term),
            source = self.acquire_source(&format!(
                " AND \"j\".\"value\" NOT IN (SELECT \"{NAME}\" FROM \"held\") \
                 AND \"j\".\"value\" NOT IN (SELECT \"{NAME}\" FROM \"mine\") \
                 AND \"j\".\"value\" NOT IN (SELECT \"{NAME}\" FROM \"killed\")"
            )),
            conflict = self.liveness_on_conflict(&t, &takeable),
        );
        fill(
            self.dialect,
            &format!(
                "WITH {mem}, {mine}, {judged}, {killed}, {held}, {taken} \
                 SELECT * FROM \"taken\" UNION ALL SELECT * FROM \"held\" \
                 UNION ALL SELECT \"{NAME}\", \"{HOLDER_COL}\", \"{EPOCH_COL}\", \"{EXPIRES_AT}\" - {now} FROM \"mine\" \
                 WHERE \"{NAME}\" IN (SELECT \"value\" FROM {batch} AS \"b\")",
            ),
        )
    }

    /// The set's batch renew by liveness: the caller's liveness rows are
    /// extended (those of the batch at their epochs, and any live one),
    /// and so are the plain rows of the batch held at their epochs; a
    /// linked row of the batch held at its epoch is confirmed, not
    /// written, when its liveness is one just extended. `name, epoch,
    /// asked` of each.
    ///
    /// SQLite: the write, then the read of what it renewed and confirms
    /// (its [`ReadBack`], same transaction). PostgreSQL: one statement;
    /// the liveness row's lock orders it against a takeover's kill (a
    /// kill in flight makes `live` wait and extend nothing, so nothing
    /// linked is confirmed).
    pub(super) fn liveness_renew_batch(&self) -> Statement {
        if self.dialect == Dialect::Mysql {
            return self.mysql_liveness_renew_batch();
        }
        let t = format!("\"{}\"", self.table.table());
        let table = self.qualified_table();
        let now = self.now();
        let pairs = match self.dialect {
            Dialect::Sqlite => format!(
                "(SELECT json_extract(\"p\".\"value\", '$[0]') AS \"{NAME}\", \
                 json_extract(\"p\".\"value\", '$[1]') AS \"{EPOCH_COL}\" FROM json_each(@B) AS \"p\")"
            ),
            Dialect::Postgres => format!(
                "(SELECT \"p\".\"value\" ->> 0 AS \"{NAME}\", CAST(\"p\".\"value\" ->> 1 AS bigint) AS \"{EPOCH_COL}\" \
                 FROM json_array_elements(CAST(CAST(@B AS text) AS json)) AS \"p\")"
            ),
            Dialect::Mysql => unreachable!("MySQL renews in statements of its own (`sql::liveness_mysql`)"),
        };
        let in_batch = |r: &str| {
            format!(
                "({r}.\"{NAME}\", {r}.\"{EPOCH_COL}\") IN (SELECT \"{NAME}\", \"{EPOCH_COL}\" FROM {pairs} AS \"q\")"
            )
        };
        let extend = self.extend_liveness(&format!(
            "({} OR {t}.\"{EXPIRES_AT}\" > {now})",
            in_batch(&t)
        ));
        let incarnation = |r: &str| match self.dialect {
            Dialect::Postgres => format!(" AND {r}.\"{INCARNATION}\" = {PG_INCARNATION}"),
            Dialect::Sqlite | Dialect::Mysql => String::new(),
        };
        let plain_rows = format!(
            "{t}.\"{HOLDER_COL}\" = @H AND {batch}{inc} AND NOT {linked} \
             AND NOT {own}",
            batch = in_batch(&t),
            inc = incarnation(&t),
            linked = self.is_linked(&t),
            own = self.is_liveness_name(&format!("{t}.\"{NAME}\""), "@H"),
        );
        if self.dialect == Dialect::Sqlite {
            let write = fill(
                self.dialect,
                &format!(
                    "UPDATE {table} SET \"{EXPIRES_AT}\" = {now} + @T WHERE \
                     ({t}.\"{HOLDER_COL}\" = @H AND {liveness} AND ({batch} OR {t}.\"{EXPIRES_AT}\" > {now})) \
                     OR ({plain_rows})",
                    liveness = self.is_liveness_row(&t),
                    batch = in_batch(&t),
                ),
            );
            // After the write every liveness row of ours that lives was
            // extended by it: a linked row is confirmed by a live one.
            let read = fill(
                self.dialect,
                &format!(
                    "SELECT \"r\".\"{NAME}\", \"r\".\"{EPOCH_COL}\", {asked} FROM {table} AS \"r\" \
                     WHERE \"r\".\"{HOLDER_COL}\" = @H AND {batch} AND (NOT {linked} OR {eff} > {now})",
                    asked = self.asked_for("\"r\""),
                    batch = in_batch("\"r\""),
                    linked = self.is_linked("\"r\""),
                    eff = self.effective_expiry("\"r\""),
                ),
            );
            return Statement {
                read_back: Some(Box::new(ReadBack {
                    statement: read,
                    order: ReadOrder::AfterWrite,
                })),
                ..write
            };
        }
        let live = format!(
            "\"live\" AS ({extend} RETURNING {t}.\"{NAME}\", {t}.\"{EPOCH_COL}\", {asked})",
            asked = self.asked_for(&t),
        );
        // Both driven from the batch's pairs through the primary key (a
        // lateral probe, `name = ANY`), one probe per item whatever the
        // table's size: joined plainly, a table without statistics yet was
        // scanned once per item (the acquire's `held` took 690 ms for 1,000
        // names over 6,700 rows, and the acquire timed out). Each lateral
        // probe ends in `LIMIT 1` (the name is the key: one row at most),
        // which keeps the planner from pulling it up into that same join
        // (1.6 s for 1,000 names over 5,000 rows without it).
        let plain = format!(
            "\"plain\" AS (UPDATE {table} SET \"{EXPIRES_AT}\" = {now} + @T \
             WHERE {t}.\"{NAME}\" = ANY (ARRAY(SELECT \"q\".\"{NAME}\" FROM {pairs} AS \"q\")) AND {plain_rows} \
             RETURNING {t}.\"{NAME}\", {t}.\"{EPOCH_COL}\", {asked})",
            asked = self.asked_for(&t),
        );
        let linked = format!(
            "\"linked\" AS (SELECT \"r\".\"{NAME}\", \"r\".\"{EPOCH_COL}\", {asked} FROM {pairs} AS \"q\" \
             CROSS JOIN LATERAL (SELECT * FROM {table} AS \"p\" WHERE \"p\".\"{NAME}\" = \"q\".\"{NAME}\" \
             AND \"p\".\"{EPOCH_COL}\" = \"q\".\"{EPOCH_COL}\" LIMIT 1) AS \"r\" \
             WHERE \"r\".\"{HOLDER_COL}\" = @H{inc} AND {is_linked} \
             AND \"r\".\"{EXPIRES_AT}\" - {LINK_BASE} IN (SELECT \"{EPOCH_COL}\" FROM \"live\"))",
            asked = self.asked_for("\"r\""),
            inc = incarnation("\"r\""),
            is_linked = self.is_linked("\"r\""),
        );
        fill(
            self.dialect,
            &format!(
                "WITH {live}, {plain}, {linked} SELECT * FROM \"live\" WHERE {batch} \
                 UNION ALL SELECT * FROM \"plain\" UNION ALL SELECT * FROM \"linked\"",
                batch = in_batch("\"live\""),
            ),
        )
    }
}
