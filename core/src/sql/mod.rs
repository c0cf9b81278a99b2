//! The statements the protocol relies on, built once with sea-query and
//! rendered per dialect (DESIGN §3), and the decoding of their results.
//!
//! The SQL text is part of the protocol: the state machine's safety rests on
//! what these statements do atomically, so they live beside it. Drivers only
//! prepare [`Statement::sql`], bind [`Statement::bind`] and hand the rows
//! back as [`Cell`]s for [`Statements::decode_reply`] to interpret.
//!
//! All time arithmetic happens inside the statements on the database's own
//! clock, as integer milliseconds since the Unix epoch: no node ever compares
//! its clock with another's.

mod batch;
mod build;
mod candidates;
mod decode;
mod failover;
mod first_row;
mod handover;
mod liveness;
mod liveness_mysql;
mod mysql;

// A replay's timeline lines (`check::timeline`, feature `sim`).
#[cfg(feature = "sim")]
pub(crate) use batch::push_json_string;
pub use batch::{batch_names, batch_pairs};
pub use candidates::{preferred_candidate_name, PREFERRED_PREFIX};
pub use decode::{Cell, LeaseRow};
pub use failover::{adopted_epoch, ADOPTION_EPOCH_SHIFT};
pub use first_row::TABLE_MARKER;
pub use handover::{hand_over_request_name, term_to_hand_over, HANDOVER_PREFIX};
pub use liveness::LINK_BASE;

use crate::error::RowError;
use crate::names::{Epoch, HolderId, LeaseName, TableName};
use crate::protocol::{Operation, Reply};

/// The reserved name prefix of membership rows: a node's membership is the
/// lease named `picolease.member:<holder id>` (followed by its rank, if it
/// has one: [`member_row_name`]), acquired, renewed and released like any
/// lease (by the same batch statements), and reported by
/// [`Statements::survey`] while live.
pub const MEMBER_PREFIX: &str = "picolease.member:";

pub use crate::set::{member_row_name, read_member_row, unhealthy_row_name, MemberRow};

/// PostgreSQL: what a driver runs on each new direct connection so that
/// the **server** gives up on a silently dropped client within 8 s (TCP
/// keepalives after 5 s idle, every second, 3 probes; unacknowledged data
/// for 8 s), as the client's own socket options do on its side. These
/// settings are the session's own (any role may set them); without them
/// a backend whose client vanished behind a partition stays until the
/// server's defaults notice (two hours on Linux).
/// `tcp_user_timeout` is PostgreSQL 12's; an older server keeps the rest.
pub const POSTGRES_SESSION_KEEPALIVES: &str = "DO $picolease$ BEGIN \
     PERFORM set_config('tcp_keepalives_idle', '5', false); \
     PERFORM set_config('tcp_keepalives_interval', '1', false); \
     PERFORM set_config('tcp_keepalives_count', '3', false); \
     BEGIN PERFORM set_config('tcp_user_timeout', '8000', false); \
     EXCEPTION WHEN undefined_object THEN NULL; END; END $picolease$";

/// The SQL dialects the statements are rendered for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// SQLite 3.35+ (RETURNING and upsert), bundled or system.
    Sqlite,
    /// PostgreSQL 9.5+ (ON CONFLICT).
    Postgres,
    /// MySQL 8.0+ and MariaDB 10.6+ on InnoDB (ON DUPLICATE KEY UPDATE,
    /// JSON_TABLE; no RETURNING, so a statement that writes and reports
    /// carries a [`ReadBack`] to run in the same transaction; DESIGN §3).
    Mysql,
}

/// What a placeholder of a statement stands for, in order of appearance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Param {
    /// The lease name (text).
    Lease,
    /// The holder id (text).
    Holder,
    /// The epoch the statement is conditioned on (`i64`).
    Epoch,
    /// The ttl in milliseconds (`i64`).
    TtlMillis,
    /// The batch of a batch statement: a JSON array, bound as text
    /// ([`batch_names`], [`batch_pairs`]).
    Batch,
    /// The survey's staleness threshold in milliseconds (`i64`): a lease
    /// expiring sooner than that is reported as about to be free.
    StaleMillis,
    /// The reservation a handover writes, `<node>#` (text); in an
    /// operator's request, the node asked for (`''`: anyone).
    Successor,
    /// How long a handover's reservation lasts, in milliseconds (`i64`,
    /// `Config::reservation`); also how long a candidate's announcement
    /// lives.
    ReservationMillis,
    /// A candidate's announcement (text, `Candidate::announcement`,
    /// DESIGN §3 "Preferred holders").
    Candidacy,
}

/// A value bound to a placeholder: text or a 64-bit integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    /// Bound as text.
    Text(&'a str),
    /// Bound as a 64-bit integer.
    Int(i64),
}

/// The values a contender binds: its lease, its id, its ttl, and for a
/// planned handover the reservations (DESIGN §3 "Planned handover").
#[derive(Clone, Copy, Debug, Default)]
pub struct Bindings<'a> {
    /// The lease name.
    pub lease: &'a str,
    /// The holder id.
    pub holder: &'a str,
    /// The ttl in milliseconds.
    pub ttl_millis: i64,
    /// The reservation a handover writes (`LeaseState::successor`); in an
    /// operator's request, the node asked for.
    pub successor: &'a str,
    /// How long a handover's reservation lasts, in milliseconds.
    pub reservation_millis: i64,
    /// This contender's announcement as a candidate
    /// (`LeaseState::announcement`; empty when it announces nothing).
    pub candidacy: &'a str,
}

/// The values a lease-set node binds to a batch statement.
#[derive(Clone, Copy, Debug)]
pub struct BatchBindings<'a> {
    /// The holder id.
    pub holder: &'a str,
    /// The ttl in milliseconds.
    pub ttl_millis: i64,
    /// The batch, a JSON array: [`batch_names`] for
    /// [`Statements::acquire_batch`], [`batch_pairs`] for
    /// [`Statements::renew_batch`] and [`Statements::release_batch`].
    pub batch: &'a str,
    /// The survey's staleness threshold in milliseconds.
    pub stale_millis: i64,
}

/// One rendered statement: SQL text with placeholders (`?` on SQLite and
/// MySQL, `$n` on PostgreSQL) and what each placeholder stands for.
///
/// On MySQL, which has no `RETURNING`, a statement that writes and must
/// report what it did comes with a [`ReadBack`] ([`Statement::read_back`]):
/// a locking `SELECT` that a driver runs with it **in one transaction**,
/// and whose rows (not the write's) are the statement's result. No
/// decision ever rests on the write's affected-row count, which MySQL
/// reports differently with and without `CLIENT_FOUND_ROWS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statement {
    sql: String,
    params: Vec<Param>,
    read_back: Option<Box<ReadBack>>,
}

/// MySQL: how a driver opens the transaction of a [`ReadBack`]
/// operation, in one round trip (a multi-statement text query): at READ
/// COMMITTED, as PostgreSQL runs the same statements. At MySQL's default
/// REPEATABLE READ, InnoDB reads the source rows of an `INSERT … SELECT`
/// under shared next-key locks, and the acquire's read of the table's
/// marker row (`TABLE_MARKER`) then held the gap a fresh row goes into:
/// sixteen contenders inserting one fresh row deadlocked over and over
/// (`tests/tests/model_vs_mysql.rs`). At READ COMMITTED that read is a
/// consistent read that locks nothing; every decision still rests on the
/// rows the write locks and the locking read-back. Binary logging with
/// `binlog_format = STATEMENT` refuses writes at READ COMMITTED (MySQL 8
/// and MariaDB default to ROW and MIXED; Galera requires ROW).
pub const MYSQL_BEGIN: &str = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION";

/// The read half of a MySQL operation (see [`Statement`]): a locking
/// `SELECT … FOR UPDATE` on the rows the write addresses. A driver runs
///
/// ```text
/// MYSQL_BEGIN (SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION)
///   ReadOrder::AfterWrite:  execute(write)  then  rows = query(read)
///   ReadOrder::BeforeWrite: rows = query(read)  then  execute(write)
/// COMMIT            (ROLLBACK on any error: the operation then failed)
/// ```
///
/// and decodes `rows`. The read locks the rows it reads (`FOR UPDATE`), so
/// in either order it sees exactly the rows the write changed or is about
/// to change, whatever the isolation level; the write's row count is never
/// looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadBack {
    statement: Statement,
    order: ReadOrder,
}

impl ReadBack {
    /// The `SELECT` to run beside the write; bind it like any statement.
    pub fn statement(&self) -> &Statement {
        &self.statement
    }

    /// Whether it runs before or after the write.
    pub fn order(&self) -> ReadOrder {
        self.order
    }
}

/// When a [`ReadBack`] runs, relative to its write (same transaction).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadOrder {
    /// After the write: the read reports the row as the write left it
    /// (acquire: who holds it now; renew, force release: the epoch).
    AfterWrite,
    /// Before the write: the read finds and locks the rows the write will
    /// change (release: once freed, a row no longer shows it was ours).
    BeforeWrite,
    /// After the write has committed, in a transaction of its own:
    /// MySQL's acquire by liveness ends a lapsed liveness (DESIGN §9 "Renewal by liveness") in
    /// a transaction of its own, so the takers of one crashed node's
    /// leases wait on its liveness row for that one statement each, not
    /// one after another for each other's whole acquire (on MariaDB the
    /// last of 9 takers of 1,000 leases took its share 2.8 s after the
    /// kill, past ttl + interval, with the kill inside the acquire's
    /// transaction). An ended liveness never lives again, so what a later
    /// transaction takes because of it is as safe as in the same one.
    AfterCommit,
}

impl Statement {
    /// The SQL text, to prepare once and reuse.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// What each placeholder stands for, in order.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// MySQL: the `SELECT` whose rows are this statement's result, to run
    /// in the same transaction ([`ReadBack`]). `None` on SQLite and
    /// PostgreSQL (the statement returns its rows itself), and for
    /// statements that only read.
    pub fn read_back(&self) -> Option<&ReadBack> {
        self.read_back.as_deref()
    }

    /// The statements a driver runs for this one, in the order it runs
    /// them (in one transaction when there are more than one), and the
    /// position of the one whose rows are the result. A statement without
    /// a [`ReadBack`] stands alone; one with a read-back runs it before or
    /// after itself ([`ReadOrder`]), and a read-back may have a read-back
    /// of its own: MySQL's batches renewing by liveness (DESIGN §9 "Renewal by liveness") write
    /// several times before they read, the acquire ending a lapsed
    /// liveness, taking and linking rows, each in a statement of its own.
    pub fn in_order(&self) -> (Vec<&Statement>, usize) {
        match self.read_back() {
            None => (vec![self], 0),
            Some(read) => {
                let (mut steps, reply) = read.statement.in_order();
                match read.order {
                    ReadOrder::AfterWrite | ReadOrder::AfterCommit => {
                        steps.insert(0, self);
                        (steps, reply + 1)
                    }
                    ReadOrder::BeforeWrite => {
                        steps.push(self);
                        (steps, reply)
                    }
                }
            }
        }
    }

    /// How many of the first steps of [`Statement::in_order`] run each in
    /// a transaction of its own, committed before the rest's begins
    /// ([`ReadOrder::AfterCommit`]); 0 for most statements.
    pub fn committed_first(&self) -> usize {
        match self.read_back() {
            Some(read) if read.order == ReadOrder::AfterCommit => {
                1 + read.statement.committed_first()
            }
            _ => 0,
        }
    }

    /// The same statement with its PostgreSQL placeholders numbered from
    /// `$first`, to follow a caller's own parameters (SQLite placeholders
    /// are positional `?`: the text is unchanged there).
    pub fn numbered_from(&self, first: usize) -> Statement {
        build::renumber(self, first)
    }

    /// The values to bind, in placeholder order. `epoch` is used by the
    /// statements conditioned on one (renew, release, fence); a statement
    /// that needs it and gets `None` binds `-1`, which matches no row.
    pub fn bind<'a>(
        &'a self,
        bindings: &'a Bindings<'a>,
        epoch: Option<Epoch>,
    ) -> impl Iterator<Item = Value<'a>> + 'a {
        self.params.iter().map(move |param| match param {
            Param::Lease => Value::Text(bindings.lease),
            Param::Holder => Value::Text(bindings.holder),
            Param::Epoch => Value::Int(epoch.map_or(-1, Epoch::to_i64)),
            Param::TtlMillis => Value::Int(bindings.ttl_millis),
            Param::Successor => Value::Text(bindings.successor),
            Param::ReservationMillis => Value::Int(bindings.reservation_millis),
            Param::Candidacy => Value::Text(bindings.candidacy),
            // No single-lease statement has these; bound harmlessly.
            Param::Batch => Value::Text("[]"),
            Param::StaleMillis => Value::Int(0),
        })
    }

    /// The values to bind to a batch statement, in placeholder order. The
    /// batch statements have no lease or epoch placeholder; should one
    /// appear it binds `""` and `-1`, which match no row.
    pub fn bind_batch<'a>(
        &'a self,
        bindings: &'a BatchBindings<'a>,
    ) -> impl Iterator<Item = Value<'a>> + 'a {
        self.params.iter().map(move |param| match param {
            Param::Lease => Value::Text(""),
            Param::Holder => Value::Text(bindings.holder),
            Param::Epoch => Value::Int(-1),
            Param::TtlMillis => Value::Int(bindings.ttl_millis),
            Param::Batch => Value::Text(bindings.batch),
            Param::StaleMillis => Value::Int(bindings.stale_millis),
            // No batch statement has these; bound harmlessly.
            Param::Successor | Param::Candidacy => Value::Text(""),
            Param::ReservationMillis => Value::Int(0),
        })
    }
}

/// Every statement of the protocol for one table and dialect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statements {
    dialect: Dialect,
    table: TableName,
    create_table: String,
    create_index: Option<String>,
    fence_index_check: Option<(String, String)>,
    acquire: Statement,
    renew: Statement,
    release: Statement,
    hand_over: Statement,
    announce: Statement,
    request_hand_over: Statement,
    withdraw_hand_over: Statement,
    force_release: Statement,
    after_failover: Statement,
    status: Statement,
    lease_row: Statement,
    fence: Statement,
    acquire_batch: Statement,
    renew_batch: Statement,
    release_batch: Statement,
    survey: Statement,
    /// Whether the set's batches renew by liveness
    /// ([`Statements::renewing_by_liveness`]).
    by_liveness: bool,
}

impl Statements {
    /// Renders every statement for `table` in `dialect`.
    pub fn new(dialect: Dialect, table: &TableName) -> Self {
        build::statements(dialect, table)
    }

    /// The same statements with a lease set's renewal by liveness (DESIGN
    /// §9 "Renewal by liveness"): the set's batch acquire links
    /// what it takes to the caller's membership row and its batch renewal
    /// writes that row alone, confirming linked rows by reading them; the
    /// survey and the fence read a linked row's expiry as its liveness's
    /// (the status and a lease's row always do).
    /// Everything else is unchanged.
    #[doc(hidden)]
    pub fn renewing_by_liveness(mut self) -> Self {
        let b = build::Builder {
            dialect: self.dialect,
            table: &self.table,
        };
        let (acquire_batch, renew_batch) = (b.liveness_acquire_batch(), b.liveness_renew_batch());
        let (survey, fence) = (b.liveness_survey(), b.liveness_fence());
        self.acquire_batch = acquire_batch;
        self.renew_batch = renew_batch;
        self.survey = survey;
        self.fence = fence;
        self.by_liveness = true;
        self
    }

    /// Whether these are [`Statements::renewing_by_liveness`]'s: a driver
    /// refuses a server that cannot run them (MySQL's error 1093, where
    /// MariaDB runs them).
    #[doc(hidden)]
    pub fn renews_by_liveness(&self) -> bool {
        self.by_liveness
    }

    /// The dialect rendered for.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The table the statements address.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// `CREATE TABLE IF NOT EXISTS` for the lease table (no parameters).
    /// On SQLite and PostgreSQL it is a batch of two statements (run it
    /// with the driver's batch call: one transaction on PostgreSQL): the
    /// second writes the table's marker row ([`TABLE_MARKER`]) when it is
    /// missing, so a lease whose first row a failover loses starts in a
    /// grace period on the new server (DESIGN §3 "Failover"); on MySQL
    /// [`Statements::create_index`] writes it, after the migration.
    /// On PostgreSQL run [`Statements::create_index`] after it. On MySQL
    /// the table is InnoDB, `name` and `holder` are `VARBINARY(255)` (byte
    /// comparison, no collation, no trailing-space padding: two names
    /// equal exactly when their bytes are) and the unique index on
    /// `(name, epoch)` is part of the statement.
    pub fn create_table(&self) -> &str {
        &self.create_table
    }

    /// PostgreSQL: creates the unique index `<table>_fence` on
    /// `(name, epoch)` if it is missing (no parameters; a `DO` block that
    /// looks in the catalog first, so on an existing index it takes no lock
    /// on the table). Run it after [`Statements::create_table`], on new and
    /// existing tables alike. `None` on SQLite, which needs no index.
    ///
    /// The index makes every statement that bumps the epoch (a takeover by
    /// [`Statements::acquire`], [`Statements::force_release`]) a *key*
    /// update, which takes `FOR UPDATE` on the row and so waits for every
    /// transaction holding the [`Statements::fence`]'s `FOR KEY SHARE`
    /// lock: a fenced write commits before the successor's term starts, or
    /// not at all. The table part of the name is at most 54 bytes, so the
    /// index name fits PostgreSQL's 63; it lives in the table's schema.
    ///
    /// Creating it when missing takes a SHARE lock on the table for the
    /// moment of the build (a small table: milliseconds), which waits for
    /// statements in progress on it. Two contenders creating it at once
    /// may see a duplicate error (42P07, 23505): the index exists then.
    ///
    /// On MySQL its unique index `<table>_fence` on `(name, epoch)` is
    /// declared inside [`Statements::create_table`] (MySQL 8 has no
    /// `CREATE INDEX IF NOT EXISTS`); this is the migration of an older
    /// table alone: the `incarnation` column added when missing, its rows
    /// stamped with the running server's `@@server_id` (several statements,
    /// one round trip), and the table's marker row ([`TABLE_MARKER`])
    /// written when it is missing.
    pub fn create_index(&self) -> Option<&str> {
        self.create_index.as_deref()
    }

    /// PostgreSQL: a parameterless query (simple protocol) that says
    /// whether the table has the fence's unique index on `(name, epoch)`
    /// (NULL: no table; true; false), and the `CREATE UNIQUE INDEX` that
    /// adds it. A driver that does not create the table itself checks it
    /// on connecting: without the index a fenced transaction does not
    /// hold a takeover back (DESIGN §4b). `None` on SQLite (no index
    /// needed) and MySQL (declared in its `CREATE TABLE`).
    pub fn fence_index_check(&self) -> Option<(&str, &str)> {
        self.fence_index_check
            .as_ref()
            .map(|(check, create)| (check.as_str(), create.as_str()))
    }

    /// `SELECT` the server incarnation the statements record in each row
    /// (DESIGN §3 "Failover"): PostgreSQL's postmaster start in
    /// microseconds, MySQL's `@@server_id`; for a driver to notice, on
    /// connecting, that the server changed (a restart or a failover).
    /// Parameterless, for the simple query protocol. `None` on SQLite,
    /// which records none.
    pub fn server_incarnation(&self) -> Option<String> {
        let builder = build::Builder {
            dialect: self.dialect,
            table: &self.table,
        };
        builder.incarnation_now().map(|now| format!("SELECT {now}"))
    }

    /// The upsert that takes the row when free, lapsed or already ours,
    /// bumping the epoch; it returns `holder, epoch, expires_in_ms` whether
    /// or not it took the row, so one round trip tells a follower who holds
    /// the lease and for how long. A row it inserts starts nobody's for a
    /// ttl while the table's marker row says the server changed
    /// ([`TABLE_MARKER`]; DESIGN §3 "Failover", "A lease's first row").
    pub fn acquire(&self) -> &Statement {
        &self.acquire
    }

    /// Extends our row at our epoch; returns one row if it matched.
    pub fn renew(&self) -> &Statement {
        &self.renew
    }

    /// Frees our row at our epoch (keeping the epoch; the next acquire bumps
    /// it); returns one row if it matched. On PostgreSQL it also notifies
    /// [`TableName::release_channel`] with the lease name, in the same
    /// statement.
    pub fn release(&self) -> &Statement {
        &self.release
    }

    /// A planned handover (DESIGN §3 "Planned handover"): the row, ours at
    /// our epoch, goes to the reservation bound as [`Param::Successor`]
    /// for [`Param::ReservationMillis`]; PostgreSQL notifies as for a
    /// release. Returns the epoch (one row), or nothing if the term was
    /// no longer ours.
    pub fn hand_over(&self) -> &Statement {
        &self.hand_over
    }

    /// A candidate announces itself (DESIGN §3 "Preferred holders"): the
    /// lease's preferred-candidate row ([`PREFERRED_PREFIX`]) takes the
    /// announcement bound as [`Param::Candidacy`] for
    /// [`Param::ReservationMillis`] if it lapsed or the announcement ranks
    /// at or above its own. Returns no rows.
    pub fn announce(&self) -> &Statement {
        &self.announce
    }

    /// An operator's request to hand a term over (`picolease handover`,
    /// DESIGN §3 "Planned handover"): upserts the request row. Bind
    /// [`Param::Lease`] to [`HANDOVER_PREFIX`] and the lease,
    /// [`Param::Successor`] to the node asked for (`''`: anyone) and
    /// [`Param::Epoch`] to the term to end. Returns no rows.
    pub fn request_hand_over(&self) -> &Statement {
        &self.request_hand_over
    }

    /// An operator's request withdrawn (`picolease handover`, once the
    /// term it named has ended, or when the holder did not act on it in
    /// time, so it cannot fire later): deletes the request row if it still
    /// names the term. Bind [`Param::Lease`] as for
    /// [`Statements::request_hand_over`] and [`Param::Epoch`] to the term.
    /// Returns no rows.
    pub fn withdraw_hand_over(&self) -> &Statement {
        &self.withdraw_hand_over
    }

    /// Administrative: frees the row whoever holds it and bumps the epoch,
    /// so the old holder's renewals and fenced writes are rejected. On
    /// PostgreSQL and MySQL a row from another server incarnation is adopted instead
    /// (DESIGN §3 "Failover"): nobody's for [`Param::TtlMillis`] more at
    /// least, at [`adopted_epoch`], since the lost term's holder may still
    /// run until its own deadline. Returns
    /// the new epoch (one row), or nothing if the lease does not exist or
    /// its row is malformed: a malformed row is never rewritten (read it
    /// with [`Statements::lease_row`] to report it).
    pub fn force_release(&self) -> &Statement {
        &self.force_release
    }

    /// The operators' statement after a failover the servers could not
    /// detect (DESIGN §3 "Failover"; `picolease release --all
    /// --after-failover`): every sound lease and membership row becomes
    /// nobody's, its epoch past anything issued ([`adopted_epoch`]), its
    /// expiry at least [`Param::TtlMillis`] away (a grace period), and on
    /// PostgreSQL it records the running server. Rows: `name, epoch` of
    /// each row it changed ([`Statements::decode_batch_names`] reads them).
    pub fn after_failover(&self) -> &Statement {
        &self.after_failover
    }

    /// Reads every row: `name, holder, epoch, expires_in_ms`, by name.
    pub fn status(&self) -> &Statement {
        &self.status
    }

    /// Reads one lease's row: `name, holder, epoch, expires_in_ms` (zero or
    /// one row; decode it with [`Statements::decode_status`]). Used to say
    /// why a forced release changed nothing: no such lease, or a malformed
    /// row that it left untouched.
    pub fn lease_row(&self) -> &Statement {
        &self.lease_row
    }

    /// The fence: a condition, evaluated by the database, that holds while
    /// the lease is held by this holder at this epoch and unexpired. AND it
    /// into your own `WHERE` so a stale leader's write changes nothing. Its
    /// placeholders are numbered from 1; on PostgreSQL use
    /// [`Statements::fence_from`] to number them after your own.
    ///
    /// A fenced write never becomes visible inside a successor's term, even
    /// when its transaction commits after the lease lapsed:
    ///
    /// - PostgreSQL: the condition reads the lease row `FOR KEY SHARE`,
    ///   which holds it until the transaction ends. With the unique index
    ///   on `(name, epoch)` ([`Statements::create_index`]), a statement
    ///   that bumps the epoch is a key update and waits for that lock, so
    ///   the successor's acquire (and a forced release) is ordered after
    ///   the fenced commit; the holder's own renew and release change no
    ///   key column (`FOR NO KEY UPDATE`) and do not wait. A follower's
    ///   acquire of a held lease waits too (the upsert locks the row
    ///   `FOR UPDATE` before deciding), so keep fenced transactions short.
    ///   `FOR SHARE` would be as safe but would block the leader's own
    ///   renewals. Row locks need `UPDATE` privilege on the lease table and
    ///   a read-write transaction.
    /// - SQLite: the text takes no lock; the database's single writer
    ///   orders a write transaction and a takeover already.
    /// - MySQL: the inner select ends in `LOCK IN SHARE MODE` (MariaDB
    ///   refuses `FOR SHARE`), a shared lock on the lease row held until
    ///   the transaction ends. Every write to the row takes an exclusive
    ///   lock and waits for it: the successor's acquire and a forced
    ///   release, but also (InnoDB has no `FOR KEY SHARE`) the holder's
    ///   own renew and release. Keep fenced transactions short: a renew
    ///   waits for them (DESIGN §3 bounds the wait).
    pub fn fence(&self) -> &Statement {
        &self.fence
    }

    /// The fence of `holder` on `lease` at `epoch` as a driver binds it:
    /// the condition's text and its placeholders' values, in order, each
    /// made a driver's own value by `value`. The one place the fence's
    /// bindings are made, for every driver's `Fence`.
    pub fn fence_bound<T>(
        &self,
        lease: &LeaseName,
        holder: &HolderId,
        epoch: Epoch,
        value: impl Fn(Value<'_>) -> T,
    ) -> (&str, Vec<T>) {
        let bindings = Bindings {
            lease: lease.as_str(),
            holder: holder.as_str(),
            ttl_millis: 0,
            ..Bindings::default()
        };
        let values = self.fence.bind(&bindings, Some(epoch)).map(value).collect();
        (self.fence.sql(), values)
    }

    /// The fence with PostgreSQL placeholders starting at `$first` (SQLite
    /// placeholders are positional `?`, so this is the same text there).
    pub fn fence_from(&self, first: usize) -> Statement {
        build::renumber(&self.fence, first)
    }

    /// The batch acquire: [`Statements::acquire`]'s upsert, with exactly its
    /// rule (take the row when sound and free, lapsed or already ours,
    /// bumping the epoch; else keep it), for every name of the batch
    /// ([`batch_names`]; distinct names). Returns `name, holder, epoch,
    /// expires_in_ms` for every name, taken or not, in no particular
    /// order; decode with [`Statements::decode_acquire_batch`].
    /// Params: holder, ttl, batch.
    ///
    /// On PostgreSQL the upsert locks the rows one by one in the batch's
    /// order, held ones included: list the names in one order on every
    /// node (sorted, say), so that two batch acquires never wait on each
    /// other in a cycle. Should statements still deadlock, PostgreSQL
    /// aborts one of them (SQLSTATE 40P01) and changes nothing it did:
    /// a failed round trip, never a wrong answer.
    pub fn acquire_batch(&self) -> &Statement {
        &self.acquire_batch
    }

    /// The batch renew: extends every `(name, epoch)` of the batch
    /// ([`batch_pairs`]) that we hold at that epoch, as
    /// [`Statements::renew`] does for one. Returns `name, epoch` of each
    /// renewed row; decode with [`Statements::decode_batch_names`]. A pair
    /// missing from the result was not renewed. Params: ttl, holder, batch.
    pub fn renew_batch(&self) -> &Statement {
        &self.renew_batch
    }

    /// The batch release: frees every `(name, epoch)` of the batch
    /// ([`batch_pairs`]) that we hold at that epoch, keeping the epoch, as
    /// [`Statements::release`] does for one. Returns `name, epoch` of each
    /// freed row; decode with [`Statements::decode_batch_names`]. On
    /// PostgreSQL it also notifies [`TableName::release_channel`] with each
    /// freed name, in the same statement. Params: holder, batch.
    pub fn release_batch(&self) -> &Statement {
        &self.release_batch
    }

    /// The survey of a lease-set node: `name, holder, epoch,
    /// expires_in_ms`, by name, of every live membership row (named
    /// [`MEMBER_PREFIX`]…, held and unexpired) and of every other row that
    /// is free or expires within the stale threshold (lapsed rows
    /// included). Decode with [`Statements::decode_survey`]. Params: stale.
    pub fn survey(&self) -> &Statement {
        &self.survey
    }

    /// The operation's statement.
    pub fn for_operation(&self, operation: Operation) -> &Statement {
        match operation {
            Operation::Acquire => &self.acquire,
            Operation::Renew { .. } => &self.renew,
            Operation::Release { .. } => &self.release,
            Operation::HandOver { .. } => &self.hand_over,
            Operation::Announce => &self.announce,
        }
    }

    /// A lease set's batch statement ([`crate::BatchKind`]), as
    /// [`Statements::for_operation`] is a single lease's.
    pub fn for_batch(&self, kind: crate::BatchKind) -> &Statement {
        match kind {
            crate::BatchKind::Acquire => &self.acquire_batch,
            crate::BatchKind::Renew => &self.renew_batch,
            crate::BatchKind::Release => &self.release_batch,
            crate::BatchKind::Survey => &self.survey,
            // One lease at a time, with the lone lease's statement.
            crate::BatchKind::HandOver => &self.hand_over,
        }
    }

    /// Interprets the rows of a batch as the set's reply, as
    /// [`Statements::decode_reply`] does a single lease's: an acquire's
    /// per-name outcomes, the names a renew or release matched (with the
    /// renewal's handover requests, if any), or the survey's rows. A
    /// hand-over is a single-row statement: decode it with
    /// [`Statements::decode_reply`] and answer
    /// [`LeaseSet::handle_row_reply`](crate::LeaseSet::handle_row_reply).
    pub fn decode_batch_reply(
        &self,
        kind: crate::BatchKind,
        me: &HolderId,
        rows: &[Vec<Cell>],
    ) -> Result<crate::BatchReply, RowError> {
        use crate::{BatchKind, BatchReply};
        Ok(match kind {
            BatchKind::Acquire => BatchReply::Acquired(self.decode_acquire_batch(me, rows)?),
            BatchKind::Renew => {
                let (renewed, asked) = batch::renewed(rows)?;
                if asked.is_empty() {
                    BatchReply::Matched(renewed)
                } else {
                    BatchReply::Renewed { renewed, asked }
                }
            }
            BatchKind::Release => BatchReply::Matched(
                self.decode_batch_names(rows)?
                    .into_iter()
                    .map(|(name, _)| name)
                    .collect(),
            ),
            BatchKind::Survey => BatchReply::Survey(self.decode_survey(rows)?),
            // Not a batch: its rows are the single statement's.
            BatchKind::HandOver => {
                return Err(RowError::RowCount {
                    statement: "hand over (a single-row statement: decode_reply)",
                    expected: "no batch decoding",
                    found: rows.len(),
                })
            }
        })
    }

    /// The statement that tells whether another connection changed the
    /// database since it was last run (the release notices of a
    /// dialect without NOTIFY): on SQLite `PRAGMA data_version`, one
    /// integer that only other connections' commits change (a few
    /// microseconds, no lock). `None` on PostgreSQL, which notifies.
    pub fn change_counter(&self) -> Option<&'static str> {
        match self.dialect {
            Dialect::Sqlite => Some("PRAGMA data_version"),
            // MySQL's wake-up is the driver's (issue 19); no statement here.
            Dialect::Postgres | Dialect::Mysql => None,
        }
    }

    /// The statements that subscribe a session to the table's release
    /// notices ([`TableName::release_channel`], quoted so that it matches
    /// the case-sensitive name `pg_notify` is called with), after
    /// [`POSTGRES_SESSION_KEEPALIVES`]: the listening session only waits,
    /// so only keepalives tell the server that its client is gone. `None`
    /// on SQLite, which has no NOTIFY (see [`Statements::change_counter`]).
    pub fn listen(&self) -> Option<String> {
        match self.dialect {
            Dialect::Postgres => Some(format!(
                "{POSTGRES_SESSION_KEEPALIVES}; LISTEN \"{}\"",
                self.table.release_channel().replace('"', "\"\"")
            )),
            Dialect::Sqlite | Dialect::Mysql => None,
        }
    }

    /// Interprets the rows a lease statement returned. An unexpected shape
    /// or value is a [`RowError`] naming it, never a panic; the driver
    /// reports it as a fatal failure.
    pub fn decode_reply(
        &self,
        operation: Operation,
        me: &HolderId,
        rows: &[Vec<Cell>],
    ) -> Result<Reply, RowError> {
        decode::reply(self.dialect, operation, me, rows)
    }

    /// Interprets the rows of [`Statements::status`].
    pub fn decode_status(&self, rows: &[Vec<Cell>]) -> Result<Vec<LeaseRow>, RowError> {
        rows.iter().map(|row| decode::status_row(row)).collect()
    }

    /// Interprets the rows of [`Statements::acquire_batch`]: per name,
    /// `Acquired` when we hold it, else `Held` by whom, as
    /// [`Statements::decode_reply`] reads a single acquire. A malformed row
    /// is a [`RowError`] naming the lease when the name is readable.
    pub fn decode_acquire_batch(
        &self,
        me: &HolderId,
        rows: &[Vec<Cell>],
    ) -> Result<Vec<(String, Reply)>, RowError> {
        batch::acquire_batch(self.dialect, me, rows)
    }

    /// Interprets the rows of [`Statements::renew_batch`] and
    /// [`Statements::release_batch`]: the names (and epochs) the statement
    /// renewed or freed.
    pub fn decode_batch_names(&self, rows: &[Vec<Cell>]) -> Result<Vec<(String, Epoch)>, RowError> {
        batch::names_and_epochs(rows)
    }

    /// Interprets the rows of [`Statements::survey`].
    pub fn decode_survey(&self, rows: &[Vec<Cell>]) -> Result<Vec<LeaseRow>, RowError> {
        batch::survey(rows)
    }

    /// Interprets the rows of [`Statements::force_release`]: the new epoch,
    /// or `None` when there was no such lease.
    pub fn decode_force_release(&self, rows: &[Vec<Cell>]) -> Result<Option<Epoch>, RowError> {
        decode::force_release(rows)
    }
}

/// The database clock as SQL: integer milliseconds since the Unix epoch,
/// fixed for the duration of one statement. Every time comparison of the
/// protocol uses it; use it in your own statements (expiry columns of your
/// own tables, say) so they read the same clock as the lease.
///
/// SQLite: `julianday('now')` (millisecond precision on every SQLite since
/// 3.0; `unixepoch('subsec')` would need 3.42). PostgreSQL:
/// `statement_timestamp()`, which unlike `now()` is not frozen by an
/// enclosing transaction. MySQL: `TIMESTAMPDIFF(MICROSECOND, '1970-01-01
/// 00:00:00', UTC_TIMESTAMP(6)) DIV 1000`: `UTC_TIMESTAMP(6)` does not
/// depend on the session's `time_zone` and the difference of two
/// `DATETIME`s is calendar arithmetic, so no time-zone conversion (and no
/// DST fold, where `UNIX_TIMESTAMP(NOW(3))` would read an hour wrong) is
/// involved; fixed at the start of each statement, not of the transaction.
pub fn db_now_millis(dialect: Dialect) -> &'static str {
    build::db_now_millis(dialect)
}

/// Convenience for drivers and tests: the bindings of a lease name, holder
/// id and ttl.
pub fn bindings<'a>(lease: &'a LeaseName, holder: &'a HolderId, ttl_millis: i64) -> Bindings<'a> {
    Bindings {
        lease: lease.as_str(),
        holder: holder.as_str(),
        ttl_millis,
        ..Bindings::default()
    }
}
