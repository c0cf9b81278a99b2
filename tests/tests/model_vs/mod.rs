//! Shared by `model_vs_sqlite`, `model_vs_postgres` and `model_vs_mysql`: one operation
//! sequence runs on [`ModelDb`] and on a real database executing the real
//! [`Statements`] with bound parameters; both sides' rows go through the
//! same decoders and the decoded outcomes must agree.
//!
//! Time: the model's clock is a number the test moves; the real database's
//! clock is its own. "Advance time by Δ" moves the model's clock by Δ and
//! shifts every real `expires_at` back by Δ, which is the same thing as far
//! as the statements can tell. Real time also passes while a case runs, so
//! every time the model can see (the ttl, each Δ) is a multiple of
//! [`STEP_MS`]: as long as a case runs for less than a step of real time,
//! real and model agree on every "expired yet?" question, and a real
//! `expires_in` is at most the model's and less than a step below it.
//!
//! A MySQL statement that writes and reports carries a read-back
//! ([`picolease_core::sql::ReadBack`]); [`run_with`] runs the pair in one
//! transaction, as a driver must, and never looks at the write's row count.
#![allow(dead_code)] // each test binary uses part of this module

pub mod batch;

use picolease_core::sim::ModelDb;
use picolease_core::sql::{
    Bindings, Cell, Dialect, LeaseRow, ReadOrder, Statement, Statements, Value, LINK_BASE,
};
use picolease_core::{Epoch, HolderId, LeaseName, Operation, Reply, RowError};
use proptest::prelude::*;

/// The contenders of the random sequences: two processes of node `web`
/// (the CLI's `node#incarnation` form, both matching a reservation for
/// `web`) and one library holder id (its own node).
pub const HOLDERS: [&str; 3] = ["web#00000a", "web#00000b", "node-c"];
/// How long a handover of the random sequences reserves the row: a whole
/// number of steps, shorter than the ttl.
pub const RESERVATION_MS: i64 = 3 * STEP_MS;
/// The leases of the random sequences (two, so a statement touching the
/// wrong row shows).
pub const LEASES: [&str; 2] = ["jobs", "reports"];
/// The granularity of model time (see the module docs).
pub const STEP_MS: i64 = 1_000;
/// The ttl of the random sequences: a whole number of steps.
pub const TTL_MS: i64 = 10 * STEP_MS;

/// A value to bind, owned (a [`Value`] borrows its bindings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bound {
    Text(String),
    Int(i64),
}

impl From<Value<'_>> for Bound {
    fn from(value: Value<'_>) -> Self {
        match value {
            Value::Text(s) => Bound::Text(s.to_string()),
            Value::Int(n) => Bound::Int(n),
        }
    }
}

/// Runs SQL on a real database, mapping its values to [`Cell`]s the way a
/// driver does. Database errors panic: a statement of the protocol that
/// fails on a sound table is itself a finding.
pub trait RealDb {
    /// The dialect the statements are rendered for.
    fn dialect(&self) -> Dialect;
    /// Runs statements without parameters or results.
    fn batch(&mut self, sql: &str);
    /// Runs one statement and returns its rows.
    fn query(&mut self, sql: &str, values: &[Bound]) -> Vec<Vec<Cell>>;
    /// Runs one statement and returns the number of rows it changed.
    fn execute(&mut self, sql: &str, values: &[Bound]) -> u64;
    /// Opens a read-write transaction (for a statement with a read-back).
    fn begin(&mut self) {
        self.batch(match self.dialect() {
            // SQLite's writer lock at once, as a driver takes it.
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            _ => "START TRANSACTION",
        });
    }
    /// Commits the transaction [`RealDb::begin`] opened.
    fn commit(&mut self) {
        self.batch("COMMIT");
    }
}

/// `name` quoted as an identifier of `dialect`: backticks on MySQL (which
/// reads `"…"` as a string unless `ANSI_QUOTES` is set), double quotes
/// elsewhere.
pub fn ident(dialect: Dialect, name: &str) -> String {
    match dialect {
        Dialect::Mysql => format!("`{name}`"),
        _ => format!("\"{name}\""),
    }
}

/// `table.column` as the statements of `dialect` write it.
pub fn qualified(dialect: Dialect, table: &str, column: &str) -> String {
    format!("{}.{}", ident(dialect, table), ident(dialect, column))
}

/// Runs a statement's SQL `write` with `values` and returns its rows; with
/// a read-back (`read`: when, its SQL, its values) runs both in one
/// transaction and returns the read's rows, the write's row count unread.
pub fn run_with<R: RealDb + ?Sized>(
    real: &mut R,
    write: &str,
    values: &[Bound],
    read: Option<(ReadOrder, &str, Vec<Bound>)>,
) -> Vec<Vec<Cell>> {
    let Some((order, read, read_values)) = read else {
        return real.query(write, values);
    };
    real.begin();
    let rows = match order {
        ReadOrder::AfterWrite => {
            real.execute(write, values);
            real.query(read, &read_values)
        }
        ReadOrder::BeforeWrite => {
            let rows = real.query(read, &read_values);
            real.execute(write, values);
            rows
        }
        ReadOrder::AfterCommit => panic!("a single-lease statement commits nothing first"),
    };
    real.commit();
    rows
}

/// Runs `statement` (and its read-back) as bound by [`Statement::bind`].
pub fn run_statement<R: RealDb + ?Sized>(
    real: &mut R,
    statement: &Statement,
    lease: &str,
    holder: &str,
    ttl_ms: i64,
    epoch: Option<Epoch>,
) -> Vec<Vec<Cell>> {
    let values = bind(statement, lease, holder, ttl_ms, epoch);
    let read = statement.read_back().map(|r| {
        (
            r.order(),
            r.statement().sql(),
            bind(r.statement(), lease, holder, ttl_ms, epoch),
        )
    });
    run_with(real, statement.sql(), &values, read)
}

/// Which epoch a renew, release or fence is conditioned on, relative to
/// the lease's current epoch (in the model).
#[derive(Clone, Copy, Debug)]
pub enum EpochPick {
    /// The current epoch.
    Current,
    /// Current plus `k` (stale when negative, from the future when positive).
    Offset(i8),
    /// A small absolute epoch.
    Raw(u8),
}

/// One step of a sequence.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    Acquire {
        who: usize,
        lease: usize,
    },
    Renew {
        who: usize,
        lease: usize,
        epoch: EpochPick,
    },
    Release {
        who: usize,
        lease: usize,
        epoch: EpochPick,
    },
    ForceRelease {
        lease: usize,
    },
    /// A planned handover by `who` to the node of `to`.
    HandOver {
        who: usize,
        lease: usize,
        epoch: EpochPick,
        to: usize,
    },
    /// An operator's request that a term be handed over to the node of
    /// `to` (`None`: anyone); read back by the next renewals.
    RequestHandOver {
        lease: usize,
        epoch: EpochPick,
        to: Option<usize>,
    },
    /// The operator withdraws the request naming term `epoch`.
    WithdrawHandOver {
        lease: usize,
        epoch: EpochPick,
    },
    /// `who` announces itself as a candidate with `priority` (DESIGN §3
    /// "Preferred holders"); read back by the next renewals.
    Announce {
        who: usize,
        lease: usize,
        priority: u8,
    },
    /// A write through the fence into the application's own table.
    Fence {
        who: usize,
        lease: usize,
        epoch: EpochPick,
    },
    /// Advance time by `steps · STEP_MS`.
    Advance {
        steps: u8,
    },
}

fn epoch_pick() -> impl Strategy<Value = EpochPick> {
    prop_oneof![
        3 => Just(EpochPick::Current),
        2 => (-2i8..=1).prop_map(EpochPick::Offset),
        1 => (0u8..6).prop_map(EpochPick::Raw),
    ]
}

/// A random operation: mostly acquires, renews and time steps.
pub fn op() -> impl Strategy<Value = Op> {
    let who = 0..HOLDERS.len();
    let lease = prop_oneof![4 => Just(0usize), 1 => Just(1usize)];
    prop_oneof![
        4 => (who.clone(), lease.clone()).prop_map(|(who, lease)| Op::Acquire { who, lease }),
        4 => (who.clone(), lease.clone(), epoch_pick())
            .prop_map(|(who, lease, epoch)| Op::Renew { who, lease, epoch }),
        2 => (who.clone(), lease.clone(), epoch_pick())
            .prop_map(|(who, lease, epoch)| Op::Release { who, lease, epoch }),
        1 => lease.clone().prop_map(|lease| Op::ForceRelease { lease }),
        2 => (who.clone(), lease.clone(), epoch_pick(), who.clone())
            .prop_map(|(who, lease, epoch, to)| Op::HandOver { who, lease, epoch, to }),
        1 => (lease.clone(), epoch_pick(), prop::option::of(who.clone()))
            .prop_map(|(lease, epoch, to)| Op::RequestHandOver { lease, epoch, to }),
        1 => (lease.clone(), epoch_pick())
            .prop_map(|(lease, epoch)| Op::WithdrawHandOver { lease, epoch }),
        2 => (who.clone(), lease.clone(), 0u8..3)
            .prop_map(|(who, lease, priority)| Op::Announce { who, lease, priority }),
        2 => (who, lease, epoch_pick()).prop_map(|(who, lease, epoch)| Op::Fence { who, lease, epoch }),
        // 0..=12 steps: often a little, sometimes past the ttl of 10 steps.
        4 => (0u8..=12).prop_map(|steps| Op::Advance { steps }),
    ]
}

/// A random sequence of up to `max` operations.
pub fn ops(max: usize) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..=max)
}

/// A statement as executed: the real text (or a deliberately broken copy,
/// to check that the comparison notices) and the parameters it binds.
#[derive(Clone, Debug)]
pub struct Prepared {
    statement: Statement,
    sql: String,
    /// Parameter positions removed together with the SQL that used them.
    dropped: Vec<usize>,
    /// MySQL: the read-back, run in the same transaction, and when.
    read: Option<(ReadOrder, Box<Prepared>)>,
}

impl Prepared {
    fn new(statement: &Statement) -> Self {
        Prepared {
            statement: statement.clone(),
            sql: statement.sql().to_string(),
            dropped: Vec::new(),
            read: statement
                .read_back()
                .map(|r| (r.order(), Box::new(Prepared::new(r.statement())))),
        }
    }

    /// Runs it (with its read-back, in one transaction) on `real`.
    pub fn run<R: RealDb + ?Sized>(
        &self,
        real: &mut R,
        holder: &str,
        lease: &str,
        ttl_ms: i64,
        epoch: Option<Epoch>,
    ) -> Vec<Vec<Cell>> {
        self.run_to(real, holder, lease, ttl_ms, epoch, "")
    }

    /// [`Prepared::run`] with a handover's successor (`Param::Successor`;
    /// the reservation is [`RESERVATION_MS`]).
    pub fn run_to<R: RealDb + ?Sized>(
        &self,
        real: &mut R,
        holder: &str,
        lease: &str,
        ttl_ms: i64,
        epoch: Option<Epoch>,
        successor: &str,
    ) -> Vec<Vec<Cell>> {
        let values = self.values_to(holder, lease, ttl_ms, epoch, successor);
        let read = self.read.as_ref().map(|(order, read)| {
            (
                *order,
                read.sql(),
                read.values_to(holder, lease, ttl_ms, epoch, successor),
            )
        });
        run_with(real, &self.sql, &values, read)
    }

    /// A candidate's announcement (`Param::Candidacy`; it lives
    /// [`RESERVATION_MS`]); returns no rows.
    pub fn run_announce<R: RealDb + ?Sized>(
        &self,
        real: &mut R,
        lease: &str,
        candidacy: &str,
    ) -> Vec<Vec<Cell>> {
        let values = self.values_with(
            &Bindings {
                lease,
                candidacy,
                reservation_millis: RESERVATION_MS,
                ..Bindings::default()
            },
            None,
        );
        run_with(real, &self.sql, &values, None)
    }

    /// The SQL text executed.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The values bound, from [`Statement::bind`].
    pub fn values(
        &self,
        holder: &str,
        lease: &str,
        ttl_ms: i64,
        epoch: Option<Epoch>,
    ) -> Vec<Bound> {
        self.values_to(holder, lease, ttl_ms, epoch, "")
    }

    /// [`Prepared::values`] with a handover's successor.
    pub fn values_to(
        &self,
        holder: &str,
        lease: &str,
        ttl_ms: i64,
        epoch: Option<Epoch>,
        successor: &str,
    ) -> Vec<Bound> {
        let b = Bindings {
            lease,
            holder,
            ttl_millis: ttl_ms,
            successor,
            reservation_millis: RESERVATION_MS,
            candidacy: "",
        };
        self.values_with(&b, epoch)
    }

    /// The values of `bindings`, less any placeholder a mutant dropped.
    fn values_with(&self, b: &Bindings<'_>, epoch: Option<Epoch>) -> Vec<Bound> {
        self.statement
            .bind(b, epoch)
            .enumerate()
            .filter(|(i, _)| !self.dropped.contains(i))
            .map(|(_, v)| Bound::from(v))
            .collect()
    }

    /// A mutant: removes `text` (which must occur exactly once) from the
    /// SQL, and with it the placeholder it holds, if `drops_param`. On
    /// PostgreSQL the placeholders after it are renumbered. A read-back
    /// holding the same text loses it too: the mutant is of the operation.
    pub fn mutate(&mut self, text: &str, drops_param: bool) {
        assert_eq!(
            self.sql.matches(text).count(),
            1,
            "{text:?} must occur once in {}",
            self.sql
        );
        if let Some((_, read)) = &mut self.read {
            if read.sql.matches(text).count() == 1 {
                read.mutate(text, drops_param);
            }
        }
        let at = self.sql.find(text).expect("counted above");
        // The parameter's position: the placeholders before the text.
        let param = drops_param.then(|| {
            let before = &self.sql[..at];
            if self.sql.contains('$') {
                before
                    .match_indices('$')
                    .filter(|(i, _)| before[i + 1..].starts_with(|c: char| c.is_ascii_digit()))
                    .count()
            } else {
                before.matches('?').count()
            }
        });
        self.sql = self.sql.replacen(text, "", 1);
        if let Some(param) = param {
            self.dropped.push(param);
            if self.sql.contains('$') {
                let mut n = 1;
                let mut out = String::new();
                let mut rest = self.sql.as_str();
                while let Some(at) = rest.find('$') {
                    out.push_str(&rest[..at]);
                    let digits = rest[at + 1..]
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .count();
                    out.push_str(&format!("${n}"));
                    n += 1;
                    rest = &rest[at + 1 + digits..];
                }
                out.push_str(rest);
                self.sql = out;
            }
        }
    }
}

/// A deliberately broken copy of the statements.
pub type Mutant = fn(Sql) -> Sql;

/// The SQL mutants both comparisons must catch, by name.
pub const SQL_MUTANTS: [(&str, Mutant); 5] = [
    (
        "renew without the epoch condition",
        Sql::renew_without_epoch,
    ),
    (
        "acquire without the expiry condition",
        Sql::acquire_without_expiry,
    ),
    ("fence without the expiry check", Sql::fence_without_expiry),
    (
        "release without the holder condition",
        Sql::release_without_holder,
    ),
    (
        "force release keeping the epoch",
        Sql::force_release_keeping_epoch,
    ),
];

/// The SQL a comparison runs: the real statements, unless mutated.
#[derive(Clone, Debug)]
pub struct Sql {
    pub statements: Statements,
    pub acquire: Prepared,
    pub renew: Prepared,
    pub release: Prepared,
    pub hand_over: Prepared,
    pub request_hand_over: Prepared,
    pub withdraw_hand_over: Prepared,
    pub announce: Prepared,
    pub force_release: Prepared,
    pub status: Prepared,
    /// The fence, numbered to follow the application's own `id` parameter.
    pub fence: Prepared,
}

impl Sql {
    pub fn new(statements: &Statements) -> Self {
        Sql {
            statements: statements.clone(),
            acquire: Prepared::new(statements.acquire()),
            renew: Prepared::new(statements.renew()),
            release: Prepared::new(statements.release()),
            hand_over: Prepared::new(statements.hand_over()),
            request_hand_over: Prepared::new(statements.request_hand_over()),
            withdraw_hand_over: Prepared::new(statements.withdraw_hand_over()),
            announce: Prepared::new(statements.announce()),
            force_release: Prepared::new(statements.force_release()),
            status: Prepared::new(statements.status()),
            fence: Prepared::new(&statements.fence_from(2)),
        }
    }

    /// The renew without its epoch condition: a renew that succeeds for a
    /// stale holder of the same id (the mutant named in the core issue).
    pub fn renew_without_epoch(mut self) -> Self {
        let placeholder = match self.statements.dialect() {
            Dialect::Postgres => "$4",
            _ => "?",
        };
        let text = format!(" AND {} = {placeholder}", self.column("epoch"));
        self.renew.mutate(&text, true);
        self
    }

    /// `"table"."column"` as the dialect's statements quote it.
    fn column(&self, column: &str) -> String {
        qualified(
            self.statements.dialect(),
            self.statements.table().table(),
            column,
        )
    }

    /// The acquire without the "lapsed" condition: an expired lease is
    /// never taken over.
    pub fn acquire_without_expiry(mut self) -> Self {
        // `"t"."expires_at" <= (<db now>) OR `, in each of the three CASEs.
        let text = format!("{} <= (", self.column("expires_at"));
        assert_eq!(
            self.acquire.sql.matches(&text).count(),
            3,
            "{}",
            self.acquire.sql
        );
        while let Some(at) = self.acquire.sql.find(&text) {
            let open = at + text.len() - 1;
            let close = matching_paren(&self.acquire.sql, open);
            let or = &self.acquire.sql[close + 1..];
            assert!(or.starts_with(" OR "), "{}", self.acquire.sql);
            self.acquire
                .sql
                .replace_range(at..close + 1 + " OR ".len(), "");
        }
        self
    }

    /// The release without its holder condition: anyone can free the row
    /// at the right epoch.
    pub fn release_without_holder(mut self) -> Self {
        let placeholder = match self.statements.dialect() {
            Dialect::Postgres => "$2",
            _ => "?",
        };
        let text = format!(" AND {} = {placeholder}", self.column("holder"));
        self.release.mutate(&text, true);
        self
    }

    /// The force-release that frees the row but keeps the epoch, so the old
    /// holder's fence and renewals would still match a re-acquired row.
    pub fn force_release_keeping_epoch(mut self) -> Self {
        let dialect = self.statements.dialect();
        // Where the server has an incarnation, the bump is the `ELSE` of
        // the adoption's CASE (DESIGN §3 "Failover"): keep the epoch there.
        let bump = format!("ELSE {} + 1 END", self.column("epoch"));
        if self.force_release.sql.matches(&bump).count() == 1 {
            let kept = format!("ELSE {} END", self.column("epoch"));
            self.force_release.sql = self.force_release.sql.replacen(&bump, &kept, 1);
            return self;
        }
        let text = format!(
            "{} = {} + 1, ",
            ident(dialect, "epoch"),
            self.column("epoch")
        );
        self.force_release.mutate(&text, false);
        self
    }

    /// The fence without its expiry check.
    pub fn fence_without_expiry(mut self) -> Self {
        let start = format!(" AND {} > ", self.column("expires_at"));
        let at = self
            .fence
            .sql
            .find(&start)
            .expect("the fence checks expiry");
        // Remove up to the closing parenthesis of EXISTS.
        let end = self.fence.sql.rfind(')').expect("EXISTS(...)");
        self.fence.sql.replace_range(at..end, "");
        self
    }
}

/// The index of the parenthesis closing the one at `open`.
fn matching_paren(sql: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in sql.char_indices().skip_while(|&(i, _)| i < open) {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced parentheses in {sql}");
}

/// A decoded outcome of one operation, on one side.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Reply(Result<Reply, RowError>),
    ForceReleased(Result<Option<Epoch>, RowError>),
    Fenced(bool),
    Requested,
    Withdrawn,
    Announced,
    Advanced,
}

/// Whether two decoded outcomes agree: exactly, except that a `Held`
/// reply's time left may be smaller on the real side by less than a step.
pub fn agree(model: &Outcome, real: &Outcome) -> bool {
    match (model, real) {
        (
            Outcome::Reply(Ok(Reply::Held {
                holder: h1,
                epoch: e1,
                expires_in: x1,
            })),
            Outcome::Reply(Ok(Reply::Held {
                holder: h2,
                epoch: e2,
                expires_in: x2,
            })),
        ) => h1 == h2 && e1 == e2 && close(x1.as_millis() as i64, x2.as_millis() as i64),
        _ => model == real,
    }
}

/// How long a concurrent acquire may have waited on the row lock after
/// reading the database clock (see `check_concurrent_acquires`).
const LOCK_WAIT_SLACK_MS: u128 = 1_000;

fn close(model_ms: i64, real_ms: i64) -> bool {
    real_ms <= model_ms + 1 && model_ms - real_ms < STEP_MS
}

fn status_agree(model: &[LeaseRow], real: &[LeaseRow]) -> bool {
    model.len() == real.len()
        && model.iter().zip(real).all(|(m, r)| {
            m.name == r.name
                && m.holder == r.holder
                && m.epoch == r.epoch
                && match (m.expires_in_ms, r.expires_in_ms) {
                    (Some(a), Some(b)) => close(a, b),
                    (a, b) => a == b,
                }
        })
}

/// One comparison run: a fresh lease table and application table on the
/// real database, an empty model, and the SQL to run.
pub struct Comparison<'r, R: RealDb> {
    real: &'r mut R,
    sql: Sql,
    app_table: String,
    model: ModelDb,
    model_now: i64,
    /// Every operation and both outcomes so far, for the failure message.
    log: Vec<String>,
    /// By liveness: how often a batch acquire took a row linked to
    /// another holder's liveness, and a batch renewal confirmed a linked
    /// row (on the model's side), for a test to show it tried both.
    pub linked_taken: u64,
    pub linked_confirmed: u64,
}

impl<'r, R: RealDb> Comparison<'r, R> {
    /// Creates (fresh) the tables named by `sql` and `app_table`.
    pub fn new(real: &'r mut R, sql: Sql, app_table: &str) -> Self {
        let dialect = sql.statements.dialect();
        let table = ident(dialect, &sql.statements.table().to_string());
        let app = ident(dialect, app_table);
        real.batch(&format!(
            "DROP TABLE IF EXISTS {table}; DROP TABLE IF EXISTS {app}; {}; \
             CREATE TABLE {app} (id BIGINT PRIMARY KEY, writes BIGINT NOT NULL); \
             INSERT INTO {app} (id, writes) VALUES (1, 0)",
            sql.statements.create_table()
        ));
        Comparison {
            real,
            sql,
            app_table: app_table.to_string(),
            model: ModelDb::new(),
            model_now: 1_700_000_000_000,
            log: Vec::new(),
            linked_taken: 0,
            linked_confirmed: 0,
        }
    }

    /// The same comparison against `model` (empty): a by-liveness one,
    /// for the statements of `Statements::renewing_by_liveness`.
    pub fn with_model(mut self, model: ModelDb) -> Self {
        self.model = model;
        self
    }

    /// Drops the tables.
    pub fn drop_tables(self) {
        let dialect = self.sql.statements.dialect();
        self.real.batch(&format!(
            "DROP TABLE IF EXISTS {}; DROP TABLE IF EXISTS {}",
            ident(dialect, &self.sql.statements.table().to_string()),
            ident(dialect, &self.app_table)
        ));
    }

    fn epoch(&self, lease: &str, pick: EpochPick) -> Epoch {
        let current = self.model.row(lease).map_or(0, |row| row.epoch);
        Epoch::new(match pick {
            EpochPick::Current => current.max(0) as u64,
            EpochPick::Offset(k) => (current + i64::from(k)).max(0) as u64,
            EpochPick::Raw(n) => u64::from(n),
        })
    }

    /// `holder` hands `lease` over at `epoch` to the node of holder
    /// `HOLDERS[to]`, on both sides; both replies, decoded.
    pub fn hand_over_both(
        &mut self,
        holder: &str,
        lease: &str,
        epoch: Epoch,
        to: usize,
        ttl_ms: i64,
    ) -> (Result<Reply, RowError>, Result<Reply, RowError>) {
        let s = self.sql.statements.clone();
        let me = HolderId::new(holder).unwrap();
        let successor = HolderId::new(HOLDERS[to]).unwrap().reservation();
        let operation = Operation::HandOver { epoch };
        let now = self.model_now;
        let model = self
            .model
            .hand_over(lease, holder, epoch, &successor, RESERVATION_MS, now);
        let real =
            self.sql
                .hand_over
                .run_to(self.real, holder, lease, ttl_ms, Some(epoch), &successor);
        (
            s.decode_reply(operation, &me, &model),
            s.decode_reply(operation, &me, &real),
        )
    }

    /// An operator asks the holder of `lease` at `epoch` to hand it to the
    /// node of `HOLDERS[to]` (`None`: to the best candidate), on both
    /// sides; the request returns no rows.
    pub fn request_hand_over_both(
        &mut self,
        lease: &str,
        epoch: Epoch,
        to: Option<usize>,
        ttl_ms: i64,
    ) {
        let node = to.map_or(String::new(), |to| {
            HolderId::new(HOLDERS[to]).unwrap().node().to_string()
        });
        self.model
            .request_hand_over(lease, &node, epoch, self.model_now);
        let request = picolease_core::sql::hand_over_request_name(lease);
        let rows =
            self.sql
                .request_hand_over
                .run_to(self.real, "", &request, ttl_ms, Some(epoch), &node);
        assert!(rows.is_empty(), "the request returns no rows: {rows:?}");
    }

    /// Runs `op` on both sides with the given ttl; returns both outcomes.
    pub fn step(&mut self, op: Op, ttl_ms: i64) -> (Outcome, Outcome) {
        let s = self.sql.statements.clone();
        let now = self.model_now;
        let (model, real) = match op {
            Op::Acquire { who, lease } => {
                let (holder, lease) = (HOLDERS[who], LEASES[lease]);
                let me = HolderId::new(holder).unwrap();
                let model = self.model.acquire(lease, holder, ttl_ms, now);
                let real = self.sql.acquire.run(self.real, holder, lease, ttl_ms, None);
                (
                    Outcome::Reply(s.decode_reply(Operation::Acquire, &me, &model)),
                    Outcome::Reply(s.decode_reply(Operation::Acquire, &me, &real)),
                )
            }
            Op::Renew { who, lease, epoch } => {
                let epoch = self.epoch(LEASES[lease], epoch);
                let (holder, lease) = (HOLDERS[who], LEASES[lease]);
                let me = HolderId::new(holder).unwrap();
                let operation = Operation::Renew { epoch };
                let model = self.model.renew(lease, holder, epoch, ttl_ms, now);
                let real = self
                    .sql
                    .renew
                    .run(self.real, holder, lease, ttl_ms, Some(epoch));
                (
                    Outcome::Reply(s.decode_reply(operation, &me, &model)),
                    Outcome::Reply(s.decode_reply(operation, &me, &real)),
                )
            }
            Op::Release { who, lease, epoch } => {
                let epoch = self.epoch(LEASES[lease], epoch);
                let (holder, lease) = (HOLDERS[who], LEASES[lease]);
                let me = HolderId::new(holder).unwrap();
                let operation = Operation::Release { epoch };
                let model = self.model.release(lease, holder, epoch, now);
                let real = self
                    .sql
                    .release
                    .run(self.real, holder, lease, ttl_ms, Some(epoch));
                (
                    Outcome::Reply(s.decode_reply(operation, &me, &model)),
                    Outcome::Reply(s.decode_reply(operation, &me, &real)),
                )
            }
            Op::ForceRelease { lease } => {
                let lease = LEASES[lease];
                let model = self.model.force_release(lease, ttl_ms, now);
                let real = self
                    .sql
                    .force_release
                    .run(self.real, "", lease, ttl_ms, None);
                (
                    Outcome::ForceReleased(s.decode_force_release(&model)),
                    Outcome::ForceReleased(s.decode_force_release(&real)),
                )
            }
            Op::HandOver {
                who,
                lease,
                epoch,
                to,
            } => {
                let epoch = self.epoch(LEASES[lease], epoch);
                let (model, real) =
                    self.hand_over_both(HOLDERS[who], LEASES[lease], epoch, to, ttl_ms);
                (Outcome::Reply(model), Outcome::Reply(real))
            }
            Op::RequestHandOver { lease, epoch, to } => {
                let epoch = self.epoch(LEASES[lease], epoch);
                self.request_hand_over_both(LEASES[lease], epoch, to, ttl_ms);
                (Outcome::Requested, Outcome::Requested)
            }
            Op::WithdrawHandOver { lease, epoch } => {
                let epoch = self.epoch(LEASES[lease], epoch);
                let lease = LEASES[lease];
                self.model.withdraw_hand_over(lease, epoch);
                let request = picolease_core::sql::hand_over_request_name(lease);
                let rows = self.sql.withdraw_hand_over.run_to(
                    self.real,
                    "",
                    &request,
                    ttl_ms,
                    Some(epoch),
                    "",
                );
                assert!(rows.is_empty(), "the withdrawal returns no rows: {rows:?}");
                (Outcome::Withdrawn, Outcome::Withdrawn)
            }
            Op::Announce {
                who,
                lease,
                priority,
            } => {
                let lease = LEASES[lease];
                let candidate = picolease_core::Candidate {
                    holder: HolderId::new(HOLDERS[who]).unwrap(),
                    rank: picolease_core::Rank::new(u32::from(priority), Some("1.2.3")).unwrap(),
                };
                let text = candidate.announcement().unwrap();
                self.model.announce(lease, &text, RESERVATION_MS, now);
                let rows = self.sql.announce.run_announce(self.real, lease, &text);
                assert!(
                    rows.is_empty(),
                    "the announcement returns no rows: {rows:?}"
                );
                (Outcome::Announced, Outcome::Announced)
            }
            Op::Fence { who, lease, epoch } => {
                let epoch = self.epoch(LEASES[lease], epoch);
                let (holder, lease) = (HOLDERS[who], LEASES[lease]);
                let model = self.model.fence(lease, holder, epoch, now);
                let real = self.fenced_write(holder, lease, epoch);
                (Outcome::Fenced(model), Outcome::Fenced(real))
            }
            Op::Advance { steps } => {
                let delta = i64::from(steps) * STEP_MS;
                self.model_now += delta;
                let table = ident(s.dialect(), &s.table().to_string());
                // A linked row's expiry names its liveness's term, not a
                // time: it stays (DESIGN §9 "Renewal by liveness").
                let linked = match s.dialect() {
                    Dialect::Sqlite => {
                        format!("typeof(expires_at) = 'integer' AND expires_at >= {LINK_BASE}")
                    }
                    _ => format!("expires_at >= {LINK_BASE}"),
                };
                self.real.execute(
                    &format!(
                        "UPDATE {table} SET expires_at = \
                         CASE WHEN {linked} THEN expires_at ELSE expires_at - {delta} END"
                    ),
                    &[],
                );
                (Outcome::Advanced, Outcome::Advanced)
            }
        };
        self.log.push(format!(
            "{op:?}\n      model {model:?}\n      real  {real:?}"
        ));
        (model, real)
    }

    /// `UPDATE app SET writes = writes + 1 WHERE id = 1 AND <fence>` on the
    /// real database: true when it changed the row.
    pub fn fenced_write(&mut self, holder: &str, lease: &str, epoch: Epoch) -> bool {
        let id = match self.real.dialect() {
            Dialect::Postgres => "$1",
            _ => "?",
        };
        // `writes` grows on every fenced write, so the changed-row count
        // equals the matched-row count with or without CLIENT_FOUND_ROWS.
        let sql = format!(
            "UPDATE {} SET writes = writes + 1 WHERE id = {id} AND {}",
            ident(self.real.dialect(), &self.app_table),
            self.sql.fence.sql()
        );
        let mut values = vec![Bound::Int(1)];
        values.extend(self.sql.fence.values(holder, lease, 0, Some(epoch)));
        match self.real.execute(&sql, &values) {
            0 => false,
            1 => true,
            n => panic!("a fenced write changed {n} rows"),
        }
    }

    /// Both sides' status, decoded.
    pub fn status(
        &mut self,
    ) -> (
        Result<Vec<LeaseRow>, RowError>,
        Result<Vec<LeaseRow>, RowError>,
    ) {
        let s = &self.sql.statements;
        let model = s.decode_status(&self.model.status(self.model_now));
        let values = self.sql.status.values("", "", 0, None);
        let real = s.decode_status(&self.real.query(self.sql.status.sql(), &values));
        (model, real)
    }

    /// Runs the whole sequence; `Err` describes the first disagreement with
    /// the operations that led to it.
    pub fn run(&mut self, ops: &[Op]) -> Result<(), String> {
        for &op in ops {
            let (model, real) = self.step(op, TTL_MS);
            if !agree(&model, &real) {
                return Err(self.disagreement("outcomes differ"));
            }
            let (model, real) = self.status();
            let same = match (&model, &real) {
                (Ok(m), Ok(r)) => status_agree(m, r),
                (m, r) => m == r,
            };
            if !same {
                self.log.push(format!(
                    "status\n      model {model:?}\n      real  {real:?}"
                ));
                return Err(self.disagreement("status differs"));
            }
        }
        Ok(())
    }

    fn disagreement(&self, what: &str) -> String {
        format!(
            "model and {:?} disagree ({what}) after:\n  {}",
            self.real.dialect(),
            self.log.join("\n  ")
        )
    }

    /// The model, for tests that drive it directly.
    pub fn model(&mut self) -> (&mut ModelDb, &mut i64) {
        (&mut self.model, &mut self.model_now)
    }

    /// The SQL in use.
    pub fn sql(&self) -> &Sql {
        &self.sql
    }

    /// The real database.
    pub fn real(&mut self) -> &mut R {
        self.real
    }
}

/// The lease name and holder id as validated types.
pub fn names(lease: &str, holder: &str) -> (LeaseName, HolderId) {
    (
        LeaseName::new(lease).unwrap(),
        HolderId::new(holder).unwrap(),
    )
}

/// The values of an ad-hoc statement, as [`Statement::bind`] gives them.
pub fn bind(
    statement: &Statement,
    lease: &str,
    holder: &str,
    ttl_ms: i64,
    epoch: Option<Epoch>,
) -> Vec<Bound> {
    let b = Bindings {
        lease,
        holder,
        ttl_millis: ttl_ms,
        ..Default::default()
    };
    statement.bind(&b, epoch).map(Bound::from).collect()
}

/// Whether every contender of a concurrent acquire on a free row saw one
/// winner at epoch 1, as the model says: the winner's reply is
/// `Acquired(1)` and every other reply is `Held(winner, 1)`, equal (up to
/// the time left) to what the model answers when the same acquires run in
/// that order.
pub fn check_concurrent_acquires(
    statements: &Statements,
    ttl_ms: i64,
    replies: &[(String, Reply)],
) {
    let winners: Vec<&str> = replies
        .iter()
        .filter(|(_, reply)| matches!(reply, Reply::Acquired { .. }))
        .map(|(holder, _)| holder.as_str())
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one winner expected: {replies:#?}"
    );
    let winner = winners[0];
    let mut model = ModelDb::new();
    let now = 1_700_000_000_000;
    let lease = LEASES[0];
    let decode = |holder: &str, rows: Vec<Vec<Cell>>| {
        statements
            .decode_reply(Operation::Acquire, &HolderId::new(holder).unwrap(), &rows)
            .unwrap()
    };
    let first = decode(winner, model.acquire(lease, winner, ttl_ms, now));
    assert_eq!(
        first,
        Reply::Acquired {
            epoch: Epoch::new(1)
        }
    );
    for (holder, real) in replies {
        let expected = if holder == winner {
            first.clone()
        } else {
            decode(holder, model.acquire(lease, holder, ttl_ms, now))
        };
        // A loser's statement may have started (and read its clock) before
        // the winner's, then waited on the row lock: on PostgreSQL
        // `statement_timestamp()` is the start of the statement, so the time
        // left it reports can exceed the ttl by that wait. Holder and epoch
        // must agree exactly; the time left within the wait.
        let agrees = match (&expected, real) {
            (
                Reply::Held {
                    holder: h1,
                    epoch: e1,
                    expires_in: x1,
                },
                Reply::Held {
                    holder: h2,
                    epoch: e2,
                    expires_in: x2,
                },
            ) => {
                h1 == h2
                    && e1 == e2
                    && x2.as_millis() <= x1.as_millis() + LOCK_WAIT_SLACK_MS
                    && x1.as_millis() <= x2.as_millis() + STEP_MS as u128
            }
            _ => agree(
                &Outcome::Reply(Ok(expected.clone())),
                &Outcome::Reply(Ok(real.clone())),
            ),
        };
        assert!(agrees, "{holder}: model {expected:?}, real {real:?}");
    }
}

/// A lease with a short real ttl lapses on the database's own clock: a
/// second contender is refused while it runs and takes it at epoch 2 once
/// the database says it has expired; the first holder's renew and fenced
/// write are then refused. Each real outcome equals the model's, whose
/// clock is moved to the expiry. Polls the status (bounded), no blind
/// sleep. Returns false if the machine was too slow to observe the lease
/// before it lapsed (the caller retries).
pub fn check_real_expiry<R: RealDb>(c: &mut Comparison<'_, R>, lease: usize, ttl_ms: i64) -> bool {
    let lease_name = LEASES[lease];
    let started = std::time::Instant::now();
    let (model, real) = c.step(Op::Acquire { who: 0, lease }, ttl_ms);
    assert_eq!(model, real);
    assert_eq!(
        real,
        Outcome::Reply(Ok(Reply::Acquired {
            epoch: Epoch::new(1)
        }))
    );
    let (model, real) = c.step(Op::Acquire { who: 1, lease }, ttl_ms);
    if started.elapsed() >= std::time::Duration::from_millis(ttl_ms as u64) {
        return false;
    }
    let Outcome::Reply(Ok(Reply::Held {
        holder,
        epoch,
        expires_in,
    })) = &real
    else {
        panic!("before expiry the lease is held: real {real:?}");
    };
    assert_eq!(
        (holder.as_ref().map(|h| h.as_str()), epoch.get()),
        (Some(HOLDERS[0]), 1)
    );
    assert!(expires_in.as_millis() as i64 <= ttl_ms);
    assert!(agree(&model, &real), "model {model:?}, real {real:?}");

    // Wait until the database itself reports the lease lapsed.
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (_, real) = c.status();
        let row = real
            .unwrap()
            .into_iter()
            .find(|row| row.name == lease_name)
            .expect("the row exists");
        if row.expires_in_ms.is_some_and(|ms| ms <= 0) {
            break;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "the lease never lapsed: {row:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    // The model's clock reaches the expiry too.
    *c.model().1 += ttl_ms;

    // The successor takes it with a long ttl, so the checks below do not
    // race its own expiry.
    let (model, real) = c.step(Op::Acquire { who: 1, lease }, 60_000);
    assert_eq!(model, real);
    assert_eq!(
        real,
        Outcome::Reply(Ok(Reply::Acquired {
            epoch: Epoch::new(2)
        }))
    );
    let stale = EpochPick::Offset(-1);
    for op in [
        Op::Renew {
            who: 0,
            lease,
            epoch: stale,
        },
        Op::Fence {
            who: 0,
            lease,
            epoch: stale,
        },
        Op::Release {
            who: 0,
            lease,
            epoch: stale,
        },
        Op::Fence {
            who: 1,
            lease,
            epoch: EpochPick::Current,
        },
    ] {
        let (model, real) = c.step(op, 60_000);
        assert_eq!(model, real, "{op:?}");
    }
    let (_, real) = c.step(
        Op::Fence {
            who: 1,
            lease,
            epoch: EpochPick::Current,
        },
        60_000,
    );
    assert_eq!(real, Outcome::Fenced(true), "the new holder's fence holds");
    true
}

/// A planned handover, step by step, with the outcome every step must
/// have on the model and on the real database (DESIGN §3 "Planned
/// handover"): a reservation keeps others out, lets any process of the
/// named node in at the next epoch, fences the old holder out, and lapses
/// to anyone; an operator's request reaches the holder's next renewal,
/// only for the term it names.
pub fn check_hand_over_script<R: RealDb>(c: &mut Comparison<'_, R>) {
    let lease = 0;
    let acquired = |e| {
        Outcome::Reply(Ok(Reply::Acquired {
            epoch: Epoch::new(e),
        }))
    };
    let accepted = Outcome::Reply(Ok(Reply::Accepted));
    let current = EpochPick::Current;
    let reserved_web = Outcome::Reply(Ok(Reply::Held {
        holder: Some(HolderId::reserved_for("web").unwrap()),
        epoch: Epoch::new(1),
        expires_in: std::time::Duration::from_millis(RESERVATION_MS as u64),
    }));
    let asked = |node: Option<&str>| {
        Outcome::Reply(Ok(Reply::HandOverAsked {
            to: node.map(|n| HolderId::reserved_for(n).unwrap()),
        }))
    };
    let script = [
        (Op::Acquire { who: 2, lease }, acquired(1)),
        (
            Op::HandOver {
                who: 2,
                lease,
                epoch: current,
                to: 0,
            },
            accepted.clone(),
        ),
        // Reserved for `web`: the old holder waits like anyone else…
        (Op::Acquire { who: 2, lease }, reserved_web),
        // …and either process of `web` takes it at once, at the next epoch.
        (Op::Acquire { who: 1, lease }, acquired(2)),
        (
            Op::Fence {
                who: 1,
                lease,
                epoch: current,
            },
            Outcome::Fenced(true),
        ),
        (
            Op::Fence {
                who: 2,
                lease,
                epoch: EpochPick::Raw(1),
            },
            Outcome::Fenced(false),
        ),
        (
            Op::RequestHandOver {
                lease,
                epoch: current,
                to: Some(2),
            },
            Outcome::Requested,
        ),
        (
            Op::Renew {
                who: 1,
                lease,
                epoch: current,
            },
            asked(Some("node-c")),
        ),
        (
            Op::RequestHandOver {
                lease,
                epoch: current,
                to: None,
            },
            Outcome::Requested,
        ),
        (
            Op::Renew {
                who: 1,
                lease,
                epoch: current,
            },
            asked(None),
        ),
        // Withdrawing another term's request leaves this one; withdrawing
        // this one ends it.
        (
            Op::WithdrawHandOver {
                lease,
                epoch: EpochPick::Offset(-1),
            },
            Outcome::Withdrawn,
        ),
        (
            Op::Renew {
                who: 1,
                lease,
                epoch: current,
            },
            asked(None),
        ),
        (
            Op::WithdrawHandOver {
                lease,
                epoch: current,
            },
            Outcome::Withdrawn,
        ),
        (
            Op::Renew {
                who: 1,
                lease,
                epoch: current,
            },
            accepted.clone(),
        ),
        // A request for another term is no request.
        (
            Op::RequestHandOver {
                lease,
                epoch: EpochPick::Offset(-1),
                to: None,
            },
            Outcome::Requested,
        ),
        (
            Op::Renew {
                who: 1,
                lease,
                epoch: current,
            },
            accepted.clone(),
        ),
        (
            Op::HandOver {
                who: 1,
                lease,
                epoch: current,
                to: 2,
            },
            accepted,
        ),
        (
            Op::Fence {
                who: 1,
                lease,
                epoch: current,
            },
            Outcome::Fenced(false),
        ),
        (
            Op::Acquire { who: 0, lease },
            Outcome::Reply(Ok(Reply::Held {
                holder: Some(HolderId::reserved_for("node-c").unwrap()),
                epoch: Epoch::new(2),
                expires_in: std::time::Duration::from_millis(RESERVATION_MS as u64),
            })),
        ),
        // The reservation lapses: anyone may take the row.
        (Op::Advance { steps: 3 }, Outcome::Advanced),
        (Op::Acquire { who: 0, lease }, acquired(3)),
    ];
    for (op, expected) in script {
        let (model, real) = c.step(op, TTL_MS);
        assert!(
            agree(&expected, &model),
            "{op:?}: model {model:?}, expected {expected:?}"
        );
        assert!(
            agree(&model, &real),
            "{}",
            c.disagreement("outcomes differ")
        );
        let (model, real) = c.status();
        let same = match (&model, &real) {
            (Ok(m), Ok(r)) => status_agree(m, r),
            (m, r) => m == r,
        };
        assert!(same, "status after {op:?}: model {model:?}, real {real:?}");
    }
}
