//! The MySQL and MariaDB shapes that sea-query cannot express: the InnoDB
//! table, and the lease-set batches over `JSON_TABLE` (MySQL 8.0.4+,
//! MariaDB 10.6+).
//!
//! Only syntax both servers accept: no `RETURNING` (MySQL has none,
//! MariaDB only on `INSERT` and `DELETE`), no `FOR SHARE` or `FOR UPDATE
//! OF` (MariaDB refuses both), no row alias after `VALUES` (MariaDB lacks
//! it). A batch that writes therefore reports through a locking read in
//! the same transaction ([`super::ReadBack`]), exactly as the single-lease
//! statements do; no decision rests on an affected-row count, which
//! differs with `CLIENT_FOUND_ROWS`.

use sea_query::{Alias, ColumnDef, Index, MysqlQueryBuilder, Table};

use super::build::{
    db_now_millis, Builder, EPOCH_COL, EXPIRES_AT, FENCE_INDEX_SUFFIX, HOLDER_COL, INCARNATION,
    MYSQL_INCARNATION, NAME,
};
use super::first_row::{CALLER, CALLER_TTL};
use super::{Dialect, Param, ReadOrder, Statement};

/// The alias of the batch's `JSON_TABLE`.
const ITEM: &str = "j";

/// The widest name or holder id, in bytes (`LeaseName`, `HolderId`).
const ID_BYTES: u32 = 255;

/// How every batch joins the lease table: from the batch (`STRAIGHT_JOIN`
/// with the `JSON_TABLE` first) through the primary key. Left to itself,
/// MariaDB 10.11 scans a small lease table (`type=ALL`, a few rows) and
/// its `FOR UPDATE` (or the `UPDATE`) then locks every row, other nodes'
/// too: four sets starting together deadlocked (1213) on each other's
/// rows in `tests/tests/conformance_mysql.rs`. Both servers accept the
/// hint.
pub(super) const BY_KEY: &str = "FORCE INDEX (PRIMARY)";

impl Builder<'_> {
    /// The table as SQL, schema-qualified (`database.table`) when it has one.
    pub(super) fn mysql_table(&self) -> String {
        // Identifiers are validated (letters, digits, underscores).
        match self.table.schema() {
            Some(schema) => format!("`{schema}`.`{}`", self.table.table()),
            None => format!("`{}`", self.table.table()),
        }
    }

    /// `CREATE TABLE IF NOT EXISTS … ENGINE=InnoDB` with the unique index
    /// `<table>_fence` on `(name, epoch)` declared inline.
    ///
    /// `name` and `holder` are `VARBINARY(255)`: compared byte by byte, as
    /// on SQLite and under PostgreSQL's `C` collation, so no collation can
    /// make two lease names equal (`utf8mb4_general_ci` folds case, and
    /// every `PAD SPACE` collation, `utf8mb4_bin` included, equates `"a"`
    /// and `"a "`), and the member range of the survey is a byte range.
    /// InnoDB, because the fence rests on its row locks.
    pub(super) fn mysql_create_table(&self) -> String {
        Table::create()
            .table(self.table_ref())
            .if_not_exists()
            .col(
                ColumnDef::new(Alias::new(NAME))
                    .var_binary(ID_BYTES)
                    .not_null()
                    .primary_key(),
            )
            .col(
                ColumnDef::new(Alias::new(HOLDER_COL))
                    .var_binary(ID_BYTES)
                    .null(),
            )
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
            .col(ColumnDef::new(Alias::new(INCARNATION)).big_integer().null())
            .index(
                Index::create()
                    .unique()
                    .name(format!("{}{FENCE_INDEX_SUFFIX}", self.table.table()))
                    .col(Alias::new(NAME))
                    .col(Alias::new(EPOCH_COL)),
            )
            .engine("InnoDB")
            .to_string(MysqlQueryBuilder)
    }

    /// A table made before the `incarnation` column existed gains it, each
    /// row stamped with the running server's `@@server_id` (as
    /// PostgreSQL's column default does there), so its rows belong to the
    /// server that migrates it. One round trip of statements both servers
    /// take (MySQL 8 has no `ADD COLUMN IF NOT EXISTS`): the catalog is
    /// read into a variable, and the `ALTER` and the `UPDATE` are prepared
    /// only when the column is missing.
    pub(super) fn mysql_migrate(&self) -> String {
        let table = self.mysql_table();
        let schema = match self.table.schema() {
            Some(schema) => format!("'{schema}'"),
            None => "DATABASE()".to_string(),
        };
        let t = self.table.table();
        let run = |sql: String| {
            format!(
                "SET @picolease_sql = IF(@picolease_missing, '{sql}', 'DO 0'); \
                 PREPARE picolease_migrate FROM @picolease_sql; EXECUTE picolease_migrate; \
                 DEALLOCATE PREPARE picolease_migrate"
            )
        };
        format!(
            "SET @picolease_missing = (SELECT COUNT(*) = 0 FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = {schema} AND TABLE_NAME = '{t}' AND COLUMN_NAME = '{INCARNATION}'); \
             {}; {}; {}",
            run(format!("ALTER TABLE {table} ADD COLUMN `{INCARNATION}` BIGINT NULL")),
            run(format!(
                "UPDATE {table} SET `{INCARNATION}` = {MYSQL_INCARNATION}"
            )),
            // The table's marker row (`first_row`), once the column exists.
            self.create_marker(),
        )
    }

    /// `JSON_TABLE(?, '$[*]' …) AS j`: the batch's names (`j.name`), or
    /// with `pairs` its `[name, epoch]` pairs (`j.name`, `j.epoch`). The
    /// names come out as utf8mb4 text whatever the connection's character
    /// set, and are stored and compared as their bytes.
    fn json_table(pairs: bool) -> String {
        let columns = if pairs {
            format!(
                "`{NAME}` VARCHAR({ID_BYTES}) CHARACTER SET utf8mb4 PATH '$[0]', \
                 `{EPOCH_COL}` BIGINT PATH '$[1]'"
            )
        } else {
            format!("`{NAME}` VARCHAR({ID_BYTES}) CHARACTER SET utf8mb4 PATH '$'")
        };
        format!("JSON_TABLE(?, '$[*]' COLUMNS ({columns})) AS `{ITEM}`")
    }

    /// `SELECT name, epoch FROM <table> JOIN <pairs> … WHERE holder = ? FOR
    /// UPDATE`: the rows of the batch we hold at their epochs, locked (the
    /// read-back of the batch renew and release), with the columns `more`
    /// after those two (`""` or `", <expr>"`). Params: batch, holder.
    fn mysql_mine_in_batch(&self, more: &str) -> Statement {
        let t = self.table.table();
        Statement {
            sql: format!(
                "SELECT `{t}`.`{NAME}`, `{t}`.`{EPOCH_COL}`{more} FROM {pairs} STRAIGHT_JOIN {table} {BY_KEY} \
                 ON `{t}`.`{NAME}` = `{ITEM}`.`{NAME}` AND `{t}`.`{EPOCH_COL}` = `{ITEM}`.`{EPOCH_COL}` \
                 WHERE `{t}`.`{HOLDER_COL}` = ? AND `{t}`.`{INCARNATION}` = {MYSQL_INCARNATION} FOR UPDATE",
                table = self.mysql_table(),
                pairs = Self::json_table(true),
            ),
            params: vec![Param::Batch, Param::Holder],
            read_back: None,
        }
    }

    /// `UPDATE <pairs> STRAIGHT_JOIN <table> … SET <set> WHERE holder = ?`:
    /// the single renew's or release's condition, per pair. The join is
    /// made to drive from the batch to the primary key ([`BY_KEY`]), so
    /// only the batch's rows are read and locked. Params: batch, then `set`'s, then holder. `set`
    /// names the columns bare, as the single statements do: only the lease
    /// table has them (`j` has `name` and `epoch`).
    fn mysql_update_mine(&self, set: &str, set_params: &[Param]) -> Statement {
        let t = self.table.table();
        let mut params = vec![Param::Batch];
        params.extend_from_slice(set_params);
        params.push(Param::Holder);
        Statement {
            sql: format!(
                "UPDATE {pairs} STRAIGHT_JOIN {table} {BY_KEY} \
                 ON `{t}`.`{NAME}` = `{ITEM}`.`{NAME}` AND `{t}`.`{EPOCH_COL}` = `{ITEM}`.`{EPOCH_COL}` \
                 SET {set} WHERE `{t}`.`{HOLDER_COL}` = ? AND `{t}`.`{INCARNATION}` = {MYSQL_INCARNATION}",
                table = self.mysql_table(),
                pairs = Self::json_table(true),
            ),
            params,
            read_back: None,
        }
    }

    /// The batch acquire: the single acquire's `ON DUPLICATE KEY UPDATE`
    /// (the very same clause, taken from it) for every name, fed by
    /// `INSERT … SELECT` from the batch in byte order of the names (the
    /// order InnoDB locks the rows in, whatever order the caller sent);
    /// then, in the same transaction, every name's row read back locked.
    /// Params: holder, ttl, batch; the read-back's: batch.
    /// The conflict clause of `acquire`'s upsert as sea-query rendered it
    /// (` ON DUPLICATE KEY UPDATE …`, binding nothing), with the caller
    /// read from [`CALLER`]'s `holder` instead of `VALUES(holder)`.
    ///
    /// The inserted holder is NULL for a grace row (`first_row`), so the
    /// conflict branch cannot read the caller from it. PostgreSQL and
    /// SQLite keep `excluded.holder` and insert NULL only when no row
    /// exists; on MySQL that existence check would read the lease's row
    /// inside the write, which InnoDB does under a shared lock (on
    /// MariaDB at READ COMMITTED too): two acquires of one row would each
    /// hold it shared and wait for the other's exclusive lock, a
    /// deadlock. MySQL's `INSERT … SELECT … ON DUPLICATE KEY UPDATE`
    /// reads the SELECT's columns instead, so the caller comes in a
    /// one-row derived table.
    fn mysql_conflict_clause(&self, rendered: &str) -> String {
        let at = rendered
            .find(" ON DUPLICATE KEY UPDATE ")
            .expect("the single acquire is an upsert");
        let upsert = &rendered[at..];
        debug_assert!(!upsert.contains('?'), "the clause binds nothing");
        upsert.replace(
            &format!("VALUES(`{HOLDER_COL}`)"),
            &format!("`{CALLER}`.`{HOLDER_COL}`"),
        )
    }

    /// `(SELECT ? AS holder, ? AS ttl_ms) AS picolease_caller`: the
    /// caller and its ttl, bound once each; with `lease`, the lease first.
    fn mysql_caller(lease: bool) -> String {
        let lease = if lease {
            format!("CAST(? AS BINARY) AS `{NAME}`, ")
        } else {
            String::new()
        };
        format!(
            "(SELECT {lease}CAST(? AS BINARY) AS `{HOLDER_COL}`, ? AS `{CALLER_TTL}`) AS `{CALLER}`"
        )
    }

    /// The single acquire: `INSERT … SELECT` over [`Self::mysql_caller`],
    /// the fresh row's holder and epoch from the table's marker
    /// (`first_row`), and [`Self::mysql_conflict_clause`]. Params: lease,
    /// holder, ttl, as on the other dialects.
    pub(super) fn mysql_acquire(&self, rendered: &Statement) -> Statement {
        let now = db_now_millis(Dialect::Mysql);
        Statement {
            sql: format!(
                "INSERT INTO {table} (`{NAME}`, `{HOLDER_COL}`, `{EPOCH_COL}`, `{EXPIRES_AT}`, `{INCARNATION}`) \
                 SELECT `{CALLER}`.`{NAME}`, {holder}, {epoch}, ({now}) + `{CALLER}`.`{CALLER_TTL}`, \
                 {MYSQL_INCARNATION} FROM {caller}{upsert}",
                table = self.mysql_table(),
                holder = self.mysql_fresh_holder(&format!("`{CALLER}`.`{HOLDER_COL}`"), None),
                epoch = self.fresh_epoch_sql(),
                caller = Self::mysql_caller(true),
                upsert = self.mysql_conflict_clause(&rendered.sql),
            ),
            params: vec![Param::Lease, Param::Holder, Param::TtlMillis],
            read_back: None,
        }
    }

    pub(super) fn mysql_acquire_batch(&self) -> Statement {
        debug_assert_eq!(self.dialect, Dialect::Mysql);
        let upsert = self.mysql_conflict_clause(&self.acquire().sql);
        let t = self.table.table();
        let now = db_now_millis(Dialect::Mysql);
        let write = Statement {
            sql: format!(
                "INSERT INTO {table} (`{NAME}`, `{HOLDER_COL}`, `{EPOCH_COL}`, `{EXPIRES_AT}`, `{INCARNATION}`) \
                 SELECT `{ITEM}`.`{NAME}`, {holder}, {epoch}, ({now}) + `{CALLER}`.`{CALLER_TTL}`, \
                 {MYSQL_INCARNATION} FROM {caller} JOIN {names} \
                 ORDER BY CAST(`{ITEM}`.`{NAME}` AS BINARY){upsert}",
                table = self.mysql_table(),
                names = Self::json_table(false),
                caller = Self::mysql_caller(false),
                holder = self.mysql_fresh_holder(
                    &format!("`{CALLER}`.`{HOLDER_COL}`"),
                    Some(&format!("`{ITEM}`.`{NAME}`"))
                ),
                epoch = self.fresh_epoch_sql(),
            ),
            params: vec![Param::Holder, Param::TtlMillis, Param::Batch],
            read_back: None,
        };
        let read = Statement {
            sql: format!(
                "SELECT `{t}`.`{NAME}`, `{t}`.`{HOLDER_COL}`, `{t}`.`{EPOCH_COL}`, \
                 `{t}`.`{EXPIRES_AT}` - ({now}) FROM {names} STRAIGHT_JOIN {table} {BY_KEY} \
                 ON `{t}`.`{NAME}` = `{ITEM}`.`{NAME}` FOR UPDATE",
                table = self.mysql_table(),
                names = Self::json_table(false),
            ),
            params: vec![Param::Batch],
            read_back: None,
        };
        self.attach(write, read, ReadOrder::AfterWrite)
    }

    /// The batch renew: extends every pair we hold at its epoch, then reads
    /// those rows back, locked. Params: batch, ttl, holder; the
    /// read-back's: batch, holder.
    pub(super) fn mysql_renew_batch(&self) -> Statement {
        let now = db_now_millis(Dialect::Mysql);
        let write = self.mysql_update_mine(
            &format!("`{EXPIRES_AT}` = ({now}) + ?"),
            &[Param::TtlMillis],
        );
        // As the other dialects' renewals, it reads an operator's request.
        let asked = format!(", {}", self.asked_hand_over_sql());
        self.attach(
            write,
            self.mysql_mine_in_batch(&asked),
            ReadOrder::AfterWrite,
        )
    }

    /// The batch release: reads (and locks) the pairs we hold at their
    /// epochs, then frees them, keeping the epoch. Params: batch, holder;
    /// the read's: batch, holder.
    pub(super) fn mysql_release_batch(&self) -> Statement {
        let now = db_now_millis(Dialect::Mysql);
        let write = self.mysql_update_mine(
            &format!("`{HOLDER_COL}` = NULL, `{EXPIRES_AT}` = {now}"),
            &[],
        );
        self.attach(write, self.mysql_mine_in_batch(""), ReadOrder::BeforeWrite)
    }
}
