//! The model database ([`picolease_core::sim::ModelDb`]) against a real
//! MariaDB (the `mysql` dialect: MySQL 8 and MariaDB 10.6+), on the same
//! operation sequences as SQLite and PostgreSQL, running the real
//! `Statements` with bound parameters (each write with its read-back, in one
//! transaction) and decoding both sides with the same decoders (DESIGN §6).
//!
//! Both row-count modes run: MySQL's default (an UPDATE reports the rows it
//! changed) and `CLIENT_FOUND_ROWS` (the rows it matched). No decision of
//! the protocol reads a row count, so both must agree with the model alike.
//!
//! The server is the one at 127.0.0.1:3306 (user `root`, no password,
//! database `test`; `PICOLEASE_MYSQL_URL` overrides, e.g.
//! `mysql://user:pass@host:3306/db`). These tests **fail** when it is
//! unreachable: a skipped conformance test proves nothing. Every test uses
//! tables of its own, named with the process id, and drops them.
//!
//! `cargo test -p picolease-tests --test integration model_vs_mysql::`

use crate::model_vs;

use std::sync::{mpsc, Barrier};
use std::time::{Duration, Instant};

use model_vs::batch::{
    assert_linked_rows_met, batch_ops, check_awkward_names,
    check_runbook_keeps_a_linked_rows_grace, renew_many, BatchMutant, BatchOp, BatchSql,
    BATCH_MUTANTS,
};
use model_vs::{
    check_concurrent_acquires, check_hand_over_script, check_real_expiry, ops, Bound, Comparison,
    EpochPick, Op, Outcome, RealDb, Sql, LEASES, SQL_MUTANTS,
};
use mysql_async::consts::ColumnType;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Params, Value};
use picolease_core::sim::ModelDb;
use picolease_core::sql::{Cell, Dialect, ReadOrder, Statement, Statements};
use picolease_core::{Epoch, HolderId, Operation, Reply, TableName};
use proptest::test_runner::{
    Config, FileFailurePersistence, RngAlgorithm, TestError, TestRng, TestRunner,
};

fn url() -> String {
    std::env::var("PICOLEASE_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

/// How the server counts the rows of an UPDATE (and an upsert) for the
/// client: what it changed (MySQL's default) or what it matched
/// (`CLIENT_FOUND_ROWS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RowCounts {
    Changed,
    Found,
}

const BOTH_MODES: [RowCounts; 2] = [RowCounts::Changed, RowCounts::Found];

/// MySQL's error code for a deadlock (the transaction was rolled back).
const ER_LOCK_DEADLOCK: u16 = 1213;
/// MySQL's error code for a lock wait past `innodb_lock_wait_timeout`.
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;

/// A blocking connection: mysql_async on a runtime of its own.
struct Mysql {
    runtime: tokio::runtime::Runtime,
    conn: Option<Conn>,
}

impl Mysql {
    fn connect() -> Self {
        Self::connect_with(RowCounts::Changed)
    }

    fn connect_with(mode: RowCounts) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let url = url();
        let opts = Opts::from_url(&url)
            .unwrap_or_else(|e| panic!("PICOLEASE_MYSQL_URL {url:?} is not a MySQL URL: {e}"));
        let opts = OptsBuilder::from_opts(opts)
            // Stay on TCP (no switch to the Unix socket), as a remote
            // server would be reached.
            .prefer_socket(false)
            .client_found_rows(mode == RowCounts::Found);
        let conn = runtime.block_on(Conn::new(opts)).unwrap_or_else(|e| {
            panic!(
                "MySQL/MariaDB must be reachable at {url:?} for these tests (they never skip): {e}"
            )
        });
        Mysql {
            runtime,
            conn: Some(conn),
        }
    }

    fn conn(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("connected")
    }

    /// The server's id of this connection (`CONNECTION_ID()`).
    fn id(&mut self) -> u32 {
        self.conn().id()
    }

    fn try_query(
        &mut self,
        sql: &str,
        values: &[Bound],
    ) -> Result<Vec<Vec<Cell>>, mysql_async::Error> {
        let params = params(values);
        let runtime = &self.runtime;
        let conn = self.conn.as_mut().expect("connected");
        let rows: Vec<mysql_async::Row> = runtime.block_on(conn.exec(sql, params))?;
        Ok(rows.iter().map(cells).collect())
    }

    fn try_execute(&mut self, sql: &str, values: &[Bound]) -> Result<u64, mysql_async::Error> {
        let params = params(values);
        let runtime = &self.runtime;
        let conn = self.conn.as_mut().expect("connected");
        runtime.block_on(conn.exec_drop(sql, params))?;
        Ok(conn.affected_rows())
    }

    fn try_batch(&mut self, sql: &str) -> Result<(), mysql_async::Error> {
        let runtime = &self.runtime;
        let conn = self.conn.as_mut().expect("connected");
        runtime.block_on(conn.query_drop(sql))
    }
}

impl Drop for Mysql {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            let _ = self.runtime.block_on(conn.disconnect());
        }
    }
}

fn params(values: &[Bound]) -> Params {
    if values.is_empty() {
        return Params::Empty;
    }
    Params::Positional(
        values
            .iter()
            .map(|v| match v {
                Bound::Text(s) => Value::Bytes(s.clone().into_bytes()),
                Bound::Int(n) => Value::Int(*n),
            })
            .collect(),
    )
}

/// A row as [`Cell`]s, the way a driver maps it: integers as `Int`, the
/// string and binary-string types (the `VARBINARY` name and holder among
/// them) as `Text` when they are UTF-8, anything else by its type's name.
fn cells(row: &mysql_async::Row) -> Vec<Cell> {
    let columns = row.columns_ref();
    (0..row.len())
        .map(|i| {
            let ty = columns[i].column_type();
            match row.as_ref(i) {
                None | Some(Value::NULL) => Cell::Null,
                Some(Value::Int(n)) => Cell::Int(*n),
                Some(Value::UInt(n)) => i64::try_from(*n)
                    .map(Cell::Int)
                    .unwrap_or_else(|_| Cell::Other(format!("unsigned {n}"))),
                Some(Value::Bytes(bytes)) if is_string(ty) => String::from_utf8(bytes.clone())
                    .map(Cell::Text)
                    .unwrap_or_else(|_| Cell::Other("non-UTF-8 bytes".into())),
                Some(_) => Cell::Other(format!("{ty:?}")),
            }
        })
        .collect()
}

fn is_string(ty: ColumnType) -> bool {
    matches!(
        ty,
        ColumnType::MYSQL_TYPE_VARCHAR
            | ColumnType::MYSQL_TYPE_VAR_STRING
            | ColumnType::MYSQL_TYPE_STRING
            | ColumnType::MYSQL_TYPE_BLOB
            | ColumnType::MYSQL_TYPE_TINY_BLOB
            | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
            | ColumnType::MYSQL_TYPE_LONG_BLOB
    )
}

impl RealDb for Mysql {
    fn dialect(&self) -> Dialect {
        Dialect::Mysql
    }

    /// As the driver opens a read-back's transaction (`MYSQL_BEGIN`).
    fn begin(&mut self) {
        self.batch(picolease::sql::MYSQL_BEGIN);
    }

    fn batch(&mut self, sql: &str) {
        self.try_batch(sql)
            .unwrap_or_else(|e| panic!("{e:?}: {sql}"));
    }

    fn query(&mut self, sql: &str, values: &[Bound]) -> Vec<Vec<Cell>> {
        self.try_query(sql, values)
            .unwrap_or_else(|e| panic!("{e:?}: {sql}"))
    }

    fn execute(&mut self, sql: &str, values: &[Bound]) -> u64 {
        self.try_execute(sql, values)
            .unwrap_or_else(|e| panic!("{e:?}: {sql}"))
    }
}

/// The server error code of `e`, if it is one.
fn server_code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(e) => Some(e.code),
        _ => None,
    }
}

/// A table name private to this test and process.
fn table(test: &str) -> String {
    format!("mvm_{test}_{}", std::process::id())
}

fn statements(table: &str) -> Statements {
    Statements::new(Dialect::Mysql, &TableName::new(table).unwrap())
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs random sequences with `sql_for(table)` on one connection in row
/// count mode `mode`, fresh tables per case; returns proptest's verdict.
fn random_sequences(
    runner: &mut TestRunner,
    test: &str,
    mode: RowCounts,
    sql_for: impl Fn(&str) -> Sql,
) -> Result<(), TestError<Vec<Op>>> {
    let db = std::cell::RefCell::new(Mysql::connect_with(mode));
    let lease_table = table(test);
    let app_table = table(&format!("{test}_app"));
    runner.run(&ops(40), |ops| {
        let mut db = db.borrow_mut();
        let mut c = Comparison::new(&mut *db, sql_for(&lease_table), &app_table);
        let verdict = c.run(&ops);
        c.drop_tables();
        verdict.map_err(proptest::test_runner::TestCaseError::fail)
    })
}

fn persisted(cases: u32) -> Config {
    Config {
        cases,
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}

/// The connection's row-count mode is what the tests say it is: the same
/// no-op UPDATE (a row matched, nothing changed) reports 0 rows by default
/// and 1 with `CLIENT_FOUND_ROWS`. So the two modes below are really two.
#[test]
fn the_two_row_count_modes_report_a_no_op_update_differently() {
    let name = table("rowcounts");
    let mut counts = Vec::new();
    for mode in BOTH_MODES {
        let mut db = Mysql::connect_with(mode);
        db.batch(&format!(
            "DROP TABLE IF EXISTS `{name}`; CREATE TABLE `{name}` (id BIGINT PRIMARY KEY, v BIGINT NOT NULL); \
             INSERT INTO `{name}` VALUES (1, 7)"
        ));
        counts.push(db.execute(&format!("UPDATE `{name}` SET v = 7 WHERE id = 1"), &[]));
        db.batch(&format!("DROP TABLE IF EXISTS `{name}`"));
    }
    assert_eq!(counts, [0, 1], "changed rows, then found rows");
}

/// The model and MariaDB agree on every outcome (who holds, the epoch,
/// accepted or rejected, the fence) of random sequences of acquires,
/// renews, releases and force-releases by three holders with current,
/// stale and future epochs, and time steps, in both row-count modes.
#[test]
fn model_and_mysql_agree_on_random_operation_sequences_in_both_row_count_modes() {
    for mode in BOTH_MODES {
        let mut runner = TestRunner::new(persisted(cases(48)));
        if let Err(e) = random_sequences(&mut runner, "props", mode, |t| Sql::new(&statements(t))) {
            panic!("{mode:?} row counts: {e}");
        }
    }
}

/// A runner for a mutant's random sequences: 256 cases on a fixed seed,
/// a short shrink, nothing persisted (a caught mutant is the expected
/// outcome, not a regression to replay).
fn mutant_runner() -> TestRunner {
    let config = Config {
        cases: 256,
        max_shrink_iters: 64,
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
}

/// The comparison is sharp enough on MySQL too: each mutant of the SQL —
/// the renew without its epoch condition, the acquire that never takes
/// over a lapsed lease, the fence without its expiry check, the release
/// without its holder condition, the force release that keeps the epoch
/// (each applied to the write and its read-back alike) — makes the random
/// sequences find a disagreement.
#[test]
fn the_comparison_catches_mutated_sql_on_mysql() {
    for (name, mutant) in SQL_MUTANTS {
        let mut runner = mutant_runner();
        match random_sequences(&mut runner, "mutant", RowCounts::Changed, |t| {
            mutant(Sql::new(&statements(t)))
        }) {
            // Caught by a disagreement, not by SQL the server refused.
            Err(TestError::Fail(why, ops)) if why.to_string().contains("disagree") => {
                eprintln!("{name}: caught by {} operations: {why}", ops.len())
            }
            other => panic!("{name}: not caught ({other:?})"),
        }
    }
}

/// Runs `statement` (write and read-back in one transaction) on `db`,
/// again whenever InnoDB picks it as a deadlock victim (error 1213: the
/// transaction was rolled back whole, so it changed nothing; a driver
/// counts it as a failed round trip and tries again). Any other error
/// fails the test.
fn run_retrying_deadlocks(
    db: &mut Mysql,
    statement: &Statement,
    values: &[Bound],
    read: &[Bound],
) -> (Vec<Vec<Cell>>, u32) {
    let read_back = statement.read_back().expect("a MySQL acquire reads back");
    let mut deadlocks = 0;
    loop {
        let attempt = (|| {
            db.try_batch(picolease::sql::MYSQL_BEGIN)?;
            let rows = match read_back.order() {
                ReadOrder::AfterWrite => {
                    db.try_execute(statement.sql(), values)?;
                    db.try_query(read_back.statement().sql(), read)?
                }
                ReadOrder::BeforeWrite => {
                    let rows = db.try_query(read_back.statement().sql(), read)?;
                    db.try_execute(statement.sql(), values)?;
                    rows
                }
                ReadOrder::AfterCommit => panic!("the acquire commits nothing first"),
            };
            db.try_batch("COMMIT")?;
            Ok::<_, mysql_async::Error>(rows)
        })();
        match attempt {
            Ok(rows) => return (rows, deadlocks),
            Err(e) if server_code(&e) == Some(ER_LOCK_DEADLOCK) && deadlocks < 20 => {
                db.batch("ROLLBACK");
                deadlocks += 1;
            }
            Err(e) => panic!("{e:?}: {}", statement.sql()),
        }
    }
}

/// Sixteen connections acquire a free row at once: exactly one wins, at
/// epoch 1, and every other sees that winner and epoch, as in the model.
/// (A deadlock victim is retried: it changed nothing.)
#[test]
fn sixteen_concurrent_acquires_on_mysql_elect_one_like_the_model() {
    let name = table("concurrent");
    let s = statements(&name);
    let mut setup = Mysql::connect();
    setup.batch(&format!(
        "DROP TABLE IF EXISTS `{name}`; {}",
        s.create_table()
    ));
    let ttl_ms = 60_000;
    let barrier = Barrier::new(16);
    let results: Vec<(String, Reply, u32)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let (s, barrier) = (&s, &barrier);
                scope.spawn(move || {
                    let holder = format!("node-{i:02}");
                    let mut db = Mysql::connect();
                    let acquire = s.acquire();
                    let values = model_vs::bind(acquire, LEASES[0], &holder, ttl_ms, None);
                    let read = model_vs::bind(
                        acquire.read_back().unwrap().statement(),
                        LEASES[0],
                        &holder,
                        ttl_ms,
                        None,
                    );
                    barrier.wait();
                    let (rows, deadlocks) =
                        run_retrying_deadlocks(&mut db, acquire, &values, &read);
                    let me = HolderId::new(&holder).unwrap();
                    let reply = s.decode_reply(Operation::Acquire, &me, &rows).unwrap();
                    (holder, reply, deadlocks)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    setup.batch(&format!("DROP TABLE IF EXISTS `{name}`"));
    let deadlocks: u32 = results.iter().map(|r| r.2).sum();
    eprintln!("MySQL: 16 concurrent acquires, {deadlocks} deadlock victims retried");
    let replies: Vec<(String, Reply)> = results.into_iter().map(|(h, r, _)| (h, r)).collect();
    check_concurrent_acquires(&s, ttl_ms, &replies);
}

/// With a real ttl of 50 ms the lease lapses on MariaDB's own clock: the
/// second holder is refused before, takes it at epoch 2 after, and the
/// first holder's renew, release and fenced write are then refused — the
/// model agreeing at every step.
#[test]
fn a_short_real_ttl_lapses_on_mysql_like_the_model() {
    let mut db = Mysql::connect();
    for attempt in 0..5 {
        let s = statements(&table(&format!("expiry{attempt}")));
        let app = table(&format!("expiry{attempt}_app"));
        let mut c = Comparison::new(&mut db, Sql::new(&s), &app);
        let observed = check_real_expiry(&mut c, 0, 50);
        c.drop_tables();
        if observed {
            return;
        }
        eprintln!("attempt {attempt}: too slow to see the lease before it lapsed; again");
    }
    panic!("five attempts too slow to observe a 50 ms lease");
}

/// The fence, after the application's own parameter, ANDed into a real
/// `UPDATE app SET … WHERE id = ? AND <fence>`, changes the row exactly
/// when the model's fence holds: the holder's write goes through, a stale
/// or future epoch, another holder, a lapsed or released or force-released
/// lease change nothing.
#[test]
fn the_fence_in_a_real_update_agrees_with_the_model_on_mysql() {
    let mut db = Mysql::connect();
    let s = statements(&table("fence"));
    let app = table("fence_app");
    let mut c = Comparison::new(&mut db, Sql::new(&s), &app);
    let lease = 0;
    let fence = |who, epoch| Op::Fence { who, lease, epoch };
    let acquired = |e| {
        Outcome::Reply(Ok(Reply::Acquired {
            epoch: Epoch::new(e),
        }))
    };
    let script = [
        (fence(0, EpochPick::Raw(0)), Outcome::Fenced(false)),
        (Op::Acquire { who: 0, lease }, acquired(1)),
        (fence(0, EpochPick::Current), Outcome::Fenced(true)),
        (fence(0, EpochPick::Offset(-1)), Outcome::Fenced(false)),
        (fence(0, EpochPick::Offset(1)), Outcome::Fenced(false)),
        (fence(1, EpochPick::Current), Outcome::Fenced(false)),
        (Op::Acquire { who: 1, lease: 1 }, acquired(1)),
        (fence(1, EpochPick::Current), Outcome::Fenced(false)),
        (Op::Advance { steps: 9 }, Outcome::Advanced),
        (fence(0, EpochPick::Current), Outcome::Fenced(true)),
        (Op::Advance { steps: 1 }, Outcome::Advanced),
        (fence(0, EpochPick::Current), Outcome::Fenced(false)),
        (Op::Acquire { who: 0, lease }, acquired(2)),
        (fence(0, EpochPick::Current), Outcome::Fenced(true)),
        (
            Op::Release {
                who: 0,
                lease,
                epoch: EpochPick::Current,
            },
            Outcome::Reply(Ok(Reply::Accepted)),
        ),
        (fence(0, EpochPick::Current), Outcome::Fenced(false)),
        (Op::Acquire { who: 2, lease }, acquired(3)),
        (fence(2, EpochPick::Current), Outcome::Fenced(true)),
        (
            Op::ForceRelease { lease },
            Outcome::ForceReleased(Ok(Some(Epoch::new(4)))),
        ),
        (fence(2, EpochPick::Offset(-1)), Outcome::Fenced(false)),
        (fence(2, EpochPick::Current), Outcome::Fenced(false)),
    ];
    for (op, expected) in script {
        let (model, real) = c.step(op, model_vs::TTL_MS);
        assert_eq!(model, expected, "model, {op:?}");
        assert_eq!(real, expected, "MySQL, {op:?}");
    }
    let writes = c
        .real()
        .query(&format!("SELECT writes FROM `{app}` WHERE id = 1"), &[]);
    assert_eq!(
        writes,
        vec![vec![Cell::Int(4)]],
        "four fenced writes went through"
    );
    c.drop_tables();
}

/// Runs random batch sequences on one connection in row-count mode
/// `mode`, fresh tables per case, the real side running the batch SQL
/// `mutant` makes of the real one; returns proptest's verdict.
fn random_batch_sequences(
    runner: &mut TestRunner,
    test: &str,
    mode: RowCounts,
    mutant: Option<BatchMutant>,
) -> Result<(), TestError<Vec<BatchOp>>> {
    random_batch_sequences_of(runner, test, mode, mutant, None)
}

/// [`random_batch_sequences`]; by liveness when `linked` is given (the
/// statements of `Statements::renewing_by_liveness`, each batch a chain
/// of statements in one transaction, against `ModelDb::by_liveness`, the
/// kill included), adding to it how many linked rows the model's batch
/// acquires took and its renewals confirmed.
fn random_batch_sequences_of(
    runner: &mut TestRunner,
    test: &str,
    mode: RowCounts,
    mutant: Option<BatchMutant>,
    linked: Option<&std::cell::RefCell<(u64, u64)>>,
) -> Result<(), TestError<Vec<BatchOp>>> {
    let db = std::cell::RefCell::new(Mysql::connect_with(mode));
    let lease_table = table(test);
    let app_table = table(&format!("{test}_app"));
    runner.run(&batch_ops(30), |ops| {
        let mut db = db.borrow_mut();
        let mut s = statements(&lease_table);
        let mut model = ModelDb::new();
        if linked.is_some() {
            s = s.renewing_by_liveness();
            model = ModelDb::by_liveness();
        }
        let mut sql = BatchSql::new(&s);
        if let Some(mutant) = mutant {
            mutant(&mut sql, &lease_table);
        }
        let mut c = Comparison::new(&mut *db, Sql::new(&s), &app_table).with_model(model);
        let verdict = c.run_batch_with(&ops, &sql);
        if let Some(linked) = linked {
            let mut linked = linked.borrow_mut();
            linked.0 += c.linked_taken;
            linked.1 += c.linked_confirmed;
        }
        c.drop_tables();
        verdict.map_err(proptest::test_runner::TestCaseError::fail)
    })
}

/// Renewing by liveness (DESIGN §9 "Renewal by liveness"), the model's set statements
/// (`ModelDb::by_liveness`, the kill of a lapsed liveness included) and
/// MariaDB's (`Statements::renewing_by_liveness`: each batch a chain of
/// statements in one transaction) agree on every outcome and on the whole
/// table after every step. In MySQL's default row-count mode only: no
/// step's row count is read (both modes run the plain batches above).
#[test]
fn model_and_mysql_agree_on_random_batch_sequences_by_liveness() {
    let linked = std::cell::RefCell::new((0, 0));
    // A fixed seed: the sequences that take a linked row from another
    // holder are rare (1 to 7 in 256 random cases), and the count must not
    // come out 0 by chance.
    let mut runner = TestRunner::new_with_rng(
        persisted(cases(256)),
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    if let Err(e) = random_batch_sequences_of(
        &mut runner,
        "batch_live",
        RowCounts::Changed,
        None,
        Some(&linked),
    ) {
        panic!("{e}");
    }
    assert_linked_rows_met(linked.into_inner());
}

/// The by-liveness comparison is sharp on MariaDB: a linked row taken
/// while its liveness lives (the acquire's takeover reading a lapsed
/// liveness as ended, without the kill), and a renewal confirming rows
/// linked to a lapsed liveness, are each found.
#[test]
fn the_by_liveness_comparison_catches_mutated_sql_on_mysql() {
    for (name, mutant) in MYSQL_LIVENESS_MUTANTS {
        let mut runner = mutant_runner();
        let linked = std::cell::RefCell::new((0, 0));
        match random_batch_sequences_of(
            &mut runner,
            "batch_live_mutant",
            RowCounts::Changed,
            Some(mutant),
            Some(&linked),
        ) {
            Err(TestError::Fail(why, ops)) if why.to_string().contains("disagree") => {
                eprintln!("{name}: caught by {} operations: {why}", ops.len())
            }
            other => panic!("{name}: not caught ({other:?})"),
        }
    }
}

/// The mutants of MySQL's statements renewing by liveness, by name.
const MYSQL_LIVENESS_MUTANTS: [(&str, BatchMutant); 2] = [
    ("a linked row taken while its liveness lives", |sql, _| {
        // The takes' test of an ended liveness made always true.
        let ended = "IS NOT NULL AND NOT EXISTS (";
        assert!(sql.acquire.iter().any(|step| step.contains(ended)));
        for step in &mut sql.acquire {
            *step = step.replace(ended, "IS NOT NULL AND true OR NOT EXISTS (");
        }
    }),
    (
        "a renewal confirming rows linked to a lapsed liveness",
        |sql, _| {
            let read = sql.renew.last_mut().expect("the read");
            assert!(read.contains("END) > ("), "{read}");
            *read = read.replace("END) > (", "END) + 1000000000 > (");
        },
    ),
];

/// After the runbook's statement (`after_failover`), a linked row is
/// nobody's for a ttl, read through its liveness (DESIGN §9 "Renewal by liveness"), on
/// MariaDB.
#[test]
fn the_runbook_keeps_a_linked_rows_grace_on_mysql() {
    let mut db = Mysql::connect();
    let s = statements(&table("runbook_live")).renewing_by_liveness();
    let mut c = Comparison::new(&mut db, Sql::new(&s), &table("runbook_live_app"));
    check_runbook_keeps_a_linked_rows_grace(&mut c);
    c.drop_tables();
}

/// The model's batch methods and MariaDB's batch statements (JSON_TABLE,
/// each write with its read-back) agree on every outcome and on the whole
/// table after every step, over random sequences of batch acquires,
/// renews and releases, surveys and time steps, in both row-count modes.
#[test]
fn model_and_mysql_agree_on_random_batch_sequences_in_both_row_count_modes() {
    for mode in BOTH_MODES {
        let mut runner = TestRunner::new(persisted(cases(48)));
        if let Err(e) = random_batch_sequences(&mut runner, "batch", mode, None) {
            panic!("{mode:?} row counts: {e}");
        }
    }
}

/// The batch comparison is sharp on MySQL too: each batch mutant (renew or
/// release without the holder condition, renew without the epoch
/// condition, acquire that never takes over a lapsed lease, survey that
/// reports lapsed members) makes the random sequences find a disagreement.
#[test]
fn the_batch_comparison_catches_mutated_sql_on_mysql() {
    for (name, mutant) in BATCH_MUTANTS {
        let mut runner = mutant_runner();
        match random_batch_sequences(
            &mut runner,
            "batch_mutant",
            RowCounts::Changed,
            Some(mutant),
        ) {
            // Caught by a disagreement, not by SQL the server refused.
            Err(TestError::Fail(why, ops)) if why.to_string().contains("disagree") => {
                eprintln!("{name}: caught by {} operations: {why}", ops.len())
            }
            other => panic!("{name}: not caught ({other:?})"),
        }
    }
}

/// One batch renews 1,000 leases (and a membership row) on MariaDB,
/// printing how long the statement took (no timing assertion); the survey,
/// another holder's renew and the batch release then see exactly what
/// they should. Names JSON must escape, and names only bytes tell apart
/// (`"a"` and `"a "`, case), arrive intact and distinct.
#[test]
fn a_batch_of_a_thousand_leases_renews_in_one_statement_on_mysql() {
    let mut db = Mysql::connect();
    let mut c = Comparison::new(
        &mut db,
        Sql::new(&statements(&table("many"))),
        &table("many_app"),
    );
    let took = renew_many(&mut c, 1_000);
    eprintln!("MySQL: renewed 1,001 rows in one statement (and its read-back) in {took:?}");
    c.drop_tables();
    let mut c = Comparison::new(
        &mut db,
        Sql::new(&statements(&table("awkward"))),
        &table("awkward_app"),
    );
    check_awkward_names(&mut c);
    c.drop_tables();

    // Names a PAD SPACE or case-folding collation would merge are three
    // leases, each acquired at epoch 1.
    let s = statements(&table("bytes"));
    db.batch(&format!(
        "DROP TABLE IF EXISTS `{}`; {}",
        table("bytes"),
        s.create_table()
    ));
    for name in ["a", "a ", "A"] {
        let rows = model_vs::run_statement(&mut db, s.acquire(), name, "node-a", 60_000, None);
        let me = HolderId::new("node-a").unwrap();
        assert_eq!(
            s.decode_reply(Operation::Acquire, &me, &rows).unwrap(),
            Reply::Acquired {
                epoch: Epoch::new(1)
            },
            "{name:?} is a lease of its own"
        );
    }
    db.batch(&format!("DROP TABLE IF EXISTS `{}`", table("bytes")));
}

/// A lease table and an application table for the fence tests, with
/// `node-a` holding `jobs` at epoch 1 for `ttl_ms`.
struct FenceSetup {
    s: Statements,
    lease_table: String,
    app: String,
}

impl FenceSetup {
    fn new(test: &str, db: &mut Mysql, ttl_ms: i64) -> Self {
        let lease_table = table(test);
        let app = table(&format!("{test}_app"));
        let s = statements(&lease_table);
        db.batch(&format!(
            "DROP TABLE IF EXISTS `{lease_table}`; DROP TABLE IF EXISTS `{app}`; {}; \
             CREATE TABLE `{app}` (id BIGINT PRIMARY KEY, writes BIGINT NOT NULL) ENGINE=InnoDB; \
             INSERT INTO `{app}` VALUES (1, 0)",
            s.create_table()
        ));
        let rows = model_vs::run_statement(db, s.acquire(), "jobs", "node-a", ttl_ms, None);
        let me = HolderId::new("node-a").unwrap();
        assert_eq!(
            s.decode_reply(Operation::Acquire, &me, &rows).unwrap(),
            Reply::Acquired {
                epoch: Epoch::new(1)
            }
        );
        FenceSetup {
            s,
            lease_table,
            app,
        }
    }

    /// `UPDATE app SET writes = writes + 1 WHERE id = 1 AND <fence>` for
    /// `holder` at `epoch`: its SQL and values.
    fn fenced_write(&self, holder: &str, epoch: u64) -> (String, Vec<Bound>) {
        let fence = self.s.fence_from(2);
        let sql = format!(
            "UPDATE `{}` SET writes = writes + 1 WHERE id = ? AND {}",
            self.app,
            fence.sql()
        );
        let mut values = vec![Bound::Int(1)];
        values.extend(model_vs::bind(
            &fence,
            "jobs",
            holder,
            0,
            Some(Epoch::new(epoch)),
        ));
        (sql, values)
    }

    fn writes(&self, db: &mut Mysql) -> Vec<Vec<Cell>> {
        db.query(
            &format!("SELECT writes FROM `{}` WHERE id = 1", self.app),
            &[],
        )
    }

    fn drop_tables(self, db: &mut Mysql) {
        db.batch(&format!(
            "DROP TABLE IF EXISTS `{}`; DROP TABLE IF EXISTS `{}`",
            self.lease_table, self.app
        ));
    }
}

/// Blocks until the server shows connection `id`'s transaction waiting for
/// a row lock (`information_schema.INNODB_TRX`, in MySQL 8 and MariaDB
/// alike): observed, not slept on (the poll is paced, see below). Panics
/// after `within`.
fn wait_for_lock_wait(observer: &mut Mysql, id: u32, within: Duration) {
    let give_up = Instant::now() + within;
    loop {
        let rows = observer.query(
            "SELECT trx_state FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ?",
            &[Bound::Int(id.into())],
        );
        if rows == [vec![Cell::Text("LOCK WAIT".into())]] {
            return;
        }
        if Instant::now() >= give_up {
            let all = observer.query(
                "SELECT trx_mysql_thread_id, trx_state FROM information_schema.INNODB_TRX",
                &[],
            );
            panic!("connection {id} never waited for a lock: {rows:?} (all: {all:?})");
        }
        // InnoDB refreshes the table's cache only once it has gone unread
        // for 0.1 s: polling faster would read the same stale rows forever.
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Blocks until the database's clock has passed the lease's expiry (a
/// plain read: it takes no lock, so an open fenced transaction does not
/// hold it up).
fn wait_for_lapse(db: &mut Mysql, s: &Statements) {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = db.query(s.status().sql(), &[]);
        let status = s.decode_status(&rows).unwrap();
        if status[0].expires_in_ms.is_some_and(|ms| ms <= 0) {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "the lease never lapsed: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The fence's guarantee on InnoDB, at both isolation levels a service
/// runs: a write fenced at epoch 1 inside a transaction holds the lease
/// row in share mode, so a successor's acquire after the lease lapsed
/// waits (observed as LOCK WAIT) until that transaction commits, and only
/// then takes the lease at epoch 2. The stale write is thus ordered before
/// the successor's term; once the successor holds it, the old holder's
/// fenced write changes nothing.
#[test]
fn a_fenced_transaction_holds_off_the_successors_acquire_until_it_commits() {
    for (test, isolation) in [
        ("fence_order_rr", "REPEATABLE READ"),
        ("fence_order_rc", "READ COMMITTED"),
    ] {
        fenced_transaction_holds_off_the_successor(test, isolation);
    }
}

fn fenced_transaction_holds_off_the_successor(test: &str, isolation: &str) {
    let mut holder = Mysql::connect();
    let f = FenceSetup::new(test, &mut holder, 1_500);
    let mut observer = Mysql::connect();

    holder.batch(&format!(
        "SET SESSION TRANSACTION ISOLATION LEVEL {isolation}"
    ));
    holder.batch("START TRANSACTION");
    let (sql, values) = f.fenced_write("node-a", 1);
    assert_eq!(
        holder.execute(&sql, &values),
        1,
        "the holder's fenced write"
    );

    // The term ends while the transaction is still open.
    wait_for_lapse(&mut observer, &f.s);

    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        let s = &f.s;
        let mut successor = Mysql::connect();
        let successor_id = successor.id();
        scope.spawn(move || {
            let rows = model_vs::run_statement(
                &mut successor,
                s.acquire(),
                "jobs",
                "node-b",
                60_000,
                None,
            );
            let me = HolderId::new("node-b").unwrap();
            tx.send(s.decode_reply(Operation::Acquire, &me, &rows).unwrap())
                .unwrap();
        });
        wait_for_lock_wait(&mut observer, successor_id, Duration::from_secs(30));
        assert!(
            rx.try_recv().is_err(),
            "the successor acquired while the fenced transaction was open"
        );
        holder.batch("COMMIT");
        let reply = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                panic!("{isolation}: the successor's acquire finishes once the fenced transaction commits")
            });
        assert_eq!(
            reply,
            Reply::Acquired {
                epoch: Epoch::new(2)
            }
        );
    });
    assert_eq!(
        f.writes(&mut observer),
        [vec![Cell::Int(1)]],
        "the fenced write committed"
    );
    let (sql, values) = f.fenced_write("node-a", 1);
    assert_eq!(
        holder.execute(&sql, &values),
        0,
        "a stale fenced write changes nothing"
    );
    let (sql, values) = f.fenced_write("node-b", 2);
    assert_eq!(
        holder.execute(&sql, &values),
        1,
        "the successor's fenced write"
    );
    f.drop_tables(&mut observer);
}

/// The negative control: without `LOCK IN SHARE MODE`, under READ
/// COMMITTED (where InnoDB reads an UPDATE's subquery without locking;
/// under REPEATABLE READ it happens to lock it for the binary log's sake,
/// which the fence must not rely on), the successor's acquire does not
/// wait for the open fenced transaction, and the stale write then commits
/// into the successor's term. The explicit share lock is what prevents it.
#[test]
fn without_the_share_lock_a_stale_fenced_write_would_commit_into_the_successors_term() {
    let mut holder = Mysql::connect();
    let f = FenceSetup::new("fence_unlocked", &mut holder, 1_500);
    let mut observer = Mysql::connect();

    holder.batch("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    holder.batch("START TRANSACTION");
    let (sql, values) = f.fenced_write("node-a", 1);
    let unlocked = sql.replacen(" LOCK IN SHARE MODE", "", 1);
    assert_ne!(unlocked, sql, "the fence locks in share mode");
    assert_eq!(holder.execute(&unlocked, &values), 1);
    wait_for_lapse(&mut observer, &f.s);

    let mut successor = Mysql::connect();
    let rows = model_vs::run_statement(
        &mut successor,
        f.s.acquire(),
        "jobs",
        "node-b",
        60_000,
        None,
    );
    let me = HolderId::new("node-b").unwrap();
    assert_eq!(
        f.s.decode_reply(Operation::Acquire, &me, &rows).unwrap(),
        Reply::Acquired {
            epoch: Epoch::new(2)
        },
        "the successor took over while the unlocked fenced transaction was open"
    );
    holder.batch("COMMIT");
    assert_eq!(
        f.writes(&mut observer),
        [vec![Cell::Int(1)]],
        "the stale write committed after the successor's term began"
    );
    f.drop_tables(&mut observer);
}

/// The trade InnoDB imposes (no `FOR KEY SHARE`): the holder's own renew
/// also waits for its open fenced transaction, and goes through, at the
/// same epoch, as soon as that transaction ends. DESIGN §3 bounds it.
#[test]
fn the_holders_renew_waits_for_an_open_fenced_transaction() {
    let mut holder = Mysql::connect();
    let f = FenceSetup::new("fence_renew", &mut holder, 60_000);
    let mut observer = Mysql::connect();

    holder.batch("START TRANSACTION");
    let (sql, values) = f.fenced_write("node-a", 1);
    assert_eq!(holder.execute(&sql, &values), 1);

    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        let s = &f.s;
        let mut renewer = Mysql::connect();
        let renewer_id = renewer.id();
        scope.spawn(move || {
            let epoch = Some(Epoch::new(1));
            let rows =
                model_vs::run_statement(&mut renewer, s.renew(), "jobs", "node-a", 60_000, epoch);
            let me = HolderId::new("node-a").unwrap();
            let renew = Operation::Renew {
                epoch: Epoch::new(1),
            };
            tx.send(s.decode_reply(renew, &me, &rows).unwrap()).unwrap();
        });
        wait_for_lock_wait(&mut observer, renewer_id, Duration::from_secs(30));
        assert!(rx.try_recv().is_err(), "the renew did not wait");
        holder.batch("COMMIT");
        let reply = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the renew finishes once the fenced transaction ends");
        assert_eq!(reply, Reply::Accepted);
    });
    f.drop_tables(&mut observer);
}

/// A successor held off by a stuck fenced transaction gives up at its
/// lock wait timeout (error 1205) and, once its transaction is rolled
/// back, has changed nothing: the lease is still at epoch 1 and the
/// stuck transaction's write still commits into that term.
#[test]
fn a_blocked_acquire_gives_up_at_its_lock_wait_timeout_and_changes_nothing() {
    let mut holder = Mysql::connect();
    let f = FenceSetup::new("fence_timeout", &mut holder, 60_000);
    let mut observer = Mysql::connect();
    holder.batch("START TRANSACTION");
    let (sql, values) = f.fenced_write("node-a", 1);
    assert_eq!(holder.execute(&sql, &values), 1);

    let mut successor = Mysql::connect();
    successor.batch("SET SESSION innodb_lock_wait_timeout = 1");
    // A forced release bumps the epoch whoever holds the lease: it waits
    // for the shared lock just as a takeover does.
    let force = f.s.force_release();
    let values = model_vs::bind(force, "jobs", "", 0, None);
    successor.batch("START TRANSACTION");
    let started = Instant::now();
    let error = successor
        .try_execute(force.sql(), &values)
        .expect_err("the forced release waits for the fenced transaction");
    assert_eq!(server_code(&error), Some(ER_LOCK_WAIT_TIMEOUT), "{error:?}");
    eprintln!(
        "MySQL: forced release gave up after {:?}",
        started.elapsed()
    );
    successor.batch("ROLLBACK");

    holder.batch("COMMIT");
    let status =
        f.s.decode_status(&observer.query(f.s.status().sql(), &[]))
            .unwrap();
    assert_eq!(
        (status[0].holder.as_deref(), status[0].epoch),
        (Some("node-a"), Epoch::new(1))
    );
    assert_eq!(f.writes(&mut observer), [vec![Cell::Int(1)]]);
    f.drop_tables(&mut observer);
}

/// A planned handover's statements agree with the model step by step
/// (`check_hand_over_script`).
#[test]
fn a_planned_handover_agrees_with_the_model_on_mysql() {
    let mut db = Mysql::connect();
    let s = statements(&table("handover"));
    let app = table("handover_app");
    let mut c = Comparison::new(&mut db, Sql::new(&s), &app);
    check_hand_over_script(&mut c);
    c.drop_tables();
}
