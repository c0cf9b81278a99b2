//! MySQL's and MariaDB's batches renewing by liveness (DESIGN §9 "Renewal by liveness"): the
//! rules of `sql::liveness` and of `sim::ModelDb::by_liveness` (the kill
//! of a lapsed liveness included), in the shape these servers allow.
//!
//! Neither has `RETURNING`, and `ON DUPLICATE KEY UPDATE` assigns its
//! columns left to right, each expression seeing the columns set before
//! it, so one upsert cannot take a row, link it and keep the caller's own
//! liveness apart by `CASE`s over the row as it was (the first assignment
//! changes what the next `CASE` reads). Each batch is therefore a chain of
//! statements in one transaction ([`Statement::in_order`]): every decision
//! is a `WHERE` (read before anything is set), no assignment reads a
//! column another assignment of its statement sets, and the last
//! statement reads the rows that are the reply. The acquire's kill alone
//! commits first ([`ReadOrder::AfterCommit`]): inside the acquire's
//! transaction it made the takers of one crashed node's leases queue on
//! its liveness row for each other's whole acquire. Every statement is driven
//! from the batch through the primary key (`STRAIGHT_JOIN`, [`BY_KEY`]),
//! as MySQL's other batches are, so it locks the batch's rows only.
//!
//! Why the kill orders a takeover against a renewal here: InnoDB at READ
//! COMMITTED ([`super::MYSQL_BEGIN`]) locks each row an `UPDATE` matches
//! and re-reads a locked row's latest version before it decides. The
//! holder's renewal writes its liveness row first and keeps its lock to
//! the commit; a taker's kill, an `UPDATE` of that row conditioned on its
//! lapse, waits for that lock and then finds it extended (and ends
//! nothing, so takes nothing linked to it); a kill in flight makes the
//! renewal wait, find the row ended, extend nothing and so confirm
//! nothing. A linked row is taken only once its liveness is **ended** (no
//! row at its term), never merely lapsed: a term never lives again, which
//! is also why the kill may commit before the take.
//!
//! Tried on MariaDB 10.11 (`tests/tests/model_vs_mysql.rs`,
//! `tests/tests/mysql_liveness_race.rs`). MySQL 8 refuses a subquery on
//! the table an `UPDATE` writes (error 1093), which these statements have:
//! the driver refuses such a server at its first connection
//! (`drivers/src/mysql/version.rs`).

use super::build::{
    Builder, EPOCH_COL, EXPIRES_AT, HOLDER_COL, INCARNATION, MYSQL_INCARNATION, NAME,
};
use super::liveness::{fill, LINK_BASE};
use super::mysql::BY_KEY;
use super::{ReadBack, ReadOrder, Statement, MEMBER_PREFIX};

/// The session variable the acquire's judgment is kept in for its takes:
/// the batch's linked rows whose liveness ended, read without a lock.
const JUDGED: &str = "@picolease_judged";

/// The batch's names as the rows of `"j"` (`"j"."name"`).
fn names() -> String {
    format!(
        "JSON_TABLE(@B, '$[*]' COLUMNS (\"{NAME}\" VARCHAR(255) CHARACTER SET utf8mb4 PATH '$')) AS \"j\""
    )
}

/// The batch's `[name, epoch]` pairs as the rows of `"q"`.
fn pairs() -> String {
    format!(
        "JSON_TABLE(@B, '$[*]' COLUMNS (\"{NAME}\" VARCHAR(255) CHARACTER SET utf8mb4 PATH '$[0]', \
         \"{EPOCH_COL}\" BIGINT PATH '$[1]')) AS \"q\""
    )
}

/// `steps` run in order in one transaction, the last one's rows the
/// reply: each step's read-back is the rest of the chain.
fn chain(steps: Vec<Statement>) -> Statement {
    let mut steps = steps.into_iter().rev();
    let mut chained = steps.next().expect("a chain has a step");
    for step in steps {
        chained = then(step, chained, ReadOrder::AfterWrite);
    }
    chained
}

/// `first`, then `rest` as its read-back, `order` apart.
fn then(first: Statement, rest: Statement, order: ReadOrder) -> Statement {
    Statement {
        read_back: Some(Box::new(ReadBack {
            statement: rest,
            order,
        })),
        ..first
    }
}

impl Builder<'_> {
    /// The lease table's own name, quoted: the row an `UPDATE` writes.
    fn own(&self) -> String {
        format!("\"{}\"", self.table.table())
    }

    /// `r`'s name is in the primary-key range of `h`'s membership rows
    /// (the prefix and the id, then anything before `!`: nothing, or a
    /// space and a rank), so the lookup is a range read of the key.
    fn in_member_range(&self, r: &str, h: &str) -> String {
        let p = format!("'{MEMBER_PREFIX}'");
        format!(
            "{r}.\"{NAME}\" >= {from} AND {r}.\"{NAME}\" < {to}",
            from = self.concat(&[&p, h]),
            to = self.concat(&[&p, h, "'!'"]),
        )
    }

    /// The row `m` is one of the caller's liveness rows that lives, on
    /// this server.
    fn callers_live_liveness(&self, m: &str) -> String {
        format!(
            "{m}.\"{HOLDER_COL}\" = @H AND {range} AND {liveness} \
             AND {m}.\"{INCARNATION}\" = {MYSQL_INCARNATION} AND {m}.\"{EXPIRES_AT}\" > {now}",
            range = self.in_member_range(m, "@H"),
            liveness = self.is_liveness_row(m),
            now = self.now(),
        )
    }

    /// The caller's live liveness term (NULL without one): what the rows
    /// it takes are linked to.
    fn callers_term(&self) -> String {
        format!(
            "(SELECT MAX(\"m\".\"{EPOCH_COL}\") FROM {table} AS \"m\" WHERE {live})",
            table = self.qualified_table(),
            live = self.callers_live_liveness("\"m\""),
        )
    }

    /// The liveness row of the linked row `r` at its term, as the readers
    /// find it (`Builder::effective_expiry`): the row named the prefix and
    /// the holder id decides when there is one, a ranked one only when
    /// there is not. `l` is the candidate row.
    fn is_liveness_of(&self, l: &str, r: &str) -> String {
        let exact = self.concat(&[
            &format!("'{MEMBER_PREFIX}'"),
            &format!("{r}.\"{HOLDER_COL}\""),
        ]);
        format!(
            "{liveness} AND {l}.\"{HOLDER_COL}\" = {r}.\"{HOLDER_COL}\" \
             AND {l}.\"{EPOCH_COL}\" = {r}.\"{EXPIRES_AT}\" - {LINK_BASE} \
             AND ({l}.\"{NAME}\" = {exact} OR NOT EXISTS (SELECT 1 FROM {table} AS \"e\" WHERE \"e\".\"{NAME}\" = {exact}))",
            liveness = self.is_liveness_row(l),
            table = self.qualified_table(),
        )
    }

    /// The linked row `r`'s liveness is over for good: no liveness row at
    /// its term (gone, taken at a later epoch, or cleared by a kill).
    fn liveness_ended(&self, r: &str) -> String {
        format!(
            "NOT EXISTS (SELECT 1 FROM {table} AS \"l\" {BY_KEY} WHERE {range} AND {of})",
            table = self.qualified_table(),
            range = self.in_member_range("\"l\"", &format!("{r}.\"{HOLDER_COL}\"")),
            of = self.is_liveness_of("\"l\"", r),
        )
    }

    /// The row `r` as [`JUDGED`] lists it: its name, holder and link
    /// (hex, so no byte of a name can pass for a separator).
    fn judged_key(r: &str) -> String {
        format!("CONCAT(HEX({r}.\"{NAME}\"), ':', HEX({r}.\"{HOLDER_COL}\"), ':', {r}.\"{EXPIRES_AT}\")")
    }

    /// The row `t` may be taken by the caller: lapsed (a free row's
    /// expiry is its release), ours, reserved for our node, or linked to
    /// another holder's liveness that ended, as judged (still the row
    /// [`JUDGED`] lists: the same holder, the same link).
    fn takeable_by_liveness(&self, t: &str) -> String {
        format!(
            "({t}.\"{EXPIRES_AT}\" <= {now} OR {t}.\"{HOLDER_COL}\" = @H OR {t}.\"{HOLDER_COL}\" = {reserved} \
             OR ({linked} AND JSON_CONTAINS({JUDGED}, JSON_QUOTE({key}))))",
            now = self.now(),
            reserved = Self::mysql_reservation_of("@H"),
            linked = self.is_linked(t),
            key = Self::judged_key(t),
        )
    }

    /// `UPDATE <the batch's names> STRAIGHT_JOIN <table>`: the head of
    /// every step that writes the batch's own rows.
    fn update_batch_rows(&self) -> String {
        format!(
            "UPDATE {names} STRAIGHT_JOIN {table} {BY_KEY} ON {t}.\"{NAME}\" = \"j\".\"{NAME}\"",
            names = names(),
            table = self.qualified_table(),
            t = self.own(),
        )
    }

    /// The set's batch acquire by liveness, as `ModelDb::acquire_batch`
    /// by liveness takes, in steps:
    ///
    /// 1. *kill*, committed alone first ([`ReadOrder::AfterCommit`]):
    ///    each lapsed liveness of another holder that a row of the batch
    ///    is linked to is ended (its holder cleared); then, in one
    ///    transaction:
    /// 2. *judge*: the batch's linked rows whose liveness ended, read
    ///    without a lock into [`JUDGED`];
    /// 3. *mine*: the caller's live liveness rows are extended;
    /// 4. *adopt*: a row of another server incarnation gets no holder, an
    ///    adopted epoch and a ttl at least past its effective expiry (the
    ///    kill left such a row's liveness alone, as the model does);
    /// 5. *take*: every takeable row but the caller's own membership rows,
    ///    at the next epoch, linked to the caller's live term (plain
    ///    without one);
    /// 6. *insert*: every name without a row (a grace row, nobody's, while
    ///    the table's marker says the server changed);
    /// 7. the caller's own membership row of the batch: held, it keeps its
    ///    epoch and lives a ttl from now; otherwise taken as any row, plain
    ///    (after 5 and 6, which link to the term as it was before);
    /// 8. the read: `name, holder, epoch, expires_in` of every name,
    ///    locked, a linked row's expiry its liveness's.
    pub(super) fn mysql_liveness_acquire_batch(&self) -> Statement {
        let t = self.own();
        let table = self.qualified_table();
        let now = self.now();
        let sound = self.text_of(self.row_is_sound());
        let foreign = self.text_of(self.foreign().expect("MySQL rows have an incarnation"));
        let own_name = self.is_liveness_name(&format!("{t}.\"{NAME}\""), "@H");
        let term = self.callers_term();
        let mine = format!(
            "UPDATE {table} SET \"{EXPIRES_AT}\" = {now} + @T WHERE {live}",
            live = self.callers_live_liveness(&t),
        );
        // Every expression reads the row as it was: the expiry is set
        // first, and the others read their own column or nothing.
        let adopt = format!(
            "{head} SET {t}.\"{EXPIRES_AT}\" = GREATEST({eff}, {now} + @T), {t}.\"{EPOCH_COL}\" = {epoch}, \
             {t}.\"{HOLDER_COL}\" = NULL, {t}.\"{INCARNATION}\" = {MYSQL_INCARNATION} WHERE {foreign}",
            head = self.update_batch_rows(),
            eff = self.effective_expiry(&t),
            epoch = self.text_of(self.adopted_epoch()),
        );
        // One table, the membership rows' key range scanned: InnoDB reads
        // a row another transaction holds at its last committed version
        // (READ COMMITTED's semi-consistent read) and skips it when that
        // does not match, so a taker whose liveness was ended already, or
        // is held shared by another taker's take, waits for nothing. Joined
        // from the batch instead, the kill locked the batch's rows first
        // and then waited for the liveness row another taker's take held:
        // two takers deadlocked whenever their batches met (MariaDB counted
        // 14 deadlocks in one 10 x 10,000 takeover, and each rolled-back
        // acquire waited an interval).
        // The row `r` is not another server's (the model adopts those
        // and ends no liveness for them): this server's, or unsound.
        let here = format!(
            "(\"r\".\"{INCARNATION}\" <=> {MYSQL_INCARNATION} OR NOT (\"r\".\"{EPOCH_COL}\" IS NOT NULL \
             AND \"r\".\"{EPOCH_COL}\" >= 0 AND \"r\".\"{EXPIRES_AT}\" IS NOT NULL))"
        );
        let kill = format!(
            "UPDATE {table} AS \"k\" SET \"k\".\"{HOLDER_COL}\" = NULL, \"k\".\"{EXPIRES_AT}\" = {now} \
             WHERE {liveness} AND \"k\".\"{HOLDER_COL}\" <> @H AND \"k\".\"{EXPIRES_AT}\" <= {now} \
             AND EXISTS (SELECT 1 FROM {names} STRAIGHT_JOIN {table} AS \"r\" {BY_KEY} ON \"r\".\"{NAME}\" = \"j\".\"{NAME}\" \
             WHERE {linked} AND {here} AND {of})",
            liveness = self.is_liveness_row("\"k\""),
            names = names(),
            linked = self.is_linked("\"r\""),
            of = self.is_liveness_of("\"k\"", "\"r\""),
        );
        // Which linked rows of the batch have an ended liveness, judged in
        // a plain read, which locks nothing: an ended term never lives
        // again, so the judgment holds for as long as the row is the one
        // judged, which the takes check. Tested in the takes themselves,
        // it read the holders' liveness rows under a shared lock, and two
        // nodes, each holding its own liveness row (extended first),
        // deadlocked on each other's: 14 to 28 times in one takeover of 10
        // x 10,000 on MariaDB.
        let judge = format!(
            "SET {JUDGED} = (SELECT JSON_ARRAYAGG({key}) FROM {names} STRAIGHT_JOIN {table} AS \"r\" {BY_KEY} \
             ON \"r\".\"{NAME}\" = \"j\".\"{NAME}\" WHERE {linked} AND \"r\".\"{HOLDER_COL}\" IS NOT NULL AND {ended})",
            key = Self::judged_key("\"r\""),
            names = names(),
            linked = self.is_linked("\"r\""),
            ended = self.liveness_ended("\"r\""),
        );
        let take = format!(
            "{head} SET {t}.\"{HOLDER_COL}\" = @H, {t}.\"{EPOCH_COL}\" = {t}.\"{EPOCH_COL}\" + 1, \
             {t}.\"{EXPIRES_AT}\" = COALESCE({LINK_BASE} + {term}, {now} + @T), {t}.\"{INCARNATION}\" = {MYSQL_INCARNATION} \
             WHERE {sound} AND NOT {own_name} AND {takeable}",
            head = self.update_batch_rows(),
            takeable = self.takeable_by_liveness(&t),
        );
        let item = "CAST(\"j\".\"name\" AS BINARY)";
        let fresh_holder = self.mysql_fresh_holder("@H", Some(item));
        let insert = format!(
            "INSERT INTO {table} (\"{NAME}\", \"{HOLDER_COL}\", \"{EPOCH_COL}\", \"{EXPIRES_AT}\", \"{INCARNATION}\") \
             SELECT {item}, {fresh_holder}, {epoch}, \
             CASE WHEN ({fresh_holder}) IS NULL OR {own_item} THEN {now} + @T ELSE COALESCE({LINK_BASE} + {term}, {now} + @T) END, \
             {MYSQL_INCARNATION} FROM {names} ORDER BY {item} \
             ON DUPLICATE KEY UPDATE {t}.\"{NAME}\" = {t}.\"{NAME}\"",
            epoch = self.fresh_epoch_sql(),
            own_item = self.is_liveness_name(item, "@H"),
            names = names(),
        );
        // Whether the row lives on is read before the expiry is set.
        let keep_own = format!(
            "{head} SET {t}.\"{INCARNATION}\" = CASE WHEN {sound} THEN {MYSQL_INCARNATION} ELSE {t}.\"{INCARNATION}\" END, \
             {t}.\"{EXPIRES_AT}\" = {now} + @T WHERE {t}.\"{HOLDER_COL}\" = @H AND {own_name}",
            head = self.update_batch_rows(),
        );
        let take_own = format!(
            "{head} SET {t}.\"{HOLDER_COL}\" = @H, {t}.\"{EPOCH_COL}\" = {t}.\"{EPOCH_COL}\" + 1, \
             {t}.\"{EXPIRES_AT}\" = {now} + @T, {t}.\"{INCARNATION}\" = {MYSQL_INCARNATION} \
             WHERE {sound} AND {own_name} AND NOT ({t}.\"{HOLDER_COL}\" <=> @H) AND {takeable}",
            head = self.update_batch_rows(),
            takeable = self.takeable_by_liveness(&t),
        );
        let read = format!(
            "SELECT {t}.\"{NAME}\", {t}.\"{HOLDER_COL}\", {t}.\"{EPOCH_COL}\", {eff} - {now} \
             FROM {names} STRAIGHT_JOIN {table} {BY_KEY} ON {t}.\"{NAME}\" = \"j\".\"{NAME}\" FOR UPDATE",
            eff = self.effective_expiry(&t),
            names = names(),
        );
        let rest = chain(
            [judge, mine, adopt, take, insert, keep_own, take_own, read]
                .iter()
                .map(|step| fill(self.dialect, step))
                .collect(),
        );
        then(fill(self.dialect, &kill), rest, ReadOrder::AfterCommit)
    }

    /// The set's batch renew by liveness, as `ModelDb::renew_batch` by
    /// liveness renews, in steps:
    ///
    /// 1. the caller's liveness rows of the batch at their epochs, and any
    ///    live one, are extended (its lock held to the commit orders this
    ///    renewal against a taker's kill);
    /// 2. the plain rows of the batch held at their epochs are extended;
    /// 3. the read: `name, epoch, asked` of each row of the batch held at
    ///    its epoch on this server, plain (renewed by 1 or 2) or linked to
    ///    a liveness that lives (extended by 1): confirmed, not written.
    pub(super) fn mysql_liveness_renew_batch(&self) -> Statement {
        let t = self.own();
        let table = self.qualified_table();
        let now = self.now();
        let in_batch = format!(
            "({t}.\"{NAME}\", {t}.\"{EPOCH_COL}\") IN (SELECT \"q\".\"{NAME}\", \"q\".\"{EPOCH_COL}\" FROM {pairs})",
            pairs = pairs(),
        );
        let liveness = format!(
            "UPDATE {table} SET \"{EXPIRES_AT}\" = {now} + @T WHERE {t}.\"{HOLDER_COL}\" = @H AND {range} \
             AND {is_liveness} AND {t}.\"{INCARNATION}\" = {MYSQL_INCARNATION} \
             AND ({t}.\"{EXPIRES_AT}\" > {now} OR {in_batch})",
            range = self.in_member_range(&t, "@H"),
            is_liveness = self.is_liveness_row(&t),
        );
        let plain = format!(
            "UPDATE {pairs} STRAIGHT_JOIN {table} {BY_KEY} ON {t}.\"{NAME}\" = \"q\".\"{NAME}\" \
             AND {t}.\"{EPOCH_COL}\" = \"q\".\"{EPOCH_COL}\" SET {t}.\"{EXPIRES_AT}\" = {now} + @T \
             WHERE {t}.\"{HOLDER_COL}\" = @H AND {t}.\"{INCARNATION}\" = {MYSQL_INCARNATION} \
             AND {t}.\"{EXPIRES_AT}\" < {LINK_BASE} AND NOT {own_name}",
            pairs = pairs(),
            own_name = self.is_liveness_name(&format!("{t}.\"{NAME}\""), "@H"),
        );
        let read = format!(
            "SELECT \"r\".\"{NAME}\", \"r\".\"{EPOCH_COL}\", {asked} FROM {pairs} \
             STRAIGHT_JOIN {table} AS \"r\" {BY_KEY} ON \"r\".\"{NAME}\" = \"q\".\"{NAME}\" \
             AND \"r\".\"{EPOCH_COL}\" = \"q\".\"{EPOCH_COL}\" \
             WHERE \"r\".\"{HOLDER_COL}\" = @H AND \"r\".\"{INCARNATION}\" = {MYSQL_INCARNATION} \
             AND (NOT {linked} OR {eff} > {now})",
            asked = self.asked_for("\"r\""),
            pairs = pairs(),
            linked = self.is_linked("\"r\""),
            eff = self.effective_expiry("\"r\""),
        );
        chain(
            [liveness, plain, read]
                .iter()
                .map(|step| fill(self.dialect, step))
                .collect(),
        )
    }
}
